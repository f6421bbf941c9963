"""Pieces shared by the sequence engines: activations, the all-time-steps GEMMs.

Every engine works time-major in *scan order* (the order the recurrence visits
the steps; a caller runs a backward direction by flipping the time axis) and in
one floating compute dtype (float32 or float64).  ``valid[t, b]`` (bool, scan
order) marks the steps that belong to sequence ``b``; on an invalid step the
state is carried through unchanged and no gradient reaches the gates.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from .buffers import aligned_empty, aligned_zeros


def sigmoid(z: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Logistic function, overflow-free: σ(z) = (1 + tanh(z / 2)) / 2."""
    out = np.multiply(z, 0.5, out=out)
    np.tanh(out, out=out)
    out += 1.0
    out *= 0.5
    return out


def input_projection(x: np.ndarray, w_input: np.ndarray | None, bias: np.ndarray,
                     num_gates: int) -> np.ndarray:
    """All time steps at once: ``x[T, B, in] @ w_input[in, G*H] + bias[G*H]``.

    ``w_input=None`` is cuDNN's skip_input: every gate receives ``x`` itself
    (requires in == H).
    """
    T, B, n_in = x.shape
    if w_input is None:
        # a fresh array (np.tile returns a view of an empty x, which may be read-only)
        out = np.empty((T, B, num_gates * n_in), dtype=x.dtype)
        out.reshape(T, B, num_gates, n_in)[...] = x[:, :, None, :]
        out += bias
        return out
    out = np.empty((T, B, w_input.shape[1]), dtype=x.dtype)
    np.matmul(x.reshape(T * B, n_in), w_input, out=out.reshape(T * B, w_input.shape[1]))
    out += bias
    return out


# Reductions over all T*B rows (weight, bias and peephole gradients).  A plain float32 running
# sum of N rows, and a BLAS GEMM over K = N rows, accumulate each output in one float32 register,
# so the rounding error grows with N.  Instead, in float32:
#   column sums: blocks of SUM_BLOCK_ROWS rows are summed in float32, the block sums in float64,
#     and the result is rounded once: error <= (γ_{15} + u) Σ|terms| (u = 2**-24, γ_k = k u / (1 - k u));
#   GEMMs (``gram``): BLAS multiplies blocks of max(GRAM_BLOCK_ROWS, N / GRAM_MAX_BLOCKS) rows;
#     the products of up to GRAM_GROUP_BLOCKS consecutive blocks are added in float32, those group
#     sums in float64, and the result is rounded once: error <= (γ_{rows-1+8} + u) Σ|a_i b_i|.
# Against TF's CPU kernels (float32 vs a float64 truth, T*B = 512 .. 3200) this gives smaller
# bias/peephole errors and comparable weight errors, at a cost of a few % of the backward pass
# (more, smaller GEMMs).  float64 runs as one sum / one GEMM.
SUM_BLOCK_ROWS = 16
GRAM_BLOCK_ROWS = 64
GRAM_MAX_BLOCKS = 32
GRAM_GROUP_BLOCKS = 8


def column_sum(a: np.ndarray) -> np.ndarray:
    """``Σ_rows a`` for ``a[N, k]`` → ``[k]`` in ``a``'s dtype (float32: blocked, see above)."""
    if a.dtype == np.float64:
        return a.sum(axis=0)
    N, k = a.shape
    blocks = N // SUM_BLOCK_ROWS
    total = a[blocks * SUM_BLOCK_ROWS:].sum(axis=0, dtype=np.float64)
    if blocks:
        block_sums = a[:blocks * SUM_BLOCK_ROWS].reshape(blocks, SUM_BLOCK_ROWS, k).sum(axis=1)
        total += block_sums.sum(axis=0, dtype=np.float64)
    return total.astype(a.dtype)


def product_sum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``Σ_{t,b} a ⊙ b`` for ``a, b [T, B, k]`` → ``[k]`` (the peephole gradients); float32
    products and their sum are formed in float64 (a float32 product is exact there), so the
    result is the exact sum rounded once."""
    if a.dtype == np.float64:
        return np.einsum("tbk,tbk->k", a, b)
    return np.einsum("tbk,tbk->k", a, b, dtype=np.float64, casting="same_kind").astype(a.dtype)


def gram_block_rows(N: int) -> int:
    """Rows per BLAS block for ``N`` rows: GRAM_BLOCK_ROWS, more when that would make more than
    GRAM_MAX_BLOCKS blocks (fewer, larger GEMMs: the time stays within a few % of one GEMM)."""
    return max(GRAM_BLOCK_ROWS, -(-N // GRAM_MAX_BLOCKS))


def gram(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``aᵀ b`` for ``a[N, m]``, ``b[N, n]`` → ``[m, n]``; float32 by row blocks (see above: the
    products of up to GRAM_GROUP_BLOCKS blocks are added in float32, the group sums in float64).
    ``out``: an ``[m, n]`` array (any strides) to write the result into and return."""
    if out is not None:
        assign_2d(out, gram(a, b))
        return out
    N = a.shape[0]
    rows = gram_block_rows(N)
    if a.dtype == np.float64 or N <= rows:
        return a.T @ b
    group_rows = rows * GRAM_GROUP_BLOCKS
    total = part = None
    for group_start in range(0, N, group_rows):
        group_end = min(group_start + group_rows, N)
        group = a[group_start:group_start + rows].T @ b[group_start:group_start + rows]
        if part is None:
            part = np.empty_like(group)
        for start in range(group_start + rows, group_end, rows):
            np.matmul(a[start:start + rows].T, b[start:start + rows], out=part)
            group += part
        if N <= group_rows:
            return group
        if total is None:
            total = group.astype(np.float64)
        else:
            total += group
    return total.astype(a.dtype)


def take_rows(a: np.ndarray, index: np.ndarray, axis: int = 0) -> np.ndarray:
    """``np.take(a, index, axis)``: a fresh C-contiguous array of ``a``'s entries at ``index``
    along ``axis`` (the NumPy backend's gather; the native backend copies the rows on its team)."""
    return np.take(a, index, axis=axis)


class Linalg(NamedTuple):
    """The all-steps products a backward pass makes after its time loop: ``gram(a, b, out=None)
    = aᵀ b`` over the T·B rows of ``a[N, m]``, ``b[N, n]`` (float32: accumulated as accurately as
    :func:`gram`; the result may be a transposed view; ``out``: the ``[m, n]`` array to return it
    in), ``matmul(a, b) = a @ b`` and
    ``product_sum(a, b)`` (:func:`product_sum`'s sum, as exact), ``column_sum(a)``
    (:func:`column_sum`'s sum, the same bits) and ``take_rows(a, index, axis)``
    (:func:`take_rows`'s gather).  Optionally the same products over a subset of the rows,
    gathered as they are read (``rows``: strictly increasing int64 indices; None: not offered,
    :func:`live_rows_linalg` gathers them first): ``gram_rows(a, b, rows, out=None)`` =
    ``gram(a[rows], b[rows], out)`` and ``matmul_rows(a, b, rows, out)``, which sets
    ``out[rows] = a[rows] @ b`` and leaves ``out``'s other rows as they are; both with the same
    bits as on the gathered rows.  :data:`NUMPY_LINALG` is NumPy's BLAS and einsum;
    the native backend passes its own (the engine's team, no BLAS thread pool)."""

    gram: Callable
    matmul: Callable
    product_sum: Callable = product_sum
    column_sum: Callable = column_sum
    take_rows: Callable = take_rows
    gram_rows: Callable | None = None
    matmul_rows: Callable | None = None


def live_rows_linalg(valid: np.ndarray | None, linalg: Linalg) -> Linalg:
    """``linalg`` over the rows ``(t, b)`` of valid steps only (the all-steps products of a
    backward pass run over the T·B rows in that order).  The other rows' gate gradients are
    zero, so the weight-gradient sums leave them out (fewer terms, and padding that holds NaN
    or Inf never reaches them, as in cuDNN, which never reads it) and their ``dx`` rows are
    zero.  ``valid=None`` or all rows valid: ``linalg`` itself."""
    if valid is None:
        return linalg
    rows = np.flatnonzero(valid.reshape(-1))
    if rows.size == valid.size:
        return linalg
    gathered = {}

    def live(a: np.ndarray) -> np.ndarray:
        """``a[rows]``, gathered once per operand (the gate gradients feed both grams and ``dx``):
        keyed by the data it views, and holding ``a`` so that no other array can take its memory
        while the entry lives (the Linalg lives for one backward pass, which writes none of them)."""
        key = (a.__array_interface__["data"][0], a.shape, a.strides, a.dtype.str)
        entry = gathered.get(key)
        if entry is None:
            entry = gathered[key] = (a, linalg.take_rows(a, rows, 0))
        return entry[1]

    def gram(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        if linalg.gram_rows is not None:
            return linalg.gram_rows(a, b, rows, out=out)
        return linalg.gram(live(a), live(b), out=out)

    def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        out = aligned_zeros((a.shape[0], b.shape[1]), a.dtype)
        if linalg.matmul_rows is not None:
            linalg.matmul_rows(a, b, rows, out)
        else:
            out[rows] = linalg.matmul(live(a), b)
        return out

    return linalg._replace(gram=gram, matmul=matmul)


class WeightGradOut(NamedTuple):
    """Where a backward pass writes its weight gradients (e.g. transposed views into the flat
    gradient buffer of the cuDNN layout, so that nothing is copied there afterwards); None: a
    fresh array.  ``w_input [in, G·H]``, ``w_recurrent [Hout, G·H]``, ``w_proj [H, P]``, in the
    engine's own gate order."""

    w_input: np.ndarray | None = None
    w_recurrent: np.ndarray | None = None
    w_proj: np.ndarray | None = None


NO_OUT = WeightGradOut()


def input_backward(x: np.ndarray, d_pre: np.ndarray, w_input: np.ndarray | None,
                   num_gates: int, need_dx: bool = True, linalg: Linalg | None = None,
                   dw_out: np.ndarray | None = None):
    """Gradients of :func:`input_projection` from ``d_pre[T, B, G*H]``.

    Returns ``(dx [T, B, in] or None, dw_input [in, G*H] or None, dbias [G*H])``; the sums over
    the T*B rows are ``linalg.gram`` (default :func:`gram`; into ``dw_out`` when given) and
    ``linalg.column_sum`` (default :func:`column_sum`).
    """
    linalg = linalg or NUMPY_LINALG
    T, B, n_in = x.shape
    flat = d_pre.reshape(T * B, d_pre.shape[-1])
    dbias = linalg.column_sum(flat)
    if w_input is None:
        dx = d_pre.reshape(T, B, num_gates, n_in).sum(axis=2) if need_dx else None
        return dx, None, dbias
    dw_input = linalg.gram(x.reshape(T * B, n_in), flat, out=dw_out)
    dx = linalg.matmul(flat, w_input.T).reshape(T, B, n_in) if need_dx else None
    return dx, dw_input, dbias


def outer_sum(a: np.ndarray, b: np.ndarray, linalg: Linalg | None = None,
              out: np.ndarray | None = None) -> np.ndarray:
    """``Σ_t a[t]ᵀ b[t]`` for ``a[T, B, m]``, ``b[T, B, n]`` → ``[m, n]`` (``linalg.gram``,
    default :func:`gram`, of the T*B rows; into ``out`` when given)."""
    return (linalg or NUMPY_LINALG).gram(a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1]), out=out)


NUMPY_LINALG = Linalg(gram=gram, matmul=np.matmul)


def assign_2d(dst: np.ndarray, src: np.ndarray) -> None:
    """``dst[...] = src`` for 2-D float arrays of one shape, fast also when one is a transposed
    view (the weight gradients go into the cuDNN layout transposed): the native extension's
    tiled copy when it is installed (an exact copy, so results do not depend on it), else
    NumPy's."""
    if (dst.size >= 4096 and dst.dtype == src.dtype and dst.dtype in (np.float32, np.float64)
            and dst.shape == src.shape and not (dst.flags.c_contiguous and src.flags.c_contiguous)):
        from .. import settings
        native = settings._load_native()
        if native is not None:
            native.copy_2d(dst, src)
            return
    dst[...] = src


def trace_arrays(out, shapes: list, dtype) -> list:
    """The arrays a forward pass records into: ``out`` (a trace of preallocated arrays with
    these shapes, e.g. views into a reserve buffer) or fresh, cache-line aligned ones."""
    if out is not None:
        return list(out)
    return [aligned_empty(shape, dtype) for shape in shapes]


def freeze(frozen_t: np.ndarray | None, state: np.ndarray, previous: np.ndarray) -> None:
    """Restore ``previous`` in the rows of ``state`` whose step is not valid (in place)."""
    if frozen_t is not None:
        np.copyto(state, previous, where=frozen_t)


def zero_ended(valid: np.ndarray | None, a: np.ndarray) -> None:
    """``a[~valid] = 0``: the rows of ended sequences zeroed in place (``valid``: the mask of
    ``a``'s leading axes, ``[B]`` for one step's ``[B, ·]``, ``[T, B]`` for ``[T, B, ·]``; None:
    nothing).  Zeroed, not multiplied by the mask: padding that holds NaN or Inf must not reach
    anything (cuDNN never reads it), and only those rows are written (4x faster than np.copyto
    with a broadcast mask, 1.7x faster than zeroing each step's rows in a loop, at T = 50,
    B = 32, H = 256)."""
    if valid is not None:
        a[~valid] = 0


def carry(valid_t: np.ndarray | None, new: np.ndarray, old: np.ndarray) -> np.ndarray:
    """``new [B, ·]`` in the rows whose step is valid (``valid_t [B]``, as :func:`zero_ended`;
    None: all), else the carried ``old`` state."""
    if valid_t is None:
        return new
    return np.where(valid_t[:, None], new, old)
