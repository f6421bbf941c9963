"""Attribute and shape resolution of the CudnnRNN ops: everything that runs before any compute.

``_attrs`` parses and checks the op attributes, ``_make_config`` builds the :class:`RNNConfig`,
``_resolve`` derives and checks every dimension of a forward/backward call (a ``_Problem``),
``_lengths`` checks ``sequence_lengths``.  Shapes, layouts and the dropout rule ("module doc"
in the docstrings of this package) are in the docstring of :mod:`fusedrnn.cudnn`.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

from .. import layout
from ..layout import RNNConfig
from ..validate import INT_DTYPES, choice_attr, float_attr, int_array, int_scalar, shape_str


class _Attrs(NamedTuple):
    rnn_mode: str
    input_mode: str
    num_dirs: int
    dropout: float
    seed: int
    seed2: int
    num_proj: int


def _attrs(rnn_mode, input_mode, direction, dropout, seed, seed2, num_proj=0) -> _Attrs:
    """The checked attributes (cached by the values and their types: a model passes the same
    few; values that cannot be hashed, e.g. rank-0 arrays, are parsed every time)."""
    values = (rnn_mode, input_mode, direction, dropout, seed, seed2, num_proj)
    key = values + tuple(map(type, values))  # 1, 1.0 and True are equal keys: their types differ
    try:
        hash(key)
    except TypeError:
        return _parse_attrs(*values)
    return _cached_attrs(key)


@functools.lru_cache(maxsize=256)
def _cached_attrs(key: tuple) -> _Attrs:
    return _parse_attrs(*key[:7])


def _parse_attrs(rnn_mode, input_mode, direction, dropout, seed, seed2, num_proj=0) -> _Attrs:
    rnn_mode = choice_attr(rnn_mode, "rnn_mode", layout.RNN_MODES)
    input_mode = choice_attr(input_mode, "input_mode", layout.INPUT_MODES)
    direction = choice_attr(direction, "direction", layout.DIRECTIONS)
    given = float_attr(dropout, "dropout")
    dropout = float(np.float32(given))  # a float32 attribute, as in TF
    if not 0.0 <= dropout <= 1.0:
        raise ValueError(f"dropout must be in [0, 1], got {given}")
    seed = int_scalar(seed, "seed")
    seed2 = int_scalar(seed2, "seed2")
    num_proj = int_scalar(num_proj, "num_proj")
    if num_proj < 0:
        raise ValueError(f"num_proj must be >= 0 (0 means no projection), got {num_proj}")
    if num_proj > 0 and rnn_mode != "lstm":
        raise ValueError(f"num_proj={num_proj} is only supported for rnn_mode=lstm, got rnn_mode={rnn_mode}")
    return _Attrs(rnn_mode, input_mode, 2 if direction == "bidirectional" else 1, dropout, seed,
                  seed2, num_proj)


def _make_config(attrs: _Attrs, num_layers: int, num_units: int, input_size: int) -> RNNConfig:
    if attrs.num_proj and attrs.num_proj >= num_units:
        raise ValueError(f"num_proj must satisfy 0 < num_proj < num_units, got num_proj={attrs.num_proj}, "
                         f"num_units={num_units}")
    skip = attrs.input_mode == "skip_input" or (attrs.input_mode == "auto_select" and input_size == num_units)
    if skip and input_size != num_units:
        raise ValueError(f"input_mode=skip_input requires input_size == num_units, got input_size={input_size}, "
                         f"num_units={num_units}")
    return RNNConfig(attrs.rnn_mode, num_layers, num_units, input_size, attrs.num_dirs, skip, attrs.num_proj)


class _Problem(NamedTuple):
    """The derived dimensions of one forward/backward call."""

    config: RNNConfig
    time_major: bool
    T: int
    B: int
    state_shape: tuple  # shape of input_h / output_h as the caller sees it
    cell_shape: tuple | None  # shape of input_c (lstm) as the caller sees it
    output_shape: tuple
    lengths: np.ndarray  # [B] int64
    full_length: bool  # every sequence has length T

    def valid_mask(self) -> np.ndarray | None:
        """[T, B] bool: step t belongs to sequence b; None when every length is T."""
        if self.full_length:
            return None
        return np.arange(self.T)[:, None] < self.lengths[None, :]


def _state_shape(time_major: bool, LD: int, B: int, width: int) -> tuple:
    return (LD, B, width) if time_major else (B, LD, width)


def _resolve(attrs: _Attrs, x, h, c, params, sequence_lengths, time_major: bool, fits=None,
             fits_args: tuple = ()) -> _Problem:
    """Derive and check every dimension.  ``fits(problem, *fits_args)`` (the memory estimate)
    runs before anything proportional to the batch is allocated (the lengths vector)."""
    problem = _resolve_shapes(attrs, x.shape, h.shape, c.shape if attrs.rnn_mode == "lstm" else None,
                              params.shape, time_major)
    if fits is not None:
        fits(problem, *fits_args)
    lengths, full_length = _lengths(sequence_lengths, problem.T, problem.B)
    return _Problem(*problem[:-2], lengths, full_length)


@functools.lru_cache(maxsize=512)
def _resolve_shapes(attrs: _Attrs, x_shape: tuple, h_shape: tuple, c_shape: tuple | None,
                    params_shape: tuple, time_major: bool) -> _Problem:
    """The shape checks and derived dimensions of :func:`_resolve` (cached: a model calls an op
    with the same few shapes; a check that fails raises and is not cached), lengths not set."""
    if len(x_shape) != 3:
        raise ValueError(f"RNN input must be a 3-D vector. input has shape {shape_str(x_shape)}")
    if len(h_shape) != 3:
        raise ValueError(f"RNN input_h must be a 3-D vector. input_h has shape {shape_str(h_shape)}")
    T, B = (x_shape[0], x_shape[1]) if time_major else (x_shape[1], x_shape[0])
    I = x_shape[2]
    D = attrs.num_dirs
    LD = h_shape[0] if time_major else h_shape[1]
    L = LD // D
    Hout = h_shape[2]
    expected_h = _state_shape(time_major, L * D, B, Hout)
    if tuple(h_shape) != expected_h:
        raise ValueError(f"Invalid input_h shape: {shape_str(h_shape)} {shape_str(expected_h)} "
                         f"(expected [{'num_layers*dirs, batch' if time_major else 'batch, num_layers*dirs'}, "
                         f"num_units] with {D} direction(s) and batch {B})")
    if L < 1:
        raise ValueError(f"input_h must hold at least one layer: input_h has shape {shape_str(h_shape)}, "
                         f"{'dim 0' if time_major else 'dim 1'} must be a positive multiple of {D}")
    H = Hout
    cell_shape = None
    if attrs.rnn_mode == "lstm":
        if len(c_shape) != 3:
            raise ValueError(f"RNN input_c must be a 3-D vector. input_c has shape {shape_str(c_shape)}")
        if attrs.num_proj == 0:
            if c_shape != h_shape:
                raise ValueError("input_h and input_c must have the same shape w/o projection: "
                                 f"{shape_str(h_shape)} {shape_str(c_shape)}")
        else:
            if not (Hout == attrs.num_proj and Hout <= c_shape[2] and c_shape[:2] == h_shape[:2]):
                raise ValueError("Invalid input_h and input_c w/ projection size: "
                                 f"{attrs.num_proj} {shape_str(h_shape)} {shape_str(c_shape)} "
                                 f"(input_h must be [.., .., num_proj], input_c [.., .., num_units] "
                                 "with the same first two dims)")
            H = c_shape[2]
        cell_shape = tuple(c_shape)
    if T < 1:
        raise ValueError(f"max_seq_length <= 0: input has shape {shape_str(x_shape)} "
                         f"({'dim 0' if time_major else 'dim 1'} is the time axis)")
    if I < 1:
        raise ValueError(f"input_size must be >= 1: input has shape {shape_str(x_shape)} (dim 2 is input_size)")
    if H < 1:
        raise ValueError(f"num_units must be >= 1: input_h has shape {shape_str(h_shape)} (dim 2 is num_units)")
    config = _make_config(attrs, L, H, I)
    if len(params_shape) != 1:
        raise ValueError(f"params must be a 1-D vector, got shape {shape_str(params_shape)}")
    if params_shape[0] != config.params_size:
        raise ValueError(f"params size mismatch: expected {config.params_size}, got {params_shape[0]} "
                         f"for {config.describe()}")
    out_width = D * config.hidden_out
    output_shape = (T, B, out_width) if time_major else (B, T, out_width)
    return _Problem(config, time_major, T, B, expected_h, cell_shape, output_shape, None, True)


def _lengths(sequence_lengths, T: int, B: int) -> tuple[np.ndarray, bool]:
    """``(lengths [B] int64, every length is T)``, checked."""
    if sequence_lengths is None:
        return np.full(B, T, dtype=np.int64), True
    if type(sequence_lengths) is np.ndarray and sequence_lengths.dtype in INT_DTYPES:
        lengths = sequence_lengths  # the common call: an int32/int64 vector
    else:
        lengths = int_array(sequence_lengths, "sequence_lengths", np.int32, "int32 as in TF, or int64")
    if lengths.ndim != 1 or lengths.shape[0] != B:
        raise ValueError(f"sequence_lengths must be a vector of batch_size={B} lengths, got shape "
                         f"{shape_str(lengths.shape)}")
    lengths = lengths.astype(np.int64)
    if not B:
        return lengths, True
    if B <= 256:  # Python's min/max over a short list touch far less code than two reductions
        values = lengths.tolist()
        shortest, longest = min(values), max(values)
    else:
        shortest, longest = int(lengths.min()), int(lengths.max())
    if not (1 <= shortest and longest <= T):
        b = int(np.flatnonzero((lengths < 1) | (lengths > T))[0])
        raise ValueError(f"sequence_lengths[{b}] = {int(lengths[b])} is outside [1, {T}]")
    return lengths, shortest == T
