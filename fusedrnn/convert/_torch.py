"""PyTorch ``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN`` <-> :class:`CudnnWeights` (spec §10.1).

PyTorch uses cuDNN's mathematics and gate orders exactly — LSTM ``i, f, g(=c), o``, GRU
``r, z(=u), n(=h')`` with ``n = tanh(W_n x + b_in + r * (R_n h + b_hn))`` — and the same two biases,
so both directions are bit-exact.  For layer ``l`` and direction suffix ``s`` (``""`` forward,
``"_reverse"`` backward)::

    weight_ih_l{l}{s} [G*H, in_l]  = vstack(W_0 .. W_{G-1})
    weight_hh_l{l}{s} [G*H, Hout]  = vstack(R_0 .. R_{G-1})
    bias_ih_l{l}{s}   [G*H]        = concat(bW_0 .. bW_{G-1})
    bias_hh_l{l}{s}   [G*H]        = concat(bR_0 .. bR_{G-1})
    weight_hr_l{l}{s} [P, H]       = W_P   (nn.LSTM(proj_size=P))

``bias=False`` modules convert with zero biases.  PyTorch has no ``skip_input``.
"""

from __future__ import annotations

import re
from collections import OrderedDict

import numpy as np

from ._optional import require, to_numpy
from ._weights import CudnnWeights, PseudoLayer, require_no_loss

_GATES = {4: "lstm", 3: "gru"}
_KEY = re.compile(r"^(weight_ih|weight_hh|bias_ih|bias_hh|weight_hr)_l(\d+)(_reverse)?$")


def _module_config(module) -> tuple[dict, dict]:
    kind = type(module).__name__
    mode = getattr(module, "mode", None)  # "LSTM" | "GRU" | "RNN_TANH" | "RNN_RELU"
    modes = {"LSTM": "lstm", "GRU": "gru", "RNN_TANH": "rnn_tanh", "RNN_RELU": "rnn_relu"}
    if mode not in modes or not hasattr(module, "state_dict"):
        raise TypeError(f"from_torch expects a torch.nn.LSTM/GRU/RNN module or its state_dict, got {kind}")
    config = dict(rnn_mode=modes[mode], num_layers=module.num_layers, num_units=module.hidden_size,
                  input_size=module.input_size,
                  direction="bidirectional" if module.bidirectional else "unidirectional",
                  num_proj=getattr(module, "proj_size", 0))
    return config, module.state_dict()


def _infer_config(state: dict, rnn_mode) -> dict:
    keys = {}
    for key in state:
        match = _KEY.match(key)
        if match is None:
            raise ValueError(f"from_torch: unexpected state_dict key {key!r} (expected weight_ih_l0, "
                             "weight_hh_l0, bias_ih_l0, bias_hh_l0, weight_hr_l0[_reverse] ...)")
        keys[key] = match
    if "weight_ih_l0" not in state or "weight_hh_l0" not in state:
        raise ValueError(f"from_torch: state_dict needs weight_ih_l0 and weight_hh_l0, got keys {sorted(state)}")
    num_layers = 1 + max(int(m.group(2)) for m in keys.values())
    bidirectional = any(m.group(3) for m in keys.values())
    w_hh = state["weight_hh_l0"]
    if "weight_hr_l0" in state:
        num_proj, num_units = state["weight_hr_l0"].shape
    else:
        num_proj, num_units = 0, w_hh.shape[1]
    gates = w_hh.shape[0] // num_units
    if rnn_mode is None:
        if gates not in _GATES:
            raise ValueError("from_torch: a state_dict of nn.RNN (1 gate) does not say its nonlinearity: "
                             "pass rnn_mode='rnn_tanh' or rnn_mode='rnn_relu'")
        rnn_mode = _GATES[gates]
    return dict(rnn_mode=rnn_mode, num_layers=num_layers, num_units=num_units,
                input_size=state["weight_ih_l0"].shape[1],
                direction="bidirectional" if bidirectional else "unidirectional", num_proj=num_proj)


def from_torch(module_or_state_dict, *, rnn_mode=None) -> CudnnWeights:
    """A :class:`CudnnWeights` from a ``torch.nn.LSTM``/``GRU``/``RNN`` or its ``state_dict``.

    Gate order and biases are PyTorch's = cuDNN's (module doc), so the params are bit-exact.
    For a state_dict the configuration is read off the shapes; ``rnn_mode`` is needed only for
    ``nn.RNN`` (``'rnn_tanh'`` or ``'rnn_relu'``).  Tensors may be torch tensors or arrays (then
    PyTorch need not be installed).  The dtype is kept.
    """
    if isinstance(module_or_state_dict, dict):
        state = {key: to_numpy(value, key) for key, value in module_or_state_dict.items()}
        config = _infer_config(state, rnn_mode)
    else:
        config, torch_state = _module_config(module_or_state_dict)
        if rnn_mode is not None and rnn_mode != config["rnn_mode"]:
            raise ValueError(f"from_torch: rnn_mode={rnn_mode!r} contradicts the module ({config['rnn_mode']})")
        state = {key: to_numpy(value, key) for key, value in torch_state.items()}
    D = 2 if config["direction"] == "bidirectional" else 1
    G = {"lstm": 4, "gru": 3}.get(config["rnn_mode"], 1)
    H = config["num_units"]
    dtype = state["weight_ih_l0"].dtype
    layers = []
    for l in range(config["num_layers"]):
        for d in range(D):
            s = f"_l{l}" + ("_reverse" if d else "")
            missing = [k + s for k in ("weight_ih", "weight_hh") if k + s not in state]
            if missing:
                raise ValueError(f"from_torch: state_dict lacks {missing}")
            zeros = np.zeros(G * H, dtype)
            b_ih, b_hh = state.get("bias_ih" + s, zeros), state.get("bias_hh" + s, zeros)
            layers.append(PseudoLayer(np.split(state["weight_ih" + s], G), np.split(state["weight_hh" + s], G),
                                      np.split(b_ih, G), np.split(b_hh, G), state.get("weight_hr" + s)))
    return CudnnWeights.from_pseudo_layers(layers, **config)


def to_torch(w: CudnnWeights, *, module: bool = False):
    """``w`` as a PyTorch ``state_dict`` (an OrderedDict of tensors, names in the module doc) or, with
    ``module=True``, as a ``torch.nn.LSTM``/``GRU``/``RNN`` holding it (time-major,
    ``batch_first=False``, ``dropout=0``).  Bit-exact; ``skip_input`` raises ValueError (PyTorch has
    none: use ``w.with_linear_input()``)."""
    require_no_loss(w, "PyTorch", projection=False)
    torch = require("torch", "fusedrnn.convert.to_torch")
    state = OrderedDict()
    D = w.num_dirs
    for p, layer in enumerate(w.pseudo_layers()):
        s = f"_l{p // D}" + ("_reverse" if p % D else "")
        state["weight_ih" + s] = torch.from_numpy(np.vstack(layer.W))
        state["weight_hh" + s] = torch.from_numpy(np.vstack(layer.R))
        state["bias_ih" + s] = torch.from_numpy(np.concatenate(layer.bW))
        state["bias_hh" + s] = torch.from_numpy(np.concatenate(layer.bR))
        if layer.proj is not None:
            state["weight_hr" + s] = torch.from_numpy(np.ascontiguousarray(layer.proj))
    if not module:
        return state
    kwargs = dict(input_size=w.input_size, hidden_size=w.num_units, num_layers=w.num_layers,
                  bidirectional=w.num_dirs == 2, dtype={np.dtype("float16"): torch.float16,
                  np.dtype("float32"): torch.float32, np.dtype("float64"): torch.float64}[w.dtype])
    if w.rnn_mode == "lstm":
        net = torch.nn.LSTM(proj_size=w.num_proj, **kwargs)
    elif w.rnn_mode == "gru":
        net = torch.nn.GRU(**kwargs)
    else:
        net = torch.nn.RNN(nonlinearity=w.rnn_mode[4:], **kwargs)
    net.load_state_dict(state)
    return net
