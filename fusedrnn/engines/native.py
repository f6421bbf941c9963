"""The native backend: the NumPy engines' functions, with the time loops in compiled code.

Same signatures and results as :mod:`.lstm`, :mod:`.gru`, :mod:`.simple_rnn` (the reference;
results agree to round-off: the GEMMs sum in another order and tanh differs in its last bits,
see ``docs/native_engine.md``).  Split of the work per pseudo-layer:

* ``fusedrnn._native``, one call with the GIL released for the whole time loop: per step the
  recurrent GEMM ``h_{t-1} R`` (R packed once per call, read through strides straight from the
  caller's parameter views) and the gate math fused after it, recording the same trace
  (:class:`.lstm.LSTMTrace`, ...) into the arrays passed in (e.g. views into
  ``reserve_space``), so a native forward feeds a NumPy backward and back.  Every mode computes
  its input projection ``x W + b`` inside that call too, a chunk of about 128 rows at a time,
  each thread for its own gate columns (a skip-input layer gets ``x + b`` from
  :func:`.common.input_projection`);
* after the backward loop, the all-steps GEMMs (weight gradients ``xᵀ dG``, ``hᵀ dG`` and
  ``dx = dG Wᵀ``) run on the engine's team too (:data:`LINALG`, ``_native.gemm``): float32
  sums over blocks of 64 rows added in float64, no BLAS thread pool; so do the peephole sums
  (``_native.product_sum``, float64 sums of the exact products, one thread) and the bias sums
  (``_native.column_sum``: :func:`.common.column_sum`'s order, so its bits; one thread).

Native workspace per call (besides the trace and gradients the caller sees):
:func:`workspace_nbytes`, which the ``MemoryError`` estimates include.
"""

from __future__ import annotations

import numpy as np

from .. import settings
from . import gru, lstm, simple_rnn
from .buffers import aligned_copy, aligned_empties, aligned_empty
from .common import NO_OUT, Linalg, WeightGradOut, assign_2d, column_sum, input_projection, live_rows_linalg
from .lstm import CUDNN_LSTM, LSTMOptions


# csrc/cells.h runs_in_slices, backward_runs_in_slices: an LSTM or GRU loop (forward: of at most
# 256 units) of at least SLICE_MIN_ROWS rows per thread may run as one slice of the batch per
# thread, each with its own workspace (with ended sequences a slice may hold most of the rows)
SLICE_MIN_ROWS = 8


def workspace_nbytes(mode: str, B: int, H: int, Hout: int, itemsize: int,
                     inputs: int | None = None, threads: int | None = None) -> int:
    """Upper bound of the native kernels' own workspace in one pseudo-layer call, forward or
    backward (the peak; freed when the call returns).  Time loop: the packed recurrent matrix
    and, for an LSTM with projection, the packed ``W_P``, both with the widest panels (NR = 32
    float32 / 16 float64 values, zero-padded to a multiple of NR columns), the step buffers
    (``[B, G·H]`` and ``[B, Hout]``) and each thread's packed GEMM operand (``B·4H``).  With
    ``inputs`` (= I): the LSTM forward's in-loop input projection (packed ``W``, a chunk of
    ``⌈128/B⌉·B`` rows of ``x W``, each thread's packed chunk of ``x`` and its copy of the
    chunk's live rows) and the backward's
    weight-gradient GEMMs (``[G·H, max(I, Hout)]`` float64 sums, NR-padded, and two packed
    1024-row chunks);
    the largest of the phases counts; for a loop that may run in batch slices
    (``SLICE_MIN_ROWS``), each slice's, bounded by a whole batch's on one thread.
    Everything else a call uses is a NumPy array the callers' estimates already count (the
    trace, the gate gradients)."""
    threads = threads or settings.get_num_threads()
    total = _team_workspace_nbytes(mode, B, H, Hout, itemsize, inputs, threads)
    if mode in ("lstm", "gru") and threads > 1 and B >= SLICE_MIN_ROWS * threads:
        one_slice = _team_workspace_nbytes(mode, B, H, Hout, itemsize, inputs, 1)
        total = max(total, threads * one_slice)
    return total


def _team_workspace_nbytes(mode: str, B: int, H: int, Hout: int, itemsize: int,
                           inputs: int | None, threads: int) -> int:
    """:func:`workspace_nbytes` of a loop whose `threads` threads share the hidden units."""
    G = {"lstm": 4, "gru": 3}.get(mode, 1)
    nr = 2 * 64 // itemsize
    padded = lambda n: -(-n // nr) * nr  # noqa: E731
    packed = G * max(padded(H) * Hout, H * padded(Hout))
    if Hout != H:
        packed += max(padded(Hout) * H, Hout * padded(H))
    step = B * (G * H + 2 * Hout + H) + threads * B * (G * H + Hout + nr * 4)
    loop = (packed + step) * itemsize
    if inputs is None:
        return loop
    rows = -(-128 // B) * B if B else 128  # whole steps of at least 128 rows
    # per thread: the packed chunk of x and (variable lengths) the chunk's live rows of x
    projection = (G * padded(H) * inputs + rows * G * H + 2 * threads * rows * inputs) * itemsize
    gemm = (padded(G * H) * padded(max(inputs, Hout)) * 8
            + 2 * 1024 * padded(max(G * H, inputs)) * itemsize + threads * 198 * 1024 * itemsize)
    return loop + max(projection, gemm)


def _c(a: np.ndarray | None, dtype) -> np.ndarray | None:
    """C-contiguous in the compute dtype (copies only where needed)."""
    return None if a is None else np.ascontiguousarray(a, dtype=dtype)


def _strided(a: np.ndarray | None, dtype) -> np.ndarray | None:
    """A 2-D weight matrix as it is (any strides: the kernels pack it once per call), copied only
    when its dtype or strides need it."""
    if a is None:
        return None
    if a.dtype == dtype and a.ndim == 2:
        rows, columns = a.strides
        if rows > 0 and columns > 0 and rows % a.itemsize == 0 and columns % a.itemsize == 0:
            return a
    return np.ascontiguousarray(a, dtype=dtype)


def _mask(valid: np.ndarray | None) -> np.ndarray | None:
    return None if valid is None else np.ascontiguousarray(valid, dtype=np.bool_)


def _recording(out, shapes: list, dtype) -> tuple[list, list]:
    """Arrays for the kernel to write (``out``'s own arrays where they are C-contiguous, else
    fresh ones) and the caller's arrays to copy them into afterwards."""
    if out is None:
        work = aligned_empties(shapes, dtype)
        return work, work
    targets = list(out)
    work = [t if t.flags.c_contiguous and t.dtype == dtype else aligned_empty(t.shape, dtype)
            for t in targets]
    return work, targets


def _copy_back(work: list, targets: list) -> list:
    if work is targets:
        return targets
    for w, t in zip(work, targets):
        if w is not t:
            t[...] = w
    return targets


def _peepholes(peep) -> np.ndarray | None:
    return None if peep is None else np.ascontiguousarray(np.stack(peep))


def _threads() -> int:
    return settings.get_num_threads()


def _gram(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None,
          rows: np.ndarray | None = None) -> np.ndarray:
    """``aᵀ b`` over the N rows of ``a[N, m]``, ``b[N, n]`` (only ``rows``, strictly increasing
    int64 indices, when given: read in place, the bits of the gathered rows' product) on the
    engine's team; float32 sums over blocks of 64 rows added in float64 (at least as accurate as
    :func:`.common.gram`).

    Computed as ``bᵀ a`` into a C-contiguous ``[n, m]`` array and returned as its transpose (a
    view; the same products summed in the same order, so the same bits): the cuDNN layout's
    ``[G·H, in]`` weight blocks have that layout, so ``out`` (the ``[m, n]`` result's place)
    that is the transpose of such a block is written in place, nothing copied."""
    a, b = _c(a, a.dtype), _c(b, a.dtype)
    direct = out is not None and out.T.flags.c_contiguous and out.dtype == a.dtype
    out_t = out.T if direct else aligned_empty((b.shape[1], a.shape[1]), a.dtype)
    settings.native_module().gemm(b, a, out_t, True, False, True, _threads(), k_rows=_index(rows))
    if out is not None and not direct:
        assign_2d(out, out_t.T)
        return out
    return out_t.T


def _gram_rows(a: np.ndarray, b: np.ndarray, rows: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """:func:`_gram` over ``rows`` only (``Linalg.gram_rows``)."""
    return _gram(a, b, out, rows)


def _matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` on the engine's team (``b`` may be the transpose of a C-contiguous array)."""
    a = _c(a, a.dtype)
    out = aligned_empty((a.shape[0], b.shape[1]), a.dtype)
    _matmul_rows(a, b, None, out)
    return out


def _matmul_rows(a: np.ndarray, b: np.ndarray, rows: np.ndarray | None, out: np.ndarray) -> None:
    """``out[rows] = a[rows] @ b`` (all rows when ``rows`` is None; strictly increasing int64
    indices, read and written in place: the bits of the gathered rows' product) on the engine's
    team; ``out`` C-contiguous ``[N, n]`` in ``a``'s dtype, its other rows left as they are."""
    a = _c(a, a.dtype)
    transposed = not b.flags.c_contiguous and b.T.flags.c_contiguous and b.dtype == a.dtype
    settings.native_module().gemm(a, b.T if transposed else _c(b, a.dtype), out, False, transposed,
                                  False, _threads(), m_rows=_index(rows))


def _index(rows: np.ndarray | None) -> np.ndarray | None:
    return None if rows is None else np.ascontiguousarray(rows, np.int64)


def _product_sum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``Σ_{t,b} a ⊙ b`` for ``a, b [T, B, k]`` (views whose rows are contiguous, e.g. a gate's
    columns of ``d_gates``) → ``[k]``: float64 sums of the products in row order (one thread;
    float32 products are exact in float64, so as exact as :func:`.common.product_sum`)."""
    k = a.shape[-1]
    out = np.empty(k, a.dtype)
    settings.native_module().product_sum(a.reshape(-1, k), b.reshape(-1, k), out)
    return out


def _column_sum(a: np.ndarray) -> np.ndarray:
    """``Σ_rows a`` for ``a[N, k]`` → ``[k]``: :func:`.common.column_sum`'s operations in its
    order, so its bits (one thread; a single column, which NumPy sums pairwise, stays NumPy's)."""
    if a.shape[1] < 2:
        return column_sum(a)
    if a.strides[1] != a.itemsize:
        a = _c(a, a.dtype)
    out = np.empty(a.shape[1], a.dtype)
    settings.native_module().column_sum(a, out)
    return out


# Smaller gathers, and all on one thread, stay NumPy's (its take is as fast on one thread, and
# the team's start costs more than a second thread saves on a small one).
_MIN_TEAM_GATHER_BYTES = 256 * 1024


def take_rows(a: np.ndarray, index: np.ndarray, axis: int = 0) -> np.ndarray:
    """``np.take(a, index, axis)`` (the same array) for ``index`` within range: the rows of the
    last axis copied on the engine's team (``_native.gather``) when ``axis`` is the one before
    the last, the rows are contiguous, the result is large and the team has several threads;
    NumPy's take otherwise."""
    item, threads = a.itemsize, _threads()
    out_bytes = a.nbytes // max(a.shape[axis], 1) * index.size if a.ndim == axis + 2 else 0
    rows_contiguous = a.shape[-1] < 2 or a.strides[-1] == item
    if (threads < 2 or a.ndim > 3 or out_bytes < _MIN_TEAM_GATHER_BYTES or not rows_contiguous
            or any(s < 0 or s % item for s in a.strides[:-1])):
        return np.take(a, index, axis=axis)
    src = a if a.ndim == 3 else a[None]
    out = aligned_empty((src.shape[0], index.size, a.shape[-1]), a.dtype)
    settings.native_module().gather(src, np.ascontiguousarray(index, np.int64), out, threads)
    return out if a.ndim == 3 else out[0]


LINALG = Linalg(gram=_gram, matmul=_matmul, product_sum=_product_sum, column_sum=_column_sum,
                take_rows=take_rows, gram_rows=_gram_rows, matmul_rows=_matmul_rows)


def _live_linalg(valid: np.ndarray | None) -> Linalg:
    """:data:`LINALG` over the live rows (:func:`.common.live_rows_linalg`)."""
    return live_rows_linalg(valid, LINALG)


# ----------------------------------------------------------------------------------------
# Forward passes that keep no trace (inference): the one place each binding is called without
# one (lstm_forward / gru_forward / rnn_forward below, and fusedrnn.cudnn._lean directly).
# x [T, B, I] C-contiguous (None when x_gates [T, B, G·H], the already projected input of a
# skip-input layer, is given) and h0 [B, Hout] (c0 [B, H]) in the compute dtype; the weights in
# column form with any strides (w_input [I, G·H], w_recurrent [Hout, G·H], w_proj [H, P]),
# biases, peepholes and the [T, B] mask C-contiguous.  Each returns h [T+1, B, Hout] (h[0] = h0).

def lstm_inference(x, h0, c0, w_input, w_recurrent, bias, w_proj=None, *, x_gates=None,
                   peepholes=None, valid=None, cell_clip: float = 0.0, gate_blocks=None):
    """LSTM (i, f, c, o; ``bias`` = b_W + b_R; ``peepholes`` halved, [3, H]):
    ``(h [T+1, B, Hout], c_T [B, H])``.  ``gate_blocks``: the column blocks of ``w_input`` and
    ``w_recurrent`` that hold i, f, c, o (None: in that order)."""
    source = x if x is not None else x_gates
    T, B, H, dtype = *source.shape[:2], c0.shape[-1], source.dtype
    c_states, h_states = aligned_empty((2, B, H), dtype), aligned_empty((T + 1, B, h0.shape[-1]), dtype)
    c_states[0], h_states[0] = c0, h0
    settings.native_module().lstm_forward(x_gates, x, w_input, bias, lstm.gate_scale(H, dtype), w_recurrent,
                                          peepholes, w_proj, valid, cell_clip, False, None, c_states,
                                          None, h_states, settings.get_num_threads(), gate_blocks)
    return h_states, c_states[T % 2]


def gru_inference(x, h0, w_input, w_recurrent, bias_input, bias_recurrent, *, x_gates=None, valid=None):
    """cuDNN GRU (r, u, h'; ``R_h h + b_Rh`` inside the reset product): ``h [T+1, B, H]`` (its
    gate and ``R_h h`` buffers hold one step)."""
    source = x if x is not None else x_gates
    T, B, H, dtype = *source.shape[:2], h0.shape[-1], source.dtype
    gates, q_h = aligned_empty((1, B, 3 * H), dtype), aligned_empty((1, B, H), dtype)
    h_states = aligned_empty((T + 1, B, H), dtype)
    h_states[0] = h0
    settings.native_module().gru_forward(x_gates, x, w_input, bias_input, w_recurrent, bias_recurrent,
                                         valid, gates, q_h, h_states, settings.get_num_threads())
    return h_states


def rnn_inference(x, h0, w_input, w_recurrent, bias, relu: bool, *, x_gates=None, valid=None,
                  h_states=None):
    """tanh / relu RNN (``bias`` = b_W + b_R): ``h [T+1, B, H]``, into ``h_states`` when given
    (a C-contiguous array of that shape: h is all of an RNN's trace)."""
    source = x if x is not None else x_gates
    if h_states is None:
        h_states = aligned_empty((source.shape[0] + 1, source.shape[1], h0.shape[-1]), source.dtype)
    h_states[0] = h0
    settings.native_module().rnn_forward(x_gates, x, w_input, bias, w_recurrent, relu, valid, h_states,
                                         settings.get_num_threads())
    return h_states


# ----------------------------------------------------------------------------------------
# LSTM

def lstm_forward(x: np.ndarray, h0: np.ndarray, c0: np.ndarray, weights: lstm.LSTMWeights,
                 options: LSTMOptions = CUDNN_LSTM, valid: np.ndarray | None = None,
                 out: lstm.LSTMTrace | None = None, keep_trace: bool = True,
                 gate_planes: bool = False) -> lstm.LSTMTrace:
    """:func:`.lstm.lstm_forward` with the time loop native.  The input projection ``x W + b``
    runs inside the native call, a chunk of steps at a time (skip input: here, as x + b);
    ``keep_trace=False`` records only ``h`` and the last two cell states (a trace whose
    ``gates``/``co`` are None and whose ``c`` holds the final state only: the kernel keeps
    one step of them in its own buffers); ``gate_planes`` (no ``out``): the kernel writes each
    gate's activations to a [T, B, H] array of its own."""
    native = settings.native_module()
    # the kernel reads W and R in their own gate order (no reordered copy)
    w = lstm.ifco_weights(weights, options, matrices=False)
    gate_blocks = lstm.gate_blocks(options.layout)
    T, B = x.shape[:2]
    H, Hout = c0.shape[-1], h0.shape[-1]
    dtype = x.dtype
    scale = lstm.gate_scale(H, dtype)  # R is halved as it is packed
    x_gates = x_in = w_in = bias = None
    if w.w_input is None:  # skip input: every gate gets x
        x_gates = input_projection(x, None, w.bias, 4)
        x_gates *= scale
    else:
        x_in, w_in, bias = _c(x, dtype), _strided(w.w_input, dtype), _c(w.bias, dtype)
    w_rec, w_proj = _strided(w.w_recurrent, dtype), _c(w.w_proj, dtype)
    peepholes = lstm.halved_peepholes(w, options, dtype)
    if not (keep_trace or out is not None):
        h_states, c_last = lstm_inference(x_in, h0, c0, w_in, w_rec, bias, w_proj, x_gates=x_gates,
                                          peepholes=peepholes, valid=_mask(valid),
                                          cell_clip=float(options.cell_clip),
                                          gate_blocks=gate_blocks)
        return lstm.LSTMTrace(None, c_last[None], None, h_states)
    shapes = lstm.trace_shapes(T, B, H, Hout)
    if gate_planes and out is None:
        work = aligned_empties([(T, B, H)] * 4 + shapes[1:], dtype)
        work = targets = [tuple(work[:4])] + work[4:]
    else:
        work, targets = _recording(out, shapes, dtype)
    gates, c_states, co, h_states = work
    c_states[0], h_states[0] = c0, h0
    native.lstm_forward(x_gates, x_in, w_in, bias, scale, w_rec, peepholes, w_proj, _mask(valid),
                        float(options.cell_clip), True, gates, c_states, co, h_states, _threads(),
                        gate_blocks)
    return lstm.LSTMTrace(*_copy_back(work, targets))


def lstm_backward(x: np.ndarray, trace: lstm.LSTMTrace, weights: lstm.LSTMWeights,
                  options: LSTMOptions = CUDNN_LSTM, *, dh_steps: np.ndarray | None = None,
                  dc_steps: np.ndarray | None = None, dh_last: np.ndarray | None = None,
                  dc_last: np.ndarray | None = None, valid: np.ndarray | None = None,
                  need_dx: bool = True, weight_grads_out: WeightGradOut = NO_OUT) -> lstm.LSTMGrads:
    """:func:`.lstm.lstm_backward` with the time loop native."""
    native = settings.native_module()
    w = lstm.ifco_weights(weights, options)
    dtype = trace.c.dtype
    c_states, co, h_states = (_c(a, dtype) for a in trace[1:])
    gates = (tuple(_c(a, dtype) for a in trace.gates) if isinstance(trace.gates, tuple)
             else _c(trace.gates, dtype))
    T, B = co.shape[:2]
    H, Hout = c_states.shape[-1], h_states.shape[-1]
    d_gates = aligned_empty((T, B, 4 * H), dtype)
    dh_total = aligned_empty((T, B, Hout), dtype) if w.w_proj is not None else None
    dh = aligned_copy(np.zeros((B, Hout)) if dh_last is None else dh_last, dtype)
    dc = aligned_copy(np.zeros((B, H)) if dc_last is None else dc_last, dtype)
    peep = w.peepholes if options.use_peephole else None
    native.lstm_backward(gates, c_states, co, h_states, _strided(w.w_recurrent, dtype), _peepholes(peep),
                         _c(w.w_proj, dtype), _c(dh_steps, dtype), _c(dc_steps, dtype),
                         _mask(valid), d_gates, dh_total, dh, dc, _threads())
    return lstm.gradients(x, lstm.LSTMTrace(gates, c_states, co, h_states), w, options, d_gates,
                          dh_total, dh, dc, need_dx, _live_linalg(valid), weight_grads_out)


# ----------------------------------------------------------------------------------------
# GRU

def gru_forward(x: np.ndarray, h0: np.ndarray, weights: gru.GRUWeights,
                valid: np.ndarray | None = None, out: gru.GRUTrace | None = None,
                keep_trace: bool = True) -> gru.GRUTrace:
    """:func:`.gru.gru_forward` with the time loop native; ``keep_trace=False`` records only
    ``h`` (a trace whose ``gates`` and ``q_h`` are None: :func:`gru_inference`)."""
    native = settings.native_module()
    T, B = x.shape[:2]
    H = h0.shape[-1]
    dtype = x.dtype
    if weights.w_input is None:  # skip input
        x_gates, x_in = input_projection(x, None, weights.bias_input, 3), None
    else:  # x W + bW inside the native call
        x_gates, x_in = None, _c(x, dtype)
    w_in, b_in = _strided(weights.w_input, dtype), _c(weights.bias_input, dtype)
    w_rec, b_rec = _strided(weights.w_recurrent, dtype), _c(weights.bias_recurrent, dtype)
    if not (keep_trace or out is not None):
        h_states = gru_inference(x_in, h0, w_in, w_rec, b_in, b_rec, x_gates=x_gates, valid=_mask(valid))
        return gru.GRUTrace(None, None, h_states)
    work, targets = _recording(out, gru.trace_shapes(T, B, H), dtype)
    gates, q_h, h_states = work
    h_states[0] = h0
    native.gru_forward(x_gates, x_in, w_in, b_in, w_rec, b_rec, _mask(valid), gates, q_h, h_states, _threads())
    return gru.GRUTrace(*_copy_back(work, targets))


def gru_backward(x: np.ndarray, trace: gru.GRUTrace, weights: gru.GRUWeights, *,
                 dh_steps: np.ndarray | None = None, dh_last: np.ndarray | None = None,
                 valid: np.ndarray | None = None, need_dx: bool = True,
                 weight_grads_out: WeightGradOut = NO_OUT) -> gru.GRUGrads:
    """:func:`.gru.gru_backward` with the time loop native."""
    native = settings.native_module()
    dtype = trace.gates.dtype
    gates, q_h, h_states = (_c(a, dtype) for a in trace)
    T, B = gates.shape[:2]
    H = h_states.shape[-1]
    d_a = aligned_empty((T, B, 3 * H), dtype)
    d_q = aligned_empty((T, B, 3 * H), dtype)
    dh = aligned_copy(np.zeros((B, H)) if dh_last is None else dh_last, dtype)
    native.gru_backward(gates, q_h, h_states, _strided(weights.w_recurrent, dtype), _c(dh_steps, dtype),
                        _mask(valid), d_a, d_q, dh, _threads())
    return gru.gradients(x, h_states, weights, d_a, d_q, dh, need_dx, _live_linalg(valid), weight_grads_out)


# ----------------------------------------------------------------------------------------
# tanh / relu RNN

def rnn_forward(x: np.ndarray, h0: np.ndarray, weights: simple_rnn.RNNWeights, activation: str,
                valid: np.ndarray | None = None,
                out: simple_rnn.RNNTrace | None = None) -> simple_rnn.RNNTrace:
    """:func:`.simple_rnn.rnn_forward` with the time loop native."""
    T, B = x.shape[:2]
    H = h0.shape[-1]
    dtype = x.dtype
    if weights.w_input is None:  # skip input
        x_gates, x_in = input_projection(x, None, weights.bias, 1), None
    else:  # x W + b inside the native call
        x_gates, x_in = None, _c(x, dtype)
    work, targets = _recording(out, [(T + 1, B, H)], dtype)
    rnn_inference(x_in, h0, _strided(weights.w_input, dtype), _strided(weights.w_recurrent, dtype),
                  _c(weights.bias, dtype), activation == "relu", x_gates=x_gates, valid=_mask(valid),
                  h_states=work[0])
    return simple_rnn.RNNTrace(*_copy_back(work, targets))


def rnn_backward(x: np.ndarray, trace: simple_rnn.RNNTrace, weights: simple_rnn.RNNWeights,
                 activation: str, *, dh_steps: np.ndarray | None = None,
                 dh_last: np.ndarray | None = None, valid: np.ndarray | None = None,
                 need_dx: bool = True, weight_grads_out: WeightGradOut = NO_OUT) -> simple_rnn.RNNGrads:
    """:func:`.simple_rnn.rnn_backward` with the time loop native."""
    native = settings.native_module()
    dtype = trace.h.dtype
    h_states = _c(trace.h, dtype)
    T = h_states.shape[0] - 1
    B, H = h_states.shape[1:]
    d_pre = aligned_empty((T, B, H), dtype)
    dh = aligned_copy(np.zeros((B, H)) if dh_last is None else dh_last, dtype)
    native.rnn_backward(h_states, _strided(weights.w_recurrent, dtype), activation == "relu",
                        _c(dh_steps, dtype), _mask(valid), d_pre, dh, _threads())
    return simple_rnn.gradients(x, h_states, weights, d_pre, dh, need_dx, _live_linalg(valid),
                                weight_grads_out)
