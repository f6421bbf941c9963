"""Recognise RNN weights among checkpoint tensors and return them as :class:`CudnnWeights`.

Recognised (names as TF and Keras write them):

* ``.../opaque_kernel`` (``tf.contrib.cudnn_rnn`` layers' opaque buffer, also under
  ``/.ATTRIBUTES/VARIABLE_VALUE``): a 1-D buffer whose configuration is not stored.  Whatever the
  caller does not pass is inferred from the buffer size (``CudnnRNNParamsSize`` solved for the
  unknowns); an ambiguous size raises ValueError listing the candidates and the argument to pass;
* TF cell variables (``rnn/multi_rnn_cell/cell_0/cudnn_compatible_lstm_cell/kernel`` ...;
  :func:`fusedrnn.convert.from_tf_cells`);
* Keras layers in TF2 object-based checkpoints (``.../cell/kernel/.ATTRIBUTES/VARIABLE_VALUE``,
  ``recurrent_kernel``, ``bias``; ``forward_layer``/``backward_layer`` of Bidirectional), in Keras 3
  ``.weights.h5`` files (``layers/lstm/cell/vars/0..2``), in legacy HDF5 model files
  (``model_weights/lstm/.../lstm_cell/kernel[:0]``, ``forward_gru/gru_cell/...``) and TF1 Keras
  ``CuDNNLSTM``/``CuDNNGRU`` HDF5 weights (``cu_dnnlstm_1/kernel:0``, read with ``legacy_cudnn``).
  One :class:`CudnnWeights` per Keras layer.
"""

from __future__ import annotations

import re

import numpy as np

from .. import layout
from ._keras import _pseudo_layer
from ._tf_cells import _NAME as _CELL_NAME, from_tf_cells
from ._weights import CudnnWeights

_KERAS_TF = re.compile(r"^(?P<path>.*?)/?(?:(?P<dir>forward_layer|backward_layer)/)?cell/"
                       r"(?P<var>kernel|recurrent_kernel|bias)/\.ATTRIBUTES/VARIABLE_VALUE$")
_KERAS_H5 = re.compile(r"^(?P<path>.*?)/?(?:(?P<dir>forward_layer|backward_layer)/)?cell/vars/(?P<var>[012])$")
_KERAS_LEGACY_H5 = re.compile(r"^(?P<path>.*?)/(?:(?P<dir>forward|backward)_\w+/)?(?:lstm_cell|gru_cell|simple_rnn_cell)"
                              r"(?:_\d+)?/(?P<var>kernel|recurrent_kernel|bias)(?::0)?$")
_CUDNN_LEGACY_H5 = re.compile(r"^(?P<path>.*?)/?(?:(?P<dir>forward|backward)_)?cu_dnn(?:lstm|gru)(?:_\d+)?/"
                              r"(?P<var>kernel|recurrent_kernel|bias)(?::0)?$")
_KERAS_PATTERNS = ((_KERAS_TF, False), (_KERAS_H5, False), (_KERAS_LEGACY_H5, False), (_CUDNN_LEGACY_H5, True))
_OPAQUE = re.compile(r"^(?P<path>.*opaque_kernel)(?:/\.ATTRIBUTES/VARIABLE_VALUE)?$")
_KERAS_VARS = {"0": "kernel", "1": "recurrent_kernel", "2": "bias"}
_MAX_LAYERS, _MAX_UNITS = 8, 4096


def infer_config(size: int, *, rnn_mode=None, num_layers=None, num_units=None, input_size=None,
                 direction=None, input_mode="linear_input", num_proj=0) -> list:
    """All configurations (dicts of CudnnWeights fields) whose CudnnRNNParamsSize is ``size``,
    with the given fields fixed (num_layers searched up to 8, num_units up to 4096)."""
    size = int(size)
    modes = [rnn_mode] if rnn_mode else list(layout.RNN_MODES)
    directions = [direction] if direction else list(layout.DIRECTIONS)
    layer_counts = [num_layers] if num_layers else range(1, _MAX_LAYERS + 1)
    unit_counts = [num_units] if num_units else range(1, _MAX_UNITS + 1)
    auto = input_mode == "auto_select"  # skip_input exactly when input_size == num_units
    found = []
    for mode in modes:
        G = layout.GATES[mode]
        for dirn in directions:
            D = 2 if dirn == "bidirectional" else 1
            for L in layer_counts:
                for H in unit_counts:
                    if num_proj and num_proj >= H:
                        continue
                    sizes = []
                    if input_mode in ("skip_input", "auto_select") and input_size in (None, H):
                        sizes.append(H)
                    if input_mode != "skip_input":
                        if input_size:
                            sizes.append(input_size)
                        else:  # params_size is linear in input_size: solve for it
                            base = layout.RNNConfig(mode, L, H, 1, D, False, num_proj).params_size - D * G * H
                            I, rem = divmod(size - base, D * G * H)
                            if not rem and I >= 1:
                                sizes.append(I)
                    for I in dict.fromkeys(sizes):
                        skip = input_mode == "skip_input" or (auto and I == H)
                        if layout.RNNConfig(mode, L, H, I, D, skip, num_proj).params_size == size:
                            found.append(dict(rnn_mode=mode, num_layers=L, num_units=H, input_size=I,
                                              direction=dirn, input_mode=input_mode, num_proj=num_proj))
    return found


def _opaque(name: str, params: np.ndarray, hints: dict) -> CudnnWeights:
    if params.ndim != 1:
        raise ValueError(f"{name}: an opaque_kernel must be 1-D, got shape {list(params.shape)}")
    candidates = infer_config(params.size, **hints)
    if len(candidates) == 1:
        return CudnnWeights(params, **candidates[0])
    given = ", ".join(f"{k}={v!r}" for k, v in hints.items() if v is not None) or "nothing"
    if not candidates:
        raise ValueError(f"{name}: no CudnnRNN configuration with {given} has {params.size} parameters")
    unknown = [k for k in ("rnn_mode", "num_units", "num_layers", "direction", "input_size") if hints.get(k) is None]
    shown = "; ".join(", ".join(f"{k}={c[k]}" for k in unknown) for c in candidates[:6])
    raise ValueError(f"{name}: {params.size} parameters fit {len(candidates)} configurations given {given} "
                     f"(e.g. {shown}); pass {', '.join(unknown)} to choose")


def _keras_layers(tensors: dict, rnn_mode) -> dict:
    groups = {}
    for name, value in tensors.items():
        for pattern, legacy in _KERAS_PATTERNS:
            match = pattern.match(name)
            if match:
                var = _KERAS_VARS.get(match["var"], match["var"])
                direction = "backward" if (match["dir"] or "").startswith("backward") else "forward"
                groups.setdefault((match["path"], legacy), {}).setdefault(direction, {})[var] = value
                break
    found = {}
    for (path, legacy), directions in groups.items():
        lists = [[parts[v] for v in ("kernel", "recurrent_kernel", "bias") if v in parts]
                 for parts in (directions.get("forward"), directions.get("backward")) if parts]
        if any("kernel" not in parts or "recurrent_kernel" not in parts for parts in directions.values()):
            continue  # not a Keras layer (e.g. a TF1 lstm_cell: one kernel [in+H, 4H], no recurrent_kernel)
        kernel, recurrent = np.asarray(lists[0][0]), np.asarray(lists[0][1])
        if kernel.ndim != 2 or recurrent.ndim != 2 or recurrent.shape[1] % recurrent.shape[0]:
            continue  # some other layer with a cell (not one cuDNN runs)
        gates = recurrent.shape[1] // recurrent.shape[0]
        mode = {4: "lstm", 3: "gru"}.get(gates, rnn_mode)
        if mode is None:
            raise ValueError(f"{path}: a Keras SimpleRNN does not store its activation: pass rnn_mode='rnn_tanh' "
                             "or 'rnn_relu'")
        if mode == "gru" and not legacy and len(lists[0]) > 2 and np.asarray(lists[0][2]).ndim != 2:
            raise ValueError(f"{path}: Keras GRU with reset_after=False (bias [3H]) is not cuDNN's GRU")
        pseudo = [_pseudo_layer(mode, weights, legacy) for weights in lists]
        found[path] = CudnnWeights.from_pseudo_layers(
            pseudo, rnn_mode=mode, num_layers=1, num_units=recurrent.shape[0], input_size=kernel.shape[0],
            direction="bidirectional" if len(lists) == 2 else "unidirectional")
    return found


def find_rnn_weights(tensors, *, rnn_mode=None, num_layers=None, num_units=None, input_size=None, direction=None,
                     input_mode="linear_input", num_proj=0, forget_bias=None) -> dict:
    """``{name: CudnnWeights}`` for every RNN found in ``tensors`` (a ``{name: array}`` dict, e.g. from
    :func:`read_tf_checkpoint`, or a checkpoint prefix).  The configuration arguments are hints for
    opaque buffers (module doc); ``rnn_mode`` also decides rnn_tanh/rnn_relu for cells and SimpleRNN;
    ``forget_bias`` is passed to :func:`from_tf_cells` for ``lstm_block_cell``/``lstm_cell``."""
    if not isinstance(tensors, dict):
        from .checkpoint import read_tf_checkpoint
        tensors = read_tf_checkpoint(tensors)
    hints = dict(rnn_mode=rnn_mode, num_layers=num_layers, num_units=num_units, input_size=input_size,
                 direction=direction, input_mode=input_mode, num_proj=num_proj)
    found = {}
    for name, value in tensors.items():
        match = _OPAQUE.match(name)
        if match:
            found[match["path"]] = _opaque(name, np.asarray(value), hints)
    cell_groups = {}
    for name in tensors:
        match = _CELL_NAME.match(name)
        if match:
            cell_groups.setdefault((match["scope"], match["cell"]), None)
    for scope, cell in cell_groups:
        subset = {k: v for k, v in tensors.items() if (m := _CELL_NAME.match(k)) and m["cell"] == cell}
        key = scope + ("rnn" if "stack_bidirectional_rnn" not in next(iter(subset)) else "stack_bidirectional_rnn")
        found[f"{key}/{cell}"] = from_tf_cells(subset, rnn_mode=rnn_mode, forget_bias=forget_bias, scope=scope)
    found.update(_keras_layers(tensors, rnn_mode))
    return found
