"""Shared helpers for the fusedrnn.convert tests: random models and the CudnnRNNV3 reference."""

import numpy as np

import fusedrnn
from fusedrnn.convert import CudnnWeights

MODES = ("lstm", "gru", "rnn_tanh", "rnn_relu")
DIRECTIONS = ("unidirectional", "bidirectional")
T, B, I, H = 5, 3, 3, 4
LENGTHS = np.array([5, 3, 1], np.int32)


def random_weights(mode="lstm", num_layers=1, direction="unidirectional", num_units=H, input_size=I, num_proj=0,
                   seed=0, dtype=np.float32, input_mode="linear_input") -> CudnnWeights:
    n = int(fusedrnn.cudnn_rnn_params_size(num_layers, num_units, input_size, rnn_mode=mode, direction=direction,
                                           num_proj=num_proj, input_mode=input_mode)[0])
    params = np.random.default_rng(seed).uniform(-0.6, 0.6, n).astype(dtype)
    return CudnnWeights(params, mode, num_layers, num_units, input_size, direction, input_mode, num_proj)


def random_inputs(w: CudnnWeights, seed=1, batch=B, time=T):
    rng = np.random.default_rng(seed)
    LD = w.num_layers * w.num_dirs
    x = rng.standard_normal((time, batch, w.input_size)).astype(w.dtype)
    h0 = (0.5 * rng.standard_normal((LD, batch, w.config.hidden_out))).astype(w.dtype)
    c0 = (0.5 * rng.standard_normal((LD, batch, w.num_units))).astype(w.dtype)
    return x, h0, c0


def reference(w: CudnnWeights, x, h0, c0, lengths):
    """CudnnRNNV3 inference outputs (output, output_h, output_c)."""
    return fusedrnn.cudnn_rnn_v3(x, h0, c0, w.params, lengths, is_training=False, **w.attrs)[:3]
