"""Concurrency (issue 4, item 3): 8 Python threads calling the ops at once get the same bits as
sequential calls, and nothing deadlocks.

fusedrnn has no thread pool of its own (no JIT): the only pools involved are OpenBLAS's, which
NumPy drives with the GIL released.  Threads are daemons joined with a timeout, so a deadlock
fails the test instead of hanging pytest.
"""

from __future__ import annotations

import hashlib
import random
import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fusedrnn import settings  # noqa: E402
from tests.fuzz import cases  # noqa: E402

THREADS = 8
TIMEOUT = 120.0


def _jobs() -> list:
    """Mixed ops (CudnnRNN and block, forward and backward, V1-V3, raw_ops), dtypes and sizes;
    a few are large enough for OpenBLAS to use its own threads."""
    jobs = []
    big = dict(T=6, B=48, I=96, H=128, L=1, D=1)
    for k, op in enumerate(cases.CUDNN_OPS):
        mode = cases.MODES[k % 4]
        jobs.append((op, "float32", cases.default_config(op, mode=mode), k))
        jobs.append((op, "float64", cases.default_config(op, mode=mode, L=1, D=2, B=1), k))
        jobs.append((op, "float32", cases.default_config(op, mode=mode, **big), k))
    jobs.append(("cudnn_rnn_v3", "float16", cases.default_config("cudnn_rnn_v3", lengths=(4, 2, 1),
                                                                  time_major=False, P=2), 1))
    jobs.append(("cudnn_rnn_backprop_v3", "float32", cases.default_config("cudnn_rnn_backprop_v3", mode="lstm",
                                                                           dropout=0.5, P=3), 2))
    for k, op in enumerate(cases.BLOCK_OPS):
        jobs.append((op, "float32", cases.default_config(op), k))
        jobs.append((op, "float16", cases.default_config(op, T=3, B=2, I=2, n=3, slm=2), k))
        jobs.append((op, "float32", cases.default_config(op, T=6, B=64, I=96, n=96, slm=5), k))
    return jobs


def _digest(result) -> str:
    h = hashlib.sha256()
    for name, a in cases.result_arrays(result).items():
        h.update(name.encode())
        h.update(str((a.dtype, a.shape)).encode())
        h.update(a.tobytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def calls():
    built = [cases.build(op, dtype, cfg, seed) for op, dtype, cfg, seed in _jobs()]
    return built


def _run_threads(work: list, surfaces: list) -> list:
    """Run ``work`` (a list of Calls) on THREADS daemon threads released together."""
    results = [None] * len(work)
    errors = []
    barrier = threading.Barrier(THREADS)
    order = list(range(len(work)))

    def worker(index: int):
        try:
            barrier.wait(timeout=TIMEOUT)
            for k in order[index::THREADS]:
                results[k] = _digest(cases.invoke(work[k], surfaces[k]))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(repr(exc))

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    stuck = [t.name for t in threads if t.is_alive()]
    assert not stuck, f"deadlock or hang: threads {stuck} still running after {TIMEOUT} s"
    assert not errors, errors
    return results


@pytest.mark.parametrize("deterministic", [False, True])
def test_eight_threads_match_sequential(calls, deterministic, monkeypatch):
    monkeypatch.setattr(settings, "deterministic", deterministic)
    sequential = [_digest(cases.invoke(c)) for c in calls]
    rng = random.Random(4)
    for round_ in range(3):
        work_index = list(range(len(calls))) * 2  # every call twice, in a shuffled order
        rng.shuffle(work_index)
        work = [calls[k] for k in work_index]
        surfaces = [rng.choice(["snake", "raw"]) for _ in work]
        got = _run_threads(work, surfaces)
        for k, digest in zip(work_index, got):
            assert digest == sequential[k], (f"round {round_}: {calls[k].op} {calls[k].dtype} {calls[k].cfg} "
                                             "differs from the sequential call")


def test_same_call_from_eight_threads(calls):
    """One op, one input set, hammered from every thread at once (and the inputs stay intact)."""
    from tests.fuzz.harness import snapshot
    call = next(c for c in calls if c.op == "cudnn_rnn_backprop_v3" and c.dtype == "float32")
    before = {k: snapshot(v) for k, v in call.inputs.items()}
    expected = _digest(cases.invoke(call))
    got = _run_threads([call] * (4 * THREADS), ["snake"] * (4 * THREADS))
    assert set(got) == {expected}
    assert {k: snapshot(v) for k, v in call.inputs.items()} == before


def test_deterministic_mode_restores_blas_threads(calls, monkeypatch):
    """The reference-counted single-thread BLAS scope leaves the thread count as it found it,
    even when many threads enter and leave it concurrently."""
    info = settings.blas_info()
    if not info["controllable"]:
        pytest.skip(f"the BLAS library cannot be controlled here: {info}")
    monkeypatch.setattr(settings, "deterministic", True)
    before = settings.blas_info()["threads"]
    _run_threads(calls[:24], ["snake"] * 24)
    assert settings.blas_info()["threads"] == before
    with settings.numerics():
        assert settings.blas_info()["threads"] == 1
    assert settings.blas_info()["threads"] == before
