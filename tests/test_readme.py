"""The README's "In a notebook" example runs and prints what its comments say."""

import contextlib
import io
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _notebook_block() -> str:
    text = README.read_text()
    section = text[text.index("## In a notebook") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.mark.slow  # 1,000 trials of 2,500 steps twice: ~15-30 s on two busy cores
def test_readme_notebook_example_prints_its_comments():
    code = _notebook_block()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})
    lines = out.getvalue().splitlines()
    rework, bound, held = lines[0].split()
    assert (rework, bound[:7], held) == ("392.0", "391.867", "True")
    assert "392.0 391.867... True" in code
    assert lines[1].startswith("0.99516") and "(conservative): 0.99516..." in code
    assert lines[2].startswith("rework <= Thm 5.3.1 bound + 1 in 1000 of 1000 trials (0 did not re-converge;")
    assert "# rework <= Thm 5.3.1 bound + 1 in 1000 of 1000 trials (0 did not re-converge; ...)" in code
