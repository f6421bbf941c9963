"""The LSTM sequence engine, shared by the CudnnRNN LSTM and the BlockLSTM family.

Shape legend: T steps, B batch, H cell size, Hout emitted size (P with a
projection, else H), ``in`` input size.  Arrays are time-major, in scan order.

Gate math per step (internal gate order **i, f, c, o**; ``layout="icfo"`` lets a
caller hand over weights and receive gate gradients in BlockLSTM's i, c, f, o
column order instead)::

    G   = x_t W + b  +  h_{t-1} R                     (W [in, 4H], R [Hout, 4H])
    i   = σ(G_i + c_{t-1} ⊙ wci)                      (peephole terms only with use_peephole)
    f   = σ(G_f + forget_bias + c_{t-1} ⊙ wcf)
    c'  = tanh(G_c)
    c_t = clip(f ⊙ c_{t-1} + i ⊙ c',  cell_clip)      (clip only when cell_clip > 0)
    o   = σ(G_o + c_t ⊙ wco)
    m_t = o ⊙ tanh(c_t);   h_t = m_t (no projection) or m_t W_P  (W_P [H, P])

cuDNN's LSTM is the special case without peepholes, forget bias and clip.  The
backward pass is plain BPTT of these equations except that, like TensorFlow's
kernels, it treats the clip as the identity (straight-through).
"""

from __future__ import annotations

import functools

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from .common import (NO_OUT, NUMPY_LINALG, Linalg, WeightGradOut, carry, freeze, input_backward, input_projection, live_rows_linalg,
                     outer_sum, trace_arrays, zero_ended)


@dataclass(frozen=True)
class LSTMOptions:
    layout: str = "ifco"  # column order of W, R, b and of the gate gradients
    forget_bias: float = 0.0
    cell_clip: float = 0.0  # > 0 clips c_t to [-cell_clip, cell_clip]
    use_peephole: bool = False


CUDNN_LSTM = LSTMOptions()


def to_ifco(a: np.ndarray, layout: str) -> np.ndarray:
    """Reorder the last axis (4 gate blocks) from ``layout`` to i, f, c, o (self-inverse)."""
    if layout == "ifco":
        return a
    n = a.shape[-1] // 4
    if a.ndim == 2 and not a.flags.c_contiguous and a.T.flags.c_contiguous:
        # a transposed view (a native weight gradient): move whole rows of its C-contiguous base
        rows = a.T
        return np.concatenate([rows[:n], rows[2 * n:3 * n], rows[n:2 * n], rows[3 * n:]]).T
    return np.concatenate([a[..., :n], a[..., 2 * n:3 * n], a[..., n:2 * n], a[..., 3 * n:]],
                          axis=-1)


def gate_blocks(layout: str) -> tuple | None:
    """The column blocks of a ``layout`` matrix that hold gates i, f, c, o (None: ``ifco``)."""
    return None if layout == "ifco" else tuple(layout.index(gate) for gate in "ifco")


class LSTMWeights(NamedTuple):
    """Weights in the compute dtype, columns in ``options.layout`` order.

    w_input [in, 4H] or None (skip input: every gate gets x), w_recurrent [Hout, 4H],
    bias [4H] (all biases summed), w_proj [H, P] or None, peepholes (wci, wcf, wco)
    each [H] or None.
    """

    w_input: np.ndarray | None
    w_recurrent: np.ndarray
    bias: np.ndarray
    w_proj: np.ndarray | None = None
    peepholes: tuple | None = None


class LSTMTrace(NamedTuple):
    """What the forward pass keeps for the backward pass (scan order).

    gates [T, B, 4H]: activations i, f, c', o (always i, f, c, o order), or a tuple of the four
    as [T, B, H] planes (``gate_planes=True``: BlockLSTM's own outputs, no copies);
    c [T+1, B, H]: cell states, c[0] = c0 (clipped values);
    co [T, B, H]: tanh(c[t+1]);
    h [T+1, B, Hout]: emitted states, h[0] = h0 (only h[:T] is read backwards).
    """

    gates: np.ndarray
    c: np.ndarray
    co: np.ndarray
    h: np.ndarray


def ifco_weights(weights: LSTMWeights, options: LSTMOptions, matrices: bool = True) -> LSTMWeights:
    """The weights in i, f, c, o order with the forget bias folded into ``bias``;
    ``matrices=False``: ``w_input`` and ``w_recurrent`` left in ``options.layout`` order (a
    kernel that reads them in their own order: ``gate_blocks``)."""
    layout = options.layout
    if layout == "ifco" and options.forget_bias == 0.0:
        return weights  # cuDNN's order, nothing to fold
    bias = to_ifco(weights.bias, layout)
    if options.forget_bias != 0.0:
        H = bias.shape[-1] // 4
        if bias is weights.bias:
            bias = bias.copy()
        bias[H:2 * H] += bias.dtype.type(options.forget_bias)
    if not matrices:
        return weights._replace(bias=bias)
    w_input = None if weights.w_input is None else to_ifco(weights.w_input, layout)
    return weights._replace(w_input=w_input, w_recurrent=to_ifco(weights.w_recurrent, layout),
                            bias=bias)


@functools.lru_cache(maxsize=64)
def gate_scale(H: int, dtype) -> np.ndarray:
    """Column scale [0.5 (i, f), 1 (c), 0.5 (o)]: with the sigmoid gates' pre-activations halved
    (exactly: a power of two), one tanh over all gates gives σ(z) = (1 + tanh(z / 2)) / 2.
    Cached, hence read-only."""
    scale = np.full(4 * H, 0.5, dtype=dtype)
    scale[2 * H:3 * H] = 1
    scale.flags.writeable = False
    return scale


def trace_shapes(T: int, B: int, H: int, Hout: int) -> list:
    """Shapes of the :class:`LSTMTrace` arrays."""
    return [(T, B, 4 * H), (T + 1, B, H), (T, B, H), (T + 1, B, Hout)]


def halved_peepholes(w: LSTMWeights, options: LSTMOptions, dtype):
    """The peepholes (wci, wcf, wco) stacked ``[3, H]`` and halved (they act on the halved
    sigmoid pre-activations; one array, as the native kernel reads them), or None without
    peepholes."""
    if not options.use_peephole:
        return None
    stacked = np.stack(w.peepholes).astype(dtype, copy=False)
    stacked *= dtype.type(0.5)
    return stacked


def recurrent_operands(w: LSTMWeights, options: LSTMOptions, dtype):
    """``(w_recurrent [Hout, 4H], peepholes)`` of weights ``w`` in i, f, c, o order, with the
    sigmoid gates' columns (i, f, o) halved; the peepholes halved too (:func:`halved_peepholes`)."""
    scale = gate_scale(w.bias.shape[-1] // 4, dtype)
    return w.w_recurrent * scale, halved_peepholes(w, options, dtype)


def forward_operands(x: np.ndarray, weights: LSTMWeights, options: LSTMOptions):
    """What every forward engine computes with: ``(w, x_gates, w_recurrent, peepholes)``.

    ``w``: the weights in i, f, c, o order with the forget bias folded into ``bias``;
    ``x_gates [T, B, 4H] = x W + b`` for all steps at once (one GEMM) and ``w_recurrent
    [Hout, 4H]``, both with the sigmoid gates' columns (i, f, o) halved; ``peepholes``
    (wci, wcf, wco) halved too, or None without peepholes.
    """
    w = ifco_weights(weights, options)
    dtype = x.dtype
    x_gates = input_projection(x, w.w_input, w.bias, 4)
    x_gates *= gate_scale(w.bias.shape[-1] // 4, dtype)
    w_recurrent, peep = recurrent_operands(w, options, dtype)
    return w, x_gates, w_recurrent, peep


def lstm_forward(x: np.ndarray, h0: np.ndarray, c0: np.ndarray, weights: LSTMWeights,
                 options: LSTMOptions = CUDNN_LSTM, valid: np.ndarray | None = None,
                 out: LSTMTrace | None = None, keep_trace: bool = True,
                 gate_planes: bool = False) -> LSTMTrace:
    """Run the recurrence over ``x[T, B, in]`` from ``h0[B, Hout]``, ``c0[B, H]``.

    ``out``: preallocated trace arrays to record into (shapes as in :class:`LSTMTrace`).
    ``keep_trace=False`` (inference, no ``out``): the caller reads only ``h`` and ``c[-1]``, so
    an engine may return ``gates``, ``co`` and ``c`` with fewer steps (the native engine does;
    this reference engine records everything either way).  ``gate_planes`` (no ``out``): the
    trace's gates as four C-contiguous [T, B, H] arrays.
    """
    w, x_gates, w_recurrent, peep = forward_operands(x, weights, options)
    T, B = x.shape[:2]
    H = c0.shape[-1]
    dtype = x.dtype
    gates, c_states, co_all, h_states = trace_arrays(
        out, trace_shapes(T, B, H, h0.shape[-1]), dtype)
    c_states[0], h_states[0] = c0, h0
    cell_input = np.empty((B, H), dtype=dtype)
    clip = options.cell_clip
    frozen = None if valid is None else ~valid[:, :, None]
    half = dtype.type(0.5)
    for t in range(T):
        c_prev, c_next, h_next = c_states[t], c_states[t + 1], h_states[t + 1]
        g = gates[t]
        np.matmul(h_states[t], w_recurrent, out=g)
        g += x_gates[t]
        if peep is None:
            np.tanh(g, out=g)
        else:
            g[:, :H] += c_prev * peep[0]
            g[:, H:2 * H] += c_prev * peep[1]
            np.tanh(g[:, :3 * H], out=g[:, :3 * H])
        input_forget = g[:, :2 * H]
        input_forget += 1
        input_forget *= half
        np.multiply(g[:, H:2 * H], c_prev, out=c_next)
        np.multiply(g[:, :H], g[:, 2 * H:3 * H], out=cell_input)
        c_next += cell_input
        if clip > 0:
            np.clip(c_next, -clip, clip, out=c_next)
        output_gate = g[:, 3 * H:]
        if peep is not None:
            output_gate += c_next * peep[2]
            np.tanh(output_gate, out=output_gate)
        output_gate += 1
        output_gate *= half
        co = np.tanh(c_next, out=co_all[t])
        if w.w_proj is None:
            np.multiply(output_gate, co, out=h_next)
        else:
            np.matmul(output_gate * co, w.w_proj, out=h_next)
        if frozen is not None:
            freeze(frozen[t], c_next, c_prev)
            freeze(frozen[t], h_next, h_states[t])
    if gate_planes:
        gates = tuple(np.ascontiguousarray(gates[..., k * H:(k + 1) * H]) for k in range(4))
    return LSTMTrace(gates, c_states, co_all, h_states)


def gate_activations(gates, k: int) -> np.ndarray:
    """Gate ``k``'s (0..3: i, f, c, o) activations [T, B, H] of a trace's gates (either form)."""
    if isinstance(gates, tuple):
        return gates[k]
    H = gates.shape[-1] // 4
    return gates[..., k * H:(k + 1) * H]


class LSTMGrads(NamedTuple):
    """Gradients, columns in ``options.layout`` order.

    d_gates [T, B, 4H] (pre-activation), dx [T, B, in] (or None), dh0 [B, Hout],
    dc0 [B, H], dw_input [in, 4H] (None for skip input), dw_recurrent [Hout, 4H],
    dbias [4H], dw_proj [H, P] or None, dpeepholes (wci, wcf, wco) or None.
    """

    d_gates: np.ndarray
    dx: np.ndarray | None
    dh0: np.ndarray
    dc0: np.ndarray
    dw_input: np.ndarray | None
    dw_recurrent: np.ndarray
    dbias: np.ndarray
    dw_proj: np.ndarray | None
    dpeepholes: tuple | None


def backward_factors(gates, c_prev: np.ndarray, co: np.ndarray) -> tuple:
    """What the gate gradients need of the trace alone, for any leading axes (``[T, B]`` or
    ``[B]``): ``gates`` (activations i, f, c', o: ``[..., 4H]`` or the four planes ``[..., H]``,
    :class:`LSTMTrace`), ``c_prev, co [..., H]`` →
    ``(output_factor = o (1-o) co`` = ∂h/∂(o pre-activation) per unit of dm,
    ``cell_factor = (1 - co²) o`` = ∂m/∂c, ``gate_factor [..., 3, H]`` = ∂c/∂(i, f, c'
    pre-activations): ``c' i (1-i), c_prev f (1-f), i (1 - c'²))``."""
    i, f, cc, o = (gate_activations(gates, k) for k in range(4))
    H = co.shape[-1]
    output_factor = o * (1 - o)
    output_factor *= co
    cell_factor = 1 - co * co
    cell_factor *= o
    gate_factor = np.empty(co.shape[:-1] + (3, H), dtype=co.dtype)
    np.multiply(cc, i * (1 - i), out=gate_factor[..., 0, :])
    np.multiply(c_prev, f * (1 - f), out=gate_factor[..., 1, :])
    np.multiply(i, 1 - cc * cc, out=gate_factor[..., 2, :])
    return output_factor, cell_factor, gate_factor


def step_gradients(dm: np.ndarray, dc: np.ndarray, output_factor: np.ndarray, cell_factor: np.ndarray,
                   gate_factor: np.ndarray, f: np.ndarray, peep, dg: np.ndarray) -> np.ndarray:
    """One step's gate gradients into ``dg [B, 4H]`` (pre-activations, i, f, c', o) from
    ``dm = ∂L/∂(o ⊙ co)`` and ``dc = ∂L/∂c`` ``[B, H]`` and that step's
    :func:`backward_factors`; returns ``∂L/∂c_prev``.  ``peep``: (wci, wcf, wco) or None."""
    B, H = dm.shape
    d_o = dg[:, 3 * H:]
    np.multiply(dm, output_factor, out=d_o)
    dcs = dm * cell_factor
    dcs += dc
    if peep is not None:
        dcs += d_o * peep[2]
    np.multiply(dcs[:, None, :], gate_factor, out=dg.reshape(B, 4, H)[:, :3])
    dc_prev = dcs * f
    if peep is not None:
        dc_prev += dg[:, :H] * peep[0] + dg[:, H:2 * H] * peep[1]
    return dc_prev


def lstm_backward(x: np.ndarray, trace: LSTMTrace, weights: LSTMWeights,
                  options: LSTMOptions = CUDNN_LSTM, *, dh_steps: np.ndarray | None = None,
                  dc_steps: np.ndarray | None = None, dh_last: np.ndarray | None = None,
                  dc_last: np.ndarray | None = None, valid: np.ndarray | None = None,
                  need_dx: bool = True, weight_grads_out: WeightGradOut = NO_OUT) -> LSTMGrads:
    """Back-propagation through time for :func:`lstm_forward` (the weight gradients into
    ``weight_grads_out``'s arrays where given: :func:`gradients`).

    ``dh_steps[T, B, Hout]`` / ``dc_steps[T, B, H]`` are the direct gradients of each
    step's emitted ``h_t`` / ``c_t``; ``dh_last`` / ``dc_last`` those of the final
    state.  The recurrent contributions are added here.  The trace is used as given
    (nothing is recomputed), which is what BlockLSTMGrad requires.
    """
    w = ifco_weights(weights, options)
    gates, c_states, co_all, h_states = trace
    T, B, H = co_all.shape
    Hout = h_states.shape[-1]
    dtype = co_all.dtype
    peep = w.peepholes if options.use_peephole else None
    d_gates = np.empty((T, B, 4 * H), dtype=dtype)
    dh_total = np.empty((T, B, Hout), dtype=dtype) if w.w_proj is not None else None
    dh = np.zeros((B, Hout), dtype=dtype) if dh_last is None else dh_last.astype(dtype, copy=True)
    dc = np.zeros((B, H), dtype=dtype) if dc_last is None else dc_last.astype(dtype, copy=True)
    w_rec_t = np.ascontiguousarray(w.w_recurrent.T)
    w_proj_t = None if w.w_proj is None else np.ascontiguousarray(w.w_proj.T)
    # Everything that depends only on the trace, for all steps at once.
    output_factor, cell_factor, gate_factor = backward_factors(gates, c_states[:T], co_all)
    f = gate_activations(gates, 1)
    for t in range(T - 1, -1, -1):
        v = None if valid is None else valid[t]
        if dh_steps is not None:
            dh += dh_steps[t]
        if dc_steps is not None:
            dc += dc_steps[t]
        if w_proj_t is not None:
            dh_total[t] = dh if v is None else np.where(v[:, None], dh, 0)
            dm = dh @ w_proj_t
        else:
            dm = dh
        dg = d_gates[t]
        dc_prev = step_gradients(dm, dc, output_factor[t], cell_factor[t], gate_factor[t], f[t], peep, dg)
        zero_ended(v, dg)
        dh_prev = dg @ w_rec_t
        dh = carry(v, dh_prev, dh)
        dc = carry(v, dc_prev, dc)

    return gradients(x, trace, w, options, d_gates, dh_total, dh, dc, need_dx,
                     live_rows_linalg(valid, NUMPY_LINALG), weight_grads_out)


def gradients(x: np.ndarray, trace: LSTMTrace, w: LSTMWeights, options: LSTMOptions,
              d_gates: np.ndarray, dh_total: np.ndarray | None, dh0: np.ndarray, dc0: np.ndarray,
              need_dx: bool, linalg: Linalg | None = None, out: WeightGradOut = NO_OUT) -> LSTMGrads:
    """Everything after the time loop: the all-steps GEMMs and sums over T·B rows (the weight
    gradients, in i, f, c, o order, into ``out``'s arrays where given).

    ``w``: weights in i, f, c, o order; ``d_gates [T, B, 4H]``: pre-activation gradients
    (masked, i, f, c, o order); ``dh_total [T, B, P]`` (projection only): dL/dh_t of every
    step, masked; ``dh0``, ``dc0``: the gradients reaching the initial state.
    """
    gates, c_states, co_all, h_states = trace
    T = co_all.shape[0]
    H = c_states.shape[-1]
    peep = w.peepholes if options.use_peephole else None
    dx, dw_input, dbias = input_backward(x, d_gates, w.w_input, 4, need_dx, linalg, out.w_input)
    dw_recurrent = outer_sum(h_states[:T], d_gates, linalg, out.w_recurrent)
    dw_proj = None
    if w.w_proj is not None:
        dw_proj = outer_sum(gate_activations(gates, 3) * co_all, dh_total, linalg, out.w_proj)
    dpeepholes = None
    if peep is not None:
        sums = (linalg or NUMPY_LINALG).product_sum
        dpeepholes = (sums(d_gates[:, :, :H], c_states[:T]), sums(d_gates[:, :, H:2 * H], c_states[:T]),
                      sums(d_gates[:, :, 3 * H:], c_states[1:]))
    layout = options.layout
    return LSTMGrads(
        d_gates=to_ifco(d_gates, layout), dx=dx, dh0=dh0, dc0=dc0,
        dw_input=None if dw_input is None else to_ifco(dw_input, layout),
        dw_recurrent=to_ifco(dw_recurrent, layout), dbias=to_ifco(dbias, layout),
        dw_proj=dw_proj, dpeepholes=dpeepholes)
