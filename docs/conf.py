"""Sphinx configuration of the scarjax documentation site.

Build (from the repository root, after ``pip install -e ".[docs]"``)::

    python -m sphinx -W --keep-going -b html docs docs/_build/html

Sphinx with myst-nb, as optax, flax and orbax do: autodoc + napoleon read the Google-style
docstrings, and myst-nb executes the jupytext notebooks of ``notebooks/`` during the build
with a cache (``docs/_build/.jupyter_cache``), so an unchanged rebuild runs none of them
and a notebook that fails fails the build.
"""

from __future__ import annotations

import inspect
import os
import re
import shutil
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(DOCS))

# The environment the tests give the notebooks and doctests (conftest.py): 8 forced host
# CPU devices and no progress bars. Set before anything imports JAX; the notebook kernels
# inherit it.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("SCARJAX_NO_PROGRESS", "1")

import apigen  # noqa: E402 (docs/apigen.py: the API pages, generated from the package)

project = "scarjax"
author = "scarjax contributors"
copyright = "scarjax contributors"  # noqa: A001 (Sphinx's name)
release = version = "0.1.0"

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
]

# ---------------------------------------------------------------------------------------
# Sources: the guides (docs/*.md), the generated API pages (docs/api/), the notebooks
# (copied from notebooks/ into docs/tutorials/ by _mirror), the reproduction report.
root_doc = "index"
exclude_patterns = ["_build", "conf.py", "apigen.py", "examples", "**/.ipynb_checkpoints", "README.md"]
nb_custom_formats = {".py": ["jupytext.reads", {"fmt": "py:percent"}]}


def _mirror(source_dir: Path, pattern: str, target: Path) -> None:
    """``source_dir/pattern`` -> ``target/`` (written only when changed, so the notebook cache
    holds; files no longer in ``source_dir`` are removed)."""
    target.mkdir(exist_ok=True)
    sources = sorted(source_dir.glob(pattern))
    for stale in target.glob(pattern):
        if stale.name not in {s.name for s in sources}:
            stale.unlink()
    for source in sources:
        dest = target / source.name
        text = source.read_text()
        if not dest.exists() or dest.read_text() != text:
            dest.write_text(text)


def _repository_links(app, docname, source) -> None:
    """The guides link the theory notes as ``../theory/NAME.md`` (right on a repository
    browser); on the site the notes are the pages ``theory/NAME``."""
    if "/" not in docname:
        source[0] = source[0].replace("](../theory/", "](theory/")


_mirror(ROOT / "notebooks", "*.py", DOCS / "tutorials")  # the notebooks, executed as tutorials
_mirror(ROOT / "theory", "*.md", DOCS / "theory")  # one note per theorem, pages of the site
ALIASES = apigen.generate(DOCS / "api")
PRIVATE = apigen.private_names(apigen.public_modules())

# ---------------------------------------------------------------------------------------
# Notebook execution (myst-nb): cached, raising on error.
nb_execution_mode = "cache"
nb_execution_cache_path = str(DOCS / "_build" / ".jupyter_cache")
nb_execution_timeout = 1200
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_merge_streams = True
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence"]
myst_heading_anchors = 3

# ---------------------------------------------------------------------------------------
# API reference: autodoc + napoleon (Google style: Args/Returns/Raises).
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autosummary_generate = False
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
napoleon_use_ivar = False

# Two conventions of scarjax's Google-style docstrings that napoleon does not read, made
# readable before napoleon runs (the docstrings stay as they are in the source):
# * grouped names, ``min_nodes, max_nodes: the range``: one entry per name;
# * a ``Raises:`` entry continued on lines at the entry's own indentation: a continuation
#   (a new entry starts with an exception's name, capitalised).
_SECTION = re.compile(r"^(\s*)(Args|Arguments|Parameters|Attributes|Keyword Args|Keyword Arguments|Other Parameters"
                      r"|Raises):\s*$")
_GROUPED = re.compile(r"^(\s*)([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)+)(\s*\([^)]*\))?\s*:(\s.*|)$")
_EXCEPTION_ENTRY = re.compile(r"^[A-Z][\w.]*")


def _no_type_docstring(app, what, name, obj, options, lines) -> None:
    """A constant without a ``#:`` comment shows its value, not its type's docstring (the
    docstring of ``dict`` or of ``hypothesis.settings``)."""
    if what in ("data", "attribute") and not inspect.isclass(obj) and not inspect.isroutine(obj):
        own = [inspect.getdoc(type(obj)), getattr(obj, "__doc__", None)]
        text = "\n".join(lines).strip()
        flat = " ".join(text.split())
        if text and any(isinstance(d, str) and d.strip() and " ".join(d.split())[:120] in flat for d in own):
            lines[:] = _comment_of(name.rsplit(".", 1)[-1], obj)


def _comment_of(name: str, obj) -> list[str]:
    """The ``#:`` comment of a constant re-exported from another module (autodoc reads the
    comments of the module it documents): found in the module that assigns it."""
    from sphinx.pycode import ModuleAnalyzer

    for modname, module in list(sys.modules.items()):
        if not modname.startswith(PACKAGE) or getattr(module, name, None) is not obj:
            continue
        try:
            docs = ModuleAnalyzer.for_module(modname).find_attr_docs()
        except Exception:  # noqa: BLE001 (no source: no comment)
            continue
        if ("", name) in docs:
            return list(docs[("", name)])
    return []


_ORIGINAL: dict[str, list[str]] = {}


def _keep_data_docstring(app, what, name, obj, options, lines) -> None:
    """Napoleon reads a constant's first line ``text: more`` as ``type: description``; a
    constant's ``#:`` comment is prose here, so it is kept as written."""
    if what in ("data", "attribute"):
        if name in _ORIGINAL:
            lines[:] = _ORIGINAL.pop(name)
        else:
            _ORIGINAL[name] = list(lines)


def _skip_field_aliases(app, what, name, obj, skip, options):
    """A NamedTuple's fields are documented by its ``Attributes:`` section, not as the
    generated ``Alias for field number N`` members."""
    doc = getattr(obj, "__doc__", None) or ""
    if isinstance(doc, str) and doc.startswith("Alias for field number"):
        return True
    # a field whose default is a function defined elsewhere (``Algorithm.norm = l2_norm``):
    # the class's Attributes section documents the field, the function is not a method
    if what == "class" and inspect.isfunction(obj) and "." not in obj.__qualname__:
        return True
    return None


def _google_conventions(app, what, name, obj, options, lines) -> None:
    out: list[str] = []
    section = header = base = None
    pending: list[str] = []

    def flush():
        out.extend(pending)
        pending.clear()

    for line in lines:
        m = _SECTION.match(line)
        if m:
            flush()
            section, header, base = m.group(2), len(m.group(1)), None
            out.append(line)
            continue
        if section is None or not line.strip():
            out.append(line)
            continue
        indent = len(line) - len(line.lstrip())
        if indent <= header:
            flush()
            section = None
            out.append(line)
            continue
        if base is None:
            base = indent
        if indent == base:
            flush()
            if section == "Raises":
                if not _EXCEPTION_ENTRY.match(line.lstrip()):
                    line = " " * (base + 2) + line.lstrip()
            else:
                g = _GROUPED.match(line)
                if g:
                    names = [n.strip() for n in g.group(2).split(",")]
                    line = f"{g.group(1)}{names[0]}{g.group(3) or ''}:{g.group(4)}"
                    pending.extend(f"{g.group(1)}{n}{g.group(3) or ''}: see ``{names[0]}``." for n in names[1:])
        out.append(line)
    flush()
    lines[:] = out


# Strict cross-references: every reference to a scarjax name must resolve. There is no
# network at build time, so no intersphinx inventories: references to other projects
# (numpy, jax, optax, flax, orbax, hypothesis, the standard library) render as plain
# text and are listed here, by prefix.
nitpicky = True
_EXTERNAL = (
    r"(jax|jaxlib|jnp|np|numpy|optax|flax|nnx|orbax|chex|hypothesis|st|scipy|sklearn|matplotlib|plt|pytest"
    r"|typing|typing_extensions|collections|collections\.abc|abc|types|enum|dataclasses|functools|pathlib|os"
    r"|logging|concurrent|threading|io|numbers|argparse|contextlib|warnings|random|unittest|datetime)"
)
nitpick_ignore_regex = [
    (r"py:.*", _EXTERNAL + r"(\..*)?"),
    # builtins and typing names as annotations print them
    (r"py:.*", r"(int|float|str|bytes|bool|complex|object|None|NoneType|type|tuple|list|dict|set|frozenset"
               r"|slice|range|callable|Callable|Any|Optional|Union|Literal|Sequence|Mapping|Iterable|Iterator"
               r"|Generator|Hashable|NamedTuple|Self|TypeVar|Protocol|ClassVar|Exception|ValueError|TypeError"
               r"|RuntimeError|AssertionError|KeyError|IndexError|UserWarning|Warning|NotImplementedError"
               r"|OSError|FileNotFoundError|BaseException|StopIteration|ellipsis|Ellipsis)"),
    # JAX's and NumPy's short names as the annotations spell them
    (r"py:.*", r"(Array|ArrayLike|PyTree|PRNGKey|Key|KeyArray|DTypeLike|Mesh|Sharding|NamedSharding"
               r"|PartitionSpec|GradientTransformation|OptState|Params|Updates|ndarray|DataFrame|Figure|Axes"
               r"|SearchStrategy|Path|Module|Rngs)"),
]

# ---------------------------------------------------------------------------------------
# HTML.
html_theme = "sphinx_book_theme"
html_title = "scarjax"
html_theme_options = {
    "show_toc_level": 2,
    "navigation_with_keys": False,
}
# A stated colour mode: with none, the theme's script logs an error on a first visit
# ("invalid theme mode") and the browser test counts console errors.
html_context = {"default_mode": "light"}
html_static_path = ["_static"]
html_favicon = "_static/favicon.svg"  # a page links its icon: no request for /favicon.ico
# MathJax from the django-static-mathjax wheel (MathJax 3.2.2, in the docs extra), copied
# into _static/mathjax/: the site needs no network to render its equations.
mathjax_path = "mathjax/tex-mml-chtml.js"


def _copy_mathjax(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    import mathjax  # the django-static-mathjax wheel: MathJax's files, no Django needed

    source = Path(mathjax.__file__).resolve().parent / "static" / "mathjax" / "es5"
    dest = Path(app.outdir) / "_static" / "mathjax"
    if not (dest / "tex-mml-chtml.js").exists():
        shutil.copytree(source, dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*-full*", "*svg*", "sre"))


_IDENTIFIER = re.compile(r"^~?[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*(\(\))?$")


def _resolve_alias(app, env, node, contnode):
    """A reference to a re-exported name (``scarjax.core.run``, ``scarjax.cluster.Market``,
    a method through one) resolves to where it is documented (``scarjax.run``)."""
    if node.get("refdomain") != "py":
        return None
    target = node.get("reftarget", "")
    module = node.get("py:module") or ""
    klass = node.get("py:class") or ""
    candidates = [target]
    if module:
        if klass:
            candidates.append(f"{module}.{klass}.{target}")
        candidates.append(f"{module}.{target}")
    domain = env.get_domain("py")
    for cand in candidates:
        parts = cand.split(".")
        for cut in range(len(parts), 0, -1):
            head = ".".join(parts[:cut])
            if head in ALIASES and ALIASES[head] != cand:
                new = ".".join([ALIASES[head], *parts[cut:]])
                if new == cand:
                    continue
                newnode = node.deepcopy()
                newnode["reftarget"] = new
                newnode["refspecific"] = False
                found = domain.resolve_xref(env, node["refdoc"], app.builder, node["reftype"], new, newnode, contnode)
                if found is not None:
                    return found
    # Private code stays out of the reference: a name with a private component
    # (``experiments._common.recorded``, ``_repair_population``) or one that only a private
    # module defines (``StatisticTest``) is text.
    if any(part.startswith("_") for part in target.split(".")) or target in PRIVATE:
        return contnode
    # A name of another module of the package written without its module (``Hook`` in
    # scarjax.core), or through a module alias (``ck.Market``): the one documented object
    # of that name (preferring the current module's); none or several still fail.
    objects = domain.objects
    names = [target]
    head = target.split(".", 1)[0]
    if "." in target and head != PACKAGE:
        # ck.Job: ``clock as ck`` in the module that wrote it (that module, or the package's
        # modules that all give the alias the same meaning)
        owners = [sys.modules.get(module)] if module else []
        owners += [m for n, m in list(sys.modules.items()) if n.startswith(PACKAGE_PREFIX)]
        for owner in owners:
            alias = getattr(owner, head, None)
            if inspect.ismodule(alias) and alias.__name__.startswith(PACKAGE):
                names.insert(0, ALIASES.get(f"{alias.__name__}.{target.split('.', 1)[1]}", ""))
                break
    roles = set(domain.objtypes_for_role(node["reftype"]) or ())
    for name in [n for n in names if n]:
        matches = [n for n in objects if (n == name or n.endswith("." + name)) and objects[n].objtype in roles]
        if len(matches) > 1 and module:
            matches = [n for n in matches if n.startswith(module + ".")] or matches
        if len(matches) == 1:
            newnode = node.deepcopy()
            newnode["reftarget"] = matches[0]
            newnode["refspecific"] = False
            found = domain.resolve_xref(env, node["refdoc"], app.builder, node["reftype"], matches[0], newnode,
                                        contnode)
            if found is not None:
                return found
    # A public member that exists but has no docstring (``Replay.sample``, a field without
    # an Attributes entry): autodoc documents members with docstrings, so it is text.
    if _undocumented_member(target, module, klass):
        return contnode
    # Free text where napoleon expects a type (``Raises:`` / ``Returns:`` prose such as
    # ``TypeError / ValueError naming the argument``): text, not a reference.
    if not _IDENTIFIER.match(target):
        return contnode
    return None


def _undocumented_member(target: str, module: str, klass: str) -> bool:
    candidates = [target, f"{module}.{target}", f"{module}.{klass}.{target}"]
    for cand in candidates:
        owner_path, _, attr = cand.rpartition(".")
        parts = owner_path.split(".")
        for cut in range(len(parts), 0, -1):
            mod = sys.modules.get(".".join(parts[:cut]))
            if mod is None:
                continue
            owner = mod
            for part in parts[cut:]:
                owner = getattr(owner, part, None)
            if inspect.isclass(owner) and (hasattr(owner, attr) or attr in getattr(owner, "__annotations__", {})):
                return True
            break
    # a bare member name of a class in the current module (``describe`` in a summary row)
    mod = sys.modules.get(module)
    if mod is not None and "." not in target:
        return any(inspect.isclass(v) and hasattr(v, target) for v in vars(mod).values())
    return False


PACKAGE_PREFIX = "scarjax."
PACKAGE = "scarjax"


def setup(app):
    app.connect("autodoc-process-docstring", _no_type_docstring, priority=300)
    app.connect("autodoc-process-docstring", _google_conventions, priority=400)
    app.connect("autodoc-process-docstring", _keep_data_docstring, priority=350)
    app.connect("autodoc-process-docstring", _keep_data_docstring, priority=650)
    app.connect("autodoc-skip-member", _skip_field_aliases)
    app.connect("missing-reference", _resolve_alias)
    app.connect("build-finished", _copy_mathjax)
    app.connect("source-read", _repository_links)
    return {"parallel_read_safe": True}
