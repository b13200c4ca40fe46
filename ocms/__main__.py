"""``python -m ocms``: the ``ocms`` command (what tests, the fault harness and a checkout without the entry point run)."""

import sys

from .cli import main

sys.exit(main())
