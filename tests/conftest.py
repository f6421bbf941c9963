"""Shared pytest fixtures (CudnnRNN tests: the optional PyTorch oracle)."""

import pytest


@pytest.fixture(scope="session")
def torch():
    """PyTorch, single-threaded (the oracle for the CudnnRNN math, spec §10.1); skips if absent."""
    torch = pytest.importorskip("torch", reason="PyTorch is the oracle for the CudnnRNN math (spec §10.1)")
    torch.set_num_threads(1)
    return torch
