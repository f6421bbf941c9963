"""Read the checkpoints of write_checkpoints.py with fusedrnn only and compare bit for bit.
Exits non-zero (with a message) on any mismatch or if TensorFlow got imported."""

import os
import pickle
import sys

import numpy as np

import fusedrnn
from fusedrnn.convert import find_rnn_weights, read_tf_checkpoint

out = sys.argv[1]
with open(os.path.join(out, "expected.pkl"), "rb") as handle:
    expected = pickle.load(handle)
for prefix in ("v1/model", "v1s/model", "v2/ckpt", "v2s/ckpt"):
    tensors = read_tf_checkpoint(os.path.join(out, prefix))
    for name, value in expected[prefix].items():
        got = tensors[name]
        value = np.asarray(value)
        assert got.dtype == value.dtype and got.shape == value.shape, (prefix, name, got.dtype, value.dtype, got.shape)
        if value.dtype == object:
            assert list(got.ravel()) == list(value.ravel()), (prefix, name)
        else:
            assert got.tobytes() == value.tobytes(), (prefix, name)
found = find_rnn_weights(os.path.join(out, "v2s", "ckpt"))
assert found == find_rnn_weights(os.path.join(out, "v2", "ckpt"))
lstm, gru = (found[k] for k in sorted(found))
x = expected["keras"]["x"].transpose(1, 0, 2)
lengths = np.full(2, 6, np.int32)
y1 = fusedrnn.cudnn_rnn_v3(x, np.zeros((1, 2, 4), np.float32), np.zeros((1, 2, 4), np.float32), lstm.params,
                           lengths, **lstm.attrs).output
np.testing.assert_allclose(y1.transpose(1, 0, 2), expected["keras"]["lstm"], atol=2e-6, rtol=0)
y2 = fusedrnn.cudnn_rnn_v3(y1, np.zeros((2, 2, 5), np.float32), np.zeros((), np.float32), gru.params, lengths,
                           **gru.attrs).output
np.testing.assert_allclose(y2.transpose(1, 0, 2), expected["keras"]["model"], atol=2e-6, rtol=0)
assert "tensorflow" not in sys.modules and "keras" not in sys.modules, "TensorFlow was imported"
print("OK", len(found))
