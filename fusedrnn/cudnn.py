"""The CudnnRNN op family on CPU: stacking, directions, lengths, dropout → engines.

Shape legend: T max time, B batch, I input size, H num_units (cell size), P num_proj,
Hout = P if P > 0 else H, L layers, D directions, G gates (lstm 4, gru 3, rnn 1).

Time-major ``input`` is ``[T, B, I]``, ``output`` ``[T, B, D*Hout]``, states
``[L*D, B, Hout]`` (cells ``[L*D, B, H]``), indexed by pseudo-layer ``p = l*D + d``.
Batch-major (V3 ``time_major=False``): ``input [B, T, I]``, ``output [B, T, D*Hout]``
and states of shape ``[B, L*D, Hout]`` whose buffer is *reinterpreted* (C-order
reshape, not a transpose) as ``[L*D, B, Hout]`` — what TensorFlow's kernel does.

Layer ``l >= 1`` reads the concatenation ``[h_fw ; h_bw]`` of layer ``l-1`` (after
dropout in training).  The backward direction of sequence ``b`` scans
``t = len_b-1 .. 0`` (only its valid prefix, reversed).  Outputs past a sequence's
end are 0; final states are those after the last step each direction processed;
padded inputs get zero gradient.  The cell equations are in :mod:`fusedrnn.engines`.

Dropout (training only, between layers, never on the last layer's output): the
keep mask of layer ``l``'s output (the input of layer ``l+1``) is
``Generator(Philox(key=[k, l])).random((T, B, D*Hout)) >= dropout`` with
``k = ((seed << 32) | seed2) mod 2**64`` (TF's seed packing, negative values
taken mod 2**64); kept elements are scaled by ``1/(1-dropout)``.  The masks do not
depend on ``time_major``, and are stored in ``reserve_space`` for the backprop.

``dropout`` is a float32 attribute (TF's attr type; it is rounded to float32 first) in
``[0, 1]``.  ``dropout = 1`` drops every element: the mask is all zeros (the kept-element
scale is defined as 0, since nothing is kept), so layer ``l+1`` receives exact zeros — no
``1/(1-p)`` overflow, no NaN — and the gradient reaching layers ``0..L-2`` from above is 0
(they still get the gradients of their own ``output_h``/``output_c``).  This is the limit of
what training with ``dropout -> 1`` produces (the chance that any element is kept goes to 0),
and what PyTorch's ``dropout(p=1)`` returns.  Just below 1 the kept elements are scaled by the
large but finite ``1/(1-dropout)`` (e.g. 8.4e6 for the float32 attribute nearest ``1-1e-7``).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from . import engines, layout, reserve, resources
from .engines import gru as gru_engine
from .engines import lstm as lstm_engine
from .engines import native as native_engine
from .engines import simple_rnn as rnn_engine
from .layout import RNNConfig
from .settings import public_op
from .validate import (bool_attr, choice_attr, compute_dtype, float_arrays, float_attr, int_array,
                       int_scalar, shape_str)


class CudnnRNNResult(NamedTuple):
    output: np.ndarray
    output_h: np.ndarray
    output_c: np.ndarray
    reserve_space: np.ndarray


class CudnnRNNV2Result(NamedTuple):
    output: np.ndarray
    output_h: np.ndarray
    output_c: np.ndarray
    reserve_space: np.ndarray
    host_reserved: np.ndarray


CudnnRNNV3Result = CudnnRNNV2Result


class CudnnRNNBackpropResult(NamedTuple):
    input_backprop: np.ndarray
    input_h_backprop: np.ndarray
    input_c_backprop: np.ndarray
    params_backprop: np.ndarray


# --------------------------------------------------------------------------------------
# Attribute and shape resolution (everything here runs before any compute)


class _Attrs(NamedTuple):
    rnn_mode: str
    input_mode: str
    num_dirs: int
    dropout: float
    seed: int
    seed2: int
    num_proj: int


def _attrs(rnn_mode, input_mode, direction, dropout, seed, seed2, num_proj=0) -> _Attrs:
    rnn_mode = choice_attr(rnn_mode, "rnn_mode", layout.RNN_MODES)
    input_mode = choice_attr(input_mode, "input_mode", layout.INPUT_MODES)
    direction = choice_attr(direction, "direction", layout.DIRECTIONS)
    given = float_attr(dropout, "dropout")
    dropout = float(np.float32(given))  # a float32 attribute, as in TF
    if not 0.0 <= dropout <= 1.0:
        raise ValueError(f"dropout must be in [0, 1], got {given}")
    seed = int_scalar(seed, "seed")
    seed2 = int_scalar(seed2, "seed2")
    num_proj = int_scalar(num_proj, "num_proj")
    if num_proj < 0:
        raise ValueError(f"num_proj must be >= 0 (0 means no projection), got {num_proj}")
    if num_proj > 0 and rnn_mode != "lstm":
        raise ValueError(f"num_proj={num_proj} is only supported for rnn_mode=lstm, got rnn_mode={rnn_mode}")
    return _Attrs(rnn_mode, input_mode, 2 if direction == "bidirectional" else 1, dropout, seed,
                  seed2, num_proj)


def _make_config(attrs: _Attrs, num_layers: int, num_units: int, input_size: int) -> RNNConfig:
    if attrs.num_proj and attrs.num_proj >= num_units:
        raise ValueError(f"num_proj must satisfy 0 < num_proj < num_units, got num_proj={attrs.num_proj}, "
                         f"num_units={num_units}")
    skip = attrs.input_mode == "skip_input" or (attrs.input_mode == "auto_select" and input_size == num_units)
    if skip and input_size != num_units:
        raise ValueError(f"input_mode=skip_input requires input_size == num_units, got input_size={input_size}, "
                         f"num_units={num_units}")
    return RNNConfig(attrs.rnn_mode, num_layers, num_units, input_size, attrs.num_dirs, skip, attrs.num_proj)


class _Problem(NamedTuple):
    """The derived dimensions of one forward/backward call."""

    config: RNNConfig
    time_major: bool
    T: int
    B: int
    state_shape: tuple  # shape of input_h / output_h as the caller sees it
    cell_shape: tuple | None  # shape of input_c (lstm) as the caller sees it
    output_shape: tuple
    lengths: np.ndarray  # [B] int64
    full_length: bool  # every sequence has length T

    def valid_mask(self) -> np.ndarray | None:
        """[T, B] bool: step t belongs to sequence b; None when every length is T."""
        if self.full_length:
            return None
        return np.arange(self.T)[:, None] < self.lengths[None, :]


def _state_shape(time_major: bool, LD: int, B: int, width: int) -> tuple:
    return (LD, B, width) if time_major else (B, LD, width)


def _resolve(attrs: _Attrs, x, h, c, params, sequence_lengths, time_major: bool, fits=None) -> _Problem:
    """Derive and check every dimension.  ``fits(problem)`` (the memory estimate) runs before
    anything proportional to the batch is allocated (the lengths vector)."""
    if x.ndim != 3:
        raise ValueError(f"RNN input must be a 3-D vector. input has shape {shape_str(x.shape)}")
    if h.ndim != 3:
        raise ValueError(f"RNN input_h must be a 3-D vector. input_h has shape {shape_str(h.shape)}")
    T, B = (x.shape[0], x.shape[1]) if time_major else (x.shape[1], x.shape[0])
    I = x.shape[2]
    D = attrs.num_dirs
    LD = h.shape[0] if time_major else h.shape[1]
    L = LD // D
    Hout = h.shape[2]
    expected_h = _state_shape(time_major, L * D, B, Hout)
    if tuple(h.shape) != expected_h:
        raise ValueError(f"Invalid input_h shape: {shape_str(h.shape)} {shape_str(expected_h)} "
                         f"(expected [{'num_layers*dirs, batch' if time_major else 'batch, num_layers*dirs'}, "
                         f"num_units] with {D} direction(s) and batch {B})")
    if L < 1:
        raise ValueError(f"input_h must hold at least one layer: input_h has shape {shape_str(h.shape)}, "
                         f"{'dim 0' if time_major else 'dim 1'} must be a positive multiple of {D}")
    H = Hout
    cell_shape = None
    if attrs.rnn_mode == "lstm":
        if c.ndim != 3:
            raise ValueError(f"RNN input_c must be a 3-D vector. input_c has shape {shape_str(c.shape)}")
        if attrs.num_proj == 0:
            if c.shape != h.shape:
                raise ValueError("input_h and input_c must have the same shape w/o projection: "
                                 f"{shape_str(h.shape)} {shape_str(c.shape)}")
        else:
            if not (Hout == attrs.num_proj and Hout <= c.shape[2] and c.shape[:2] == h.shape[:2]):
                raise ValueError("Invalid input_h and input_c w/ projection size: "
                                 f"{attrs.num_proj} {shape_str(h.shape)} {shape_str(c.shape)} "
                                 f"(input_h must be [.., .., num_proj], input_c [.., .., num_units] "
                                 "with the same first two dims)")
            H = c.shape[2]
        cell_shape = tuple(c.shape)
    if T < 1:
        raise ValueError(f"max_seq_length <= 0: input has shape {shape_str(x.shape)} "
                         f"({'dim 0' if time_major else 'dim 1'} is the time axis)")
    if I < 1:
        raise ValueError(f"input_size must be >= 1: input has shape {shape_str(x.shape)} (dim 2 is input_size)")
    if H < 1:
        raise ValueError(f"num_units must be >= 1: input_h has shape {shape_str(h.shape)} (dim 2 is num_units)")
    config = _make_config(attrs, L, H, I)
    if params.ndim != 1:
        raise ValueError(f"params must be a 1-D vector, got shape {shape_str(params.shape)}")
    if params.shape[0] != config.params_size:
        raise ValueError(f"params size mismatch: expected {config.params_size}, got {params.shape[0]} "
                         f"for {config.describe()}")
    out_width = D * config.hidden_out
    output_shape = (T, B, out_width) if time_major else (B, T, out_width)
    problem = _Problem(config, time_major, T, B, expected_h, cell_shape, output_shape, None, True)
    if fits is not None:
        fits(problem)
    lengths = _lengths(sequence_lengths, T, B)
    return problem._replace(lengths=lengths, full_length=bool(np.all(lengths == T)))


def _lengths(sequence_lengths, T: int, B: int):
    if sequence_lengths is None:
        return np.full(B, T, dtype=np.int64)
    lengths = int_array(sequence_lengths, "sequence_lengths", np.int32, "int32 as in TF, or int64")
    if lengths.ndim != 1 or lengths.shape[0] != B:
        raise ValueError(f"sequence_lengths must be a vector of batch_size={B} lengths, got shape "
                         f"{shape_str(lengths.shape)}")
    lengths = lengths.astype(np.int64)
    bad = np.flatnonzero((lengths < 1) | (lengths > T))
    if bad.size:
        b = int(bad[0])
        raise ValueError(f"sequence_lengths[{b}] = {int(lengths[b])} is outside [1, {T}]")
    return lengths


# --------------------------------------------------------------------------------------
# Per-pseudo-layer dispatch to the engines


def _engine_weights(config: RNNConfig, flat: np.ndarray, p: int):
    """Engine-ready weights of pseudo-layer p (column form ``x @ W``), in the compute dtype."""
    v = layout.pseudo_layer_views(flat, config, p)
    w_input = None if v.w_input is None else v.w_input.T
    w_recurrent = np.ascontiguousarray(v.w_recurrent.T)
    if config.rnn_mode == "lstm":
        w_proj = None if v.w_proj is None else np.ascontiguousarray(v.w_proj.T)
        return lstm_engine.LSTMWeights(w_input, w_recurrent, v.bias_input + v.bias_recurrent, w_proj)
    if config.rnn_mode == "gru":
        return gru_engine.GRUWeights(w_input, w_recurrent, v.bias_input, v.bias_recurrent)
    return rnn_engine.RNNWeights(w_input, w_recurrent, v.bias_input + v.bias_recurrent)


def _activation(mode: str) -> str:
    return "tanh" if mode == "rnn_tanh" else "relu"


_TRACE_TYPES = {"lstm": lstm_engine.LSTMTrace, "gru": gru_engine.GRUTrace}


def _reserved_trace(views: dict, config: RNNConfig, T: int, B: int, p: int):
    """Pseudo-layer ``p``'s engine trace as views into the reserve buffer."""
    items = reserve.trace_items(config.rnn_mode, T, B, config.num_units, config.hidden_out)
    trace_type = _TRACE_TYPES.get(config.rnn_mode, rnn_engine.RNNTrace)
    return trace_type(*(views[f"p{p}.{name}"] for name, _ in items))


def _engine_forward(mode: str, x, h0, c0, weights, valid, out):
    engine = engines.active()  # the backend selected in fusedrnn.settings
    if mode == "lstm":
        return engine.lstm_forward(x, h0, c0, weights, valid=valid, out=out)
    if mode == "gru":
        return engine.gru_forward(x, h0, weights, valid, out)
    return engine.rnn_forward(x, h0, weights, _activation(mode), valid, out)


def _engine_backward(mode: str, x, trace, weights, dh_steps, dh_last, dc_last, valid, need_dx):
    engine = engines.active()
    if mode == "lstm":
        return engine.lstm_backward(x, trace, weights, dh_steps=dh_steps, dh_last=dh_last,
                                    dc_last=dc_last, valid=valid, need_dx=need_dx)
    if mode == "gru":
        return engine.gru_backward(x, trace, weights, dh_steps=dh_steps, dh_last=dh_last,
                                   valid=valid, need_dx=need_dx)
    return engine.rnn_backward(x, trace, weights, _activation(mode), dh_steps=dh_steps,
                               dh_last=dh_last, valid=valid, need_dx=need_dx)


def _write_param_grads(config: RNNConfig, grad_flat: np.ndarray, p: int, grads) -> None:
    v = layout.pseudo_layer_views(grad_flat, config, p)
    if v.w_input is not None:
        v.w_input[...] = grads.dw_input.T
    v.w_recurrent[...] = grads.dw_recurrent.T
    if config.rnn_mode == "gru":
        v.bias_input[...] = grads.dbias_input
        v.bias_recurrent[...] = grads.dbias_recurrent
    else:
        v.bias_input[...] = grads.dbias
        v.bias_recurrent[...] = grads.dbias
    if v.w_proj is not None:
        v.w_proj[...] = grads.dw_proj.T


def _scan(a: np.ndarray | None, direction: int):
    """Time order → scan order of a direction (a view; reversing twice is the identity)."""
    if a is None or direction == 0:
        return a
    return a[::-1]


def _dropout_scale(dropout: float) -> float:
    """The factor of a kept element: ``1/(1-dropout)``, and 0 at ``dropout = 1`` (nothing is kept,
    so the factor multiplies nothing; 0 keeps the mask ``keep * scale`` finite: no 0 * inf)."""
    return 0.0 if dropout >= 1.0 else 1.0 / (1.0 - dropout)


def _dropout_mask(attrs: _Attrs, layer: int, shape: tuple, dtype) -> np.ndarray:
    """Layer ``layer``'s mask ``keep * scale`` (module doc); all zeros when ``dropout = 1``."""
    key = ((attrs.seed % 2**64) << 32 | (attrs.seed2 % 2**64)) % 2**64
    generator = np.random.Generator(np.random.Philox(key=np.array([key, layer], dtype=np.uint64)))
    keep = generator.random(shape) >= attrs.dropout  # random() is in [0, 1): never kept at 1
    return keep.astype(dtype) * dtype.type(_dropout_scale(attrs.dropout))


def _estimate_nbytes(problem: _Problem, compute: np.dtype, dtype: np.dtype, training: bool,
                     backward: bool) -> int:
    """Upper estimate of what one forward or backward call allocates."""
    config, T, B = problem.config, problem.T, problem.B
    G, H, Hout, D = config.num_gates, config.num_units, config.hidden_out, config.num_dirs
    width = max(config.input_size, D * Hout)
    one_trace = [shape for _, shape in reserve.trace_items(config.rnn_mode, T, B, H, Hout)]
    # params_size x 4: the flat gradient, the weights, a weight-gradient GEMM's sum and block product
    work = one_trace + [(T, B, G * H)] * 2 + [(T, B, width)] * 4 + [(config.params_size,)] * 4
    total = resources.nbytes_of(work, compute.itemsize)
    total += resources.nbytes_of([(T, B, width), (config.params_size,)], dtype.itemsize)
    if training or backward:
        total += reserve.reserve_nbytes(config, T, B, config.num_layers > 1, compute)
    return total + native_engine.workspace_nbytes(config.rnn_mode, B, H, Hout, compute.itemsize)


def _ensure_fits(problem: _Problem, compute, dtype, training: bool, backward: bool, op: str) -> None:
    nbytes = _estimate_nbytes(problem, compute, dtype, training, backward)
    resources.ensure_fits(nbytes, op, f"input shape {shape_str(problem.output_shape[:2] + (problem.config.input_size,))} "
                          f"with {problem.config.describe()}")


# --------------------------------------------------------------------------------------
# Forward


def _to_time_major(x: np.ndarray, time_major: bool) -> np.ndarray:
    return x if time_major else x.transpose(1, 0, 2)


def _forward(attrs: _Attrs, inputs: dict, sequence_lengths, is_training: bool, time_major: bool):
    arrays, dtype = float_arrays(inputs)
    x, h, c, params = arrays["input"], arrays["input_h"], arrays["input_c"], arrays["params"]
    cd = compute_dtype(dtype)
    problem = _resolve(attrs, x, h, c, params, sequence_lengths, time_major,
                       lambda p: _ensure_fits(p, cd, dtype, is_training, False, "CudnnRNN forward"))
    config, T, B = problem.config, problem.T, problem.B
    L, D, H, Hout = config.num_layers, config.num_dirs, config.num_units, config.hidden_out
    LD = L * D
    is_lstm = config.rnn_mode == "lstm"
    flat = np.ascontiguousarray(params, dtype=cd)  # canonical strides: same bits for any layout
    h0 = h.astype(cd, copy=False).reshape(LD, B, Hout)
    c0 = c.astype(cd, copy=False).reshape(LD, B, H) if is_lstm else None
    layer_in = np.ascontiguousarray(_to_time_major(x, time_major), dtype=cd)
    dropout_applied = is_training and attrs.dropout > 0 and L > 1
    writer = (reserve.ReserveWriter(config, T, B, problem.lengths, dropout_applied, cd, dtype)
              if is_training else None)
    h_final = np.empty((LD, B, Hout), dtype=cd)
    c_final = np.empty((LD, B, H), dtype=cd) if is_lstm else None
    valid = problem.valid_mask()
    for layer in range(L):
        if writer is not None and layer < L - 1:
            out = writer.views[f"layer_input_{layer + 1}"]  # the next layer's input, kept for the backprop
        else:
            out = np.empty((T, B, D * Hout), dtype=cd)
        for d in range(D):
            p = layer * D + d
            weights = _engine_weights(config, flat, p)
            valid_scan = _scan(valid, d)
            trace = _engine_forward(config.rnn_mode, _scan(layer_in, d), h0[p],
                                    None if c0 is None else c0[p], weights, valid_scan,
                                    None if writer is None else _reserved_trace(writer.views, config, T, B, p))
            h_states = trace.h
            y = _scan(out[:, :, d * Hout:(d + 1) * Hout], d)
            y[...] = h_states[1:] if valid_scan is None else np.where(valid_scan[:, :, None], h_states[1:], 0)
            h_final[p] = h_states[-1]
            if is_lstm:
                c_final[p] = trace.c[-1]
        if dropout_applied and layer < L - 1:
            mask = writer.views[f"dropout_mask_{layer + 1}"]
            mask[...] = _dropout_mask(attrs, layer, out.shape, cd)
            out *= mask
        layer_in = out
    output = _to_time_major(layer_in, time_major).astype(dtype)
    output_h = h_final.reshape(problem.state_shape).astype(dtype)
    output_c = c_final.reshape(problem.cell_shape).astype(dtype) if is_lstm else np.zeros((), dtype)
    reserve_space = writer.array() if writer is not None else np.zeros((), dtype)
    return output, output_h, output_c, reserve_space


# --------------------------------------------------------------------------------------
# Backward


def _check_shape(array: np.ndarray, expected: tuple, name: str) -> None:
    if tuple(array.shape) != tuple(expected):
        raise ValueError(f"Invalid {name} shape: {shape_str(array.shape)} {shape_str(expected)} "
                         f"({name} must have shape {shape_str(expected)})")


def _backward(attrs: _Attrs, inputs: dict, sequence_lengths, time_major: bool):
    arrays, dtype = float_arrays(inputs)
    x, h, c, params = arrays["input"], arrays["input_h"], arrays["input_c"], arrays["params"]
    cd = compute_dtype(dtype)
    problem = _resolve(attrs, x, h, c, params, sequence_lengths, time_major,
                       lambda p: _ensure_fits(p, cd, dtype, True, True, "CudnnRNN backprop"))
    config, T, B = problem.config, problem.T, problem.B
    is_lstm = config.rnn_mode == "lstm"
    _check_shape(arrays["output"], problem.output_shape, "output")
    _check_shape(arrays["output_h"], problem.state_shape, "output_h")
    if is_lstm:
        _check_shape(arrays["output_c"], problem.cell_shape, "output_c")
    _check_shape(arrays["output_backprop"], problem.output_shape, "output_backprop")
    _check_shape(arrays["output_h_backprop"], problem.state_shape, "output_h_backprop")
    if is_lstm:
        _check_shape(arrays["output_c_backprop"], problem.cell_shape, "output_c_backprop")
    views, dropout_applied = reserve.read_reserve(arrays["reserve_space"], config, T, B,
                                                  problem.lengths, cd)
    L, D, H, Hout = config.num_layers, config.num_dirs, config.num_units, config.hidden_out
    LD = L * D
    flat = np.ascontiguousarray(params, dtype=cd)  # canonical strides: same bits for any layout
    d_out = np.array(_to_time_major(arrays["output_backprop"], time_major), dtype=cd)
    dh_final = arrays["output_h_backprop"].astype(cd, copy=False).reshape(LD, B, Hout)
    dc_final = arrays["output_c_backprop"].astype(cd, copy=False).reshape(LD, B, H) if is_lstm else None
    valid = problem.valid_mask()
    if valid is not None:
        d_out *= valid[:, :, None]
    x_tm = np.ascontiguousarray(_to_time_major(x, time_major), dtype=cd)
    grad_flat = np.zeros(config.params_size, dtype=cd)
    dh0 = np.empty((LD, B, Hout), dtype=cd)
    dc0 = np.empty((LD, B, H), dtype=cd) if is_lstm else None
    for layer in range(L - 1, -1, -1):
        layer_in = x_tm if layer == 0 else views[f"layer_input_{layer}"]
        d_in = np.zeros(layer_in.shape, dtype=cd)
        for d in range(D):
            p = layer * D + d
            weights = _engine_weights(config, flat, p)
            trace = _reserved_trace(views, config, T, B, p)
            grads = _engine_backward(
                config.rnn_mode, _scan(layer_in, d), trace, weights,
                dh_steps=_scan(d_out[:, :, d * Hout:(d + 1) * Hout], d),
                dh_last=dh_final[p], dc_last=None if dc_final is None else dc_final[p],
                valid=_scan(valid, d), need_dx=True)
            d_in += _scan(grads.dx, d)
            dh0[p] = grads.dh0
            if is_lstm:
                dc0[p] = grads.dc0
            _write_param_grads(config, grad_flat, p, grads)
        if layer > 0:
            if dropout_applied:
                d_in *= views[f"dropout_mask_{layer}"]
            if valid is not None:
                d_in *= valid[:, :, None]
            d_out = d_in
        else:
            d_x = d_in
    if valid is not None:
        d_x *= valid[:, :, None]
    input_backprop = _to_time_major(d_x, time_major).astype(dtype)
    input_h_backprop = dh0.reshape(problem.state_shape).astype(dtype)
    input_c_backprop = dc0.reshape(problem.cell_shape).astype(dtype) if is_lstm else np.zeros((), dtype)
    return CudnnRNNBackpropResult(input_backprop, input_h_backprop, input_c_backprop,
                                  grad_flat.astype(dtype))


# --------------------------------------------------------------------------------------
# Public forward / backward ops


@public_op
def cudnn_rnn(input, input_h, input_c, params, *, rnn_mode="lstm", input_mode="linear_input",
              direction="unidirectional", dropout=0.0, seed=0, seed2=0, is_training=True) -> CudnnRNNResult:
    """TF ``CudnnRNN``: time-major forward of a stacked, fixed-length RNN.

    input [T, B, I], input_h [L*D, B, Hout], input_c [L*D, B, H] (lstm; ignored
    otherwise), params: flat cuDNN buffer (see :mod:`fusedrnn.layout`).  ``dropout`` in
    ``[0, 1]`` acts between layers in training only; 1 drops everything (module doc).
    Tensor inputs may be Python numbers or lists (converted to the arrays' dtype, else float32).
    Returns ``(output [T, B, D*Hout], output_h, output_c, reserve_space)``.
    """
    attrs = _attrs(rnn_mode, input_mode, direction, dropout, seed, seed2)
    is_training = bool_attr(is_training, "is_training")
    inputs = dict(input=input, input_h=input_h, input_c=input_c, params=params)
    return CudnnRNNResult(*_forward(attrs, inputs, None, is_training, True))


def _host_reserved(is_training: bool) -> np.ndarray:
    return np.zeros(2, dtype=np.int8) if is_training else np.zeros((), dtype=np.int8)


@public_op
def cudnn_rnn_v2(input, input_h, input_c, params, *, rnn_mode="lstm", input_mode="linear_input",
                 direction="unidirectional", dropout=0.0, seed=0, seed2=0,
                 is_training=True) -> CudnnRNNV2Result:
    """TF ``CudnnRNNV2``: :func:`cudnn_rnn` plus ``host_reserved`` (int8 ``[2]`` zeros in
    training, a rank-0 int8 zero otherwise; it has no numerical meaning)."""
    result = cudnn_rnn(input, input_h, input_c, params, rnn_mode=rnn_mode, input_mode=input_mode,
                       direction=direction, dropout=dropout, seed=seed, seed2=seed2,
                       is_training=is_training)
    return CudnnRNNV2Result(*result, _host_reserved(bool(is_training)))


@public_op
def cudnn_rnn_v3(input, input_h, input_c, params, sequence_lengths, *, rnn_mode="lstm",
                 input_mode="linear_input", direction="unidirectional", dropout=0.0, seed=0, seed2=0,
                 num_proj=0, is_training=True, time_major=True) -> CudnnRNNV2Result:
    """TF ``CudnnRNNV3``: variable lengths, LSTM projection, batch-major layout.

    sequence_lengths [B] int32/int64, each in [1, T].  time_major=False: input [B, T, I],
    output [B, T, D*Hout], states [B, L*D, Hout] with TF's reshape semantics (module doc).
    ``host_reserved`` is a rank-0 int8 zero.
    """
    attrs = _attrs(rnn_mode, input_mode, direction, dropout, seed, seed2, num_proj)
    is_training = bool_attr(is_training, "is_training")
    time_major = bool_attr(time_major, "time_major")
    if sequence_lengths is None:
        raise TypeError("sequence_lengths is required for cudnn_rnn_v3 (a [batch_size] int32 vector)")
    inputs = dict(input=input, input_h=input_h, input_c=input_c, params=params)
    result = _forward(attrs, inputs, sequence_lengths, is_training, time_major)
    return CudnnRNNV2Result(*result, np.zeros((), dtype=np.int8))


@public_op
def cudnn_rnn_backprop(input, input_h, input_c, params, output, output_h, output_c, output_backprop,
                       output_h_backprop, output_c_backprop, reserve_space, *, rnn_mode="lstm",
                       input_mode="linear_input", direction="unidirectional", dropout=0.0, seed=0,
                       seed2=0) -> CudnnRNNBackpropResult:
    """TF ``CudnnRNNBackprop``: gradients of a training-mode :func:`cudnn_rnn`.

    Takes the forward's inputs and outputs, the upstream gradients of ``output``,
    ``output_h`` and ``output_c``, and its ``reserve_space``.  Returns
    ``(input_backprop, input_h_backprop, input_c_backprop, params_backprop)`` shaped like
    ``input``, ``input_h``, ``input_c`` (rank-0 zero for non-LSTM modes) and ``params``.
    With dropout, the forward's masks (in ``reserve_space``) are reused: the gradient is that of
    the forward that produced ``reserve_space``, whatever ``dropout``/``seed``/``seed2`` say here.
    """
    attrs = _attrs(rnn_mode, input_mode, direction, dropout, seed, seed2)
    inputs = dict(input=input, input_h=input_h, input_c=input_c, params=params, output=output,
                  output_h=output_h, output_c=output_c, output_backprop=output_backprop,
                  output_h_backprop=output_h_backprop, output_c_backprop=output_c_backprop,
                  reserve_space=reserve_space)
    return _backward(attrs, inputs, None, True)


@public_op
def cudnn_rnn_backprop_v2(input, input_h, input_c, params, output, output_h, output_c, output_backprop,
                          output_h_backprop, output_c_backprop, reserve_space, host_reserved, *,
                          rnn_mode="lstm", input_mode="linear_input", direction="unidirectional",
                          dropout=0.0, seed=0, seed2=0) -> CudnnRNNBackpropResult:
    """TF ``CudnnRNNBackpropV2``: :func:`cudnn_rnn_backprop`; ``host_reserved`` is ignored."""
    return cudnn_rnn_backprop(input, input_h, input_c, params, output, output_h, output_c,
                              output_backprop, output_h_backprop, output_c_backprop, reserve_space,
                              rnn_mode=rnn_mode, input_mode=input_mode, direction=direction,
                              dropout=dropout, seed=seed, seed2=seed2)


@public_op
def cudnn_rnn_backprop_v3(input, input_h, input_c, params, sequence_lengths, output, output_h, output_c,
                          output_backprop, output_h_backprop, output_c_backprop, reserve_space,
                          host_reserved, *, rnn_mode="lstm", input_mode="linear_input",
                          direction="unidirectional", dropout=0.0, seed=0, seed2=0, num_proj=0,
                          time_major=True) -> CudnnRNNBackpropResult:
    """TF ``CudnnRNNBackpropV3``: gradients of :func:`cudnn_rnn_v3` (``host_reserved`` ignored).

    ``input_backprop`` is 0 at padded positions (t >= sequence_lengths[b]).
    """
    attrs = _attrs(rnn_mode, input_mode, direction, dropout, seed, seed2, num_proj)
    time_major = bool_attr(time_major, "time_major")
    if sequence_lengths is None:
        raise TypeError("sequence_lengths is required for cudnn_rnn_backprop_v3 (a [batch_size] int32 vector)")
    inputs = dict(input=input, input_h=input_h, input_c=input_c, params=params, output=output,
                  output_h=output_h, output_c=output_c, output_backprop=output_backprop,
                  output_h_backprop=output_h_backprop, output_c_backprop=output_c_backprop,
                  reserve_space=reserve_space)
    return _backward(attrs, inputs, sequence_lengths, time_major)


# --------------------------------------------------------------------------------------
# Parameter ops


class CanonicalParams(NamedTuple):
    weights: list
    biases: list


def _param_config(attrs: _Attrs, num_layers, num_units, input_size) -> RNNConfig:
    num_layers = int_scalar(num_layers, "num_layers")
    num_units = int_scalar(num_units, "num_units")
    input_size = int_scalar(input_size, "input_size")
    if num_layers < 1:
        raise ValueError(f"num_layers must be >= 1, got {num_layers}")
    if num_units < 1:
        raise ValueError(f"num_units must be >= 1, got {num_units}")
    if input_size < 1:
        raise ValueError(f"input_size must be >= 1, got {input_size}")
    return _make_config(attrs, num_layers, num_units, input_size)


def _dtype_attr(value, name: str, allowed: tuple) -> np.dtype:
    value = getattr(value, "as_numpy_dtype", value)  # accepts tf.DType too
    if value is None:  # np.dtype(None) would silently mean float64
        raise TypeError(f"{name} must be a dtype, one of ({', '.join(allowed)}), got None")
    try:
        dtype = np.dtype(value)
    except TypeError:
        raise TypeError(f"{name} must be a dtype, one of ({', '.join(allowed)}), got {value!r}") from None
    if dtype.name not in allowed:
        raise TypeError(f"{name} must be one of ({', '.join(allowed)}), got {dtype.name}")
    return dtype


@public_op
def cudnn_rnn_params_size(num_layers, num_units, input_size, *, T=np.float32, S=np.int32, rnn_mode="lstm",
                          input_mode="linear_input", direction="unidirectional", dropout=0.0, seed=0,
                          seed2=0, num_proj=0) -> np.ndarray:
    """TF ``CudnnRNNParamsSize``: the element count of ``params``, as a ``[1]`` array of dtype S.

    ``num_units`` is the cell size H here; the count follows spec §6.4.
    """
    attrs = _attrs(rnn_mode, input_mode, direction, dropout, seed, seed2, num_proj)
    _dtype_attr(T, "T", ("float16", "float32", "float64"))
    s = _dtype_attr(S, "S", ("int32", "int64"))
    config = _param_config(attrs, num_layers, num_units, input_size)
    if config.params_size > np.iinfo(s).max:
        raise ValueError(f"params size {config.params_size} does not fit in S={s.name}")
    return np.array([config.params_size], dtype=s)


def _to_canonical(attrs, num_layers, num_units, input_size, params, n_weights, n_biases,
                  count_names=("num_params", "num_params")) -> CanonicalParams:
    config = _param_config(attrs, num_layers, num_units, input_size)
    arrays, dtype = float_arrays({"params": params})
    params = arrays["params"]
    if params.ndim != 1:
        raise ValueError(f"params must be a 1-D vector, got shape {shape_str(params.shape)}")
    if n_weights != config.num_weights:
        raise ValueError(f"C Number of params mismatch. Expected {n_weights}, got {config.num_weights} "
                         f"({count_names[0]}={n_weights}, but {config.describe()} has {config.num_weights} "
                         "weights)")
    if n_biases != config.num_biases:
        raise ValueError(f"A Number of params mismatch. Expected {n_biases}, got {config.num_biases} "
                         f"({count_names[1]}={n_biases}, but {config.describe()} has {config.num_biases} "
                         "biases)")
    if params.shape[0] != config.params_size:
        raise ValueError(f"params size mismatch: expected {config.params_size}, got {params.shape[0]} "
                         f"for {config.describe()}")
    resources.ensure_fits(resources.nbytes_of([params.shape], dtype.itemsize) + 128 * (n_weights + n_biases),
                          "CudnnRNNParamsToCanonical", f"params shape {shape_str(params.shape)} with "
                          f"{config.describe()}")
    return CanonicalParams(*layout.params_to_canonical(params, config))


@public_op
def cudnn_rnn_params_to_canonical(num_layers, num_units, input_size, params, *, num_params,
                                  rnn_mode="lstm", input_mode="linear_input", direction="unidirectional",
                                  dropout=0.0, seed=0, seed2=0) -> CanonicalParams:
    """TF ``CudnnRNNParamsToCanonical``: split ``params`` into ``weights`` (2-D ``[rows, cols]``)
    and ``biases`` (``[H]``), each a list of ``num_params`` arrays in canonical order."""
    attrs = _attrs(rnn_mode, input_mode, direction, dropout, seed, seed2)
    num_params = int_scalar(num_params, "num_params", minimum=1)
    return _to_canonical(attrs, num_layers, num_units, input_size, params, num_params, num_params)


@public_op
def cudnn_rnn_params_to_canonical_v2(num_layers, num_units, input_size, params, *, num_params_weights,
                                     num_params_biases, rnn_mode="lstm", input_mode="linear_input",
                                     direction="unidirectional", dropout=0.0, seed=0, seed2=0,
                                     num_proj=0) -> CanonicalParams:
    """TF ``CudnnRNNParamsToCanonicalV2``: as V1, with a projection matrix ``[P, H]`` after
    each pseudo-layer's recurrent matrices when ``num_proj > 0`` (works with num_proj=0 too)."""
    attrs = _attrs(rnn_mode, input_mode, direction, dropout, seed, seed2, num_proj)
    n_w = int_scalar(num_params_weights, "num_params_weights", minimum=1)
    n_b = int_scalar(num_params_biases, "num_params_biases", minimum=1)
    return _to_canonical(attrs, num_layers, num_units, input_size, params, n_w, n_b,
                         ("num_params_weights", "num_params_biases"))


def _from_canonical(attrs, num_layers, num_units, input_size, weights, biases) -> np.ndarray:
    config = _param_config(attrs, num_layers, num_units, input_size)
    for name, value in (("weights", weights), ("biases", biases)):
        if isinstance(value, np.ndarray) or not isinstance(value, (list, tuple)):
            raise TypeError(f"{name} must be a list of arrays, got {type(value).__name__}")
    named = {f"weights[{k}]": w for k, w in enumerate(weights)}
    named.update({f"biases[{k}]": b for k, b in enumerate(biases)})
    arrays, dtype = float_arrays(named)
    for name, given, expected in (("weights", len(weights), config.num_weights),
                                  ("biases", len(biases), config.num_biases)):
        if given != expected:
            raise ValueError(f"Number of params mismatch. Expected {expected} {name}, got {given} "
                             f"for {config.describe()}")
    regions = config.regions
    for kind, region_list in (("weights", regions.weights), ("biases", regions.biases)):
        for k, region in enumerate(region_list):
            array = arrays[f"{kind}[{k}]"]
            if array.size != region.size:
                note = " (absent skip_input matrix: must be empty)" if region.size == 0 else ""
                raise ValueError(f"Params size mismatch. Expected {region.size}, got {array.size} for "
                                 f"{kind}[{k}] of shape {shape_str(region.shape)}{note}")
    if dtype is None:
        dtype = np.dtype(np.float32)
    resources.ensure_fits(resources.nbytes_of([(config.params_size,)], dtype.itemsize),
                          "CudnnRNNCanonicalToParams", f"params shape [{config.params_size}] with "
                          f"{config.describe()}")
    return layout.canonical_to_params([arrays[f"weights[{k}]"] for k in range(len(weights))],
                                      [arrays[f"biases[{k}]"] for k in range(len(biases))], config, dtype)


@public_op
def cudnn_rnn_canonical_to_params(num_layers, num_units, input_size, weights, biases, *, rnn_mode="lstm",
                                  input_mode="linear_input", direction="unidirectional", dropout=0.0,
                                  seed=0, seed2=0) -> np.ndarray:
    """TF ``CudnnRNNCanonicalToParams``: pack canonical ``weights``/``biases`` lists into ``params``.

    Each tensor needs the region's element count; it is copied in C order (like TF,
    its shape is not otherwise checked)."""
    attrs = _attrs(rnn_mode, input_mode, direction, dropout, seed, seed2)
    return _from_canonical(attrs, num_layers, num_units, input_size, weights, biases)


@public_op
def cudnn_rnn_canonical_to_params_v2(num_layers, num_units, input_size, weights, biases, *,
                                     rnn_mode="lstm", input_mode="linear_input", direction="unidirectional",
                                     dropout=0.0, seed=0, seed2=0, num_proj=0) -> np.ndarray:
    """TF ``CudnnRNNCanonicalToParamsV2``: as V1, with the ``[P, H]`` projection matrices."""
    attrs = _attrs(rnn_mode, input_mode, direction, dropout, seed, seed2, num_proj)
    return _from_canonical(attrs, num_layers, num_units, input_size, weights, biases)
