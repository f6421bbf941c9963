"""The lean path of the commonest forward call: inference on the native backend of a
uni-directional stack, time-major, float32/float64, every sequence of full length.

A call is timed cold more often than not (a model's step between other work): then its cost is
the cache lines it touches, and the general path (:func:`._stack._forward`: validation,
stacking, the engines' generic wrappers) touched ~4 700 lines for a tiny LSTM where the kernel
call itself needs ~900 (cachegrind, a 1 MiB cache after a sweep).  Here the first call of a
signature (attributes, shapes, dtype, thread count) runs every check of the general path and
stores a :class:`_Plan`; later calls with that signature only check what can change between
them (the lengths' values, the backend, ``FUSEDRNN_MEMORY_LIMIT``) and call the kernels
(:func:`fusedrnn.engines.native.lstm_inference` ...) with the parameter views the plan locates.
Anything else (training, bidirectional, skip input, float16, batch-major, short sequences,
non-ndarray inputs) returns ``None`` and the general path runs.  The two paths give the same
bits (``tests/test_lean_path.py``).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .. import resources, settings
from ..engines import native as native_engine
from ..layout import RNNConfig, _pseudo_layer_spans
from ._resolve import _Attrs, _lengths, _resolve_shapes
from ._stack import _estimate_nbytes

MAX_PLANS = 256
_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


class _Plan(NamedTuple):
    config: RNNConfig
    T: int
    B: int
    spans: tuple  # per layer: _pseudo_layer_spans (w_input, w_recurrent, w_proj, bias_input, bias_recurrent)


_plans: dict = {}  # signature -> _Plan, or None for a signature the lean path does not take


def forward(attrs: _Attrs, inputs: dict, sequence_lengths) -> tuple | None:
    """``(output, output_h, output_c, reserve_space)`` of an inference call (time-major), or None
    when the general path must run it (which then raises any error the call deserves)."""
    x, h, c, params = inputs["input"], inputs["input_h"], inputs["input_c"], inputs["params"]
    if not (type(x) is np.ndarray and type(h) is np.ndarray and type(c) is np.ndarray
            and type(params) is np.ndarray):
        return None
    dtype = x.dtype
    if not (dtype in _DTYPES and h.dtype == dtype and c.dtype == dtype and params.dtype == dtype
            and x.flags.aligned and h.flags.aligned and c.flags.aligned and params.flags.c_contiguous
            and params.flags.aligned):
        return None
    key = (attrs, x.shape, h.shape, c.shape, params.shape, dtype, settings._num_threads)
    plan = _plans.get(key, False)
    if plan is False:
        plan = _make_plan(attrs, x, h, c, params, key)
    if plan is None:
        return None
    config, T, B = plan.config, plan.T, plan.B
    full_length = _lengths(sequence_lengths, T, B)[1]
    if not full_length or settings.get_backend() != "native" or resources._limit_is_set():
        return None
    mode, L = config.rnn_mode, config.num_layers
    layer_in = np.ascontiguousarray(x)
    h_final = np.empty((L, B, config.hidden_out), dtype)
    c_final = np.empty((L, B, config.num_units), dtype) if mode == "lstm" else None
    for layer, (w_in, w_rec, w_proj, b_in, b_rec) in enumerate(plan.spans):
        w_input = params[w_in[0]:w_in[1]].reshape(w_in[2]).T
        w_recurrent = params[w_rec[0]:w_rec[1]].reshape(w_rec[2]).T
        bias_input, bias_recurrent = params[b_in[0]:b_in[1]], params[b_rec[0]:b_rec[1]]
        if mode == "lstm":
            projection = None if w_proj is None else np.ascontiguousarray(
                params[w_proj[0]:w_proj[1]].reshape(w_proj[2]).T)
            h_states, c_final[layer] = native_engine.lstm_inference(
                layer_in, h[layer], c[layer], w_input, w_recurrent, bias_input + bias_recurrent, projection)
        elif mode == "gru":
            h_states = native_engine.gru_inference(layer_in, h[layer], w_input, w_recurrent, bias_input,
                                                   bias_recurrent)
        else:
            h_states = native_engine.rnn_inference(layer_in, h[layer], w_input, w_recurrent,
                                                   bias_input + bias_recurrent, mode == "rnn_relu")
        h_final[layer] = h_states[T]
        layer_in = h_states[1:]
    output_c = c_final if mode == "lstm" else np.zeros((), dtype)
    return layer_in, h_final, output_c, np.zeros((), dtype)


def _make_plan(attrs: _Attrs, x, h, c, params, key: tuple) -> _Plan | None:
    """The plan of a signature, after the general path's shape and memory checks (which raise
    its errors); None where the lean path does not apply."""
    plan = None
    if attrs.num_dirs == 1:
        problem = _resolve_shapes(attrs, x.shape, h.shape, c.shape if attrs.rnn_mode == "lstm" else None,
                                  params.shape, True)
        config = problem.config
        if (not config.skip_input and problem.B > 0
                and _estimate_nbytes(problem, x.dtype, x.dtype, False, False) < resources.SMALL_CALL_BYTES):
            spans = tuple(_pseudo_layer_spans(config, p) for p in range(config.num_layers))
            plan = _Plan(config, problem.T, problem.B, spans)
    if len(_plans) >= MAX_PLANS:
        _plans.clear()
    _plans[key] = plan
    return plan
