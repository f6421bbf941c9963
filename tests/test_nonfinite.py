"""NaN and Inf propagate as IEEE arithmetic does; no exception, warning or hang (issue 4, item 6).

The guarantees tested here (documented in docs/hardening.md):

* a NaN in one batch row of an input makes that row's dependent outputs/gradients NaN (all
  units, from the NaN's time step on in the direction of the recurrence) and leaves every other
  batch row bit-identical to the NaN-free call; padded steps stay 0;
* a NaN parameter reaches every output that reads it; a NaN upstream gradient reaches every
  parameter gradient;
* +-Inf saturates tanh/sigmoid exactly (an LSTM/GRU/tanh RNN fed an infinite input gives the
  same bits as one fed a huge finite input); ReLU passes it on and Inf - Inf gives NaN;
* ops never emit a RuntimeWarning for non-finite values and never raise FloatingPointError,
  even under ``np.seterr(all="raise")``, and leave the caller's error state as it was.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import fusedrnn  # noqa: E402
from tests.fuzz import cases  # noqa: E402

MODES = ("lstm", "gru", "rnn_tanh", "rnn_relu")


def _strict(call_fn):
    """Run ``call_fn`` with every float error trapping and warnings as errors."""
    before = np.geterr()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with np.errstate(all="raise"):
            result = call_fn()
            assert np.geterr() == {k: "raise" for k in before}, "the op changed the caller's errstate"
    assert np.geterr() == before
    return result


def _cudnn(op, mode, **overrides):
    cfg = cases.default_config(op, mode=mode, **overrides)
    return cases.build(op, "float32", cfg, seed=7)


def _run(call):
    return _strict(lambda: cases.invoke(call))


# --------------------------------------------------------------------------------------
# No warnings, no FloatingPointError


@pytest.mark.parametrize("mode", MODES)
def test_inf_minus_inf_raises_nothing(mode):
    """Regression: +-Inf inputs with all-one weights make Inf - Inf inside the GEMM; the op used to
    leak 'RuntimeWarning: invalid value encountered in matmul' (FloatingPointError under
    np.seterr(all='raise'))."""
    call = _cudnn("cudnn_rnn", mode, L=1, D=1)
    x = call.inputs["input"].copy()
    x[0, 0, :2] = [np.inf, -np.inf]
    params = np.ones_like(call.inputs["params"])
    call = call.replace(inputs=dict(call.inputs, input=x, params=params))
    out = _run(call)
    assert np.isnan(out.output[0, 0]).all() and np.isnan(out.output_h[0, 0]).all()
    assert np.isfinite(out.output[:, 1:]).all(), "other batch rows must stay finite"


@pytest.mark.parametrize("op", ["cudnn_rnn_backprop", "cudnn_rnn_v3", "cudnn_rnn_backprop_v3"])
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_overflow_raises_nothing(op, dtype):
    """Huge finite values overflow (float16 above all); the result is Inf/NaN, never an error."""
    cfg = cases.default_config(op, mode="rnn_relu", L=2, D=2)
    call = cases.build(op, dtype, cfg, seed=3)
    big = np.finfo(dtype).max
    inputs = dict(call.inputs)
    inputs["input"] = np.full_like(inputs["input"], big)
    inputs["params"] = np.full_like(inputs["params"], big)
    if op == "cudnn_rnn_backprop":
        inputs["output_backprop"] = np.full_like(inputs["output_backprop"], big)
    out = _run(call.replace(inputs=inputs))
    assert not np.isfinite(out[0]).all()


# --------------------------------------------------------------------------------------
# CudnnRNN: where a NaN goes


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("D", [1, 2])
def test_nan_input_reaches_its_row_only(mode, D):
    T, B, t0, b0 = 5, 3, 2, 1
    call = _cudnn("cudnn_rnn_v3", mode, L=1, D=D, T=T, B=B, lengths=(5, 4, 3))
    clean = _run(call)
    x = call.inputs["input"].copy()
    x[t0, b0, 0] = np.nan
    dirty = _run(call.replace(inputs=dict(call.inputs, input=x)))
    H = call.cfg["H"]
    length = 4
    fw, bw = dirty.output[..., :H], dirty.output[..., H:]
    assert np.isnan(fw[t0:length, b0]).all(), "forward direction: NaN from t0 to the end"
    np.testing.assert_array_equal(fw[:t0, b0], clean.output[:t0, b0, :H])
    if D == 2:
        assert np.isnan(bw[:t0 + 1, b0]).all(), "backward direction: NaN from t0 back to 0"
        np.testing.assert_array_equal(bw[t0 + 1:length, b0], clean.output[t0 + 1:length, b0, H:])
    assert (dirty.output[length:, b0] == 0).all(), "padded steps stay 0, not NaN"
    for b in (0, 2):
        np.testing.assert_array_equal(dirty.output[:, b], clean.output[:, b])
        np.testing.assert_array_equal(dirty.output_h[:, b], clean.output_h[:, b])
    assert np.isnan(dirty.output_h[:, b0]).all()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("D", [1, 2])
def test_nan_input_reaches_the_layers_above(mode, D):
    T, B, t0, b0 = 5, 3, 2, 0
    call = _cudnn("cudnn_rnn", mode, L=2, D=D, T=T, B=B)
    clean = _run(call)
    x = call.inputs["input"].copy()
    x[t0, b0, 1] = np.nan
    dirty = _run(call.replace(inputs=dict(call.inputs, input=x)))
    top = dirty.output[:, b0]
    if D == 2:  # layer 1 reads [fw ; bw] of layer 0: NaN at every step
        assert np.isnan(top).all()
    else:
        assert np.isnan(top[t0:]).all()
        np.testing.assert_array_equal(top[:t0], clean.output[:t0, b0])
    np.testing.assert_array_equal(dirty.output[:, 1:], clean.output[:, 1:])
    if mode == "lstm":
        np.testing.assert_array_equal(dirty.output_c[:, 1:], clean.output_c[:, 1:])


@pytest.mark.parametrize("mode", MODES)
def test_nan_bias_reaches_every_output(mode):
    T = 4
    call = _cudnn("cudnn_rnn", mode, L=1, D=1, T=T)
    params = call.inputs["params"].copy()
    H, G = call.cfg["H"], cases.GATES[mode]
    params[-2 * G * H] = np.nan  # the first input bias (bW of gate 0, unit 0)
    out = _run(call.replace(inputs=dict(call.inputs, params=params)))
    assert np.isnan(out.output[0, :, 0]).all(), "unit 0 at step 0"
    assert np.isnan(out.output[1:]).all(), "the recurrence spreads it to every unit from step 1"


@pytest.mark.parametrize("mode", MODES)
def test_nan_upstream_gradient(mode):
    T, B, t0, b0 = 4, 3, 2, 0
    call = _cudnn("cudnn_rnn_backprop", mode, L=1, D=1, T=T, B=B)
    clean = _run(call)
    g = call.inputs["output_backprop"].copy()
    g[t0, b0, 0] = np.nan
    dirty = _run(call.replace(inputs=dict(call.inputs, output_backprop=g)))
    assert np.isnan(dirty.input_backprop[:t0 + 1, b0]).all(), "flows back in time from t0"
    np.testing.assert_array_equal(dirty.input_backprop[t0 + 1:, b0], clean.input_backprop[t0 + 1:, b0])
    for b in (1, 2):
        np.testing.assert_array_equal(dirty.input_backprop[:, b], clean.input_backprop[:, b])
        np.testing.assert_array_equal(dirty.input_h_backprop[:, b], clean.input_h_backprop[:, b])
    assert np.isnan(dirty.input_h_backprop[:, b0]).all()
    assert np.isnan(dirty.params_backprop).all(), "every parameter gradient sums over the batch"


@pytest.mark.parametrize("mode", ["lstm", "gru", "rnn_tanh"])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_inf_input_saturates_like_a_huge_input(mode, sign):
    """tanh(+-Inf) = +-1 and sigma(+-Inf) = 1 or 0 exactly: the same bits as a huge finite input."""
    call = _cudnn("cudnn_rnn", mode, L=2, D=2)
    x_inf, x_big = call.inputs["input"].copy(), call.inputs["input"].copy()
    x_inf[1, 0, 0] = sign * np.inf
    x_big[1, 0, 0] = sign * 1e30
    inf = _run(call.replace(inputs=dict(call.inputs, input=x_inf)))
    big = _run(call.replace(inputs=dict(call.inputs, input=x_big)))
    assert np.isfinite(inf.output).all() and np.isfinite(inf.output_h).all()
    np.testing.assert_array_equal(inf.output, big.output)
    np.testing.assert_array_equal(inf.output_h, big.output_h)


def test_inf_input_relu_passes_it_on():
    call = _cudnn("cudnn_rnn", "rnn_relu", L=1, D=1, T=3)
    params = np.abs(call.inputs["params"])  # positive weights: +Inf stays +Inf through the ReLU
    x = call.inputs["input"].copy()
    x[0, 0, 0] = np.inf
    out = _run(call.replace(inputs=dict(call.inputs, input=x, params=params)))
    assert np.isposinf(out.output[0, 0]).all()
    assert np.isfinite(out.output[:, 1:]).all()


# --------------------------------------------------------------------------------------
# Block ops


def _block(op, **overrides):
    cfg = cases.default_config(op, **overrides)
    return cases.build(op, "float32", cfg, seed=5)


@pytest.mark.parametrize("op", ["block_lstm", "block_lstm_v2"])
@pytest.mark.parametrize("cell_clip", [3.0, 0.0])
def test_block_lstm_nan_input_reaches_its_row_only(op, cell_clip):
    T, t0, b0, slm = 5, 1, 2, 4
    call = _block(op, T=T, B=3, slm=slm, cell_clip=cell_clip)
    clean = _run(call)
    x = call.inputs["x"].copy()
    x[t0, b0, 0] = np.nan
    dirty = _run(call.replace(inputs=dict(call.inputs, x=x)))
    for name in ("cs", "h", "i", "f", "o", "ci", "co"):
        got, ref = getattr(dirty, name), getattr(clean, name)
        assert np.isnan(got[t0:slm, b0]).all(), name
        np.testing.assert_array_equal(got[:t0], ref[:t0])
        np.testing.assert_array_equal(got[:, :b0], ref[:, :b0])
        assert (got[slm:] == 0).all(), f"{name} past seq_len_max stays 0"


@pytest.mark.parametrize("op", ["block_lstm_grad", "block_lstm_grad_v2"])
def test_block_lstm_grad_nan_gradient(op):
    t0, b0 = 2, 1
    call = _block(op, T=4, B=3, slm=4)
    clean = _run(call)
    h_grad = call.inputs["h_grad"].copy()
    h_grad[t0, b0, 0] = np.nan
    dirty = _run(call.replace(inputs=dict(call.inputs, h_grad=h_grad)))
    assert np.isnan(dirty.x_grad[:t0 + 1, b0]).all()
    np.testing.assert_array_equal(dirty.x_grad[t0 + 1:], clean.x_grad[t0 + 1:])
    np.testing.assert_array_equal(dirty.x_grad[:, [0, 2]], clean.x_grad[:, [0, 2]])
    assert np.isnan(dirty.w_grad).all() and np.isnan(dirty.b_grad).all()
    assert np.isnan(dirty.h_prev_grad[b0]).all() and np.isfinite(dirty.h_prev_grad[[0, 2]]).all()


@pytest.mark.parametrize("value, expected", [(np.inf, 3.0), (-np.inf, -3.0), (np.nan, np.nan)])
def test_cell_clip_of_non_finite_cell_state(value, expected):
    """clip(+-Inf) is the clip value; NaN passes through the clip (block_ops.md §2)."""
    call = _block("lstm_block_cell", use_peephole=False, cell_clip=3.0)
    cs_prev = call.inputs["cs_prev"].copy()
    cs_prev[0, 0] = value
    out = _run(call.replace(inputs=dict(call.inputs, cs_prev=cs_prev)))
    np.testing.assert_array_equal(out.cs[0, 0], expected)
    np.testing.assert_array_equal(out.cs[1:], _run(call).cs[1:])


def test_lstm_block_cell_nan_forget_bias():
    call = _block("lstm_block_cell")
    out = _run(call.replace(attrs=dict(call.attrs, forget_bias=float("nan"))))
    assert np.isnan(out.f).all() and np.isnan(out.cs).all() and np.isnan(out.h).all()
    np.testing.assert_array_equal(out.i, _run(call).i)


@pytest.mark.parametrize("op", ["lstm_block_cell", "gru_block_cell"])
def test_cell_nan_row(op):
    call = _block(op, B=3)
    clean = _run(call)
    x = call.inputs["x"].copy()
    x[1, 0] = np.nan
    dirty = _run(call.replace(inputs=dict(call.inputs, x=x)))
    for name, got in zip(dirty._fields, dirty):
        assert np.isnan(got[1]).all(), name
        np.testing.assert_array_equal(got[[0, 2]], getattr(clean, name)[[0, 2]])


@pytest.mark.parametrize("op", ["lstm_block_cell_grad", "gru_block_cell_grad"])
def test_cell_grad_nan_row(op):
    call = _block(op, B=3)
    name = "h_grad" if op == "lstm_block_cell_grad" else "d_h"
    clean = _run(call)
    g = call.inputs[name].copy()
    g[1, 0] = np.nan
    dirty = _run(call.replace(inputs=dict(call.inputs, **{name: g})))
    for field, got in zip(dirty._fields, dirty):
        ref = getattr(clean, field)
        if got.ndim == 2:  # per-row outputs
            assert np.isnan(got[1]).any(), field
            np.testing.assert_array_equal(got[[0, 2]], ref[[0, 2]])


@pytest.mark.parametrize("op", ["block_lstm", "lstm_block_cell", "gru_block_cell", "block_lstm_grad"])
def test_block_inf_minus_inf_raises_nothing(op):
    call = _block(op)
    inputs = dict(call.inputs)
    x = inputs["x"].copy()
    x[..., 0, :2] = [np.inf, -np.inf]
    inputs["x"] = x
    for name in ("w", "w_ru", "w_c"):
        if name in inputs:
            inputs[name] = np.ones_like(inputs[name])
    _run(call.replace(inputs=inputs))


# --------------------------------------------------------------------------------------
# Padding is never read


@pytest.mark.parametrize("backend", ["numpy", "native"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("D", [1, 2])
@pytest.mark.parametrize("time_major", [True, False])
@pytest.mark.parametrize("fill", [np.nan, np.inf])
def test_padding_is_never_read(backend, mode, D, time_major, fill):
    """Spec §5.1: padded input positions have no influence on anything and padded steps ignore
    ``output_backprop``.  NaN or Inf there (0 · NaN is NaN: a mask multiplied in would let it
    through) gives the bits of zero padding: forward outputs and every gradient, two layers."""
    from fusedrnn import settings

    T, B, I, H, L = 5, 4, 3, 4, 2
    lengths = np.array([5, 2, 4, 1], np.int32)
    direction = "bidirectional" if D == 2 else "unidirectional"
    attrs = dict(rnn_mode=mode, direction=direction, time_major=time_major)
    rng = np.random.default_rng(3)
    size = int(fusedrnn.cudnn_rnn_params_size(num_layers=L, num_units=H, input_size=I, T=np.float32,
                                              S=np.int64, rnn_mode=mode, direction=direction)[0])
    params = rng.uniform(-0.5, 0.5, size).astype(np.float32)
    h = rng.standard_normal((L * D, B, H) if time_major else (B, L * D, H)).astype(np.float32)
    c = h + np.float32(0.25)
    x_clean = rng.standard_normal((T, B, I)).astype(np.float32)
    dy_clean = rng.standard_normal((T, B, D * H)).astype(np.float32)
    padded = np.arange(T)[:, None] >= lengths[None, :]  # [T, B]
    x_clean[padded], dy_clean[padded] = 0, 0
    x_dirty, dy_dirty = x_clean.copy(), dy_clean.copy()
    x_dirty[padded], dy_dirty[padded] = fill, -fill
    dh, dc = np.ones_like(h), np.full_like(c, 0.5)

    def run(x, dy):
        if not time_major:
            x, dy = x.transpose(1, 0, 2).copy(), dy.transpose(1, 0, 2).copy()
        fwd = fusedrnn.cudnn_rnn_v3(x, h, c, params, lengths, is_training=True, **attrs)
        grads = fusedrnn.cudnn_rnn_backprop_v3(x, h, c, params, lengths, fwd.output, fwd.output_h,
                                               fwd.output_c, dy, dh, dc, fwd.reserve_space,
                                               fwd.host_reserved, **attrs)
        return {**{k: fwd[i] for i, k in enumerate(("output", "output_h", "output_c"))}, **grads._asdict()}

    with settings.backend(backend):
        clean, dirty = _strict(lambda: run(x_clean, dy_clean)), _strict(lambda: run(x_dirty, dy_dirty))
    for name, value in clean.items():
        np.testing.assert_array_equal(dirty[name], value, err_msg=name)
    assert np.isfinite(dirty["params_backprop"]).all()


@pytest.mark.parametrize("backend", ["numpy", "native"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("L, D, P, lengths", [(1, 1, 0, None), (2, 2, 0, (4, 1, 3)), (2, 1, 2, None)])
def test_params_backprop_is_written_everywhere(backend, mode, L, D, P, lengths, monkeypatch):
    """The flat weight gradient is allocated without a zero fill (every element is written by
    the backward): with its buffer full of NaN before, no NaN is left in params_backprop."""
    from fusedrnn import settings
    from fusedrnn.cudnn import _stack

    if P and mode != "lstm":
        pytest.skip("projection: LSTM only")

    def nan_filled(shape, dtype):
        out = np.empty(shape, dtype)
        out.fill(np.nan)
        return out

    monkeypatch.setattr(_stack, "aligned_empty", nan_filled)
    call = _cudnn("cudnn_rnn_backprop_v3", mode, L=L, D=D, P=P, T=4, B=3, lengths=lengths)
    with settings.backend(backend):
        result = _run(call)
    assert np.isfinite(result.params_backprop).all()
    assert np.isfinite(result.input_backprop).all()
