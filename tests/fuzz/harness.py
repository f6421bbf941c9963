"""The fuzz property and the crash-isolating subprocess runner.

Property (issue 4): for every example the op either returns a correct result or raises
``ValueError``/``TypeError`` whose message names the offending argument; never another exception
type, a crash, a hang, a RuntimeWarning, or a modified input.  "Correct" means: the expected
output names, shapes and dtypes (for unmutated and layout-only mutations), the same bits as the
unmutated call (layout-only mutations), agreement with the float64 path within the dtype's
tolerance, finite outputs for finite inputs, and outputs that are fresh writeable arrays (no
memory shared with an input or with another output).

:func:`run_child` runs ``python -m tests.fuzz.run`` in a subprocess with a timeout, so that a
segfault, an abort or a hang fails one test instead of killing pytest.
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
import re
import signal
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import cases
from .cases import PARAM_OPS, SPECS, Call
from .strategies import Example, Mutation

ROOT = Path(__file__).resolve().parents[2]

#: max |got - float64 path| allowed, relative to max(1, max |float64 path|), per float dtype
TOLERANCE = {"float16": 4e-3, "float32": 2e-5, "float64": 1e-12}


class PropertyFailure(AssertionError):
    pass


class Hang(Exception):
    """Raised (by SIGALRM) when one op call runs longer than the per-call limit."""


@contextlib.contextmanager
def time_limit(seconds: float):
    """Interrupt the main thread after ``seconds`` (no-op outside the main thread / on Windows)."""
    if not seconds or not hasattr(signal, "setitimer"):
        yield
        return

    def handler(signum, frame):
        raise Hang(f"a single op call ran longer than {seconds} s")

    previous = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# --------------------------------------------------------------------------------------
# Applying a mutation


def _rng(example: Example) -> np.random.Generator:
    return np.random.default_rng([example.seed, 12345])


def _noncontig(a: np.ndarray) -> np.ndarray:
    big = np.empty(a.shape + (2,), a.dtype)
    big[..., 0] = a
    return big[..., 0]


def _negstride(a: np.ndarray) -> np.ndarray:
    return np.flip(np.flip(a).copy())


def _readonly(a: np.ndarray) -> np.ndarray:
    a = a.copy()
    a.flags.writeable = False
    return a


def _unaligned(a: np.ndarray) -> np.ndarray:
    buf = np.empty(a.nbytes + 1, np.uint8)
    out = buf[1:].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


class _Subclass(np.ndarray):
    """A trivial ndarray subclass: ops must return plain ndarrays and the same bits."""


def _as_matrix(a: np.ndarray) -> np.ndarray:
    return np.asmatrix(a) if a.ndim == 2 else a


def _view(value, how: str):
    if isinstance(value, (list, tuple)):
        return [_view(v, how) for v in value]
    if how == "list":  # not for empty arrays: [[]] would lose the trailing dims
        if isinstance(value, (np.ndarray, np.generic)) and (np.ndim(value) == 0 or np.size(value)):
            return np.asarray(value).tolist()
        return value
    if not isinstance(value, np.ndarray) or (value.ndim == 0 and how in ("fortran", "noncontig", "negstride")):
        return value  # asfortranarray would make a 0-d array 1-d
    return {"noncontig": _noncontig, "negstride": _negstride, "fortran": np.asfortranarray,
            "readonly": _readonly, "unaligned": _unaligned, "matrix": _as_matrix,
            "masked": lambda a: np.ma.masked_array(a, mask=np.zeros(a.shape, bool)),
            "subclass": lambda a: a.view(_Subclass),
            "byteswap": lambda a: a.astype(a.dtype.newbyteorder())}[how](value)


def _random_like(rng, shape, dtype, name):
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        return np.ones(shape, dtype)  # 1 is a valid sequence length / size
    return rng.standard_normal(shape).astype(dtype)


def _with_shape(rng, value, arg, name):
    how, axis, size = arg
    a = np.asarray(value)
    shape = list(a.shape)
    if how == "add_axis":
        shape.insert(axis % (len(shape) + 1), size if size else 1)
    elif how == "drop_axis":
        if not shape:
            return value
        del shape[axis % len(shape)]
    elif how == "set_dim":
        if not shape:
            return value
        shape[axis % len(shape)] = size
    elif how == "scalar":
        shape = []
    elif how == "empty":
        shape = [0]
    return _random_like(rng, tuple(shape), a.dtype if a.dtype.kind in "iuf" else np.float32, name)


def _reserve(call: Call, how: str) -> tuple[object, bool]:
    """A damaged reserve_space; returns (value, must_fail)."""
    r = np.asarray(call.inputs["reserve_space"])
    if how == "truncate":
        return r[:-1], True
    if how == "extend":
        return np.concatenate([r, np.zeros(1, r.dtype)]), True
    if how == "zeros":
        return np.zeros_like(r), True
    if how == "placeholder":
        return np.zeros((), r.dtype), True
    if how == "reverse":
        return r[::-1], r.size > 1
    if how == "bytes_view":
        return r.view(np.uint8), True
    if how == "2d":
        return r.reshape(1, -1), True
    raw = np.ascontiguousarray(r).copy().view(np.uint8)
    header = raw[:128].view(np.int64)
    B = call.cfg["B"]
    if how == "magic":
        raw[3] ^= 0xFF
    elif how == "version":
        header[1] = 2
    elif how == "header_B":
        header[6] += 1
    elif how == "other_mode":
        header[2] = (header[2] + 1) % 4
    elif how == "lengths":
        if B == 0:
            return raw.view(r.dtype), False
        raw[128:128 + 8 * B].view(np.int64)[0] += 1
    elif how == "nan_data":
        data = raw[128 + 8 * B:]
        data[...] = 0x7F  # every float in the data part becomes a large value or NaN
        return raw.view(r.dtype), False
    return raw.view(r.dtype), True


def _list_item(call: Call, name: str, arg) -> tuple[object, bool | None]:
    how, index = arg
    items = list(call.inputs[name])
    k = index % len(items) if items else 0
    if how == "tuple":
        return tuple(items), False
    if how == "generator":
        return (a for a in items), True
    if how == "ndarray":
        obj = np.empty(len(items), dtype=object)
        obj[:] = items
        return obj, True
    if how == "append":
        return items + [items[k] if items else np.zeros(1, call.dtype)], True
    if not items:
        return items, None
    a = np.asarray(items[k])
    if how == "drop":
        del items[k]
        return items, True
    if how == "grow":
        items[k] = np.zeros(a.size + 1, a.dtype)
        return items, True
    if how == "shrink":
        items[k] = a.reshape(-1)[1:]
        return items, a.size > 0
    if how == "none":
        items[k] = None
        return items, True
    if how == "int":
        items[k] = a.astype(np.int32)
        return items, True
    if how == "transpose":
        items[k] = a.T
        return items, None
    if how == "float64":
        items[k] = a.astype(np.float64)
        return items, a.dtype != np.float64
    return items, None


def _int_value(call: Call, target: str, value):
    """Resolve the per-target meaning of an integer mutation value."""
    T = call.cfg.get("T", 0)
    if isinstance(value, str) and value == "T+1":
        return T + 1
    return value


def _values_must_fail(call: Call, target: str, value) -> bool | None:
    if isinstance(value, (bool, np.bool_)) and target == "sequence_lengths":
        return None  # [True, 3] is an int64 array to NumPy
    if isinstance(value, (bool, np.bool_)) or value is None or isinstance(value, (str, list, float, np.floating)):
        return True
    if isinstance(value, np.ndarray) and value.ndim:
        return True
    v = int(value)
    T = call.cfg.get("T", 0)
    if target == "sequence_lengths":
        return True if (v < 1 or v > T) else None
    if target == "seq_len_max":
        return True if (v < 0 or v > T) else None
    return True if v < 1 else None


def apply_mutation(call: Call, example: Example):
    """Return (mutated Call, must_fail, same_result, allow_error, extra_args, extra_kwargs)."""
    m = example.mutation
    rng = _rng(example)
    inputs, attrs = dict(call.inputs), dict(call.attrs)
    must_fail, same, allow_error = m.must_fail, m.same_result, not m.same_result
    extra_args, extra_kwargs = (), {}
    spec = call.spec
    if m.kind == "view":
        targets = list(inputs) if m.target == "*" else [m.target]
        for name in targets:
            inputs[name] = _view(inputs[name], m.arg)
        if m.arg == "byteswap":  # non-native byte order: the same values or a TypeError
            allow_error, must_fail = True, False
        if m.arg == "list":
            def converted(t):  # empty arrays are left alone by _view
                v = inputs[t]
                if t in ("weights", "biases"):
                    return any(not isinstance(a, np.ndarray) for a in v)
                return not isinstance(v, np.ndarray)
            floats_touched = [t for t in targets if t in spec.float_inputs and converted(t)]
            all_floats = m.target == "*" or set(floats_touched) >= set(spec.float_inputs)
            if not floats_touched or not all_floats or call.dtype == np.float32:
                same, allow_error, must_fail = True, False, False  # lists take the arrays' dtype
            else:
                same, allow_error, must_fail = False, False, False  # all Python: float32
    elif m.kind == "dtype":
        value = inputs[m.target]
        current = np.asarray(value).dtype
        new = np.dtype(m.arg)
        if new == current:
            same, allow_error, must_fail = True, False, False
        elif new.kind == "M":
            inputs[m.target] = np.zeros(np.shape(value), new)
        else:
            inputs[m.target] = np.asarray(value).astype(new)
        if new.kind == "f" and tuple(spec.float_inputs) == (m.target,):
            must_fail = False  # the only float input: any float dtype is a valid T
    elif m.kind == "shape":
        inputs[m.target] = _with_shape(rng, inputs[m.target], m.arg, m.target)
    elif m.kind == "replace":
        inputs[m.target] = copy.deepcopy(m.arg)
    elif m.kind == "attr":
        attrs[m.target] = m.arg
        if (m.target == "num_proj" and not must_fail and isinstance(m.arg, (int, np.integer))
                and int(m.arg) != call.cfg.get("P", 0)):
            allow_error = True
    elif m.kind == "values":
        index, value = m.arg
        value = _int_value(call, m.target, value)
        current = inputs[m.target]
        if np.ndim(current) == 0:
            inputs[m.target] = value
        else:
            items = np.asarray(current).tolist()
            if items:
                items[index % len(items)] = value
            else:
                items = [value]
            inputs[m.target] = items
        must_fail = _values_must_fail(call, m.target, value) or (np.ndim(current) > 0 and not np.size(current))
    elif m.kind == "list_item":
        inputs[m.target], must_fail = _list_item(call, m.target, m.arg)
        if not must_fail and m.arg[0] in ("tuple",):
            same, allow_error = True, False
    elif m.kind == "reserve":
        inputs["reserve_space"], must_fail = _reserve(call, m.arg)
    elif m.kind == "extra_kwarg":
        extra_kwargs = {m.target: m.arg}
    elif m.kind == "positional":
        extra_args = (0,)
    return call.replace(inputs=inputs, attrs=attrs), must_fail, same, allow_error, extra_args, extra_kwargs


def call_op(call: Call, surface: str, extra_args=(), extra_kwargs=None):
    spec = call.spec
    extra_kwargs = extra_kwargs or {}
    if extra_args:
        if surface == "raw":
            from fusedrnn import raw_ops
            return getattr(raw_ops, spec.raw)(*call.inputs.values(), **call.attrs)
        return spec.function(*call.inputs.values(), *extra_args, **call.attrs)
    if surface == "raw":
        from fusedrnn import raw_ops
        return getattr(raw_ops, spec.raw)(**call.inputs, **call.attrs, **extra_kwargs)
    return spec.function(*call.inputs.values(), **call.attrs, **extra_kwargs)


# --------------------------------------------------------------------------------------
# Checks


def snapshot(value):
    """A deep copy used to prove an input was not modified (arrays: bytes, shape, dtype, flags)."""
    if isinstance(value, np.ndarray):
        return ("array", value.dtype, value.shape, value.tobytes() if value.dtype != object else
                repr(value.tolist()), value.flags.writeable, value.strides)
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [snapshot(v) for v in value])
    if isinstance(value, np.generic):
        return ("generic", value.dtype, value.tobytes())
    return ("py", repr(value))


def _arrays_in(value):
    if isinstance(value, np.ndarray):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _arrays_in(v)


def _names_re(names) -> re.Pattern:
    alternatives = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    return re.compile(rf"(?<![A-Za-z0-9_])(?:{alternatives})(?![A-Za-z0-9_])")


def acceptable_names(call: Call, example: Example, must_fail=None) -> set:
    """Names an error message may give: the mutated argument, or either side of a mismatch
    when the mutation produced a valid value that no longer fits the other inputs."""
    m = example.mutation
    spec = call.spec
    if m.kind == "values" and not must_fail:
        return set(spec.inputs) | set(spec.attrs)
    if m.kind in ("shape", "replace") or (m.kind == "view" and m.target == "*"):
        # a shape conflicts with another input or with an attribute (input_mode=skip_input
        # needs input_size == num_units): naming either side is actionable
        return set(spec.inputs) | set(spec.attrs)
    if m.kind == "attr" and not m.must_fail:
        # another *valid* attribute value (gru -> lstm): the inputs no longer fit it
        return set(spec.inputs) | set(spec.attrs)
    if m.kind == "reserve":
        return {"reserve_space", "sequence_lengths"} if m.arg == "lengths" else {"reserve_space"}
    if m.kind == "none":
        return set(spec.inputs) | set(spec.attrs)
    return {m.target}


def check_error(exc: BaseException, call: Call, example: Example, must_fail=None) -> None:
    message = str(exc)
    if example.mutation.kind == "positional":
        if "positional" not in message:
            raise PropertyFailure(f"positional-argument TypeError does not say so: {message!r}")
        return
    names = acceptable_names(call, example, must_fail)
    if not _names_re(names).search(message):
        raise PropertyFailure(f"{type(exc).__name__} message does not name the argument "
                              f"(expected one of {sorted(names)}): {message!r}")


def check_structure(result, call: Call, expect: bool) -> dict:
    arrays = cases.result_arrays(result)
    for name, value in arrays.items():
        if type(value) is not np.ndarray:
            raise PropertyFailure(f"output {name} is a {type(value).__name__}, not a plain ndarray")
        if not value.flags.writeable:
            raise PropertyFailure(f"output {name} is read-only")
    if expect and call.expect is not None:
        if list(arrays) != list(call.expect):
            raise PropertyFailure(f"output names {list(arrays)} != expected {list(call.expect)}")
        for name, (shape, dtype) in call.expect.items():
            got = arrays[name]
            if got.dtype != dtype:
                raise PropertyFailure(f"output {name} has dtype {got.dtype}, expected {dtype}")
            if shape is None:
                if got.ndim != 1:
                    raise PropertyFailure(f"output {name} has shape {got.shape}, expected 1-D")
            elif tuple(got.shape) != tuple(shape):
                raise PropertyFailure(f"output {name} has shape {got.shape}, expected {tuple(shape)}")
    inputs = [a for v in call.inputs.values() for a in _arrays_in(v)]
    outputs = list(arrays.items())
    for name, out in outputs:
        if out.size == 0:
            continue
        for a in inputs:
            if a.size and np.shares_memory(out, a):
                raise PropertyFailure(f"output {name} shares memory with an input")
    for k, (name, out) in enumerate(outputs):
        for other, out2 in outputs[k + 1:]:
            if out.size and out2.size and np.shares_memory(out, out2):
                raise PropertyFailure(f"outputs {name} and {other} share memory")
    return arrays


_OPAQUE = ("reserve_space",)


def check_finite(arrays: dict) -> None:
    for name, a in arrays.items():
        if name in _OPAQUE or a.dtype.kind != "f":
            continue
        if not np.all(np.isfinite(a)):
            raise PropertyFailure(f"output {name} is not finite for finite inputs")


def check_semantics(call: Call, arrays: dict) -> None:
    """Cheap exact rules of the specs that hold for every valid call of the unmutated config."""
    spec, cfg = call.spec, call.cfg
    family = spec.family

    def zero(name, part):
        if part.size and not (part == 0).all():
            raise PropertyFailure(f"output {name} is not exactly 0 where the spec says it is")

    if family == "block_fwd":  # block_ops.md §3.2 and §13.1: everything past seq_len_max is 0
        for name, a in arrays.items():
            zero(name, a[cfg["slm"]:])
    if family == "block_bwd":  # §4.3: x_grad past seq_len_max is 0; seq_len_max = 0 gives all zeros
        zero("x_grad", arrays["x_grad"][cfg["slm"]:])
        if cfg["slm"] == 0:
            for name, a in arrays.items():
                zero(name, a)
    if family in ("block_bwd", "cell_bwd") and not cfg["use_peephole"]:
        for name in ("wci_grad", "wcf_grad", "wco_grad"):
            zero(name, arrays[name])
    if family.startswith("cudnn") and spec.version == 3 and cfg["lengths"] is not None and cfg["B"]:
        T, tm = cfg["T"], cfg["time_major"]
        padded = np.arange(T)[:, None] >= np.asarray(cfg["lengths"])[None, :]  # [T, B]
        if not tm:
            padded = padded.T
        name = "output" if family == "cudnn_fwd" else "input_backprop"
        zero(name, arrays[name][padded])
    if family == "cudnn_fwd" and cfg["mode"] != "lstm":
        zero("output_c", arrays["output_c"])


def compare_float64(arrays: dict, ref_arrays: dict, dtype) -> None:
    if list(arrays) != list(ref_arrays):
        raise PropertyFailure(f"float64 path has outputs {list(ref_arrays)}, this call {list(arrays)}")
    tol = TOLERANCE[np.dtype(dtype).name]
    for name, got in arrays.items():
        ref = ref_arrays[name]
        if name in _OPAQUE:  # its length depends on the compute dtype
            continue
        if got.shape != ref.shape:
            raise PropertyFailure(f"output {name}: shape {got.shape} but float64 path {ref.shape}")
        if got.dtype.kind != "f":
            if not np.array_equal(got, ref):
                raise PropertyFailure(f"output {name} differs from the float64 path: {got} vs {ref}")
            continue
        if got.size == 0:
            continue
        g, r = got.astype(np.float64), ref.astype(np.float64)
        both_nan = np.isnan(g) & np.isnan(r)
        diff = np.where(both_nan, 0.0, np.abs(g - r))
        scale = max(1.0, float(np.nanmax(np.abs(np.where(np.isfinite(r), r, 0.0)))))
        worst = float(np.nanmax(diff)) if diff.size else 0.0
        if not worst <= tol * scale:
            raise PropertyFailure(f"output {name} differs from the float64 path by {worst:.3g} "
                                  f"(> {tol} * {scale:.3g})")


def same_bits(a: dict, b: dict) -> None:
    if list(a) != list(b):
        raise PropertyFailure(f"outputs {list(a)} != unmutated outputs {list(b)}")
    for name in a:
        x, y = a[name], b[name]
        if x.dtype != y.dtype or x.shape != y.shape or x.tobytes() != y.tobytes():
            raise PropertyFailure(f"output {name} is not bit-identical to the unmutated call "
                                  f"(a layout-only change of the inputs changed the result)")


@dataclass
class Outcome:
    kind: str  # "result", "error", "same"
    detail: str = ""


def _run_checked(call: Call, surface: str, time_limit_s: float, extra_args=(), extra_kwargs=None):
    before = {name: snapshot(v) for name, v in call.inputs.items()}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        error = None
        try:
            with time_limit(time_limit_s):
                result = call_op(call, surface, extra_args, extra_kwargs)
        except (ValueError, TypeError) as exc:
            result, error = None, exc
        except Hang:
            raise PropertyFailure(f"hang: a call ran longer than {time_limit_s} s") from None
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            raise PropertyFailure(f"raised {type(exc).__name__} (only ValueError/TypeError allowed): "
                                  f"{exc}") from exc
    after = {name: snapshot(v) for name, v in call.inputs.items() if not _is_iterator(v)}
    for name, snap in after.items():
        if snap != before[name]:
            raise PropertyFailure(f"input {name} was modified by the call")
    runtime = [w for w in caught if issubclass(w.category, RuntimeWarning)]
    if runtime:
        raise PropertyFailure(f"RuntimeWarning leaked to the caller: {runtime[0].message}")
    return result, error


def _is_iterator(value) -> bool:
    return not isinstance(value, (np.ndarray, list, tuple, str, bytes)) and hasattr(value, "__next__")


def check_example(example: Example, time_limit_s: float = 5.0) -> Outcome:
    """The fuzz property for one example; raises PropertyFailure (an AssertionError) on violation."""
    call = cases.build(example.op, example.dtype, example.cfg, example.seed)
    mcall, must_fail, same, allow_error, extra_args, extra_kwargs = apply_mutation(call, example)
    if example.mutation.kind in ("extra_kwarg", "positional"):
        must_fail = True
    result, error = _run_checked(mcall, example.surface, time_limit_s, extra_args, extra_kwargs)
    if error is not None:
        if same and not allow_error:
            raise PropertyFailure(f"a valid call raised {type(error).__name__}: {error}") from error
        try:
            check_error(error, mcall, example, must_fail)
        except PropertyFailure as failure:
            raise failure from error
        return Outcome("error", type(error).__name__)
    if must_fail:
        raise PropertyFailure(f"invalid input accepted: mutation {example.mutation!r} returned a result")
    layout_only = example.mutation.kind in ("none", "view") and same
    arrays = check_structure(result, mcall, expect=layout_only)
    if layout_only:
        check_finite(arrays)
        check_semantics(mcall, arrays)
    if same and example.mutation.kind != "none":
        base, _ = _run_checked(call, "snake", time_limit_s)
        same_bits(arrays, cases.result_arrays(base))
        return Outcome("same")
    compare = example.mutation.kind in ("none", "view", "attr", "values", "dtype", "list_item")
    if (call.spec.family == "cudnn_bwd" and example.mutation.kind == "attr"
            and example.mutation.target in ("dropout", "seed", "seed2")):
        compare = False  # the masks come from reserve_space; a re-run forward would draw others
    if compare and mcall.dtype is not None and mcall.dtype != np.float64 and _floats_are(mcall, mcall.dtype):
        ref, ref_error = _run_checked(cases.float64_path(mcall), "snake", time_limit_s)
        if ref_error is not None:
            raise PropertyFailure(f"the float64 path raised {type(ref_error).__name__}: {ref_error}")
        compare_float64(arrays, cases.result_arrays(ref), mcall.dtype)
    if example.op in PARAM_OPS and example.mutation.kind == "none":
        check_params_roundtrip(mcall, arrays)
    return Outcome("result")


def _floats_are(call: Call, dtype) -> bool:
    """True when every float input still has the call's dtype (mutations may change that)."""
    for name in call.spec.float_inputs:
        for a in _arrays_in(call.inputs[name]) if isinstance(call.inputs[name], (list, tuple)) else [call.inputs[name]]:
            if np.asarray(a).dtype != dtype:
                return False
    return True


def check_params_roundtrip(call: Call, arrays: dict) -> None:
    """params -> canonical -> params is the identity (and vice versa); sizes match spec §6.4."""
    import fusedrnn
    cfg = call.cfg
    n = cases.cudnn_params_size(cfg["mode"], cfg["L"], cfg["D"], cfg["I"], cfg["H"], cfg["P"],
                                cfg["input_mode"])
    spec = call.spec
    if spec.family == "params_size":
        if int(arrays["result"][0]) != n:
            raise PropertyFailure(f"params_size {int(arrays['result'][0])} != spec §6.4 size {n}")
        return
    attrs = {k: v for k, v in call.attrs.items() if not k.startswith("num_params")}
    sizes = [call.inputs[k] for k in ("num_layers", "num_units", "input_size")]
    if spec.family == "to_canonical":
        weights = [arrays[k] for k in arrays if k.startswith("weights")]
        biases = [arrays[k] for k in arrays if k.startswith("biases")]
        back = (fusedrnn.cudnn_rnn_canonical_to_params_v2(*sizes, weights, biases, **attrs)
                if spec.version == 2 else fusedrnn.cudnn_rnn_canonical_to_params(*sizes, weights, biases, **attrs))
        if back.tobytes() != np.asarray(call.inputs["params"]).tobytes():
            raise PropertyFailure("canonical_to_params(params_to_canonical(params)) != params")
    else:
        flat = np.concatenate([np.asarray(a).reshape(-1) for a in call.inputs["weights"] + call.inputs["biases"]])
        if arrays["result"].tobytes() != flat.astype(call.dtype).tobytes():
            raise PropertyFailure("canonical_to_params is not the concatenation of the canonical "
                                  "tensors in canonical order (spec §6.3)")


# --------------------------------------------------------------------------------------
# Parent side: run the fuzz child in a subprocess


@dataclass
class ChildResult:
    args: list
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    seconds: float
    last_example: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and "FUZZ-OK" in self.stdout

    @property
    def crash_signal(self) -> str | None:
        if self.returncode is not None and self.returncode < 0:
            try:
                return signal.Signals(-self.returncode).name
            except ValueError:
                return f"signal {-self.returncode}"
        return None

    def report(self, tail: int = 6000) -> str:
        if self.timed_out:
            what = f"TIMED OUT after {self.seconds:.0f} s (a hang, or the budget is too large)"
        elif self.crash_signal:
            what = f"CRASHED with {self.crash_signal} (the child process died)"
        elif self.returncode != 0:
            what = f"FAILED (exit code {self.returncode})"
        else:
            what = f"passed in {self.seconds:.1f} s"
        lines = [f"fuzz child {' '.join(self.args)}: {what}"]
        minimal = re.findall(r"^MINIMAL EXAMPLE: (.*)$", self.stdout, re.M)
        if minimal:
            lines.append(f"minimal failing example (shrunk by hypothesis): {minimal[-1]}")
            lines.append(f"replay: python -m tests.fuzz.run --replay {minimal[-1]!r}")
        elif self.last_example and not self.ok:
            lines.append(f"example running when it died: {self.last_example}")
            lines.append(f"replay: python -m tests.fuzz.run --replay {self.last_example!r}")
        if not self.ok:
            lines.append("--- child stdout (tail) ---\n" + self.stdout[-tail:])
            lines.append("--- child stderr (tail) ---\n" + self.stderr[-tail:])
        return "\n".join(lines)


def child_env(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONFAULTHANDLER"] = "1"
    env.update(extra or {})
    return env


def run_child(args: list, timeout: float, env: dict | None = None, tmp_dir: str | None = None) -> ChildResult:
    """Run ``python -m tests.fuzz.run *args`` isolated in a subprocess (killed after ``timeout`` s)."""
    import tempfile
    with tempfile.TemporaryDirectory(dir=tmp_dir) as tmp:
        last_file = Path(tmp) / "last_example.txt"
        argv = [sys.executable, "-m", "tests.fuzz.run", *args, "--last-example", str(last_file)]
        start = time.monotonic()
        proc = subprocess.Popen(argv, cwd=ROOT, env=child_env(env), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        timed_out = False
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            stdout, stderr = proc.communicate()
        seconds = time.monotonic() - start
        last = last_file.read_text() if last_file.exists() else ""
    return ChildResult([str(a) for a in args], proc.returncode, stdout, stderr, timed_out, seconds, last)
