"""Data sets for the SCAR experiments (thesis Sec 5.5.1), as plain NumPy arrays.

Features are float32, labels int32. Embedded defaults need no download
(:func:`load_digits`, :func:`load_mnist_5k`, :func:`synthetic_ratings`,
:func:`synthetic_lda_corpus`); loaders for the thesis's real data sets read a local copy
when given ``path`` and otherwise download into ``$SCARJAX_DATA`` (default
``~/.cache/scarjax``) with a SHA-256 check.

Malformed files never load silently: every loader checks what it parses and raises
:class:`DataFormatError` (a ``ValueError``) naming the file, the line and the problem
(``ratings.csv, line 7: movieId must be an integer, got '3.7'``); bad Python arguments
raise ``ValueError``/``TypeError`` naming the argument.

By model (Sec 5.5.1):

* MLR (MNIST, CoverType): :func:`load_mnist`, :func:`load_mnist_5k`, :func:`load_digits`, :func:`load_covertype`;
* MF/ALS (MovieLens, Jester): :func:`load_movielens`, :func:`load_movielens_small`, :func:`load_jester`,
  :func:`ratings_from_triples`, :func:`synthetic_ratings`;
* LDA (20 Newsgroups, Reuters): :func:`load_20newsgroups`, :func:`load_reuters`, :func:`load_lee`, :func:`load_text`,
  :func:`synthetic_lda_corpus`.

Pollux cluster-simulator inputs (Sec 3.5.3; embedded, Apache-2.0): :func:`load_workload`,
:func:`load_philly`, :func:`load_app_traces` (:mod:`scarjax.data.pollux_sim`).

Transient clouds (embedded, Apache-2.0/MIT, the spot prices as an April 2015 extract):
:func:`load_gce_lifetimes`, :func:`load_spot_prices`, :func:`load_spot_market`,
:func:`load_aws_p3_trace`, :func:`load_gcp_v100_trace`, :func:`load_startup_times`
(:mod:`scarjax.data.transient`).

CM-DARE (embedded, Apache-2.0): :func:`load_cmdare_speed`, :func:`load_cmdare_checkpoints`,
:func:`load_cmdare_cluster_speed`, :func:`load_cmdare_step_logs`, :func:`load_gce_training_runs`
(:mod:`scarjax.data.cmdare`).
"""

from scarjax.validate import DataFormatError

from ._cache import ChecksumError, DownloadError, cache_dir, fetch, sha256sum
from ._parse import read_bytes  # a data file's bytes, gunzipped if gzip (shared with scarjax.sched)
from .cmdare import (  # CM-DARE measurements: step/checkpoint times, cluster size, GCE training runs
    load_cmdare_checkpoints,
    load_cmdare_cluster_speed,
    load_cmdare_speed,
    load_cmdare_step_logs,
    load_gce_training_runs,
)
from .covertype import load_covertype
from .digits import load_digits
from .mnist import load_mnist, load_mnist_5k, read_idx
from .pollux_sim import load_app_traces, load_philly, load_workload  # Pollux simulator inputs (Sec 3.5.3)
from .transient import (  # transient clouds: GCE lifetimes, AWS spot prices, node traces, start-up times
    load_aws_p3_trace,
    load_gce_lifetimes,
    load_gcp_v100_trace,
    load_spot_market,
    load_spot_prices,
    load_startup_times,
)
from .ratings import (
    Ratings,
    load_jester,
    load_movielens,
    load_movielens_small,
    ratings_from_triples,
    synthetic_ratings,
)
from .text import (
    Corpus,
    LDATruth,
    corpus_from_texts,
    load_20newsgroups,
    load_lee,
    load_reuters,
    load_text,
    synthetic_lda_corpus,
    tokenize,
)

__all__ = [
    "ChecksumError",
    "Corpus",
    "DataFormatError",
    "DownloadError",
    "LDATruth",
    "Ratings",
    "cache_dir",
    "corpus_from_texts",
    "fetch",
    "load_20newsgroups",
    "load_app_traces",
    "load_cmdare_checkpoints",
    "load_cmdare_cluster_speed",
    "load_cmdare_speed",
    "load_cmdare_step_logs",
    "load_aws_p3_trace",
    "load_covertype",
    "load_digits",
    "load_gce_lifetimes",
    "load_gce_training_runs",
    "load_gcp_v100_trace",
    "load_jester",
    "load_lee",
    "load_mnist",
    "load_mnist_5k",
    "load_movielens",
    "load_movielens_small",
    "load_philly",
    "load_reuters",
    "load_spot_market",
    "load_spot_prices",
    "load_startup_times",
    "load_text",
    "load_workload",
    "ratings_from_triples",
    "read_bytes",
    "read_idx",
    "sha256sum",
    "synthetic_lda_corpus",
    "synthetic_ratings",
    "tokenize",
]
