"""Move RNN weights between TF-cuDNN, PyTorch, Keras, TF cells, BlockLSTM and ONNX.

One description, :class:`CudnnWeights` (the opaque ``params`` of a CudnnRNN model plus its
attributes), and converters around it.  Gate orders (the classic porting bug):

==============  ==========================  ==========================================
format          LSTM gates                  GRU gates / biases
==============  ==========================  ==========================================
cuDNN, PyTorch  i, f, c, o (two biases)     r, u, h' (two biases, r applied to R h + bR)
Keras 3         i, f, c, o (one bias)       z(=u), r, h; bias [2, 3H] (reset_after=True)
TF cells        i, c, f, o (one bias)       gates [r | u], candidate split in/hidden
BlockLSTM       i, c, f, o + forget_bias    —
BlockLSTMV2     i, f, c, o                  —
ONNX            i, o, f, c (W/R biases)     z, r, h (linear_before_reset=1)
==============  ==========================  ==========================================

Read TF checkpoints with NumPy only (:func:`read_tf_checkpoint`), Keras files with h5py
(:func:`read_keras_weights`), and pick the RNNs out of them (:func:`find_rnn_weights`).
Nothing here imports torch, onnx, h5py or TensorFlow until a converter that needs it is called
(a missing one raises ImportError naming the extra: ``fusedrnn[torch]``, ``[onnx]``, ``[keras]``).
"""

from ._weights import CudnnWeights, PseudoLayer
from ._torch import from_torch, to_torch
from ._keras import from_keras, from_keras_weights, to_keras, to_keras_weights
from ._tf_cells import BlockLSTMWeights, from_block_lstm, from_tf_cells, to_block_lstm, to_tf_cells
from ._find import find_rnn_weights, infer_config
from .checkpoint import list_tf_checkpoint, read_keras_weights, read_tf_checkpoint
from ._onnx import block_lstm_to_onnx, to_onnx

__all__ = ["CudnnWeights", "PseudoLayer", "BlockLSTMWeights",
           "from_torch", "to_torch", "from_keras", "from_keras_weights", "to_keras", "to_keras_weights",
           "from_tf_cells", "to_tf_cells", "from_block_lstm", "to_block_lstm", "to_onnx", "block_lstm_to_onnx",
           "read_tf_checkpoint", "list_tf_checkpoint", "read_keras_weights", "find_rnn_weights", "infer_config"]
