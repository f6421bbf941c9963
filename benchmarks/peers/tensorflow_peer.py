"""TensorFlow's CPU kernels ``tf.raw_ops.BlockLSTMV2`` + ``BlockLSTMGradV2`` (eager, one op each).

Single-layer unidirectional LSTMs with full lengths (BlockLSTM has ``seq_len_max`` only, no
per-sequence lengths, no projection, float16/float32 only), and the block problem (peepholes,
cell clip).  Inputs: fusedrnn_peer.block_tensors (same conversion as the fusedrnn block path).
Threads: ``tf.config.threading.set_intra_op_parallelism_threads(n)`` and
``set_inter_op_parallelism_threads(1)``, which only work before TensorFlow runs its first op —
hence one worker process per thread count.
"""

from __future__ import annotations

import os

import numpy as np

from . import Peer
from .fusedrnn_peer import block_tensors


def load_tensorflow(threads: int):
    """Import TensorFlow quietly and set its thread pools (once per process)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    tf.get_logger().setLevel("ERROR")  # e.g. retracing notes when a problem builds a new tf.function
    if tf.config.threading.get_intra_op_parallelism_threads() != threads:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    note = f"tf.config.threading intra_op={threads}, inter_op=1 (set before the first op)"
    return tf, note


def block_supported(problem) -> str | None:
    if problem.cell != "lstm":
        return "BlockLSTM is LSTM only"
    if problem.layers > 1 or problem.dirs > 1:
        return "BlockLSTM is one layer, one direction"
    if problem.varlen:
        return "BlockLSTM has no per-sequence lengths"
    if problem.proj:
        return "BlockLSTM has no projection"
    if problem.dtype == "float64":
        return "BlockLSTMV2 has no float64 kernel"
    return None


class TensorFlowBlock(Peer):
    name = "tensorflow"

    def load(self, threads: int) -> dict:
        self.tf, self.threads_note = load_tensorflow(threads)
        return {"version": self.tf.__version__, "threads": self.threads_note,
                "ops": "tf.raw_ops.BlockLSTMV2 + BlockLSTMGradV2, eager"}

    def unsupported(self, problem, mode: str) -> str | None:
        return block_supported(problem)

    def build(self, data, mode: str):
        tf, p = self.tf, data.problem
        t = {key: tf.constant(value) for key, value in block_tensors(data).items()}
        inputs = {k: t[k] for k in ("x", "cs_prev", "h_prev", "w", "wci", "wcf", "wco", "b")}
        seq_len_max = tf.constant(np.int64(p.T))
        attrs = dict(cell_clip=p.cell_clip, use_peephole=p.peephole)
        if mode == "forward":
            return lambda: tf.raw_ops.BlockLSTMV2(seq_len_max=seq_len_max, **inputs, **attrs)

        def training_step():
            i, cs, f, o, ci, co, h = tf.raw_ops.BlockLSTMV2(seq_len_max=seq_len_max, **inputs, **attrs)
            grads = tf.raw_ops.BlockLSTMGradV2(seq_len_max=seq_len_max, **inputs, i=i, cs=cs, f=f, o=o, ci=ci,
                                               co=co, h=h, cs_grad=t["cs_grad"], h_grad=t["h_grad"],
                                               use_peephole=p.peephole)
            return h, grads
        return training_step

    def output(self, result) -> np.ndarray:
        return result[6].numpy()


PEER = TensorFlowBlock()
