"""Run the real worker for one registry metric version: ``python -m tests.collector.registry_worker
REGISTRY METRIC VERSION BOOTSTRAP TOPIC BROKER WEB_PORT`` (BROKER: the broker profile).

The collector accepts only registry-bound fingerprints; until ``ocms worker`` reads the
registry itself, the tests build the worker's settings from the version's parameters
through the worker's own public API (WorkerSettings, OCMSWorker, prepare_topics).
"""

from __future__ import annotations

import asyncio
import logging
import sys


def main(argv: list[str]) -> int:
    from agents.app import OCMSWorker, prepare_topics
    from agents.settings import WorkerSettings
    from registry import load_registry
    from tests.brokers import MOCK_SESSION_SECONDS

    registry_path, metric, version, bootstrap, topic, broker, web_port = argv
    mv = load_registry(registry_path).metric(metric).version(int(version))
    settings = WorkerSettings.build(
        mv.params, {}, bootstrap_servers=bootstrap, broker=broker, app_id=f"{topic}-worker",
        source_topic=topic, dead_letter_topic=f"{topic}-dlq", web_port=web_port, bucket_seconds=mv.bucket_seconds,
        retention_seconds=mv.retention_seconds, batch_max_seconds=0.1, log_level="warning",
        session_timeout_seconds=MOCK_SESSION_SECONDS if broker == "mock" else None,  # restarts: tests/brokers.py
    )
    logging.basicConfig(level="WARNING")
    worker = OCMSWorker(settings)
    asyncio.run(prepare_topics(settings))
    return worker.run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
