"""``python -m servebook``: the same command line as the ``servebook`` script (see :mod:`servebook.cli`)."""

import sys

from .cli import main

sys.exit(main())
