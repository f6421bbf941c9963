"""JAX's cuDNN LSTM client (jax.experimental.rnn): its packed weight buffer is fusedrnn's
``params``, and fusedrnn's CudnnRNNV3 agrees with JAX's own reference ``lstm_ref`` on weights
packed by JAX.  JAX's layout: ``x [B, T, I]`` batch-major, but ``h_0, c_0 [L*D, B, H]`` — the
buffer TF's batch-major V3 reads by *reshaping* ``input_h [B, L*D, H]`` (spec §5.2), so the
same arrays serve both with ``time_major=False`` and a C-order reshape of the states."""

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="the JAX client test needs JAX (pip install 'fusedrnn[test]')")
jrnn = pytest.importorskip("jax.experimental.rnn", reason="needs jax.experimental.rnn")

import fusedrnn  # noqa: E402

T, B, I, H = 5, 3, 4, 6


@pytest.mark.parametrize("lengths", [(T, T, T), (T, 2, 1)], ids=["full", "ragged"])
@pytest.mark.parametrize("time_major", [False, True], ids=["batch_major", "time_major"])
@pytest.mark.parametrize("num_layers", [1, 2])
@pytest.mark.parametrize("bidirectional", [False, True], ids=["uni", "bi"])
def test_fusedrnn_matches_jax_lstm_ref_on_jax_packed_weights(bidirectional, num_layers, time_major, lengths):
    D = 2 if bidirectional else 1
    keys = jax.random.split(jax.random.PRNGKey(num_layers * 10 + D), 4)
    weights = jrnn.init_lstm_weight(keys[0], I, H, num_layers, bidirectional)
    x = jax.random.normal(keys[1], (B, T, I), dtype=np.float32)
    h0 = jax.random.normal(keys[2], (num_layers * D, B, H), dtype=np.float32)
    c0 = jax.random.normal(keys[3], (num_layers * D, B, H), dtype=np.float32)
    seq_lengths = np.array(lengths, np.int32)
    W_ih, W_hh, b_ih, b_hh = jrnn.unpack_lstm_weights(weights, I, H, num_layers, bidirectional)
    y_ref, h_ref, c_ref = jrnn.lstm_ref(x, h0, c0, W_ih, W_hh, b_ih, b_hh, seq_lengths, I, H, num_layers,
                                        0.0, bidirectional)
    params = np.asarray(weights)
    assert params.size == fusedrnn.cudnn_rnn_params_size(num_layers, H, I, direction="bidirectional" if bidirectional
                                                         else "unidirectional")[0]
    x, h0, c0 = (np.asarray(a) for a in (x, h0, c0))
    direction = "bidirectional" if bidirectional else "unidirectional"
    if time_major:
        out = fusedrnn.raw_ops.CudnnRNNV3(input=x.transpose(1, 0, 2), input_h=h0, input_c=c0, params=params,
                                          sequence_lengths=seq_lengths, direction=direction, is_training=False)
        y, h_n, c_n = out.output.transpose(1, 0, 2), out.output_h, out.output_c
    else:
        state = (B, num_layers * D, H)  # JAX's [L*D, B, H] buffer, read as TF's batch-major states
        out = fusedrnn.raw_ops.CudnnRNNV3(input=x, input_h=h0.reshape(state), input_c=c0.reshape(state),
                                          params=params, sequence_lengths=seq_lengths, direction=direction,
                                          is_training=False, time_major=False)
        y, h_n, c_n = out.output, out.output_h.reshape(h0.shape), out.output_c.reshape(c0.shape)
    tol = dict(rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(y, np.asarray(y_ref), **tol)
    np.testing.assert_allclose(h_n, np.asarray(h_ref), **tol)
    np.testing.assert_allclose(c_n, np.asarray(c_ref), **tol)
