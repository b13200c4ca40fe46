"""The decode kernel is bit-exact with the slow big-integer reference, on every path."""

import os
from array import array

import numpy as np
import pytest

from cms_core import OCMSParams, ReportBatch, Report, TrackedValues, kernel
from cms_core.fields import PRIME_64, BinaryField, PrimeField
from cms_core.privatize import simulate_reports
from cms_core.values import array_to_elements, elements_to_array, limbs_for

BACKENDS = ["numpy"] + (["compiled"] if kernel.BACKEND == "compiled" else [])

PARAMS = {
    "small-prime": OCMSParams.build(2.0, 1000),
    "prime-31bit": OCMSParams.build(2.0, 2**31 + 100),  # 64-bit lanes of the range kernel
    "prime-64": OCMSParams.build(2.0, 2**40),
    "prime-64-even-m": OCMSParams.build(1.0, 2**40, hash_range=12),
    "prime-64-pow2-m": OCMSParams.build(1.0, 2**40, hash_range=64),
    "gf64": OCMSParams.build(3.0, 2**64),
    "gf128": OCMSParams.build(3.0, value_domain="string"),
    "tiny-field": OCMSParams.build(4.0, 10, hash_range=4, field=PrimeField(11)),
}


def boundary_batch(params: OCMSParams, rng, n: int = 400) -> ReportBatch:
    """Random reports plus the corner coefficients 0, 1, order-1 and z = 0, m-1."""
    order = params.field.order
    corners = [0, 1, order - 1, order - 2, order // 2]
    reports = [Report(a0, a1, z) for a0 in corners for a1 in corners for z in (0, params.hash_range - 1)]
    reports += [
        Report(int(rng.integers(0, 2**62)) % order * 3 % order, int(rng.integers(0, 2**62)) * 7 % order, int(rng.integers(0, params.hash_range)))
        for _ in range(n)
    ]
    return ReportBatch.from_reports(params, reports)


def tracked_sets(params: OCMSParams):
    d = params.dictionary_size
    if params.value_domain == "string":
        yield TrackedValues.of(params, ["", "a", "ocms", "x" * 1000, b"\x00\xff"])
        return
    top = min(d, 2**64)
    values = sorted({0, 1, 2, top - 1, top - 2, top // 2, top // 3})
    yield TrackedValues.of(params, values)
    if params.field.kind == "prime":
        yield TrackedValues.range(params, 0, min(d, 300))
        yield TrackedValues.range(params, d - min(d, 50), d)  # ends at d - 1


@pytest.fixture(params=sorted(PARAMS))
def params(request) -> OCMSParams:
    return PARAMS[request.param]


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    return request.param


def test_counts_bit_exact_with_reference(params, backend):
    batch = boundary_batch(params, np.random.default_rng(7), 150)
    for tracked in tracked_sets(params):
        expected = kernel.reference_match_counts(params, batch, tracked)
        got = kernel.match_counts(params, batch, tracked, backend=backend, threads=1)
        np.testing.assert_array_equal(got, expected)
        if backend == "compiled":
            np.testing.assert_array_equal(kernel.match_counts(params, batch, tracked, threads=3), expected)


def test_hash_residues_bit_exact(params, backend):
    rng = np.random.default_rng(11)
    batch = boundary_batch(params, rng, 200)
    n = len(batch)
    top = min(params.dictionary_size, 2**64) if params.value_domain == "integer" else 2**128
    xs = [int(v) % top for v in rng.integers(0, 2**63, n)]
    xs[:4] = [0, 1, top - 1, top // 2]
    a0s, a1s = array_to_elements(batch.a0), array_to_elements(batch.a1)
    expected = [params.field.hash_value(a0, a1, x) % params.hash_range for a0, a1, x in zip(a0s, a1s, xs)]
    got = kernel.hash_residues(params, batch.a0, batch.a1, elements_to_array(xs, limbs_for(params)), backend=backend)
    assert [int(v) for v in got] == expected


ISA_LEVELS = range(kernel._compiled.BEST_ISA + 1) if kernel.BACKEND == "compiled" else range(0)


@pytest.mark.parametrize("isa", ISA_LEVELS)
@pytest.mark.parametrize("hash_range", [2, 3, 6, 64, 1000, 2**30 - 1, 2**30 + 5, 2**32 - 5])
def test_gf128_every_instruction_level_bit_exact(isa, hash_range):
    # The GF(2^128) values kernel has three levels (portable clmul, PCLMULQDQ, AVX-512
    # VPCLMULQDQ four reports per vector) and two residue paths (division-free below
    # m = 2^30, 128-bit division above); each pinned level must equal the reference.
    # Half the reports carry z = h(x) of a tracked x, so large m still counts matches;
    # n = 262 leaves a tail after the last full vector of a 256-report block.
    params = OCMSParams.build(2.0, value_domain="string", hash_range=hash_range)
    rng = np.random.default_rng(hash_range % 1000)
    tracked = TrackedValues.of(params, ["", "a", "ocms", "x" * 300, b"\x00\xff", "ATL"])
    xs = array_to_elements(tracked.elements)
    corner = [0, 1, 2**128 - 1, 2**127, 2**64 - 1, 2**64]
    reports = []
    for i in range(262):
        a0 = corner[i % 6] if i < 36 else int.from_bytes(rng.bytes(16), "little")
        a1 = corner[(i // 6) % 6] if i < 36 else int.from_bytes(rng.bytes(16), "little")
        x = xs[i % len(xs)]
        z = params.field.hash_value(a0, a1, x) % hash_range if i % 2 else int(rng.integers(0, hash_range))
        reports.append(Report(a0, a1, z))
    batch = ReportBatch.from_reports(params, reports)
    expected = kernel.reference_match_counts(params, batch, tracked)
    assert expected.sum() >= 131  # the planted matches are there to be found
    got = np.zeros(len(tracked), np.int64)
    kernel._compiled.counts_values(batch.a0, batch.a1, batch.z, 1, 128, hash_range, tracked.elements, got, isa)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.skipif(kernel.BACKEND != "compiled", reason="needs the compiled kernel")
def test_instruction_level_beyond_the_cpu_is_refused():
    params = OCMSParams.build(2.0, value_domain="string")
    batch = boundary_batch(params, np.random.default_rng(2), 4)
    tracked = TrackedValues.of(params, ["a"])
    out = np.zeros(1, np.int64)
    for isa in (-2, kernel._compiled.BEST_ISA + 1):
        with pytest.raises(ValueError, match=f"isa {isa}"):
            kernel._compiled.counts_values(batch.a0, batch.a1, batch.z, 1, 128, params.hash_range, tracked.elements, out, isa)


@pytest.mark.skipif(kernel.BACKEND != "compiled", reason="needs the compiled kernel")
@pytest.mark.parametrize("call", ["counts_range", "counts_values", "hash_residues"])
def test_a_wrong_buffer_is_named_and_the_ones_taken_before_it_are_released(call):
    """The last buffer has 4-byte items: TypeError naming it; the arrays taken before it are
    released (an array.array with a buffer still exported refuses to grow)."""
    a0, a1, x = array("Q", [1]), array("Q", [2]), array("Q", [3])
    z, wrong_out = array("I", [0]), array("I", [0])
    args = {"counts_range": (a0, a1, z, 11, 4, 0, wrong_out),
            "counts_values": (a0, a1, z, 0, 11, 4, x, wrong_out),
            "hash_residues": (a0, a1, x, 0, 11, 4, wrong_out)}[call]
    with pytest.raises(TypeError, match="out: expected 8-byte items, got 4"):
        getattr(kernel._compiled, call)(*args)
    for taken in (a0, a1, x, z):
        taken.append(0)  # BufferError if still exported


def test_long_range_matches_values_path_and_threads():
    # the incremental range path wraps around the field many times
    params = OCMSParams.build(2.0, 5000)
    rng = np.random.default_rng(3)
    batch = simulate_reports(params, rng.integers(0, 5000, 3000).astype(np.uint64), rng)
    rng_tracked = TrackedValues.range(params, 0, 5000)
    listed = TrackedValues.of(params, list(range(5000)))
    if kernel.BACKEND == "compiled":
        a = kernel.match_counts(params, batch, rng_tracked, threads=1)
        b = kernel.match_counts(params, batch, listed, threads=2)
        np.testing.assert_array_equal(a, b)
    sample = TrackedValues.of(params, [0, 17, 4999])
    np.testing.assert_array_equal(
        kernel.match_counts(params, batch, sample), kernel.reference_match_counts(params, batch, sample)
    )


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("threads", [1, 3])
def test_many_jobs_decoded_together_equal_one_by_one(backend, threads, monkeypatch):
    """match_counts_many (a worker's many small batches in one kernel call per thread, large
    jobs cut into slices across threads) gives every job's match_counts to the integer."""
    monkeypatch.setattr(kernel, "_PAIRS_PER_THREAD", 1)  # every job worth cutting across the threads
    rng = np.random.default_rng(5)
    jobs = []
    for name in sorted(PARAMS):
        params = PARAMS[name]
        for tracked in tracked_sets(params):
            jobs.append((params, boundary_batch(params, rng, int(rng.integers(0, 120))), tracked))
    direct = OCMSParams.build(2.0, 40, mechanism="direct")
    z = rng.integers(0, 40, 300).astype(np.uint32)
    jobs.append((direct, ReportBatch(np.zeros(300, np.uint64), np.ones(300, np.uint64), z), TrackedValues.range(direct, 0, 40)))
    jobs.append((PARAMS["gf64"], ReportBatch.empty(PARAMS["gf64"]), next(tracked_sets(PARAMS["gf64"]))))
    got = kernel.match_counts_many(jobs, backend=backend, threads=threads)
    assert len(got) == len(jobs)
    for (params, batch, tracked), counts in zip(jobs, got):
        np.testing.assert_array_equal(counts, kernel.match_counts(params, batch, tracked, backend="numpy", threads=1))


@pytest.mark.skipif(kernel.BACKEND != "compiled", reason="the compiled kernel is not built here")
def test_counts_many_checks_every_job_before_running_any():
    params = PARAMS["small-prime"]
    batch = boundary_batch(params, np.random.default_rng(4), 10)
    tracked = TrackedValues.range(params, 0, 10)
    good = kernel._compiled_job(params, batch, tracked, np.zeros(10, np.int64))
    bad = kernel._compiled_job(params, batch.slice(0, 5), tracked, np.zeros(10, np.int64))[:1] + (batch.a1,) + good[2:]
    with pytest.raises(ValueError, match="same length"):
        kernel._compiled.counts_many([good, bad])
    assert not good[-1].any()  # nothing ran
    with pytest.raises(TypeError, match="job 0 is not a tuple"):
        kernel._compiled.counts_many([list(good)])
    kernel._compiled.counts_many([good, good])
    np.testing.assert_array_equal(good[-1], 2 * kernel.reference_match_counts(params, batch, tracked))


def test_unknown_backend_and_bad_threads_env(monkeypatch):
    from cms_core.errors import InvalidParameterError

    params = PARAMS["small-prime"]
    batch = boundary_batch(params, np.random.default_rng(1), 5)
    tracked = TrackedValues.range(params, 0, 10)
    with pytest.raises(InvalidParameterError, match="backend"):
        kernel.match_counts(params, batch, tracked, backend="gpu")
    monkeypatch.setenv("OCMS_DECODE_THREADS", "zero")
    with pytest.raises(InvalidParameterError, match="OCMS_DECODE_THREADS"):
        kernel.default_threads()


@pytest.mark.skipif(os.environ.get("OCMS_REQUIRE_KERNEL") != "1", reason="only `make test` demands the compiled kernel")
def test_compiled_kernel_was_built():
    # `make test` sets OCMS_REQUIRE_KERNEL=1: a silent build failure would otherwise
    # leave CI on the slow numpy fallback with every test still green.
    assert kernel.BACKEND == "compiled"
