"""Property-based fuzzing of every public op, crash-isolated in subprocesses (issue 4, items 1-2).

``test_fuzz[op]`` runs ``python -m tests.fuzz.run --op <op>`` in a child process with a timeout:
a segfault, an abort or a hang fails that one test (reporting the example that was running)
instead of killing pytest; an ordinary property failure reports hypothesis' shrunk example.
The budget is ``FUSEDRNN_FUZZ_EXAMPLES`` examples per op (default 200, seed 0: deterministic in
CI).  Long run (random seed, printed; docs/hardening.md)::

    FUSEDRNN_FUZZ_EXAMPLES=5000 python -m pytest tests/test_fuzz.py -k "test_fuzz["

``test_regression`` replays, in-process, the minimal examples of every defect the fuzzer found.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import fusedrnn  # noqa: E402
from tests.fuzz import cases  # noqa: E402
from tests.fuzz.harness import check_example, run_child  # noqa: E402
from tests.fuzz.run import parse_example  # noqa: E402

EXAMPLES = int(os.environ.get("FUSEDRNN_FUZZ_EXAMPLES", "200"))
#: per-op child timeout: generous for CI, scaled for long runs (about 20 ms per example here)
TIMEOUT = max(120.0, 0.5 * EXAMPLES)


@pytest.mark.parametrize("op", list(cases.SPECS))
def test_fuzz(op):
    result = run_child(["--op", op, "--examples", str(EXAMPLES)], timeout=TIMEOUT)
    assert result.ok, result.report()


def test_every_public_op_is_fuzzed():
    public = {name for name in fusedrnn.__all__ if name[0].islower() and name != "raw_ops"}
    assert public == set(cases.SPECS)
    assert {spec.raw for spec in cases.SPECS.values()} == set(fusedrnn.raw_ops.__all__)


# --------------------------------------------------------------------------------------
# The isolation itself


def test_isolation_reports_an_abort():
    result = run_child(["--selftest", "abort", "--examples", "50"], timeout=60)
    assert not result.ok
    assert result.crash_signal == "SIGABRT", result.report()
    report = result.report()
    assert "CRASHED with SIGABRT" in report and "selftest abort n=" in report


def test_isolation_reports_a_segfault():
    result = run_child(["--selftest", "segfault", "--examples", "50"], timeout=60)
    assert result.crash_signal == "SIGSEGV", result.report()
    assert "selftest segfault n=" in result.report()
    assert "Fatal Python error" in result.stderr  # faulthandler's traceback of the crash


def test_isolation_reports_a_hang():
    result = run_child(["--selftest", "hang", "--examples", "50"], timeout=5)
    assert result.timed_out and not result.ok
    assert "TIMED OUT" in result.report() and "selftest hang n=" in result.report()
    assert result.seconds < 30


def test_isolation_reports_the_shrunk_example():
    """The property fails for n >= 17: hypothesis shrinks to exactly n=17 and the parent shows it."""
    result = run_child(["--selftest", "fail", "--examples", "200"], timeout=60)
    assert not result.ok and result.returncode == 1
    assert "minimal failing example (shrunk by hypothesis): selftest fail n=17" in result.report()


def test_isolation_passes_when_the_property_holds():
    result = run_child(["--selftest", "pass", "--examples", "20"], timeout=60)
    assert result.ok, result.report()


# --------------------------------------------------------------------------------------
# Regressions: the minimal examples of the defects the fuzzer found (see docs/hardening.md)

REGRESSIONS = {
    # input of shape [T, B, 0]: the message named num_units/input_size but not the argument
    "input_size_0_message": "Example(op='cudnn_rnn_v3', dtype='float16', cfg={'mode': 'lstm', 'L': 1, 'D': 1, "
    "'I': 1, 'H': 1, 'P': 0, 'T': 1, 'B': 0, 'input_mode': 'skip_input', 'time_major': False, 'lengths': None, "
    "'len_dtype': 'int32', 'is_training': False, 'dropout': 0.0, 'seed': 0, 'seed2': 0, 'c_shape': 'state'}, "
    "seed=0, mutation=Mutation('shape', 'input', ('set_dim', 2, 0), must_fail=False, same_result=False), "
    "surface='snake')",
    # skip_input, batch 0, read-only input: np.tile returned a view of the input, then `+= bias`
    "skip_input_readonly_empty": "Example(op='cudnn_rnn', dtype='float32', cfg={'mode': 'lstm', 'L': 1, "
    "'D': 1, 'I': 1, 'H': 1, 'P': 0, 'T': 1, 'B': 0, 'input_mode': 'skip_input', 'time_major': True, "
    "'lengths': None, 'len_dtype': 'int32', 'is_training': False, 'dropout': 0.0, 'seed': 0, 'seed2': 0, "
    "'c_shape': 'state'}, seed=0, mutation=Mutation('view', 'input', 'readonly', must_fail=False, "
    "same_result=True), surface='snake')",
    # T=None was accepted as float64 (np.dtype(None) is float64)
    "params_size_T_None": "Example(op='cudnn_rnn_params_size', dtype='float16', cfg={'mode': 'lstm', 'L': 1, "
    "'D': 1, 'I': 1, 'H': 1, 'P': 0, 'T': 1, 'B': 0, 'input_mode': 'skip_input', 'time_major': True, "
    "'lengths': None, 'len_dtype': 'int32', 'is_training': False, 'dropout': 0.0, 'seed': 0, 'seed2': 0, "
    "'c_shape': 'state', 'S': 'int32', 'int_form': 'int'}, seed=0, mutation=Mutation('attr', 'T', None, "
    "must_fail=True, same_result=False), surface='snake')",
    # a masked-array params came back as MaskedArray weights/biases (subclass passed through)
    "params_to_canonical_masked": "Example(op='cudnn_rnn_params_to_canonical', dtype='float16', cfg={'mode': "
    "'lstm', 'L': 1, 'D': 1, 'I': 1, 'H': 1, 'P': 0, 'T': 1, 'B': 0, 'input_mode': 'skip_input', "
    "'time_major': True, 'lengths': None, 'len_dtype': 'int32', 'is_training': False, 'dropout': 0.0, "
    "'seed': 0, 'seed2': 0, 'c_shape': 'state', 'S': 'int32', 'int_form': 'int'}, seed=0, "
    "mutation=Mutation('view', 'params', 'masked', must_fail=False, same_result=True), surface='snake')",
    # a non-contiguous params gave other bits: the transposed input-weight views went through
    # a different matmul path than those of a contiguous buffer
    "params_layout_bits": "Example(op='cudnn_rnn', dtype='float32', cfg={'mode': 'lstm', 'L': 2, 'D': 1, "
    "'I': 4, 'H': 4, 'P': 0, 'T': 1, 'B': 1, 'input_mode': 'skip_input', 'time_major': True, 'lengths': None, "
    "'len_dtype': 'int32', 'is_training': False, 'dropout': 0.0, 'seed': 0, 'seed2': 0, 'c_shape': 'state'}, "
    "seed=254, mutation=Mutation('view', 'params', 'noncontig', must_fail=False, same_result=True), "
    "surface='snake')",
    # unaligned inputs (a valid NumPy layout) gave other bits: NumPy's non-BLAS fallback loop
    "unaligned_bits": "Example(op='gru_block_cell_grad', dtype='float32', cfg={'T': 1, 'B': 1, 'I': 5, 'n': 6, "
    "'slm': 1, 'forget_bias': 1.0, 'cell_clip': 3.0, 'use_peephole': False, 'int_form': 'int'}, seed=3, "
    "mutation=Mutation('view', '*', 'unaligned', must_fail=False, same_result=True), surface='snake')",
}


@pytest.mark.parametrize("name", list(REGRESSIONS))
def test_regression(name):
    check_example(parse_example(REGRESSIONS[name]))


def test_input_size_0_names_the_input():
    x = np.zeros((2, 3, 0), np.float32)
    h = np.zeros((1, 3, 5), np.float32)
    with pytest.raises(ValueError, match=r"input_size must be >= 1: input has shape \[2,3,0\]"):
        fusedrnn.cudnn_rnn(x, h, h, np.zeros(10, np.float32))


def test_skip_input_read_only_empty_batch():
    x = np.zeros((2, 0, 4), np.float32)
    x.flags.writeable = False
    h = np.zeros((1, 0, 4), np.float32)
    n = cases.cudnn_params_size("lstm", 1, 1, 4, 4, 0, "skip_input")
    out = fusedrnn.cudnn_rnn(x, h, h, np.zeros(n, np.float32), input_mode="skip_input")
    assert out.output.shape == (2, 0, 4)


@pytest.mark.parametrize("attr", ["T", "S"])
def test_params_size_dtype_none_is_a_type_error(attr):
    with pytest.raises(TypeError, match=rf"^{attr} must be a dtype.*got None"):
        fusedrnn.cudnn_rnn_params_size(1, 4, 3, **{attr: None})


class _Sub(np.ndarray):
    pass


@pytest.mark.parametrize("wrap", [lambda a: np.ma.masked_array(a, mask=np.zeros(a.shape, bool)),
                                  lambda a: a.view(_Sub)])
def test_params_to_canonical_returns_plain_ndarrays(wrap):
    n = cases.cudnn_params_size("gru", 1, 1, 3, 2)
    params = np.arange(n, dtype=np.float32)
    out = fusedrnn.cudnn_rnn_params_to_canonical(1, 2, 3, wrap(params), num_params=6, rnn_mode="gru")
    for a in out.weights + out.biases:
        assert type(a) is np.ndarray
    np.testing.assert_array_equal(np.concatenate([a.ravel() for a in out.weights + out.biases]), params)
