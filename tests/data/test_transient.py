"""The transient-cloud data (scarjax.data.transient): the embedded copy is the sources' files (sha256
manifest; the spot prices an April 2015 extract of the full files), loads into typed read-only records
with the documented counts and ranges, equals what the full files in ../shared give, and malformed
files raise DataFormatError naming file and line."""

import gzip
import re

import numpy as np
import pytest

from scarjax.data._parse import content_sha256, read_manifest
from scarjax.data import (
    DataFormatError,
    load_aws_p3_trace,
    load_gce_lifetimes,
    load_gcp_v100_trace,
    load_spot_market,
    load_spot_prices,
    load_startup_times,
)
from scarjax.data import transient as tr

EMBEDDED = tr.embedded_dir()
H = 3600.0
# rows of each embedded spot extract (README table)
EXTRACT_ROWS = {
    ("us-east-1a", "c3.xlarge"): 12383,
    ("us-east-1a", "d2.8xlarge"): 2572,
    ("us-east-1a", "g2.2xlarge"): 3018,
    ("us-east-1a", "m3.medium"): 34,
    ("us-east-1a", "r3.large"): 1463,
    ("us-east-1b", "c3.xlarge"): 2970,
    ("us-east-1b", "d2.8xlarge"): 3020,
    ("us-east-1b", "g2.2xlarge"): 3689,
    ("us-east-1b", "m3.medium"): 72,
    ("us-east-1b", "r3.large"): 951,
    ("us-east-1e", "c3.xlarge"): 6685,
    ("us-east-1e", "d2.8xlarge"): 3126,
    ("us-east-1e", "g2.2xlarge"): 3281,
    ("us-east-1e", "m3.medium"): 112,
    ("us-east-1e", "r3.large"): 1446,
}


# -- the embedded copy -------------------------------------------------------------------------


def test_embedded_files_match_theread_manifest():
    manifest = read_manifest(EMBEDDED / "README.md")
    files = {str(p.relative_to(EMBEDDED)) for p in EMBEDDED.rglob("*") if p.is_file()} - {"README.md"}
    assert files == set(manifest), sorted(files ^ set(manifest))
    assert (
        len(manifest) == 15 + 1 + 8 + 3 + 3 + 119
    )  # spot extracts, CM-DARE licence + 8 start-up files, GCE, traces; the CM-DARE files (tests/data/test_cmdare.py)
    bad = [p for p, h in manifest.items() if content_sha256(EMBEDDED / p) != h]
    assert not bad, bad
    for lic in ("gce-preemptible/LICENSE", "cmdare/LICENSE"):
        text = (EMBEDDED / lic).read_text()
        assert "Apache License" in text and "Version 2.0" in text
    assert "MIT License" in (EMBEDDED / "node-traces" / "LICENSE-bamboo").read_text()
    readme = (EMBEDDED / "README.md").read_text()
    for source in (
        "cake-lab/transient-deep-learning",
        "cake-lab/CM-DARE",
        "uclasystem/bamboo",
        "prateek-s/spot-price-model",
        "2015-04-01 00:00:00",
    ):
        assert source in readme, source


def test_manifest_check_catches_a_changed_file(tmp_path):
    """The hash comparison above fails on a one-digit change (the check can fail)."""
    manifest = read_manifest(EMBEDDED / "README.md")
    p = tmp_path / "lifetime.csv"
    p.write_bytes((EMBEDDED / "gce-preemptible" / "lifetime.csv").read_bytes().replace(b"23:46", b"23:47", 1))
    assert content_sha256(p) != manifest["gce-preemptible/lifetime.csv"]


def test_embedded_agrees_with_the_shared_readme(shared_data):
    ours = read_manifest(EMBEDDED / "README.md")
    theirs = {
        k.removeprefix("transient/"): v for k, v in read_manifest(shared_data("transient") / "README.md").items()
    }
    assert theirs, "no manifest rows parsed from the shared README"
    shared_too = [p for p in ours if p in theirs]
    assert len(shared_too) == 3 + 9, (
        shared_too
    )  # lifetime.csv, the two node traces; CM-DARE: supertable, 5 checkpoint files, 3 vm_data.csv
    for path in shared_too:
        assert ours[path].startswith(theirs[path]), path


def test_spot_extract_is_the_full_file_cut_to_the_window(shared_data):
    """Each extract is whole lines of the full file (the header, the change in effect at the window's
    start, every change before its end), and loading the full file with the window gives the same record."""
    folder = shared_data("transient/aws-spot-2015")
    for (zone, itype), rows in EXTRACT_ROWS.items():
        name = f"{zone}-Linux-{itype}.csv"
        full = (folder / name).read_bytes().split(b"\n")
        ext = gzip.decompress((EMBEDDED / "aws-spot-2015" / (name + ".gz")).read_bytes()).split(b"\n")
        assert ext[0] == full[0] and ext[-1] == b"" and len(ext) - 2 == rows
        k = full.index(ext[1])
        assert full[k : k + rows] == ext[1:-1], name
        assert full[k][:19] < b"2015-04-01 00:00:00" <= full[k + 1][:19], name
        assert ext[-2][:19] < b"2015-05-01 00:00:00" <= full[k + rows][:19], name
        emb = load_spot_prices(itype, zone)
        cut = load_spot_prices(itype, zone, folder, window=tr.SPOT_EXTRACT_WINDOW)
        np.testing.assert_array_equal(emb.time, cut.time)
        np.testing.assert_array_equal(emb.price, cut.price)
        assert (emb.start, emb.end, emb.on_demand) == (cut.start, cut.end, cut.on_demand)
        np.testing.assert_array_equal(
            cut.line - cut.line[0], np.arange(rows)
        )  # consecutive lines of the file


# -- records on the embedded data -------------------------------------------------------------


def test_gce_lifetimes_counts_and_ranges():
    g = load_gce_lifetimes()
    assert len(g) == 564 and g.source.endswith("lifetime.csv")
    g19 = g.select(campaign="2019-02")
    assert {gpu: len(g19.select(gpu=gpu)) for gpu in tr.GPU_TYPES} == {"K80": 64, "P100": 40, "V100": 48}
    assert g19.groups() == [
        ("K80", "europe-west1"),
        ("K80", "us-central1"),
        ("K80", "us-east1"),
        ("K80", "us-west1"),
        ("P100", "europe-west1"),
        ("P100", "us-central1"),
        ("P100", "us-east1"),
        ("P100", "us-west1"),
        ("V100", "asia-east1"),
        ("V100", "europe-west4"),
        ("V100", "us-central1"),
    ]
    # preempted before the 24 h limit, per GPU (2019): 33 of 152
    assert {gpu: int(g19.select(gpu=gpu).preempted.sum()) for gpu in tr.GPU_TYPES} == {
        "K80": 20,
        "P100": 8,
        "V100": 5,
    }
    assert int(g19.select(gpu="K80", region="us-central1").preempted.sum()) == 14
    # the recorded lifetimes: minutes, 0 to 24.72 h; the 24 h limit shows as a gap below 24 h
    assert g19.lifetime_s.min() == 0.0 and g19.lifetime_s.max() == pytest.approx(24.72 * H, abs=60)
    assert np.all(g19.lifetime_s % 60 == 0)
    assert not np.any((g19.lifetime_s > 23.66 * H) & (g19.lifetime_s < 24 * H))
    assert g.capped_lifetime_s.max() == tr.GCE_MAX_LIFETIME_S
    assert int(g19.stressed.sum()) == 77  # about half; the others are named '...less'
    # the 2018 campaign: CPU-only test VMs in us-east1-b and K80 gpu VMs in two zones, all preempted early
    g18 = g.select(campaign="2018")
    assert len(g18) == 412 and set(g18.gpu.tolist()) == {"none", "K80"}
    assert set(g18.select(gpu="K80").zone.tolist()) == {"us-central1-a", "us-west1-b"}
    assert set(g18.select(gpu="none").zone.tolist()) == {"us-east1-b"}
    assert np.all(g18.preempted) and np.all(g18.lifetime_s >= 0)
    assert str(g18.start[0]) == "2018-05-08T09:49:51"
    # a spreadsheet serial time: 14-May test4less, 1046389:24:27 -> 1046391:54:31
    k = int(
        np.flatnonzero(
            (g18.vm == "test4less") & (g18.start.astype("datetime64[D]") == np.datetime64("2018-05-14"))
        )[0]
    )
    assert str(g18.start[k]) == "2018-05-14T13:24:27" and g18.lifetime_s[k] == 2 * H + 30 * 60 + 4
    # a clock time past midnight is the next day: 8-May test0night 21:37:18 -> 09:12:26
    k = int(np.flatnonzero(g18.vm == "test0night")[0])
    assert g18.lifetime_s[k] == (24 - 21) * H - 37 * 60 - 18 + 9 * H + 12 * 60 + 26


def test_gce_select_and_read_only():
    g = load_gce_lifetimes()
    assert not g.lifetime_s.flags.writeable and not g.vm.flags.writeable
    with pytest.raises(ValueError):
        g.lifetime_s[0] = 1.0
    v = g.select(gpu="V100", region=["us-central1", "asia-east1"], stressed=False)
    assert len(v) == 14 and set(v.region.tolist()) == {"us-central1", "asia-east1"} and not v.stressed.any()
    with pytest.raises(ValueError, match="gpu must be among"):
        g.select(gpu="A100")
    with pytest.raises(ValueError, match="region must be among"):
        g.select(region="mars-1")


def test_spot_markets_counts_and_ranges():
    market = load_spot_market()
    assert set(market) == set(EXTRACT_ROWS)
    for (zone, itype), s in market.items():
        assert (s.zone, s.instance_type) == (zone, itype) and len(s) == EXTRACT_ROWS[zone, itype]
        assert (s.start, s.end) == tr.SPOT_EXTRACT_WINDOW and s.time[0] < s.start < s.time[1]
        assert np.all(np.diff(s.time) > np.timedelta64(0, "s")) and s.time[-1] < s.end
        assert s.duration_s == 30 * 86400 and s.on_demand == tr.ON_DEMAND_PRICES_2015[itype]
        assert 0.008 <= s.price.min() and s.price.max() <= 10.5
    # hand-checked from the files: the c3.xlarge range and the price in effect at the window's start
    c3 = market["us-east-1a", "c3.xlarge"]
    assert (c3.price.min(), c3.price.max()) == (0.0321, 1.5)
    assert (
        c3.price_at(0.0) == c3.price[0] and c3.price_at(np.datetime64("2015-04-30T23:59:59")) == c3.price[-1]
    )
    with pytest.raises(ValueError, match="before the first price change"):
        c3.price_at(-86400.0)
    assert market["us-east-1e", "m3.medium"].price.max() == 0.0085
    # time-weighted April means: below on-demand except m3.medium in 1a/1b and c3.xlarge/d2.8xlarge in 1a
    means = {k: s.mean_price() for k, s in market.items()}
    above = sorted(k for k, s in market.items() if means[k] > s.on_demand)
    assert above == [
        ("us-east-1a", "c3.xlarge"),
        ("us-east-1a", "m3.medium"),
        ("us-east-1b", "m3.medium"),
        ("us-east-1e", "r3.large"),
    ]
    assert means["us-east-1b", "c3.xlarge"] == pytest.approx(0.0325, abs=1e-4)


def test_spot_loader_arguments():
    with pytest.raises(ValueError, match="instance_type must be one of"):
        load_spot_prices("p3.2xlarge", "us-east-1a")
    with pytest.raises(ValueError, match="zone must be one of"):
        load_spot_prices("c3.xlarge", "eu-west-1a")
    with pytest.raises(ValueError, match="end > start"):
        load_spot_prices("c3.xlarge", "us-east-1a", window=("2015-04-10", "2015-04-10"))
    week = load_spot_prices("r3.large", "us-east-1b", window=("2015-04-08", "2015-04-15"))
    assert week.duration_s == 7 * 86400 and week.time[0] <= week.start and week.time[-1] < week.end


def test_node_traces():
    p3 = load_aws_p3_trace()
    assert len(p3) == 344 and int(p3.added.sum()) == 177 and p3.time_s[-1] == 40920.0
    assert p3.count.max() == 32 and p3.count.min() >= 0 and p3.count[-1] == 10
    names, add, rem = p3.intervals()
    assert len(names) == 177 and np.isinf(rem).sum() == 10 and np.all(rem >= add)
    gcp = load_gcp_v100_trace()
    assert (len(gcp), gcp.rows) == (493, 1477)
    assert (gcp.count.min(), gcp.count.max(), gcp.count[0]) == (30, 80, 80)
    assert np.all(np.diff(gcp.time_s) > 0) and gcp.time_s[-1] == pytest.approx(24.17 * H, abs=60)
    assert str(gcp.time[1]) == "2021-12-10T13:08:45" and gcp.count[1] == 70


def test_startup_times():
    st = load_startup_times()
    assert len(st) == 100 and set(st.kind.tolist()) == {"preemptible", "on_demand"}
    assert len(st.select(kind="preemptible")) == 45
    assert 60 < st.total.min() and st.total.max() < 100  # "less than 100 seconds" (CM-DARE Fig 6)
    pre, od = st.select(kind="preemptible").total.mean(), st.select(kind="on_demand").total.mean()
    assert pre - od == pytest.approx(16.0, abs=1.0)  # CM-DARE: transient 11-21 s slower than on-demand
    assert st.select(kind="preemptible", gpu="P100", region="us-west1").staging.min() > 45


# -- the full files in ../shared --------------------------------------------------------------


def test_shared_files_give_the_same_records(shared_data):
    root = shared_data("transient")
    for load in (load_gce_lifetimes, load_aws_p3_trace, load_gcp_v100_trace):
        a, b = load(), load(root)
        for f in ("lifetime_s", "start", "vm", "time_s", "node", "count", "time"):
            if hasattr(a, f):
                np.testing.assert_array_equal(getattr(a, f), getattr(b, f))
    a, b = load_startup_times(), load_startup_times(root)
    np.testing.assert_array_equal(a.total, b.total)
    full = load_spot_prices("m3.medium", "us-east-1e", root)
    assert len(full) == 1191 and str(full.start) == "2015-03-12T05:59:46" and full.price.max() == 0.012


# -- malformed files -------------------------------------------------------------------------


def _write(tmp_path, name, text: str):
    p = tmp_path / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


def _raises(fn, path, line, match):
    with pytest.raises(DataFormatError, match=match) as e:
        fn(path)
    assert e.value.path == str(path) and e.value.line == line, str(e.value)
    assert str(e.value).startswith(f"{path}, line {line}:")


GOOD_LIFETIMES = "K80,,\nVM name,Start,Terminate\na-us-east1-c-0,2/18/19 23:39,2/19/19 23:44\n"


@pytest.mark.parametrize(
    "text, line, match",
    [
        (GOOD_LIFETIMES + "a-us-east1-c-1,2/18/19 23:39,2/30/19 23:44\n", 4, "Terminate must be a date"),
        (GOOD_LIFETIMES + "a-us-east1-c-1,2/18/19 23:39\n", 4, "expected 3 fields"),
        (
            GOOD_LIFETIMES + "a-us-east1-c-1,2/19/19 23:39,2/18/19 23:44\n",
            4,
            "terminates .* before it starts",
        ),
        (GOOD_LIFETIMES + "mystery-vm,2/18/19 23:39,2/19/19 23:44\n", 4, "does not end in '<zone>-<index>"),
        ("a-us-east1-c-0,2/18/19 23:39,2/19/19 23:44\n", 1, "expected a section line"),
        (GOOD_LIFETIMES + "Previous experiments,,\ntest0,09:49:51,10:28:22\n", 5, "expected a day line"),
        (
            GOOD_LIFETIMES + "Previous experiments,,\n8-May,created,terminated\ntest0,09:49:51,10:61:22\n",
            6,
            "terminated must be a time",
        ),
        (GOOD_LIFETIMES + "Previous experiments,,\n31-Feb,,\n", 5, "is not a day"),
    ],
)
def test_malformed_lifetimes(tmp_path, text, line, match):
    p = _write(tmp_path, "lifetime.csv", text)
    _raises(load_gce_lifetimes, p, line, match)


def test_good_lifetimes_file_loads(tmp_path):
    """The malformed cases above differ from this loadable file in their one bad line."""
    g = load_gce_lifetimes(_write(tmp_path, "lifetime.csv", GOOD_LIFETIMES))
    assert len(g) == 1 and g.zone[0] == "us-east1-c" and g.lifetime_s[0] == 24 * H + 5 * 60


SPOT = "timestamp,spot_price_usd_per_hr\n2015-04-01 00:00:00+00:00,0.1\n2015-04-01 00:10:00+00:00,0.2\n"


@pytest.mark.parametrize(
    "row, match",
    [
        ("2015-04-01 00:20:00+00:00,abc", "spot_price_usd_per_hr must be a number, got 'abc'"),
        ("2015-04-01 00:20:00+00:00,-0.5", "spot_price_usd_per_hr must be >= 0"),
        ("2015-04-01 00:05:00+00:00,0.3", "timestamps must increase"),
        ("2015-04-01 00:20:00+02:00,0.3", r"timestamp must be 'YYYY-MM-DD hh:mm:ss\+00:00'"),
        ("2015-04-31 00:20:00+00:00,0.3", "is not a valid date"),
        ("2015-04-01 00:20:00+00:00", "expected 2 fields"),
    ],
)
def test_malformed_spot_prices(tmp_path, row, match):
    p = _write(tmp_path, "us-east-1a-Linux-c3.xlarge.csv", SPOT + row + "\n")
    _raises(lambda q: load_spot_prices("c3.xlarge", "us-east-1a", q), p, 4, match)
    assert len(load_spot_prices("c3.xlarge", "us-east-1a", _write(tmp_path, "ok.csv", SPOT))) == 2


def test_malformed_spot_header_and_gzip(tmp_path):
    p = _write(tmp_path, "a.csv", SPOT.replace("spot_price_usd_per_hr", "price"))
    _raises(lambda q: load_spot_prices("c3.xlarge", "us-east-1a", q), p, 1, "the header must be")
    gz = tmp_path / "cut.csv.gz"
    gz.write_bytes(gzip.compress(SPOT.encode())[:-12])
    with pytest.raises(DataFormatError, match="truncated") as e:
        load_spot_prices("c3.xlarge", "us-east-1a", gz)
    assert e.value.path == str(gz)


@pytest.mark.parametrize(
    "text, line, match",
    [
        ("0,add,node1\n10,drop,node1\n", 2, "event must be 'add' or 'remove'"),
        ("0,add,node1\n10,remove,node2\n", 2, "'node2' is removed but is not in the cluster"),
        ("0,add,node1\n10,add,node1\n", 2, "added again while in the cluster"),
        ("10,add,node1\n5,add,node2\n", 2, "times must not decrease"),
        ("0,add,node1\n1.5,add,node2\n", 2, "whole number of milliseconds"),
    ],
)
def test_malformed_node_trace(tmp_path, text, line, match):
    _raises(load_aws_p3_trace, _write(tmp_path, "aws-p3-trace.csv", text), line, match)


@pytest.mark.parametrize(
    "text, line, match",
    [
        ("2021-12-10, 13:07:45, 80\n2021-12-10, 13:08:45, x\n", 2, "count must be a whole number"),
        ("2021-12-10, 13:07:45, 80\n2021-12-10, 13:06:45, 70\n", 2, "is not after the previous observation"),
        ("2021-12-10, 25:07:45, 80\n", 1, "date and time must be"),
    ],
)
def test_malformed_availability_trace(tmp_path, text, line, match):
    _raises(load_gcp_v100_trace, _write(tmp_path, "gcp-v100x1-east1c.txt", text), line, match)


def test_malformed_startup_times(tmp_path):
    p = _write(
        tmp_path,
        "st/pre_east/vm_time_measure_k80_pre_east.csv",
        "Provisioning,Staging,Booting\n1.6,38.8,33.8\n1.6,-41.8,35.3\n",
    )
    with pytest.raises(DataFormatError, match="Staging must be >= 0") as e:
        load_startup_times(tmp_path / "st")
    assert e.value.path == str(p) and e.value.line == 3
    p.write_text("Provisioning,Staging,Booting\n1.6,38.8,33.8\n")
    assert len(load_startup_times(tmp_path / "st")) == 1
    with pytest.raises(FileNotFoundError, match="no startup_time folder"):
        load_startup_times(tmp_path / "nowhere")
