"""The live console: a read-only web page served by every worker at ``/``.

Static files only (``index.html``, ``console.js``, ``console.css`` and the
vendored uPlot chart library under ``vendor/``): the page reads the worker's
public HTTP API by metric name (the listing ``/metrics?format=json``, then
``/metrics/NAME/topk``, ``/trend`` and ``/estimates?version=combined``; and
``/healthz``) from the browser and polls it. Nothing is built at install time; the files ship as
package data and are read once, when the routes are added, so a broken
install fails at start rather than on the first page view.

One route of its own: ``/console/truth[?metric=NAME]`` serves the ground truth
of a simulated fleet (the JSON ``ocms simulate --truth`` writes, or one such
document per metric as ``ocms run`` writes and rewrites while it sends) when
the worker was started with a truth file, so the page can draw the true
frequencies beside the estimates and the discovered values. The worker has no
other way to know the truth, and a real fleet has none: the answer then says
``{"available": false}`` (200, so a browser logs no failed request).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: URL name -> (file under this package, content type). Only these are served.
ASSETS = {
    "console.js": ("console.js", "application/javascript"),
    "console.css": ("console.css", "text/css"),
    "vendor/uPlot.iife.min.js": ("vendor/uPlot.iife.min.js", "application/javascript"),
    "vendor/uPlot.min.css": ("vendor/uPlot.min.css", "text/css"),
    "vendor/uPlot.LICENSE": ("vendor/uPlot.LICENSE", "text/plain"),
}
#: Short caching: a worker upgrade shows its own page after a reload.
CACHE = {"Cache-Control": "max-age=60"}
NO_CACHE = {"Cache-Control": "no-store"}
#: A truth file larger than this is refused (the dictionary is at most 100,000 values).
MAX_TRUTH_BYTES = 32 * 1024 * 1024


def load_assets() -> tuple[str, dict[str, tuple[str, str]]]:
    """The page and its assets as text; a missing file names itself (broken package data)."""
    try:
        index = (HERE / "index.html").read_text(encoding="utf-8")
        assets = {name: ((HERE / path).read_text(encoding="utf-8"), ctype) for name, (path, ctype) in ASSETS.items()}
    except OSError as exc:
        raise RuntimeError(f"console files missing from the installed package ({exc}); reinstall ocms-pipeline") from exc
    return index, assets


def _truth_entry(doc: dict) -> dict:
    """One metric's truth, checked: what the page needs of an ``ocms simulate --truth`` document."""
    entry = {
        "reports": int(doc["reports"]), "fingerprint": str(doc.get("fingerprint") or ""),
        "dataset": str(doc.get("dataset", "")),
        "counts": [{"value": str(c["value"]), "label": str(c.get("label", c["value"])), "count": int(c["count"])}
                   for c in doc["counts"]],
    }
    if doc.get("metric") is not None:
        entry["metric"] = str(doc["metric"])
    if doc.get("discovery"):  # the truth of a discovery fleet (its reports are level reports of the metric)
        entry["discovery"] = True
    return entry


#: path -> ((inode, size, mtime), checked truths): a file rewritten every few seconds is parsed once per
#: version, not on every poll of every open page.
_TRUTH_CACHE: dict[str, tuple[tuple, list]] = {}


def read_truth(path: str | None, metric: str | None = None) -> tuple[int, dict]:
    """(HTTP status, document) for ``/console/truth``: the truth file's content, checked.

    The file holds one ``ocms simulate --truth`` document, or ``{"truths": [...]}``: one such
    document per simulated metric, each naming its ``metric`` (``ocms run``: the main metric and its
    companions, and ``discovery: true`` for a discovery fleet's values). The answer is always
    ``{"available": true, "truths": [...]}``; ``metric`` keeps the truths of that metric (and one
    that names none). The file is rewritten by another process while the page polls: the writer
    replaces it atomically, and a file that is malformed gives a clear 500 answer rather than a
    wrong marker.
    """
    if not path:
        return 200, {"available": False, "reason": "no ground truth: the worker was started without --truth"}
    try:
        with open(path, "rb") as handle:
            info = os.fstat(handle.fileno())
            key = (info.st_ino, info.st_size, info.st_mtime_ns)
            cached = _TRUTH_CACHE.get(path)
            if cached is not None and cached[0] == key:
                truths = cached[1]
            else:
                raw = handle.read(MAX_TRUTH_BYTES + 1)
                truths = None
    except FileNotFoundError:
        return 200, {"available": False, "reason": f"truth file {path} not written yet"}
    except OSError as exc:
        return 500, {"error": f"cannot read the truth file {path}: {exc.strerror}", "status": 500}
    if truths is None:
        if len(raw) > MAX_TRUTH_BYTES:
            return 500, {"error": f"truth file {path} is larger than {MAX_TRUTH_BYTES} bytes", "status": 500}
        try:
            doc = json.loads(raw)
            truths = [_truth_entry(d) for d in doc["truths"]] if "truths" in doc else [_truth_entry(doc)]
        except (ValueError, KeyError, TypeError) as exc:
            return 500, {"error": f"truth file {path} is not a truth document (ocms simulate --truth): "
                                  f"{type(exc).__name__}: {exc}", "status": 500}
        _TRUTH_CACHE[path] = (key, truths)
    if metric is not None:
        truths = [t for t in truths if t.get("metric") in (None, metric)]
    return 200, {"available": True, "truths": truths}


def write_truth_atomically(path: str | os.PathLike, write) -> None:
    """Call ``write(tmp_path)`` then rename over ``path``: a reader never sees half a file."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    write(tmp)
    os.replace(tmp, target)


def add_console(app, truth_file: str | None = None) -> None:
    """Register ``/`` (the page), ``/console/...`` (its assets) and ``/console/truth`` on a Faust app."""
    index, assets = load_assets()

    @app.page("/")
    async def console_page(web, request):
        return web.html(index, headers=dict(CACHE))

    @app.page("/console/truth")
    async def console_truth(web, request):
        status, doc = read_truth(truth_file, request.query.get("metric"))
        return web.json(doc, status=status, headers=dict(NO_CACHE))

    # After /console/truth: aiohttp matches routes in the order they were added.
    @app.page("/console/{name}")
    async def console_asset(web, request, name):
        return _asset(web, assets, name)

    @app.page("/console/vendor/{name}")
    async def console_vendor(web, request, name):
        return _asset(web, assets, "vendor/" + name)


def _asset(web, assets: dict, name: str):
    if name not in assets:
        return web.json({"error": f"no console file {name!r}", "status": 404}, status=404)
    text, content_type = assets[name]
    return web.text(text, content_type=content_type, headers=dict(CACHE))
