"""Moved: the outlet is :mod:`collector.outlet`, the lanes and units :mod:`collector.lanes`.

Kept only for the importers outside collector/ that still use the old path (tests/producer/test_kafka.py:
KafkaOutlet; tests/support/collector_defaults.py: ACK_TIMEOUTS). Remove once they import collector.outlet.
"""

from .outlet import ACK_TIMEOUTS, KafkaOutlet

__all__ = ["ACK_TIMEOUTS", "KafkaOutlet"]
