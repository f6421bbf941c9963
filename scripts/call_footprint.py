"""What one small call costs when it runs cold: instructions and cache misses per call, from
cachegrind (valgrind), with a cache of one core's L2 size as the simulated last level.

    python scripts/call_footprint.py            # lstm and gru, inference and training step
    python scripts/call_footprint.py --mode gru --case fwd --calls 100

Each measurement runs Python twice under cachegrind: once making ``--calls`` tiny calls
(H = 8, B = T = 1: the kernel's own work is negligible), each after a 2 MiB sweep that evicts
the simulated cache, and once making only the sweeps; the difference divided by the number of
calls is what a call costs cold (the interpreter's, NumPy's and fusedrnn's code and data it
touches).  Deterministic: hash seed, one BLAS thread and one engine thread are fixed.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

CHILD = r'''
import sys, numpy as np, fusedrnn
fusedrnn.set_num_threads(1)
mode, case, calls, do = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
H = 8
n = int(np.asarray(fusedrnn.cudnn_rnn_params_size(num_layers=1, num_units=H, input_size=H, T=np.float32,
                                                  S=np.int32, rnn_mode=mode)).reshape(-1)[0])
rng = np.random.default_rng(0)
p = (rng.standard_normal(n) * 0.05).astype(np.float32)
x = rng.standard_normal((1, 1, H)).astype(np.float32)
h = np.zeros((1, 1, H), np.float32); c = h.copy(); lengths = np.array([1], np.int32)
def forward():
    return fusedrnn.cudnn_rnn_v3(x, h, c, p, lengths, is_training=False, rnn_mode=mode)
def training_step():
    r = fusedrnn.cudnn_rnn_v3(x, h, c, p, lengths, is_training=True, rnn_mode=mode)
    fusedrnn.cudnn_rnn_backprop_v3(x, h, c, p, lengths, r.output, r.output_h, r.output_c, r.output,
                                   r.output_h, r.output_c, r.reserve_space, r.host_reserved, rnn_mode=mode)
call = forward if case == "fwd" else training_step
call(); call()
sweep = np.ones(1 << 19, np.float32)  # 2 MiB
for _ in range(calls):
    sweep.sum()
    if do:
        call()
'''

EVENTS = {"I refs": "instructions", "I1 misses": "I1", "D1 misses": "D1", "LL misses": "LL"}


def _run(script: str, args: list, cache_bytes: int) -> dict:
    env = dict(os.environ, PYTHONHASHSEED="0", OPENBLAS_NUM_THREADS="1")
    command = ["valgrind", "--tool=cachegrind", "--cache-sim=yes", f"--LL={cache_bytes},16,64",
               "--cachegrind-out-file=/dev/null", sys.executable, script, *args]
    text = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stderr
    counts = {}
    for line in text.splitlines():
        m = re.match(r"==\d+==\s+(I|I1|D1|LL)\s+(refs|misses):\s+([\d,]+)", line)
        if m:
            counts[f"{m.group(1)} {m.group(2)}"] = int(m.group(3).replace(",", ""))
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=["lstm", "gru", "rnn_tanh"], action="append")
    parser.add_argument("--case", choices=["fwd", "train"], action="append")
    parser.add_argument("--calls", type=int, default=60)
    parser.add_argument("--cache", type=int, default=1 << 20, help="simulated last-level cache, bytes")
    args = parser.parse_args()
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as handle:
        handle.write(CHILD)
    try:
        for mode in args.mode or ["lstm", "gru"]:
            for case in args.case or ["fwd", "train"]:
                with_calls = _run(handle.name, [mode, case, str(args.calls), "1"], args.cache)
                sweeps_only = _run(handle.name, [mode, case, str(args.calls), "0"], args.cache)
                per_call = {EVENTS[k]: (with_calls[k] - sweeps_only.get(k, 0)) / args.calls
                            for k in EVENTS if k in with_calls}
                estimate = (per_call["instructions"] + 12 * (per_call["I1"] + per_call["D1"])
                            + 80 * per_call["LL"])
                print(f"{mode:8s} {case:5s} per call: " + "  ".join(f"{k} {v:,.0f}" for k, v in per_call.items())
                      + f"  (estimated cycles {estimate:,.0f})")
    finally:
        os.unlink(handle.name)


if __name__ == "__main__":
    main()
