"""float32 weight-, bias- and peephole-gradient reductions against float64 (spec: issue 7).

The sums over all T*B rows are checked where the float32 and the float64 computation add the
*same* summands, so that the difference is the reduction's own round-off:

* unit level: :mod:`fusedrnn.engines.common`'s reductions on random positive float32 data
  (a float32 product is exact in float64, so the float64 reduction of the same data is the
  truth up to ``N * 2**-53`` relative);
* op level: BlockLSTMGrad / BlockLSTMGradV2 on forward tensors chosen so that every gate
  gradient is exact in float32 (gates 1/2, zero recurrent weights, few-bit upstream gradients),
  and the cuDNN GRU / RNN engines on traces chosen the same way.

Bounds (u = 2**-24, γ_k = k u / (1 - k u), summands positive, so Σ|terms| = |S|):

* worst case (Higham, any summation order inside a block): column sums, blocks of 16 rows in
  float32 then float64: ``|err| <= (γ_15 + u) |S|``; peephole sums (exact float64 products and
  sum): ``|err| <= u |S|`` (plus ``N 2**-53``); GEMMs, blocks of ``r`` rows, up to 8 block
  products added in float32, those group sums in float64: ``|err| <= (γ_{r - 1 + 8} + u) |S|``.
* statistical (what separates them from a plain running sum): model every float32 addition
  ``s <- fl(s + t)`` as ``s (1 + δ)`` with independent δ, ``E δ = 0``, ``|δ| <= u``, so
  ``Var <= u² s² / 3``.  A running sum of k i.i.d. positive terms of mean μ then has variance
  ``(u²/3) Σ_j (j μ)² ≈ u² k³ μ² / 9``.  For ``N`` rows:
  plain running sum: ``rms(err / S) ≈ u sqrt(N / 9)``;
  column sum, blocks of r then exact: ``rms ≈ u sqrt(r² / (9 N) + 1/3)`` (the last term: the
  final rounding);
  GEMM, one group of nb <= 8 blocks of r rows: ``rms ≈ u sqrt(r² / (9 N) + nb / 9)`` (the
  running sum of the block products adds ``(u²/3) Σ_j (j r μ)² ≈ u² S² nb / 9``); G > 1 groups,
  each with that error relative to its own sum S/G, independent, then exact: ``rms ≈
  u sqrt(c² / G + 1/3)`` with ``c²`` a full group's ``r² / (9 * 8 r) + 8 / 9``.
  The tests allow 1.5x the model over all outputs (their RMS is a stable statistic).
  The plain float32 sums this replaced exceed these bounds (column sums 18-53 u at N >= 512,
  peephole sums 22-41 u, GEMM rms 2.3-2.5 u at N = 512 against 2.0 u allowed).
"""

import math

import numpy as np
import pytest

import fusedrnn
from fusedrnn.engines import common, gru, simple_rnn

U = 2.0 ** -24


def gamma(k: int) -> float:
    return k * U / (1 - k * U)


def gram_blocks(N: int) -> tuple[int, int, int]:
    """(rows per block, blocks, groups) of :func:`fusedrnn.engines.common.gram` for N rows."""
    rows = common.gram_block_rows(N)
    blocks = -(-N // rows)
    return rows, blocks, -(-blocks // common.GRAM_GROUP_BLOCKS)


def column_sum_model(N: int) -> float:
    r = min(common.SUM_BLOCK_ROWS, N)
    return U * math.sqrt(r * r / (9 * N) + 1 / 3)


def gram_model(N: int) -> float:
    rows, blocks, groups = gram_blocks(N)
    if blocks == 1:
        return U * math.sqrt(N / 9 + 1 / 9)
    if groups == 1:
        return U * math.sqrt(rows * rows / (9 * N) + blocks / 9 + 1 / 9)
    g = common.GRAM_GROUP_BLOCKS
    per_group = rows * rows / (9 * g * rows) + g / 9  # a full group, relative to its own sum
    return U * math.sqrt(per_group / groups + 1 / 3)


def gram_worst(N: int) -> float:
    rows, blocks, _ = gram_blocks(N)
    return gamma(min(rows, N) - 1 + min(blocks, common.GRAM_GROUP_BLOCKS)) + U


def rel_errors(got32: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Relative errors of the nonzero outputs; structurally zero outputs must be exactly 0."""
    assert got32.dtype == np.float32 and truth.dtype == np.float64
    assert np.all(truth >= 0) and np.any(truth > 0)
    np.testing.assert_array_equal(got32[truth == 0], 0)
    live = truth > 0
    return (got32[live].astype(np.float64) - truth[live]) / truth[live]


def check(got32, truth, worst: float, model: float, what: str):
    err = rel_errors(got32, truth)
    assert np.max(np.abs(err)) <= worst, f"{what}: max rel err {np.max(np.abs(err)) / U:.2f} u > {worst / U:.2f} u"
    rms = float(np.sqrt(np.mean(err ** 2)))
    assert rms <= 1.5 * model, f"{what}: rms rel err {rms / U:.2f} u > 1.5 x model {model / U:.2f} u"


def positive(rng, *shape):
    return rng.uniform(0.05, 1.0, shape).astype(np.float32)


# ----------------------------------------------------------------------------------------
# Unit level

@pytest.mark.parametrize("N", [1, 15, 16, 17, 512, 3000, 4099])
def test_column_sum(N):
    a = positive(np.random.default_rng(N), N, 300)
    truth = a.astype(np.float64).sum(axis=0)
    got = common.column_sum(a)
    check(got, truth, gamma(min(common.SUM_BLOCK_ROWS, N) - 1) + U + gamma(N) * 2 ** -29, column_sum_model(N),
          f"column_sum N={N}")
    np.testing.assert_array_equal(common.column_sum(a.astype(np.float64)), truth)


@pytest.mark.parametrize("N", [1, 512, 3200])
def test_product_sum_is_correctly_rounded(N):
    rng = np.random.default_rng(N)
    a, b = positive(rng, N, 2, 64), positive(rng, N, 2, 64)
    truth = np.einsum("tbk,tbk->k", a.astype(np.float64), b.astype(np.float64))
    got = common.product_sum(a[:, :, :], b)
    check(got, truth, U * (1 + 1e-6), U / math.sqrt(3), f"product_sum N={N}")


@pytest.mark.parametrize("N,m,n", [(1, 3, 4), (64, 8, 8), (65, 8, 8), (512, 64, 96), (1000, 16, 48), (3200, 32, 64),
                                   (5000, 8, 16)])
def test_gram(N, m, n):
    rng = np.random.default_rng(N)
    a, b = positive(rng, N, m), positive(rng, N, n)
    truth = a.astype(np.float64).T @ b.astype(np.float64)
    check(common.gram(a, b), truth, gram_worst(N), gram_model(N), f"gram N={N}")
    check(common.outer_sum(a.reshape(N, 1, m), b.reshape(N, 1, n)), truth, gram_worst(N), gram_model(N), "outer_sum")
    np.testing.assert_allclose(common.gram(a.astype(np.float64), b.astype(np.float64)), truth, rtol=1e-13)


# ----------------------------------------------------------------------------------------
# BlockLSTMGrad / BlockLSTMGradV2 with exact gate gradients

def exact_block_lstm_inputs(T, B, I, n, seed):
    """Forward tensors for which the grad op's gate gradients are exact in float32: i = ci =
    o = co = 1/2, f = 1/2 (0 when T > 4, so that the cell recurrence adds no bits), zero
    weights and peepholes, cs values of 2 bits, h_grad of 12 bits, cs_grad = 0.  x, h_prev and
    h (the other factors of the weight gradient) are full-precision positive floats."""
    rng = np.random.default_rng(seed)
    half = np.full((T, B, n), 0.5, np.float32)
    f = half if T <= 4 else np.zeros_like(half)
    cs = (rng.integers(1, 5, (T, B, n)) / 4).astype(np.float32)
    cs_prev = (rng.integers(1, 5, (B, n)) / 4).astype(np.float32)
    h_grad = (rng.integers(1, 2 ** 12, (T, B, n)) * 2.0 ** -12).astype(np.float32)
    zeros = lambda *s: np.zeros(s, np.float32)  # noqa: E731
    return dict(seq_len_max=np.int64(T), x=positive(rng, T, B, I), cs_prev=cs_prev, h_prev=positive(rng, B, n),
                w=zeros(I + n, 4 * n), wci=zeros(n), wcf=zeros(n), wco=zeros(n), b=zeros(4 * n),
                i=half, cs=cs, f=f, o=half, ci=half, co=half, h=positive(rng, T, B, n),
                cs_grad=zeros(T, B, n), h_grad=h_grad)


@pytest.mark.parametrize("T,B", [(32, 16), (4, 800)], ids=["T32_B16", "T4_B800"])
@pytest.mark.parametrize("op", ["BlockLSTMGrad", "BlockLSTMGradV2"])
def test_block_lstm_grad_reductions(op, T, B):
    I, n = 24, 32
    inputs = exact_block_lstm_inputs(T, B, I, n, seed=T)
    grad = getattr(fusedrnn.raw_ops, op)
    got = grad(**inputs, use_peephole=True)
    truth = grad(**{k: v.astype(np.float64) if v.dtype == np.float32 else v for k, v in inputs.items()},
                 use_peephole=True)
    N = T * B
    check(got.b_grad, truth.b_grad, gamma(common.SUM_BLOCK_ROWS - 1) + U, column_sum_model(N), f"{op} b_grad")
    check(got.w_grad, truth.w_grad, gram_worst(N), gram_model(N), f"{op} w_grad")
    for name in ("wci_grad", "wco_grad") + (("wcf_grad",) if T <= 4 else ()):
        check(getattr(got, name), getattr(truth, name), U * (1 + 1e-6), U / math.sqrt(3), f"{op} {name}")


# ----------------------------------------------------------------------------------------
# The cuDNN engines (GRU: both bias vectors and both matrices; RNN relu)

def test_gru_engine_reductions():
    """u = 0, r = h' = 1/2, q_h of 2 bits, upstream gradients of 18 bits, zero recurrent
    weights: every pre-activation gradient is exact in float32."""
    T, B, I, H = 4, 800, 16, 24
    rng = np.random.default_rng(3)
    gates = np.concatenate([np.full((T, B, H), 0.5), np.zeros((T, B, H)), np.full((T, B, H), 0.5)], axis=-1)
    q_h = rng.integers(1, 5, (T, B, H)) / 4
    h = rng.uniform(0.05, 1, (T + 1, B, H))
    x = rng.uniform(0.05, 1, (T, B, I))
    dh_steps = rng.integers(1, 2 ** 18, (T, B, H)) * 2.0 ** -18
    w = gru.GRUWeights(rng.uniform(0, 1, (I, 3 * H)), np.zeros((H, 3 * H)), np.zeros(3 * H), np.zeros(3 * H))

    def run(dtype):
        cast = lambda a: np.asarray(a, np.float32).astype(dtype)  # noqa: E731
        trace = gru.GRUTrace(cast(gates), cast(q_h), cast(h))
        weights = gru.GRUWeights(*(cast(v) for v in w))
        return gru.gru_backward(cast(x), trace, weights, dh_steps=cast(dh_steps), dh_last=np.zeros((B, H), dtype))

    got, truth = run(np.float32), run(np.float64)
    N = T * B
    live = np.r_[0:H, 2 * H:3 * H]  # the update gate's gradients are 0 (u = 0)
    for name in ("dbias_input", "dbias_recurrent"):
        check(getattr(got, name)[live], getattr(truth, name)[live], gamma(15) + U, column_sum_model(N), name)
    for name in ("dw_input", "dw_recurrent"):
        check(getattr(got, name)[:, live], getattr(truth, name)[:, live], gram_worst(N), gram_model(N), name)


@pytest.mark.parametrize("T,B", [(8, 64), (8, 400)], ids=["T8_B64", "T8_B400"])
def test_rnn_engine_reductions(T, B):
    """relu on positive states (derivative exactly 1), zero recurrent weights: the gradients of
    the pre-activations are the upstream gradients themselves (full float32 precision)."""
    I, H = 16, 24
    rng = np.random.default_rng(4)
    h = rng.uniform(0.05, 1, (T + 1, B, H))
    x = rng.uniform(0.05, 1, (T, B, I))
    dh_steps = rng.uniform(0.05, 1, (T, B, H))
    w = simple_rnn.RNNWeights(rng.uniform(0, 1, (I, H)), np.zeros((H, H)), np.zeros(H))

    def run(dtype):
        cast = lambda a: np.asarray(a, np.float32).astype(dtype)  # noqa: E731
        return simple_rnn.rnn_backward(cast(x), simple_rnn.RNNTrace(cast(h)), simple_rnn.RNNWeights(*(cast(v) for v in w)),
                                       "relu", dh_steps=cast(dh_steps), dh_last=np.zeros((B, H), dtype))

    got, truth = run(np.float32), run(np.float64)
    N = T * B
    check(got.dbias, truth.dbias, gamma(15) + U, column_sum_model(N), "dbias")
    check(got.dw_input, truth.dw_input, gram_worst(N), gram_model(N), "dw_input")
    check(got.dw_recurrent, truth.dw_recurrent, gram_worst(N), gram_model(N), "dw_recurrent")
