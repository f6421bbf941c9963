"""ONNX Runtime: one ``LSTM`` / ``GRU(linear_before_reset=1)`` / ``RNN(Tanh)`` node per layer,
built with ``onnx.helper`` — forward (inference) only; ONNX Runtime has no training kernels for
them.

The weights are graph initializers (ONNX Runtime pre-packs them once per session); ``X``,
``sequence_lens`` (always fed: full lengths or the random ones) and the initial states are fed
per call.  Multi-layer problems chain one node per layer (``Y [T, D, B, H]`` → Transpose →
Reshape ``[T, B, D*H]``), as ONNX's RNN ops are single-layer.  Gate order: LSTM ``i, o, f, c``,
GRU ``z, r, h`` (cuDNN's blocks reordered); ``B`` = ``[Wb, Rb]`` per direction.  No projection or
cell clip (ONNX's ``clip`` clips pre-activations, not the cell state).
Threads: ``SessionOptions.intra_op_num_threads = n``, ``inter_op_num_threads = 1``, sequential
execution, ``session.intra_op.allow_spinning = 0`` (its idle threads would otherwise spin on the
cores while the other peers of the same process are timed).
"""

from __future__ import annotations

import numpy as np

from . import Peer

_ORDER = {"lstm": [0, 3, 1, 2], "gru": [1, 0, 2], "rnn_tanh": [0]}
_OP = {"lstm": "LSTM", "gru": "GRU", "rnn_tanh": "RNN"}


def _reorder(a: np.ndarray, cell: str) -> np.ndarray:
    blocks = np.split(a, len(_ORDER[cell]))
    return np.concatenate([blocks[k] for k in _ORDER[cell]])


class OnnxRuntime(Peer):
    name = "onnxruntime"

    def load(self, threads: int) -> dict:
        import onnx
        import onnxruntime

        self.onnx, self.ort, self.threads = onnx, onnxruntime, threads
        self.threads_note = f"SessionOptions intra_op_num_threads={threads}, inter_op_num_threads=1, allow_spinning=0"
        return {"version": onnxruntime.__version__, "onnx": onnx.__version__, "threads": self.threads_note,
                "providers": onnxruntime.get_available_providers()}

    def unsupported(self, problem, mode: str) -> str | None:
        if mode == "training":
            return "inference only"
        if problem.kind == "block":
            return "no TF-style cell clip"
        if problem.proj:
            return "no projection"
        if problem.dtype == "float64":
            return "its LSTM/GRU/RNN kernels are float32 only"
        return None

    def model(self, data):
        onnx, p = self.onnx, data.problem
        helper, TensorProto = onnx.helper, onnx.TensorProto
        elem = TensorProto.DOUBLE if p.dtype == "float64" else TensorProto.FLOAT
        D, H = p.dirs, p.H
        nodes, initializers = [], []
        inputs = [helper.make_tensor_value_info("X", elem, [p.T, p.B, p.I]),
                  helper.make_tensor_value_info("sequence_lens", TensorProto.INT32, [p.B])]
        layer_input = "X"
        for layer in range(p.layers):
            ws = data.weights[layer * D:(layer + 1) * D]
            tensors = {f"W{layer}": np.stack([_reorder(w["w_ih"], p.cell) for w in ws]),
                       f"R{layer}": np.stack([_reorder(w["w_hh"], p.cell) for w in ws]),
                       f"B{layer}": np.stack([np.concatenate([_reorder(w["b_ih"], p.cell),
                                                              _reorder(w["b_hh"], p.cell)]) for w in ws])}
            initializers += [onnx.numpy_helper.from_array(value, name) for name, value in tensors.items()]
            state_names = [f"h0_{layer}"] + ([f"c0_{layer}"] if p.cell == "lstm" else [])
            inputs += [helper.make_tensor_value_info(name, elem, [D, p.B, H]) for name in state_names]
            attrs = dict(hidden_size=H, direction="bidirectional" if D == 2 else "forward")
            if p.cell == "gru":
                attrs["linear_before_reset"] = 1
            if p.cell == "rnn_tanh":
                attrs["activations"] = ["Tanh"] * D
            node_inputs = [layer_input, f"W{layer}", f"R{layer}", f"B{layer}", "sequence_lens", f"h0_{layer}"]
            if p.cell == "lstm":
                node_inputs.append(f"c0_{layer}")
            y = f"Y{layer}"
            nodes.append(helper.make_node(_OP[p.cell], node_inputs, [y], **attrs))
            nodes.append(helper.make_node("Transpose", [y], [f"{y}t"], perm=[0, 2, 1, 3]))
            initializers.append(onnx.numpy_helper.from_array(np.array([p.T, p.B, D * H], np.int64), f"shape{layer}"))
            layer_input = f"Yseq{layer}"
            nodes.append(helper.make_node("Reshape", [f"{y}t", f"shape{layer}"], [layer_input]))
        outputs = [helper.make_tensor_value_info(layer_input, elem, [p.T, p.B, D * H])]
        graph = helper.make_graph(nodes, "rnn", inputs, outputs, initializers)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])

    def build(self, data, mode: str):
        p = data.problem
        options = self.ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.execution_mode = self.ort.ExecutionMode.ORT_SEQUENTIAL
        options.log_severity_level = 3
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        session = self.ort.InferenceSession(self.model(data).SerializeToString(), options,
                                            providers=["CPUExecutionProvider"])
        D = p.dirs
        feeds = {"X": data.x, "sequence_lens": data.lengths.astype(np.int32)}
        for layer in range(p.layers):
            feeds[f"h0_{layer}"] = np.ascontiguousarray(data.h0[layer * D:(layer + 1) * D])
            if p.cell == "lstm":
                feeds[f"c0_{layer}"] = np.ascontiguousarray(data.c0[layer * D:(layer + 1) * D])
        return lambda: session.run(None, feeds)

    def output(self, result) -> np.ndarray:
        return result[0]


PEER = OnnxRuntime()
