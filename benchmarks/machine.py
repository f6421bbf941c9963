"""The machine: CPU, cores, library versions, BLAS, and its peak measured by a large sgemm.

Peak: ``numpy.matmul`` of two float32 ``[n, n]`` matrices (``2 n^3`` FLOPs), best of ``reps``, on
one BLAS thread and on the worker's thread count.  The one-thread figure is taken inside
``threadpoolctl.threadpool_limits(1)`` when threadpoolctl is installed, else inside
``fusedrnn.settings.single_thread_blas()`` (OpenBLAS's own ``openblas_set_num_threads``); which
one is recorded.  The peak the suite divides by for ``n`` threads is ``n x`` the one-thread
sgemm (the hardware limit a perfectly parallel code could reach); the measured ``n``-thread
sgemm is recorded beside it.  Each worker measures before and after its problems and keeps the
better figures (a busy neighbour during one measurement would otherwise understate the peak).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import io
import os
import platform
import time

import numpy as np

LIBRARIES = ("numpy", "torch", "tensorflow-cpu", "tensorflow", "keras", "onnx", "onnxruntime", "jax",
             "jaxlib", "threadpoolctl", "matplotlib")


def _one_thread_blas():
    try:
        from threadpoolctl import threadpool_limits
        return threadpool_limits(1, user_api="blas"), "threadpoolctl.threadpool_limits(1)"
    except ImportError:
        from fusedrnn.settings import single_thread_blas
        return single_thread_blas(), "fusedrnn.settings.single_thread_blas() (openblas_set_num_threads)"


def sgemm_gflops(n: int, reps: int) -> float:
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
    out = np.empty((n, n), np.float32)
    np.matmul(a, b, out=out)
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        np.matmul(a, b, out=out)
        best = min(best, time.perf_counter() - start)
    return 2.0 * n ** 3 / best / 1e9


def peak(threads: int, n: int = 3072, reps: int = 3) -> dict:
    """One- and ``threads``-thread large-sgemm GFLOP/s and the peak used for ``threads``."""
    scope, how = _one_thread_blas()
    with scope:
        one = sgemm_gflops(n, reps)
    many = sgemm_gflops(n, reps) if threads > 1 else one
    return {"sgemm_n": n, "sgemm_1thread_gflops": one, f"sgemm_{threads}threads_gflops": many,
            "peak_gflops": threads * one, "one_thread_set_by": how}


def openblas_kernel() -> dict:
    """OpenBLAS's own ``get_corename`` / ``get_config`` of the library NumPy loaded (ctypes)."""
    import ctypes

    from fusedrnn.settings import blas_info

    path = blas_info()["library"]
    found = {"library": path}
    if path is None:
        return found
    lib = ctypes.CDLL(path)
    for key, names in (("corename", ("scipy_openblas_get_corename64_", "scipy_openblas_get_corename",
                                     "openblas_get_corename64_", "openblas_get_corename")),
                       ("config", ("scipy_openblas_get_config64_", "scipy_openblas_get_config",
                                   "openblas_get_config64_", "openblas_get_config"))):
        function = next((getattr(lib, n) for n in names if hasattr(lib, n)), None)
        if function is not None:
            function.restype = ctypes.c_char_p
            found[key] = function().decode()
    return found


def best_peak(first: dict, second: dict) -> dict:
    """The better of two :func:`peak` measurements, field by field; both kept in ``measurements``."""
    best = {key: max(first[key], second[key]) if key.endswith("gflops") else first[key] for key in first}
    best["measurements"] = [first, second]
    return best


def blas() -> dict:
    """BLAS libraries and kernels (threadpoolctl when installed, and OpenBLAS's own report) and
    NumPy's build config."""
    info = {"openblas": openblas_kernel()}
    try:
        from threadpoolctl import threadpool_info
        info["threadpoolctl"] = threadpool_info()
    except ImportError:
        info["threadpoolctl"] = None
    try:
        info["numpy_config"] = np.show_config(mode="dicts")
    except TypeError:  # NumPy < 1.25 prints only
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            np.show_config()
        info["numpy_config"] = buffer.getvalue()
    return info


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flags() -> list:
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("flags"):
                    flags = line.split(":", 1)[1].split()
                    return sorted(f for f in flags if f.startswith(("avx", "fma", "amx")) or f == "f16c")
    except OSError:
        pass
    return []


def describe() -> dict:
    """What the JSON records about the machine (no framework is imported here)."""
    versions = {}
    for name in LIBRARIES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = os.cpu_count()
    return {"cpu": cpu_model(), "cpu_flags": cpu_flags(), "logical_cpus": os.cpu_count(),
            "usable_cpus": affinity, "platform": platform.platform(), "python": platform.python_version(),
            "versions": versions, "loadavg": list(os.getloadavg()), "blas": blas()}
