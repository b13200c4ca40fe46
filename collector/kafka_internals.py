"""Every private aiokafka name the collector uses, in one place.

The collector's exactly-once retries (``collector.exactly_once``) fence a killed collector's
producer: a transactional producer started with the same ``transactional_id`` bumps its epoch,
and the broker refuses the old epoch's sends from then on. That needs ``InitProducerId``,
which aiokafka 0.14 only speaks in version 0 (``transactional_id``, ``transaction_timeout_ms``).
The embedded Tansu 0.6 broker answers version 0 with UnknownError (its log:
``producer=None epoch=None``); from version 3 on the request carries ``producer_id`` and
``producer_epoch`` (-1, -1: a new producer), which Tansu and Apache Kafka (>= 2.5) take.

:func:`install` gives aiokafka's sender an ``InitProducerId`` request that offers versions 0
and 3; aiokafka picks the highest one the broker supports (so brokers without version 3 get
version 0 as before). It is installed by the collector process only (``KafkaOutlet.start``).

``tests/collector/test_kafka_internals.py`` pins the aiokafka version and fails when an
upgrade renames or re-signs what this module replaces: re-read the changed code, adapt this
module, then update ``PINNED_VERSIONS``.
"""

from __future__ import annotations

import inspect

from aiokafka.producer import sender as aiokafka_sender
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.transaction import InitProducerIdRequest_v0
from aiokafka.protocol.types import CompactString, Int16, Int32, Int64, Schema, TaggedFields

from infra.pinned import version_drift

#: The version this module was checked against (the test compares the installed one).
PINNED_VERSIONS = {"aiokafka": "0.14.0"}


class InitProducerIdResponse_v3(Response):
    API_KEY = 22
    API_VERSION = 3
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("error_code", Int16),
        ("producer_id", Int64),
        ("producer_epoch", Int16),
        ("tags", TaggedFields),
    )


class InitProducerIdRequest_v3(RequestStruct):
    FLEXIBLE_VERSION = True
    API_KEY = 22
    API_VERSION = 3
    RESPONSE_TYPE = InitProducerIdResponse_v3
    SCHEMA = Schema(
        ("transactional_id", CompactString("utf-8")),
        ("transaction_timeout_ms", Int32),
        ("producer_id", Int64),
        ("producer_epoch", Int16),
        ("tags", TaggedFields),
    )


class InitProducerIdRequest(Request[InitProducerIdRequest_v0 | InitProducerIdRequest_v3]):
    """aiokafka's ``InitProducerIdRequest`` (same constructor), offering versions 0 and 3."""

    API_KEY = 22

    def __init__(self, transactional_id: str | None, transaction_timeout_ms: int):
        self._transactional_id = transactional_id
        self._transaction_timeout_ms = transaction_timeout_ms

    def build(self, request_struct_class):
        if request_struct_class is InitProducerIdRequest_v3:
            # producer_id / producer_epoch -1: a new producer (an existing transactional id is fenced)
            return request_struct_class(self._transactional_id, self._transaction_timeout_ms, -1, -1, {})
        return request_struct_class(self._transactional_id, self._transaction_timeout_ms)


def install() -> None:
    """Make aiokafka's producers (of this process) send InitProducerId version 3 where offered."""
    aiokafka_sender.InitProducerIdRequest = InitProducerIdRequest


# ----------------------------------------------------------------- drift check
def drift() -> list[str]:
    """What differs from the aiokafka this module was written against (empty when nothing does)."""
    problems = version_drift(PINNED_VERSIONS, "collector/kafka_internals.py")
    original = getattr(aiokafka_sender, "InitProducerIdRequest", None)
    if original is None:
        problems.append("aiokafka.producer.sender.InitProducerIdRequest is gone")
    elif original is not InitProducerIdRequest:
        got = tuple(inspect.signature(original.__init__).parameters)[1:]
        if got != ("transactional_id", "transaction_timeout_ms"):
            problems.append(f"aiokafka's InitProducerIdRequest takes {got}, expected (transactional_id, transaction_timeout_ms)")
    handler = getattr(aiokafka_sender, "InitPIDHandler", None)
    if handler is None or "InitProducerIdRequest(" not in inspect.getsource(handler.create_request):
        problems.append("aiokafka's InitPIDHandler.create_request no longer builds InitProducerIdRequest by its module name")
    for name in ("producer_id", "producer_epoch", "error_code"):
        if handler is not None and f"resp.{name}" not in inspect.getsource(handler.handle_response):
            problems.append(f"aiokafka's InitPIDHandler.handle_response no longer reads resp.{name}")
    if "_CLASSES" not in inspect.getsource(Request.prepare):
        problems.append("aiokafka's Request.prepare no longer picks a version from _CLASSES")
    return problems
