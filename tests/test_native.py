"""The native backend (fusedrnn._native) against the NumPy reference engines.

Every configuration runs twice, ``settings.backend("numpy")`` and ``settings.backend("native")``,
forward and backward, and the results are compared with a stated tolerance.  Where they can
differ, and by how much:

* the recurrent GEMM sums its K terms in another order (and with FMA on AVX2/AVX-512), and the
  native tanh is within 4 ulp where NumPy's is within ~1.5 ulp.  Per step that is a few ulp
  relative; through T steps the differences add up like a random walk (~sqrt(T) growth) and are
  amplified by the recurrence's gain.  Bound used, relative to the largest magnitude of the
  compared array (normwise): float64 1e-12, float32 3e-5 (≈ 250 ulp for T ≤ 12: generous against
  the ~5 ulp observed, tight enough that any wrong formula — a wrong gate, a missed mask, a
  missed carry — fails by orders of magnitude); float16 results (computed in float32, rounded
  to float16 at the end) 2e-3 (≈ 2 float16 ulp: a float32 difference can flip one rounding).
* results of the native engine itself never depend on the team size or on repetition: those
  are compared bit for bit.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings as hsettings, HealthCheck
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import fusedrnn  # noqa: E402
from fusedrnn import block_ops as bo  # noqa: E402
from fusedrnn import settings  # noqa: E402
from cudnn_helpers import Case, backprop_v3, forward_v3, make_problem, random_like_outputs  # noqa: E402



def _native_module():
    """The extension.  Required once fusedrnn is installed (``pip install -e .`` builds it, so a
    missing one is a broken build) or when FUSEDRNN_BACKEND=native asks for it; a source tree
    run without any install (no package metadata) skips this module, saying why."""
    import importlib.metadata
    try:
        return settings.native_module()
    except ImportError as error:
        try:
            importlib.metadata.distribution("fusedrnn")
            installed = True
        except importlib.metadata.PackageNotFoundError:
            installed = False
        if installed or os.environ.get("FUSEDRNN_BACKEND", "").strip() == "native":
            raise
        pytest.skip(f"native extension not built (source tree, not installed): {error}",
                    allow_module_level=True)


native = _native_module()

TOLERANCE = {np.float64: 1e-12, np.float32: 3e-5, np.float16: 2e-3}
ALL_ISAS = ("avx512", "avx2", "portable")


def _isa_param(name):
    return pytest.param(name, marks=pytest.mark.skipif(
        name not in native.supported_isas(), reason=f"this CPU/build has no {name} path"))


ISAS = [_isa_param(name) for name in ALL_ISAS]


@pytest.fixture
def isa(request):
    """Run the test with the given instruction set, restoring the previous one after."""
    previous = native.isa()
    native.set_isa(request.param)
    yield request.param
    native.set_isa(previous)


@pytest.fixture
def threads():
    previous = settings.get_num_threads()
    yield settings.set_num_threads
    settings.set_num_threads(previous)


def assert_close(ref, got, dtype, what="", tol=None):
    tol = TOLERANCE[np.dtype(dtype).type] if tol is None else tol
    for k, (a, b) in enumerate(zip(ref, got)):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        assert a.shape == b.shape, (what, k)
        if a.size == 0:
            continue
        np.testing.assert_array_equal(np.isnan(a), np.isnan(b), err_msg=f"{what} result {k}: NaN pattern")
        finite = np.isfinite(a)
        scale = max(float(np.max(np.abs(a[finite]), initial=0.0)), 1e-300)
        err = float(np.max(np.abs(a[finite] - b[finite]), initial=0.0))
        assert err <= tol * scale, f"{what} result {k}: max |diff| {err:.3g} > {tol:g} x {scale:.3g}"


def cudnn_both(case: Case, dtype, time_major=True, seed=1, **attrs):
    """{backend: (output, output_h, output_c, d_input, d_h, d_c, d_params)}."""
    prob = make_problem(case, seed, dtype)
    grads = random_like_outputs(case, seed + 1, dtype)
    results = {}
    for name in ("numpy", "native"):
        with settings.backend(name):
            fwd = forward_v3(prob, time_major, **attrs)
            back = backprop_v3(prob, fwd, grads, time_major, **attrs)
        results[name] = (fwd.output, fwd.output_h, fwd.output_c) + tuple(back)
    return results


def digest(results):
    return [np.asarray(a).tobytes() for a in results]


# ---------------------------------------------------------------------------------------------
# Kernels: tanh and the packed GEMM, on every instruction set

@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tanh_max_error(isa, dtype):
    """≤ 4 ulp against a higher-precision tanh over a dense range, tiny and huge values; NaN
    propagates, ±Inf → ±1, ±0 keeps its sign."""
    hook = native.tanh_f32 if dtype == np.float32 else native.tanh_f64
    wide = np.float64 if dtype == np.float32 else np.longdouble
    tiny = np.finfo(dtype).smallest_subnormal
    x = np.concatenate([np.linspace(-30, 30, 400_001), np.geomspace(tiny, 50, 20_001),
                        -np.geomspace(tiny, 50, 20_001), [np.finfo(dtype).max, -np.finfo(dtype).max]]).astype(dtype)
    y = hook(x)
    ref = np.tanh(x.astype(wide))
    ulp = np.abs(y.astype(wide) - ref) / np.spacing(np.abs(ref).astype(dtype)).astype(wide)
    assert float(ulp.max()) <= 4.0
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0], dtype=dtype)
    out = hook(special)
    assert np.isnan(out[0]) and out[1] == 1 and out[2] == -1
    assert out[3] == 0 and not np.signbit(out[3]) and out[4] == 0 and np.signbit(out[4])


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("M, K, N", [(1, 1, 1), (1, 37, 65), (7, 64, 33), (13, 5, 100), (64, 128, 96)])
def test_packed_gemm(isa, dtype, M, K, N):
    rng = np.random.default_rng(M * K * N)
    A, B = rng.standard_normal((M, K)).astype(dtype), rng.standard_normal((K, N)).astype(dtype)
    hook = native.gemm_f32 if dtype == np.float32 else native.gemm_f64
    exact = A.astype(np.float64) @ B.astype(np.float64)
    bound = K * np.finfo(dtype).eps * (np.abs(A).astype(np.float64) @ np.abs(B))  # Higham's γ_K
    assert np.all(np.abs(hook(A, B) - exact) <= bound)


# ---------------------------------------------------------------------------------------------
# CudnnRNN: native vs numpy on a grid

GRID = [
    Case(mode=mode, num_layers=L, num_dirs=D, num_proj=P, batch=B, max_time=T, num_units=H,
         input_size=I, lengths=lengths)
    for mode in ("lstm", "gru", "rnn_tanh", "rnn_relu")
    for (L, D, P, B, T, H, I, lengths) in [
        (1, 1, 0, 1, 1, 1, 1, None),
        (1, 1, 0, 4, 6, 5, 3, None),
        (2, 2, 0, 5, 7, 37, 4, (7, 1, 3, 7, 2)),
        (1, 2, 0, 3, 5, 20, 20, None),
        (3, 1, 0, 9, 4, 33, 2, (4, 4, 1, 2, 3, 4, 1, 1, 2)),
        (1, 1, 3, 2, 5, 40, 6, (5, 2)),
        (2, 2, 7, 3, 4, 18, 5, (1, 4, 2)),
    ]
    if P == 0 or mode == "lstm"
]


@pytest.mark.parametrize("case", GRID, ids=str)
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
def test_cudnn_native_matches_numpy(case, dtype):
    results = cudnn_both(case, dtype)
    assert_close(results["numpy"], results["native"], dtype, str(case))


# Depths past one K chunk of the step GEMMs (gemm_kernels.h k_chunk: 1024 floats, 512
# doubles): the input projection (I = 1100) and, in float64, the recurrent product (H = 530)
DEEP = [Case(mode=mode, batch=7, max_time=3, num_units=20, input_size=1100, lengths=(3, 1, 2, 3, 3, 2, 1))
        for mode in ("lstm", "gru", "rnn_tanh")] + \
       [Case(mode="gru", batch=2, max_time=3, num_units=530, input_size=4),
        Case(mode="lstm", batch=2, max_time=2, num_units=530, num_proj=520, input_size=4)]


@pytest.mark.parametrize("case", DEEP, ids=str)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_products_deeper_than_one_chunk_match_numpy(case, dtype, threads):
    """Partial sums carried between K chunks: the same results as NumPy's float64 (float32 to
    1e-4 of the largest value, the sums having > 1000 terms) and the same bits on 1 and 3 threads."""
    threads(1)
    truth = cudnn_both(case, np.float64)["numpy"]
    assert_close(truth, cudnn_both(case, dtype)["native"], dtype, str(case),
                 tol=None if dtype == np.float64 else 1e-4)
    one = _native_run(case, dtype)
    threads(3)
    assert _native_run(case, dtype) == one


@pytest.mark.parametrize("mode", ["lstm", "gru", "rnn_tanh", "rnn_relu"])
@pytest.mark.parametrize("n_threads", [1, 2])
def test_inference_gives_the_training_forward_bits(mode, n_threads, threads):
    """Inference records no trace (LSTM, GRU: the gate buffers hold one step): the outputs are
    bit for bit those of a training-mode forward."""
    case = Case(mode=mode, num_layers=2, num_dirs=2, batch=5, max_time=9, num_units=40,
                input_size=7, lengths=(9, 3, 9, 1, 6))
    prob = make_problem(case, 5, np.float32)
    threads(n_threads)
    with settings.backend("native"):
        training, inference = forward_v3(prob, is_training=True), forward_v3(prob, is_training=False)
    for name in ("output", "output_h", "output_c"):
        assert np.array_equal(getattr(training, name), getattr(inference, name)), name


@pytest.mark.parametrize("mode", ["lstm", "gru", "rnn_tanh", "rnn_relu"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_unpickled_arrays_run_natively(mode, dtype):
    """An unpickled array's dtype is equal to, but not the same object as, np.dtype(float32):
    the native engine must accept it (it once raised 'computes in float32 or float64')."""
    import pickle

    case = Case(mode=mode, num_layers=2, num_dirs=2, batch=3, max_time=5, num_units=6, input_size=4,
                lengths=(5, 2, 4))
    prob = make_problem(case, 3, dtype)
    unpickled = prob._replace(**{name: pickle.loads(pickle.dumps(getattr(prob, name)))
                                 for name in ("x", "h", "c", "params")})
    assert unpickled.x.dtype is not np.dtype(dtype)
    grads = random_like_outputs(case, 4, dtype)
    with settings.backend("native"):
        expected = forward_v3(prob), backprop_v3(prob, forward_v3(prob), grads)
        got = forward_v3(unpickled), backprop_v3(unpickled, forward_v3(unpickled), grads)
    assert digest(expected[0][:3] + tuple(expected[1])) == digest(got[0][:3] + tuple(got[1]))


@pytest.mark.parametrize("mode", ["lstm", "gru", "rnn_tanh", "rnn_relu"])
@pytest.mark.parametrize("variant", ["batch_major", "skip_input", "dropout", "batch0"])
def test_cudnn_native_variants(mode, variant):
    case = Case(mode=mode, num_layers=2, num_dirs=2, batch=3, max_time=5, num_units=6, input_size=4,
                lengths=(5, 2, 4))
    attrs, time_major = {}, True
    if variant == "batch_major":
        time_major = False
    elif variant == "skip_input":
        case = case.with_(input_mode="skip_input", input_size=6)
    elif variant == "dropout":
        attrs = dict(dropout=0.4, seed=3, seed2=9)
    else:
        case = case.with_(batch=0, lengths=())
    for dtype in (np.float64, np.float32):
        results = cudnn_both(case, dtype, time_major, **attrs)
        assert_close(results["numpy"], results["native"], dtype, f"{case} {variant}")


@hsettings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mode=st.sampled_from(["lstm", "gru", "rnn_tanh", "rnn_relu"]), L=st.integers(1, 2),
       D=st.integers(1, 2), B=st.integers(1, 6), T=st.integers(1, 6), H=st.integers(1, 24),
       I=st.integers(1, 8), proj=st.integers(0, 4), ragged=st.booleans(), seed=st.integers(0, 99),
       dtype=st.sampled_from([np.float32, np.float64]), time_major=st.booleans())
def test_cudnn_native_matches_numpy_random(mode, L, D, B, T, H, I, proj, ragged, seed, dtype, time_major):
    P = min(proj, H - 1) if mode == "lstm" and H > 1 else 0
    rng = np.random.default_rng(seed)
    lengths = tuple(int(v) for v in rng.integers(1, T + 1, B)) if ragged else None
    case = Case(mode=mode, num_layers=L, num_dirs=D, num_proj=P, batch=B, max_time=T,
                num_units=H, input_size=I, lengths=lengths)
    results = cudnn_both(case, dtype, time_major, seed=seed)
    assert_close(results["numpy"], results["native"], dtype, str(case))


@pytest.mark.parametrize("mode", ["lstm", "gru", "rnn_tanh"])
def test_traces_interoperate(mode):
    """A native forward's reserve_space feeds a NumPy backprop and vice versa."""
    case = Case(mode=mode, num_layers=2, num_dirs=2, batch=4, max_time=5, num_units=9,
                lengths=(5, 3, 1, 4), num_proj=4 if mode == "lstm" else 0)
    prob = make_problem(case, 4, np.float64)
    grads = random_like_outputs(case, 5, np.float64)
    fwd = {}
    for name in ("numpy", "native"):
        with settings.backend(name):
            fwd[name] = forward_v3(prob)
    for f_name, b_name in (("native", "numpy"), ("numpy", "native")):
        with settings.backend(b_name):
            mixed = backprop_v3(prob, fwd[f_name], grads)
        with settings.backend("numpy"):
            reference = backprop_v3(prob, fwd["numpy"], grads)
        assert_close(reference, mixed, np.float64, f"{f_name} forward, {b_name} backprop")


def _batch_permuted(prob, grads, order):
    """The same problem with its batch rows (and the upstream gradients') in ``order``."""
    gy, gh, gc = grads
    take = lambda a: a if a.ndim == 0 else np.ascontiguousarray(a[:, order])  # noqa: E731
    return (prob._replace(x=take(prob.x), h=take(prob.h), c=take(prob.c), lengths=prob.lengths[order]),
            (take(gy), take(gh), take(gc)))


@pytest.mark.parametrize("backend", ["native", "numpy"])
@pytest.mark.parametrize("mode,L,D,proj", [("lstm", 2, 2, 0), ("lstm", 1, 1, 3), ("gru", 2, 1, 0),
                                           ("rnn_tanh", 1, 2, 0), ("rnn_relu", 2, 1, 0)])
@pytest.mark.parametrize("time_major", [True, False])
def test_variable_lengths_run_on_the_batch_sorted_by_length(backend, mode, L, D, proj, time_major):
    """Unsorted lengths run on the batch sorted by decreasing length (stable), rows of ended
    sequences left out of each step: every result, weight gradients included, is bit-identical
    to the caller passing that sorted batch, once its rows are put back.  (Dropout masks belong
    to the caller's positions, so a permuted batch draws different ones: not compared here.)"""
    lengths = (3, 7, 1, 7, 5, 2, 6, 3, 7)
    case = Case(mode=mode, num_layers=L, num_dirs=D, batch=len(lengths), max_time=7, num_units=20,
                input_size=6, num_proj=proj, lengths=lengths)
    prob = make_problem(case, 8, np.float32)
    grads = random_like_outputs(case, 9, np.float32)
    order = np.argsort(-np.array(lengths), kind="stable")
    sorted_prob, sorted_grads = _batch_permuted(prob, grads, order)
    with settings.backend(backend):
        fwd = forward_v3(prob, time_major)
        back = backprop_v3(prob, fwd, grads, time_major)
        fwd_s = forward_v3(sorted_prob, time_major)
        back_s = backprop_v3(sorted_prob, fwd_s, sorted_grads, time_major)
    rows = lambda a: a if a.ndim == 0 else a[:, order]  # noqa: E731
    got = [fwd.output, fwd.output_h, fwd.output_c, back[0], back[1], back[2]]
    want = [fwd_s.output, fwd_s.output_h, fwd_s.output_c, back_s[0], back_s[1], back_s[2]]
    for k, (a, b) in enumerate(zip(got, want)):
        np.testing.assert_array_equal(rows(a), b, err_msg=f"result {k}")
    np.testing.assert_array_equal(back[3], back_s[3], err_msg="params_backprop")
    valid = np.arange(7)[:, None] < np.array(lengths)[None, :]
    assert np.all(fwd.output[~valid] == 0)  # padded steps emit zeros, in the caller's rows


def test_nonfinite_inputs_propagate_like_numpy():
    for mode in ("lstm", "gru", "rnn_tanh", "rnn_relu"):
        case = Case(mode=mode, batch=3, max_time=4, num_units=5)
        prob = make_problem(case, 1, np.float64)
        prob.x[1, 0, 0] = np.nan
        prob.x[2, 2, 1] = np.inf
        prob.params[3] = -np.inf
        grads = random_like_outputs(case, 2, np.float64)
        out = {}
        for name in ("numpy", "native"):
            with settings.backend(name):
                fwd = forward_v3(prob)
                out[name] = (fwd.output, fwd.output_h, fwd.output_c) + tuple(backprop_v3(prob, fwd, grads))
        for a, b in zip(out["numpy"], out["native"]):
            np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
            np.testing.assert_array_equal(np.isinf(a), np.isinf(b))


# ---------------------------------------------------------------------------------------------
# Block ops (peepholes, cell clip, forget bias, ICFO layout)

def _block_inputs(T, B, I, n, seed=0):
    rng = np.random.default_rng(seed)
    u = lambda *shape, scale=1.0: (scale * rng.uniform(-1, 1, shape))  # noqa: E731
    return dict(x=u(T, B, I), cs_prev=u(B, n), h_prev=u(B, n), w=u(I + n, 4 * n, scale=0.8),
                wci=u(n), wcf=u(n), wco=u(n), b=u(4 * n, scale=0.5))


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("use_peephole", [False, True])
@pytest.mark.parametrize("cell_clip", [0.0, 0.3])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("T, slm, B, n", [(6, 4, 3, 21), (1, 1, 1, 1)])
def test_block_lstm_native_matches_numpy(version, use_peephole, cell_clip, dtype, T, slm, B, n):
    a = {k: v.astype(dtype) for k, v in _block_inputs(T, B, 3, n).items()}
    forward = bo.block_lstm if version == 1 else bo.block_lstm_v2
    backward = bo.block_lstm_grad if version == 1 else bo.block_lstm_grad_v2
    attrs = dict(cell_clip=cell_clip, use_peephole=use_peephole)
    if version == 1:
        attrs["forget_bias"] = 0.7
    rng = np.random.default_rng(7)
    results = {}
    for name in ("numpy", "native"):
        with settings.backend(name):
            fwd = forward(np.int64(slm), *a.values(), **attrs)
            cs_grad = rng.standard_normal(fwd.cs.shape).astype(dtype)
            h_grad = rng.standard_normal(fwd.h.shape).astype(dtype)
            rng = np.random.default_rng(7)
            back = backward(np.int64(slm), *a.values(), *fwd, cs_grad, h_grad, use_peephole=use_peephole)
        results[name] = tuple(fwd) + tuple(back)
    assert_close(results["numpy"], results["native"], dtype, f"block_lstm v{version}")


def test_lstm_block_cell_native_matches_numpy():
    a = _block_inputs(1, 4, 3, 6)
    a["x"] = a["x"][0]
    results = {}
    for name in ("numpy", "native"):
        with settings.backend(name):
            results[name] = tuple(bo.lstm_block_cell(*a.values(), cell_clip=0.5, use_peephole=True))
    assert_close(results["numpy"], results["native"], np.float64, "lstm_block_cell")


# ---------------------------------------------------------------------------------------------
# Same bits: any team size, repeated calls, concurrent callers, every ISA

BIG = [Case(mode="lstm", batch=5, max_time=6, num_units=70, input_size=8, lengths=(6, 2, 5, 6, 1)),
       Case(mode="lstm", batch=3, max_time=4, num_units=70, num_proj=40, input_size=8),
       Case(mode="gru", num_dirs=2, batch=4, max_time=5, num_units=70, input_size=8),
       Case(mode="rnn_tanh", batch=7, max_time=5, num_units=90, input_size=8, lengths=(5, 1, 2, 3, 4, 5, 5))]


def _native_run(case, dtype=np.float32):
    prob = make_problem(case, 3, dtype)
    grads = random_like_outputs(case, 4, dtype)
    with settings.backend("native"):
        fwd = forward_v3(prob)
        back = backprop_v3(prob, fwd, grads)
    return digest((fwd.output, fwd.output_h, fwd.output_c, fwd.raw.reserve_space) + tuple(back))


@pytest.mark.parametrize("case", BIG, ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_bits_independent_of_thread_count(case, dtype, threads):
    threads(1)
    one = _native_run(case, dtype)
    for n in (2, 3, 5):
        threads(n)
        assert _native_run(case, dtype) == one, f"{n} threads"
    assert _native_run(case, dtype) == one  # repeated


@contextlib.contextmanager
def l2_cache(bytes_):
    """The engine's one-row rule assumes an L2 of ``bytes_`` (0: every R of depth ≥ 256 is
    read in place, whatever its size)."""
    native.set_l2_cache_bytes(bytes_)
    try:
        yield
    finally:
        native.set_l2_cache_bytes(-1)


@pytest.fixture
def r_in_place():
    """The one-row steps read every R of depth ≥ 256 in place (dot_columns), as on a machine
    whose L2 holds none of these matrices."""
    with l2_cache(0):
        yield


# B = 1 and a recurrent depth ≥ 256: the forward steps read R where it lies (dot_columns), not
# packed, when R is larger than half of the L2 (r_in_place: always); column counts and depths
# that are no multiple of the 8-column pass or of a vector
ONE_ROW = [Case(mode="lstm", num_layers=2, num_dirs=2, batch=1, max_time=5, num_units=256,
                input_size=20, lengths=(3,)),
           Case(mode="lstm", batch=1, max_time=4, num_units=300, num_proj=260, input_size=9),
           Case(mode="gru", batch=1, max_time=4, num_units=257, input_size=6),
           Case(mode="rnn_tanh", batch=1, max_time=4, num_units=264, input_size=5, lengths=(2,)),
           Case(mode="rnn_relu", num_dirs=2, batch=1, max_time=3, num_units=259, input_size=5)]


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("case", ONE_ROW, ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_one_row_steps_match_numpy_on_every_thread_count(isa, case, dtype, threads, r_in_place):
    """The unpacked one-row products agree with the NumPy engine's float64 results (float32: to
    1e-4 of the largest value; the projected LSTM's gradients reach ~200, and without FMA the
    portable path's float32 error is 3e-5 of that), forward and backward, and give the same bits
    on 1, 2 and 3 threads."""
    threads(1)
    truth = cudnn_both(case, np.float64)["numpy"]
    assert_close(truth, cudnn_both(case, dtype)["native"], dtype, f"{case} on {isa}",
                 tol=None if dtype == np.float64 else 1e-4)
    one = _native_run(case, dtype)
    for n in (2, 3):
        threads(n)
        assert _native_run(case, dtype) == one, f"{n} threads"


@contextlib.contextmanager
def packed_steps():
    """The one-row steps pack their weights inside (the B > 1 path)."""
    native.set_unpacked_steps(False)
    try:
        yield
    finally:
        native.set_unpacked_steps(True)


@pytest.mark.parametrize("case", ONE_ROW + [
    Case(mode="lstm", batch=1, max_time=6, num_units=100, input_size=8, lengths=(4,)),
    Case(mode="lstm", batch=1, max_time=5, num_units=90, num_proj=40, input_size=8),
    Case(mode="gru", num_dirs=2, batch=1, max_time=5, num_units=70, input_size=8)], ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_one_row_steps_unpacked_against_packed(case, dtype, r_in_place):
    """The depth rule: below 256 the one-row steps still pack R, every bit the packed path's.
    From 256 the forward reads R by columns (dot_columns), summing in another order: its
    results are close to the packed ones, not equal (so the path was taken), and the backward
    (packed either way) starts from them."""
    unpacked = _native_run(case, dtype)
    with packed_steps():
        packed = _native_run(case, dtype)
    if case.hidden_out < 256:
        assert unpacked == packed
    else:
        assert unpacked != packed  # the forward took the unpacked path
        prob = make_problem(case, 3, dtype)
        with settings.backend("native"):
            got = forward_v3(prob)
            with packed_steps():
                want = forward_v3(prob)
        assert_close((want.output, want.output_h, want.output_c),
                     (got.output, got.output_h, got.output_c), dtype, str(case))


@pytest.mark.parametrize("case, columns", [
    (Case(mode="lstm", batch=1, max_time=4, num_units=256, input_size=7), 4 * 256),
    (Case(mode="gru", batch=1, max_time=4, num_units=300, input_size=5), 3 * 300),
    (Case(mode="rnn_tanh", batch=1, max_time=4, num_units=520, input_size=5), 520)], ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_one_row_steps_read_r_in_place_only_beyond_half_the_l2(case, columns, dtype):
    """The size rule: a recurrent matrix that fits in half of a core's L2 stays packed (read
    from cache by the packed kernel's full-line loads, every bit the packed path's); one byte
    less of L2 and the forward reads it in place (other bits); the machine's own L2 gives one of
    the two."""
    r_bytes = case.hidden_out * columns * np.dtype(dtype).itemsize
    with packed_steps():
        packed = _native_run(case, dtype)
    with l2_cache(2 * r_bytes):
        assert _native_run(case, dtype) == packed
    with l2_cache(2 * r_bytes - 1):
        in_place = _native_run(case, dtype)
    assert in_place != packed
    system = _native_run(case, dtype)
    assert system == (packed if 2 * r_bytes <= native.l2_cache_bytes() else in_place)


@pytest.mark.parametrize("use_peephole", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n, I", [(300, 37), (64, 5), (9, 300)])
def test_single_step_reads_row_major_weights_in_place(use_peephole, dtype, n, I):
    """One row of one step (LSTMBlockCell, BlockLSTM with T = 1, at B = 1): the row-major
    ``w [I+n, 4n]`` is read in place (axpy_rows) for both products, with every bit of the packed
    kernel's FMA chains; the NumPy engine agrees.  Widths with a partial 8-vector pass and a
    partial vector."""
    a = {k: v.astype(dtype) for k, v in _block_inputs(1, 1, I, n, seed=4).items()}
    cell = {k: (v[0] if k == "x" else v) for k, v in a.items()}
    attrs = dict(cell_clip=0.3, use_peephole=use_peephole)
    with settings.backend("native"):
        got = [bo.lstm_block_cell(*cell.values(), **attrs), bo.block_lstm(np.int64(1), *a.values(), **attrs)]
        with packed_steps():
            want = [bo.lstm_block_cell(*cell.values(), **attrs), bo.block_lstm(np.int64(1), *a.values(), **attrs)]
    with settings.backend("numpy"):
        reference = bo.lstm_block_cell(*cell.values(), **attrs)
    for g, w in zip(got, want):
        for x, y in zip(g, w):
            np.testing.assert_array_equal(x, y)
    assert_close(tuple(reference), tuple(got[0]), dtype, "LSTMBlockCell")


@pytest.mark.parametrize("mode", ["lstm", "gru", "rnn_tanh"])
@pytest.mark.parametrize("H, I", [(100, 300), (100, 40), (300, 100)])
@pytest.mark.parametrize("B", [1, 5, 16])
def test_single_step_cudnn_reads_both_matrices_in_place(mode, H, I, B):
    """CudnnRNN with T = 1 and B ≤ 16 (kOnceMaxRows): x W and h R are read by columns in place
    at any depth (dot_columns), so the results differ from the packed path's in the last bits;
    both agree with NumPy's float64."""
    case = Case(mode=mode, batch=B, max_time=1, num_units=H, input_size=I)
    prob = make_problem(case, 3, np.float32)
    with settings.backend("native"):
        got = forward_v3(prob)
        with packed_steps():
            want = forward_v3(prob)
    assert not np.array_equal(got.output, want.output), mode
    truth = cudnn_both(case, np.float64, seed=3)["numpy"][:3]
    for result in (got, want):
        assert_close(truth, (result.output, result.output_h, result.output_c), np.float32, mode)


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_single_steps_of_more_rows_are_packed(mode):
    """Past kOnceMaxRows rows (and for a second step) the weights are packed: the packed path's
    bits."""
    for batch, steps in ((17, 1), (4, 2)):
        case = Case(mode=mode, batch=batch, max_time=steps, num_units=40, input_size=30)
        prob = make_problem(case, 3, np.float32)
        with settings.backend("native"):
            got = forward_v3(prob)
            with packed_steps():
                want = forward_v3(prob)
        assert np.array_equal(got.output, want.output), (mode, batch, steps)


@pytest.mark.parametrize("mode", ["lstm", "gru"])
@pytest.mark.parametrize("batch", [16, 17, 32, 33, 48])
def test_single_steps_give_one_threads_bits(mode, batch, threads):
    """A single step (a CudnnRNN generation step) of any batch gives the same bits on 1, 2 and 3
    threads: it never runs in batch slices, whose slices of at most 16 rows would read the
    weights in place while the whole batch packs them (a bug until batch slices checked T)."""
    case = Case(mode=mode, batch=batch, max_time=1, num_units=40, input_size=30)
    prob = make_problem(case, 3, np.float32)
    outputs = []
    for n in (1, 2, 3):
        threads(n)
        with settings.backend("native"):
            fwd = forward_v3(prob)
        outputs.append(digest((fwd.output, fwd.output_h, fwd.output_c)))
    assert outputs[0] == outputs[1] == outputs[2]


# Batch slices (csrc/cells.h runs_in_slices): an LSTM or GRU forward loop of H ≤ 256 units with
# at least 16 rows per thread runs one slice of the batch per thread (with ended sequences: rows
# split for equal numbers of valid steps)
SLICED = [Case(mode="lstm", batch=48, max_time=6, num_units=40, input_size=9),
          Case(mode="lstm", batch=50, max_time=5, num_units=256, num_proj=70, input_size=300),
          Case(mode="lstm", num_layers=2, batch=49, max_time=4, num_units=30, input_size=30,
               input_mode="skip_input"),
          Case(mode="gru", batch=48, max_time=5, num_units=64, input_size=20),
          Case(mode="gru", num_layers=2, batch=50, max_time=4, num_units=30, input_size=30,
               input_mode="skip_input"),
          Case(mode="lstm", batch=40, max_time=7, num_units=20, input_size=3,
               lengths=tuple(1 + (3 * k) % 7 for k in range(40))),
          Case(mode="gru", num_dirs=2, batch=33, max_time=6, num_units=17, input_size=4,
               lengths=(6,) + (1,) * 32),
          Case(mode="lstm", num_layers=2, num_dirs=2, batch=36, max_time=5, num_units=12, num_proj=5,
               input_size=6, lengths=tuple(1 + k % 5 for k in range(36)))]


def _inference_digest(case, dtype, time_major=True):
    prob = make_problem(case, 3, dtype)
    with settings.backend("native"):
        fwd = forward_v3(prob, time_major, is_training=False)
    return digest((fwd.output, fwd.output_h, fwd.output_c))


@pytest.mark.parametrize("case", SLICED, ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batch_slices_give_one_threads_bits(case, dtype, threads):
    """Inference and training (the forward's trace in reserve_space, the backward from it) in
    batch slices on 2 and 3 threads: one thread's bits, in both layouts; NumPy's float64 agrees."""
    native = settings.native_module()
    threads(1)
    one = _native_run(case, dtype), _inference_digest(case, dtype), _inference_digest(case, dtype, False)
    for n in (2, 3):
        threads(n)
        before = native.sliced_loops()
        assert (_native_run(case, dtype), _inference_digest(case, dtype),
                _inference_digest(case, dtype, False)) == one, f"{n} threads"
        assert native.sliced_loops() > before, f"{n} threads: no loop ran in slices"
    threads(2)
    truth = cudnn_both(case, np.float64)["numpy"]
    assert_close(truth, cudnn_both(case, dtype)["native"], dtype, str(case),
                 tol=None if dtype == np.float64 else 1e-4)


def test_batch_slices_not_taken_where_they_do_not_apply(threads):
    """Fewer than 8 rows a thread, fewer than 16 where the packed R does not stay in half of the
    L2, H > 256, or a tanh RNN: the units are shared instead."""
    native = settings.native_module()
    threads(2)

    def sliced(case):
        before = native.sliced_loops()
        _inference_digest(case, np.float32)
        return native.sliced_loops() - before

    def lstm(batch, units=20):
        return Case(mode="lstm", batch=batch, max_time=3, num_units=units, input_size=3)

    fit_rows = (lstm(16), Case(mode="gru", batch=31, max_time=3, num_units=20, input_size=3))
    with l2_cache(1 << 21):
        for case in (lstm(15), lstm(40, 257),
                     Case(mode="rnn_tanh", batch=40, max_time=3, num_units=20, input_size=3)):
            assert sliced(case) == 0, case
        for case in fit_rows:
            assert sliced(case) == 1, case
    with l2_cache(4096):
        for case in fit_rows:
            assert sliced(case) == 0, case
        assert sliced(lstm(32)) == 1


@contextlib.contextmanager
def min_step_macs_per_thread(macs):
    """The time loops' minimum work per thread and step set to ``macs`` (-1: the default)."""
    native.set_min_step_macs_per_thread(macs)
    try:
        yield
    finally:
        native.set_min_step_macs_per_thread(0)  # the suite's setting (conftest.py)


@pytest.mark.parametrize("mode", ["lstm", "gru", "rnn_tanh"])
def test_small_loops_run_on_one_thread(mode, threads):
    """With the default minimum work per thread, a loop whose steps are too small to share
    (here H = 20, B = 2: ~2K multiply-adds) runs on the caller alone, one with enough work
    (H = 128, B = 16) on the team; both give the bits of every other team size, forward and
    backward."""
    threads(2)
    small = Case(mode=mode, batch=2, max_time=4, num_units=20, input_size=3)
    large = Case(mode=mode, batch=16, max_time=3, num_units=128, input_size=8, lengths=(3, 2) * 8)
    with min_step_macs_per_thread(-1), l2_cache(512 << 10):  # every R here fits half of it
        assert native.min_step_macs_per_thread() > 0
        for case, shared in ((small, False), (large, True)):
            before = sum(native.team_stats())
            _inference_digest(case, np.float32)
            assert (sum(native.team_stats()) > before) == shared, case
            bits = _native_run(case)
            with min_step_macs_per_thread(0):
                assert _native_run(case) == bits, case
            threads(1)
            assert _native_run(case) == bits, case
            threads(2)


def _backward_slices(case, dtype=np.float32):
    """(digest of a training call's results, loops the backprop alone ran in batch slices)."""
    prob = make_problem(case, 3, dtype)
    grads = random_like_outputs(case, 4, dtype)
    with settings.backend("native"):
        fwd = forward_v3(prob)
        before = native.sliced_loops()
        back = backprop_v3(prob, fwd, grads)
        sliced = native.sliced_loops() - before
    return digest((fwd.output, fwd.output_h, fwd.output_c, fwd.raw.reserve_space) + tuple(back)), sliced


# at 2 threads, 8 rows a thread: the forward loops share units, the backward loops run in slices
BACKWARD_SLICED = [Case(mode="lstm", batch=16, max_time=6, num_units=40, input_size=9),
                   Case(mode="lstm", batch=18, max_time=6, num_units=40, input_size=9,
                        lengths=(6, 6, 5, 1) * 4 + (1, 2)),
                   Case(mode="gru", batch=16, max_time=4, num_units=33, input_size=5,
                        lengths=tuple(4 - k // 4 for k in range(16))),
                   Case(mode="lstm", batch=17, max_time=5, num_units=24, num_proj=10, input_size=7),
                   Case(mode="gru", batch=16, max_time=5, num_units=33, input_size=20),
                   Case(mode="lstm", num_layers=2, num_dirs=2, batch=20, max_time=4, num_units=16,
                        input_size=5)]


@pytest.mark.parametrize("case", BACKWARD_SLICED, ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_backward_loops_in_batch_slices_give_one_threads_bits(case, dtype, threads):
    """A backward loop of at least 8 rows a thread runs in batch slices (one thread's whole loop
    over its rows, with the caller's step stride; with ended sequences the rows split for equal
    numbers of valid steps): one thread's bits, at 2 and 3 threads."""
    threads(1)
    one, sliced = _backward_slices(case, dtype)
    assert sliced == 0
    for n in (2, 3):
        threads(n)
        got, sliced = _backward_slices(case, dtype)
        assert got == one, f"{n} threads"
        if case.batch >= 8 * n:
            assert sliced == case.num_layers * case.num_dirs, f"{n} threads"


def test_backward_slices_not_taken_where_they_do_not_apply(threads):
    """Fewer than 8 rows a thread: the units are shared.  A packed Rᵀ beyond half of the L2
    needs 32 rows a thread (each slice streams all of it every step)."""
    threads(2)
    for case in (Case(mode="gru", batch=15, max_time=3, num_units=20, input_size=3),
                 Case(mode="lstm", batch=15, max_time=3, num_units=20, input_size=3, lengths=(3, 1) * 7 + (2,))):
        assert _backward_slices(case)[1] == 0, case
    few, many = (Case(mode="lstm", batch=b, max_time=3, num_units=20, input_size=3) for b in (63, 64))
    with l2_cache(4096):
        assert _backward_slices(few)[1] == 0
        assert _backward_slices(many)[1] == 1
    assert _backward_slices(few)[1] == 1


@pytest.mark.parametrize("use_peephole", [False, True])
def test_block_lstm_in_batch_slices_gives_one_threads_bits(use_peephole, threads):
    """BlockLSTMV2 (ICFO weights read in place, peepholes, cell clip) and its gradient in batch
    slices: one thread's bits."""
    a = {k: v.astype(np.float32) for k, v in _block_inputs(7, 40, 5, 24, seed=2).items()}
    attrs = dict(cell_clip=0.4, use_peephole=use_peephole)
    rng = np.random.default_rng(1)
    h_grad = rng.standard_normal((7, 40, 24)).astype(np.float32)

    def run():
        with settings.backend("native"):
            fwd = bo.block_lstm_v2(np.int64(7), *a.values(), **attrs)
            grads = bo.block_lstm_grad_v2(np.int64(7), *a.values(), *fwd, np.zeros_like(h_grad), h_grad,
                                          use_peephole=use_peephole)
        return digest(tuple(fwd) + tuple(grads))

    threads(1)
    one = run()
    threads(2)
    before = settings.native_module().sliced_loops()
    assert run() == one
    assert settings.native_module().sliced_loops() > before


@pytest.mark.parametrize("backend", ["numpy", "native"])
@pytest.mark.parametrize("T, B, I, H, P, ragged, peephole, clip, n_threads", [
    (5, 3, 4, 16, 0, False, True, 0.5, 1),
    (6, 5, 3, 9, 0, True, False, 0.0, 2),     # ended rows: zero in every plane
    (4, 4, 3, 12, 7, True, True, 0.0, 2),     # projection
    (7, 40, 5, 24, 0, False, True, 0.4, 2),   # batch slices at 2 threads
    (1, 1, 6, 5, 0, False, False, 0.0, 1)])   # one step of one row: weights read in place
def test_gate_planes_give_the_interleaved_bits(backend, T, B, I, H, P, ragged, peephole, clip, n_threads,
                                               threads):
    """An LSTM trace recorded as four [T, B, H] gate planes (the BlockLSTM ops' own outputs)
    holds the bits of the interleaved [T, B, 4H] gates, and a backward pass reading the planes
    gives the bits of one reading the interleaved gates."""
    from fusedrnn import engines
    from fusedrnn.engines.lstm import LSTMOptions, LSTMWeights

    threads(n_threads)
    rng = np.random.default_rng(T * B + H)
    u = lambda *shape: rng.uniform(-1, 1, shape).astype(np.float32)  # noqa: E731
    Hout = P or H
    weights = LSTMWeights(u(I, 4 * H), u(Hout, 4 * H), u(4 * H), u(H, P) if P else None,
                          (u(H), u(H), u(H)) if peephole else None)
    options = LSTMOptions(layout="icfo", forget_bias=0.5, cell_clip=clip, use_peephole=peephole)
    x, h0, c0 = u(T, B, I), u(B, Hout), u(B, H)
    valid = None
    if ragged:
        lengths = np.sort(rng.integers(1, T + 1, B))[::-1]
        valid = np.arange(T)[:, None] < lengths[None, :]
    dh_steps, dc_steps = u(T, B, Hout), u(T, B, H)
    with settings.backend(backend):
        engine = engines.active()
        inter = engine.lstm_forward(x, h0, c0, weights, options, valid)
        planes = engine.lstm_forward(x, h0, c0, weights, options, valid, gate_planes=True)
        assert isinstance(planes.gates, tuple) and len(planes.gates) == 4
        for k, plane in enumerate(planes.gates):
            assert plane.shape == (T, B, H) and plane.flags.c_contiguous
            np.testing.assert_array_equal(plane, inter.gates[..., k * H:(k + 1) * H])
        for a, b in zip(inter[1:], planes[1:]):
            np.testing.assert_array_equal(a, b)
        grads = [engine.lstm_backward(x, trace, weights, options, dh_steps=dh_steps, dc_steps=dc_steps,
                                      valid=valid) for trace in (inter, planes)]
    for name, a, b in zip(grads[0]._fields, *grads):
        if a is None:
            assert b is None, name
        elif isinstance(a, tuple):
            for p, q in zip(a, b):
                np.testing.assert_array_equal(p, q, err_msg=name)
        else:
            np.testing.assert_array_equal(a, b, err_msg=name)


# several chunks of the in-loop input projection (⌈128 / B⌉ steps each), ended sequences
LATE = BIG + [Case(mode="lstm", batch=40, max_time=9, num_units=70, num_proj=24, input_size=8,
                   lengths=tuple(9 - k % 9 for k in range(40))),
              Case(mode="gru", batch=33, max_time=10, num_units=100, input_size=8),
              Case(mode="lstm", batch=40, max_time=9, num_units=30, input_size=8)]  # batch slices


@pytest.mark.parametrize("delay", [2e-4, 2e-3])
def test_bits_with_late_workers(delay, threads):
    """Workers that come late to a forward loop (after a delay: mid-way, or once it is done)
    take the work from wherever it stands: every team, however it formed, gives one thread's
    bits."""
    native = settings.native_module()
    threads(1)
    expected = [_native_run(case) for case in LATE]
    try:
        native.set_join_delay(delay)
        for n in (2, 3):
            threads(n)
            for case, bits in zip(LATE, expected):
                assert _native_run(case) == bits, (case, n)
    finally:
        native.set_join_delay(0)


@pytest.mark.skipif(not sys.platform.startswith("linux") or len(os.sched_getaffinity(0)) < 2,
                    reason="worker placement needs Linux and two CPUs this process may run on")
def test_workers_kept_off_the_callers_cpu(threads):
    """A job on two threads keeps the workers off the CPU its caller runs on: each worker may run
    on the caller's allowed CPUs but one.  With the placement off they get all of them back at
    the next job.  The bits never change."""
    native = settings.native_module()
    threads(1)
    expected = [_native_run(case) for case in LATE[:2]]
    threads(2)
    allowed = os.sched_getaffinity(0)
    try:
        for on in (True, False, True):
            native.set_worker_placement(on)
            assert [_native_run(case) for case in LATE[:2]] == expected, on
            workers = native.worker_cpus()
            assert workers, "the team has no worker"
            for cpus in workers:
                if on:
                    assert set(cpus) <= allowed and len(allowed - set(cpus)) == 1, (cpus, allowed)
                else:
                    assert set(cpus) == allowed, (cpus, allowed)
    finally:
        native.set_worker_placement(True)


@pytest.mark.parametrize("n_threads", [1, 2, 3])
@pytest.mark.parametrize("shape, axis, view", [
    ((50, 32, 256), 1, "c"), ((32, 50, 256), 1, "transposed"), ((1600, 1024), 0, "c"),
    ((40, 33, 100), 1, "every_other_step"), ((3000, 64), 0, "c"), ((7, 5, 3), 1, "c"),
    ((20, 9, 600), 1, "float64"), ((40, 33, 256), 1, "reversed_features")])
def test_take_rows_is_numpys_take(threads, n_threads, shape, axis, view):
    """The native backend's row gather (batch reordering, live rows) returns exactly np.take's
    array, C-contiguous, for any thread count and for views with strides (batch-major data seen
    time-major, a step slice, float64), and leaves its input alone; layouts it does not copy
    itself (rows not contiguous, small) go to NumPy."""
    from fusedrnn.engines import native as native_engine
    threads(n_threads)
    rng = np.random.default_rng(sum(shape))
    a = rng.standard_normal(shape).astype(np.float64 if view == "float64" else np.float32)
    if view == "transposed":
        a = a.transpose(1, 0, 2)
    elif view == "every_other_step":
        a = a[::2]
    elif view == "reversed_features":
        a = a[..., ::-1]
    before = a.copy()
    n = a.shape[axis]
    for index in (rng.permutation(n), np.sort(rng.choice(n, n // 2, replace=False)), np.array([n - 1, 0, 0])):
        got = native_engine.take_rows(a, index, axis)
        np.testing.assert_array_equal(got, np.take(a, index, axis=axis))
        assert got.flags.c_contiguous and got.dtype == a.dtype
    np.testing.assert_array_equal(a, before)
    with pytest.raises(IndexError, match="out of range"):
        native.gather(np.zeros((2, 3, 4), np.float32), np.array([0, 3]), np.empty((2, 2, 4), np.float32), 2)
    with pytest.raises(ValueError, match="C-contiguous out"):
        native.gather(np.zeros((2, 3, 4), np.float32), np.array([0]), np.empty((2, 1, 4), np.float64), 2)


@pytest.mark.parametrize("isa", ISAS, indirect=True)
def test_every_isa_matches_numpy(isa):
    for case in BIG[:3] + [GRID[2]]:
        results = cudnn_both(case, np.float32)
        assert_close(results["numpy"], results["native"], np.float32, f"{case} on {isa}")
        results = cudnn_both(case, np.float64)
        assert_close(results["numpy"], results["native"], np.float64, f"{case} on {isa}")


@pytest.mark.skipif(not {"avx2", "avx512"} <= set(native.supported_isas()),
                    reason="this CPU/build lacks the AVX2 or the AVX-512 path")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_avx2_and_avx512_give_the_same_bits(dtype):
    """Both FMA copies compute every value by the same operations in the same order (the packed
    micro-kernels' per-element FMA chains, lane-wise activations, dot_columns on 32-byte
    vectors): a model gives the same bits on an AVX2 and an AVX-512 machine."""
    cases = GRID + BIG + ONE_ROW + SLICED + DEEP
    previous = native.isa()
    try:
        bits = {}
        for name in ("avx2", "avx512"):
            native.set_isa(name)
            bits[name] = [_native_run(case, dtype) for case in cases]
            a = {k: v.astype(dtype) for k, v in _block_inputs(7, 3, 5, 21).items()}
            fwd = bo.block_lstm_v2(np.int64(6), *a.values(), cell_clip=0.4, use_peephole=True)
            back = bo.block_lstm_grad_v2(np.int64(6), *a.values(), *fwd, fwd.cs, fwd.h,
                                         use_peephole=True)
            cell = bo.lstm_block_cell(*(v[0] if k == "x" else v for k, v in a.items()))
            bits[name].append(digest(tuple(fwd) + tuple(back) + tuple(cell)))
    finally:
        native.set_isa(previous)
    for case, avx2, avx512 in zip(cases + ["block ops"], bits["avx2"], bits["avx512"]):
        assert avx2 == avx512, case


def test_concurrent_callers_get_sequential_bits(threads):
    threads(2)
    expected = [_native_run(case) for case in BIG]
    failures, done = [], []

    def worker(k):
        try:
            for r in range(3):
                case_index = (k + r) % len(BIG)
                if _native_run(BIG[case_index]) != expected[case_index]:
                    failures.append((k, r))
            done.append(k)
        except Exception as error:  # pragma: no cover - reported below
            failures.append(repr(error))

    workers = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(8)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=300)
    assert len(done) == 8, "a caller did not finish (deadlock?)"
    assert not failures


# ---------------------------------------------------------------------------------------------
# Settings: backend selection is explicit and reported

def test_backend_info_and_settings(threads):
    info = settings.backend_info()
    assert {"backend", "isa", "num_threads", "native_available", "native_error"} <= set(info)
    assert info["native_available"] is True and info["native_error"] is None
    assert info["isa"] in ALL_ISAS
    with settings.backend("numpy"):
        assert settings.get_backend() == "numpy" and settings.backend_info()["backend"] == "numpy"
    with pytest.raises(ValueError, match="backend must be one of native, numpy"):
        settings.set_backend("fortran")
    threads(3)
    assert settings.get_num_threads() == 3 and settings.backend_info()["num_threads"] == 3
    with pytest.raises(ValueError, match="num_threads must be a positive integer"):
        settings.set_num_threads(0)
    with pytest.raises(ValueError, match="instruction set 'sse9' is not available"):
        native.set_isa("sse9")
    assert fusedrnn.set_num_threads is settings.set_num_threads
    assert fusedrnn.get_num_threads is settings.get_num_threads


def _child(code: str, **env) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **env}
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=full_env, capture_output=True,
                          text=True, timeout=120)


def test_environment_selects_backend_threads_and_isa():
    code = "import fusedrnn.settings as s, json; print(json.dumps(s.backend_info()))"
    import json
    info = json.loads(_child(code, FUSEDRNN_BACKEND="numpy", FUSEDRNN_NUM_THREADS="3",
                             FUSEDRNN_ISA="portable").stdout)
    assert (info["backend"], info["num_threads"], info["isa"]) == ("numpy", 3, "portable")
    bad = _child(code, FUSEDRNN_ISA="sse9")
    assert bad.returncode != 0 and "instruction set 'sse9' is not available" in bad.stderr
    bad = _child(code, FUSEDRNN_BACKEND="cuda")
    assert bad.returncode != 0 and "FUSEDRNN_BACKEND must be one of native, numpy, got 'cuda'" in bad.stderr
    bad = _child(code, FUSEDRNN_NUM_THREADS="two")
    assert bad.returncode != 0 and "FUSEDRNN_NUM_THREADS must be a positive integer" in bad.stderr


MISSING = ("import sys; sys.modules['fusedrnn._native'] = None\n"
           "import numpy as np, fusedrnn, fusedrnn.settings as s\n")


def test_missing_extension_falls_back_visibly():
    code = MISSING + ("info = s.backend_info()\n"
                      "assert info['backend'] == 'numpy' and not info['native_available'], info\n"
                      "assert 'import of fusedrnn._native halted' in info['native_error'], info\n"
                      "fusedrnn.cudnn_rnn(np.zeros((2, 1, 3)), np.zeros((1, 1, 4)), np.zeros((1, 1, 4)),"
                      " np.zeros(int(fusedrnn.cudnn_rnn_params_size(1, 4, 3)[0])))\n")
    result = _child(code, FUSEDRNN_BACKEND="")
    assert result.returncode == 0, result.stderr


def test_missing_extension_with_explicit_native_is_an_error():
    code = MISSING + ("fusedrnn.cudnn_rnn(np.zeros((2, 1, 3)), np.zeros((1, 1, 4)), np.zeros((1, 1, 4)),"
                      " np.zeros(int(fusedrnn.cudnn_rnn_params_size(1, 4, 3)[0])))\n")
    result = _child(code, FUSEDRNN_BACKEND="native")
    assert result.returncode != 0
    assert "native extension (fusedrnn._native) is not available" in result.stderr


def test_forked_child_gets_a_working_team(threads):
    """After fork() the team's worker threads do not exist in the child: a multi-threaded call
    there must still finish (the child builds a new team) and give the same bits."""
    threads(2)
    expected = _native_run(BIG[0])
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        try:
            os.close(read)
            ok = _native_run(BIG[0]) == expected
            os.write(write, b"ok" if ok else b"bits")
        finally:
            os._exit(0)
    os.close(write)
    import select
    ready, _, _ = select.select([read], [], [], 120)
    message = os.read(read, 16) if ready else b"timeout"
    os.close(read)
    if not ready:
        os.kill(pid, 9)
    os.waitpid(pid, 0)
    assert message == b"ok"


# ----------------------------------------------------------------------------------------------
# The helpers around the time loops: the team's GEMM and the tiled 2-D copy

@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1, 1), (7, 300), (256, 96), (1000, 33), (64, 40), (9, 17)])
@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("step", [1, 3, -1])
def test_copy_2d_is_an_exact_copy(isa, dtype, shape, transposed, step):
    """Every stride pattern: the register-tiled transposing copies (a transposed source or
    destination), whole and partial tiles and blocks, sliced and reversed sources."""
    from fusedrnn.engines.common import assign_2d
    rng = np.random.default_rng(sum(shape))
    rows, cols = shape
    wide = (cols * abs(step), rows) if transposed else (rows, cols * abs(step))
    source = rng.standard_normal(wide).astype(dtype)
    src = (source.T if transposed else source)[:, ::step]
    assert src.shape == shape
    for dst in (np.empty(shape, dtype), np.empty(shape[::-1], dtype).T):
        native.copy_2d(dst, src)
        assert np.array_equal(dst, src)
        dst[...] = 0
        assign_2d(dst, src)
        assert np.array_equal(dst, src)
    with pytest.raises(ValueError):
        native.copy_2d(np.empty((2, 3), dtype), np.empty((3, 2), dtype))


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("T,B,k", [(1, 1, 1), (3, 1, 7), (50, 16, 256), (7, 5, 33), (1, 9, 40)])
def test_product_sum_is_the_rounded_float64_sum(isa, dtype, T, B, k):
    """The peephole gradients' Σ_{t,b} a ⊙ b (the native Linalg's product_sum), from a gate's
    columns of a [T, B, 4k] array: float32 is the float64 sum of the exact products rounded
    once (to within float64's round-off: equal, or one float32 ulp on a tie), float64 within
    round-off of NumPy's einsum, and thread- and call-independent bits."""
    from fusedrnn.engines import native as native_engine
    rng = np.random.default_rng(T * B * k)
    d_gates = rng.standard_normal((T, B, 4 * k)).astype(dtype)
    c = rng.standard_normal((T, B, k)).astype(dtype)
    a = d_gates[:, :, 2 * k:3 * k]
    got = native_engine.LINALG.product_sum(a, c)
    assert got.dtype == dtype and got.shape == (k,)
    exact = np.einsum("tbk,tbk->k", a.astype(np.float64), c.astype(np.float64))
    if dtype == np.float32:
        assert np.all(np.abs(got - exact.astype(dtype)) <= np.spacing(np.abs(exact).astype(dtype)))
    else:
        np.testing.assert_allclose(got, exact, rtol=1e-12, atol=1e-12 * np.abs(a * c).sum())
    assert np.array_equal(got, native_engine.LINALG.product_sum(a, c))
    if k > 1:  # columns must be contiguous
        with pytest.raises(ValueError):
            native.product_sum(a.reshape(-1, k)[:, ::-1], c.reshape(-1, k), np.empty(k, dtype))


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("N,k", [(1, 1), (1, 2), (5, 3), (15, 9), (16, 8), (17, 33), (40, 31),
                                 (100, 64), (257, 129), (1600, 40)])
@pytest.mark.parametrize("values", ["mixed", "negative_zeros"])
def test_column_sum_gives_numpys_bits(isa, dtype, N, k, values):
    """The bias gradients' Σ_rows (the native Linalg's column_sum) are the NumPy reference's
    (common.column_sum: float32 blocks of 16 rows, float64 totals) bit for bit, signed zeros
    included, from contiguous and from strided rows (a wider array's columns)."""
    from fusedrnn.engines import common
    from fusedrnn.engines import native as native_engine
    rng = np.random.default_rng(N * k)
    if values == "mixed":
        a = (rng.standard_normal((N, k)) * rng.choice([1e-4, 1.0, 1e4], size=(N, k))).astype(dtype)
        a[rng.integers(0, N)] = -0.0
    else:
        a = np.full((N, k), -0.0, dtype)
    wide = np.zeros((N, k + 3), dtype)
    wide[:, :k] = a
    expected = common.column_sum(a).tobytes()
    for operand in (a, wide[:, :k]):
        got = native_engine.LINALG.column_sum(operand)
        assert got.dtype == dtype and got.shape == (k,)
        assert got.tobytes() == expected
    if k > 1:  # columns must be contiguous
        with pytest.raises(ValueError):
            native.column_sum(a[:, ::-1], np.empty(k, dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("M,K,N", [(1, 1, 1), (5, 0, 3), (37, 700, 20), (130, 64, 257),
                                   (301, 300, 33), (400, 2100, 70)])  # rows split: ≥ 96 per thread
def test_team_gemm_matches_float64_and_is_thread_independent(dtype, M, K, N):
    rng = np.random.default_rng(M + K + N)
    a = rng.standard_normal((K, M)).astype(dtype)  # gram orientation: aᵀ b
    b = rng.standard_normal((K, N)).astype(dtype)
    truth = a.astype(np.float64).T @ b.astype(np.float64)
    bound = (K * np.finfo(dtype).eps + 1e-300) * (np.abs(a).T @ np.abs(b)) + np.finfo(dtype).tiny
    results = []
    for accurate in (False, True):
        for threads in (1, 2, 3, 4):
            out = np.empty((M, N), dtype)
            native.gemm(a, b, out, True, False, accurate, threads)
            assert np.all(np.abs(out - truth) <= bound)
            results.append(out)
        assert all(np.array_equal(results[-1], r) for r in results[-4:])
    w = rng.standard_normal((N, K)).astype(dtype)
    out = np.empty((M, N), dtype)
    native.gemm(a.T.copy(), w, out, False, True, False, 2)
    np.testing.assert_allclose(out, a.T.astype(np.float64) @ w.T.astype(np.float64),
                               rtol=0, atol=float(K * np.finfo(dtype).eps * 10 * max(1, np.abs(out).max())))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("P,M,N,keep", [(1, 1, 1, 1.0), (40, 7, 5, 0.0), (300, 37, 70, 0.5),
                                        (1500, 130, 257, 0.7), (2600, 200, 33, 0.4),
                                        (900, 1300, 40, 0.8)])  # K chunks of m_rows' product
def test_team_gemm_row_lists_give_the_gathered_rows_bits(dtype, P, M, N, keep):
    """k_rows / m_rows read (and m_rows writes) the rows in place: the bits of the product of
    the gathered rows, on any team size, in both modes; the other rows of C untouched."""
    rng = np.random.default_rng(P + M + N)
    rows = np.flatnonzero(rng.random(P) < keep).astype(np.int64)
    rows = rows if rows.size or keep == 0.0 else np.array([0], np.int64)
    a = rng.standard_normal((P, M)).astype(dtype)
    b = rng.standard_normal((P, N)).astype(dtype)
    w = rng.standard_normal((M, N)).astype(dtype)
    for threads in (1, 2, 3):
        for accurate in (False, True):
            expected = np.empty((M, N), dtype)
            native.gemm(np.ascontiguousarray(a[rows]), np.ascontiguousarray(b[rows]), expected,
                        True, False, accurate, threads)
            got = np.empty((M, N), dtype)
            native.gemm(a, b, got, True, False, accurate, threads, k_rows=rows)
            assert got.tobytes() == expected.tobytes()
        expected = np.empty((rows.size, N), dtype)
        native.gemm(np.ascontiguousarray(a[rows]), w, expected, False, False, False, threads)
        for w_operand, transposed in ((w, False), (np.ascontiguousarray(w.T), True)):
            got = np.full((P, N), 7.0, dtype)
            native.gemm(a, w_operand, got, False, transposed, False, threads, m_rows=rows)
            assert got[rows].tobytes() == expected.tobytes()
            assert np.all(np.delete(got, rows, axis=0) == 7.0)


def test_team_gemm_empty_row_lists_sum_nothing():
    a = np.ones((5, 3), np.float32)
    got = np.full((2, 3), 9.0, np.float32)
    native.gemm(np.ones((5, 2), np.float32), a, got, True, False, True, 2, k_rows=np.empty(0, np.int64))
    assert np.all(got == 0.0)
    got = np.full((5, 2), 9.0, np.float32)
    native.gemm(a, np.ones((3, 2), np.float32), got, False, False, False, 2, m_rows=np.empty(0, np.int64))
    assert np.all(got == 9.0)


@pytest.mark.parametrize("rows,error", [([0, 0], ValueError), ([2, 1], ValueError), ([3], ValueError),
                                        ([-1], ValueError), (np.array([1.0]), TypeError),
                                        (np.array([0], np.int32), TypeError)])
def test_team_gemm_rejects_bad_row_lists(rows, error):
    rows = rows if isinstance(rows, np.ndarray) else np.array(rows, np.int64)
    a = np.zeros((3, 2), np.float32)
    with pytest.raises(error):
        native.gemm(a, a, np.empty((2, 2), np.float32), True, False, True, 1, k_rows=rows)
    with pytest.raises(error):
        native.gemm(a, np.zeros((2, 2), np.float32), np.empty((3, 2), np.float32), False, False,
                    False, 1, m_rows=rows)
    with pytest.raises(ValueError):  # the orientations each list supports
        native.gemm(a, a, np.empty((2, 2), np.float32), False, False, True, 1,
                    k_rows=np.array([0], np.int64))
    with pytest.raises(ValueError):
        native.gemm(a, np.zeros((2, 2), np.float32), np.empty((3, 2), np.float32), False, False,
                    True, 1, m_rows=np.array([0], np.int64))
