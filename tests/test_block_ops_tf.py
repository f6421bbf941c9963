"""The eight block ops against TensorFlow 2.21 (``tf.raw_ops``, CPU, eager) on the same random
inputs (spec block_ops.md §11): every forward output, every gradient output (the gradient ops are
fed TensorFlow's own forward outputs), the default attributes, the raw_ops signatures, and the
wording of every error TensorFlow reports (not aborts on).

Never compared: the gate outputs ``i, f, o, ci, co`` past ``seq_len_max`` (uninitialised memory
in TF; zeros here).  No GradientTape through BlockLSTMV2 (its registered gradient uses the V1
layout, spec §5): the gradient kernels are called directly.

Tolerances (spec §10): float32 ``rtol=1e-4, atol=1e-5``; float16 ``2e-2`` (TF computes in half
precision, fusedrnn in float32 then rounds).  For the gradient ops ``atol`` is scaled by the
largest magnitude of the expected output, because ``w_grad``/``b_grad`` sum ``T*B`` terms.
"""

import inspect
import os
import re

os.environ.setdefault("TF_CPP_MINLOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from fusedrnn import block_ops as bo  # noqa: E402
from fusedrnn import raw_ops  # noqa: E402

pytestmark = pytest.mark.tf

TOL = {np.float32: (1e-4, 1e-5), np.float16: (2e-2, 2e-2)}
GATES = ("i", "cs", "f", "o", "ci", "co")
OPS = ["BlockLSTM", "BlockLSTMV2", "BlockLSTMGrad", "BlockLSTMGradV2", "LSTMBlockCell", "LSTMBlockCellGrad",
       "GRUBlockCell", "GRUBlockCellGrad"]
OURS = {"BlockLSTM": bo.block_lstm, "BlockLSTMV2": bo.block_lstm_v2, "BlockLSTMGrad": bo.block_lstm_grad,
        "BlockLSTMGradV2": bo.block_lstm_grad_v2, "LSTMBlockCell": bo.lstm_block_cell,
        "LSTMBlockCellGrad": bo.lstm_block_cell_grad, "GRUBlockCell": bo.gru_block_cell,
        "GRUBlockCellGrad": bo.gru_block_cell_grad}


@pytest.fixture(scope="module")
def tf():
    return pytest.importorskip("tensorflow", reason="TensorFlow (tensorflow-cpu==2.21.0) is the oracle for the "
                                                    "block ops and is not installed")


def run_tf(tf, op, **kwargs):
    return [t.numpy() for t in getattr(tf.raw_ops, op)(**kwargs)]


def lstm_inputs(T, B, I, n, dtype, seed, cell=False):
    rng = np.random.default_rng(seed)

    def u(*shape, scale=1.0):
        return (scale * rng.uniform(-1, 1, shape)).astype(np.float32).astype(dtype)

    return dict(x=u(B, I) if cell else u(T, B, I), cs_prev=u(B, n), h_prev=u(B, n), w=u(I + n, 4 * n, scale=0.8),
                wci=u(n), wcf=u(n), wco=u(n), b=u(4 * n, scale=0.5))


def assert_close(mine, expected, dtype, what, grad=False):
    rtol, atol = TOL[dtype]
    assert mine.dtype == dtype and mine.shape == expected.shape, what
    if grad:
        atol *= max(1.0, float(np.abs(expected.astype(np.float64)).max(initial=0)))
    np.testing.assert_allclose(mine.astype(np.float64), expected.astype(np.float64), rtol=rtol, atol=atol,
                               err_msg=what)


SIZES = [(1, 1, 1, 1), (3, 2, 4, 5), (6, 4, 3, 8)]
CLIPS = {"clip_off": 0.0, "clip_inactive": 50.0, "clip_active": 0.5}


# ---------------------------------------------------------------------------------------------
# BlockLSTM / BlockLSTMV2 and their gradients

@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("slm", ["zero", "partial", "full"])
@pytest.mark.parametrize("clip", CLIPS)
@pytest.mark.parametrize("use_peephole", [False, True], ids=["nopeep", "peep"])
@pytest.mark.parametrize("sizes", SIZES, ids=lambda s: "T{}B{}I{}n{}".format(*s))
@pytest.mark.parametrize("version", ["", "V2"])
def test_block_lstm_and_grad_match_tensorflow(tf, version, sizes, use_peephole, clip, slm, dtype):
    T, B, I, n = sizes
    L = {"zero": 0, "partial": T // 2, "full": T}[slm]
    a = lstm_inputs(T, B, I, n, dtype, seed=T * 100 + n)
    attrs = dict(cell_clip=CLIPS[clip], use_peephole=use_peephole)
    if not version:
        attrs["forget_bias"] = 0.7
    ref = run_tf(tf, f"BlockLSTM{version}", seq_len_max=np.int64(L), **a, **attrs)
    out = OURS[f"BlockLSTM{version}"](np.int64(L), **a, **attrs)
    for name, mine, expected in zip(out._fields, out, ref):
        assert_close(mine[:L], expected[:L], dtype, name)
        assert not mine[L:].any(), f"{name} past seq_len_max"
    np.testing.assert_array_equal(ref[1][L:], 0)
    np.testing.assert_array_equal(ref[6][L:], 0)
    if clip == "clip_active" and L > 0 and n > 1:
        assert np.isclose(np.abs(out.cs).max(), 0.5), "the clip should be active"

    rng = np.random.default_rng(T + B)
    cs_grad, h_grad = (rng.uniform(-1, 1, (T, B, n)).astype(np.float32).astype(dtype) for _ in range(2))
    fwd = dict(zip(bo.BlockLSTMResult._fields, ref))  # TF's own forward outputs, tails included
    grad_ref = run_tf(tf, f"BlockLSTMGrad{version}", seq_len_max=np.int64(L), **a, **fwd, cs_grad=cs_grad,
                      h_grad=h_grad, use_peephole=use_peephole)
    grads = OURS[f"BlockLSTMGrad{version}"](np.int64(L), **a, **fwd, cs_grad=cs_grad, h_grad=h_grad,
                                             use_peephole=use_peephole)
    for name, mine, expected in zip(grads._fields, grads, grad_ref):
        assert_close(mine, expected, dtype, name, grad=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("forget_bias", [0.0, 1.0, 2.5, -1.5])
def test_forget_bias_matches_tensorflow(tf, forget_bias, dtype):
    T, B, I, n = 4, 3, 2, 5
    a = lstm_inputs(T, B, I, n, dtype, seed=11)
    attrs = dict(forget_bias=forget_bias, cell_clip=0.5, use_peephole=True)
    ref = run_tf(tf, "BlockLSTM", seq_len_max=np.int64(3), **a, **attrs)
    out = bo.block_lstm(3, **a, **attrs)
    for name, mine, expected in zip(out._fields, out, ref):
        assert_close(mine[:3], expected[:3], dtype, name)
    c = dict(a, x=a["x"][0])
    ref = run_tf(tf, "LSTMBlockCell", **c, **attrs)
    for name, mine, expected in zip(out._fields, bo.lstm_block_cell(**c, **attrs), ref):
        assert_close(mine, expected, dtype, name)


@pytest.mark.parametrize("op", ["BlockLSTM", "BlockLSTMV2", "LSTMBlockCell"])
def test_default_attributes_match_tensorflow(tf, op):
    """No attributes: BlockLSTM/LSTMBlockCell clip at 3.0 with forget_bias 1.0; V2 does not clip."""
    T, B, I, n = 8, 2, 3, 4
    a = lstm_inputs(T, B, I, n, np.float32, seed=12)
    a["b"] = np.full(4 * n, 3.0, np.float32)  # i, f, ci near 1: cs grows past 3 within a few steps
    if op == "LSTMBlockCell":
        a = dict(a, x=a["x"][0], cs_prev=np.full((B, n), 2.8, np.float32))
        ref, out = run_tf(tf, op, **a), OURS[op](**a)
    else:
        ref, out = run_tf(tf, op, seq_len_max=np.int64(T), **a), OURS[op](T, **a)
    for name, mine, expected in zip(out._fields, out, ref):
        assert_close(mine, expected, np.float32, name)
    assert (np.abs(out.cs).max() == 3.0) == (op != "BlockLSTMV2")


# ---------------------------------------------------------------------------------------------
# LSTMBlockCell / LSTMBlockCellGrad

@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("clip", CLIPS)
@pytest.mark.parametrize("use_peephole", [False, True], ids=["nopeep", "peep"])
@pytest.mark.parametrize("sizes", [(1, 1, 1), (3, 4, 5), (4, 3, 8)], ids=lambda s: "B{}I{}n{}".format(*s))
def test_lstm_block_cell_and_grad_match_tensorflow(tf, sizes, use_peephole, clip, dtype):
    B, I, n = sizes
    a = lstm_inputs(0, B, I, n, dtype, seed=B * 10 + n, cell=True)
    a["cs_prev"] = (2 * a["cs_prev"]).astype(dtype)  # large enough for the clip at 0.5 to act
    attrs = dict(forget_bias=1.0, cell_clip=CLIPS[clip], use_peephole=use_peephole)
    ref = run_tf(tf, "LSTMBlockCell", **a, **attrs)
    out = bo.lstm_block_cell(**a, **attrs)
    for name, mine, expected in zip(out._fields, out, ref):
        assert_close(mine, expected, dtype, name)
    rng = np.random.default_rng(B + n)
    cs_grad, h_grad = (rng.uniform(-1, 1, (B, n)).astype(np.float32).astype(dtype) for _ in range(2))
    fwd = dict(zip(GATES, ref))
    grad_ref = run_tf(tf, "LSTMBlockCellGrad", **a, **fwd, cs_grad=cs_grad, h_grad=h_grad, use_peephole=use_peephole)
    grads = bo.lstm_block_cell_grad(**a, **fwd, cs_grad=cs_grad, h_grad=h_grad, use_peephole=use_peephole)
    for name, mine, expected in zip(grads._fields, grads, grad_ref):
        assert_close(mine, expected, dtype, name, grad=True)


# ---------------------------------------------------------------------------------------------
# GRUBlockCell / GRUBlockCellGrad (TF: float32 only)

@pytest.mark.parametrize("sizes", [(1, 1, 1), (3, 4, 5), (5, 2, 7)], ids=lambda s: "B{}I{}n{}".format(*s))
def test_gru_block_cell_and_grad_match_tensorflow(tf, sizes):
    B, I, n = sizes
    rng = np.random.default_rng(B * I * n)

    def u(*shape):
        return rng.uniform(-1, 1, shape).astype(np.float32)

    a = dict(x=u(B, I), h_prev=u(B, n), w_ru=u(I + n, 2 * n), w_c=u(I + n, n), b_ru=u(2 * n), b_c=u(n))
    ref = run_tf(tf, "GRUBlockCell", **a)
    out = bo.gru_block_cell(**a)
    for name, mine, expected in zip(out._fields, out, ref):
        assert_close(mine, expected, np.float32, name)
    d_h = u(B, n)
    grad_ref = run_tf(tf, "GRUBlockCellGrad", **a, r=ref[0], u=ref[1], c=ref[2], d_h=d_h)
    grads = bo.gru_block_cell_grad(**a, r=ref[0], u=ref[1], c=ref[2], d_h=d_h)
    for name, mine, expected in zip(grads._fields, grads, grad_ref):
        assert_close(mine, expected, np.float32, name, grad=True)


# ---------------------------------------------------------------------------------------------
# API surface

@pytest.mark.parametrize("op", OPS)
def test_raw_ops_signature_and_outputs_match_tensorflow(tf, op):
    theirs = inspect.signature(getattr(tf.raw_ops, op)).parameters
    ours = inspect.signature(getattr(raw_ops, op)).parameters
    assert list(ours) == list(theirs)
    for name, p in theirs.items():
        assert (ours[name].default is inspect.Parameter.empty) == (p.default is inspect.Parameter.empty), name
        if p.default is not inspect.Parameter.empty:
            assert ours[name].default == p.default, name
    from tensorflow.python.ops import gen_rnn_ops
    result_type = inspect.signature(OURS[op]).return_annotation
    fields = getattr(gen_rnn_ops, f"_{op}Output")._fields
    assert getattr(bo, result_type)._fields == fields


# ---------------------------------------------------------------------------------------------
# Error messages: wherever TF 2.21 raises (rather than aborting), our message contains TF's text

T, B, I, N = 3, 2, 4, 5  # shapes of the error cases (spec §6)


def _valid(op):
    a = lstm_inputs(T, B, I, N, np.float32, seed=0)
    seq = {k: np.zeros((T, B, N), np.float32) for k in ("i", "cs", "f", "o", "ci", "co", "h", "cs_grad", "h_grad")}
    cell = {k: np.zeros((B, N), np.float32) for k in (*GATES, "cs_grad", "h_grad")}
    gru = dict(x=a["x"][0], h_prev=a["h_prev"], w_ru=np.zeros((I + N, 2 * N), np.float32),
               w_c=np.zeros((I + N, N), np.float32), b_ru=np.zeros(2 * N, np.float32),
               b_c=np.zeros(N, np.float32))
    return {
        "BlockLSTM": dict(seq_len_max=np.int64(T), **a),
        "BlockLSTMV2": dict(seq_len_max=np.int64(T), **a),
        "BlockLSTMGrad": dict(seq_len_max=np.int64(T), **a, **seq, use_peephole=False),
        "BlockLSTMGradV2": dict(seq_len_max=np.int64(T), **a, **seq, use_peephole=False),
        "LSTMBlockCell": dict(a, x=a["x"][0]),
        "LSTMBlockCellGrad": dict(a, x=a["x"][0], **cell, use_peephole=False),
        "GRUBlockCell": gru,
        "GRUBlockCellGrad": dict(gru, **{k: np.zeros((B, N), np.float32) for k in ("r", "u", "c", "d_h")}),
    }[op]


def _z(*shape):
    return np.zeros(shape, np.float32)


BLOCK_CASES = [dict(seq_len_max=np.array([T])), dict(x=_z(T, B)), dict(cs_prev=_z(B)), dict(cs_prev=_z(3, N)),
               dict(cs_prev=_z(B, 6)), dict(h_prev=_z(B)), dict(h_prev=_z(3, N)), dict(h_prev=_z(B, 6)),
               dict(w=_z(9)), dict(w=_z(10, 20)), dict(w=_z(9, 24)), dict(wci=_z(1, N)), dict(wci=_z(6)),
               dict(wcf=_z(1, N)), dict(wcf=_z(6)), dict(wco=_z(N, 1)), dict(wco=_z(4)), dict(b=_z(1, 20)),
               dict(b=_z(21)), dict(w=_z(10, 20), b=_z(21))]
GRAD_CASES = [dict(seq_len_max=np.array([T])), dict(x=_z(T, B)), dict(cs_prev=_z(B)), dict(h_prev=_z(B, N, 1)),
              dict(w=_z(9)), dict(w=_z(11, 20)), dict(w=_z(9, 0)), dict(wci=_z(1, N)), dict(wcf=_z()),
              dict(wco=_z(1, N)), dict(b=_z(1, 20)), dict(b=_z(24)), dict(b=_z(16)),
              *[{k: _z(B, N)} for k in (*GATES, "h")]]
CELL_CASES = [dict(x=_z(B, I, 1)), dict(cs_prev=_z(B, N, 1)), dict(h_prev=_z(B, N, 1)), dict(w=_z(20)),
              dict(w=_z(I + N, 4 * N, 1)), dict(b=_z(1, 4 * N)), dict(b=_z(4 * N, 1)), dict(wci=_z(1, N)),
              dict(wcf=_z()), dict(wco=_z(N, 1)), dict(cs_prev=_z(3, N)), dict(h_prev=_z(3, N)),
              dict(h_prev=_z(B, 6)), dict(w=_z(10, 20)), dict(w=_z(9, 24)), dict(b=_z(21)),
              dict(x=_z(3, I), b=_z(21)), dict(x=_z(B, I, 1), b=_z(21)), dict(wci=_z(1, N), b=_z(21))]
CELL_GRAD_CASES = [dict(cs_prev=_z(3, N)), dict(h_prev=_z(B, 6)), dict(w=_z(9, 24)), dict(b=_z(1, 20)),
                   *[{k: _z(3, N)} for k in (*GATES, "cs_grad", "h_grad")],
                   *[{k: _z(B, 6)} for k in (*GATES, "cs_grad", "h_grad")]]
GRU_CASES = [dict(x=_z(B)), dict(x=_z(B, I, 1)), dict(h_prev=_z(B)), dict(h_prev=_z(3, N)), dict(w_ru=_z(10)),
             dict(w_ru=_z(10, 10)), dict(w_ru=_z(9, 11)), dict(w_c=_z(9)), dict(w_c=_z(10, 5)), dict(w_c=_z(9, 6)),
             dict(b_ru=_z(1, 10)), dict(b_ru=_z(11)), dict(b_c=_z(1, 5)), dict(b_c=_z(6))]
GRU_GRAD_CASES = [{k: v} for k in ("r", "u", "c", "d_h") for v in (_z(B), _z(3, N), _z(B, 6))]

ERROR_CASES = ([(op, c) for op in ("BlockLSTM", "BlockLSTMV2") for c in BLOCK_CASES]
               + [(op, c) for op in ("BlockLSTMGrad", "BlockLSTMGradV2") for c in GRAD_CASES]
               + [("LSTMBlockCell", c) for c in CELL_CASES] + [("LSTMBlockCellGrad", c) for c in CELL_GRAD_CASES]
               + [(op, c) for op in ("GRUBlockCell", "GRUBlockCellGrad") for c in GRU_CASES]
               + [("GRUBlockCellGrad", c) for c in GRU_GRAD_CASES])

# TF typos that fusedrnn does not copy (spec §6.4, §6.5)
TYPOS = [(re.compile(r"^i\.dim_size\(1\)"), "f", "f.dim_size(1)"),
         (re.compile(r"^Rank of w_ru_ "), None, "Rank of w_ru "),
         (re.compile(r"^Rank of w_c "), "c", "Rank of c ")]


def _case_id(case):
    op, change = case
    return op + "-" + "-".join(f"{k}{list(v.shape)}" for k, v in change.items())


@pytest.mark.parametrize("case", ERROR_CASES, ids=[_case_id(c) for c in ERROR_CASES])
def test_error_messages_contain_tensorflows_text(tf, case):
    op, change = case
    kwargs = dict(_valid(op), **change)
    with pytest.raises(tf.errors.InvalidArgumentError) as tf_error:
        getattr(tf.raw_ops, op)(**kwargs)
    expected = re.search(r"\}\} (.*?) \[Op:", tf_error.value.message, re.S).group(1)
    for pattern, only_for, replacement in TYPOS:
        if pattern.search(expected) and (only_for is None or only_for in change):
            expected = pattern.sub(replacement, expected)
    with pytest.raises(ValueError) as ours:
        getattr(raw_ops, op)(**kwargs)
    assert expected in str(ours.value)
