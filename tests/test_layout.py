"""The layout's rules (docs/ARCHITECTURE.md), read from the code's own imports."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("engine", "analysis", "remote", "classroom", "replicas", "ui", "playground", "labs", "lessons", "tools",
            "app_pages", "records", "course")
# Which project packages each layer may import (besides itself).
ALLOWED = {
    "engine": set(),
    "analysis": {"engine", "replicas"},        # replicas: its charts
    "remote": {"engine"},                      # clients of an engine server: no Streamlit
    "classroom": {"engine", "analysis", "remote", "ui", "records", "lessons", "course"},   # ui, lessons: its pages only (below)
    "replicas": {"engine", "remote"},          # replicas, a router, an autoscaler: no Streamlit
    "ui": {"engine", "analysis", "records", "course"},
    "records": {"engine"},                     # the learners' store: no Streamlit (engine: the cache folder)
    "playground": {"engine", "analysis", "ui", "remote"},
    "labs": {"engine", "analysis", "ui", "replicas", "course"},
    "lessons": {"ui", "course", "engine"},     # engine: its settings (where the lessons are read from)
    "app_pages": {"engine", "analysis", "remote", "classroom", "ui", "lessons", "playground", "course"},
    "course": {"engine", "analysis", "replicas"},   # the course's content: which lessons and labs, questions, claims, quizzes, worked examples, pictures
    "tools": set(PACKAGES) - {"tools"},
    "app": {"ui", "lessons", "engine", "course"},        # engine: imported first, for its OpenMP wait setting
}
NO_STREAMLIT = ("engine", "analysis", "remote", "classroom", "replicas", "records", "course")
# A feature room keeps its page beside its logic; the page is its one module that draws.
PAGES = {"classroom.page", "classroom.teacher"}
MAX_LINES = 400
# One cohesive concept each, longer than MAX_LINES: (file, why).
LONG_ON_PURPOSE = {}


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> file, for every project module (tests aside)."""
    out = {}
    for pkg in PACKAGES:
        for path in (root / pkg).rglob("*.py"):
            rel = path.relative_to(root).with_suffix("")
            name = ".".join(rel.parts)
            out[name.removesuffix(".__init__")] = path
    out["app"] = root / "app.py"
    return out


def imports(path: Path, name: str) -> set[str]:
    """Every module `path` imports, as dotted names (relative imports resolved)."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
    return found


def project_graph(root: Path = ROOT) -> dict[str, set[str]]:
    mods = modules(root)
    return {name: {m for m in imports(path, name) if m in mods and m != name}
            for name, path in mods.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Import loops, each as the list of modules on it (depth-first search)."""
    found, state = [], {}

    def visit(node, stack):
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                found.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


def layer(module: str) -> str:
    return module.split(".")[0]


def test_no_import_cycles():
    assert cycles(project_graph()) == []


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]


def test_layers_import_only_downwards():
    wrong = [(mod, dep) for mod, deps in project_graph().items() for dep in deps
             if layer(dep) != layer(mod) and layer(mod) in ALLOWED and layer(dep) not in ALLOWED[layer(mod)]]
    assert wrong == []


@pytest.mark.parametrize("package", NO_STREAMLIT)
def test_engine_and_analysis_import_no_streamlit(package):
    offenders = [name for name, path in modules().items() if layer(name) == package and name not in PAGES
                 and any(m.split(".")[0] in ("streamlit", "ui") for m in imports(path, name))]
    assert offenders == []


def test_modules_stay_small():
    long = {str(p.relative_to(ROOT)): n for p in modules().values()
            if (n := len(p.read_text().splitlines())) > MAX_LINES and str(p.relative_to(ROOT)) not in LONG_ON_PURPOSE}
    assert long == {}


# engine/'s own rooms, bottom to top: each may import the rooms before it in this list, never one
# after it (a lazy import inside a function counts too). core is the engine itself and imports no torch.
ENGINE_ROOMS = ("core", "model", "runs", "sim", "server", "cli")
TORCH = ("torch", "transformers")


def engine_room(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "engine" and len(parts) > 2 or (len(parts) == 2 and parts[1] in ENGINE_ROOMS
                                                                      and parts[0] == "engine") else None


def upward_engine_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    order = {room: k for k, room in enumerate(ENGINE_ROOMS)}
    return [(mod, dep) for mod, deps in graph.items() for dep in deps
            if engine_room(mod) in order and engine_room(dep) in order
            and order[engine_room(dep)] > order[engine_room(mod)]]


def test_engine_rooms_import_only_downwards():
    graph = project_graph()
    rooms = {engine_room(m) for m in graph if m.startswith("engine.")} - {None}
    assert rooms == set(ENGINE_ROOMS), "every module of engine/ sits in one of its rooms"
    assert [m for m in graph if m.startswith("engine.") and engine_room(m) is None and m.count(".") > 1] == []
    assert upward_engine_imports(graph) == []


def test_the_room_check_sees_an_import_upwards():
    assert upward_engine_imports({"engine.core.scheduler": {"engine.model.runner"}}) == \
        [("engine.core.scheduler", "engine.model.runner")]


def test_the_engine_core_imports_no_torch():
    mods = modules()
    offenders = {name for name, path in mods.items() if engine_room(name) == "core"
                 and any(m.split(".")[0] in TORCH for m in imports(path, name))}
    assert offenders == set()
