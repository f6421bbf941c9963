"""Tensor inputs given as Python numbers or (nested) lists are converted as TensorFlow's eager
wrapper converts them (observed with TF 2.21): float inputs to the op's ``T``, inferred from the
inputs that carry a dtype (float32 when none does), integer inputs to the op's integer type.
Arrays keep their strict dtype rules.  Every input of all 19 ops, through both API surfaces."""

import numpy as np
import pytest

import fusedrnn
from fusedrnn import raw_ops
from test_block_ops_validation import ALL as BLOCK_OPS
from test_block_ops_validation import valid as block_values
from test_cudnn_validation import ALL_OPS as CUDNN_OPS
from test_cudnn_validation import base_values, pick

SNAKE = {name: getattr(fusedrnn, fn.__name__) for name, fn in raw_ops._OPS.items()}
SURFACES = {"raw_ops": lambda op, kw: getattr(raw_ops, op)(**kw), "snake": lambda op, kw: SNAKE[op](**kw)}
INT_INPUTS = ("sequence_lengths", "seq_len_max", "num_layers", "num_units", "input_size", "host_reserved")


def _op_values(op, mode="lstm", dtype=np.float32):
    if op in BLOCK_OPS:
        return block_values(op, dtype)
    return pick(op, base_values(mode, dtype=dtype))


def _float_inputs(kwargs):
    return [k for k, v in kwargs.items() if isinstance(v, np.ndarray) and v.dtype.kind == "f"]


def _pythonize(value):
    """A float array as nested Python lists (a 0-d array as a Python float); lists elementwise."""
    if isinstance(value, (list, tuple)):
        return [_pythonize(v) for v in value]
    return value.tolist()


def _assert_same_result(got, expected):
    if isinstance(expected, np.ndarray):
        assert isinstance(got, np.ndarray) and got.dtype == expected.dtype and got.shape == expected.shape
        np.testing.assert_array_equal(got, expected)
        return
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        _assert_same_result(a, b)


CASES = [(op, mode) for op in CUDNN_OPS for mode in ("lstm", "gru")] + [(op, None) for op in BLOCK_OPS]


@pytest.mark.parametrize("surface", SURFACES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op,mode", CASES)
def test_each_python_input_is_converted_to_the_inferred_dtype(op, mode, dtype, surface):
    """Each float input in turn as Python lists (values exact in ``dtype``): the same result as
    the array call; integer inputs as Python ints/lists too."""
    kwargs = _op_values(op, mode or "lstm", dtype)
    call = SURFACES[surface]
    expected = call(op, kwargs)
    names = _float_inputs(kwargs) + [k for k in ("weights", "biases") if k in kwargs]
    assert names or op == "CudnnRNNParamsSize", op  # ParamsSize has integer inputs only
    if len(names) == 1 and dtype != np.float32:
        names = []  # the only float input: as a list it is float32 (next test)
    for name in names:
        _assert_same_result(call(op, dict(kwargs, **{name: _pythonize(kwargs[name])})), expected)
    python_ints = {k: kwargs[k].tolist() if isinstance(kwargs[k], np.ndarray) else int(kwargs[k])
                   for k in INT_INPUTS if k in kwargs}
    _assert_same_result(call(op, dict(kwargs, **python_ints)), expected)


@pytest.mark.parametrize("op,mode", CASES)
def test_all_python_inputs_default_to_float32(op, mode):
    """No input carries a dtype: T is float32, TF's default for Python floats."""
    kwargs = _op_values(op, mode or "lstm", np.float32)
    expected = getattr(raw_ops, op)(**kwargs)
    names = _float_inputs(kwargs) + [k for k in ("weights", "biases") if k in kwargs]
    converted = dict(kwargs, **{name: _pythonize(kwargs[name]) for name in names})
    if op == "CudnnRNNParamsSize":
        converted.pop("T")  # T is an attribute there, not inferred
    _assert_same_result(getattr(raw_ops, op)(**converted), expected)


@pytest.mark.parametrize("value", [0, 0.0, [0.0], [[0, 1], [2.5, 3]]], ids=["int", "float", "list", "nested"])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_ignored_input_c_as_python_number(dtype, value):
    """Keras 3's GRU path calls ``CudnnRNNV3(..., input_c=0, ...)``; BackpropV3 with
    ``output_c_backprop=0`` likewise; the number takes the dtype of the other inputs."""
    kwargs = pick("CudnnRNNV3", base_values("gru", dtype=dtype))
    expected = raw_ops.CudnnRNNV3(**kwargs)
    got = raw_ops.CudnnRNNV3(**dict(kwargs, input_c=value))
    _assert_same_result(got, expected)
    values = base_values("gru", dtype=dtype)
    bp = pick("CudnnRNNBackpropV3", values)
    _assert_same_result(raw_ops.CudnnRNNBackpropV3(**dict(bp, input_c=value, output_c=value, output_c_backprop=value)),
                        raw_ops.CudnnRNNBackpropV3(**bp))


def test_python_float_list_values_are_rounded_to_T_once():
    """A Python float is a double; it is rounded to T (as TF does), not kept as float64."""
    kwargs = pick("CudnnRNNV3", base_values("gru", dtype=np.float32))
    params = (kwargs["params"].astype(np.float64) + 1e-9).tolist()
    got = raw_ops.CudnnRNNV3(**dict(kwargs, params=params))
    expected = raw_ops.CudnnRNNV3(**dict(kwargs, params=np.asarray(params).astype(np.float32)))
    assert got.output.dtype == np.float32
    _assert_same_result(got, expected)


# ----------------------------------------------------------------------------------------
# What cannot be converted: errors that name the input

FIRST_FLOAT = {op: ("x" if op in BLOCK_OPS else "params" if "Canonical" in op or "Params" in op else "input")
               for op in CUDNN_OPS + list(BLOCK_OPS)}
FIRST_FLOAT["CudnnRNNParamsSize"] = None
FIRST_FLOAT["CudnnRNNCanonicalToParams"] = FIRST_FLOAT["CudnnRNNCanonicalToParamsV2"] = None


@pytest.mark.parametrize("bad,error,words", [
    ([[0.0], [0.0, 1.0]], ValueError, ["not a rectangular", "list of numbers"]),
    ([["a"]], TypeError, ["must be a number", "<U1"]),
    ([None, 1.0], TypeError, ["must be a number", "object"]),
    ([True, False], TypeError, ["bool"]),
    (True, TypeError, ["bool"]),
    ([1 + 2j], TypeError, ["must be a number", "complex"]),
], ids=["ragged", "strings", "none", "bool_list", "bool", "complex"])
@pytest.mark.parametrize("op", [op for op, name in FIRST_FLOAT.items() if name])
def test_unconvertible_float_input_names_the_input(op, bad, error, words):
    name = FIRST_FLOAT[op]
    kwargs = _op_values(op)
    with pytest.raises(error) as info:
        getattr(raw_ops, op)(**dict(kwargs, **{name: bad}))
    assert str(info.value).startswith(name), str(info.value)
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize("op", ["CudnnRNNCanonicalToParams", "CudnnRNNCanonicalToParamsV2"])
def test_unconvertible_canonical_element_names_the_element(op):
    kwargs = _op_values(op)
    weights = list(kwargs["weights"])
    weights[1] = [[0.0], [0.0, 1.0]]
    with pytest.raises(ValueError, match=r"^weights\[1\] cannot be converted"):
        getattr(raw_ops, op)(**dict(kwargs, weights=weights))


@pytest.mark.parametrize("op,name", [("CudnnRNNV3", "input_h"), ("BlockLSTMV2", "wci"), ("GRUBlockCell", "b_c")])
@pytest.mark.parametrize("array", [np.zeros(1, np.float64), np.float64(0.0), np.zeros(1, np.int64)],
                         ids=["float64_array", "float64_scalar", "int_array"])
def test_arrays_keep_strict_dtypes(op, name, array):
    """NumPy arrays and scalars are not converted: another dtype is a TypeError naming the input."""
    kwargs = _op_values(op, "gru")
    with pytest.raises(TypeError, match=name):
        getattr(raw_ops, op)(**dict(kwargs, **{name: array}))


@pytest.mark.parametrize("op,name,bad,error,words", [
    ("CudnnRNNV3", "sequence_lengths", [4.0, 4.0], TypeError, ["integer", "int32"]),
    ("CudnnRNNV3", "sequence_lengths", [4, 4.0], TypeError, ["integer", "int32"]),
    ("CudnnRNNV3", "sequence_lengths", [2**40, 4], ValueError, ["int32", str(2**40), "out of range"]),
    ("CudnnRNNV3", "sequence_lengths", [[4], [4, 4]], ValueError, ["rectangular"]),
    ("CudnnRNNV3", "sequence_lengths", np.array([4.0, 4.0]), TypeError, ["integer", "float64"]),
    ("CudnnRNNBackpropV3", "sequence_lengths", [4.0, 4.0], TypeError, ["integer"]),
    ("BlockLSTM", "seq_len_max", 3.0, TypeError, ["integer"]),
    ("BlockLSTMGradV2", "seq_len_max", 2**70, ValueError, ["int64", "out of range"]),
    ("BlockLSTMV2", "seq_len_max", np.float32(3), TypeError, ["integer", "float32"]),
    ("CudnnRNNParamsSize", "num_layers", 2.0, TypeError, ["integer"]),
], ids=lambda v: v if isinstance(v, str) else None)
def test_unconvertible_integer_input_names_the_input(op, name, bad, error, words):
    kwargs = _op_values(op)
    with pytest.raises(error) as info:
        getattr(raw_ops, op)(**dict(kwargs, **{name: bad}))
    message = str(info.value)
    assert message.startswith(name), message
    for word in words:
        assert word in message, message


def test_first_typed_input_decides_T():
    """T comes from the inputs with a dtype, whatever their position (TF infers it from the
    tensors among the inputs): a leading Python list takes float16 from the arrays after it."""
    kwargs = block_values("BlockLSTMV2", np.float16)
    got = raw_ops.BlockLSTMV2(**dict(kwargs, x=kwargs["x"].tolist()))
    _assert_same_result(got, raw_ops.BlockLSTMV2(**kwargs))
    assert got.h.dtype == np.float16


def test_string_attributes_may_be_bytes():
    """TF accepts ``bytes`` for string attributes (``rnn_mode=b"gru"``)."""
    kwargs = pick("CudnnRNNV3", base_values("gru", dtype=np.float32))
    _assert_same_result(raw_ops.CudnnRNNV3(**dict(kwargs, rnn_mode=b"gru", direction=b"bidirectional")),
                        raw_ops.CudnnRNNV3(**kwargs))
