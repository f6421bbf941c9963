"""The problem grid, the FLOP formulas, and the one set of weights and inputs every peer uses.

A :class:`Problem` is one recurrent network applied to one batch (I = H everywhere, time-major).
Its weights are drawn once, in PyTorch's / cuDNN's canonical form per pseudo-layer
``p = layer * D + direction``::

    w_ih [G*H, I_l]   w_hh [G*H, Hout]   b_ih [G*H]   b_hh [G*H]   (w_hr [P, H] with projection)

gate blocks in cuDNN order (lstm ``i, f, c, o``; gru ``r, u, h'``; rnn one block), and each peer
converts them to its own layout (Keras ``z, r, h``, ONNX ``i, o, f, c`` / ``z, r, h``,
BlockLSTMV2's ``[I+H, 4H]`` IFCO matrix with one summed bias, ...).  ``G`` gates, ``H`` units,
``P`` projection size (``Hout = P or H``), ``I_l`` the layer input size (``I`` for layer 0,
``D*Hout`` above).

FLOPs (DeepBench's recurrent count plus the input projection; pointwise gate math not counted)::

    forward  = sum over pseudo-layers of  2 * N * (G*H*(I_l + Hout) + P*H)
    training = 3 * forward                (forward + backward: dX/dH GEMMs and weight GEMMs)

``N = T * B`` rows for full sequences; with variable lengths only the useful rows count,
``N = sum(lengths)``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1}
MODES = ("forward", "training")


@dataclass(frozen=True)
class Problem:
    """One benchmark problem.  ``kind`` is ``"cudnn"`` (CudnnRNNV3 family) or ``"block"``
    (BlockLSTMV2 family: lstm only, with ``peephole`` and ``cell_clip``)."""

    cell: str  # lstm | gru | rnn_tanh
    H: int
    B: int
    T: int
    layers: int = 1
    dirs: int = 1
    proj: int = 0
    varlen: bool = False
    dtype: str = "float32"
    kind: str = "cudnn"
    peephole: bool = False
    cell_clip: float = 0.0
    tags: tuple = field(default=(), compare=False)

    @property
    def I(self) -> int:  # noqa: E743 - the conventional name
        return self.H

    @property
    def G(self) -> int:
        return GATES[self.cell]

    @property
    def hout(self) -> int:
        return self.proj or self.H

    @property
    def LD(self) -> int:
        return self.layers * self.dirs

    def layer_input(self, layer: int) -> int:
        return self.I if layer == 0 else self.dirs * self.hout

    @property
    def name(self) -> str:
        parts = ["blocklstm" if self.kind == "block" else self.cell]
        if self.layers > 1 or self.dirs > 1:
            parts.append(f"L{self.layers}{'bi' if self.dirs == 2 else ''}")
        parts.append(f"H{self.H}")
        if self.proj:
            parts.append(f"P{self.proj}")
        parts += [f"B{self.B}", f"T{self.T}"]
        if self.varlen:
            parts.append("varlen")
        if self.peephole:
            parts.append("peep")
        if self.cell_clip > 0:
            parts.append(f"clip{self.cell_clip:g}")
        if self.dtype != "float32":
            parts.append(self.dtype.replace("float", "f"))
        return "-".join(parts)

    def lengths(self) -> np.ndarray:
        """[B] int32: all ``T``, or random in ``[1, T]`` (seeded; the first is ``T``, the last 1)."""
        if not self.varlen:
            return np.full(self.B, self.T, np.int32)
        rng = np.random.default_rng(1234)
        lengths = rng.integers(1, self.T + 1, self.B).astype(np.int32)
        lengths[-1] = 1
        lengths[0] = self.T
        return lengths

    def useful_rows(self) -> int:
        return int(self.lengths().sum())

    def flops(self, mode: str) -> float:
        """The module docstring's formula; ``mode`` is ``"forward"`` or ``"training"``."""
        per_row = sum(self.dirs * (self.G * self.H * (self.layer_input(layer) + self.hout)
                                   + self.proj * self.H) for layer in range(self.layers))
        forward = 2.0 * self.useful_rows() * per_row
        return forward if mode == "forward" else 3.0 * forward


@dataclass
class Data:
    """Inputs, weights and upstream gradients of one problem, NumPy, time-major.

    x [T, B, I]; h0 [LD, B, Hout]; c0 [LD, B, H] (lstm); lengths [B] int32; weights: a list per
    pseudo-layer of dicts ``w_ih, w_hh, b_ih, b_hh`` (+ ``w_hr``; block: ``wci, wcf, wco``);
    dy [T, B, D*Hout] (zero past each length), dh [LD, B, Hout], dc [LD, B, H]: the cotangents
    every training step back-propagates (gradients requested: input, initial states, all weights).
    """

    problem: Problem
    x: np.ndarray
    h0: np.ndarray
    c0: np.ndarray | None
    lengths: np.ndarray
    weights: list
    dy: np.ndarray
    dh: np.ndarray
    dc: np.ndarray | None


def make_data(problem: Problem, seed: int = 0) -> Data:
    """Weights uniform in ±1/sqrt(H) (PyTorch's default init); inputs and states standard normal."""
    rng = np.random.default_rng(seed)
    p, dtype = problem, np.dtype(problem.dtype)
    scale = 1.0 / np.sqrt(p.H)
    uniform = lambda *shape: rng.uniform(-scale, scale, shape).astype(dtype)  # noqa: E731
    normal = lambda *shape: rng.standard_normal(shape).astype(dtype)  # noqa: E731
    weights = []
    for layer in range(p.layers):
        for _ in range(p.dirs):
            w = dict(w_ih=uniform(p.G * p.H, p.layer_input(layer)), w_hh=uniform(p.G * p.H, p.hout),
                     b_ih=uniform(p.G * p.H), b_hh=uniform(p.G * p.H))
            if p.proj:
                w["w_hr"] = uniform(p.proj, p.H)
            if p.kind == "block":
                w.update(wci=uniform(p.H), wcf=uniform(p.H), wco=uniform(p.H))
            weights.append(w)
    lengths = p.lengths()
    valid = (np.arange(p.T)[:, None] < lengths[None, :])[:, :, None]
    is_lstm = p.cell == "lstm"
    return Data(problem=p, x=normal(p.T, p.B, p.I) * valid, h0=normal(p.LD, p.B, p.hout),
                c0=normal(p.LD, p.B, p.H) if is_lstm else None, lengths=lengths, weights=weights,
                dy=(normal(p.T, p.B, p.dirs * p.hout) * valid).astype(dtype),
                dh=normal(p.LD, p.B, p.hout), dc=normal(p.LD, p.B, p.H) if is_lstm else None)


def full_grid() -> list[Problem]:
    """The issue's DeepBench-style grid, sized for 2 cores."""
    grid = [Problem("lstm", H, B, T) for H in (128, 256, 512, 1024) for B in (1, 16, 64) for T in (25, 50)]
    grid += [Problem("gru", H, B, 50) for H in (256, 512, 1024) for B in (16, 64)]
    grid += [Problem("rnn_tanh", H, B, 50) for H in (512, 1024) for B in (16, 64)]
    grid += [Problem("lstm", 256, 32, 50, layers=2, dirs=2),
             Problem("lstm", 256, 32, 50, layers=2, dirs=2, varlen=True),
             Problem("lstm", 256, 32, 50, varlen=True),
             Problem("lstm", 512, 16, 50, proj=256),
             Problem("lstm", 256, 16, 50, kind="block", peephole=True, cell_clip=3.0),
             Problem("lstm", 256, 16, 50, dtype="float64")]
    return grid


QUICK = ("lstm-H256-B1-T50", "lstm-H128-B16-T50", "lstm-H128-B64-T25", "gru-H256-B16-T50",
         "rnn_tanh-H512-B16-T50", "lstm-H256-B32-T50-varlen", "blocklstm-H256-B16-T50-peep-clip3",
         "lstm-H256-B16-T50-f64")


def select(quick: bool, pattern: str | None) -> list[Problem]:
    """The grid (or the ``--quick`` subset), filtered by ``pattern``: a substring of the name,
    or a regular expression searched in it."""
    problems = full_grid()
    if quick:
        problems = [p for p in problems if p.name in QUICK]
    if pattern:
        try:
            regex = re.compile(pattern)
            problems = [p for p in problems if pattern in p.name or regex.search(p.name)]
        except re.error:
            problems = [p for p in problems if pattern in p.name]
    return problems


def find(name: str) -> Problem:
    for problem in full_grid():
        if problem.name == name:
            return problem
    raise KeyError(f"no benchmark problem named {name!r}")
