"""TF cell checkpoint variables and BlockLSTM weights <-> :class:`CudnnWeights` (spec §10.3,
block_ops §1.1).

TF cells compute ``gates = [x | h] @ kernel + bias`` (x rows first, then h rows).  The names are
those ``tf.contrib.cudnn_rnn``'s saveables write (``CudnnCompatible*Cell``), per layer ``l``::

    unidirectional   {scope}rnn/multi_rnn_cell/cell_{l}/{cell}/...
    bidirectional    {scope}stack_bidirectional_rnn/cell_{l}/bidirectional_rnn/{fw|bw}/{cell}/...

    cudnn_compatible_lstm_cell (also lstm_block_cell, lstm_cell):
        kernel [in+Hout, 4H] = vstack([W_k | R_k] for k in i, c, f, o)'     (TF order i, c, f, o)
        bias   [4H]          = bW_k + bR_k, same order
        projection/kernel [H, P] = W_P'
    cudnn_compatible_gru_cell:
        gates/kernel [in+H, 2H] = vstack([W_r | R_r], [W_u | R_u])'          (reset first)
        gates/bias   [2H]       = [bW_r + bR_r, bW_u + bR_u]
        candidate/input_projection/kernel = W_h',  .../bias = bW_h
        candidate/hidden_projection/kernel = R_h', .../bias = bR_h
    basic_rnn_cell:  kernel = [W | R]', bias = bW + bR

Summed biases read back as ``bW = bias, bR = 0`` (TF's own restore splits ``0.5*bias`` into both;
the model is the same), so cells -> cuDNN -> cells is bit-exact.  A forget bias added at run time
(``LSTMBlockCell``/``LSTMCell`` ``forget_bias``, BlockLSTM's ``forget_bias``) is stored exactly as
``bR_f = forget_bias``: the stored numbers are not rounded, and the way back computes
``bW_f + (bR_f - forget_bias)`` = ``b_f + 0`` exactly.  Only the pre-activation sums round in a
different order (cuDNN adds ``bW``, ``bR`` separately; the cells add ``b`` then ``forget_bias``):
outputs agree to a few ulps, not bit for bit.
"""

from __future__ import annotations

import re
from typing import NamedTuple

import numpy as np

from ._optional import to_numpy
from ._weights import CudnnWeights, PseudoLayer, require_no_loss

TF_LSTM_ORDER = (0, 2, 1, 3)  # TF cell gate k holds cuDNN gate TF_LSTM_ORDER[k]: i, c, f, o
_CELLS = {"cudnn_compatible_lstm_cell": "lstm", "lstm_block_cell": "lstm", "lstm_cell": "lstm",
          "cudnn_compatible_gru_cell": "gru", "basic_rnn_cell": None}
_NAME = re.compile(r"^(?P<scope>.*?)(?:rnn/multi_rnn_cell/cell_(?P<ul>\d+)|stack_bidirectional_rnn/cell_(?P<bl>\d+)"
                   r"/bidirectional_rnn/(?P<dir>fw|bw))/(?P<cell>" + "|".join(_CELLS) + r")/(?P<var>.+)$")


def _prefix(scope: str, layer: int, direction: int, num_dirs: int, cell: str) -> str:
    if num_dirs == 1:
        return f"{scope}rnn/multi_rnn_cell/cell_{layer}/{cell}/"
    return f"{scope}stack_bidirectional_rnn/cell_{layer}/bidirectional_rnn/{('fw', 'bw')[direction]}/{cell}/"


def _forget_vector(G: int, H: int, forget_bias: float, dtype) -> list:
    zeros = [np.zeros(H, dtype) for _ in range(G)]
    if G == 4:
        zeros[1] = np.full(H, forget_bias, dtype)
    return zeros


def _lstm_from_kernel(kernel, bias, in_size: int, order, forget_bias: float, proj=None) -> PseudoLayer:
    gates = np.split(kernel, 4, axis=1)
    biases = np.split(bias, 4)
    W, R, bW = [None] * 4, [None] * 4, [None] * 4
    for k, cudnn_gate in enumerate(order):
        W[cudnn_gate] = np.ascontiguousarray(gates[k][:in_size].T)
        R[cudnn_gate] = np.ascontiguousarray(gates[k][in_size:].T)
        bW[cudnn_gate] = biases[k]
    return PseudoLayer(W, R, bW, _forget_vector(4, bias.shape[0] // 4, forget_bias, bias.dtype), proj)


def _lstm_to_kernel(layer: PseudoLayer, order, forget_bias: float) -> tuple:
    kernel = np.hstack([np.vstack([layer.W[g].T, layer.R[g].T]) for g in order])
    bR = [layer.bR[g] - (forget_bias if g == 1 else 0) for g in range(4)]
    bias = np.concatenate([layer.bW[g] + bR[g].astype(layer.bW[g].dtype) for g in order])
    return kernel, bias


def from_tf_cells(variables, *, rnn_mode=None, forget_bias=None, scope=None) -> CudnnWeights:
    """A :class:`CudnnWeights` from TF cell checkpoint variables ``{name: array}`` (names and layouts
    in the module doc; other names are ignored, several scopes need ``scope=``).

    ``forget_bias``: the run-time forget bias of ``lstm_block_cell``/``lstm_cell`` variables (TF's
    default for those cells is 1.0, not stored in the checkpoint: required for them);
    ``cudnn_compatible_lstm_cell`` has none (0).  ``rnn_mode`` is needed for ``basic_rnn_cell``
    (``'rnn_tanh'`` or ``'rnn_relu'``).  Peephole variables (``w_*_diag``) that are not all zero
    raise ValueError (cuDNN has no peepholes).
    """
    found = {}
    for name, value in variables.items():
        match = _NAME.match(name)
        if match and (scope is None or match["scope"] == scope):
            found[name] = match
    if not found:
        raise ValueError("from_tf_cells: no TF cell variables found (expected names like "
                         "'rnn/multi_rnn_cell/cell_0/cudnn_compatible_lstm_cell/kernel')")
    scopes = {m["scope"] for m in found.values()}
    cells = {m["cell"] for m in found.values()}
    if len(scopes) > 1 or len(cells) > 1:
        raise ValueError(f"from_tf_cells: variables of several models (scopes {sorted(scopes)}, cells "
                         f"{sorted(cells)}): pass scope= to choose one")
    scope, cell = scopes.pop(), cells.pop()
    mode = _CELLS[cell] or rnn_mode
    if mode is None or mode.startswith("rnn") != (cell == "basic_rnn_cell"):
        raise ValueError(f"from_tf_cells: {cell} variables need rnn_mode='rnn_tanh' or 'rnn_relu'"
                         if cell == "basic_rnn_cell" else f"from_tf_cells: rnn_mode={rnn_mode!r} contradicts {cell}")
    if cell in ("lstm_block_cell", "lstm_cell") and forget_bias is None:
        raise ValueError(f"from_tf_cells: {cell} adds a forget_bias at run time that the checkpoint does not "
                         "store (TF's default is 1.0): pass forget_bias=")
    forget_bias = 0.0 if forget_bias is None else float(forget_bias)
    D = 2 if any(m["dir"] for m in found.values()) else 1
    L = 1 + max(int(m["ul"] or m["bl"]) for m in found.values())

    def get(prefix, var):
        key = prefix + var
        if key not in variables:
            raise ValueError(f"from_tf_cells: missing variable {key!r}")
        return to_numpy(variables[key], key)

    layers, in_size = [], None
    for l in range(L):
        for d in range(D):
            prefix = _prefix(scope, l, d, D, cell)
            for diag in ("w_i_diag", "w_f_diag", "w_o_diag"):
                if prefix + diag in variables and np.any(to_numpy(variables[prefix + diag], diag)):
                    raise ValueError(f"from_tf_cells: {prefix + diag} is not zero: cuDNN has no peepholes, "
                                     "they would be lost")
            if mode == "gru":
                gates, cand_in = get(prefix, "gates/kernel"), get(prefix, "candidate/input_projection/kernel")
                width = cand_in.shape[0]
                H = cand_in.shape[1]
                (w_r, w_u), gate_bias = np.split(gates, 2, axis=1), np.split(get(prefix, "gates/bias"), 2)
                W = [np.ascontiguousarray(g[:width].T) for g in (w_r, w_u)] + [np.ascontiguousarray(cand_in.T)]
                R = [np.ascontiguousarray(g[width:].T) for g in (w_r, w_u)] + \
                    [np.ascontiguousarray(get(prefix, "candidate/hidden_projection/kernel").T)]
                bW = gate_bias + [get(prefix, "candidate/input_projection/bias")]
                bR = [np.zeros(H, gates.dtype)] * 2 + [get(prefix, "candidate/hidden_projection/bias")]
                layers.append(PseudoLayer(W, R, bW, bR))
            else:
                kernel, bias = get(prefix, "kernel"), get(prefix, "bias")
                proj = get(prefix, "projection/kernel") if prefix + "projection/kernel" in variables else None
                hidden_out = proj.shape[1] if proj is not None else bias.shape[0] // (4 if mode == "lstm" else 1)
                width = kernel.shape[0] - hidden_out
                if mode == "lstm":
                    layers.append(_lstm_from_kernel(kernel, bias, width, TF_LSTM_ORDER, forget_bias,
                                                    None if proj is None else np.ascontiguousarray(proj.T)))
                else:
                    layers.append(PseudoLayer([np.ascontiguousarray(kernel[:width].T)],
                                              [np.ascontiguousarray(kernel[width:].T)], [bias],
                                              [np.zeros_like(bias)]))
            if in_size is None:
                in_size = width
    num_proj = 0 if layers[0].proj is None else layers[0].proj.shape[0]
    return CudnnWeights.from_pseudo_layers(layers, rnn_mode=mode, num_layers=L, num_units=layers[0].R[0].shape[0],
                                           input_size=in_size, num_proj=num_proj,
                                           direction="bidirectional" if D == 2 else "unidirectional")


def to_tf_cells(w: CudnnWeights, *, scope="", cell=None, forget_bias=0.0) -> dict:
    """``w`` as TF cell checkpoint variables ``{name: array}`` (module doc).  ``cell`` defaults to the
    cuDNN-compatible name of the mode (``basic_rnn_cell`` for rnn_tanh/rnn_relu); ``'lstm_block_cell'``
    gives LSTMBlockCell's names (run it with ``forget_bias``: subtracted exactly from ``bR_f``).
    ``scope`` is prepended as is (give it a trailing ``/``).  skip_input raises ValueError."""
    require_no_loss(w, "TF cells", projection=False)
    cell = cell or {"lstm": "cudnn_compatible_lstm_cell", "gru": "cudnn_compatible_gru_cell"}.get(w.rnn_mode,
                                                                                              "basic_rnn_cell")
    if _CELLS.get(cell, "?") not in (w.rnn_mode, None) or (cell == "basic_rnn_cell") != w.rnn_mode.startswith("rnn"):
        raise ValueError(f"to_tf_cells: cell={cell!r} cannot hold a {w.rnn_mode} model")
    out = {}
    for p, layer in enumerate(w.pseudo_layers()):
        prefix = _prefix(scope, p // w.num_dirs, p % w.num_dirs, w.num_dirs, cell)
        if w.rnn_mode == "lstm":
            out[prefix + "kernel"], out[prefix + "bias"] = _lstm_to_kernel(layer, TF_LSTM_ORDER, forget_bias)
            if layer.proj is not None:
                out[prefix + "projection/kernel"] = np.ascontiguousarray(layer.proj.T)
        elif w.rnn_mode == "gru":
            out[prefix + "gates/kernel"] = np.hstack([np.vstack([layer.W[g].T, layer.R[g].T]) for g in (0, 1)])
            out[prefix + "gates/bias"] = np.concatenate([layer.bW[g] + layer.bR[g] for g in (0, 1)])
            out[prefix + "candidate/input_projection/kernel"] = np.ascontiguousarray(layer.W[2].T)
            out[prefix + "candidate/input_projection/bias"] = layer.bW[2]
            out[prefix + "candidate/hidden_projection/kernel"] = np.ascontiguousarray(layer.R[2].T)
            out[prefix + "candidate/hidden_projection/bias"] = layer.bR[2]
        else:
            out[prefix + "kernel"] = np.vstack([layer.W[0].T, layer.R[0].T])
            out[prefix + "bias"] = layer.bW[0] + layer.bR[0]
    return out


# -- BlockLSTM / BlockLSTMV2 ---------------------------------------------------------------------
_BLOCK_ORDERS = {"ICFO": TF_LSTM_ORDER, "IFCO": (0, 1, 2, 3)}
_BLOCK_DEFAULTS = {"ICFO": ("BlockLSTM", 1.0, 3.0), "IFCO": ("BlockLSTMV2", 0.0, 0.0)}


class BlockLSTMWeights(NamedTuple):
    """``w [I+H, 4H]`` and ``b [4H]`` of BlockLSTM (ICFO columns) / BlockLSTMV2 (IFCO)."""

    w: np.ndarray
    b: np.ndarray


def _block_layout(layout: str) -> str:
    key = str(layout).upper()
    if key not in _BLOCK_ORDERS:
        raise ValueError(f"layout must be 'ICFO' (BlockLSTM) or 'IFCO' (BlockLSTMV2), got {layout!r}")
    return key


class _BlockAttrs(NamedTuple):
    layout: str  # 'ICFO' | 'IFCO'
    op: str  # 'BlockLSTM' | 'BlockLSTMV2'
    forget_bias: float
    cell_clip: float
    default_clip: float


def _block_attrs(layout: str, forget_bias, cell_clip) -> _BlockAttrs:
    """The layout and the op's attributes, ``None`` meaning the op's default."""
    layout = _block_layout(layout)
    op, default_forget, default_clip = _BLOCK_DEFAULTS[layout]
    return _BlockAttrs(layout, op, default_forget if forget_bias is None else float(forget_bias),
                       default_clip if cell_clip is None else float(cell_clip), default_clip)


def from_block_lstm(w, b, *, layout="IFCO", forget_bias=None, cell_clip=None, wci=None, wcf=None,
                    wco=None) -> CudnnWeights:
    """A one-layer unidirectional cuDNN LSTM from BlockLSTM weights ``w [I+H, 4H]``, ``b [4H]``.

    ``layout='ICFO'``: BlockLSTM (columns i, c, f, o; defaults ``forget_bias=1.0, cell_clip=3.0``);
    ``'IFCO'``: BlockLSTMV2 (i, f, c, o; no forget bias, ``cell_clip=0.0``).  Defaults follow the op.
    ``W_k = w[:I, k].T``, ``R_k = w[I:, k].T``, ``bW = b``, ``bR = [0, forget_bias, 0, 0]`` (the forget
    bias folded without rounding; module doc).  ``cell_clip > 0`` or non-zero peepholes raise
    ValueError: cuDNN has neither, they would be lost (pass ``cell_clip=0`` for a model run
    without clipping)."""
    layout, op, forget_bias, cell_clip, default_clip = _block_attrs(layout, forget_bias, cell_clip)
    if cell_clip > 0:
        raise ValueError(f"from_block_lstm: cell_clip={cell_clip} ({op}'s default is {default_clip}) would be "
                         "lost: cuDNN's LSTM has no cell clipping; pass cell_clip=0 if the model ran without it")
    for name, value in (("wci", wci), ("wcf", wcf), ("wco", wco)):
        if value is not None and np.any(to_numpy(value, name)):
            raise ValueError(f"from_block_lstm: peephole {name} is not zero and would be lost: cuDNN has no "
                             "peepholes (use block_lstm_to_onnx for ONNX, whose LSTM has them)")
    w, b = to_numpy(w, "w"), to_numpy(b, "b")
    if w.ndim != 2 or w.shape[1] % 4 or b.shape != (w.shape[1],) or w.shape[0] <= w.shape[1] // 4:
        raise ValueError(f"from_block_lstm: expected w [I+H, 4H] and b [4H], got w {list(w.shape)}, b {list(b.shape)}")
    H = w.shape[1] // 4
    layer = _lstm_from_kernel(w, b, w.shape[0] - H, _BLOCK_ORDERS[layout], forget_bias)
    return CudnnWeights.from_pseudo_layers([layer], rnn_mode="lstm", num_layers=1, num_units=H,
                                           input_size=w.shape[0] - H)


def to_block_lstm(w: CudnnWeights, *, layout="IFCO", forget_bias=0.0) -> BlockLSTMWeights:
    """``w`` (one unidirectional LSTM layer, no projection) as BlockLSTM(V2) ``w``, ``b`` for an op run
    with ``forget_bias`` (BlockLSTM only) and ``cell_clip <= 0``, no peepholes:
    ``b = bW + (bR - forget_bias on f)``; gate columns per ``layout`` (module doc)."""
    layout = _block_layout(layout)
    if w.rnn_mode != "lstm" or w.num_layers != 1 or w.num_dirs != 1:
        raise ValueError(f"to_block_lstm: BlockLSTM is one unidirectional LSTM layer, got {w.config.describe()} "
                         "(use w.layer(l) for one layer of a stack)")
    require_no_loss(w, "BlockLSTM")
    kernel, bias = _lstm_to_kernel(w.pseudo_layers()[0], _BLOCK_ORDERS[layout], forget_bias)
    return BlockLSTMWeights(kernel, bias)
