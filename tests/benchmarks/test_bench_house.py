"""benchmarks/bench_house.py counts how the packages fit together (issue 26): on the tree no import runs
back up the floors and no files import each other in a circle, and on a tiny synthetic tree in tmp_path it finds the upward import and the file
circle planted there (negative control: a chain that does not close is no circle)."""

from __future__ import annotations

from pathlib import Path

from benchmarks import bench_house


def test_no_import_runs_back_up_the_floors_and_no_file_circle_on_the_tree():
    assert bench_house.upward() == []
    assert bench_house.circles() == []
    arrows = bench_house.package_arrows()
    assert arrows[("agents", "cms_core")] > 0  # it does read the tree


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
