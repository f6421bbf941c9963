"""read_tf_checkpoint / find_rnn_weights / read_keras_weights / the convert CLI, on checkpoints written
by the real TensorFlow (tests/convert_scripts/write_checkpoints.py, one subprocess per module) and read
back bit-exactly in a subprocess that never imports TensorFlow (read_without_tf.py).  Corrupted and
truncated files must raise ValueError and never return a wrong array."""

import argparse
import os
import pickle
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from fusedrnn.convert import (CudnnWeights, find_rnn_weights, from_tf_cells, infer_config, list_tf_checkpoint,
                              read_keras_weights, read_tf_checkpoint, to_tf_cells)
from fusedrnn.convert import cli
from fusedrnn.convert.checkpoint import crc32c, mask_crc

from convert_helpers import random_weights

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(ROOT, "tests", "convert_scripts")
CELLS = random_weights("lstm", 2, "bidirectional")
OPAQUE = random_weights("gru", 2, "unidirectional", num_units=6, input_size=3, seed=5)


def _run(script, *args):
    env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run([sys.executable, os.path.join(SCRIPTS, script), *args], capture_output=True, text=True,
                            env=env, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    return result.stdout


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    pytest.importorskip("tensorflow", reason="TensorFlow writes the test checkpoints")
    out = tmp_path_factory.mktemp("checkpoints")
    variables = to_tf_cells(CELLS, scope="enc/")
    variables["dec/cudnn_gru/opaque_kernel"] = OPAQUE.params.copy()
    _run("write_checkpoints.py", str(out), pickle.dumps(variables).hex())
    with open(out / "expected.pkl", "rb") as handle:
        expected = pickle.load(handle)
    return out, expected


def test_read_back_bit_exact_without_tensorflow(checkpoints):
    out, _ = checkpoints
    assert _run("read_without_tf.py", str(out)).startswith("OK 2")


def test_crc32c_known_values():
    assert crc32c(b"123456789") == 0xE3069283
    data = np.random.default_rng(0).integers(0, 256, 100_003, dtype=np.uint8).tobytes()
    assert crc32c(data) == crc32c(data[40_000:], crc32c(data[:40_000]))  # lane path == continued scalar path
    assert crc32c(data[:5000]) == crc32c(data[1000:5000], crc32c(data[:1000]))


def test_listing_and_subset(checkpoints):
    out, expected = checkpoints
    listing = list_tf_checkpoint(out / "v1" / "model.index")
    assert listing["scalar"] == ("float32", ()) and listing["empty"] == ("float32", (0, 3))
    assert listing["text"] == ("object", (3,))
    subset = read_tf_checkpoint(out / "v1", names=["i64"])  # a directory: its 'checkpoint' file
    assert list(subset) == ["i64"] and np.array_equal(subset["i64"], expected["v1/model"]["i64"])
    with pytest.raises(KeyError, match="no tensors named"):
        read_tf_checkpoint(out / "v1" / "model", names=["nope"])


def test_find_rnn_weights_cells_and_opaque(checkpoints):
    out, _ = checkpoints
    tensors = read_tf_checkpoint(out / "v1" / "model")
    with pytest.raises(ValueError, match=r"opaque_kernel: 450 parameters fit \d+ configurations .*pass "):
        find_rnn_weights(tensors)
    found = find_rnn_weights(tensors, rnn_mode="gru", num_units=6, num_layers=2)
    assert found["dec/cudnn_gru/opaque_kernel"] == OPAQUE
    assert found["enc/stack_bidirectional_rnn/cudnn_compatible_lstm_cell"] == from_tf_cells(to_tf_cells(CELLS))
    with pytest.raises(ValueError, match="no CudnnRNN configuration with rnn_mode='lstm', num_layers=2, num_units=6"):
        find_rnn_weights(tensors, rnn_mode="lstm", num_units=6, num_layers=2)


def test_infer_config():
    w = random_weights("lstm", 2, "bidirectional", num_units=5)
    assert infer_config(w.params.size, rnn_mode="lstm", num_units=5, num_layers=2, direction="bidirectional") == \
        [w.config_dict()]
    assert len(infer_config(w.params.size, rnn_mode="lstm", num_units=5)) > 1
    for input_mode in ("skip_input", "auto_select"):  # auto_select with I == H is skip_input's size
        w = random_weights("gru", 2, "bidirectional", num_units=4, input_size=4, input_mode=input_mode)
        assert infer_config(w.params.size, rnn_mode="gru", num_units=4, num_layers=2, direction="bidirectional",
                            input_mode=input_mode) == [w.config_dict()]


def _corrupt_copy(src_dir, dst_dir, name, mutate):
    shutil.copytree(src_dir, dst_dir, dirs_exist_ok=True)
    path = os.path.join(dst_dir, name)
    with open(path, "rb") as handle:
        data = bytearray(handle.read())
    data = mutate(data)
    with open(path, "wb") as handle:
        handle.write(bytes(data))
    return os.path.join(dst_dir, "model")


def _same(a, b):
    return a.keys() == b.keys() and all(x.dtype == y.dtype and x.shape == y.shape and
                                        (list(x.ravel()) == list(y.ravel()) if x.dtype == object
                                         else x.tobytes() == y.tobytes()) for x, y in zip(a.values(), b.values()))


def test_every_index_byte_flip_and_truncation_is_caught(checkpoints, tmp_path):
    out, _ = checkpoints
    good = read_tf_checkpoint(out / "v1s" / "model")
    shutil.copytree(out / "v1s", tmp_path, dirs_exist_ok=True)
    index = (out / "v1s" / "model.index").read_bytes()
    outcomes = {"flip": 0, "truncate": 0}
    for position in range(len(index)):
        flipped = index[:position] + bytes([index[position] ^ 0x10]) + index[position + 1:]
        for kind, data in (("flip", flipped), ("truncate", index[:position])):
            (tmp_path / "model.index").write_bytes(data)
            try:
                result = read_tf_checkpoint(tmp_path / "model")
            except ValueError as exc:
                assert "model" in str(exc)
                outcomes[kind] += 1
            else:  # only bytes never read (the metaindex block, its handle, footer padding) may change
                assert kind == "flip" and _same(result, good), (kind, position)
    assert outcomes["truncate"] == len(index) and outcomes["flip"] > len(index) - 64


@pytest.mark.parametrize("where", ["flip", "truncate", "missing"])
def test_corrupt_data_shard(checkpoints, tmp_path, where):
    out, _ = checkpoints
    shard = "model.data-00000-of-00001"
    mutate = {"flip": lambda d: d[:9] + bytes([d[9] ^ 1]) + d[10:], "truncate": lambda d: d[:-3],
              "missing": lambda d: d}[where]
    prefix = _corrupt_copy(out / "v1", tmp_path, shard, mutate)
    if where == "missing":
        os.remove(os.path.join(tmp_path, shard))
    message = {"flip": "fails its CRC32C check", "truncate": "truncated file", "missing": "cannot open"}[where]
    with pytest.raises(ValueError, match=message):
        read_tf_checkpoint(prefix)


def test_not_a_checkpoint(tmp_path):
    (tmp_path / "x.index").write_bytes(b"\x00" * 100)
    with pytest.raises(ValueError, match="bad table magic number"):
        read_tf_checkpoint(tmp_path / "x")
    (tmp_path / "y.index").write_bytes(b"abc")
    with pytest.raises(ValueError, match="shorter than the 48-byte table footer"):
        read_tf_checkpoint(tmp_path / "y")
    assert mask_crc(0) == 0xA282EAD8


def test_keras_weights_h5(tmp_path):
    h5py = pytest.importorskip("h5py", reason="h5py reads Keras .weights.h5 files")
    w = random_weights("gru", 1, "bidirectional")
    from fusedrnn.convert import to_keras_weights
    arrays = to_keras_weights(w)[0]
    with h5py.File(tmp_path / "m.weights.h5", "w") as handle:  # the layout Keras 3 writes
        for k, direction in enumerate(("forward_layer", "backward_layer")):
            for v in range(3):
                handle[f"layers/bidirectional/{direction}/cell/vars/{v}"] = arrays[3 * k + v]
        handle["layers/dense/vars/0"] = np.zeros((8, 2), np.float32)
    found = find_rnn_weights(read_keras_weights(tmp_path / "m.weights.h5"))
    assert found == {"layers/bidirectional": w}


def _cli(*argv):
    parser = argparse.ArgumentParser(prog="fusedrnn")
    cli.register(parser.add_subparsers())
    args = parser.parse_args(["convert", *map(str, argv)])
    return args.func(args)


def test_cli(checkpoints, tmp_path, capsys):
    out, _ = checkpoints
    assert _cli(out / "v2" / "ckpt", "--list") == 0
    listed = capsys.readouterr().out
    assert re.search(r"_operations/1\tlstm, 1 layer\(s\), unidirectional, input_size=3, num_units=4", listed)
    assert _cli(out / "v2" / "ckpt", tmp_path / "a.npz") == 1
    assert "holds 2 RNNs" in capsys.readouterr().err
    name = "enc/stack_bidirectional_rnn/cudnn_compatible_lstm_cell"
    assert _cli(out / "v1" / "model", tmp_path / "a.npz", "--name", name, "--rnn-mode", "gru", "--num-units", "6",
                "--num-layers", "2") == 0
    assert CudnnWeights.load(tmp_path / "a.npz") == from_tf_cells(to_tf_cells(CELLS))
    capsys.readouterr()
    assert _cli(tmp_path / "a.npz", tmp_path / "b.txt") == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "DST must end in .npz, .pt or .onnx" in err
    pytest.importorskip("onnx", reason="ONNX export")
    assert _cli(tmp_path / "a.npz", tmp_path / "a.onnx") == 0
    pytest.importorskip("torch", reason="PyTorch export")
    assert _cli(tmp_path / "a.npz", tmp_path / "a.pt") == 0
    assert _cli(tmp_path / "a.pt", tmp_path / "c.npz") == 0
    assert CudnnWeights.load(tmp_path / "c.npz") == CudnnWeights.load(tmp_path / "a.npz")


def test_legacy_h5_names_and_tf1_cells_are_not_keras(tmp_path):
    """Legacy HDF5 names (Keras 3 ``model.save('x.h5')``, TF1 CuDNNLSTM ``cu_dnnlstm_1/kernel:0``);
    a TF1 ``lstm_cell`` (one kernel, no recurrent_kernel, ICFO) must not be taken for Keras."""
    from fusedrnn.convert import to_keras_weights
    lstm, gru = random_weights("lstm"), random_weights("gru", 1, "bidirectional")
    k, legacy = to_keras_weights(lstm)[0], to_keras_weights(gru, legacy_cudnn=True)[0]
    tensors = {f"model_weights/lstm/sequential/lstm/lstm_cell/{v}": a
               for v, a in zip(("kernel", "recurrent_kernel", "bias"), k)}
    for d, direction in enumerate(("forward", "backward")):
        for v, a in zip(("kernel", "recurrent_kernel", "bias"), legacy[3 * d:3 * d + 3]):
            tensors[f"model_weights/bidirectional_1/{direction}_cu_dnngru_1/{v}:0"] = a
    found = find_rnn_weights(tensors)
    assert found["model_weights/lstm/sequential/lstm"].params.tobytes() == \
        find_rnn_weights({f"layers/lstm/cell/vars/{i}": a for i, a in enumerate(k)})["layers/lstm"].params.tobytes()
    assert found["model_weights/bidirectional_1"] == gru
    cells = to_tf_cells(lstm, cell="lstm_cell", forget_bias=1.0)
    assert list(find_rnn_weights(cells, forget_bias=1.0)) == ["rnn/lstm_cell"]
