"""One test per CudnnRNN validation rule (spec §9.1, §9.2, §15): the exception type, the
key words of the message (TF's wording where TF has one) and that every input array
is unchanged afterwards.  Ops are called through :mod:`fusedrnn.raw_ops` by keyword so
one argument table serves all of them."""

import copy
import inspect

import numpy as np
import pytest

import fusedrnn
from fusedrnn import raw_ops

FORWARD_OPS = ["CudnnRNN", "CudnnRNNV2", "CudnnRNNV3"]
BACKPROP_OPS = ["CudnnRNNBackprop", "CudnnRNNBackpropV2", "CudnnRNNBackpropV3"]
RNN_OPS = FORWARD_OPS + BACKPROP_OPS
V3_OPS = ["CudnnRNNV3", "CudnnRNNBackpropV3"]
PARAM_OPS = ["CudnnRNNParamsSize", "CudnnRNNParamsToCanonical", "CudnnRNNParamsToCanonicalV2",
             "CudnnRNNCanonicalToParams", "CudnnRNNCanonicalToParamsV2"]
ALL_OPS = RNN_OPS + PARAM_OPS

# base problem: lstm, 2 layers, bidirectional, T=4, B=2, I=3, H=5 (full lengths, so every
# version accepts the same forward outputs)
T, B, I, H, L, D = 4, 2, 3, 5, 2, 2


def _sizes(mode="lstm", P=0, input_size=I):
    G = {"lstm": 4, "gru": 3}.get(mode, 1)
    Hout = P or H
    size = 0
    for layer in range(L):
        in_l = input_size if layer == 0 else D * Hout
        size += D * (G * H * (in_l + Hout) + (P * H if P else 0) + 2 * G * H)
    return size, L * D * (2 * G + (1 if P else 0)), L * D * 2 * G


def base_values(mode="lstm", P=0, dtype=np.float64, lengths=(T, T)):
    """Valid keyword values for every op (each op takes the subset it names)."""
    rng = np.random.default_rng(0)
    Hout = P or H
    size, n_w, n_b = _sizes(mode, P)
    values = dict(
        input=rng.standard_normal((T, B, I)).astype(dtype),
        input_h=rng.standard_normal((L * D, B, Hout)).astype(dtype),
        input_c=(rng.standard_normal((L * D, B, H)) if mode == "lstm" else np.zeros(())).astype(dtype),
        params=rng.uniform(-0.5, 0.5, size).astype(dtype),
        sequence_lengths=np.array(lengths, np.int32),
        rnn_mode=mode, direction="bidirectional", num_layers=L, num_units=H, input_size=I,
        T=dtype, S=np.int32, num_params=n_w, num_params_weights=n_w, num_params_biases=n_b)
    if P:
        values["num_proj"] = P
    fwd = raw_ops.CudnnRNNV3(**pick("CudnnRNNV3", values))
    values.update(output=fwd.output, output_h=fwd.output_h, output_c=fwd.output_c,
                  output_backprop=np.ones_like(fwd.output), output_h_backprop=np.ones_like(fwd.output_h),
                  output_c_backprop=np.ones_like(fwd.output_c), reserve_space=fwd.reserve_space,
                  host_reserved=np.zeros(2, np.int8))
    weights, biases = raw_ops.CudnnRNNParamsToCanonicalV2(**pick("CudnnRNNParamsToCanonicalV2", values))
    values.update(weights=weights, biases=biases)
    return values


def pick(op_name, values):
    names = inspect.signature(getattr(raw_ops, op_name)).parameters
    return {k: v for k, v in values.items() if k in names}


def _snapshot(obj):
    return copy.deepcopy(obj)


def _assert_same(before, after, path="arguments"):
    if isinstance(before, np.ndarray):
        assert isinstance(after, np.ndarray) and after.dtype == before.dtype and after.shape == before.shape, path
        assert np.array_equal(after, before, equal_nan=before.dtype.kind == "f"), f"{path} was modified"
    elif isinstance(before, dict):
        for key in before:
            _assert_same(before[key], after[key], f"{path}[{key!r}]")
    elif isinstance(before, (list, tuple)):
        assert len(before) == len(after), f"{path} changed length"
        for k, (a, b) in enumerate(zip(before, after)):
            _assert_same(a, b, f"{path}[{k}]")


def expect_error(exc, words, op_name, values, **changes):
    """Call ``raw_ops.<op_name>`` with ``values`` updated by ``changes`` (the first change must
    be an argument of the op; later ones only apply where the op takes them); assert the
    exception type, that every word of ``words`` is in the message, and that no input changed."""
    values = dict(values)
    values.update(changes)
    kwargs = pick(op_name, values)
    assert all(key in kwargs for key in list(changes)[:1]), f"{op_name} takes no {list(changes)[0]}"
    before = _snapshot(kwargs)
    with pytest.raises(exc) as info:
        getattr(raw_ops, op_name)(**kwargs)
    message = str(info.value)
    for word in ([words] if isinstance(words, str) else words):
        assert word in message, f"{word!r} not in {message!r}"
    _assert_same(before, kwargs)
    return message


@pytest.fixture(scope="module")
def values():
    return base_values()


def test_base_values_are_valid(values):
    for op in ALL_OPS:
        getattr(raw_ops, op)(**pick(op, values))


# ----------------------------------------------------------------------------------------
# Forward / backward shape rules (§2, §9.1)


@pytest.mark.parametrize("op", RNN_OPS)
def test_input_must_be_rank_3(op, values):
    expect_error(ValueError, ["RNN input must be a 3-D vector", "[2,3]"], op, values, input=values["input"][0])


@pytest.mark.parametrize("op", RNN_OPS)
def test_input_h_must_be_rank_3(op, values):
    expect_error(ValueError, "RNN input_h must be a 3-D vector", op, values, input_h=values["input_h"][0])


@pytest.mark.parametrize("shape,expected", [((4, 3, 5), "[4,2,5]"), ((3, 2, 5), "[2,2,5]"),
                                            ((5, 2, 5), "[4,2,5]")],
                         ids=["batch", "layers_not_multiple_of_dirs", "extra_pseudo_layer"])
@pytest.mark.parametrize("op", RNN_OPS)
def test_invalid_input_h_shape(op, shape, expected, values):
    expect_error(ValueError, ["Invalid input_h shape", expected], op, values, input_h=np.zeros(shape))


@pytest.mark.parametrize("op", V3_OPS)
def test_invalid_input_h_shape_batch_major(op, values):
    """time_major=False expects [B, L*D, Hout]; the time-major state shape is rejected."""
    bm = dict(values, input=values["input"].transpose(1, 0, 2).copy(), time_major=False)
    expect_error(ValueError, ["Invalid input_h shape", "[4,2,5] [2,2,5]"], op, bm, input_h=np.zeros((4, 2, 5)))


@pytest.mark.parametrize("op", RNN_OPS)
def test_input_h_without_layers(op, values):
    expect_error(ValueError, "input_h", op, values, direction="unidirectional", input_h=np.zeros((0, B, H)),
                 input_c=np.zeros((0, B, H)))


@pytest.mark.parametrize("op", RNN_OPS)
def test_input_c_must_match_input_h_without_projection(op, values):
    expect_error(ValueError, ["input_h and input_c must have the same shape w/o projection", "[4,2,5] [4,2,4]"],
                 op, values, input_c=np.zeros((L * D, B, 4)))


@pytest.mark.parametrize("op", RNN_OPS)
def test_input_c_must_be_rank_3(op, values):
    expect_error(ValueError, ["input_c", "3-D"], op, values, input_c=np.zeros((L * D, B)))


@pytest.fixture(scope="module")
def proj_values():
    return base_values(P=2)


@pytest.mark.parametrize("input_h_shape,input_c_shape", [
    ((4, 2, 3), (4, 2, 5)),  # input_h.dim2 != num_proj
    ((4, 2, 2), (4, 1, 5)),  # different batch
    ((4, 2, 2), (2, 2, 5)),  # different pseudo-layer count
], ids=["h_width", "c_batch", "c_layers"])
@pytest.mark.parametrize("op", V3_OPS)
def test_invalid_input_h_and_input_c_with_projection(op, input_h_shape, input_c_shape, proj_values):
    # input_h must stay a valid state shape where the rule under test is the pair rule
    if input_h_shape[2] != 2:
        changes = dict(input_h=np.zeros(input_h_shape), input_c=np.zeros(input_c_shape))
    else:
        changes = dict(input_c=np.zeros(input_c_shape))
    expect_error(ValueError, ["Invalid input_h and input_c w/ projection size", "2 "], op, proj_values, **changes)


@pytest.mark.parametrize("op", V3_OPS)
def test_num_proj_larger_than_cell_is_rejected_by_the_state_pair_rule(op, values):
    """num_proj > H: the forward sees input_h.dim2 (= H) != num_proj (TF's own check)."""
    expect_error(ValueError, "Invalid input_h and input_c w/ projection size", op, values, num_proj=6)


@pytest.mark.parametrize("op", V3_OPS)
def test_num_proj_equal_to_num_units(op, values):
    """num_proj == H passes TF's shape checks; fusedrnn requires 0 < num_proj < num_units (§15.5)."""
    expect_error(ValueError, ["num_proj", "num_units"], op, values, num_proj=H)


@pytest.mark.parametrize("op", ["CudnnRNNV3", "CudnnRNNBackpropV3", "CudnnRNNParamsSize",
                                "CudnnRNNParamsToCanonicalV2", "CudnnRNNCanonicalToParamsV2"])
def test_num_proj_negative(op, values):
    expect_error(ValueError, "num_proj", op, values, num_proj=-1)


@pytest.mark.parametrize("mode", ["gru", "rnn_tanh", "rnn_relu"])
@pytest.mark.parametrize("op", ["CudnnRNNV3", "CudnnRNNBackpropV3", "CudnnRNNParamsSize",
                                "CudnnRNNParamsToCanonicalV2", "CudnnRNNCanonicalToParamsV2"])
def test_num_proj_with_non_lstm_mode(op, mode):
    values = base_values(mode)
    expect_error(ValueError, ["num_proj", "lstm", mode], op, values, num_proj=2)


@pytest.mark.parametrize("op", ["CudnnRNNParamsSize", "CudnnRNNParamsToCanonicalV2", "CudnnRNNCanonicalToParamsV2"])
@pytest.mark.parametrize("num_proj", [H, H + 1])
def test_param_ops_num_proj_not_below_num_units(op, num_proj, values):
    expect_error(ValueError, ["num_proj", "num_units"], op, values, num_proj=num_proj)


@pytest.mark.parametrize("op", RNN_OPS)
def test_params_size_mismatch(op, values):
    size = values["params"].size
    expect_error(ValueError, ["params size mismatch", f"expected {size}", f"got {size - 1}", "lstm",
                              "bidirectional"], op, values, params=values["params"][:-1])


@pytest.mark.parametrize("op", RNN_OPS)
def test_params_must_be_rank_1(op, values):
    expect_error(ValueError, ["params", "1-D"], op, values, params=values["params"][None])


@pytest.mark.parametrize("op", RNN_OPS)
def test_zero_time_steps(op, values):
    expect_error(ValueError, "max_seq_length", op, values, input=np.zeros((0, B, I)),
                 output=np.zeros((0, B, D * H)), output_backprop=np.zeros((0, B, D * H)))


@pytest.mark.parametrize("op", RNN_OPS)
def test_skip_input_requires_input_size_equal_num_units(op, values):
    expect_error(ValueError, ["skip_input", "input_size=3", "num_units=5"], op, values, input_mode="skip_input")


@pytest.mark.parametrize("op", ["CudnnRNNParamsSize", "CudnnRNNParamsToCanonical", "CudnnRNNParamsToCanonicalV2",
                                "CudnnRNNCanonicalToParams", "CudnnRNNCanonicalToParamsV2"])
def test_param_ops_skip_input_requires_input_size_equal_num_units(op, values):
    expect_error(ValueError, ["skip_input", "input_size"], op, values, input_mode="skip_input")


# ----------------------------------------------------------------------------------------
# sequence_lengths (§5.1, §9.2, §15.8)


@pytest.mark.parametrize("lengths,words", [
    ([[4, 4]], ["sequence_lengths", "batch_size=2", "[1,2]"]),
    ([4, 4, 4], ["sequence_lengths", "batch_size=2", "[3]"]),
    ([4], ["sequence_lengths", "batch_size=2", "[1]"]),
    (4, ["sequence_lengths", "[]"]),
    ([4, 0], ["sequence_lengths[1] = 0 is outside [1, 4]"]),
    ([5, 4], ["sequence_lengths[0] = 5 is outside [1, 4]"]),
    ([4, -2], ["sequence_lengths[1] = -2 is outside [1, 4]"]),
], ids=["rank2", "too_long", "too_short", "scalar", "zero", "above_T", "negative"])
@pytest.mark.parametrize("op", V3_OPS)
def test_sequence_lengths_invalid(op, lengths, words, values):
    expect_error(ValueError, words, op, values, sequence_lengths=np.array(lengths, np.int32))


@pytest.mark.parametrize("batch", [256, 257])  # the bounds are checked two ways, by batch size
@pytest.mark.parametrize("bad", [0, 4, None])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_sequence_lengths_bounds_any_batch(batch, bad, dtype):
    T, H = 3, 2
    lengths = np.full(batch, T, dtype)
    lengths[::7] = 1
    if bad is not None:
        lengths[batch - 2] = bad
    x = np.ones((T, batch, H), np.float32)
    h = np.zeros((1, batch, H), np.float32)
    params = np.full(int(np.asarray(fusedrnn.cudnn_rnn_params_size(
        num_layers=1, num_units=H, input_size=H, T=np.float32, S=np.int32)).reshape(-1)[0]), 0.1, np.float32)
    run = lambda: fusedrnn.cudnn_rnn_v3(x, h, h, params, lengths, is_training=False)  # noqa: E731
    if bad is None:
        output = run().output
        assert np.all(output[1:, ::7] == 0) and np.all(output[:, 1] != 0)
    else:
        with pytest.raises(ValueError, match=rf"sequence_lengths\[{batch - 2}\] = {bad} is outside \[1, 3\]"):
            run()


@pytest.mark.parametrize("dtype", [np.float32, np.bool_, np.uint64, object])
@pytest.mark.parametrize("op", V3_OPS)
def test_sequence_lengths_dtype(op, dtype, values):
    expect_error(TypeError, "sequence_lengths", op, values, sequence_lengths=np.array([4, 4]).astype(dtype))


@pytest.mark.parametrize("op", V3_OPS)
def test_sequence_lengths_required(op, values):
    expect_error(TypeError, "sequence_lengths", op, values, sequence_lengths=None)


def test_backprop_sequence_lengths_must_match_forward(values):
    expect_error(ValueError, ["sequence_lengths differ", "[4, 4]", "[4, 3]"], "CudnnRNNBackpropV3", values,
                 sequence_lengths=np.array([4, 3], np.int32))


@pytest.mark.parametrize("op", ["CudnnRNNBackprop", "CudnnRNNBackpropV2"])
def test_fixed_length_backprop_of_variable_length_forward(op):
    values = base_values(lengths=(4, 2))
    expect_error(ValueError, ["sequence_lengths differ", "[4, 2]", "[4, 4]"], op, values)


# ----------------------------------------------------------------------------------------
# Attributes (§9.1, §9.3, §15.5, §15.6)


@pytest.mark.parametrize("attr,value,allowed", [
    ("rnn_mode", "x", "(lstm, gru, rnn_tanh, rnn_relu)"),
    ("rnn_mode", "LSTM", "(lstm, gru, rnn_tanh, rnn_relu)"),
    ("input_mode", "x", "(linear_input, skip_input, auto_select)"),
    ("direction", "x", "(unidirectional, bidirectional)"),
])
@pytest.mark.parametrize("op", ALL_OPS)
def test_unknown_attribute_string(op, attr, value, allowed, values):
    expect_error(ValueError, [f"Invalid {attr}: {value}, expect one of {allowed}"], op, values, **{attr: value})


@pytest.mark.parametrize("attr", ["rnn_mode", "input_mode", "direction"])
@pytest.mark.parametrize("op", ["CudnnRNNV3", "CudnnRNNBackprop", "CudnnRNNParamsSize"])
def test_attribute_string_of_wrong_type(op, attr, values):
    expect_error(TypeError, [attr, "string"], op, values, **{attr: 1})


@pytest.mark.parametrize("dropout", [-0.1, 1.001, 1.5, float("nan"), float("inf")])
@pytest.mark.parametrize("op", ALL_OPS)
def test_dropout_outside_unit_interval(op, dropout, values):
    expect_error(ValueError, ["dropout", "[0, 1]", str(dropout)], op, values, dropout=dropout)


@pytest.mark.parametrize("dropout", [0.0, 0.5, 1.0, 1])
@pytest.mark.parametrize("op", ALL_OPS)
def test_dropout_in_closed_unit_interval_is_accepted(op, dropout, values):
    """TF accepts dropout = 1.0 in every op (its cuDNN tests use it); the parameter ops ignore it."""
    getattr(raw_ops, op)(**pick(op, dict(values, dropout=dropout)))


@pytest.mark.parametrize("attr,value", [("dropout", "0.5"), ("dropout", True), ("seed", 1.5), ("seed2", "1"),
                                        ("seed", True), ("is_training", 1), ("is_training", "yes"),
                                        ("time_major", 0), ("num_proj", 1.0)])
def test_attribute_of_wrong_type(attr, value, values):
    op = "CudnnRNNV3"
    expect_error(TypeError, attr, op, values, **{attr: value})


# ----------------------------------------------------------------------------------------
# dtypes (§15, issue item 5)


@pytest.mark.parametrize("op,name", [(op, name) for op in RNN_OPS
                                     for name in ["input_h", "input_c", "params", "output", "output_h_backprop",
                                                  "reserve_space"]
                                     if op in BACKPROP_OPS or not name.startswith(("output", "reserve"))])
def test_mixed_float_dtypes(op, name, values):
    expect_error(TypeError, ["share one dtype", "float32", name], op, values, **{name: values[name].astype(np.float32)})


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.bool_, object, np.complex128])
@pytest.mark.parametrize("name", ["input", "input_h", "params"])
@pytest.mark.parametrize("op", ["CudnnRNN", "CudnnRNNV3", "CudnnRNNBackpropV3"])
def test_non_float_arrays(op, name, dtype, values):
    expect_error(TypeError, [name, "floating dtype"], op, values, **{name: values[name].astype(dtype)})


def test_mixed_dtypes_in_canonical_lists(values):
    biases = list(values["biases"])
    biases[3] = biases[3].astype(np.float32)
    expect_error(TypeError, ["share one dtype", "biases[3]"], "CudnnRNNCanonicalToParamsV2", values, biases=biases)


@pytest.mark.parametrize("op", ["CudnnRNNParamsToCanonical", "CudnnRNNParamsToCanonicalV2"])
def test_params_to_canonical_non_float(op, values):
    expect_error(TypeError, ["params", "floating dtype"], op, values, params=values["params"].astype(np.int64))


def test_canonical_to_params_non_float(values):
    weights = list(values["weights"])
    weights[0] = weights[0].astype(np.int32)
    expect_error(TypeError, ["weights[0]", "floating dtype"], "CudnnRNNCanonicalToParams", values, weights=weights)


@pytest.mark.parametrize("name", ["weights", "biases"])
def test_canonical_lists_must_be_lists(name, values):
    expect_error(TypeError, [name, "list"], "CudnnRNNCanonicalToParams", values, **{name: np.zeros((32, 5))})


# ----------------------------------------------------------------------------------------
# reserve_space (§7, §15.10)


@pytest.mark.parametrize("op", BACKPROP_OPS)
def test_reserve_space_from_inference_forward(op, values):
    inference = raw_ops.CudnnRNNV3(**pick("CudnnRNNV3", values), is_training=False)
    assert inference.reserve_space.shape == ()
    expect_error(ValueError, "is_training", op, values, reserve_space=inference.reserve_space)


def _other_reserve(values, kind):
    other = dict(values)
    if kind == "other_mode":  # rnn_tanh vs rnn_relu: same shapes and sizes, other config
        relu = base_values("rnn_relu")
        return relu, dict(reserve_space=raw_ops.CudnnRNNV3(**pick("CudnnRNNV3", dict(relu, rnn_mode="rnn_tanh")))
                          .reserve_space)
    if kind == "other_time":
        other.update(input=values["input"][:3], sequence_lengths=np.array([3, 3], np.int32))
        return values, dict(reserve_space=raw_ops.CudnnRNNV3(**pick("CudnnRNNV3", other)).reserve_space)
    if kind == "other_dtype":
        raw = base_values(dtype=np.float32)["reserve_space"].view(np.uint8)
        raw = np.concatenate([raw, np.zeros((-raw.size) % 8, np.uint8)])
        return values, dict(reserve_space=raw.view(np.float64))
    raise AssertionError(kind)


@pytest.mark.parametrize("kind,words", [("other_mode", "rnn_mode"), ("other_time", "max_time"),
                                        ("other_dtype", "itemsize")])
@pytest.mark.parametrize("op", BACKPROP_OPS)
def test_reserve_space_from_another_configuration(op, kind, words):
    values, changes = _other_reserve(base_values(), kind)
    expect_error(ValueError, ["reserve_space", "does not match", words], op, values, **changes)


@pytest.mark.parametrize("op", BACKPROP_OPS)
def test_reserve_space_not_from_fusedrnn(op, values):
    garbage = np.random.default_rng(1).standard_normal(values["reserve_space"].size)
    expect_error(ValueError, ["reserve_space", "not produced"], op, values, reserve_space=garbage)


@pytest.mark.parametrize("op", BACKPROP_OPS)
def test_reserve_space_truncated(op, values):
    expect_error(ValueError, ["reserve_space", "elements"], op, values, reserve_space=values["reserve_space"][:-1])


@pytest.mark.parametrize("op", BACKPROP_OPS)
def test_reserve_space_rank(op, values):
    expect_error(ValueError, ["reserve_space", "1-D"], op, values, reserve_space=values["reserve_space"][None])


# ----------------------------------------------------------------------------------------
# Backprop argument shapes (§9.1)


@pytest.mark.parametrize("name", ["output", "output_h", "output_c", "output_backprop", "output_h_backprop",
                                  "output_c_backprop"])
@pytest.mark.parametrize("op", BACKPROP_OPS)
def test_backprop_invalid_shape(op, name, values):
    bad = values[name][:, :1]
    expect_error(ValueError, [f"Invalid {name} shape:", str(list(values[name].shape)).replace(" ", "")],
                 op, values, **{name: bad})


@pytest.mark.parametrize("op", ["CudnnRNNBackpropV3"])
def test_backprop_shapes_are_layout_aware(op):
    """Batch-major: time-major-shaped outputs are rejected."""
    values = base_values()
    bm = dict(values, input=values["input"].transpose(1, 0, 2).copy(),
              input_h=values["input_h"].reshape(B, L * D, H), input_c=values["input_c"].reshape(B, L * D, H),
              time_major=False)
    fwd = raw_ops.CudnnRNNV3(**pick("CudnnRNNV3", bm))
    bm.update(output=fwd.output, output_h=fwd.output_h, output_c=fwd.output_c, reserve_space=fwd.reserve_space,
              output_backprop=np.ones_like(fwd.output), output_h_backprop=np.ones_like(fwd.output_h),
              output_c_backprop=np.ones_like(fwd.output_c))
    raw_ops.CudnnRNNBackpropV3(**pick(op, bm))  # valid as is
    expect_error(ValueError, ["Invalid output shape", "[2,4,10]"], op, bm, output=values["output"])
    expect_error(ValueError, ["Invalid output_h shape", "[2,4,5]"], op, bm, output_h=values["output_h"])


def test_non_lstm_ignores_input_c_and_output_c_shapes():
    """§2 / §15.7: non-LSTM modes never read input_c, output_c, output_c_backprop (any shape,
    same dtype)."""
    values = base_values("gru")
    anything = np.zeros((7,))
    for op in RNN_OPS:
        getattr(raw_ops, op)(**pick(op, dict(values, input_c=anything, output_c=anything,
                                              output_c_backprop=anything)))
    expect_error(TypeError, "share one dtype", "CudnnRNNV3", values, input_c=np.zeros((), np.float32))


# ----------------------------------------------------------------------------------------
# Parameter ops (§8, §9.1)


@pytest.mark.parametrize("name", ["num_layers", "num_units", "input_size"])
@pytest.mark.parametrize("op", PARAM_OPS)
def test_param_op_scalars(op, name, values):
    expect_error(ValueError, f"{name} is not a scalar", op, values, **{name: np.array([values[name]], np.int32)})


@pytest.mark.parametrize("name", ["num_layers", "num_units", "input_size"])
@pytest.mark.parametrize("op", PARAM_OPS)
def test_param_op_dims_must_be_positive(op, name, values):
    expect_error(ValueError, [name, ">= 1"], op, values, **{name: 0})


@pytest.mark.parametrize("name", ["num_layers", "num_units"])
def test_param_op_dims_must_be_integers(name, values):
    expect_error(TypeError, [name, "integer"], "CudnnRNNParamsSize", values, **{name: np.array(2.0)})


def test_params_to_canonical_weight_count(values):
    expect_error(ValueError, ["C Number of params mismatch. Expected 31, got 32"], "CudnnRNNParamsToCanonical",
                 values, num_params=31)


def test_params_to_canonical_v2_weight_count(values):
    expect_error(ValueError, ["C Number of params mismatch. Expected 33, got 32"], "CudnnRNNParamsToCanonicalV2",
                 values, num_params_weights=33)


def test_params_to_canonical_v2_bias_count(values):
    expect_error(ValueError, ["A Number of params mismatch. Expected 36, got 32"], "CudnnRNNParamsToCanonicalV2",
                 values, num_params_biases=36)


def test_params_to_canonical_v2_projection_counts(proj_values):
    """With projection: 9*L*D weights, 8*L*D biases; the V1 count (8*L*D) is a mismatch."""
    expect_error(ValueError, ["C Number of params mismatch. Expected 32, got 36"], "CudnnRNNParamsToCanonicalV2",
                 proj_values, num_params_weights=32)


@pytest.mark.parametrize("name", ["num_params", "num_params_weights", "num_params_biases"])
def test_num_params_must_be_positive(name, values):
    op = "CudnnRNNParamsToCanonical" if name == "num_params" else "CudnnRNNParamsToCanonicalV2"
    expect_error(ValueError, [name, ">= 1"], op, values, **{name: 0})


@pytest.mark.parametrize("delta", [-1, 1])
@pytest.mark.parametrize("op", ["CudnnRNNParamsToCanonical", "CudnnRNNParamsToCanonicalV2"])
def test_params_to_canonical_params_size(op, delta, values):
    params = np.zeros(values["params"].size + delta)
    expect_error(ValueError, ["params size mismatch", f"expected {values['params'].size}", f"got {params.size}"],
                 op, values, params=params)


@pytest.mark.parametrize("op", ["CudnnRNNParamsToCanonical", "CudnnRNNParamsToCanonicalV2"])
def test_params_to_canonical_params_rank(op, values):
    expect_error(ValueError, ["params", "1-D"], op, values, params=values["params"][None])


@pytest.mark.parametrize("name,keep", [("weights", 31), ("biases", 31), ("weights", 33)])
@pytest.mark.parametrize("op", ["CudnnRNNCanonicalToParams", "CudnnRNNCanonicalToParamsV2"])
def test_canonical_to_params_counts(op, name, keep, values):
    items = list(values[name]) + [values[name][0]]
    expect_error(ValueError, ["Number of params mismatch", f"Expected 32 {name}", f"got {keep}"], op, values,
                 **{name: items[:keep]})


@pytest.mark.parametrize("name,index,shape,expected", [("weights", 0, (5, 2), 15), ("weights", 17, (5, 9), 50),
                                                       ("biases", 4, (4,), 5), ("biases", 31, (6,), 5)])
@pytest.mark.parametrize("op", ["CudnnRNNCanonicalToParams", "CudnnRNNCanonicalToParamsV2"])
def test_canonical_to_params_region_size(op, name, index, shape, expected, values):
    items = list(values[name])
    items[index] = np.zeros(shape)
    expect_error(ValueError, [f"Params size mismatch. Expected {expected}, got {int(np.prod(shape))}",
                              f"{name}[{index}]"], op, values, **{name: items})


def test_canonical_to_params_skip_matrix_must_be_empty():
    values = base_values()
    values.update(input_size=H, input_mode="skip_input")
    size, n_w, n_b = _sizes(input_size=0)
    weights, biases = raw_ops.CudnnRNNParamsToCanonical(**pick("CudnnRNNParamsToCanonical", dict(
        values, params=np.ones(size), num_params=n_w)))
    assert weights[0].shape == (H, 0)
    bad = list(weights)
    bad[1] = np.ones((H, H))
    expect_error(ValueError, ["Params size mismatch. Expected 0, got 25", "weights[1]", "skip_input"],
                 "CudnnRNNCanonicalToParams", dict(values, biases=biases), weights=bad)


@pytest.mark.parametrize("S", [np.int16, np.float32, "x", None])
def test_params_size_S(S, values):
    expect_error(TypeError, "S must be", "CudnnRNNParamsSize", values, S=S)


@pytest.mark.parametrize("T_", [np.int32, np.complex64, "x", None])
def test_params_size_T(T_, values):
    expect_error(TypeError, "T must be", "CudnnRNNParamsSize", values, T=T_)


def test_params_size_overflows_S(values):
    expect_error(ValueError, ["does not fit", "int32"], "CudnnRNNParamsSize", values, num_units=30000,
                 input_size=30000)
    big = raw_ops.CudnnRNNParamsSize(**pick("CudnnRNNParamsSize", dict(values, num_units=30000, input_size=30000,
                                                                      S=np.int64)))
    assert big.dtype == np.int64 and int(big[0]) > 2**31
