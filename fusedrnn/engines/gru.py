"""The GRU sequence engine (cuDNN's "linear before reset" GRU).

Shape legend: T steps, B batch, H units, ``in`` input size; time-major, scan order.
Gate order **r, u, h'** (PyTorch/Keras call u "z" and h' "n")::

    a   = x_t W + bW            (W [in, 3H], all steps in one GEMM)
    q   = h_{t-1} R + bR        (R [H, 3H])
    r   = σ(a_r + q_r)
    u   = σ(a_u + q_u)
    h'  = tanh(a_h + r ⊙ q_h)   (the recurrent bias bR_h sits inside the reset product)
    h_t = (1 - u) ⊙ h' + u ⊙ h_{t-1}

TensorFlow's GRUBlockCell is a different ("reset before matmul") cell; it lives
in :mod:`fusedrnn.block_ops`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .common import (NO_OUT, NUMPY_LINALG, Linalg, WeightGradOut, carry, freeze, input_backward, input_projection,
                     live_rows_linalg, outer_sum, sigmoid, trace_arrays, zero_ended)


class GRUWeights(NamedTuple):
    """w_input [in, 3H] or None (skip input), w_recurrent [H, 3H], bias_input [3H], bias_recurrent [3H]."""

    w_input: np.ndarray | None
    w_recurrent: np.ndarray
    bias_input: np.ndarray
    bias_recurrent: np.ndarray


class GRUTrace(NamedTuple):
    """gates [T, B, 3H]: r, u, h' activations; q_h [T, B, H]: R_h h_{t-1} + bR_h;
    h [T+1, B, H]: states, h[0] = h0."""

    gates: np.ndarray
    q_h: np.ndarray
    h: np.ndarray


def trace_shapes(T: int, B: int, H: int) -> list:
    """Shapes of the :class:`GRUTrace` arrays."""
    return [(T, B, 3 * H), (T, B, H), (T + 1, B, H)]


def gru_forward(x: np.ndarray, h0: np.ndarray, weights: GRUWeights,
                valid: np.ndarray | None = None, out: GRUTrace | None = None,
                keep_trace: bool = True) -> GRUTrace:
    """Run the recurrence over ``x[T, B, in]`` from ``h0[B, H]``; ``out``: preallocated
    trace arrays to record into (shapes as in :class:`GRUTrace`).  ``keep_trace=False``
    (inference, no ``out``): the caller reads only ``h``, so an engine may return ``gates`` and
    ``q_h`` as None (the native engine does; this reference engine records everything either
    way)."""
    T, B = x.shape[:2]
    H = h0.shape[-1]
    dtype = x.dtype
    x_gates = input_projection(x, weights.w_input, weights.bias_input, 3)
    gates, q_h_all, h_states = trace_arrays(out, trace_shapes(T, B, H), dtype)
    h_states[0] = h0
    frozen = None if valid is None else ~valid[:, :, None]
    q = np.empty((B, 3 * H), dtype=dtype)
    for t in range(T):
        h_prev = h_states[t]
        np.matmul(h_prev, weights.w_recurrent, out=q)
        q += weights.bias_recurrent
        g = gates[t]
        np.add(x_gates[t, :, :2 * H], q[:, :2 * H], out=g[:, :2 * H])
        sigmoid(g[:, :2 * H], out=g[:, :2 * H])
        q_h_all[t] = q[:, 2 * H:]
        n = g[:, 2 * H:]
        np.multiply(g[:, :H], q[:, 2 * H:], out=n)
        n += x_gates[t, :, 2 * H:]
        np.tanh(n, out=n)
        h_next = h_states[t + 1]
        np.subtract(h_prev, n, out=h_next)
        h_next *= g[:, H:2 * H]
        h_next += n  # (1 - u) ⊙ h' + u ⊙ h_{t-1} = h' + u ⊙ (h_{t-1} - h')
        freeze(None if frozen is None else frozen[t], h_next, h_prev)
    return GRUTrace(gates, q_h_all, h_states)


class GRUGrads(NamedTuple):
    """dx [T, B, in] or None, dh0 [B, H], dw_input [in, 3H] or None, dw_recurrent [H, 3H],
    dbias_input [3H], dbias_recurrent [3H]."""

    dx: np.ndarray | None
    dh0: np.ndarray
    dw_input: np.ndarray | None
    dw_recurrent: np.ndarray
    dbias_input: np.ndarray
    dbias_recurrent: np.ndarray


def gru_backward(x: np.ndarray, trace: GRUTrace, weights: GRUWeights, *,
                 dh_steps: np.ndarray | None = None, dh_last: np.ndarray | None = None,
                 valid: np.ndarray | None = None, need_dx: bool = True,
                 weight_grads_out: WeightGradOut = NO_OUT) -> GRUGrads:
    gates, q_h_all, h_states = trace
    T, B = gates.shape[:2]
    H = h_states.shape[-1]
    dtype = gates.dtype
    d_a = np.empty((T, B, 3 * H), dtype=dtype)  # gradient of the input pre-activations a
    d_q = np.empty((T, B, 3 * H), dtype=dtype)  # gradient of the recurrent pre-activations q
    dh = np.zeros((B, H), dtype=dtype) if dh_last is None else dh_last.astype(dtype, copy=True)
    w_rec_t = np.ascontiguousarray(weights.w_recurrent.T)
    for t in range(T - 1, -1, -1):
        v = None if valid is None else valid[t]
        if dh_steps is not None:
            dh += dh_steps[t]
        g = gates[t]
        r, u, n = g[:, :H], g[:, H:2 * H], g[:, 2 * H:]
        h_prev = h_states[t]
        da, dq = d_a[t], d_q[t]
        d_n = da[:, 2 * H:]
        np.multiply(dh, (1 - u) * (1 - n * n), out=d_n)
        np.multiply(dh, (h_prev - n) * u * (1 - u), out=da[:, H:2 * H])
        np.multiply(d_n, q_h_all[t] * r * (1 - r), out=da[:, :H])
        dq[:, :2 * H] = da[:, :2 * H]
        np.multiply(d_n, r, out=dq[:, 2 * H:])
        zero_ended(v, da)
        zero_ended(v, dq)
        dh_prev = dq @ w_rec_t
        dh_prev += dh * u
        dh = carry(v, dh_prev, dh)
    return gradients(x, h_states, weights, d_a, d_q, dh, need_dx, live_rows_linalg(valid, NUMPY_LINALG),
                     weight_grads_out)


def gradients(x: np.ndarray, h_states: np.ndarray, weights: GRUWeights, d_a: np.ndarray,
              d_q: np.ndarray, dh0: np.ndarray, need_dx: bool,
              linalg: Linalg | None = None, out: WeightGradOut = NO_OUT) -> GRUGrads:
    """Everything after the time loop, from ``d_a``, ``d_q [T, B, 3H]`` (masked gradients of
    the input and recurrent pre-activations) and ``dh0``: the all-steps GEMMs (into ``out``'s
    arrays where given) and sums."""
    T, B, G = d_q.shape
    dx, dw_input, dbias_input = input_backward(x, d_a, weights.w_input, 3, need_dx, linalg, out.w_input)
    dw_recurrent = outer_sum(h_states[:T], d_q, linalg, out.w_recurrent)
    dbias_recurrent = (linalg or NUMPY_LINALG).column_sum(d_q.reshape(T * B, G))
    return GRUGrads(dx, dh0, dw_input, dw_recurrent, dbias_input, dbias_recurrent)
