"""The package layout: an acyclic module graph, subpackages that never import the package
above them, no flax on ``import scarjax``, and public names that mean one thing.

The import graph is read from the source with :mod:`ast` (so an import cycle is caught
whatever order a program happens to import modules in); importing is checked in a fresh
interpreter.
"""

from __future__ import annotations

import ast
import importlib
import json
import pkgutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

import scarjax

ROOT = Path(scarjax.__file__).resolve().parent


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}
PACKAGES = sorted(m for m, p in MODULES.items() if p.name == "__init__.py")


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(module: str) -> list[tuple[str, list[str], int, bool]]:
    """``(target module, imported names, line, at module level)`` for every import of a
    scarjax module in ``module``'s source (relative imports resolved; ``from p import x``
    targets ``p.x`` when that is a module, else ``p`` with name ``x``). Imports under
    ``if TYPE_CHECKING:`` are skipped; class bodies run at import time, so they count as
    module level; function bodies do not."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(child, False)
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                continue
            elif isinstance(child, ast.Import):
                for alias in child.names:
                    found.append((alias.name, [], child.lineno, top))
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = package.split(".")
                    parts = parts[: len(parts) - (child.level - 1)]
                    base = ".".join(parts + ([base] if base else []))
                for alias in child.names:
                    sub = f"{base}.{alias.name}"
                    if sub in MODULES:
                        found.append((sub, [], child.lineno, top))
                    else:
                        found.append((base, [alias.name], child.lineno, top))
            else:
                visit(child, top)

    visit(ast.parse(path.read_text(), str(path)), True)
    return [f for f in found if f[0] in MODULES]


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` (a list of modules, first == last), or ``None``."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(u: str) -> list[str] | None:
        state[u] = 1
        stack.append(u)
        for v in sorted(graph[u]):
            if state.get(v) == 1:
                return stack[stack.index(v):] + [v]
            if v not in state and (c := dfs(v)):
                return c
        stack.pop()
        state[u] = 2
        return None

    for u in sorted(graph):
        if u not in state and (c := dfs(u)):
            return c
    return None


def test_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_module_level_imports_are_acyclic():
    """No module imports, at module level, a module that imports it back (directly or
    through others). Importing ``a.b`` runs ``a/__init__`` first, but that is the parent
    package's own business: the edge is to the module named."""
    graph = {m: {t for t, _, _, top in _imports(m) if top and t != m} for m in MODULES}
    assert _cycle(graph) is None, "module-level import cycle: " + " -> ".join(_cycle(graph))


def test_function_local_imports_break_cycles_through_public_names_only():
    """A function-local import may break a real cycle (two modules that need each
    other), but not reach into the other module's private names: a private helper both
    need belongs in a module below both (issue 12: ``ps/server`` <-> ``ps/topk``)."""
    graph = {m: {t for t, _, _, _ in _imports(m) if t != m} for m in MODULES}

    def reaches(a: str, b: str) -> bool:
        seen, todo = set(), [a]
        while todo:
            u = todo.pop()
            if u == b:
                return True
            if u not in seen:
                seen.add(u)
                todo.extend(graph[u])
        return False

    bad = []
    for m in MODULES:
        for target, names, line, _ in _imports(m):
            private = [n for n in names if n.startswith("_")]
            if private and target != m and reaches(target, m):
                bad.append(f"{MODULES[m].relative_to(ROOT.parent)}:{line}: from {target} import "
                           f"{', '.join(private)} (and {target} imports {m}, directly or not)")
    assert not bad, "import cycles through private names:\n" + "\n".join(bad)


def test_no_module_imports_the_package_above_it():
    """Only ``scarjax/__init__.py`` may use the names ``scarjax/__init__`` defines:
    a module that does ``import scarjax`` or ``from scarjax import run`` (even inside a
    function) depends on the whole package being imported first."""
    bad = []
    for m in MODULES:
        if m == "scarjax":
            continue
        for target, names, line, _ in _imports(m):
            if target == "scarjax":
                what = f"from scarjax import {', '.join(names)}" if names else "import scarjax"
                bad.append(f"{MODULES[m].relative_to(ROOT.parent)}:{line}: {what}")
    assert not bad, "modules importing the scarjax package itself:\n" + "\n".join(bad)


_FRESH = """
import importlib, json, pkgutil, sys
import scarjax
flax_on_import = sorted(m for m in sys.modules if m == "flax" or m.startswith("flax."))[:3]
hypothesis_on_import = sorted(m for m in sys.modules if m == "hypothesis" or m.startswith("hypothesis."))[:3]
failed = {}
for info in pkgutil.walk_packages(scarjax.__path__, "scarjax."):
    try:
        importlib.import_module(info.name)
    except Exception as e:  # noqa: BLE001 - reported by the test
        failed[info.name] = f"{type(e).__name__}: {e}"
from scarjax.models import cnn
print(json.dumps({"flax": flax_on_import, "hypothesis": hypothesis_on_import, "failed": failed,
                  "flax_after_cnn": "flax" in sys.modules}))
"""


@pytest.fixture(scope="module")
def fresh():
    """Import ``scarjax`` in a fresh interpreter, then every module of it."""
    out = subprocess.run([sys.executable, "-c", _FRESH], capture_output=True, text=True, timeout=300,
                         env={**__import__("os").environ, "JAX_PLATFORMS": "cpu"})
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_every_module_imports(fresh):
    assert fresh["failed"] == {}


def test_import_scarjax_does_not_import_flax(fresh):
    """flax is imported when a flax model is used (``scarjax.models.cnn``), not before."""
    assert fresh["flax"] == []
    assert fresh["flax_after_cnn"]


def test_import_scarjax_does_not_import_hypothesis(fresh):
    """hypothesis is imported by the property-testing kit (``scarjax.testing``) only."""
    assert fresh["hypothesis"] == []


def _public_packages() -> list[types.ModuleType]:
    return [importlib.import_module(p) for p in PACKAGES if not any(s.startswith("_") for s in p.split("."))]


def test_no_name_is_both_a_module_and_something_else():
    """In every public package, a submodule's name is not also a function (or any other
    object) in that package's namespace: ``scarjax.pollux.throughput`` is one thing."""
    clashes = []
    for pkg in _public_packages():
        for info in pkgutil.iter_modules(pkg.__path__):
            value = getattr(pkg, info.name, None)
            if value is not None and not isinstance(value, types.ModuleType):
                clashes.append(f"{pkg.__name__}.{info.name}: a module and a {type(value).__name__}")
    assert not clashes, "\n".join(clashes)


def test_public_names_are_exported():
    """Every name in a public package's ``__all__`` exists (lazy ones included)."""
    missing = [f"{pkg.__name__}.{n}" for pkg in _public_packages() for n in getattr(pkg, "__all__", ())
               if not hasattr(pkg, n)]
    assert not missing, missing


@pytest.mark.parametrize(
    "a, b, name",
    [
        # issue 12: each of these named two different things
        ("scarjax", "scarjax.perturb.precision", "fixed_point"),
        ("scarjax.data", "scarjax.ps.distributed", "fetch"),
        ("scarjax.perturb.staleness", "scarjax.ps", "ssp"),
    ],
)
def test_names_from_the_issue_mean_one_thing(a, b, name):
    ma, mb = importlib.import_module(a), importlib.import_module(b)
    assert hasattr(ma, name) and not hasattr(mb, name), f"{a}.{name} and {b}.{name}"


def test_renamed_names_resolve():
    from scarjax import ps
    from scarjax.ps import distributed

    assert callable(distributed.to_host) and isinstance(ps.SSP(1), ps.SSP)
    assert not any(info.name == "ssp" for info in pkgutil.iter_modules(ps.__path__))
