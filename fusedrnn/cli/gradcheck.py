"""Float64 finite-difference checks of every op family's gradient (used by ``fusedrnn check``).

Each check builds a small random float64 problem, a scalar loss that is linear in the op's
differentiable outputs with random weights ``G`` (``loss = Σ output ⊙ G``), the analytic gradient
of that loss from fusedrnn's backward op, and compares it with central differences

    fd(u) = (loss(a + ε u) − loss(a − ε u)) / (2 ε),   ε = 1e-6,

for every differentiable input ``a``: along one random direction ``u`` (which touches every
entry at once; compared with ``⟨grad, u⟩``) and, unless quick, along ``entries`` single
coordinates.  The error of one comparison is ``|fd − analytic| / max(1, |analytic|)``; central
differences in float64 are accurate to ~1e-9 here, so :data:`TOLERANCE` = 1e-6 separates a right
gradient from a wrong one by orders of magnitude.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

import fusedrnn

EPSILON = 1e-6
TOLERANCE = 1e-6
CUDNN_MODES = ("lstm", "gru", "rnn_tanh", "rnn_relu")


class CheckResult(NamedTuple):
    family: str
    config: str
    max_error: float
    tolerance: float

    @property
    def passed(self) -> bool:
        return bool(self.max_error <= self.tolerance)  # NaN fails


def fd_max_error(loss: Callable[[dict], float], inputs: dict, analytic: dict, rng: np.random.Generator,
                 entries: int) -> float:
    """Largest error between ``analytic[name]`` (d loss / d inputs[name]) and central differences
    of ``loss`` over a random direction and ``entries`` random coordinates of each input."""
    worst = 0.0
    for name, value in inputs.items():
        directions = [rng.standard_normal(value.shape)]
        for flat in rng.choice(value.size, min(entries, value.size), replace=False):
            unit = np.zeros(value.shape)
            unit.flat[flat] = 1.0
            directions.append(unit)
        for direction in directions:
            plus = dict(inputs, **{name: value + EPSILON * direction})
            minus = dict(inputs, **{name: value - EPSILON * direction})
            numeric = (loss(plus) - loss(minus)) / (2 * EPSILON)
            exact = float(np.vdot(analytic[name], direction))
            worst = max(worst, abs(numeric - exact) / max(1.0, abs(exact)))
    return worst


def _weighted_sum(outputs, weights) -> float:
    return float(sum(np.vdot(o, g) for o, g in zip(outputs, weights)))


# --------------------------------------------------------------------------------------
# CudnnRNN (V3: lengths, batch-major, projection)


class CudnnCase(NamedTuple):
    mode: str
    layers: int = 1
    bidirectional: bool = False
    lengths: tuple | None = None  # None: all full length
    time_major: bool = True
    num_proj: int = 0
    input_mode: str = "linear_input"
    batch: int = 3
    max_time: int = 4
    input_size: int = 3
    num_units: int = 4

    def __str__(self) -> str:
        text = f"L={self.layers} {'bi' if self.bidirectional else 'uni'} I={self.input_size} H={self.num_units}"
        if self.num_proj:
            text += f" P={self.num_proj}"
        text += f" B={self.batch} T={self.max_time}"
        if self.lengths:
            text += " lengths=" + ",".join(map(str, self.lengths))
        if not self.time_major:
            text += " batch-major"
        if self.input_mode != "linear_input":
            text += f" {self.input_mode}"
        return text


def cudnn_cases(quick: bool) -> list[CudnnCase]:
    """Per mode: a one-layer unidirectional case and a two-layer bidirectional one with variable
    lengths; plus projection and batch-major + skip_input cases (full runs only)."""
    cases = []
    for mode in CUDNN_MODES:
        cases.append(CudnnCase(mode))
        cases.append(CudnnCase(mode, layers=2, bidirectional=True, lengths=(4, 2, 1)))
    if not quick:
        cases.append(CudnnCase("lstm", layers=2, bidirectional=True, lengths=(3, 4, 1), num_proj=2))
        cases.append(CudnnCase("gru", layers=2, lengths=(2, 4, 3), time_major=False,
                               input_mode="skip_input", input_size=4))
    return cases


def check_cudnn(case: CudnnCase, rng: np.random.Generator, entries: int) -> CheckResult:
    """``CudnnRNNV3`` + ``CudnnRNNBackpropV3`` against finite differences."""
    direction = "bidirectional" if case.bidirectional else "unidirectional"
    attrs = dict(rnn_mode=case.mode, direction=direction, num_proj=case.num_proj,
                 input_mode=case.input_mode, time_major=case.time_major)
    LD, B, T = case.layers * (2 if case.bidirectional else 1), case.batch, case.max_time
    out_width = case.num_proj or case.num_units
    size = int(fusedrnn.cudnn_rnn_params_size(
        case.layers, case.num_units, case.input_size, T=np.float64, rnn_mode=case.mode,
        input_mode=case.input_mode, direction=direction, num_proj=case.num_proj)[0])
    state_shape = (LD, B, out_width) if case.time_major else (B, LD, out_width)
    cell_shape = (LD, B, case.num_units) if case.time_major else (B, LD, case.num_units)
    inputs = {"input": rng.standard_normal((T, B, case.input_size) if case.time_major
                                           else (B, T, case.input_size)),
              "input_h": rng.standard_normal(state_shape),
              "params": rng.uniform(-0.5, 0.5, size)}
    if case.mode == "lstm":
        inputs["input_c"] = rng.standard_normal(cell_shape)
    lengths = np.array(case.lengths or (T,) * B, np.int32)

    def run_forward(a):
        c = a.get("input_c", np.zeros(()))
        return fusedrnn.cudnn_rnn_v3(a["input"], a["input_h"], c, a["params"], lengths, **attrs)

    forward = run_forward(inputs)
    upstream = [rng.standard_normal(np.shape(out)) for out in forward[:3]]

    def loss(a):
        return _weighted_sum(run_forward(a)[:3], upstream)

    c = inputs.get("input_c", np.zeros(()))
    grads = fusedrnn.cudnn_rnn_backprop_v3(
        inputs["input"], inputs["input_h"], c, inputs["params"], lengths, *forward[:3], *upstream,
        forward.reserve_space, forward.host_reserved, **attrs)
    analytic = {"input": grads.input_backprop, "input_h": grads.input_h_backprop,
                "input_c": grads.input_c_backprop, "params": grads.params_backprop}
    error = fd_max_error(loss, inputs, analytic, rng, entries)
    return CheckResult(f"CudnnRNNV3 {case.mode}", str(case), error, TOLERANCE)


# --------------------------------------------------------------------------------------
# Block ops


def _lstm_inputs(rng, B: int, I: int, n: int, T: int | None) -> dict:
    x_shape = (B, I) if T is None else (T, B, I)
    return {"x": rng.standard_normal(x_shape), "cs_prev": rng.standard_normal((B, n)),
            "h_prev": rng.standard_normal((B, n)), "w": rng.uniform(-0.5, 0.5, (I + n, 4 * n)),
            "wci": rng.uniform(-0.5, 0.5, n), "wcf": rng.uniform(-0.5, 0.5, n),
            "wco": rng.uniform(-0.5, 0.5, n), "b": rng.uniform(-0.5, 0.5, 4 * n)}


LSTM_ARGS = ("x", "cs_prev", "h_prev", "w", "wci", "wcf", "wco", "b")


def check_block_lstm(version: int, seq_len_max: int, rng: np.random.Generator, entries: int,
                     T: int = 4, B: int = 2, I: int = 3, n: int = 3) -> CheckResult:
    """``BlockLSTM``/``BlockLSTMGrad`` (version 1, ICFO, forget_bias 1) or ``BlockLSTMV2`` /
    ``BlockLSTMGradV2`` (IFCO) with peepholes, no clipping, ``loss = Σ cs ⊙ Gcs + Σ h ⊙ Gh``."""
    inputs = _lstm_inputs(rng, B, I, n, T)
    if version == 1:
        def run_forward(a):
            return fusedrnn.block_lstm(seq_len_max, *(a[k] for k in LSTM_ARGS), forget_bias=1.0,
                                       cell_clip=-1.0, use_peephole=True)
        backward = fusedrnn.block_lstm_grad
    else:
        def run_forward(a):
            return fusedrnn.block_lstm_v2(seq_len_max, *(a[k] for k in LSTM_ARGS), cell_clip=0.0,
                                          use_peephole=True)
        backward = fusedrnn.block_lstm_grad_v2
    forward = run_forward(inputs)
    g_cs, g_h = rng.standard_normal(forward.cs.shape), rng.standard_normal(forward.h.shape)

    def loss(a):
        out = run_forward(a)
        return _weighted_sum((out.cs, out.h), (g_cs, g_h))

    grads = backward(seq_len_max, *(inputs[k] for k in LSTM_ARGS), *forward, g_cs, g_h, use_peephole=True)
    analytic = dict(zip(LSTM_ARGS, (grads.x_grad, grads.cs_prev_grad, grads.h_prev_grad, grads.w_grad,
                                    grads.wci_grad, grads.wcf_grad, grads.wco_grad, grads.b_grad)))
    name = "BlockLSTM" if version == 1 else "BlockLSTMV2"
    config = f"peephole T={T} seq_len_max={seq_len_max} B={B} I={I} n={n}"
    return CheckResult(f"{name} grad", config, fd_max_error(loss, inputs, analytic, rng, entries), TOLERANCE)


def check_lstm_block_cell(rng: np.random.Generator, entries: int, B: int = 3, I: int = 2, n: int = 3) -> CheckResult:
    """``LSTMBlockCellGrad`` (peepholes, forget_bias 1, no clip); the x/h/w/b gradients are derived
    from its ``dicfo`` as TF's callers do: ``[dx|dh] = dicfo wᵀ``, ``dw = [x|h]ᵀ dicfo``,
    ``db = Σ_batch dicfo``."""
    inputs = _lstm_inputs(rng, B, I, n, None)

    def run_forward(a):
        return fusedrnn.lstm_block_cell(*(a[k] for k in LSTM_ARGS), forget_bias=1.0, cell_clip=-1.0,
                                        use_peephole=True)

    forward = run_forward(inputs)
    g_cs, g_h = rng.standard_normal((B, n)), rng.standard_normal((B, n))

    def loss(a):
        out = run_forward(a)
        return _weighted_sum((out.cs, out.h), (g_cs, g_h))

    grads = fusedrnn.lstm_block_cell_grad(*(inputs[k] for k in LSTM_ARGS), *forward[:6], g_cs, g_h,
                                          use_peephole=True)
    xh_grad = grads.dicfo @ inputs["w"].T
    xh = np.concatenate([inputs["x"], inputs["h_prev"]], axis=1)
    analytic = {"x": xh_grad[:, :I], "h_prev": xh_grad[:, I:], "cs_prev": grads.cs_prev_grad,
                "w": xh.T @ grads.dicfo, "b": grads.dicfo.sum(axis=0), "wci": grads.wci_grad,
                "wcf": grads.wcf_grad, "wco": grads.wco_grad}
    return CheckResult("LSTMBlockCell grad", f"peephole B={B} I={I} n={n}",
                       fd_max_error(loss, inputs, analytic, rng, entries), TOLERANCE)


GRU_ARGS = ("x", "h_prev", "w_ru", "w_c", "b_ru", "b_c")


def check_gru_block_cell(rng: np.random.Generator, entries: int, B: int = 3, I: int = 2, n: int = 3) -> CheckResult:
    """``GRUBlockCellGrad``; weight gradients derived as TF's callers do:
    ``dw_ru = [x|h]ᵀ d_r_bar_u_bar``, ``dw_c = [x|r⊙h]ᵀ d_c_bar``, biases the batch sums."""
    inputs = {"x": rng.standard_normal((B, I)), "h_prev": rng.standard_normal((B, n)),
              "w_ru": rng.uniform(-0.5, 0.5, (I + n, 2 * n)), "w_c": rng.uniform(-0.5, 0.5, (I + n, n)),
              "b_ru": rng.uniform(-0.5, 0.5, 2 * n), "b_c": rng.uniform(-0.5, 0.5, n)}

    def run_forward(a):
        return fusedrnn.gru_block_cell(*(a[k] for k in GRU_ARGS))

    forward = run_forward(inputs)
    g_h = rng.standard_normal((B, n))

    def loss(a):
        return float(np.vdot(run_forward(a).h, g_h))

    grads = fusedrnn.gru_block_cell_grad(*(inputs[k] for k in GRU_ARGS), forward.r, forward.u, forward.c, g_h)
    x, h = inputs["x"], inputs["h_prev"]
    analytic = {"x": grads.d_x, "h_prev": grads.d_h_prev,
                "w_ru": np.concatenate([x, h], axis=1).T @ grads.d_r_bar_u_bar,
                "w_c": np.concatenate([x, forward.r * h], axis=1).T @ grads.d_c_bar,
                "b_ru": grads.d_r_bar_u_bar.sum(axis=0), "b_c": grads.d_c_bar.sum(axis=0)}
    return CheckResult("GRUBlockCell grad", f"B={B} I={I} n={n}",
                       fd_max_error(loss, inputs, analytic, rng, entries), TOLERANCE)


def gradient_checks(quick: bool, seed: int = 0):
    """Yield the :class:`CheckResult` of every finite-difference check, one at a time."""
    entries = 0 if quick else 4
    rng = np.random.default_rng(seed)
    for case in cudnn_cases(quick):
        yield check_cudnn(case, rng, entries)
    for version in (1, 2):
        yield check_block_lstm(version, seq_len_max=4, rng=rng, entries=entries)
        if not quick:
            yield check_block_lstm(version, seq_len_max=2, rng=rng, entries=entries)
    yield check_lstm_block_cell(rng, entries)
    yield check_gru_block_cell(rng, entries)
