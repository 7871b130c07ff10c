"""Download-once cache for the real data sets, with SHA-256 verification.

Files land in ``$SCARJAX_DATA`` (default ``~/.cache/scarjax``). A download is written
to a temporary file, hashed, and only moved into place when its SHA-256 matches the
published value, so a loader never returns corrupt or truncated data. A cached file
whose hash no longer matches is downloaded again.

A loader given a local ``path`` reads that copy instead (:func:`resolve`); local copies
are trusted and not hashed, because legitimate copies differ in byte layout (CRLF vs
LF line endings, re-gzipped archives) but not in content, and the parsers validate the
content.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import Sequence

from scarjax.validate import check_path, check_real

__all__ = ["ChecksumError", "DownloadError", "cache_dir", "fetch", "resolve", "sha256sum"]

_CHUNK = 1 << 20


class ChecksumError(OSError):
    """A downloaded file's SHA-256 differs from the published checksum."""


class DownloadError(OSError):
    """No mirror could deliver a file (offline, HTTP error, or every copy corrupt)."""


def cache_dir() -> Path:
    """The data cache directory: ``$SCARJAX_DATA`` if set, else ``~/.cache/scarjax``."""
    env = os.environ.get("SCARJAX_DATA")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "scarjax"


def sha256sum(path: str | os.PathLike) -> str:
    """Hex SHA-256 digest of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def _download(url: str, dest: Path, sha256: str, timeout: float) -> None:
    """Stream ``url`` to a temp file next to ``dest``; verify; atomically rename."""
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=dest.name + ".", suffix=".part")
    try:
        h = hashlib.sha256()
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as r:
            for chunk in iter(lambda: r.read(_CHUNK), b""):
                h.update(chunk)
                out.write(chunk)
        got = h.hexdigest()
        if got != sha256.lower():
            raise ChecksumError(
                f"checksum mismatch for {url}: expected sha256 {sha256}, got {got}; "
                "the download is corrupt or the file changed upstream, it was discarded"
            )
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def fetch(
    filename: str,
    urls: str | Sequence[str],
    sha256: str,
    *,
    subdir: str = "",
    timeout: float = 60.0,
) -> Path:
    """Return the cached path of ``filename``, downloading it first if needed.

    Args:
      filename: name of the file inside the cache (``cache_dir()/subdir/filename``).
      urls: one URL or a list of mirrors, tried in order (``file://`` works too).
      sha256: the published hex SHA-256 of the file.
      subdir: sub-folder of the cache, e.g. ``"mnist"``.
      timeout: socket timeout in seconds per request.

    Raises:
      DownloadError: no mirror delivered a file with the right checksum (the message
        lists each mirror's error, including any :class:`ChecksumError`).
    """
    if not isinstance(filename, str) or not filename or "/" in filename or "\\" in filename or filename in (".", ".."):
        raise ValueError(f"filename: expected a plain file name (no directories), got {filename!r}")
    if not isinstance(subdir, str) or os.path.isabs(subdir) or ".." in Path(subdir).parts:
        raise ValueError(f"subdir: expected a relative folder inside the cache, got {subdir!r}")
    if isinstance(urls, str):
        urls = [urls]
    try:
        urls = list(urls)
    except TypeError:
        raise TypeError(f"urls: expected a URL or a list of URLs, got {type(urls).__name__}") from None
    if not urls:
        raise ValueError("urls: need at least one URL")
    bad = [u for u in urls if not isinstance(u, str) or "://" not in u]
    if bad:
        raise ValueError(f"urls: expected URLs such as https://... or file://..., got {bad[0]!r}")
    if not isinstance(sha256, str) or len(sha256) != 64 or any(c not in "0123456789abcdefABCDEF" for c in sha256):
        raise ValueError(f"sha256: expected 64 hex digits, got {sha256!r}")
    timeout = float(check_real("timeout", timeout, lo=0.0, lo_open=True, scalar=True))
    dest = cache_dir() / subdir / filename
    if dest.is_file() and sha256sum(dest) == sha256.lower():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    errors = []
    for url in urls:
        try:
            _download(url, dest, sha256, timeout)
            return dest
        except (OSError, urllib.error.URLError, ValueError) as e:  # try the next mirror
            errors.append(f"  {url}: {e}")
    raise DownloadError(
        f"could not download {filename} to {dest}:\n" + "\n".join(errors)
        + "\nIf you are offline, download it by hand and pass its local path (path=...)."
    )


def resolve(
    path: str | os.PathLike | None,
    filename: str,
    urls: str | Sequence[str],
    sha256: str,
    *,
    subdir: str = "",
) -> Path:
    """Local file for a loader: ``path`` itself, ``path/filename``, or a verified download.

    ``path`` may name the file or the directory that holds it; ``None`` downloads into
    the cache via :func:`fetch`. Raises :class:`FileNotFoundError` naming the missing file.
    """
    if path is None:
        return fetch(filename, urls, sha256, subdir=subdir)
    p = check_path("path", path)
    if p.is_dir():
        p = p / filename
    if not p.is_file():
        raise FileNotFoundError(f"path: {p} does not exist (expected {filename})")
    return p
