"""The ``reserve_space`` buffer: what a CudnnRNN forward keeps for its backprop.

Layout (bytes; the array handed to the user is these bytes viewed as dtype T,
1-D, so a float16 op still keeps its float32 intermediates exactly)::

    header   16 × int64: magic "FRNNRSV1", version, then the configuration
             (mode, L, D, T, B, I, H, P, skip_input, dropout_applied, compute itemsize)
    lengths  B × int64: the sequence lengths the forward used
    data     compute dtype (float32 for float16/float32 ops, float64 for float64),
             the named arrays of :func:`reserve_items`, back to back, C order.

Per pseudo-layer ``p`` (layer-major, forward direction first) the engine trace, in
scan order (a backward direction's arrays run from t = T-1 down to 0):

    lstm:     gates [T, B, 4H] (i, f, c', o activations), c [T+1, B, H], co [T, B, H],
              h [T+1, B, Hout]
    gru:      gates [T, B, 3H] (r, u, h'), q_h [T, B, H] (R_h h_{t-1} + bR_h), h [T+1, B, H]
    rnn_*:    h [T+1, B, H]

then, for each layer ``l >= 1``, ``layer_input_l`` [T, B, D*Hout] (the layer's input,
after dropout, time order) and, when dropout was applied, ``dropout_mask_l``
[T, B, D*Hout] (0 or 1/(1-dropout); all 0 when dropout = 1).
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numpy as np

from .engines.buffers import aligned_empty
from .layout import RNN_MODES, RNNConfig

MAGIC = int.from_bytes(b"FRNNRSV1", "little")
VERSION = 1
HEADER_WORDS = 16
HEADER_BYTES = HEADER_WORDS * 8


def trace_items(mode: str, T: int, B: int, H: int, Hout: int) -> list:
    """(name, shape) of one pseudo-layer's engine trace, in the order the engine returns it."""
    if mode == "lstm":
        return [("gates", (T, B, 4 * H)), ("c", (T + 1, B, H)), ("co", (T, B, H)),
                ("h", (T + 1, B, Hout))]
    if mode == "gru":
        return [("gates", (T, B, 3 * H)), ("q_h", (T, B, H)), ("h", (T + 1, B, H))]
    return [("h", (T + 1, B, H))]


def reserve_items(config: RNNConfig, T: int, B: int, dropout_applied: bool) -> list:
    items = []
    for p in range(config.num_pseudo_layers):
        for name, shape in trace_items(config.rnn_mode, T, B, config.num_units, config.hidden_out):
            items.append((f"p{p}.{name}", shape))
    width = config.num_dirs * config.hidden_out
    for layer in range(1, config.num_layers):
        items.append((f"layer_input_{layer}", (T, B, width)))
        if dropout_applied:
            items.append((f"dropout_mask_{layer}", (T, B, width)))
    return items


def _header(config: RNNConfig, T: int, B: int, dropout_applied: bool, compute: np.dtype) -> list:
    return [MAGIC, VERSION, RNN_MODES.index(config.rnn_mode), config.num_layers, config.num_dirs,
            T, B, config.input_size, config.num_units, config.num_proj, int(config.skip_input),
            int(dropout_applied), compute.itemsize, 0, 0, 0]


def reserve_nbytes(config: RNNConfig, T: int, B: int, dropout_applied: bool, compute: np.dtype) -> int:
    """Exact size in bytes, in closed form with Python integers (no per-layer loop, no overflow)."""
    per_pseudo_layer = sum(math.prod(shape) for _, shape in
                           trace_items(config.rnn_mode, T, B, config.num_units, config.hidden_out))
    per_layer_input = T * B * config.num_dirs * config.hidden_out * (2 if dropout_applied else 1)
    elements = config.num_pseudo_layers * per_pseudo_layer + (config.num_layers - 1) * per_layer_input
    return HEADER_BYTES + 8 * B + elements * compute.itemsize


class _Layout(NamedTuple):
    """Where everything of one configuration's reserve lives (byte offsets into the buffer)."""

    nbytes: int  # reserve_nbytes
    used: int  # header, lengths and the named arrays (the rest is the alignment tail)
    header: tuple  # the 16 header words
    items: tuple  # (name, byte offset, shape) of each named array


@functools.lru_cache(maxsize=256)
def _layout(config: RNNConfig, T: int, B: int, dropout_applied: bool, compute: np.dtype) -> _Layout:
    offset = HEADER_BYTES + 8 * B
    items = []
    for name, shape in reserve_items(config, T, B, dropout_applied):
        items.append((name, offset, shape))
        offset += math.prod(shape) * compute.itemsize
    return _Layout(reserve_nbytes(config, T, B, dropout_applied, compute), offset,
                   tuple(_header(config, T, B, dropout_applied, compute)), tuple(items))


class ReserveWriter:
    """Allocates the buffer and hands out writable, named views of its data part."""

    def __init__(self, config: RNNConfig, T: int, B: int, lengths: np.ndarray,
                 dropout_applied: bool, compute: np.dtype, dtype: np.dtype):
        layout = _layout(config, T, B, dropout_applied, compute)
        nbytes = layout.nbytes + (-layout.nbytes) % dtype.itemsize
        # not zeros: calloc hands out fresh zero pages, each faulted in while the
        # engines record (about 0.2 ms per MiB); every byte is written below or by the engines
        # except the alignment tail, zeroed here so the buffer's bytes stay deterministic.
        # The data part starts on a 64-byte line (the views' sizes keep it for one another when
        # H·itemsize is a multiple of 64): the native engine's threads write disjoint column
        # ranges of them every step, which must not share a line (engines.buffers.aligned_empty).
        data = HEADER_BYTES + 8 * B
        padded = aligned_empty(nbytes + 64, np.uint8)  # recycled across calls (engines.buffers)
        start = -data % 64
        self.raw = padded[start:start + nbytes]
        self.raw[layout.used:] = 0
        words = self.raw[:data].view(np.int64)
        words[:HEADER_WORDS] = layout.header
        words[HEADER_WORDS:] = lengths
        self.views = _views(self.raw, layout, compute)
        self.dtype = dtype

    def array(self) -> np.ndarray:
        return self.raw.view(self.dtype)


def _views(raw: np.ndarray, layout: _Layout, compute: np.dtype) -> dict:
    return {name: np.ndarray(shape, compute, raw, offset) for name, offset, shape in layout.items}


def read_reserve(reserve: np.ndarray, config: RNNConfig, T: int, B: int, lengths: np.ndarray,
                 compute: np.dtype) -> tuple[dict, bool]:
    """Check that ``reserve`` came from a training forward of this configuration.

    Returns (read-only named views, dropout_applied).  Raises ValueError otherwise.
    """
    if reserve.ndim == 0:
        raise ValueError("reserve_space is the placeholder of a forward that ran with "
                         "is_training=False; run the forward with is_training=True to get gradients")
    if reserve.ndim != 1:
        raise ValueError(f"reserve_space must be 1-D, got shape {list(reserve.shape)}")
    raw = np.ascontiguousarray(reserve).view(np.uint8)
    if raw.size < HEADER_BYTES or int(raw[:HEADER_BYTES].view(np.int64)[0]) != MAGIC:
        raise ValueError("reserve_space was not produced by a fusedrnn CudnnRNN forward with "
                         f"is_training=True (got {reserve.size} elements without the fusedrnn header)")
    header = raw[:HEADER_BYTES].view(np.int64).tolist()
    if header[1] != VERSION:
        raise ValueError(f"reserve_space has layout version {header[1]}, this fusedrnn reads version {VERSION}")
    dropout_applied = bool(header[11])
    layout = _layout(config, T, B, dropout_applied, compute)
    expected = list(layout.header)
    if header != expected:
        names = ["magic", "version", "rnn_mode", "num_layers", "num_dirs", "max_time", "batch_size",
                 "input_size", "num_units", "num_proj", "skip_input", "dropout", "itemsize"]
        def show(k: int, value: int):
            if names[k] == "rnn_mode" and 0 <= value < len(RNN_MODES):
                return RNN_MODES[value]
            return value

        diffs = [f"{n}: forward {show(k, header[k])}, backprop {show(k, expected[k])}"
                 for k, n in enumerate(names) if header[k] != expected[k]]
        raise ValueError("reserve_space does not match this backprop's configuration ("
                         + "; ".join(diffs) + ")")
    nbytes = layout.nbytes
    if raw.size < nbytes or raw.size - nbytes >= reserve.dtype.itemsize:
        raise ValueError(f"reserve_space has {reserve.size} elements, expected "
                         f"{-(-nbytes // reserve.dtype.itemsize)} for this configuration")
    stored_lengths = raw[HEADER_BYTES:HEADER_BYTES + 8 * B].view(np.int64)
    if stored_lengths.tobytes() != np.asarray(lengths, np.int64).tobytes():  # both [B] int64
        raise ValueError("sequence_lengths differ from the ones the forward pass used: "
                         f"forward {stored_lengths.tolist()}, backprop {np.asarray(lengths).tolist()}")
    return _views(raw, layout, compute), dropout_applied
