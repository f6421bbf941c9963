"""Per-call time of the single-step ops (LSTMBlockCell, GRUBlockCell and their grads) of
whichever fusedrnn is imported: medians of --calls calls at a few sizes (float32).

    python scripts/bench_cells.py --threads 1
    # another checkout (the editable install's finder removed, e.g. a sitecustomize.py that
    # drops it, on PYTHONPATH before the checkout):
    PYTHONPATH=/tmp/hook:/path/to/old/checkout python scripts/bench_cells.py --threads 1

Single-step ops are called once per step by a caller's own loop (a decoder), so their fixed
cost per call matters as much as their arithmetic; the benchmark suite times whole sequences.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import fusedrnn

SIZES = [(1, 64, 64), (8, 128, 128), (32, 256, 256), (16, 512, 512)]  # (B, I, n)


def ops(B: int, I: int, n: int) -> dict:
    rng = np.random.default_rng(0)
    f32 = lambda *shape, scale=1.0: (rng.standard_normal(shape) * scale).astype(np.float32)  # noqa: E731
    x, cs, h = f32(B, I), f32(B, n), f32(B, n)
    w, b, p = f32(I + n, 4 * n, scale=0.1), f32(4 * n), f32(n)
    w_ru, w_c, b_ru, b_c = f32(I + n, 2 * n, scale=0.1), f32(I + n, n, scale=0.1), f32(2 * n), f32(n)
    lstm = fusedrnn.lstm_block_cell(x, cs, h, w, p, p, p, b, use_peephole=True)
    gru = fusedrnn.gru_block_cell(x, h, w_ru, w_c, b_ru, b_c)
    return {
        "lstm_block_cell": lambda: fusedrnn.lstm_block_cell(x, cs, h, w, p, p, p, b, use_peephole=True),
        "lstm_block_cell_grad": lambda: fusedrnn.lstm_block_cell_grad(
            x, cs, h, w, p, p, p, b, *lstm[:6], cs, h, use_peephole=True),
        "gru_block_cell": lambda: fusedrnn.gru_block_cell(x, h, w_ru, w_c, b_ru, b_c),
        "gru_block_cell_grad": lambda: fusedrnn.gru_block_cell_grad(x, h, w_ru, w_c, b_ru, b_c, *gru[:3], h),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    fusedrnn.set_num_threads(args.threads)
    for B, I, n in SIZES:
        for name, call in ops(B, I, n).items():
            for _ in range(5):
                call()
            samples = []
            for _ in range(args.calls):
                start = time.perf_counter()
                call()
                samples.append(time.perf_counter() - start)
            print(f"{name} B={B} I={I} n={n} {args.threads}t: {statistics.median(samples) * 1e6:.0f} us")


if __name__ == "__main__":
    main()
