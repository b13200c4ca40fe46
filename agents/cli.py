"""``ocms worker``: flags (each also an ``OCMS_*`` variable) -> WorkerSettings -> the Faust worker.

ocms/cli.py registers the subcommand with :func:`add_worker_parser`; ``ocms discover`` is
agents/discover_cli.py. Faust is imported only once the flags are checked, so a bad flag fails at once.
"""

from __future__ import annotations

import sys

from cms_core.errors import OCMSError
from infra.kafka import wait_for_kafka
from infra.process import check_port_free, watch_parent
from infra.settings import add_flags, int_at_least

from .settings import SETTINGS

__all__ = ["add_worker_parser", "cmd_worker", "worker_settings_from_args"]


def worker_settings_from_args(args, environ=None):
    """(the worker's frozen settings, the metrics it counts): flags over OCMS_* environment variables over
    defaults; the metrics are --registry FILE or the single-metric flags (registry.flags)."""
    import os

    from .settings import worker_settings

    return worker_settings(vars(args), os.environ if environ is None else environ)


def cmd_worker(args) -> int:
    import logging

    if args.parent_pid is not None:
        watch_parent(args.parent_pid)
    settings, metrics = worker_settings_from_args(args)  # bad flags fail before Faust is even imported
    if not settings.bootstrap_servers:
        raise OCMSError("--broker embedded needs --bootstrap-servers of a running `ocms broker` (or use `ocms run`)")
    from .app import OCMSWorker, prepare_topics

    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    worker = OCMSWorker(settings, metrics)  # builds the tracked sets: bad values fail before touching Kafka
    check_port_free(settings.web_port, settings.label("web_port"), settings.web_host)
    wait_for_kafka(settings.bootstrap_servers, lambda: prepare_topics(settings), logging.getLogger("ocms.worker"),
                   flag=settings.label("bootstrap_servers"))
    print(f"ocms worker {settings.app_id}: {settings.bootstrap_servers}/{settings.source_topic} "
          f"({settings.partitions} partitions), API on http://{settings.web_host}:{settings.web_port}", flush=True)
    return worker.run()


def add_worker_parser(sub) -> None:
    worker = sub.add_parser("worker", help="the Faust aggregation worker (API and /metrics on --web-port)",
                            description="Every flag falls back to its OCMS_* environment variable, then to its default.")
    add_flags(worker, SETTINGS, env=True)
    worker.add_argument("--parent-pid", type=int_at_least(1),
                        help="stop when process PID is no longer this worker's parent (set by ocms run and the tests)")
    worker.set_defaults(func=cmd_worker, parser=worker)


if __name__ == "__main__":  # pragma: no cover - a caller of the old entry point gets a clear line, not silence
    sys.exit("python -m agents.cli is no longer the ocms command: run `ocms ...` or `python -m ocms ...`")
