"""What every process uses: Kafka clients and brokers, frames, captures, the HTTP edge, settings, output.

Imports only cms_core; registry, the device clients, the fleet, the collector, the worker and the
``ocms`` command all build on it (docs/layout.md).
"""
