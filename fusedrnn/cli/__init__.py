"""The ``fusedrnn`` command line: ``python -m fusedrnn {demo,check,info,...}``.

Each subcommand is a module with ``register(subparsers)``, which adds its parser and sets the
parser's ``func`` default to a function ``func(args) -> int`` (the exit status).  Built-in
subcommands live here; optional ones from other parts of the package (``fusedrnn.convert.cli``)
are added when they are present.  Heavy imports (matplotlib, tqdm, torch, TensorFlow) happen
inside ``func``, never at registration, so ``--help`` stays fast and ``import fusedrnn`` light.
The entry point is :func:`fusedrnn.cli.main.main` (``argv -> exit status``).
"""
