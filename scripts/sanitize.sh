#!/usr/bin/env bash
# Build fusedrnn._native with AddressSanitizer + UndefinedBehaviorSanitizer in a temporary
# directory and run the native tests plus a fuzz budget against it.
#
#   bash scripts/sanitize.sh            # full: tests/test_native.py + 40 fuzz examples per op
#   bash scripts/sanitize.sh --short    # CI form: the native tests only, then 8 examples per op
#
# Nothing is installed: the sanitized module goes into a copy of the package (with the tests)
# under a temp dir, which is where pytest runs.  libasan/libubsan are preloaded into Python
# (leak detection off: CPython's interned objects are never freed).  Any ASan/UBSan report
# aborts the process (halt_on_error / -fno-sanitize-recover), so the run fails.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
EXAMPLES=40
if [[ "${1:-}" == "--short" ]]; then EXAMPLES=8; fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fusedrnn-sanitize.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

PYBIND11_DIR=$(python -c "import pybind11; print(pybind11.get_cmake_dir())")
cmake -S "$ROOT" -B "$WORK/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFUSEDRNN_SANITIZE=ON \
      -Dpybind11_DIR="$PYBIND11_DIR" -DPython_EXECUTABLE="$(command -v python)" >/dev/null
cmake --build "$WORK/build" -j "$(nproc)" >/dev/null

mkdir -p "$WORK/tree"
cp -r "$ROOT/fusedrnn" "$ROOT/tests" "$ROOT/pyproject.toml" "$WORK/tree/"
rm -f "$WORK/tree/fusedrnn/"_native*.so
cp "$WORK/build/"_native*.so "$WORK/tree/fusedrnn/"

LIBASAN=$(gcc -print-file-name=libasan.so)
LIBUBSAN=$(gcc -print-file-name=libubsan.so)
export LD_PRELOAD="$LIBASAN:$LIBUBSAN"
export ASAN_OPTIONS=detect_leaks=0:halt_on_error=1:abort_on_error=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export FUSEDRNN_BACKEND=native PYTHONDONTWRITEBYTECODE=1
# An installed fusedrnn (e.g. `pip install -e .`, whose import hook comes from a .pth file) must not
# shadow the sanitized copy: run Python with -S (no .pth processing) and the tree plus the
# site-packages directories on PYTHONPATH instead.
SITE=$(python -c "import os, site; print(os.pathsep.join(site.getsitepackages()))")
export PYTHONPATH="$WORK/tree${SITE:+:$SITE}"
python() { command python -S "$@"; }
cd "$WORK/tree"
python -c "
import fusedrnn, fusedrnn._native, fusedrnn.settings as s
assert fusedrnn.__file__.startswith('$WORK/tree/'), fusedrnn.__file__
assert fusedrnn._native.__file__.startswith('$WORK/tree/'), fusedrnn._native.__file__
i = s.backend_info(); assert i['backend'] == 'native', i; print('sanitized native engine:', i['isa'])"
# The sanitizer must be live: an out-of-bounds read (x_gates one column short) has to be reported.
if python -c "
import numpy as np, fusedrnn.settings as s
n = s.native_module()
# large enough that NumPy's small-buffer cache does not hide the overflow
h = np.zeros((5, 8, 64), np.float32)
n.rnn_forward(np.zeros((4, 8, 63), np.float32), None, None, None, np.zeros((64, 64), np.float32), False, None, h, 1)
" 2>"$WORK/selfcheck.txt"; then
  echo "sanitize: AddressSanitizer did not catch a deliberate overflow"; exit 1
fi
grep -q "heap-buffer-overflow" "$WORK/selfcheck.txt" || { cat "$WORK/selfcheck.txt"; exit 1; }
echo "sanitizer self-check: overflow caught"
python -m pytest -q -p no:cacheprovider tests/test_native.py
FUSEDRNN_FUZZ_EXAMPLES=$EXAMPLES FUSEDRNN_FUZZ_SEED=0 python -m pytest -q -p no:cacheprovider tests/test_fuzz.py -k "test_fuzz["
echo "sanitize: clean"
