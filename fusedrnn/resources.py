"""Memory estimates: refuse a call that cannot fit before allocating anything.

Every op estimates the bytes it will allocate from the validated shapes (Python
integers: no int32 overflow is possible) and raises ``MemoryError`` naming the
bytes and the shape when the estimate exceeds the memory available, instead of
letting the operating system kill the process half-way through.

The limit is the smallest of: ``MemAvailable`` from ``/proc/meminfo``, the cgroup
limit (v2 ``memory.max`` / v1 ``memory.limit_in_bytes``) minus current usage, and the
``FUSEDRNN_MEMORY_LIMIT`` environment variable (bytes) when it is set.
"""

from __future__ import annotations

import os
import time


def _read_int(path: str) -> int | None:
    try:
        with open(path) as handle:
            text = handle.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _meminfo_available() -> int | None:
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def available_memory() -> int | None:
    """Bytes this process may still allocate, or None when it cannot be determined."""
    return _available(_system_available())


def _available(system: int | None) -> int | None:
    """The smaller of ``system`` (:func:`_system_available`) and ``FUSEDRNN_MEMORY_LIMIT``."""
    override = os.environ.get("FUSEDRNN_MEMORY_LIMIT")
    if override:
        try:
            limit = int(float(override))
        except ValueError:
            return system
        return limit if system is None else min(limit, system)
    return system


def _system_available() -> int | None:
    """``MemAvailable`` and the cgroup's limit less its usage (the smaller), else the free
    physical pages, else None (files read on every call)."""
    candidates = []
    meminfo = _meminfo_available()
    if meminfo is not None:
        candidates.append(meminfo)
    for limit_path, usage_path in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        limit = _read_int(limit_path)
        if limit is not None and limit < 1 << 60:
            candidates.append(max(limit - (_read_int(usage_path) or 0), 0))
    if not candidates:
        try:
            candidates.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (ValueError, OSError, AttributeError):
            return None
    return min(candidates)


SMALL_CALL_BYTES = 64 * 2**20
# A reading of the system's available memory is reused for this many seconds by calls that need
# at most a quarter of it (reading /proc and the cgroup files costs ~0.2 ms a call).
READING_REUSE_S = 1.0
_last_reading: list = [float("-inf"), None]  # [time.monotonic() of the reading, bytes or None]
_ENVIRON_DATA = getattr(os.environ, "_data", None)  # CPython's encoded copy, updated with os.environ
_LIMIT_KEY = os.environ.encodekey("FUSEDRNN_MEMORY_LIMIT") if _ENVIRON_DATA is not None else None


def must_check(nbytes: int) -> bool:
    """Whether :func:`ensure_fits` looks up the available memory for an estimate of ``nbytes``:
    from :data:`SMALL_CALL_BYTES` up, or whenever ``FUSEDRNN_MEMORY_LIMIT`` is set."""
    return nbytes >= SMALL_CALL_BYTES or _limit_is_set()


def _limit_is_set() -> bool:
    """``FUSEDRNN_MEMORY_LIMIT`` is set to a non-empty value (read on every call: a test may
    set it at run time), without ``os.environ.get``'s KeyError and key encoding per call."""
    if _ENVIRON_DATA is None:
        return bool(os.environ.get("FUSEDRNN_MEMORY_LIMIT"))
    return bool(_ENVIRON_DATA.get(_LIMIT_KEY))


def ensure_fits(nbytes: int, op: str, detail) -> None:
    """Raise MemoryError if ``nbytes`` (an estimate) exceeds the available memory; ``detail``
    (the shapes, for the message) is a string or a function that returns one.

    Calls estimated below ``SMALL_CALL_BYTES`` skip the (file-reading) lookup of the available
    memory, unless ``FUSEDRNN_MEMORY_LIMIT`` is set; a call that needs at most a quarter of the
    last reading, taken less than ``READING_REUSE_S`` ago, reuses it.
    """
    if not must_check(nbytes):
        return
    read_at, system = _last_reading
    now = time.monotonic()
    if system is None or now - read_at > READING_REUSE_S or nbytes > system // 4:
        system = _system_available()
        _last_reading[:] = [now, system]
    available = _available(system)
    if available is not None and nbytes > available:
        detail = detail() if callable(detail) else detail
        raise MemoryError(f"{op} needs about {nbytes:,} bytes ({nbytes / 2**30:.2f} GiB) for {detail}, "
                          f"but only {available:,} bytes are available")


def nbytes_of(shapes, itemsize: int) -> int:
    """Bytes of a list of array shapes of one itemsize (exact Python integers)."""
    total = 0
    for shape in shapes:
        count = 1
        for dim in shape:
            count *= int(dim)
        total += count
    return total * itemsize
