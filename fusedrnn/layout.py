"""The cuDNN opaque parameter layout: sizes, offsets, canonical <-> opaque.

This is the only module that knows where a weight lives inside ``params``.

Shape legend: ``L`` layers, ``D`` directions (1 or 2), ``G`` gates per cell
(rnn_relu/rnn_tanh 1, gru 3, lstm 4), ``H`` num_units (cell size), ``P`` num_proj
(0 = no projection), ``Hout`` = P if P > 0 else H, ``I`` input size.
Pseudo-layer ``p = layer * D + direction`` (direction 0 = forward, 1 = backward).

Per pseudo-layer the canonical lists hold, in cuDNN's linLayerID order::

    weights: W_0 .. W_{G-1}  [H, in_l]    input matrices (in_0 = I, in_l = D*Hout for l >= 1)
             R_0 .. R_{G-1}  [H, Hout]    recurrent matrices
             W_P             [P, H]       LSTM projection (only when P > 0)
    biases:  bW_0 .. bW_{G-1}, bR_0 .. bR_{G-1}   each [H]

Gate order: lstm ``i, f, c, o``; gru ``r, u, h'``; rnn a single gate.
With ``skip_input`` the layer-0 input matrices are absent: they take no space
in ``params`` and appear in the canonical list as zero-width ``[H, 0]`` arrays.

The opaque buffer (cuDNN's real layout, double bias, standard algorithm):
all weight matrices of all pseudo-layers first (pseudo-layer-major, linLayerID
order, each row-major), then all bias vectors (pseudo-layer-major, bW then bR).
No padding.  Worked example (lstm, I=3, H=5, L=2, D=2): 1080 elements; pseudo-
layer 0 ``W_i`` at 0, ``W_f`` at 15, ``R_i`` at 60; pseudo-layer 2 ``W_i`` at
320 (``[5, 10]``); biases from 920 (``bW_i`` of p0) to 1080.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple

import numpy as np

RNN_MODES = ("lstm", "gru", "rnn_tanh", "rnn_relu")
INPUT_MODES = ("linear_input", "skip_input", "auto_select")
DIRECTIONS = ("unidirectional", "bidirectional")
GATES = {"rnn_relu": 1, "rnn_tanh": 1, "gru": 3, "lstm": 4}


@dataclass(frozen=True)
class RNNConfig:
    """A fully resolved CudnnRNN model description.

    ``skip_input`` is the *resolved* input mode (``auto_select`` already decided).
    """

    rnn_mode: str
    num_layers: int
    num_units: int
    input_size: int
    num_dirs: int = 1
    skip_input: bool = False
    num_proj: int = 0

    @property
    def num_gates(self) -> int:
        return GATES[self.rnn_mode]

    @property
    def hidden_out(self) -> int:
        """Size of the emitted / fed-back state: P with projection, else H."""
        return self.num_proj if self.num_proj > 0 else self.num_units

    @property
    def num_pseudo_layers(self) -> int:
        return self.num_layers * self.num_dirs

    @property
    def weights_per_pseudo_layer(self) -> int:
        return 2 * self.num_gates + (1 if self.num_proj > 0 else 0)

    @property
    def biases_per_pseudo_layer(self) -> int:
        return 2 * self.num_gates

    def layer_input_size(self, layer: int) -> int:
        return self.input_size if layer == 0 else self.num_dirs * self.hidden_out

    def describe(self) -> str:
        text = (f"{self.rnn_mode}, {self.num_layers} layer(s), "
                f"{'bidirectional' if self.num_dirs == 2 else 'unidirectional'}, "
                f"input_size={self.input_size}, num_units={self.num_units}")
        if self.num_proj:
            text += f", num_proj={self.num_proj}"
        if self.skip_input:
            text += ", skip_input"
        return text

    def __hash__(self) -> int:  # once per instance: configurations key the per-shape caches
        return self._hash

    @cached_property
    def _hash(self) -> int:
        return hash((self.rnn_mode, self.num_layers, self.num_units, self.input_size, self.num_dirs,
                     self.skip_input, self.num_proj))

    @cached_property
    def regions(self) -> "ParamRegions":
        return _compute_regions(self)

    @property
    def num_weights(self) -> int:
        """Length of the canonical weights list (closed form: no regions are built)."""
        return self.num_pseudo_layers * self.weights_per_pseudo_layer

    @property
    def num_biases(self) -> int:
        return self.num_pseudo_layers * self.biases_per_pseudo_layer

    @property
    def params_size(self) -> int:
        """Elements of ``params`` (spec §6.4), in closed form with Python integers, so that
        huge sizes neither overflow int64 nor take time proportional to num_layers."""
        G, H, Hout, P, D = self.num_gates, self.num_units, self.hidden_out, self.num_proj, self.num_dirs
        per_layer = G * H * Hout + P * H + 2 * G * H  # recurrent, projection, biases
        first_in = 0 if self.skip_input else self.input_size
        return D * (self.num_layers * per_layer + G * H * first_in
                    + (self.num_layers - 1) * G * H * D * Hout)


class Region(NamedTuple):
    offset: int
    shape: tuple

    @property
    def size(self) -> int:
        return math.prod(self.shape)


class ParamRegions(NamedTuple):
    weights: list  # Region per canonical weight, canonical order
    biases: list  # Region per canonical bias, canonical order
    total: int


def _weight_shapes(config: RNNConfig, layer: int) -> list:
    G, H, Hout, P = config.num_gates, config.num_units, config.hidden_out, config.num_proj
    in_cols = 0 if (config.skip_input and layer == 0) else config.layer_input_size(layer)
    shapes = [(H, in_cols)] * G + [(H, Hout)] * G
    if P > 0:
        shapes.append((P, H))
    return shapes


@functools.lru_cache(maxsize=256)
def _compute_regions(config: RNNConfig) -> ParamRegions:
    """The regions of a configuration (cached: every op call of a model asks for the same few;
    a frozen dataclass hashes by value).  Read-only by convention."""
    offset = 0
    weights, biases = [], []
    for p in range(config.num_pseudo_layers):
        for shape in _weight_shapes(config, p // config.num_dirs):
            region = Region(offset, shape)
            weights.append(region)
            offset += region.size
    for p in range(config.num_pseudo_layers):
        for _ in range(config.biases_per_pseudo_layer):
            biases.append(Region(offset, (config.num_units,)))
            offset += config.num_units
    return ParamRegions(weights, biases, offset)


class PseudoLayerParams(NamedTuple):
    """Views into ``params`` for one pseudo-layer, gates stacked along rows.

    w_input [G*H, in] (None with skip_input in layer 0), w_recurrent [G*H, Hout],
    w_proj [P, H] or None, bias_input [G*H], bias_recurrent [G*H].
    """

    w_input: np.ndarray | None
    w_recurrent: np.ndarray
    w_proj: np.ndarray | None
    bias_input: np.ndarray
    bias_recurrent: np.ndarray


def pseudo_layer_views(flat: np.ndarray, config: RNNConfig, p: int) -> PseudoLayerParams:
    """Views of pseudo-layer ``p``'s parameters inside a flat ``params`` buffer.

    The same function serves the gradient buffer: writing into the returned views
    writes into ``flat``.
    """
    return PseudoLayerParams(*[None if spec is None else flat[spec[0]:spec[1]].reshape(spec[2])
                               for spec in _pseudo_layer_spans(config, p)])


@functools.lru_cache(maxsize=1024)
def _pseudo_layer_spans(config: RNNConfig, p: int) -> tuple:
    """``(start, stop, shape)`` in ``params`` of each :class:`PseudoLayerParams` field (None
    where the field is None); cached per configuration."""
    G, H, Hout = config.num_gates, config.num_units, config.hidden_out
    regions = config.regions
    w0 = p * config.weights_per_pseudo_layer
    b0 = p * config.biases_per_pseudo_layer

    def block(first: Region, count: int, rows: int, cols: int) -> tuple:
        shape = (count * rows, cols) if cols else (count * rows,)
        return first.offset, first.offset + count * rows * max(cols, 1), shape

    in_cols = regions.weights[w0].shape[1]
    w_input = None if in_cols == 0 else block(regions.weights[w0], G, H, in_cols)
    w_recurrent = block(regions.weights[w0 + G], G, H, Hout)
    w_proj = block(regions.weights[w0 + 2 * G], 1, config.num_proj, H) if config.num_proj > 0 else None
    bias_input = block(regions.biases[b0], G, H, 0)
    bias_recurrent = block(regions.biases[b0 + G], G, H, 0)
    return w_input, w_recurrent, w_proj, bias_input, bias_recurrent


def params_to_canonical(params: np.ndarray, config: RNNConfig) -> tuple[list, list]:
    """Split a flat buffer into the canonical ``weights`` (2-D) and ``biases`` lists (copies)."""
    regions = config.regions
    weights = [params[r.offset:r.offset + r.size].reshape(r.shape).copy() for r in regions.weights]
    biases = [params[r.offset:r.offset + r.size].copy() for r in regions.biases]
    return weights, biases


def canonical_to_params(weights, biases, config: RNNConfig, dtype) -> np.ndarray:
    """Pack canonical lists (already validated element counts) into a new flat buffer."""
    regions = config.regions
    params = np.empty(regions.total, dtype=dtype)
    for region, array in zip(regions.weights + regions.biases, list(weights) + list(biases)):
        params[region.offset:region.offset + region.size] = np.asarray(array).reshape(-1)
    return params
