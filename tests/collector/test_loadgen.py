"""The fault tests' load generator: what its log claims must be checkable against the topic."""

from __future__ import annotations

from collections import Counter

from .loadgen import LoadGenerator


def test_no_two_uploads_share_a_report_so_a_report_twice_in_kafka_is_an_upload_stored_twice(dest):
    """5-byte reports repeat by chance (about 4 million values for "dest"); the generator draws again
    rather than issue a record twice in the process, even to generators of the same seed."""
    uploads = [g._upload() for g in (LoadGenerator("unused", dest, per_upload=3, seed=3),
                                     LoadGenerator("unused", dest, per_upload=3, seed=3)) for _ in range(2000)]
    issued = Counter(r for _, records in uploads for r in records)
    assert len(issued) == 3 * 4000 and max(issued.values()) == 1
    for body, records in uploads[:50]:  # the body is still the records' messages
        assert all(r in body for r in records) and len(records) == 3
