"""The collector's garbage-collector setting (collector.cli.tune_garbage_collector): fewer, larger young
collections, and what was built before serving frozen out of full collections."""

from __future__ import annotations

import gc

from collector.cli import YOUNG_COLLECTION_THRESHOLD, tune_garbage_collector


def test_young_collections_are_rarer_and_startup_objects_are_frozen():
    before = gc.get_threshold()
    frozen = gc.get_freeze_count()
    built_before_serving = [object() for _ in range(10)] + [{"kept": True}]
    try:
        tune_garbage_collector()
        assert gc.get_threshold() == (YOUNG_COLLECTION_THRESHOLD, before[1], before[2])
        assert YOUNG_COLLECTION_THRESHOLD > 700  # CPython's default: the setting must raise it
        assert gc.get_freeze_count() > frozen
        assert gc.collect() >= 0  # cycles are still collected
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
        del built_before_serving
