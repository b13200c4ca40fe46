"""Reproducible accuracy and cost evidence (issue 6): paper replication and peer libraries.

Regenerate everything in docs/results/ with::

    .venv/bin/python -m benchmarks.experiments            # full run
    .venv/bin/python -m benchmarks.experiments --quick    # smoke run into build/experiments-quick/
"""
