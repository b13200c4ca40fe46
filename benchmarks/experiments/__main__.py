"""``python -m benchmarks.experiments``: see run_all.py."""

from .run_all import main

raise SystemExit(main())
