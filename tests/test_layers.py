"""The layering of the package stays honest: a module may import its own layer and the
layers below it, never one above (lazy imports inside functions included), and no
module imports another module's private names.

    errors, cache, hub  <  tasks  <  db  <  bench  <  evaluation  <  env  <  serve  <  agents
                        <  data  <  view  <  training  <  cli

`view` only reads run artifacts (it imports `tasks` for the task SQL of old records), so
`training` may write a run's viewer."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "src" / "birdrl"
LAYERS = [
    "tasks",
    "db",
    "dialects",
    "bench",
    "evaluation",
    "env",
    "serve",
    "agents",
    "data",
    "view",
    "training",
    "cli",
]
BASE = {"errors", "cache", "hub", ""}  # importable from anywhere; "" is the package itself
TOP = {"__main__"}


def _layer(module: str) -> str:
    parts = module.removesuffix(".__init__").split(".")
    return parts[1] if len(parts) > 1 else ""


def upward_imports(root: Path) -> list[str]:
    """``file:line: A imports B`` for every import of a higher layer under `root`."""
    problems = []
    for path in sorted(root.rglob("*.py")):
        module = ".".join(("birdrl", *path.relative_to(root).with_suffix("").parts))
        source = _layer(module)
        if source in BASE | TOP:
            continue
        if source not in LAYERS:
            problems.append(f"{path}: package {source!r} has no place in LAYERS")
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [node.module]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            for target in targets:
                if target != "birdrl" and not target.startswith("birdrl."):
                    continue
                layer = _layer(target)
                if layer in BASE or layer == source:
                    continue
                if layer not in LAYERS or LAYERS.index(layer) > LAYERS.index(source):
                    problems.append(
                        f"{path}:{node.lineno}: {source} imports {target} (a higher layer)"
                    )
    return problems


def private_imports(root: Path) -> list[str]:
    """``file:line`` for every import of another module's private (``_name``) names."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("birdrl"):
                names = [
                    a.name
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                ]
                if names:
                    found.append(f"{path}:{node.lineno}: {', '.join(names)} from {node.module}")
    return found


def test_no_module_imports_another_modules_private_names(tmp_path: Path) -> None:
    assert private_imports(ROOT) == []
    (tmp_path / "x.py").write_text("from birdrl.db.service import _encode\n")
    assert private_imports(tmp_path)  # the check can fail


def _module_name(root: Path, path: Path) -> str:
    return ".".join(("birdrl", *path.relative_to(root).with_suffix("").parts)).removesuffix(
        ".__init__"
    )


def import_cycles(root: Path) -> list[list[str]]:
    """Groups of modules that import each other when imported (module-level imports, those
    in ``try``/``if`` included; ``if TYPE_CHECKING:`` blocks and imports inside functions
    never run at import time and are left out)."""
    modules = {_module_name(root, p): p for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps: set[str] = set()
        pending = list(ast.parse(path.read_text(encoding="utf-8")).body)
        while pending:
            node = pending.pop()
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            if isinstance(node, (ast.If, ast.Try)):
                pending += node.body + node.orelse + getattr(node, "finalbody", [])
                pending += [n for h in getattr(node, "handlers", []) for n in h.body]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                deps.update(
                    m
                    for m in (node.module, *(f"{node.module}.{a.name}" for a in node.names))
                    if m in modules
                )
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name in modules)
        graph[name] = deps - {name}
    # strongly connected components (Tarjan): any with two or more modules is a cycle
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_no_import_cycles(tmp_path: Path) -> None:
    assert import_cycles(ROOT) == []
    (tmp_path / "a.py").write_text("from birdrl.b import x\n")
    (tmp_path / "b.py").write_text("try:\n    import birdrl.a\nexcept ImportError:\n    pass\n")
    assert import_cycles(tmp_path) == [["birdrl.a", "birdrl.b"]]  # the check can fail


def test_no_module_imports_a_higher_layer() -> None:
    assert (ROOT / "training").is_dir() and (ROOT / "view").is_dir()
    assert upward_imports(ROOT) == []


def test_every_package_has_a_layer() -> None:
    packages = {p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert packages <= set(LAYERS), packages - set(LAYERS)


@pytest.mark.parametrize(
    ("where", "line", "caught"),
    [
        ("tasks/x.py", "from birdrl.training.config import CurriculumConfig", True),
        ("db/x.py", "def f():\n    import birdrl.env.sqlact", True),  # lazy imports count
        ("env/x.py", "from birdrl.db.pool import ReplicaPool", False),
        ("view/x.py", "from birdrl.errors import BirdrlError", False),
    ],
)
def test_the_check_catches_an_upward_import(
    tmp_path: Path, where: str, line: str, caught: bool
) -> None:
    path = tmp_path / where
    path.parent.mkdir(parents=True)
    path.write_text(line + "\n")
    assert bool(upward_imports(tmp_path)) == caught
