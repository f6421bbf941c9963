"""PyTorch adapter: a differentiable ``cudnn_rnn`` and drop-in ``nn.LSTM/GRU/RNN`` modules.

Imported lazily (``import fusedrnn`` never imports torch); needs ``pip install 'fusedrnn[torch]'``.

Shape legend: T time steps, B batch, I input size, H hidden size (cell size), P projection
size (LSTM ``proj_size``), Hout = P if P > 0 else H, L layers, D directions (1 or 2).

* :func:`cudnn_rnn` is TensorFlow's ``CudnnRNNV3`` as a ``torch.autograd.Function``: forward
  :func:`fusedrnn.cudnn_rnn_v3`, backward :func:`fusedrnn.cudnn_rnn_backprop_v3` with the
  forward's ``reserve_space`` kept in the autograd context.  CPU tensors only, float32 or
  float64; tensors are handed to NumPy without a copy (``tensor.detach().numpy()``) and the
  results come back without one (``torch.from_numpy``).
* :class:`CudnnLSTM`, :class:`CudnnGRU`, :class:`CudnnRNNTanh`, :class:`CudnnRNNRelu` take the
  constructor arguments and ``forward(input, hx=None)`` of ``torch.nn.LSTM`` / ``GRU`` / ``RNN``
  and hold one flat parameter ``params`` in cuDNN's opaque layout (:mod:`fusedrnn.layout`), the
  buffer a TensorFlow ``CudnnLSTM`` checkpoint stores.

The mathematics is PyTorch's (spec §10.1): the same gate orders (LSTM i, f, g, o; GRU r, z, n
with n = tanh(W_n x + b_in + r * (W_hn h + b_hn))) and the same two biases per gate, so PyTorch's
``weight_ih_l{k}{_reverse}`` is the row-stack of cuDNN's input matrices of pseudo-layer
``p = k*D + d``, ``weight_hh`` of its recurrent matrices, ``bias_ih`` / ``bias_hh`` the
concatenated input / recurrent biases and ``weight_hr`` the projection matrix.
"""

from __future__ import annotations

import math

try:
    import torch
    from torch import nn
    from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence
except ImportError as exc:  # pragma: no cover - exercised by a subprocess test
    raise ImportError("fusedrnn.torch needs PyTorch: pip install 'fusedrnn[torch]'") from exc

import numpy as np

from . import cudnn as _cudnn
from .layout import RNNConfig

__all__ = ["cudnn_rnn", "CudnnLSTM", "CudnnGRU", "CudnnRNNTanh", "CudnnRNNRelu"]

_DTYPES = (torch.float32, torch.float64)


# ----------------------------------------------------------------------------------------------
# The differentiable op


def _as_numpy(tensor, name: str) -> np.ndarray:
    """A CPU float32/float64 tensor as a NumPy array sharing its memory (no copy)."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
    if tensor.device.type != "cpu":
        raise ValueError(f"{name} must be a CPU tensor (fusedrnn runs on the CPU), got device "
                         f"{tensor.device}; move it with {name}.cpu()")
    if tensor.dtype not in _DTYPES:
        raise TypeError(f"{name} must be float32 or float64, got {tensor.dtype}")
    return tensor.detach().resolve_conj().resolve_neg().numpy()


def _lengths_numpy(sequence_lengths) -> np.ndarray | None:
    if sequence_lengths is None:
        return None
    if isinstance(sequence_lengths, torch.Tensor):
        if sequence_lengths.device.type != "cpu":
            raise ValueError(f"sequence_lengths must be a CPU tensor, got device {sequence_lengths.device}")
        return sequence_lengths.detach().numpy()
    return np.asarray(sequence_lengths)


class _CudnnRNNFunction(torch.autograd.Function):
    """CudnnRNNV3 forward / CudnnRNNBackpropV3 backward; ``attrs`` is a dict of the op's attributes."""

    @staticmethod
    def forward(ctx, input, input_h, input_c, params, sequence_lengths, attrs, is_training, grad_enabled):
        tensors = {"input": input, "input_h": input_h, "params": params}
        if input_c is not None:
            tensors["input_c"] = input_c
        arrays = {name: _as_numpy(t, name) for name, t in tensors.items()}
        dtypes = {t.dtype for t in tensors.values()}
        if len(dtypes) > 1:
            raise TypeError("input, input_h, input_c and params must share one dtype, got "
                            + ", ".join(f"{n}={t.dtype}" for n, t in tensors.items()))
        c = arrays.get("input_c", np.zeros((), arrays["input"].dtype))
        lengths = _lengths_numpy(sequence_lengths)
        if lengths is None:  # every sequence has length T (the op reports an input of the wrong rank)
            dims = tuple(input.shape[:2]) if input.dim() == 3 else (0, 0)
            T, B = dims if attrs["time_major"] else dims[::-1]
            lengths = np.full(B, T, dtype=np.int64)
        # (needs_input_grad only reflects requires_grad: under torch.no_grad it is still True)
        needs_grad = grad_enabled and any(ctx.needs_input_grad[:4])
        # Gradients need a training forward (its reserve_space).  In inference mode there is
        # no dropout, so the training forward runs with dropout=0: the same values.  Without
        # dropout, training and inference forwards are bit-identical; the inference one keeps
        # no reserve_space.
        train = needs_grad or (is_training and attrs["dropout"] > 0)
        run_attrs = dict(attrs, dropout=attrs["dropout"] if is_training else 0.0)
        result = _cudnn.cudnn_rnn_v3(arrays["input"], arrays["input_h"], c, arrays["params"], lengths,
                                     is_training=train, **run_attrs)
        output, output_h, output_c = (torch.from_numpy(a) for a in result[:3])
        if needs_grad:
            # the inputs through autograd (its version counters catch in-place changes before
            # the backward); the forward's results as NumPy arrays (the backprop only checks the
            # shapes of output, output_h, output_c; reserve_space holds what it reads)
            ctx.save_for_backward(input, input_h, input_c, params)
            ctx.arrays = dict(output=result.output, output_h=result.output_h, output_c=result.output_c,
                              reserve_space=result.reserve_space, host_reserved=result.host_reserved,
                              lengths=lengths)
            ctx.attrs = run_attrs
        if attrs["rnn_mode"] != "lstm":
            ctx.mark_non_differentiable(output_c)
        return output, output_h, output_c

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_output, grad_output_h, grad_output_c):
        a = ctx.arrays
        input, input_h, input_c, params = ctx.saved_tensors
        is_lstm = ctx.attrs["rnn_mode"] == "lstm"
        x = _as_numpy(input, "input")
        c = _as_numpy(input_c, "input_c") if input_c is not None else np.zeros((), x.dtype)
        g_c = _as_numpy(grad_output_c, "grad of output_c") if is_lstm else np.zeros((), x.dtype)
        grads = _cudnn.cudnn_rnn_backprop_v3(
            x, _as_numpy(input_h, "input_h"), c, _as_numpy(params, "params"), a["lengths"], a["output"],
            a["output_h"], a["output_c"], _as_numpy(grad_output, "grad of output"),
            _as_numpy(grad_output_h, "grad of output_h"), g_c, a["reserve_space"], a["host_reserved"],
            **ctx.attrs)
        need = ctx.needs_input_grad
        d_c = None
        if need[2]:  # input_c is not read by the non-LSTM modes: a zero gradient, whatever its shape
            d_c = torch.from_numpy(grads.input_c_backprop) if is_lstm else torch.zeros_like(input_c)
        return (torch.from_numpy(grads.input_backprop) if need[0] else None,
                torch.from_numpy(grads.input_h_backprop) if need[1] else None,
                d_c,
                torch.from_numpy(grads.params_backprop) if need[3] else None,
                None, None, None, None)


@torch.compiler.disable(reason="fusedrnn.torch.cudnn_rnn runs NumPy code on the host: it is a graph break "
                                "and runs eagerly (fullgraph=True cannot include it)")
def cudnn_rnn(input, input_h, input_c, params, sequence_lengths=None, *, rnn_mode="lstm",
              input_mode="linear_input", direction="unidirectional", dropout=0.0, seed=0, seed2=0,
              num_proj=0, time_major=True, is_training=True):
    """TensorFlow's ``CudnnRNNV3`` on CPU tensors, differentiable in input, both states and params.

    Arguments and layouts are those of :func:`fusedrnn.cudnn_rnn_v3`: time-major ``input``
    ``[T, B, I]``, ``input_h [L*D, B, Hout]``, ``input_c [L*D, B, H]`` (lstm; ``None`` or any
    tensor otherwise), ``params`` the flat cuDNN buffer, ``sequence_lengths`` ``[B]`` integers
    in ``[1, T]`` (``None``: all ``T``).  ``time_major=False`` is TF's batch-major layout:
    ``input [B, T, I]`` and states ``[B, L*D, Hout]`` *reinterpreted* (C-order reshape) as
    ``[L*D, B, Hout]`` — not PyTorch's ``batch_first`` (the modules below transpose instead).

    Returns ``(output, output_h, output_c)``: ``output [T, B, D*Hout]`` (0 past each length),
    final states shaped like the inputs; ``output_c`` is a rank-0 zero for non-LSTM modes.

    Gradients come from ``CudnnRNNBackpropV3`` with the forward's ``reserve_space`` (and thus its
    dropout masks).  With ``is_training=False`` no dropout is applied; if gradients are required
    the forward then runs TF's training path with ``dropout=0`` (identical values).  Double
    backward is not supported.  Dropout masks are a pure function of ``(seed, seed2)``.

    Under ``torch.compile`` this call is a graph break (``torch.compiler.disable``): it runs
    eagerly, the code around it is compiled (``fullgraph=True`` therefore fails, naming this
    reason).  ``torch.func`` transforms (``vmap``, ``grad``, ...) are not supported: PyTorch
    raises its own error for an autograd.Function without ``setup_context``.
    """
    attrs = dict(rnn_mode=rnn_mode, input_mode=input_mode, direction=direction, dropout=dropout, seed=seed,
                 seed2=seed2, num_proj=num_proj, time_major=time_major)
    return _CudnnRNNFunction.apply(input, input_h, input_c, params, sequence_lengths, attrs,
                                   bool(is_training), torch.is_grad_enabled())


# ----------------------------------------------------------------------------------------------
# The nn.LSTM / nn.GRU / nn.RNN <-> opaque-params mapping (spec §10.1)


def _torch_parameter_layout(config: RNNConfig):
    """``(torch name, "weights" | "biases", canonical indices)`` for every parameter of the
    equivalent ``nn.LSTM/GRU/RNN``, in PyTorch's registration order (w_ih, w_hh, b_ih, b_hh,
    w_hr per layer and direction).  Each torch tensor is the row-stack (concatenation) of its
    canonical pieces, gates in cuDNN order (= PyTorch's)."""
    G, D = config.num_gates, config.num_dirs
    n_w, n_b = config.weights_per_pseudo_layer, config.biases_per_pseudo_layer
    layout = []
    for layer in range(config.num_layers):
        for d in range(D):
            p, suffix = layer * D + d, "_reverse" if d else ""
            q, r = p * n_w, p * n_b
            layout += [(f"weight_ih_l{layer}{suffix}", "weights", range(q, q + G)),
                       (f"weight_hh_l{layer}{suffix}", "weights", range(q + G, q + 2 * G)),
                       (f"bias_ih_l{layer}{suffix}", "biases", range(r, r + G)),
                       (f"bias_hh_l{layer}{suffix}", "biases", range(r + G, r + 2 * G))]
            if config.num_proj:
                layout.append((f"weight_hr_l{layer}{suffix}", "weights", range(q + 2 * G, q + 2 * G + 1)))
    return layout


def _canonical_attrs(config: RNNConfig) -> dict:
    return dict(rnn_mode=config.rnn_mode, input_mode="skip_input" if config.skip_input else "linear_input",
                direction="bidirectional" if config.num_dirs == 2 else "unidirectional",
                num_proj=config.num_proj)


def _torch_to_params(config: RNNConfig, tensors: dict) -> np.ndarray:
    """PyTorch-named arrays (``weight_ih_l0`` ...) → the flat cuDNN buffer."""
    weights, biases = [None] * config.num_weights, [None] * config.num_biases
    for name, kind, indices in _torch_parameter_layout(config):
        pieces = np.split(np.asarray(tensors[name]), len(indices))
        for k, piece in zip(indices, pieces):
            (weights if kind == "weights" else biases)[k] = piece
    return _cudnn.cudnn_rnn_canonical_to_params_v2(config.num_layers, config.num_units, config.input_size,
                                                   weights, biases, **_canonical_attrs(config))


def _params_to_torch(config: RNNConfig, params: np.ndarray) -> dict:
    """The flat cuDNN buffer → PyTorch-named arrays, in PyTorch's registration order."""
    canonical = _cudnn.cudnn_rnn_params_to_canonical_v2(
        config.num_layers, config.num_units, config.input_size, params, num_params_weights=config.num_weights,
        num_params_biases=config.num_biases, **_canonical_attrs(config))
    return {name: np.concatenate([getattr(canonical, kind)[k] for k in indices])
            for name, kind, indices in _torch_parameter_layout(config)}


# ----------------------------------------------------------------------------------------------
# Modules


class _CudnnRNNBase(nn.Module):
    """Common part of the drop-in modules (see :class:`CudnnLSTM` for the full description)."""

    _rnn_mode = ""
    _torch_class = None

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, proj_size=0, *, input_mode="linear_input", seed=None, device=None,
                 dtype=None):
        super().__init__()
        if bias is not True:
            raise ValueError(f"bias must be True: cuDNN RNNs always have input and recurrent biases, got bias={bias!r}")
        if device is not None and torch.device(device).type != "cpu":
            raise ValueError(f"device must be cpu (fusedrnn runs on the CPU), got {device}")
        dtype = torch.get_default_dtype() if dtype is None else dtype
        if dtype not in _DTYPES:
            raise TypeError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
        for name, value in (("input_size", input_size), ("hidden_size", hidden_size), ("num_layers", num_layers)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not isinstance(dropout, (int, float)) or isinstance(dropout, bool) or not 0 <= dropout < 1:
            raise ValueError(f"dropout must be a number in [0, 1), got {dropout!r}")
        if isinstance(proj_size, bool) or not isinstance(proj_size, int) or proj_size < 0:
            raise ValueError(f"proj_size must be a non-negative integer, got {proj_size!r}")
        if proj_size >= hidden_size:
            raise ValueError(f"proj_size has to be smaller than hidden_size, got proj_size={proj_size}, "
                             f"hidden_size={hidden_size}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise TypeError(f"seed must be None or an int, got {seed!r}")
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout = True, bool(batch_first), float(dropout)
        self.bidirectional, self.proj_size = bool(bidirectional), proj_size
        self.input_mode, self.seed = input_mode, seed
        self._dropout_calls = 0
        # the size check (and the input_mode / skip_input rules) of CudnnRNNParamsSize:
        size = int(_cudnn.cudnn_rnn_params_size(num_layers, hidden_size, input_size, S=np.int64,
                                                **self._op_attrs())[0])
        self.params = nn.Parameter(torch.empty(size, dtype=dtype))
        self.reset_parameters()

    # -- configuration ------------------------------------------------------------------------

    @property
    def _config(self) -> RNNConfig:
        skip = self.input_mode == "skip_input" or (self.input_mode == "auto_select"
                                                   and self.input_size == self.hidden_size)
        return RNNConfig(self._rnn_mode, self.num_layers, self.hidden_size, self.input_size,
                         2 if self.bidirectional else 1, skip, self.proj_size)

    def _op_attrs(self) -> dict:
        return {"rnn_mode": self._rnn_mode, "input_mode": self.input_mode,
                "direction": "bidirectional" if self.bidirectional else "unidirectional",
                "num_proj": self.proj_size}

    def extra_repr(self) -> str:
        text = f"{self.input_size}, {self.hidden_size}"
        for name, default in (("num_layers", 1), ("batch_first", False), ("dropout", 0.0),
                              ("bidirectional", False), ("proj_size", 0), ("input_mode", "linear_input"),
                              ("seed", None)):
            if getattr(self, name) != default:
                text += f", {name}={getattr(self, name)!r}"
        return text

    def flatten_parameters(self) -> None:
        """No-op (``params`` is always one flat buffer); kept for ``nn.LSTM`` compatibility."""

    def reset_parameters(self) -> None:
        """PyTorch's initialisation: every canonical tensor uniform in ±1/sqrt(hidden_size),
        drawn in ``nn.LSTM/GRU/RNN``'s parameter order, so that under the same
        ``torch.manual_seed`` this module and the ``torch.nn`` one get the same weights."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        config = self._config
        shapes = _params_to_torch(config, np.zeros(self.params.numel()))
        with torch.no_grad():
            drawn = {name: torch.empty(value.shape, dtype=self.params.dtype).uniform_(-bound, bound).numpy()
                     for name, value in shapes.items()}
            self.params.copy_(torch.from_numpy(_torch_to_params(config, drawn)))

    # -- weights to and from torch.nn -----------------------------------------------------------

    @classmethod
    def _check_torch_module(cls, module) -> dict:
        """Constructor keywords of the equivalent module, from an ``nn.LSTM/GRU/RNN``."""
        if not isinstance(module, cls._torch_class) or (
                cls._torch_class is nn.RNN and module.nonlinearity != cls._rnn_mode[4:]):
            wanted = cls._torch_class.__name__ + (f"(nonlinearity='{cls._rnn_mode[4:]}')"
                                                  if cls._torch_class is nn.RNN else "")
            raise TypeError(f"{cls.__name__}.from_torch needs a torch.nn.{wanted}, got {module!r}")
        if not module.bias:
            raise ValueError(f"{cls.__name__}.from_torch needs bias=True (cuDNN RNNs always have biases), "
                             f"got a module with bias=False")
        kwargs = dict(num_layers=module.num_layers, batch_first=module.batch_first, dropout=module.dropout,
                      bidirectional=module.bidirectional)
        if module.proj_size:
            kwargs["proj_size"] = module.proj_size
        return kwargs

    @classmethod
    def from_torch(cls, module, *, seed=None):
        """A fusedrnn module with the weights (copied) and configuration of ``module``, a
        ``torch.nn.LSTM`` (for :class:`CudnnLSTM`), ``nn.GRU`` or ``nn.RNN`` with the matching
        nonlinearity.  Training/eval mode is copied too."""
        kwargs = cls._check_torch_module(module)
        dtype = module.weight_ih_l0.dtype
        new = cls(module.input_size, module.hidden_size, seed=seed, dtype=dtype, **kwargs)
        tensors = {name: _as_numpy(getattr(module, name), name) for name, _, _ in
                   _torch_parameter_layout(new._config)}
        with torch.no_grad():
            new.params.copy_(torch.from_numpy(_torch_to_params(new._config, tensors)))
        return new.train(module.training)

    def to_torch(self):
        """The equivalent ``torch.nn.LSTM/GRU/RNN`` with a copy of the weights (same dtype,
        batch_first, dropout, training mode).  ``skip_input`` has no PyTorch counterpart."""
        config = self._config
        if config.skip_input:
            raise ValueError("to_torch: PyTorch has no skip_input mode (this module's input_mode="
                             f"{self.input_mode!r} resolves to skip_input)")
        kwargs = dict(num_layers=self.num_layers, batch_first=self.batch_first, dropout=self.dropout,
                      bidirectional=self.bidirectional, dtype=self.params.dtype)
        if self.proj_size:
            kwargs["proj_size"] = self.proj_size
        if self._torch_class is nn.RNN:
            kwargs["nonlinearity"] = self._rnn_mode[4:]
        module = self._torch_class(self.input_size, self.hidden_size, **kwargs)
        with torch.no_grad():
            for name, value in _params_to_torch(config, _as_numpy(self.params, "params")).items():
                getattr(module, name).copy_(torch.from_numpy(value))
        return module.train(self.training)

    # -- forward --------------------------------------------------------------------------------

    def _dropout_seeds(self) -> tuple:
        """(seed, seed2) of this call's dropout masks (only drawn when dropout applies)."""
        if not (self.training and self.dropout > 0 and self.num_layers > 1):
            return 0, 0
        if self.seed is None:  # PyTorch's global generator: reproducible under torch.manual_seed
            seed, seed2 = torch.randint(0, 2**31 - 1, (2,)).tolist()
            return seed, seed2
        self._dropout_calls += 1
        return self.seed, self._dropout_calls

    def _initial_states(self, hx, batch: int, dtype, batched: bool):
        LD = self.num_layers * (2 if self.bidirectional else 1)
        Hout = self.proj_size or self.hidden_size
        shapes = [(LD, batch, Hout)] + ([(LD, batch, self.hidden_size)] if self._rnn_mode == "lstm" else [])
        if hx is None:
            return [torch.zeros(shape, dtype=dtype) for shape in shapes]
        states = list(hx) if self._rnn_mode == "lstm" else [hx]
        if self._rnn_mode == "lstm" and (not isinstance(hx, (tuple, list)) or len(states) != 2):
            raise TypeError("hx must be a tuple (h_0, c_0) for an LSTM")
        result = []
        for state, shape, name in zip(states, shapes, ("h_0", "c_0")):
            if not isinstance(state, torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor, got {type(state).__name__}")
            if not batched:
                if state.dim() != 2:
                    raise RuntimeError(f"For unbatched 2-D input, {name} should also be 2-D but got "
                                       f"{state.dim()}-D tensor")
                state = state.unsqueeze(1)
            if tuple(state.shape) != shape:
                raise RuntimeError(f"Expected hidden size {shape}, got {list(state.shape)} for {name}")
            result.append(state)
        return result

    def forward(self, input, hx=None):
        """``input``: ``[T, B, I]`` (``[B, T, I]`` with batch_first), ``[T, I]`` unbatched, or a
        PackedSequence.  ``hx``: LSTM ``(h_0 [L*D, B, Hout], c_0 [L*D, B, H])``, others
        ``h_0 [L*D, B, H]`` (zeros when None).  Returns ``(output, (h_n, c_n))`` (LSTM) or
        ``(output, h_n)``, ``output`` of the same kind as ``input``."""
        packed = isinstance(input, PackedSequence)
        lengths = None
        if packed:
            x, lengths = pad_packed_sequence(input)  # original batch order, time-major, zero padded
            batched = True
        else:
            if not isinstance(input, torch.Tensor) or input.dim() not in (2, 3):
                raise ValueError(f"{type(self).__name__}: Expected input to be 2D or 3D, got "
                                 f"{input.dim() if isinstance(input, torch.Tensor) else type(input).__name__}"
                                 f"{'D tensor' if isinstance(input, torch.Tensor) else ''} instead")
            batched = input.dim() == 3
            x = input if batched else input.unsqueeze(1)
            if batched and self.batch_first:
                x = x.transpose(0, 1)
        if x.shape[-1] != self.input_size:
            raise RuntimeError(f"input.size(-1) must be equal to input_size. Expected {self.input_size}, "
                               f"got {x.shape[-1]}")
        states = self._initial_states(hx, x.shape[1], x.dtype, batched)
        seed, seed2 = self._dropout_seeds()
        output, h_n, c_n = cudnn_rnn(
            x, states[0], states[1] if len(states) > 1 else None, self.params, lengths,
            dropout=self.dropout, seed=seed, seed2=seed2, is_training=self.training, **self._op_attrs())
        if packed:
            order = input.sorted_indices
            output_sorted = output if order is None else output.index_select(1, order)
            lengths_sorted = lengths if order is None else lengths.index_select(0, order.cpu())
            data = pack_padded_sequence(output_sorted, lengths_sorted, enforce_sorted=True).data
            output = PackedSequence(data, input.batch_sizes, input.sorted_indices, input.unsorted_indices)
        elif not batched:
            output, h_n = output.squeeze(1), h_n.squeeze(1)
            c_n = c_n.squeeze(1) if self._rnn_mode == "lstm" else c_n
        elif self.batch_first:
            output = output.transpose(0, 1)
        if self._rnn_mode == "lstm":
            return output, (h_n, c_n)
        return output, h_n


_MODULE_DOC = """Drop-in replacement for ``torch.nn.{torch_name}`` running fusedrnn's {mode} (TF ``CudnnRNN``
with ``rnn_mode={mode}``) on the CPU.

Constructor: ``{signature}``, keyword-only ``input_mode`` ("linear_input", "skip_input",
"auto_select"), ``seed``, ``device`` (cpu only) and ``dtype`` (float32/float64).
``bias`` must be True (cuDNN always has both biases).

``params`` (one ``nn.Parameter``, shape ``[CudnnRNNParamsSize]``) is cuDNN's opaque buffer
(:mod:`fusedrnn.layout`): a TF ``CudnnLSTM``/Keras cuDNN checkpoint loads with
``module.params.data.copy_(torch.from_numpy(buffer))``.  :meth:`from_torch` / :meth:`to_torch`
convert weights to and from ``torch.nn.{torch_name}``; ``state_dict()`` holds ``params`` only.

``forward(input, hx=None)`` as in PyTorch: a tensor or a ``PackedSequence`` in, the same kind
out (packed input runs with per-sequence lengths; the result keeps the input's
``sorted_indices``/``unsorted_indices``; ``h_n`` is in the original batch order); 2-D input is one
unbatched sequence.  ``batch_first=True`` is PyTorch's convention: only ``input``/``output`` are
``[B, T, .]``, the states stay ``[L*D, B, Hout]``.  It is implemented by transposing input and
output in torch around the time-major op — *not* TF's ``time_major=False``, which reinterprets the
state buffers as ``[B, L*D, Hout]`` (spec §5.2).

Dropout (between layers, ``num_layers > 1``) is applied in training mode only.  Masks per call:
with ``seed=None`` (default) ``(seed, seed2)`` are drawn from PyTorch's global generator
(reproducible under ``torch.manual_seed``, like ``nn.{torch_name}``); with an int ``seed`` they are
``(seed, n)`` for the module's n-th dropout call (a per-module stream).  The masks differ from
PyTorch's own (only placement and scaling match).
"""


class CudnnLSTM(_CudnnRNNBase):
    _rnn_mode = "lstm"
    _torch_class = nn.LSTM
    __doc__ = _MODULE_DOC.format(torch_name="LSTM", mode="lstm", signature=(
        "CudnnLSTM(input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0, "
        "bidirectional=False, proj_size=0)"))


class CudnnGRU(_CudnnRNNBase):
    _rnn_mode = "gru"
    _torch_class = nn.GRU
    __doc__ = _MODULE_DOC.format(torch_name="GRU", mode="gru", signature=(
        "CudnnGRU(input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0, "
        "bidirectional=False)"))

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, *, input_mode="linear_input", seed=None, device=None, dtype=None):
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         input_mode=input_mode, seed=seed, device=device, dtype=dtype)


class _CudnnSimpleRNN(_CudnnRNNBase):
    _torch_class = nn.RNN

    def __init__(self, input_size, hidden_size, num_layers=1, nonlinearity=None, bias=True,
                 batch_first=False, dropout=0.0, bidirectional=False, *, input_mode="linear_input", seed=None,
                 device=None, dtype=None):
        own = self._rnn_mode[4:]
        if nonlinearity not in (None, own):
            raise ValueError(f"{type(self).__name__} computes nonlinearity='{own}', got nonlinearity="
                             f"{nonlinearity!r} (use CudnnRNN{'Relu' if own == 'tanh' else 'Tanh'})")
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         input_mode=input_mode, seed=seed, device=device, dtype=dtype)
        self.nonlinearity = own


class CudnnRNNTanh(_CudnnSimpleRNN):
    _rnn_mode = "rnn_tanh"
    __doc__ = _MODULE_DOC.format(torch_name="RNN", mode="rnn_tanh", signature=(
        "CudnnRNNTanh(input_size, hidden_size, num_layers=1, nonlinearity='tanh', bias=True, "
        "batch_first=False, dropout=0.0, bidirectional=False)"))


class CudnnRNNRelu(_CudnnSimpleRNN):
    _rnn_mode = "rnn_relu"
    __doc__ = _MODULE_DOC.format(torch_name="RNN", mode="rnn_relu", signature=(
        "CudnnRNNRelu(input_size, hidden_size, num_layers=1, nonlinearity='relu', bias=True, "
        "batch_first=False, dropout=0.0, bidirectional=False)"))
