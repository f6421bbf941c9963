"""Shared helpers for the CudnnRNN tests: a random problem builder, layout conversion,
a PyTorch mapping (spec §10.1) and a central finite-difference checker.

Shape legend (spec §0): T time, B batch, I input size, H num_units (cell size),
P num_proj, Hout = P or H, L layers, D directions, LD = L*D pseudo-layers.

Every problem is kept in *time-major* form (``x [T, B, I]``, ``h [LD, B, Hout]``,
``c [LD, B, H]``).  :func:`to_op_layout` turns it into what a ``time_major=False``
op receives (``input [B, T, I]``; states reinterpreted by a C-order reshape,
spec §5.2) and :func:`from_op_layout` undoes that for results.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np

import fusedrnn

MODES = ("lstm", "gru", "rnn_tanh", "rnn_relu")
GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}


@dataclass(frozen=True)
class Case:
    """One CudnnRNN configuration."""

    mode: str = "lstm"
    num_layers: int = 1
    num_dirs: int = 1
    input_size: int = 3
    num_units: int = 5
    num_proj: int = 0
    batch: int = 4
    max_time: int = 6
    lengths: tuple | None = None  # None: every sequence has length max_time
    input_mode: str = "linear_input"

    @property
    def direction(self) -> str:
        return "bidirectional" if self.num_dirs == 2 else "unidirectional"

    @property
    def hidden_out(self) -> int:
        return self.num_proj or self.num_units

    @property
    def num_pseudo_layers(self) -> int:
        return self.num_layers * self.num_dirs

    @property
    def is_lstm(self) -> bool:
        return self.mode == "lstm"

    @property
    def skip(self) -> bool:
        """The resolved input mode (spec §15.4: auto_select compares I with H)."""
        return self.input_mode == "skip_input" or (
            self.input_mode == "auto_select" and self.input_size == self.num_units)

    def attrs(self, **extra) -> dict:
        """Keyword attributes of the forward/backward ops (V3 flavour)."""
        attrs = dict(rnn_mode=self.mode, input_mode=self.input_mode, direction=self.direction,
                     num_proj=self.num_proj)
        attrs.update(extra)
        return attrs

    def attrs_v1(self, **extra) -> dict:
        attrs = self.attrs(**extra)
        del attrs["num_proj"]
        return attrs

    def params_size(self) -> int:
        return int(fusedrnn.cudnn_rnn_params_size(
            self.num_layers, self.num_units, self.input_size, T=np.float64, S=np.int64,
            rnn_mode=self.mode, input_mode=self.input_mode, direction=self.direction,
            num_proj=self.num_proj)[0])

    def with_(self, **changes) -> "Case":
        return replace(self, **changes)

    def __str__(self) -> str:  # readable pytest ids
        text = f"{self.mode}-L{self.num_layers}-D{self.num_dirs}-I{self.input_size}-H{self.num_units}"
        if self.num_proj:
            text += f"-P{self.num_proj}"
        if self.input_mode != "linear_input":
            text += f"-{self.input_mode}"
        text += f"-B{self.batch}-T{self.max_time}"
        if self.lengths is not None:
            text += "-len" + ".".join(map(str, self.lengths))
        return text


class Problem(NamedTuple):
    """Time-major inputs of one forward call."""

    case: Case
    x: np.ndarray  # [T, B, I]
    h: np.ndarray  # [LD, B, Hout]
    c: np.ndarray  # [LD, B, H] for lstm, a rank-0 placeholder otherwise
    params: np.ndarray  # [params_size]
    lengths: np.ndarray  # [B] int32

    def astype(self, dtype) -> "Problem":
        return self._replace(x=self.x.astype(dtype), h=self.h.astype(dtype), c=self.c.astype(dtype),
                             params=self.params.astype(dtype))


def make_problem(case: Case, seed: int = 0, dtype=np.float64, scale: float = 0.5) -> Problem:
    """Random inputs; params uniform in [-scale, scale] (keeps relu stacks bounded)."""
    rng = np.random.default_rng(seed)
    T, B, LD = case.max_time, case.batch, case.num_pseudo_layers
    x = rng.standard_normal((T, B, case.input_size))
    h = rng.standard_normal((LD, B, case.hidden_out))
    c = rng.standard_normal((LD, B, case.num_units)) if case.is_lstm else np.zeros(())
    params = rng.uniform(-scale, scale, case.params_size())
    lengths = np.array(case.lengths if case.lengths is not None else [T] * B, dtype=np.int32)
    return Problem(case, x, h, c, params, lengths).astype(dtype)


def random_like_outputs(case: Case, seed: int, dtype=np.float64):
    """Upstream gradients (time-major): (d_output [T,B,D*Hout], d_h [LD,B,Hout], d_c)."""
    rng = np.random.default_rng(seed)
    T, B, LD = case.max_time, case.batch, case.num_pseudo_layers
    gy = rng.standard_normal((T, B, case.num_dirs * case.hidden_out)).astype(dtype)
    gh = rng.standard_normal((LD, B, case.hidden_out)).astype(dtype)
    gc = rng.standard_normal((LD, B, case.num_units)).astype(dtype) if case.is_lstm else np.zeros((), dtype)
    return gy, gh, gc


# ----------------------------------------------------------------------------------------
# Layout conversion (spec §5.2: batch-major states are a reshape, not a transpose)


def seq_to_op(a: np.ndarray, time_major: bool) -> np.ndarray:
    """[T, B, n] → what the op takes/returns: [T, B, n] or [B, T, n]."""
    return a if time_major else np.ascontiguousarray(a.transpose(1, 0, 2))


def seq_from_op(a: np.ndarray, time_major: bool) -> np.ndarray:
    return a if time_major else a.transpose(1, 0, 2)


def state_to_op(a: np.ndarray, time_major: bool) -> np.ndarray:
    """[LD, B, n] → [LD, B, n] or [B, LD, n] by C-order reinterpretation."""
    if time_major or a.ndim != 3:
        return a
    return np.ascontiguousarray(a).reshape(a.shape[1], a.shape[0], a.shape[2])


def state_from_op(a: np.ndarray, time_major: bool) -> np.ndarray:
    if time_major or a.ndim != 3:
        return a
    return a.reshape(a.shape[1], a.shape[0], a.shape[2])


class Forward(NamedTuple):
    """A V3 forward, results converted back to time-major; ``raw`` is the op's own result."""

    output: np.ndarray
    output_h: np.ndarray
    output_c: np.ndarray
    raw: tuple
    op_inputs: tuple  # (input, input_h, input_c) as handed to the op


def forward_v3(prob: Problem, time_major: bool = True, **attrs) -> Forward:
    case = prob.case
    inputs = (seq_to_op(prob.x, time_major), state_to_op(prob.h, time_major),
              state_to_op(prob.c, time_major))
    raw = fusedrnn.cudnn_rnn_v3(*inputs, prob.params, prob.lengths,
                                **case.attrs(time_major=time_major, **attrs))
    return Forward(seq_from_op(raw.output, time_major), state_from_op(raw.output_h, time_major),
                   state_from_op(raw.output_c, time_major), raw, inputs)


def backprop_v3(prob: Problem, fwd: Forward, grads, time_major: bool = True, **attrs):
    """BackpropV3 for time-major upstream ``grads`` = (gy, gh, gc); returns time-major
    ``(d_input, d_h, d_c, d_params)``."""
    case = prob.case
    gy, gh, gc = grads
    raw = fwd.raw
    bp = fusedrnn.cudnn_rnn_backprop_v3(
        *fwd.op_inputs, prob.params, prob.lengths, raw.output, raw.output_h, raw.output_c,
        seq_to_op(gy, time_major), state_to_op(gh, time_major), state_to_op(gc, time_major),
        raw.reserve_space, raw.host_reserved, **case.attrs(time_major=time_major, **attrs))
    return (seq_from_op(bp.input_backprop, time_major), state_from_op(bp.input_h_backprop, time_major),
            state_from_op(bp.input_c_backprop, time_major), bp.params_backprop)


def loss_value(prob: Problem, grads, time_major: bool = True, **attrs) -> float:
    """``<output, gy> + <output_h, gh> (+ <output_c, gc>)``: the scalar whose gradient the
    backprop computes for upstream gradients ``grads``."""
    gy, gh, gc = grads
    fwd = forward_v3(prob, time_major, **attrs)
    total = np.sum(fwd.output * gy) + np.sum(fwd.output_h * gh)
    if prob.case.is_lstm:
        total += np.sum(fwd.output_c * gc)
    return float(total)


# ----------------------------------------------------------------------------------------
# Canonical lists


def canonical(prob: Problem, params: np.ndarray | None = None):
    case = prob.case
    regions = fusedrnn.layout.RNNConfig(case.mode, case.num_layers, case.num_units, case.input_size,
                                         case.num_dirs, case.skip, case.num_proj).regions
    return fusedrnn.cudnn_rnn_params_to_canonical_v2(
        case.num_layers, case.num_units, case.input_size, prob.params if params is None else params,
        num_params_weights=len(regions.weights), num_params_biases=len(regions.biases),
        rnn_mode=case.mode, input_mode=case.input_mode, direction=case.direction,
        num_proj=case.num_proj)


def pack(case: Case, weights, biases) -> np.ndarray:
    return fusedrnn.cudnn_rnn_canonical_to_params_v2(
        case.num_layers, case.num_units, case.input_size, list(weights), list(biases),
        rnn_mode=case.mode, input_mode=case.input_mode, direction=case.direction,
        num_proj=case.num_proj)


# ----------------------------------------------------------------------------------------
# PyTorch oracle (spec §10.1)


def torch_module(case: Case, weights, biases):
    """An ``nn.LSTM/GRU/RNN`` (float64) holding the canonical parameters."""
    import torch

    assert not case.skip, "PyTorch has no skip_input"
    G, nW, nB = GATES[case.mode], 2 * GATES[case.mode] + (1 if case.num_proj else 0), 2 * GATES[case.mode]
    kwargs = dict(num_layers=case.num_layers, bidirectional=case.num_dirs == 2)
    if case.mode == "lstm":
        cls = torch.nn.LSTM
        if case.num_proj:
            kwargs["proj_size"] = case.num_proj
    elif case.mode == "gru":
        cls = torch.nn.GRU
    else:
        cls = torch.nn.RNN
        kwargs["nonlinearity"] = case.mode[4:]
    net = cls(case.input_size, case.num_units, **kwargs).double()
    with torch.no_grad():
        for layer in range(case.num_layers):
            for d in range(case.num_dirs):
                p, s = layer * case.num_dirs + d, "_reverse" if d else ""
                q, r = p * nW, p * nB
                getattr(net, f"weight_ih_l{layer}{s}").copy_(torch.from_numpy(np.vstack(weights[q:q + G])))
                getattr(net, f"weight_hh_l{layer}{s}").copy_(torch.from_numpy(np.vstack(weights[q + G:q + 2 * G])))
                getattr(net, f"bias_ih_l{layer}{s}").copy_(torch.from_numpy(np.concatenate(biases[r:r + G])))
                getattr(net, f"bias_hh_l{layer}{s}").copy_(torch.from_numpy(np.concatenate(biases[r + G:r + 2 * G])))
                if case.num_proj:
                    getattr(net, f"weight_hr_l{layer}{s}").copy_(torch.from_numpy(weights[q + 2 * G]))
    return net


def torch_param_grads(case: Case, net):
    """The module's parameter gradients as canonical (weights, biases) lists."""
    G = GATES[case.mode]
    weights, biases = [], []
    for layer in range(case.num_layers):
        for d in range(case.num_dirs):
            s = "_reverse" if d else ""
            grad = lambda name: getattr(net, f"{name}_l{layer}{s}").grad.numpy()  # noqa: E731
            weights += np.split(grad("weight_ih"), G) + np.split(grad("weight_hh"), G)
            if case.num_proj:
                weights.append(grad("weight_hr"))
            biases += np.split(grad("bias_ih"), G) + np.split(grad("bias_hh"), G)
    return weights, biases


class TorchResult(NamedTuple):
    output: np.ndarray
    output_h: np.ndarray
    output_c: np.ndarray | None
    d_input: np.ndarray
    d_h: np.ndarray
    d_c: np.ndarray | None
    d_params: np.ndarray  # packed into the opaque layout


def torch_reference(prob: Problem, grads) -> TorchResult:
    """Forward + backward of the same model in PyTorch, time-major; variable lengths via
    ``pack_padded_sequence(enforce_sorted=False)`` / ``pad_packed_sequence(total_length=T)``."""
    import torch
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    case = prob.case
    weights, biases = canonical(prob)
    net = torch_module(case, weights, biases)
    x = torch.tensor(prob.x, requires_grad=True)
    h0 = torch.tensor(prob.h, requires_grad=True)
    c0 = torch.tensor(prob.c, requires_grad=True) if case.is_lstm else None
    variable = case.lengths is not None
    seq = pack_padded_sequence(x, torch.tensor(prob.lengths.astype(np.int64)), enforce_sorted=False) \
        if variable else x
    if case.is_lstm:
        y, (hn, cn) = net(seq, (h0, c0))
    else:
        (y, hn), cn = net(seq, h0), None
    if variable:
        y, _ = pad_packed_sequence(y, total_length=case.max_time)
    gy, gh, gc = (torch.tensor(g) for g in grads)
    loss = (y * gy).sum() + (hn * gh).sum() + ((cn * gc).sum() if cn is not None else 0.0)
    loss.backward()
    d_params = pack(case, *torch_param_grads(case, net))
    numpy = lambda t: None if t is None else t.detach().numpy()  # noqa: E731
    return TorchResult(numpy(y), numpy(hn), numpy(cn), numpy(x.grad), numpy(h0.grad),
                       numpy(c0.grad) if c0 is not None else None, d_params)


# ----------------------------------------------------------------------------------------
# Finite differences


def region_sample(case: Case, per_region: int, rng) -> np.ndarray:
    """Indices into ``params``: up to ``per_region`` entries of every weight and bias region,
    so every canonical matrix/vector is exercised."""
    config = fusedrnn.layout.RNNConfig(case.mode, case.num_layers, case.num_units, case.input_size,
                                        case.num_dirs, case.skip, case.num_proj)
    picks = []
    for region in config.regions.weights + config.regions.biases:
        if region.size == 0:
            continue
        k = min(per_region, region.size)
        picks.append(region.offset + rng.choice(region.size, size=k, replace=False))
    return np.unique(np.concatenate(picks))


def finite_difference(f, array: np.ndarray, indices, eps: float) -> np.ndarray:
    """Central differences of scalar ``f(array')`` for the flat ``indices`` of ``array``."""
    out = np.empty(len(indices))
    for n, i in enumerate(indices):
        plus, minus = array.copy(), array.copy()
        plus.flat[i] += eps
        minus.flat[i] -= eps
        out[n] = (f(plus) - f(minus)) / (2 * eps)
    return out


def assert_gradients_match_fd(prob: Problem, time_major: bool = True, per_region: int | None = None,
                              max_entries: int | None = None, eps: float = 1e-6,
                              rtol: float = 1e-6, atol: float = 1e-7, rng_seed: int = 0, **attrs) -> None:
    """BackpropV3 vs central finite differences (float64) of :func:`loss_value`, for input,
    input_h, input_c (lstm) and params.  ``per_region=None`` checks every params entry;
    ``max_entries`` subsamples the input/state arrays; ``rng_seed`` drives that sampling and
    the upstream gradients.  The loss forward runs with the same attributes ``attrs`` (same
    dropout seeds → same masks)."""
    case = prob.case
    rng = np.random.default_rng(rng_seed)
    grads = random_like_outputs(case, rng_seed + 1)
    attrs.setdefault("is_training", True)
    fwd = forward_v3(prob, time_major, **attrs)
    bp_attrs = {k: v for k, v in attrs.items() if k != "is_training"}
    d_x, d_h, d_c, d_params = backprop_v3(prob, fwd, grads, time_major, **bp_attrs)
    checks = [("input", "x", d_x), ("input_h", "h", d_h)]
    if case.is_lstm:
        checks.append(("input_c", "c", d_c))
    checks.append(("params", "params", d_params))
    for label, field, analytic in checks:
        array = getattr(prob, field)
        if field == "params" and per_region is not None:
            indices = region_sample(case, per_region, rng)
        elif max_entries is not None and array.size > max_entries:
            indices = np.sort(rng.choice(array.size, size=max_entries, replace=False))
        else:
            indices = np.arange(array.size)
        f = lambda a: loss_value(prob._replace(**{field: a}), grads, time_major, **attrs)  # noqa: E731
        numeric = finite_difference(f, array, indices, eps)
        np.testing.assert_allclose(analytic.reshape(-1)[indices], numeric, rtol=rtol, atol=atol,
                                   err_msg=f"{label} gradient vs finite differences, {case}, {attrs}")
