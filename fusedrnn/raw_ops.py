"""``tf.raw_ops``-compatible entry points: keyword-only, TensorFlow's exact argument names.

Code written against ``tf.raw_ops`` runs by changing one import::

    from fusedrnn import raw_ops
    out = raw_ops.CudnnRNNV3(input=x, input_h=h, input_c=c, params=p, sequence_lengths=lens,
                             rnn_mode="lstm", time_major=False)

Each op here is generated from the snake_case function of the same op (one
implementation): every parameter becomes keyword-only, and an ignored
``name=None`` is accepted as in TensorFlow.
"""

from __future__ import annotations

import functools
import inspect

from . import block_ops, cudnn

_OPS = {
    "CudnnRNN": cudnn.cudnn_rnn,
    "CudnnRNNV2": cudnn.cudnn_rnn_v2,
    "CudnnRNNV3": cudnn.cudnn_rnn_v3,
    "CudnnRNNBackprop": cudnn.cudnn_rnn_backprop,
    "CudnnRNNBackpropV2": cudnn.cudnn_rnn_backprop_v2,
    "CudnnRNNBackpropV3": cudnn.cudnn_rnn_backprop_v3,
    "CudnnRNNParamsSize": cudnn.cudnn_rnn_params_size,
    "CudnnRNNParamsToCanonical": cudnn.cudnn_rnn_params_to_canonical,
    "CudnnRNNParamsToCanonicalV2": cudnn.cudnn_rnn_params_to_canonical_v2,
    "CudnnRNNCanonicalToParams": cudnn.cudnn_rnn_canonical_to_params,
    "CudnnRNNCanonicalToParamsV2": cudnn.cudnn_rnn_canonical_to_params_v2,
    "BlockLSTM": block_ops.block_lstm,
    "BlockLSTMV2": block_ops.block_lstm_v2,
    "BlockLSTMGrad": block_ops.block_lstm_grad,
    "BlockLSTMGradV2": block_ops.block_lstm_grad_v2,
    "LSTMBlockCell": block_ops.lstm_block_cell,
    "LSTMBlockCellGrad": block_ops.lstm_block_cell_grad,
    "GRUBlockCell": block_ops.gru_block_cell,
    "GRUBlockCellGrad": block_ops.gru_block_cell_grad,
}


def _keyword_only(op_name: str, function):
    signature = inspect.signature(function)
    parameters = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in signature.parameters.values()]
    parameters.append(inspect.Parameter("name", inspect.Parameter.KEYWORD_ONLY, default=None))
    raw_signature = signature.replace(parameters=parameters)

    @functools.wraps(function)
    def op(*args, **kwargs):
        if args:
            raise TypeError(f"raw_ops.{op_name} takes keyword arguments only (as tf.raw_ops does), "
                            f"got {len(args)} positional argument(s)")
        bound = raw_signature.bind(**kwargs)
        bound.arguments.pop("name", None)
        return function(**bound.arguments)

    op.__name__ = op.__qualname__ = op_name
    op.__signature__ = raw_signature
    op.__doc__ = f"``tf.raw_ops.{op_name}`` (keyword-only; ``name`` is ignored).\n\n{function.__doc__ or ''}"
    return op


globals().update({name: _keyword_only(name, fn) for name, fn in _OPS.items()})
__all__ = sorted(_OPS)
