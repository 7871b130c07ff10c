import pytest


@pytest.fixture
def shared_data(shared_data_dir):
    """``get(sub)``: a path under ``../shared/data`` (real data files, via the top-level
    ``shared_data_dir`` fixture); skips when the folder or the sub-path is absent."""
    def get(sub: str):
        p = shared_data_dir / sub
        if not p.exists():
            pytest.skip(f"real data not available: {p}")
        return p
    return get


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    """Every test gets its own empty download cache."""
    monkeypatch.setenv("SCARJAX_DATA", str(tmp_path / "cache"))
