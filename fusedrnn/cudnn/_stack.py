"""The stacking of the CudnnRNN ops over layers, directions and sequence lengths.

Per pseudo-layer dispatch to the engines (``_engine_forward``/``_engine_backward`` call the
backend that :mod:`fusedrnn.settings` selects), the dropout masks between layers, the memory
estimate checked before any allocation, and ``_forward``/``_backward``: the loops over layers
and directions that the public ops in :mod:`fusedrnn.cudnn._ops` call.  Shapes, layouts and the
dropout rule ("module doc" below) are in the docstring of :mod:`fusedrnn.cudnn`.
"""

from __future__ import annotations

import functools

import numpy as np

from .. import engines, layout, reserve, resources, settings
from ..engines import gru as gru_engine
from ..engines import lstm as lstm_engine
from ..engines import native as native_engine
from ..engines import simple_rnn as rnn_engine
from ..engines.buffers import aligned_copy, aligned_empty, aligned_zeros
from ..engines.common import NO_OUT, WeightGradOut, zero_ended
from ..layout import RNNConfig
from ..validate import compute_dtype, float_arrays, shape_str
from ._resolve import _Attrs, _Problem, _resolve
from ._results import CudnnRNNBackpropResult


# --------------------------------------------------------------------------------------
# Per-pseudo-layer dispatch to the engines


def _engine_weights(config: RNNConfig, flat: np.ndarray, p: int):
    """Engine-ready weights of pseudo-layer p (column form ``x @ W``), in the compute dtype."""
    v = layout.pseudo_layer_views(flat, config, p)
    w_input = None if v.w_input is None else v.w_input.T
    # views of the parameters: the engines read (native: pack once per call) them as they are
    if config.rnn_mode == "lstm":
        w_proj = None if v.w_proj is None else np.ascontiguousarray(v.w_proj.T)
        return lstm_engine.LSTMWeights(w_input, v.w_recurrent.T, v.bias_input + v.bias_recurrent, w_proj)
    w_recurrent = v.w_recurrent.T
    if config.rnn_mode == "gru":
        return gru_engine.GRUWeights(w_input, w_recurrent, v.bias_input, v.bias_recurrent)
    return rnn_engine.RNNWeights(w_input, w_recurrent, v.bias_input + v.bias_recurrent)


def _activation(mode: str) -> str:
    return "tanh" if mode == "rnn_tanh" else "relu"


_TRACE_TYPES = {"lstm": lstm_engine.LSTMTrace, "gru": gru_engine.GRUTrace}


def _reserved_trace(views: dict, config: RNNConfig, T: int, B: int, p: int):
    """Pseudo-layer ``p``'s engine trace as views into the reserve buffer."""
    trace_type = _TRACE_TYPES.get(config.rnn_mode, rnn_engine.RNNTrace)
    return trace_type(*[views[key] for key in _trace_keys(config.rnn_mode, p)])


@functools.lru_cache(maxsize=256)
def _trace_keys(mode: str, p: int) -> tuple:
    """The reserve's names of pseudo-layer ``p``'s trace arrays, in the engine's order."""
    return tuple(f"p{p}.{name}" for name, _ in reserve.trace_items(mode, 1, 1, 1, 1))


def _engine_forward(mode: str, x, h0, c0, weights, valid, out):
    engine = engines.active()  # the backend selected in fusedrnn.settings
    if mode == "lstm":  # without `out` (inference) only h and the final c are read
        return engine.lstm_forward(x, h0, c0, weights, valid=valid, out=out, keep_trace=out is not None)
    if mode == "gru":
        return engine.gru_forward(x, h0, weights, valid, out, keep_trace=out is not None)
    return engine.rnn_forward(x, h0, weights, _activation(mode), valid, out)


def _engine_backward(mode: str, x, trace, weights, dh_steps, dh_last, dc_last, valid, need_dx,
                     weight_grads_out: WeightGradOut = NO_OUT):
    engine = engines.active()
    kwargs = dict(dh_steps=dh_steps, dh_last=dh_last, valid=valid, need_dx=need_dx,
                  weight_grads_out=weight_grads_out)
    if mode == "lstm":
        return engine.lstm_backward(x, trace, weights, dc_last=dc_last, **kwargs)
    if mode == "gru":
        return engine.gru_backward(x, trace, weights, **kwargs)
    return engine.rnn_backward(x, trace, weights, _activation(mode), **kwargs)


def _weight_grads_out(v: layout.PseudoLayerParams) -> WeightGradOut:
    """A pseudo-layer's weight-gradient blocks (its views into the flat gradient) as the engines'
    ``[in, G·H]`` matrices (transposed views): the backward's GEMMs write there, nothing is copied."""
    return WeightGradOut(*(None if m is None else m.T for m in (v.w_input, v.w_recurrent, v.w_proj)))


def _write_bias_grads(config: RNNConfig, v: layout.PseudoLayerParams, grads) -> None:
    """The bias gradients into a pseudo-layer's views (its weight gradients are written in place:
    :func:`_weight_grads_out`)."""
    if config.rnn_mode == "gru":
        v.bias_input[...] = grads.dbias_input
        v.bias_recurrent[...] = grads.dbias_recurrent
    else:
        v.bias_input[...] = grads.dbias
        v.bias_recurrent[...] = grads.dbias


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
    return _estimate(problem.config, problem.T, problem.B, compute, dtype, training, backward,
                     settings.get_num_threads())


@functools.lru_cache(maxsize=512)
def _estimate(config: RNNConfig, T: int, B: int, compute: np.dtype, dtype: np.dtype, training: bool,
              backward: bool, threads: int) -> int:
    G, H, Hout, D = config.num_gates, config.num_units, config.hidden_out, config.num_dirs
    width = max(config.input_size, D * Hout)
    one_trace = [shape for _, shape in reserve.trace_items(config.rnn_mode, T, B, H, Hout)]
    # params_size x 4: the flat gradient, the weights, a weight-gradient GEMM's sum and block product
    work = one_trace + [(T, B, G * H)] * 2 + [(T, B, width)] * 4 + [(config.params_size,)] * 4
    total = resources.nbytes_of(work, compute.itemsize)
    total += resources.nbytes_of([(T, B, width), (config.params_size,)], dtype.itemsize)
    if training or backward:
        total += reserve.reserve_nbytes(config, T, B, config.num_layers > 1, compute)
    return total + native_engine.workspace_nbytes(config.rnn_mode, B, H, Hout, compute.itemsize,
                                                  inputs=max(config.input_size, D * Hout), threads=threads)


def _ensure_fits(problem: _Problem, compute, dtype, training: bool, backward: bool, op: str) -> None:
    nbytes = _estimate_nbytes(problem, compute, dtype, training, backward)
    resources.ensure_fits(nbytes, op, lambda: (
        f"input shape {shape_str(problem.output_shape[:2] + (problem.config.input_size,))} "
        f"with {problem.config.describe()}"))


# --------------------------------------------------------------------------------------
# Forward


def _result(a: np.ndarray, dtype) -> np.ndarray:
    """An output in the caller's dtype, C-contiguous: ``a`` itself when it already is one (every
    array passed here is the op's own, so returning it shares nothing with the caller)."""
    return np.ascontiguousarray(a, dtype=dtype)


def _batch_order(problem: _Problem) -> np.ndarray | None:
    """The batch rows by decreasing length (stable), or None when they are in that order already.

    Both passes run the layers on the sorted batch: at each step the sequences that have ended
    are then the trailing rows, which the native engine leaves out of the step's GEMM and cell
    math (a row's result does not depend on the rows computed with it).  The reserve holds the
    sorted rows; the inputs are gathered into this order and the results scattered back."""
    lengths = problem.lengths
    if problem.full_length or bool(np.all(lengths[:-1] >= lengths[1:])):
        return None
    return np.argsort(-lengths, kind="stable")


def _rows(a: np.ndarray | None, order: np.ndarray | None, axis: int = 1) -> np.ndarray | None:
    """``a`` with its batch axis in ``order`` (a fresh C-contiguous array: the backend's
    ``take_rows`` gathers into one), or ``a`` itself when order is None."""
    if a is None or order is None:
        return a
    return engines.active().take_rows(a, order, axis)


def _unsort(a: np.ndarray, order: np.ndarray | None, axis: int = 1) -> np.ndarray:
    """Rows of the sorted batch back in the caller's order (a gather by the inverse permutation:
    a gather is faster than a scatter by ``order``)."""
    if order is None:
        return a
    inverse = np.empty_like(order)
    inverse[order] = np.arange(order.size, dtype=order.dtype)
    return engines.active().take_rows(a, inverse, axis)


def _copy_valid(dst: np.ndarray, src: np.ndarray, valid: np.ndarray | None) -> None:
    """``dst[...] = where(valid, src, 0)`` for ``[T, B, ·]`` arrays and their ``[T, B]`` mask: a
    copy, then the ended rows zeroed (:func:`.common.zero_ended`; np.where's temporary and select
    took 3.5x as long at T = 50, B = 32, H = 256)."""
    dst[...] = src
    zero_ended(valid, dst)


def _to_time_major(x: np.ndarray, time_major: bool) -> np.ndarray:
    return x if time_major else x.transpose(1, 0, 2)


def _forward(attrs: _Attrs, inputs: dict, sequence_lengths, is_training: bool, time_major: bool):
    arrays, dtype = float_arrays(inputs)
    x, h, c, params = arrays["input"], arrays["input_h"], arrays["input_c"], arrays["params"]
    cd = compute_dtype(dtype)
    problem = _resolve(attrs, x, h, c, params, sequence_lengths, time_major, _ensure_fits,
                       (cd, dtype, is_training, False, "CudnnRNN forward"))
    flat = np.ascontiguousarray(params, dtype=cd)  # canonical strides: same bits for any layout
    return _stacked_forward(attrs, problem, flat, *_forward_operands(problem, x, h, c, cd), is_training,
                            dtype)


def _forward_operands(problem: _Problem, x: np.ndarray, h: np.ndarray, c: np.ndarray,
                      cd: np.dtype) -> tuple:
    """A checked forward call's ``(layer_in [T, B, I], h0 [L·D, B, Hout], c0 [L·D, B, H] (LSTM;
    else None), valid [T, B] (None at full length), order)`` in the compute dtype ``cd``, the
    batch in :func:`_batch_order`'s order (``order``: None when it is the caller's)."""
    config, B = problem.config, problem.B
    LD = config.num_layers * config.num_dirs
    h0 = h.astype(cd, copy=False).reshape(LD, B, config.hidden_out)
    c0 = c.astype(cd, copy=False).reshape(LD, B, config.num_units) if config.rnn_mode == "lstm" else None
    order = _batch_order(problem)
    # one copy at most: the gather (sorted batch) or the layout/dtype conversion
    layer_in = np.ascontiguousarray(_rows(_to_time_major(x, problem.time_major), order), dtype=cd)
    valid = None
    if order is not None:
        h0, c0 = _rows(h0, order), _rows(c0, order)
    if not problem.full_length:
        valid = _rows(problem.valid_mask(), order)
    return layer_in, h0, c0, valid, order


def _stacked_forward(attrs: _Attrs, problem: _Problem, flat: np.ndarray, layer_in: np.ndarray,
                     h0: np.ndarray, c0: np.ndarray | None, valid: np.ndarray | None,
                     order: np.ndarray | None, is_training: bool, dtype: np.dtype) -> tuple:
    """The layers and directions of a checked forward call: ``flat`` the parameters, ``layer_in
    [T, B, I]``, ``h0 [L·D, B, Hout]`` and ``c0`` (LSTM) in the compute dtype and the sorted batch
    order (``order``: None when unsorted; ``valid [T, B]``: None at full length); returns
    ``(output, output_h, output_c, reserve_space)`` in the caller's layout and ``dtype``
    (:func:`_forward_operands` gives the operands)."""
    config, T, B, time_major = problem.config, problem.T, problem.B, problem.time_major
    L, D, H, Hout = config.num_layers, config.num_dirs, config.num_units, config.hidden_out
    LD = L * D
    is_lstm = config.rnn_mode == "lstm"
    cd = flat.dtype
    dropout_applied = is_training and attrs.dropout > 0 and L > 1
    writer = (reserve.ReserveWriter(config, T, B, problem.lengths, dropout_applied, cd, dtype)
              if is_training else None)
    h_final = np.empty((LD, B, Hout), dtype=cd)
    c_final = np.empty((LD, B, H), dtype=cd) if is_lstm else None
    for layer in range(L):
        if writer is not None and layer < L - 1:
            out = writer.views[f"layer_input_{layer + 1}"]  # the next layer's input, kept for the backprop
        else:
            out = aligned_empty((T, B, D * Hout), cd)
        for d in range(D):
            p = layer * D + d
            weights = _engine_weights(config, flat, p)
            valid_scan = _scan(valid, d)
            trace = _engine_forward(config.rnn_mode, _scan(layer_in, d), h0[p],
                                    None if c0 is None else c0[p], weights, valid_scan,
                                    None if writer is None else _reserved_trace(writer.views, config, T, B, p))
            h_states = trace.h
            y = _scan(out[:, :, d * Hout:(d + 1) * Hout], d)
            _copy_valid(y, h_states[1:], valid_scan)
            h_final[p] = h_states[-1]
            if is_lstm:
                c_final[p] = trace.c[-1]
        if dropout_applied and layer < L - 1:
            mask = writer.views[f"dropout_mask_{layer + 1}"]
            mask[...] = _rows(_dropout_mask(attrs, layer, out.shape, cd), order)  # drawn in the caller's order
            out *= mask
        layer_in = out
    if order is not None:
        layer_in, h_final = _unsort(layer_in, order), _unsort(h_final, order)
        c_final = _unsort(c_final, order) if is_lstm else None
    output = _result(_to_time_major(layer_in, time_major), dtype)
    output_h = _result(h_final.reshape(problem.state_shape), dtype)
    output_c = _result(c_final.reshape(problem.cell_shape), dtype) if is_lstm else np.zeros((), dtype)
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
    problem = _resolve(attrs, x, h, c, params, sequence_lengths, time_major, _ensure_fits,
                       (cd, dtype, True, True, "CudnnRNN backprop"))
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
    flat = np.ascontiguousarray(params, dtype=cd)  # canonical strides: same bits for any layout
    return _stacked_backward(problem, flat, views, dropout_applied,
                             *_backward_operands(problem, arrays, cd), dtype)


def _backward_operands(problem: _Problem, arrays: dict, cd: np.dtype) -> tuple:
    """A checked backward call's ``(x_tm [T, B, I], d_out [T, B, D·Hout], dh_final [L·D, B,
    Hout], dc_final [L·D, B, H] (LSTM; else None), valid, order)`` from its named ``arrays``, as
    :func:`_forward_operands`; ``d_out`` is a copy of the caller's ``output_backprop`` with the
    padded steps zeroed where there are any (even NaN or Inf there is ignored), else a read-only
    view (the engines copy a slice they need contiguous)."""
    config, B, time_major = problem.config, problem.B, problem.time_major
    LD = config.num_layers * config.num_dirs
    order = _batch_order(problem)
    d_out = _to_time_major(arrays["output_backprop"], time_major)
    if order is not None:  # a copy of our own, masked in place below
        d_out = _rows(d_out, order).astype(cd, copy=False)
    elif not problem.full_length:
        d_out = aligned_copy(d_out, cd)
    else:
        d_out = d_out.astype(cd, copy=False)
    dh_final = arrays["output_h_backprop"].astype(cd, copy=False).reshape(LD, B, config.hidden_out)
    dc_final = (arrays["output_c_backprop"].astype(cd, copy=False).reshape(LD, B, config.num_units)
                if config.rnn_mode == "lstm" else None)
    valid = None
    if order is not None:
        dh_final, dc_final = _rows(dh_final, order), _rows(dc_final, order)
    if not problem.full_length:
        valid = _rows(problem.valid_mask(), order)
        zero_ended(valid, d_out)
    x_tm = np.ascontiguousarray(_rows(_to_time_major(arrays["input"], time_major), order), dtype=cd)
    return x_tm, d_out, dh_final, dc_final, valid, order


def _stacked_backward(problem: _Problem, flat: np.ndarray, views: dict, dropout_applied: bool,
                      x_tm: np.ndarray, d_out: np.ndarray, dh_final: np.ndarray,
                      dc_final: np.ndarray | None, valid: np.ndarray | None,
                      order: np.ndarray | None, dtype: np.dtype) -> CudnnRNNBackpropResult:
    """The layers and directions of a checked backward call: ``flat`` the parameters, ``views``
    the reserve's arrays, then :func:`_backward_operands` (``d_out`` read only).  Returns the
    four gradients in the caller's layout and ``dtype``."""
    config, T, B, time_major = problem.config, problem.T, problem.B, problem.time_major
    L, D, H, Hout = config.num_layers, config.num_dirs, config.num_units, config.hidden_out
    LD = L * D
    is_lstm = config.rnn_mode == "lstm"
    cd = flat.dtype
    # every element is written below (the pseudo-layers' views cover the buffer once), unless
    # the batch or the sequence is empty
    grad_flat = (aligned_empty if T and B else aligned_zeros)(config.params_size, cd)
    dh0 = np.empty((LD, B, Hout), dtype=cd)
    dc0 = np.empty((LD, B, H), dtype=cd) if is_lstm else None
    for layer in range(L - 1, -1, -1):
        layer_in = x_tm if layer == 0 else views[f"layer_input_{layer}"]
        d_in = None  # the directions' input gradients summed: a fresh array of the first's
        for d in range(D):
            p = layer * D + d
            weights = _engine_weights(config, flat, p)
            trace = _reserved_trace(views, config, T, B, p)
            grad_views = layout.pseudo_layer_views(grad_flat, config, p)
            grads = _engine_backward(
                config.rnn_mode, _scan(layer_in, d), trace, weights,
                dh_steps=_scan(d_out[:, :, d * Hout:(d + 1) * Hout], d),
                dh_last=dh_final[p], dc_last=None if dc_final is None else dc_final[p],
                valid=_scan(valid, d), need_dx=True, weight_grads_out=_weight_grads_out(grad_views))
            if d_in is None:
                d_in = grads.dx  # scan order of direction 0 is time order
            else:
                d_in += _scan(grads.dx, d)
            dh0[p] = grads.dh0
            if is_lstm:
                dc0[p] = grads.dc0
            _write_bias_grads(config, grad_views, grads)
        if layer > 0:
            if dropout_applied:
                d_in *= views[f"dropout_mask_{layer}"]
            zero_ended(valid, d_in)
            d_out = d_in
        else:
            d_x = d_in
    zero_ended(valid, d_x)
    if order is not None:
        d_x, dh0 = _unsort(d_x, order), _unsort(dh0, order)
        dc0 = _unsort(dc0, order) if is_lstm else None
    input_backprop = _result(_to_time_major(d_x, time_major), dtype)
    input_h_backprop = _result(dh0.reshape(problem.state_shape), dtype)
    input_c_backprop = _result(dc0.reshape(problem.cell_shape), dtype) if is_lstm else np.zeros((), dtype)
    return CudnnRNNBackpropResult(input_backprop, input_h_backprop, input_c_backprop,
                                  _result(grad_flat, dtype))
