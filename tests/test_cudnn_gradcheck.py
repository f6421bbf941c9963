"""CudnnRNN properties PyTorch cannot check: finite differences (float64) for skip_input,
auto_select and dropout; dropout determinism; version equivalence; dtype agreement;
padding; batch-major state semantics (spec §4.2, §4.3, §5, §7, §15)."""

import numpy as np
import pytest

import fusedrnn
from fusedrnn import reserve
from cudnn_helpers import (MODES, Case, assert_gradients_match_fd, backprop_v3, forward_v3, make_problem,
                           random_like_outputs)

# ----------------------------------------------------------------------------------------
# Finite differences


@pytest.mark.parametrize("mode", MODES)
def test_fd_every_entry_small_problem(mode):
    """All entries of input, states and params, skip_input, bidirectional, 2 layers, lengths."""
    case = Case(mode, 2, 2, input_size=2, num_units=2, batch=2, max_time=3, lengths=(3, 2),
                input_mode="skip_input")
    assert_gradients_match_fd(make_problem(case, seed=1))


@pytest.mark.parametrize("time_major", [True, False], ids=["time_major", "batch_major"])
@pytest.mark.parametrize("num_layers", [1, 2], ids=lambda n: f"L{n}")
@pytest.mark.parametrize("num_dirs", [1, 2], ids=["uni", "bi"])
@pytest.mark.parametrize("mode", MODES)
def test_fd_skip_input(mode, num_dirs, num_layers, time_major):
    case = Case(mode, num_layers, num_dirs, input_size=3, num_units=3, batch=3, max_time=4,
                lengths=(4, 1, 3), input_mode="skip_input")
    assert_gradients_match_fd(make_problem(case, seed=num_layers + 2 * num_dirs), time_major,
                              per_region=2, max_entries=16)


def test_fd_skip_input_with_projection():
    """skip_input + num_proj (I == H; the layer-0 gates read x itself, spec §4.2 / §15.4)."""
    case = Case("lstm", 2, 2, input_size=4, num_units=4, num_proj=2, batch=2, max_time=3,
                lengths=(2, 3), input_mode="skip_input")
    assert_gradients_match_fd(make_problem(case, seed=5), per_region=2, max_entries=16)


AUTO_CASES = [
    # (case, resolves_to_skip)
    (Case("lstm", 2, 1, input_size=3, num_units=3, batch=2, max_time=3, input_mode="auto_select"), True),
    (Case("gru", 1, 2, input_size=3, num_units=3, batch=2, max_time=3, input_mode="auto_select",
          lengths=(1, 3)), True),
    (Case("rnn_relu", 2, 2, input_size=2, num_units=2, batch=2, max_time=3, input_mode="auto_select"), True),
    (Case("rnn_tanh", 2, 1, input_size=2, num_units=3, batch=2, max_time=3, input_mode="auto_select"), False),
    (Case("lstm", 1, 2, input_size=4, num_units=4, num_proj=2, batch=2, max_time=3,
          input_mode="auto_select"), True),  # I == H under projection → skip (§15.4)
    (Case("lstm", 2, 1, input_size=2, num_units=4, num_proj=2, batch=2, max_time=3,
          input_mode="auto_select"), False),  # I == P != H → linear (§15.4)
]


@pytest.mark.parametrize("case,skip", AUTO_CASES, ids=[str(c) for c, _ in AUTO_CASES])
def test_auto_select_resolution_and_fd(case, skip):
    resolved = case.with_(input_mode="skip_input" if skip else "linear_input")
    assert case.params_size() == resolved.params_size()
    prob = make_problem(case, seed=11)
    grads = random_like_outputs(case, 12)
    fwd_auto = forward_v3(prob)
    fwd_res = forward_v3(prob._replace(case=resolved))
    np.testing.assert_allclose(fwd_auto.output, fwd_res.output, rtol=0, atol=1e-15)
    np.testing.assert_allclose(fwd_auto.output_h, fwd_res.output_h, rtol=0, atol=1e-15)
    bp_auto = backprop_v3(prob, fwd_auto, grads)
    bp_res = backprop_v3(prob._replace(case=resolved), fwd_res, grads)
    for a, b in zip(bp_auto, bp_res):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-15)
    assert_gradients_match_fd(prob, per_region=2, max_entries=12)


@pytest.mark.parametrize("num_layers,time_major", [(2, True), (2, False), (3, False)],
                         ids=["L2-time_major", "L2-batch_major", "L3-batch_major"])
@pytest.mark.parametrize("num_dirs", [1, 2], ids=["uni", "bi"])
@pytest.mark.parametrize("mode,num_proj", [("lstm", 0), ("lstm", 2), ("gru", 0), ("rnn_tanh", 0),
                                           ("rnn_relu", 0)],
                         ids=["lstm", "lstm_proj2", "gru", "rnn_tanh", "rnn_relu"])
def test_fd_dropout_same_seeds(mode, num_proj, num_dirs, num_layers, time_major):
    """Training-mode dropout: the backprop reuses the forward's masks, and a forward with
    the same (seed, seed2) draws the same masks, so finite differences apply."""
    case = Case(mode, num_layers, num_dirs, input_size=3, num_units=4, num_proj=num_proj, batch=3,
                max_time=4, lengths=(2, 4, 1))
    assert_gradients_match_fd(make_problem(case, seed=21), time_major, per_region=1, max_entries=10,
                              dropout=0.4, seed=5, seed2=-3)


@pytest.mark.parametrize("mode", MODES)
def test_fd_dropout_with_skip_input(mode):
    case = Case(mode, 2, 2, input_size=3, num_units=3, batch=2, max_time=3, lengths=(3, 2),
                input_mode="skip_input")
    assert_gradients_match_fd(make_problem(case, seed=8), per_region=1, max_entries=10,
                              dropout=0.5, seed=1, seed2=2)


# ----------------------------------------------------------------------------------------
# dropout = 1 and just below it (README "where fusedrnn deliberately differs")

EDGE_CASE = Case("lstm", 3, 2, input_size=3, num_units=4, batch=4, max_time=5)
EDGE_SEED = 40  # with this seed, dropout = float32(0.999) keeps one element in each of the two masks


def _masks(fwd, case: Case, dtype=np.float64):
    config = fusedrnn.layout.RNNConfig(case.mode, case.num_layers, case.num_units, case.input_size,
                                       case.num_dirs)
    views, applied = reserve.read_reserve(fwd.raw.reserve_space, config, case.max_time, case.batch,
                                          np.full(case.batch, case.max_time, dtype=np.int64), np.dtype(dtype))
    assert applied
    return [views[f"dropout_mask_{layer}"] for layer in range(1, case.num_layers)]


@pytest.mark.parametrize("dropout,kept", [(1.0, False), (0.999, True), (1 - 1e-7, False)],
                         ids=["one", "0.999", "1-1e-7"])
@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_dropout_at_and_just_below_one_is_finite_and_matches_fd(mode, dropout, kept):
    """Masks are exactly {0, 1/(1-p)} with p the float32 attribute (all 0 at p = 1: no inf,
    no NaN), and the backprop equals finite differences with the same masks (float64)."""
    case = EDGE_CASE.with_(mode=mode)
    prob = make_problem(case, seed=3)
    attrs = dict(dropout=dropout, seed=EDGE_SEED, seed2=0)
    fwd = forward_v3(prob, **attrs)
    p = float(np.float32(dropout))
    for mask in _masks(fwd, case):
        assert np.isfinite(mask).all()
        assert set(np.unique(mask)) <= ({0.0, 1.0 / (1.0 - p)} if p < 1 else {0.0})
        assert np.any(mask != 0) == kept
    assert np.isfinite(fwd.output).all() and np.isfinite(fwd.output_h).all()
    assert_gradients_match_fd(prob, per_region=1, max_entries=8, rtol=1e-5, atol=1e-7, **attrs)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mode", MODES)
def test_dropout_one_cuts_every_layer_off_from_the_next(mode, dtype):
    """At dropout = 1 each layer above the first receives exact zeros: the output and the last
    layer's states do not depend on the input, the input gradient from ``output`` alone is
    exactly 0, and layer 0's own final state still depends on the input."""
    case = EDGE_CASE.with_(mode=mode)
    prob = make_problem(case, seed=4).astype(dtype)
    other = prob._replace(x=make_problem(case, seed=5).x.astype(dtype))
    attrs = dict(dropout=1.0, seed=1, seed2=2)
    fwd, fwd_other = forward_v3(prob, **attrs), forward_v3(other, **attrs)
    np.testing.assert_array_equal(fwd.output, fwd_other.output)
    np.testing.assert_array_equal(fwd.output_h[-2:], fwd_other.output_h[-2:])
    assert np.max(np.abs(fwd.output_h[:2] - fwd_other.output_h[:2])) > 1e-3
    d_output, d_h, d_c = random_like_outputs(case, 7, dtype)
    d_x = backprop_v3(prob, fwd, (d_output, np.zeros_like(d_h), np.zeros_like(d_c)), **attrs)[0]
    assert d_x.dtype == dtype
    np.testing.assert_array_equal(d_x, 0)


def test_dropout_is_a_float32_attribute():
    """TF's ``dropout`` attr is a 32-bit float: values that round to the same float32 give the
    same masks; 1 - 1e-9 rounds to 1.0 (everything dropped, like TF would)."""
    prob = make_problem(DROP_CASE, seed=2)
    np.testing.assert_array_equal(forward_v3(prob, dropout=1 - 1e-9, seed=1, seed2=1).output,
                                  forward_v3(prob, dropout=1.0, seed=1, seed2=1).output)
    np.testing.assert_array_equal(forward_v3(prob, dropout=0.3, seed=1, seed2=1).output,
                                  forward_v3(prob, dropout=float(np.float32(0.3)), seed=1, seed2=1).output)


# ----------------------------------------------------------------------------------------
# Dropout determinism (spec §4.3, §15.6, §15.10)

DROP_CASE = Case("lstm", 3, 2, input_size=3, num_units=4, batch=3, max_time=5, lengths=(5, 2, 4))


def _fwd_bwd(prob, **attrs):
    fwd = forward_v3(prob, is_training=attrs.pop("is_training", True), **attrs)
    return fwd, backprop_v3(prob, fwd, random_like_outputs(prob.case, 99), **attrs)


def test_dropout_same_seeds_identical():
    prob = make_problem(DROP_CASE, seed=2)
    fwd1, bp1 = _fwd_bwd(prob, dropout=0.5, seed=3, seed2=4)
    fwd2, bp2 = _fwd_bwd(prob, dropout=0.5, seed=3, seed2=4)
    np.testing.assert_array_equal(fwd1.output, fwd2.output)
    np.testing.assert_array_equal(fwd1.output_h, fwd2.output_h)
    np.testing.assert_array_equal(fwd1.raw.reserve_space, fwd2.raw.reserve_space)
    for a, b in zip(bp1, bp2):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("base,other", [
    (dict(seed=3, seed2=4), dict(seed=4, seed2=4)),
    (dict(seed=3, seed2=4), dict(seed=3, seed2=5)),
    (dict(seed=3, seed2=4), dict(seed=4, seed2=3)),
    (dict(seed=0, seed2=0), dict(seed=0, seed2=-3)),
    (dict(seed=0, seed2=-3), dict(seed=0, seed2=-5)),  # 64-bit keys >= 2**63 stay distinct
    (dict(seed=2**31, seed2=1), dict(seed=2**31, seed2=2)),
    (dict(seed=-1, seed2=7), dict(seed=-1, seed2=8)),
], ids=["seed", "seed2", "swapped", "negative_seed2", "two_negative_seed2", "large_seed", "negative_seed"])
def test_dropout_different_seeds_different_masks(base, other):
    prob = make_problem(DROP_CASE, seed=2)
    base = forward_v3(prob, dropout=0.5, **base)
    changed = forward_v3(prob, dropout=0.5, **other)
    assert np.max(np.abs(changed.output - base.output)) > 1e-3


@pytest.mark.parametrize("a,b", [(dict(seed=3 + 2**32, seed2=4), dict(seed=3, seed2=4)),
                                 (dict(seed=3, seed2=-1), dict(seed=5, seed2=-1))],
                         ids=["seed_high_word_dropped", "negative_seed2_sign_extends"])
def test_dropout_seed_packing_follows_tf(a, b):
    """The 64-bit key is TF's ``(uint64(seed) << 32) | uint64(seed2)`` (spec §4.3 quirk):
    seed's high word is shifted out, and a negative seed2 fills the high word with ones."""
    prob = make_problem(DROP_CASE, seed=2)
    np.testing.assert_array_equal(forward_v3(prob, dropout=0.5, **a).output,
                                  forward_v3(prob, dropout=0.5, **b).output)


def test_dropout_masks_differ_between_layers_and_match_spec_scaling():
    case = Case("gru", 3, 2, input_size=2, num_units=8, batch=40, max_time=30)
    prob = make_problem(case, seed=0)
    p = 0.3
    fwd = forward_v3(prob, dropout=p, seed=17, seed2=1)
    config = fusedrnn.layout.RNNConfig("gru", 3, 8, 2, 2)
    views, applied = reserve.read_reserve(fwd.raw.reserve_space, config, 30, 40,
                                          np.full(40, 30, dtype=np.int64), np.dtype(np.float64))
    assert applied
    masks = [views["dropout_mask_1"], views["dropout_mask_2"]]
    for mask in masks:
        assert mask.shape == (30, 40, 16)
        scale = 1.0 / (1.0 - float(np.float32(p)))  # dropout is a float32 attribute
        assert set(np.unique(mask)) <= {0.0, scale}
        np.testing.assert_allclose(mask[mask != 0], scale, rtol=1e-15)
        kept = np.mean(mask != 0)
        sigma = np.sqrt(p * (1 - p) / mask.size)
        assert abs(kept - (1 - p)) < 5 * sigma, (kept, 1 - p)
        assert abs(np.mean(mask) - 1.0) < 5 * sigma / (1 - p)  # inverted dropout keeps the mean
    assert not np.array_equal(masks[0] != 0, masks[1] != 0)
    np.testing.assert_array_equal(views["layer_input_1"] == 0, masks[0] == 0)


@pytest.mark.parametrize("mode", MODES)
def test_inference_never_applies_dropout(mode):
    case = DROP_CASE.with_(mode=mode)
    prob = make_problem(case, seed=6)
    inference = forward_v3(prob, dropout=0.5, seed=1, seed2=2, is_training=False)
    reference = forward_v3(prob, dropout=0.0, is_training=True)
    np.testing.assert_allclose(inference.output, reference.output, rtol=0, atol=1e-15)
    np.testing.assert_allclose(inference.output_h, reference.output_h, rtol=0, atol=1e-15)
    if case.is_lstm:
        np.testing.assert_allclose(inference.output_c, reference.output_c, rtol=0, atol=1e-15)
    assert inference.raw.reserve_space.shape == ()


@pytest.mark.parametrize("mode", MODES)
def test_single_layer_dropout_has_no_effect(mode):
    case = Case(mode, 1, 2, input_size=3, num_units=4, batch=3, max_time=4, lengths=(4, 1, 3))
    prob = make_problem(case, seed=9)
    fwd0, bp0 = _fwd_bwd(prob, dropout=0.0)
    fwd1, bp1 = _fwd_bwd(prob, dropout=0.7, seed=5, seed2=6)
    np.testing.assert_allclose(fwd1.output, fwd0.output, rtol=0, atol=1e-15)
    np.testing.assert_allclose(fwd1.output_h, fwd0.output_h, rtol=0, atol=1e-15)
    for a, b in zip(bp1, bp0):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-15)


def test_dropout_changes_multilayer_training_output():
    prob = make_problem(DROP_CASE, seed=2)
    np.testing.assert_array_less(1e-3, np.max(np.abs(forward_v3(prob, dropout=0.5).output
                                                     - forward_v3(prob, dropout=0.0).output)))


def test_dropout_masks_do_not_depend_on_time_major():
    prob = make_problem(DROP_CASE, seed=2)
    grads = random_like_outputs(DROP_CASE, 1)
    tm = forward_v3(prob, True, dropout=0.5, seed=8, seed2=9)
    bm = forward_v3(prob, False, dropout=0.5, seed=8, seed2=9)
    np.testing.assert_allclose(bm.output, tm.output, rtol=0, atol=1e-14)
    np.testing.assert_allclose(bm.output_h, tm.output_h, rtol=0, atol=1e-14)
    for a, b in zip(backprop_v3(prob, bm, grads, False, dropout=0.5, seed=8, seed2=9),
                    backprop_v3(prob, tm, grads, True, dropout=0.5, seed=8, seed2=9)):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-13)


# ----------------------------------------------------------------------------------------
# V1 / V2 == V3 with full lengths (spec §1.5)


@pytest.mark.parametrize("dropout", [0.0, 0.5], ids=["no_dropout", "dropout"])
@pytest.mark.parametrize("input_mode", ["linear_input", "skip_input"])
@pytest.mark.parametrize("mode", MODES)
def test_v1_v2_equal_v3_with_full_lengths(mode, input_mode, dropout):
    case = Case(mode, 2, 2, input_size=4, num_units=4, batch=3, max_time=4, input_mode=input_mode)
    prob = make_problem(case, seed=31)
    gy, gh, gc = random_like_outputs(case, 32)
    attrs = dict(dropout=dropout, seed=1, seed2=2)
    v3 = forward_v3(prob, **attrs)
    bp3 = backprop_v3(prob, v3, (gy, gh, gc), **attrs)
    inputs = (prob.x, prob.h, prob.c, prob.params)
    v1 = fusedrnn.cudnn_rnn(*inputs, **case.attrs_v1(**attrs))
    v2 = fusedrnn.cudnn_rnn_v2(*inputs, **case.attrs_v1(**attrs))
    bp1 = fusedrnn.cudnn_rnn_backprop(*inputs, v1.output, v1.output_h, v1.output_c, gy, gh, gc,
                                      v1.reserve_space, **case.attrs_v1(**attrs))
    bp2 = fusedrnn.cudnn_rnn_backprop_v2(*inputs, v2.output, v2.output_h, v2.output_c, gy, gh, gc,
                                         v2.reserve_space, v2.host_reserved, **case.attrs_v1(**attrs))
    for fwd in (v1, v2):
        np.testing.assert_allclose(fwd.output, v3.output, rtol=0, atol=1e-14)
        np.testing.assert_allclose(fwd.output_h, v3.output_h, rtol=0, atol=1e-14)
        np.testing.assert_allclose(fwd.output_c, v3.output_c, rtol=0, atol=1e-14)
    for bp in (bp1, bp2):
        for a, b in zip(bp, bp3):
            np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-13)
    # the reserve spaces are interchangeable between the versions
    bp_mixed = fusedrnn.cudnn_rnn_backprop(*inputs, v1.output, v1.output_h, v1.output_c, gy, gh, gc,
                                           v3.raw.reserve_space, **case.attrs_v1(**attrs))
    for a, b in zip(bp_mixed, bp3):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-13)


# ----------------------------------------------------------------------------------------
# float16 / float32 vs float64 (spec §11: float16 computes in float32, rounds the outputs)

DTYPE_TOL = {np.float32: 2e-5, np.float16: 4e-3}


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["float32", "float16"])
@pytest.mark.parametrize("time_major", [True, False], ids=["time_major", "batch_major"])
@pytest.mark.parametrize("mode,num_proj", [("lstm", 0), ("lstm", 2), ("gru", 0), ("rnn_tanh", 0),
                                           ("rnn_relu", 0)],
                         ids=["lstm", "lstm_proj2", "gru", "rnn_tanh", "rnn_relu"])
def test_low_precision_agrees_with_float64(mode, num_proj, time_major, dtype):
    case = Case(mode, 2, 2, input_size=3, num_units=4, num_proj=num_proj, batch=3, max_time=5,
                lengths=(5, 2, 4))
    low = make_problem(case, seed=41, dtype=dtype)
    high = low.astype(np.float64)  # the same (rounded) inputs, in float64
    grads_low = random_like_outputs(case, 42, dtype=dtype)
    grads_high = tuple(g.astype(np.float64) for g in grads_low)
    attrs = dict(dropout=0.25, seed=2, seed2=3)
    f_low, f_high = forward_v3(low, time_major, **attrs), forward_v3(high, time_major, **attrs)
    b_low = backprop_v3(low, f_low, grads_low, time_major, **attrs)
    b_high = backprop_v3(high, f_high, grads_high, time_major, **attrs)
    tol = DTYPE_TOL[dtype]
    named = [("output", f_low.output, f_high.output), ("output_h", f_low.output_h, f_high.output_h),
             ("input_backprop", b_low[0], b_high[0]), ("input_h_backprop", b_low[1], b_high[1]),
             ("params_backprop", b_low[3], b_high[3])]
    if case.is_lstm:
        named += [("output_c", f_low.output_c, f_high.output_c), ("input_c_backprop", b_low[2], b_high[2])]
    for name, a, b in named:
        assert a.dtype == dtype, name
        scale = max(1.0, float(np.max(np.abs(b))))
        np.testing.assert_allclose(a.astype(np.float64), b, rtol=tol, atol=tol * scale,
                                   err_msg=f"{name}, {case}, {np.dtype(dtype).name}")
    # reserve_space is dtype T too (it stores float32 intermediates as raw bytes for float16)
    assert f_low.raw.reserve_space.dtype == dtype and f_low.raw.reserve_space.ndim == 1


# ----------------------------------------------------------------------------------------
# Padding (spec §5.1)


@pytest.mark.parametrize("time_major", [True, False], ids=["time_major", "batch_major"])
@pytest.mark.parametrize("mode,num_proj", [("lstm", 0), ("lstm", 2), ("gru", 0), ("rnn_tanh", 0),
                                           ("rnn_relu", 0)],
                         ids=["lstm", "lstm_proj2", "gru", "rnn_tanh", "rnn_relu"])
def test_padding_is_exactly_zero_and_inert(mode, num_proj, time_major):
    lengths = (6, 1, 4, 3)
    case = Case(mode, 2, 2, input_size=3, num_units=4, num_proj=num_proj, batch=4, max_time=6,
                lengths=lengths)
    prob = make_problem(case, seed=51)
    grads = random_like_outputs(case, 52)
    attrs = dict(dropout=0.3, seed=4, seed2=4)
    pad = np.arange(6)[:, None] >= np.array(lengths)[None, :]  # [T, B]
    fwd = forward_v3(prob, time_major, **attrs)
    bp = backprop_v3(prob, fwd, grads, time_major, **attrs)
    assert np.all(fwd.output[pad] == 0.0), "outputs past a sequence's end must be exactly 0"
    assert np.all(bp[0][pad] == 0.0), "input_backprop at padded positions must be exactly 0"
    assert np.mean(fwd.output[~pad] != 0.0) > 0.3  # sanity: valid steps are not all zero
    # padded inputs and upstream gradients at padded outputs have no influence at all
    rng = np.random.default_rng(53)
    x2 = prob.x.copy()
    x2[pad] = rng.standard_normal(x2[pad].shape) * 100
    gy2 = grads[0].copy()
    gy2[pad] = rng.standard_normal(gy2[pad].shape) * 100
    prob2 = prob._replace(x=x2)
    fwd2 = forward_v3(prob2, time_major, **attrs)
    bp2 = backprop_v3(prob2, fwd2, (gy2, grads[1], grads[2]), time_major, **attrs)
    for a, b in [(fwd2.output, fwd.output), (fwd2.output_h, fwd.output_h), (fwd2.output_c, fwd.output_c)]:
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-15)
    for a, b in zip(bp2, bp):
        np.testing.assert_allclose(a, b, rtol=1e-14, atol=1e-14)


def test_final_states_come_from_last_valid_step():
    """Forward direction: state after step len-1 equals the full-length run truncated to len;
    backward direction of a length-n sequence equals a run on the n-step prefix alone."""
    case = Case("lstm", 1, 2, input_size=3, num_units=4, batch=3, max_time=5, lengths=(5, 2, 3))
    prob = make_problem(case, seed=61)
    fwd = forward_v3(prob)
    for b, n in enumerate(case.lengths):
        sub_case = case.with_(batch=1, max_time=n, lengths=None)
        sub = prob._replace(case=sub_case, x=prob.x[:n, b:b + 1], h=prob.h[:, b:b + 1],
                            c=prob.c[:, b:b + 1], lengths=np.array([n], np.int32))
        ref = forward_v3(sub)
        np.testing.assert_allclose(fwd.output[:n, b], ref.output[:, 0], rtol=1e-14, atol=1e-14)
        np.testing.assert_allclose(fwd.output_h[:, b], ref.output_h[:, 0], rtol=1e-14, atol=1e-14)
        np.testing.assert_allclose(fwd.output_c[:, b], ref.output_c[:, 0], rtol=1e-14, atol=1e-14)


# ----------------------------------------------------------------------------------------
# Batch-major: states are reinterpreted (reshape), not transposed (spec §5.2, §15.9)


@pytest.mark.parametrize("mode,num_proj", [("lstm", 0), ("lstm", 2), ("gru", 0), ("rnn_relu", 0)],
                         ids=["lstm", "lstm_proj2", "gru", "rnn_relu"])
def test_batch_major_states_are_reshaped_not_transposed(mode, num_proj):
    L, D, B, T, I, H = 2, 2, 3, 4, 3, 4
    Hout = num_proj or H
    case = Case(mode, L, D, input_size=I, num_units=H, num_proj=num_proj, batch=B, max_time=T,
                lengths=(4, 2, 3))
    rng = np.random.default_rng(71)
    x_bm = rng.standard_normal((B, T, I))
    h_bm = rng.standard_normal((B, L * D, Hout))
    c_bm = rng.standard_normal((B, L * D, H)) if mode == "lstm" else np.zeros(())
    params = rng.uniform(-0.5, 0.5, case.params_size())
    lengths = np.array(case.lengths, np.int32)
    attrs = case.attrs()
    bm = fusedrnn.cudnn_rnn_v3(x_bm, h_bm, c_bm, params, lengths, time_major=False, **attrs)
    cm = c_bm.reshape(L * D, B, H) if mode == "lstm" else c_bm
    tm = fusedrnn.cudnn_rnn_v3(x_bm.transpose(1, 0, 2), h_bm.reshape(L * D, B, Hout), cm, params, lengths,
                               time_major=True, **attrs)
    assert bm.output.shape == (B, T, D * Hout) and bm.output_h.shape == (B, L * D, Hout)
    np.testing.assert_allclose(bm.output, tm.output.transpose(1, 0, 2), rtol=0, atol=1e-14)
    np.testing.assert_allclose(bm.output_h, tm.output_h.reshape(B, L * D, Hout), rtol=0, atol=1e-14)
    if mode == "lstm":
        assert bm.output_c.shape == (B, L * D, H)
        np.testing.assert_allclose(bm.output_c, tm.output_c.reshape(B, L * D, H), rtol=0, atol=1e-14)
    # a transpose interpretation would give something else (L*D > 1 and B > 1)
    tr = fusedrnn.cudnn_rnn_v3(x_bm.transpose(1, 0, 2), h_bm.transpose(1, 0, 2).copy(),
                               c_bm.transpose(1, 0, 2).copy() if mode == "lstm" else c_bm, params,
                               lengths, time_major=True, **attrs)
    assert np.max(np.abs(bm.output - tr.output.transpose(1, 0, 2))) > 1e-6
    # backward: state gradients follow the same reinterpretation
    gy = rng.standard_normal(bm.output.shape)
    gh = rng.standard_normal(bm.output_h.shape)
    gc = rng.standard_normal(bm.output_c.shape) if mode == "lstm" else np.zeros(())
    bbm = fusedrnn.cudnn_rnn_backprop_v3(x_bm, h_bm, c_bm, params, lengths, bm.output, bm.output_h,
                                         bm.output_c, gy, gh, gc, bm.reserve_space, bm.host_reserved,
                                         time_major=False, **attrs)
    gcm = gc.reshape(L * D, B, H) if mode == "lstm" else gc
    btm = fusedrnn.cudnn_rnn_backprop_v3(x_bm.transpose(1, 0, 2), h_bm.reshape(L * D, B, Hout), cm, params,
                                         lengths, tm.output, tm.output_h, tm.output_c,
                                         gy.transpose(1, 0, 2), gh.reshape(L * D, B, Hout), gcm,
                                         tm.reserve_space, tm.host_reserved, time_major=True, **attrs)
    np.testing.assert_allclose(bbm.input_backprop, btm.input_backprop.transpose(1, 0, 2), rtol=0, atol=1e-13)
    np.testing.assert_allclose(bbm.input_h_backprop, btm.input_h_backprop.reshape(B, L * D, Hout),
                               rtol=0, atol=1e-13)
    if mode == "lstm":
        np.testing.assert_allclose(bbm.input_c_backprop, btm.input_c_backprop.reshape(B, L * D, H),
                                   rtol=0, atol=1e-13)
    np.testing.assert_allclose(bbm.params_backprop, btm.params_backprop, rtol=1e-13, atol=1e-13)
