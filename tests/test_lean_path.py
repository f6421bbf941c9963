"""The lean inference path (fusedrnn.cudnn._lean) against the general one: same bits where it
applies, the general path (and its errors) wherever it does not."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

import fusedrnn
from fusedrnn import settings
from fusedrnn.cudnn import _lean, _stack
from fusedrnn.cudnn._resolve import _attrs
from cudnn_helpers import MODES, Case, make_problem, seq_to_op, state_to_op

pytestmark = pytest.mark.skipif(not fusedrnn.backend_info()["native_available"],
                                reason="the lean path runs the native engine")


@pytest.fixture(autouse=True)
def native_backend():
    """The lean path runs on the native backend only: selected here, whatever FUSEDRNN_BACKEND says."""
    with settings.backend("native"):
        yield


def _inputs(prob, time_major=True):
    return dict(input=seq_to_op(prob.x, time_major), input_h=state_to_op(prob.h, time_major),
                input_c=state_to_op(prob.c, time_major), params=prob.params)


def _attrs_of(case):
    return _attrs(case.mode, case.input_mode, case.direction, 0.0, 0, 0, case.num_proj)


def _general(case, prob, lengths=None, time_major=True):
    return _stack._forward(_attrs_of(case), _inputs(prob, time_major), lengths, False, time_major)


def _assert_same(lean, general):
    assert len(lean) == len(general) == 4
    for a, b in zip(lean, general):
        assert a.dtype == b.dtype and a.shape == b.shape and a.flags.c_contiguous
        np.testing.assert_array_equal(a, b)
        assert np.array_equal(np.signbit(a), np.signbit(b))


CASES = [Case(mode=m, num_layers=L, num_dirs=D, input_size=I, num_units=H, batch=B, max_time=T)
         for m in MODES for L, D, I, H, B, T in [(1, 1, 3, 5, 4, 6), (2, 1, 7, 16, 1, 3), (3, 1, 9, 33, 5, 2),
                                                 (1, 2, 4, 6, 3, 5), (2, 2, 5, 17, 2, 3)]]
CASES += [Case(num_layers=L, num_dirs=D, input_size=6, num_units=20, num_proj=7, batch=3, max_time=4)
          for L in (1, 2) for D in (1, 2)]


@pytest.mark.parametrize("time_major", [True, False], ids=["time_major", "batch_major"])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_lean_path_gives_the_general_paths_bits(case, dtype, threads, time_major, monkeypatch):
    monkeypatch.setattr(settings, "_num_threads", threads)
    prob = make_problem(case, seed=3).astype(dtype)
    inputs = _inputs(prob, time_major)
    lean = _lean.forward(_attrs_of(case), inputs, prob.lengths, time_major)
    assert lean is not None  # the path under test ran
    _assert_same(lean, _general(case, prob, prob.lengths, time_major))
    public = fusedrnn.cudnn_rnn_v3(**inputs, sequence_lengths=prob.lengths, is_training=False,
                                   time_major=time_major, **case.attrs())
    _assert_same(public[:4], lean)
    again = _lean.forward(_attrs_of(case), inputs, None, time_major)  # planned signature, no lengths
    _assert_same(again, lean)


@pytest.mark.parametrize("change", ["skip_input", "float16", "short_sequence", "python_list",
                                    "strided_params", "numpy_backend", "memory_limit"])
def test_lean_path_leaves_other_calls_to_the_general_path(change, monkeypatch):
    case = Case(input_size=5, num_units=5, num_dirs=2, batch=3, max_time=4)
    if change == "skip_input":
        case = case.with_(input_mode="skip_input")
    prob = make_problem(case, seed=1).astype(np.float16 if change == "float16" else np.float32)
    inputs, lengths = _inputs(prob), prob.lengths
    if change == "short_sequence":
        lengths = np.array([4, 2, 4], np.int32)
    if change == "python_list":
        inputs["input_h"] = prob.h.tolist()
    if change == "strided_params":
        inputs["params"] = np.repeat(prob.params, 2)[::2]
    if change == "memory_limit":
        monkeypatch.setenv("FUSEDRNN_MEMORY_LIMIT", str(2**40))
    with settings.backend("numpy" if change == "numpy_backend" else "native"):
        assert _lean.forward(_attrs_of(case), inputs, lengths, True) is None
        result = fusedrnn.cudnn_rnn_v3(**inputs, sequence_lengths=lengths, is_training=False, **case.attrs())
        _assert_same(result[:4], _stack._forward(_attrs_of(case), inputs, lengths, False, True))


def test_planned_signature_still_checks_what_can_change():
    case = Case(mode="gru", batch=2, max_time=4)
    prob = make_problem(case).astype(np.float32)
    run = lambda **change: fusedrnn.cudnn_rnn_v3(  # noqa: E731
        **{**_inputs(prob), "sequence_lengths": prob.lengths, **change}, is_training=False, **case.attrs())
    run()  # the plan exists now
    with pytest.raises(ValueError, match=r"sequence_lengths\[1\] = 5 is outside \[1, 4\]"):
        run(sequence_lengths=np.array([4, 5], np.int32))
    with pytest.raises(TypeError, match="all float inputs must share one dtype"):
        run(input_c=prob.c.astype(np.float64))  # ignored by a GRU, still checked
    with pytest.raises(ValueError, match="params size mismatch"):
        run(params=prob.params[:-1])
    with settings.backend("numpy"):  # the planned signature on the other backend: the general path
        assert _lean.forward(_attrs_of(case), _inputs(prob), prob.lengths, True) is None
        _assert_same(run()[:4], _stack._forward(_attrs_of(case), _inputs(prob), prob.lengths, False, True))


def test_outputs_are_fresh_per_call():
    prob = make_problem(Case(num_units=8, max_time=3), seed=2).astype(np.float32)
    first = fusedrnn.cudnn_rnn_v3(prob.x, prob.h, prob.c, prob.params, prob.lengths, is_training=False)
    kept = [np.array(a) for a in first[:3]]
    second = fusedrnn.cudnn_rnn_v3(prob.x * 2, prob.h, prob.c, prob.params, prob.lengths, is_training=False)
    for a, b in zip(first[:3], kept):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(first.output, second.output)


def _backward_inputs(prob, forward, time_major, seed=5):
    rng = np.random.default_rng(seed)
    output, output_h, output_c, reserve_space = forward
    grads = [rng.standard_normal(a.shape).astype(a.dtype) for a in (output, output_h, output_c)]
    return dict(_inputs(prob, time_major), output=output, output_h=output_h, output_c=output_c,
                output_backprop=grads[0], output_h_backprop=grads[1], output_c_backprop=grads[2],
                reserve_space=reserve_space)


@pytest.mark.parametrize("time_major", [True, False], ids=["time_major", "batch_major"])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_lean_training_and_backward_give_the_general_paths_bits(case, dtype, threads, time_major,
                                                                monkeypatch):
    """A training forward (its reserve included) and the backward from it, on the lean path and
    on the general one (and through the public ops): the same bits."""
    monkeypatch.setattr(settings, "_num_threads", threads)
    prob = make_problem(case, seed=4).astype(dtype)
    inputs = _inputs(prob, time_major)
    lean = _lean.forward(_attrs_of(case), inputs, prob.lengths, time_major, True)
    assert lean is not None  # the path under test ran
    _assert_same(lean, _stack._forward(_attrs_of(case), inputs, prob.lengths, True, time_major))
    public = fusedrnn.cudnn_rnn_v3(**inputs, sequence_lengths=prob.lengths, is_training=True,
                                   time_major=time_major, **case.attrs())
    _assert_same(public[:4], lean)
    backward_inputs = _backward_inputs(prob, lean, time_major)
    lean_grads = _lean.backward(_attrs_of(case), backward_inputs, prob.lengths, time_major)
    assert lean_grads is not None
    _assert_same(lean_grads, _stack._backward(_attrs_of(case), backward_inputs, prob.lengths, time_major))
    public_grads = fusedrnn.cudnn_rnn_backprop_v3(**backward_inputs, sequence_lengths=prob.lengths,
                                                  host_reserved=np.zeros((), np.int8),
                                                  time_major=time_major, **case.attrs())
    _assert_same(public_grads, lean_grads)
    assert not np.shares_memory(lean_grads.input_backprop, backward_inputs["output_backprop"])


@pytest.mark.parametrize("change", ["dropout", "short_sequence", "float16", "numpy_backend",
                                    "memory_limit", "python_scalar_output_c"])
def test_lean_training_leaves_other_calls_to_the_general_path(change, monkeypatch):
    case = Case(mode="gru" if change == "python_scalar_output_c" else "lstm", num_layers=2,
                input_size=5, num_units=6, batch=3, max_time=4)
    dropout = 0.5 if change == "dropout" else 0.0
    prob = make_problem(case, seed=1).astype(np.float16 if change == "float16" else np.float32)
    inputs, lengths = _inputs(prob), prob.lengths
    if change == "short_sequence":
        lengths = np.array([4, 2, 4], np.int32)
    if change == "memory_limit":
        monkeypatch.setenv("FUSEDRNN_MEMORY_LIMIT", str(2**40))
    attrs = _attrs(case.mode, case.input_mode, case.direction, dropout, 7, 9, case.num_proj)
    with settings.backend("numpy" if change == "numpy_backend" else "native"):
        if change != "python_scalar_output_c":
            assert _lean.forward(attrs, inputs, lengths, True, True) is None
        forward = _stack._forward(attrs, inputs, lengths, True, True)
        backward_inputs = _backward_inputs(prob, forward, True)
        if change == "python_scalar_output_c":  # ignored by a GRU: any float the general path takes
            backward_inputs["output_c"] = backward_inputs["output_c_backprop"] = 0.0
        assert _lean.backward(attrs, backward_inputs, lengths, True) is None
        _assert_same(fusedrnn.cudnn_rnn_backprop_v3(**backward_inputs, sequence_lengths=lengths,
                                                    host_reserved=np.zeros((), np.int8), dropout=dropout,
                                                    seed=7, seed2=9, **case.attrs()),
                     _stack._backward(attrs, backward_inputs, lengths, True))


def test_lean_backward_raises_the_general_paths_errors():
    """A planned signature's backward still checks the forward's outputs, their gradients and
    the reserve (wrong shapes go to the general path, which names them)."""
    case = Case(num_units=6, batch=2, max_time=3)
    prob = make_problem(case, seed=6).astype(np.float32)
    forward = fusedrnn.cudnn_rnn_v3(**_inputs(prob), sequence_lengths=prob.lengths, is_training=True)
    good = _backward_inputs(prob, forward[:4], True)
    run = lambda **change: fusedrnn.cudnn_rnn_backprop_v3(  # noqa: E731
        **{"sequence_lengths": prob.lengths, **good, **change}, host_reserved=np.zeros((), np.int8))
    run()  # the plan exists now
    with pytest.raises(ValueError, match="Invalid output_backprop shape"):
        run(output_backprop=good["output_backprop"][:, :1])
    with pytest.raises(ValueError, match="Invalid output_c shape"):
        run(output_c=good["output_c"][:, :1])
    with pytest.raises(ValueError, match="is_training=False"):
        run(reserve_space=np.zeros((), np.float32))
    with pytest.raises(ValueError, match="not produced by a fusedrnn"):
        run(reserve_space=np.zeros(40, np.float32))
    with pytest.raises(ValueError, match=r"sequence_lengths\[0\] = 0 is outside"):
        run(sequence_lengths=np.array([0, 3], np.int32))
    other = fusedrnn.cudnn_rnn_v3(**_inputs(prob), sequence_lengths=np.array([3, 2], np.int32),
                                  is_training=True)
    with pytest.raises(ValueError, match="sequence_lengths differ"):
        run(reserve_space=other.reserve_space)


@hypothesis_settings(max_examples=40, deadline=None)
@given(mode=st.sampled_from(MODES), layers=st.integers(1, 3), dirs=st.integers(1, 2),
       inputs=st.integers(1, 9), units=st.integers(1, 20), proj=st.integers(0, 3),
       batch=st.integers(1, 5), steps=st.integers(1, 6), time_major=st.booleans(),
       dtype=st.sampled_from([np.float32, np.float64]), threads=st.integers(1, 3),
       seed=st.integers(0, 2**16))
def test_random_configurations_give_the_general_paths_bits(mode, layers, dirs, inputs, units, proj,
                                                            batch, steps, time_major, dtype,
                                                            threads, seed):
    """Random stacks (hypothesis): inference, training and backward on the lean path against
    the general one, bit for bit."""
    proj = proj if mode == "lstm" and proj < units else 0
    case = Case(mode=mode, num_layers=layers, num_dirs=dirs, input_size=inputs, num_units=units,
                num_proj=proj, batch=batch, max_time=steps)
    prob = make_problem(case, seed=seed).astype(dtype)
    attrs, inputs_ = _attrs_of(case), _inputs(prob, time_major)
    old_threads = settings._num_threads
    settings._num_threads = threads
    try:
        for training in (False, True):
            lean = _lean.forward(attrs, inputs_, prob.lengths, time_major, training)
            assert lean is not None
            _assert_same(lean, _stack._forward(attrs, inputs_, prob.lengths, training, time_major))
        backward_inputs = _backward_inputs(prob, lean, time_major, seed=seed + 1)
        lean_grads = _lean.backward(attrs, backward_inputs, prob.lengths, time_major)
        assert lean_grads is not None
        _assert_same(lean_grads, _stack._backward(attrs, backward_inputs, prob.lengths, time_major))
    finally:
        settings._num_threads = old_threads
