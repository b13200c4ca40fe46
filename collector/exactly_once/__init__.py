"""Exactly-once retries across collector restarts and replicas (docs/collector.md, "Retries").

An upload retried with its ``Idempotency-Key`` must be counted once even when the collector that
took the first attempt was killed after Kafka stored the frame but before the 202 left, or when the
retry reaches another replica. Every collector shares one ordered log (partition 0 of a
collector-only topic, ``--idempotency-topic``, default ``<source topic>-idempotency``):

* :mod:`.commit`: how a unit of uploads reaches Kafka, as numbered steps with the argument that makes
  them exact (list the keys, read the log back and drop held keys, redo copy, send in the open
  transaction, outcome); group commit.
* :mod:`.log`: the log's records and what every collector computes from them in log order; listing
  times are the collectors' clocks, never event time.
* :mod:`.shared`: one collector's I/O on the log: the tail, the lease, and the settling of what a
  kill left in doubt, never fencing a live collector.
* :mod:`.repair`: how a settle learns what is final: fence, read the partition, and complete a batch
  cut short from its redo copy.
* :mod:`.tail`: reading the log in order from its start (afresh when the broker lost it).
* :mod:`.key`: the key of the Idempotency-Key hashes, generated once and kept in Kafka.

The worker is unchanged: it reads every appended frame (``read_uncommitted``), so "appended" is
"counted", on Apache Kafka and on the embedded Tansu broker alike (whose ``read_committed`` shows
aborted records). Nothing of this links a report to its upload in the reports topic: a frame carries
one random nonce (no more than its own offset says; a shuffled batch's frames share theirs), and no
key, hash, count or time of an upload.
"""
