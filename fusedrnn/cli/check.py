"""``fusedrnn check``: a self-test of this installation on this machine.

Runs the float64 finite-difference gradient checks of every op family
(:mod:`fusedrnn.cli.gradcheck`) and, for each of PyTorch and TensorFlow that is installed, a quick
oracle comparison (:mod:`fusedrnn.cli.oracles`).  Prints one table row per check as it finishes
and exits 1 if any check failed (0 otherwise).
"""

from __future__ import annotations

import time

from ._common import add_command
from .gradcheck import CheckResult, gradient_checks


def register(subparsers) -> None:
    parser = add_command(subparsers, "check", func=run, help="self-test: gradient checks and oracle comparisons",
                         description="Check fusedrnn on this machine: float64 finite-difference "
                                     "gradients of every op family, plus comparisons with PyTorch and "
                                     "TensorFlow when they are installed. Exit status 1 on any failure.")
    parser.add_argument("--quick", action="store_true",
                        help="fewer configurations and one random direction per input")
    parser.add_argument("--no-oracles", action="store_true", help="skip the PyTorch/TensorFlow comparisons")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random problems")


FAMILY_WIDTH, CONFIG_WIDTH = 26, 62


def _row(family: str, config: str, error: str, tolerance: str, verdict: str) -> str:
    return f"{family:<{FAMILY_WIDTH}} {config:<{CONFIG_WIDTH}} {error:>9} {tolerance:>9}  {verdict}"


def _print_result(result: CheckResult) -> None:
    print(_row(result.family, result.config, f"{result.max_error:.1e}", f"{result.tolerance:.0e}",
               "pass" if result.passed else "FAIL"), flush=True)


def _check_sources(args):
    """``(title, generator of CheckResult or None, reason when skipped)`` in running order."""
    from . import oracles

    yield "finite differences (float64)", gradient_checks(args.quick, args.seed), None
    for module, title, checks, extra in (
            ("torch", "PyTorch oracle", oracles.torch_checks, "test"),
            ("tensorflow", "TensorFlow oracle", oracles.tensorflow_checks, "test")):
        if args.no_oracles:
            yield title, None, "skipped (--no-oracles)"
        elif not oracles.available(module):
            yield title, None, f"skipped: {module} is not installed (pip install 'fusedrnn[{extra}]')"
        else:
            yield title, checks(args.quick, args.seed), None


def run(args) -> int:
    from .. import __version__
    from .info import backend

    started = time.perf_counter()
    print(f"fusedrnn {__version__}, backend: {backend().get('backend')}")
    print(_row("check", "configuration", "max error", "tolerance", "result"))
    print("-" * (FAMILY_WIDTH + CONFIG_WIDTH + 30))
    passed = failed = 0
    for title, checks, skipped in _check_sources(args):
        print(f"[{title}]" + (f" {skipped}" if skipped else ""), flush=True)
        try:
            for result in checks or ():
                _print_result(result)
                passed += result.passed
                failed += not result.passed
        except Exception as error:  # a crashing check is a failed check, reported in its row
            message = f"crashed: {type(error).__name__}: {error}".splitlines()[0]
            print(_row(title, message[:CONFIG_WIDTH], "-", "-", "FAIL"), flush=True)
            failed += 1
    print("-" * (FAMILY_WIDTH + CONFIG_WIDTH + 30))
    print(f"{passed} passed, {failed} failed in {time.perf_counter() - started:.1f} s")
    return 1 if failed else 0
