"""Lazy imports of optional frameworks; a missing one names the pip extra that installs it."""

from __future__ import annotations

import importlib

import numpy as np

_EXTRAS = {"torch": ("PyTorch", "torch"), "onnx": ("onnx", "onnx"), "onnxruntime": ("onnxruntime", "onnx"),
           "h5py": ("h5py", "keras")}  # Keras itself (for to_keras) is no extra: it comes with TensorFlow


def require(module: str, feature: str):
    """Import ``module`` or raise ImportError: "<feature> needs <name>: pip install 'fusedrnn[extra]'"."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if module not in _EXTRAS:
            raise ImportError(f"{feature} needs {module}: pip install {module} ({exc})") from None
        name, extra = _EXTRAS[module]
        raise ImportError(f"{feature} needs {name}: pip install 'fusedrnn[{extra}]' ({exc})") from None


def to_numpy(value, name: str) -> np.ndarray:
    """A torch tensor / TF or Keras variable / array-like as a NumPy array (no framework import)."""
    if hasattr(value, "detach"):  # torch.Tensor
        value = value.detach().cpu().numpy()
    elif hasattr(value, "numpy") and not isinstance(value, np.ndarray):  # tf.Variable, keras Variable
        value = value.numpy()
    try:
        return np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be an array, got {type(value).__name__}: {exc}") from None

