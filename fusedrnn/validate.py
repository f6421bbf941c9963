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


DEFAULT_FLOAT = np.dtype(np.float32)  # TF's dtype for Python floats when nothing else decides


def is_python_value(value) -> bool:
    """A Python number or a (nested) list/tuple: what TensorFlow's eager wrapper converts to the
    op's input dtype.  Arrays, NumPy scalars (``np.float64`` subclasses ``float``) and other
    objects with a dtype (framework tensors) are not: they keep their own dtype."""
    return isinstance(value, (int, float, list, tuple)) and not isinstance(value, np.generic)


def convert_python_value(value, name: str, dtype: np.dtype, kinds: str = "iuf") -> np.ndarray:
    """A Python number or (nested) list as an array of ``dtype``, like TF's ``convert_to_tensor``.

    Its elements must be numbers of the NumPy kinds ``kinds`` ("iuf": ints or floats for a float
    input, "iu": ints only for an integer input); bools are rejected (a bool where a number is
    expected is almost surely a bug; TF would read it as 0/1).  Ragged lists are a ValueError,
    other elements (strings, None, ...) a TypeError, each naming the input.  Integers must fit
    ``dtype``.  Float values out of ``dtype``'s range become ±inf, as in TF.
    """
    text = repr(value)
    text = text if len(text) <= 60 else text[:57] + "..."
    try:
        array = np.asarray(value)
    except ValueError as exc:
        raise ValueError(f"{name} cannot be converted to a tensor: {text} is not a rectangular (nested) "
                         f"list of numbers ({exc})") from None
    except TypeError as exc:
        raise TypeError(f"{name} cannot be converted to a tensor of dtype {dtype.name}: {text} ({exc})") from None
    if array.dtype.kind == "O" and all(type(v) is int for v in array.flat):  # ints beyond int64
        if dtype.kind == "f":
            try:
                return array.astype(np.float64).astype(dtype)
            except OverflowError:
                pass
        raise ValueError(f"{name} cannot be converted to {dtype.name}: {text} is out of range")
    if array.dtype.kind == "b":
        raise TypeError(f"{name} must hold numbers, got bool {text} (bools are not converted to {dtype.name})")
    if array.dtype.kind not in kinds:
        wanted = "an integer or a (nested) list of integers" if kinds == "iu" else "a number or a (nested) list of numbers"
        raise TypeError(f"{name} must be {wanted} (converted to {dtype.name}), got {text} "
                        f"(elements of dtype {array.dtype})")
    if dtype.kind in "iu" and array.size:
        info = np.iinfo(dtype)
        low, high = int(array.min()), int(array.max())
        if low < info.min or high > info.max:
            bad = low if low < info.min else high
            raise ValueError(f"{name} cannot be converted to {dtype.name}: {bad} is out of range "
                             f"[{info.min}, {info.max}]")
    return array.astype(dtype)


def float_arrays(names_values: dict, allowed=FLOAT_DTYPES, op: str = "") -> tuple[dict, np.dtype]:
    """Convert the named float inputs; all must share one dtype ``T`` from ``allowed``.

    Returns (dict name -> ndarray, dtype).  As in TensorFlow's eager wrapper, ``T`` is inferred
    from the inputs that carry a dtype (arrays, NumPy scalars, framework tensors), and Python
    numbers and (nested) lists are converted to it (:func:`convert_python_value`); when every
    input is a Python value, ``T`` is float32, TF's default.  Arrays keep their dtype: two
    different float dtypes, or a non-float array, are a TypeError (no silent casts).
    """
    dtype = None
    for array in names_values.values():  # the common call: aligned ndarrays of one float dtype
        if type(array) is not np.ndarray or not array.flags.aligned:
            break
        if dtype is None:
            dtype = array.dtype
            if dtype not in allowed:
                break
        elif array.dtype != dtype:
            break
    else:
        if dtype is not None:
            return dict(names_values), dtype
    typed = {name: as_array(value, name) for name, value in names_values.items() if not is_python_value(value)}
    target = next(iter(typed.values())).dtype if typed else DEFAULT_FLOAT
    if target not in allowed:  # reported below, under that input's own name
        target = DEFAULT_FLOAT
    arrays = {name: typed[name] if name in typed else convert_python_value(value, name, target)
              for name, value in names_values.items()}
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


def int_array(value, name: str, dtype, expected: str) -> np.ndarray:
    """An integer input: a Python int or (nested) list of ints is converted to ``dtype`` (TF's
    type of that input); an array (or NumPy scalar) must already have an integer dtype other
    than uint64 (``expected`` describes it in the message)."""
    if is_python_value(value):
        return convert_python_value(value, name, np.dtype(dtype), kinds="iu")
    array = as_array(value, name)
    if array.dtype.kind not in "iu" or array.dtype == np.uint64:
        raise TypeError(f"{name} must be an integer tensor ({expected}), got dtype {array.dtype}")
    return array


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
    """A string attribute from ``allowed``; ASCII ``bytes`` are accepted too, as TF does."""
    if isinstance(value, bytes):
        value = value.decode("ascii", errors="replace")
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
