"""``CudnnWeights``: one CudnnRNN model = its opaque ``params`` plus the attributes that decode it.

Every converter in :mod:`fusedrnn.convert` goes through this description.  The offsets inside
``params`` are known only to :mod:`fusedrnn.layout`; here the buffer is read and written with the
public ``CudnnRNNParamsToCanonicalV2`` / ``CudnnRNNCanonicalToParamsV2`` ops and regrouped per
pseudo-layer (``p = layer * D + direction``).

Per pseudo-layer (``PseudoLayer``), in cuDNN's gate order (lstm ``i, f, c, o``; gru ``r, u, h'``;
rnn one gate)::

    W[k]  [H, in_l]   input matrices   (in_0 = I, in_l = D*Hout; [H, 0] with skip_input in layer 0)
    R[k]  [H, Hout]   recurrent matrices
    bW[k], bR[k]  [H] input / recurrent biases: gate_k = W[k] x + bW[k] + R[k] h + bR[k]
    proj  [P, H] or None   LSTM projection h = W_P (o * tanh(c))
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from .. import cudnn, layout
from ..validate import choice_attr, float_arrays, int_scalar, shape_str

_CONFIG_FIELDS = ("rnn_mode", "num_layers", "num_units", "input_size", "direction", "input_mode",
                  "num_proj")


class PseudoLayer(NamedTuple):
    """One direction of one layer, as lists of per-gate arrays in cuDNN gate order."""

    W: list
    R: list
    bW: list
    bR: list
    proj: np.ndarray | None = None


@dataclass(frozen=True)
class CudnnWeights:
    """A CudnnRNN model: ``params`` (1-D, cuDNN's opaque layout) and the attributes decoding it.

    ``fusedrnn.cudnn_rnn_v3(x, h0, c0, w.params, lengths, **w.attrs)`` runs the model.
    ``params`` is stored as a read-only copy; its length must equal ``CudnnRNNParamsSize`` of the
    configuration (a mismatch raises ``ValueError`` naming both sizes and the configuration).
    """

    params: np.ndarray
    rnn_mode: str
    num_layers: int
    num_units: int
    input_size: int
    direction: str = "unidirectional"
    input_mode: str = "linear_input"
    num_proj: int = 0

    def __post_init__(self):
        for name in ("num_layers", "num_units", "input_size", "num_proj"):
            object.__setattr__(self, name, int_scalar(getattr(self, name), name))
        choice_attr(self.rnn_mode, "rnn_mode", layout.RNN_MODES)
        choice_attr(self.direction, "direction", layout.DIRECTIONS)
        choice_attr(self.input_mode, "input_mode", layout.INPUT_MODES)
        expected = int(cudnn.cudnn_rnn_params_size(self.num_layers, self.num_units, self.input_size,
                                                   S=np.int64, **self.attrs)[0])
        arrays, _ = float_arrays({"params": self.params})
        params = arrays["params"]
        if params.ndim != 1:
            raise ValueError(f"params must be a 1-D vector, got shape {shape_str(params.shape)}")
        if params.shape[0] != expected:
            raise ValueError(f"params has {params.shape[0]} elements, but CudnnRNNParamsSize of "
                             f"{self.config.describe()} is {expected}")
        params = np.array(params, copy=True)
        params.flags.writeable = False
        object.__setattr__(self, "params", params)

    # -- description -------------------------------------------------------------------------
    @property
    def attrs(self) -> dict:
        """The CudnnRNN op attributes: ``rnn_mode, input_mode, direction, num_proj``."""
        return dict(rnn_mode=self.rnn_mode, input_mode=self.input_mode, direction=self.direction,
                    num_proj=self.num_proj)

    @property
    def config(self) -> layout.RNNConfig:
        """The resolved configuration (``auto_select`` decided, as the ops decide it)."""
        attrs = cudnn._attrs(self.rnn_mode, self.input_mode, self.direction, 0.0, 0, 0, self.num_proj)
        return cudnn._param_config(attrs, self.num_layers, self.num_units, self.input_size)

    @property
    def num_dirs(self) -> int:
        return 2 if self.direction == "bidirectional" else 1

    @property
    def dtype(self) -> np.dtype:
        return self.params.dtype

    def config_dict(self) -> dict:
        return {name: getattr(self, name) for name in _CONFIG_FIELDS}

    def replace(self, params=None, **changes) -> "CudnnWeights":
        fields = self.config_dict()
        fields.update(changes)
        return CudnnWeights(self.params if params is None else params, **fields)

    # -- canonical form ------------------------------------------------------------------------
    def canonical(self) -> cudnn.CanonicalParams:
        """``(weights, biases)`` as ``CudnnRNNParamsToCanonicalV2`` returns them (spec §6.2)."""
        config = self.config
        return cudnn.cudnn_rnn_params_to_canonical_v2(
            self.num_layers, self.num_units, self.input_size, self.params,
            num_params_weights=config.num_weights, num_params_biases=config.num_biases, **self.attrs)

    @classmethod
    def from_canonical(cls, weights, biases, *, rnn_mode, num_layers, num_units, input_size,
                       direction="unidirectional", input_mode="linear_input", num_proj=0) -> "CudnnWeights":
        """Pack canonical lists (``CudnnRNNCanonicalToParamsV2``'s inputs) into a ``CudnnWeights``."""
        attrs = dict(rnn_mode=rnn_mode, input_mode=input_mode, direction=direction, num_proj=num_proj)
        params = cudnn.cudnn_rnn_canonical_to_params_v2(num_layers, num_units, input_size, list(weights),
                                                        list(biases), **attrs)
        return cls(params, num_layers=num_layers, num_units=num_units, input_size=input_size, **attrs)

    def pseudo_layers(self) -> list:
        """The canonical lists regrouped: one :class:`PseudoLayer` per ``p = layer*D + direction``."""
        config = self.config
        weights, biases = self.canonical()
        G, nw, nb = config.num_gates, config.weights_per_pseudo_layer, config.biases_per_pseudo_layer
        result = []
        for p in range(config.num_pseudo_layers):
            w, b = weights[p * nw:(p + 1) * nw], biases[p * nb:(p + 1) * nb]
            result.append(PseudoLayer(w[:G], w[G:2 * G], b[:G], b[G:], w[2 * G] if nw > 2 * G else None))
        return result

    @classmethod
    def from_pseudo_layers(cls, layers, **config) -> "CudnnWeights":
        """Inverse of :meth:`pseudo_layers` (``config``: the fields other than ``params``)."""
        weights, biases = [], []
        for layer in layers:
            weights += list(layer.W) + list(layer.R) + ([layer.proj] if layer.proj is not None else [])
            biases += list(layer.bW) + list(layer.bR)
        return cls.from_canonical(weights, biases, **config)

    def with_linear_input(self) -> "CudnnWeights":
        """The same model with ``linear_input``: a ``skip_input`` layer 0 (``gate_k = x + ...``) gets
        identity input matrices ``W[k] = I_H``.  Exact for finite inputs (``x*1 + 0`` is ``x``); lets
        formats without skip_input (PyTorch, Keras, ONNX) hold the model."""
        if not self.config.skip_input:
            return self.replace(input_mode="linear_input")
        layers = self.pseudo_layers()
        eye = np.eye(self.num_units, dtype=self.dtype)
        for p in range(self.num_dirs):
            layers[p] = layers[p]._replace(W=[eye] * len(layers[p].W))
        fields = self.config_dict()
        fields["input_mode"] = "linear_input"
        return CudnnWeights.from_pseudo_layers(layers, **fields)

    @classmethod
    def stack(cls, layers) -> "CudnnWeights":
        """Stack single-layer models (each ``num_layers=1``, same mode/direction/units) into one
        multi-layer model: layer ``l+1`` reads layer ``l``'s ``D*Hout`` output, as cuDNN does."""
        layers = list(layers)
        if not layers:
            raise ValueError("stack needs at least one CudnnWeights, got none")
        first = layers[0]
        pseudo = []
        for k, w in enumerate(layers):
            same = (w.rnn_mode, w.direction, w.num_units, w.num_proj, w.dtype) == \
                   (first.rnn_mode, first.direction, first.num_units, first.num_proj, first.dtype)
            if not same:
                raise ValueError(f"stack: layer {k} is {w.config.describe()} ({w.dtype}), layer 0 is "
                                 f"{first.config.describe()} ({first.dtype}); all must share mode, direction, "
                                 "units, projection and dtype")
            if k > 0 and w.input_size != first.num_dirs * first.config.hidden_out:
                raise ValueError(f"stack: layer {k} has input_size={w.input_size}, but layer {k - 1} "
                                 f"outputs {first.num_dirs * first.config.hidden_out} features")
            if k > 0 and w.config.skip_input:
                raise ValueError(f"stack: layer {k} uses skip_input, which cuDNN allows only in layer 0")
            pseudo += w.pseudo_layers()
        fields = first.config_dict()
        fields["num_layers"] = len(layers)
        return cls.from_pseudo_layers(pseudo, **fields)

    def layer(self, index: int) -> "CudnnWeights":
        """Layer ``index`` alone, as a single-layer model."""
        if not 0 <= index < self.num_layers:
            raise ValueError(f"layer index must be in [0, {self.num_layers}), got {index}")
        D = self.num_dirs
        fields = self.config_dict()
        fields.update(num_layers=1, input_size=self.config.layer_input_size(index))
        if index > 0:
            fields["input_mode"] = "linear_input"
        return CudnnWeights.from_pseudo_layers(self.pseudo_layers()[index * D:(index + 1) * D], **fields)

    # -- files ---------------------------------------------------------------------------------
    def save(self, path) -> None:
        """Write ``path`` (``.npz``): ``params`` and ``config`` (a JSON string of the attributes)."""
        with open(path, "wb") as handle:
            np.savez(handle, params=self.params, config=np.array(json.dumps(self.config_dict())))

    @classmethod
    def load(cls, path) -> "CudnnWeights":
        """Read a file written by :meth:`save` (no pickles are loaded)."""
        with np.load(path, allow_pickle=False) as data:
            missing = {"params", "config"} - set(data.files)
            if missing:
                raise ValueError(f"{path} is not a CudnnWeights file: missing {sorted(missing)} "
                                 f"(has {sorted(data.files)})")
            config = json.loads(str(data["config"]))
            params = data["params"]
        unknown = set(config) - set(_CONFIG_FIELDS)
        if unknown:
            raise ValueError(f"{path}: unknown config fields {sorted(unknown)}")
        return cls(params, **config)

    def __eq__(self, other):
        if not isinstance(other, CudnnWeights):
            return NotImplemented
        return (self.config_dict() == other.config_dict() and self.dtype == other.dtype
                and np.array_equal(self.params, other.params))

    __hash__ = None

    def __repr__(self):
        return f"CudnnWeights({self.config.describe()}, {self.params.size} x {self.dtype})"


def require_no_loss(w: CudnnWeights, target: str, *, projection=True, skip_input=True) -> None:
    """Raise ValueError when ``target`` cannot hold ``w`` exactly, naming what would be lost."""
    if projection and w.num_proj:
        raise ValueError(f"{target} has no LSTM projection: converting {w.config.describe()} would lose "
                         f"the [num_proj={w.num_proj}, num_units={w.num_units}] projection matrices")
    if skip_input and w.config.skip_input:
        raise ValueError(f"{target} has no skip_input: converting {w.config.describe()} would lose the "
                         "identity input of layer 0; call w.with_linear_input() first (exact: W = identity)")
