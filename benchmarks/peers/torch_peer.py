"""PyTorch CPU ``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN(nonlinearity="tanh")``.

Variable lengths: ``pack_padded_sequence(enforce_sorted=False)`` in, ``pad_packed_sequence`` out,
inside the timed call (as a user writes it).  Training step: ``torch.autograd.backward`` of
``(output, h_n, c_n)`` with the shared cotangents, gradients of the input, ``h0``, ``c0`` and every
parameter.  Inference: ``torch.no_grad()``.

Dispatch (``aten/src/ATen/native/RNN.cpp``): LSTM goes to oneDNN (``aten::mkldnn_rnn_layer``)
when mkldnn is available and enabled, the input is float32 on CPU, not a PackedSequence, and the
LSTM has no projection; everything else (GRU, RNN, packed, ``proj_size``, float64) runs
PyTorch's native per-step loop.  :meth:`dispatch` does not guess: it runs the call once under
``torch.profiler`` and reports whether ``mkldnn_rnn_layer`` appeared.
Threads: ``torch.set_num_threads(n)`` and ``torch.set_num_interop_threads(1)``.
"""

from __future__ import annotations

import numpy as np

from . import Peer


class Torch(Peer):
    name = "torch"

    def load(self, threads: int) -> dict:
        import torch

        self.torch = torch
        torch.set_num_threads(threads)
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:  # already set (parallel work started): keep going
            pass
        self.threads_note = f"torch.set_num_threads({threads}), set_num_interop_threads(1)"
        return {"version": torch.__version__, "threads": self.threads_note,
                "mkldnn_available": bool(torch.backends.mkldnn.is_available()),
                "mkldnn_enabled": bool(torch.backends.mkldnn.enabled),
                "parallel_info": torch.__config__.parallel_info()}

    def unsupported(self, problem, mode: str) -> str | None:
        if problem.kind == "block":
            return "no peepholes / cell clip in nn.LSTM"
        return None

    def module(self, data):
        torch, p = self.torch, data.problem
        kwargs = dict(num_layers=p.layers, bidirectional=p.dirs == 2)
        if p.cell == "lstm":
            cls = torch.nn.LSTM
            if p.proj:
                kwargs["proj_size"] = p.proj
        elif p.cell == "gru":
            cls = torch.nn.GRU
        else:
            cls, kwargs["nonlinearity"] = torch.nn.RNN, "tanh"
        net = cls(p.I, p.H, **kwargs).to(getattr(torch, p.dtype))
        with torch.no_grad():
            for index, w in enumerate(data.weights):
                suffix = f"_l{index // p.dirs}{'_reverse' if index % p.dirs else ''}"
                for key, value in w.items():
                    name = key.replace("w_", "weight_").replace("b_", "bias_") + suffix
                    getattr(net, name).copy_(torch.from_numpy(value))
        return net

    def build(self, data, mode: str):
        torch, p = self.torch, data.problem
        from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

        net = self.module(data)
        training = mode == "training"
        tensor = lambda a: torch.from_numpy(np.ascontiguousarray(a)).requires_grad_(training)  # noqa: E731
        x, h0 = tensor(data.x), tensor(data.h0)
        state = (h0, tensor(data.c0)) if p.cell == "lstm" else h0
        lengths = torch.from_numpy(data.lengths.astype(np.int64))
        cotangents = [torch.from_numpy(a) for a in (data.dy, data.dh, data.dc) if a is not None]

        def forward():
            if p.varlen:
                y, final = net(pack_padded_sequence(x, lengths, enforce_sorted=False), state)
                y, _ = pad_packed_sequence(y, total_length=p.T)
            else:
                y, final = net(x, state)
            return y, final

        if not training:
            def inference():
                with torch.no_grad():
                    return forward()
            return inference

        def training_step():
            net.zero_grad(set_to_none=True)
            for leaf in (x, *(state if isinstance(state, tuple) else (state,))):
                leaf.grad = None
            y, final = forward()
            outputs = [y, *final] if isinstance(final, tuple) else [y, final]
            torch.autograd.backward(outputs, cotangents)
            return y
        return training_step

    def output(self, result) -> np.ndarray:
        return result[0].detach().numpy()

    def dispatch(self, problem, mode: str) -> str:
        """"oneDNN" or "native", from the operators a profiled call ran."""
        if problem.kind == "block":
            return ""
        from .. import problems

        run = self.build(problems.make_data(problem), mode)
        with self.torch.profiler.profile(activities=[self.torch.profiler.ProfilerActivity.CPU]) as prof:
            run()
        names = {event.key for event in prof.key_averages()}
        return "oneDNN" if any("mkldnn_rnn" in name for name in names) else "native"


PEER = Torch()
