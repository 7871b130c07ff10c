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
import re
import subprocess
import sys
import types
import typing
from pathlib import Path

import pytest

import scarjax

ROOT = Path(scarjax.__file__).resolve().parent
REPO = ROOT.parent
#: the checked trees: the library and the experiments (a package of its own: its private
#: modules ``experiments._common`` ... are its own, scarjax's private names are not)
TREES = ("scarjax", "experiments")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for t in TREES for p in sorted((REPO / t).rglob("*.py"))}
IS_PACKAGE = {m: p.name == "__init__.py" for m, p in MODULES.items()}
PACKAGES = sorted(m for m, p in MODULES.items() if p.name == "__init__.py" and m.startswith("scarjax"))

#: Optional heavy dependencies: the only modules a function may import, each such import
#: with a comment (on its line or the line above) saying why it is deferred. flax: ``import
#: scarjax`` must not import it (tested below); hypothesis: the property-testing kit only;
#: orbax: checkpoints on disk only; scikit-learn, scipy, matplotlib: slow to import, used by
#: a few loaders, fits and plots; tqdm: progress bars; xlrd: not a dependency at all (one
#: legacy spreadsheet format).
OPTIONAL_HEAVY = frozenset({"flax", "hypothesis", "orbax", "sklearn", "scipy", "matplotlib", "tqdm", "xlrd",
                            "scarjax.models.cnn"})  # the flax model (importing it imports flax)

#: namedtuple's public API starts with an underscore
_NAMEDTUPLE_API = frozenset({"_replace", "_asdict", "_fields", "_make", "_field_defaults"})


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _package(module: str, is_package: bool) -> str:
    return module if is_package else module.rpartition(".")[0]


def _owner(dotted: str, is_package: dict[str, bool]) -> str | None:
    """The package that owns the first private part of ``dotted`` (``None``: all public).
    ``scarjax.data._parse.read_bytes`` -> ``scarjax.data`` (a private module of it);
    ``scarjax.core._as_key`` -> ``scarjax`` (a private name of the module ``scarjax.core``)."""
    parts = dotted.split(".")
    for i in range(1, len(parts)):
        if _private(parts[i]):
            known = [j for j in range(i, 0, -1) if ".".join(parts[:j]) in is_package]
            if not known:  # another distribution's private part (``optax._src``)
                return parts[0]
            prefix = ".".join(parts[: known[0]])
            return prefix if is_package[prefix] else prefix.rpartition(".")[0]
    return None


class Import(typing.NamedTuple):
    target: str  #: the module imported (``from p import x``: ``p.x`` when a module, else ``p``)
    name: str | None  #: the name taken from ``target`` (``None``: the module itself)
    line: int
    where: str  #: "top" (module level, class bodies included), "function" or "typing"
    text: str  #: the source line


def _imports_of(module: str, source: str, is_package: dict[str, bool]) -> list[Import]:
    """Every import statement in ``source`` (the code of ``module``), relative imports
    resolved. Imports under ``if TYPE_CHECKING:`` are "typing"; class bodies run at import
    time, so they count as module level; function bodies do not."""
    package = _package(module, is_package.get(module, False))
    lines = source.splitlines()
    found: list[Import] = []

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(child, "function" if where != "typing" else where)
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                visit(child, "typing")
            elif isinstance(child, ast.Import):
                for alias in child.names:
                    found.append(Import(alias.name, None, child.lineno, where, lines[child.lineno - 1]))
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = package.split(".")
                    parts = parts[: len(parts) - (child.level - 1)]
                    base = ".".join(parts + ([base] if base else []))
                for alias in child.names:
                    sub = f"{base}.{alias.name}"
                    if sub in is_package:
                        found.append(Import(sub, None, child.lineno, where, lines[child.lineno - 1]))
                    else:
                        found.append(Import(base, alias.name, child.lineno, where, lines[child.lineno - 1]))
            else:
                visit(child, where)

    visit(ast.parse(source), "top")
    return found


def private_uses(module: str, source: str, is_package: dict[str, bool]) -> list[str]:
    """Rule 1: a name starting with ``_`` (a private module ``_x`` or a private name ``_y``
    of a module) is used only inside the package that owns it: ``scarjax/pollux/_agent.py``
    by ``scarjax/pollux/*.py``, ``scarjax.core._as_key`` by ``scarjax/*.py`` (not by
    ``scarjax/cluster/``: a subpackage is another package), ``experiments._common`` by
    ``experiments/*.py``. Checked on imports and on attributes of imported modules
    (``core._as_key(...)``); in ``experiments/`` (a client of scarjax) also on any attribute
    of a scarjax object (``ledger._entries``). Returns ``"line: text"`` per violation."""
    mine = _package(module, is_package.get(module, False))
    tree = ast.parse(source)
    lines = source.splitlines()
    bad = []
    aliases: dict[str, str] = {}  # local name -> module it is bound to
    for imp in _imports_of(module, source, is_package):
        dotted = imp.target + (f".{imp.name}" if imp.name else "")
        owner = _owner(dotted, is_package)
        if owner is not None and owner != mine:
            bad.append(f"{imp.line}: {imp.text.strip()}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                aliases[a.asname or a.name.partition(".")[0]] = a.asname and a.name or a.name.partition(".")[0]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = mine.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([base] if base else []))
            for a in node.names:
                if f"{base}.{a.name}" in is_package:
                    aliases[a.asname or a.name] = f"{base}.{a.name}"
    client = mine.split(".")[0] == "experiments"
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and _private(node.attr)) or node.attr in _NAMEDTUPLE_API:
            continue
        chain, v = [node.attr], node.value
        while isinstance(v, ast.Attribute):
            chain.append(v.attr)
            v = v.value
        if not isinstance(v, ast.Name):
            continue
        if v.id in aliases:
            owner = _owner(".".join([aliases[v.id], *reversed(chain)]), is_package)
            if owner is not None and owner != mine:
                bad.append(f"{node.lineno}: {lines[node.lineno - 1].strip()}")
        elif client and v.id not in ("self", "cls"):
            bad.append(f"{node.lineno}: {lines[node.lineno - 1].strip()}")
    return sorted(set(bad), key=lambda b: int(b.partition(":")[0]))


def local_imports(module: str, source: str, is_package: dict[str, bool]) -> list[str]:
    """Rule 2: no import inside a function, except of an optional heavy dependency
    (:data:`OPTIONAL_HEAVY`) with a comment saying why, on its line or above it (one comment
    above a block of such imports covers the block)."""
    lines = source.splitlines()
    bad = []
    for imp in _imports_of(module, source, is_package):
        if imp.where != "function":
            continue
        heavy = any(imp.target == h or imp.target.startswith(h + ".") or f"{imp.target}.{imp.name}" == h
                    for h in OPTIONAL_HEAVY)
        k = imp.line - 2  # the line above this import and the imports right before it
        while k >= 0 and lines[k].strip().startswith(("import ", "from ")) and "#" not in lines[k]:
            k -= 1
        commented = "#" in imp.text or (k >= 0 and lines[k].strip().startswith("#")) or (
            k >= 0 and lines[k].strip().startswith(("import ", "from ")))
        if not heavy or not commented:
            why = "not an optional heavy dependency" if not heavy else "no comment saying why"
            bad.append(f"{imp.line}: {imp.text.strip()} ({why})")
    return list(dict.fromkeys(bad))


def import_graph(sources: dict[str, str], is_package: dict[str, bool]) -> dict[str, set[str]]:
    """Rule 3's graph: module -> the checked modules it imports at run time (module level or
    in a function; ``if TYPE_CHECKING:`` imports are not run)."""
    return {m: {i.target for i in _imports_of(m, src, is_package) if i.where != "typing" and i.target in is_package
                and i.target != m} for m, src in sources.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` (a list of modules, first == last), or ``None``."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(u: str) -> list[str] | None:
        state[u] = 1
        stack.append(u)
        for v in sorted(graph.get(u, ())):
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


_SOURCES = {m: p.read_text() for m, p in MODULES.items()}


def _where(m: str) -> str:
    return str(MODULES[m].relative_to(REPO))


def _imports(module: str) -> list[tuple[str, list[str], int, bool]]:
    """``(target, names, line, at module level)`` of ``module``'s imports of checked modules."""
    return [(i.target, [i.name] if i.name else [], i.line, i.where == "top")
            for i in _imports_of(module, _SOURCES[module], IS_PACKAGE) if i.target in MODULES and i.where != "typing"]


# --- the checkers, each shown to fail on a planted violation --------------------------------

_TOY = {"pkg": True, "pkg.core": False, "pkg._val": False, "pkg.sub": True, "pkg.sub._x": False,
        "pkg.sub.y": False, "experiments": True, "experiments._common": False, "experiments.e": False}


@pytest.mark.parametrize("module, source", [
    ("pkg.sub.y", "from pkg.core import _as_key\n"),
    ("pkg.sub.y", "from pkg import core\nk = core._as_key(1)\n"),
    ("pkg.sub.y", "import pkg.core as c\nk = c._check(1)\n"),
    ("pkg.sub.y", "from pkg import _val as va\n"),
    ("pkg.sub.y", "from .. import _val\n"),
    ("pkg.core", "from pkg.sub._x import f\n"),
    ("pkg.core", "from pkg.sub import _x\n"),
    ("pkg.core", "def f():\n    from pkg.sub._x import g\n"),
    ("experiments.e", "from pkg.sub import y\ny._hidden()\n"),
    ("experiments.e", "def f(ledger):\n    return ledger._entries\n"),
])
def test_private_uses_catches_a_planted_violation(module, source):
    assert private_uses(module, source, _TOY), source


@pytest.mark.parametrize("module, source", [
    ("pkg.core", "from pkg._val import check\nfrom pkg import _val\n"),  # the top package's own
    ("pkg.sub.y", "from pkg.sub._x import f\nfrom . import _x\n_x._g()\n"),
    ("pkg.sub", "from ._x import f\n"),  # a package's __init__ is inside the package
    ("experiments.e", "from experiments._common import f\nfrom experiments import _common\n_common._g()\n"),
    ("experiments.e", "def f(t, self):\n    return t._replace(a=1), self._x, t.__class__\n"),
])
def test_private_uses_allows_a_package_its_own(module, source):
    assert private_uses(module, source, _TOY) == []


def test_local_imports_catches_a_planted_violation():
    src = ("import numpy as np\n"
           "def f():\n    import jax\n"
           "def g():\n    from sklearn.svm import SVR\n"
           "class C:\n    def h(self):\n        from pkg.core import run\n"
           "def k():\n    # scikit-learn is slow to import\n    from sklearn.svm import SVR\n"
           "def m():\n    import matplotlib.pyplot as plt  # plots only\n"
           "if TYPE_CHECKING:\n    from pkg.core import State\n")
    bad = local_imports("pkg.core", src, _TOY)
    assert [b.split(":")[0] for b in bad] == ["3", "5", "8"], bad
    assert "no comment" in bad[1] and "not an optional" in bad[0]


def test_import_graph_catches_a_planted_pair_and_a_longer_cycle():
    pair = {"pkg.core": "from pkg.sub import y\n", "pkg.sub.y": "def f():\n    from pkg import core\n"}
    assert _cycle(import_graph(pair, _TOY)) == ["pkg.core", "pkg.sub.y", "pkg.core"]
    typing_only = {"pkg.core": "from pkg.sub import y\n",
                   "pkg.sub.y": "if TYPE_CHECKING:\n    from pkg import core\n"}
    assert _cycle(import_graph(typing_only, _TOY)) is None
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


# --- the rules on the code -----------------------------------------------------------------

def test_no_private_name_is_used_outside_its_package():
    bad = [f"{_where(m)}:{b}" for m in MODULES for b in private_uses(m, _SOURCES[m], IS_PACKAGE)]
    assert not bad, "private names used outside their package (make the shared ones public):\n" + "\n".join(bad)


def test_no_function_local_imports():
    bad = [f"{_where(m)}:{b}" for m in MODULES for b in local_imports(m, _SOURCES[m], IS_PACKAGE)]
    assert not bad, "imports inside functions (move them to the top; break a cycle by moving what both " \
                    "need to a module below both):\n" + "\n".join(bad)


def test_the_import_graph_is_acyclic():
    """No module imports a module that imports it back, directly or through others, at
    module level or in a function. Importing ``a.b`` runs ``a/__init__`` first, but that is
    the parent package's own business: the edge is to the module named."""
    graph = import_graph(_SOURCES, IS_PACKAGE)
    cycle = _cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_no_experiment_imports_another():
    """Experiments share code through the underscore layer of ``experiments/`` (``_common``,
    ``_stats``, ``_pollux_artifact``, ...), never by importing another experiment's module."""
    experiments = {m for m in MODULES if m.startswith("experiments.") and not m.split(".")[-1].startswith("_")}
    bad = []
    for m in sorted(experiments):
        for target, names, line, _ in _imports(m):
            hits = {target} | {f"{target}.{n}" for n in names}
            for other in sorted(hits & (experiments - {m})):
                bad.append(f"{_where(m)}:{line}: imports {other}")
    assert not bad, "experiments importing other experiments:\n" + "\n".join(bad)


def test_no_module_imports_the_package_above_it():
    """Only ``scarjax/__init__.py`` may use the names ``scarjax/__init__`` defines:
    a module that does ``import scarjax`` or ``from scarjax import run`` (even inside a
    function) depends on the whole package being imported first."""
    bad = []
    for m in MODULES:
        if not m.startswith("scarjax."):
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
        # each of these once named two different things
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


# --- committed text: no "issue N", no absolute paths ----------------------------------------

#: the word "issue" (or "issues") followed by a number, with a space, "#" or "-" between
ISSUE_REF = re.compile(r"\bissues?[ \t#-]*\d", re.IGNORECASE)
#: a path that names a machine's own directories (under home, Users, work, root, mnt ... or a
#: Windows drive); ``/tmp`` (the conventional scratch folder) and URLs are not
ABSOLUTE_PATH = re.compile(
    r"(?<![\w.~$/:-])/(?:home|Users|work|root|mnt|opt|srv|private|scratch|data|media|Volumes)/[\w.$-]"
    r"|(?<![\w])[A-Za-z]:\\{1,2}[\w.$-]+\\")
TEXT_SUFFIXES = (".py", ".md", ".json", ".txt", ".toml", ".cfg", ".yml", ".yaml", ".ipynb", ".rst")


def issue_refs(text: str) -> list[str]:
    """``"line: text"`` for every line of ``text`` that refers to an issue by number
    (say what is meant instead: the capability, the paper's section)."""
    return [f"{i}: {line.strip()[:160]}" for i, line in enumerate(text.splitlines(), 1) if ISSUE_REF.search(line)]


def absolute_paths(text: str) -> list[str]:
    """``"line: text"`` for every line of ``text`` holding an absolute path of a machine."""
    return [f"{i}: {line.strip()[:160]}" for i, line in enumerate(text.splitlines(), 1)
            if ABSOLUTE_PATH.search(line)]


def _committed_text_files() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        out = None
    if out is None or out.returncode != 0:
        pytest.skip("not a git checkout: the committed files are unknown")
    return [f for f in out.stdout.splitlines() if f.endswith(TEXT_SUFFIXES) and (REPO / f).is_file()]


# The planted texts spell the word with "%" (this file is committed text too).
@pytest.mark.parametrize("text, n", [
    ("see %ssue 14 Sec 4", 1), ("I%ssue 3's target", 1), ("the %ssue-14 simulator", 1), ("%ssues 14-16", 1),
    ("(%ssue #5)", 1), ("a\n%ssue 12: x\nb", 1), ("this %ssue is open; 14 %ssues", 0), ("t%ssue 5", 0),
])
def test_issue_refs_catches_a_planted_reference(text, n):
    text = text.replace("I%s", "Is").replace("%s", "is")
    assert len(issue_refs(text)) == n, text


# The planted paths start with "%" for the root's "/" and "D%" for a drive (this file is
# committed text too).
@pytest.mark.parametrize("text, n", [
    ("full history from %work/shared/data/transient", 1), ('"data_root": "%home/me/x"', 1),
    ("open %Users/me/a.csv", 1), ("D%Users\\me\\a.csv", 1), ("D%\\Users\\\\me", 1), ("`%root/.cache/x`", 1),
    ("$SCARJAX_SHARED_DATA/transient", 0), ("https:/%example.org/home/x", 0), ("run(cfg, '%tmp/out')", 0),
    ("scarjax/data/transient_data/x.csv", 0), ("Figs 5.7/5.8", 0), ("shared/data/transient", 0),
])
def test_absolute_paths_catches_a_planted_path(text, n):
    text = text.replace("D%", "C:\\").replace("%", "/")
    assert len(absolute_paths(text)) == n, text


def test_no_issue_numbers_in_committed_text():
    """Code, docs, reports and tests say what they mean (the capability, the paper's
    section), not which issue asked for it."""
    bad = [f"{f}:{b}" for f in _committed_text_files() for b in issue_refs((REPO / f).read_text(errors="replace"))]
    assert not bad, "issue numbers in committed text:\n" + "\n".join(bad)


def test_no_absolute_paths_in_committed_text():
    """Reports, docs and code print paths relative to the repository or the data root
    (``$SCARJAX_SHARED_DATA/...``), never one machine's absolute path."""
    bad = [f"{f}:{b}" for f in _committed_text_files()
           for b in absolute_paths((REPO / f).read_text(errors="replace"))]
    assert not bad, "absolute paths in committed text:\n" + "\n".join(bad)
