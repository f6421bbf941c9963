"""Argument checks shared by all ops.  Everything here runs before any compute.

Conventions: shape and value problems raise ``ValueError``; dtype problems raise
``TypeError``.  Every message names the argument, what was expected and what was
given.  Inputs are never modified: arrays are converted with ``np.asarray`` and
only ever read.
"""

from __future__ import annotations

import numbers

import numpy as np

FLOAT_DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))
INT_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))


def shape_str(shape) -> str:
    """TensorFlow's shape debug format: ``[3,2,4]``."""
    return "[" + ",".join(str(int(d)) for d in shape) + "]"


def as_array(value, name: str) -> np.ndarray:
    """``np.asarray`` that turns conversion failures (ragged lists, ...) into TypeError.

    ndarray subclasses (np.matrix, masked arrays, ...) are viewed as plain ndarrays (a mask is
    ignored), so that no subclass behaviour reaches the computation or the outputs.  Unaligned
    arrays are copied: NumPy cannot hand them to BLAS, and its fallback loop rounds differently."""
    if type(value) is np.ndarray:
        array = value
    else:
        try:
            array = np.asarray(value)
        except (ValueError, TypeError) as exc:
            raise TypeError(f"{name} must be an array-like of numbers, got {type(value).__name__}: {exc}") from None
    if not array.flags.aligned:
        array = array.copy()
    return array


def float_arrays(names_values: dict, allowed=FLOAT_DTYPES, op: str = "") -> tuple[dict, np.dtype]:
    """Convert the named float inputs; all must share one dtype from ``allowed``.

    Returns (dict name -> ndarray, dtype).  Python scalars / lists are accepted and
    converted; a plain Python float list becomes float64, so mixing lists with
    float32 arrays is a TypeError like any other mix.
    """
    arrays = {name: as_array(value, name) for name, value in names_values.items()}
    dtype = None
    first = None
    for name, array in arrays.items():
        if array.dtype.kind == "f" and not array.dtype.isnative:
            raise TypeError(f"{name} must be in native byte order, got {array.dtype.str} (non-native "
                            f"{array.dtype.name}); convert it with {name}.astype({array.dtype.name!r})"
                            + (f" in {op}" if op else ""))
        if array.dtype not in allowed:
            allowed_text = ", ".join(str(d) for d in allowed)
            raise TypeError(f"{name} must have a floating dtype ({allowed_text}), got {array.dtype}"
                            + (f" in {op}" if op else ""))
        if dtype is None:
            dtype, first = array.dtype, name
        elif array.dtype != dtype:
            raise TypeError(f"all float inputs must share one dtype: {first} is {dtype} but {name} is {array.dtype}"
                            + (f" in {op}" if op else ""))
    return arrays, dtype


def compute_dtype(dtype: np.dtype) -> np.dtype:
    """float16 computes in float32; float32 and float64 compute in themselves."""
    return np.dtype(np.float32) if dtype == np.float16 else np.dtype(dtype)


def int_scalar(value, name: str, minimum: int | None = None) -> int:
    """An integer attribute or a rank-0 integer tensor (bools rejected)."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an integer, got bool {value!r}")
    if isinstance(value, numbers.Integral):
        result = int(value)
    else:
        array = as_array(value, name)
        if array.dtype.kind not in "iu":
            raise TypeError(f"{name} must be an integer, got {array.dtype} {array!r}")
        if array.ndim != 0:
            raise ValueError(f"{name} is not a scalar: expected rank 0, got shape {shape_str(array.shape)}")
        result = int(array)
    if minimum is not None and result < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {result}")
    return result


def float_attr(value, name: str) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a float, got {type(value).__name__} {value!r}")
    return float(value)


def bool_attr(value, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")
    return bool(value)


def choice_attr(value, name: str, allowed: tuple) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, one of ({', '.join(allowed)}), got {type(value).__name__} {value!r}")
    if value not in allowed:
        raise ValueError(f"Invalid {name}: {value}, expect one of ({', '.join(allowed)})")
    return value


def require_rank(array: np.ndarray, rank: int, name: str, message: str | None = None) -> None:
    if array.ndim != rank:
        text = message or f"{name} must be rank {rank}"
        raise ValueError(f"{text}: {name} has shape {shape_str(array.shape)} (rank {array.ndim})")


def require_shape(array: np.ndarray, expected: tuple, name: str, message: str | None = None) -> None:
    if tuple(array.shape) != tuple(expected):
        text = message or f"Invalid {name} shape"
        raise ValueError(f"{text}: {shape_str(array.shape)} {shape_str(expected)} "
                         f"({name} has shape {shape_str(array.shape)}, expected {shape_str(expected)})")
