"""TensorFlow's fused LSTM/GRU block ops: BlockLSTM(V2), their gradients, LSTMBlockCell(Grad),
GRUBlockCell(Grad).  Contract: ``spec/block_ops.md``.

Shape legend: T time steps (``x.shape[0]``), B batch, I input size, n cell size (units).
Sequence tensors are time-major: ``x [T, B, I]``, every sequence output ``[T, B, n]``.
Weights multiply from the right with the x rows first, then the h rows::

    G = [x_t | h_{t-1}] · w + b          w [I+n, 4n], b [4n]

The four column blocks of ``w``, ``b`` and of every gate gradient are, per op:

    ICFO  i | ci | f | o    BlockLSTM, BlockLSTMGrad, LSTMBlockCell, LSTMBlockCellGrad (dicfo)
    IFCO  i | f | ci | o    BlockLSTMV2, BlockLSTMGradV2

One LSTM step (``wci, wcf, wco [n]`` are the peepholes, only used with ``use_peephole``)::

    i  = σ(G_i + cs_prev ⊙ wci)
    ci = tanh(G_c)
    f  = σ(G_f + forget_bias + cs_prev ⊙ wcf)        forget_bias: BlockLSTM and LSTMBlockCell only
    cs = i ⊙ ci + f ⊙ cs_prev
    cs = clip(cs, -cell_clip, cell_clip)             only if cell_clip > 0
    co = tanh(cs)
    o  = σ(G_o + cs ⊙ wco)                           the output peephole reads the new, clipped cs
    h  = o ⊙ co

``forget_bias`` and ``cell_clip`` are float32 attributes, as in TensorFlow (``forget_bias`` is
then cast to the op's dtype).  The recurrence runs on :mod:`fusedrnn.engines.lstm` (the engine
of the CudnnRNN LSTM; gate layout, forget bias, clip and peepholes are its options); the GRU
cell's math is in :mod:`fusedrnn.engines.gru_block`.

``seq_len_max`` (an integer scalar in ``[0, T]``) is one length for the whole batch: steps
``t >= seq_len_max`` are not computed, and *all seven* outputs are 0 there (TensorFlow zeroes
``cs`` and ``h`` and leaves ``i, f, o, ci, co`` uninitialised; fusedrnn writes zeros).

Gradient ops use the forward tensors exactly as given (nothing is recomputed), treat
``cs_grad[t]``/``h_grad[t]`` as the gradients of the op's own ``cs[t]``/``h[t]`` outputs and add
the recurrent part themselves.  Like TensorFlow's kernels they pass gradients straight through
``cell_clip`` (its derivative is taken as 1): where the forward clipped, the result is not the
true derivative.

Every op runs in :func:`fusedrnn.settings.numerics` (NaN/Inf propagate without warnings).

dtypes: float16 (computed in float32, outputs rounded to float16), float32, float64, for
all eight ops (TensorFlow: float16/float32, GRU float32 only).  All float inputs must share
one dtype (TypeError).  Zero-sized T, B, I or n are valid everywhere.  Shapes are checked in
TensorFlow's order and with its wording (ValueError), including the checks TF 2.21 skips or
crashes on, before anything is computed; inputs are never modified, outputs are fresh arrays.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

from .engines.buffers import aligned_empty
from .engines.common import assign_2d, product_sum
from .engines.gru_block import gru_block_backward, gru_block_forward
from . import engines
from .engines.lstm import LSTMGrads, LSTMOptions, LSTMTrace, LSTMWeights, backward_factors, step_gradients, to_ifco
from .engines.native import workspace_nbytes
from . import resources, settings
from .settings import public_op
from .validate import bool_attr, compute_dtype, float_arrays, float_attr, int_array, shape_str

__all__ = [
    "block_lstm", "block_lstm_v2", "block_lstm_grad", "block_lstm_grad_v2", "lstm_block_cell",
    "lstm_block_cell_grad", "gru_block_cell", "gru_block_cell_grad", "BlockLSTMResult",
    "BlockLSTMGradResult", "LSTMBlockCellGradResult", "GRUBlockCellResult", "GRUBlockCellGradResult",
]


class BlockLSTMResult(NamedTuple):
    """Outputs of BlockLSTM/BlockLSTMV2 (each ``[T, B, n]``) and LSTMBlockCell (each ``[B, n]``)."""

    i: np.ndarray
    cs: np.ndarray
    f: np.ndarray
    o: np.ndarray
    ci: np.ndarray
    co: np.ndarray
    h: np.ndarray


class BlockLSTMGradResult(NamedTuple):
    """Outputs of BlockLSTMGrad/BlockLSTMGradV2, shaped like the matching inputs."""

    x_grad: np.ndarray
    cs_prev_grad: np.ndarray
    h_prev_grad: np.ndarray
    w_grad: np.ndarray
    wci_grad: np.ndarray
    wcf_grad: np.ndarray
    wco_grad: np.ndarray
    b_grad: np.ndarray


class LSTMBlockCellGradResult(NamedTuple):
    """Outputs of LSTMBlockCellGrad: ``cs_prev_grad [B, n]``, ``dicfo [B, 4n]``, peepholes ``[n]``."""

    cs_prev_grad: np.ndarray
    dicfo: np.ndarray
    wci_grad: np.ndarray
    wcf_grad: np.ndarray
    wco_grad: np.ndarray


class GRUBlockCellResult(NamedTuple):
    """Outputs of GRUBlockCell, each ``[B, n]``."""

    r: np.ndarray
    u: np.ndarray
    c: np.ndarray
    h: np.ndarray


class GRUBlockCellGradResult(NamedTuple):
    """Outputs of GRUBlockCellGrad: ``d_x [B, I]``, ``d_h_prev, d_c_bar [B, n]``, ``d_r_bar_u_bar [B, 2n]``."""

    d_x: np.ndarray
    d_h_prev: np.ndarray
    d_c_bar: np.ndarray
    d_r_bar_u_bar: np.ndarray


_PEEPHOLES = ("wci", "wcf", "wco")
_GATE_OUTPUTS = ("i", "cs", "f", "o", "ci", "co")


# ----------------------------------------------------------------------------------------------
# Argument checks.  Messages start with TensorFlow's text; what follows in parentheses is context.

def _shape_of(name: str, a: np.ndarray) -> str:
    return f"{name} has shape {shape_str(a.shape)}"


def _require(ok: bool, message: str, name: str, a: np.ndarray) -> None:
    if not ok:
        raise ValueError(f"{message} ({_shape_of(name, a)})")


def _require_dim(a: np.ndarray, name: str, axis: int, expected: int, what: str, style: str = "dims") -> None:
    """TF's ``<name>.dims(k) != <what>: actual vs. expected`` (style ``dim_size`` for the other spelling)."""
    actual = a.shape[axis]
    if actual != expected:
        raise ValueError(f"{name}.{style}({axis}) != {what}: {actual} vs. {expected} ({_shape_of(name, a)})")


def _seq_len_max(value):
    """Type check only (TensorFlow converts it first); rank and range are checked in order later."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"seq_len_max must be an integer scalar (bools are rejected), got bool {value!r}")
    return int_array(value, "seq_len_max", np.int64, "an integer scalar: int64 as in TF, int32, ...")


def _check_seq_len_max_rank(seq_len_max: np.ndarray) -> None:
    if seq_len_max.ndim != 0:
        raise ValueError(f"`seq_len_max_tensor` must be rank 0 but is rank {seq_len_max.ndim} "
                         f"({_shape_of('seq_len_max', seq_len_max)})")


def _check_seq_len_max_range(seq_len_max: np.ndarray, T: int) -> int:
    value = int(seq_len_max)
    if not 0 <= value <= T:
        raise ValueError(f"seq_len_max must be between 0 and {T} but is {value} (x has {T} time steps)")
    return value


# Rank and dimension legend of every input of the LSTM cell ops.
_CELL_SHAPES = {"x": (2, "[batch_size, input_size]"), "w": (2, "[input_size + cell_size, 4 * cell_size]"),
                "wci": (1, "[cell_size]"), "wcf": (1, "[cell_size]"), "wco": (1, "[cell_size]"),
                "b": (1, "[4 * cell_size]"),
                **{name: (2, "[batch_size, cell_size]")
                   for name in ("cs_prev", "h_prev", *_GATE_OUTPUTS, "cs_grad", "h_grad")}}


def _cell_rank(a: np.ndarray, name: str) -> None:
    """Rank check of the cell ops: TF 2.21's wording, then the newer ``<name> must be rank k``."""
    rank, legend = _CELL_SHAPES[name]
    if a.ndim != rank:
        raise ValueError(f"{name}_tensor must be rank {rank} but is rank {a.ndim}. "
                         f"({name} must be rank {rank} {legend}, got shape {shape_str(a.shape)})")


def _cell_dim(a: np.ndarray, name: str, axis: int) -> int:
    """``a.shape[axis]``; TF 2.21's cell kernels read it before checking the rank (and abort
    when the axis does not exist), so a missing axis is reported as a rank error here."""
    if a.ndim <= axis:
        _cell_rank(a, name)
    return a.shape[axis]


def _check_peephole_sizes(arrays: dict, n: int) -> None:
    for name in _PEEPHOLES:
        _require_dim(arrays[name], name, 0, n, "cell_size", "dim_size")


def _check_block_lstm(seq_len_max: np.ndarray, a: dict) -> tuple[int, int, int, int, int]:
    """Spec §6.1, in TF's order.  Returns (seq_len_max, T, B, I, n)."""
    _check_seq_len_max_rank(seq_len_max)
    x, cs_prev, h_prev, w, b = a["x"], a["cs_prev"], a["h_prev"], a["w"], a["b"]
    _require(x.ndim == 3, "x must be 3D, [time_len, batch_size, input_size]", "x", x)
    T, B, I = x.shape
    _require(cs_prev.ndim == 2, "cs_prev must be 2D, [batch_size, cell_size]", "cs_prev", cs_prev)
    _require_dim(cs_prev, "cs_prev", 0, B, "batch_size")
    n = cs_prev.shape[1]
    _require(h_prev.ndim == 2, "h_prev must be 2D, [batch_size, cell_size]", "h_prev", h_prev)
    _require_dim(h_prev, "h_prev", 0, B, "batch_size")
    _require_dim(h_prev, "h_prev", 1, n, "cell_size")
    _require(w.ndim == 2, "w must be 2D, [input_size + cell_size, 4 * cell_size]", "w", w)
    _require_dim(w, "w", 0, I + n, "input_size + cell_size", "dim_size")
    _require_dim(w, "w", 1, 4 * n, "cell_size * 4", "dim_size")
    for name in _PEEPHOLES:
        _require(a[name].ndim == 1, f"{name} must be 1D, [cell_size]", name, a[name])
        _require_dim(a[name], name, 0, n, "cell_size", "dim_size")
    _require(b.ndim == 1, "b must be 1D, [4 * cell_size]", "b", b)
    _require_dim(b, "b", 0, 4 * n, "cell_size * 4", "dim_size")
    return _check_seq_len_max_range(seq_len_max, T), T, B, I, n


def _check_block_lstm_grad(seq_len_max: np.ndarray, a: dict) -> tuple[int, int, int, int, int]:
    """Spec §6.2: TF 2.21's checks in its order, then the ones it lacks.  Returns (L, T, B, I, n)."""
    _check_seq_len_max_rank(seq_len_max)
    x, w, b = a["x"], a["w"], a["b"]
    _require(x.ndim == 3, f"x must be rank 3 but is rank {x.ndim}", "x", x)
    T, B, I = x.shape
    for name in ("cs_prev", "h_prev", "w"):
        _require(a[name].ndim == 2, f"{name} must be rank 2 but is rank {a[name].ndim}", name, a[name])
    n = w.shape[1] // 4
    if I + n != w.shape[0]:
        raise ValueError(f"w matrix rows don't match: {I + n} vs. {w.shape[0]} "
                         f"(input_size + w.shape[1] / 4 vs. w.shape[0]; {_shape_of('w', w)}, {_shape_of('x', x)})")
    for name in (*_PEEPHOLES, "b"):
        _require(a[name].ndim == 1, f"{name} must be rank 1 but is rank {a[name].ndim}", name, a[name])
    if n != b.shape[0] // 4:
        raise ValueError(f"w and b cell_size don't match: {n} vs. {b.shape[0]} "
                         f"({_shape_of('w', w)}, {_shape_of('b', b)})")
    for name in (*_GATE_OUTPUTS, "h"):
        if a[name].ndim != 3:
            raise ValueError(f"{name} must be rank 3. Received: {a[name].ndim} ({_shape_of(name, a[name])})")
    # Checks TF 2.21 lacks (it accepts these inputs, computes garbage, or corrupts memory).
    if w.shape[1] % 4:
        raise ValueError(f"w matrix columns must be a positive multiple of 4, but got {w.shape[1]} "
                         f"({_shape_of('w', w)})")
    if b.shape[0] != 4 * n:
        raise ValueError(f"w and b cell_size don't match: {n} vs. {b.shape[0]} "
                         f"(b must have 4 * cell_size = {4 * n} elements; {_shape_of('b', b)})")
    for name in ("cs_prev", "h_prev"):
        _require_dim(a[name], name, 0, B, "batch_size")
        _require_dim(a[name], name, 1, n, "cell_size")
    _check_peephole_sizes(a, n)
    for name in ("cs_grad", "h_grad"):
        if a[name].ndim != 3:
            raise ValueError(f"{name} must be rank 3. Received: {a[name].ndim} ({_shape_of(name, a[name])})")
    for name in (*_GATE_OUTPUTS, "h", "cs_grad", "h_grad"):
        for axis, (what, size) in enumerate((("time_len", T), ("batch_size", B), ("cell_size", n))):
            _require_dim(a[name], name, axis, size, what, "dim_size")
    return _check_seq_len_max_range(seq_len_max, T), T, B, I, n


def _check_lstm_block_cell(a: dict, grad: bool) -> tuple[int, int, int]:
    """Spec §6.3/§6.4: TF 2.21's size checks, then rank checks, then what it lacks.  Returns (B, I, n)."""
    def size(name, axis, expected, what, style="dim_size", label=None):
        actual = _cell_dim(a[name], name, axis)
        if actual != expected:
            raise ValueError(f"{label or name}.{style}({axis}) != {what}: {actual} vs. {expected} "
                             f"({_shape_of(name, a[name])})")

    B = _cell_dim(a["x"], "x", 0)
    I = _cell_dim(a["x"], "x", 1)
    n = _cell_dim(a["cs_prev"], "cs_prev", 1)
    size("cs_prev", 0, B, "batch_size", "dims")
    size("h_prev", 0, B, "batch_size", "dims")
    size("h_prev", 1, n, "cell_size", "dims")
    size("w", 0, I + n, "input_size + cell_size")
    size("w", 1, 4 * n, "cell_size * 4")
    size("b", 0, 4 * n, "cell_size * 4")
    if grad:
        for name in _GATE_OUTPUTS:
            size(name, 0, B, "batch_size")
            size(name, 1, n, "cell_size")
        for name in ("cs_grad", "h_grad"):
            size(name, 0, B, "batch_size", "dims", f"{name}_tensor")
            size(name, 1, n, "cell_size", "dims", f"{name}_tensor")
    for name in a:  # TF's input order
        _cell_rank(a[name], name)
    _check_peephole_sizes(a, n)
    return B, I, n


def _check_gru(a: dict, grad: bool) -> tuple[int, int, int]:
    """Spec §6.5 (TF validates GRUBlockCell fully).  Returns (B, I, n)."""
    def rank(name, k):
        if a[name].ndim != k:
            raise ValueError(f"Rank of {name} must be {k}, got {a[name].ndim} ({_shape_of(name, a[name])})")

    rank("x", 2)
    B, I = a["x"].shape
    rank("h_prev", 2)
    _require_dim(a["h_prev"], "h_prev", 0, B, "batch_size")
    n = a["h_prev"].shape[1]
    for name, width, what in (("w_ru", 2 * n, "cell_size * 2"), ("w_c", n, "cell_size")):
        rank(name, 2)
        _require_dim(a[name], name, 0, I + n, "input_size + cell_size", "dim_size")
        _require_dim(a[name], name, 1, width, what, "dim_size")
    for name, width, what in (("b_ru", 2 * n, "cell_size * 2"), ("b_c", n, "cell_size")):
        rank(name, 1)
        _require_dim(a[name], name, 0, width, what, "dim_size")
    if grad:
        for name in ("r", "u", "c", "d_h"):
            rank(name, 2)
            _require_dim(a[name], name, 0, B, "batch_size")
            _require_dim(a[name], name, 1, n, "cell_size")
    return B, I, n


def _attr_forget_bias(value, dtype: np.dtype) -> float:
    """A float32 attribute, cast to the op's dtype (TF: ``T(forget_bias)``)."""
    return float(np.float32(float_attr(value, "forget_bias")).astype(dtype))


def _attr_cell_clip(value) -> float:
    return float(np.float32(float_attr(value, "cell_clip")))


def _ensure_fits(op: str, dtype: np.dtype, T: int, L: int, B: int, I: int, n: int, grad: bool) -> None:
    """MemoryError before allocating when the call cannot fit (upper estimate, exact integers).

    ``T`` steps are returned, ``L`` of them computed; outputs are in ``dtype``, work arrays in
    the compute dtype.
    """
    nbytes = _estimate_nbytes(dtype, T, L, B, I, n, grad, settings.get_num_threads())
    resources.ensure_fits(nbytes, op, lambda: f"x of shape {shape_str((T, B, I) if T else (B, I))} and "
                                              f"cell size {n}")


@functools.lru_cache(maxsize=256)
def _estimate_nbytes(dtype: np.dtype, T: int, L: int, B: int, I: int, n: int, grad: bool,
                     threads: int) -> int:
    """:func:`_ensure_fits`'s estimate (cached: a cell op is called once per step with the same
    shapes)."""
    cd = compute_dtype(dtype)
    outputs = [(T, B, I), (I + n, 4 * n)] if grad else [(T, B, n)] * 7
    work = [(L, B, I)] * 2 + [(L, B, 4 * n)] * 3 + [(L + 1, B, n)] * 10 + [(I + n, 4 * n)] * 4  # 2: GEMM block products
    nbytes = resources.nbytes_of(outputs, dtype.itemsize) + resources.nbytes_of(work, cd.itemsize)
    # the native engine's workspace
    return nbytes + workspace_nbytes("lstm", B, n, n, cd.itemsize, inputs=I, threads=threads)


# ----------------------------------------------------------------------------------------------
# Adapters to the engines.

def _cast(dtype: np.dtype, *arrays: np.ndarray) -> list[np.ndarray]:
    """C-contiguous arrays of the compute dtype (copies only where needed), so that results do
    not depend on the memory layout of the inputs (BLAS rounds differently for other strides)."""
    return [np.ascontiguousarray(a, dtype=dtype) for a in arrays]


def _lstm_weights(w: np.ndarray, b: np.ndarray, peepholes, I: int, cd: np.dtype) -> LSTMWeights:
    w_input, w_recurrent, bias = _cast(cd, w[:I], w[I:], b)
    return LSTMWeights(w_input, w_recurrent, bias, peepholes=tuple(_cast(cd, *peepholes)))


def _lstm_sequence(L: int, a: dict, dtype: np.dtype, options: LSTMOptions) -> BlockLSTMResult:
    """Steps ``[0, L)`` on the engine; every output is 0 from ``L`` on.

    ``cs``, ``co`` and ``h`` are the engine's own trace arrays where nothing needs converting
    (``L == T``, the compute dtype): no copy; each output still owns memory no other output
    shares."""
    T, B, _ = a["x"].shape
    n = a["cs_prev"].shape[1]
    if not (L and B and n):
        return BlockLSTMResult(*(np.zeros((T, B, n), dtype) for _ in range(7)))
    trace = _lstm_trace(L, a, options)
    i, f, ci, o = trace.gates  # [L, B, n] each
    steps = {"i": i, "f": f, "ci": ci, "o": o, "cs": trace.c[1:], "co": trace.co, "h": trace.h[1:]}
    return BlockLSTMResult(**{name: _whole_sequence(values, L, T, dtype)
                              for name, values in steps.items()})


def _lstm_trace(L: int, a: dict, options: LSTMOptions) -> LSTMTrace:
    """The engine's forward over steps ``[0, L)`` of ``a["x"] [T, B, I]`` (``L, B, n > 0``), in
    the compute dtype of ``a``'s arrays; its gates as four [L, B, n] arrays (i, f, c, o)."""
    x = a["x"]
    cd = compute_dtype(x.dtype)
    weights = _lstm_weights(a["w"], a["b"], [a[p] for p in _PEEPHOLES], x.shape[2], cd)
    x_l, h0, c0 = _cast(cd, x[:L], a["h_prev"], a["cs_prev"])
    return engines.active().lstm_forward(x_l, h0, c0, weights, options, gate_planes=True)


def _whole_sequence(steps: np.ndarray, L: int, T: int, dtype: np.dtype) -> np.ndarray:
    """``steps [L, ...]`` as a ``[T, ...]`` output of ``dtype``, zero from ``L`` on: ``steps``
    itself where it already is one (``L == T``, C-contiguous, that dtype), else a new array."""
    if L == T and steps.dtype == dtype and steps.flags.c_contiguous:
        return steps
    out = aligned_empty((T,) + steps.shape[1:], dtype)
    out[:L] = steps
    out[L:] = 0
    return out


def _lstm_sequence_grad(L: int, a: dict, cd: np.dtype, options: LSTMOptions, x: np.ndarray,
                        h_states: np.ndarray, w: np.ndarray) -> LSTMGrads:
    """BPTT over steps ``[0, L)`` from the given forward tensors (``L, B, n > 0``): ``x [L, B, I]``,
    ``h_states [L+1, B, n]`` (``h_prev`` then ``h``) and ``w`` in the compute dtype."""
    n = a["cs_prev"].shape[1]
    I = x.shape[2]
    i, cs, f, o, ci, co = _cast(cd, *(a[name][:L] for name in _GATE_OUTPUTS))
    trace = LSTMTrace(gates=(i, f, ci, o), c=np.concatenate([a["cs_prev"][None].astype(cd), cs]), co=co,
                      h=h_states)
    weights = _lstm_weights(w, np.zeros(4 * n, cd), [a[p] for p in _PEEPHOLES], I, cd)
    dh_steps, dc_steps = _cast(cd, a["h_grad"][:L], a["cs_grad"][:L])
    return engines.active().lstm_backward(x, trace, weights, options, dh_steps=dh_steps,
                                          dc_steps=dc_steps)


# ----------------------------------------------------------------------------------------------
# BlockLSTM / BlockLSTMV2

def _block_lstm(op: str, layout: str, seq_len_max, inputs: dict, forget_bias, cell_clip,
                use_peephole) -> BlockLSTMResult:
    use_peephole = bool_attr(use_peephole, "use_peephole")
    clip = _attr_cell_clip(cell_clip)
    seq_len_max = _seq_len_max(seq_len_max)
    a, dtype = float_arrays(inputs, op=op)
    L, T, B, I, n = _check_block_lstm(seq_len_max, a)
    _ensure_fits(op, dtype, T, L, B, I, n, grad=False)
    options = LSTMOptions(layout=layout, forget_bias=_attr_forget_bias(forget_bias, dtype),
                          cell_clip=clip, use_peephole=use_peephole)
    return _lstm_sequence(L, a, dtype, options)


@public_op
def block_lstm(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, *, forget_bias=1.0, cell_clip=3.0,
               use_peephole=False) -> BlockLSTMResult:
    """TF ``BlockLSTM``: the LSTM over ``x[:seq_len_max]`` with **ICFO** gate columns.

    Args:
      seq_len_max: integer scalar in ``[0, T]``; steps from it on are not computed.
      x: ``[T, B, I]``.  cs_prev, h_prev: ``[B, n]`` initial cell / hidden state.
      w: ``[I+n, 4n]`` (x rows, then h rows; columns i | ci | f | o).  b: ``[4n]``.
      wci, wcf, wco: ``[n]`` peepholes (shapes checked even when ``use_peephole=False``).
      forget_bias: added to the forget gate pre-activation at every step.
      cell_clip: ``cs`` is clipped to ``[-cell_clip, cell_clip]`` when ``cell_clip > 0``
        (default 3.0: clipping is on by default).
      use_peephole: use ``wci, wcf`` (on ``cs_prev``) and ``wco`` (on the new, clipped ``cs``).

    Returns:
      ``BlockLSTMResult(i, cs, f, o, ci, co, h)``, each ``[T, B, n]`` (math in the module
      docstring); all seven are 0 for ``t >= seq_len_max``.
    """
    return _block_lstm("BlockLSTM", "icfo", seq_len_max,
                       dict(x=x, cs_prev=cs_prev, h_prev=h_prev, w=w, wci=wci, wcf=wcf, wco=wco, b=b),
                       forget_bias, cell_clip, use_peephole)


@public_op
def block_lstm_v2(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, *, cell_clip=0.0,
                  use_peephole=False) -> BlockLSTMResult:
    """TF ``BlockLSTMV2``: as :func:`block_lstm` but with **IFCO** gate columns (i | f | ci | o),
    no forget bias, and ``cell_clip`` off by default (0.0).

    Shapes: ``x [T, B, I]``, ``cs_prev, h_prev [B, n]``, ``w [I+n, 4n]``, ``wci, wcf, wco [n]``,
    ``b [4n]``.  Returns ``BlockLSTMResult(i, cs, f, o, ci, co, h)``, each ``[T, B, n]``, all 0
    for ``t >= seq_len_max``.
    """
    return _block_lstm("BlockLSTMV2", "ifco", seq_len_max,
                       dict(x=x, cs_prev=cs_prev, h_prev=h_prev, w=w, wci=wci, wcf=wcf, wco=wco, b=b),
                       0.0, cell_clip, use_peephole)


# ----------------------------------------------------------------------------------------------
# BlockLSTMGrad / BlockLSTMGradV2

def _block_lstm_grad(op: str, layout: str, seq_len_max, inputs: dict, use_peephole) -> BlockLSTMGradResult:
    use_peephole = bool_attr(use_peephole, "use_peephole")
    seq_len_max = _seq_len_max(seq_len_max)
    a, dtype = float_arrays(inputs, op=op)
    L, T, B, I, n = _check_block_lstm_grad(seq_len_max, a)
    _ensure_fits(op, dtype, T, L, B, I, n, grad=True)
    cs_prev_grad, h_prev_grad = np.zeros((B, n), dtype), np.zeros((B, n), dtype)
    w_grad, b_grad = np.zeros((I + n, 4 * n), dtype), np.zeros(4 * n, dtype)
    peephole_grads = [np.zeros(n, dtype) for _ in _PEEPHOLES]
    if L and B and n:
        cd = compute_dtype(dtype)
        x, h_prev, h = _cast(cd, a["x"][:L], a["h_prev"], a["h"][:L])
        h_states = np.concatenate([h_prev[None], h])
        grads = _lstm_sequence_grad(L, a, cd, LSTMOptions(layout=layout, use_peephole=use_peephole),
                                    x, h_states, a["w"])
        x_grad = _whole_sequence(grads.dx, L, T, dtype)
        cs_prev_grad[...], h_prev_grad[...] = grads.dc0, grads.dh0
        assign_2d(w_grad[:I], grads.dw_input)  # the native gradients are transposed views
        assign_2d(w_grad[I:], grads.dw_recurrent)
        b_grad[...] = grads.dbias
        if use_peephole:
            for out, g in zip(peephole_grads, grads.dpeepholes):
                out[...] = g
    else:
        x_grad = np.zeros((T, B, I), dtype)
    return BlockLSTMGradResult(x_grad, cs_prev_grad, h_prev_grad, w_grad, *peephole_grads, b_grad)


_GRAD_DOC = """TF ``{op}``: back-propagation through :func:`{fwd}` ({layout} gate columns).

    Inputs are the forward op's inputs (``seq_len_max, x [T, B, I], cs_prev, h_prev [B, n],
    w [I+n, 4n], wci, wcf, wco [n], b [4n]``), its outputs ``i, cs, f, o, ci, co, h``
    (each ``[T, B, n]``, used exactly as given, nothing is recomputed) and ``cs_grad, h_grad``
    ``[T, B, n]``: the gradients of the loss w.r.t. the op's own ``cs[t]`` / ``h[t]`` outputs
    only; the recurrent contributions are added here.  ``n = w.shape[1] / 4``.

    Per step ``t = seq_len_max-1 .. 0`` (``cp = cs_prev`` if ``t == 0`` else ``cs[t-1]``)::

        dh  = h_grad[t] + (recurrent part);  dcs = cs_grad[t] + (recurrent part)
        do  = o ⊙ (1-o) ⊙ dh ⊙ co
        dcs = (1 - co²) ⊙ dh ⊙ o + dcs  [+ do ⊙ wco]
        dci = (1 - ci²) ⊙ dcs ⊙ i;  df = f ⊙ (1-f) ⊙ dcs ⊙ cp;  di = i ⊙ (1-i) ⊙ dcs ⊙ ci
        dgates = [di | {packed}];  recurrent parts: dcs ⊙ f [+ di ⊙ wci + df ⊙ wcf], (dgates · wᵀ)[:, I:]
        x_grad[t] = (dgates · wᵀ)[:, :I];  w_grad = Σ_t [x[t] | h[t-1]]ᵀ · dgates;  b_grad = Σ_t,batch dgates
        wci_grad = Σ di ⊙ cp;  wcf_grad = Σ df ⊙ cp;  wco_grad = Σ do ⊙ cs[t]   (h[-1] = h_prev)

    **The cell clip is passed straight through** (its derivative is taken as 1, as in
    TensorFlow's kernel): where the forward clipped ``cs``, this is not the true gradient.
    ``b``'s values and every step ``t >= seq_len_max`` are not read; ``x_grad`` is 0 there.
    Without ``use_peephole`` the peephole gradients are exactly 0; ``seq_len_max = 0`` gives
    all zeros.

    Returns ``BlockLSTMGradResult(x_grad [T, B, I], cs_prev_grad [B, n], h_prev_grad [B, n],
    w_grad [I+n, 4n], wci_grad, wcf_grad, wco_grad [n], b_grad [4n])``.
    """


@public_op
def block_lstm_grad(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, i, cs, f, o, ci, co, h, cs_grad,
                    h_grad, *, use_peephole) -> BlockLSTMGradResult:
    return _block_lstm_grad("BlockLSTMGrad", "icfo", seq_len_max,
                            dict(x=x, cs_prev=cs_prev, h_prev=h_prev, w=w, wci=wci, wcf=wcf, wco=wco, b=b,
                                 i=i, cs=cs, f=f, o=o, ci=ci, co=co, h=h, cs_grad=cs_grad, h_grad=h_grad),
                            use_peephole)


@public_op
def block_lstm_grad_v2(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, i, cs, f, o, ci, co, h, cs_grad,
                       h_grad, *, use_peephole) -> BlockLSTMGradResult:
    return _block_lstm_grad("BlockLSTMGradV2", "ifco", seq_len_max,
                            dict(x=x, cs_prev=cs_prev, h_prev=h_prev, w=w, wci=wci, wcf=wcf, wco=wco, b=b,
                                 i=i, cs=cs, f=f, o=o, ci=ci, co=co, h=h, cs_grad=cs_grad, h_grad=h_grad),
                            use_peephole)


block_lstm_grad.__doc__ = _GRAD_DOC.format(op="BlockLSTMGrad", fwd="block_lstm", layout="ICFO",
                                           packed="dci | df | do")
block_lstm_grad_v2.__doc__ = _GRAD_DOC.format(op="BlockLSTMGradV2", fwd="block_lstm_v2", layout="IFCO",
                                              packed="df | dci | do")


# ----------------------------------------------------------------------------------------------
# LSTMBlockCell / LSTMBlockCellGrad

@public_op
def lstm_block_cell(x, cs_prev, h_prev, w, wci, wcf, wco, b, *, forget_bias=1.0, cell_clip=3.0,
                    use_peephole=False) -> BlockLSTMResult:
    """TF ``LSTMBlockCell``: one step of :func:`block_lstm` (**ICFO** gate columns).

    Shapes: ``x [B, I]``, ``cs_prev, h_prev [B, n]``, ``w [I+n, 4n]`` (columns i | ci | f | o),
    ``wci, wcf, wco [n]``, ``b [4n]``.  Attributes as in :func:`block_lstm` (``cell_clip``
    defaults to 3.0).  Returns ``BlockLSTMResult(i, cs, f, o, ci, co, h)``, each ``[B, n]``.
    ``B = 0`` and ``n = 0`` are accepted (TensorFlow rejects an empty ``cs_prev``).
    """
    use_peephole = bool_attr(use_peephole, "use_peephole")
    clip = _attr_cell_clip(cell_clip)
    a, dtype = float_arrays(dict(x=x, cs_prev=cs_prev, h_prev=h_prev, w=w, wci=wci, wcf=wcf, wco=wco, b=b),
                            op="LSTMBlockCell")
    B, I, n = _check_lstm_block_cell(a, grad=False)
    _ensure_fits("LSTMBlockCell", dtype, 0, 1, B, I, n, grad=False)
    options = LSTMOptions(layout="icfo", forget_bias=_attr_forget_bias(forget_bias, dtype), cell_clip=clip,
                          use_peephole=use_peephole)
    if not (B and n):
        return BlockLSTMResult(*(np.zeros((B, n), dtype) for _ in range(7)))
    trace = _lstm_trace(1, dict(a, x=a["x"][None]), options)
    i, f, ci, o, cs, co, h = (state.astype(dtype, copy=False)
                              for state in (*(gate[0] for gate in trace.gates), trace.c[1], trace.co[0], trace.h[1]))
    return BlockLSTMResult(i=i, cs=cs, f=f, o=o, ci=ci, co=co, h=h)


@public_op
def lstm_block_cell_grad(x, cs_prev, h_prev, w, wci, wcf, wco, b, i, cs, f, o, ci, co, cs_grad, h_grad, *,
                         use_peephole) -> LSTMBlockCellGradResult:
    """TF ``LSTMBlockCellGrad``: gate-level gradients of one :func:`lstm_block_cell` step.

    Inputs: the cell's inputs (``x [B, I]``, ``cs_prev, h_prev [B, n]``, ``w [I+n, 4n]``,
    ``wci, wcf, wco [n]``, ``b [4n]``; only the shapes of ``x, h_prev, w, b`` are used), its
    outputs ``i, cs, f, o, ci, co [B, n]`` (used as given) and ``cs_grad, h_grad [B, n]``, the
    total gradients of the step's ``cs`` and ``h``::

        do  = o ⊙ (1-o) ⊙ h_grad ⊙ co
        dcs = (1 - co²) ⊙ h_grad ⊙ o + cs_grad  [+ do ⊙ wco]
        dci = (1 - ci²) ⊙ dcs ⊙ i;  df = f ⊙ (1-f) ⊙ dcs ⊙ cs_prev;  di = i ⊙ (1-i) ⊙ dcs ⊙ ci
        dicfo        = [di | dci | df | do]                              (ICFO)
        cs_prev_grad = dcs ⊙ f  [+ di ⊙ wci + df ⊙ wcf]
        wci_grad = Σ_batch di ⊙ cs_prev;  wcf_grad = Σ_batch df ⊙ cs_prev;  wco_grad = Σ_batch do ⊙ cs
                                                    (peephole terms only with use_peephole, else 0)

    **The cell clip is passed straight through** (as in TensorFlow): where the forward clipped,
    this is not the true gradient.  The caller derives the rest: ``[x_grad | h_prev_grad] =
    dicfo · wᵀ``, ``w_grad = [x | h_prev]ᵀ · dicfo``, ``b_grad = Σ_batch dicfo``.

    Returns ``LSTMBlockCellGradResult(cs_prev_grad [B, n], dicfo [B, 4n], wci_grad, wcf_grad,
    wco_grad [n])``.
    """
    use_peephole = bool_attr(use_peephole, "use_peephole")
    a, dtype = float_arrays(dict(x=x, cs_prev=cs_prev, h_prev=h_prev, w=w, wci=wci, wcf=wcf, wco=wco, b=b,
                                 i=i, cs=cs, f=f, o=o, ci=ci, co=co, cs_grad=cs_grad, h_grad=h_grad),
                            op="LSTMBlockCellGrad")
    B, I, n = _check_lstm_block_cell(a, grad=True)
    _ensure_fits("LSTMBlockCellGrad", dtype, 0, 1, B, I, n, grad=True)
    cs_prev_grad, dicfo = np.zeros((B, n), dtype), np.zeros((B, 4 * n), dtype)
    peephole_grads = [np.zeros(n, dtype) for _ in _PEEPHOLES]
    if B and n:
        # One step's elementwise math (the engines' own step, engines.lstm.step_gradients): no
        # time loop, and x, h_prev and w are not read (as in TF).
        cd = compute_dtype(dtype)
        i, cs, f, o, ci, co, cs_grad, h_grad, c_prev = _cast(
            cd, *(a[name] for name in (*_GATE_OUTPUTS, "cs_grad", "h_grad", "cs_prev")))
        output_factor, cell_factor, gate_factor = backward_factors((i, f, ci, o), c_prev, co)
        peep = tuple(_cast(cd, *(a[p] for p in _PEEPHOLES))) if use_peephole else None
        d_gates = np.empty((B, 4 * n), cd)  # i, f, c', o
        cs_prev_grad[...] = step_gradients(h_grad, cs_grad, output_factor, cell_factor, gate_factor, f, peep,
                                           d_gates)
        dicfo[...] = to_ifco(d_gates, "icfo")
        if use_peephole:
            for out, (k, c) in zip(peephole_grads, ((0, c_prev), (1, c_prev), (3, cs))):
                out[...] = product_sum(d_gates[None, :, k * n:(k + 1) * n], c[None])
    return LSTMBlockCellGradResult(cs_prev_grad, dicfo, *peephole_grads)


# ----------------------------------------------------------------------------------------------
# GRUBlockCell / GRUBlockCellGrad

@public_op
def gru_block_cell(x, h_prev, w_ru, w_c, b_ru, b_c) -> GRUBlockCellResult:
    """TF ``GRUBlockCell``: one GRU step, reset gate applied to ``h_prev`` before the matmul.

    Shapes: ``x [B, I]``, ``h_prev [B, n]``, ``w_ru [I+n, 2n]`` (columns r | u), ``w_c [I+n, n]``,
    ``b_ru [2n]``, ``b_c [n]``::

        r, u = σ([x | h_prev] · w_ru + b_ru)
        c    = tanh([x | r ⊙ h_prev] · w_c + b_c)
        h    = u ⊙ h_prev + (1 - u) ⊙ c          (u weights the old state)

    Returns ``GRUBlockCellResult(r, u, c, h)``, each ``[B, n]``.
    """
    a, dtype = float_arrays(dict(x=x, h_prev=h_prev, w_ru=w_ru, w_c=w_c, b_ru=b_ru, b_c=b_c), op="GRUBlockCell")
    B, I, n = _check_gru(a, grad=False)
    _ensure_fits("GRUBlockCell", dtype, 0, 1, B, I, n, grad=False)
    cd = compute_dtype(dtype)
    out = gru_block_forward(*_cast(cd, a["x"], a["h_prev"], a["w_ru"], a["w_c"], a["b_ru"], a["b_c"]))
    return GRUBlockCellResult(*(v.astype(dtype, copy=False) for v in out))


@public_op
def gru_block_cell_grad(x, h_prev, w_ru, w_c, b_ru, b_c, r, u, c, d_h) -> GRUBlockCellGradResult:
    """TF ``GRUBlockCellGrad``: gradients of one :func:`gru_block_cell` step from ``d_h = ∂L/∂h``.

    Inputs: the cell's inputs (shapes as there; the values of ``x, b_ru, b_c`` are not read), its
    outputs ``r, u, c [B, n]`` (used as given) and ``d_h [B, n]``::

        d_c_bar  = d_h ⊙ (1 - u) ⊙ (1 - c²)
        d_u_bar  = d_h ⊙ (h_prev - c) ⊙ u ⊙ (1 - u)
        A        = d_c_bar · w_cᵀ;   d_hr = A[:, I:]
        d_r_bar  = d_hr ⊙ h_prev ⊙ r ⊙ (1 - r)
        d_r_bar_u_bar = [d_r_bar | d_u_bar];   C = d_r_bar_u_bar · w_ruᵀ
        d_x      = C[:, :I] + A[:, :I];   d_h_prev = C[:, I:] + d_hr ⊙ r + d_h ⊙ u

    Weight gradients are the caller's: ``w_ru_grad = [x | h_prev]ᵀ · d_r_bar_u_bar``,
    ``w_c_grad = [x | r ⊙ h_prev]ᵀ · d_c_bar``, ``b_ru_grad``/``b_c_grad`` = batch sums.

    Returns ``GRUBlockCellGradResult(d_x [B, I], d_h_prev [B, n], d_c_bar [B, n],
    d_r_bar_u_bar [B, 2n])``.
    """
    a, dtype = float_arrays(dict(x=x, h_prev=h_prev, w_ru=w_ru, w_c=w_c, b_ru=b_ru, b_c=b_c, r=r, u=u, c=c,
                                 d_h=d_h), op="GRUBlockCellGrad")
    B, I, n = _check_gru(a, grad=True)
    _ensure_fits("GRUBlockCellGrad", dtype, 0, 1, B, I, n, grad=True)
    cd = compute_dtype(dtype)
    out = gru_block_backward(*_cast(cd, a["x"], a["h_prev"], a["w_ru"], a["w_c"], a["r"], a["u"], a["c"],
                                    a["d_h"]))
    return GRUBlockCellGradResult(*(v.astype(dtype, copy=False) for v in out))
