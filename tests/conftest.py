import os

import matplotlib
import pytest
import torch

os.environ.setdefault("COURSE_PROGRESS", "0")
# a failed chapter claim is an error in every kernel the suite starts (nbval, the book build),
# never the reader's notice (course_lib/claims.py: strict_claims)
os.environ["COURSE_STRICT_CLAIMS"] = "1"
# Agg for this process only: kernels started from the tests (book build, nbval) must keep
# their inline backend, so MPLBACKEND is not set in the environment they inherit.
matplotlib.use("Agg")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


@pytest.fixture(scope="module")
def docs():
    """60 generated documents: the tiny corpus of the BERT recipe tests."""
    from course_lib.data import generate_documents

    return generate_documents(60, seed=3)


@pytest.fixture(scope="module")
def tok(docs):
    """A 300-token WordPiece tokenizer trained on ``docs`` (a test module may define its own)."""
    from course_lib.recipes.bert import train_tokenizer

    return train_tokenizer(docs, vocab_size=300)
