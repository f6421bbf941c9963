"""One worker process: every selected problem, for one thread count (``--task time``) or the
training-step memory pass (``--task memory``).

The parent (``python -m benchmarks``) starts one worker per thread count with
``OPENBLAS_NUM_THREADS``/``OMP_NUM_THREADS``/``MKL_NUM_THREADS`` set to it before anything is
imported — TensorFlow's and XLA's thread pools can only be sized before their first op, and
NumPy's OpenBLAS starts its pool at import.  Each peer then sets its own thread count in
:meth:`~benchmarks.peers.Peer.load`.  The worker rewrites its JSON result file after every problem,
so a crash keeps what was measured; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
import time
import warnings

from . import harness, machine, memory, peers as peer_registry, problems as grid


@contextlib.contextmanager
def quiet_stderr():
    """Silence file descriptor 2 (C-level chatter, e.g. the PyTorch profiler's)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def load_peers(names: list, threads: int) -> tuple[dict, dict]:
    """``({name: Peer}, {name: info or {"missing": why}})``; fusedrnn always first."""
    loaded, infos = {}, {}
    for name in ["fusedrnn"] + [n for n in names if n != "fusedrnn"]:
        peer = peer_registry.get(name)
        try:
            infos[name] = peer.load(threads)
            loaded[name] = peer
        except Exception as error:  # a missing or broken peer is a note, never an error
            infos[name] = {"missing": f"{type(error).__name__}: {error}"}
            if name == "fusedrnn":
                raise
    return loaded, infos


def torch_dispatch(peer, problem, mode: str) -> str:
    """Run the peer's dispatch probe on a tiny replica (dispatch depends on dtype, packing and
    projection, not sizes)."""
    tiny = dataclasses.replace(problem, H=8, B=2, T=3, proj=4 if problem.proj else 0)
    with quiet_stderr():
        return peer.dispatch(tiny, mode)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _short(entries: dict) -> str:
    parts = []
    for name, entry in entries.items():
        if "median_s" in entry:
            parts.append(f"{name} {1e3 * entry['median_s']:.1f}ms")
        elif "peak_rss_growth_bytes" in entry:
            parts.append(f"{name} {entry['peak_rss_growth_bytes'] / 2**20:.0f}MiB")
        elif "error" in entry:
            parts.append(f"{name} ERROR")
    return ", ".join(parts)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--task", choices=("time", "memory"), default="time")
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--problems", required=True, help="comma-separated problem names")
    parser.add_argument("--modes", default=",".join(grid.MODES))
    parser.add_argument("--peers", default=",".join(peer_registry.NAMES))
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--min-rounds", type=int, default=3)
    parser.add_argument("--budget", type=float, default=3.0)
    parser.add_argument("--slow", type=float, default=2.0)
    parser.add_argument("--result", required=True)
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")

    problem_list = [grid.find(name) for name in args.problems.split(",") if name]
    modes = [m for m in args.modes.split(",") if m]
    peers, infos = load_peers([n for n in args.peers.split(",") if n], args.threads)
    tag = f"[{args.task} {args.threads}t]"
    for name, info in infos.items():
        if "missing" in info:
            log(f"{tag} peer {name} skipped: {info['missing']}")
    out = {"task": args.task, "threads": args.threads, "peers": infos, "results": [],
           "env": {k: os.environ.get(k) for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                                                  "XLA_FLAGS", *memory.CHILD_ENV)}}
    if args.task == "time":
        log(f"{tag} measuring the machine peak (large sgemm)")
        out["peak"] = machine.peak(args.threads)
    write = lambda: json.dump(out, open(args.result, "w"), indent=1, default=str)  # noqa: E731
    write()
    jobs = [(p, m) for p in problem_list for m in modes] if args.task == "time" else [(p, "training") for p in problem_list]
    for index, (problem, mode) in enumerate(jobs, 1):
        start = time.perf_counter()
        data = grid.make_data(problem)
        if args.task == "time":
            entries = harness.time_problem(data, mode, peers, args.repeat, min(args.min_rounds, args.repeat),
                                           args.budget, args.slow)
        else:
            entries = memory.measure_problem(data, peers)
        record = {"problem": problem.name, "mode": mode, "flops": problem.flops(mode),
                  "spec": {k: v for k, v in dataclasses.asdict(problem).items() if k != "tags"},
                  "entries": entries, "loadavg_1min": os.getloadavg()[0]}
        if args.task == "time" and "torch" in peers and "skipped" not in entries.get("torch", {"skipped": 1}):
            record["torch_dispatch"] = torch_dispatch(peers["torch"], problem, mode)
        record["fusedrnn_dispatch"] = peers["fusedrnn"].dispatch(problem, mode)
        out["results"].append(record)
        write()
        log(f"{tag} {index}/{len(jobs)} {problem.name} {mode} ({time.perf_counter() - start:.1f}s): "
            f"{_short(entries)}")
    if args.task == "time":
        log(f"{tag} measuring the machine peak again")
        out["peak"] = machine.best_peak(out["peak"], machine.peak(args.threads))
        write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
