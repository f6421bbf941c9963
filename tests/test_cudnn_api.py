"""The CudnnRNN API surface: ``fusedrnn.raw_ops`` (keyword-only, ``tf.raw_ops`` names and
defaults), the snake_case functions, result NamedTuples, placeholder outputs, dtypes,
no mutation of inputs, and randomized configurations (hypothesis) against PyTorch and
finite differences (spec §1, §7.1, §15.1, §15.7, §15.10)."""

import inspect

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fusedrnn
from fusedrnn import raw_ops
from cudnn_helpers import (MODES, Case, assert_gradients_match_fd, backprop_v3, forward_v3, make_problem,
                           random_like_outputs, seq_to_op, state_to_op, torch_reference)

# Signatures of TF 2.21's tf.raw_ops (dumped with inspect.signature); "<required>" = no default.
R = "<required>"
_RNN_ATTRS = [("rnn_mode", "lstm"), ("input_mode", "linear_input"), ("direction", "unidirectional"),
              ("dropout", 0), ("seed", 0), ("seed2", 0)]
_FWD_IN = ["input", "input_h", "input_c", "params"]
_BWD_IN = ["output", "output_h", "output_c", "output_backprop", "output_h_backprop", "output_c_backprop",
           "reserve_space"]
_DIMS = ["num_layers", "num_units", "input_size"]


def _sig(inputs, *attrs):
    return [(n, R) for n in inputs] + [a for group in attrs for a in group] + [("name", None)]


TF_SIGNATURES = {
    "CudnnRNN": _sig(_FWD_IN, _RNN_ATTRS, [("is_training", True)]),
    "CudnnRNNV2": _sig(_FWD_IN, _RNN_ATTRS, [("is_training", True)]),
    "CudnnRNNV3": _sig(_FWD_IN + ["sequence_lengths"], _RNN_ATTRS,
                       [("num_proj", 0), ("is_training", True), ("time_major", True)]),
    "CudnnRNNBackprop": _sig(_FWD_IN + _BWD_IN, _RNN_ATTRS),
    "CudnnRNNBackpropV2": _sig(_FWD_IN + _BWD_IN + ["host_reserved"], _RNN_ATTRS),
    "CudnnRNNBackpropV3": _sig(_FWD_IN + ["sequence_lengths"] + _BWD_IN + ["host_reserved"], _RNN_ATTRS,
                               [("num_proj", 0), ("time_major", True)]),
    "CudnnRNNParamsSize": _sig(_DIMS + ["T", "S"], _RNN_ATTRS, [("num_proj", 0)]),
    "CudnnRNNParamsToCanonical": _sig(_DIMS + ["params", "num_params"], _RNN_ATTRS),
    "CudnnRNNParamsToCanonicalV2": _sig(_DIMS + ["params", "num_params_weights", "num_params_biases"],
                                        _RNN_ATTRS, [("num_proj", 0)]),
    "CudnnRNNCanonicalToParams": _sig(_DIMS + ["weights", "biases"], _RNN_ATTRS),
    "CudnnRNNCanonicalToParamsV2": _sig(_DIMS + ["weights", "biases"], _RNN_ATTRS, [("num_proj", 0)]),
}
OPS = list(TF_SIGNATURES)
# TF's required type attrs T and S of ParamsSize have defaults here (float32, int32):
# a superset of TF's signature (every TF call still works).
LENIENT_DEFAULTS = {("CudnnRNNParamsSize", "T"), ("CudnnRNNParamsSize", "S")}
SNAKE = {"CudnnRNN": "cudnn_rnn", "CudnnRNNV2": "cudnn_rnn_v2", "CudnnRNNV3": "cudnn_rnn_v3",
         "CudnnRNNBackprop": "cudnn_rnn_backprop", "CudnnRNNBackpropV2": "cudnn_rnn_backprop_v2",
         "CudnnRNNBackpropV3": "cudnn_rnn_backprop_v3", "CudnnRNNParamsSize": "cudnn_rnn_params_size",
         "CudnnRNNParamsToCanonical": "cudnn_rnn_params_to_canonical",
         "CudnnRNNParamsToCanonicalV2": "cudnn_rnn_params_to_canonical_v2",
         "CudnnRNNCanonicalToParams": "cudnn_rnn_canonical_to_params",
         "CudnnRNNCanonicalToParamsV2": "cudnn_rnn_canonical_to_params_v2"}
# attributes (keyword-only in the snake_case functions) vs inputs (positional, TF order)
TYPE_ATTRS = {"T", "S", "num_params", "num_params_weights", "num_params_biases"}


def _ours(op):
    signature = inspect.signature(getattr(raw_ops, op))
    return [(p.name, R if p.default is inspect.Parameter.empty else p.default)
            for p in signature.parameters.values()], signature


def _assert_signature_matches(op, expected):
    ours, signature = _ours(op)
    assert [n for n, _ in ours] == [n for n, _ in expected], op
    for (name, default), (_, tf_default) in zip(ours, expected):
        if tf_default is R:
            if (op, name) not in LENIENT_DEFAULTS:
                assert default is R, f"{op}.{name} must be required, as in tf.raw_ops"
        else:
            assert default == tf_default, (op, name, default, tf_default)
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in signature.parameters.values()), op


@pytest.mark.parametrize("op", OPS)
def test_raw_op_signature_matches_tf_2_21(op):
    _assert_signature_matches(op, TF_SIGNATURES[op])


@pytest.mark.tf
@pytest.mark.parametrize("op", OPS)
def test_raw_op_signature_matches_installed_tf(op):
    tf = pytest.importorskip("tensorflow", reason="compares with the installed tf.raw_ops")
    tf_sig = inspect.signature(getattr(tf.raw_ops, op))
    expected = [(p.name, R if p.default is inspect.Parameter.empty else p.default)
                for p in tf_sig.parameters.values()]
    _assert_signature_matches(op, expected)


@pytest.mark.parametrize("op", OPS)
def test_snake_case_signature(op):
    """Inputs positional in TF's order, attributes keyword-only with TF's names and defaults."""
    fn = getattr(fusedrnn, SNAKE[op])
    params = list(inspect.signature(fn).parameters.values())
    expected = [(n, d) for n, d in TF_SIGNATURES[op] if n != "name"]
    assert [p.name for p in params] == [n for n, _ in expected]
    for p, (name, default) in zip(params, expected):
        is_input = default is R and name not in TYPE_ATTRS
        assert p.kind is (inspect.Parameter.POSITIONAL_OR_KEYWORD if is_input else inspect.Parameter.KEYWORD_ONLY), name


@pytest.mark.parametrize("op", OPS)
def test_raw_op_is_keyword_only_and_named(op):
    fn = getattr(raw_ops, op)
    assert callable(fn) and fn.__name__ == op and op in raw_ops.__all__
    with pytest.raises(TypeError, match="keyword"):
        fn(1)


# ----------------------------------------------------------------------------------------
# Results, placeholders and dtypes


def _problem(mode="lstm", dtype=np.float64, P=0, lengths=None):
    case = Case(mode, 2, 2, input_size=3, num_units=4, num_proj=P, batch=3, max_time=4, lengths=lengths)
    return make_problem(case, seed=1, dtype=dtype)


def _fwd_kwargs(prob, **extra):
    kwargs = dict(input=prob.x, input_h=prob.h, input_c=prob.c, params=prob.params, rnn_mode=prob.case.mode,
                  direction=prob.case.direction)
    kwargs.update(extra)
    return kwargs


def _bwd_kwargs(prob, fwd, **extra):
    kwargs = _fwd_kwargs(prob, output=fwd.output, output_h=fwd.output_h, output_c=fwd.output_c,
                         output_backprop=np.ones_like(fwd.output), output_h_backprop=np.ones_like(fwd.output_h),
                         output_c_backprop=np.ones_like(fwd.output_c), reserve_space=fwd.reserve_space)
    kwargs.update(extra)
    return kwargs


def test_name_is_accepted_and_ignored():
    prob = _problem()
    a = raw_ops.CudnnRNNV3(**_fwd_kwargs(prob, sequence_lengths=prob.lengths), name="my_rnn")
    b = raw_ops.CudnnRNNV3(**_fwd_kwargs(prob, sequence_lengths=prob.lengths))
    c = fusedrnn.cudnn_rnn_v3(prob.x, prob.h, prob.c, prob.params, prob.lengths, direction="bidirectional")
    for x, y, z in zip(a, b, c):
        np.testing.assert_array_equal(x, y)
        np.testing.assert_array_equal(x, z)
    size = raw_ops.CudnnRNNParamsSize(num_layers=1, num_units=4, input_size=3, T=np.float32, S=np.int32, name="n")
    assert size.shape == (1,) and int(size[0]) == 4 * 4 * 7 + 32


FIELDS_FWD = ("output", "output_h", "output_c", "reserve_space")
FIELDS_BWD = ("input_backprop", "input_h_backprop", "input_c_backprop", "params_backprop")


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64], ids=["float16", "float32", "float64"])
@pytest.mark.parametrize("mode", MODES)
def test_results_fields_shapes_and_dtypes(mode, dtype):
    prob = _problem(mode, dtype)
    T_, B_, LD, H, D = 4, 3, 4, 4, 2
    lstm = mode == "lstm"
    v1 = raw_ops.CudnnRNN(**_fwd_kwargs(prob))
    v2 = raw_ops.CudnnRNNV2(**_fwd_kwargs(prob))
    v3 = raw_ops.CudnnRNNV3(**_fwd_kwargs(prob, sequence_lengths=prob.lengths))
    assert v1._fields == FIELDS_FWD
    assert v2._fields == v3._fields == FIELDS_FWD + ("host_reserved",)
    for res in (v1, v2, v3):
        assert res.output.shape == (T_, B_, D * H) and res.output.dtype == dtype
        assert res.output_h.shape == prob.h.shape and res.output_h.dtype == dtype
        if lstm:
            assert res.output_c.shape == prob.c.shape and res.output_c.dtype == dtype
        else:  # rank-0 zero placeholder of dtype T (§15.7)
            assert res.output_c.shape == () and res.output_c.dtype == dtype and res.output_c == 0
        assert res.reserve_space.ndim == 1 and res.reserve_space.dtype == dtype
    # host_reserved: V2 training [2] int8; V3 always rank 0 (§1.5, §7.1)
    assert v2.host_reserved.shape == (2,) and v2.host_reserved.dtype == np.int8
    assert v3.host_reserved.shape == () and v3.host_reserved.dtype == np.int8
    for op, extra in (("CudnnRNN", {}), ("CudnnRNNV2", {}), ("CudnnRNNV3", dict(sequence_lengths=prob.lengths))):
        inference = getattr(raw_ops, op)(**_fwd_kwargs(prob, is_training=False, **extra))
        assert inference.reserve_space.shape == () and inference.reserve_space.dtype == dtype
        if op != "CudnnRNN":
            assert inference.host_reserved.shape == () and inference.host_reserved.dtype == np.int8
        np.testing.assert_array_equal(inference.output, v1.output)  # no dropout here: same values
    bwds = [raw_ops.CudnnRNNBackprop(**_bwd_kwargs(prob, v1)),
            raw_ops.CudnnRNNBackpropV2(**_bwd_kwargs(prob, v2, host_reserved=v2.host_reserved)),
            raw_ops.CudnnRNNBackpropV3(**_bwd_kwargs(prob, v3, sequence_lengths=prob.lengths,
                                                     host_reserved=v3.host_reserved))]
    for bwd in bwds:
        assert bwd._fields == FIELDS_BWD
        assert bwd.input_backprop.shape == prob.x.shape and bwd.input_backprop.dtype == dtype
        assert bwd.input_h_backprop.shape == prob.h.shape and bwd.input_h_backprop.dtype == dtype
        assert bwd.params_backprop.shape == prob.params.shape and bwd.params_backprop.dtype == dtype
        if lstm:
            assert bwd.input_c_backprop.shape == prob.c.shape and bwd.input_c_backprop.dtype == dtype
        else:
            assert bwd.input_c_backprop.shape == () and bwd.input_c_backprop.dtype == dtype
            assert bwd.input_c_backprop == 0
        for a, b in zip(bwd, bwds[0]):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64], ids=["float16", "float32", "float64"])
def test_param_op_results(dtype):
    size = raw_ops.CudnnRNNParamsSize(num_layers=2, num_units=4, input_size=3, T=dtype, S=np.int64,
                                      direction="bidirectional", num_proj=2)
    assert isinstance(size, np.ndarray) and size.shape == (1,) and size.dtype == np.int64
    params = np.arange(int(size[0])).astype(dtype)
    canon = raw_ops.CudnnRNNParamsToCanonicalV2(num_layers=2, num_units=4, input_size=3, params=params,
                                                num_params_weights=36, num_params_biases=32,
                                                direction="bidirectional", num_proj=2)
    assert canon._fields == ("weights", "biases")
    assert all(w.ndim == 2 and w.dtype == dtype for w in canon.weights)
    assert all(b.shape == (4,) and b.dtype == dtype for b in canon.biases)
    canon1 = raw_ops.CudnnRNNParamsToCanonical(num_layers=1, num_units=4, input_size=3,
                                               params=np.zeros(4 * 4 * 7 + 32, dtype), num_params=8)
    assert canon1._fields == ("weights", "biases")
    back = raw_ops.CudnnRNNCanonicalToParamsV2(num_layers=2, num_units=4, input_size=3, weights=canon.weights,
                                               biases=canon.biases, direction="bidirectional", num_proj=2)
    assert isinstance(back, np.ndarray) and back.dtype == dtype
    np.testing.assert_array_equal(back, params)


@pytest.mark.parametrize("host_reserved", [np.zeros((), np.int8), np.zeros(5, np.int8), np.array([7, -1], np.int8)],
                         ids=["rank0", "len5", "garbage"])
def test_host_reserved_is_ignored_by_backprop(host_reserved):
    """§9.2: BackpropV2/V3 ignore host_reserved's contents and shape."""
    prob = _problem("gru", lengths=(4, 1, 3))
    v3 = raw_ops.CudnnRNNV3(**_fwd_kwargs(prob, sequence_lengths=prob.lengths))
    ref = raw_ops.CudnnRNNBackpropV3(**_bwd_kwargs(prob, v3, sequence_lengths=prob.lengths,
                                                   host_reserved=v3.host_reserved))
    got = raw_ops.CudnnRNNBackpropV3(**_bwd_kwargs(prob, v3, sequence_lengths=prob.lengths,
                                                   host_reserved=host_reserved))
    for a, b in zip(got, ref):
        np.testing.assert_array_equal(a, b)
    full = _problem("gru")
    v2 = raw_ops.CudnnRNNV2(**_fwd_kwargs(full))
    raw_ops.CudnnRNNBackpropV2(**_bwd_kwargs(full, v2, host_reserved=host_reserved))


@pytest.mark.parametrize("lengths_dtype", [np.int32, np.int64])
def test_sequence_lengths_int32_and_int64(lengths_dtype):
    prob = _problem(lengths=(4, 2, 1))
    a = raw_ops.CudnnRNNV3(**_fwd_kwargs(prob, sequence_lengths=prob.lengths.astype(lengths_dtype)))
    b = raw_ops.CudnnRNNV3(**_fwd_kwargs(prob, sequence_lengths=prob.lengths))
    np.testing.assert_array_equal(a.output, b.output)


# ----------------------------------------------------------------------------------------
# Inputs are never modified (read-only arrays work; values unchanged)


def _frozen(a):
    a = np.array(a, copy=True)
    a.setflags(write=False)
    return a


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64], ids=["float16", "float32", "float64"])
@pytest.mark.parametrize("time_major", [True, False], ids=["time_major", "batch_major"])
@pytest.mark.parametrize("mode,P", [("lstm", 0), ("lstm", 2), ("gru", 0), ("rnn_relu", 0)],
                         ids=["lstm", "lstm_proj", "gru", "rnn_relu"])
def test_inputs_are_never_modified(mode, P, time_major, dtype):
    """Every op runs on read-only inputs and leaves their values unchanged."""
    prob = _problem(mode, dtype, P, lengths=(4, 1, 3))
    gy, gh, gc = random_like_outputs(prob.case, 3, dtype)
    seq, state = (lambda a: seq_to_op(a, time_major)), (lambda a: state_to_op(a, time_major))
    attrs = dict(rnn_mode=mode, direction="bidirectional", num_proj=P, time_major=time_major, dropout=0.5,
                 seed=1, seed2=1)
    fwd_in = dict(input=seq(prob.x), input_h=state(prob.h), input_c=state(prob.c), params=prob.params,
                  sequence_lengths=prob.lengths)
    fwd_in = {k: _frozen(v) for k, v in fwd_in.items()}
    saved = {k: v.copy() for k, v in fwd_in.items()}
    fwd = raw_ops.CudnnRNNV3(**fwd_in, **attrs)
    bwd_in = dict(fwd_in, output=fwd.output, output_h=fwd.output_h, output_c=fwd.output_c,
                  output_backprop=seq(gy), output_h_backprop=state(gh), output_c_backprop=state(gc),
                  reserve_space=fwd.reserve_space, host_reserved=fwd.host_reserved)
    bwd_in = {k: _frozen(v) for k, v in bwd_in.items()}
    saved.update({k: v.copy() for k, v in bwd_in.items()})
    attrs.pop("dropout"), attrs.pop("seed"), attrs.pop("seed2")
    raw_ops.CudnnRNNBackpropV3(**bwd_in, **attrs, dropout=0.5, seed=1, seed2=1)
    for name, value in bwd_in.items():
        assert value.dtype == saved[name].dtype
        np.testing.assert_array_equal(value, saved[name], err_msg=name)
    # parameter ops: outputs are fresh arrays, inputs untouched
    regions = fusedrnn.layout.RNNConfig(mode, 2, 4, 3, 2, False, P).regions
    params = _frozen(prob.params)
    weights, biases = fusedrnn.cudnn_rnn_params_to_canonical_v2(
        2, 4, 3, params, num_params_weights=len(regions.weights), num_params_biases=len(regions.biases),
        rnn_mode=mode, direction="bidirectional", num_proj=P)
    weights[0][...] = 123
    biases[0][...] = 123
    np.testing.assert_array_equal(params, prob.params)
    weights, biases = [_frozen(w) for w in weights], [_frozen(b) for b in biases]
    packed = fusedrnn.cudnn_rnn_canonical_to_params_v2(2, 4, 3, weights, biases, rnn_mode=mode,
                                                       direction="bidirectional", num_proj=P)
    packed[...] = 0
    assert np.all(weights[0] == 123) and np.all(biases[0] == 123)


# ----------------------------------------------------------------------------------------
# Randomized configurations (hypothesis)

HYPOTHESIS = settings(max_examples=25, deadline=None, derandomize=True, database=None)


@st.composite
def configurations(draw, allow_skip=False):
    mode = draw(st.sampled_from(MODES))
    H = draw(st.integers(1, 4))
    P = draw(st.integers(1, H - 1)) if mode == "lstm" and H > 1 and draw(st.booleans()) else 0
    input_mode = draw(st.sampled_from(["linear_input", "skip_input", "auto_select"])) if allow_skip else "linear_input"
    I = H if input_mode == "skip_input" else draw(st.integers(1, 4))
    if input_mode == "auto_select" and not allow_skip:
        input_mode = "linear_input"
    B = draw(st.integers(1, 3))
    T = draw(st.integers(1, 4))
    lengths = tuple(draw(st.lists(st.integers(1, T), min_size=B, max_size=B))) if draw(st.booleans()) else None
    case = Case(mode, draw(st.integers(1, 3)), draw(st.sampled_from([1, 2])), input_size=I, num_units=H,
                num_proj=P, batch=B, max_time=T, lengths=lengths, input_mode=input_mode)
    return case, draw(st.booleans()), draw(st.integers(0, 2**16))


@pytest.mark.torch
@HYPOTHESIS
@given(configurations())
def test_random_configurations_match_torch(torch, config):
    case, time_major, seed = config
    prob = make_problem(case, seed)
    grads = random_like_outputs(case, seed + 1)
    ref = torch_reference(prob, grads)
    fwd = forward_v3(prob, time_major)
    tol = dict(rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(fwd.output, ref.output, **tol, err_msg=str(case))
    np.testing.assert_allclose(fwd.output_h, ref.output_h, **tol, err_msg=str(case))
    d_x, d_h, d_c, d_params = backprop_v3(prob, fwd, grads, time_major)
    np.testing.assert_allclose(d_x, ref.d_input, **tol, err_msg=str(case))
    np.testing.assert_allclose(d_h, ref.d_h, **tol, err_msg=str(case))
    np.testing.assert_allclose(d_params, ref.d_params, **tol, err_msg=str(case))
    if case.is_lstm:
        np.testing.assert_allclose(fwd.output_c, ref.output_c, **tol, err_msg=str(case))
        np.testing.assert_allclose(d_c, ref.d_c, **tol, err_msg=str(case))


@settings(max_examples=12, deadline=None, derandomize=True, database=None)
@given(configurations(allow_skip=True), st.sampled_from([0.0, 0.3]))
def test_random_configurations_match_finite_differences(config, dropout):
    """Covers what PyTorch cannot: skip_input / auto_select and dropout (same seeds)."""
    case, time_major, seed = config
    assert_gradients_match_fd(make_problem(case, seed), time_major, per_region=1, max_entries=6, rng_seed=seed,
                              dropout=dropout, seed=seed, seed2=seed + 1)
