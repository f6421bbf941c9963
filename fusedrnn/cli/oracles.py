"""Quick comparisons with PyTorch and TensorFlow, when installed (used by ``fusedrnn check``).

* PyTorch ``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN`` (float64) against ``CudnnRNNV3`` and
  ``CudnnRNNBackpropV3``: same mathematics as cuDNN (spec §10.1).  The module's weights are
  packed into the opaque buffer through ``cudnn_rnn_canonical_to_params``; the parameter
  gradient is unpacked with ``cudnn_rnn_params_to_canonical`` and compared with ``.grad``.
* TensorFlow ``tf.raw_ops.BlockLSTMV2`` / ``BlockLSTMGradV2`` / ``GRUBlockCell`` /
  ``GRUBlockCellGrad`` (float32, TF's only common dtype) against fusedrnn's.

Each comparison reports ``max |fusedrnn − oracle| / max(1, |oracle|)`` over all outputs.
"""

from __future__ import annotations

import importlib.util
import os

import numpy as np

import fusedrnn

from .gradcheck import CheckResult

TORCH_TOLERANCE = 1e-10  # float64 both sides
TF_TOLERANCE = 1e-5  # float32 both sides
GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1}


def available(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _relative_error(ours, theirs) -> float:
    worst = 0.0
    for a, b in zip(ours, theirs):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        if a.shape != b.shape:
            return float("inf")
        if a.size:
            worst = max(worst, float(np.max(np.abs(a - b) / np.maximum(1.0, np.abs(b)))))
    return worst


def _torch_canonical(module, mode: str, layers: int, dirs: int, use_grad: bool):
    """``(weights, biases)`` canonical lists (spec §6.2) from a torch RNN module's parameters
    (their values, or their ``.grad`` when ``use_grad``)."""
    G, H = GATES[mode], module.hidden_size
    weights, biases = [], []
    for layer in range(layers):
        for d in range(dirs):
            suffix = f"l{layer}" + ("_reverse" if d else "")
            tensors = [getattr(module, f"{kind}_{suffix}") for kind in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
            w_ih, w_hh, b_ih, b_hh = [(t.grad if use_grad else t).detach().numpy() for t in tensors]
            weights += list(w_ih.reshape(G, H, -1)) + list(w_hh.reshape(G, H, -1))
            biases += list(b_ih.reshape(G, H)) + list(b_hh.reshape(G, H))
    return weights, biases


def torch_checks(quick: bool, seed: int = 0):
    """Yield one :class:`CheckResult` per (mode, direction) compared with PyTorch."""
    import torch

    rng = np.random.default_rng(seed)
    T, B, I, H, L = 5, 3, 4, 6, 2
    modes = ("lstm", "gru") if quick else ("lstm", "gru", "rnn_tanh")
    for mode in modes:
        for dirs in ((2,) if quick else (1, 2)):
            direction = "bidirectional" if dirs == 2 else "unidirectional"
            torch_class = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU, "rnn_tanh": torch.nn.RNN}[mode]
            torch.manual_seed(int(rng.integers(1 << 30)))
            module = torch_class(I, H, num_layers=L, bidirectional=dirs == 2).double()
            x = rng.standard_normal((T, B, I))
            h0 = rng.standard_normal((L * dirs, B, H))
            c0 = rng.standard_normal((L * dirs, B, H)) if mode == "lstm" else np.zeros(())
            g_out = rng.standard_normal((T, B, dirs * H))

            weights, biases = _torch_canonical(module, mode, L, dirs, use_grad=False)
            attrs = dict(rnn_mode=mode, direction=direction)
            params = fusedrnn.cudnn_rnn_canonical_to_params(L, H, I, weights, biases, **attrs)
            lengths = np.full(B, T, np.int32)
            ours = fusedrnn.cudnn_rnn_v3(x, h0, c0, params, lengths, **attrs)
            back = fusedrnn.cudnn_rnn_backprop_v3(
                x, h0, c0, params, lengths, *ours[:3], g_out, np.zeros_like(ours.output_h),
                np.zeros_like(ours.output_c), ours.reserve_space, ours.host_reserved, **attrs)
            grad_w, grad_b = fusedrnn.cudnn_rnn_params_to_canonical(
                L, H, I, back.params_backprop, num_params=len(weights), **attrs)

            tx = torch.tensor(x, requires_grad=True)
            th = torch.tensor(h0, requires_grad=True)
            if mode == "lstm":
                tc = torch.tensor(c0, requires_grad=True)
                t_out, (t_h, t_c) = module(tx, (th, tc))
            else:
                t_out, t_h = module(tx, th)
            (t_out * torch.tensor(g_out)).sum().backward()
            torch_w, torch_b = _torch_canonical(module, mode, L, dirs, use_grad=True)

            pairs = [(ours.output, t_out.detach().numpy()), (ours.output_h, t_h.detach().numpy()),
                     (back.input_backprop, tx.grad.numpy()), (back.input_h_backprop, th.grad.numpy())]
            if mode == "lstm":
                pairs += [(ours.output_c, t_c.detach().numpy()), (back.input_c_backprop, tc.grad.numpy())]
            pairs += list(zip(grad_w, torch_w)) + list(zip(grad_b, torch_b))
            error = _relative_error(*zip(*pairs))
            yield CheckResult(f"vs torch.nn.{torch_class.__name__}",
                              f"{mode} L={L} {'bi' if dirs == 2 else 'uni'} fwd+bwd float64", error,
                              TORCH_TOLERANCE)


def tensorflow_checks(quick: bool, seed: int = 0):
    """Yield :class:`CheckResult`\\ s of the block ops compared with ``tf.raw_ops``."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    T, B, I, n = 5, 3, 4, 6
    f32 = np.float32
    for use_peephole in ((True,) if quick else (False, True)):
        x = rng.standard_normal((T, B, I)).astype(f32)
        cs0, h0 = rng.standard_normal((2, B, n)).astype(f32)
        w = rng.uniform(-0.5, 0.5, (I + n, 4 * n)).astype(f32)
        wci, wcf, wco = rng.uniform(-0.5, 0.5, (3, n)).astype(f32)
        b = rng.uniform(-0.5, 0.5, 4 * n).astype(f32)
        seq_len_max = np.int64(T - 1)
        inputs = (x, cs0, h0, w, wci, wcf, wco, b)
        ours = fusedrnn.block_lstm_v2(seq_len_max, *inputs, cell_clip=0.0, use_peephole=use_peephole)
        theirs = tf.raw_ops.BlockLSTMV2(seq_len_max=seq_len_max, x=x, cs_prev=cs0, h_prev=h0, w=w, wci=wci,
                                        wcf=wcf, wco=wco, b=b, cell_clip=0.0, use_peephole=use_peephole)
        g_cs, g_h = rng.standard_normal((2, T, B, n)).astype(f32)
        our_grads = fusedrnn.block_lstm_grad_v2(seq_len_max, *inputs, *ours, g_cs, g_h, use_peephole=use_peephole)
        their_grads = tf.raw_ops.BlockLSTMGradV2(
            seq_len_max=seq_len_max, x=x, cs_prev=cs0, h_prev=h0, w=w, wci=wci, wcf=wcf, wco=wco, b=b,
            i=ours.i, cs=ours.cs, f=ours.f, o=ours.o, ci=ours.ci, co=ours.co, h=ours.h, cs_grad=g_cs,
            h_grad=g_h, use_peephole=use_peephole)
        # gate outputs past seq_len_max are uninitialised in TF (spec block_ops §3.2): compare the valid steps
        valid = int(seq_len_max)
        error = _relative_error([*(o[:valid] for o in ours), *our_grads],
                                [*(o.numpy()[:valid] for o in theirs), *(g.numpy() for g in their_grads)])
        yield CheckResult("vs tf BlockLSTMV2", f"{'peephole ' if use_peephole else ''}fwd+GradV2 T={T} "
                          f"seq_len_max={valid} float32", error, TF_TOLERANCE)

    x = rng.standard_normal((B, I)).astype(f32)
    h = rng.standard_normal((B, n)).astype(f32)
    w_ru = rng.uniform(-0.5, 0.5, (I + n, 2 * n)).astype(f32)
    w_c = rng.uniform(-0.5, 0.5, (I + n, n)).astype(f32)
    b_ru, b_c = rng.uniform(-0.5, 0.5, 2 * n).astype(f32), rng.uniform(-0.5, 0.5, n).astype(f32)
    ours = fusedrnn.gru_block_cell(x, h, w_ru, w_c, b_ru, b_c)
    theirs = tf.raw_ops.GRUBlockCell(x=x, h_prev=h, w_ru=w_ru, w_c=w_c, b_ru=b_ru, b_c=b_c)
    d_h = rng.standard_normal((B, n)).astype(f32)
    our_grads = fusedrnn.gru_block_cell_grad(x, h, w_ru, w_c, b_ru, b_c, ours.r, ours.u, ours.c, d_h)
    their_grads = tf.raw_ops.GRUBlockCellGrad(x=x, h_prev=h, w_ru=w_ru, w_c=w_c, b_ru=b_ru, b_c=b_c,
                                              r=ours.r, u=ours.u, c=ours.c, d_h=d_h)
    error = _relative_error([*ours, *our_grads], [t.numpy() for t in (*theirs, *their_grads)])
    yield CheckResult("vs tf GRUBlockCell", f"fwd+grad B={B} I={I} n={n} float32", error, TF_TOLERANCE)
