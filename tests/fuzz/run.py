"""Fuzz child: ``python -m tests.fuzz.run --op OP [--examples N] [--seed S]``.

Runs hypothesis over :func:`tests.fuzz.strategies.examples` for each op and checks
:func:`tests.fuzz.harness.check_example`.  Prints ``FUZZ-OK`` and exits 0 when every example
passes; otherwise prints the shrunk failing example as ``MINIMAL EXAMPLE: Example(...)`` and
exits 1.  It is meant to run in a subprocess (:func:`tests.fuzz.harness.run_child`): a
segfault or an abort kills only this process, and the file given by ``--last-example`` then
names the example that was running.

Other modes::

    --replay "Example(...)"   run one example (e.g. a MINIMAL EXAMPLE line) and show the outcome
    --selftest KIND           abort | segfault | hang | fail | pass: prove the isolation works

Environment: ``FUSEDRNN_FUZZ_EXAMPLES`` (examples per op, default 200), ``FUSEDRNN_FUZZ_SEED``
(hypothesis seed; default 0 in the bounded CI run, random when FUSEDRNN_FUZZ_EXAMPLES is set).
"""

from __future__ import annotations

import argparse
import collections
import faulthandler
import math
import os
import random
import sys
import time
import traceback

import numpy as np


def _parse(argv):
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz.run", description=__doc__.split("\n")[0])
    parser.add_argument("--op", action="append", default=[], help="op name (repeatable) or 'all'")
    parser.add_argument("--examples", type=int, default=None)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--replay", default=None)
    parser.add_argument("--selftest", choices=["abort", "segfault", "hang", "fail", "pass"])
    parser.add_argument("--last-example", default=None)
    parser.add_argument("--time-limit", type=float, default=5.0, help="seconds per op call")
    return parser.parse_args(argv)


def default_examples() -> int:
    return int(os.environ.get("FUSEDRNN_FUZZ_EXAMPLES", "200"))


def default_seed() -> int:
    if "FUSEDRNN_FUZZ_SEED" in os.environ:
        return int(os.environ["FUSEDRNN_FUZZ_SEED"])
    if "FUSEDRNN_FUZZ_EXAMPLES" in os.environ:
        return random.SystemRandom().randrange(2**32)
    return 0


def _namespace():
    from .strategies import Example, Mutation
    namespace = dict(vars(np))
    namespace.update(np=np, math=math, nan=math.nan, inf=math.inf, Example=Example, Mutation=Mutation)
    return namespace


def parse_example(text: str):
    return eval(text, _namespace())  # noqa: S307 - replaying our own repr


class _Recorder:
    """Writes the running example to a file (survives a crash) and keeps the last failure."""

    def __init__(self, path):
        self.path = path
        self.last_failure = None
        self.outcomes = collections.Counter()

    def start(self, example):
        if self.path:
            with open(self.path, "w") as handle:
                handle.write(repr(example))


def _selftest(kind: str, recorder: _Recorder, examples: int, seed: int) -> int:
    from hypothesis import given, settings, seed as hseed, strategies as st

    @hseed(seed)
    @settings(max_examples=examples, deadline=None, database=None, report_multiple_bugs=False)
    @given(st.integers(0, 1000))
    def prop(n):
        recorder.start(f"selftest {kind} n={n}")
        if kind == "abort" and n > 5:
            os.abort()
        if kind == "segfault" and n > 5:
            import ctypes
            ctypes.string_at(0)
        if kind == "hang" and n > 5:
            time.sleep(3600)
        if kind == "fail" and n >= 17:
            recorder.last_failure = f"selftest fail n={n}"
            raise AssertionError(f"n={n} >= 17")

    try:
        prop()
    except AssertionError:
        traceback.print_exc()
        print(f"MINIMAL EXAMPLE: {recorder.last_failure}")
        print("FUZZ-FAIL")
        return 1
    print("FUZZ-OK")
    return 0


def fuzz_op(op: str, examples: int, seed: int, recorder: _Recorder, time_limit: float) -> bool:
    from hypothesis import HealthCheck, given, settings, seed as hseed

    from .harness import check_example
    from .strategies import examples as example_strategy

    @hseed(seed)
    @settings(max_examples=examples, deadline=None, database=None, report_multiple_bugs=False,
              suppress_health_check=list(HealthCheck), print_blob=False)
    @given(example_strategy(op))
    def prop(example):
        recorder.start(example)
        try:
            outcome = check_example(example, time_limit)
        except BaseException:
            recorder.last_failure = example
            raise
        recorder.outcomes[f"{example.mutation.kind}:{outcome.kind}"] += 1

    start = time.monotonic()
    try:
        prop()
    except Exception:
        traceback.print_exc()
        print(f"MINIMAL EXAMPLE: {recorder.last_failure!r}")
        print(f"fuzz {op}: FAILED (seed {seed})", flush=True)
        return False
    seconds = time.monotonic() - start
    counts = " ".join(f"{k}={v}" for k, v in sorted(recorder.outcomes.items()))
    print(f"fuzz {op}: {sum(recorder.outcomes.values())} examples ok in {seconds:.1f} s (seed {seed}) [{counts}]",
          flush=True)
    recorder.outcomes.clear()
    return True


def main(argv=None) -> int:
    faulthandler.enable()
    args = _parse(argv)
    recorder = _Recorder(args.last_example)
    examples = args.examples if args.examples is not None else default_examples()
    seed = args.seed if args.seed is not None else default_seed()
    if args.selftest:
        return _selftest(args.selftest, recorder, examples, seed)
    if args.replay:
        from .harness import check_example
        example = parse_example(args.replay)
        recorder.start(example)
        try:
            outcome = check_example(example, args.time_limit)
        except AssertionError:
            traceback.print_exc()
            print(f"MINIMAL EXAMPLE: {example!r}")
            print("FUZZ-FAIL")
            return 1
        print(f"outcome: {outcome}")
        print("FUZZ-OK")
        return 0
    from .cases import SPECS
    ops = list(SPECS) if (not args.op or "all" in args.op) else args.op
    unknown = [op for op in ops if op not in SPECS]
    if unknown:
        print(f"unknown op(s): {unknown}; known: {sorted(SPECS)}")
        return 2
    failed = [op for op in ops if not fuzz_op(op, examples, seed, recorder, args.time_limit)]
    if failed:
        print(f"FUZZ-FAIL: {failed}")
        return 1
    print("FUZZ-OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
