"""Hypothesis strategies: a valid config of an op plus (usually) one mutation of the call.

A pure-random fuzzer never gets past the first rank check, so every example starts from a
*valid* call (:mod:`.cases`) and changes one thing: an input's dtype, shape or memory layout, an
input replaced by a Python scalar/list/None, one attribute, one element of ``sequence_lengths``,
a corrupted ``reserve_space``, an unknown keyword.  Each mutation says whether the call must
fail (``must_fail``), must give the same bits as the unmutated call (``same_result``), or may do
either (then the result is checked on its own).

Examples are plain data with an ``eval``-able repr, so a shrunk failing example printed by
hypothesis can be replayed with ``python -m tests.fuzz.run --replay "<repr>"``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st

from .cases import CUDNN_OPS, FLOATS, GATES, INPUT_MODES, MODES, PARAM_OPS, SPECS


@dataclass(frozen=True)
class Mutation:
    """One change to a valid call.  ``kind`` selects the code in :func:`harness.apply_mutation`."""

    kind: str  # none, view, dtype, shape, replace, attr, values, reserve, extra_kwarg, positional
    target: str = ""  # input or attribute name ("*": every array input)
    arg: object = None  # kind-specific parameter (plain, repr-able data)
    must_fail: bool = False
    same_result: bool = False

    def __repr__(self) -> str:
        return (f"Mutation({self.kind!r}, {self.target!r}, {self.arg!r}, must_fail={self.must_fail}, "
                f"same_result={self.same_result})")


@dataclass(frozen=True)
class Example:
    op: str
    dtype: str
    cfg: dict
    seed: int
    mutation: Mutation = field(default_factory=lambda: Mutation("none"))
    surface: str = "snake"  # snake (fusedrnn.<op>) or raw (fusedrnn.raw_ops.<Op>)

    def __repr__(self) -> str:
        return (f"Example(op={self.op!r}, dtype={self.dtype!r}, cfg={self.cfg!r}, seed={self.seed}, "
                f"mutation={self.mutation!r}, surface={self.surface!r})")


# --------------------------------------------------------------------------------------
# Valid configs

seeds = st.one_of(st.integers(0, 3), st.integers(-2**63, 2**64 - 1))


@st.composite
def cudnn_config(draw, version: int, params_op: bool = False):
    mode = draw(st.sampled_from(MODES))
    L = draw(st.integers(1, 2))
    D = draw(st.integers(1, 2))
    H = draw(st.integers(1, 4))
    input_mode = draw(st.sampled_from(INPUT_MODES))
    I = H if input_mode == "skip_input" else draw(st.integers(1, 4))
    proj_ok = mode == "lstm" and H > 1 and (version == 3 or (params_op and version == 2))
    P = draw(st.integers(0, H - 1)) if proj_ok else 0
    T = draw(st.integers(1, 4))
    B = draw(st.integers(0, 3))
    time_major = draw(st.booleans()) if version == 3 else True
    lengths = None
    if version == 3 and draw(st.booleans()):
        lengths = tuple(draw(st.lists(st.integers(1, T), min_size=B, max_size=B)))
    cfg = dict(mode=mode, L=L, D=D, I=I, H=H, P=P, T=T, B=B, input_mode=input_mode,
               time_major=time_major, lengths=lengths,
               len_dtype=draw(st.sampled_from(["int32", "int64"])),
               is_training=draw(st.booleans()),
               dropout=draw(st.sampled_from([0.0, 0.0, 0.5, 0.25])),
               seed=draw(seeds), seed2=draw(seeds),
               c_shape=draw(st.sampled_from(["state", "scalar", "empty"])))
    if params_op:
        cfg["S"] = draw(st.sampled_from(["int32", "int64"]))
        cfg["int_form"] = draw(st.sampled_from(["int", "int", "np64", "arr32", "arr64"]))
    return cfg


@st.composite
def block_config(draw, family: str):
    T = draw(st.integers(0, 4))
    cfg = dict(T=T, B=draw(st.integers(0, 3)), I=draw(st.integers(0, 4)), n=draw(st.integers(0, 4)),
               slm=draw(st.integers(0, T)),
               forget_bias=draw(st.sampled_from([1.0, 0.0, 2.5])),
               cell_clip=draw(st.sampled_from([3.0, 0.0, -1.0, 0.5])),
               use_peephole=draw(st.booleans()),
               int_form=draw(st.sampled_from(["int", "np64", "arr64", "arr32"])))
    return cfg


def config_for(op: str):
    spec = SPECS[op]
    if op in CUDNN_OPS:
        return cudnn_config(spec.version)
    if op in PARAM_OPS:
        return cudnn_config(spec.version, params_op=True)
    return block_config(spec.family)


def dtypes_for(op: str):
    return st.sampled_from(FLOATS)


# --------------------------------------------------------------------------------------
# Mutations

_BAD_FLOAT_DTYPES = ["int32", "int64", "uint8", "bool", "complex64", "complex128", "object", "<U3",
                     "datetime64[s]"]
# value-preserving layouts ("matrix": np.matrix for 2-D)
_VIEWS = ["noncontig", "negstride", "fortran", "readonly", "unaligned", "matrix", "masked",
          "subclass"]

_ATTR_VALUES = {
    # (value, must_fail) pairs; must_fail=None: may succeed (the result is then checked)
    "choice": [("bogus", True), ("", True), ("LSTM", True), (" lstm", True), (b"lstm", None), (b"LSTM", True),
               (b"\xff", True),
               (None, True), (1, True), (["lstm"], True), (np.str_("lstm"), None)],
    "dropout": [(math.nan, True), (math.inf, True), (-math.inf, True), (-0.1, True), (1.0, None),
                (1.5, True), (1.0000001, True), ("0.5", True), (None, True), (True, True), (0, None),
                (np.float32(0.25), None), (0.999, None), (np.array(0.5), None)],
    "int": [(-1, None), (2**63, None), (2**64 + 5, None), (-2**70, None), (np.int64(3), None),
            (np.uint64(2**64 - 1), None), (np.array(7, np.int32), None), (1.5, True), ("3", True),
            (None, True), (True, True), ([1], True), (np.array([1, 2]), True), (math.nan, True)],
    "num_proj": [(-1, True), (2**31, True), (2**63, True), (10**30, True), (1.0, True), (True, True),
                 ("1", True), (None, True), (np.int32(0), None), (1, None), (2, None)],
    "bool": [(1, True), (0, True), ("True", True), (None, True), (np.bool_(True), None),
             (np.bool_(False), None), ([True], True), (False, None), (True, None)],
    "float": [(math.nan, None), (math.inf, None), (-math.inf, None), (-5.0, None), (0, None),
              (np.float32(0.5), None), ("1.0", True), (None, True), (True, True), ([1.0], True),
              (1e300, None)],
    "dtype": [("float64", None), ("int16", True), ("bogus", True), (None, True), (np.int32, None),
              (np.float32, None), ("complex64", True), (3, True), (object, True)],
    "count": [(0, True), (-1, True), (2**70, True), (1.5, True), (True, True), (None, True),
              ("8", True), (np.int64(1), None)],
}

# must_fail is decided per target by the harness (0 is a valid seq_len_max, not a valid length)
_INT_INPUT_VALUES = [(0, None), (-1, True), (1, None), ("T+1", True), (2**31, None), (2**63, True),
                     (-2**63, True), (10**30, True), (1.5, True), (np.float64(2.0), True), (True, True),
                     (None, True), ("2", True), ([2], True), (np.array([2, 3]), True),
                     (np.uint64(3), None), (np.array(2, np.int8), None)]

_SCALAR_REPLACEMENTS = [0.5, 0, True, None, "abc", [], [[1.0], [1.0, 2.0]], (1.0, 2.0), 1 + 2j]


@st.composite
def mutation_for(draw, op: str, cfg: dict):
    spec = SPECS[op]
    arrays = [name for name in spec.float_inputs if name not in ("weights", "biases")]
    lists = [name for name in ("weights", "biases") if name in spec.float_inputs]
    ints = list(spec.int_inputs)
    attrs = list(spec.attrs)
    kinds = ["none"] * 3 + ["view"] * 2 + ["dtype", "shape", "shape", "replace"]
    if attrs:
        kinds += ["attr"] * 3
    if ints:
        kinds += ["values", "values"]
    if lists:
        kinds += ["list_item", "list_item"]
    if spec.family == "cudnn_bwd":
        kinds += ["reserve", "reserve"]
    kinds += ["extra_kwarg", "positional"]
    kind = draw(st.sampled_from(kinds))
    if kind == "none":
        return Mutation("none", same_result=True)
    if kind == "view":
        targets = arrays + ints + lists + ["*"]
        target = draw(st.sampled_from(targets))
        how = draw(st.sampled_from(_VIEWS + ["list", "byteswap"]))
        # "list": Python lists/scalars; float lists take the dtype of the float inputs that stay
        # arrays (float32 when none does), so the harness decides what to expect.
        return Mutation("view", target, how, same_result=how not in ("list", "byteswap"))
    if kind == "dtype":
        target = draw(st.sampled_from(arrays + ints)) if (arrays or ints) else draw(st.sampled_from(lists))
        if target in ints:
            new = draw(st.sampled_from(["float64", "float32", "bool", "complex64", "object", "uint64",
                                        "int8", "int16", "uint8", "uint32", "int32", "int64", "<U3"]))
            must = None if np.dtype(new).kind in "iu" else True
            return Mutation("dtype", target, new, must_fail=bool(must))
        new = draw(st.sampled_from(list(FLOATS) + _BAD_FLOAT_DTYPES))
        return Mutation("dtype", target, new, must_fail=True)  # same dtype is skipped in apply
    if kind == "shape":
        target = draw(st.sampled_from(arrays + ints))
        how = draw(st.sampled_from(["add_axis", "drop_axis", "set_dim", "set_dim", "scalar", "empty"]))
        axis = draw(st.integers(0, 3))
        value = draw(st.sampled_from([0, 1, 2, 5]))
        return Mutation("shape", target, (how, axis, value))
    if kind == "replace":
        target = draw(st.sampled_from(arrays + ints + lists))
        value = draw(st.sampled_from(_SCALAR_REPLACEMENTS))
        return Mutation("replace", target, value)
    if kind == "attr":
        if not attrs:
            return Mutation("extra_kwarg", "bogus_attr", 1, must_fail=True)
        target = draw(st.sampled_from(attrs))
        value, must = draw(st.sampled_from(_ATTR_VALUES[spec.attrs[target]]))
        return Mutation("attr", target, value, must_fail=bool(must))
    if kind == "values":
        target = draw(st.sampled_from(ints))
        value, must = draw(st.sampled_from(_INT_INPUT_VALUES))
        index = draw(st.integers(0, 3))
        return Mutation("values", target, (index, value), must_fail=bool(must))
    if kind == "list_item":
        target = draw(st.sampled_from(lists))
        index = draw(st.integers(0, 40))
        how = draw(st.sampled_from(["drop", "append", "grow", "shrink", "none", "int", "transpose",
                                    "tuple", "ndarray", "generator", "float64"]))
        return Mutation("list_item", target, (how, index))
    if kind == "reserve":
        how = draw(st.sampled_from(["truncate", "extend", "zeros", "magic", "version", "header_B",
                                    "placeholder", "nan_data", "lengths", "reverse", "bytes_view",
                                    "other_mode", "2d"]))
        must = how not in ("nan_data",)
        return Mutation("reserve", "reserve_space", how, must_fail=must)
    if kind == "positional":
        return Mutation("positional", "", None)
    return Mutation("extra_kwarg", "bogus_attr", draw(st.sampled_from([1, None, "x"])), must_fail=True)


@st.composite
def examples(draw, op: str):
    cfg = draw(config_for(op))
    dtype = draw(dtypes_for(op))
    seed = draw(st.integers(0, 2**32 - 1))
    mutation = draw(mutation_for(op, cfg))
    surface = draw(st.sampled_from(["snake", "snake", "raw"]))
    return Example(op, dtype, cfg, seed, mutation, surface)
