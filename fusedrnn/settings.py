"""Run-time settings, and the numerics context every public op runs in.

Backend, threads, instruction set (the native engine; see ``docs/native_engine.md``):

``FUSEDRNN_BACKEND=native|numpy`` / :func:`set_backend` / ``with backend("numpy"): ...``
    Which engines run the time loops.  Default: ``native`` when the compiled extension
    ``fusedrnn._native`` imports; when it does not, ``numpy``, *visibly*: :func:`backend_info`
    reports ``native_available = False`` with the import error.  Asking for ``native`` explicitly
    (environment or setting) when the extension is missing raises ``ImportError`` at the first
    op (the environment) or at once (:func:`set_backend`).  The NumPy engines are the reference.
``FUSEDRNN_NUM_THREADS`` / :func:`set_num_threads`
    The native engine's team size; default: the cores this process may run on
    (``len(os.sched_getaffinity(0))``).  Results do not depend on it.
``FUSEDRNN_ISA=avx512|avx2|portable`` / :func:`set_isa`
    The native kernels' instruction set; default: the best one this CPU supports.

``fusedrnn.settings.deterministic`` (default ``False``; environment ``FUSEDRNN_DETERMINISTIC=1``
at import sets it ``True``)
    With the default, float32/float16 results can depend on the number of threads the BLAS
    library (NumPy's OpenBLAS) uses: OpenBLAS blocks its single- and multi-threaded sgemm
    differently, so ``OPENBLAS_NUM_THREADS=1`` and ``=2`` give results a few ulp apart
    (float64 was bit-identical in our measurements; see ``docs/hardening.md``).  Results never
    depend on how many *Python* threads call fusedrnn at once.  With ``deterministic = True``
    each op call runs its BLAS calls on one thread, so results are bit-identical whatever the
    thread count of the machine or the environment (they still depend on the CPU's kernel
    family, NumPy and OpenBLAS versions).  While such a call runs, BLAS calls made by other
    threads of the process run single-threaded too (the BLAS thread count is process-wide).
    When the BLAS library cannot be controlled (:func:`blas_info`), setting it has no effect.

Every public op runs inside :func:`numerics`: ``np.errstate(all="ignore")`` — NaN and Inf
propagate as IEEE arithmetic does and are never reported as RuntimeWarning, nor raised as
FloatingPointError under ``np.seterr(all="raise")`` — plus the single-thread BLAS scope when
``deterministic`` is set.  :func:`public_op` applies it to a function.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import threading

import numpy as np

BACKENDS = ("native", "numpy")

deterministic: bool = os.environ.get("FUSEDRNN_DETERMINISTIC", "").strip().lower() in ("1", "true", "yes", "on")

_SET_NAMES = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads",
              "openblas_set_num_threads64_", "openblas_set_num_threads")
_GET_NAMES = ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads",
              "openblas_get_num_threads64_", "openblas_get_num_threads")


class _Blas:
    """The thread control of the OpenBLAS library NumPy loaded, found once, lazily."""

    def __init__(self):
        self.path = None
        self._set = self._get = None
        for path in self._candidates():
            try:
                lib = ctypes.CDLL(path)
            except OSError:
                continue
            setter = next((getattr(lib, n) for n in _SET_NAMES if hasattr(lib, n)), None)
            getter = next((getattr(lib, n) for n in _GET_NAMES if hasattr(lib, n)), None)
            if setter is not None and getter is not None:
                setter.argtypes, setter.restype = [ctypes.c_int], None
                getter.argtypes, getter.restype = [], ctypes.c_int
                self.path, self._set, self._get = path, setter, getter
                break

    @staticmethod
    def _candidates() -> list:
        """Shared libraries already mapped into this process whose name mentions openblas."""
        found = []
        try:
            with open("/proc/self/maps") as handle:
                for line in handle:
                    path = line.split()[-1] if len(line.split()) >= 6 else ""
                    if "openblas" in os.path.basename(path).lower() and path not in found:
                        found.append(path)
        except OSError:
            pass
        if not found:  # macOS / Windows: look next to NumPy
            import glob
            base = os.path.dirname(os.path.dirname(np.__file__))
            for pattern in ("numpy.libs/*openblas*", "numpy/.dylibs/*openblas*", "numpy.libs/*openblas*.dll"):
                found += glob.glob(os.path.join(base, pattern))
        return found

    @property
    def controllable(self) -> bool:
        return self._set is not None

    def get(self) -> int:
        return int(self._get())

    def set(self, n: int) -> None:
        self._set(int(n))


_blas: _Blas | None = None
_blas_lock = threading.Lock()
_single_depth = 0
_saved_threads = None


def _get_blas() -> _Blas:
    global _blas
    if _blas is None:
        with _blas_lock:
            if _blas is None:
                _blas = _Blas()
    return _blas


def blas_info() -> dict:
    """``{"library": path or None, "controllable": bool, "threads": int or None}``."""
    blas = _get_blas()
    return {"library": blas.path, "controllable": blas.controllable,
            "threads": blas.get() if blas.controllable else None}


@contextlib.contextmanager
def single_thread_blas():
    """Run the body with BLAS on one thread (reference-counted across threads; a no-op when the
    BLAS library cannot be controlled).  The previous thread count is restored when the last
    concurrent user leaves."""
    global _single_depth, _saved_threads
    blas = _get_blas()
    if not blas.controllable:
        yield
        return
    with _blas_lock:
        if _single_depth == 0:
            _saved_threads = blas.get()
            blas.set(1)
        _single_depth += 1
    try:
        yield
    finally:
        with _blas_lock:
            _single_depth -= 1
            if _single_depth == 0:
                blas.set(_saved_threads)


class numerics:
    """The context of one op call (``with numerics(): ...``): IEEE propagation without warnings;
    one BLAS thread when :data:`deterministic` is set.  A class rather than a generator context
    manager: every public op enters it, and a cold call pays for each frame it runs."""

    __slots__ = ("_errstate", "_blas")

    def __enter__(self):
        self._errstate, self._blas = np.errstate(all="ignore"), None
        self._errstate.__enter__()
        if deterministic:
            blas = single_thread_blas()
            try:
                blas.__enter__()
            except BaseException:
                self._errstate.__exit__(None, None, None)
                raise
            self._blas = blas
        return self

    def __exit__(self, *exc_info):
        try:
            if self._blas is not None:
                self._blas.__exit__(*exc_info)
        finally:
            self._errstate.__exit__(*exc_info)
        return False


def public_op(function):
    """Decorator: run ``function`` inside :func:`numerics`, after asking the native engine's
    sleeping workers to start waking up (:func:`wake_native_team`)."""

    @functools.wraps(function)
    def op(*args, **kwargs):
        wake_native_team()
        with numerics():
            return function(*args, **kwargs)

    return op


def wake_native_team() -> None:
    """With the native backend and more than one thread, the team's sleeping workers start
    waking up now, so that their wake-up (up to milliseconds for a halted vCPU) overlaps the
    call's validation and allocation instead of delaying its first native job.  Touches no
    data; a no-op otherwise."""
    if _num_threads < 2 or (getattr(_backend_override, "name", None) or _requested_backend) == "numpy":
        return
    module = _native_state.get("module")  # never loads it: the first call's wake-up is moot
    if module is not None:
        module.wake_team()


# --------------------------------------------------------------------------------------
# Backend, threads and instruction set of the native engine


def _env_choice(name: str, choices: tuple) -> str | None:
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return None
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
    return value


def _default_threads() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _env_threads() -> int:
    value = os.environ.get("FUSEDRNN_NUM_THREADS", "").strip()
    if not value:
        return _default_threads()
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"FUSEDRNN_NUM_THREADS must be a positive integer, got {value!r}")
    return int(value)


_requested_backend: str | None = _env_choice("FUSEDRNN_BACKEND", BACKENDS)
_backend_override = threading.local()
_num_threads: int = _env_threads()
_native_state: dict = {}
_native_lock = threading.Lock()


def _load_native():
    """The extension module, or None (the error is kept for :func:`backend_info`).  Applies
    ``FUSEDRNN_ISA`` once, when it is first loaded."""
    if "module" not in _native_state:
        with _native_lock:
            if "module" not in _native_state:
                try:
                    from . import _native as module
                except ImportError as error:
                    _native_state["error"] = f"{type(error).__name__}: {error}"
                    module = None
                if module is not None:
                    isa = os.environ.get("FUSEDRNN_ISA", "").strip().lower()
                    if isa:
                        module.set_isa(isa)  # ValueError naming the available ones
                _native_state["module"] = module
    return _native_state["module"]


def native_module():
    """The native extension for the engines; ImportError (with the cause) when it is missing."""
    module = _load_native()
    if module is None:
        raise ImportError("the fusedrnn native extension (fusedrnn._native) is not available: "
                          f"{_native_state['error']}; reinstall with a C++17 compiler "
                          "(pip install -e .) or use FUSEDRNN_BACKEND=numpy")
    return module


def get_backend() -> str:
    """The backend the ops use now in this thread: ``"native"`` or ``"numpy"``."""
    name = getattr(_backend_override, "name", None) or _requested_backend
    if name is None:
        return "native" if _load_native() is not None else "numpy"
    if name == "native":
        native_module()  # explicit request: a missing extension is an error, never a switch
    return name


def _check_backend(name: str) -> str:
    if name not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {name!r}")
    if name == "native":
        native_module()
    return name


def set_backend(name: str | None) -> None:
    """Select the backend for the whole process (``None``: back to the default)."""
    global _requested_backend
    _requested_backend = None if name is None else _check_backend(name)


@contextlib.contextmanager
def backend(name: str):
    """Use backend ``name`` in the body (this thread only)."""
    previous = getattr(_backend_override, "name", None)
    _backend_override.name = _check_backend(name)
    try:
        yield
    finally:
        _backend_override.name = previous


def release_cached_memory() -> None:
    """Frees the memory fusedrnn keeps for reuse between calls: the idle blocks of its arrays'
    pool (:mod:`fusedrnn.engines.buffers`, at most 256 MiB) and the native kernels' recycled
    workspaces (at most 256 MiB).  Arrays in use are untouched; later calls allocate afresh."""
    from .engines import buffers

    buffers.clear_pool()
    module = _native_state.get("module")  # never loads it
    if module is not None:
        module.release_cached_workspaces()


def set_num_threads(n: int) -> None:
    """Team size of the native engine (results do not depend on it)."""
    global _num_threads
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"num_threads must be a positive integer, got {n!r}")
    _num_threads = int(n)


def get_num_threads() -> int:
    return _num_threads


def set_isa(name: str | None) -> None:
    """Instruction set of the native kernels (``None``: the best this CPU supports)."""
    module = native_module()
    module.set_isa(module.supported_isas()[0] if name is None else name)


def backend_info() -> dict:
    """What runs the ops: ``backend``, ``isa`` (None without the extension), ``supported_isas``,
    ``num_threads``, ``native_available``, ``native_error`` (str or None), and ``modes``: the
    backend each engine uses (every mode of the native backend is native)."""
    module = _load_native()
    try:
        active = get_backend()
    except ImportError:
        active = "unavailable (FUSEDRNN_BACKEND=native)"
    engines = ("lstm", "gru", "rnn_tanh", "rnn_relu", "block_lstm", "gru_block_cell")
    modes = {mode: active for mode in engines}
    modes["gru_block_cell"] = "numpy"  # a single cell: the NumPy engine always
    return {
        "backend": active,
        "isa": None if module is None else module.isa(),
        "supported_isas": [] if module is None else list(module.supported_isas()),
        "num_threads": _num_threads,
        "native_available": module is not None,
        "native_error": _native_state.get("error"),
        "modes": modes,
    }
