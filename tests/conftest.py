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


# The slow tests (`pytest -m "not slow"` leaves them out: a developer's loop of a minute or two;
# `make test` runs everything). Slow means: executes notebooks, starts processes or a sandbox,
# trains several models, builds a book or drives a browser.
SLOW_MODULES = {
    "test_book.py",  # the book build and the browser
    "test_widget_pages.py",  # a small book in a browser
    "test_distributed.py",  # torchrun processes
    "test_resume.py",  # SIGKILL and resume, every objective
    "test_resume_settings.py",
    "test_grading_sandbox.py",  # bubblewrap
    "test_grading_attacks.py",
    "test_grading_visible.py",
    "test_grading_agreement.py",
    "test_studies_albert.py",  # a study's quick run (and its golden run)
    "test_studies_ar_ae.py",
    "test_studies_generation.py",
    "test_studies_distill.py",
    "test_studies_elmo.py",
    "test_studies_probing.py",
    "test_studies_transfo_xl.py",
    "test_studies_xlnet.py",
    "test_studies_xlnet_tagging.py",
    "test_export.py",  # transformers' pipelines on exported models
    "test_gpu_check.py",
}
SLOW_PREFIXES = ("test_grading_0",)  # a chapter's exercises graded end to end


def pytest_collection_modifyitems(config, items):
    for item in items:
        name = item.path.name
        if (
            name in SLOW_MODULES
            or name.startswith(SLOW_PREFIXES)
            or item.path.suffix == ".ipynb"  # nbval: a notebook executed
            or "quick_run" in item.name
            or "runs_in_quick_mode" in item.name
        ):
            item.add_marker(pytest.mark.slow)


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
    from course_lib.data.documents import train_tokenizer

    return train_tokenizer(docs, vocab_size=300)
