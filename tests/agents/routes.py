"""The name-less routes of a worker, in-process: what /estimates, /topk, /trend and /params answer.

A worker started with single-metric flags serves a one-metric registry (registry.flags); its
name-less routes are that metric's (agents.catalog.Catalog.prepare_primary): the --epsilon version
unless ``params=FINGERPRINT`` picks another live version. Tests talk to them as a client would.
"""

from __future__ import annotations

from typing import Callable

from agents.catalog import Catalog
from agents.view import CountsView
from registry.flags import metrics_from_flags


class Routes:
    """The name-less routes of a worker started with the metric flags ``flags``; attributes not defined
    here are its --epsilon version's EstimateService's (``watch``, ``labels``, ``latest_bucket`` ...)."""

    def __init__(self, view: CountsView, clock: Callable[[], float], **flags):
        self.catalog = Catalog(metrics_from_flags(**flags), view, clock=clock)
        self.service = self.catalog.primary.default
        self.estimator = self.catalog.estimator

    def __getattr__(self, name):
        return getattr(self.service, name)

    def prepare(self, endpoint: str, query: dict, value: str | None = None):
        return self.catalog.prepare_primary(endpoint, query.items(), value)

    def answer(self, endpoint: str, query: dict, value: str | None = None) -> dict:
        return self.estimator.finish(self.prepare(endpoint, query, value).gather())

    def estimates(self, query: dict) -> dict:
        return self.answer("estimates", query)

    def estimate_value(self, value: str, query: dict) -> dict:
        return self.answer("estimate_value", query, value)

    def topk(self, query: dict) -> dict:
        return self.answer("topk", query)

    def trend(self, query: dict) -> dict:
        return self.answer("trend", query)

    def params_doc(self) -> dict:
        return self.answer("params", {})
