"""One test per validation rule of the block ops (spec block_ops.md §6, §13.4): the exception
type, the key words of the message (TensorFlow's text where TF 2.21 has one, the recommended
wording where it aborts or accepts the input), and that every input is unchanged afterwards.
Ops are called through :mod:`fusedrnn.raw_ops` by keyword, so one argument table serves all."""

import copy
import inspect

import numpy as np
import pytest

from fusedrnn import raw_ops

T, B, I, N = 3, 2, 4, 5  # the shapes of spec §6's messages
SEQ = ("i", "cs", "f", "o", "ci", "co", "h", "cs_grad", "h_grad")
CELL = ("i", "cs", "f", "o", "ci", "co", "cs_grad", "h_grad")

BLOCK = ("BlockLSTM", "BlockLSTMV2")
BLOCK_GRAD = ("BlockLSTMGrad", "BlockLSTMGradV2")
CELL_OPS = ("LSTMBlockCell", "LSTMBlockCellGrad")
GRU = ("GRUBlockCell", "GRUBlockCellGrad")
ALL = BLOCK + BLOCK_GRAD + CELL_OPS + GRU

_rng = np.random.default_rng(0)


def r(*shape, dtype=np.float32):
    return _rng.uniform(-1, 1, shape).astype(dtype)


def valid(op, dtype=np.float32):
    """Valid keyword arguments for ``op`` (T=3, B=2, I=4, n=5)."""
    rng = np.random.default_rng(1)

    def u(*shape):
        return rng.uniform(-1, 1, shape).astype(dtype)

    lstm = dict(cs_prev=u(B, N), h_prev=u(B, N), w=u(I + N, 4 * N), wci=u(N), wcf=u(N), wco=u(N), b=u(4 * N))
    if op in BLOCK:
        return dict(seq_len_max=np.int64(T), x=u(T, B, I), **lstm)
    if op in BLOCK_GRAD:
        return dict(seq_len_max=np.int64(T), x=u(T, B, I), **lstm, **{k: u(T, B, N) for k in SEQ}, use_peephole=False)
    if op == "LSTMBlockCell":
        return dict(x=u(B, I), **lstm)
    if op == "LSTMBlockCellGrad":
        return dict(x=u(B, I), **lstm, **{k: u(B, N) for k in CELL}, use_peephole=False)
    gru = dict(x=u(B, I), h_prev=u(B, N), w_ru=u(I + N, 2 * N), w_c=u(I + N, N), b_ru=u(2 * N), b_c=u(N))
    if op == "GRUBlockCell":
        return gru
    return dict(gru, r=u(B, N), u=u(B, N), c=u(B, N), d_h=u(B, N))


def case(rule, ops, change, words, error=ValueError):
    return pytest.param(ops, change, error, words, id=rule)


CASES = [
    # --- BlockLSTM / BlockLSTMV2 (spec §6.1), in TF's order
    case("seq_len_max-rank", BLOCK + BLOCK_GRAD, dict(seq_len_max=np.array([T])),
         "`seq_len_max_tensor` must be rank 0 but is rank 1"),
    case("x-3D", BLOCK, dict(x=r(T, B)), "x must be 3D"),
    case("cs_prev-2D", BLOCK, dict(cs_prev=r(B)), "cs_prev must be 2D"),
    case("cs_prev-batch", BLOCK, dict(cs_prev=r(3, N)), "cs_prev.dims(0) != batch_size: 3 vs. 2"),
    case("h_prev-2D", BLOCK, dict(h_prev=r(B, N, 1)), "h_prev must be 2D"),
    case("h_prev-batch", BLOCK, dict(h_prev=r(3, N)), "h_prev.dims(0) != batch_size: 3 vs. 2"),
    case("h_prev-cell", BLOCK, dict(h_prev=r(B, 6)), "h_prev.dims(1) != cell_size: 6 vs. 5"),
    case("cell_size-from-cs_prev", BLOCK, dict(cs_prev=r(B, 6)), "h_prev.dims(1) != cell_size: 5 vs. 6"),
    case("w-2D", BLOCK, dict(w=r(I + N)), "w must be 2D"),
    case("w-rows", BLOCK, dict(w=r(10, 4 * N)), "w.dim_size(0) != input_size + cell_size: 10 vs. 9"),
    case("w-cols", BLOCK, dict(w=r(I + N, 24)), "w.dim_size(1) != cell_size * 4: 24 vs. 20"),
    *[case(f"{p}-1D", BLOCK, {p: r(1, N)}, f"{p} must be 1D") for p in ("wci", "wcf", "wco")],
    *[case(f"{p}-size-without-peephole", BLOCK, {p: r(6)}, f"{p}.dim_size(0) != cell_size: 6 vs. 5")
      for p in ("wci", "wcf", "wco")],
    case("b-1D", BLOCK, dict(b=r(1, 4 * N)), "b must be 1D"),
    case("b-size", BLOCK, dict(b=r(21)), "b.dim_size(0) != cell_size * 4: 21 vs. 20"),
    case("first-failing-check-wins", BLOCK, dict(w=r(10, 4 * N), b=r(21)), "w.dim_size(0) != input_size + cell_size"),
    case("seq_len_max-too-large", BLOCK + BLOCK_GRAD, dict(seq_len_max=np.int64(T + 1)),
         "seq_len_max must be between 0 and 3 but is 4"),
    case("seq_len_max-negative", BLOCK + BLOCK_GRAD, dict(seq_len_max=-1),
         "seq_len_max must be between 0 and 3 but is -1"),
    case("seq_len_max-range-checked-last", BLOCK, dict(seq_len_max=T + 1, b=r(21)), "b.dim_size(0) != cell_size * 4"),
    # --- BlockLSTMGrad / BlockLSTMGradV2 (spec §6.2): TF 2.21's checks, then the ones it lacks
    case("grad-x-rank", BLOCK_GRAD, dict(x=r(T, B)), "x must be rank 3 but is rank 2"),
    *[case(f"grad-{p}-rank", BLOCK_GRAD, {p: r(B)}, f"{p} must be rank 2 but is rank 1")
      for p in ("cs_prev", "h_prev", "w")],
    case("grad-w-rows", BLOCK_GRAD, dict(w=r(11, 4 * N)), "w matrix rows don't match: 9 vs. 11"),
    case("grad-w-rows-empty-columns", BLOCK_GRAD, dict(w=r(9, 0)), "w matrix rows don't match: 4 vs. 9"),
    *[case(f"grad-{p}-rank", BLOCK_GRAD, {p: r(1, N)}, f"{p} must be rank 1 but is rank 2")
      for p in ("wci", "wcf", "wco", "b")],
    case("grad-w-b-cell_size", BLOCK_GRAD, dict(b=r(24)), "w and b cell_size don't match: 5 vs. 24"),
    *[case(f"grad-{k}-rank", BLOCK_GRAD, {k: r(B, N)}, f"{k} must be rank 3. Received: 2") for k in SEQ],
    case("grad-w-cols-multiple-of-4", BLOCK_GRAD, dict(w=r(I + N, 21)),
         "w matrix columns must be a positive multiple of 4, but got 21"),
    case("grad-b-size-4n+3", BLOCK_GRAD, dict(b=r(23)), "w and b cell_size don't match: 5 vs. 23"),
    case("grad-cs_prev-batch", BLOCK_GRAD, dict(cs_prev=r(3, N)), "cs_prev.dims(0) != batch_size: 3 vs. 2"),
    case("grad-cs_prev-cell", BLOCK_GRAD, dict(cs_prev=r(B, 6)), "cs_prev.dims(1) != cell_size: 6 vs. 5"),
    case("grad-h_prev-batch", BLOCK_GRAD, dict(h_prev=r(3, N)), "h_prev.dims(0) != batch_size: 3 vs. 2"),
    case("grad-h_prev-cell", BLOCK_GRAD, dict(h_prev=r(B, 4)), "h_prev.dims(1) != cell_size: 4 vs. 5"),
    *[case(f"grad-{p}-size-without-peephole", BLOCK_GRAD, {p: r(6)}, f"{p}.dim_size(0) != cell_size: 6 vs. 5")
      for p in ("wci", "wcf", "wco")],
    *[case(f"grad-{k}-time", BLOCK_GRAD, {k: r(T + 1, B, N)}, f"{k}.dim_size(0) != time_len: 4 vs. 3") for k in SEQ],
    *[case(f"grad-{k}-batch", BLOCK_GRAD, {k: r(T, 3, N)}, f"{k}.dim_size(1) != batch_size: 3 vs. 2") for k in SEQ],
    *[case(f"grad-{k}-cell", BLOCK_GRAD, {k: r(T, B, 6)}, f"{k}.dim_size(2) != cell_size: 6 vs. 5") for k in SEQ],
    case("grad-tf-checks-before-added-ones", BLOCK_GRAD, dict(cs_prev=r(3, N), b=r(1, 4 * N)),
         "b must be rank 1 but is rank 2"),
    # --- LSTMBlockCell / LSTMBlockCellGrad (spec §6.3, §6.4): sizes, then ranks, then what TF lacks
    case("cell-cs_prev-batch", CELL_OPS, dict(cs_prev=r(3, N)), "cs_prev.dims(0) != batch_size: 3 vs. 2"),
    case("cell-h_prev-batch", CELL_OPS, dict(h_prev=r(3, N)), "h_prev.dims(0) != batch_size: 3 vs. 2"),
    case("cell-h_prev-cell", CELL_OPS, dict(h_prev=r(B, 6)), "h_prev.dims(1) != cell_size: 6 vs. 5"),
    case("cell-w-rows", CELL_OPS, dict(w=r(10, 4 * N)), "w.dim_size(0) != input_size + cell_size: 10 vs. 9"),
    case("cell-w-rows-rank-1", CELL_OPS, dict(w=r(20)), "w.dim_size(0) != input_size + cell_size: 20 vs. 9"),
    case("cell-w-cols", CELL_OPS, dict(w=r(I + N, 24)), "w.dim_size(1) != cell_size * 4: 24 vs. 20"),
    case("cell-b-size", CELL_OPS, dict(b=r(21)), "b.dim_size(0) != cell_size * 4: 21 vs. 20"),
    case("cell-b-size-rank-2", CELL_OPS, dict(b=r(1, 4 * N)), "b.dim_size(0) != cell_size * 4: 1 vs. 20"),
    *[case(f"cell-grad-{k}-batch", ("LSTMBlockCellGrad",), {k: r(3, N)}, f"{k}.dim_size(0) != batch_size: 3 vs. 2")
      for k in CELL[:6]],
    *[case(f"cell-grad-{k}-cell", ("LSTMBlockCellGrad",), {k: r(B, 6)}, f"{k}.dim_size(1) != cell_size: 6 vs. 5")
      for k in CELL[:6]],
    *[case(f"cell-grad-{k}-batch", ("LSTMBlockCellGrad",), {k: r(3, N)}, f"{k}_tensor.dims(0) != batch_size: 3 vs. 2")
      for k in CELL[6:]],
    *[case(f"cell-grad-{k}-cell", ("LSTMBlockCellGrad",), {k: r(B, 6)}, f"{k}_tensor.dims(1) != cell_size: 6 vs. 5")
      for k in CELL[6:]],
    case("cell-x-rank-3", CELL_OPS, dict(x=r(B, I, 1)), ["x_tensor must be rank 2 but is rank 3.", "x must be rank 2"]),
    case("cell-x-rank-1", CELL_OPS, dict(x=r(B)), ["x_tensor must be rank 2 but is rank 1.", "x must be rank 2"]),
    case("cell-x-rank-0", CELL_OPS, dict(x=np.float32(1)), "x must be rank 2"),
    case("cell-cs_prev-rank-1", CELL_OPS, dict(cs_prev=r(B)), "cs_prev must be rank 2"),
    case("cell-cs_prev-rank-3", CELL_OPS, dict(cs_prev=r(B, N, 1)), "cs_prev_tensor must be rank 2 but is rank 3."),
    case("cell-h_prev-rank-1", CELL_OPS, dict(h_prev=r(B)), "h_prev must be rank 2"),
    case("cell-h_prev-rank-0", CELL_OPS, dict(h_prev=np.float32(0)), "h_prev must be rank 2"),
    case("cell-h_prev-rank-3", CELL_OPS, dict(h_prev=r(B, N, 1)), "h_prev_tensor must be rank 2 but is rank 3."),
    case("cell-w-rank-1", CELL_OPS, dict(w=r(I + N)), "w must be rank 2"),
    case("cell-w-rank-3", CELL_OPS, dict(w=r(I + N, 4 * N, 1)), "w_tensor must be rank 2 but is rank 3."),
    *[case(f"cell-{p}-rank", CELL_OPS, {p: r(1, N)}, [f"{p}_tensor must be rank 1 but is rank 2.", f"{p} must be rank 1"])
      for p in ("wci", "wcf", "wco")],
    case("cell-b-rank-2", CELL_OPS, dict(b=r(4 * N, 1)), "b_tensor must be rank 1 but is rank 2."),
    case("cell-b-rank-0", CELL_OPS, dict(b=np.float32(0)), "b must be rank 1"),
    *[case(f"cell-grad-{k}-rank-3", ("LSTMBlockCellGrad",), {k: r(B, N, 1)}, f"{k} must be rank 2") for k in CELL],
    *[case(f"cell-grad-{k}-rank-1", ("LSTMBlockCellGrad",), {k: r(B)}, f"{k} must be rank 2") for k in CELL],
    *[case(f"cell-{p}-size-without-peephole", CELL_OPS, {p: r(3)}, f"{p}.dim_size(0) != cell_size: 3 vs. 5")
      for p in ("wci", "wcf", "wco")],
    case("cell-sizes-before-ranks", CELL_OPS, dict(x=r(B, I, 1), b=r(21)), "b.dim_size(0) != cell_size * 4: 21 vs. 20"),
    case("cell-x-batch-before-b", CELL_OPS, dict(x=r(3, I), b=r(21)), "cs_prev.dims(0) != batch_size: 2 vs. 3"),
    # --- GRUBlockCell / GRUBlockCellGrad (spec §6.5)
    case("gru-x-rank", GRU, dict(x=r(B)), "Rank of x must be 2, got 1"),
    case("gru-h_prev-rank", GRU, dict(h_prev=r(B, N, 1)), "Rank of h_prev must be 2, got 3"),
    case("gru-h_prev-batch", GRU, dict(h_prev=r(3, N)), "h_prev.dims(0) != batch_size: 3 vs. 2"),
    case("gru-w_ru-rank", GRU, dict(w_ru=r(10)), "Rank of w_ru must be 2, got 1"),
    case("gru-w_ru-rows", GRU, dict(w_ru=r(10, 2 * N)), "w_ru.dim_size(0) != input_size + cell_size: 10 vs. 9"),
    case("gru-w_ru-cols", GRU, dict(w_ru=r(I + N, 11)), "w_ru.dim_size(1) != cell_size * 2: 11 vs. 10"),
    case("gru-w_c-rank", GRU, dict(w_c=r(9)), "Rank of w_c must be 2, got 1"),
    case("gru-w_c-rows", GRU, dict(w_c=r(10, N)), "w_c.dim_size(0) != input_size + cell_size: 10 vs. 9"),
    case("gru-w_c-cols", GRU, dict(w_c=r(I + N, 6)), "w_c.dim_size(1) != cell_size: 6 vs. 5"),
    case("gru-b_ru-rank", GRU, dict(b_ru=r(1, 2 * N)), "Rank of b_ru must be 1, got 2"),
    case("gru-b_ru-size", GRU, dict(b_ru=r(11)), "b_ru.dim_size(0) != cell_size * 2: 11 vs. 10"),
    case("gru-b_c-rank", GRU, dict(b_c=r(1, N)), "Rank of b_c must be 1, got 2"),
    case("gru-b_c-size", GRU, dict(b_c=r(6)), "b_c.dim_size(0) != cell_size: 6 vs. 5"),
    *[case(f"gru-grad-{k}-rank", ("GRUBlockCellGrad",), {k: r(B)}, f"Rank of {k} must be 2, got 1")
      for k in ("r", "u", "c", "d_h")],
    *[case(f"gru-grad-{k}-batch", ("GRUBlockCellGrad",), {k: r(3, N)}, f"{k}.dims(0) != batch_size: 3 vs. 2")
      for k in ("r", "u", "c", "d_h")],
    *[case(f"gru-grad-{k}-cell", ("GRUBlockCellGrad",), {k: r(B, 6)}, f"{k}.dims(1) != cell_size: 6 vs. 5")
      for k in ("r", "u", "c", "d_h")],
    # --- types (TypeError), checked before any shape
    case("dtype-mixed", ALL, dict(x="float64"), ["share one dtype", "float32", "float64"], TypeError),
    case("dtype-int", ALL, dict(x="int32"), ["floating dtype", "int32"], TypeError),
    case("dtype-bool", ALL, dict(x="bool"), ["floating dtype", "bool"], TypeError),
    case("dtype-object", ALL, dict(x="object"), ["floating dtype", "object"], TypeError),
    case("dtype-string", ALL, dict(x="str"), ["floating dtype"], TypeError),
    case("dtype-before-shape", ALL, dict(x="int32", h_prev=r(7)), "floating dtype", TypeError),
    case("seq_len_max-float", BLOCK + BLOCK_GRAD, dict(seq_len_max=2.0), "seq_len_max must be an integer", TypeError),
    case("seq_len_max-float-array", BLOCK + BLOCK_GRAD, dict(seq_len_max=np.array([2.0])),
         "seq_len_max must be an integer", TypeError),
    case("seq_len_max-bool", BLOCK + BLOCK_GRAD, dict(seq_len_max=True), "seq_len_max must be an integer", TypeError),
    case("use_peephole-not-bool", BLOCK + BLOCK_GRAD + CELL_OPS, dict(use_peephole=1), "use_peephole must be a bool",
         TypeError),
    case("cell_clip-not-float", BLOCK + ("LSTMBlockCell",), dict(cell_clip="3"), "cell_clip must be a float",
         TypeError),
    case("forget_bias-not-float", ("BlockLSTM", "LSTMBlockCell"), dict(forget_bias=None),
         "forget_bias must be a float", TypeError),
]


def _expand(params):
    for p in params:
        ops, change, error, words = p.values
        for op in ops:
            yield pytest.param(op, change, error, [words] if isinstance(words, str) else words,
                               id=f"{p.id}[{op}]")


def _apply(op, change):
    kwargs = valid(op)
    for key, value in change.items():
        if key == "x" and isinstance(value, str):  # a dtype for x
            kwargs["x"] = kwargs["x"].astype(value)
        else:
            kwargs[key] = value
    return kwargs


def _assert_unchanged(before, after):
    for key, value in before.items():
        if isinstance(value, np.ndarray):
            assert after[key].dtype == value.dtype and after[key].shape == value.shape, key
            assert np.array_equal(after[key], value), f"{key} was modified"


@pytest.mark.parametrize("op, change, error, words", list(_expand(CASES)))
def test_validation_rule(op, change, error, words):
    kwargs = _apply(op, change)
    before = copy.deepcopy(kwargs)
    with pytest.raises(error) as info:
        getattr(raw_ops, op)(**kwargs)
    for word in words:
        assert word in str(info.value), f"{word!r} not in {str(info.value)!r}"
    _assert_unchanged(before, kwargs)


@pytest.mark.parametrize("op", ALL)
def test_valid_inputs_pass(op):
    """The base arguments of the table above are valid (so each rule tests one thing)."""
    kwargs = valid(op)
    before = copy.deepcopy(kwargs)
    getattr(raw_ops, op)(**kwargs)
    _assert_unchanged(before, kwargs)


@pytest.mark.parametrize("op", BLOCK_GRAD + ("LSTMBlockCellGrad",))
def test_use_peephole_is_required_for_the_grad_ops(op):
    kwargs = valid(op)
    del kwargs["use_peephole"]
    with pytest.raises(TypeError, match="use_peephole"):
        getattr(raw_ops, op)(**kwargs)
    assert inspect.signature(getattr(raw_ops, op)).parameters["use_peephole"].default is inspect.Parameter.empty


@pytest.mark.parametrize("op", ["BlockLSTMV2"])
def test_v2_has_no_forget_bias(op):
    with pytest.raises(TypeError, match="forget_bias"):
        getattr(raw_ops, op)(**valid(op), forget_bias=1.0)


@pytest.mark.parametrize("op", ALL)
def test_float64_and_float16_are_accepted(op):
    """TF rejects float64 (and float16 for the GRU ops); fusedrnn accepts both (spec §13.3)."""
    for dtype in (np.float64, np.float16):
        out = getattr(raw_ops, op)(**valid(op, dtype))
        assert all(x.dtype == dtype for x in out)
