"""Sizes (issue 4, item 5): a call that cannot fit raises MemoryError stating the bytes and the
shape *before* allocating; sizes beyond 2**31 (and 2**63) elements are exact Python integers.

The huge inputs are zero-stride ``np.broadcast_to`` views: gigantic shapes that take no memory.
Every case runs in one child process whose address space is capped (RLIMIT_AS, 4 GiB): if an
op did try to allocate its huge result the child would get NumPy's own MemoryError ("Unable to
allocate ..."), which the assertions tell apart from fusedrnn's estimate ("needs about N
bytes"); a hang or a crash fails the test through the child's timeout instead of killing pytest.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import fusedrnn  # noqa: E402
from fusedrnn.engines import buffers  # noqa: E402
from tests.fuzz import cases  # noqa: E402

F32 = np.float32
GiB = 2**30


def _huge(shape, dtype=F32):
    return np.broadcast_to(np.zeros((), dtype), shape)


def _params(mode, L, D, I, H, P=0, dtype=F32):
    return np.zeros(cases.cudnn_params_size(mode, L, D, I, H, P), dtype)


# --------------------------------------------------------------------------------------
# The cases (run in the child).  Each returns nothing or raises; the child records what.


def _fwd_2_34(op="cudnn_rnn"):
    """T*B*I = 2**34 elements (2**16 x 2**16 x 4)."""
    T = B = 2**16
    x, h = _huge((T, B, 4)), _huge((1, B, 8))
    args = (x, h, h, _params("lstm", 1, 1, 4, 8))
    if op == "cudnn_rnn_v3":
        return fusedrnn.cudnn_rnn_v3(*args, np.broadcast_to(np.int32(T), (B,)))
    return getattr(fusedrnn, op)(*args)


def _fwd_batch_major_2_40():
    """Batch-major V3 with B = 2**40, T = 2: the lengths vector alone would be 8 TiB."""
    B = 2**40
    x, h = _huge((B, 2, 1)), _huge((B, 1, 1))
    return fusedrnn.cudnn_rnn_v3(x, h, h, _params("gru", 1, 1, 1, 1), np.broadcast_to(np.int32(2), (B,)),
                                 rnn_mode="gru", time_major=False)


def _fwd_2_63_bytes():
    """2**60 input elements (2**62 bytes, the most NumPy can describe); the estimate is > 2**63."""
    x, h = _huge((2**30, 2**30, 1)), _huge((1, 2**30, 4))
    return fusedrnn.cudnn_rnn(x, h, h, _params("lstm", 1, 1, 1, 4))


def _fwd_deep():
    """num_layers = 2**40 (from input_h's first dim); params sized to match, zero-stride too."""
    L = 2**40
    h = _huge((L, 2, 1))
    n = cases.cudnn_params_size("rnn_tanh", 2, 1, 1, 1)  # per-layer size is the same for layers >= 1
    per_layer = n - cases.cudnn_params_size("rnn_tanh", 1, 1, 1, 1)
    params = _huge((cases.cudnn_params_size("rnn_tanh", 1, 1, 1, 1) + (L - 1) * per_layer,))
    return fusedrnn.cudnn_rnn(_huge((3, 2, 1)), h, h, params, rnn_mode="rnn_tanh")


def _bwd_2_34(op="cudnn_rnn_backprop"):
    T = B = 2**16
    x, h, y = _huge((T, B, 4)), _huge((1, B, 8)), _huge((T, B, 8))
    reserve = np.zeros(64, F32)  # never read: the estimate comes first
    args = [x, h, h, _params("lstm", 1, 1, 4, 8), y, h, h, y, h, h, reserve]
    if op == "cudnn_rnn_backprop_v3":
        args.insert(4, np.broadcast_to(np.int32(T), (B,)))
        args.append(np.zeros((), np.int8))
    elif op == "cudnn_rnn_backprop_v2":
        args.append(np.zeros(2, np.int8))
    return getattr(fusedrnn, op)(*args)


def _params_size_2_64():
    """H * I = 2**64 (each > 2**31): the int64 product used to wrap to 0 and return 2**35."""
    return fusedrnn.cudnn_rnn_params_size(1, 2**32, 2**32, S=np.int64)


def _params_size_10_30():
    return fusedrnn.cudnn_rnn_params_size(1, 10**30, 3, S=np.int64)


def _params_size_many_layers():
    """10**12 layers: used to build 8 * 10**12 region records (a hang); closed form now."""
    return fusedrnn.cudnn_rnn_params_size(10**12, 4, 3, S=np.int64)


def _to_canonical_many_layers():
    return fusedrnn.cudnn_rnn_params_to_canonical(2**40, 4, 3, np.zeros(10, F32), num_params=8 * 2**40)


def _to_canonical_huge_params():
    """params matches 2**31 layers (zero-stride): the copies would need ~ 1 TiB."""
    L = 2**31
    n = cases.cudnn_params_size("rnn_tanh", 1, 1, 2, 2)
    per_layer = cases.cudnn_params_size("rnn_tanh", 2, 1, 2, 2) - n
    return fusedrnn.cudnn_rnn_params_to_canonical(L, 2, 2, _huge((n + (L - 1) * per_layer,)),
                                                  num_params=2 * L, rnn_mode="rnn_tanh")


def _canonical_to_params_huge():
    """Two 2**20 x 2**20 canonical matrices (zero-stride): params would be 2**43 bytes."""
    H = I = 2**20
    w = [_huge((H, I)), _huge((H, H))]
    b = [_huge((H,)), _huge((H,))]
    return fusedrnn.cudnn_rnn_canonical_to_params(1, H, I, w, b, rnn_mode="rnn_tanh")


def _block_lstm(op="block_lstm"):
    T, B, I, n = 2**16, 2**16, 4, 8
    fn = getattr(fusedrnn, op)
    w, v = np.zeros((I + n, 4 * n), F32), np.zeros(n, F32)
    state = np.zeros((B, n), F32)
    return fn(T, _huge((T, B, I)), state, state, w, v, v, v, np.zeros(4 * n, F32))


def _block_lstm_grad(op="block_lstm_grad"):
    T, B, I, n = 2**16, 2**16, 4, 8
    fn = getattr(fusedrnn, op)
    w, v = np.zeros((I + n, 4 * n), F32), np.zeros(n, F32)
    state, seq = np.zeros((B, n), F32), _huge((T, B, n))
    return fn(T, _huge((T, B, I)), state, state, w, v, v, v, np.zeros(4 * n, F32), *([seq] * 9),
              use_peephole=False)


def _lstm_block_cell():
    B, I, n = 2**34, 4, 2
    return fusedrnn.lstm_block_cell(_huge((B, I)), _huge((B, n)), _huge((B, n)), np.zeros((I + n, 4 * n), F32),
                                    *[np.zeros(n, F32)] * 3, np.zeros(4 * n, F32))


def _gru_block_cell():
    B, I, n = 2**34, 4, 2
    return fusedrnn.gru_block_cell(_huge((B, I)), _huge((B, n)), np.zeros((I + n, 2 * n), F32),
                                   np.zeros((I + n, n), F32), np.zeros(2 * n, F32), np.zeros(n, F32))


def _lstm_block_cell_grad():
    B, I, n = 2**34, 4, 2
    rows = _huge((B, n))
    return fusedrnn.lstm_block_cell_grad(_huge((B, I)), rows, rows, np.zeros((I + n, 4 * n), F32),
                                         *[np.zeros(n, F32)] * 3, np.zeros(4 * n, F32), *([rows] * 8),
                                         use_peephole=False)


def _gru_block_cell_grad():
    B, I, n = 2**34, 4, 2
    rows = _huge((B, n))
    return fusedrnn.gru_block_cell_grad(_huge((B, I)), rows, np.zeros((I + n, 2 * n), F32),
                                        np.zeros((I + n, n), F32), np.zeros(2 * n, F32), np.zeros(n, F32),
                                        rows, rows, rows, rows)


def _moderate():
    """A tiny, valid call: with FUSEDRNN_MEMORY_LIMIT=1000 it must be refused, not run."""
    call = cases.build("cudnn_rnn_v3", "float32", cases.default_config("cudnn_rnn_v3"), seed=1)
    return cases.invoke(call)


def _moderate_backprop():
    call = cases.build("cudnn_rnn_backprop_v3", "float32", cases.default_config("cudnn_rnn_backprop_v3"), seed=1)
    return cases.invoke(call)


CASES = {
    "cudnn_rnn_2_34": _fwd_2_34,
    "cudnn_rnn_v2_2_34": lambda: _fwd_2_34("cudnn_rnn_v2"),
    "cudnn_rnn_v3_2_34": lambda: _fwd_2_34("cudnn_rnn_v3"),
    "cudnn_rnn_v3_batch_2_40": _fwd_batch_major_2_40,
    "cudnn_rnn_2_63_bytes": _fwd_2_63_bytes,
    "cudnn_rnn_2_40_layers": _fwd_deep,
    "cudnn_rnn_backprop_2_34": _bwd_2_34,
    "cudnn_rnn_backprop_v2_2_34": lambda: _bwd_2_34("cudnn_rnn_backprop_v2"),
    "cudnn_rnn_backprop_v3_2_34": lambda: _bwd_2_34("cudnn_rnn_backprop_v3"),
    "params_size_2_64": _params_size_2_64,
    "params_size_10_30": _params_size_10_30,
    "params_size_10_12_layers": _params_size_many_layers,
    "params_to_canonical_2_40_layers": _to_canonical_many_layers,
    "params_to_canonical_huge": _to_canonical_huge_params,
    "canonical_to_params_huge": _canonical_to_params_huge,
    "block_lstm_2_34": _block_lstm,
    "block_lstm_v2_2_34": lambda: _block_lstm("block_lstm_v2"),
    "block_lstm_grad_2_34": _block_lstm_grad,
    "block_lstm_grad_v2_2_34": lambda: _block_lstm_grad("block_lstm_grad_v2"),
    "lstm_block_cell_2_34": _lstm_block_cell,
    "gru_block_cell_2_34": _gru_block_cell,
    "lstm_block_cell_grad_2_34": _lstm_block_cell_grad,
    "gru_block_cell_grad_2_34": _gru_block_cell_grad,
    "moderate_forward": _moderate,
    "moderate_backprop": _moderate_backprop,
}


def _child(names) -> None:
    """Child entry: cap the address space, run each case, print one JSON line per case."""
    import resource
    cap = 4 * GiB
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    for name in names:
        start = time.monotonic()
        try:
            result = CASES[name]()
            outcome = {"type": None, "message": "", "value": _describe(result)}
        except BaseException as exc:  # noqa: BLE001 - recorded and judged by the parent
            outcome = {"type": type(exc).__name__, "message": str(exc)[:2000]}
        outcome.update(name=name, seconds=time.monotonic() - start)
        print("CASE " + json.dumps(outcome), flush=True)


def _describe(result):
    if isinstance(result, np.ndarray):
        return result.tolist() if result.size < 10 else f"array{result.shape}"
    return repr(type(result))


def run_cases(names, env_extra=None, timeout=120) -> dict:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", **(env_extra or {}))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    code = "import sys; from tests.test_memory import _child; _child(sys.argv[1:])"
    proc = subprocess.run([sys.executable, "-c", code, *names], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)
    results = {}
    for line in proc.stdout.splitlines():
        if line.startswith("CASE "):
            outcome = json.loads(line[5:])
            results[outcome["name"]] = outcome
    missing = [n for n in names if n not in results]
    assert not missing, (f"the child died before reporting {missing} (exit {proc.returncode}):\n"
                         f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return results


@pytest.fixture(scope="module")
def outcomes():
    big = [n for n in CASES if not n.startswith("moderate")]
    return run_cases(big)


def _shape_text(shape) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def assert_estimate_error(outcome, shape=None):
    """fusedrnn's MemoryError: 'needs about N bytes ... for <shape>', raised quickly."""
    assert outcome["type"] == "MemoryError", outcome
    message = outcome["message"]
    assert "Unable to allocate" not in message, f"NumPy tried to allocate: {message}"
    match = re.search(r"needs about ([\d,]+) bytes", message)
    assert match, f"no byte count in {message!r}"
    assert int(match.group(1).replace(",", "")) > 2**31
    if shape is not None:
        assert _shape_text(shape) in message, f"shape {shape} not named in {message!r}"
    assert outcome["seconds"] < 5, outcome


@pytest.mark.parametrize("name", ["cudnn_rnn_2_34", "cudnn_rnn_v2_2_34", "cudnn_rnn_v3_2_34"])
def test_forward_2_34_elements(outcomes, name):
    assert_estimate_error(outcomes[name], (2**16, 2**16, 4))


def test_forward_batch_major_lengths_not_allocated_first(outcomes):
    """The estimate runs before the [B] lengths vector is built (8 TiB here)."""
    assert_estimate_error(outcomes["cudnn_rnn_v3_batch_2_40"], (2**40, 2, 1))


def test_forward_estimate_beyond_2_63_bytes(outcomes):
    outcome = outcomes["cudnn_rnn_2_63_bytes"]
    assert_estimate_error(outcome, (2**30, 2**30, 1))
    nbytes = int(re.search(r"needs about ([\d,]+) bytes", outcome["message"]).group(1).replace(",", ""))
    assert nbytes > 2**63, "an exact Python integer, not a wrapped int64"


def test_forward_2_40_layers(outcomes):
    """num_layers = 2**40: no per-layer loop before the estimate (it used to hang building the
    parameter regions)."""
    assert_estimate_error(outcomes["cudnn_rnn_2_40_layers"], (3, 2, 1))
    assert "1099511627776 layer(s)" in outcomes["cudnn_rnn_2_40_layers"]["message"]


@pytest.mark.parametrize("name", ["cudnn_rnn_backprop_2_34", "cudnn_rnn_backprop_v2_2_34",
                                  "cudnn_rnn_backprop_v3_2_34"])
def test_backprop_2_34_elements(outcomes, name):
    assert_estimate_error(outcomes[name], (2**16, 2**16, 4))


def test_params_size_2_64_is_exact(outcomes):
    """Regression: the int64 region product wrapped and ParamsSize returned 34359738368."""
    outcome = outcomes["params_size_2_64"]
    expected = cases.cudnn_params_size("lstm", 1, 1, 2**32, 2**32)
    assert expected > 2**63
    assert outcome["type"] == "ValueError", outcome
    assert f"params size {expected} does not fit in S=int64" in outcome["message"]


def test_params_size_beyond_int64_python_int(outcomes):
    """Regression: sizes beyond int64 raised OverflowError from np.prod."""
    outcome = outcomes["params_size_10_30"]
    assert outcome["type"] == "ValueError" and "does not fit in S=int64" in outcome["message"], outcome


def test_params_size_many_layers_is_fast(outcomes):
    outcome = outcomes["params_size_10_12_layers"]
    assert outcome["type"] is None, outcome
    assert outcome["value"] == [cases.cudnn_params_size("lstm", 2, 1, 3, 4)
                                + (10**12 - 2) * (cases.cudnn_params_size("lstm", 2, 1, 3, 4)
                                                  - cases.cudnn_params_size("lstm", 1, 1, 3, 4))]
    assert outcome["seconds"] < 1


def test_params_to_canonical_many_layers_is_fast(outcomes):
    outcome = outcomes["params_to_canonical_2_40_layers"]
    assert outcome["type"] == "ValueError" and "params size mismatch" in outcome["message"], outcome
    assert outcome["seconds"] < 1


def test_params_to_canonical_huge(outcomes):
    outcome = outcomes["params_to_canonical_huge"]
    assert_estimate_error(outcome)
    assert "params shape [" in outcome["message"]


def test_canonical_to_params_huge(outcomes):
    outcome = outcomes["canonical_to_params_huge"]
    assert_estimate_error(outcome)
    assert f"params shape [{2 * 2**40 + 2 * 2**20}]" in outcome["message"]


@pytest.mark.parametrize("name", ["block_lstm_2_34", "block_lstm_v2_2_34", "block_lstm_grad_2_34",
                                  "block_lstm_grad_v2_2_34"])
def test_block_lstm_2_34_elements(outcomes, name):
    assert_estimate_error(outcomes[name], (2**16, 2**16, 4))


@pytest.mark.parametrize("name", ["lstm_block_cell_2_34", "gru_block_cell_2_34", "lstm_block_cell_grad_2_34",
                                  "gru_block_cell_grad_2_34"])
def test_cell_2_34_rows(outcomes, name):
    assert_estimate_error(outcomes[name], (2**34, 4))


def test_memory_limit_env_refuses_moderate_shapes():
    """FUSEDRNN_MEMORY_LIMIT (bytes) caps the estimate: a tiny problem is refused at 1000 bytes."""
    limited = run_cases(["moderate_forward", "moderate_backprop"], {"FUSEDRNN_MEMORY_LIMIT": "1000"})
    for name in ("moderate_forward", "moderate_backprop"):
        outcome = limited[name]
        assert outcome["type"] == "MemoryError", outcome
        assert "but only 1,000 bytes are available" in outcome["message"]
        assert re.search(r"needs about [\d,]+ bytes .* for input shape \[4,3,3\]", outcome["message"]), outcome
    unlimited = run_cases(["moderate_forward", "moderate_backprop"], {"FUSEDRNN_MEMORY_LIMIT": str(GiB)})
    assert all(o["type"] is None for o in unlimited.values()), unlimited


def test_memory_limit_in_process(monkeypatch):
    call = cases.build("cudnn_rnn", "float64", cases.default_config("cudnn_rnn"), seed=2)
    monkeypatch.setenv("FUSEDRNN_MEMORY_LIMIT", "5000")
    with pytest.raises(MemoryError, match=r"CudnnRNN forward needs about [\d,]+ bytes .* input shape \[4,3,3\]"):
        cases.invoke(call)
    monkeypatch.setenv("FUSEDRNN_MEMORY_LIMIT", "1e9")
    assert cases.invoke(call).output.shape == (4, 3, 8)


@pytest.mark.parametrize("op", ["cudnn_rnn_v3", "cudnn_rnn_backprop_v3"])
@pytest.mark.parametrize("dtype", ["float16", "float64"])
def test_estimate_covers_the_real_peak(op, dtype, monkeypatch):
    """The estimate is an upper bound of what a call really allocates (tracemalloc peak)."""
    import tracemalloc
    cfg = cases.default_config(op, T=16, B=8, I=12, H=16, L=2, D=2)
    call = cases.build(op, dtype, cfg, seed=0)
    seen = []
    monkeypatch.setattr(fusedrnn.resources, "ensure_fits", lambda nbytes, *a, **k: seen.append(nbytes))
    # a small call on the lean path (fusedrnn.cudnn._lean) checks no estimate: this one takes
    # the general path, which checks it (and allocates at least as much)
    monkeypatch.setattr(fusedrnn.resources, "must_check", lambda nbytes: True)
    buffers.clear_pool()  # blocks recycled from earlier calls would not count as allocations
    tracemalloc.start()
    try:
        cases.invoke(call)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert seen and seen[0] >= peak, (op, seen, peak)
    assert seen[0] < 20 * peak, "the estimate should not be absurdly pessimistic"
