"""What device clients' default timeouts are checked against: the collector's own defaults."""

from __future__ import annotations


def longest_default_answer_s() -> float:
    """How long a collector with default settings may hold an upload's answer when it shuffles: until its batch
    closes (--shuffle-max-seconds), then its frames' acknowledgement (ACK_TIMEOUTS x --kafka-timeout-ms)."""
    from collector.outlet import ACK_TIMEOUTS
    from collector.settings import BY_NAME

    return BY_NAME["shuffle_max_seconds"].default + ACK_TIMEOUTS * BY_NAME["kafka_timeout_ms"].default / 1000
