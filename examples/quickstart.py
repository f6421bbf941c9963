"""Forward and backward of a 2-layer bidirectional cuDNN-style LSTM with variable lengths.

Run: python examples/quickstart.py
"""

import numpy as np

import fusedrnn

T, B, I, H, L = 6, 3, 4, 8, 2
rng = np.random.default_rng(0)
n = fusedrnn.cudnn_rnn_params_size(L, H, I, direction="bidirectional")[0]
params = rng.uniform(-0.3, 0.3, n).astype(np.float32)
x = rng.standard_normal((T, B, I), dtype=np.float32)
h0 = np.zeros((L * 2, B, H), np.float32)
c0 = np.zeros((L * 2, B, H), np.float32)
lengths = np.array([6, 4, 1], np.int32)

fwd = fusedrnn.cudnn_rnn_v3(x, h0, c0, params, lengths, direction="bidirectional")
grads = fusedrnn.cudnn_rnn_backprop_v3(
    x, h0, c0, params, lengths, fwd.output, fwd.output_h, fwd.output_c,
    np.ones_like(fwd.output), np.zeros_like(h0), np.zeros_like(c0),
    fwd.reserve_space, fwd.host_reserved, direction="bidirectional")

print("output", fwd.output.shape, "output_h", fwd.output_h.shape)
print("zero past each sequence's end:", not fwd.output[4:, 1].any() and not fwd.output[1:, 2].any())
print("input_backprop", grads.input_backprop.shape, "params_backprop", grads.params_backprop.shape)
print("|d loss / d params| =", float(np.linalg.norm(grads.params_backprop)))
