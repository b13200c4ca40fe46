"""Benchmarks: each prints the figures an issue names. Run one from the checkout's root as a module,
``.venv/bin/python -m benchmarks.NAME`` (``--help`` for its options); they are never timed tests."""
