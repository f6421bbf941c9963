"""The native-engine issue's targets read from a benchmark grid's JSON, a line per thread count.

    python -m benchmarks --no-memory --out /tmp/grid
    python scripts/grid_targets.py /tmp/grid/benchmark.json

Each line: the LSTM training grid's geometric mean speed against PyTorch and its lowest point;
B = 1 forward and training (geometric means); variable lengths, training (one layer, and two
bidirectional layers); GRU and tanh RNN against PyTorch and against the fastest peer (ranges);
inference against ONNX Runtime at B ≤ 16 (geometric mean, lowest); H ≥ 512, B = 64 as % of the
run's peak (range, how many of 8 reach 85 %); float64 training against PyTorch; BlockLSTMV2 +
grad against TensorFlow.  Speeds are peer time / fusedrnn time.
"""

from __future__ import annotations

import json
import math
import sys


def geomean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values))


def summary(rows: list[dict], threads: int) -> str:
    rows = [r for r in rows if r["threads"] == threads]

    def row(problem: str, mode: str) -> dict:
        return next(r for r in rows if r["problem"] == problem and r["mode"] == mode)

    def size(r: dict, key: str) -> int:  # the number after "H" or "B" in lstm-H256-B16-T50
        return int(next(part[1:] for part in r["problem"].split("-") if part[0] == key and part[1:].isdigit()))

    plain_lstm = [r for r in rows if r["problem"].startswith("lstm-H") and r["problem"].count("-") == 3]
    training = [r for r in plain_lstm if r["mode"] == "training"]
    lowest = min(training, key=lambda r: r["speed_vs_torch"])
    b1 = {m: geomean([r["speed_vs_torch"] for r in plain_lstm if size(r, "B") == 1 and r["mode"] == m])
          for m in ("forward", "training")}
    cells = [r for r in rows if r["problem"].startswith(("gru", "rnn"))]
    vs_torch = [r["speed_vs_torch"] for r in cells]
    vs_fastest = [r["speed_vs_fastest"] for r in cells]
    inference = [r["median_s"]["onnxruntime"] / r["median_s"]["fusedrnn"] for r in plain_lstm
                 if r["mode"] == "forward" and size(r, "B") <= 16 and "onnxruntime" in r["median_s"]]
    peak = [r["pct_peak"] for r in plain_lstm if size(r, "B") == 64 and size(r, "H") >= 512]
    return (f"{threads}t: LSTM training geomean {geomean([r['speed_vs_torch'] for r in training]):.2f}, "
            f"lowest {lowest['speed_vs_torch']:.2f} {lowest['problem']}; "
            f"B=1 forward {b1['forward']:.2f} training {b1['training']:.2f}; "
            f"varlen training {row('lstm-H256-B32-T50-varlen', 'training')['speed_vs_torch']:.2f}, "
            f"L2bi {row('lstm-L2bi-H256-B32-T50-varlen', 'training')['speed_vs_torch']:.2f}; "
            f"GRU/RNN vs torch {min(vs_torch):.2f}-{max(vs_torch):.2f}, "
            f"vs fastest {min(vs_fastest):.2f}-{max(vs_fastest):.2f}; "
            f"inference vs ORT B<=16 geomean {geomean(inference):.2f}, lowest {min(inference):.2f}; "
            f"H>=512 B=64 % peak {min(peak):.0f}-{max(peak):.0f} ({sum(p >= 85 for p in peak)} of {len(peak)} >= 85); "
            f"f64 training {row('lstm-H256-B16-T50-f64', 'training')['speed_vs_torch']:.2f}; "
            f"BlockLSTM {row('blocklstm-H256-B16-T50-peep-clip3', 'training')['speed_vs_fastest']:.2f}")


def main() -> None:
    rows = json.load(open(sys.argv[1]))["rows"]
    for threads in sorted({r["threads"] for r in rows}, reverse=True):
        print(summary(rows, threads))


if __name__ == "__main__":
    main()
