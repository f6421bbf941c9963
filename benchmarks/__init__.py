"""fusedrnn's benchmark suite (not installed with the library): ``python -m benchmarks``.

Modules: ``problems`` (grid, FLOP formulas, shared data), ``peers/`` (one module per library),
``harness`` (interleaved timing), ``machine`` (peak sgemm, BLAS, versions), ``memory`` (training
step peak RSS), ``report`` (Markdown, JSON, PNG), ``worker`` (one process per thread count).
"""
