"""What every test package shares: waiting on a condition (``waiting``), reading a Kafka topic
(``topics``), and the check that only integration tests start processes (``process_guard``)."""
