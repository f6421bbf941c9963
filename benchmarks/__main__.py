"""``python -m benchmarks``: fusedrnn against every installed CPU peer, in one run.

    python -m benchmarks --quick                      # representative subset, < 3 minutes
    python -m benchmarks                              # the full grid, 1 and 2 threads
    python -m benchmarks --filter 'gru|rnn_tanh' --threads 1 --peers torch,onnxruntime --repeat 7

One worker process per thread count times every problem (``benchmarks/worker.py``); one more
measures the memory of a training step.  Progress on stderr; the Markdown report on stdout and,
in ``--out`` (default ``benchmarks/results/``), ``benchmark.md``, ``benchmark.json`` (machine,
library versions, BLAS, thread settings, every sample) and ``benchmark.png``.  Peers:
fusedrnn (always), torch, tensorflow (BlockLSTMV2 raw ops), keras, onnxruntime, jax; a missing one
is skipped with a note.  Method and formulas: ``docs/performance.md``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time

from . import machine, memory, peers as peer_registry, problems as grid, report
from .peers.jax_peer import xla_flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="the representative subset (benchmarks.problems.QUICK)")
    parser.add_argument("--filter", default=None, help="keep problems whose name contains this, or matches it as a regex")
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    parser.add_argument("--repeat", type=int, default=None, help="at most this many timed rounds per problem "
                        "and mode (default 5; --quick 3)")
    parser.add_argument("--min-rounds", type=int, default=None, help="at least this many (default 3; --quick 2)")
    parser.add_argument("--budget", type=float, default=None, help="no new round after this many seconds of "
                        "rounds once --min-rounds are done (default 2; --quick 0.3)")
    parser.add_argument("--modes", default="forward,training", help="forward, training or both")
    parser.add_argument("--peers", default=",".join(n for n in peer_registry.NAMES if n != "fusedrnn"),
                        help="comma-separated peers besides fusedrnn (default: all)")
    parser.add_argument("--no-memory", action="store_true", help="skip the training-step memory pass")
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"), help="output directory")
    args = parser.parse_args(argv)
    args.repeat = args.repeat or (3 if args.quick else 5)
    args.min_rounds = min(args.repeat, args.min_rounds or (2 if args.quick else 3))
    args.budget = args.budget if args.budget is not None else (0.3 if args.quick else 2.0)
    return args


# Thread pools of peers that ran before must not spin on the cores while the next peer is timed
# (all peers share one process, interleaved).  OpenBLAS's idle threads spin 2^28 cycles (~0.1 s)
# by default: 2^18 (~0.1 ms) still covers the gaps between the per-step GEMMs of one call but
# frees the cores right after it.  The other pools keep their own policies (ONNX Runtime's
# spinning is switched off in its session options); the harness waits until the process is
# quiet before each timed call (harness.settle).  An environment that sets these already wins.
POOL_ENV = {"OPENBLAS_THREAD_TIMEOUT": "18", "TF_CPP_MIN_LOG_LEVEL": "2"}


def worker_env(threads: int, task: str) -> dict:
    """The worker's environment: thread counts set before any library is imported."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads),
               MKL_NUM_THREADS=str(threads),
               PYTHONPATH=os.pathsep.join([ROOT] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    if xla_flags(threads):
        env.setdefault("XLA_FLAGS", xla_flags(threads))
    for key, value in POOL_ENV.items():
        env.setdefault(key, value)
    if task == "memory":
        env.update(memory.CHILD_ENV)
    return env


def run_worker(task: str, threads: int, problem_names: list, args, log) -> dict:
    """Run one worker process; its partial result when it fails."""
    env = worker_env(threads, task)
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as handle:
        result_path = handle.name
    command = [sys.executable, "-m", "benchmarks.worker", "--task", task, "--threads", str(threads),
               "--problems", ",".join(problem_names), "--modes", args.modes, "--peers", args.peers,
               "--repeat", str(args.repeat), "--min-rounds", str(args.min_rounds), "--budget", str(args.budget),
               "--result", result_path]
    code = subprocess.run(command, env=env, cwd=ROOT).returncode
    try:
        with open(result_path) as handle:
            result = json.load(handle)
    except (OSError, ValueError):
        result = {"task": task, "threads": threads, "peers": {}, "results": []}
    finally:
        if os.path.exists(result_path):
            os.unlink(result_path)
    if code != 0:
        result["failed"] = f"worker exited with code {code} after {len(result['results'])} results"
        log(f"warning: {task} worker ({threads} threads) {result['failed']}")
    return result


def notes(result: dict) -> list:
    """The method in a few lines, the thread settings, and every skipped peer with its reason."""
    lines = ["FLOPs: forward = sum over layers and directions of 2*N*(G*H*(I_l + Hout) + P*H), N = useful "
             "rows (T*B, or sum of lengths); training = 3 x forward (benchmarks/problems.py).",
             f"Each (problem, mode): every peer built, first call timed separately, warm-up, then up to "
             f"{result['settings']['repeat']} interleaved rounds (order rotated each round), at least "
             f"{result['settings']['min_rounds']}; no new round after {result['settings']['budget_s']} s of rounds "
             f"once those are done; no extra warm-up call after a first call over 0.3 s; peers whose first call "
             f"exceeds 2 s take {result['settings']['min_rounds']} samples.",
             "Check: every peer's forward output against fusedrnn's with the same weights, max|diff| <= 1e-4 "
             "(float64: 1e-9) x max(1, max|y|)."]
    for worker in result["workers"]:
        for name, info in worker["peers"].items():
            if "missing" in info:
                lines.append(f"{worker['threads']} thread(s): peer {name} skipped: {info['missing']}")
            else:
                lines.append(f"{worker['threads']} thread(s): {name} {info.get('version', '')}: {info.get('threads', '')}")
    reasons = {}
    for row in result["rows"]:
        for name, why in row["skipped"].items():
            reasons.setdefault((name, why), []).append(row["problem"])
        for name, why in row["errors"].items():
            lines.append(f"{row['threads']} thread(s) {row['problem']} {row['mode']}: {name} failed: {why}")
    for (name, why), problem_names in sorted(reasons.items()):
        lines.append(f"{name} not run on {len(set(problem_names))} problem(s): {why}")
    return lines


def main(argv=None) -> int:
    args = parse_args(argv)
    log = lambda message: print(message, file=sys.stderr, flush=True)  # noqa: E731
    problem_list = grid.select(args.quick, args.filter)
    if not problem_list:
        log(f"no problem matches --filter {args.filter!r}")
        return 2
    for name in args.peers.split(","):
        if name:
            peer_registry.get(name)  # unknown names are an error before anything runs
    threads_list = [int(t) for t in args.threads.split(",") if t]
    names = [p.name for p in problem_list]
    log(f"{len(names)} problem(s) x {args.modes} x threads {threads_list}; peers fusedrnn,{args.peers}")
    started, start = datetime.datetime.now(datetime.timezone.utc), time.perf_counter()
    described = machine.describe()
    workers = [run_worker("time", threads, names, args, log) for threads in threads_list]
    memory_result = None
    if not args.no_memory and "training" in args.modes:
        memory_result = run_worker("memory", 1, names, args, log)
    result = {"schema": report.SCHEMA, "command": ["python", "-m", "benchmarks", *(argv or sys.argv[1:])],
              "started_utc": started.isoformat(timespec="seconds"),
              "duration_s": time.perf_counter() - start, "machine": described,
              "settings": {"quick": args.quick, "filter": args.filter, "threads": threads_list,
                           "repeat": args.repeat, "min_rounds": args.min_rounds, "budget_s": args.budget, "modes": args.modes.split(","),
                           "peers": ["fusedrnn", *args.peers.split(",")]},
              "problems": {p.name: {"flops_forward": p.flops("forward"), "flops_training": p.flops("training")}
                           for p in problem_list},
              "workers": workers, "memory": memory_result}
    result["machine"]["loadavg_end"] = list(os.getloadavg())
    result["rows"] = report.build_rows(workers)
    result["notes"] = notes(result)
    paths = report.write(result, args.out)
    sys.stdout.write(report.markdown(result))
    log(f"wrote {', '.join(paths.values())} in {result['duration_s']:.0f} s")
    return 0 if all("failed" not in w for w in workers) else 1


if __name__ == "__main__":
    sys.exit(main())
