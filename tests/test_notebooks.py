"""Execute the notebooks (jupytext percent format) end to end."""

from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.py"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_executes(path, tmp_path):
    jupytext = pytest.importorskip("jupytext")
    nbclient = pytest.importorskip("nbclient")
    nb = jupytext.read(path)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    errors = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert EXPECTED[path.stem] in text


# A line each notebook must print, so a notebook that silently skips its point fails.
EXPECTED = {
    "01_rework_cost": "predicted floor",
    "02_goodput": "PGNS: running estimate",
    "03_parameter_server": "recovered",
    "04_transient_clusters": "SCAR: reached the target in",  # transient clusters
    "05_cluster_scheduling": "policy ordering by average JCT",  # cluster scheduling
    "06_planning": "re-planned under the deadline",  # the planner
    "07_property_testing": "1 failed, 1 passed",
}
