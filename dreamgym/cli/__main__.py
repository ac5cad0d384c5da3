"""``python -m dreamgym.cli``: the same command line as ``dreamgym``."""

import sys

from dreamgym.cli import main

sys.exit(main())
