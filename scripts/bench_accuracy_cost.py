"""What the accurate float32 weight-gradient sums (issue 7) cost in a training step.

    python scripts/bench_accuracy_cost.py lstm-H128-B16-T50 lstm-H256-B64-T50 gru-H256-B16-T50

For each benchmark problem (``benchmarks.problems``): a CudnnRNN training step (forward +
backprop, as ``benchmarks/peers/fusedrnn_peer.py`` runs it) on the native backend, 1 thread,
with the engine's accurate weight-gradient GEMM (float32 over 64-row blocks, the block sums of a
chunk in float32, the chunk sums in float64) against the same GEMM accumulating plainly in
float32; interleaved, median of 15 CPU-time samples (``time.thread_time``).
"""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

import fusedrnn  # noqa: E402
from fusedrnn import settings  # noqa: E402
from fusedrnn.engines import native as native_engine  # noqa: E402
from benchmarks import problems  # noqa: E402
from benchmarks.peers.fusedrnn_peer import FusedRNN  # noqa: E402


def plain_gram(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``aᵀ b`` through the team's GEMM with plain float32 accumulation."""
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b, dtype=a.dtype)
    out = np.empty((a.shape[1], b.shape[1]), dtype=a.dtype)
    settings.native_module().gemm(a, b, out, True, False, False, settings.get_num_threads())
    return out


def main(names: list[str]) -> None:
    fusedrnn.set_num_threads(1)
    accurate = native_engine.LINALG
    plain = accurate._replace(gram=plain_gram)
    peer = FusedRNN()
    peer.load(1)
    for name in names:
        step = peer.build(problems.make_data(problems.find(name)), "training")
        samples = {"accurate": [], "plain": []}
        for round_index in range(15):
            order = (("accurate", accurate), ("plain", plain))
            for label, linalg in (order if round_index % 2 else order[::-1]):
                native_engine.LINALG = linalg
                start = time.thread_time()
                step()
                samples[label].append(time.thread_time() - start)
        native_engine.LINALG = accurate
        a, p = np.median(samples["accurate"]), np.median(samples["plain"])
        print(f"{name}: training step accurate {a * 1e3:.2f} ms, plain {p * 1e3:.2f} ms, "
              f"{(a / p - 1) * 100:+.1f} %")


if __name__ == "__main__":
    main(sys.argv[1:] or ["lstm-H128-B16-T50", "lstm-H256-B64-T50", "gru-H256-B16-T50"])
