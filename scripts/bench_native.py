"""Micro-benchmarks of the native engine (numbers for docs/native_engine.md).

    python scripts/bench_native.py            # GEMM kernel + LSTM vs numpy backend vs PyTorch

1 thread everywhere, timed with ``time.thread_time`` (CPU time of the calling thread: on a
shared, oversubscribed machine wall time mostly measures the neighbours), median of 5 rounds,
the sides interleaved.  The side-by-side suite with every peer is ``python -m benchmarks``.
"""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import numpy as np  # noqa: E402

from fusedrnn import settings  # noqa: E402


def cpu_median(function, rounds: int = 5) -> float:
    samples = []
    for _ in range(rounds):
        start = time.thread_time()
        function()
        samples.append(time.thread_time() - start)
    return float(np.median(samples))


def gemm_table(native) -> None:
    print("step GEMM [B, H] x [H, 4H], float32, packed once (GFLOP/s, 1 thread)")
    print("| ISA | H | B = 1 | B = 16 | B = 64 |\n|---|---:|---:|---:|---:|")
    for isa in native.supported_isas():
        native.set_isa(isa)
        for H in (256, 512, 1024):
            row = []
            for B in (1, 16, 64):
                rng = np.random.default_rng(0)
                A = rng.random((B, H), dtype=np.float32)
                W = rng.random((H, 4 * H), dtype=np.float32)
                flops = 2 * B * H * 4 * H
                reps = max(1, int(2e8 / flops))
                row.append(flops * reps / cpu_median(lambda: native.gemm_f32(A, W, reps)) / 1e9)
            print(f"| {isa} | {H} | " + " | ".join(f"{v:.1f}" for v in row) + " |")
    native.set_isa(native.supported_isas()[0])
    print()


def lstm_table() -> None:
    from cudnn_helpers import Case, backprop_v3, forward_v3, make_problem, random_like_outputs
    try:
        import torch
        torch.set_num_threads(1)
    except ImportError:
        torch = None
    settings.set_num_threads(1)
    print("LSTM float32 (ms CPU time, 1 thread; fwd = inference, train = forward + backprop)")
    print("| H | B | T | numpy fwd | native fwd | torch fwd | numpy train | native train | torch train |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for H, B, T in [(128, 16, 50), (256, 1, 50), (256, 16, 50), (512, 64, 25), (1024, 16, 25)]:
        case = Case(mode="lstm", num_units=H, input_size=H, batch=B, max_time=T)
        prob = make_problem(case, 0, np.float32)
        grads = random_like_outputs(case, 1, np.float32)
        row = {}
        for name in ("numpy", "native"):
            with settings.backend(name):
                row[f"{name} fwd"] = cpu_median(lambda: forward_v3(prob, is_training=False))
                row[f"{name} train"] = cpu_median(lambda: backprop_v3(prob, forward_v3(prob), grads))
        if torch is not None:
            lstm = torch.nn.LSTM(H, H)
            x = torch.randn(T, B, H, requires_grad=True)

            def train():
                y, (h, c) = lstm(x)
                (y.sum() + h.sum() + c.sum()).backward()

            with torch.no_grad():
                row["torch fwd"] = cpu_median(lambda: lstm(x))
            row["torch train"] = cpu_median(train)
        cells = [row.get(k) for k in ("numpy fwd", "native fwd", "torch fwd", "numpy train",
                                      "native train", "torch train")]
        print(f"| {H} | {B} | {T} | " + " | ".join("-" if v is None else f"{v * 1e3:.1f}" for v in cells) + " |")


if __name__ == "__main__":
    native = settings.native_module()
    print(f"ISA {native.isa()} (supported: {', '.join(native.supported_isas())})\n")
    gemm_table(native)
    lstm_table()
