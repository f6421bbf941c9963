"""One module per library timed by the suite; each exposes ``PEER``, a :class:`Peer`.

A peer turns a :class:`~benchmarks.problems.Data` into a callable that runs one forward
(inference) or one training step (forward + backward, gradients of the input, the initial states
and all weights for the same upstream gradients ``dy, dh, dc``).  Data conversion to the peer's
tensors and layouts happens in :meth:`Peer.build`, outside the timed call.
Frameworks are imported in :meth:`Peer.load`, so a missing one is reported, never an error.
"""

from __future__ import annotations

import importlib
from typing import Callable

import numpy as np

NAMES = ("fusedrnn", "torch", "tensorflow", "keras", "onnxruntime", "jax")


class Peer:
    """Base class.  ``name``: the ``--peers`` key; ``threads_note``: how :meth:`load` set the
    thread count (filled in by ``load``)."""

    name = ""
    threads_note = ""

    def load(self, threads: int) -> dict:
        """Import the framework and set its thread count; return ``{"version": ..., ...}``.
        Raises ImportError (or any error) when the peer cannot run here."""
        raise NotImplementedError

    def unsupported(self, problem, mode: str) -> str | None:
        """Why this peer cannot compute ``problem`` in ``mode``, or None."""
        return None

    def build(self, data, mode: str) -> Callable[[], object]:
        """A callable computing one call of ``mode`` on ``data``."""
        raise NotImplementedError

    def output(self, result) -> np.ndarray:
        """The forward result's output sequence as NumPy ``[T, B, D*Hout]`` (for the check)."""
        raise NotImplementedError

    def dispatch(self, problem, mode: str) -> str:
        """Which implementation the framework routes the problem to (empty when it has one)."""
        return ""

    def release_caches(self) -> None:
        """Free the memory the library keeps for reuse between calls (before the memory pass
        measures a step's growth); nothing by default."""


def get(name: str) -> Peer:
    if name not in NAMES:
        raise ValueError(f"unknown peer {name!r}; known: {', '.join(NAMES)}")
    module = importlib.import_module(f"benchmarks.peers.{name}_peer")
    return module.PEER
