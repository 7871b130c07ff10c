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

import html
import os
import re
from collections import Counter
from pathlib import Path
from typing import Iterable, NamedTuple, Sequence

import numpy as np

from ._cache import DownloadError, fetch
from ._validate import as_rng, check_choice, check_float, check_int

__all__ = [
    "Corpus",
    "LDATruth",
    "corpus_from_texts",
    "load_20newsgroups",
    "load_lee",
    "load_reuters",
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


def tokenize(text: str, stop_words: Iterable[str] | None = None) -> list[str]:
    """Lowercase ``text``, keep alphabetic runs of >= 2 letters, drop stop words
    (scikit-learn's ``ENGLISH_STOP_WORDS`` when ``stop_words`` is None)."""
    if stop_words is None:
        from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS as stop_words
    stop = stop_words if isinstance(stop_words, (set, frozenset)) else frozenset(stop_words)
    return [w for w in _WORD.findall(text.lower()) if w not in stop]


def corpus_from_texts(texts: Sequence[str], min_count: int = 1, stop_words=None) -> Corpus:
    """Tokenise ``texts`` into a :class:`Corpus`.

    Words occurring fewer than ``min_count`` times in total are dropped; documents left
    without tokens are dropped, so ``doc_ids`` are dense. ``vocab`` is sorted.
    """
    min_count = check_int("min_count", min_count)
    docs = [tokenize(t, stop_words) for t in texts]
    counts = Counter(w for d in docs for w in d)
    vocab = sorted(w for w, c in counts.items() if c >= min_count)
    index = {w: i for i, w in enumerate(vocab)}
    ids = [[index[w] for w in d if w in index] for d in docs]
    ids = [d for d in ids if d]
    lengths = np.asarray([len(d) for d in ids], dtype=np.int32)
    tokens = np.fromiter((w for d in ids for w in d), dtype=np.int32, count=int(lengths.sum()))
    doc_ids = np.repeat(np.arange(len(ids), dtype=np.int32), lengths)
    return Corpus(tokens, doc_ids, vocab, lengths)


def _read_text(file: Path) -> str:
    """UTF-8, falling back to Latin-1 (``lee.cor`` is Latin-1)."""
    raw = file.read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


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

    One document per line; see :func:`corpus_from_texts` for the tokenisation.
    """
    check_choice("which", which, _LEE)
    name, sha = _LEE[which]
    if path is None:
        try:
            import importlib.resources

            res = importlib.resources.files("gensim") / "test" / "test_data" / name
            file = Path(str(res)) if res.is_file() else None
        except ModuleNotFoundError:
            file = None
        if file is None:
            file = fetch(name, _LEE_URL + name, sha, subdir="lee")
    else:
        file = Path(path).expanduser()
        if file.is_dir():
            file = file / name
        if not file.is_file():
            raise FileNotFoundError(f"path: {file} does not exist (expected {name})")
    lines = [ln for ln in _read_text(file).splitlines() if ln.strip()]
    return corpus_from_texts(lines, min_count=min_count)


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
    from sklearn.datasets import fetch_20newsgroups

    from ._cache import cache_dir

    check_choice("subset", subset, {"train", "test", "all"})
    bad = set(remove) - {"headers", "footers", "quotes"}
    if bad:
        raise ValueError(f"remove: unknown parts {sorted(bad)}; valid: headers, footers, quotes")
    data_home = Path(path).expanduser() if path is not None else cache_dir() / "sklearn"
    try:
        bunch = fetch_20newsgroups(data_home=str(data_home), subset=subset, remove=tuple(remove),
                                   download_if_missing=download_if_missing, shuffle=False)
    except OSError as e:  # includes urllib's URLError and sklearn's "Data not found"
        raise DownloadError(
            f"20 Newsgroups is not in {data_home} and could not be downloaded "
            f"(download_if_missing={download_if_missing}): {e}"
        ) from e
    return corpus_from_texts(bunch.data, min_count=min_count)


# --------------------------------------------------------------------------- Reuters

_REUTERS_DOC = re.compile(r"<REUTERS\b.*?</REUTERS>", re.S)
_BODY = re.compile(r"<BODY>(.*?)</BODY>", re.S)


def load_reuters(path: str | os.PathLike, min_count: int = 5) -> Corpus:
    """Reuters-21578 (Lewis 1997) from its SGML distribution.

    Args:
      path: a directory holding ``reut2-000.sgm`` ... ``reut2-021.sgm`` (all
        ``reut2-*.sgm`` are read in name order) or a single ``.sgm`` file. The files
        are read as Latin-1 (one original file holds non-UTF-8 bytes).
      min_count: minimum corpus frequency for a word to be kept.

    The text of each article's ``<BODY>`` is used (entities such as ``&lt;`` decoded);
    articles without a body are skipped.
    """
    p = Path(path).expanduser()
    files = sorted(p.glob("reut2-*.sgm")) if p.is_dir() else [p]
    if not files or not files[0].is_file():
        raise FileNotFoundError(f"path: no Reuters-21578 reut2-*.sgm files at {p}")
    bodies = []
    for f in files:
        for doc in _REUTERS_DOC.findall(f.read_bytes().decode("latin-1")):
            m = _BODY.search(doc)
            if m:
                bodies.append(html.unescape(m.group(1)))
    if not bodies:
        raise ValueError(f"path: no <BODY> text found in {len(files)} file(s) at {p}")
    return corpus_from_texts(bodies, min_count=min_count)


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
    n_docs = check_int("n_docs", n_docs)
    n_words = check_int("n_words", n_words)
    n_topics = check_int("n_topics", n_topics)
    doc_length = check_int("doc_length", doc_length)
    alpha = check_float("alpha", alpha, 0.0, open_low=True)
    beta = check_float("beta", beta, 0.0, open_low=True)
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

