"""A/B of two builds of the native extension on one benchmark problem: old and new `_native`
shared objects called alternately, through the public API (the benchmark's fusedrnn peer), so
that both see the same machine conditions (this is how docs/performance.md's "old → new"
numbers were measured; single rows move ±10–30 % between runs on a shared VM).

    python scripts/ab_builds.py OLD.so NEW.so lstm-H512-B16-T50 forward --threads 1
    python scripts/ab_builds.py OLD.so NEW.so lstm-H128-B64-T25 forward --threads 2 --settle
    python scripts/ab_builds.py OLD.so NEW.so lstm-H128-B16-T25 forward --threads 2 --among-peers

Default: both builds loaded in one process, calls alternating back to back (valid at 1 thread:
at 2 threads each build has its own team, and one team's spinning worker slows the other's
call).  ``--settle``: one process per build and round (``--rounds``), each call after the
harness's quiet wait (``benchmarks.harness.settle``), the pattern of the grid; prints each
round's medians.  ``--among-peers`` (implies ``--settle``): as in the grid's worker, every
installed peer is loaded in each process too and runs its own call of the problem before each of
ours (each after the quiet wait), so that ours finds the caches, the vCPUs and our team's
workers as the grid leaves them (e.g. a worker in a long nap since our previous call).  Build
a second extension with CMake into a directory of its own (e.g. ``cmake -S . -B /tmp/old -G
Ninja -DCMAKE_BUILD_TYPE=Release && ninja -C /tmp/old`` from a checkout of the older commit).  The
outputs of the two builds are compared too (bits).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def load_build(tag: str, path: str):
    spec = importlib.util.spec_from_file_location(f"{tag}._native", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def result_bytes(result) -> bytes:
    """Every array of a step's result (nested tuples of arrays), as one byte string."""
    if isinstance(result, tuple):
        return b"".join(result_bytes(item) for item in result)
    return np.ascontiguousarray(result).tobytes()


def build_step(problem: str, mode: str, threads: int):
    from benchmarks import peers, problems

    peer = peers.get("fusedrnn")
    peer.load(threads)
    data = problems.make_data(problems.find(problem))
    return peer, peer.build(data, mode)


def in_process(args) -> None:
    from fusedrnn import settings

    builds = [load_build("ab_old", args.old), load_build("ab_new", args.new)]
    _, step = build_step(args.problem, args.mode, args.threads)
    outputs = []
    for build in builds:
        settings._native_state["module"] = build
        step()
        outputs.append(result_bytes(step()))
    same = outputs[0] == outputs[1]
    samples = ([], [])
    for i in range(2 * args.calls):
        settings._native_state["module"] = builds[i % 2]
        start = time.perf_counter()
        step()
        samples[i % 2].append(time.perf_counter() - start)
    old, new = (statistics.median(s) * 1e3 for s in samples)
    print(f"{args.problem} {args.mode} {args.threads}t in one process: old {old:.3f} ms, "
          f"new {new:.3f} ms, new/old {new / old:.3f}; same output bits: {same}")


def other_peers(problem: str, mode: str, threads: int) -> list:
    """The calls of every other installed peer that computes the problem (each warmed up)."""
    from benchmarks import peers, problems, worker

    with worker.quiet_stderr():  # load_peers always loads fusedrnn too: skipped below
        loaded, _ = worker.load_peers(list(peers.NAMES), threads)
    data = problems.make_data(problems.find(problem))
    calls = []
    for name, peer in loaded.items():
        if name == "fusedrnn" or peer.unsupported(data.problem, mode):
            continue
        call = peer.build(data, mode)
        call()
        call()
        calls.append(call)
    return calls


def one_process(args) -> None:
    """--child: this process's build (FUSEDRNN_AB_SO) timed in the harness's pattern."""
    from benchmarks import harness

    sys.modules["fusedrnn._native"] = load_build("fusedrnn", os.environ["FUSEDRNN_AB_SO"])
    _, step = build_step(args.problem, args.mode, args.threads)
    others = other_peers(args.problem, args.mode, args.threads) if args.among_peers else []
    step()
    step()
    samples = []
    for _ in range(args.calls):
        for other in others:
            harness.settle()
            other()
        harness.settle()
        start = time.perf_counter()
        step()
        samples.append(time.perf_counter() - start)
    print(f"{statistics.median(samples) * 1e3:.3f}")


def settled(args) -> None:
    command = [sys.executable, __file__, args.old, args.new, args.problem, args.mode, "--child",
               "--threads", str(args.threads), "--calls", str(args.calls)]
    pools = {}
    if args.among_peers:
        command.append("--among-peers")
        # the peers' thread pools sized before their import, as the grid's worker does
        pools = {name: str(args.threads) for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                                      "MKL_NUM_THREADS")}
    for round_index in range(args.rounds):
        medians = []
        for so in (args.old, args.new):
            env = dict(os.environ, FUSEDRNN_AB_SO=so, **pools)
            medians.append(subprocess.run(command, env=env, check=True, capture_output=True,
                                          text=True).stdout.strip())
        where = " among the peers" if args.among_peers else ""
        print(f"{args.problem} {args.mode} {args.threads}t{where} round {round_index + 1}: "
              f"old {medians[0]} ms, new {medians[1]} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("problem", help="a benchmark problem name, e.g. lstm-H512-B16-T50")
    parser.add_argument("mode", choices=["forward", "training"])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--calls", type=int, default=20, help="timed calls per build (per round)")
    parser.add_argument("--rounds", type=int, default=3, help="--settle: rounds of two processes")
    parser.add_argument("--settle", action="store_true", help="one process per build, quiet wait per call")
    parser.add_argument("--among-peers", action="store_true",
                        help="--settle with every other installed peer's call before each of ours")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        one_process(args)
    elif args.settle or args.among_peers:
        settled(args)
    else:
        in_process(args)


if __name__ == "__main__":
    main()
