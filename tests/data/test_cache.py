import hashlib
import urllib.request

import pytest

from scarjax.data import ChecksumError, DownloadError, cache_dir, fetch, sha256sum
from scarjax.data._cache import resolve


@pytest.fixture
def source(tmp_path):
    src = tmp_path / "src" / "blob.bin"
    src.parent.mkdir()
    src.write_bytes(b"payload " * 1000)
    return src, hashlib.sha256(src.read_bytes()).hexdigest()


def test_cache_dir_env(tmp_path, monkeypatch):
    monkeypatch.setenv("SCARJAX_DATA", str(tmp_path / "x"))
    assert cache_dir() == tmp_path / "x"
    monkeypatch.delenv("SCARJAX_DATA")
    assert cache_dir().name == "scarjax"


def test_fetch_downloads_and_verifies(source):
    src, sha = source
    out = fetch("blob.bin", src.as_uri(), sha, subdir="t")
    assert out == cache_dir() / "t" / "blob.bin"
    assert out.read_bytes() == src.read_bytes()
    assert sha256sum(out) == sha
    assert [p.name for p in out.parent.iterdir()] == ["blob.bin"]  # no temp files left


def test_fetch_uses_cache_without_network(source, monkeypatch):
    src, sha = source
    fetch("blob.bin", src.as_uri(), sha)

    def offline(*a, **k):
        raise OSError("offline")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    assert fetch("blob.bin", src.as_uri(), sha).read_bytes() == src.read_bytes()


def test_fetch_checksum_mismatch_never_returns_data(source):
    src, _ = source
    with pytest.raises(DownloadError, match="checksum mismatch"):
        fetch("blob.bin", src.as_uri(), "0" * 64)
    assert not (cache_dir() / "blob.bin").exists()
    assert not any(cache_dir().iterdir())


def test_fetch_falls_back_to_next_mirror(source, tmp_path):
    src, sha = source
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"corrupt")
    out = fetch("blob.bin", [bad.as_uri(), (tmp_path / "missing").as_uri(), src.as_uri()], sha)
    assert sha256sum(out) == sha
    assert issubclass(ChecksumError, OSError)


def test_corrupt_cached_file_is_replaced(source):
    src, sha = source
    dest = cache_dir() / "blob.bin"
    dest.parent.mkdir(parents=True)
    dest.write_bytes(b"truncated")
    assert fetch("blob.bin", src.as_uri(), sha).read_bytes() == src.read_bytes()


def test_fetch_offline_error_is_clear(tmp_path, monkeypatch):
    def offline(*a, **k):
        raise OSError("network unreachable")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with pytest.raises(DownloadError, match="path="):
        fetch("x.gz", "https://example.invalid/x.gz", "a" * 64)


@pytest.mark.parametrize("kwargs, name", [({"urls": []}, "urls"), ({"sha256": "abc"}, "sha256")])
def test_fetch_bad_arguments(kwargs, name):
    args = {"filename": "f", "urls": "file:///nonexistent", "sha256": "a" * 64} | kwargs
    with pytest.raises(ValueError, match=name):
        fetch(**args)


def test_resolve_local(source, tmp_path):
    src, sha = source
    assert resolve(src, "ignored", [], sha) == src
    assert resolve(src.parent, "blob.bin", [], sha) == src
    with pytest.raises(FileNotFoundError, match="other.bin"):
        resolve(src.parent, "other.bin", [], sha)
