"""Parser assembly and error handling of the ``fusedrnn`` command line.

Exit statuses: 0 success; 1 a subcommand failed (one ``fusedrnn <command>: error: ...`` line on
stderr, no traceback unless ``--debug``) or its output pipe closed; 2 bad arguments (argparse:
usage plus one error line); 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from . import check, demo, info

BUILTIN_COMMANDS = (demo, check, info)
# Subcommands that other parts of fusedrnn may provide; each is skipped when its module is absent.
OPTIONAL_COMMAND_MODULES = ("fusedrnn.convert.cli",)


def _optional_command_modules():
    """The optional subcommand modules that exist in this installation.

    A module that is absent is skipped; an import error *inside* a present module propagates,
    so a broken subcommand is reported rather than silently dropped."""
    found = []
    for name in OPTIONAL_COMMAND_MODULES:
        try:
            found.append(importlib.import_module(name))
        except ModuleNotFoundError as error:
            if not (error.name and name.startswith(error.name)):
                raise
    return found


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with one subparser per subcommand."""
    from .. import __version__

    parser = argparse.ArgumentParser(
        prog="fusedrnn",
        description="fusedrnn: TensorFlow's fused RNN kernels (CudnnRNN, BlockLSTM, ...) on any CPU.")
    parser.add_argument("--version", action="version", version=f"fusedrnn {__version__}")
    parser.add_argument("--debug", action="store_true",
                        help="show the full traceback when a command fails")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in (*BUILTIN_COMMANDS, *_optional_command_modules()):
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``), run the subcommand, return its exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:  # the reader went away (`fusedrnn check | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's documented recipe
        return 1
    except KeyboardInterrupt:
        print(f"fusedrnn {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # one clear line for the user; --debug shows the traceback
        if args.debug:
            raise
        lines = str(error).strip().splitlines()
        detail = lines[0] if lines else "(no message)"
        print(f"fusedrnn {args.command}: error: {type(error).__name__}: {detail}", file=sys.stderr)
        return 1
