import os

import pytest
import torch

os.environ.setdefault("COURSE_PROGRESS", "0")
os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield
