"""The sharded view (``--view share``): each worker holds the counts of its share of the metrics,
and any worker answers any query.

Store of record and exactness are unchanged: the counts table and its changelog are written as
with ``--view all`` (agents.checkpoint). Only the read model is sharded. A metric's *shard*
is that of its group (agents.state: every version of a metric is in one group, a table key
starts with its group, and ``StateLayout`` packs the groups into as many shards as partitions,
heaviest first onto the lightest, so shards hold about equal counts; every worker of one
registry computes the same packing), and a worker's *share* is the shards equal to the source
partitions the consumer group assigns it. So the share moves with Kafka's assignment
when workers join, leave or die, with no membership protocol of our own.

* The view reader (agents.view.ChangelogReader) reads every changelog record's key prefix and
  drops the records of shards outside the share before decoding them. When the assignment
  gives it new shards, it reads the changelog again from the beginning, applying only the new
  shards' records below its current position; a new shard is *ready* once that replay reaches
  the position, and the view then holds its latest value per key, the same as a worker that
  read the whole changelog. Shards it no longer owns are dropped at once.
* A query for a metric of a ready shard is answered here; of a shard being rebuilt here, or
  while nobody owns it (a rebalance), it gets 503 with ``Retry-After``; of a shard another
  worker owns, it is forwarded to that worker (its web address from the group's assignment,
  Faust's ``changelog_distribution``: the owner of changelog partition = source partition =
  shard), with a bounded timeout. A forwarded query is never forwarded again: a worker that
  does not hold it (the assignment moved meanwhile) answers 503. An answer therefore comes
  whole from one view that holds every key of the metric: exact, or a 503, never partial.
* Each worker exports the Prometheus estimate series of the metric versions of its ready
  shards only (so ``max without (instance)`` still gives one series per value).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Awaitable, Callable

from .state import StateLayout
from .view import ViewBehind

log = logging.getLogger("ocms.worker")

#: A forwarded query waits at most this long for the holder's answer, then answers 503.
FORWARD_TIMEOUT_S = 5.0
#: Marks a query one worker forwarded to another (never forwarded again).
FORWARDED_HEADER = "X-OCMS-Forwarded"
#: Says which worker's view answered (its web address), on forwarded answers too.
ANSWERED_BY_HEADER = "X-OCMS-Answered-By"
RETRY_AFTER_S = "1"


class Share:
    """Which shards this worker's view holds (``held``) and which of those are complete (``ready``).

    ``sharded`` False (``--view all``): every shard is held, and ready once the view has caught up."""

    def __init__(self, layout: StateLayout, sharded: bool):
        self.layout = layout
        self.partitions = layout.partitions
        self.sharded = sharded
        everything = set(range(self.partitions))
        self.held: set[int] = set() if sharded else everything
        self.ready: set[int] = set() if sharded else everything
        self.rebuilding: set[int] = set()
        self.dropped_records = 0  # changelog records of other shards, dropped by key prefix
        self._by_prefix: dict[bytes, int | None] = {}

    def shard_of_metric(self, name: str) -> int:
        return self.layout.shard_of_metric(name)

    def shard_of_key(self, raw_key: bytes | None) -> int | None:
        """The shard of an encoded table key from its group prefix alone; None when it has none
        (the view then rejects the record and counts it)."""
        prefix = (raw_key or b"").split(b":", 1)[0]
        shard = self._by_prefix.get(prefix, -1)
        if shard == -1:
            try:
                shard = self.layout.shard_of_group(prefix.decode("ascii"))
            except (ValueError, UnicodeDecodeError):
                shard = None
            if len(self._by_prefix) < 100_000:
                self._by_prefix[prefix] = shard
        return shard

    def serves_fingerprint(self, fingerprint: str) -> bool:
        """True when this worker exports the metric version's series (its shard is ready here)."""
        return self.layout.shard_of_fingerprint(fingerprint) in self.ready

    def settled(self, assigned: set[int]) -> bool:
        """True when this worker can answer every query for its assigned shards from its own view:
        it holds exactly the assigned shards and each one's rebuild is complete (always, with ``--view all``)."""
        return not self.sharded or (self.held == assigned and self.ready == self.held)

    def describe(self) -> dict:
        return {"view": "share" if self.sharded else "all", "held_shards": sorted(self.held),
                "ready_shards": sorted(self.ready), "rebuilding_shards": sorted(self.rebuilding)}


def owner_url(app, changelog_topic: str, shard: int) -> str | None:
    """The web address of the worker the group assigned changelog (= source) partition ``shard``."""
    for url, topics in app.assignor.changelog_distribution.items():
        if shard in topics.get(changelog_topic, ()):
            return str(url).rstrip("/")
    return None


@dataclass(eq=False)
class Router:
    """Where a query is answered: here, by another worker (forwarded), or nowhere yet (503)."""

    app: object
    share: Share
    changelog_topic: str
    #: the view's read barrier (``ChangelogReader.current``): returns once the view holds every changelog
    #: record written before the call, raises ViewBehind when it cannot tell in time
    current: Callable[[], Awaitable[None]]
    timeout: float = FORWARD_TIMEOUT_S
    #: the TLS context of requests to the other workers (agents.web_edge.peer_tls); None: plain HTTP
    ssl: object = None
    forwarded: int = field(init=False, default=0)
    _session: object = field(init=False, default=None)

    @property
    def url(self) -> str:
        return str(self.app.conf.canonical_url).rstrip("/")

    async def route(self, web, request, metric: str, answer_here):
        """``answer_here()`` when this view holds the metric completely, else a forwarded answer or a 503."""
        share = self.share
        shard = share.shard_of_metric(metric) if share.sharded else None
        if not share.sharded or shard in share.ready:
            # The read barrier first: the answer then holds every count acknowledged before the query
            # arrived, so no answer is smaller than one given before it began, by any worker.
            try:
                await self.current()
            except ViewBehind as exc:
                return self.unavailable(web, f"this worker cannot confirm its counts of metric {metric!r} are "
                                             f"current ({exc}); retry shortly")
            if not share.sharded:
                return await answer_here()
            if shard in share.ready:  # still: the share may have moved while the barrier waited
                response = await answer_here()
                response.headers[ANSWERED_BY_HEADER] = self.url
                return response
        if shard in share.held:
            return self.unavailable(web, f"this worker is rebuilding the counts of metric {metric!r} "
                                         "(a rebalance gave it their partition); retry shortly")
        if request.headers.get(FORWARDED_HEADER):
            return self.unavailable(web, f"metric {metric!r} moved to another worker; retry shortly")
        owner = None if self.app.rebalancing else owner_url(self.app, self.changelog_topic, shard)
        if owner is None or owner == self.url:
            return self.unavailable(web, f"no worker holds metric {metric!r} right now (the group is rebalancing); "
                                         "retry shortly")
        return await self.forward(web, request, owner, metric)

    async def listing(self, doc: dict, forwarded: bool, authorization: str | None = None) -> dict:
        """The JSON metric listing (``doc``: this worker's): with ``--view share`` the entries of metrics
        held elsewhere come from their holders (one request per holder, concurrently); an entry no holder
        gave says ``"unavailable"`` and why. A forwarded listing request gets this worker's own, its entries
        of metrics this view does not hold complete saying ``"unavailable"`` (their counts here are partial).
        ``authorization``: the client's header, sent on to the holders (they check the same tokens)."""
        share = self.share
        if not share.sharded:
            return doc
        if forwarded:
            moving = "its counts are moving between workers; retry shortly"
            return {**doc, "metrics": [e if share.shard_of_metric(e["name"]) in share.ready
                                       else {**e, "unavailable": moving} for e in doc["metrics"]]}
        wanted: dict[str, list[str]] = {}
        missing: dict[str, str] = {}
        for entry in doc["metrics"]:
            shard = share.shard_of_metric(entry["name"])
            if shard in share.ready:
                continue
            owner = None if self.app.rebalancing else owner_url(self.app, self.changelog_topic, shard)
            if owner is None or owner == self.url:
                missing[entry["name"]] = "its counts are moving between workers; retry shortly"
            else:
                wanted.setdefault(owner, []).append(entry["name"])
        answers = await asyncio.gather(*(self._get_json(owner + "/metrics?format=json", authorization)
                                         for owner in wanted))
        theirs = {}
        for (owner, names), answer in zip(wanted.items(), answers):
            entries = listing_entries(answer)
            for name in names:
                if name in entries:
                    theirs[name] = entries[name]
                else:
                    missing[name] = f"the worker holding it ({owner}) did not answer; retry shortly"
        metrics = [theirs.get(e["name"]) or ({**e, "unavailable": missing[e["name"]]} if e["name"] in missing else e)
                   for e in doc["metrics"]]
        return {**doc, "metrics": metrics}

    async def close(self) -> None:
        """Close the forwarding client (its pooled connections to the other workers), when the worker's
        web server has stopped: no query is forwarded after. Idempotent."""
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    def _client(self):
        import aiohttp

        if self._session is None:
            connector = aiohttp.TCPConnector(ssl=self.ssl) if self.ssl is not None else None
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout), connector=connector)
        return self._session

    async def _get_json(self, url: str, authorization: str | None = None) -> dict | None:
        import aiohttp

        try:
            async with self._client().get(url, headers=peer_headers(self.url, authorization)) as response:
                return await response.json() if response.status == 200 else None
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError) as exc:
            log.warning("reading the metric listing of %s failed: %s", url, exc or type(exc).__name__)
            return None

    async def forward(self, web, request, owner: str, metric: str):
        import aiohttp

        url = owner + request.path_qs
        try:
            async with self._client().get(url, headers={**peer_headers(self.url, request.headers.get("Authorization")),
                                                        "Accept": request.headers.get("Accept", "*/*")}) as response:
                body = await response.read()
                headers = {k: response.headers[k] for k in ("Retry-After", ANSWERED_BY_HEADER) if k in response.headers}
                self.forwarded += 1
                if not answer_fits(response.status, response.content_type, body):
                    log.warning("forwarding %s to %s: its %d answer is not a JSON object (%d bytes)", request.path_qs,
                                owner, response.status, len(body))
                    return bad_gateway(web, f"the worker holding metric {metric!r} ({owner}) answered {response.status} "
                                            "with something that is not a JSON object; retry, or see its log")
                return web.bytes(body, content_type=response.content_type, status=response.status, headers=headers)
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            log.warning("forwarding %s to %s failed: %s", request.path_qs, owner, exc or type(exc).__name__)
            return self.unavailable(web, f"the worker holding metric {metric!r} ({owner}) did not answer within "
                                         f"{self.timeout:g} s; retry shortly")

    @staticmethod
    def unavailable(web, why: str):
        from .answers.encode import to_json

        return web.bytes(to_json({"error": why, "status": 503}), content_type="application/json", status=503,
                         headers={"Retry-After": RETRY_AFTER_S})


def peer_headers(url: str, authorization: str | None) -> dict:
    """What a request to another worker carries: who forwards it, and the client's credential (every worker
    checks the same --api-tokens-file, so the holder decides as this worker would)."""
    headers = {FORWARDED_HEADER: url}
    if authorization:
        headers["Authorization"] = authorization
    return headers


def answer_fits(status: int, content_type: str, body: bytes) -> bool:
    """Whether a peer's answer may be passed on: anything but a 200 JSON answer that is not an object (every JSON
    answer of the API is one; a 200 list or string is a broken or foreign peer)."""
    if status != 200 or content_type != "application/json":
        return True
    return body.lstrip()[:1] == b"{"


def listing_entries(answer) -> dict:
    """A peer's metric listing's entries by name; {} for an answer that is not a listing (its metrics are then
    reported unavailable, never a 500)."""
    metrics = answer.get("metrics") if isinstance(answer, dict) else None
    if not isinstance(metrics, list):
        return {}
    return {e["name"]: e for e in metrics if isinstance(e, dict) and isinstance(e.get("name"), str)}


def bad_gateway(web, why: str):
    from .answers.encode import to_json

    return web.bytes(to_json({"error": why, "status": 502, "reason": "bad_gateway"}), content_type="application/json",
                     status=502)
