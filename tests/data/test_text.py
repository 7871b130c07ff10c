import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scarjax.data import (
    Corpus,
    DataFormatError,
    DownloadError,
    corpus_from_texts,
    load_20newsgroups,
    load_lee,
    load_reuters,
    load_text,
    synthetic_lda_corpus,
    tokenize,
)


def _check_corpus(c: Corpus):
    assert c.tokens.dtype == np.int32 and c.doc_ids.dtype == np.int32 and c.doc_lengths.dtype == np.int32
    assert c.tokens.shape == c.doc_ids.shape
    assert int(c.doc_lengths.sum()) == c.tokens.size
    assert np.all(np.diff(c.doc_ids) >= 0)
    np.testing.assert_array_equal(np.bincount(c.doc_ids, minlength=len(c.doc_lengths)), c.doc_lengths)
    assert c.tokens.min() >= 0 and c.tokens.max() < len(c.vocab)


def test_tokenize():
    assert tokenize("The CAT sat on the mat-2x, didn't it? A b") == ["cat", "sat", "mat", "didn"]
    assert tokenize("Foo bar baz", stop_words={"bar"}) == ["foo", "baz"]


def test_corpus_from_texts_min_count():
    c = corpus_from_texts(["apple banana apple", "cherry", "banana apple"], min_count=2)
    _check_corpus(c)
    assert c.vocab == ["apple", "banana"]
    assert c.doc_lengths.tolist() == [3, 2]  # "cherry" doc dropped (empty)
    assert c.tokens.tolist() == [0, 1, 0, 1, 0]
    with pytest.raises(ValueError, match="min_count"):
        corpus_from_texts(["a"], min_count=0)


def test_lee_real(shared_data):
    d = shared_data("text")
    bg = load_lee(d)
    _check_corpus(bg)
    assert len(bg.doc_lengths) == 300 and bg.tokens.size > 20000
    assert "the" not in bg.vocab and "australia" in bg.vocab
    test = load_lee(d / "lee.cor", which="test")  # Latin-1 file
    _check_corpus(test)
    assert len(test.doc_lengths) == 50
    with pytest.raises(ValueError, match="which"):
        load_lee(d, which="train")


SGM = """<!DOCTYPE lewis SYSTEM "lewis.dtd">
<REUTERS TOPICS="YES" LEWISSPLIT="TRAIN" CGISPLIT="TRAINING-SET" OLDID="5544" NEWID="1">
<DATE>26-FEB-1987 15:01:01.79</DATE>
<TOPICS><D>cocoa</D></TOPICS>
<TEXT>&#2;
<TITLE>BAHIA COCOA REVIEW</TITLE>
<DATELINE>    SALVADOR, Feb 26 - </DATELINE><BODY>Showers continued throughout the week in
the Bahia cocoa zone &lt;alleviating> the drought.
 Reuter
&#3;</BODY></TEXT>
</REUTERS>
<REUTERS TOPICS="NO" LEWISSPLIT="TRAIN" CGISPLIT="TRAINING-SET" OLDID="5545" NEWID="2">
<TEXT TYPE="BRIEF">&#2;
<TITLE>TITLE ONLY, NO BODY</TITLE>
&#3;</TEXT>
</REUTERS>
<REUTERS TOPICS="YES" LEWISSPLIT="TEST" CGISPLIT="TRAINING-SET" OLDID="5546" NEWID="3">
<TEXT>&#2;
<BODY>Cocoa prices rose in S\xe3o Paulo.
 Reuter
&#3;</BODY></TEXT>
</REUTERS>
"""


def test_reuters_sgml(tmp_path):
    (tmp_path / "reut2-000.sgm").write_bytes(SGM.encode("latin-1"))
    (tmp_path / "reut2-001.sgm").write_bytes(SGM.encode("latin-1"))
    c = load_reuters(tmp_path, min_count=1)
    _check_corpus(c)
    assert len(c.doc_lengths) == 4  # 2 bodies per file, the title-only article skipped
    assert {"cocoa", "bahia", "alleviating", "reuter", "paulo"} <= set(c.vocab)
    assert "title" not in c.vocab and "salvador" not in c.vocab
    single = load_reuters(tmp_path / "reut2-000.sgm", min_count=1)
    assert len(single.doc_lengths) == 2


def test_reuters_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match="reut2"):
        load_reuters(tmp_path)
    (tmp_path / "reut2-000.sgm").write_text("<REUTERS><TEXT>no body</TEXT></REUTERS>")
    with pytest.raises(DataFormatError, match="no <BODY> text found in 1 file"):
        load_reuters(tmp_path)


@pytest.mark.parametrize("cut, match", [
    (SGM.index("Showers"), r"line 2: <REUTERS> article is never closed"),  # file cut inside article 1
    (SGM.index("Cocoa prices"), r"line 17: <REUTERS> article is never closed"),
])
def test_reuters_truncated(tmp_path, cut, match):
    (tmp_path / "reut2-000.sgm").write_bytes(SGM[:cut].encode("latin-1"))
    with pytest.raises(DataFormatError, match=r"reut2-000\.sgm, " + match):
        load_reuters(tmp_path)


@pytest.mark.parametrize("text, match", [
    (SGM.replace("</BODY></TEXT>\n</REUTERS>\n<REUTERS TOPICS=\"NO\"", "</TEXT>\n</REUTERS>\n<REUTERS TOPICS=\"NO\"", 1),
     r"line 7: <BODY> is never closed"),
    (SGM.replace("</REUTERS>", "", 1), r"line 12: <REUTERS> opened before the article opened at line 2"),
    ("</REUTERS>\n" + SGM, r"line 1: </REUTERS> without an opening"),
    ("plain text, no tags\n", r"no <REUTERS> article"),
    ("<REUTERS>\x00\x01</REUTERS>", r"line 1: control character '\\x00'"),
])
def test_reuters_malformed(tmp_path, text, match):
    (tmp_path / "reut2-003.sgm").write_bytes(text.encode("latin-1"))
    with pytest.raises(DataFormatError, match=r"reut2-003\.sgm[,:] " + match):
        load_reuters(tmp_path)


RATINGS_CSV = "userId,movieId,rating,timestamp\n1,1,4.0,964982703\n1,3,4.0,964981247\n1,6,4.0,964982224\n"


@pytest.mark.parametrize("content, match", [
    (RATINGS_CSV, r", line 1: 'userId,movieId,rating,timestamp' is a table header \(4 ','-separated columns\) "
                  r"and 3 of the 3 lines below have 4 fields: a CSV table"),
    ("userId,movieId,rating,timestamp\n", r", line 1: .* is a table header .* and nothing follows"),
    ("movieId,title,genres\n1,\"Toy Story, The (1995)\",Animation\n2,Jumanji (1995),Adventure\n",
     r", line 1: 'movieId,title,genres' is a table header"),
    ("\n1\t10\t4\t88\n2\t10\t3\t89\n", r", line 2: '1\\t10\\t4\\t88' is a row of numbers, as are 2 of the 2"),
    ("1 2 3\nsome text here\n4 5 6\n", r", line 1: '1 2 3' is a row of numbers, as are 2 of the 3"),
    ("", r": empty file"),
    ("\n  \n", r": the file holds only blank lines"),
    ("the of and\nit is\n", r": no word is left after tokenisation"),
    ("good text\nbad \x00\x07 text\n", r", line 2: control character '\\x00' at column 5: binary data"),
])
def test_text_loaders_refuse_non_text(tmp_path, content, match):
    f = tmp_path / "lee_background.cor"
    f.write_bytes(content.encode("latin-1"))
    for load in (load_text, load_lee):
        with pytest.raises(DataFormatError, match=r"lee_background\.cor" + match):
            load(f)


def test_load_text_roundtrip_and_arguments(tmp_path):
    f = tmp_path / "docs.txt"
    f.write_text("Apples, pears and apples.\n\nHello, world, orange\nNumbers 1 2 3 are fine in prose\n")
    c = load_text(f)
    _check_corpus(c)
    assert c.doc_lengths.tolist() == [3, 3, 3]
    assert c.vocab == sorted({"apples", "pears", "hello", "world", "orange", "numbers", "fine", "prose"})
    assert load_text(f, min_count=2).vocab == ["apples"]
    with pytest.raises(TypeError, match="^path"):
        load_text(3)
    with pytest.raises(FileNotFoundError, match="^path"):
        load_text(tmp_path / "nope.txt")
    with pytest.raises(TypeError, match="^stop_words"):
        load_text(f, stop_words="the")
    with pytest.raises(ValueError, match="^min_count"):
        load_text(f, min_count=0)


@pytest.mark.parametrize("texts, exc, match", [
    ("one document", TypeError, r"^texts: expected a sequence of documents"),
    (["ok", 3], TypeError, r"^texts\[1\]: expected a str, got int"),
    ([b"bytes"], TypeError, r"^texts\[0\]"),
    ([], ValueError, r"^texts: no documents"),
    (["1 2 3", "a the"], ValueError, r"^texts: no word is left"),
    (5, TypeError, r"^texts"),
])
def test_corpus_from_texts_bad_arguments(texts, exc, match):
    with pytest.raises(exc, match=match):
        corpus_from_texts(texts)


def test_tokenize_bad_arguments():
    with pytest.raises(TypeError, match="^text"):
        tokenize(b"bytes")
    with pytest.raises(TypeError, match="^stop_words"):
        tokenize("a b", stop_words="ab")


def test_20newsgroups_offline_is_clear(tmp_path):
    with pytest.raises(DownloadError, match="20 Newsgroups"):
        load_20newsgroups(tmp_path / "sk", download_if_missing=False)
    with pytest.raises(ValueError, match="subset"):
        load_20newsgroups(tmp_path, subset="dev")
    with pytest.raises(ValueError, match="remove"):
        load_20newsgroups(tmp_path, remove=("signatures",))
    with pytest.raises(TypeError, match="^remove"):
        load_20newsgroups(tmp_path, remove="headers")
    with pytest.raises(TypeError, match="^download_if_missing"):
        load_20newsgroups(tmp_path, download_if_missing="no")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="^path: .* is a file"):
        load_20newsgroups(tmp_path / "file")


def test_synthetic_lda_defaults_and_truth():
    c, truth = synthetic_lda_corpus(0, return_truth=True)
    _check_corpus(c)
    assert c.tokens.shape == (20000,) and len(c.vocab) == 500 and len(c.doc_lengths) == 200
    assert truth.doc_topic.shape == (200, 20) and truth.topic_word.shape == (20, 500)
    # Empirical topic frequencies per document follow theta.
    counts = np.zeros((200, 20))
    np.add.at(counts, (c.doc_ids, truth.assignments), 1)
    assert np.abs(counts / 100 - truth.doc_topic).mean() < 0.03


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    n_docs=st.integers(1, 20),
    n_words=st.integers(1, 50),
    n_topics=st.integers(1, 8),
    doc_length=st.integers(1, 30),
    alpha=st.floats(0.05, 5.0),
    beta=st.floats(0.05, 5.0),
)
def test_synthetic_lda_invariants(seed, n_docs, n_words, n_topics, doc_length, alpha, beta):
    args = dict(n_docs=n_docs, n_words=n_words, n_topics=n_topics, doc_length=doc_length, alpha=alpha, beta=beta)
    c, truth = synthetic_lda_corpus(seed, return_truth=True, **args)
    _check_corpus(c)
    assert c.tokens.size == n_docs * doc_length and len(c.vocab) == n_words
    assert np.all(c.doc_lengths == doc_length)
    assert truth.assignments.min() >= 0 and truth.assignments.max() < n_topics
    # every token's word has positive probability under its topic
    assert np.all(truth.topic_word[truth.assignments, c.tokens] > 0)
    again = synthetic_lda_corpus(seed, **args)
    np.testing.assert_array_equal(c.tokens, again.tokens)


@pytest.mark.parametrize(
    "kwargs, name",
    [({"n_docs": 0}, "n_docs"), ({"n_words": 0}, "n_words"), ({"n_topics": 1.5}, "n_topics"),
     ({"doc_length": -1}, "doc_length"), ({"alpha": 0.0}, "alpha"), ({"beta": float("nan")}, "beta")],
)
def test_synthetic_lda_bad_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        synthetic_lda_corpus(**kwargs)
