"""Shared pytest fixtures (CudnnRNN tests: the optional PyTorch oracle; the native engine's
teams at every problem size)."""

import pytest


@pytest.fixture(scope="session")
def torch():
    """PyTorch, single-threaded (the oracle for the CudnnRNN math, spec §10.1); skips if absent."""
    torch = pytest.importorskip("torch", reason="PyTorch is the oracle for the CudnnRNN math (spec §10.1)")
    torch.set_num_threads(1)
    return torch


@pytest.fixture(autouse=True, scope="session")
def teams_at_every_size():
    """The native time loops run on every thread asked for, however small the problem: the
    tests' problems are small, and below a step's minimum work per thread a loop would run on
    one thread, leaving the team's code untested (tests/test_native.py tests that rule itself)."""
    from fusedrnn import settings

    native = settings._load_native()
    if native is None:
        yield
        return
    native.set_min_step_macs_per_thread(0)
    yield
    native.set_min_step_macs_per_thread(-1)
