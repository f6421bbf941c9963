"""ONNX export of CudnnRNN models and BlockLSTM (spec §10.4).  Needs ``onnx`` (extra ``[onnx]``).

One ONNX ``LSTM`` / ``GRU`` / ``RNN`` node per cuDNN layer (``direction="bidirectional"`` for D = 2),
time-major (``layout=0``; ``to_onnx(time_major=False)`` adds the transposes of CudnnRNNV3's
batch-major mode).  Per direction ``d``, in ONNX's gate orders::

    LSTM  i, o, f, c:  W[d] = vstack(W_i, W_o, W_f, W_c)  [4H, in], R[d] likewise,
                       B[d] = concat(bW_i, bW_o, bW_f, bW_c, bR_i, bR_o, bR_f, bR_c)
    GRU   z(=u), r, h, linear_before_reset=1 (cuDNN's r * (R_h h + bR_h)):
                       W[d] = vstack(W_u, W_r, W_h), B[d] = concat(bW_u, bW_r, bW_h, bR_u, bR_r, bR_h)
    RNN   W[d] = W, R[d] = R, B[d] = concat(bW, bR), activations Tanh / Relu

Between layers ``Y [T, D, B, H]`` is transposed to ``[T, B, D, H]`` and reshaped to ``[T, B, D*H]``
(cuDNN's ``[h_fw ; h_bw]``).  Graph inputs ``input [T, B, I]``, ``input_h [L*D, B, H]``,
``input_c [L*D, B, H]`` (LSTM only), ``sequence_lengths [B]`` int32; outputs ``output
[T, B, D*H]``, ``output_h``, ``output_c`` (LSTM only) — CudnnRNNV3's (time-major) outputs.  With
``sequence_lens`` ONNX Runtime zero-fills ``Y`` past each length, runs the reverse direction over the
valid prefix only and returns each sequence's final states, as cuDNN does (tested).
ONNX's LSTM has no projection and no skip_input: those raise ValueError.
"""

from __future__ import annotations

import numpy as np

from ._optional import require, to_numpy
from ._weights import CudnnWeights, require_no_loss

ONNX_ORDER = {"lstm": (0, 3, 1, 2), "gru": (1, 0, 2), "rnn_tanh": (0,), "rnn_relu": (0,)}
_OPS = {"lstm": "LSTM", "gru": "GRU", "rnn_tanh": "RNN", "rnn_relu": "RNN"}
DEFAULT_OPSET = 17


def _tensor_type(onnx, dtype):
    return onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def _finish(onnx, graph, path, opset: int):
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", int(opset))],
                                   producer_name="fusedrnn.convert")
    onnx.checker.check_model(model)
    if path is not None:
        onnx.save(model, str(path))
    return model


def to_onnx(w: CudnnWeights, path=None, *, opset: int = DEFAULT_OPSET, time_major: bool = True):
    """An ``onnx.ModelProto`` (saved to ``path`` when given) computing CudnnRNNV3's inference outputs
    for ``w`` (module doc for the graph's inputs, outputs and gate mapping).

    ``time_major=False`` mirrors CudnnRNNV3's batch-major mode: ``input [B, T, I]``, ``output
    [B, T, D*H]`` (transposes) and states ``[B, L*D, H]`` whose buffers are *reinterpreted* as
    ``[L*D, B, H]`` (a Reshape, not a transpose: TF's kernel quirk, spec §5.2)."""
    require_no_loss(w, "ONNX's LSTM")
    onnx = require("onnx", "fusedrnn.convert.to_onnx")
    helper, numpy_helper = onnx.helper, onnx.numpy_helper
    H, D, L, mode = w.num_units, w.num_dirs, w.num_layers, w.rnn_mode
    order = ONNX_ORDER[mode]
    elem = _tensor_type(onnx, w.dtype)
    layers = w.pseudo_layers()
    nodes, inits = [], []

    def const(name, array):
        inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    states = ("input_h", "input_c") if mode == "lstm" else ("input_h",)
    state_shape = [L * D, "B", H] if time_major else ["B", L * D, H]
    inputs = [helper.make_tensor_value_info("input", elem, ["T", "B", w.input_size] if time_major
                                            else ["B", "T", w.input_size])]
    inputs += [helper.make_tensor_value_info(state, elem, state_shape) for state in states]
    inputs.append(helper.make_tensor_value_info("sequence_lengths", onnx.TensorProto.INT32, ["B"]))
    const("axis0", np.array([0], np.int64))
    const("flatten_dirs", np.array([0, 0, -1], np.int64))
    x, finals_h, finals_c = "input", [], []
    state_names = {state: state for state in states}
    if not time_major:
        nodes.append(helper.make_node("Transpose", ["input"], ["input_tm"], perm=[1, 0, 2]))
        x = "input_tm"
        const("states_tm", np.array([L * D, -1, H], np.int64))
        for state in states:
            nodes.append(helper.make_node("Reshape", [state, "states_tm"], [state + "_tm"]))
            state_names[state] = state + "_tm"
    for l in range(L):
        pl = layers[l * D:(l + 1) * D]
        W = np.stack([np.vstack([p.W[g] for g in order]) for p in pl])
        R = np.stack([np.vstack([p.R[g] for g in order]) for p in pl])
        B = np.stack([np.concatenate([p.bW[g] for g in order] + [p.bR[g] for g in order]) for p in pl])
        const(f"l{l}_start", np.array([l * D], np.int64))
        const(f"l{l}_end", np.array([(l + 1) * D], np.int64))
        state_inputs = []
        for state in states:
            nodes.append(helper.make_node("Slice", [state_names[state], f"l{l}_start", f"l{l}_end", "axis0"],
                                          [f"l{l}_{state}"]))
            state_inputs.append(f"l{l}_{state}")
        attrs = dict(hidden_size=H, direction="bidirectional" if D == 2 else "forward")
        if mode == "gru":
            attrs["linear_before_reset"] = 1
        if mode.startswith("rnn"):
            attrs["activations"] = [mode[4:].capitalize()] * D
        outs = [f"l{l}_Y", f"l{l}_Y_h"] + ([f"l{l}_Y_c"] if mode == "lstm" else [])
        nodes.append(helper.make_node(_OPS[mode], [x, const(f"l{l}_W", W), const(f"l{l}_R", R), const(f"l{l}_B", B),
                                                   "sequence_lengths", *state_inputs], outs, **attrs))
        nodes.append(helper.make_node("Transpose", [f"l{l}_Y"], [f"l{l}_Yt"], perm=[0, 2, 1, 3]))
        x = "output" if l == L - 1 and time_major else f"l{l}_out"
        nodes.append(helper.make_node("Reshape", [f"l{l}_Yt", "flatten_dirs"], [x]))
        finals_h.append(outs[1])
        if mode == "lstm":
            finals_c.append(outs[2])
    if not time_major:
        nodes.append(helper.make_node("Transpose", [x], ["output"], perm=[1, 0, 2]))
        const("states_bm", np.array([-1, L * D, H], np.int64))
    outputs = [helper.make_tensor_value_info("output", elem, ["T", "B", D * H] if time_major else ["B", "T", D * H])]
    for final, parts in (("output_h", finals_h), ("output_c", finals_c))[:len(states)]:
        nodes.append(helper.make_node("Concat", parts, [final if time_major else final + "_tm"], axis=0))
        if not time_major:
            nodes.append(helper.make_node("Reshape", [final + "_tm", "states_bm"], [final]))
        outputs.append(helper.make_tensor_value_info(final, elem, state_shape))
    graph = helper.make_graph(nodes, f"cudnn_{mode}", inputs, outputs, inits)
    return _finish(onnx, graph, path, opset)


def block_lstm_to_onnx(w, b, *, layout="IFCO", forget_bias=None, cell_clip=None, wci=None, wcf=None, wco=None,
                       use_peephole=False, path=None, opset: int = DEFAULT_OPSET):
    """BlockLSTM (``layout='ICFO'``) / BlockLSTMV2 (``'IFCO'``) as one forward ONNX ``LSTM`` node.

    Inputs ``x [T, B, I]``, ``cs_prev [B, H]``, ``h_prev [B, H]``; outputs ``h [T, B, H]`` (the op's
    ``h`` for ``seq_len_max = T``), ``h_last``, ``cs_last [B, H]``.  ONNX's ``B = [Wb, Rb]`` holds
    ``Wb = b`` and ``Rb_f = forget_bias`` (folded without rounding the stored numbers).  With
    ``use_peephole`` the diagonals map to ONNX's ``P = [wci, wco, wcf]`` (same placement: i and f see
    ``cs_prev``, o sees the new ``cs``).  ``cell_clip > 0`` is refused: ONNX's ``clip`` bounds the gate
    pre-activations, BlockLSTM clips the cell state — different models.  Defaults of
    ``forget_bias``/``cell_clip`` follow the op (BlockLSTM 1.0 / 3.0, BlockLSTMV2 none / 0.0).
    """
    from ._tf_cells import _BLOCK_ORDERS, _block_attrs
    layout, op, forget_bias, cell_clip, default_clip = _block_attrs(layout, forget_bias, cell_clip)
    if cell_clip > 0:
        raise ValueError(f"block_lstm_to_onnx: cell_clip={cell_clip} ({op}'s default is {default_clip}) has no "
                         "ONNX equivalent: ONNX LSTM's clip bounds gate pre-activations, not the cell state; "
                         "pass cell_clip=0 if the model ran without clipping")
    onnx = require("onnx", "fusedrnn.convert.block_lstm_to_onnx")
    helper, numpy_helper = onnx.helper, onnx.numpy_helper
    w, b = to_numpy(w, "w"), to_numpy(b, "b")
    if w.ndim != 2 or w.shape[1] % 4 or b.shape != (w.shape[1],) or w.shape[0] <= w.shape[1] // 4:
        raise ValueError(f"block_lstm_to_onnx: expected w [I+H, 4H] and b [4H], got w {list(w.shape)}, "
                         f"b {list(b.shape)}")
    H = w.shape[1] // 4
    I = w.shape[0] - H
    cols = np.split(w, 4, axis=1)
    biases = np.split(b, 4)
    by_cudnn = {cudnn: k for k, cudnn in enumerate(_BLOCK_ORDERS[layout])}  # cuDNN gate -> block column
    onnx_gates = [by_cudnn[g] for g in ONNX_ORDER["lstm"]]  # i, o, f, c
    W = np.vstack([cols[k][:I].T for k in onnx_gates])[None]
    R = np.vstack([cols[k][I:].T for k in onnx_gates])[None]
    Rb = np.zeros(4 * H, b.dtype)
    Rb[2 * H:3 * H] = forget_bias  # ONNX f block is the third
    B = np.concatenate([biases[k] for k in onnx_gates] + [Rb])[None]
    elem = _tensor_type(onnx, w.dtype)
    inits = [numpy_helper.from_array(np.ascontiguousarray(a), n) for a, n in ((W, "W"), (R, "R"), (B, "B"))]
    inits.append(numpy_helper.from_array(np.array([0], np.int64), "axis0"))
    lstm_inputs = ["x", "W", "R", "B", "", "h0", "c0"]
    if use_peephole:
        peep = [to_numpy(p, n) if p is not None else np.zeros(H, w.dtype) for p, n in ((wci, "wci"), (wco, "wco"),
                                                                                     (wcf, "wcf"))]
        inits.append(numpy_helper.from_array(np.concatenate(peep)[None].astype(w.dtype), "P"))
        lstm_inputs.append("P")
    nodes = [helper.make_node("Unsqueeze", ["h_prev", "axis0"], ["h0"]),
             helper.make_node("Unsqueeze", ["cs_prev", "axis0"], ["c0"]),
             helper.make_node("LSTM", lstm_inputs, ["Y", "Y_h", "Y_c"], hidden_size=H),
             helper.make_node("Squeeze", ["Y", "axis1"], ["h"]),
             helper.make_node("Squeeze", ["Y_h", "axis0"], ["h_last"]),
             helper.make_node("Squeeze", ["Y_c", "axis0"], ["cs_last"])]
    inits.append(numpy_helper.from_array(np.array([1], np.int64), "axis1"))
    inputs = [helper.make_tensor_value_info("x", elem, ["T", "B", I]),
              helper.make_tensor_value_info("cs_prev", elem, ["B", H]),
              helper.make_tensor_value_info("h_prev", elem, ["B", H])]
    outputs = [helper.make_tensor_value_info("h", elem, ["T", "B", H]),
               helper.make_tensor_value_info("h_last", elem, ["B", H]),
               helper.make_tensor_value_info("cs_last", elem, ["B", H])]
    graph = helper.make_graph(nodes, f"block_lstm_{layout.lower()}", inputs, outputs, inits)
    return _finish(onnx, graph, path, opset)
