"""The plain RNN sequence engine (cuDNN rnn_tanh / rnn_relu).

Shape legend: T steps, B batch, H units, ``in`` input size; time-major, scan order::

    h_t = f(x_t W + bW + h_{t-1} R + bR),   f = tanh or relu     (W [in, H], R [H, H])
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .common import (NO_OUT, NUMPY_LINALG, Linalg, WeightGradOut, carry, freeze, input_backward, input_projection, live_rows_linalg,
                     outer_sum, trace_arrays, zero_ended)


class RNNWeights(NamedTuple):
    """w_input [in, H] or None (skip input), w_recurrent [H, H], bias [H] = bW + bR."""

    w_input: np.ndarray | None
    w_recurrent: np.ndarray
    bias: np.ndarray


class RNNTrace(NamedTuple):
    """h [T+1, B, H]: states in scan order, h[0] = h0.  The activation of step t is
    h[t+1] on valid steps, so nothing else is kept."""

    h: np.ndarray


def _activate(a: np.ndarray, activation: str) -> np.ndarray:
    if activation == "tanh":
        return np.tanh(a, out=a)
    return np.maximum(a, 0, out=a)


def rnn_forward(x: np.ndarray, h0: np.ndarray, weights: RNNWeights, activation: str,
                valid: np.ndarray | None = None, out: RNNTrace | None = None) -> RNNTrace:
    """Run the recurrence over ``x[T, B, in]`` from ``h0[B, H]``; ``out``: a preallocated
    trace to record into (shape as in :class:`RNNTrace`)."""
    T, B = x.shape[:2]
    H = h0.shape[-1]
    x_gates = input_projection(x, weights.w_input, weights.bias, 1)
    (h_states,) = trace_arrays(out, [(T + 1, B, H)], x.dtype)
    h_states[0] = h0
    frozen = None if valid is None else ~valid[:, :, None]
    for t in range(T):
        a = h_states[t + 1]
        np.matmul(h_states[t], weights.w_recurrent, out=a)
        a += x_gates[t]
        _activate(a, activation)
        freeze(None if frozen is None else frozen[t], a, h_states[t])
    return RNNTrace(h_states)


class RNNGrads(NamedTuple):
    """dx [T, B, in] or None, dh0 [B, H], dw_input [in, H] or None, dw_recurrent [H, H],
    dbias [H] (the gradient of bW and of bR alike)."""

    dx: np.ndarray | None
    dh0: np.ndarray
    dw_input: np.ndarray | None
    dw_recurrent: np.ndarray
    dbias: np.ndarray


def rnn_backward(x: np.ndarray, trace: RNNTrace, weights: RNNWeights, activation: str, *,
                 dh_steps: np.ndarray | None = None, dh_last: np.ndarray | None = None,
                 valid: np.ndarray | None = None, need_dx: bool = True,
                 weight_grads_out: WeightGradOut = NO_OUT) -> RNNGrads:
    h_states = trace.h
    T = h_states.shape[0] - 1
    B, H = h_states.shape[1:]
    dtype = h_states.dtype
    d_pre = np.empty((T, B, H), dtype=dtype)
    dh = np.zeros((B, H), dtype=dtype) if dh_last is None else dh_last.astype(dtype, copy=True)
    w_rec_t = np.ascontiguousarray(weights.w_recurrent.T)
    for t in range(T - 1, -1, -1):
        v = None if valid is None else valid[t]
        if dh_steps is not None:
            dh += dh_steps[t]
        h = h_states[t + 1]
        da = d_pre[t]
        if activation == "tanh":
            np.multiply(dh, 1 - h * h, out=da)
        else:
            np.multiply(dh, h > 0, out=da)
        zero_ended(v, da)
        dh = carry(v, da @ w_rec_t, dh)
    return gradients(x, h_states, weights, d_pre, dh, need_dx, live_rows_linalg(valid, NUMPY_LINALG),
                     weight_grads_out)


def gradients(x: np.ndarray, h_states: np.ndarray, weights: RNNWeights, d_pre: np.ndarray,
              dh0: np.ndarray, need_dx: bool, linalg: Linalg | None = None,
              out: WeightGradOut = NO_OUT) -> RNNGrads:
    """Everything after the time loop, from ``d_pre [T, B, H]`` (masked pre-activation
    gradients) and ``dh0``: the all-steps GEMMs (into ``out``'s arrays where given) and sums."""
    T = d_pre.shape[0]
    dx, dw_input, dbias = input_backward(x, d_pre, weights.w_input, 1, need_dx, linalg, out.w_input)
    dw_recurrent = outer_sum(h_states[:T], d_pre, linalg, out.w_recurrent)
    return RNNGrads(dx, dh0, dw_input, dw_recurrent, dbias)
