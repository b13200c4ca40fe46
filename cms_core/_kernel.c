/*
 * cms_core._kernel: the OCMS+RR decode hot path.
 *
 * For a batch of reports (a0, a1, z) and tracked values x, count per value the
 * reports whose hash h(x) = ((a0 + a1 x) in the field) mod m equals z. The
 * estimate is an affine function of that count (cms_core.theory), so integer
 * counts are all the server needs and they are bit-exact with the big-integer
 * reference in cms_core.fields.
 *
 * Paths:
 *   counts_range   prime fields, tracked values = consecutive integers. The
 *                  field value and its residue mod m are advanced
 *                  incrementally along x (v += a1 mod p, t += a1 mod m,
 *                  corrected by p mod m on wrap), so the inner loop is adds
 *                  and compares over a block of reports, which the compiler
 *                  vectorizes (target_clones: AVX-512 / AVX2 / baseline).
 *   counts_values  any field, arbitrary tracked values: one field multiply per
 *                  (report, value) pair: 128-bit multiply + the 2^64 = 59
 *                  folding for 2^64 - 59, Barrett for small primes,
 *                  carry-less multiply (PCLMULQDQ when present) for GF(2^l).
 *                  GF(2^128) with AVX-512 + VPCLMULQDQ: four reports per
 *                  vector, the 256-bit product folded by clmul with x^7+x^2+x+1
 *                  (0x87), the residue mod m without division (below).
 *   hash_residues  per-report hash of a per-report value (simulation path).
 *
 * "z == v mod m" is tested without division: v >= z and (v - z) divisible by
 * m, using the multiplicative-inverse divisibility test (Granlund-Montgomery;
 * Hacker's Delight 10-17): with m = mo * 2^k, mo odd,
 * n % m == 0  <=>  rotr(n * mo^-1 mod 2^64, k) <= floor((2^64 - 1) / m).
 *
 * The residue of a 128-bit hash mod m < 2^30 also needs no division: with
 * c_k = 2^(32k) mod m, s = sum_k limb32_k * c_k < 2^32 + 3 * 2^32 * m < 2^64
 * is congruent to the hash, and "s mod m == z" is the divisibility test above.
 *
 * Every entry point releases the GIL; cms_core.kernel runs one call per thread
 * on disjoint report slices with private count arrays and sums them.
 *   counts_many    a list of counts_range / counts_values jobs, all checked, then
 *                  run under one GIL release (many small batches: the GIL is not
 *                  taken back between them, which under a busy event loop cost up
 *                  to a switch interval, 5 ms, per batch).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define HAVE_X86 1
#else
#define HAVE_X86 0
#endif

typedef unsigned __int128 u128;

#define P64 UINT64_C(18446744073709551557) /* 2^64 - 59 */

#if defined(__GNUC__) && !defined(__clang__) && HAVE_X86
#define MULTIVERSION __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define MULTIVERSION
#endif

/* ------------------------------------------------------------ divisibility */
typedef struct {
    uint64_t m, inv, lim;
    unsigned k;
} divtest_t;

static divtest_t divtest_make(uint64_t m) {
    divtest_t d;
    d.m = m;
    d.k = (unsigned)__builtin_ctzll(m);
    uint64_t mo = m >> d.k;
    uint64_t inv = mo; /* Newton: 5 steps double the correct bits 3 -> 96 */
    for (int i = 0; i < 5; i++) inv *= 2 - mo * inv;
    d.inv = inv;
    d.lim = UINT64_MAX / m;
    return d;
}

static inline uint64_t rotr64(uint64_t x, unsigned k) {
    return k ? (x >> k) | (x << (64 - k)) : x;
}

/* v mod m == z, for any 64-bit v and z < m */
static inline int residue_is(const divtest_t *d, uint64_t v, uint64_t z) {
    return (v >= z) & (rotr64((v - z) * d->inv, d->k) <= d->lim);
}

/* ------------------------------------------------------------ prime fields */
static inline uint64_t mulmod_p64(uint64_t a, uint64_t b) {
    /* Branch-free: the carries below are data-dependent coin flips, and a
     * mispredicted branch costs more than the arithmetic. */
    u128 prod = (u128)a * b;
    uint64_t lo = (uint64_t)prod, hi = (uint64_t)(prod >> 64);
    u128 t = (u128)hi * 59u + lo; /* 2^64 = 59 (mod p); t < 60 * 2^64 */
    uint64_t tlo = (uint64_t)t, thi = (uint64_t)(t >> 64);
    uint64_t r = tlo + thi * 59u;
    r += (uint64_t)(r < tlo) * 59u; /* wrapped once more; r is tiny, cannot wrap again */
    r -= (uint64_t)(r >= P64) * P64;
    return r;
}

static inline uint64_t addmod_p64(uint64_t a, uint64_t b) {
    uint64_t s = a + b;
    s += (uint64_t)(s < a) * 59u; /* true sum < 2p: s + 2^64 - p, stays below p */
    s -= (uint64_t)(s >= P64) * P64;
    return s;
}

typedef struct {
    uint64_t p, mu; /* mu = floor((2^64 - 1) / p) */
} barrett_t;

static inline uint64_t barrett_reduce(const barrett_t *b, uint64_t s) {
    uint64_t q = (uint64_t)(((u128)s * b->mu) >> 64);
    uint64_t r = s - q * b->p;
    while (r >= b->p) r -= b->p;
    return r;
}

/* ------------------------------------------------------------ binary fields */
static inline uint64_t clmul_soft(uint64_t a, uint64_t b, uint64_t *hi_out) {
    uint64_t lo = 0, hi = 0;
    for (int i = 0; i < 64; i++) {
        if ((b >> i) & 1) {
            lo ^= a << i;
            if (i) hi ^= a >> (64 - i);
        }
    }
    *hi_out = hi;
    return lo;
}

#if HAVE_X86
__attribute__((target("pclmul,sse4.1"))) static inline uint64_t clmul_hw(uint64_t a, uint64_t b, uint64_t *hi_out) {
    __m128i p = _mm_clmulepi64_si128(_mm_cvtsi64_si128((long long)a), _mm_cvtsi64_si128((long long)b), 0);
    *hi_out = (uint64_t)_mm_extract_epi64(p, 1);
    return (uint64_t)_mm_cvtsi128_si64(p);
}
#endif

/* x^64 + x^4 + x^3 + x + 1 */
static inline uint64_t gf64_reduce(uint64_t lo, uint64_t hi) {
    uint64_t o = (hi >> 63) ^ (hi >> 61) ^ (hi >> 60);
    lo ^= hi ^ (hi << 1) ^ (hi << 3) ^ (hi << 4);
    lo ^= o ^ (o << 1) ^ (o << 3) ^ (o << 4);
    return lo;
}

/* x^128 + x^7 + x^2 + x + 1; (w3 w2 w1 w0) -> (r1 r0) */
static inline void gf128_reduce(uint64_t w0, uint64_t w1, uint64_t w2, uint64_t w3, uint64_t *r0, uint64_t *r1) {
    uint64_t h1 = w1 ^ w3 ^ ((w3 << 1) | (w2 >> 63)) ^ ((w3 << 2) | (w2 >> 62)) ^ ((w3 << 7) | (w2 >> 57));
    uint64_t h0 = w0 ^ w2 ^ (w2 << 1) ^ (w2 << 2) ^ (w2 << 7);
    uint64_t o = (w3 >> 63) ^ (w3 >> 62) ^ (w3 >> 57);
    h0 ^= o ^ (o << 1) ^ (o << 2) ^ (o << 7);
    *r0 = h0;
    *r1 = h1;
}

#define DEFINE_GF(SUFFIX, CLMUL, ATTR)                                                              \
    ATTR static inline uint64_t gf64_mul_##SUFFIX(uint64_t a, uint64_t b) {                         \
        uint64_t hi, lo = CLMUL(a, b, &hi);                                                         \
        return gf64_reduce(lo, hi);                                                                 \
    }                                                                                               \
    ATTR static inline void gf128_mul_##SUFFIX(const uint64_t *a, const uint64_t *b, uint64_t *r) { \
        uint64_t h0, l0 = CLMUL(a[0], b[0], &h0);                                                   \
        uint64_t h2, l2 = CLMUL(a[1], b[1], &h2);                                                   \
        uint64_t ha, la = CLMUL(a[0], b[1], &ha);                                                   \
        uint64_t hb, lb = CLMUL(a[1], b[0], &hb);                                                   \
        gf128_reduce(l0, h0 ^ la ^ lb, l2 ^ ha ^ hb, h2, &r[0], &r[1]);                             \
    }

DEFINE_GF(soft, clmul_soft, )
#if HAVE_X86
DEFINE_GF(hw, clmul_hw, __attribute__((target("pclmul,sse4.1"))))
#endif

static int have_pclmul(void) {
#if HAVE_X86
    static int cached = -1;
    if (cached < 0) {
        __builtin_cpu_init();
        cached = __builtin_cpu_supports("pclmul") ? 1 : 0;
    }
    return cached;
#else
    return 0;
#endif
}

/* residue of a 128-bit value (lo, hi) mod m, m < 2^32 */
static inline uint64_t mod128(uint64_t lo, uint64_t hi, uint64_t m, uint64_t two64_mod_m) {
    return ((hi % m) * two64_mod_m + lo % m) % m;
}

/* Division-free "(lo, hi) mod m == z" for m < 2^30 (FOLD_LIMIT): the 32-bit limbs
 * weighted by c_k = 2^(32k) mod m sum to s < 2^64 with s = (lo, hi) (mod m). */
#define FOLD_LIMIT (UINT64_C(1) << 30)
typedef struct {
    divtest_t dv;
    uint64_t c1, c2, c3;
} fold128_t;

static fold128_t fold128_make(uint64_t m) {
    fold128_t f;
    f.dv = divtest_make(m);
    f.c1 = (uint64_t)(((u128)1 << 32) % m);
    f.c2 = (uint64_t)(((u128)1 << 64) % m);
    f.c3 = (uint64_t)(((u128)1 << 96) % m);
    return f;
}

static inline int residue128_is(const fold128_t *f, uint64_t lo, uint64_t hi, uint64_t z) {
    uint64_t s = (lo & 0xffffffffu) + (lo >> 32) * f->c1 + (hi & 0xffffffffu) * f->c2 + (hi >> 32) * f->c3;
    return residue_is(&f->dv, s, z);
}

/* =================================================== incremental range kernel */
#define RANGE_KERNEL(NAME, VT, ST, BLOCK)                                                           \
    MULTIVERSION static void NAME(const uint64_t *a0, const uint64_t *a1, const uint32_t *z,        \
                                  size_t n, uint64_t p, uint64_t m, uint64_t start, size_t count,   \
                                  int64_t *out) {                                                   \
        VT v[BLOCK], b[BLOCK], s[BLOCK];                                                            \
        ST t[BLOCK], dt[BLOCK], zz[BLOCK];                                                          \
        const ST pm = (ST)(p % m), mm = (ST)m;                                                      \
        for (size_t base = 0; base < n; base += BLOCK) {                                            \
            size_t nb = n - base < BLOCK ? n - base : BLOCK;                                        \
            for (size_t i = 0; i < nb; i++) {                                                       \
                uint64_t c1 = a1[base + i];                                                         \
                uint64_t v0 = p == P64 ? addmod_p64(mulmod_p64(c1, start), a0[base + i])            \
                                       : (uint64_t)(((u128)c1 * start + a0[base + i]) % p);         \
                v[i] = (VT)v0;                                                                      \
                b[i] = (VT)(p - c1);                                                                \
                s[i] = (VT)c1;                                                                      \
                t[i] = (ST)(v0 % m);                                                                \
                dt[i] = (ST)(c1 % m);                                                               \
                zz[i] = (ST)z[base + i];                                                            \
            }                                                                                       \
            for (size_t x = 0; x < count; x++) {                                                    \
                ST acc = 0;                                                                         \
                for (size_t i = 0; i < nb; i++) {                                                   \
                    acc += (ST)(t[i] == zz[i]);                                                     \
                    VT vi = v[i];                                                                   \
                    int wrap = vi >= b[i];                                                          \
                    v[i] = wrap ? vi - b[i] : vi + s[i];                                            \
                    ST ti = t[i] + dt[i] - (wrap ? pm : 0);                                         \
                    ti += ti < 0 ? mm : 0;                                                          \
                    ti -= ti >= mm ? mm : 0;                                                        \
                    t[i] = ti;                                                                      \
                }                                                                                   \
                out[x] += (int64_t)acc;                                                             \
            }                                                                                       \
        }                                                                                           \
    }

RANGE_KERNEL(range_kernel_32, uint32_t, int32_t, 1024)
RANGE_KERNEL(range_kernel_64, uint64_t, int64_t, 512)

/* =================================================== arbitrary-values kernels */
#define VBLOCK 256

/* The values kernels of the 64-bit fields share one loop: out[j] += #{i : h_i(xs[j]) mod m = z[i]},
 * HASH being h_i(x) = a1[i] x + a0[i] in the field; VBLOCK reports stay in cache across the values. */
#define VALUES_LOOP_64(HASH)                                                                        \
    divtest_t dv = divtest_make(m);                                                                 \
    for (size_t base = 0; base < n; base += VBLOCK) {                                               \
        size_t nb = n - base < VBLOCK ? n - base : VBLOCK;                                          \
        for (size_t j = 0; j < count; j++) {                                                        \
            uint64_t x = xs[j];                                                                     \
            int64_t acc = 0;                                                                        \
            for (size_t i = base; i < base + nb; i++) {                                             \
                uint64_t v = HASH;                                                                  \
                acc += residue_is(&dv, v, z[i]);                                                    \
            }                                                                                       \
            out[j] += acc;                                                                          \
        }                                                                                           \
    }

/* noinline: inlined into job_run (counts_many's dispatcher) GCC compiled this loop about 3x slower
 * (bench_decode, arbitrary values, small prime field: 159 against 402-449 M pairs/s on one thread). */
__attribute__((noinline)) static void values_prime_small(const uint64_t *a0, const uint64_t *a1, const uint32_t *z, size_t n,
                               uint64_t p, uint64_t m, const uint64_t *xs, size_t count, int64_t *out) {
    barrett_t br = {p, UINT64_MAX / p};
    VALUES_LOOP_64(barrett_reduce(&br, a1[i] * x + a0[i]))
}

__attribute__((noinline)) static void values_prime_64(const uint64_t *a0, const uint64_t *a1, const uint32_t *z, size_t n,
                            uint64_t m, const uint64_t *xs, size_t count, int64_t *out) {
    VALUES_LOOP_64(addmod_p64(mulmod_p64(a1[i], x), a0[i]))
}

#define VALUES_GF64(SUFFIX, ATTR)                                                                   \
    ATTR static void values_gf64_##SUFFIX(const uint64_t *a0, const uint64_t *a1, const uint32_t *z,\
                                          size_t n, uint64_t m, const uint64_t *xs, size_t count,   \
                                          int64_t *out) {                                           \
        VALUES_LOOP_64(a0[i] ^ gf64_mul_##SUFFIX(a1[i], x))                                         \
    }                                                                                               \
    ATTR static void values_gf128_##SUFFIX(const uint64_t *a0, const uint64_t *a1,                  \
                                           const uint32_t *z, size_t n, uint64_t m,                 \
                                           const uint64_t *xs, size_t count, int64_t *out) {        \
        uint64_t c = (uint64_t)(((u128)1 << 64) % m);                                              \
        fold128_t f = fold128_make(m);                                                              \
        int folded = m < FOLD_LIMIT;                                                                \
        for (size_t base = 0; base < n; base += VBLOCK) {                                           \
            size_t nb = n - base < VBLOCK ? n - base : VBLOCK;                                      \
            for (size_t j = 0; j < count; j++) {                                                    \
                int64_t acc = 0;                                                                    \
                if (folded) {                                                                       \
                    for (size_t i = base; i < base + nb; i++) {                                     \
                        uint64_t r[2];                                                              \
                        gf128_mul_##SUFFIX(&a1[2 * i], &xs[2 * j], r);                              \
                        acc += residue128_is(&f, r[0] ^ a0[2 * i], r[1] ^ a0[2 * i + 1], z[i]);    \
                    }                                                                               \
                } else {                                                                            \
                    for (size_t i = base; i < base + nb; i++) {                                     \
                        uint64_t r[2];                                                              \
                        gf128_mul_##SUFFIX(&a1[2 * i], &xs[2 * j], r);                              \
                        acc += mod128(r[0] ^ a0[2 * i], r[1] ^ a0[2 * i + 1], m, c) == z[i];        \
                    }                                                                               \
                }                                                                                   \
                out[j] += acc;                                                                      \
            }                                                                                       \
        }                                                                                           \
    }                                                                                               \
    ATTR static void residues_gf_##SUFFIX(const uint64_t *a0, const uint64_t *a1, const uint64_t *x,\
                                          size_t n, int degree, uint64_t m, uint64_t *out) {        \
        if (degree == 64) {                                                                         \
            for (size_t i = 0; i < n; i++) out[i] = (a0[i] ^ gf64_mul_##SUFFIX(a1[i], x[i])) % m;   \
        } else {                                                                                    \
            uint64_t c = (uint64_t)(((u128)1 << 64) % m);                                          \
            for (size_t i = 0; i < n; i++) {                                                        \
                uint64_t r[2];                                                                      \
                gf128_mul_##SUFFIX(&a1[2 * i], &x[2 * i], r);                                       \
                out[i] = mod128(r[0] ^ a0[2 * i], r[1] ^ a0[2 * i + 1], m, c);                      \
            }                                                                                       \
        }                                                                                           \
    }

VALUES_GF64(soft, )
#if HAVE_X86
VALUES_GF64(hw, __attribute__((target("pclmul,sse4.1"))))
#endif

#if HAVE_X86 && defined(__GNUC__)
#define HAVE_VPCLMUL_PATH 1
/* GF(2^128), four reports per 512-bit vector (each 128-bit lane holds one report's
 * (lo, hi) limbs, as a0 and a1 are laid out), m < FOLD_LIMIT. Per lane:
 *   product  (w3 w2 w1 w0) = a1 * x by four lane-wise carry-less multiplies;
 *   reduce   x^128 = x^7 + x^2 + x + 1 (0x87): (w1 w0) ^ w2*0x87 ^ (w3*0x87 << 64),
 *            and the <= 7 bits of w3*0x87 above 2^128 folded once more by 0x87;
 *   residue  the limb fold of residue128_is with 32x32-bit multiplies, the sum of
 *            the lane's two halves in its low qword, the divisibility test there. */
#define VP_TARGET __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw,vpclmulqdq,pclmul,sse4.1")))
VP_TARGET static void values_gf128_vp(const uint64_t *a0, const uint64_t *a1, const uint32_t *z, size_t n,
                                      uint64_t m, const uint64_t *xs, size_t count, int64_t *out) {
    fold128_t f = fold128_make(m);
    const __m512i p87 = _mm512_set1_epi64(0x87);
    const __m512i weight_lo = _mm512_set_epi64(f.c2, 1, f.c2, 1, f.c2, 1, f.c2, 1);
    const __m512i weight_hi = _mm512_set_epi64(f.c3, f.c1, f.c3, f.c1, f.c3, f.c1, f.c3, f.c1);
    const __m512i inv = _mm512_set1_epi64((long long)f.dv.inv), lim = _mm512_set1_epi64((long long)f.dv.lim);
    const __m512i rot = _mm512_set1_epi64((long long)f.dv.k), minus_one = _mm512_set1_epi64(-1);
    uint64_t zlane[2 * VBLOCK] __attribute__((aligned(64)));
    for (size_t base = 0; base < n; base += VBLOCK) {
        size_t nb = n - base < VBLOCK ? n - base : VBLOCK, nv = nb & ~(size_t)3;
        for (size_t i = 0; i < nv; i++) {
            zlane[2 * i] = z[base + i];
            zlane[2 * i + 1] = 0;
        }
        const uint64_t *pa0 = a0 + 2 * base, *pa1 = a1 + 2 * base;
        for (size_t j = 0; j < count; j++) {
            const __m512i x = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)&xs[2 * j]));
            __m512i acc = _mm512_setzero_si512();
            for (size_t i = 0; i < nv; i += 4) {
                __m512i va1 = _mm512_loadu_si512((const void *)&pa1[2 * i]);
                __m512i ll = _mm512_clmulepi64_epi128(va1, x, 0x00);
                __m512i hh = _mm512_clmulepi64_epi128(va1, x, 0x11);
                __m512i mid = _mm512_xor_si512(_mm512_clmulepi64_epi128(va1, x, 0x01), _mm512_clmulepi64_epi128(va1, x, 0x10));
                __m512i lo = _mm512_xor_si512(ll, _mm512_bslli_epi128(mid, 8));
                __m512i hi = _mm512_xor_si512(hh, _mm512_bsrli_epi128(mid, 8));
                __m512i t2 = _mm512_clmulepi64_epi128(hi, p87, 0x00);
                __m512i t3 = _mm512_clmulepi64_epi128(hi, p87, 0x01);
                __m512i t4 = _mm512_clmulepi64_epi128(t3, p87, 0x01);
                __m512i h = _mm512_ternarylogic_epi64(lo, t2, _mm512_bslli_epi128(t3, 8), 0x96);
                h = _mm512_ternarylogic_epi64(h, t4, _mm512_loadu_si512((const void *)&pa0[2 * i]), 0x96);
                __m512i parts = _mm512_add_epi64(_mm512_mul_epu32(h, weight_lo),
                                                 _mm512_mul_epu32(_mm512_srli_epi64(h, 32), weight_hi));
                __m512i s = _mm512_add_epi64(parts, _mm512_shuffle_epi32(parts, (_MM_PERM_ENUM)0x4E));
                __m512i zz = _mm512_load_si512((const void *)&zlane[2 * i]);
                __m512i q = _mm512_rorv_epi64(_mm512_mullo_epi64(_mm512_sub_epi64(s, zz), inv), rot);
                __mmask8 hit = _mm512_cmpge_epu64_mask(s, zz) & _mm512_cmple_epu64_mask(q, lim) & 0x55;
                acc = _mm512_mask_sub_epi64(acc, hit, acc, minus_one);
            }
            int64_t total = _mm512_reduce_add_epi64(acc);
            for (size_t i = nv; i < nb; i++) {
                uint64_t r[2];
                gf128_mul_hw(&pa1[2 * i], &xs[2 * j], r);
                total += residue128_is(&f, r[0] ^ pa0[2 * i], r[1] ^ pa0[2 * i + 1], z[base + i]);
            }
            out[j] += total;
        }
    }
}
#else
#define HAVE_VPCLMUL_PATH 0
#endif

/* Instruction-set levels of the values kernels: what the CPU offers, and what a
 * caller may ask for (tests pin each level to check it against the reference). */
enum { ISA_PORTABLE = 0, ISA_PCLMUL = 1, ISA_AVX512_VPCLMUL = 2 };

static int best_isa(void) {
#if HAVE_X86
    static int cached = -1;
    if (cached < 0) {
        __builtin_cpu_init();
        cached = ISA_PORTABLE;
        if (__builtin_cpu_supports("pclmul")) cached = ISA_PCLMUL;
#if HAVE_VPCLMUL_PATH
        if (cached == ISA_PCLMUL && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("vpclmulqdq"))
            cached = ISA_AVX512_VPCLMUL;
#endif
    }
    return cached;
#else
    return ISA_PORTABLE;
#endif
}

/* =================================================== Python bindings */
enum { FIELD_PRIME = 0, FIELD_BINARY = 1 };

static int get_buffer(PyObject *obj, Py_buffer *view, int writable, Py_ssize_t itemsize, const char *name) {
    if (PyObject_GetBuffer(obj, view, (writable ? PyBUF_WRITABLE : 0) | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return -1;
    if (view->itemsize != itemsize) {
        PyErr_Format(PyExc_TypeError, "%s: expected %zd-byte items, got %zd", name, itemsize, view->itemsize);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* The buffers one call holds: taken in order, all released together (also when a later one fails). */
typedef struct {
    Py_buffer views[5];
    int held;
} Buffers;

static Py_buffer *take_buffer(Buffers *b, PyObject *obj, int writable, Py_ssize_t itemsize, const char *name) {
    if (b->held == (int)(sizeof b->views / sizeof b->views[0])) {
        PyErr_SetString(PyExc_SystemError, "take_buffer: more buffers than Buffers holds");
        return NULL;
    }
    if (get_buffer(obj, &b->views[b->held], writable, itemsize, name) < 0) return NULL;
    return &b->views[b->held++];
}

/* Releases every buffer ``b`` holds; returns ``result`` (the call's answer, or NULL on an error). */
static PyObject *release_buffers(Buffers *b, PyObject *result) {
    while (b->held > 0) PyBuffer_Release(&b->views[--b->held]);
    return result;
}

/* One counts call: its checked arguments and the buffers it holds (released with the GIL).
 * counts_range and counts_values run one job; counts_many runs a list of them under one GIL
 * release, so a caller with many small batches (a worker serving many metrics) does not take
 * the GIL back between them. */
typedef struct {
    Buffers held;
    Py_buffer *a0, *a1, *z, *xs, *out; /* xs: NULL for a range job */
    int kind, isa;
    uint64_t order, m, start;
    size_t n, count;
} Job;

/* A job whose arguments fail a check: releases the buffers it holds; -1 (the error is set). */
static int job_release(Job *job) {
    release_buffers(&job->held, NULL);
    return -1;
}

/* job_release with a ValueError saying which argument is wrong and why. */
static int job_invalid(Job *job, const char *message) {
    PyErr_SetString(PyExc_ValueError, message);
    return job_release(job);
}

/* counts_range's arguments (a0, a1, z, p, m, start, out): checked, buffers held; -1 with an error set
 * (and nothing held). */
static int job_range(Job *job, PyObject *args) {
    PyObject *oa0, *oa1, *oz, *oout;
    unsigned long long p, m, start;
    job->held.held = 0;
    job->xs = NULL;
    if (!PyArg_ParseTuple(args, "OOOKKKO", &oa0, &oa1, &oz, &p, &m, &start, &oout)) return -1;
    Buffers *held = &job->held;
    if (!(job->a0 = take_buffer(held, oa0, 0, 8, "a0")) || !(job->a1 = take_buffer(held, oa1, 0, 8, "a1")) ||
        !(job->z = take_buffer(held, oz, 0, 4, "z")) || !(job->out = take_buffer(held, oout, 1, 8, "out")))
        return job_release(job);
    size_t n = job->n = (size_t)(job->z->len / 4), count = job->count = (size_t)(job->out->len / 8);
    job->order = p, job->m = m, job->start = start;
    if ((size_t)(job->a0->len / 8) != n || (size_t)(job->a1->len / 8) != n)
        return job_invalid(job, "a0, a1 and z must have the same length");
    if (m < 2 || p < 2 * m || (p >= (UINT64_C(1) << 32) && p != P64))
        return job_invalid(job, "unsupported field/hash range for the range kernel");
    if (count && start + count - 1 >= p)
        return job_invalid(job, "tracked range exceeds the field");
    return 0;
}

/* counts_values' arguments (a0, a1, z, kind, order_or_degree, m, xs, out[, isa]): checked, buffers held. */
static int job_values(Job *job, PyObject *args) {
    PyObject *oa0, *oa1, *oz, *oxs, *oout;
    int kind, isa = -1;
    unsigned long long order, m;
    job->held.held = 0;
    if (!PyArg_ParseTuple(args, "OOOiKKOO|i", &oa0, &oa1, &oz, &kind, &order, &m, &oxs, &oout, &isa)) return -1;
    if (isa < -1 || isa > best_isa()) {
        PyErr_Format(PyExc_ValueError, "isa %d: this CPU offers levels 0..%d", isa, best_isa());
        return -1;
    }
    job->isa = isa == -1 ? best_isa() : isa;
    job->kind = kind, job->order = order, job->m = m;
    Buffers *held = &job->held;
    if (!(job->a0 = take_buffer(held, oa0, 0, 8, "a0")) || !(job->a1 = take_buffer(held, oa1, 0, 8, "a1")) ||
        !(job->z = take_buffer(held, oz, 0, 4, "z")) || !(job->xs = take_buffer(held, oxs, 0, 8, "xs")) ||
        !(job->out = take_buffer(held, oout, 1, 8, "out")))
        return job_release(job);
    size_t n = job->n = (size_t)(job->z->len / 4), count = job->count = (size_t)(job->out->len / 8);
    size_t limbs = (kind == FIELD_BINARY && order == 128) ? 2 : 1;
    if ((size_t)(job->a0->len / 8) != n * limbs || (size_t)(job->a1->len / 8) != n * limbs ||
        (size_t)(job->xs->len / 8) != count * limbs)
        return job_invalid(job, "array lengths disagree");
    if (m < 2 || m >= (UINT64_C(1) << 32))
        return job_invalid(job, "hash range out of kernel bounds");
    if (kind == FIELD_PRIME) {
        if (!(order == P64 || order < (UINT64_C(1) << 32)))
            return job_invalid(job, "unsupported prime for the values kernel");
    } else if (!(kind == FIELD_BINARY && (order == 64 || order == 128))) {
        return job_invalid(job, "unsupported field");
    }
    return 0;
}

/* Run a checked job: out[count] += matches. Needs no GIL. */
static void job_run(const Job *job) {
    const uint64_t *a0 = job->a0->buf, *a1 = job->a1->buf;
    const uint32_t *z = job->z->buf;
    int64_t *out = job->out->buf;
    size_t n = job->n, count = job->count;
    uint64_t m = job->m, order = job->order;
    if (job->xs == NULL) {
        if (order < (UINT64_C(1) << 31))
            range_kernel_32(a0, a1, z, n, order, m, job->start, count, out);
        else
            range_kernel_64(a0, a1, z, n, order, m, job->start, count, out);
        return;
    }
    const uint64_t *xs = job->xs->buf;
    int hw = job->isa >= ISA_PCLMUL;
    if (job->kind == FIELD_PRIME && order == P64)
        values_prime_64(a0, a1, z, n, m, xs, count, out);
    else if (job->kind == FIELD_PRIME)
        values_prime_small(a0, a1, z, n, order, m, xs, count, out);
    else if (order == 64) {
#if HAVE_X86
        if (hw) values_gf64_hw(a0, a1, z, n, m, xs, count, out); else
#endif
        values_gf64_soft(a0, a1, z, n, m, xs, count, out);
    } else {
#if HAVE_VPCLMUL_PATH
        if (job->isa >= ISA_AVX512_VPCLMUL && m < FOLD_LIMIT) values_gf128_vp(a0, a1, z, n, m, xs, count, out); else
#endif
#if HAVE_X86
        if (hw) values_gf128_hw(a0, a1, z, n, m, xs, count, out); else
#endif
        values_gf128_soft(a0, a1, z, n, m, xs, count, out);
    }
    (void)hw;
}

static PyObject *run_one(Job *job) {
    Py_BEGIN_ALLOW_THREADS
    job_run(job);
    Py_END_ALLOW_THREADS
    return release_buffers(&job->held, Py_NewRef(Py_None));
}

/* counts_range(a0, a1, z, p, m, start, out) -- prime fields, out[len] += matches */
static PyObject *py_counts_range(PyObject *self, PyObject *args) {
    Job job;
    return job_range(&job, args) < 0 ? NULL : run_one(&job);
}

/* counts_values(a0, a1, z, kind, order_or_degree, m, xs, out[, isa]): isa -1 (default) is the
 * best level this CPU has (BEST_ISA); 0, 1, 2 pin a level (ValueError if the CPU lacks it). */
static PyObject *py_counts_values(PyObject *self, PyObject *args) {
    Job job;
    return job_values(&job, args) < 0 ? NULL : run_one(&job);
}

/* counts_many(jobs): each job a tuple of counts_range's 7 arguments or counts_values' 8 (or 9);
 * every job is checked first (nothing runs if one is bad), then all run under one GIL release. */
static PyObject *py_counts_many(PyObject *self, PyObject *args) {
    PyObject *ojobs;
    if (!PyArg_ParseTuple(args, "O", &ojobs)) return NULL;
    PyObject *seq = PySequence_Fast(ojobs, "counts_many: expected a sequence of argument tuples");
    if (seq == NULL) return NULL;
    Py_ssize_t total = PySequence_Fast_GET_SIZE(seq), ready = 0;
    Job *jobs = PyMem_Calloc(total ? (size_t)total : 1, sizeof(Job));
    if (jobs == NULL) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (; ready < total; ready++) {
        PyObject *item = items[ready];
        if (!PyTuple_Check(item)) {
            PyErr_Format(PyExc_TypeError, "counts_many: job %zd is not a tuple", ready);
            break;
        }
        if ((PyTuple_GET_SIZE(item) == 7 ? job_range(&jobs[ready], item) : job_values(&jobs[ready], item)) < 0) break;
    }
    if (ready == total) {
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < total; i++) job_run(&jobs[i]);
        Py_END_ALLOW_THREADS
    }
    for (Py_ssize_t i = 0; i < ready; i++) release_buffers(&jobs[i].held, NULL);
    PyMem_Free(jobs);
    Py_DECREF(seq);
    if (ready != total) return NULL;
    Py_RETURN_NONE;
}

/* hash_residues(a0, a1, x, kind, order_or_degree, m, out): out[i] = h_i(x_i) mod m */
static PyObject *py_hash_residues(PyObject *self, PyObject *args) {
    PyObject *oa0, *oa1, *ox, *oout;
    int kind;
    unsigned long long order, m;
    if (!PyArg_ParseTuple(args, "OOOiKKO", &oa0, &oa1, &ox, &kind, &order, &m, &oout)) return NULL;
    Buffers held = {.held = 0};
    Py_buffer *a0, *a1, *x, *out;
    if (!(a0 = take_buffer(&held, oa0, 0, 8, "a0")) || !(a1 = take_buffer(&held, oa1, 0, 8, "a1")) ||
        !(x = take_buffer(&held, ox, 0, 8, "x")) || !(out = take_buffer(&held, oout, 1, 8, "out")))
        goto fail;
    size_t n = (size_t)(out->len / 8);
    size_t limbs = (kind == FIELD_BINARY && order == 128) ? 2 : 1;
    if ((size_t)(a0->len / 8) != n * limbs || (size_t)(a1->len / 8) != n * limbs || (size_t)(x->len / 8) != n * limbs) {
        PyErr_SetString(PyExc_ValueError, "array lengths disagree");
        goto fail;
    }
    if (m < 2 || m >= (UINT64_C(1) << 32) ||
        (kind == FIELD_PRIME && !(order == P64 || order < (UINT64_C(1) << 32))) ||
        (kind == FIELD_BINARY && order != 64 && order != 128) || (kind != FIELD_PRIME && kind != FIELD_BINARY)) {
        PyErr_SetString(PyExc_ValueError, "unsupported field or hash range");
        goto fail;
    }
    int hw = have_pclmul();
    const uint64_t *pa0 = a0->buf, *pa1 = a1->buf, *px = x->buf;
    uint64_t *po = out->buf;
    Py_BEGIN_ALLOW_THREADS
    if (kind == FIELD_PRIME && order == P64) {
        for (size_t i = 0; i < n; i++) po[i] = addmod_p64(mulmod_p64(pa1[i], px[i]), pa0[i]) % m;
    } else if (kind == FIELD_PRIME) {
        barrett_t br = {order, UINT64_MAX / order};
        for (size_t i = 0; i < n; i++) po[i] = barrett_reduce(&br, pa1[i] * px[i] + pa0[i]) % m;
    } else {
#if HAVE_X86
        if (hw) residues_gf_hw(pa0, pa1, px, n, (int)order, m, po); else
#endif
        residues_gf_soft(pa0, pa1, px, n, (int)order, m, po);
    }
    Py_END_ALLOW_THREADS
    (void)hw;
    return release_buffers(&held, Py_NewRef(Py_None));
fail:
    return release_buffers(&held, NULL);
}

static PyMethodDef methods[] = {
    {"counts_range", py_counts_range, METH_VARARGS, "Match counts for a consecutive range (prime fields)."},
    {"counts_values", py_counts_values, METH_VARARGS, "Match counts for arbitrary tracked values."},
    {"hash_residues", py_hash_residues, METH_VARARGS, "Per-report hash of per-report values."},
    {"counts_many", py_counts_many, METH_VARARGS, "Run many counts_range / counts_values jobs under one GIL release."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kernel", "OCMS+RR decode kernel", -1, methods};

PyMODINIT_FUNC PyInit__kernel(void) {
    PyObject *mod = PyModule_Create(&module);
    if (mod && (PyModule_AddIntConstant(mod, "HAVE_PCLMUL", have_pclmul()) < 0 ||
                PyModule_AddIntConstant(mod, "BEST_ISA", best_isa()) < 0)) {
        Py_DECREF(mod);
        return NULL;
    }
    return mod;
}
