"""The API reference covers every public name (docs/apigen.py, the generator the docs build runs)."""

import importlib
import importlib.util
import inspect
from pathlib import Path

APIGEN = Path(__file__).resolve().parents[2] / "docs" / "apigen.py"


def _apigen():
    spec = importlib.util.spec_from_file_location("scarjax_docs_apigen", APIGEN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_public_module_has_a_page_in_a_group():
    apigen = _apigen()
    modules = apigen.public_modules()
    grouped = [m for _, _, ms in apigen.grouped_modules() for m in ms]
    assert sorted(grouped) == modules
    assert not any(part.startswith("_") for m in modules for part in m.split("."))
    assert {"scarjax", "scarjax.pollux", "scarjax.testing", "scarjax.testing.strategies", "scarjax.cli"} <= set(modules)


def test_every_public_name_is_documented_once():
    apigen = _apigen()
    modules = apigen.public_modules()
    alias, owned = apigen.canonical_paths(modules)
    documented = {f"{m}.{n}" for m, names in owned.items() for n in names}
    assert len(documented) == sum(len(v) for v in owned.values())  # each object once
    for modname in modules:
        module = importlib.import_module(modname)
        for name in apigen.public_names(modname):
            if inspect.ismodule(getattr(module, name)):
                assert getattr(module, name).__name__ in modules
            else:
                assert alias[f"{modname}.{name}"] in documented, (modname, name)
    # the names of private modules are documented under the public namespace
    assert alias["scarjax.pollux.goodput"] == "scarjax.pollux.goodput"
    assert alias["scarjax.testing.check_rework_bound"] == "scarjax.testing.check_rework_bound"
    assert alias["scarjax.core.run"] == "scarjax.run"
    counts = apigen.coverage()
    assert counts["module_pages"] == len(modules)
    assert counts["documented_objects"] == len(documented)


def test_a_missing_name_is_caught():
    """Planted violation: a public name whose canonical page lost it fails the check above."""
    apigen = _apigen()
    modules = apigen.public_modules()
    alias, owned = apigen.canonical_paths(modules)
    owned["scarjax"].remove("run")
    documented = {f"{m}.{n}" for m, names in owned.items() for n in names}
    assert alias["scarjax.core.run"] not in documented
