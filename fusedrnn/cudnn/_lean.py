"""The lean path of the commonest calls: a forward (inference or training) or a backward on the
native backend of a stack (either direction setting and layout), float32/float64, linear input,
every sequence of full length, no dropout between layers.

A call is timed cold more often than not (a model's step between other work): then its cost is
the cache lines it touches, and the general path (:func:`._stack._forward`: validation,
stacking, the engines' generic wrappers) touched ~4 700 lines for a tiny LSTM where the kernel
call itself needs ~900 (cachegrind, a 1 MiB cache after a sweep).  Here the first call of a
signature (attributes, shapes, dtype, thread count) runs every check of the general path and
stores a :class:`_Plan`; later calls with that signature only check what can change between
them (the lengths' values, the backend, ``FUSEDRNN_MEMORY_LIMIT``, and for a backward the
shapes of the forward's outputs and their gradients and the reserve itself).  Inference then
calls the kernels (:func:`fusedrnn.engines.native.lstm_inference` ...) with the parameter views
the plan locates; training and the backward run the general path's stacking
(:func:`._stack._stacked_forward`, :func:`._stack._stacked_backward`) without its validation,
batch sorting and masks.  Anything else (skip input, float16, short sequences, dropout between
layers, non-ndarray inputs, the numpy backend) returns ``None`` and the general path runs.  The
two paths give the same bits (``tests/test_lean_path.py``).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .. import reserve, resources, settings
from ..engines import native as native_engine
from ..engines.buffers import aligned_empty
from ..layout import _pseudo_layer_spans
from ._resolve import _Attrs, _lengths, _Problem, _resolve_shapes
from ._results import CudnnRNNBackpropResult
from ._stack import (_backward_operands, _estimate_nbytes, _forward_operands, _scan, _stacked_backward,
                     _stacked_forward, _to_time_major)

MAX_PLANS = 256
_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


class _Plan(NamedTuple):
    """What the first call of a signature derived: its dimensions and where each pseudo-layer's
    parameters lie in ``params``."""

    problem: _Problem  # lengths not set
    nbytes: tuple  # the general path's memory estimates: inference, training forward, backward
    spans: tuple  # per pseudo-layer: _pseudo_layer_spans (w_input, w_recurrent, w_proj, bias_input, bias_recurrent)


_plans: dict = {}  # signature -> _Plan, or None for a signature the lean path does not take


def forward(attrs: _Attrs, inputs: dict, sequence_lengths, time_major: bool,
            is_training: bool = False) -> tuple | None:
    """``(output, output_h, output_c, reserve_space)`` of a forward call, or None when the
    general path must run it (which then raises any error the call deserves).  The same
    operations as :func:`._stack._forward` for these calls, in the same order."""
    x, h, c, params = inputs["input"], inputs["input_h"], inputs["input_c"], inputs["params"]
    dropout = is_training and attrs.dropout > 0  # masks between layers: the general path
    planned = _planned(attrs, inputs, sequence_lengths, time_major, 1 if is_training else 0,
                       lambda plan: not (dropout and plan.problem.config.num_layers > 1))
    if planned is None:
        return None
    plan, lengths = planned
    problem = plan.problem
    config, T, B = problem.config, problem.T, problem.B
    mode, D, H, Hout = config.rnn_mode, config.num_dirs, config.num_units, config.hidden_out
    LD = config.num_layers * D
    dtype = x.dtype
    operands = _forward_operands(problem, x, h, c, dtype)  # full length: no batch order, no mask
    layer_in, h0, c0 = operands[:3]
    if is_training:
        return _stacked_forward(attrs, problem._replace(lengths=lengths), params, *operands, True, dtype)
    h_final = np.empty((LD, B, Hout), dtype)
    c_final = np.empty((LD, B, H), dtype) if mode == "lstm" else None
    for layer in range(config.num_layers):
        out = aligned_empty((T, B, 2 * Hout), dtype) if D == 2 else None
        for d in range(D):
            p = layer * D + d
            h_states = _pseudo_layer(mode, np.ascontiguousarray(_scan(layer_in, d)), h0[p],
                                     None if c0 is None else c0[p], params, plan.spans[p], c_final, p)
            h_final[p] = h_states[T]
            if out is None:
                out = h_states[1:]
            else:  # scan order back to time order
                _scan(out[:, :, d * Hout:(d + 1) * Hout], d)[...] = h_states[1:]
        layer_in = out
    if not time_major:
        layer_in = np.ascontiguousarray(_to_time_major(layer_in, False))
        h_final = h_final.reshape(problem.state_shape)
        c_final = None if c_final is None else c_final.reshape(problem.cell_shape)
    return layer_in, h_final, np.zeros((), dtype) if c_final is None else c_final, np.zeros((), dtype)


def _pseudo_layer(mode: str, x, h0, c0, params, spans: tuple, c_final, p: int) -> np.ndarray:
    """One pseudo-layer's ``h [T+1, B, Hout]`` (an LSTM's last cell state into ``c_final[p]``)."""
    w_in, w_rec, w_proj, b_in, b_rec = spans
    w_input = params[w_in[0]:w_in[1]].reshape(w_in[2]).T
    w_recurrent = params[w_rec[0]:w_rec[1]].reshape(w_rec[2]).T
    bias_input, bias_recurrent = params[b_in[0]:b_in[1]], params[b_rec[0]:b_rec[1]]
    if mode == "lstm":
        projection = None if w_proj is None else np.ascontiguousarray(params[w_proj[0]:w_proj[1]].reshape(w_proj[2]).T)
        h_states, c_final[p] = native_engine.lstm_inference(x, h0, c0, w_input, w_recurrent,
                                                            bias_input + bias_recurrent, projection)
        return h_states
    if mode == "gru":
        return native_engine.gru_inference(x, h0, w_input, w_recurrent, bias_input, bias_recurrent)
    return native_engine.rnn_inference(x, h0, w_input, w_recurrent, bias_input + bias_recurrent,
                                       mode == "rnn_relu")


def backward(attrs: _Attrs, inputs: dict, sequence_lengths, time_major: bool) -> CudnnRNNBackpropResult | None:
    """The four gradients of a backward call, or None when the general path must run it (as
    :func:`forward`).  The same operations as :func:`._stack._backward` for these calls, in the
    same order; the reserve is checked as there (:func:`fusedrnn.reserve.read_reserve`)."""
    x = inputs["input"]
    planned = _planned(attrs, inputs, sequence_lengths, time_major, 2,
                       lambda plan: _backward_inputs_fit(plan.problem, inputs, x.dtype))
    if planned is None:
        return None
    plan, lengths = planned
    problem = plan.problem
    views, dropout_applied = reserve.read_reserve(inputs["reserve_space"], problem.config, problem.T,
                                                  problem.B, lengths, x.dtype)
    if dropout_applied:
        return None
    return _stacked_backward(problem, inputs["params"], views, False,
                             *_backward_operands(problem, inputs, x.dtype), x.dtype)


def _planned(attrs: _Attrs, inputs: dict, sequence_lengths, time_major: bool, estimate: int,
             admits) -> tuple | None:
    """``(plan, lengths)`` of a call the lean path takes, else None: a planned signature
    (:func:`_plan_of`) that ``admits(plan)``, the native backend, the general path's memory
    estimate ``plan.nbytes[estimate]`` too small to need a check, every sequence of full length
    (lengths that are invalid raise the general path's error)."""
    plan = _plan_of(attrs, (inputs["input"], inputs["input_h"], inputs["input_c"], inputs["params"]),
                    time_major)
    if plan is None or not admits(plan):
        return None
    if settings.get_backend() != "native" or resources.must_check(plan.nbytes[estimate]):
        return None
    problem = plan.problem
    lengths, full_length = _lengths(sequence_lengths, problem.T, problem.B)
    return (plan, lengths) if full_length else None


def _backward_inputs_fit(problem: _Problem, inputs: dict, dtype: np.dtype) -> bool:
    """The forward's outputs, their gradients and the reserve are ndarrays of the op's dtype, of
    the shapes this problem gives them (else the general path names what is wrong)."""
    for name, shape in (("output", problem.output_shape), ("output_h", problem.state_shape),
                        ("output_c", problem.cell_shape), ("output_backprop", problem.output_shape),
                        ("output_h_backprop", problem.state_shape),
                        ("output_c_backprop", problem.cell_shape), ("reserve_space", None)):
        array = inputs[name]
        if not (type(array) is np.ndarray and array.dtype == dtype and array.flags.aligned):
            return False
        if shape is not None and array.shape != shape:
            return False
    return True


def _plan_of(attrs: _Attrs, arrays: tuple, time_major: bool) -> _Plan | None:
    """The plan of a call whose forward inputs are ``arrays`` (input, input_h, input_c,
    params), or None where the lean path does not apply."""
    x, h, c, params = arrays
    if not (type(x) is np.ndarray and type(h) is np.ndarray and type(c) is np.ndarray
            and type(params) is np.ndarray):
        return None
    dtype = x.dtype
    if not (dtype in _DTYPES and h.dtype == dtype and c.dtype == dtype and params.dtype == dtype
            and x.flags.aligned and h.flags.aligned and c.flags.aligned and params.flags.c_contiguous
            and params.flags.aligned):
        return None
    key = (attrs, x.shape, h.shape, c.shape, params.shape, dtype, time_major, settings.get_num_threads())
    plan = _plans.get(key, False)
    if plan is False:
        plan = _make_plan(attrs, x, h, c, params, time_major, key)
    return plan


def _make_plan(attrs: _Attrs, x, h, c, params, time_major: bool, key: tuple) -> _Plan | None:
    """The plan of a signature, after the general path's shape checks (which raise its errors);
    None where the lean path does not apply.  The memory check stays per call: a call whose
    estimate needs one (``resources.must_check``) takes the general path."""
    problem = _resolve_shapes(attrs, x.shape, h.shape, c.shape if attrs.rnn_mode == "lstm" else None,
                              params.shape, time_major)
    config, plan = problem.config, None
    if not config.skip_input and problem.B > 0:
        dtype = x.dtype
        nbytes = tuple(_estimate_nbytes(problem, dtype, dtype, training, backward)
                       for training, backward in ((False, False), (True, False), (True, True)))
        plan = _Plan(problem, nbytes,
                     tuple(_pseudo_layer_spans(config, p) for p in range(config.num_pseudo_layers)))
    if len(_plans) >= MAX_PLANS:
        _plans.clear()
    _plans[key] = plan
    return plan
