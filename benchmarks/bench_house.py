"""How the packages fit together (issues 26, 36): import arrows between them, those that run the wrong way,
file circles, and the units too large to read at once.

    python -m benchmarks.bench_house

The packages stand on floors (docs/layout.md): cms_core <- infra <- registry <- (producer | fleet | collector |
agents) <- ocms. A package imports only the floors below it (:data:`MAY_IMPORT`); on the floor of the four,
only the fleet imports another (producer/, the device clients it simulates): the collector and the worker
never import each other, producer/ or fleet/, and only ocms/, the composition root, imports everything.
Every import of a product package is counted, at module level or inside a function (the review's grep,
``grep -rnE "^\\s*(from|import) (agents|collector|producer|registry)\\b"``, reads both), relative
imports included. A file circle is a set of modules that import each other, directly or through
others (Tarjan's strongly connected components); ``from . import x`` counts as importing ``pkg.x``,
not the package's ``__init__``; so does ``from . import _kernel`` of a compiled extension module
(known by its C source or its build, ``cms_core/_kernel.c``).

A unit is too large over the house limits (:data:`LIMITS`): a function or method over 80 lines, a class over
400, a module over 700, counted from its ``def``/``class`` line (decorators not included) to its last line,
docstring and comments included. :data:`NOT_YET_SPLIT` names the few that still are, each with its reason.
"""

from __future__ import annotations

import ast
import importlib.machinery
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Lowest floor first (the order the arrows are printed in).
FLOORS = ("cms_core", "infra", "registry", "producer", "fleet", "collector", "agents", "ocms")
#: Package -> the packages it may import: every arrow to any other runs the wrong way.
_SHARED = {"cms_core", "infra", "registry"}
MAY_IMPORT = {
    "cms_core": set(),
    "infra": {"cms_core"},
    "registry": {"cms_core", "infra"},
    "producer": _SHARED,
    "fleet": _SHARED | {"producer"},  # a simulated device uses the device clients' transports
    "collector": _SHARED,
    "agents": _SHARED,
    "ocms": set(FLOORS) - {"ocms"},
}
#: A compiled extension module's source or build (it imports no product module).
COMPILED = (".c", *importlib.machinery.EXTENSION_SUFFIXES)


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Module name -> file, for every product package (compiled extension modules included)."""
    out = {}
    for package in FLOORS:
        for path in sorted((root / package).rglob("*.py")):
            name = ".".join(path.relative_to(root).with_suffix("").parts)
            out[name.removesuffix(".__init__")] = path
        for path in sorted((root / package).rglob("*")):
            if path.name.endswith(COMPILED) and (path.parent / "__init__.py").exists():
                name = ".".join(path.relative_to(root).parent.parts + (path.name.split(".")[0],))
                out.setdefault(name, path)
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> list[tuple[str, int]]:
    """(imported module, line) of every import in ``path`` of a product module, at any depth."""
    if path.suffix != ".py":
        return []  # compiled
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.append((full if full in known else base, node.lineno))
    return [(target, line) for target, line in found if target.split(".")[0] in FLOORS and target != name]


def package_arrows(root: Path = ROOT) -> Counter:
    """(from package, to package) -> import statements."""
    known = modules(root)
    arrows = Counter()
    for name, path in known.items():
        for target, _ in imports(name, path, known):
            arrows[(name.split(".")[0], target.split(".")[0])] += 1
    return arrows


def wrong_way(source: str, target: str) -> bool:
    """Whether an import from package ``source`` of package ``target`` runs up the floors or sideways."""
    return source != target and target not in MAY_IMPORT[source]


def upward(root: Path = ROOT) -> list[str]:
    """Every import that runs the wrong way (back up the floors, or sideways between the collector, the
    worker, the device clients and the fleet), as FILE:LINE: module -> module."""
    known = modules(root)
    out = []
    for name, path in known.items():
        for target, line in imports(name, path, known):
            if wrong_way(name.split(".")[0], target.split(".")[0]):
                out.append(f"{path.relative_to(root)}:{line}: {name} -> {target}")
    return out


def circles(root: Path = ROOT) -> list[list[str]]:
    """The file circles (strongly connected components of more than one module)."""
    known = modules(root)
    edges = {name: {t for t, _ in imports(name, path, known) if t in known} for name, path in known.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in known:
        if v not in index:
            visit(v)
    return found


#: Kind of unit -> the most lines it may have.
LIMITS = {"function": 80, "class": 400, "module": 700}
#: Units over the limits that are not split yet: "FILE" (a module) or "FILE:QUALIFIED.NAME" -> why.
NOT_YET_SPLIT: dict[str, str] = {}  # "path:Unit" -> why it is not split yet (none left)


def unit_sizes(root: Path = ROOT) -> dict[str, tuple[str, int]]:
    """Every product unit -> (kind, lines): "FILE" for a module, "FILE:QUALIFIED.NAME" for a class, a function
    or a method (nested ones too)."""
    out = {}
    for package in FLOORS:
        for path in sorted((root / package).rglob("*.py")):
            file = path.relative_to(root).as_posix()
            text = path.read_text(encoding="utf-8")
            out[file] = ("module", len(text.splitlines()))
            _walk_units(ast.parse(text), file, "", out)
    return out


def _walk_units(node: ast.AST, file: str, prefix: str, out: dict[str, tuple[str, int]]) -> None:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            kind = "class" if isinstance(child, ast.ClassDef) else "function"
            name = f"{prefix}{child.name}"
            out[f"{file}:{name}"] = (kind, child.end_lineno - child.lineno + 1)
            _walk_units(child, file, f"{name}.", out)
        else:
            _walk_units(child, file, prefix, out)


def oversized(root: Path = ROOT) -> dict[str, tuple[str, int]]:
    """The units over :data:`LIMITS`, largest first within each kind."""
    found = {unit: (kind, lines) for unit, (kind, lines) in unit_sizes(root).items() if lines > LIMITS[kind]}
    return dict(sorted(found.items(), key=lambda item: (list(LIMITS).index(item[1][0]), -item[1][1])))


def main() -> None:
    arrows = package_arrows()
    print("package arrows (import statements, module level and inside functions):")
    for (source, target), count in sorted(arrows.items(), key=lambda item: (FLOORS.index(item[0][0]), item[0][1])):
        if source != target:
            direction = "WRONG WAY" if wrong_way(source, target) else "down"
            print(f"  {source:>9} -> {target:<9} {count:3d}  {direction}")
    up = upward()
    print(f"package pairs: {sum(1 for s, t in arrows if s != t)}; imports running the wrong way: {len(up)}")
    for line in up:
        print(f"  {line}")
    found = circles()
    print(f"file circles: {len(found)}")
    for circle in found:
        print("  " + " <-> ".join(circle))
    large = oversized()
    limits = ", ".join(f"{kind} {most}" for kind, most in LIMITS.items())
    print(f"units over the limits ({limits} lines): {len(large)}; not yet split: {len(NOT_YET_SPLIT)}")
    for unit, (kind, lines) in large.items():
        reason = NOT_YET_SPLIT.get(unit, "OVER THE LIMIT")
        print(f"  {kind:<8} {lines:4d}  {unit}  ({reason})")


if __name__ == "__main__":
    main()
