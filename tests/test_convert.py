"""fusedrnn.convert: CudnnWeights and the converters, bit-exact round trips and the converted models
run in their own framework (PyTorch, Keras, TF ops, ONNX Runtime) against CudnnRNNV3.

Tolerances: float32 outputs ``atol=2e-6`` (the frameworks sum in other orders; spec §10 measured
<= 3e-7); params bit-exact wherever both formats hold the same numbers.
"""

import os
import re

import numpy as np
import pytest

import fusedrnn
from fusedrnn.convert import (CudnnWeights, block_lstm_to_onnx, from_block_lstm, from_keras, from_keras_weights,
                              from_tf_cells, from_torch, to_block_lstm, to_keras, to_keras_weights, to_onnx,
                              to_tf_cells, to_torch)

from convert_helpers import DIRECTIONS, LENGTHS, MODES, random_inputs, random_weights, reference

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
ATOL = 2e-6
FULL = np.full(3, 5, np.int32)


def assert_outputs(actual, expected, lstm=True, atol=ATOL):
    names = ("output", "output_h", "output_c")[:3 if lstm else 2]
    for name, a, e in zip(names, actual, expected):
        np.testing.assert_allclose(np.asarray(a), e, rtol=0, atol=atol, err_msg=name)


@pytest.fixture(scope="module")
def tf():
    return pytest.importorskip("tensorflow", reason="TensorFlow runs the TF cells / BlockLSTMV2 / Keras layers")


@pytest.fixture(scope="module")
def ort():
    return pytest.importorskip("onnxruntime", reason="ONNX Runtime runs the exported models")


# -- CudnnWeights ----------------------------------------------------------------------------------
def test_weights_validates_size_and_names_the_config():
    w = random_weights("lstm", 2, "bidirectional")
    with pytest.raises(ValueError, match=r"params has 735 elements, but CudnnRNNParamsSize of lstm, 2 layer.*is 736"):
        CudnnWeights(w.params[:-1], "lstm", 2, 4, 3, "bidirectional")
    with pytest.raises(ValueError, match="Invalid rnn_mode"):
        CudnnWeights(w.params, "lstmx", 2, 4, 3)
    with pytest.raises(ValueError, match="1-D"):
        CudnnWeights(w.params.reshape(2, -1), "lstm", 2, 4, 3, "bidirectional")


def test_weights_copies_and_freezes_params():
    params = random_weights().params.copy()
    w = CudnnWeights(params, "lstm", 1, 4, 3)
    params[0] += 1
    assert w.params[0] != params[0] and not w.params.flags.writeable


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_canonical_round_trip_and_attrs_run_the_model(mode, direction):
    w = random_weights(mode, 2, direction)
    weights, biases = w.canonical()
    back = CudnnWeights.from_canonical(weights, biases, **w.config_dict())
    assert back == w
    x, h0, c0 = random_inputs(w)
    out = fusedrnn.cudnn_rnn_v3(x, h0, c0, w.params, LENGTHS, **w.attrs)
    assert out.output.shape == (5, 3, 4 * w.num_dirs)


def test_projection_canonical_and_stack_and_layer():
    w = random_weights("lstm", 2, "bidirectional", num_proj=2)
    assert CudnnWeights.from_canonical(*w.canonical(), **w.config_dict()) == w
    assert CudnnWeights.stack([w.layer(0), w.layer(1)]) == w
    with pytest.raises(ValueError, match="input_size=3, but layer 0 outputs 4"):
        CudnnWeights.stack([w.layer(0), w.layer(0)])


def test_save_load(tmp_path):
    for w in (random_weights("gru", 2, "bidirectional", dtype=np.float64), random_weights("lstm", num_proj=2)):
        w.save(tmp_path / "w.npz")
        back = CudnnWeights.load(tmp_path / "w.npz")
        assert back == w and back.dtype == w.dtype
    np.savez(tmp_path / "other.npz", a=np.zeros(3))
    with pytest.raises(ValueError, match="not a CudnnWeights file"):
        CudnnWeights.load(tmp_path / "other.npz")


def test_with_linear_input_is_the_same_model():
    w = random_weights("gru", 2, "bidirectional", num_units=3, input_size=3, input_mode="skip_input")
    linear = w.with_linear_input()
    assert linear.input_mode == "linear_input" and linear.params.size > w.params.size
    x, h0, c0 = random_inputs(w)
    assert_outputs(reference(linear, x, h0, c0, LENGTHS), reference(w, x, h0, c0, LENGTHS), lstm=False, atol=0)


# -- PyTorch ---------------------------------------------------------------------------------------
TORCH_CASES = [(m, L, d, 0) for m in MODES for L in (1, 2) for d in DIRECTIONS] + \
              [("lstm", 2, "bidirectional", 2), ("lstm", 1, "unidirectional", 3)]


@pytest.mark.parametrize("mode,layers,direction,proj", TORCH_CASES)
def test_torch_round_trip_and_module_outputs(torch, mode, layers, direction, proj):
    w = random_weights(mode, layers, direction, num_proj=proj)
    state = to_torch(w)
    assert from_torch(state, rnn_mode=mode) == w
    net = to_torch(w, module=True)
    assert from_torch(net) == w
    x, h0, c0 = random_inputs(w)
    pack = torch.nn.utils.rnn.pack_padded_sequence(torch.from_numpy(x), torch.from_numpy(LENGTHS).long(),
                                                   enforce_sorted=False)
    with torch.no_grad():
        states = (torch.from_numpy(h0), torch.from_numpy(c0)) if mode == "lstm" else torch.from_numpy(h0)
        y, hn = net(pack, states)
    y = torch.nn.utils.rnn.pad_packed_sequence(y, total_length=5)[0].numpy()
    hn, cn = (hn[0].numpy(), hn[1].numpy()) if mode == "lstm" else (hn.numpy(), None)
    assert_outputs((y, hn, cn), reference(w, x, h0, c0, LENGTHS), lstm=mode == "lstm")


def test_torch_refusals_and_inference(torch):
    w = random_weights("lstm", input_size=4, input_mode="skip_input")
    with pytest.raises(ValueError, match="PyTorch has no skip_input.*with_linear_input"):
        to_torch(w)
    state = to_torch(random_weights("rnn_relu"))
    with pytest.raises(ValueError, match="pass rnn_mode='rnn_tanh' or rnn_mode='rnn_relu'"):
        from_torch(state)
    with pytest.raises(ValueError, match="unexpected state_dict key 'foo'"):
        from_torch({**state, "foo": state["weight_ih_l0"]}, rnn_mode="rnn_relu")
    # a numpy state_dict needs no torch at all; bias=False modules convert with zero biases
    net = torch.nn.GRU(3, 4, bias=False)
    w = from_torch(net)
    assert not np.any(np.concatenate(w.canonical().biases))


# -- Keras -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_keras_weight_lists_round_trip(mode, direction):
    w = random_weights(mode, 2, direction)
    lists = to_keras_weights(w)
    per_pseudo = [lst[k:k + 3] for lst in lists for k in range(0, len(lst), 3)]
    back = from_keras_weights(per_pseudo, mode, direction=direction)
    assert all(np.array_equal(a, b) for x, y in zip(lists, to_keras_weights(back)) for a, b in zip(x, y))
    if mode in ("lstm", "gru"):
        legacy = to_keras_weights(w, legacy_cudnn=True)
        per_pseudo = [lst[k:k + 3] for lst in legacy for k in range(0, len(lst), 3)]
        assert from_keras_weights(per_pseudo, mode, direction=direction, legacy_cudnn=True) == w
    if mode == "gru":  # two biases: exact both ways
        assert back == w


def test_keras_legacy_cudnn_kernels_are_reinterpreted_not_transposed():
    w = random_weights("lstm", input_size=3, num_units=4)
    kernel = to_keras_weights(w, legacy_cudnn=True)[0][0]
    W_i = w.canonical().weights[0]
    assert np.array_equal(kernel[:, :4], W_i.reshape(3, 4)) and not np.array_equal(kernel[:, :4], W_i.T)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_keras_layers_compute_the_same(tf, mode, direction):
    w = random_weights(mode, 2, direction)
    layers = to_keras(w)
    back = from_keras(layers)
    if mode == "gru":
        assert back == w
    else:
        np.testing.assert_array_equal(to_keras_weights(back)[0][0], to_keras_weights(w)[0][0])
    x, h0, c0 = random_inputs(w)
    D = w.num_dirs
    mask = tf.constant(np.arange(5)[None, :] < LENGTHS[:, None])
    seq = tf.constant(np.transpose(x, (1, 0, 2)))
    final_h, final_c = [], []
    for l, layer in enumerate(layers):
        states = []
        for d in range(D):
            p = l * D + d
            states += [tf.constant(h0[p])] + ([tf.constant(c0[p])] if mode == "lstm" else [])
        result = layer(seq, mask=mask, initial_state=states)
        seq, rest = result[0], result[1:]
        per = 2 if mode == "lstm" else 1
        for d in range(D):
            final_h.append(rest[d * per].numpy())
            if mode == "lstm":
                final_c.append(rest[d * per + 1].numpy())
    y = np.transpose(seq.numpy(), (1, 0, 2))
    expected = reference(w, x, h0, c0, LENGTHS)
    valid = (np.arange(5)[:, None] < LENGTHS[None, :])[..., None]
    np.testing.assert_allclose(np.where(valid, y, 0), expected[0], atol=ATOL, rtol=0)
    np.testing.assert_allclose(np.stack(final_h), expected[1], atol=ATOL, rtol=0)
    if mode == "lstm":
        np.testing.assert_allclose(np.stack(final_c), expected[2], atol=ATOL, rtol=0)


def test_keras_refusals(tf):
    import keras
    with pytest.raises(ValueError, match="reset_after=False"):
        gru = keras.layers.GRU(4, reset_after=False)
        gru.build((None, None, 3))
        from_keras(gru)
    with pytest.raises(ValueError, match="Keras has no LSTM projection"):
        to_keras_weights(random_weights("lstm", num_proj=2))
    with pytest.raises(ValueError, match="activation=relu"):
        lstm = keras.layers.LSTM(4, activation="relu")
        lstm.build((None, None, 3))
        from_keras(lstm)


# -- TF cells, run by TensorFlow ---------------------------------------------------------------------
def _run_cells(tf, variables, w, x, h0, c0, lengths):
    """Run the TF cell variables with TF ops (LSTMBlockCell for LSTM, the CudnnCompatibleGRUCell and
    BasicRNNCell equations otherwise), layers and directions stacked as cuDNN does."""
    from fusedrnn.convert._tf_cells import _prefix
    cell = {"lstm": "cudnn_compatible_lstm_cell", "gru": "cudnn_compatible_gru_cell"}.get(w.rnn_mode, "basic_rnn_cell")
    D, T = w.num_dirs, x.shape[0]
    valid = np.arange(T)[:, None] < lengths[None, :]
    seq, final_h, final_c = x, [], []
    for l in range(w.num_layers):
        outs = []
        for d in range(D):
            v = {k[len(_prefix("", l, d, D, cell)):]: tf.constant(a) for k, a in variables.items()
                 if k.startswith(_prefix("", l, d, D, cell))}
            order = [np.arange(T) if d == 0 else np.where(np.arange(T) < n, n - 1 - np.arange(T), np.arange(T))
                     for n in lengths]
            xs = np.stack([seq[order[b], b] for b in range(len(lengths))], 1)
            h, c = tf.constant(h0[l * D + d]), tf.constant(c0[l * D + d])
            ys = []
            for t in range(T):
                xt = tf.constant(xs[t])
                if w.rnn_mode == "lstm":
                    zero = tf.zeros([w.num_units])
                    step = tf.raw_ops.LSTMBlockCell(x=xt, cs_prev=c, h_prev=h, w=v["kernel"], wci=zero, wcf=zero,
                                                    wco=zero, b=v["bias"], forget_bias=0.0, cell_clip=-1.0)
                    h_new, c_new = step.h, step.cs
                elif w.rnn_mode == "gru":
                    gates = tf.sigmoid(tf.matmul(tf.concat([xt, h], 1), v["gates/kernel"]) + v["gates/bias"])
                    r, u = tf.split(gates, 2, axis=1)
                    cand = tf.tanh(tf.matmul(xt, v["candidate/input_projection/kernel"])
                                   + v["candidate/input_projection/bias"]
                                   + r * (tf.matmul(h, v["candidate/hidden_projection/kernel"])
                                          + v["candidate/hidden_projection/bias"]))
                    h_new, c_new = u * h + (1 - u) * cand, c
                else:
                    act = tf.tanh if w.rnn_mode == "rnn_tanh" else tf.nn.relu
                    h_new, c_new = act(tf.matmul(tf.concat([xt, h], 1), v["kernel"]) + v["bias"]), c
                keep = tf.constant(valid[t][:, None])
                h, c = tf.where(keep, h_new, h), tf.where(keep, c_new, c)
                ys.append(np.where(valid[t][:, None], h.numpy(), 0))
            ys = np.stack(ys)
            outs.append(np.stack([ys[order[b], b] for b in range(len(lengths))], 1) * valid[..., None])
            final_h.append(h.numpy())
            final_c.append(c.numpy())
        seq = np.concatenate(outs, axis=2)
    return seq, np.stack(final_h), np.stack(final_c)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_tf_cells_round_trip_and_outputs(tf, mode, direction):
    w = random_weights(mode, 2, direction)
    variables = to_tf_cells(w)
    back = from_tf_cells(variables, rnn_mode=mode)
    again = to_tf_cells(back)
    assert variables.keys() == again.keys()
    assert all(np.array_equal(variables[k], again[k]) for k in variables)
    x, h0, c0 = random_inputs(w)
    assert_outputs(_run_cells(tf, variables, w, x, h0, c0, LENGTHS), reference(w, x, h0, c0, LENGTHS),
                   lstm=mode == "lstm")


def test_tf_cells_names_forget_bias_and_refusals():
    w = random_weights("lstm", 1, "bidirectional", num_proj=2)
    names = to_tf_cells(w, scope="enc/")
    assert "enc/stack_bidirectional_rnn/cell_0/bidirectional_rnn/bw/cudnn_compatible_lstm_cell/projection/kernel" in names
    assert from_tf_cells(names) == from_tf_cells(to_tf_cells(from_tf_cells(names), scope="enc/"))
    block = to_tf_cells(random_weights("lstm"), cell="lstm_block_cell", forget_bias=1.0)
    with pytest.raises(ValueError, match="pass forget_bias="):
        from_tf_cells(block)
    key = next(k for k in block if k.endswith("kernel")).replace("kernel", "w_f_diag")
    with pytest.raises(ValueError, match="w_f_diag is not zero"):
        from_tf_cells({**block, key: np.ones(4, np.float32)}, forget_bias=1.0)
    with pytest.raises(ValueError, match="need rnn_mode='rnn_tanh' or 'rnn_relu'"):
        from_tf_cells(to_tf_cells(random_weights("rnn_relu")))


# -- BlockLSTM -------------------------------------------------------------------------------------
@pytest.mark.parametrize("layout,forget_bias", [("IFCO", 0.0), ("ICFO", 1.0), ("ICFO", 0.3)])
def test_block_lstm_round_trip_and_tf_outputs(tf, layout, forget_bias):
    w = random_weights("lstm")
    block = to_block_lstm(w, layout=layout, forget_bias=forget_bias)
    back = from_block_lstm(block.w, block.b, layout=layout, forget_bias=forget_bias, cell_clip=0.0)
    again = to_block_lstm(back, layout=layout, forget_bias=forget_bias)
    assert np.array_equal(again.w, block.w) and np.array_equal(again.b, block.b)
    x, h0, c0 = random_inputs(w)
    zero = tf.zeros([4])
    if layout == "IFCO":
        out = tf.raw_ops.BlockLSTMV2(seq_len_max=tf.constant(5, tf.int64), x=x, cs_prev=c0[0], h_prev=h0[0],
                                     w=block.w, wci=zero, wcf=zero, wco=zero, b=block.b, cell_clip=0.0)
    else:
        out = tf.raw_ops.BlockLSTM(seq_len_max=tf.constant(5, tf.int64), x=x, cs_prev=c0[0], h_prev=h0[0],
                                   w=block.w, wci=zero, wcf=zero, wco=zero, b=block.b, forget_bias=forget_bias,
                                   cell_clip=-1.0)
    expected = reference(w, x, h0, c0, np.full(3, 5, np.int32))
    np.testing.assert_allclose(out.h.numpy(), expected[0], atol=ATOL, rtol=0)
    np.testing.assert_allclose(out.cs.numpy()[-1], expected[2][0], atol=ATOL, rtol=0)


def test_block_lstm_refusals():
    block = to_block_lstm(random_weights("lstm"), layout="ICFO")
    with pytest.raises(ValueError, match=r"cell_clip=3.0 \(BlockLSTM's default is 3.0\) would be lost"):
        from_block_lstm(block.w, block.b, layout="ICFO")
    with pytest.raises(ValueError, match="peephole wcf is not zero"):
        from_block_lstm(block.w, block.b, wcf=np.ones(4))
    with pytest.raises(ValueError, match="one unidirectional LSTM layer"):
        to_block_lstm(random_weights("lstm", 2))
    with pytest.raises(ValueError, match="layout must be 'ICFO'"):
        to_block_lstm(random_weights("lstm"), layout="IOFC")


# -- ONNX ------------------------------------------------------------------------------------------
def _session(ort, model):
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("layers,direction", [(1, "unidirectional"), (2, "bidirectional"), (2, "unidirectional")])
@pytest.mark.parametrize("lengths", [LENGTHS, FULL], ids=["varlen", "full"])
def test_onnx_matches_cudnn(ort, mode, layers, direction, lengths):
    w = random_weights(mode, layers, direction)
    x, h0, c0 = random_inputs(w)
    feed = dict(input=x, input_h=h0, sequence_lengths=lengths)
    if mode == "lstm":
        feed["input_c"] = c0
    got = _session(ort, to_onnx(w)).run(None, feed)
    assert_outputs(got, reference(w, x, h0, c0, lengths), lstm=mode == "lstm")


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_onnx_batch_major(ort, mode):
    """time_major=False: input/output [B, T, .], states [B, L*D, H] reinterpreted as TF does."""
    w = random_weights(mode, 2, "bidirectional")
    x, h0, c0 = random_inputs(w)
    x, h0, c0 = x.transpose(1, 0, 2).copy(), h0.reshape(3, 4, 4), c0.reshape(3, 4, 4)
    feed = dict(input=x, input_h=h0, sequence_lengths=LENGTHS, **({"input_c": c0} if mode == "lstm" else {}))
    got = _session(ort, to_onnx(w, time_major=False)).run(None, feed)
    expected = fusedrnn.cudnn_rnn_v3(x, h0, c0, w.params, LENGTHS, is_training=False, time_major=False, **w.attrs)
    assert_outputs(got, expected[:3], lstm=mode == "lstm")


def test_onnx_file_and_refusals(ort, tmp_path):
    import onnx
    w = random_weights("gru", 2, "bidirectional")
    to_onnx(w, tmp_path / "m.onnx", opset=14)
    model = onnx.load(tmp_path / "m.onnx")
    assert model.opset_import[0].version == 14
    assert [n.op_type for n in model.graph.node].count("GRU") == 2
    assert all(a.i == 1 for n in model.graph.node if n.op_type == "GRU" for a in n.attribute
               if a.name == "linear_before_reset")
    with pytest.raises(ValueError, match="ONNX's LSTM has no LSTM projection"):
        to_onnx(random_weights("lstm", num_proj=2))
    with pytest.raises(ValueError, match="no skip_input"):
        to_onnx(random_weights("lstm", input_size=4, input_mode="skip_input"))


@pytest.mark.parametrize("use_peephole", [False, True])
@pytest.mark.parametrize("layout", ["IFCO", "ICFO"])
def test_block_lstm_to_onnx(ort, use_peephole, layout):
    rng = np.random.default_rng(3)
    w = rng.uniform(-0.5, 0.5, (7, 16)).astype(np.float32)
    b = rng.uniform(-0.5, 0.5, 16).astype(np.float32)
    wci, wcf, wco = (rng.uniform(-0.5, 0.5, 4).astype(np.float32) for _ in range(3))
    x = rng.standard_normal((5, 2, 3)).astype(np.float32)
    cs0, h0 = (rng.standard_normal((2, 4)).astype(np.float32) for _ in range(2))
    forget_bias = 0.0 if layout == "IFCO" else 1.0
    model = block_lstm_to_onnx(w, b, layout=layout, forget_bias=forget_bias, cell_clip=0.0, wci=wci, wcf=wcf,
                               wco=wco, use_peephole=use_peephole)
    h, h_last, cs_last = _session(ort, model).run(None, dict(x=x, cs_prev=cs0, h_prev=h0))
    if layout == "IFCO":
        ref = fusedrnn.block_lstm_v2(5, x, cs0, h0, w, wci, wcf, wco, b, cell_clip=0.0, use_peephole=use_peephole)
    else:
        ref = fusedrnn.block_lstm(5, x, cs0, h0, w, wci, wcf, wco, b, forget_bias=1.0, cell_clip=0.0,
                                  use_peephole=use_peephole)
    np.testing.assert_allclose(h, ref.h, atol=ATOL, rtol=0)
    np.testing.assert_allclose(h_last, ref.h[-1], atol=ATOL, rtol=0)
    np.testing.assert_allclose(cs_last, ref.cs[-1], atol=ATOL, rtol=0)
    with pytest.raises(ValueError, match="ONNX LSTM's clip bounds gate pre-activations"):
        block_lstm_to_onnx(w, b, layout=layout)  if layout == "ICFO" else block_lstm_to_onnx(w, b, cell_clip=1.0)


# -- optional dependencies -------------------------------------------------------------------------
def test_import_is_light():
    import subprocess
    import sys
    code = ("import sys, fusedrnn, fusedrnn.convert, fusedrnn.convert.cli; "
            "heavy = [m for m in ('torch', 'onnx', 'onnxruntime', 'h5py', 'tensorflow', 'keras', 'jax') "
            "if m in sys.modules]; assert not heavy, heavy")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root)


@pytest.mark.parametrize("module,extra,call", [
    ("onnx", "onnx", lambda: to_onnx(random_weights())),
    ("torch", "torch", lambda: to_torch(random_weights())),
    ("h5py", "keras", lambda: __import__("fusedrnn.convert", fromlist=["x"]).read_keras_weights("x.h5"))])
def test_missing_extra_names_it(monkeypatch, module, extra, call):
    import sys
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(ImportError, match=re.escape(f"pip install 'fusedrnn[{extra}]'")):
        call()


def test_keras_files_read_without_keras(tf, tmp_path):
    """A Keras model saved as .keras, .weights.h5 and legacy .h5: read with h5py, found, equal to
    from_keras of the live model."""
    import keras
    from fusedrnn.convert import find_rnn_weights, read_keras_weights
    lstm = random_weights("lstm", 2, "unidirectional")
    gru = random_weights("gru", 1, "bidirectional", input_size=4)
    model = keras.Sequential([keras.Input((None, 3)),
                              keras.layers.LSTM(4, return_sequences=True),
                              keras.layers.Bidirectional(keras.layers.GRU(4, return_sequences=True))])
    model.layers[0].set_weights(to_keras_weights(lstm.layer(0))[0])
    model.layers[1].set_weights(to_keras_weights(gru)[0])
    for name in ("m.keras", "m.weights.h5", "m.h5"):
        path = tmp_path / name
        model.save_weights(path) if name.endswith(".weights.h5") else model.save(path)
        found = sorted(find_rnn_weights(read_keras_weights(path)).items())
        assert [w for _, w in found] == [gru, from_keras(model.layers[0])], name
