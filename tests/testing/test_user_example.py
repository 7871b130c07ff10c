"""The user test file of docs/testing.md (docs/examples/test_my_algorithm.py), run the way a
user runs it: pytest in a subprocess. Its ridge-regression property holds (Thm 5.3.1 under
drawn perturbations) and its fixed-point property fails with a readable counterexample
(w <- sin(w) is not linearly convergent at 0)."""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "test_my_algorithm.py"


def _env() -> dict[str, str]:
    """This process's environment without what the outer pytest (and xdist) put there."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "HYPOTHESIS_"))}
    env.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")  # as the root conftest.py
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def test_user_example_one_property_holds_one_fails():
    # From the repository root, as `python -m pytest docs/examples/test_my_algorithm.py`:
    # pyproject's addopts apply (-n 2 …), so ask for no xdist workers (one file, two tests).
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "--color=no", "-p", "no:cacheprovider", "-n", "0", str(EXAMPLE.relative_to(ROOT))],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out  # 1: some tests failed (not an error of collection or usage)
    assert "1 failed, 1 passed" in out, out
    assert "FAILED docs/examples/test_my_algorithm.py::test_sine_converges_linearly" in out, out
    # The counterexample: the verdict, the algorithm, the drawn start, the seed, a replay.
    assert "CheckFailure: not linearly convergent here" in out, out
    assert "ExceptionGroup" not in out, out  # one counterexample, not several
    for pattern in (r"algorithm\s+: sin\n", r"start\s+: ‖w⁽⁰⁾ − w\*‖ = ", r"seed\s+: \d+", r"replay with:\n"):
        assert re.search(pattern, out), (pattern, out)
    assert "sxt.near_start(algorithm, " in out and "sxt.assert_linear_convergence(trace" in out, out


def test_guide_shows_the_example_file_as_it_is():
    # docs/testing.md quotes the whole file: it must not drift from what this test runs.
    guide = (ROOT / "docs" / "testing.md").read_text()
    assert "```python\n" + EXAMPLE.read_text().rstrip("\n") + "\n```" in guide
