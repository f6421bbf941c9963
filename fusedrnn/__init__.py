"""fusedrnn: TensorFlow's fused RNN kernels (CudnnRNN family, BlockLSTM family) on any CPU.

Two API surfaces, one implementation:

* snake_case functions here (``fusedrnn.cudnn_rnn_v3``, ``fusedrnn.block_lstm``, ...):
  TF's inputs positionally in TF's order, attributes as keywords with TF's defaults;
* :mod:`fusedrnn.raw_ops` (``raw_ops.CudnnRNNV3``, ...): keyword-only, ``tf.raw_ops`` names.

Multi-output ops return NamedTuples whose fields are TF's output names.
"""

from .block_ops import *  # noqa: F401,F403
from .block_ops import __all__ as _block_all
from .cudnn import (CanonicalParams, CudnnRNNBackpropResult, CudnnRNNResult, CudnnRNNV2Result,
                        CudnnRNNV3Result, cudnn_rnn, cudnn_rnn_backprop, cudnn_rnn_backprop_v2,
                        cudnn_rnn_backprop_v3, cudnn_rnn_canonical_to_params,
                        cudnn_rnn_canonical_to_params_v2, cudnn_rnn_params_size,
                        cudnn_rnn_params_to_canonical, cudnn_rnn_params_to_canonical_v2, cudnn_rnn_v2,
                        cudnn_rnn_v3)
from . import raw_ops  # noqa: E402
# not in __all__ (which lists the ops): the engine's settings, also in fusedrnn.settings
from .settings import backend_info, get_num_threads, release_cached_memory, set_num_threads  # noqa: E402,F401

__version__ = "0.1.0"


def __getattr__(name):
    """``fusedrnn.torch`` / ``fusedrnn.jax``: the framework adapters, imported on first use
    (so that ``import fusedrnn`` never imports PyTorch or JAX)."""
    if name in ("torch", "jax"):
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "cudnn_rnn", "cudnn_rnn_v2", "cudnn_rnn_v3", "cudnn_rnn_backprop", "cudnn_rnn_backprop_v2",
    "cudnn_rnn_backprop_v3", "cudnn_rnn_params_size", "cudnn_rnn_params_to_canonical",
    "cudnn_rnn_params_to_canonical_v2", "cudnn_rnn_canonical_to_params",
    "cudnn_rnn_canonical_to_params_v2", "CudnnRNNResult", "CudnnRNNV2Result", "CudnnRNNV3Result",
    "CudnnRNNBackpropResult", "CanonicalParams", "raw_ops", *_block_all,
]
