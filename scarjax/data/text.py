"""Bag-of-tokens corpora for the LDA (collapsed Gibbs) experiments of thesis Sec 5.5.1.

The thesis runs LDA on 20 Newsgroups and Reuters with 20 topics and
``alpha = beta = 1``. A :class:`Corpus` is a flat token stream (one entry per token
occurrence, which is what a collapsed Gibbs sampler iterates over) plus the document
each token belongs to, so every array has a static shape.

Tokenisation (:func:`tokenize`): lowercase, alphabetic runs of at least two letters,
scikit-learn's ``ENGLISH_STOP_WORDS`` removed; :func:`corpus_from_texts` then drops
words seen fewer than ``min_count`` times in the whole corpus and documents left empty.
"""

from __future__ import annotations

import csv
import html
import importlib.resources
import os
import re
from collections import Counter
from pathlib import Path
from typing import Iterable, NamedTuple, Sequence

import numpy as np

from scarjax.validate import DataFormatError, as_rng, check_bool, check_choice, check_int, check_path, check_real

from ._cache import DownloadError, cache_dir, fetch
from ._parse import _NUMBER, decode, read_bytes, text_lines

__all__ = [
    "Corpus",
    "LDATruth",
    "corpus_from_texts",
    "load_20newsgroups",
    "load_lee",
    "load_reuters",
    "load_text",
    "synthetic_lda_corpus",
    "tokenize",
]


class Corpus(NamedTuple):
    """A tokenised corpus.

    Attributes:
      tokens: int32 ``[N]``; word id (index into ``vocab``) of every token occurrence.
      doc_ids: int32 ``[N]``; document of every token, non-decreasing, ``0..D-1``.
      vocab: list of ``V`` words; ``vocab[w]`` is word id ``w``.
      doc_lengths: int32 ``[D]``; tokens per document (sums to ``N``).
    """

    tokens: np.ndarray
    doc_ids: np.ndarray
    vocab: list
    doc_lengths: np.ndarray


_WORD = re.compile(r"[a-z]{2,}")


def _stop_set(stop_words) -> frozenset:
    if stop_words is None:
        # scikit-learn is slow to import and needed only here
        from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

        return ENGLISH_STOP_WORDS
    if isinstance(stop_words, (str, bytes)):
        raise TypeError(f"stop_words: expected a collection of words, got a single {type(stop_words).__name__} "
                        f"{stop_words[:40]!r}")
    try:
        stop = frozenset(stop_words)
    except TypeError:
        raise TypeError(f"stop_words: expected a collection of words, got {type(stop_words).__name__}") from None
    bad = [w for w in stop if not isinstance(w, str)]
    if bad:
        raise TypeError(f"stop_words: expected strings, got {bad[0]!r}")
    return stop


def tokenize(text: str, stop_words: Iterable[str] | None = None) -> list[str]:
    """Lowercase ``text``, keep alphabetic runs of >= 2 letters, drop stop words
    (scikit-learn's ``ENGLISH_STOP_WORDS`` when ``stop_words`` is None)."""
    if not isinstance(text, str):
        raise TypeError(f"text: expected a str, got {type(text).__name__}")
    stop = _stop_set(stop_words)
    return [w for w in _WORD.findall(text.lower()) if w not in stop]


def _corpus(texts: Sequence[str], min_count: int, stop_words, source=None) -> Corpus:
    """:func:`corpus_from_texts`; an empty result names ``source`` (a file) or ``texts``."""
    min_count = check_int("min_count", min_count, lo=1)
    stop = _stop_set(stop_words)
    docs = [[w for w in _WORD.findall(t.lower()) if w not in stop] for t in texts]
    counts = Counter(w for d in docs for w in d)
    vocab = sorted(w for w, c in counts.items() if c >= min_count)
    if not vocab:
        why = (f"no word is left after tokenisation (alphabetic words of >= 2 letters, stop words "
               f"removed, min_count={min_count}) in {len(docs)} document(s)")
        if source is not None:
            raise DataFormatError(source, why)
        raise ValueError(f"texts: {why}")
    index = {w: i for i, w in enumerate(vocab)}
    ids = [[index[w] for w in d if w in index] for d in docs]
    ids = [d for d in ids if d]
    lengths = np.asarray([len(d) for d in ids], dtype=np.int32)
    tokens = np.fromiter((w for d in ids for w in d), dtype=np.int32, count=int(lengths.sum()))
    doc_ids = np.repeat(np.arange(len(ids), dtype=np.int32), lengths)
    return Corpus(tokens, doc_ids, vocab, lengths)


def corpus_from_texts(texts: Sequence[str], min_count: int = 1, stop_words=None) -> Corpus:
    """Tokenise ``texts`` into a :class:`Corpus`.

    Words occurring fewer than ``min_count`` times in total are dropped; documents left
    without tokens are dropped, so ``doc_ids`` are dense. ``vocab`` is sorted.

    Raises ``TypeError`` naming ``texts`` (or ``texts[i]``) unless it is a sequence of
    strings, and ``ValueError`` when no document keeps a word (an empty :class:`Corpus`
    would make every model downstream fail or average to NaN).
    """
    if isinstance(texts, (str, bytes)):
        raise TypeError(f"texts: expected a sequence of documents (strings), got a single {type(texts).__name__}")
    try:
        texts = list(texts)
    except TypeError:
        raise TypeError(f"texts: expected a sequence of strings, got {type(texts).__name__}") from None
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise TypeError(f"texts[{i}]: expected a str, got {type(t).__name__} {t!r:.40}")
    if not texts:
        raise ValueError("texts: no documents (an empty sequence)")
    return _corpus(texts, min_count, stop_words)


# --------------------------------------------------------------------------- one document per line

_SEPARATORS = (",", "\t", ";", "::", "|")
_IDENT = re.compile(r"[A-Za-z_][\w.\-]*")
_SAMPLE = 2000  # lines inspected when deciding whether a file is a table


def _numeric_row(line: str) -> bool:
    """Two or more numbers (blank fields allowed) separated by one delimiter or spaces."""
    for sep in _SEPARATORS:
        if sep in line:
            fields = [f.strip() for f in line.split(sep)]
            if len(fields) >= 2 and any(fields) and all(not f or _NUMBER.fullmatch(f) for f in fields):
                return True
    fields = line.split()
    return len(fields) >= 2 and all(_NUMBER.fullmatch(f) for f in fields)


def _header(line: str) -> tuple[str, int] | None:
    """``(delimiter, n_columns)`` if ``line`` reads as a table header (identifiers only)."""
    for sep in _SEPARATORS:
        fields = [f.strip('"') for f in line.strip().split(sep)]  # no spaces around names, unlike prose
        if len(fields) >= 2 and all(_IDENT.fullmatch(f) for f in fields):
            return sep, len(fields)
    return None


def _refuse_tables(lines: list[str], linenos: np.ndarray, source) -> None:
    """Raise :class:`DataFormatError` if the lines are a numeric table or a CSV table
    (e.g. a MovieLens ``ratings.csv``) rather than one document per line."""
    head = _header(lines[0])
    if head is not None:
        sep, n = head
        body = lines[1:_SAMPLE]
        same = sum(len(next(csv.reader([ln], delimiter=sep[0]))) == n for ln in body) if len(sep) == 1 \
            else sum(ln.count(sep) == n - 1 for ln in body)
        if not body or 5 * same >= 4 * len(body):
            rows = f"and {same} of the {len(body)} lines below have {n} fields" if body else "and nothing follows"
            raise DataFormatError(
                source, f"{lines[0].strip()[:60]!r} is a table header ({n} {sep!r}-separated columns) {rows}: "
                        "a CSV table, not text with one document per line", linenos[0])
    sample = lines[:_SAMPLE]
    numeric = [k for k, ln in enumerate(sample) if _numeric_row(ln)]
    if numeric and 2 * len(numeric) >= len(sample):
        k = numeric[0]
        raise DataFormatError(
            source, f"{sample[k].strip()[:60]!r} is a row of numbers, as are {len(numeric)} of the "
                    f"{len(sample)} lines read: a numeric table (ratings? features?), not text with one "
                    "document per line", linenos[k])


def _document_lines(file: Path, source=None, encodings=("utf-8", "latin-1")) -> list[str]:
    """Non-blank lines of a one-document-per-line text file, refusing binary data,
    archives and tables (see :func:`load_text`)."""
    source = file if source is None else source
    lines, linenos = text_lines(read_bytes(file, source), source, encodings)
    _refuse_tables(lines, linenos, source)
    return lines


def load_text(path: str | os.PathLike, min_count: int = 1, stop_words=None) -> Corpus:
    """A corpus from a plain-text file with one document per line.

    Args:
      path: the text file (UTF-8, falling back to Latin-1; gzip-compressed is read too).
      min_count: minimum corpus frequency for a word to be kept.
      stop_words: words to drop (default scikit-learn's ``ENGLISH_STOP_WORDS``).

    Blank lines are skipped. The file is refused with :class:`DataFormatError` naming it
    (and the line) when it is empty, binary (undecodable bytes or control characters),
    a zip archive, a numeric table (most lines rows of numbers, e.g. a ratings file), a
    CSV table (a header of column names with rows of as many fields below, e.g.
    ``userId,movieId,rating,timestamp``), or leaves no word after tokenisation.
    """
    file = check_path("path", path)
    if not file.is_file():
        raise FileNotFoundError(f"path: {file} does not exist or is not a file")
    return _corpus(_document_lines(file), min_count, stop_words, source=file)


# --------------------------------------------------------------------------- Lee

_LEE = {  # which -> (file, sha256 of gensim's test-data copy)
    "background": ("lee_background.cor", "5d78d6dafd953bbf65797bef09a9ffb9ec430583381be705f8fd460000f370fb"),
    "test": ("lee.cor", "a878f9a58f6743c32985c56c2f2f75988386216b38a4023a01fd3bcf7884d93e"),
}
_LEE_URL = "https://raw.githubusercontent.com/piskvorky/gensim/4.4.0/gensim/test/test_data/"


def load_lee(path: str | os.PathLike | None = None, which: str = "background", min_count: int = 1) -> Corpus:
    """The Lee et al. (2005) news corpus as shipped in gensim's test data.

    Args:
      path: the ``.cor`` file or the directory holding it; ``None`` uses gensim's copy
        if gensim is installed, else downloads it into the cache (SHA-256 checked).
      which: ``"background"`` (``lee_background.cor``, 300 documents) or ``"test"``
        (``lee.cor``, 50 documents, Latin-1).
      min_count: minimum corpus frequency for a word to be kept.

    One document per line; see :func:`corpus_from_texts` for the tokenisation and
    :func:`load_text` for the files refused (empty, binary, tables).
    """
    check_choice("which", which, _LEE)
    name, sha = _LEE[which]
    if path is None:
        try:
            res = importlib.resources.files("gensim") / "test" / "test_data" / name
            file = Path(str(res)) if res.is_file() else None
        except ModuleNotFoundError:
            file = None
        if file is None:
            file = fetch(name, _LEE_URL + name, sha, subdir="lee")
    else:
        file = check_path("path", path)
        if file.is_dir():
            file = file / name
        if not file.is_file():
            raise FileNotFoundError(f"path: {file} does not exist (expected {name})")
    return _corpus(_document_lines(file), min_count, None, source=file)


# --------------------------------------------------------------------------- 20 Newsgroups


def load_20newsgroups(
    path: str | os.PathLike | None = None,
    subset: str = "train",
    remove: Sequence[str] = ("headers", "footers", "quotes"),
    min_count: int = 5,
    download_if_missing: bool = True,
) -> Corpus:
    """20 Newsgroups (Lang 1995) via :func:`sklearn.datasets.fetch_20newsgroups`.

    Args:
      path: scikit-learn ``data_home`` (default: ``$SCARJAX_DATA/sklearn``).
      subset: ``"train"``, ``"test"`` or ``"all"``.
      remove: parts of each post to strip (subset of headers/footers/quotes).
      min_count: minimum corpus frequency for a word to be kept.
      download_if_missing: let scikit-learn download the archive (it checks its own
        SHA-256). When False or offline and nothing is cached, raises
        :class:`~scarjax.data._cache.DownloadError` saying so.
    """
    from sklearn.datasets import fetch_20newsgroups  # scikit-learn is slow to import

    check_choice("subset", subset, {"train", "test", "all"})
    if isinstance(remove, (str, bytes)):
        raise TypeError(f"remove: expected a sequence of part names, got the single string {remove!r} "
                        f"(write ({remove!r},))")
    bad = [r for r in remove if r not in ("headers", "footers", "quotes")]
    if bad:
        raise ValueError(f"remove: unknown parts {bad}; valid: headers, footers, quotes")
    check_bool("download_if_missing", download_if_missing)
    min_count = check_int("min_count", min_count, lo=1)
    data_home = check_path("path", path) if path is not None else cache_dir() / "sklearn"
    if data_home.exists() and not data_home.is_dir():
        raise ValueError(f"path: {data_home} is a file; expected scikit-learn's data_home directory")
    try:
        bunch = fetch_20newsgroups(data_home=str(data_home), subset=subset, remove=tuple(remove),
                                   download_if_missing=download_if_missing, shuffle=False)
    except OSError as e:  # includes urllib's URLError and sklearn's "Data not found"
        raise DownloadError(
            f"20 Newsgroups is not in {data_home} and could not be downloaded "
            f"(download_if_missing={download_if_missing}): {e}"
        ) from e
    return _corpus(bunch.data, min_count, None, source=f"20 Newsgroups ({subset}) in {data_home}")


# --------------------------------------------------------------------------- Reuters

_REUTERS_TAG = re.compile(r"<(/?)REUTERS\b[^>]*>")
_BODY_TAG = re.compile(r"<(/?)BODY>")


def _reuters_bodies(file: Path) -> list[str]:
    """The ``<BODY>`` texts of one ``.sgm`` file, its tag structure checked.

    Raises :class:`DataFormatError` naming the file and line of an article or body that
    is never closed (a truncated file), a closing tag without an opening one, nested
    articles, binary data (NUL bytes), or a file without any ``<REUTERS>`` article.
    """
    text = decode(read_bytes(file), file, ("latin-1",), nul_only=True)

    def line(pos):
        return text.count("\n", 0, pos) + 1

    bodies, start = [], None
    for m in _REUTERS_TAG.finditer(text):
        if not m.group(1):
            if start is not None:
                raise DataFormatError(file, f"<REUTERS> opened before the article opened at line "
                                            f"{line(start)} was closed", line(m.start()))
            start = m.end()
            continue
        if start is None:
            raise DataFormatError(file, "</REUTERS> without an opening <REUTERS>", line(m.start()))
        opened = None
        for b in _BODY_TAG.finditer(text, start, m.start()):
            if not b.group(1):
                if opened is not None:
                    raise DataFormatError(file, "<BODY> opened twice in one article", line(b.start()))
                opened = b
            else:
                if opened is None:
                    raise DataFormatError(file, "</BODY> without an opening <BODY>", line(b.start()))
                bodies.append(html.unescape(text[opened.end():b.start()]))
                opened = None
        if opened is not None:
            raise DataFormatError(file, "<BODY> is never closed inside its article", line(opened.start()))
        start = None
    if start is not None:
        raise DataFormatError(file, "<REUTERS> article is never closed (the file is cut off?)",
                              line(text.rfind("<REUTERS", 0, start)))
    if not _REUTERS_TAG.search(text):
        raise DataFormatError(file, "no <REUTERS> article: not a Reuters-21578 .sgm file")
    return bodies


def load_reuters(path: str | os.PathLike, min_count: int = 5) -> Corpus:
    """Reuters-21578 (Lewis 1997) from its SGML distribution.

    Args:
      path: a directory holding ``reut2-000.sgm`` ... ``reut2-021.sgm`` (all
        ``reut2-*.sgm`` are read in name order) or a single ``.sgm`` file. The files
        are read as Latin-1 (one original file holds non-UTF-8 bytes).
      min_count: minimum corpus frequency for a word to be kept.

    The text of each article's ``<BODY>`` is used (entities such as ``&lt;`` decoded);
    articles without a body are skipped. A truncated or malformed file (an article or
    body never closed, stray closing tags, no article at all, NUL bytes) raises
    :class:`DataFormatError` naming the file and the line.
    """
    p = check_path("path", path)
    min_count = check_int("min_count", min_count, lo=1)
    files = sorted(p.glob("reut2-*.sgm")) if p.is_dir() else [p]
    if not files or not files[0].is_file():
        raise FileNotFoundError(f"path: no Reuters-21578 reut2-*.sgm files at {p}")
    bodies = [b for f in files for b in _reuters_bodies(f)]
    if not bodies:
        raise DataFormatError(p, f"no <BODY> text found in {len(files)} file(s)")
    return _corpus(bodies, min_count, None, source=p)


# --------------------------------------------------------------------------- synthetic


class LDATruth(NamedTuple):
    """The latent variables a synthetic corpus was drawn with."""

    doc_topic: np.ndarray  # float64 [D, K], theta
    topic_word: np.ndarray  # float64 [K, V], phi
    assignments: np.ndarray  # int32 [N], z


def synthetic_lda_corpus(
    key_or_seed=0,
    n_docs: int = 200,
    n_words: int = 500,
    n_topics: int = 20,
    doc_length: int = 100,
    alpha: float = 0.1,
    beta: float = 0.1,
    return_truth: bool = False,
):
    """Draw a corpus from the LDA generative model (embedded default, no download).

    ``phi_k ~ Dir(beta)`` for each topic, ``theta_d ~ Dir(alpha)`` for each document,
    then every one of the ``doc_length`` tokens of a document draws ``z ~ Cat(theta_d)``
    and ``w ~ Cat(phi_z)``. All documents have the same length so shapes are static.
    The vocabulary is ``["w0", "w1", ...]`` (all ``n_words`` ids, used or not).

    Returns a :class:`Corpus`, or ``(Corpus, LDATruth)`` if ``return_truth``.
    """
    n_docs = check_int("n_docs", n_docs, lo=1)
    n_words = check_int("n_words", n_words, lo=1)
    n_topics = check_int("n_topics", n_topics, lo=1)
    doc_length = check_int("doc_length", doc_length, lo=1)
    alpha = float(check_real("alpha", alpha, lo=0.0, lo_open=True, scalar=True))
    beta = float(check_real("beta", beta, lo=0.0, lo_open=True, scalar=True))
    return_truth = check_bool("return_truth", return_truth)
    rng = as_rng(key_or_seed)
    phi = rng.dirichlet(np.full(n_words, beta), size=n_topics)
    theta = rng.dirichlet(np.full(n_topics, alpha), size=n_docs)
    # z: per-document topic counts ~ Multinomial(doc_length, theta_d), then shuffled
    # within each document; w: each topic's tokens drawn from phi_k in one call.
    counts = rng.multinomial(doc_length, theta)  # [D, K]
    z = np.repeat(np.tile(np.arange(n_topics), n_docs), counts.ravel())
    doc_ids = np.repeat(np.arange(n_docs, dtype=np.int32), doc_length)
    z = z[np.lexsort((rng.random(z.size), doc_ids))]
    w = np.empty(z.size, dtype=np.int64)
    for k in range(n_topics):
        sel = np.flatnonzero(z == k)
        w[sel] = rng.choice(n_words, size=sel.size, p=phi[k])
    corpus = Corpus(
        w.astype(np.int32),
        doc_ids,
        [f"w{i}" for i in range(n_words)],
        np.full(n_docs, doc_length, dtype=np.int32),
    )
    return (corpus, LDATruth(theta, phi, z.astype(np.int32))) if return_truth else corpus

