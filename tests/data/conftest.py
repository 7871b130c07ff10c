import os
from pathlib import Path

import pytest

SHARED = Path(os.environ.get("SCARJAX_SHARED_DATA", Path(__file__).resolve().parents[3] / "shared" / "data"))


@pytest.fixture
def shared_data():
    """Folder with the real data files of ../shared/data; skip when absent."""
    def get(sub: str) -> Path:
        p = SHARED / sub
        if not p.exists():
            pytest.skip(f"real data not available: {p}")
        return p
    return get


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    """Every test gets its own empty download cache."""
    monkeypatch.setenv("SCARJAX_DATA", str(tmp_path / "cache"))
