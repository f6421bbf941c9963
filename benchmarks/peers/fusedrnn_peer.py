"""fusedrnn through its public ops, as a user calls them.

CudnnRNN problems: ``fusedrnn.cudnn_rnn_v3`` (``is_training=False`` for inference) and, for a
training step, ``cudnn_rnn_v3(is_training=True)`` + ``cudnn_rnn_backprop_v3``; the opaque
``params`` are packed from the canonical weights with ``cudnn_rnn_canonical_to_params_v2``.
Block problems: ``fusedrnn.block_lstm_v2`` (+ ``block_lstm_grad_v2``).
Threads: ``fusedrnn.set_num_threads(n)`` when the library has it; otherwise the NumPy engines'
BLAS runs on the worker's ``OPENBLAS_NUM_THREADS`` (set before NumPy was imported).
"""

from __future__ import annotations

import numpy as np

from . import Peer


def canonical_lists(data):
    """cuDNN canonical ``(weights, biases)``: per pseudo-layer W_0..W_{G-1}, R_0..R_{G-1}
    (, W_P) and bW_0..bW_{G-1}, bR_0..bR_{G-1}."""
    G = data.problem.G
    weights, biases = [], []
    for w in data.weights:
        weights += np.split(w["w_ih"], G) + np.split(w["w_hh"], G)
        if "w_hr" in w:
            weights.append(w["w_hr"])
        biases += np.split(w["b_ih"], G) + np.split(w["b_hh"], G)
    return weights, biases


def block_tensors(data) -> dict:
    """BlockLSTMV2's inputs: w [I+H, 4H] = [w_ih; w_hh]ᵀ (IFCO = cuDNN's gate order),
    b = b_ih + b_hh, peepholes, and the all-step gradients: h_grad = dy with dh added at the
    last step, cs_grad zero but dc at the last step.  Peepholes are zero for cudnn problems
    (which run with ``use_peephole=False``)."""
    w = data.weights[0]
    no_peephole = np.zeros(data.problem.H, data.x.dtype)
    h_grad = data.dy.copy()
    h_grad[-1] += data.dh[0]
    cs_grad = np.zeros_like(h_grad)
    cs_grad[-1] = data.dc[0]
    return dict(x=data.x, cs_prev=data.c0[0], h_prev=data.h0[0],
                w=np.ascontiguousarray(np.vstack([w["w_ih"].T, w["w_hh"].T])),
                wci=w.get("wci", no_peephole), wcf=w.get("wcf", no_peephole),
                wco=w.get("wco", no_peephole), b=w["b_ih"] + w["b_hh"],
                h_grad=h_grad, cs_grad=cs_grad)


class FusedRNN(Peer):
    name = "fusedrnn"

    def load(self, threads: int) -> dict:
        import fusedrnn
        import fusedrnn.settings

        self.lib = fusedrnn
        setter = getattr(fusedrnn, "set_num_threads", None)
        if setter is not None:
            setter(threads)
            self.threads_note = f"fusedrnn.set_num_threads({threads})"
        else:
            self.threads_note = (f"OPENBLAS_NUM_THREADS={threads} (NumPy engines; no "
                                 "fusedrnn.set_num_threads in this version)")
        backend_info = getattr(fusedrnn.settings, "backend_info", None)
        return {"version": fusedrnn.__version__, "threads": self.threads_note,
                "backend_info": backend_info() if backend_info else None,
                "blas_info": fusedrnn.settings.blas_info()}

    def attrs(self, problem) -> dict:
        return dict(rnn_mode=problem.cell, direction="bidirectional" if problem.dirs == 2 else "unidirectional",
                    num_proj=problem.proj)

    def params(self, data) -> np.ndarray:
        p = data.problem
        return self.lib.cudnn_rnn_canonical_to_params_v2(p.layers, p.H, p.I, *canonical_lists(data), **self.attrs(p))

    def build(self, data, mode: str):
        if data.problem.kind == "block":
            return self._build_block(data, mode)
        lib, p = self.lib, data.problem
        attrs = self.attrs(p)
        params = self.params(data)
        c0 = data.c0 if data.c0 is not None else np.zeros((), data.x.dtype)
        dc = data.dc if data.dc is not None else np.zeros((), data.x.dtype)
        x, h0, lengths, dy, dh = data.x, data.h0, data.lengths, data.dy, data.dh
        if mode == "forward":
            return lambda: lib.cudnn_rnn_v3(x, h0, c0, params, lengths, is_training=False, **attrs)

        def training_step():
            fwd = lib.cudnn_rnn_v3(x, h0, c0, params, lengths, is_training=True, **attrs)
            grads = lib.cudnn_rnn_backprop_v3(x, h0, c0, params, lengths, fwd.output, fwd.output_h,
                                              fwd.output_c, dy, dh, dc, fwd.reserve_space,
                                              fwd.host_reserved, **attrs)
            return fwd, grads
        return training_step

    def _build_block(self, data, mode: str):
        lib, p = self.lib, data.problem
        t = block_tensors(data)
        inputs = {k: t[k] for k in ("x", "cs_prev", "h_prev", "w", "wci", "wcf", "wco", "b")}
        seq_len_max = np.int64(p.T)
        if mode == "forward":
            return lambda: lib.block_lstm_v2(seq_len_max, **inputs, cell_clip=p.cell_clip, use_peephole=p.peephole)

        def training_step():
            fwd = lib.block_lstm_v2(seq_len_max, **inputs, cell_clip=p.cell_clip, use_peephole=p.peephole)
            return fwd, lib.block_lstm_grad_v2(seq_len_max, **inputs, **fwd._asdict(), cs_grad=t["cs_grad"],
                                               h_grad=t["h_grad"], use_peephole=p.peephole)
        return training_step

    def output(self, result) -> np.ndarray:
        return np.asarray(result.h if hasattr(result, "h") else result.output)

    def release_caches(self) -> None:
        """Recycled array blocks and kernel workspaces (``fusedrnn.release_cached_memory``, when
        the version has it)."""
        release = getattr(self.lib.settings, "release_cached_memory", None)
        if release is not None:
            release()

    def reserve_bytes(self, result) -> int:
        """``reserve_space`` bytes of a training step's forward (0 for the block ops, whose
        forward outputs are the backward's saved state: counted in their own outputs)."""
        fwd = result[0]
        return int(getattr(fwd, "reserve_space", np.zeros(0)).nbytes)

    def dispatch(self, problem, mode: str) -> str:
        info = getattr(self.lib.settings, "backend_info", None)
        if info is None:
            return "numpy engines"
        value = info()
        return str(value.get("backend", value)) if isinstance(value, dict) else str(value)


PEER = FusedRNN()
