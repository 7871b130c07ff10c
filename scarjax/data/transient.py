"""Transient-cloud measurements: how long preemptible/spot machines live, what
spot machines cost, how fast new machines start, as typed read-only NumPy records.

* :func:`load_gce_lifetimes` - Google Compute Engine preemptible VM lifetimes measured by the
  CM-DARE authors (Li et al., ICDCS'20, Sec V-C, Fig 8, Table V): ``lifetime.csv`` of
  ``cake-lab/transient-deep-learning``. The Feb 2019 campaign (``campaign="2019-02"``) holds
  K80, P100 and V100 VMs in six zones, half of them stressed (a name without ``less``), each
  left to run until GCE preempted it or its 24 h limit (:data:`GCE_MAX_LIFETIME_S`) ended it;
  the older May-June 2018 runs (``campaign="2018"``) follow in the same file.
* :func:`load_spot_prices`, :func:`load_spot_market` - AWS EC2 spot-price history, March-August
  2015 (``prateek-s/spot-price-model``): five instance types in three ``us-east-1`` zones, one
  row per price change; :data:`ON_DEMAND_PRICES_2015` holds the published on-demand prices.
* :func:`load_aws_p3_trace` - the node add/remove events of a real AWS p3 spot cluster
  (``uclasystem/bamboo``, ``traces/aws-p3-trace.csv``); :func:`load_gcp_v100_trace` - the number
  of available GCP V100 spot instances over a day (``traces/gcp-v100x1-east1c.txt``).
* :func:`load_startup_times` - CM-DARE's VM start-up times (provisioning, staging, booting;
  paper Sec V-B, Fig 6) for preemptible and on-demand K80/P100 VMs in us-east1 and us-west1.

Without a path every loader reads the embedded copy in ``scarjax/data/transient_data/`` (the
files unchanged, except the spot prices, of which one month is embedded: April 2015, see
:data:`SPOT_EXTRACT_WINDOW`; licences and a sha256 manifest in its ``README.md``), so they work
on a fresh clone; ``path=``/``root=`` read the full files (``../shared/data/transient``), plain
or gzip-compressed. Embedded loads are cached; every returned array is read-only.

A malformed file raises :class:`~scarjax.data.DataFormatError` naming the file, the line and
the problem (a wrong field count, a date that does not parse, a VM that ends before it starts,
a price that is not a number or is negative, times that go backwards, a node removed that was
never added, ...).

Billing and revocation rules the data is used with (cited where they are implemented,
:mod:`scarjax.cluster.market`): AWS spot (TierML, Harlap et al. 2016, Sec 2.3; Proteus
summary): the spot price, not the bid, is charged per instance-hour; a machine the provider
takes back is not charged for its last partial hour; the termination notice comes two minutes
before (:data:`AWS_WARNING_S`). GCE preemptible (TierML Sec 2.3): a fixed price 70% below
on-demand (:data:`GCE_PREEMPTIBLE_DISCOUNT`), a 30-second warning (:data:`GCE_WARNING_S`), at
most 24 hours.
"""

from __future__ import annotations

import datetime as _dt
import functools
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path

import numpy as np

from scarjax.validate import DataFormatError, check_path

from ._parse import Column, freeze, parse_table, read_bytes, text_lines

__all__ = [
    "AWS_WARNING_S",
    "GCE_MAX_LIFETIME_S",
    "GCE_PREEMPTIBLE_DISCOUNT",
    "GCE_WARNING_S",
    "GPU_TYPES",
    "ON_DEMAND_PRICES_2015",
    "SPOT_EXTRACT_WINDOW",
    "SPOT_INSTANCE_TYPES",
    "SPOT_ZONES",
    "AvailabilityTrace",
    "GceLifetimes",
    "NodeTrace",
    "SpotPrices",
    "StartupTimes",
    "embedded_dir",
    "load_aws_p3_trace",
    "load_gce_lifetimes",
    "load_gcp_v100_trace",
    "load_spot_market",
    "load_spot_prices",
    "load_startup_times",
    "read_aws_p3_trace",
    "read_gce_lifetimes",
    "read_gcp_v100_trace",
    "read_spot_prices",
    "read_startup_times",
]

#: GCE ends every preemptible VM after 24 hours at the latest (TierML Sec 2.3; CM-DARE Sec II).
GCE_MAX_LIFETIME_S = 86400.0
#: GCE's preemption warning (TierML Sec 2.3: "a 30-second warning").
GCE_WARNING_S = 30.0
#: AWS's spot termination notice (TierML Sec 2.3, Proteus summary: "a 2-minute advance warning").
AWS_WARNING_S = 120.0
#: GCE preemptible price = (1 - 0.7) x on-demand (TierML Sec 2.3: "70% less than the on-demand price").
GCE_PREEMPTIBLE_DISCOUNT = 0.7
#: The GPU types of the GCE lifetime measurements.
GPU_TYPES = ("K80", "P100", "V100")
#: The spot-price history's zones and instance types (15 series).
SPOT_ZONES = ("us-east-1a", "us-east-1b", "us-east-1e")
SPOT_INSTANCE_TYPES = ("c3.xlarge", "d2.8xlarge", "g2.2xlarge", "m3.medium", "r3.large")
#: Published on-demand prices, USD per hour, us-east-1, Linux, 2015 (as listed in
#: ``../shared/data/transient/README.md`` next to the spot-price history).
ON_DEMAND_PRICES_2015: Mapping[str, float] = {
    "c3.xlarge": 0.210,
    "d2.8xlarge": 5.520,
    "g2.2xlarge": 0.650,
    "m3.medium": 0.067,
    "r3.large": 0.175,
}
#: The embedded spot-price extract covers ``[2015-04-01 00:00, 2015-05-01 00:00)`` UTC: each
#: embedded file holds the change in effect at the window's start and every change before its end.
SPOT_EXTRACT_WINDOW = (np.datetime64("2015-04-01T00:00:00", "s"), np.datetime64("2015-05-01T00:00:00", "s"))

_EMBEDDED = Path(__file__).resolve().with_name("transient_data")
_MONTHS = {
    m: i
    for i, m in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1
    )
}
# The spreadsheet the 2018 runs went through wrote some times as hours since its epoch (serial
# dates; "1046389:24:27"), reading the day headers ("14-May") as 2019 dates; the runs were in
# 2018 (the authors' README), so those serial dates are moved back to 2018.
_SHEETS_EPOCH = _dt.datetime(1899, 12, 30)
_YEAR_2018 = 2018
_ZONE_IN_NAME = re.compile(r"([a-z]+-[a-z]+\d+-[a-z])-\d+(less)?")
_ZONE = re.compile(r"[a-z]+-[a-z]+\d+-[a-z]")
_DAY_BLOCK = re.compile(r"(\d{1,2})-([A-Z][a-z]{2})")
_NAME_2018 = re.compile(r"(test|gpu)\d+(less)?(night)?")
_CLOCK = re.compile(r"(\d+):(\d{2}):(\d{2})")
_SPOT_NAME = re.compile(r"(us-east-1[a-z])-Linux-(.+?)\.csv(\.gz)?")
_SPOT_STAMP = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(\+00:00)?")
_STARTUP_DIR = re.compile(r"(on_demand|pre)_(east|west)")
_STARTUP_FILE = re.compile(r"vm_time_measure_(k80|p100)(_[a-z_]+)?\.csv(\.gz)?")


def embedded_dir() -> Path:
    """The folder of the embedded copy (``README.md`` there: provenance, licences, sha256 manifest)."""
    return _EMBEDDED


def _subset(obj, mask: np.ndarray):
    """``obj`` with every per-row array field indexed by ``mask``."""
    n = len(obj)
    return replace(
        obj,
        **{
            f.name: getattr(obj, f.name)[mask]
            for f in fields(obj)
            if isinstance(getattr(obj, f.name), np.ndarray) and getattr(obj, f.name).shape[:1] == (n,)
        },
    )


def _match(values: np.ndarray, want, name: str, known) -> np.ndarray:
    """Mask of ``values == want`` (``want`` one value or a collection; ``None``: all)."""
    if want is None:
        return np.ones(values.shape, bool)
    wants = [want] if isinstance(want, (str, bool, np.bool_)) else list(want)
    unknown = [w for w in wants if w not in known]
    if unknown:
        raise ValueError(f"{name} must be among {sorted(known, key=str)}, got {unknown}")
    return np.isin(values, wants)


# ---------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class GceLifetimes:
    """GCE preemptible VM lifetimes, one entry per VM (file order).

    Attributes:
      vm: ``str[N]`` VM names as written (``a-v100-us-central1-a-3less``, ``test4night``).
      gpu: ``str[N]`` ``"K80"``, ``"P100"``, ``"V100"``, or ``"none"`` for the 2018 campaign's
        ``test*`` VMs, which the authors' README describes as n1-standard-4 VMs (its ``gpu*``
        VMs carry one K80; ``../shared``'s summary calls the whole 2018 campaign K80).
      zone: ``str[N]`` e.g. ``"us-west1-b"`` (from the name in 2019; in 2018 from the zone line
        above the rows, else ``"us-east1-b"``); region: ``str[N]`` the zone without its
        letter (``"us-west1"``).
      stressed: ``bool[N]`` the VM ran a stress load (its name has no ``less``).
      campaign: ``str[N]`` ``"2019-02"`` (the per-GPU, per-zone sections) or ``"2018"``.
      start, end: ``datetime64[s][N]`` creation and termination as recorded (2019: to the
        minute).
      lifetime_s: ``float64[N]`` ``end - start`` in seconds, as recorded: VMs that ran into
        the 24 h limit are recorded up to 45 minutes past it (the recording lag).
      line: ``int64[N]`` the row's line in the file.
      source: the file read.
    """

    vm: np.ndarray
    gpu: np.ndarray
    zone: np.ndarray
    region: np.ndarray
    stressed: np.ndarray
    campaign: np.ndarray
    start: np.ndarray
    end: np.ndarray
    lifetime_s: np.ndarray
    line: np.ndarray
    source: str

    def __post_init__(self):
        freeze(self)

    def __len__(self) -> int:
        return int(self.vm.shape[0])

    @property
    def reached_cap(self) -> np.ndarray:
        """``bool[N]``: the VM lived to GCE's 24-hour limit (recorded lifetime >= 24 h; the
        2019 data has a gap between 23.65 h and 24.05 h)."""
        return self.lifetime_s >= GCE_MAX_LIFETIME_S

    @property
    def preempted(self) -> np.ndarray:
        """``bool[N]``: preempted before the 24-hour limit (``~reached_cap``)."""
        return ~self.reached_cap

    @property
    def capped_lifetime_s(self) -> np.ndarray:
        """``float64[N]``: lifetimes cut at 24 h (what a process sampling them returns)."""
        return np.minimum(self.lifetime_s, GCE_MAX_LIFETIME_S)

    def select(self, gpu=None, region=None, zone=None, campaign=None, stressed=None) -> GceLifetimes:
        """The VMs matching every given filter (each a value or a collection of values)."""
        mask = (
            _match(self.gpu, gpu, "gpu", set(self.gpu.tolist()) | set(GPU_TYPES))
            & _match(self.region, region, "region", set(self.region.tolist()))
            & _match(self.zone, zone, "zone", set(self.zone.tolist()))
            & _match(self.campaign, campaign, "campaign", {"2019-02", "2018"})
        )
        if stressed is not None:
            mask &= self.stressed == bool(stressed)
        return _subset(self, mask)

    def groups(self) -> list[tuple[str, str]]:
        """The ``(gpu, region)`` pairs present, sorted."""
        return sorted(set(zip(self.gpu.tolist(), self.region.tolist())))


@dataclass(frozen=True, eq=False)
class SpotPrices:
    """One spot market's price history: a step function, ``price[i]`` from ``time[i]`` on.

    Attributes:
      instance_type, zone: the market (``"c3.xlarge"``, ``"us-east-1a"``).
      time: ``datetime64[s][T]`` the price changes, increasing (UTC).
      price: ``float64[T]`` USD per hour from that time on.
      on_demand: the published on-demand price (USD/h, :data:`ON_DEMAND_PRICES_2015`), or NaN
        for a type not listed there.
      start, end: the period the series describes (``datetime64[s]``): the first change (or the
        window's start) and the last change (or the window's end). ``time[0] <= start``.
      line: ``int64[T]`` each change's line in the file read.
      source: the file read.
    """

    instance_type: str
    zone: str
    time: np.ndarray
    price: np.ndarray
    on_demand: float
    start: np.datetime64
    end: np.datetime64
    line: np.ndarray
    source: str

    def __post_init__(self):
        freeze(self)

    def __len__(self) -> int:
        return int(self.price.shape[0])

    @property
    def time_s(self) -> np.ndarray:
        """``float64[T]``: each change's time in seconds since :attr:`start` (the first may be
        negative: the change in effect at the start)."""
        return (self.time - self.start).astype("timedelta64[s]").astype(np.float64)

    @property
    def duration_s(self) -> float:
        """Seconds from :attr:`start` to :attr:`end`."""
        return float((self.end - self.start).astype("timedelta64[s]").astype(np.int64))

    def price_at(self, t) -> np.ndarray:
        """The price in effect at ``t`` (``datetime64`` or seconds since :attr:`start`)."""
        t = np.asarray(t)
        ts = (
            (t - self.start).astype("timedelta64[s]").astype(np.float64)
            if t.dtype.kind == "M"
            else t.astype(np.float64)
        )
        i = np.searchsorted(self.time_s, ts, side="right") - 1
        if np.any(i < 0):
            raise ValueError(f"t: a time before the first price change ({self.time[0]}) has no price")
        return self.price[i]

    def mean_price(self) -> float:
        """The time-weighted mean price over ``[start, end]``."""
        ts = np.clip(self.time_s, 0.0, self.duration_s)
        widths = np.diff(np.append(ts, self.duration_s))
        return (
            float((self.price * widths).sum() / widths.sum()) if widths.sum() > 0 else float(self.price[-1])
        )


@dataclass(frozen=True, eq=False)
class NodeTrace:
    """Node add/remove events of a spot cluster (the AWS p3 trace), in file order.

    Attributes:
      time_s: ``float64[E]`` seconds since the trace's start (non-decreasing).
      added: ``bool[E]`` ``True`` for ``add``, ``False`` for ``remove``.
      node: ``str[E]`` node names.
      line: ``int64[E]``; source: the file read.
    """

    time_s: np.ndarray
    added: np.ndarray
    node: np.ndarray
    line: np.ndarray
    source: str

    def __post_init__(self):
        freeze(self)

    def __len__(self) -> int:
        return int(self.time_s.shape[0])

    @property
    def count(self) -> np.ndarray:
        """``int64[E]``: nodes in the cluster after each event."""
        return np.cumsum(np.where(self.added, 1, -1)).astype(np.int64)

    def intervals(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(node str[K], add_s float64[K], remove_s float64[K])``: one interval per stay of a
        node in the cluster (a node added again after its removal gets a second interval),
        ordered by add time; ``remove_s = inf`` for nodes still there at the end."""
        names, adds, removes, open_at = [], [], [], {}
        for t, a, n in zip(self.time_s.tolist(), self.added.tolist(), self.node.tolist()):
            if a:
                open_at[n] = len(names)
                names.append(n)
                adds.append(t)
                removes.append(np.inf)
            else:
                removes[open_at.pop(n)] = t
        return np.array(names, dtype=str), np.array(adds), np.array(removes)


@dataclass(frozen=True, eq=False)
class AvailabilityTrace:
    """How many spot instances were available over time (the GCP V100 trace).

    The file logs each observation three times, at ``t``, ``t + 60 s`` and ``t + 120 s`` with
    the same count (the next observation usually starts before the repeats end); the record
    holds each observation once.

    Attributes:
      time: ``datetime64[s][K]`` observation times, increasing (the time zone is not stated).
      count: ``int64[K]`` available instances from then on.
      line: ``int64[K]`` the observation's first line; rows: lines read; source: the file.
    """

    time: np.ndarray
    count: np.ndarray
    line: np.ndarray
    rows: int
    source: str

    def __post_init__(self):
        freeze(self)

    def __len__(self) -> int:
        return int(self.count.shape[0])

    @property
    def time_s(self) -> np.ndarray:
        """``float64[K]`` seconds since the first observation."""
        return (self.time - self.time[0]).astype("timedelta64[s]").astype(np.float64)


@dataclass(frozen=True, eq=False)
class StartupTimes:
    """CM-DARE's measured VM start-up times (Fig 6), one entry per VM requested.

    Attributes:
      kind: ``str[N]`` ``"preemptible"`` or ``"on_demand"``.
      gpu: ``str[N]`` ``"K80"`` or ``"P100"``; region: ``str[N]`` ``"us-east1"``/``"us-west1"``.
      provisioning, staging, booting: ``float64[N]`` seconds in each stage.
      line: ``int64[N]``; file: ``str[N]`` the file of each row; source: the folder read.
    """

    kind: np.ndarray
    gpu: np.ndarray
    region: np.ndarray
    provisioning: np.ndarray
    staging: np.ndarray
    booting: np.ndarray
    line: np.ndarray
    file: np.ndarray
    source: str

    def __post_init__(self):
        freeze(self)

    def __len__(self) -> int:
        return int(self.kind.shape[0])

    @property
    def total(self) -> np.ndarray:
        """``float64[N]``: provisioning + staging + booting, seconds from request to running."""
        return self.provisioning + self.staging + self.booting

    def select(self, kind=None, gpu=None, region=None) -> StartupTimes:
        """The rows matching every given filter (each a value or a collection of values)."""
        mask = (
            _match(self.kind, kind, "kind", {"preemptible", "on_demand"})
            & _match(self.gpu, gpu, "gpu", {"K80", "P100"})
            & _match(self.region, region, "region", {"us-east1", "us-west1"})
        )
        return _subset(self, mask)


# ---------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------


def _lines(path: Path):
    return text_lines(read_bytes(path), path)


def _fields(line: str, n: int, what: str, source, lineno, sep: str = ",") -> list[str]:
    parts = [p.strip() for p in line.split(sep)]
    if len(parts) != n:
        hint = "a field is missing or the line is cut off" if len(parts) < n else "extra fields"
        raise DataFormatError(source, f"expected {n} fields ({what}), got {len(parts)}: {hint}", lineno)
    return parts


def _parse_2019_stamp(s: str, name: str, source, lineno) -> _dt.datetime:
    try:
        return _dt.datetime.strptime(s, "%m/%d/%y %H:%M")
    except ValueError:
        raise DataFormatError(
            source, f"{name} must be a date and time 'M/D/YY H:MM', got {s!r}", lineno
        ) from None


def _parse_2018_time(s: str, day: _dt.datetime, name: str, source, lineno) -> tuple[_dt.datetime, bool]:
    """``(datetime, is_serial)``: ``HH:MM:SS`` on ``day``, or a spreadsheet serial time
    ``HHHHHHH:MM:SS`` (hours since 1899-12-30, read as 2019 and moved to 2018)."""
    m = _CLOCK.fullmatch(s)
    if not m:
        raise DataFormatError(source, f"{name} must be a time 'HH:MM:SS', got {s!r}", lineno)
    h, mi, se = (int(g) for g in m.groups())
    if mi > 59 or se > 59:
        raise DataFormatError(source, f"{name} must be a time 'HH:MM:SS', got {s!r}", lineno)
    if h < 24:
        return day.replace(hour=h, minute=mi, second=se), False
    t = _SHEETS_EPOCH + _dt.timedelta(hours=h, minutes=mi, seconds=se)
    if (t.month, t.day) != (day.month, day.day) and name == "created":
        raise DataFormatError(
            source,
            f"created {s!r} is a spreadsheet date ({t:%Y-%m-%d}) on another day than the block's {day:%d-%b}",
            lineno,
        )
    try:
        return t.replace(year=_YEAR_2018), True
    except ValueError:  # 29 Feb
        raise DataFormatError(source, f"{name} {s!r} is not a date in {_YEAR_2018}", lineno) from None


def read_gce_lifetimes(path: Path) -> GceLifetimes:
    """Parse a ``lifetime.csv`` of ``cake-lab/transient-deep-learning`` (see :func:`load_gce_lifetimes`)."""
    lines, nos = _lines(path)
    rows: list[tuple] = []
    gpu = campaign = None
    day = None
    zone_2018 = "us-east1-b"
    for ln, no in zip(lines, nos.tolist()):
        f = _fields(ln, 3, "VM name,Start,Terminate", path, no)
        if f[0] in GPU_TYPES and f[1:] == ["", ""]:
            gpu, campaign = f[0], "2019-02"  # the header line below it is optional (V100 has none)
            continue
        if f[0] == "Previous experiments" and f[1:] == ["", ""]:
            gpu, campaign, day = None, "2018", None
            continue
        if f == ["VM name", "Start", "Terminate"]:
            if campaign != "2019-02":
                raise DataFormatError(
                    path, "a 'VM name,Start,Terminate' header outside a K80/P100/V100 section", no
                )
            continue
        if campaign is None:
            raise DataFormatError(
                path, f"expected a section line 'K80,,', 'P100,,' or 'V100,,', got {ln.strip()!r}", no
            )
        if campaign == "2019-02":
            name, s, e = f
            m = _ZONE_IN_NAME.search(name)
            if not m or not name.endswith(m.group(0)):
                raise DataFormatError(
                    path,
                    f"VM name {name!r} does not end in '<zone>-<index>[less]' (e.g. 'a-us-east1-c-3less')",
                    no,
                )
            start = _parse_2019_stamp(s, "Start", path, no)
            end = _parse_2019_stamp(e, "Terminate", path, no)
            if end < start:
                raise DataFormatError(path, f"VM {name!r} terminates ({e}) before it starts ({s})", no)
            rows.append((name, gpu, m.group(1), not m.group(2), campaign, start, end, no))
            continue
        # the 2018 campaign: day blocks, optional zone lines, VM rows
        m = _DAY_BLOCK.fullmatch(f[0])
        if m and f[1:] in (["", ""], ["created", "terminated"]):
            month = _MONTHS.get(m.group(2))
            try:
                day = _dt.datetime(_YEAR_2018, month or 0, int(m.group(1)))
            except (ValueError, TypeError):
                raise DataFormatError(
                    path, f"day line {f[0]!r} is not a day 'D-Mon' (e.g. '8-May')", no
                ) from None
            zone_2018 = "us-east1-b"
            continue
        if _ZONE.fullmatch(f[0]) and f[1:] == ["", ""]:
            zone_2018 = f[0]
            continue
        if day is None:
            raise DataFormatError(
                path, f"expected a day line 'D-Mon,,' (e.g. '8-May,,'), got {ln.strip()!r}", no
            )
        name, s, e = f
        nm = _NAME_2018.fullmatch(name)
        if not nm:
            raise DataFormatError(path, f"VM name {name!r} is not 'test<N>[less][night]' or 'gpu<N>'", no)
        start, _ = _parse_2018_time(s, day, "created", path, no)
        end, e_serial = _parse_2018_time(e, day, "terminated", path, no)
        if end < start and not e_serial:
            end += _dt.timedelta(days=1)  # a clock time before the start is on the next day
        if end < start:
            raise DataFormatError(path, f"VM {name!r} terminates ({e}) before it is created ({s})", no)
        kind = "K80" if nm.group(1) == "gpu" else "none"
        rows.append((name, kind, zone_2018, not nm.group(2), "2018", start, end, no))
    if not rows:
        raise DataFormatError(path, "no VM rows")
    name, gpus, zones, stressed, camps, starts, ends, line = zip(*rows)
    start = np.array(starts, dtype="datetime64[s]")
    end = np.array(ends, dtype="datetime64[s]")
    zone = np.array(zones, dtype=str)
    return GceLifetimes(
        vm=np.array(name, dtype=str),
        gpu=np.array(gpus, dtype=str),
        zone=zone,
        region=np.array([z.rsplit("-", 1)[0] for z in zones], dtype=str),
        stressed=np.array(stressed, dtype=bool),
        campaign=np.array(camps, dtype=str),
        start=start,
        end=end,
        lifetime_s=(end - start).astype(np.int64).astype(np.float64),
        line=np.array(line, dtype=np.int64),
        source=str(path),
    )


def _spot_stamps(stamps: list[str], nos: np.ndarray, source) -> np.ndarray:
    bad = [k for k, s in enumerate(stamps) if not _SPOT_STAMP.fullmatch(s)]
    if bad:
        k = bad[0]
        raise DataFormatError(
            source, f"timestamp must be 'YYYY-MM-DD hh:mm:ss+00:00' (UTC), got {stamps[k]!r}", nos[k]
        )
    clean = [s[:19] for s in stamps]
    try:
        return np.array(clean, dtype="datetime64[s]")
    except ValueError:
        for k, s in enumerate(clean):
            try:
                np.datetime64(s, "s")
            except ValueError:
                raise DataFormatError(
                    source, f"timestamp {stamps[k]!r} is not a valid date and time", nos[k]
                ) from None
        raise


def read_spot_prices(
    path: Path, instance_type: str | None = None, zone: str | None = None, window: tuple | None = None
) -> SpotPrices:
    """Parse one spot-price file (``timestamp,spot_price_usd_per_hr``; see :func:`load_spot_prices`).

    ``instance_type``/``zone`` default to the file name's (``us-east-1a-Linux-c3.xlarge.csv``);
    ``window=(start, end)`` (``datetime64`` or ISO strings) cuts the series to the change in
    effect at ``start`` and the changes before ``end``.
    """
    m = _SPOT_NAME.fullmatch(Path(path).name)
    zone = zone or (m.group(1) if m else "unknown")
    instance_type = instance_type or (m.group(2) if m else "unknown")
    lines, nos = _lines(path)
    header = [h.strip() for h in lines[0].split(",")]
    if header != ["timestamp", "spot_price_usd_per_hr"]:
        raise DataFormatError(
            path, f"the header must be 'timestamp,spot_price_usd_per_hr', got {lines[0].strip()!r}", nos[0]
        )
    body, bnos = lines[1:], nos[1:]
    if not body:
        raise DataFormatError(path, "no price rows after the header")
    split = [ln.split(",", 1) for ln in body]
    short = [k for k, p in enumerate(split) if len(p) != 2]
    if short:
        raise DataFormatError(
            path,
            "expected 2 fields (timestamp,spot_price_usd_per_hr), got 1: a field is missing "
            "or the line is cut off",
            bnos[short[0]],
        )
    stamps = _spot_stamps([p[0].strip() for p in split], bnos, path)
    price = parse_table([p[1] for p in split], bnos, [Column("spot_price_usd_per_hr", low=0.0)], path)[:, 0]
    back = np.flatnonzero(np.diff(stamps) <= np.timedelta64(0, "s"))
    if back.size:
        k = int(back[0]) + 1
        raise DataFormatError(
            path, f"timestamps must increase, got {stamps[k]} after {stamps[k - 1]}", bnos[k]
        )
    start, end = stamps[0], stamps[-1]
    if window is not None:
        try:
            w0, w1 = (np.datetime64(w, "s") for w in window)
        except (TypeError, ValueError) as e:
            raise TypeError(f"window must be (start, end) as datetime64 or ISO date strings, got {window!r}") from e
        if not w1 > w0:
            raise ValueError(f"window must be (start, end) with end > start, got {window!r}")
        if w0 < stamps[0]:
            raise ValueError(f"window: the series starts at {stamps[0]}, after the window's start {w0}")
        first = int(np.searchsorted(stamps, w0, side="right")) - 1
        last = int(np.searchsorted(stamps, w1, side="left"))
        stamps, price, bnos = stamps[first:last], price[first:last], bnos[first:last]
        start, end = w0, w1
    return SpotPrices(
        instance_type=instance_type,
        zone=zone,
        time=stamps,
        price=price.astype(np.float64),
        on_demand=float(ON_DEMAND_PRICES_2015.get(instance_type, np.nan)),
        start=start,
        end=end,
        line=np.asarray(bnos, dtype=np.int64),
        source=str(path),
    )


def read_aws_p3_trace(path: Path) -> NodeTrace:
    """Parse a node add/remove trace (``ms,add|remove,node``; see :func:`load_aws_p3_trace`)."""
    lines, nos = _lines(path)
    ms, ops, names = [], [], []
    alive: dict[str, int] = {}
    for ln, no in zip(lines, nos.tolist()):
        t, op, node = _fields(ln, 3, "ms,add|remove,node", path, no)
        if not re.fullmatch(r"\d+", t):
            raise DataFormatError(path, f"time must be a whole number of milliseconds >= 0, got {t!r}", no)
        if op not in ("add", "remove"):
            raise DataFormatError(path, f"event must be 'add' or 'remove', got {op!r}", no)
        if not node:
            raise DataFormatError(path, "node is empty", no)
        if ms and int(t) < ms[-1]:
            raise DataFormatError(path, f"times must not decrease, got {t} ms after {ms[-1]} ms", no)
        if op == "add" and node in alive:
            raise DataFormatError(
                path, f"node {node!r} is added again while in the cluster (added on line {alive[node]})", no
            )
        if op == "remove" and node not in alive:
            raise DataFormatError(path, f"node {node!r} is removed but is not in the cluster", no)
        if op == "add":
            alive[node] = no
        else:
            alive.pop(node)
        ms.append(int(t))
        ops.append(op == "add")
        names.append(node)
    return NodeTrace(
        time_s=np.array(ms, dtype=np.float64) / 1000.0,
        added=np.array(ops, dtype=bool),
        node=np.array(names, dtype=str),
        line=nos.astype(np.int64),
        source=str(path),
    )


def read_gcp_v100_trace(path: Path) -> AvailabilityTrace:
    """Parse an availability trace (``date, time, count``; see :func:`load_gcp_v100_trace`)."""
    lines, nos = _lines(path)
    times, counts, first_line = [], [], []
    cur_t = cur_c = None
    repeats = 0
    for ln, no in zip(lines, nos.tolist()):
        d, t, c = _fields(ln, 3, "date, time, count", path, no)
        try:
            ts = np.datetime64(f"{d}T{t}", "s")
        except ValueError:
            ts = None
        if (
            ts is None
            or not re.fullmatch(r"\d{4}-\d{2}-\d{2}", d)
            or not re.fullmatch(r"\d{2}:\d{2}:\d{2}", t)
        ):
            raise DataFormatError(path, f"date and time must be 'YYYY-MM-DD, hh:mm:ss', got {d!r}, {t!r}", no)
        if not re.fullmatch(r"\d+", c):
            raise DataFormatError(path, f"count must be a whole number >= 0, got {c!r}", no)
        c = int(c)
        if (
            cur_t is not None
            and repeats < 2
            and c == cur_c
            and ts == cur_t + np.timedelta64(60 * (repeats + 1), "s")
        ):
            repeats += 1  # the same observation logged again a minute later
            continue
        if cur_t is not None and ts <= cur_t:
            raise DataFormatError(
                path,
                f"time {d}, {t} is not after the previous observation ({cur_t}) and is not "
                "its repeat a minute later with the same count",
                no,
            )
        cur_t, cur_c, repeats = ts, c, 0
        times.append(ts)
        counts.append(c)
        first_line.append(no)
    return AvailabilityTrace(
        time=np.array(times, dtype="datetime64[s]"),
        count=np.array(counts, dtype=np.int64),
        line=np.array(first_line, dtype=np.int64),
        rows=len(lines),
        source=str(path),
    )


def read_startup_times(folder: Path) -> StartupTimes:
    """Parse CM-DARE's ``startup_time`` folder (see :func:`load_startup_times`)."""
    folder = Path(folder)
    cols = [Column("Provisioning", low=0.0), Column("Staging", low=0.0), Column("Booting", low=0.0)]
    parts = []
    for sub in sorted(p for p in folder.iterdir() if p.is_dir()):
        dm = _STARTUP_DIR.fullmatch(sub.name)
        if not dm:
            continue
        for f in sorted(sub.iterdir()):
            fm = _STARTUP_FILE.fullmatch(f.name)
            if not fm or not f.is_file():
                continue
            lines, nos = _lines(f)
            header = [h.strip() for h in lines[0].split(",")]
            if header != ["Provisioning", "Staging", "Booting"]:
                raise DataFormatError(
                    f, f"the header must be 'Provisioning,Staging,Booting', got {lines[0].strip()!r}", nos[0]
                )
            if len(lines) < 2:
                raise DataFormatError(f, "no rows after the header")
            table = parse_table(lines[1:], nos[1:], cols, f)
            n = table.shape[0]
            kind = "on_demand" if dm.group(1) == "on_demand" else "preemptible"
            parts.append(
                (
                    np.full(n, kind),
                    np.full(n, fm.group(1).upper()),
                    np.full(n, f"us-{dm.group(2)}1"),
                    table,
                    nos[1:],
                    np.full(n, str(f.relative_to(folder))),
                )
            )
    if not parts:
        raise FileNotFoundError(f"{folder}: no {{on_demand,pre}}_{{east,west}}/vm_time_measure_*.csv files")
    kind, gpu, region, table, line, file = (np.concatenate(x) for x in zip(*parts))
    return StartupTimes(
        kind=kind.astype(str),
        gpu=gpu.astype(str),
        region=region.astype(str),
        provisioning=table[:, 0].astype(np.float64),
        staging=table[:, 1].astype(np.float64),
        booting=table[:, 2].astype(np.float64),
        line=line.astype(np.int64),
        file=file.astype(str),
        source=str(folder),
    )


# ---------------------------------------------------------------------------
# Public loaders
# ---------------------------------------------------------------------------


def _locate(path, names: tuple[str, ...], what: str) -> Path:
    """``path`` itself if it is a file, else the first of ``path/<name>`` (``.gz`` too) that exists."""
    p = check_path("path", path)
    if p.is_file():
        return p
    if p.is_dir():
        for name in names:
            for cand in (p / name, p / (name + ".gz")):
                if cand.is_file():
                    return cand
        raise FileNotFoundError(f"path: no {what} in {p} (looked for {', '.join(names)})")
    raise FileNotFoundError(f"path: {p} does not exist")


@functools.lru_cache(maxsize=1)
def _embedded_lifetimes() -> GceLifetimes:
    return read_gce_lifetimes(_EMBEDDED / "gce-preemptible" / "lifetime.csv")


def load_gce_lifetimes(path: str | os.PathLike | None = None) -> GceLifetimes:
    """GCE preemptible VM lifetimes (CM-DARE, Li et al. ICDCS'20, Sec V-C, Fig 8).

    Args:
      path: ``None`` for the embedded copy; else ``lifetime.csv`` (plain or gzip) or a folder
        holding it (directly, in ``gce-preemptible/`` or in ``transient/gce-preemptible/``).

    Returns:
      :class:`GceLifetimes` of all rows (152 of the Feb 2019 campaign: 64 K80, 40 P100, 48
      V100; 412 of 2018: 348 CPU-only ``test*`` VMs and 64 K80 ``gpu*`` VMs);
      :meth:`GceLifetimes.select` narrows them.

    Raises:
      DataFormatError: a malformed file (names the file and line); FileNotFoundError.
    """
    if path is None:
        return _embedded_lifetimes()
    return read_gce_lifetimes(
        _locate(
            path,
            ("lifetime.csv", "gce-preemptible/lifetime.csv", "transient/gce-preemptible/lifetime.csv"),
            "lifetime.csv",
        )
    )


@functools.cache
def _embedded_spot(instance_type: str, zone: str) -> SpotPrices:
    return read_spot_prices(
        _EMBEDDED / "aws-spot-2015" / f"{zone}-Linux-{instance_type}.csv.gz", window=SPOT_EXTRACT_WINDOW
    )


def _check_market(instance_type, zone, any_name: bool) -> None:
    for name, value, known in (
        ("instance_type", instance_type, SPOT_INSTANCE_TYPES),
        ("zone", zone, SPOT_ZONES),
    ):
        if not isinstance(value, str):
            raise TypeError(f"{name} must be a str, got {type(value).__name__} {value!r}")
        if not any_name and value not in known:
            raise ValueError(f"{name} must be one of {list(known)} (the embedded markets), got {value!r}")


def load_spot_prices(
    instance_type: str = "c3.xlarge",
    zone: str = "us-east-1a",
    path: str | os.PathLike | None = None,
    *,
    window: tuple | None = None,
) -> SpotPrices:
    """One AWS spot market's price history, 2015 (``prateek-s/spot-price-model``).

    Args:
      instance_type, zone: the market, one of :data:`SPOT_INSTANCE_TYPES` x :data:`SPOT_ZONES`.
      path: ``None`` for the embedded April 2015 extract (:data:`SPOT_EXTRACT_WINDOW`); else a
        file in the format ``timestamp,spot_price_usd_per_hr`` or a folder holding
        ``<zone>-Linux-<instance_type>.csv[.gz]`` (directly, in ``aws-spot-2015/`` or in
        ``transient/aws-spot-2015/``): the full March-August history.
      window: ``(start, end)`` to cut the series to (the extract is the full file cut to
        :data:`SPOT_EXTRACT_WINDOW`).

    Raises:
      DataFormatError: a malformed file (names the file and line); FileNotFoundError;
      ValueError: an unknown market or a bad window.
    """
    _check_market(instance_type, zone, any_name=path is not None)
    if path is None:
        if window is None:
            return _embedded_spot(instance_type, zone)
        return read_spot_prices(
            _EMBEDDED / "aws-spot-2015" / f"{zone}-Linux-{instance_type}.csv.gz", window=window
        )
    name = f"{zone}-Linux-{instance_type}.csv"
    p = _locate(path, (name, f"aws-spot-2015/{name}", f"transient/aws-spot-2015/{name}"), name)
    return read_spot_prices(p, instance_type, zone, window)


def load_spot_market(
    root: str | os.PathLike | None = None, *, window: tuple | None = None
) -> dict[tuple[str, str], SpotPrices]:
    """All 15 spot markets: ``{(zone, instance_type): SpotPrices}`` (see :func:`load_spot_prices`;
    ``root`` is a folder holding the files, ``None`` the embedded extract)."""
    return {
        (z, t): load_spot_prices(t, z, root, window=window) for z in SPOT_ZONES for t in SPOT_INSTANCE_TYPES
    }


@functools.lru_cache(maxsize=1)
def _embedded_p3() -> NodeTrace:
    return read_aws_p3_trace(_EMBEDDED / "node-traces" / "aws-p3-trace.csv")


def load_aws_p3_trace(path: str | os.PathLike | None = None) -> NodeTrace:
    """The AWS p3 spot-cluster trace (``uclasystem/bamboo``, MIT): 344 add/remove events of 177
    nodes over 11.4 h. ``path``: the file or a folder holding it (directly, in ``node-traces/``
    or in ``transient/node-traces/``); ``None`` for the embedded copy."""
    if path is None:
        return _embedded_p3()
    return read_aws_p3_trace(
        _locate(
            path,
            ("aws-p3-trace.csv", "node-traces/aws-p3-trace.csv", "transient/node-traces/aws-p3-trace.csv"),
            "aws-p3-trace.csv",
        )
    )


@functools.lru_cache(maxsize=1)
def _embedded_gcp() -> AvailabilityTrace:
    return read_gcp_v100_trace(_EMBEDDED / "node-traces" / "gcp-v100x1-east1c.txt")


def load_gcp_v100_trace(path: str | os.PathLike | None = None) -> AvailabilityTrace:
    """Available GCP V100 spot instances over 24 h, Dec 2021 (``uclasystem/bamboo``, MIT; 1,477
    lines = 493 observations, each logged three times). ``path``: the file or a folder holding
    it (directly, in ``node-traces/`` or ``transient/node-traces/``); ``None``: embedded."""
    if path is None:
        return _embedded_gcp()
    return read_gcp_v100_trace(
        _locate(
            path,
            (
                "gcp-v100x1-east1c.txt",
                "node-traces/gcp-v100x1-east1c.txt",
                "transient/node-traces/gcp-v100x1-east1c.txt",
            ),
            "gcp-v100x1-east1c.txt",
        )
    )


@functools.lru_cache(maxsize=1)
def _embedded_startup() -> StartupTimes:
    return read_startup_times(_EMBEDDED / "cmdare" / "startup_time")


def load_startup_times(root: str | os.PathLike | None = None) -> StartupTimes:
    """CM-DARE's VM start-up times (Sec V-B, Fig 6; ``cake-lab/CM-DARE``, Apache-2.0): 100 VMs,
    preemptible and on-demand, K80 and P100, us-east1 and us-west1.

    ``root``: ``None`` for the embedded copy; else the ``startup_time`` folder or a folder
    above it (``cmdare/``, ``transient/``)."""
    if root is None:
        return _embedded_startup()
    r = check_path("root", root)
    for folder in (
        r,
        r / "startup_time",
        r / "cmdare" / "startup_time",
        r / "transient" / "cmdare" / "startup_time",
    ):
        if folder.is_dir() and any(_STARTUP_DIR.fullmatch(p.name) for p in folder.iterdir() if p.is_dir()):
            return read_startup_times(folder)
    raise FileNotFoundError(
        f"root: no startup_time folder ({{on_demand,pre}}_{{east,west}}/) in or below {r}"
    )
