import pytest


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    """Every test gets its own empty download cache."""
    monkeypatch.setenv("SCARJAX_DATA", str(tmp_path / "cache"))
