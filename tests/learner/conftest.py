"""Learner tests run torch on one thread (several test processes may share the 2 cores)."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)
    yield
