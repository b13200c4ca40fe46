"""Every `ocms` command explains itself: a description per command, a help string per option (issue 24, 5).

Walks the argparse tree the entry point builds, so a command or flag added later without help fails here.
"""

from __future__ import annotations

import argparse
import re

import pytest

from ocms.cli import build_parser
from tests.agents.harness import ROOT, ocms


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ("ocms",)):
    """(command path, its parser) for the parser and every sub-command below it."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from commands(sub, path + (name,))


def options(parser: argparse.ArgumentParser):
    return [a for a in parser._actions if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))]


ALL = list(commands(build_parser()))


def test_the_walk_sees_every_command():
    names = {" ".join(path) for path, _ in ALL}
    assert {"ocms run", "ocms simulate", "ocms estimate", "ocms discover", "ocms collector", "ocms worker",
            "ocms registry describe", "ocms plan", "ocms broker"} <= names


@pytest.mark.parametrize("path, parser", ALL, ids=[" ".join(p) for p, _ in ALL])
def test_every_command_has_a_description_and_every_option_a_help(path, parser):
    assert parser.description and parser.description.strip(), f"{' '.join(path)}: no description"
    missing = [a.option_strings[0] if a.option_strings else a.dest for a in options(parser)
               if not a.help or a.help == argparse.SUPPRESS or not a.help.strip()]
    assert not missing, f"{' '.join(path)}: options without help: {', '.join(missing)}"


def requirement(action: argparse.Action) -> str | None:
    """What an option's help says of being required: "argparse" when the parser enforces it, else the
    "required ..." item of its trailing [...] (e.g. "required without --registry"), else None."""
    if action.required:
        return "argparse"
    marker = re.search(r"\[([^\[\]]*)\]\s*$", action.help or "")
    items = [item.strip() for item in marker.group(1).split(",")] if marker else []
    return next((item for item in items if item.startswith("required")), None)


#: Per command, every option that must be given and what says so (argparse, or the help's marker, checked
#: when the flags resolve: a variable in the marker can stand in for the flag). A command not listed has none.
REQUIRED = {
    "ocms plan": {"--epsilon": "required without --registry",
                  "--dictionary-size": "required for integers without --registry"},
    "ocms estimate": {"inputs": "argparse", "--epsilon": "required without --registry",
                      "--dictionary-size": "required for integers without --registry"},
    "ocms worker": {"--epsilon": "required", "--dictionary-size": "required for integers",
                    "--bootstrap-servers": "required"},
    "ocms registry check": {"file": "argparse"},
    "ocms registry lock": {"file": "argparse"},
    "ocms registry describe": {"file": "argparse"},
    "ocms registry device-config": {"file": "argparse"},
    "ocms discover": {"inputs": "argparse", "--registry": "argparse"},
    "ocms collector": {"--registry": "required", "--bootstrap-servers": "required"},
    "ocms migrate": {"--bootstrap-servers": "argparse", "--from-app-id": "argparse", "--to-app-id": "argparse"},
}


@pytest.mark.parametrize("path, parser", ALL, ids=[" ".join(p) for p, _ in ALL])
def test_an_option_marked_required_is_required(path, parser):
    """The help's "required" says what is enforced: argparse's own, or, written in the help's [...] (with
    its condition: [required without --registry], [required for integers]), what the settings check when
    they resolve. A bare "required" that argparse does not enforce stands beside the variable that can
    give the value instead ([OCMS_EPSILON, required]): a flag marked [required] must be argparse's."""
    command = " ".join(path)
    found = {}
    for action in options(parser):
        name = action.option_strings[0] if action.option_strings else action.dest
        said = requirement(action)
        if said is not None:
            found[name] = said
        if said == "required":
            variable = re.search(r"\[(OCMS_[A-Z0-9_]+), required\]\s*$", action.help)
            assert variable, f"{command} {name}: help says [required], argparse does not enforce it"
    assert found == REQUIRED.get(command, {}), command


def test_the_requirement_reading_tells_the_markers_apart():
    """Negative control of requirement(): each form of marker, and none."""
    parser = argparse.ArgumentParser()
    marked = {"--a": dict(required=True, help="x"), "--b": dict(help="x [required]"),
              "--c": dict(help="x [OCMS_C, required for integers]"), "--d": dict(help="x [default 3]"),
              "--e": dict(help="required in prose, not in the marker")}
    actions = {flag: parser.add_argument(flag, **kwargs) for flag, kwargs in marked.items()}
    assert {flag: requirement(a) for flag, a in actions.items()} == {
        "--a": "argparse", "--b": "required", "--c": "required for integers", "--d": None, "--e": None}


@pytest.mark.integration
@pytest.mark.parametrize("command", ["estimate", "plan"])
def test_epsilon_is_required_only_without_a_registry(command):
    out = ocms(command, "--help")[1]
    assert "[required without --registry]" in " ".join(out.split())


@pytest.mark.integration
def test_run_help_describes_the_command():
    code, out, _ = ocms("run", "--help")
    assert code == 0 and "make run" in out and "--partitions" in out


@pytest.mark.integration
def test_discover_errors_and_warnings_name_the_command(tmp_path):
    """Each line `ocms discover` writes to stderr starts with `ocms discover:` (one did not)."""
    torn = tmp_path / "torn.cap"
    torn.write_bytes((100).to_bytes(4, "big") + b"x")  # no complete message, a damaged tail
    code, _, err = ocms("discover", "--registry", str(ROOT / "deploy" / "registry.yaml"), "--metric",
                        "flight_tailnum", str(torn))
    assert code == 1 and err.count("\n") == 2, err
    assert all(line.startswith(("ocms discover: warning: ", "ocms discover: error: ")) for line in err.splitlines())
    assert "no report of flight_tailnum@1" in err and "damaged tail" in err
