"""fusedrnn.jax: ``lstm`` against ``jax.experimental.rnn.lstm_ref`` (weights unpacked by JAX's own
``unpack_lstm_weights``), every mode against a ``lax.scan`` reference and its ``jax.grad``
(multi-layer, bidirectional, ragged lengths), ``check_grads`` in float64, ``jit`` and ``vmap``,
``cudnn_rnn`` / ``block_lstm`` against the NumPy ops, and the errors.

Shapes are tiny and shared so that the few XLA compilations stay cheap."""

import numpy as np
import pytest

import fusedrnn

jax = pytest.importorskip("jax", reason="fusedrnn.jax is the JAX adapter under test")
fj = pytest.importorskip("fusedrnn.jax")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402
from jax.experimental import rnn as jrnn  # noqa: E402
from jax.test_util import check_grads  # noqa: E402

B, T, I, H = 3, 4, 2, 3
LENGTHS = (4, 2, 1)  # ragged, unsorted, includes 1 and T


@pytest.fixture(autouse=True)
def fast_compile():
    """XLA without its optimisation passes: the references' scans compile several times faster
    (the fused functions are host callbacks, unaffected)."""
    previous = jax.config.read("jax_disable_most_optimizations")
    jax.config.update("jax_disable_most_optimizations", True)
    yield
    jax.config.update("jax_disable_most_optimizations", previous)


@pytest.fixture
def x64():
    """float64 in JAX for the duration of one test (restored afterwards)."""
    previous = jax.config.read("jax_enable_x64")
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", previous)


def problem(mode, num_layers, bidirectional, dtype, seed=0):
    """x [B, T, I], h_0 / c_0 [L*D, B, H], cuDNN weights, int32 lengths (JAX arrays)."""
    rng = np.random.default_rng(seed)
    LD = num_layers * (2 if bidirectional else 1)
    n = int(fusedrnn.cudnn_rnn_params_size(num_layers, H, I, S=np.int64, rnn_mode=mode,
                                           direction="bidirectional" if bidirectional else "unidirectional")[0])
    arrays = (rng.standard_normal((B, T, I)), rng.standard_normal((LD, B, H)), rng.standard_normal((LD, B, H)),
              rng.uniform(-0.6, 0.6, n))
    return [jnp.asarray(a, dtype) for a in arrays] + [jnp.asarray(LENGTHS, jnp.int32)]


def scan_reference(mode, x, h0, c0, w, lengths, num_layers, bidirectional):
    """cuDNN semantics written with lax.scan: weights unpacked from the documented layout (all
    pseudo-layers' W_ih, W_hh, then all b_ih, b_hh), states frozen and outputs zero past each
    length, the reverse direction over the valid prefix only."""
    G, D = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}[mode], 2 if bidirectional else 1
    offset, W, R, bW, bR = 0, [], [], [], []
    for p in range(num_layers * D):
        width = I if p < D else D * H
        W.append(w[offset:offset + G * H * width].reshape(G * H, width))
        offset += G * H * width
        R.append(w[offset:offset + G * H * H].reshape(G * H, H))
        offset += G * H * H
    for p in range(num_layers * D):
        bW.append(w[offset:offset + G * H])
        bR.append(w[offset + G * H:offset + 2 * G * H])
        offset += 2 * G * H
    assert offset == w.shape[0]

    def cell(p, h, c, xt):
        a, r = xt @ W[p].T + bW[p], h @ R[p].T + bR[p]
        if mode == "lstm":
            i, f, g, o = jnp.split(a + r, 4, axis=-1)
            c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
            return jax.nn.sigmoid(o) * jnp.tanh(c), c
        if mode == "gru":
            (a_r, a_z, a_n), (r_r, r_z, r_n) = jnp.split(a, 3, axis=-1), jnp.split(r, 3, axis=-1)
            reset, update = jax.nn.sigmoid(a_r + r_r), jax.nn.sigmoid(a_z + r_z)
            new = jnp.tanh(a_n + reset * r_n)
            return (1 - update) * new + update * h, c
        return (jnp.tanh if mode == "rnn_tanh" else jax.nn.relu)(a + r), c

    valid = (jnp.arange(x.shape[1])[:, None] < lengths[None, :])[:, :, None]  # [T, B, 1]
    layer_in, h_n, c_n = jnp.swapaxes(x, 0, 1), [], []
    for layer in range(num_layers):
        outputs = []
        for d in range(D):
            p = layer * D + d

            def step(carry, inputs, p=p):
                (h, c), (xt, v) = carry, inputs
                h_new, c_new = cell(p, h, c, xt)
                return (jnp.where(v, h_new, h), jnp.where(v, c_new, c)), jnp.where(v, h_new, 0)

            scan_in = (layer_in, valid) if d == 0 else (layer_in[::-1], valid[::-1])
            (h, c), y = lax.scan(step, (h0[p], c0[p]), scan_in)
            outputs.append(y if d == 0 else y[::-1])
            h_n.append(h)
            c_n.append(c)
        layer_in = jnp.concatenate(outputs, axis=-1)
    return jnp.swapaxes(layer_in, 0, 1), jnp.stack(h_n), jnp.stack(c_n)


def fused(mode, num_layers, bidirectional):
    """fusedrnn.jax.lstm / gru / rnn as f(x, h0, c0, w, lengths) -> (y, h_n[, c_n])."""
    static = (I, H, num_layers, 0.0, bidirectional)
    if mode == "lstm":
        return lambda x, h0, c0, w, lengths: fj.lstm(x, h0, c0, w, lengths, *static)
    if mode == "gru":
        return lambda x, h0, c0, w, lengths: fj.gru(x, h0, w, lengths, *static)
    return lambda x, h0, c0, w, lengths: fj.rnn(x, h0, w, lengths, *static, nonlinearity=mode[4:])


def weighted_sum(outputs, seed=5):
    """A scalar with random weights on every output, so every output's cotangent is exercised."""
    rng = np.random.default_rng(seed)
    return sum(jnp.sum(o * jnp.asarray(rng.standard_normal(o.shape), o.dtype)) for o in outputs)


def outputs_and_grads(f, args):
    """``(outputs, weighted sum, its gradients in x, h0, c0, w)`` from one jitted program (one compile)."""
    def loss(x, h0, c0, w, lengths):
        outputs = f(x, h0, c0, w, lengths)
        return weighted_sum(outputs), outputs

    (value, outputs), grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3), has_aux=True))(*args)
    return outputs, value, grads


def assert_close_trees(actual, expected, tol, what):
    for k, (a, b) in enumerate(zip(jax.tree.leaves(actual), jax.tree.leaves(expected))):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), **tol, err_msg=f"{what}, leaf {k}")


TOL64 = dict(rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("num_layers,bidirectional", [(1, False), (2, True)], ids=["L1-uni", "L2-bi"])
def test_lstm_matches_jax_lstm_ref(x64, num_layers, bidirectional):
    args = problem("lstm", num_layers, bidirectional, jnp.float64)

    def reference(x, h0, c0, w, lengths):
        W_ih, W_hh, b_ih, b_hh = jrnn.unpack_lstm_weights(w, I, H, num_layers, bidirectional)
        return jrnn.lstm_ref(x, h0, c0, W_ih, W_hh, b_ih, b_hh, lengths, I, H, num_layers, 0.0, bidirectional)

    ours = fused("lstm", num_layers, bidirectional)
    assert_close_trees(outputs_and_grads(ours, args), outputs_and_grads(reference, args), TOL64,
                       "outputs, loss, grads")


@pytest.mark.parametrize("mode,num_layers,bidirectional", [("gru", 2, True), ("rnn_tanh", 1, False),
                                                           ("rnn_relu", 2, True)])
def test_matches_scan_reference(x64, mode, num_layers, bidirectional):
    args = problem(mode, num_layers, bidirectional, jnp.float64, seed=1)

    def reference(*a):
        return scan_reference(mode, *a, num_layers, bidirectional)[:2]

    assert_close_trees(outputs_and_grads(fused(mode, num_layers, bidirectional), args),
                       outputs_and_grads(reference, args), TOL64, f"{mode} outputs, loss, grads")


def test_scan_reference_is_jax_lstm_ref(x64):
    """The scan reference itself agrees with JAX's lstm_ref (so it is a valid oracle for the other modes)."""
    args = problem("lstm", 2, True, jnp.float64, seed=2)
    W_ih, W_hh, b_ih, b_hh = jrnn.unpack_lstm_weights(args[3], I, H, 2, True)
    expected = jrnn.lstm_ref(*args[:3], W_ih, W_hh, b_ih, b_hh, args[4], I, H, 2, 0.0, True)
    ours = jax.jit(lambda *a: scan_reference("lstm", *a, 2, True))(*args)
    assert_close_trees(ours, expected, TOL64, "scan reference")


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_check_grads_float64(x64, mode):
    x, h0, c0, w, lengths = problem(mode, 2, True, jnp.float64, seed=3)
    f = fused(mode, 2, True)
    check_grads(lambda x, h0, c0, w: weighted_sum(f(x, h0, c0, w, lengths)), (x, h0, c0, w), order=1,
                modes=["rev"], eps=1e-6, atol=1e-6, rtol=1e-6)


def test_float32_and_jit():
    """Default float32: matches lstm_ref to float32 precision; under jit the compiled
    value-and-grad is reused for new values (jit + float64 is covered by outputs_and_grads)."""
    args = problem("lstm", 2, True, jnp.float32, seed=4)
    ours = fused("lstm", 2, True)
    W_ih, W_hh, b_ih, b_hh = jrnn.unpack_lstm_weights(args[3], I, H, 2, True)
    expected = jrnn.lstm_ref(*args[:3], W_ih, W_hh, b_ih, b_hh, args[4], I, H, 2, 0.0, True)
    eager = ours(*args)
    assert all(o.dtype == jnp.float32 for o in eager)
    assert_close_trees(eager, expected, dict(rtol=1e-5, atol=1e-5), "float32 forward")
    loss = jax.jit(jax.value_and_grad(lambda x, h0, c0, w, lengths: weighted_sum(ours(x, h0, c0, w, lengths)),
                                      argnums=(0, 1, 2, 3)))
    first, second = loss(*args), loss(args[0] * 2, *args[1:])
    np.testing.assert_allclose(np.asarray(first[0]), np.asarray(weighted_sum(eager)), rtol=1e-5)
    assert first[1][3].dtype == jnp.float32 and not np.allclose(np.asarray(first[0]), np.asarray(second[0]))


def test_vmap_runs_per_element():
    """vmap_method="sequential": a batch of problems gives each element's value and gradient."""
    x, h0, c0, w, lengths = problem("gru", 1, False, jnp.float32, seed=5)
    f = fused("gru", 1, False)
    loss = jax.value_and_grad(lambda x, w: weighted_sum(f(x, h0, c0, w, lengths)), argnums=(0, 1))
    xs = jnp.stack([x, -x, 0.5 * x])
    batched = jax.vmap(loss, in_axes=(0, None))(xs, w)
    expected = loss(xs[1], w)
    for a, b in zip(jax.tree.leaves(batched), jax.tree.leaves(expected)):  # XLA may reorder the sums
        np.testing.assert_allclose(np.asarray(a)[1], np.asarray(b), rtol=1e-6, atol=1e-6)


# ----------------------------------------------------------------------------------------------
# cudnn_rnn and block_lstm against the NumPy ops (bit-identical: the same code runs)


@pytest.mark.parametrize("mode,num_proj", [("lstm", 2), ("gru", 0), ("rnn_relu", 0)])
def test_cudnn_rnn_is_the_numpy_op(mode, num_proj):
    """Batch-major TF layout, projection, ragged lengths, dropout: values and the vjp are
    exactly CudnnRNNV3 / CudnnRNNBackpropV3."""
    rng = np.random.default_rng(6)
    L, D, Hc = 2, 2, 4
    Hout = num_proj or Hc
    n = int(fusedrnn.cudnn_rnn_params_size(L, Hc, I, rnn_mode=mode, num_proj=num_proj,
                                           direction="bidirectional")[0])
    x, h, c = (rng.standard_normal(s).astype(np.float32) for s in ((B, T, I), (B, L * D, Hout), (B, L * D, Hc)))
    w = rng.uniform(-0.5, 0.5, n).astype(np.float32)
    lengths = np.array(LENGTHS, np.int32)
    attrs = dict(rnn_mode=mode, num_proj=num_proj, direction="bidirectional", time_major=False, dropout=0.3,
                 seed=1, seed2=2)
    c_in = c if mode == "lstm" else None
    outputs, vjp = jax.vjp(lambda x, h, w: fj.cudnn_rnn(x, h, c_in, w, lengths, **attrs), x, h, w)
    ref = fusedrnn.cudnn_rnn_v3(x, h, c if mode == "lstm" else np.zeros((), np.float32), w, lengths, **attrs)
    for a, b in zip(outputs, ref[:3]):
        np.testing.assert_array_equal(np.asarray(a), b)
    cotangents = [rng.standard_normal(o.shape).astype(np.float32) for o in ref[:3]]
    grads = vjp(tuple(jnp.asarray(ct) for ct in cotangents))
    ref_grads = fusedrnn.cudnn_rnn_backprop_v3(x, h, c if mode == "lstm" else np.zeros((), np.float32), w,
                                               lengths, *ref[:3], *cotangents, ref.reserve_space, ref.host_reserved,
                                               **{k: v for k, v in attrs.items()})
    for a, b in zip(grads, (ref_grads.input_backprop, ref_grads.input_h_backprop, ref_grads.params_backprop)):
        np.testing.assert_array_equal(np.asarray(a), b)


def block_problem(dtype, seed=7):
    rng = np.random.default_rng(seed)
    n = 3
    arrays = [rng.standard_normal((T, B, I)), rng.standard_normal((B, n)), rng.standard_normal((B, n)),
              rng.uniform(-0.5, 0.5, (I + n, 4 * n)), *(rng.uniform(-0.5, 0.5, n) for _ in range(3)),
              rng.uniform(-0.5, 0.5, 4 * n)]
    return [np.asarray(a, dtype) for a in arrays]


@pytest.mark.parametrize("version", [1, 2])
def test_block_lstm_is_the_numpy_op(version):
    arrays = block_problem(np.float32)
    seq_len_max = np.int64(3)
    op, grad_op = ((fj.block_lstm, fusedrnn.block_lstm_grad) if version == 1
                   else (fj.block_lstm_v2, fusedrnn.block_lstm_grad_v2))
    np_op = fusedrnn.block_lstm if version == 1 else fusedrnn.block_lstm_v2
    outputs, vjp = jax.vjp(lambda *a: op(seq_len_max, *a, use_peephole=True), *arrays)
    ref = np_op(seq_len_max, *arrays, use_peephole=True)
    for a, b in zip(outputs, ref):
        np.testing.assert_array_equal(np.asarray(a), b)
    rng = np.random.default_rng(8)
    d_cs, d_h = (rng.standard_normal(ref.h.shape).astype(np.float32) for _ in range(2))
    zeros = jnp.zeros_like(outputs.h)
    grads = vjp(fusedrnn.BlockLSTMResult(zeros, jnp.asarray(d_cs), zeros, zeros, zeros, zeros, jnp.asarray(d_h)))
    ref_grads = grad_op(seq_len_max, *arrays, *ref, d_cs, d_h, use_peephole=True)
    for a, b in zip(grads, ref_grads):
        np.testing.assert_array_equal(np.asarray(a), b)


def test_block_lstm_check_grads_and_stopped_gates(x64):
    arrays = [jnp.asarray(a) for a in block_problem(np.float64, seed=9)]

    def loss(*a):
        out = fj.block_lstm(4, *a, cell_clip=0.0, use_peephole=True)
        return weighted_sum([out.cs, out.h])

    check_grads(loss, arrays, order=1, modes=["rev"], eps=1e-6, atol=1e-6, rtol=1e-6)
    gate_grads = jax.grad(lambda x: jnp.sum(fj.block_lstm(4, x, *arrays[1:]).i))(arrays[0])
    assert not np.any(np.asarray(gate_grads))  # gate outputs are under stop_gradient


# ----------------------------------------------------------------------------------------------
# Errors


def test_errors():
    x, h0, c0, w, lengths = problem("lstm", 1, False, jnp.float32)
    with pytest.raises(NotImplementedError, match="`seq_lengths` can only be int32"):
        fj.lstm(x, h0, c0, w, lengths.astype(jnp.int16), I, H, 1, 0.0, False)
    with pytest.raises(ValueError, match=r"weights must have shape \(84,\) for input_size=2, hidden_size=3"):
        fj.lstm(x, h0, c0, w[:-1], lengths, I, H, 1, 0.0, False)
    with pytest.raises(ValueError, match=r"h_0 must have shape \(2, 3, 3\)"):
        fj.lstm(x, h0, c0, w, lengths, I, H, 1, 0.0, True)
    with pytest.raises(ValueError, match="Invalid rnn_mode: LSTM"):
        fj.cudnn_rnn(x, h0, c0, w, rnn_mode="LSTM")
    with pytest.raises(ValueError, match="nonlinearity must be 'tanh' or 'relu'"):
        fj.rnn(x, h0, w, lengths, I, H, 1, 0.0, False, nonlinearity="sigmoid")
    with pytest.raises(Exception, match=r"sequence_lengths\[2\] = 0 is outside \[1, 4\]"):
        jax.block_until_ready(fj.lstm(x, h0, c0, w, jnp.array([4, 2, 0], jnp.int32), I, H, 1, 0.0, False))
