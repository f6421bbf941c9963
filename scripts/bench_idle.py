"""The native team after idle time: a call's wall time back to back, after 5 ms and after 25 ms
of idle time, and (PyTorch installed) right after a PyTorch call plus 5 ms (numbers for the
"Idle effects" paragraph of docs/native_engine.md).

    python scripts/bench_idle.py            # 2 threads
    python scripts/bench_idle.py 1          # the same at 1 thread

Median and quartiles of 25 calls each, LSTM inference (``cudnn_rnn_v3``, ``is_training=False``).
On the 2-vCPU KVM guests we measured, a halted vCPU took up to ~3 ms to wake; the team's join
window, ``wake_team()`` and naps (csrc/team.cc) are what keep the 25 ms column near the first.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import fusedrnn  # noqa: E402


def lstm_call(H: int, B: int, T: int):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((T, B, H), dtype=np.float32)
    h = np.zeros((1, B, H), np.float32)
    size = int(np.asarray(fusedrnn.cudnn_rnn_params_size(
        num_layers=1, num_units=H, input_size=H, rnn_mode="lstm", T=np.float32, S=np.int32)).reshape(-1)[0])
    params = (rng.standard_normal(size) * 0.05).astype(np.float32)
    lengths = np.full(B, T, np.int32)
    return lambda: fusedrnn.cudnn_rnn_v3(x, h, h, params, lengths, rnn_mode="lstm", is_training=False)


def torch_call(H: int, B: int, T: int):
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(fusedrnn.get_num_threads())
    module, x = torch.nn.LSTM(H, H), torch.randn(T, B, H)

    def call():
        with torch.no_grad():
            module(x)
    return call


def timed(call, before, rounds: int = 25) -> str:
    samples = []
    for _ in range(rounds):
        before()
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    samples.sort()
    return (f"{1e3 * statistics.median(samples):6.2f} ms "
            f"[{1e3 * samples[rounds // 4]:.2f}-{1e3 * samples[3 * rounds // 4]:.2f}]")


def main() -> None:
    fusedrnn.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
    print(f"fusedrnn native team, {fusedrnn.get_num_threads()} thread(s)")
    for H, B, T in ((256, 1, 50), (128, 16, 50), (128, 64, 25)):
        ours, theirs = lstm_call(H, B, T), torch_call(H, B, T)
        ours()
        print(f"LSTM H={H} B={B} T={T} inference")
        print("  back to back          ", timed(ours, lambda: None))
        print("  after 5 ms idle       ", timed(ours, lambda: time.sleep(0.005)))
        print("  after 25 ms idle      ", timed(ours, lambda: time.sleep(0.025)))
        if theirs is not None:
            theirs()
            print("  after torch + 5 ms    ", timed(ours, lambda: (theirs(), time.sleep(0.005))))


if __name__ == "__main__":
    main()
