"""CudnnRNN forward and backprop against PyTorch ``nn.LSTM`` (incl. ``proj_size``),
``nn.GRU`` and ``nn.RNN`` (tanh/relu) in float64 — identical mathematics (spec §10.1).

Compared: output, final states and every gradient (input, initial states, and all
parameters: PyTorch's parameter gradients packed into the opaque layout with
``cudnn_rnn_canonical_to_params_v2`` against ``params_backprop``).
"""

import numpy as np
import pytest

import fusedrnn
from cudnn_helpers import (Case, backprop_v3, forward_v3, make_problem, random_like_outputs,
                           torch_reference)

pytest.importorskip("torch", reason="PyTorch is the oracle for the CudnnRNN math (spec §10.1)")
pytestmark = [pytest.mark.torch, pytest.mark.usefixtures("torch")]

TOL = dict(rtol=1e-10, atol=1e-10)

MODEL_KINDS = [("lstm", 0), ("lstm", 2), ("gru", 0), ("rnn_tanh", 0), ("rnn_relu", 0)]
MODEL_IDS = ["lstm", "lstm_proj2", "gru", "rnn_tanh", "rnn_relu"]
LENGTHS = {
    "full": None,
    "packed": (6, 3, 1, 5),  # unsorted, includes 1 and T
    "short": (4, 2, 5, 1),  # no sequence reaches T: the last step is padding everywhere
}


def assert_forward_matches(case, fwd, ref):
    np.testing.assert_allclose(fwd.output, ref.output, **TOL, err_msg=f"output, {case}")
    np.testing.assert_allclose(fwd.output_h, ref.output_h, **TOL, err_msg=f"output_h, {case}")
    if case.is_lstm:
        np.testing.assert_allclose(fwd.output_c, ref.output_c, **TOL, err_msg=f"output_c, {case}")


def assert_backward_matches(case, grads, ref):
    d_x, d_h, d_c, d_params = grads
    np.testing.assert_allclose(d_x, ref.d_input, **TOL, err_msg=f"input_backprop, {case}")
    np.testing.assert_allclose(d_h, ref.d_h, **TOL, err_msg=f"input_h_backprop, {case}")
    if case.is_lstm:
        np.testing.assert_allclose(d_c, ref.d_c, **TOL, err_msg=f"input_c_backprop, {case}")
    assert d_params.shape == ref.d_params.shape
    np.testing.assert_allclose(d_params, ref.d_params, **TOL, err_msg=f"params_backprop, {case}")


def check_v3(case, time_major, seed=0):
    prob = make_problem(case, seed)
    grads = random_like_outputs(case, seed + 100)
    ref = torch_reference(prob, grads)
    fwd = forward_v3(prob, time_major)
    assert_forward_matches(case, fwd, ref)
    assert_backward_matches(case, backprop_v3(prob, fwd, grads, time_major), ref)


@pytest.mark.parametrize("time_major", [True, False], ids=["time_major", "batch_major"])
@pytest.mark.parametrize("lengths", list(LENGTHS.values()), ids=list(LENGTHS))
@pytest.mark.parametrize("num_layers", [1, 2, 3], ids=lambda n: f"L{n}")
@pytest.mark.parametrize("num_dirs", [1, 2], ids=["uni", "bi"])
@pytest.mark.parametrize("mode,num_proj", MODEL_KINDS, ids=MODEL_IDS)
def test_v3_matches_torch(mode, num_proj, num_dirs, num_layers, lengths, time_major):
    case = Case(mode, num_layers, num_dirs, input_size=3, num_units=5, num_proj=num_proj,
                batch=4, max_time=6, lengths=lengths)
    check_v3(case, time_major, seed=num_layers * 10 + num_dirs)


SMALL_CASES = [
    Case("lstm", 1, 1, input_size=1, num_units=1, batch=1, max_time=1),
    Case("gru", 2, 2, input_size=1, num_units=1, batch=1, max_time=1),
    Case("rnn_tanh", 1, 2, input_size=2, num_units=1, batch=3, max_time=1, lengths=(1, 1, 1)),
    Case("rnn_relu", 2, 1, input_size=1, num_units=2, batch=1, max_time=5, lengths=(3,)),
    Case("lstm", 2, 2, input_size=1, num_units=2, num_proj=1, batch=1, max_time=3, lengths=(2,)),
    Case("lstm", 3, 2, input_size=4, num_units=3, num_proj=1, batch=5, max_time=4,
         lengths=(4, 1, 2, 4, 3)),
    Case("gru", 1, 2, input_size=4, num_units=3, batch=2, max_time=7, lengths=(1, 7)),
    # I == H with linear_input: a normal input matrix, not the identity
    Case("lstm", 2, 2, input_size=4, num_units=4, batch=2, max_time=3, lengths=(3, 2)),
    # auto_select with I != H resolves to linear_input
    Case("gru", 2, 1, input_size=3, num_units=4, batch=2, max_time=3, input_mode="auto_select"),
    Case("lstm", 2, 2, input_size=2, num_units=4, num_proj=2, batch=3, max_time=3,
         input_mode="auto_select"),  # I == P != H: still linear (spec §15.4)
]


@pytest.mark.parametrize("time_major", [True, False], ids=["time_major", "batch_major"])
@pytest.mark.parametrize("case", SMALL_CASES, ids=str)
def test_v3_small_and_edge_sizes_match_torch(case, time_major):
    check_v3(case, time_major, seed=7)


def run_fixed_length(version, prob, grads, **attrs):
    """Forward + backprop with CudnnRNN / CudnnRNNV2 (time-major, fixed length)."""
    case = prob.case
    gy, gh, gc = grads
    inputs = (prob.x, prob.h, prob.c, prob.params)
    if version == 1:
        fwd = fusedrnn.cudnn_rnn(*inputs, **case.attrs_v1(**attrs))
        bp = fusedrnn.cudnn_rnn_backprop(*inputs, fwd.output, fwd.output_h, fwd.output_c, gy, gh, gc,
                                         fwd.reserve_space, **case.attrs_v1(**attrs))
    else:
        fwd = fusedrnn.cudnn_rnn_v2(*inputs, **case.attrs_v1(**attrs))
        bp = fusedrnn.cudnn_rnn_backprop_v2(*inputs, fwd.output, fwd.output_h, fwd.output_c, gy, gh, gc,
                                            fwd.reserve_space, fwd.host_reserved, **case.attrs_v1(**attrs))
    return fwd, bp


@pytest.mark.parametrize("version", [1, 2], ids=["V1", "V2"])
@pytest.mark.parametrize("num_layers", [1, 2, 3], ids=lambda n: f"L{n}")
@pytest.mark.parametrize("num_dirs", [1, 2], ids=["uni", "bi"])
@pytest.mark.parametrize("mode", ["lstm", "gru", "rnn_tanh", "rnn_relu"])
def test_v1_v2_match_torch(mode, num_dirs, num_layers, version):
    case = Case(mode, num_layers, num_dirs, input_size=3, num_units=4, batch=3, max_time=5)
    prob = make_problem(case, seed=3)
    grads = random_like_outputs(case, 4)
    ref = torch_reference(prob, grads)
    fwd, bp = run_fixed_length(version, prob, grads)
    assert_forward_matches(case, fwd, ref)
    assert_backward_matches(case, bp, ref)
