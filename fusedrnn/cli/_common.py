"""Helpers shared by the subcommand modules."""

from __future__ import annotations

import argparse


def add_command(subparsers, name: str, *, help: str, description: str, func) -> argparse.ArgumentParser:
    """Add subcommand ``name`` running ``func(args) -> int``; it also accepts ``--debug`` after
    its name (``fusedrnn demo --debug`` as well as ``fusedrnn --debug demo``)."""
    parser = subparsers.add_parser(name, help=help, description=description,
                                   formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show the full traceback when the command fails")
    parser.set_defaults(func=func)
    return parser


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def missing_extra(package: str, extra: str, purpose: str) -> ImportError:
    """The ImportError raised when an optional dependency is absent, naming the pip extra."""
    return ImportError(f"{purpose} needs {package}: pip install 'fusedrnn[{extra}]'")
