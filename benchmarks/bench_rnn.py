"""Side-by-side timing of fusedrnn against its peers, in one run.

    python benchmarks/bench_rnn.py [--threads 1] [--repeat 7] [--json out.json] [--quick]

Rows: CudnnRNN LSTM/GRU (fusedrnn) vs PyTorch ``nn.LSTM``/``nn.GRU`` (oneDNN / native CPU), and
BlockLSTMV2 (+ BlockLSTMGradV2) vs TensorFlow's CPU kernels, float32, time-major, I = H.
Reported: median time of each, and the ratio fusedrnn / peer (< 1 means fusedrnn is faster).
Peers that are not installed are skipped.  Timings on shared 2-vCPU machines are noisy:
compare ratios within one run, and repeat.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np


def _median_time(fn, repeat: int) -> tuple[float, float]:
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), (max(times) - min(times)) / 2


def _cudnn_case(mode, T, B, H, train):
    import fusedrnn
    rng = np.random.default_rng(0)
    n = int(fusedrnn.cudnn_rnn_params_size(1, H, H, rnn_mode=mode)[0])
    params = rng.uniform(-0.1, 0.1, n).astype(np.float32)
    x = rng.standard_normal((T, B, H), dtype=np.float32)
    h0 = np.zeros((1, B, H), np.float32)
    dy = np.ones((T, B, H), np.float32)

    def run():
        fwd = fusedrnn.cudnn_rnn(x, h0, h0, params, rnn_mode=mode, is_training=train)
        if train:
            fusedrnn.cudnn_rnn_backprop(x, h0, h0, params, *fwd[:3], dy, h0, h0, fwd.reserve_space,
                                        rnn_mode=mode)
    return run


def _torch_case(mode, T, B, H, train):
    import torch
    net = (torch.nn.LSTM if mode == "lstm" else torch.nn.GRU)(H, H)
    x = torch.randn(T, B, H, requires_grad=train)

    def run():
        if train:
            y, _ = net(x)
            y.sum().backward()
        else:
            with torch.no_grad():
                net(x)
    return run


def _block_case(T, B, H, train, impl):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((T, B, H), dtype=np.float32)
    s0 = np.zeros((B, H), np.float32)
    w = rng.uniform(-0.1, 0.1, (2 * H, 4 * H)).astype(np.float32)
    v = np.zeros(H, np.float32)
    b = np.zeros(4 * H, np.float32)
    g = np.ones((T, B, H), np.float32)
    seq = np.int64(T)
    if impl == "fusedrnn":
        import fusedrnn as lib
        fwd_op, grad_op = lib.raw_ops.BlockLSTMV2, lib.raw_ops.BlockLSTMGradV2
    else:
        import tensorflow as tf
        fwd_op, grad_op = tf.raw_ops.BlockLSTMV2, tf.raw_ops.BlockLSTMGradV2
        x, s0, w, v, b, g = (tf.constant(a) for a in (x, s0, w, v, b, g))
        seq = tf.constant(seq)
    inputs = dict(seq_len_max=seq, x=x, cs_prev=s0, h_prev=s0, w=w, wci=v, wcf=v, wco=v, b=b)

    def run():
        out = fwd_op(**inputs, cell_clip=0.0, use_peephole=False)
        if train:
            grad_op(**inputs, i=out[0], cs=out[1], f=out[2], o=out[3], ci=out[4], co=out[5], h=out[6],
                    cs_grad=g, h_grad=g, use_peephole=False)
    return run


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--json", default=None, help="write the rows to this JSON file")
    parser.add_argument("--quick", action="store_true", help="fewer, smaller problems")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        import torch
        torch.set_num_threads(args.threads)
    except ImportError:
        torch = None
    try:
        import tensorflow as tf
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    except ImportError:
        tf = None

    sizes = [(20, 1, 64), (20, 16, 128)] if args.quick else [(50, 1, 128), (50, 16, 256), (50, 64, 256), (50, 64, 512)]
    rows = []
    for train in (False, True):
        for T, B, H in sizes:
            for mode in ("lstm", "gru"):
                ours, spread = _median_time(_cudnn_case(mode, T, B, H, train), args.repeat)
                row = dict(op=f"CudnnRNN {mode}", train=train, T=T, B=B, H=H, fusedrnn_s=ours,
                           fusedrnn_spread_s=spread, peer="torch", peer_s=None)
                if torch is not None:
                    row["peer_s"] = _median_time(_torch_case(mode, T, B, H, train), args.repeat)[0]
                rows.append(row)
            ours, spread = _median_time(_block_case(T, B, H, train, "fusedrnn"), args.repeat)
            row = dict(op="BlockLSTMV2", train=train, T=T, B=B, H=H, fusedrnn_s=ours, fusedrnn_spread_s=spread,
                       peer="tensorflow", peer_s=None)
            if tf is not None:
                row["peer_s"] = _median_time(_block_case(T, B, H, train, "tensorflow"), args.repeat)[0]
            rows.append(row)

    print(f"threads={args.threads}, repeat={args.repeat}, float32, time-major, I = H")
    print(f"{'op':<16} {'pass':<9} {'T':>4} {'B':>4} {'H':>4} {'fusedrnn ms':>12} {'peer':>11} {'peer ms':>9} {'ratio':>7}")
    for r in rows:
        ratio = r["fusedrnn_s"] / r["peer_s"] if r["peer_s"] else float("nan")
        r["ratio"] = ratio
        peer_ms = f"{1e3 * r['peer_s']:9.2f}" if r["peer_s"] else f"{'-':>9}"
        print(f"{r['op']:<16} {'fwd+bwd' if r['train'] else 'fwd':<9} {r['T']:>4} {r['B']:>4} {r['H']:>4} "
              f"{1e3 * r['fusedrnn_s']:12.2f} {r['peer']:>11} {peer_ms} {ratio:7.2f}")
    ratios = [r["ratio"] for r in rows if r["peer_s"]]
    if ratios:
        print(f"geomean ratio fusedrnn/peer: {float(np.exp(np.mean(np.log(ratios)))):.2f}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"threads": args.threads, "repeat": args.repeat, "rows": rows}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
