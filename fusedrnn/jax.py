"""JAX adapter: differentiable host-callback ops and a CPU ``jax.experimental.rnn``.

Imported lazily (``import fusedrnn`` never imports jax); needs ``pip install 'fusedrnn[jax]'``.

Shape legend: T time steps, B batch, I input size, H hidden size (cell size), P projection,
Hout = P if P > 0 else H, L layers, D directions, n the BlockLSTM cell size.

Every function here is a ``jax.custom_vjp`` whose forward and backward are
``jax.pure_callback`` calls into fusedrnn's NumPy ops, so they run on the host CPU under
``jax.jit``, ``jax.grad`` and ``jax.vmap`` (``vmap_method="sequential"``: one host call per
batch element).  Double differentiation (``jax.hessian``, forward-mode ``jax.jvp``) is not
supported — a ``custom_vjp`` has no JVP rule.

* :func:`cudnn_rnn`: TensorFlow's ``CudnnRNNV3`` (all modes, projection, lengths, both layouts).
  Its gradient is ``CudnnRNNBackpropV3``; the backward callback re-runs the training forward to
  get ``reserve_space`` (the reserve's size is not known to JAX before the forward runs, and
  dropout masks are a pure function of the seeds, so the recomputation is exact).
* :func:`lstm` has exactly the signature and semantics of ``jax.experimental.rnn.lstm``
  (batch-first ``x``, layer-major states, cuDNN's flat weights, ``(y, h_n, c_n)``, ``y`` zero past
  each ``seq_lengths[b]``), which on a CPU-only JAX raises; :func:`gru` and :func:`rnn` are the
  same for the other cuDNN modes.  ``init_lstm_weight``, ``get_num_params_in_lstm``,
  ``unpack_lstm_weights`` and ``lstm_ref`` are re-exported from ``jax.experimental.rnn``, so
  ``import fusedrnn.jax as rnn`` replaces ``from jax.experimental import rnn``.
* :func:`block_lstm` / :func:`block_lstm_v2`: TensorFlow's ``BlockLSTM`` / ``BlockLSTMV2`` with
  the ``BlockLSTMGrad`` gradient.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

try:
    import jax
    import jax.numpy as jnp
except ImportError as exc:  # pragma: no cover - exercised by a subprocess test
    raise ImportError("fusedrnn.jax needs JAX: pip install 'fusedrnn[jax]'") from exc

import numpy as np

from . import block_ops as _block_ops
from . import cudnn as _cudnn
from .layout import DIRECTIONS, INPUT_MODES, RNN_MODES
from .validate import choice_attr

try:  # the reference helpers of jax.experimental.rnn import fine on CPU; only its lstm fails
    from jax.experimental.rnn import get_num_params_in_lstm, init_lstm_weight, lstm_ref, unpack_lstm_weights
except ImportError:  # pragma: no cover - a JAX without jax.experimental.rnn
    pass

__all__ = ["cudnn_rnn", "lstm", "gru", "rnn", "block_lstm", "block_lstm_v2"]

_VMAP = "sequential"


def _callback(function, result_shapes, *args):
    return jax.pure_callback(function, result_shapes, *args, vmap_method=_VMAP)


def _spec(shape, dtype):
    return jax.ShapeDtypeStruct(tuple(shape), dtype)


# ----------------------------------------------------------------------------------------------
# CudnnRNNV3


class _RNNAttrs(NamedTuple):
    """Static (hashable) attributes of one CudnnRNNV3 call."""

    rnn_mode: str
    input_mode: str
    direction: str
    dropout: float
    seed: int
    seed2: int
    num_proj: int
    time_major: bool
    is_training: bool

    def op_attrs(self, training_forward: bool) -> dict:
        """Keywords of the NumPy ops.  A training forward for the gradient of an inference call
        runs without dropout (inference applies none)."""
        dropout = self.dropout if self.is_training or not training_forward else 0.0
        return dict(rnn_mode=self.rnn_mode, input_mode=self.input_mode, direction=self.direction,
                    dropout=dropout, seed=self.seed, seed2=self.seed2, num_proj=self.num_proj,
                    time_major=self.time_major)


def _host_forward(attrs: _RNNAttrs, x, h, c, w, lengths):
    # a training forward only when it applies dropout (otherwise the two are bit-identical and
    # the inference one allocates no reserve_space)
    training = attrs.is_training and attrs.dropout > 0
    result = _cudnn.cudnn_rnn_v3(np.asarray(x), np.asarray(h), np.asarray(c), np.asarray(w), np.asarray(lengths),
                                 is_training=training, **attrs.op_attrs(False))
    return result.output, result.output_h, result.output_c


def _host_backward(attrs: _RNNAttrs, x, h, c, w, lengths, d_output, d_h, d_c):
    x, h, c, w, lengths = (np.asarray(a) for a in (x, h, c, w, lengths))
    op_attrs = attrs.op_attrs(True)
    fwd = _cudnn.cudnn_rnn_v3(x, h, c, w, lengths, is_training=True, **op_attrs)
    grads = _cudnn.cudnn_rnn_backprop_v3(x, h, c, w, lengths, *fwd[:3], np.asarray(d_output), np.asarray(d_h),
                                         np.asarray(d_c), fwd.reserve_space, fwd.host_reserved, **op_attrs)
    return tuple(grads)


def _output_specs(attrs: _RNNAttrs, x, h, c):
    if x.ndim != 3:
        raise ValueError(f"input must be rank 3 ({'[T, B, I]' if attrs.time_major else '[B, T, I]'}), "
                         f"got shape {tuple(x.shape)}")
    if h.ndim != 3:
        raise ValueError(f"input_h must be rank 3, got shape {tuple(h.shape)}")
    D = 2 if attrs.direction == "bidirectional" else 1
    output = (x.shape[0], x.shape[1], D * h.shape[2])
    cell = tuple(c.shape) if attrs.rnn_mode == "lstm" else ()
    return _spec(output, x.dtype), _spec(h.shape, x.dtype), _spec(cell, x.dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _cudnn_rnn(attrs, x, h, c, w, lengths):
    return _callback(functools.partial(_host_forward, attrs), _output_specs(attrs, x, h, c), x, h, c, w, lengths)


def _cudnn_rnn_fwd(attrs, x, h, c, w, lengths):
    return _cudnn_rnn(attrs, x, h, c, w, lengths), (x, h, c, w, lengths)


def _cudnn_rnn_bwd(attrs, residuals, cotangents):
    x, h, c, w, lengths = residuals
    is_lstm = attrs.rnn_mode == "lstm"
    specs = (_spec(x.shape, x.dtype), _spec(h.shape, x.dtype), _spec(c.shape if is_lstm else (), x.dtype),
             _spec(w.shape, x.dtype))
    d_x, d_h, d_c, d_w = _callback(functools.partial(_host_backward, attrs), specs, x, h, c, w, lengths,
                                   *cotangents)
    if not is_lstm:  # input_c is not read: its gradient is zero, whatever its shape
        d_c = jnp.zeros_like(c)
    return d_x, d_h, d_c, d_w, None


_cudnn_rnn.defvjp(_cudnn_rnn_fwd, _cudnn_rnn_bwd)


def cudnn_rnn(input, input_h, input_c, params, sequence_lengths=None, *, rnn_mode="lstm",
              input_mode="linear_input", direction="unidirectional", dropout=0.0, seed=0, seed2=0,
              num_proj=0, time_major=True, is_training=True):
    """TensorFlow's ``CudnnRNNV3`` as a differentiable JAX function (see :func:`fusedrnn.cudnn_rnn_v3`).

    ``input [T, B, I]`` (``[B, T, I]`` with ``time_major=False``), ``input_h [L*D, B, Hout]``
    (batch-major: ``[B, L*D, Hout]``, reinterpreted by a C-order reshape as TF does),
    ``input_c [L*D, B, H]`` for lstm (``None`` or anything otherwise), ``params`` the flat cuDNN
    buffer, ``sequence_lengths [B]`` int32/int64 in ``[1, T]`` (``None``: all ``T``).
    Returns ``(output [T, B, D*Hout], output_h, output_c)``; ``output`` is 0 past each length,
    ``output_c`` a rank-0 zero for non-LSTM modes.  Differentiable in input, input_h, input_c,
    params.  With ``is_training=False`` no dropout is applied, and the gradient is that of the
    function computed (the backward runs the training path with dropout 0).

    Shapes are checked at trace time only as far as the output shapes need; the full checks of
    the NumPy op run in the callback (an error there surfaces as a ``JaxRuntimeError`` carrying
    fusedrnn's message).
    """
    x = jnp.asarray(input)
    h = jnp.asarray(input_h)
    c = jnp.zeros((), x.dtype) if input_c is None else jnp.asarray(input_c)
    if sequence_lengths is None:
        if x.ndim != 3:
            raise ValueError(f"input must be rank 3, got shape {tuple(x.shape)}")
        T, B = (x.shape[0], x.shape[1]) if time_major else (x.shape[1], x.shape[0])
        sequence_lengths = jnp.full((B,), T, jnp.int32)
    attrs = _RNNAttrs(choice_attr(rnn_mode, "rnn_mode", RNN_MODES), choice_attr(input_mode, "input_mode", INPUT_MODES),
                      choice_attr(direction, "direction", DIRECTIONS), float(dropout), int(seed), int(seed2),
                      int(num_proj), bool(time_major), bool(is_training))
    return _cudnn_rnn(attrs, x, h, c, jnp.asarray(params), jnp.asarray(sequence_lengths))


# ----------------------------------------------------------------------------------------------
# jax.experimental.rnn-style functions


def _experimental_rnn(mode, x, h_0, c_0, weights, seq_lengths, input_size, hidden_size, num_layers, dropout,
                      bidirectional):
    """Batch-first ``x [B, T, I]``, layer-major states ``[L*D, B, H]``; returns ``(y, h_n, c_n)``."""
    if seq_lengths.dtype != jnp.dtype("int32"):
        raise NotImplementedError("`seq_lengths` can only be int32.")
    D = 2 if bidirectional else 1
    checks = [("x", x.ndim == 3 and x.shape[2] == input_size, f"[batch, seq_len, {input_size}]", x.shape),
              ("h_0", h_0.shape == (num_layers * D, x.shape[0], hidden_size),
               f"({num_layers * D}, {x.shape[0]}, {hidden_size})", h_0.shape)]
    if mode == "lstm":
        checks.append(("c_0", c_0.shape == h_0.shape, f"{tuple(h_0.shape)}", c_0.shape))
    n = int(_cudnn.cudnn_rnn_params_size(num_layers, hidden_size, input_size, S=np.int64, rnn_mode=mode,
                                         direction="bidirectional" if bidirectional else "unidirectional")[0])
    checks.append(("weights", weights.shape == (n,), f"({n},)", weights.shape))
    for name, ok, expected, actual in checks:
        if not ok:
            raise ValueError(f"{name} must have shape {expected} for input_size={input_size}, "
                             f"hidden_size={hidden_size}, num_layers={num_layers}, bidirectional={bidirectional}; "
                             f"got {tuple(actual)}")
    # jax.experimental.rnn's forward is cuDNN's training forward: dropout applies on every call
    # (fixed masks here: seeds (0, 0); JAX's API takes no key and cuDNN's masks are not reproducible)
    y, h_n, c_n = cudnn_rnn(jnp.swapaxes(x, 0, 1), h_0, c_0, weights, seq_lengths, rnn_mode=mode,
                            direction="bidirectional" if bidirectional else "unidirectional",
                            dropout=dropout, is_training=True)
    return jnp.swapaxes(y, 0, 1), h_n, c_n


def lstm(x, h_0, c_0, weights, seq_lengths, input_size: int, hidden_size: int, num_layers: int,
         dropout: float, bidirectional: bool, precision=None):
    """``jax.experimental.rnn.lstm`` on the CPU: same signature, weight layout and results.

    Arguments:
      x: ``[B, T, I]`` (batch first).  h_0, c_0: ``[D*L, B, H]`` (pseudo-layer ``l*D + d``).
      weights: ``[get_num_params_in_lstm(...)]``, cuDNN's layout: every pseudo-layer's
        ``W_ih [4H, in]`` then ``W_hh [4H, H]``, then every pseudo-layer's ``b_ih``, ``b_hh``
        (gates i, f, g, o).  seq_lengths: ``[B]`` int32, each in ``[1, T]``.
      dropout: between layers, applied on every call (as JAX's cuDNN training forward does), with
        fixed masks.  precision: accepted and ignored (CPU float32 is exact float32 arithmetic).
    Returns ``(y [B, T, D*H], h_n [D*L, B, H], c_n [D*L, B, H])``; ``y`` is 0 for ``t >= seq_lengths[b]``,
    the reverse direction runs over each sequence's valid prefix.
    """
    return _experimental_rnn("lstm", x, h_0, c_0, weights, seq_lengths, input_size, hidden_size, num_layers,
                             dropout, bidirectional)


def gru(x, h_0, weights, seq_lengths, input_size: int, hidden_size: int, num_layers: int, dropout: float,
        bidirectional: bool, precision=None):
    """:func:`lstm` for cuDNN's GRU (gates r, z, n; ``n = tanh(W_n x + b_in + r * (W_hn h + b_hn))``).

    ``weights``: per pseudo-layer ``W_ih [3H, in]``, ``W_hh [3H, H]``, then the biases ``b_ih``,
    ``b_hh`` (size ``fusedrnn.cudnn_rnn_params_size(..., rnn_mode="gru")``).  Returns ``(y, h_n)``.
    """
    y, h_n, _ = _experimental_rnn("gru", x, h_0, None, weights, seq_lengths, input_size, hidden_size,
                                  num_layers, dropout, bidirectional)
    return y, h_n


def rnn(x, h_0, weights, seq_lengths, input_size: int, hidden_size: int, num_layers: int, dropout: float,
        bidirectional: bool, precision=None, nonlinearity: str = "tanh"):
    """:func:`lstm` for cuDNN's simple RNN, ``h_t = f(W x_t + b_ih + R h_{t-1} + b_hh)`` with
    ``f`` = tanh or relu (``nonlinearity``).  ``weights``: per pseudo-layer ``W_ih [H, in]``,
    ``W_hh [H, H]``, then ``b_ih``, ``b_hh``.  Returns ``(y, h_n)``."""
    if nonlinearity not in ("tanh", "relu"):
        raise ValueError(f"nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
    y, h_n, _ = _experimental_rnn(f"rnn_{nonlinearity}", x, h_0, None, weights, seq_lengths, input_size,
                                  hidden_size, num_layers, dropout, bidirectional)
    return y, h_n


# ----------------------------------------------------------------------------------------------
# BlockLSTM / BlockLSTMV2


class _BlockAttrs(NamedTuple):
    version: int  # 1: BlockLSTM (ICFO, forget_bias), 2: BlockLSTMV2 (IFCO)
    forget_bias: float
    cell_clip: float
    use_peephole: bool


def _host_block_forward(attrs: _BlockAttrs, *args):
    args = [np.asarray(a) for a in args]
    if attrs.version == 1:
        return tuple(_block_ops.block_lstm(*args, forget_bias=attrs.forget_bias, cell_clip=attrs.cell_clip,
                                           use_peephole=attrs.use_peephole))
    return tuple(_block_ops.block_lstm_v2(*args, cell_clip=attrs.cell_clip, use_peephole=attrs.use_peephole))


def _host_block_backward(attrs: _BlockAttrs, *args):
    grad = _block_ops.block_lstm_grad if attrs.version == 1 else _block_ops.block_lstm_grad_v2
    return tuple(grad(*(np.asarray(a) for a in args), use_peephole=attrs.use_peephole))


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _block_lstm(attrs, seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b):
    if x.ndim != 3 or cs_prev.ndim != 2:
        raise ValueError(f"x must be rank 3 [T, B, I] and cs_prev rank 2 [B, n], got shapes {tuple(x.shape)} "
                         f"and {tuple(cs_prev.shape)}")
    spec = _spec((x.shape[0], x.shape[1], cs_prev.shape[1]), x.dtype)
    return _callback(functools.partial(_host_block_forward, attrs), (spec,) * 7,
                     seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b)


def _block_lstm_fwd(attrs, *inputs):
    outputs = _block_lstm(attrs, *inputs)
    return outputs, (inputs, outputs)


def _block_lstm_bwd(attrs, residuals, cotangents):
    inputs, outputs = residuals
    d_cs, d_h = cotangents[1], cotangents[6]
    specs = tuple(_spec(a.shape, a.dtype) for a in inputs[1:])
    grads = _callback(functools.partial(_host_block_backward, attrs), specs, *inputs, *outputs, d_cs, d_h)
    return (None, *grads)


_block_lstm.defvjp(_block_lstm_fwd, _block_lstm_bwd)


def _block_result(attrs, seq_len_max, arrays):
    outputs = _block_lstm(attrs, jnp.asarray(seq_len_max), *(jnp.asarray(a) for a in arrays))
    i, cs, f, o, ci, co, h = outputs
    # TF's BlockLSTMGrad takes the gradients of cs and h only: the gate outputs are returned
    # under stop_gradient, so that no gradient is silently dropped
    gate = jax.lax.stop_gradient
    return _block_ops.BlockLSTMResult(gate(i), cs, gate(f), gate(o), gate(ci), gate(co), h)


def block_lstm(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, *, forget_bias=1.0, cell_clip=3.0,
               use_peephole=False):
    """TensorFlow's ``BlockLSTM`` (ICFO gate columns) as a differentiable JAX function.

    Shapes as :func:`fusedrnn.block_lstm`: ``x [T, B, I]``, ``cs_prev, h_prev [B, n]``,
    ``w [I+n, 4n]``, ``wci, wcf, wco [n]``, ``b [4n]``; ``seq_len_max`` an integer scalar in
    ``[0, T]``.  Returns ``BlockLSTMResult(i, cs, f, o, ci, co, h)``, each ``[T, B, n]``.
    Gradients (``BlockLSTMGrad``) flow from ``cs`` and ``h`` to every float input; the gate
    outputs ``i, f, o, ci, co`` are under ``stop_gradient`` (TF's gradient ignores them).
    """
    attrs = _BlockAttrs(1, float(forget_bias), float(cell_clip), bool(use_peephole))
    return _block_result(attrs, seq_len_max, (x, cs_prev, h_prev, w, wci, wcf, wco, b))


def block_lstm_v2(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, *, cell_clip=0.0, use_peephole=False):
    """TensorFlow's ``BlockLSTMV2`` (IFCO gate columns, no forget bias); as :func:`block_lstm`."""
    attrs = _BlockAttrs(2, 0.0, float(cell_clip), bool(use_peephole))
    return _block_result(attrs, seq_len_max, (x, cs_prev, h_prev, w, wci, wcf, wco, b))

