"""The collector: the device-facing HTTP front door that validates uploads and produces frames to Kafka.

See docs/collector.md. ``ocms collector`` runs it; :class:`collector.app.CollectorServer` runs it
inside an event loop (tests, ``ocms run``); :func:`collector.cli.collector_command`
gives the argv of a child process.
"""
