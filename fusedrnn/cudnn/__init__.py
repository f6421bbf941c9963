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

Modules (this package re-exports what ``fusedrnn/cudnn.py`` held, private helpers included;
to monkeypatch a helper, patch it in the module that defines it, where it is looked up):

* ``_results``: the result NamedTuples (``CudnnRNNResult``, ..., ``CanonicalParams``);
* ``_resolve``: attribute and shape resolution, everything that runs before any compute;
* ``_stack``: the stacking over layers, directions and lengths (``_forward``, ``_backward``:
  validation and batch order, then ``_stacked_forward``, ``_stacked_backward``),
  dropout masks, memory estimates and the dispatch to the engines;
* ``_lean``: the lean path of a forward or backward call (native backend, full lengths, linear
  input, no dropout between layers): a plan per call signature, then the kernels (inference) or
  the stacking (training, backward) without the general path's validation;
* ``_ops``: the six sequence ops ``cudnn_rnn``, ``_v2``, ``_v3``, ``cudnn_rnn_backprop``, ``_v2``, ``_v3``;
* ``_params``: the parameter ops ``cudnn_rnn_params_size``, ``cudnn_rnn_params_to_canonical(_v2)``,
  ``cudnn_rnn_canonical_to_params(_v2)``.
"""

from ._ops import (_host_reserved, cudnn_rnn, cudnn_rnn_backprop, cudnn_rnn_backprop_v2,  # noqa: F401
                   cudnn_rnn_backprop_v3, cudnn_rnn_v2, cudnn_rnn_v3)
from ._params import (_dtype_attr, _from_canonical, _param_config, _to_canonical,  # noqa: F401
                      cudnn_rnn_canonical_to_params, cudnn_rnn_canonical_to_params_v2,
                      cudnn_rnn_params_size, cudnn_rnn_params_to_canonical,
                      cudnn_rnn_params_to_canonical_v2)
from ._resolve import _attrs, _Attrs, _lengths, _make_config, _Problem, _resolve, _state_shape  # noqa: F401
from ._results import (CanonicalParams, CudnnRNNBackpropResult, CudnnRNNResult,  # noqa: F401
                       CudnnRNNV2Result, CudnnRNNV3Result)
from ._stack import (_TRACE_TYPES, _activation, _backward, _check_shape, _dropout_mask,  # noqa: F401
                     _dropout_scale, _engine_backward, _engine_forward, _engine_weights, _ensure_fits,
                     _estimate_nbytes, _forward, _reserved_trace, _scan, _to_time_major,
                     _write_bias_grads)
