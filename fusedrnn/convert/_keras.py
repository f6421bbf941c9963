"""Keras layers <-> :class:`CudnnWeights` (spec §10.2).

Keras 3, per layer (one cuDNN pseudo-layer; ``Bidirectional`` = forward then backward layer)::

    LSTM       kernel [in, 4H] = [W_i'|W_f'|W_c'|W_o'] (gate order i, f, c, o as cuDNN),
               recurrent_kernel [Hout, 4H] likewise from R, bias [4H] = bW + bR (one bias)
    GRU        reset_after=True only; gate order z(=cuDNN u), r, h:
               kernel = [W_u'|W_r'|W_h'], recurrent_kernel = [R_u'|R_r'|R_h'],
               bias [2, 3H] = [[bW_u, bW_r, bW_h], [bR_u, bR_r, bR_h]]  (both biases: exact)
    SimpleRNN  kernel = W', recurrent_kernel = R', bias = bW + bR   (activation tanh or relu)

(``'`` = transpose.)  Keras' one-bias layers read back as ``bW = bias, bR = 0``, so Keras ->
cuDNN -> Keras is bit-exact; cuDNN -> Keras rounds ``bW + bR`` once.  Keras has no projection and
no skip_input; ``GRU(reset_after=False)`` is a different model: all refused with ValueError.

Legacy TF1 ``CuDNNLSTM`` / ``CuDNNGRU`` weight lists (``legacy_cudnn=True``): biases ``[8H]`` /
``[6H]`` = ``[bW..., bR...]`` (GRU gate order z, r, h) and kernels whose ``[in, H]`` gate blocks
are the C-order reinterpretation of cuDNN's ``[H, in]`` matrices (``W_k = block.reshape(H, in)``,
not a transpose).
"""

from __future__ import annotations

import numpy as np

from ._optional import require, to_numpy
from ._weights import CudnnWeights, PseudoLayer, require_no_loss

_KERAS_ORDER = {"lstm": (0, 1, 2, 3), "gru": (1, 0, 2), "rnn_tanh": (0,), "rnn_relu": (0,)}
_KINDS = {"LSTM": "lstm", "GRU": "gru", "SimpleRNN": "rnn"}


def _name(fn) -> str:
    return getattr(fn, "__name__", str(fn))


def _layer_mode(layer, backward: bool = False) -> str:
    """cuDNN rnn_mode of a Keras layer (``backward``: the backward layer of a Bidirectional)."""
    kind = type(layer).__name__
    if kind not in _KINDS:
        raise TypeError(f"from_keras expects Keras LSTM, GRU, SimpleRNN or Bidirectional layers, got {kind}")
    if getattr(layer, "go_backwards", False) != backward:
        raise ValueError(f"from_keras: {layer.name} has go_backwards=True; cuDNN runs reverse directions only "
                         "inside a Bidirectional layer")
    activation = _name(layer.activation)
    if kind == "SimpleRNN":
        if activation not in ("tanh", "relu"):
            raise ValueError(f"from_keras: SimpleRNN activation must be tanh or relu for cuDNN, got {activation}")
        return "rnn_" + activation
    if activation != "tanh" or _name(layer.recurrent_activation) != "sigmoid":
        raise ValueError(f"from_keras: {kind} {layer.name} uses activation={activation}, recurrent_activation="
                         f"{_name(layer.recurrent_activation)}; cuDNN computes tanh and sigmoid")
    if kind == "GRU" and not layer.reset_after:
        raise ValueError(f"from_keras: GRU {layer.name} has reset_after=False, which applies the reset gate "
                         "before the recurrent matmul: a different model than cuDNN's GRU (reset_after=True)")
    return _KINDS[kind]


def _split_columns(matrix: np.ndarray, order) -> list:
    """Column blocks of a Keras matrix, back in cuDNN gate order, as cuDNN's [H, in] (transposed)."""
    blocks = np.split(matrix, len(order), axis=1)
    result = [None] * len(order)
    for keras_index, cudnn_index in enumerate(order):
        result[cudnn_index] = np.ascontiguousarray(blocks[keras_index].T)
    return result


def _reorder(vectors, order) -> list:
    result = [None] * len(order)
    for keras_index, cudnn_index in enumerate(order):
        result[cudnn_index] = vectors[keras_index]
    return result


def _pseudo_layer(rnn_mode: str, weights, legacy_cudnn: bool) -> PseudoLayer:
    """One Keras layer's [kernel, recurrent_kernel(, bias)] as a cuDNN pseudo-layer."""
    order = _KERAS_ORDER[rnn_mode]
    G = len(order)
    kernel, recurrent = (to_numpy(a, n) for a, n in zip(weights[:2], ("kernel", "recurrent_kernel")))
    H = recurrent.shape[1] // G
    dtype = kernel.dtype
    bias = to_numpy(weights[2], "bias") if len(weights) > 2 else np.zeros(((2 * G) if legacy_cudnn else G) * H, dtype)
    if legacy_cudnn:
        def blocks(matrix):
            return _reorder([b.reshape(H, matrix.shape[0]) for b in np.split(matrix, G, axis=1)], order)
        halves = np.split(bias.reshape(-1), 2)
        return PseudoLayer(blocks(kernel), blocks(recurrent), _reorder(np.split(halves[0], G), order),
                           _reorder(np.split(halves[1], G), order))
    W, R = _split_columns(kernel, order), _split_columns(recurrent, order)
    if rnn_mode == "gru":
        if bias.shape != (2, G * H):
            raise ValueError(f"from_keras: GRU bias must be [2, {G * H}] (reset_after=True), got {list(bias.shape)}")
        return PseudoLayer(W, R, _reorder(np.split(bias[0], G), order), _reorder(np.split(bias[1], G), order))
    zeros = [np.zeros(H, dtype)] * G
    return PseudoLayer(W, R, _reorder(np.split(bias, G), order), zeros)


def _unwrap(item):
    """(rnn_mode, [forward weights, backward weights?]) of one Keras layer object."""
    if type(item).__name__ == "Bidirectional":
        if item.merge_mode != "concat":
            raise ValueError(f"from_keras: Bidirectional merge_mode must be 'concat' (cuDNN's output), "
                             f"got {item.merge_mode!r}")
        mode = _layer_mode(item.forward_layer)
        back = item.backward_layer
        if _layer_mode(back, backward=True) != mode:
            raise ValueError("from_keras: Bidirectional forward and backward layers differ in kind")
        return mode, [item.forward_layer.get_weights(), back.get_weights()]
    return _layer_mode(item), [item.get_weights()]


def _build(mode: str, layers: list, *, direction: str) -> CudnnWeights:
    pseudo = []
    for per_layer in layers:
        pseudo += per_layer
    first_kernel = pseudo[0].W[0]
    num_units = pseudo[0].R[0].shape[0]
    D = 2 if direction == "bidirectional" else 1
    return CudnnWeights.from_pseudo_layers(pseudo, rnn_mode=mode, num_layers=len(pseudo) // D,
                                           num_units=num_units, input_size=first_kernel.shape[1],
                                           direction=direction)


def from_keras(layer_or_layers) -> CudnnWeights:
    """A :class:`CudnnWeights` from Keras 3 recurrent layers: one ``LSTM`` / ``GRU(reset_after=True)``
    / ``SimpleRNN`` / ``Bidirectional(..., merge_mode='concat')`` layer, a list of them (a stack: one
    layer per cuDNN layer, all of one kind and direction), or a model (its recurrent layers, in order).

    Gate orders and bias conventions: module doc.  Refuses (ValueError) what cuDNN cannot run
    exactly: other activations, ``reset_after=False``, ``go_backwards`` outside Bidirectional.
    """
    items = layer_or_layers
    if hasattr(items, "layers") and not isinstance(items, (list, tuple)):
        items = [layer for layer in items.layers if type(layer).__name__ in (*_KINDS, "Bidirectional")]
    elif not isinstance(items, (list, tuple)):
        items = [items]
    if not items:
        raise ValueError("from_keras: no LSTM/GRU/SimpleRNN/Bidirectional layer given")
    modes, directions, layers = set(), set(), []
    for item in items:
        mode, weight_lists = _unwrap(item)
        modes.add(mode)
        directions.add(len(weight_lists))
        layers.append([_pseudo_layer(mode, weights, False) for weights in weight_lists])
    if len(modes) > 1 or len(directions) > 1:
        raise ValueError(f"from_keras: a cuDNN stack needs layers of one kind and direction, got modes "
                         f"{sorted(modes)} with {sorted(directions)} direction(s)")
    return _build(modes.pop(), layers, direction="bidirectional" if directions.pop() == 2 else "unidirectional")


def from_keras_weights(weight_lists, rnn_mode: str, *, direction="unidirectional", legacy_cudnn=False) -> CudnnWeights:
    """As :func:`from_keras`, from weight lists (``layer.get_weights()`` or arrays read from an
    HDF5 file): one ``[kernel, recurrent_kernel, bias]`` list per pseudo-layer, forward before
    backward inside a layer.  ``legacy_cudnn=True`` reads TF1 ``CuDNNLSTM``/``CuDNNGRU`` lists
    (module doc)."""
    D = 2 if direction == "bidirectional" else 1
    if len(weight_lists) % D:
        raise ValueError(f"from_keras_weights: {len(weight_lists)} weight lists cannot be split into "
                         f"{D} directions per layer")
    pseudo = [_pseudo_layer(rnn_mode, weights, legacy_cudnn) for weights in weight_lists]
    return _build(rnn_mode, [pseudo], direction=direction)


def to_keras_weights(w: CudnnWeights, *, legacy_cudnn=False) -> list:
    """``w`` as Keras weight lists: per cuDNN layer one list for ``layer.set_weights`` (a
    ``Bidirectional`` layer's list = forward's then backward's arrays).  See the module doc."""
    require_no_loss(w, "Keras")
    by_keras = _KERAS_ORDER[w.rnn_mode]  # Keras block k holds cuDNN gate by_keras[k]
    result = []
    for p, layer in enumerate(w.pseudo_layers()):
        if legacy_cudnn:
            kernel = np.hstack([layer.W[k].reshape(layer.W[k].shape[1], -1) for k in by_keras])
            recurrent = np.hstack([layer.R[k].reshape(layer.R[k].shape[1], -1) for k in by_keras])
            bias = np.concatenate([layer.bW[k] for k in by_keras] + [layer.bR[k] for k in by_keras])
        else:
            kernel = np.hstack([layer.W[k].T for k in by_keras])
            recurrent = np.hstack([layer.R[k].T for k in by_keras])
            if w.rnn_mode == "gru":
                bias = np.stack([np.concatenate([layer.bW[k] for k in by_keras]),
                                 np.concatenate([layer.bR[k] for k in by_keras])])
            else:
                bias = np.concatenate([layer.bW[k] + layer.bR[k] for k in by_keras])
        arrays = [kernel, recurrent, bias]
        if p % w.num_dirs:
            result[-1] += arrays
        else:
            result.append(arrays)
    return result


def to_keras(w: CudnnWeights) -> list:
    """``w`` as a list of built Keras 3 layers (one per cuDNN layer; ``Bidirectional`` for two
    directions), ``return_sequences=True, return_state=True``, weights set.  Chain them to run the
    stack.  Needs Keras (TensorFlow's or standalone)."""
    keras = require("keras", "fusedrnn.convert.to_keras")
    weight_lists = to_keras_weights(w)
    layers = []
    for l, weights in enumerate(weight_lists):
        kwargs = dict(units=w.num_units, return_sequences=True, return_state=True, dtype=str(w.dtype))
        if w.rnn_mode == "lstm":
            cell = lambda: keras.layers.LSTM(**kwargs)  # noqa: E731
        elif w.rnn_mode == "gru":
            cell = lambda: keras.layers.GRU(reset_after=True, **kwargs)  # noqa: E731
        else:
            cell = lambda: keras.layers.SimpleRNN(activation=w.rnn_mode[4:], **kwargs)  # noqa: E731
        layer = keras.layers.Bidirectional(cell(), merge_mode="concat") if w.num_dirs == 2 else cell()
        in_size = w.config.layer_input_size(l)
        layer.build((None, None, in_size))
        layer.set_weights(weights)
        layers.append(layer)
    return layers
