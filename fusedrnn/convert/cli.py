"""``python -m fusedrnn convert SRC DST``: RNN weights from a checkpoint to ``.npz``/``.pt``/``.onnx``.

SRC: a TF checkpoint (prefix, ``.index`` path or directory), a Keras ``.weights.h5``/``.keras``
file, a ``CudnnWeights`` ``.npz`` or a PyTorch ``state_dict`` ``.pt``.  DST by extension: ``.npz``
(:meth:`CudnnWeights.save`), ``.pt`` (``torch.save`` of :func:`to_torch`'s state_dict), ``.onnx``
(:func:`to_onnx`).  ``--list`` prints the RNNs found.  Errors are one line on stderr, exit status 2.

The framework CLI calls :func:`register` with its argparse subparsers.
"""

from __future__ import annotations

import argparse
import os
import sys

from . import _find
from ._weights import CudnnWeights
from .. import layout

_CONFIG_OPTIONS = ("rnn_mode", "num_layers", "num_units", "input_size", "direction", "input_mode", "num_proj")


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``convert`` subcommand (``func=run``) to an argparse ``subparsers`` object."""
    parser = subparsers.add_parser("convert", help="convert RNN weights (TF checkpoint, Keras, .npz, .pt) to "
                                   ".npz / .pt / .onnx", description=__doc__.split("\n\n")[1])
    parser.add_argument("src", metavar="SRC")
    parser.add_argument("dst", metavar="DST", nargs="?", help=".npz, .pt or .onnx (not needed with --list)")
    parser.add_argument("--list", action="store_true", help="list the RNN weights found in SRC and exit")
    parser.add_argument("--name", help="which RNN of SRC to convert (see --list)")
    parser.add_argument("--rnn-mode", choices=layout.RNN_MODES)
    parser.add_argument("--num-layers", type=int)
    parser.add_argument("--num-units", type=int)
    parser.add_argument("--input-size", type=int)
    parser.add_argument("--direction", choices=layout.DIRECTIONS)
    parser.add_argument("--input-mode", choices=layout.INPUT_MODES, default="linear_input")
    parser.add_argument("--num-proj", type=int, default=0)
    parser.add_argument("--forget-bias", type=float, help="run-time forget bias of lstm_block_cell/lstm_cell variables")
    parser.add_argument("--opset", type=int, help="ONNX opset (default: fusedrnn's)")
    parser.set_defaults(func=run)
    return parser


def _load(args) -> dict:
    src = args.src
    hints = {k: getattr(args, k) for k in _CONFIG_OPTIONS}
    if src.endswith(".npz"):
        return {os.path.basename(src)[:-4]: CudnnWeights.load(src)}
    if src.endswith(".pt"):
        from ._optional import require
        from ._torch import from_torch
        torch = require("torch", "converting a .pt file")
        return {os.path.basename(src)[:-3]: from_torch(torch.load(src, weights_only=True), rnn_mode=args.rnn_mode)}
    if src.endswith((".h5", ".keras")):
        from .checkpoint import read_keras_weights
        tensors = read_keras_weights(src)
    else:
        from .checkpoint import read_tf_checkpoint
        tensors = read_tf_checkpoint(src)
    return _find.find_rnn_weights(tensors, forget_bias=args.forget_bias, **hints)


def _write(w: CudnnWeights, dst: str, args) -> None:
    if dst.endswith(".npz"):
        w.save(dst)
    elif dst.endswith(".pt"):
        from ._optional import require
        from ._torch import to_torch
        require("torch", "writing a .pt file").save(to_torch(w), dst)
    elif dst.endswith(".onnx"):
        from ._onnx import DEFAULT_OPSET, to_onnx
        to_onnx(w, dst, opset=args.opset or DEFAULT_OPSET)
    else:
        raise ValueError(f"cannot write {dst!r}: DST must end in .npz, .pt or .onnx")


def run(args) -> int:
    """Execute ``convert``; returns the exit status (0 ok, 1 error: one line on stderr, like the other subcommands)."""
    try:
        found = _load(args)
        if args.list:
            for name, w in found.items():
                print(f"{name}\t{w.config.describe()}\t{w.params.size} x {w.dtype}")
            return 0
        if not args.dst:
            raise ValueError("DST is required (or pass --list)")
        if not found:
            raise ValueError(f"no RNN weights found in {args.src}")
        if args.name is not None:
            if args.name not in found:
                raise ValueError(f"no RNN named {args.name!r} in {args.src}; found {sorted(found)}")
            w = found[args.name]
        elif len(found) == 1:
            w = next(iter(found.values()))
        else:
            raise ValueError(f"{args.src} holds {len(found)} RNNs {sorted(found)}: pass --name")
        _write(w, args.dst, args)
        print(f"wrote {args.dst}: {w.config.describe()}")
        return 0
    except (ValueError, KeyError, ImportError, OSError) as exc:
        message = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
        print(f"fusedrnn convert: error: {message}".splitlines()[0], file=sys.stderr)
        return 1
