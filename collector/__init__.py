"""The collector: the device-facing HTTP front door that validates uploads and produces frames to Kafka.

See docs/collector.md. ``ocms collector`` runs it; :class:`CollectorServer` runs it
inside an event loop (tests, ``ocms run``); :func:`collector.cli.collector_command`
gives the argv of a child process.
"""

from .app import Collector, CollectorServer
from .settings import CollectorSettings
from .uploads import JSON_CONTENT_TYPE, WIRE_CONTENT_TYPE

__all__ = ["Collector", "CollectorServer", "CollectorSettings", "JSON_CONTENT_TYPE", "WIRE_CONTENT_TYPE"]
