"""Keras 3's own cuDNN code path (keras/src/backend/tensorflow/rnn.py ``_cudnn_lstm`` /
``_cudnn_gru``: it packs the opaque ``params`` buffer and calls ``tf.raw_ops.CudnnRNNV3`` with
``input_c=0`` for the GRU) run with fusedrnn substituted for the op, against Keras' own CPU
LSTM/GRU with the same weights; and fusedrnn's CudnnRNNBackpropV3 against ``tf.GradientTape``
of the CPU layers (params gradient packed by Keras' own ``_standardize_cudnn_weights``)."""

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="the Keras client test needs TensorFlow (pip install 'fusedrnn[test]')")
keras = pytest.importorskip("keras", reason="the Keras client test needs Keras 3 (installed with TensorFlow)")
krnn = pytest.importorskip("keras.src.backend.tensorflow.rnn", reason="needs Keras 3's TensorFlow backend")

from fusedrnn import raw_ops  # noqa: E402

T, B, I, H = 5, 3, 4, 6


def _numpy(value):
    """A tf tensor as NumPy; Python values (Keras passes ``input_c=0``) stay as they are."""
    return value.numpy() if isinstance(value, tf.Tensor) else value


@pytest.fixture
def cudnn_is_fusedrnn(monkeypatch):
    """tf.raw_ops.CudnnRNNV3 -> fusedrnn (NumPy in and out), and a CUDA build as far as Keras'
    gate-order switch is concerned (on a CUDA build Keras swaps z/r into cuDNN's r/u order)."""
    calls = []

    def cudnn_rnn_v3(**kwargs):
        calls.append(kwargs)
        result = raw_ops.CudnnRNNV3(**{k: _numpy(v) for k, v in kwargs.items()})
        return tuple(tf.constant(r) for r in result)

    build_info = dict(tf.sysconfig.get_build_info(), is_cuda_build=True, is_rocm_build=False)
    monkeypatch.setattr(tf.raw_ops, "CudnnRNNV3", cudnn_rnn_v3)
    monkeypatch.setattr(tf.sysconfig, "get_build_info", lambda: build_info)
    return calls


def _layer(kind, go_backwards):
    layer_type = keras.layers.LSTM if kind == "lstm" else keras.layers.GRU
    layer = layer_type(H, return_sequences=True, return_state=True, go_backwards=go_backwards,
                       bias_initializer="random_normal")
    layer.build((B, T, I))
    return layer


def _inputs(seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((B, T, I)).astype(np.float32)
    h0 = rng.standard_normal((B, H)).astype(np.float32)
    c0 = rng.standard_normal((B, H)).astype(np.float32)
    return x, h0, c0


def _mask(masked):
    if not masked:
        return None
    lengths = np.array([T, 2, 4])
    return tf.constant(np.arange(T)[None, :] < lengths[:, None])


def _cudnn_call(kind, layer, x, h0, c0, mask, time_major, go_backwards):
    cell = layer.cell
    inputs = tf.constant(x if not time_major else x.transpose(1, 0, 2))
    mask_arg = None if mask is None else (tf.transpose(mask) if time_major else mask)
    weights = (cell.kernel.value, cell.recurrent_kernel.value, cell.bias.value)
    if kind == "lstm":
        return krnn._cudnn_lstm(inputs, tf.constant(h0), tf.constant(c0), *weights, mask_arg, time_major,
                                go_backwards, True)
    return krnn._cudnn_gru(inputs, tf.constant(h0), *weights, mask_arg, time_major, go_backwards, True)


# Keras checks a mask as [batch, time] even when time_major (its own limitation), so masks are
# only combined with batch-major inputs here.
@pytest.mark.parametrize("time_major,go_backwards,masked", [
    (False, False, False), (False, False, True), (False, True, True), (True, False, False), (True, True, False)],
    ids=["batch_major", "batch_major-masked", "batch_major-go_backwards-masked", "time_major",
         "time_major-go_backwards"])
@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_keras_cudnn_path_matches_keras_cpu_layer(cudnn_is_fusedrnn, kind, time_major, go_backwards, masked):
    layer = _layer(kind, go_backwards)
    x, h0, c0 = _inputs(1)
    mask = _mask(masked)
    states = [h0, c0] if kind == "lstm" else [h0]
    expected_seq, *expected_states = layer(tf.constant(x), initial_state=states, mask=mask)
    last, outputs, got_states = _cudnn_call(kind, layer, x, h0, c0, mask, time_major, go_backwards)
    call = cudnn_is_fusedrnn[-1]
    if kind == "gru":
        assert call["input_c"] == 0 and not isinstance(call["input_c"], tf.Tensor)  # Keras' literal 0
    outputs = outputs.numpy()
    if time_major:
        outputs = outputs.transpose(1, 0, 2)
    expected_seq = expected_seq.numpy()
    if mask is not None:  # cuDNN zeroes padded steps; Keras' CPU layer carries the last output
        valid = mask.numpy()[:, :, None]
        outputs, expected_seq = outputs * valid, expected_seq * valid
    np.testing.assert_allclose(outputs, expected_seq, rtol=1e-5, atol=2e-6)
    for got, expected in zip(got_states, expected_states):
        np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-5, atol=2e-6)
    np.testing.assert_allclose(last.numpy(), expected_states[0].numpy(), rtol=1e-5, atol=2e-6)


def _params_gradient(kind, grads):
    """The gradient w.r.t. ``params`` implied by the Keras weight gradients: Keras builds params
    linearly from (kernel, recurrent_kernel, bias), so it packs their gradients the same way."""
    dkernel, drecurrent, dbias = grads
    if kind == "lstm":
        weights = tf.split(dkernel, 4, axis=1) + tf.split(drecurrent, 4, axis=1)
        biases = tf.split(tf.concat((dbias, dbias), 0), 8)  # input biases (zeros) see the same gradient
    else:
        weights = tf.split(dkernel, 3, axis=1) + tf.split(drecurrent, 3, axis=1)
        biases = tf.split(tf.reshape(dbias, [-1]), 6)
        weights[0], weights[1] = weights[1], weights[0]
        weights[3], weights[4] = weights[4], weights[3]
        biases[0], biases[1] = biases[1], biases[0]
        biases[3], biases[4] = biases[4], biases[3]
    return krnn._standardize_cudnn_weights(weights, biases, tf.constant([-1]), transpose_weights=True).numpy()


@pytest.mark.parametrize("masked", [False, True], ids=["full", "masked"])
@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_backprop_matches_tape_of_keras_cpu_layer(cudnn_is_fusedrnn, kind, masked):
    """Forward through Keras' cuDNN path (recording the exact CudnnRNNV3 call), then
    CudnnRNNBackpropV3 on that call's arguments vs tf.GradientTape of the CPU layer."""
    layer = _layer(kind, False)
    x, h0, c0 = _inputs(2)
    mask = _mask(masked)
    rng = np.random.default_rng(3)
    dy = rng.standard_normal((B, T, H)).astype(np.float32)
    if mask is not None:
        dy *= mask.numpy()[:, :, None]  # padded outputs: Keras carries, cuDNN zeroes; no gradient there
    dh = rng.standard_normal((B, H)).astype(np.float32)
    dc = rng.standard_normal((B, H)).astype(np.float32)
    states = [tf.constant(h0), tf.constant(c0)] if kind == "lstm" else [tf.constant(h0)]
    xt = tf.constant(x)
    cell = layer.cell
    variables = [cell.kernel.value, cell.recurrent_kernel.value, cell.bias.value]
    with tf.GradientTape() as tape:
        tape.watch([xt, *states, *variables])
        seq, *final = layer(xt, initial_state=states, mask=mask)
        loss = tf.reduce_sum(seq * dy) + tf.reduce_sum(final[0] * dh)
        if kind == "lstm":
            loss += tf.reduce_sum(final[1] * dc)
    d_x, *d_rest = tape.gradient(loss, [xt, *states, *variables])
    d_states, d_vars = d_rest[:len(states)], d_rest[len(states):]

    _cudnn_call(kind, layer, x, h0, c0, mask, False, False)
    call = {k: _numpy(v) for k, v in cudnn_is_fusedrnn[-1].items()}
    fwd = raw_ops.CudnnRNNV3(**call)
    call.pop("is_training")  # TF's registered gradient passes the other attributes on
    grads = raw_ops.CudnnRNNBackpropV3(
        **call, output=fwd.output, output_h=fwd.output_h, output_c=fwd.output_c, output_backprop=dy,
        output_h_backprop=dh[:, None], output_c_backprop=dc[:, None] if kind == "lstm" else 0,
        reserve_space=fwd.reserve_space, host_reserved=fwd.host_reserved)
    tol = dict(rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(grads.input_backprop, d_x.numpy(), **tol)
    np.testing.assert_allclose(grads.input_h_backprop[:, 0], d_states[0].numpy(), **tol)
    if kind == "lstm":
        np.testing.assert_allclose(grads.input_c_backprop[:, 0], d_states[1].numpy(), **tol)
    np.testing.assert_allclose(grads.params_backprop, _params_gradient(kind, d_vars), **tol)
