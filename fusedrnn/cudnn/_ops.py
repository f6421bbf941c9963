"""The six public CudnnRNN sequence ops: ``cudnn_rnn``, ``cudnn_rnn_v2``, ``cudnn_rnn_v3`` and
``cudnn_rnn_backprop``, ``cudnn_rnn_backprop_v2``, ``cudnn_rnn_backprop_v3``.

Each parses its attributes (:mod:`fusedrnn.cudnn._resolve`) and calls ``_forward`` or
``_backward`` (:mod:`fusedrnn.cudnn._stack`) after trying the lean path of
:mod:`fusedrnn.cudnn._lean`.  "module doc" in their docstrings is the docstring
of :mod:`fusedrnn.cudnn` (shapes, layouts, dropout).
"""

from __future__ import annotations

import numpy as np

from ..settings import public_op
from ..validate import bool_attr
from . import _lean
from ._resolve import _attrs
from ._results import CudnnRNNBackpropResult, CudnnRNNResult, CudnnRNNV2Result
from ._stack import _backward, _forward


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
    return CudnnRNNResult(*_run_forward(attrs, inputs, None, is_training, True))


def _run_forward(attrs, inputs: dict, sequence_lengths, is_training: bool, time_major: bool) -> tuple:
    """The lean path (:mod:`._lean`) where it applies, else the general one (same results)."""
    result = _lean.forward(attrs, inputs, sequence_lengths, time_major, is_training)
    if result is not None:
        return result
    return _forward(attrs, inputs, sequence_lengths, is_training, time_major)


def _run_backward(attrs, inputs: dict, sequence_lengths, time_major: bool) -> CudnnRNNBackpropResult:
    """As :func:`_run_forward`, for the gradients."""
    result = _lean.backward(attrs, inputs, sequence_lengths, time_major)
    if result is not None:
        return result
    return _backward(attrs, inputs, sequence_lengths, time_major)


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
    result = _run_forward(attrs, inputs, sequence_lengths, is_training, time_major)
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
    return _run_backward(attrs, inputs, None, True)


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
    return _run_backward(attrs, inputs, sequence_lengths, time_major)
