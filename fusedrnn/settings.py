"""Run-time settings, and the numerics context every public op runs in.

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


@contextlib.contextmanager
def numerics():
    """The context of one op call: IEEE propagation without warnings; one BLAS thread when
    :data:`deterministic` is set."""
    with np.errstate(all="ignore"):
        if deterministic:
            with single_thread_blas():
                yield
        else:
            yield


def public_op(function):
    """Decorator: run ``function`` inside :func:`numerics`."""

    @functools.wraps(function)
    def op(*args, **kwargs):
        with numerics():
            return function(*args, **kwargs)

    return op
