import os

import matplotlib
import pytest
import torch

os.environ.setdefault("COURSE_PROGRESS", "0")
# Agg for this process only: kernels started from the tests (book build, nbval) must keep
# their inline backend, so MPLBACKEND is not set in the environment they inherit.
matplotlib.use("Agg")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield
