"""Generate the API reference pages from the package itself (run by ``conf.py``).

One page per public module of ``scarjax`` (no leading underscore anywhere in its dotted
path), grouped as ``docs/architecture.md`` groups the design (:data:`GROUPS`). A module's
page lists every name of its ``__all__``: each object is documented in full once, at its
*canonical* path (:func:`canonical_paths`), and every other public path of the same
object (a re-export) is a summary row linking there. Names that the private modules
(``pollux/_*.py``, ``testing/_*.py``, ``ps/_ssp.py``, ``data/_cache.py``, ...) define are
documented under the public namespace that re-exports them. The command line's page holds
its ``--help`` texts, read from the same ``argparse`` parser that ``scarjax`` runs.

``python docs/apigen.py`` prints how many pages and public names the reference covers.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import io
import os
import pkgutil
import sys
from pathlib import Path

PACKAGE = "scarjax"

# The API reference's sections, in the order of docs/architecture.md.
GROUPS: list[tuple[str, str, list[str]]] = [
    ("core", "The loop, hooks and schedules (architecture §2–3)", [
        "scarjax", "scarjax.core", "scarjax.trials", "scarjax.hooks", "scarjax.schedules",
        "scarjax.algorithms", "scarjax.tree", "scarjax.numerics", "scarjax.validate", "scarjax.choices",
    ]),
    ("perturb", "Perturbation sources (architecture §3)", [
        "scarjax.perturb", "scarjax.perturb.generic", "scarjax.perturb.workers",
        "scarjax.perturb.staleness", "scarjax.perturb.precision", "scarjax.perturb.revocation",
    ]),
    ("theory", "Theory and measurement (architecture §4)", ["scarjax.bounds", "scarjax.rework"]),
    ("pollux", "Pollux goodput toolkit (architecture §5)", ["scarjax.pollux", "scarjax.pollux.examples"]),
    ("sched", "Cluster scheduling (architecture §5a)", [
        "scarjax.sched", "scarjax.sched.apps", "scarjax.sched.simulator", "scarjax.sched.ga",
        "scarjax.sched.tiresias", "scarjax.sched.optimus", "scarjax.sched.autoscaler", "scarjax.sched.command",
        "scarjax.sched.workload",
    ]),
    ("cluster", "Transient clusters, performance models and planning (architecture §5b–5c)", [
        "scarjax.cluster", "scarjax.cluster.market", "scarjax.cluster.steptime", "scarjax.cluster.ledger",
        "scarjax.cluster.trainer", "scarjax.cluster.clock",
        "scarjax.cluster.policies", "scarjax.cluster.tierml", "scarjax.cluster.bidbrain",
        "scarjax.cluster.syncfly", "scarjax.cluster.litz", "scarjax.cluster.sweep",
        "scarjax.cluster.cmdare", "scarjax.cluster.lifetimes", "scarjax.cluster.profile",
        "scarjax.cluster.jobprofile", "scarjax.cluster.marketmodel", "scarjax.cluster.planner",
    ]),
    ("scar", "SCAR fault tolerance (architecture §6)", [
        "scarjax.scar", "scarjax.scar.partition", "scarjax.scar.checkpoint", "scarjax.scar.faults",
        "scarjax.scar.simulate", "scarjax.scar.persistent",
    ]),
    ("models", "Models and data (architecture §7)", [
        "scarjax.models", "scarjax.models.quadratic", "scarjax.models.mlr", "scarjax.models.mf",
        "scarjax.models.lda", "scarjax.models.cnn",
        "scarjax.data", "scarjax.data.digits", "scarjax.data.mnist", "scarjax.data.covertype",
        "scarjax.data.ratings", "scarjax.data.text", "scarjax.data.pollux_sim",
        "scarjax.data.transient", "scarjax.data.cmdare",
    ]),
    ("ps", "The sharded parameter server (architecture §8)", [
        "scarjax.ps", "scarjax.ps.mesh", "scarjax.ps.store", "scarjax.ps.server",
        "scarjax.ps.failures", "scarjax.ps.topk", "scarjax.ps.elastic", "scarjax.ps.tiers",
        "scarjax.ps.distributed",
    ]),
    ("cli", "The command line (architecture §9)", ["scarjax.cli"]),
    ("testing", "The property-testing kit (architecture §9a)", ["scarjax.testing", "scarjax.testing.strategies"]),
]


def public_modules() -> list[str]:
    """Every importable module of the package with no private component in its path."""
    root = importlib.import_module(PACKAGE)
    names = [PACKAGE]
    for info in pkgutil.walk_packages(root.__path__, PACKAGE + "."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            names.append(info.name)
    return sorted(names)


def public_names(modname: str) -> list[str]:
    """A module's public names: its ``__all__`` (every public module of scarjax has one)."""
    module = importlib.import_module(modname)
    names = getattr(module, "__all__", None)
    if names is None:
        raise RuntimeError(f"{modname} has no __all__: the API reference lists a module's __all__")
    return list(dict.fromkeys(names))


def _key(obj, name):
    if inspect.ismodule(obj) or inspect.isclass(obj) or callable(obj):
        return ("obj", id(obj))
    return ("data", id(obj), name)  # constants: the same object under the same name


def canonical_paths(modules: list[str]) -> tuple[dict[str, str], dict[str, list[str]]]:
    """``{public path: canonical path}`` for every name of every public module, and
    ``{module: [names documented in full there]}``.

    The canonical path of an object is ``scarjax.NAME`` when the top-level package exports
    it, else the public module that defines it (``__module__``) when that module lists it,
    else the deepest public namespace that re-exports it (a private module's names live in
    the package that re-exports them: ``scarjax.pollux.goodput``)."""
    occurrences: dict[tuple, list[tuple[str, str]]] = {}
    objects = {}
    for modname in modules:
        module = importlib.import_module(modname)
        for name in public_names(modname):
            obj = getattr(module, name)
            if inspect.ismodule(obj):
                continue  # a submodule: its own page
            key = _key(obj, name)
            occurrences.setdefault(key, []).append((modname, name))
            objects[key] = obj
    alias: dict[str, str] = {}
    owned: dict[str, list[str]] = {m: [] for m in modules}
    for key, paths in occurrences.items():
        obj = objects[key]
        defining = getattr(obj, "__module__", None)
        top = [p for p in paths if p[0] == PACKAGE]
        own = [p for p in paths if p[0] == defining]
        if top:
            best = top[0]
        elif own:
            best = own[0]
        else:
            best = max(paths, key=lambda p: (p[0].count("."), p[0]))
        for modname, name in paths:
            alias[f"{modname}.{name}"] = f"{best[0]}.{best[1]}"
        owned[best[0]].append(best[1])
    for modname in modules:
        alias[modname] = modname
    return alias, owned


def private_names(modules: list[str]) -> set[str]:
    """Names that no public module exports: what private modules define (``StatisticTest``
    of ``testing/_pgns.py``) and a public module's names outside its ``__all__``
    (``TIME_REL_ERROR``), bare and dotted. The build renders references to them as text:
    the reference documents ``__all__`` and private modules stay out."""
    public_ids, public_names_ = set(), set()
    for modname in modules:
        module = importlib.import_module(modname)
        for n in public_names(modname):
            public_ids.add(id(getattr(module, n)))
            public_names_.add(n)
    root = importlib.import_module(PACKAGE)
    names = set()
    for info in [*pkgutil.walk_packages(root.__path__, PACKAGE + "."), None]:
        modname = PACKAGE if info is None else info.name
        module = importlib.import_module(modname)
        private = any(part.startswith("_") for part in modname.split("."))
        exported = set() if private else set(getattr(module, "__all__", ()))
        for name, obj in vars(module).items():
            if name.startswith("_") or inspect.ismodule(obj) or name in exported:
                continue
            if (inspect.isclass(obj) or callable(obj)) and id(obj) in public_ids:
                continue
            names.add(f"{modname}.{name}")
            if name not in public_names_:
                names.add(name)
    return names


def _directive(modname: str, name: str, obj) -> str:
    target = f"{modname}.{name}"
    if inspect.isclass(obj):
        if issubclass(obj, BaseException):
            return f".. autoexception:: {target}\n"
        return f".. autoclass:: {target}\n   :members:\n   :show-inheritance:\n"
    if inspect.isroutine(obj) or hasattr(obj, "__wrapped__") or isinstance(obj, functools.partial):
        return f".. autofunction:: {target}\n"  # functions, jitted or wrapped ones included
    return f".. autodata:: {target}\n   :no-value:\n" if _long_value(obj) else f".. autodata:: {target}\n"


def _long_value(obj) -> bool:
    try:
        return len(repr(obj)) > 200
    except Exception:  # noqa: BLE001 (a repr that fails: show no value)
        return True


def cli_help() -> list[tuple[str, str]]:
    """``scarjax --help`` and each subcommand's ``--help``, as argparse prints them."""
    from scarjax import cli  # the command line imports the experiments lazily

    texts = []
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"
    try:
        commands = [[]]
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
            cli.main(["--help"])
        top = out.getvalue()
        texts.append(("scarjax --help", top))
        brace = top[top.index("{") + 1: top.index("}")]
        commands = brace.split(",")
        for command in commands:
            out = io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
                cli.main([command, "--help"])
            texts.append((f"scarjax {command} --help", out.getvalue()))
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old
    return texts


def _page(modname: str, alias: dict[str, str], owned: dict[str, list[str]]) -> str:
    module = importlib.import_module(modname)
    names = public_names(modname)
    lines = [f"# `{modname}`", "", "```{eval-rst}", f".. automodule:: {modname}", "   :no-members:", "",
             f".. currentmodule:: {modname}", "```", ""]
    submodules = [n for n in names if inspect.ismodule(getattr(module, n))]
    here = [n for n in names if n in owned[modname]]
    elsewhere = [n for n in names if n not in submodules and n not in here]
    if submodules:
        lines += ["## Modules", "", "```{eval-rst}", ".. list-table::", "   :widths: 30 70", ""]
        for n in submodules:
            sub = getattr(module, n)
            first = (inspect.getdoc(sub) or "").strip().split("\n")[0]
            lines += [f"   * - :mod:`{sub.__name__}`", f"     - {first}"]
        lines += ["```", ""]
    if here:
        lines += ["## Summary", "", "```{eval-rst}", ".. autosummary::", "   :nosignatures:", ""]
        lines += [f"   {n}" for n in here]
        lines += ["```", ""]
    if elsewhere:
        lines += ["## Re-exported", "", "Documented where they are defined:", "", "```{eval-rst}",
                  ".. list-table::", "   :widths: 30 70", ""]
        for n in elsewhere:
            lines += [f"   * - ``{n}``", f"     - :py:obj:`{alias[modname + '.' + n]}`"]
        lines += ["```", ""]
    if here:
        lines += ["## Reference", "", "```{eval-rst}"]
        for n in here:
            lines += [_directive(modname, n, getattr(module, n))]
        lines += ["```", ""]
    if modname == f"{PACKAGE}.cli":
        lines += ["## `--help`", ""]
        for title, text in cli_help():
            lines += [f"### `{title}`", "", "```text", text.rstrip(), "```", ""]
    return "\n".join(lines)


def _index() -> str:
    lines = ["# API reference", "",
             "Generated from the docstrings (`docs/apigen.py`): one page per public module, grouped as "
             "[the architecture](../architecture.md) is. Each object is documented once, where it is "
             "defined (or, for a private module's names, in the public package that exports it); "
             "re-exports link there.", ""]
    for slug, title, modules in grouped_modules():
        lines += [f"## {title}", "", "```{toctree}", ":maxdepth: 1", ""]
        lines += modules
        lines += ["```", ""]
    return "\n".join(lines)


def _write(path: Path, text: str) -> None:
    """Write only when changed, so an unchanged rebuild re-reads nothing."""
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def grouped_modules() -> list[tuple[str, str, list[str]]]:
    """:data:`GROUPS` restricted to the modules that exist, and every public module that
    :data:`GROUPS` does not name placed in the group of its package (a top-level module in
    the first group): every public module has a page."""
    modules = public_modules()
    groups = [(slug, title, [m for m in ms if m in modules]) for slug, title, ms in GROUPS]
    placed = {m for _, _, ms in groups for m in ms}
    for m in modules:
        if m in placed:
            continue
        parent = m.rsplit(".", 1)[0]
        target = next((ms for _, _, ms in groups if parent in ms and parent != PACKAGE), groups[0][2])
        target.append(m)
    return groups


def generate(outdir: Path) -> dict[str, str]:
    """Write ``outdir/index.md`` and one page per public module; return the alias map."""
    modules = public_modules()
    alias, owned = canonical_paths(modules)
    outdir.mkdir(parents=True, exist_ok=True)
    for stale in outdir.glob("*.md"):
        if stale.stem not in modules and stale.stem != "index":
            stale.unlink()
    _write(outdir / "index.md", _index())
    for modname in modules:
        _write(outdir / f"{modname}.md", _page(modname, alias, owned))
    return alias


def coverage() -> dict[str, int]:
    """How many pages and public names the reference covers."""
    modules = public_modules()
    alias, owned = canonical_paths(modules)
    paths = [f"{m}.{n}" for m in modules for n in public_names(m)]
    return {
        "module_pages": len(modules),
        "public_paths": len(paths),
        "documented_objects": sum(len(v) for v in owned.values()),
        "reexports": sum(1 for p in paths if p in alias and alias[p] != p and p not in modules),
        "submodule_entries": sum(1 for p in paths if p not in alias or p in modules),
    }


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    for k, v in coverage().items():
        print(f"{k}: {v}")
