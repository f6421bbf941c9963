"""CudnnRNN parameter ops and the opaque layout: spec §6 worked examples, canonical
shapes and counts, round trips, ParamsSize dtype/shape, V1 == V2 (spec §6, §8, §15.1-§15.3)."""

import itertools

import numpy as np
import pytest

import fusedrnn
from fusedrnn.layout import RNNConfig
from cudnn_helpers import GATES, MODES

# ----------------------------------------------------------------------------------------
# §6.5 worked examples: I = 3, H = 5, L = 2, bidirectional unless stated

SIZES = [
    # (rnn_mode, num_layers, direction, input_size, num_units, num_proj, input_mode, size)
    ("lstm", 2, "bidirectional", 3, 5, 0, "linear_input", 1080),
    ("lstm", 2, "bidirectional", 3, 5, 2, "linear_input", 640),
    ("gru", 2, "bidirectional", 3, 5, 0, "linear_input", 810),
    ("rnn_relu", 2, "bidirectional", 3, 5, 0, "linear_input", 270),
    ("rnn_tanh", 2, "bidirectional", 3, 5, 0, "linear_input", 270),
    ("lstm", 1, "unidirectional", 3, 5, 0, "linear_input", 200),
    ("gru", 1, "unidirectional", 3, 5, 0, "linear_input", 150),
    ("lstm", 1, "unidirectional", 5, 5, 0, "skip_input", 140),
    ("lstm", 1, "unidirectional", 5, 5, 0, "linear_input", 240),
    ("lstm", 1, "unidirectional", 5, 5, 0, "auto_select", 140),  # I == H → skip
    ("lstm", 1, "unidirectional", 3, 5, 0, "auto_select", 200),  # I != H → linear
]


@pytest.mark.parametrize("S", [np.int32, np.int64], ids=["int32", "int64"])
@pytest.mark.parametrize("mode,L,direction,I,H,P,input_mode,size", SIZES,
                         ids=[f"{s[0]}-L{s[1]}-{s[2][:3]}-I{s[3]}-P{s[5]}-{s[6]}-{s[7]}" for s in SIZES])
def test_params_size_worked_examples(mode, L, direction, I, H, P, input_mode, size, S):
    result = fusedrnn.cudnn_rnn_params_size(L, H, I, T=np.float32, S=S, rnn_mode=mode, input_mode=input_mode,
                                            direction=direction, num_proj=P)
    assert isinstance(result, np.ndarray)
    assert result.shape == (1,) and result.dtype == S
    assert int(result[0]) == size
    config = RNNConfig(mode, L, H, I, 2 if direction == "bidirectional" else 1,
                       input_mode == "skip_input" or (input_mode == "auto_select" and I == H), P)
    assert config.params_size == size


def test_params_size_accepts_rank0_tensors_and_raw_ops_names():
    size = fusedrnn.raw_ops.CudnnRNNParamsSize(num_layers=np.int32(2), num_units=np.array(5, np.int32),
                                               input_size=np.array(3, np.int64), T=np.float64, S=np.int64,
                                               direction="bidirectional")
    assert size.shape == (1,) and size.dtype == np.int64 and int(size[0]) == 1080


LSTM_OFFSETS = [  # spec §6.5, weights table: p → W_i, W_f, W_c, W_o, R_i, R_f, R_c, R_o
    [0, 15, 30, 45, 60, 85, 110, 135],
    [160, 175, 190, 205, 220, 245, 270, 295],
    [320, 370, 420, 470, 520, 545, 570, 595],
    [620, 670, 720, 770, 820, 845, 870, 895],
]
LSTM_BIAS_OFFSETS = [  # spec §6.5, biases table: p → bW_i .. bW_o, bR_i .. bR_o
    [920, 925, 930, 935, 940, 945, 950, 955],
    [960, 965, 970, 975, 980, 985, 990, 995],
    [1000, 1005, 1010, 1015, 1020, 1025, 1030, 1035],
    [1040, 1045, 1050, 1055, 1060, 1065, 1070, 1075],
]
# projection P = 2 (spec §6.5, second example): W_i..R_o, W_P per pseudo-layer
PROJ_OFFSETS = [
    [0, 15, 30, 45, 60, 70, 80, 90, 100],
    [110, 125, 140, 155, 170, 180, 190, 200, 210],
    [220, 240, 260, 280, 300, 310, 320, 330, 340],
    [350, 370, 390, 410, 430, 440, 450, 460, 470],
]
PROJ_BIAS_START = [480, 520, 560, 600]


def _lstm_shapes(p, P=0):
    in_cols = 3 if p < 2 else 2 * (P or 5)
    return [(5, in_cols)] * 4 + [(5, P or 5)] * 4 + ([(P, 5)] if P else [])


def test_lstm_worked_example_offsets_from_layout():
    regions = RNNConfig("lstm", 2, 5, 3, 2).regions
    assert regions.total == 1080
    assert len(regions.weights) == 32 and len(regions.biases) == 32
    for p in range(4):
        for k in range(8):
            assert regions.weights[8 * p + k].offset == LSTM_OFFSETS[p][k], (p, k)
            assert regions.weights[8 * p + k].shape == _lstm_shapes(p)[k], (p, k)
            assert regions.biases[8 * p + k].offset == LSTM_BIAS_OFFSETS[p][k], (p, k)
            assert regions.biases[8 * p + k].shape == (5,)
    assert regions.weights[17].shape == (5, 10)  # layer 1 forward W_f
    assert regions.biases[-1].offset + 5 == 1080


def test_lstm_worked_example_offsets_via_params_to_canonical():
    """ParamsToCanonical of np.arange(1080): each canonical tensor holds the consecutive
    integers starting at its offset, reshaped row-major to its canonical shape."""
    params = np.arange(1080, dtype=np.float64)
    weights, biases = fusedrnn.cudnn_rnn_params_to_canonical(2, 5, 3, params, num_params=32,
                                                             direction="bidirectional")
    assert len(weights) == 32 and len(biases) == 32
    for p in range(4):
        for k in range(8):
            w, shape = weights[8 * p + k], _lstm_shapes(p)[k]
            start = LSTM_OFFSETS[p][k]
            assert w.shape == shape and w.dtype == np.float64
            np.testing.assert_array_equal(w, np.arange(start, start + w.size).reshape(shape))
            b, start = biases[8 * p + k], LSTM_BIAS_OFFSETS[p][k]
            assert b.shape == (5,)
            np.testing.assert_array_equal(b, np.arange(start, start + 5))
    # every element is in exactly one canonical tensor
    flat = np.concatenate([w.ravel() for w in weights] + list(biases))
    np.testing.assert_array_equal(np.sort(flat), params)


def test_projection_worked_example_offsets():
    regions = RNNConfig("lstm", 2, 5, 3, 2, False, 2).regions
    assert regions.total == 640
    assert len(regions.weights) == 36 and len(regions.biases) == 32
    params = np.arange(640, dtype=np.float64)
    weights, biases = fusedrnn.cudnn_rnn_params_to_canonical_v2(
        2, 5, 3, params, num_params_weights=36, num_params_biases=32, direction="bidirectional", num_proj=2)
    for p in range(4):
        for k in range(9):
            start, shape = PROJ_OFFSETS[p][k], _lstm_shapes(p, 2)[k]
            assert regions.weights[9 * p + k].offset == start and regions.weights[9 * p + k].shape == shape
            np.testing.assert_array_equal(weights[9 * p + k],
                                          np.arange(start, start + shape[0] * shape[1]).reshape(shape))
        for k in range(8):
            start = PROJ_BIAS_START[p] + 5 * k
            assert regions.biases[8 * p + k].offset == start
            np.testing.assert_array_equal(biases[8 * p + k], np.arange(start, start + 5))
    assert weights[8].shape == (2, 5)  # W_P of p0 is [P, H]
    assert biases[-1][-1] == 639


@pytest.mark.parametrize("mode,total", [("gru", 810), ("rnn_relu", 270), ("rnn_tanh", 270)])
def test_other_modes_worked_example_layout(mode, total):
    """GRU / RNN analogues of the §6.5 table: all matrices first (pseudo-layer-major,
    linLayerID order), then all biases, no padding."""
    G = GATES[mode]
    regions = RNNConfig(mode, 2, 5, 3, 2).regions
    assert regions.total == total
    offset = 0
    for p in range(4):
        in_cols = 3 if p < 2 else 10
        for k in range(2 * G):
            region = regions.weights[2 * G * p + k]
            assert region.offset == offset and region.shape == ((5, in_cols) if k < G else (5, 5))
            offset += region.size
    assert offset == total - 4 * 2 * G * 5
    for n, region in enumerate(regions.biases):
        assert region.offset == offset + 5 * n and region.shape == (5,)


# ----------------------------------------------------------------------------------------
# Canonical shapes and counts (§6.1, §6.2, §15.3)


def _configs():
    for mode, L, D, P, skip in itertools.product(MODES, (1, 2, 3), (1, 2), (0, 2), (False, True)):
        if P and mode != "lstm":
            continue
        I = 4 if skip else 3
        yield mode, L, D, P, skip, I


CONFIGS = list(_configs())
CONFIG_IDS = [f"{m}-L{L}-D{D}-P{P}-{'skip' if s else 'linear'}" for m, L, D, P, s, _ in CONFIGS]


def _kwargs(mode, D, P, skip):
    return dict(rnn_mode=mode, direction="bidirectional" if D == 2 else "unidirectional",
                input_mode="skip_input" if skip else "linear_input", num_proj=P)


@pytest.mark.parametrize("mode,L,D,P,skip,I", CONFIGS, ids=CONFIG_IDS)
def test_canonical_shapes_counts_and_round_trips(mode, L, D, P, skip, I):
    H, G = 4, GATES[mode]
    Hout = P or H
    kwargs = _kwargs(mode, D, P, skip)
    size = int(fusedrnn.cudnn_rnn_params_size(L, H, I, T=np.float64, S=np.int32, **kwargs)[0])
    # §6.4 size formula
    expected = 0
    for layer in range(L):
        in_l = (0 if skip else I) if layer == 0 else D * Hout
        expected += D * (G * H * in_l + G * H * Hout + (P * H if P else 0) + 2 * G * H)
    assert size == expected
    n_w, n_b = L * D * (2 * G + (1 if P else 0)), L * D * 2 * G
    rng = np.random.default_rng(L * 10 + D)
    params = rng.standard_normal(size)
    weights, biases = fusedrnn.cudnn_rnn_params_to_canonical_v2(
        L, H, I, params, num_params_weights=n_w, num_params_biases=n_b, **kwargs)
    assert len(weights) == n_w and len(biases) == n_b
    per = 2 * G + (1 if P else 0)
    for p in range(L * D):
        layer = p // D
        in_cols = (0 if skip else I) if layer == 0 else D * Hout
        for k in range(G):
            assert weights[per * p + k].shape == (H, in_cols)
            assert weights[per * p + G + k].shape == (H, Hout)
        if P:
            assert weights[per * p + 2 * G].shape == (P, H)
    assert all(b.shape == (H,) for b in biases)
    assert all(a.dtype == np.float64 for a in weights + biases)
    # params → canonical → params
    back = fusedrnn.cudnn_rnn_canonical_to_params_v2(L, H, I, weights, biases, **kwargs)
    assert back.shape == (size,) and back.dtype == np.float64
    np.testing.assert_array_equal(back, params)
    # canonical → params → canonical
    weights2 = [rng.standard_normal(w.shape) for w in weights]
    biases2 = [rng.standard_normal(b.shape) for b in biases]
    packed = fusedrnn.cudnn_rnn_canonical_to_params_v2(L, H, I, weights2, biases2, **kwargs)
    w3, b3 = fusedrnn.cudnn_rnn_params_to_canonical_v2(L, H, I, packed, num_params_weights=n_w,
                                                       num_params_biases=n_b, **kwargs)
    for a, b in zip(w3 + b3, weights2 + biases2):
        assert a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    # the V1 ops are V2 without projection (§15.2)
    if not P:
        kw1 = {k: v for k, v in kwargs.items() if k != "num_proj"}
        w1, b1 = fusedrnn.cudnn_rnn_params_to_canonical(L, H, I, params, num_params=n_w, **kw1)
        for a, b in zip(w1 + b1, weights + biases):
            assert a.shape == b.shape
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(fusedrnn.cudnn_rnn_canonical_to_params(L, H, I, weights, biases, **kw1),
                                      params)


@pytest.mark.parametrize("mode", MODES)
def test_skip_input_canonical_matrices_are_zero_width(mode):
    G, H, D = GATES[mode], 3, 2
    kwargs = _kwargs(mode, D, 0, True)
    size = int(fusedrnn.cudnn_rnn_params_size(2, H, H, T=np.float64, S=np.int32, **kwargs)[0])
    weights, biases = fusedrnn.cudnn_rnn_params_to_canonical(2, H, H, np.ones(size), num_params=2 * 2 * G * 2,
                                                             **{k: v for k, v in kwargs.items() if k != "num_proj"})
    for p in range(D):  # layer 0, both directions: input matrices absent
        for k in range(G):
            assert weights[2 * G * p + k].shape == (H, 0)
    for p in range(D, 2 * D):  # layer 1 unchanged
        assert weights[2 * G * p].shape == (H, D * H)
    assert all(b.shape == (H,) for b in biases)  # every bias is present in skip mode
    # a non-empty matrix in an absent slot is rejected (§15.3)
    bad = list(weights)
    bad[0] = np.ones((H, H))
    with pytest.raises(ValueError, match="Params size mismatch"):
        fusedrnn.cudnn_rnn_canonical_to_params(2, H, H, bad, biases, rnn_mode=mode, input_mode="skip_input",
                                               direction="bidirectional")


@pytest.mark.parametrize("mode,count", [("lstm", 8), ("gru", 6), ("rnn_tanh", 2), ("rnn_relu", 2)])
def test_num_params_table(mode, count):
    """§6.2: num_params = (8 | 6 | 2) * L * D; V2 with projection 9*L*D weights, 8*L*D biases."""
    for L, D in ((1, 1), (2, 2), (3, 1)):
        regions = RNNConfig(mode, L, 4, 3, D).regions
        assert len(regions.weights) == len(regions.biases) == count * L * D
    if mode == "lstm":
        regions = RNNConfig("lstm", 3, 4, 3, 2, False, 1).regions
        assert len(regions.weights) == 9 * 6 and len(regions.biases) == 8 * 6


def test_canonical_to_params_copies_in_c_order_ignoring_shape():
    """§6.2: only the element count of each tensor is checked; it is copied row-major."""
    weights, biases = fusedrnn.cudnn_rnn_params_to_canonical(1, 2, 3, np.arange(56.0), num_params=8,
                                                             rnn_mode="lstm")
    transposed = [w.T for w in weights]  # same element count, other shape
    params = fusedrnn.cudnn_rnn_canonical_to_params(1, 2, 3, transposed, biases, rnn_mode="lstm")
    expected = np.concatenate([w.T.ravel() for w in weights] + biases)
    np.testing.assert_array_equal(params, expected)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_conversion_preserves_dtype(dtype):
    params = np.arange(270).astype(dtype)
    weights, biases = fusedrnn.cudnn_rnn_params_to_canonical(2, 5, 3, params, num_params=8, rnn_mode="rnn_tanh",
                                                             direction="bidirectional")
    assert all(a.dtype == dtype for a in weights + biases)
    back = fusedrnn.cudnn_rnn_canonical_to_params(2, 5, 3, weights, biases, rnn_mode="rnn_tanh",
                                                  direction="bidirectional")
    assert back.dtype == dtype
    np.testing.assert_array_equal(back, params)


def test_conversion_ignores_dropout_and_seeds():
    """§1.1: dropout, seed, seed2 are accepted by the parameter ops and have no effect."""
    params = np.arange(200.0)
    plain = fusedrnn.cudnn_rnn_params_to_canonical(1, 5, 3, params, num_params=8)
    other = fusedrnn.cudnn_rnn_params_to_canonical(1, 5, 3, params, num_params=8, dropout=0.5, seed=3, seed2=4)
    for a, b in zip(plain.weights + plain.biases, other.weights + other.biases):
        np.testing.assert_array_equal(a, b)
    assert int(fusedrnn.cudnn_rnn_params_size(1, 5, 3, T=np.float32, S=np.int32, dropout=0.5, seed=1)[0]) == 200


def test_params_to_canonical_v2_without_projection_works():
    """§15.2: ParamsToCanonicalV2 with num_proj=0 works (TF's kernel fails there)."""
    weights, biases = fusedrnn.cudnn_rnn_params_to_canonical_v2(
        2, 5, 3, np.arange(1080.0), num_params_weights=32, num_params_biases=32, direction="bidirectional")
    assert len(weights) == 32 and weights[17].shape == (5, 10)


def test_params_size_matches_what_the_forward_accepts():
    for mode, P in (("lstm", 0), ("lstm", 3), ("gru", 0), ("rnn_relu", 0)):
        L, D, I, H = 2, 2, 3, 5
        size = int(fusedrnn.cudnn_rnn_params_size(L, H, I, T=np.float64, S=np.int32, rnn_mode=mode,
                                                  direction="bidirectional", num_proj=P)[0])
        Hout = P or H
        x, h, c = np.zeros((2, 1, I)), np.zeros((L * D, 1, Hout)), np.zeros((L * D, 1, H))
        out = fusedrnn.cudnn_rnn_v3(x, h, c, np.zeros(size), np.array([2], np.int32), rnn_mode=mode,
                                    direction="bidirectional", num_proj=P, is_training=False)
        assert out.output.shape == (2, 1, D * Hout)
        with pytest.raises(ValueError, match="params size mismatch"):
            fusedrnn.cudnn_rnn_v3(x, h, c, np.zeros(size + 1), np.array([2], np.int32), rnn_mode=mode,
                                  direction="bidirectional", num_proj=P, is_training=False)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("L, D, skip_input, P", [(1, 1, False, 0), (2, 2, False, 0), (3, 1, True, 0),
                                                 (2, 2, True, 0), (2, 2, False, 3)])
def test_pseudo_layer_views_cover_params_once(mode, L, D, skip_input, P):
    """The backward writes every element of params_backprop through these views (so the flat
    gradient needs no zero fill first): together they cover the flat buffer exactly once."""
    if P and mode != "lstm":
        pytest.skip("projection: LSTM only")
    H, I = 5, 5 if skip_input else 3
    config = RNNConfig(mode, L, H, I, D, skip_input, P)
    counts = np.zeros(config.params_size, np.int64)
    for p in range(L * D):
        for view in fusedrnn.layout.pseudo_layer_views(counts, config, p):
            if view is not None:
                view += 1
    np.testing.assert_array_equal(counts, 1)
