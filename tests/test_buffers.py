"""The pool of recycled arrays (fusedrnn/engines/buffers.py): a block is reused only once no
array refers to it, never while an output, a view or a temporary still does; the caps hold; a
block freed where the pool's lock is held (another thread, a collection inside the pool) is
filed later, never lost and never a deadlock."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import fusedrnn
from fusedrnn.engines import buffers
from tests.cudnn_helpers import Case, backprop_v3, forward_v3, make_problem, random_like_outputs

F32 = np.float32
BIG = (256, 1024)  # 1 MiB of float32: pooled


@pytest.fixture(autouse=True)
def empty_pool():
    buffers.clear_pool()
    yield
    buffers.clear_pool()


def _block(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def test_small_arrays_are_not_pooled_and_every_array_is_aligned():
    for shape in [(3,), (7, 5), (0, 4), BIG, (1, 1, buffers.POOL_MIN_BYTES // 4)]:
        a = buffers.aligned_empty(shape, F32)
        assert a.shape == shape and a.dtype == F32 and a.flags.c_contiguous and a.flags.writeable
        assert a.size == 0 or a.ctypes.data % buffers.CACHE_LINE == 0
        pooled = isinstance(a.base, buffers._Lease)
        assert pooled == (a.nbytes >= buffers.POOL_MIN_BYTES)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_aligned_empties(dtype):
    """Small arrays share one block, each on its own cache line and disjoint; past
    POOL_MIN_BYTES in all they are separate arrays (one kept alone keeps only its own memory)."""
    itemsize = np.dtype(dtype).itemsize
    shapes = [(1, 3, 20), (2, 3, 5), (1, 3, 5), (7,), (0, 4)]
    arrays = buffers.aligned_empties(shapes, dtype)
    spans = []
    for array, shape in zip(arrays, shapes):
        assert array.shape == shape and array.dtype == dtype and array.flags.c_contiguous
        assert array.flags.writeable
        start = array.__array_interface__["data"][0]
        assert start % buffers.CACHE_LINE == 0
        spans.append((start, start + array.size * itemsize))
    spans.sort()
    assert all(end <= next_start for (_, end), (next_start, _) in zip(spans, spans[1:]))
    for k, array in enumerate(arrays):
        array.fill(k)
    for k, array in enumerate(arrays):
        assert (array == k).all()
    rows = buffers.POOL_MIN_BYTES // itemsize // 2 + 1
    big = buffers.aligned_empties([(rows,), (rows,)], dtype)
    assert not np.shares_memory(big[0], big[1])
    assert big[0].base is not big[1].base


def test_a_freed_block_is_reused_and_a_live_one_is_not():
    a = buffers.aligned_empty(BIG, F32)
    first = _block(a)
    b = buffers.aligned_empty(BIG, F32)
    assert _block(b) != first  # a is alive
    del a
    assert buffers.pool_idle() == (1, BIG[0] * BIG[1] * 4)
    c = buffers.aligned_empty(BIG, F32)
    assert _block(c) == first and buffers.pool_idle() == (0, 0)


def test_a_view_keeps_its_block():
    a = buffers.aligned_empty(BIG, F32)
    a[...] = 1.0
    view = a[10:20]
    del a
    assert buffers.pool_idle() == (0, 0)
    b = buffers.aligned_zeros(BIG, F32)
    assert not np.shares_memory(b, view)
    assert np.all(view == 1.0) and np.all(b == 0.0)
    del view
    assert buffers.pool_idle()[0] == 1


@pytest.mark.parametrize("request_bytes, reused", [(1 << 20, True), ((1 << 20) - 4096, True),
                                                    ((1 << 19) - 64, False), ((1 << 20) + 64, False)])
def test_a_block_serves_requests_from_half_its_size_to_its_size(request_bytes, reused):
    a = buffers.aligned_empty(1 << 20, np.uint8)
    first = _block(a)
    del a
    b = buffers.aligned_empty(request_bytes, np.uint8)
    assert (_block(b) == first) == reused


def test_caps_on_idle_blocks_and_bytes(monkeypatch):
    monkeypatch.setattr(buffers, "POOL_MAX_BLOCKS", 3)
    arrays = [buffers.aligned_empty(BIG, F32) for _ in range(5)]
    del arrays
    assert buffers.pool_idle() == (3, 3 * BIG[0] * BIG[1] * 4)
    monkeypatch.setattr(buffers, "POOL_MAX_BYTES", 2 * BIG[0] * BIG[1] * 4)
    extra = buffers.aligned_empty((BIG[0] * 4, BIG[1]), F32)  # larger than the cap: never kept
    del extra
    assert buffers.pool_idle() == (2, 2 * BIG[0] * BIG[1] * 4)


def test_blocks_freed_while_the_lock_is_held_are_filed_afterwards():
    a = buffers.aligned_empty(BIG, F32)
    holder = [buffers.aligned_empty(BIG, F32)]
    with buffers._pool._lock:  # as if a collection freed them inside the pool's own methods
        del a  # this thread holds the lock
        other = threading.Thread(target=holder.clear)  # another thread waits for it: no
        other.start()
        other.join(10)
        assert not other.is_alive()
    assert buffers.pool_idle()[0] == 2


def test_blocks_freed_in_other_threads():
    arrays = [buffers.aligned_empty(BIG, F32) for _ in range(4)]
    threads = [threading.Thread(target=arrays.pop) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert buffers.pool_idle()[0] == 4


@pytest.mark.parametrize("mode", ["lstm", "gru", "rnn_tanh"])
def test_outputs_outlive_later_calls(mode):
    """Every output of a training step (forward and backprop) keeps its values while later
    calls of the same shapes run and recycle their temporaries."""
    case = Case(mode=mode, num_layers=1, num_dirs=1, batch=16, max_time=20, num_units=128,
                input_size=128)

    def step(seed):
        prob = make_problem(case, seed, F32)
        fwd = forward_v3(prob)
        return list(fwd.raw) + list(backprop_v3(prob, fwd, random_like_outputs(case, seed, F32)))

    kept = step(1)
    copies = [np.array(a, copy=True) for a in kept]
    assert any(isinstance(a.base, buffers._Lease) for a in kept)
    for seed in range(2, 5):
        step(seed)
    for a, c in zip(kept, copies):
        np.testing.assert_array_equal(a, c)


def test_release_cached_memory_frees_the_idle_blocks():
    a = buffers.aligned_empty(BIG, F32)
    del a
    assert buffers.pool_idle()[0] == 1
    fusedrnn.release_cached_memory()  # also the native kernels' recycled workspaces
    assert buffers.pool_idle() == (0, 0)
    kept = buffers.aligned_empty(BIG, F32)
    kept[...] = 3.0
    fusedrnn.release_cached_memory()
    assert np.all(kept == 3.0)  # in use: untouched
