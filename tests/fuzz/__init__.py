"""Property-based fuzzing of every public fusedrnn op (issue 4, see docs/hardening.md).

* :mod:`.cases`      valid calls of each op, built from a small config + a data seed, their
                     expected output shapes and the float64 path;
* :mod:`.strategies` hypothesis strategies: configs per op and single mutations of a valid call;
* :mod:`.harness`    the property (a correct result or a ValueError/TypeError naming the argument,
                     inputs never modified) and the parent-side subprocess runner;
* :mod:`.run`        the child entry point: ``python -m tests.fuzz.run --op cudnn_rnn_v3``.
"""
