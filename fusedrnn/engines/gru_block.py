"""TensorFlow's GRUBlockCell: one step of the "reset before matmul" GRU, forward and backward.

This is not cuDNN's GRU (:mod:`fusedrnn.engines.gru`, which resets after the
recurrent matmul): here the reset gate scales ``h_prev`` *before* it enters the
candidate's matmul, and one weight matrix acts on ``[x | h]``.

Shape legend: B batch, I input size, n cell size.  ``w_ru [I+n, 2n]`` has the
x rows first, then the h rows; its columns are ``[r | u]`` (reset, then update).
``w_c [I+n, n]``, ``b_ru [2n]``, ``b_c [n]``.  All arrays share one float dtype.
"""

from __future__ import annotations

import numpy as np

from .common import sigmoid


def gru_block_forward(x: np.ndarray, h_prev: np.ndarray, w_ru: np.ndarray, w_c: np.ndarray,
                      b_ru: np.ndarray, b_c: np.ndarray):
    """One step from ``x [B, I]`` and ``h_prev [B, n]``; returns ``(r, u, c, h)``, each ``[B, n]``::

        r, u = σ([x | h_prev] · w_ru + b_ru)          (r: columns [0, n), u: [n, 2n))
        c    = tanh([x | r ⊙ h_prev] · w_c + b_c)
        h    = u ⊙ (h_prev - c) + c                    (= u ⊙ h_prev + (1 - u) ⊙ c)
    """
    n = h_prev.shape[1]
    ru = np.concatenate([x, h_prev], axis=1) @ w_ru
    ru += b_ru
    sigmoid(ru, out=ru)
    r, u = ru[:, :n], ru[:, n:]
    c = np.concatenate([x, r * h_prev], axis=1) @ w_c
    c += b_c
    np.tanh(c, out=c)
    h = u * (h_prev - c)
    h += c
    return np.ascontiguousarray(r), np.ascontiguousarray(u), c, h


def gru_block_backward(x: np.ndarray, h_prev: np.ndarray, w_ru: np.ndarray, w_c: np.ndarray,
                       r: np.ndarray, u: np.ndarray, c: np.ndarray, d_h: np.ndarray):
    """Gradients of one step from ``d_h = ∂L/∂h [B, n]``, using ``r, u, c`` as given.

    Returns ``(d_x [B, I], d_h_prev [B, n], d_c_bar [B, n], d_r_bar_u_bar [B, 2n])``,
    ``*_bar`` being the gradients of the pre-activations::

        d_c_bar  = d_h ⊙ (1 - u) ⊙ (1 - c²)
        d_u_bar  = d_h ⊙ (h_prev - c) ⊙ u ⊙ (1 - u)
        A        = d_c_bar · w_cᵀ                        [B, I+n]
        d_hr     = A[:, I:]                              (∂L/∂(r ⊙ h_prev))
        d_r_bar  = d_hr ⊙ h_prev ⊙ r ⊙ (1 - r)
        C        = [d_r_bar | d_u_bar] · w_ruᵀ           [B, I+n]
        d_x      = C[:, :I] + A[:, :I]
        d_h_prev = C[:, I:] + d_hr ⊙ r + d_h ⊙ u

    Only the shape of ``x`` is used.  The weight gradients are left to the caller:
    ``w_ru_grad = [x | h_prev]ᵀ · d_r_bar_u_bar``, ``w_c_grad = [x | r ⊙ h_prev]ᵀ · d_c_bar``,
    ``b_ru_grad = Σ_batch d_r_bar_u_bar``, ``b_c_grad = Σ_batch d_c_bar``.
    """
    I = x.shape[1]
    d_c_bar = d_h * (1 - u)
    d_c_bar *= 1 - c * c
    d_u_bar = d_h * (h_prev - c)
    d_u_bar *= u * (1 - u)
    A = d_c_bar @ w_c.T
    d_hr = A[:, I:]
    d_r_bar = d_hr * h_prev
    d_r_bar *= r * (1 - r)
    d_r_bar_u_bar = np.concatenate([d_r_bar, d_u_bar], axis=1)
    C = d_r_bar_u_bar @ w_ru.T
    d_x = C[:, :I] + A[:, :I]
    d_h_prev = C[:, I:] + d_hr * r
    d_h_prev += d_h * u
    return d_x, d_h_prev, d_c_bar, d_r_bar_u_bar
