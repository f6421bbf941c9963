"""A/B of two builds of the native extension on its matrix products alone (the "old → new"
GEMM numbers of docs/performance.md): old and new `_native` called alternately in one process,
medians, and whether the two builds' results have the same bits.

    python scripts/ab_products.py OLD.so NEW.so                  # every kind, 1 thread
    python scripts/ab_products.py OLD.so NEW.so --kind gram --threads 2

Kinds: ``step``, the time loops' step GEMM ``[B, H] x [H, 4H]`` with B packed once
(``_native.gemm_f32``, thread CPU time); ``gram``, a weight gradient ``bᵀ a`` in the accurate mode
(``_native.gemm(b, a, out, True, False, True, n)``, as ``engines.native._gram``); ``dx``, an input
gradient ``dG Wᵀ`` (``_native.gemm(dG, W, out, False, True, False, n)``).  At 2 threads each build
has its own team, and a static job that finds the other's workers napping may run on one thread:
compare 2-thread numbers with care (whole calls: ``scripts/ab_builds.py --settle``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ab_builds import load_build  # noqa: E402

STEP_SHAPES = ((1, 128), (1, 256), (4, 256), (6, 256), (16, 128), (16, 256), (64, 256), (16, 512),
               (64, 512), (16, 1024))
GRAM_SHAPES = ((1600, 128, 512), (1600, 256, 1024), (800, 512, 2048), (3200, 256, 768), (400, 1024, 4096))
DX_SHAPES = ((1600, 1024, 256), (1600, 4096, 1024), (800, 2048, 512), (3200, 512, 128), (1600, 512, 128))


def alternate(calls: list, rounds: int, clock) -> list:
    """Median seconds of each callable, called in turn `rounds` times."""
    samples = [[] for _ in calls]
    for _ in range(rounds):
        for i, call in enumerate(calls):
            start = clock()
            call()
            samples[i].append(clock() - start)
    return [statistics.median(s) for s in samples]


def step(builds, rounds: int) -> None:
    for B, H in STEP_SHAPES:
        rng = np.random.default_rng(0)
        A, W = rng.random((B, H), dtype=np.float32), rng.random((H, 4 * H), dtype=np.float32)
        flops = 2 * B * H * 4 * H
        repeats = max(20, int(3e8 / flops))
        outs = [build.gemm_f32(A, W, 1) for build in builds]
        old, new = alternate([lambda b=b: b.gemm_f32(A, W, repeats) for b in builds], rounds, time.thread_time)
        print(f"step [{B}, {H}] x [{H}, {4 * H}]: old {flops * repeats / old / 1e9:.1f}, new "
              f"{flops * repeats / new / 1e9:.1f} GFLOP/s, new/old rate {old / new:.3f}; "
              f"same bits: {np.array_equal(*outs)}")


def team(builds, kind: str, rounds: int, threads: int) -> None:
    for shape in GRAM_SHAPES if kind == "gram" else DX_SHAPES:
        rng = np.random.default_rng(0)
        if kind == "gram":
            N, m, n = shape
            left, right, out_shape, flags = (rng.random((N, n), dtype=np.float32),
                                             rng.random((N, m), dtype=np.float32), (n, m), (True, False, True))
        else:
            M, K, N = shape
            left, right, out_shape, flags = (rng.random((M, K), dtype=np.float32),
                                             rng.random((N, K), dtype=np.float32), (M, N), (False, True, False))
        outs = [np.empty(out_shape, np.float32) for _ in builds]
        calls = [lambda b=b, o=o: b.gemm(left, right, o, *flags, threads) for b, o in zip(builds, outs)]
        for call in calls:
            call()
        old, new = alternate(calls, rounds, time.perf_counter)
        print(f"{kind} {shape} {threads}t: old {old * 1e3:.3f} ms, new {new * 1e3:.3f} ms, "
              f"new/old {new / old:.3f}; same bits: {np.array_equal(*outs)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--kind", choices=["step", "gram", "dx", "all"], default="all")
    parser.add_argument("--threads", type=int, default=1, help="team size of gram and dx")
    parser.add_argument("--rounds", type=int, default=11)
    args = parser.parse_args()
    builds = [load_build("ab_old", args.old), load_build("ab_new", args.new)]
    for kind in (["step", "gram", "dx"] if args.kind == "all" else [args.kind]):
        if kind == "step":
            step(builds, args.rounds)
        else:
            team(builds, kind, args.rounds, args.threads)


if __name__ == "__main__":
    main()
