"""Valid calls of every public op, built deterministically from a config dict and a data seed.

A :class:`Call` holds the op name, its tensor inputs (positional order), its attributes, the
expected output shapes/dtypes and the config it came from.  :func:`build` makes one,
:func:`float64_path` makes the same call with every float input cast to float64 (for the
backprop ops the forward is re-run in float64 to get a matching ``reserve_space``), and
:func:`invoke` runs a call through the snake_case function or through ``fusedrnn.raw_ops``.

The sizes here are tiny (every dim <= 4 or 5): the fuzzer is after validation paths and edge
sizes (0 and 1), not after numerical accuracy, which the oracle tests cover.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

import fusedrnn
from fusedrnn import raw_ops

GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}
MODES = tuple(GATES)
INPUT_MODES = ("linear_input", "skip_input", "auto_select")
FLOATS = ("float16", "float32", "float64")


@dataclass(frozen=True)
class OpSpec:
    """What the fuzzer needs to know about one op's signature."""

    name: str  # snake_case function in fusedrnn
    raw: str  # name in fusedrnn.raw_ops
    family: str  # cudnn_fwd, cudnn_bwd, params_size, to_canonical, from_canonical, block_fwd, ...
    version: int  # 1, 2, 3 for the CudnnRNN family; 1/2 (ICFO/IFCO) for BlockLSTM; 0 otherwise
    inputs: tuple  # tensor inputs, positional order
    float_inputs: tuple  # the inputs that must be float arrays of the op's dtype T
    int_inputs: tuple = ()  # integer tensors (sequence_lengths, seq_len_max, sizes)
    attrs: dict = field(default_factory=dict)  # attribute name -> kind (see strategies)

    @property
    def function(self):
        return getattr(fusedrnn, self.name)


_CUDNN_ATTRS = {"rnn_mode": "choice", "input_mode": "choice", "direction": "choice",
                "dropout": "dropout", "seed": "int", "seed2": "int"}
_FWD = ("input", "input_h", "input_c", "params")
_BWD_TAIL = ("output", "output_h", "output_c", "output_backprop", "output_h_backprop",
             "output_c_backprop", "reserve_space")
_BWD_FLOATS = _FWD + _BWD_TAIL
_LSTM_W = ("w", "wci", "wcf", "wco", "b")
_GATE_OUTS = ("i", "cs", "f", "o", "ci", "co", "h")
_SIZES = ("num_layers", "num_units", "input_size")


def _spec_list() -> list:
    specs = [
        OpSpec("cudnn_rnn", "CudnnRNN", "cudnn_fwd", 1, _FWD, _FWD,
               attrs={**_CUDNN_ATTRS, "is_training": "bool"}),
        OpSpec("cudnn_rnn_v2", "CudnnRNNV2", "cudnn_fwd", 2, _FWD, _FWD,
               attrs={**_CUDNN_ATTRS, "is_training": "bool"}),
        OpSpec("cudnn_rnn_v3", "CudnnRNNV3", "cudnn_fwd", 3, _FWD + ("sequence_lengths",), _FWD,
               ("sequence_lengths",),
               attrs={**_CUDNN_ATTRS, "num_proj": "num_proj", "is_training": "bool",
                      "time_major": "bool"}),
        OpSpec("cudnn_rnn_backprop", "CudnnRNNBackprop", "cudnn_bwd", 1, _BWD_FLOATS, _BWD_FLOATS,
               attrs=dict(_CUDNN_ATTRS)),
        OpSpec("cudnn_rnn_backprop_v2", "CudnnRNNBackpropV2", "cudnn_bwd", 2,
               _BWD_FLOATS + ("host_reserved",), _BWD_FLOATS, attrs=dict(_CUDNN_ATTRS)),
        OpSpec("cudnn_rnn_backprop_v3", "CudnnRNNBackpropV3", "cudnn_bwd", 3,
               _FWD + ("sequence_lengths",) + _BWD_TAIL + ("host_reserved",), _BWD_FLOATS,
               ("sequence_lengths",),
               attrs={**_CUDNN_ATTRS, "num_proj": "num_proj", "time_major": "bool"}),
        OpSpec("cudnn_rnn_params_size", "CudnnRNNParamsSize", "params_size", 0, _SIZES, (), _SIZES,
               attrs={"T": "dtype", "S": "dtype", **_CUDNN_ATTRS, "num_proj": "num_proj"}),
        OpSpec("cudnn_rnn_params_to_canonical", "CudnnRNNParamsToCanonical", "to_canonical", 1,
               _SIZES + ("params",), ("params",), _SIZES,
               attrs={"num_params": "count", **_CUDNN_ATTRS}),
        OpSpec("cudnn_rnn_params_to_canonical_v2", "CudnnRNNParamsToCanonicalV2", "to_canonical", 2,
               _SIZES + ("params",), ("params",), _SIZES,
               attrs={"num_params_weights": "count", "num_params_biases": "count", **_CUDNN_ATTRS,
                      "num_proj": "num_proj"}),
        OpSpec("cudnn_rnn_canonical_to_params", "CudnnRNNCanonicalToParams", "from_canonical", 1,
               _SIZES + ("weights", "biases"), ("weights", "biases"), _SIZES,
               attrs=dict(_CUDNN_ATTRS)),
        OpSpec("cudnn_rnn_canonical_to_params_v2", "CudnnRNNCanonicalToParamsV2", "from_canonical", 2,
               _SIZES + ("weights", "biases"), ("weights", "biases"), _SIZES,
               attrs={**_CUDNN_ATTRS, "num_proj": "num_proj"}),
        OpSpec("block_lstm", "BlockLSTM", "block_fwd", 1,
               ("seq_len_max", "x", "cs_prev", "h_prev") + _LSTM_W, ("x", "cs_prev", "h_prev") + _LSTM_W,
               ("seq_len_max",),
               attrs={"forget_bias": "float", "cell_clip": "float", "use_peephole": "bool"}),
        OpSpec("block_lstm_v2", "BlockLSTMV2", "block_fwd", 2,
               ("seq_len_max", "x", "cs_prev", "h_prev") + _LSTM_W, ("x", "cs_prev", "h_prev") + _LSTM_W,
               ("seq_len_max",), attrs={"cell_clip": "float", "use_peephole": "bool"}),
        OpSpec("block_lstm_grad", "BlockLSTMGrad", "block_bwd", 1,
               ("seq_len_max", "x", "cs_prev", "h_prev") + _LSTM_W + _GATE_OUTS + ("cs_grad", "h_grad"),
               ("x", "cs_prev", "h_prev") + _LSTM_W + _GATE_OUTS + ("cs_grad", "h_grad"),
               ("seq_len_max",), attrs={"use_peephole": "bool"}),
        OpSpec("block_lstm_grad_v2", "BlockLSTMGradV2", "block_bwd", 2,
               ("seq_len_max", "x", "cs_prev", "h_prev") + _LSTM_W + _GATE_OUTS + ("cs_grad", "h_grad"),
               ("x", "cs_prev", "h_prev") + _LSTM_W + _GATE_OUTS + ("cs_grad", "h_grad"),
               ("seq_len_max",), attrs={"use_peephole": "bool"}),
        OpSpec("lstm_block_cell", "LSTMBlockCell", "cell_fwd", 0, ("x", "cs_prev", "h_prev") + _LSTM_W,
               ("x", "cs_prev", "h_prev") + _LSTM_W,
               attrs={"forget_bias": "float", "cell_clip": "float", "use_peephole": "bool"}),
        OpSpec("lstm_block_cell_grad", "LSTMBlockCellGrad", "cell_bwd", 0,
               ("x", "cs_prev", "h_prev") + _LSTM_W + _GATE_OUTS[:-1] + ("cs_grad", "h_grad"),
               ("x", "cs_prev", "h_prev") + _LSTM_W + _GATE_OUTS[:-1] + ("cs_grad", "h_grad"),
               attrs={"use_peephole": "bool"}),
        OpSpec("gru_block_cell", "GRUBlockCell", "gru_fwd", 0, ("x", "h_prev", "w_ru", "w_c", "b_ru", "b_c"),
               ("x", "h_prev", "w_ru", "w_c", "b_ru", "b_c")),
        OpSpec("gru_block_cell_grad", "GRUBlockCellGrad", "gru_bwd", 0,
               ("x", "h_prev", "w_ru", "w_c", "b_ru", "b_c", "r", "u", "c", "d_h"),
               ("x", "h_prev", "w_ru", "w_c", "b_ru", "b_c", "r", "u", "c", "d_h")),
    ]
    return specs


SPECS = {spec.name: spec for spec in _spec_list()}
CUDNN_OPS = [name for name, spec in SPECS.items() if spec.family.startswith("cudnn")]
PARAM_OPS = [name for name, spec in SPECS.items() if spec.family in ("params_size", "to_canonical",
                                                                      "from_canonical")]
BLOCK_OPS = [name for name, spec in SPECS.items() if name not in CUDNN_OPS + PARAM_OPS]


@dataclass
class Call:
    """One call of an op: tensor inputs (positional order), attributes, expectations."""

    op: str
    inputs: dict
    attrs: dict
    dtype: np.dtype | None  # the float dtype T of the call (None for ParamsSize)
    cfg: dict
    expect: dict | None = None  # output name -> (shape, dtype); None when unknown

    @property
    def spec(self) -> OpSpec:
        return SPECS[self.op]

    def replace(self, **changes) -> "Call":
        return dataclasses.replace(self, **changes)


def invoke(call: Call, surface: str = "snake"):
    """Run the call through ``fusedrnn.<snake>`` (positional inputs) or ``raw_ops.<Raw>`` (keywords)."""
    spec = call.spec
    if surface == "raw":
        return getattr(raw_ops, spec.raw)(**call.inputs, **call.attrs)
    return spec.function(*call.inputs.values(), **call.attrs)


def result_arrays(result) -> dict:
    """Flatten an op result into name -> value (NamedTuple fields, ``weights[k]`` for lists)."""
    if isinstance(result, np.ndarray):
        return {"result": result}
    out = {}
    for name, value in zip(result._fields, result):
        if isinstance(value, list):
            out.update({f"{name}[{k}]": v for k, v in enumerate(value)})
        else:
            out[name] = value
    return out


# --------------------------------------------------------------------------------------
# CudnnRNN family


def cudnn_params_size(mode, L, D, I, H, P=0, input_mode="linear_input") -> int:
    """Spec §6.4, written out independently of fusedrnn.layout."""
    G, Hout = GATES[mode], (P or H)
    skip = input_mode == "skip_input" or (input_mode == "auto_select" and I == H)
    total = 0
    for layer in range(L):
        in_cols = 0 if (layer == 0 and skip) else (I if layer == 0 else D * Hout)
        total += D * (G * H * in_cols + G * H * Hout + P * H + 2 * G * H)
    return total


def _direction(cfg) -> str:
    return "bidirectional" if cfg["D"] == 2 else "unidirectional"


def _cudnn_attrs(spec: OpSpec, cfg: dict, forward: bool) -> dict:
    attrs = dict(rnn_mode=cfg["mode"], input_mode=cfg["input_mode"], direction=_direction(cfg),
                 dropout=cfg["dropout"], seed=cfg["seed"], seed2=cfg["seed2"])
    if spec.version == 3:
        attrs["num_proj"] = cfg["P"]
        if forward:
            attrs["is_training"] = cfg["is_training"]
        attrs["time_major"] = cfg["time_major"]
    elif forward:
        attrs["is_training"] = cfg["is_training"]
    return attrs


def _cudnn_shapes(cfg) -> dict:
    T, B, I, H, P, L, D = (cfg[k] for k in "TBIHPLD")
    Hout, LD = (P or H), L * D
    tm = cfg["time_major"]
    shapes = dict(input=(T, B, I) if tm else (B, T, I),
                  state=(LD, B, Hout) if tm else (B, LD, Hout),
                  cell=(LD, B, H) if tm else (B, LD, H),
                  output=(T, B, D * Hout) if tm else (B, T, D * Hout))
    return shapes


def _cudnn_forward_inputs(spec: OpSpec, cfg: dict, dtype, rng) -> dict:
    shapes = _cudnn_shapes(cfg)
    n = cudnn_params_size(cfg["mode"], cfg["L"], cfg["D"], cfg["I"], cfg["H"], cfg["P"], cfg["input_mode"])
    x = rng.standard_normal(shapes["input"]).astype(dtype)
    h = (0.5 * rng.standard_normal(shapes["state"])).astype(dtype)
    if cfg["mode"] == "lstm":
        c = (0.5 * rng.standard_normal(shapes["cell"])).astype(dtype)
    else:  # ignored by the op (spec §15.7): any shape of dtype T
        c = {"state": np.zeros(shapes["state"], dtype), "scalar": np.zeros((), dtype),
             "empty": np.zeros((0,), dtype)}[cfg.get("c_shape", "scalar")]
    params = rng.uniform(-0.5, 0.5, n).astype(dtype)
    inputs = dict(input=x, input_h=h, input_c=c, params=params)
    if spec.version == 3:
        lengths = cfg["lengths"] if cfg["lengths"] is not None else (cfg["T"],) * cfg["B"]
        inputs["sequence_lengths"] = np.array(lengths, dtype=cfg.get("len_dtype", "int32")).reshape(-1)
    return inputs


def _cudnn_forward_expect(spec: OpSpec, cfg: dict, dtype, training: bool) -> dict:
    shapes = _cudnn_shapes(cfg)
    dt = np.dtype(dtype)
    expect = dict(output=(shapes["output"], dt), output_h=(shapes["state"], dt),
                  output_c=((shapes["cell"] if cfg["mode"] == "lstm" else ()), dt),
                  reserve_space=(None if training else (), dt))  # None: 1-D, any length
    if spec.version == 2:
        expect["host_reserved"] = ((2,) if training else (), np.dtype(np.int8))
    elif spec.version == 3:
        expect["host_reserved"] = ((), np.dtype(np.int8))
    return expect


_FORWARD_OF = {1: "cudnn_rnn", 2: "cudnn_rnn_v2", 3: "cudnn_rnn_v3"}


def _cudnn_backward_inputs(spec: OpSpec, cfg: dict, fwd_inputs: dict, rng, dtype) -> dict:
    """Run the matching training forward, then assemble the backprop inputs in order."""
    fwd_spec = SPECS[_FORWARD_OF[spec.version]]
    fwd_attrs = _cudnn_attrs(fwd_spec, {**cfg, "is_training": True}, True)
    fwd = fwd_spec.function(*fwd_inputs.values(), **fwd_attrs)
    grads = dict(output_backprop=rng.standard_normal(fwd.output.shape).astype(dtype),
                 output_h_backprop=rng.standard_normal(fwd.output_h.shape).astype(dtype),
                 output_c_backprop=rng.standard_normal(fwd.output_c.shape).astype(dtype))
    return _assemble_backward(spec, fwd_inputs, fwd, grads)


def _assemble_backward(spec: OpSpec, fwd_inputs: dict, fwd, grads: dict) -> dict:
    values = dict(fwd_inputs, output=fwd.output, output_h=fwd.output_h, output_c=fwd.output_c,
                  reserve_space=fwd.reserve_space, **grads)
    if spec.version >= 2:
        values["host_reserved"] = fwd.host_reserved
    return {name: values[name] for name in spec.inputs}


def _build_cudnn(spec: OpSpec, cfg: dict, dtype, seed: int) -> Call:
    rng = np.random.default_rng(seed)
    fwd_inputs = _cudnn_forward_inputs(spec, cfg, dtype, rng)
    dt = np.dtype(dtype)
    if spec.family == "cudnn_fwd":
        return Call(spec.name, fwd_inputs, _cudnn_attrs(spec, cfg, True), dt, cfg,
                    _cudnn_forward_expect(spec, cfg, dtype, cfg["is_training"]))
    inputs = _cudnn_backward_inputs(spec, cfg, fwd_inputs, rng, dtype)
    expect = dict(input_backprop=(fwd_inputs["input"].shape, dt),
                  input_h_backprop=(fwd_inputs["input_h"].shape, dt),
                  input_c_backprop=(fwd_inputs["input_c"].shape if cfg["mode"] == "lstm" else (), dt),
                  params_backprop=(fwd_inputs["params"].shape, dt))
    return Call(spec.name, inputs, _cudnn_attrs(spec, cfg, False), dt, cfg, expect)


def _cudnn_float64(call: Call) -> Call:
    spec = call.spec
    cast = {k: _to64(v) if k in spec.float_inputs else v for k, v in call.inputs.items()}
    if spec.family == "cudnn_bwd":
        fwd_spec = SPECS[_FORWARD_OF[spec.version]]
        fwd_inputs = {k: cast[k] for k in fwd_spec.inputs}
        fwd_attrs = {k: v for k, v in call.attrs.items() if k in fwd_spec.attrs}
        fwd = fwd_spec.function(*fwd_inputs.values(), **fwd_attrs, is_training=True)
        grads = {k: cast[k] for k in ("output_backprop", "output_h_backprop", "output_c_backprop")}
        cast = _assemble_backward(spec, fwd_inputs, fwd, grads)
    return call.replace(inputs=cast, dtype=np.dtype(np.float64))


# --------------------------------------------------------------------------------------
# Parameter ops


def _param_attrs(spec: OpSpec, cfg: dict) -> dict:
    attrs = dict(rnn_mode=cfg["mode"], input_mode=cfg["input_mode"], direction=_direction(cfg),
                 dropout=cfg["dropout"], seed=cfg["seed"], seed2=cfg["seed2"])
    if spec.version == 2 or spec.family == "params_size":
        attrs["num_proj"] = cfg["P"]
    return attrs


def canonical_shapes(cfg: dict) -> tuple[list, list]:
    """Canonical weight and bias shapes (spec §6.2, §15.3), independent of fusedrnn.layout."""
    mode, L, D, I, H, P = (cfg[k] for k in ("mode", "L", "D", "I", "H", "P"))
    G, Hout = GATES[mode], (P or H)
    skip = cfg["input_mode"] == "skip_input" or (cfg["input_mode"] == "auto_select" and I == H)
    weights, biases = [], []
    for layer in range(L):
        in_cols = 0 if (layer == 0 and skip) else (I if layer == 0 else D * Hout)
        for _ in range(D):
            weights += [(H, in_cols)] * G + [(H, Hout)] * G + ([(P, H)] if P else [])
            biases += [(H,)] * (2 * G)
    return weights, biases


def _build_params(spec: OpSpec, cfg: dict, dtype, seed: int) -> Call:
    rng = np.random.default_rng(seed)
    sizes = dict(num_layers=cfg["L"], num_units=cfg["H"], input_size=cfg["I"])
    sizes = {k: _int_form(v, cfg.get("int_form", "int")) for k, v in sizes.items()}
    attrs = _param_attrs(spec, cfg)
    w_shapes, b_shapes = canonical_shapes(cfg)
    n = cudnn_params_size(cfg["mode"], cfg["L"], cfg["D"], cfg["I"], cfg["H"], cfg["P"], cfg["input_mode"])
    if spec.family == "params_size":
        S = np.dtype(cfg.get("S", "int32"))
        attrs = dict(T=np.dtype(dtype), S=S, **attrs)
        return Call(spec.name, sizes, attrs, None, cfg, {"result": ((1,), S)})
    dt = np.dtype(dtype)
    if spec.family == "to_canonical":
        if spec.version == 1:
            attrs = dict(num_params=len(w_shapes), **attrs)
        else:
            attrs = dict(num_params_weights=len(w_shapes), num_params_biases=len(b_shapes), **attrs)
        params = rng.uniform(-1, 1, n).astype(dt)
        expect = {f"weights[{k}]": (s, dt) for k, s in enumerate(w_shapes)}
        expect.update({f"biases[{k}]": (s, dt) for k, s in enumerate(b_shapes)})
        return Call(spec.name, dict(sizes, params=params), attrs, dt, cfg, expect)
    weights = [rng.uniform(-1, 1, s).astype(dt) for s in w_shapes]
    biases = [rng.uniform(-1, 1, s).astype(dt) for s in b_shapes]
    return Call(spec.name, dict(sizes, weights=weights, biases=biases), attrs, dt, cfg,
                {"result": ((n,), dt)})


def _int_form(value: int, form: str):
    """The same integer as a Python int, a NumPy scalar or a rank-0 array (all valid)."""
    return {"int": value, "np64": np.int64(value), "arr32": np.array(value, np.int32),
            "arr64": np.array(value, np.int64)}[form]


def _params_float64(call: Call) -> Call:
    inputs = dict(call.inputs)
    if "params" in inputs:
        inputs["params"] = _to64(inputs["params"])
    for name in ("weights", "biases"):
        if name in inputs and isinstance(inputs[name], (list, tuple)):
            inputs[name] = [_to64(a) for a in inputs[name]]
    return call.replace(inputs=inputs, dtype=np.dtype(np.float64))


# --------------------------------------------------------------------------------------
# Block ops


def _lstm_weights(rng, I, n, dt) -> dict:
    return dict(w=rng.uniform(-0.5, 0.5, (I + n, 4 * n)).astype(dt),
                wci=rng.uniform(-0.5, 0.5, n).astype(dt), wcf=rng.uniform(-0.5, 0.5, n).astype(dt),
                wco=rng.uniform(-0.5, 0.5, n).astype(dt), b=rng.uniform(-0.5, 0.5, 4 * n).astype(dt))


def _block_attrs(spec: OpSpec, cfg: dict, forward: bool) -> dict:
    if not forward:
        return dict(use_peephole=cfg["use_peephole"])
    attrs = dict(cell_clip=cfg["cell_clip"], use_peephole=cfg["use_peephole"])
    if "forget_bias" in spec.attrs:
        attrs = dict(forget_bias=cfg["forget_bias"], **attrs)
    return attrs


def _build_block(spec: OpSpec, cfg: dict, dtype, seed: int) -> Call:
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    T, B, I, n = (cfg.get(k, 0) for k in "TBIn")
    if spec.family in ("block_fwd", "block_bwd"):
        slm = _int_form(cfg["slm"], cfg.get("int_form", "int"))
        inputs = dict(seq_len_max=slm, x=rng.standard_normal((T, B, I)).astype(dt),
                      cs_prev=(0.5 * rng.standard_normal((B, n))).astype(dt),
                      h_prev=(0.5 * rng.standard_normal((B, n))).astype(dt), **_lstm_weights(rng, I, n, dt))
        fwd_name = "block_lstm" if spec.version == 1 else "block_lstm_v2"
        if spec.family == "block_fwd":
            return Call(spec.name, inputs, _block_attrs(spec, cfg, True), dt, cfg,
                        {k: ((T, B, n), dt) for k in _GATE_OUTS})
        fwd = SPECS[fwd_name].function(*inputs.values(), **_block_attrs(SPECS[fwd_name], cfg, True))
        inputs.update(zip(_GATE_OUTS, fwd))
        inputs.update(cs_grad=rng.standard_normal((T, B, n)).astype(dt),
                      h_grad=rng.standard_normal((T, B, n)).astype(dt))
        expect = dict(x_grad=((T, B, I), dt), cs_prev_grad=((B, n), dt), h_prev_grad=((B, n), dt),
                      w_grad=((I + n, 4 * n), dt), wci_grad=((n,), dt), wcf_grad=((n,), dt),
                      wco_grad=((n,), dt), b_grad=((4 * n,), dt))
        return Call(spec.name, inputs, _block_attrs(spec, cfg, False), dt, cfg, expect)
    if spec.family in ("cell_fwd", "cell_bwd"):
        inputs = dict(x=rng.standard_normal((B, I)).astype(dt),
                      cs_prev=(0.5 * rng.standard_normal((B, n))).astype(dt),
                      h_prev=(0.5 * rng.standard_normal((B, n))).astype(dt), **_lstm_weights(rng, I, n, dt))
        if spec.family == "cell_fwd":
            return Call(spec.name, inputs, _block_attrs(spec, cfg, True), dt, cfg,
                        {k: ((B, n), dt) for k in _GATE_OUTS})
        fwd = fusedrnn.lstm_block_cell(*inputs.values(), **_block_attrs(SPECS["lstm_block_cell"], cfg, True))
        inputs.update(zip(_GATE_OUTS[:-1], fwd[:-1]))
        inputs.update(cs_grad=rng.standard_normal((B, n)).astype(dt),
                      h_grad=rng.standard_normal((B, n)).astype(dt))
        expect = dict(cs_prev_grad=((B, n), dt), dicfo=((B, 4 * n), dt), wci_grad=((n,), dt),
                      wcf_grad=((n,), dt), wco_grad=((n,), dt))
        return Call(spec.name, inputs, _block_attrs(spec, cfg, False), dt, cfg, expect)
    inputs = dict(x=rng.standard_normal((B, I)).astype(dt), h_prev=(0.5 * rng.standard_normal((B, n))).astype(dt),
                  w_ru=rng.uniform(-0.5, 0.5, (I + n, 2 * n)).astype(dt),
                  w_c=rng.uniform(-0.5, 0.5, (I + n, n)).astype(dt),
                  b_ru=rng.uniform(-0.5, 0.5, 2 * n).astype(dt), b_c=rng.uniform(-0.5, 0.5, n).astype(dt))
    if spec.family == "gru_fwd":
        return Call(spec.name, inputs, {}, dt, cfg, {k: ((B, n), dt) for k in ("r", "u", "c", "h")})
    fwd = fusedrnn.gru_block_cell(*inputs.values())
    inputs.update(r=fwd.r, u=fwd.u, c=fwd.c, d_h=rng.standard_normal((B, n)).astype(dt))
    expect = dict(d_x=((B, I), dt), d_h_prev=((B, n), dt), d_c_bar=((B, n), dt),
                  d_r_bar_u_bar=((B, 2 * n), dt))
    return Call(spec.name, inputs, {}, dt, cfg, expect)


def _block_float64(call: Call) -> Call:
    spec = call.spec
    return call.replace(inputs={k: _to64(v) if k in spec.float_inputs else v for k, v in call.inputs.items()},
                        dtype=np.dtype(np.float64))


# --------------------------------------------------------------------------------------


def _to64(value):
    return np.asarray(value).astype(np.float64)


def build(op: str, dtype: str, cfg: dict, seed: int) -> Call:
    """A valid call of ``op`` (float dtype ``dtype``) from the config and data seed."""
    spec = SPECS[op]
    if spec.family.startswith("cudnn"):
        return _build_cudnn(spec, cfg, dtype, seed)
    if spec.name in PARAM_OPS:
        return _build_params(spec, cfg, dtype, seed)
    return _build_block(spec, cfg, dtype, seed)


def float64_path(call: Call) -> Call:
    """The same call with every float input cast to float64 (backprop: forward re-run in float64)."""
    spec = call.spec
    if spec.family.startswith("cudnn"):
        return _cudnn_float64(call)
    if spec.name in PARAM_OPS:
        return _params_float64(call)
    return _block_float64(call)


def default_config(op: str, **overrides) -> dict:
    """A small valid config of ``op`` (used by the thread/determinism/NaN tests and examples)."""
    spec = SPECS[op]
    if spec.name in CUDNN_OPS or spec.name in PARAM_OPS:
        cfg = dict(mode="lstm", L=2, D=2, I=3, H=4, P=0, T=4, B=3, input_mode="linear_input",
                   time_major=True, lengths=None, len_dtype="int32", is_training=True, dropout=0.0,
                   seed=0, seed2=0, c_shape="scalar")
    else:
        cfg = dict(T=4, B=3, I=3, n=4, slm=4, forget_bias=1.0, cell_clip=3.0, use_peephole=True)
    cfg.update(overrides)
    return cfg
