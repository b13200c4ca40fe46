"""benchmarks/bench_house.py counts how the packages fit together (issues 26, 36): on the tree no import runs
the wrong way (back up the floors, or sideways between the collector, the worker, the device clients and the
fleet) and no files import each other in a circle, and on a tiny synthetic tree in tmp_path it finds the
wrong-way imports and the file circle planted there (negative control: a chain that does not close is no
circle; the arrows the floors allow are not reported)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import bench_house


def test_no_import_runs_back_up_the_floors_and_no_file_circle_on_the_tree():
    assert bench_house.upward() == []
    assert bench_house.circles() == []
    arrows = bench_house.package_arrows()
    assert arrows[("agents", "cms_core")] > 0 and arrows[("ocms", "agents")] > 0  # it does read the tree
    assert arrows[("agents", "infra")] > 0 and arrows[("collector", "infra")] > 0


def test_only_the_composition_root_imports_everything():
    floors = bench_house.MAY_IMPORT
    assert set(floors) == set(bench_house.FLOORS)
    assert floors["ocms"] == set(bench_house.FLOORS) - {"ocms"}
    for package in ("collector", "agents"):
        assert floors[package] == {"cms_core", "infra", "registry"}, package
    assert floors["infra"] == {"cms_core"} and floors["cms_core"] == set()
    assert all("ocms" not in allowed for allowed in floors.values())


@pytest.mark.parametrize("source, target", [
    ("agents", "collector"), ("collector", "agents"), ("agents", "producer"), ("collector", "fleet"),
    ("producer", "fleet"), ("infra", "registry"), ("registry", "producer"), ("fleet", "ocms"), ("agents", "ocms"),
])
def test_a_planted_sideways_or_upward_import_is_found(tmp_path, source, target):
    _write(tmp_path, {
        f"{source}/__init__.py": "",
        f"{source}/a.py": f"def f():\n    from {target}.b import thing\n",
        f"{target}/__init__.py": "",
        f"{target}/b.py": "thing = 1\n",
    })
    assert bench_house.upward(tmp_path) == [f"{source}/a.py:2: {source}.a -> {target}.b"]


@pytest.mark.parametrize("source, target", [
    ("ocms", "agents"), ("ocms", "collector"), ("ocms", "fleet"), ("fleet", "producer"), ("agents", "infra"),
    ("collector", "registry"), ("infra", "cms_core"),
])
def test_an_arrow_the_floors_allow_is_not_reported(tmp_path, source, target):
    _write(tmp_path, {
        f"{source}/__init__.py": "",
        f"{source}/a.py": f"from {target}.b import thing\n",
        f"{target}/__init__.py": "",
        f"{target}/b.py": "thing = 1\n",
    })
    assert bench_house.upward(tmp_path) == []
    assert bench_house.package_arrows(tmp_path)[(source, target)] == 1


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_a_planted_circle_and_upward_import_are_found_and_a_chain_is_not(tmp_path):
    _write(tmp_path, {
        "cms_core/__init__.py": "",
        "cms_core/a.py": "from cms_core.b import thing\n",
        "cms_core/b.py": "def f():\n    from . import a\n",  # inside a function, relative: still an arrow
        "cms_core/c.py": "import cms_core.a\n",  # c -> a -> b -> a: c is outside the circle
        "registry/__init__.py": "",
        "registry/up.py": "from agents.app import App\n",
        "agents/__init__.py": "",
        "agents/app.py": "import cms_core.c\n",
    })
    assert bench_house.circles(tmp_path) == [["cms_core.a", "cms_core.b"]]
    assert bench_house.upward(tmp_path) == ["registry/up.py:1: registry.up -> agents.app"]
    arrows = bench_house.package_arrows(tmp_path)
    assert arrows[("registry", "agents")] == 1 and arrows[("agents", "cms_core")] == 1


def test_a_tree_without_circles_or_upward_imports_reports_none(tmp_path):
    _write(tmp_path, {
        "cms_core/__init__.py": "from cms_core.a import thing\n",
        "cms_core/a.py": "thing = 1\n",
        "registry/__init__.py": "",
        "registry/x.py": "from cms_core.a import thing\n",
    })
    assert bench_house.circles(tmp_path) == []
    assert bench_house.upward(tmp_path) == []


def test_importing_a_compiled_module_is_not_importing_its_package(tmp_path):
    """``from . import _ext`` beside ``_ext.c`` imports ``pkg._ext``, not ``pkg/__init__``: no circle
    with the package re-exporting the importer."""
    _write(tmp_path, {
        "cms_core/__init__.py": "from .kernel import match\n",
        "cms_core/kernel.py": "from . import _ext\nmatch = _ext.match\n",
        "cms_core/_ext.c": "/* compiled */\n",
    })
    assert bench_house.circles(tmp_path) == []
    (tmp_path / "cms_core/_ext.c").unlink()  # unknown: then it reads as the package itself
    assert bench_house.circles(tmp_path) == [["cms_core", "cms_core.kernel"]]


def test_no_product_unit_is_over_the_limits_but_those_not_yet_split():
    """Issue 36: functions at most 80 lines, classes 400, modules 700; the allowlist holds only units that
    still are over (a unit split since must leave it), each with its reason."""
    large = bench_house.oversized()
    assert set(large) - set(bench_house.NOT_YET_SPLIT) == set(), large
    assert set(bench_house.NOT_YET_SPLIT) - set(large) == set(), "split since: take it off NOT_YET_SPLIT"
    assert all(reason.strip() for reason in bench_house.NOT_YET_SPLIT.values())
    sizes = bench_house.unit_sizes()
    assert sizes["registry/loader.py"][0] == "module" and sizes["cms_core/params.py:OCMSParams.build"][0] == "function"


def test_a_planted_long_function_class_and_module_are_found_and_short_ones_are_not(tmp_path):
    body = "".join(f"    x{i} = {i}\n" for i in range(80))
    _write(tmp_path, {
        "infra/__init__.py": "",
        "infra/long.py": f"def long():\n{body}\n\nclass Big:\n    def short(self):\n        return 1\n"
        + "".join(f"    def m{i}(self):\n{body.replace('    ', '        ')}" for i in range(5)) + "\n" * 300,
        "infra/short.py": "def f():\n" + "".join(f"    x{i} = {i}\n" for i in range(79)),  # 80 lines: at the limit
    })
    large = bench_house.oversized(tmp_path)
    assert large["infra/long.py:long"] == ("function", 81)
    assert large["infra/long.py:Big"][0] == "class" and "infra/long.py:Big.m0" in large
    assert large["infra/long.py"][0] == "module"
    assert "infra/long.py:Big.short" not in large and not any(unit.startswith("infra/short.py") for unit in large)
    assert bench_house.unit_sizes(tmp_path)["infra/short.py:f"] == ("function", 80)
