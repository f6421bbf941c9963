"""BlockLSTM family without TensorFlow (spec block_ops.md): float64 central finite differences of
every gradient op against its forward op, a plain NumPy reference written from the spec's
pseudo-code (§2, §3.3, §4), V1/V2 consistency, dtypes, seq_len_max, zero sizes, no input
mutation, and hypothesis-drawn configurations."""

import copy
import inspect

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusedrnn import block_ops as bo
from fusedrnn import raw_ops

PEEPHOLES = ("wci", "wcf", "wco")
GATES = ("i", "cs", "f", "o", "ci", "co")
FORWARD = {1: bo.block_lstm, 2: bo.block_lstm_v2}
BACKWARD = {1: bo.block_lstm_grad, 2: bo.block_lstm_grad_v2}
LAYOUT = {1: "icfo", 2: "ifco"}


# ---------------------------------------------------------------------------------------------
# inputs

def lstm_inputs(T, B, I, n, dtype=np.float64, seed=0, cell=False):
    """Random BlockLSTM inputs (``cell=True``: LSTMBlockCell's, ``x [B, I]``)."""
    rng = np.random.default_rng(seed)

    def u(*shape, scale=1.0):
        return (scale * rng.uniform(-1, 1, shape)).astype(dtype)

    return dict(x=u(B, I) if cell else u(T, B, I), cs_prev=u(B, n), h_prev=u(B, n), w=u(I + n, 4 * n, scale=0.8),
                wci=u(n), wcf=u(n), wco=u(n), b=u(4 * n, scale=0.5))


def gru_inputs(B, I, n, dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)

    def u(*shape):
        return rng.uniform(-1, 1, shape).astype(dtype)

    return dict(x=u(B, I), h_prev=u(B, n), w_ru=u(I + n, 2 * n), w_c=u(I + n, n), b_ru=u(2 * n), b_c=u(n))


def forward_attrs(version, forget_bias, cell_clip, use_peephole):
    attrs = dict(cell_clip=cell_clip, use_peephole=use_peephole)
    if version == 1:
        attrs["forget_bias"] = forget_bias
    return attrs


# ---------------------------------------------------------------------------------------------
# plain NumPy reference, one step at a time, written from the spec's pseudo-code

def _sigmoid(z):
    return 1 / (1 + np.exp(-z))


def ref_step(x, cs_prev, h_prev, w, wci, wcf, wco, b, layout, forget_bias, cell_clip, use_peephole):
    """Spec §2.  forget_bias and cell_clip are float32 attributes, as in TensorFlow."""
    forget_bias, cell_clip = float(np.float32(forget_bias)), float(np.float32(cell_clip))
    n = cs_prev.shape[1]
    G = np.concatenate([x, h_prev], axis=1) @ w + b
    blocks = [G[:, k * n:(k + 1) * n] for k in range(4)]
    Gi, Go = blocks[0], blocks[3]
    Gc, Gf = (blocks[1], blocks[2]) if layout == "icfo" else (blocks[2], blocks[1])
    if use_peephole:
        Gi = Gi + cs_prev * wci
        Gf = Gf + forget_bias + cs_prev * wcf
    else:
        Gf = Gf + forget_bias
    i, ci, f = _sigmoid(Gi), np.tanh(Gc), _sigmoid(Gf)
    cs = i * ci + f * cs_prev
    if cell_clip > 0:
        cs = np.minimum(np.maximum(cs, -cell_clip), cell_clip)
    co = np.tanh(cs)
    o = _sigmoid(Go + cs * wco if use_peephole else Go)
    return i, cs, f, o, ci, co, o * co


def ref_block_lstm(seq_len_max, a, layout, forget_bias, cell_clip, use_peephole):
    """Spec §3.2 (zeros past seq_len_max for all seven outputs, fusedrnn's choice)."""
    T, B, _ = a["x"].shape
    n = a["cs_prev"].shape[1]
    out = [np.zeros((T, B, n)) for _ in range(7)]
    cs_prev, h_prev = a["cs_prev"], a["h_prev"]
    for t in range(seq_len_max):
        step = ref_step(a["x"][t], cs_prev, h_prev, a["w"], a["wci"], a["wcf"], a["wco"], a["b"], layout,
                        forget_bias, cell_clip, use_peephole)
        for k in range(7):
            out[k][t] = step[k]
        cs_prev, h_prev = step[1], step[6]
    return out


def ref_cell_backward(cs_prev, i, cs, f, o, ci, co, cs_grad, h_grad, wci, wcf, wco, layout, use_peephole):
    """Spec §4.1: (dgates in layout order, cs_prev_grad, (wci_grad, wcf_grad, wco_grad))."""
    do = o * (1 - o) * h_grad * co
    dcs = (1 - co ** 2) * h_grad * o + cs_grad
    if use_peephole:
        dcs = dcs + do * wco
    dci = (1 - ci ** 2) * dcs * i
    df = f * (1 - f) * dcs * cs_prev
    di = i * (1 - i) * dcs * ci
    middle = [dci, df] if layout == "icfo" else [df, dci]
    dgates = np.concatenate([di, *middle, do], axis=1)
    cs_prev_grad = dcs * f
    n = cs_prev.shape[1]
    peep = [np.zeros(n)] * 3
    if use_peephole:
        cs_prev_grad = cs_prev_grad + di * wci + df * wcf
        peep = [(di * cs_prev).sum(0), (df * cs_prev).sum(0), (do * cs).sum(0)]
    return dgates, cs_prev_grad, peep


def ref_block_lstm_grad(seq_len_max, a, fwd, cs_grad, h_grad, layout, use_peephole):
    """Spec §4.3, literally (weight gradients accumulated step by step)."""
    i, cs, f, o, ci, co, h = fwd
    T, B, I = a["x"].shape
    n = a["w"].shape[1] // 4
    dcs_carry, dh_carry = np.zeros((B, n)), np.zeros((B, n))
    x_grad, w_grad, b_grad = np.zeros((T, B, I)), np.zeros_like(a["w"]), np.zeros(4 * n)
    peep_grads = [np.zeros(n) for _ in range(3)]
    for t in range(seq_len_max - 1, -1, -1):
        cp = a["cs_prev"] if t == 0 else cs[t - 1]
        hp = a["h_prev"] if t == 0 else h[t - 1]
        dgates, dcs_carry, peep = ref_cell_backward(cp, i[t], cs[t], f[t], o[t], ci[t], co[t], dcs_carry + cs_grad[t],
                                                    dh_carry + h_grad[t], a["wci"], a["wcf"], a["wco"], layout,
                                                    use_peephole)
        xh_grad = dgates @ a["w"].T
        x_grad[t], dh_carry = xh_grad[:, :I], xh_grad[:, I:]
        w_grad += np.concatenate([a["x"][t], hp], axis=1).T @ dgates
        b_grad += dgates.sum(0)
        for acc, g in zip(peep_grads, peep):
            acc += g
    return [x_grad, dcs_carry, dh_carry, w_grad, *peep_grads, b_grad]


def ref_gru(x, h_prev, w_ru, w_c, b_ru, b_c):
    """Spec §3.3."""
    n = h_prev.shape[1]
    ru = _sigmoid(np.concatenate([x, h_prev], axis=1) @ w_ru + b_ru)
    r, u = ru[:, :n], ru[:, n:]
    c = np.tanh(np.concatenate([x, r * h_prev], axis=1) @ w_c + b_c)
    return r, u, c, u * h_prev + (1 - u) * c


# ---------------------------------------------------------------------------------------------
# finite differences

def numeric_grads(loss, values: dict, names, eps=1e-6):
    """Central differences of ``loss(values)`` w.r.t. every element of ``values[name]``."""
    grads = {}
    for name in names:
        g = np.zeros_like(values[name])
        for idx in np.ndindex(g.shape):
            plus, minus = dict(values), dict(values)
            plus[name], minus[name] = values[name].copy(), values[name].copy()
            plus[name][idx] += eps
            minus[name][idx] -= eps
            g[idx] = (loss(plus) - loss(minus)) / (2 * eps)
        grads[name] = g
    return grads


def assert_fd(analytic, numeric, name):
    np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-8, err_msg=name)


LSTM_INPUTS = ("x", "cs_prev", "h_prev", "w", "wci", "wcf", "wco", "b")


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("use_peephole", [False, True])
@pytest.mark.parametrize("seq_len_max", [3, 2, 0])
@pytest.mark.parametrize("cell_clip", [0.0, 100.0], ids=["clip_off", "clip_inactive"])
def test_block_lstm_grad_matches_finite_differences(version, use_peephole, seq_len_max, cell_clip):
    T, B, I, n = 3, 2, 3, 2
    a = lstm_inputs(T, B, I, n, seed=1)
    rng = np.random.default_rng(2)
    Gcs, Gh = rng.standard_normal((T, B, n)), rng.standard_normal((T, B, n))
    attrs = forward_attrs(version, 1.3, cell_clip, use_peephole)

    def loss(values):
        out = FORWARD[version](seq_len_max, **values, **attrs)
        return np.sum(out.cs * Gcs) + np.sum(out.h * Gh)

    fwd = FORWARD[version](seq_len_max, **a, **attrs)
    assert np.abs(fwd.cs).max() < cell_clip or cell_clip == 0
    grads = BACKWARD[version](seq_len_max, **a, **fwd._asdict(), cs_grad=Gcs, h_grad=Gh, use_peephole=use_peephole)
    numeric = numeric_grads(loss, a, LSTM_INPUTS)
    for name in LSTM_INPUTS:
        assert_fd(getattr(grads, f"{name}_grad"), numeric[name], name)


@pytest.mark.parametrize("use_peephole", [False, True])
@pytest.mark.parametrize("forget_bias", [0.0, 1.0, -0.7])
def test_lstm_block_cell_grad_matches_finite_differences(use_peephole, forget_bias):
    B, I, n = 2, 3, 3
    a = lstm_inputs(0, B, I, n, seed=3, cell=True)
    rng = np.random.default_rng(4)
    Gcs, Gh = rng.standard_normal((B, n)), rng.standard_normal((B, n))
    attrs = dict(forget_bias=forget_bias, cell_clip=-1.0, use_peephole=use_peephole)

    def loss(values):
        out = bo.lstm_block_cell(**values, **attrs)
        return np.sum(out.cs * Gcs) + np.sum(out.h * Gh)

    fwd = bo.lstm_block_cell(**a, **attrs)
    g = bo.lstm_block_cell_grad(**a, **{k: getattr(fwd, k) for k in GATES}, cs_grad=Gcs, h_grad=Gh,
                                use_peephole=use_peephole)
    numeric = numeric_grads(loss, a, LSTM_INPUTS)
    # the caller-side formulas of spec §4.2 turn dicfo into the remaining gradients
    xh_grad = g.dicfo @ a["w"].T
    derived = dict(x=xh_grad[:, :I], h_prev=xh_grad[:, I:], w=np.concatenate([a["x"], a["h_prev"]], 1).T @ g.dicfo,
                   b=g.dicfo.sum(0), cs_prev=g.cs_prev_grad, wci=g.wci_grad, wcf=g.wcf_grad, wco=g.wco_grad)
    for name in LSTM_INPUTS:
        assert_fd(derived[name], numeric[name], name)


def test_gru_block_cell_grad_matches_finite_differences():
    B, I, n = 3, 2, 4
    a = gru_inputs(B, I, n, seed=5)
    Gh = np.random.default_rng(6).standard_normal((B, n))

    def loss(values):
        return np.sum(bo.gru_block_cell(**values).h * Gh)

    r, u, c, _ = bo.gru_block_cell(**a)
    g = bo.gru_block_cell_grad(**a, r=r, u=u, c=c, d_h=Gh)
    numeric = numeric_grads(loss, a, a.keys())
    derived = dict(x=g.d_x, h_prev=g.d_h_prev,
                   w_ru=np.concatenate([a["x"], a["h_prev"]], 1).T @ g.d_r_bar_u_bar, b_ru=g.d_r_bar_u_bar.sum(0),
                   w_c=np.concatenate([a["x"], r * a["h_prev"]], 1).T @ g.d_c_bar, b_c=g.d_c_bar.sum(0))
    for name in a:
        assert_fd(derived[name], numeric[name], name)


# ---------------------------------------------------------------------------------------------
# against the reference (including an active clip, where the gradients are straight-through)

@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("use_peephole", [False, True])
@pytest.mark.parametrize("cell_clip", [0.0, 0.4, -3.0], ids=["off", "active", "negative"])
@pytest.mark.parametrize("seq_len_max", [5, 3])
def test_block_lstm_matches_reference(version, use_peephole, cell_clip, seq_len_max):
    T, B, I, n = 5, 3, 4, 6
    a = lstm_inputs(T, B, I, n, seed=7)
    fb = 0.8 if version == 1 else 0.0
    out = FORWARD[version](seq_len_max, **a, **forward_attrs(version, fb, cell_clip, use_peephole))
    ref = ref_block_lstm(seq_len_max, a, LAYOUT[version], fb, cell_clip, use_peephole)
    for name, mine, expected in zip(out._fields, out, ref):
        np.testing.assert_allclose(mine, expected, rtol=1e-12, atol=1e-13, err_msg=name)
    if cell_clip > 0:
        assert np.isclose(np.abs(out.cs).max(), cell_clip), "the clip should be active in this test"
    cs_grad, h_grad = np.random.default_rng(8).standard_normal((2, T, B, n))
    grads = BACKWARD[version](seq_len_max, **a, **out._asdict(), cs_grad=cs_grad, h_grad=h_grad,
                              use_peephole=use_peephole)
    expected = ref_block_lstm_grad(seq_len_max, a, ref, cs_grad, h_grad, LAYOUT[version], use_peephole)
    for name, mine, ref_grad in zip(grads._fields, grads, expected):
        np.testing.assert_allclose(mine, ref_grad, rtol=1e-10, atol=1e-12, err_msg=name)


def test_grad_ops_pass_gradients_straight_through_the_clip():
    """Every |cs| clipped: the true ∂cs/∂cs_prev is 0, the op still returns dcs ⊙ f (spec §4.1)."""
    B, I, n = 2, 2, 3
    a = lstm_inputs(0, B, I, n, seed=9, cell=True)
    a["cs_prev"] = np.full((B, n), 5.0)
    fwd = bo.lstm_block_cell(**a, forget_bias=5.0, cell_clip=0.5)
    assert np.all(np.abs(fwd.cs) == 0.5)
    zero, ones = np.zeros((B, n)), np.ones((B, n))
    g = bo.lstm_block_cell_grad(**a, **{k: getattr(fwd, k) for k in GATES}, cs_grad=ones, h_grad=zero,
                                use_peephole=False)
    np.testing.assert_allclose(g.cs_prev_grad, fwd.f, rtol=1e-15)


@pytest.mark.parametrize("use_peephole", [False, True])
@pytest.mark.parametrize("cell_clip", [0.0, 0.3])
def test_lstm_block_cell_matches_reference_and_one_block_lstm_step(use_peephole, cell_clip):
    B, I, n = 3, 4, 5
    a = lstm_inputs(0, B, I, n, seed=10, cell=True)
    out = bo.lstm_block_cell(**a, forget_bias=0.6, cell_clip=cell_clip, use_peephole=use_peephole)
    ref = ref_step(**a, layout="icfo", forget_bias=0.6, cell_clip=cell_clip, use_peephole=use_peephole)
    seq = bo.block_lstm(1, **dict(a, x=a["x"][None]), forget_bias=0.6, cell_clip=cell_clip,
                        use_peephole=use_peephole)
    for name, mine, expected, step in zip(out._fields, out, ref, seq):
        np.testing.assert_allclose(mine, expected, rtol=1e-12, atol=1e-13, err_msg=name)
        np.testing.assert_array_equal(mine, step[0], err_msg=name)
    cs_grad, h_grad = np.random.default_rng(11).standard_normal((2, B, n))
    g = bo.lstm_block_cell_grad(**a, **{k: getattr(out, k) for k in GATES}, cs_grad=cs_grad, h_grad=h_grad,
                                use_peephole=use_peephole)
    dgates, cs_prev_grad, peep = ref_cell_backward(a["cs_prev"], *(getattr(out, k) for k in GATES), cs_grad, h_grad,
                                                   a["wci"], a["wcf"], a["wco"], "icfo", use_peephole)
    for mine, expected in zip(g, [cs_prev_grad, dgates, *peep]):
        np.testing.assert_allclose(mine, expected, rtol=1e-12, atol=1e-13)


def test_gru_block_cell_matches_reference():
    a = gru_inputs(4, 3, 5, seed=12)
    for mine, expected in zip(bo.gru_block_cell(**a), ref_gru(**a)):
        np.testing.assert_allclose(mine, expected, rtol=1e-12, atol=1e-13)


def test_grad_ops_use_the_forward_tensors_as_given():
    """Inconsistent i, cs, f, ... are not recomputed: the result is the formula applied to them."""
    T, B, I, n = 4, 2, 3, 3
    a = lstm_inputs(T, B, I, n, seed=13)
    rng = np.random.default_rng(14)
    fwd = [rng.uniform(-1, 1, (T, B, n)) for _ in range(7)]
    cs_grad, h_grad = rng.standard_normal((2, T, B, n))
    grads = bo.block_lstm_grad(T, **a, **dict(zip(bo.BlockLSTMResult._fields, fwd)), cs_grad=cs_grad, h_grad=h_grad,
                               use_peephole=True)
    expected = ref_block_lstm_grad(T, a, fwd, cs_grad, h_grad, "icfo", True)
    for mine, ref_grad in zip(grads, expected):
        np.testing.assert_allclose(mine, ref_grad, rtol=1e-10, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# V1 / V2, attributes, seq_len_max

def _ifco(a, n):
    return np.concatenate([a[..., :n], a[..., 2 * n:3 * n], a[..., n:2 * n], a[..., 3 * n:]], axis=-1)


@pytest.mark.parametrize("use_peephole", [False, True])
def test_v1_with_zero_forget_bias_is_v2_with_permuted_columns(use_peephole):
    T, B, I, n = 4, 3, 2, 5
    a = lstm_inputs(T, B, I, n, dtype=np.float32, seed=15)
    v1 = bo.block_lstm(T, **a, forget_bias=0.0, cell_clip=0.0, use_peephole=use_peephole)
    a2 = dict(a, w=_ifco(a["w"], n), b=_ifco(a["b"], n))
    v2 = bo.block_lstm_v2(T, **a2, use_peephole=use_peephole)
    for name, x1, x2 in zip(v1._fields, v1, v2):
        np.testing.assert_array_equal(x1, x2, err_msg=name)
    cs_grad, h_grad = np.random.default_rng(16).standard_normal((2, T, B, n)).astype(np.float32)
    g1 = bo.block_lstm_grad(T, **a, **v1._asdict(), cs_grad=cs_grad, h_grad=h_grad, use_peephole=use_peephole)
    g2 = bo.block_lstm_grad_v2(T, **a2, **v2._asdict(), cs_grad=cs_grad, h_grad=h_grad, use_peephole=use_peephole)
    for name in ("x_grad", "cs_prev_grad", "h_prev_grad", "wci_grad", "wcf_grad", "wco_grad"):
        np.testing.assert_array_equal(getattr(g1, name), getattr(g2, name), err_msg=name)
    np.testing.assert_array_equal(_ifco(g1.w_grad, n), g2.w_grad)
    np.testing.assert_array_equal(_ifco(g1.b_grad, n), g2.b_grad)


def test_forget_bias_is_a_shift_of_the_forget_bias_column():
    T, B, I, n = 3, 2, 2, 4
    a = lstm_inputs(T, B, I, n, seed=17)
    shifted = a["b"].copy()
    shifted[2 * n:3 * n] += 2.5
    with_attr = bo.block_lstm(T, **a, forget_bias=2.5, cell_clip=0.0)
    in_bias = bo.block_lstm(T, **dict(a, b=shifted), forget_bias=0.0, cell_clip=0.0)
    for x1, x2 in zip(with_attr, in_bias):
        np.testing.assert_allclose(x1, x2, rtol=1e-14, atol=1e-15)


def test_default_attributes():
    """BlockLSTM and LSTMBlockCell clip at 3.0 and add forget_bias 1.0 by default; V2 does neither."""
    T, B, I, n = 8, 2, 2, 3
    a = lstm_inputs(T, B, I, n, seed=18)
    a["b"] = np.full(4 * n, 4.0)  # i, f ≈ 1 and ci ≈ 1: cs grows by about 1 per step
    v1 = bo.block_lstm(T, **a)
    assert np.abs(v1.cs).max() == 3.0
    for name, x1, x2 in zip(v1._fields, v1, bo.block_lstm(T, **a, forget_bias=1.0, cell_clip=3.0, use_peephole=False)):
        np.testing.assert_array_equal(x1, x2, err_msg=name)
    v2 = bo.block_lstm_v2(T, **a)
    assert np.abs(v2.cs).max() > 3.0
    cell = bo.lstm_block_cell(**dict(a, x=a["x"][0], cs_prev=np.full((B, n), 2.9)))
    assert np.abs(cell.cs).max() == 3.0
    for op in (bo.block_lstm_grad, bo.block_lstm_grad_v2, bo.lstm_block_cell_grad):
        assert inspect.signature(op).parameters["use_peephole"].default is inspect.Parameter.empty


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("seq_len_max", [0, 1, 3, 5])
def test_seq_len_max(version, seq_len_max):
    """Steps from seq_len_max on are not computed: all seven outputs and x_grad are 0 there, and
    the prefix equals the run on x[:seq_len_max]."""
    T, B, I, n = 5, 2, 3, 4
    a = lstm_inputs(T, B, I, n, seed=19)
    attrs = forward_attrs(version, 1.0, 0.0, True)
    out = FORWARD[version](seq_len_max, **a, **attrs)
    short = FORWARD[version](seq_len_max, **dict(a, x=a["x"][:seq_len_max]), **attrs)
    for name, full, prefix in zip(out._fields, out, short):
        np.testing.assert_array_equal(full[:seq_len_max], prefix, err_msg=name)
        assert not full[seq_len_max:].any(), name
    cs_grad, h_grad = np.random.default_rng(20).standard_normal((2, T, B, n))
    g = BACKWARD[version](seq_len_max, **a, **out._asdict(), cs_grad=cs_grad, h_grad=h_grad, use_peephole=True)
    assert not g.x_grad[seq_len_max:].any()
    g_short = BACKWARD[version](seq_len_max, **dict(a, x=a["x"][:seq_len_max]), **short._asdict(),
                                cs_grad=cs_grad[:seq_len_max], h_grad=h_grad[:seq_len_max], use_peephole=True)
    np.testing.assert_array_equal(g.x_grad[:seq_len_max], g_short.x_grad)
    for name in g._fields[1:]:
        np.testing.assert_array_equal(getattr(g, name), getattr(g_short, name), err_msg=name)
    if seq_len_max == 0:
        assert not any(v.any() for v in g)


@pytest.mark.parametrize("seq_len_max", [2, np.int32(2), np.int64(2), np.array(2, np.int32), np.array(2),
                                         np.uint8(2)], ids=repr)
def test_seq_len_max_integer_forms(seq_len_max):
    a = lstm_inputs(3, 2, 2, 2, seed=21)
    expected = bo.block_lstm(2, **a)
    for x1, x2 in zip(bo.block_lstm(seq_len_max, **a), expected):
        np.testing.assert_array_equal(x1, x2)


def test_peephole_values_are_ignored_without_use_peephole():
    T, B, I, n = 3, 2, 2, 3
    a = lstm_inputs(T, B, I, n, seed=22)
    other = dict(a, wci=a["wci"] + 1e3, wcf=np.full(n, np.nan), wco=-a["wco"])
    for version in (1, 2):
        out = FORWARD[version](T, **a)
        for x1, x2 in zip(out, FORWARD[version](T, **other)):
            np.testing.assert_array_equal(x1, x2)
        cs_grad, h_grad = np.ones((2, T, B, n))
        g = BACKWARD[version](T, **other, **out._asdict(), cs_grad=cs_grad, h_grad=h_grad, use_peephole=False)
        for x1, x2 in zip(g, BACKWARD[version](T, **a, **out._asdict(), cs_grad=cs_grad, h_grad=h_grad,
                                               use_peephole=False)):
            np.testing.assert_array_equal(x1, x2)
        assert not (g.wci_grad.any() or g.wcf_grad.any() or g.wco_grad.any())


def test_cell_grads_do_not_read_x_h_prev_w_b():
    B, I, n = 2, 3, 2
    a = lstm_inputs(0, B, I, n, seed=23, cell=True)
    fwd = bo.lstm_block_cell(**a, use_peephole=True)
    rest = dict({k: getattr(fwd, k) for k in GATES}, cs_grad=np.ones((B, n)), h_grad=np.ones((B, n)))
    garbage = {k: np.full_like(a[k], np.nan) for k in ("x", "h_prev", "w", "b")}
    g1 = bo.lstm_block_cell_grad(**a, **rest, use_peephole=True)
    g2 = bo.lstm_block_cell_grad(**dict(a, **garbage), **rest, use_peephole=True)
    for x1, x2 in zip(g1, g2):
        np.testing.assert_array_equal(x1, x2)


# ---------------------------------------------------------------------------------------------
# dtypes

@pytest.mark.parametrize("dtype, rtol", [(np.float32, 2e-5), (np.float16, 2e-2)])
def test_lower_precision_agrees_with_float64(dtype, rtol):
    T, B, I, n = 4, 3, 5, 6
    a64 = lstm_inputs(T, B, I, n, seed=24)
    a = {k: v.astype(dtype) for k, v in a64.items()}
    a64 = {k: v.astype(np.float64) for k, v in a.items()}  # the same (rounded) inputs
    attrs = dict(forget_bias=1.0, cell_clip=0.0, use_peephole=True)
    out, ref = bo.block_lstm(3, **a, **attrs), bo.block_lstm(3, **a64, **attrs)
    cs_grad, h_grad = np.random.default_rng(25).standard_normal((2, T, B, n)).astype(dtype)
    g = bo.block_lstm_grad(3, **a, **out._asdict(), cs_grad=cs_grad, h_grad=h_grad, use_peephole=True)
    g_ref = bo.block_lstm_grad(3, **a64, **{k: v.astype(np.float64) for k, v in out._asdict().items()},
                               cs_grad=cs_grad.astype(np.float64), h_grad=h_grad.astype(np.float64), use_peephole=True)
    cell = bo.lstm_block_cell(**dict(a, x=a["x"][0]), **attrs)
    cell_ref = bo.lstm_block_cell(**dict(a64, x=a64["x"][0]), **attrs)
    rest = {k: getattr(cell, k) for k in GATES}
    cg = bo.lstm_block_cell_grad(**dict(a, x=a["x"][0]), **rest, cs_grad=cs_grad[0], h_grad=h_grad[0], use_peephole=True)
    cg_ref = bo.lstm_block_cell_grad(**dict(a64, x=a64["x"][0]), **{k: v.astype(np.float64) for k, v in rest.items()},
                                     cs_grad=cs_grad[0].astype(np.float64), h_grad=h_grad[0].astype(np.float64),
                                     use_peephole=True)
    ga = {k: v.astype(dtype) for k, v in gru_inputs(B, I, n, seed=26).items()}
    ga64 = {k: v.astype(np.float64) for k, v in ga.items()}
    gru, gru_ref = bo.gru_block_cell(**ga), bo.gru_block_cell(**ga64)
    gg = bo.gru_block_cell_grad(**ga, r=gru.r, u=gru.u, c=gru.c, d_h=h_grad[0])
    gg_ref = bo.gru_block_cell_grad(**ga64, r=gru.r.astype(np.float64), u=gru.u.astype(np.float64),
                                    c=gru.c.astype(np.float64), d_h=h_grad[0].astype(np.float64))
    for mine, expected in [(out, ref), (g, g_ref), (cell, cell_ref), (cg, cg_ref), (gru, gru_ref), (gg, gg_ref)]:
        for name, x, y in zip(mine._fields, mine, expected):
            assert x.dtype == dtype, name
            scale = max(1.0, np.abs(y).max(initial=0))
            np.testing.assert_allclose(x, y, rtol=rtol, atol=rtol * scale, err_msg=f"{type(mine).__name__}.{name}")


# ---------------------------------------------------------------------------------------------
# zero sizes, lists, inputs untouched

ZERO_SIZES = [(0, 2, 3, 4), (3, 0, 3, 4), (3, 2, 0, 4), (3, 2, 3, 0), (0, 0, 0, 0), (1, 1, 1, 1)]


def all_op_calls(T, B, I, n, dtype=np.float64, seed=27):
    """(name, function, kwargs) for all eight ops on consistent inputs."""
    a = lstm_inputs(T, B, I, n, dtype=dtype, seed=seed)
    rng = np.random.default_rng(seed)
    grads = {k: rng.standard_normal((T, B, n)).astype(dtype) for k in ("cs_grad", "h_grad")}
    fwd = bo.block_lstm(T, **a)
    fwd2 = bo.block_lstm_v2(T, **a)
    c = lstm_inputs(T, B, I, n, dtype=dtype, seed=seed, cell=True)
    cell = bo.lstm_block_cell(**c)
    cell_grads = {k: rng.standard_normal((B, n)).astype(dtype) for k in ("cs_grad", "h_grad")}
    g = gru_inputs(B, I, n, dtype=dtype, seed=seed)
    gru = bo.gru_block_cell(**g)
    return [
        ("block_lstm", bo.block_lstm, dict(seq_len_max=T, **a)),
        ("block_lstm_v2", bo.block_lstm_v2, dict(seq_len_max=T, **a)),
        ("block_lstm_grad", bo.block_lstm_grad, dict(seq_len_max=T, **a, **fwd._asdict(), **grads, use_peephole=True)),
        ("block_lstm_grad_v2", bo.block_lstm_grad_v2,
         dict(seq_len_max=T, **a, **fwd2._asdict(), **grads, use_peephole=True)),
        ("lstm_block_cell", bo.lstm_block_cell, dict(c, use_peephole=True)),
        ("lstm_block_cell_grad", bo.lstm_block_cell_grad,
         dict(c, **{k: getattr(cell, k) for k in GATES}, **cell_grads, use_peephole=True)),
        ("gru_block_cell", bo.gru_block_cell, g),
        ("gru_block_cell_grad", bo.gru_block_cell_grad,
         dict(g, r=gru.r, u=gru.u, c=gru.c, d_h=cell_grads["h_grad"])),
    ]


EXPECTED_SHAPES = {
    "block_lstm": lambda T, B, I, n: [(T, B, n)] * 7,
    "block_lstm_v2": lambda T, B, I, n: [(T, B, n)] * 7,
    "block_lstm_grad": lambda T, B, I, n: [(T, B, I), (B, n), (B, n), (I + n, 4 * n), (n,), (n,), (n,), (4 * n,)],
    "block_lstm_grad_v2": lambda T, B, I, n: [(T, B, I), (B, n), (B, n), (I + n, 4 * n), (n,), (n,), (n,), (4 * n,)],
    "lstm_block_cell": lambda T, B, I, n: [(B, n)] * 7,
    "lstm_block_cell_grad": lambda T, B, I, n: [(B, n), (B, 4 * n), (n,), (n,), (n,)],
    "gru_block_cell": lambda T, B, I, n: [(B, n)] * 4,
    "gru_block_cell_grad": lambda T, B, I, n: [(B, I), (B, n), (B, n), (B, 2 * n)],
}


@pytest.mark.parametrize("sizes", ZERO_SIZES, ids=lambda s: "T{}B{}I{}n{}".format(*s))
def test_zero_sizes_give_correctly_shaped_results(sizes):
    for name, fn, kwargs in all_op_calls(*sizes):
        out = fn(**kwargs)
        assert [x.shape for x in out] == EXPECTED_SHAPES[name](*sizes), name
        assert all(x.dtype == np.float64 for x in out), name
        T, B, I, n = sizes
        if 0 in (B, n) or (T == 0 and name.startswith("block_lstm")):  # nothing to compute: zeros or empty
            assert not any(x.any() for x in out), name


def test_zero_input_size_still_computes():
    a = lstm_inputs(3, 2, 0, 4, seed=28)
    out = bo.block_lstm(3, **a, cell_clip=0.0)
    ref = ref_block_lstm(3, a, "icfo", 1.0, 0.0, False)
    for mine, expected in zip(out, ref):
        np.testing.assert_allclose(mine, expected, rtol=1e-12, atol=1e-13)


def test_python_lists_are_accepted():
    """All-Python inputs are float32 (TF's default), as if each list were ``np.float32`` first."""
    a = lstm_inputs(2, 1, 2, 1, seed=29)
    out = bo.block_lstm_v2(2, **{k: v.tolist() for k, v in a.items()})
    for x1, x2 in zip(out, bo.block_lstm_v2(2, **{k: v.astype(np.float32) for k, v in a.items()})):
        assert x1.dtype == np.float32
        np.testing.assert_array_equal(x1, x2)
    r = bo.gru_block_cell([[0.5]], [[0.1]], [[1.0, 2.0], [3.0, 4.0]], [[1.0], [2.0]], [0.0, 0.0], [0.0])
    assert r.h.dtype == np.float32
    np.testing.assert_allclose(r.h, ref_gru(np.array([[0.5]]), np.array([[0.1]]), np.array([[1.0, 2.0], [3.0, 4.0]]),
                                            np.array([[1.0], [2.0]]), np.zeros(2), np.zeros(1))[3], rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_inputs_are_not_modified_and_outputs_are_fresh(dtype):
    for name, fn, kwargs in all_op_calls(3, 2, 3, 4, dtype=dtype):
        before = copy.deepcopy(kwargs)
        out = fn(**kwargs)
        for key, value in kwargs.items():
            if isinstance(value, np.ndarray):
                np.testing.assert_array_equal(value, before[key], err_msg=f"{name}: {key} was modified")
                for field, result in zip(out._fields, out):
                    assert not np.shares_memory(result, value), f"{name}: {field} shares memory with {key}"
        for k, r1 in enumerate(out):
            for r2 in out[k + 1:]:
                assert not np.shares_memory(r1, r2), name


def _relayout(a: np.ndarray, how: str) -> np.ndarray:
    """The same values in another memory layout."""
    if how == "fortran":
        return np.asfortranarray(a)
    if how == "negstride":
        return np.flip(np.flip(a).copy())
    wide = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype) if a.ndim else np.zeros(2, a.dtype)
    view = wide[..., ::2] if a.ndim else wide[0]
    view[...] = a
    return view


@pytest.mark.parametrize("how", ["fortran", "negstride", "noncontig"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_results_do_not_depend_on_the_memory_layout_of_the_inputs(how, dtype):
    for name, fn, kwargs in all_op_calls(4, 3, 5, 6, dtype=dtype):
        expected = fn(**kwargs)
        moved = {k: _relayout(v, how) if isinstance(v, np.ndarray) and v.ndim else v for k, v in kwargs.items()}
        for field, x1, x2 in zip(expected._fields, expected, fn(**moved)):
            np.testing.assert_array_equal(x1, x2, err_msg=f"{name}.{field}")


def test_raw_ops_use_tensorflow_names():
    expected = {
        "BlockLSTM": "seq_len_max x cs_prev h_prev w wci wcf wco b forget_bias cell_clip use_peephole name",
        "BlockLSTMV2": "seq_len_max x cs_prev h_prev w wci wcf wco b cell_clip use_peephole name",
        "BlockLSTMGrad": "seq_len_max x cs_prev h_prev w wci wcf wco b i cs f o ci co h cs_grad h_grad use_peephole name",
        "BlockLSTMGradV2": "seq_len_max x cs_prev h_prev w wci wcf wco b i cs f o ci co h cs_grad h_grad use_peephole name",
        "LSTMBlockCell": "x cs_prev h_prev w wci wcf wco b forget_bias cell_clip use_peephole name",
        "LSTMBlockCellGrad": "x cs_prev h_prev w wci wcf wco b i cs f o ci co cs_grad h_grad use_peephole name",
        "GRUBlockCell": "x h_prev w_ru w_c b_ru b_c name",
        "GRUBlockCellGrad": "x h_prev w_ru w_c b_ru b_c r u c d_h name",
    }
    for op, names in expected.items():
        assert list(inspect.signature(getattr(raw_ops, op)).parameters) == names.split(), op
    a = lstm_inputs(2, 1, 2, 3, seed=30)
    out = raw_ops.BlockLSTM(seq_len_max=2, **a, name="ignored")
    for x1, x2 in zip(out, bo.block_lstm(2, **a)):
        np.testing.assert_array_equal(x1, x2)


# ---------------------------------------------------------------------------------------------
# hypothesis: random configurations against the reference

@st.composite
def lstm_configs(draw):
    T, B, I, n = (draw(st.integers(lo, 4)) for lo in (0, 0, 0, 0))
    return dict(T=T, B=B, I=I, n=n, seq_len_max=draw(st.integers(0, T)), version=draw(st.sampled_from([1, 2])),
                use_peephole=draw(st.booleans()), cell_clip=draw(st.sampled_from([0.0, -1.0, 0.25, 1.0, 50.0])),
                forget_bias=draw(st.sampled_from([0.0, 1.0, -0.5, 2.0])), seed=draw(st.integers(0, 2 ** 16)))


@settings(max_examples=40, deadline=None)
@given(lstm_configs())
def test_random_block_lstm_configurations_match_reference(cfg):
    version = cfg["version"]
    a = lstm_inputs(cfg["T"], cfg["B"], cfg["I"], cfg["n"], seed=cfg["seed"])
    fb = cfg["forget_bias"] if version == 1 else 0.0
    L, peep, clip = cfg["seq_len_max"], cfg["use_peephole"], cfg["cell_clip"]
    out = FORWARD[version](L, **a, **forward_attrs(version, fb, clip, peep))
    ref = ref_block_lstm(L, a, LAYOUT[version], fb, clip, peep)
    for name, mine, expected in zip(out._fields, out, ref):
        np.testing.assert_allclose(mine, expected, rtol=1e-12, atol=1e-13, err_msg=name)
    cs_grad, h_grad = np.random.default_rng(cfg["seed"]).standard_normal((2,) + out.cs.shape)
    grads = BACKWARD[version](L, **a, **out._asdict(), cs_grad=cs_grad, h_grad=h_grad, use_peephole=peep)
    expected = ref_block_lstm_grad(L, a, ref, cs_grad, h_grad, LAYOUT[version], peep)
    for name, mine, ref_grad in zip(grads._fields, grads, expected):
        np.testing.assert_allclose(mine, ref_grad, rtol=1e-10, atol=1e-12, err_msg=name)
