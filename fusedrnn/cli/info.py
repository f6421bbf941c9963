"""``fusedrnn info``: what this installation is and runs on, for bug reports.

Prints the fusedrnn, Python and NumPy versions, the BLAS library and its thread count, the
compute backend, the supported dtypes and which optional frameworks are importable (with the
pip extra that installs each).  Nothing optional is imported: presence is read from the
installed distributions' metadata (``importlib.metadata``) and module specs.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import platform
import sys

from ._common import add_command

# (import name, distribution names to read the version from, pip extra of fusedrnn, what for).
# The torch / jax / onnx / keras extras belong to the integrations (fusedrnn.torch, fusedrnn.jax,
# the ONNX export and the checkpoint converter); TensorFlow is only an oracle, in the test extra.
OPTIONAL_PACKAGES = (
    ("torch", ("torch",), "torch", "fusedrnn.torch; PyTorch oracle (check, tests)"),
    ("jax", ("jax",), "jax", "fusedrnn.jax"),
    ("tensorflow", ("tensorflow-cpu", "tensorflow"), "test", "TensorFlow oracle (check, tests)"),
    ("onnx", ("onnx",), "onnx", "ONNX export"),
    ("onnxruntime", ("onnxruntime",), "onnx", "running exported ONNX models"),
    ("keras", ("keras",), None, "Keras models (comes with TensorFlow)"),
    ("h5py", ("h5py",), "keras", "Keras .h5 checkpoints"),
    ("matplotlib", ("matplotlib",), "demo", "demo loss-curve plot"),
    ("tqdm", ("tqdm",), "demo", "demo progress bar"),
    ("threadpoolctl", ("threadpoolctl",), None, "BLAS thread report and control"),
)

SUPPORTED_DTYPES = {
    "CudnnRNN family": ["float16 (computed in float32)", "float32", "float64"],
    "BlockLSTM / LSTMBlockCell / GRUBlockCell": ["float16 (computed in float32)", "float32", "float64"],
}


def register(subparsers) -> None:
    parser = add_command(subparsers, "info", func=run, help="versions, BLAS, backend, optional frameworks",
                         description="Report this installation: versions, BLAS and threads, compute "
                                     "backend, dtypes, optional frameworks. Paste it into bug reports.")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")


def _distribution_version(names) -> str | None:
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _optional_packages() -> list[dict]:
    rows = []
    for module, distributions, extra, purpose in OPTIONAL_PACKAGES:
        present = importlib.util.find_spec(module) is not None
        rows.append({"package": module, "installed": present,
                     "version": _distribution_version(distributions) if present else None,
                     "extra": f"fusedrnn[{extra}]" if extra else None, "for": purpose})
    return rows


def _blas() -> dict:
    """BLAS library and threads: threadpoolctl's view when installed, else fusedrnn's own probe."""
    import numpy as np

    from .. import settings

    if importlib.util.find_spec("threadpoolctl") is not None:
        import threadpoolctl

        pools = [{"library": pool.get("internal_api"), "path": pool.get("filepath"),
                  "version": pool.get("version"), "threads": pool.get("num_threads")}
                 for pool in threadpoolctl.threadpool_info() if pool.get("user_api") == "blas"]
        if pools:
            return {"source": "threadpoolctl", "libraries": pools}
    probe = settings.blas_info()
    try:
        config = np.show_config(mode="dicts")
    except TypeError:  # NumPy < 1.26 can only print its configuration
        config = {}
    blas_name = config.get("Build Dependencies", {}).get("blas", {}).get("name")
    return {"source": "fusedrnn.settings.blas_info", "libraries": [
        {"library": blas_name, "path": probe["library"], "version": None, "threads": probe["threads"]}]}


def backend() -> dict:
    """``fusedrnn.settings.backend_info()`` where this fusedrnn has it, else the NumPy reference."""
    from .. import settings

    if hasattr(settings, "backend_info"):
        return dict(settings.backend_info())
    return {"backend": "numpy (reference)", "isa": None, "num_threads": None,
            "native_available": False, "native_error": "this fusedrnn has no native engine"}


def collect() -> dict:
    """Everything ``fusedrnn info`` reports, as a JSON-serialisable dict."""
    import numpy as np

    from .. import __version__

    return {
        "fusedrnn": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "numpy": np.__version__,
        "blas": _blas(),
        "backend": backend(),
        "dtypes": SUPPORTED_DTYPES,
        "optional": _optional_packages(),
    }


def _print_text(report: dict) -> None:
    print(f"fusedrnn   {report['fusedrnn']}")
    print(f"python     {report['python']} ({report['platform']})")
    print(f"numpy      {report['numpy']}")
    for library in report["blas"]["libraries"]:
        print(f"blas       {library['library'] or 'unknown'} {library['version'] or ''}".rstrip()
              + f", threads {library['threads'] if library['threads'] is not None else 'unknown'}"
              + f"  ({library['path'] or 'path unknown'})")
    backend = report["backend"]
    line = f"backend    {backend.get('backend')}"
    if backend.get("isa"):
        line += f", isa {backend['isa']}"
    if backend.get("num_threads"):
        line += f", threads {backend['num_threads']}"
    print(line)
    if not backend.get("native_available") and backend.get("native_error"):
        print(f"           native engine unavailable: {backend['native_error']}")
    for ops, dtypes in report["dtypes"].items():
        print(f"dtypes     {ops}: {', '.join(dtypes)}")
    print("optional frameworks (package, version, the extra that installs it, used for):")
    for row in report["optional"]:
        state = f"{row['version'] or 'installed'}" if row["installed"] else "not installed"
        print(f"  {row['package']:<14}{state:<15} {row['extra'] or '-':<17} {row['for']}")


def run(args) -> int:
    report = collect()
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print_text(report)
    return 0
