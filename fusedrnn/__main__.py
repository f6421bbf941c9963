"""``python -m fusedrnn``: the command-line interface (see :mod:`fusedrnn.cli`)."""

from fusedrnn.cli.main import main

raise SystemExit(main())
