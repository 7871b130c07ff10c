"""Every Python block of the README runs as shown (each on its own, in a fresh namespace),
and the "In a notebook" example prints what its comments say."""

import contextlib
import io
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _blocks() -> list[tuple[tuple[str, int], str]]:
    """``((section heading, n-th block of the section), code)`` of every ```python block, in
    README order."""
    text = README.read_text()
    out = []
    for m in re.finditer(r"```python\n(.*?)```", text, re.S):
        heads = re.findall(r"^## (.+)$", text[: m.start()], re.M)
        head = heads[-1] if heads else "top"
        out.append(((head, sum(h == head for (h, _), _ in out)), m.group(1)))
    return out


def _block(where: tuple[str, int]) -> str:
    (code,) = [c for w, c in _blocks() if w == where]
    return code


def _run(code: str) -> tuple[dict, str]:
    """Execute ``code`` as a script; its namespace and what it printed."""
    out, namespace = io.StringIO(), {"__name__": "__readme__"}
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), namespace)
    return namespace, out.getvalue()


# The notebook example runs 1,000 trials of 2,500 steps twice (~15-30 s on two busy cores) and
# the property-testing example the two checks at their default budget (~35 s): both are slow.
NOTEBOOK, KIT = ("In a notebook", 0), ("Property-test your own algorithm", 0)


def test_the_readme_has_the_blocks_these_tests_name():
    where = [w for w, _ in _blocks()]
    assert len(where) >= 3 and {NOTEBOOK, KIT} <= set(where), where


@pytest.mark.parametrize("where", [w for w, _ in _blocks() if w not in (NOTEBOOK, KIT)], ids=str)
def test_readme_block_runs_as_shown(where):
    """Every other block: no NameError, no missing import."""
    _run(_block(where))


@pytest.mark.slow
def test_readme_property_test_block_defines_tests_that_pass():
    """The property-testing block defines its algorithm and rate, and the test functions it
    shows pass when pytest would call them."""
    namespace, _ = _run(_block(KIT))
    tests = [f for name, f in namespace.items() if name.startswith("test_") and callable(f)]
    assert len(tests) == 2
    for t in tests:
        t()


@pytest.mark.slow
def test_readme_notebook_example_prints_its_comments():
    code = _block(NOTEBOOK)
    _, printed = _run(code)
    lines = printed.splitlines()
    rework, bound, held = lines[0].split()
    assert (rework, bound[:7], held) == ("392.0", "391.867", "True")
    assert "392.0 391.867... True" in code
    assert float(rework) <= float(bound) + 1  # held allows the +1 of integer hitting times, as the README says
    assert "rework <= bound + 1" in code
    assert lines[1].startswith("0.99516") and "(conservative): 0.99516..." in code
    assert lines[2].startswith("rework <= Thm 5.3.1 bound + 1 in 1000 of 1000 trials (0 did not re-converge;")
    assert "# rework <= Thm 5.3.1 bound + 1 in 1000 of 1000 trials (0 did not re-converge; ...)" in code
