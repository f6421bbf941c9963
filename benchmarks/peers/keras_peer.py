"""Keras 3 ``LSTM`` / ``GRU(reset_after=True)`` / ``SimpleRNN`` layers on the TensorFlow backend.

One layer, one direction, full lengths (the grid's multi-layer / bidirectional / masked problems
are left to the peers that take them in one call).  Each call is a ``tf.function`` (graph mode, as
``model.fit`` runs it); the training step is a ``tf.GradientTape`` with ``output_gradients`` =
the shared cotangents, differentiated for the input, the initial states and every weight.
Weights: Keras' ``kernel [I, G*H]``, ``recurrent_kernel [H, G*H]``; gate order LSTM ``i, f, c, o``
(= cuDNN), GRU ``z, r, h`` (cuDNN ``r, u, h'`` swapped in the first two blocks) with the
``[2, 3H]`` input/recurrent bias of ``reset_after``; SimpleRNN one bias (``b_ih + b_hh``).
Threads: as the tensorflow peer (``tf.config.threading``).
"""

from __future__ import annotations

import numpy as np

from . import Peer
from .tensorflow_peer import load_tensorflow


def _keras_gates(a: np.ndarray, cell: str, axis: int = 0) -> np.ndarray:
    """Reorder cuDNN gate blocks along ``axis`` to Keras' order."""
    if cell != "gru":
        return a
    r, u, c = np.split(a, 3, axis=axis)
    return np.concatenate([u, r, c], axis=axis)


class Keras(Peer):
    name = "keras"

    def load(self, threads: int) -> dict:
        self.tf, self.threads_note = load_tensorflow(threads)
        import keras

        self.keras = keras
        return {"version": keras.__version__, "backend": keras.backend.backend(), "threads": self.threads_note}

    def unsupported(self, problem, mode: str) -> str | None:
        if problem.kind == "block":
            return "no peepholes / cell clip"
        if problem.layers > 1 or problem.dirs > 1:
            return "one layer, one direction only here"
        if problem.varlen:
            return "variable lengths (masking) not benchmarked"
        if problem.proj:
            return "no projection"
        return None

    def layer(self, data):
        keras, p = self.keras, data.problem
        w = data.weights[0]
        kwargs = dict(return_sequences=True, return_state=True, dtype=p.dtype)
        if p.cell == "lstm":
            layer = keras.layers.LSTM(p.H, unit_forget_bias=False, **kwargs)
            bias = w["b_ih"] + w["b_hh"]
        elif p.cell == "gru":
            layer = keras.layers.GRU(p.H, reset_after=True, **kwargs)
            bias = np.stack([_keras_gates(w["b_ih"], "gru"), _keras_gates(w["b_hh"], "gru")])
        else:
            layer = keras.layers.SimpleRNN(p.H, activation="tanh", **kwargs)
            bias = w["b_ih"] + w["b_hh"]
        layer.build((p.B, p.T, p.I))
        layer.set_weights([_keras_gates(w["w_ih"], p.cell).T, _keras_gates(w["w_hh"], p.cell).T, bias])
        return layer

    def build(self, data, mode: str):
        tf, p = self.tf, data.problem
        layer = self.layer(data)
        x = tf.constant(np.ascontiguousarray(data.x.transpose(1, 0, 2)))  # Keras is batch-major
        states = [tf.constant(data.h0[0])] + ([tf.constant(data.c0[0])] if p.cell == "lstm" else [])
        cotangents = [tf.constant(np.ascontiguousarray(data.dy.transpose(1, 0, 2))), tf.constant(data.dh[0])]
        if p.cell == "lstm":
            cotangents.append(tf.constant(data.dc[0]))

        if mode == "forward":
            return tf.function(lambda: layer(x, initial_state=states, training=False))

        @tf.function
        def training_step():
            with tf.GradientTape() as tape:
                tape.watch([x, *states])
                outputs = layer(x, initial_state=states, training=True)
            return tape.gradient(outputs, [x, *states, *layer.trainable_weights], output_gradients=cotangents)
        return training_step

    def output(self, result) -> np.ndarray:
        return result[0].numpy().transpose(1, 0, 2)


PEER = Keras()
