"""``python -m mpsolve``: the command line (as the ``mpsolve`` script)."""
import sys

from .cli import main

sys.exit(main())
