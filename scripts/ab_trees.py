"""A/B of two versions of the Python package on benchmark problems: the working tree's
`fusedrnn` and an older revision's (``git archive REV fusedrnn``, imported as the package
``fusedrnn_old`` with this checkout's compiled extension), called alternately through the public
API in one process, so that both see the same machine conditions.  For changes on the Python
side (docs/performance.md's "old and new trees alternating" numbers); compiled changes:
``scripts/ab_builds.py``.  The older revision must work with this checkout's extension (the
bindings it calls unchanged); the outputs of the two are compared too (bits).

    python scripts/ab_trees.py HEAD~1 lstm-H128-B1-T25,lstm-H256-B16-T50 training --threads 1
    python scripts/ab_trees.py 8b00871 lstm-H128-B1-T25 training --settle   # quiet wait per call
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from ab_builds import result_bytes  # noqa: E402


def old_package(revision: str, into: Path) -> str:
    """``into/fusedrnn_old``: the package at ``revision`` with this checkout's extension."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision, "fusedrnn"],
                             check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    (into / "fusedrnn").rename(into / "fusedrnn_old")
    import fusedrnn._native as native
    shutil.copy(native.__file__, into / "fusedrnn_old")
    return "fusedrnn_old"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("revision", help="the older revision (any git revision)")
    parser.add_argument("problems", help="comma-separated benchmark problem names")
    parser.add_argument("mode", choices=["forward", "training"])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--calls", type=int, default=41, help="timed calls per version")
    parser.add_argument("--settle", action="store_true",
                        help="the harness's quiet wait before each call (benchmarks.harness.settle)")
    args = parser.parse_args()

    import importlib

    from benchmarks import harness, peers, problems

    with tempfile.TemporaryDirectory() as folder:
        sys.path.insert(0, folder)
        libraries = {"old": importlib.import_module(old_package(args.revision, Path(folder))),
                     "new": importlib.import_module("fusedrnn")}
        for name in args.problems.split(","):
            data = problems.make_data(problems.find(name))
            steps = {}
            for tag, library in libraries.items():
                peer = peers.get("fusedrnn")
                peer.load(args.threads)
                peer.lib = library
                library.set_num_threads(args.threads)
                steps[tag] = peer.build(data, args.mode)
            same = result_bytes(steps["old"]()) == result_bytes(steps["new"]())
            samples = {"old": [], "new": []}
            for call in range(args.calls):
                for tag in (("old", "new") if call % 2 else ("new", "old")):
                    if args.settle:
                        harness.settle()
                    start = time.perf_counter()
                    steps[tag]()
                    samples[tag].append(time.perf_counter() - start)
            old, new = (statistics.median(samples[tag]) * 1e3 for tag in ("old", "new"))
            print(f"{name} {args.mode} {args.threads}t: old {old:.3f} ms, new {new:.3f} ms, "
                  f"new/old {new / old:.3f}; same output bits: {same}")


if __name__ == "__main__":
    main()
