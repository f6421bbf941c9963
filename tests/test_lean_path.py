"""The lean inference path (fusedrnn.cudnn._lean) against the general one: same bits where it
applies, the general path (and its errors) wherever it does not."""

import numpy as np
import pytest

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
