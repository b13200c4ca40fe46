"""What every test package shares: waiting on a condition (``waiting``), reading a Kafka topic
(``topics``), the collector's defaults device clients are checked against (``collector_defaults``),
and the check that only integration tests start processes (``process_guard``)."""
