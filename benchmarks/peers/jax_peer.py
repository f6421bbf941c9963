"""JAX: the network written with ``lax.scan`` and compiled with ``jax.jit`` (optional peer).

Cells in cuDNN's mathematics (LSTM with optional projection ``h = W_hr (o * tanh c)``; GRU with
the reset gate applied after the recurrent product, as ``linear_before_reset``; tanh RNN); the
input GEMM for all steps runs before the scan.  Variable lengths: masked updates, and the
backward direction reverses each sequence within its own length (PackedSequence semantics).
Training step: ``jax.vjp`` of ``(y, h_n, c_n)`` with the shared cotangents, for the input, the
initial states and every weight, all in one jitted function.  The first call (compilation) is
reported as the first-call time.
Threads: ``XLA_FLAGS`` (:func:`xla_flags`) in the worker's environment, before anything can
import JAX (Keras imports it when installed).
"""

from __future__ import annotations

import os
import sys

import numpy as np

from . import Peer


def xla_flags(threads: int) -> str:
    """``--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1`` for one thread; for
    n > 1 nothing: XLA has no flag for a pool of n, its CPU pool takes every usable core (on a
    2-core machine, n = 2)."""
    if threads == 1:
        return "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    return ""


def _cell_step(cell: str):
    """One time step ``(h, c), (gx_t, mask_t) -> (h', c'), y_t`` given the precomputed input
    projection ``gx_t = x_t W_ihᵀ + b_ih``."""
    import jax
    import jax.numpy as jnp

    def step(w, carry, gx, mask):
        h, c = carry
        gh = h @ w["w_hh"].T + w["b_hh"]
        if cell == "lstm":
            i, f, g, o = jnp.split(gx + gh, 4, axis=-1)
            c_new = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
            h_new = jax.nn.sigmoid(o) * jnp.tanh(c_new)
            if "w_hr" in w:
                h_new = h_new @ w["w_hr"].T
        elif cell == "gru":
            xr, xz, xn = jnp.split(gx, 3, axis=-1)
            hr, hz, hn = jnp.split(gh, 3, axis=-1)
            r, z = jax.nn.sigmoid(xr + hr), jax.nn.sigmoid(xz + hz)
            n = jnp.tanh(xn + r * hn)
            h_new, c_new = (1 - z) * n + z * h, c
        else:
            h_new, c_new = jnp.tanh(gx + gh), c
        if mask is None:
            return (h_new, c_new), h_new
        return (jnp.where(mask, h_new, h), jnp.where(mask, c_new, c)), jnp.where(mask, h_new, 0)
    return step


def network(problem):
    """``f(x, h0, c0, weights, lengths) -> (y [T, B, D*Hout], h_n, c_n)`` for ``problem``."""
    import jax
    import jax.numpy as jnp

    p = problem
    step = _cell_step(p.cell)

    def within_length_reversal(lengths):
        t = jnp.arange(p.T)[:, None]
        return jnp.where(t < lengths[None, :], lengths[None, :] - 1 - t, t)  # [T, B], an involution

    def run_direction(w, x, h, c, mask, reverse, index):
        if reverse:
            x = x[::-1] if index is None else jnp.take_along_axis(x, index[:, :, None], axis=0)
        gx = x @ w["w_ih"].T + w["b_ih"]
        scan_inputs = (gx, mask) if mask is not None else gx
        body = (lambda carry, a: step(w, carry, a[0], a[1])) if mask is not None else \
            (lambda carry, a: step(w, carry, a, None))
        (h, c), y = jax.lax.scan(body, (h, c), scan_inputs)
        if reverse:
            y = y[::-1] if index is None else jnp.take_along_axis(y, index[:, :, None], axis=0)
        return y, h, c

    def f(x, h0, c0, weights, lengths):
        mask = index = None
        if p.varlen:
            mask = (jnp.arange(p.T)[:, None] < lengths[None, :])[:, :, None]
            index = within_length_reversal(lengths)
        hs, cs = [], []
        for layer in range(p.layers):
            ys = []
            for d in range(p.dirs):
                q = layer * p.dirs + d
                c = c0[q] if c0 is not None else jnp.zeros((p.B, p.H), x.dtype)
                y, h, c = run_direction(weights[q], x, h0[q], c, mask, d == 1, index)
                ys.append(y)
                hs.append(h)
                cs.append(c)
            x = jnp.concatenate(ys, axis=-1) if p.dirs > 1 else ys[0]
        return x, jnp.stack(hs), (jnp.stack(cs) if c0 is not None else None)
    return f


class Jax(Peer):
    name = "jax"

    def load(self, threads: int) -> dict:
        if "jax" not in sys.modules and "XLA_FLAGS" not in os.environ and xla_flags(threads):
            os.environ["XLA_FLAGS"] = xla_flags(threads)
        import jax

        jax.config.update("jax_enable_x64", True)  # float64 problems; float32 arrays stay float32
        self.jax = jax
        flags = os.environ.get("XLA_FLAGS", "")
        self.threads_note = (f"XLA_FLAGS={flags!r} (set before JAX was imported)" if flags else
                             f"XLA's default CPU pool (all {len(os.sched_getaffinity(0))} usable cores)")
        return {"version": jax.__version__, "threads": self.threads_note,
                "devices": [str(device) for device in jax.devices()]}

    def unsupported(self, problem, mode: str) -> str | None:
        if problem.kind == "block":
            return "peepholes / cell clip not written for JAX"
        return None

    def build(self, data, mode: str):
        jax, p = self.jax, data.problem
        jnp = jax.numpy
        f = network(p)
        weights = [{k: jnp.asarray(v) for k, v in w.items()} for w in data.weights]
        x, h0, lengths = jnp.asarray(data.x), jnp.asarray(data.h0), jnp.asarray(data.lengths)
        c0 = jnp.asarray(data.c0) if data.c0 is not None else None
        cotangents = (jnp.asarray(data.dy), jnp.asarray(data.dh), jnp.asarray(data.dc) if data.dc is not None else None)
        if mode == "forward":
            forward = jax.jit(f)
            return lambda: jax.block_until_ready(forward(x, h0, c0, weights, lengths))

        @jax.jit
        def training_step(x, h0, c0, weights):
            outputs, pullback = jax.vjp(lambda *args: f(*args, lengths), x, h0, c0, weights)
            return outputs[0], pullback(cotangents)
        return lambda: jax.block_until_ready(training_step(x, h0, c0, weights))

    def output(self, result) -> np.ndarray:
        return np.asarray(result[0])


PEER = Jax()
