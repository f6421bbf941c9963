"""The arrays the ops allocate: cache-line aligned, and the large ones recycled across calls.

Why recycle: a training step of a mid-sized problem allocates tens of MiB of arrays (the
reserve, the gate gradients, the flat weight gradient, ...) and frees them when it returns.
glibc returns such blocks to the kernel (``munmap``, or trimming the heap once more than
``M_TRIM_THRESHOLD`` is free at its top), so the next call faults every page in again, and the
kernel zeroes each one: measured on a 2-vCPU VM, 2 946 page faults and 8.7 ms of system time in
a 53 ms LSTM training step (H = 256, B = 16, T = 50).  The pool keeps freed blocks of at least
:data:`POOL_MIN_BYTES` (at most :data:`POOL_MAX_BLOCKS` blocks, :data:`POOL_MAX_BYTES` in all,
the oldest dropped first) and hands one out again for a request of at most its size and at
least half of it.

How a block comes back: the array handed out is a view of a small *lease* object (its NumPy
``base``, through ``__array_interface__``) that holds the block; when the last array or view of
it is gone, CPython frees the lease, whose ``__del__`` returns the block.  A block is therefore
never reused while any array, returned output or not, still refers to it.  The native engine's
own workspaces are recycled the same way in C++ (``csrc/workspace.cc``).
"""

from __future__ import annotations

import collections
import ctypes
import math
import os
import threading

import numpy as np

CACHE_LINE = 64
POOL_MIN_BYTES = 128 << 10
POOL_MAX_BYTES = 256 << 20
POOL_MAX_BLOCKS = 32


class _BufferPool:
    """Idle raw blocks (uint8 arrays of ``size + CACHE_LINE`` bytes), oldest first.

    A lease's ``__del__`` may run anywhere, even inside this class's own methods (a garbage
    collection there), so it never waits for the lock: it appends its block to ``_returned``
    (a deque: appends are atomic) and files it only if it gets the lock at once; otherwise the
    holder files it before releasing the lock."""

    def __init__(self):
        self._lock = threading.Lock()
        self._returned = collections.deque()
        self._idle: list = []  # [(size, raw)], oldest first
        self._idle_bytes = 0

    def _file_returned(self) -> list:
        """Move the returned blocks to the idle list (lock held); the blocks beyond the caps,
        oldest first, are returned to be dropped once the lock is released."""
        dropped = []
        while self._returned:
            raw = self._returned.popleft()
            size = raw.nbytes - CACHE_LINE
            if size > POOL_MAX_BYTES:
                dropped.append(raw)
                continue
            self._idle.append((size, raw))
            self._idle_bytes += size
        while self._idle_bytes > POOL_MAX_BYTES or len(self._idle) > POOL_MAX_BLOCKS:
            size, raw = self._idle.pop(0)
            self._idle_bytes -= size
            dropped.append(raw)
        return dropped

    def take(self, nbytes: int) -> np.ndarray:
        """A raw block of at least ``nbytes`` (+ a cache line) bytes: the smallest idle one
        that fits and is at most twice the request, else a new one."""
        raw = None
        with self._lock:
            dropped = self._file_returned()
            best = -1
            for i in range(len(self._idle)):
                size = self._idle[i][0]
                if nbytes <= size <= 2 * nbytes and (best < 0 or size < self._idle[best][0]):
                    best = i
            if best >= 0:
                size, raw = self._idle.pop(best)
                self._idle_bytes -= size
            dropped += self._file_returned()
        del dropped
        return raw if raw is not None else np.empty(nbytes + CACHE_LINE, dtype=np.uint8)

    def give_back(self, raw: np.ndarray) -> None:
        self._returned.append(raw)
        if self._lock.acquire(blocking=False):
            try:
                dropped = self._file_returned()
            finally:
                self._lock.release()
            del dropped

    def clear(self) -> None:
        with self._lock:
            self._file_returned()
            dropped, self._idle, self._idle_bytes = self._idle, [], 0
        del dropped

    def idle(self) -> tuple[int, int]:
        """(idle blocks, idle bytes)."""
        with self._lock:
            dropped = self._file_returned()
            result = len(self._idle), self._idle_bytes
        del dropped
        return result


_pool = _BufferPool()


def _reset_after_fork() -> None:
    global _pool
    _pool = _BufferPool()  # the parent's lock may have been held at the fork


os.register_at_fork(after_in_child=_reset_after_fork)


def _address(raw: np.ndarray) -> int:
    """The address of a writable array's data (0.7 µs; ``raw.ctypes.data`` takes 3 µs)."""
    return ctypes.addressof(ctypes.c_char.from_buffer(raw))


class _Lease:
    """Owner of one pooled block while arrays refer to it (their ``base``)."""

    __slots__ = ("_raw", "__array_interface__")

    def __init__(self, raw: np.ndarray, shape: tuple, dtype: np.dtype):
        self._raw = raw
        address = _address(raw)
        self.__array_interface__ = {"data": (address - address % -CACHE_LINE, False),
                                    "shape": shape, "typestr": dtype.str, "version": 3}

    def __del__(self):
        pool = _pool
        if pool is not None:  # None only while the interpreter shuts down
            pool.give_back(self._raw)


def aligned_empty(shape, dtype) -> np.ndarray:
    """``np.empty(shape, dtype)`` whose data starts on a 64-byte cache line (NumPy's large
    arrays start 16 bytes past one), from the pool when it has :data:`POOL_MIN_BYTES` or more.
    The native engine's threads write disjoint column ranges of such arrays every step; on a
    boundary that is not a line boundary both would write one line, which then moves between
    their cores every step."""
    if not isinstance(dtype, np.dtype):
        dtype = np.dtype(dtype)
    if type(shape) is not tuple:
        shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(shape)
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes < POOL_MIN_BYTES:
        raw = np.empty(nbytes + CACHE_LINE, dtype=np.uint8)
        return np.ndarray(shape, dtype, raw, -_address(raw) % CACHE_LINE)
    return np.asarray(_Lease(_pool.take(nbytes), shape, dtype))


def aligned_empties(shapes: list, dtype) -> list:
    """``[aligned_empty(shape, dtype) for shape in shapes]``; arrays of fewer than
    :data:`POOL_MIN_BYTES` in all are views of one block, each on a cache line of its own (one
    allocation instead of several: a one-step call's fixed cost), larger ones separate (an
    array kept alone must not keep the others' memory)."""
    dtype = np.dtype(dtype)
    offsets, total = [], 0
    for shape in shapes:
        offsets.append(total)
        total += -(-math.prod(shape) * dtype.itemsize // CACHE_LINE) * CACHE_LINE
    if total >= POOL_MIN_BYTES:
        return [aligned_empty(shape, dtype) for shape in shapes]
    raw = np.empty(total + CACHE_LINE, dtype=np.uint8)
    start = -_address(raw) % CACHE_LINE
    return [np.ndarray(tuple(shape), dtype, raw, start + offset) for shape, offset in zip(shapes, offsets)]


def aligned_zeros(shape, dtype) -> np.ndarray:
    """:func:`aligned_empty`, filled with zeros."""
    out = aligned_empty(shape, dtype)
    out.fill(0)
    return out


def aligned_copy(a: np.ndarray, dtype) -> np.ndarray:
    """A C-contiguous, cache-line aligned copy of ``a`` in ``dtype``."""
    out = aligned_empty(a.shape if type(a) is np.ndarray else np.shape(a), dtype)
    out[...] = a
    return out


def clear_pool() -> None:
    """Drop every idle block (the memory goes back to the allocator)."""
    _pool.clear()


def pool_idle() -> tuple[int, int]:
    """``(blocks, bytes)`` idle in the pool."""
    return _pool.idle()
