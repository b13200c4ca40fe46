/* Field arithmetic of the hash family h(x) = a0 + a1 x (cms_core/fields.py, bit for bit).
 *
 * F(p): p < 2^32 in 64-bit integers; p = 2^64 - 59 by folding 2^64 = 59 (mod p); any other p by a
 * 128-bit remainder. GF(2^64) and GF(2^128): a carry-less product reduced by the fixed
 * polynomials x^64 + x^4 + x^3 + x + 1 and x^128 + x^7 + x^2 + x + 1. The carry-less product is
 * PCLMULQDQ where the CPU has it (chosen once at run time), else portable code that multiplies
 * integers "with holes": no branch and no table lookup depends on the value x (a secret), so its
 * time does not either. */
#include <string.h>

#include "internal.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(OCMS_NO_PCLMUL)
#define OCMS_X86_PCLMUL 1
#include <wmmintrin.h>
#include <emmintrin.h>
#else
#define OCMS_X86_PCLMUL 0
#endif

/* ----------------------------------------------------------- carry-less multiply */
/* 32 x 32 -> 64 carry-less: each operand split into 4 interleaved parts with 3-bit holes (bits
 * i, i+4, i+8, ...). A part has at most 8 set bits, so a column of an integer product of two parts
 * sums at most 8 < 16 terms and never carries into the next column of its residue class: the
 * integer product's bit k is the parity of column k, i.e. the carry-less product's bit k. */
static uint64_t clmul32(uint32_t x, uint32_t y) {
    const uint64_t m0 = 0x1111111111111111ULL, m1 = m0 << 1, m2 = m0 << 2, m3 = m0 << 3;
    uint64_t x0 = x & (uint32_t)m0, x1 = x & (uint32_t)m1, x2 = x & (uint32_t)m2, x3 = x & (uint32_t)m3;
    uint64_t y0 = y & (uint32_t)m0, y1 = y & (uint32_t)m1, y2 = y & (uint32_t)m2, y3 = y & (uint32_t)m3;
    uint64_t z0 = (x0 * y0) ^ (x1 * y3) ^ (x2 * y2) ^ (x3 * y1);
    uint64_t z1 = (x0 * y1) ^ (x1 * y0) ^ (x2 * y3) ^ (x3 * y2);
    uint64_t z2 = (x0 * y2) ^ (x1 * y1) ^ (x2 * y0) ^ (x3 * y3);
    uint64_t z3 = (x0 * y3) ^ (x1 * y2) ^ (x2 * y1) ^ (x3 * y0);
    return (z0 & m0) | (z1 & m1) | (z2 & m2) | (z3 & m3);
}

/* 64 x 64 -> 128 carry-less by Karatsuba over 32-bit halves (3 products). */
void ocms_clmul64_portable(uint64_t a, uint64_t b, uint64_t *hi, uint64_t *lo) {
    uint32_t a0 = (uint32_t)a, a1 = (uint32_t)(a >> 32), b0 = (uint32_t)b, b1 = (uint32_t)(b >> 32);
    uint64_t low = clmul32(a0, b0), high = clmul32(a1, b1);
    uint64_t mid = clmul32(a0 ^ a1, b0 ^ b1) ^ low ^ high;
    *lo = low ^ (mid << 32);
    *hi = high ^ (mid >> 32);
}

#if OCMS_X86_PCLMUL
__attribute__((target("pclmul,sse2"))) static void clmul64_pclmul(uint64_t a, uint64_t b, uint64_t *hi,
                                                                   uint64_t *lo) {
    __m128i p = _mm_clmulepi64_si128(_mm_cvtsi64_si128((long long)a), _mm_cvtsi64_si128((long long)b), 0x00);
    *lo = (uint64_t)_mm_cvtsi128_si64(p);
    *hi = (uint64_t)_mm_cvtsi128_si64(_mm_unpackhi_epi64(p, p));
}

static int cpu_has_pclmul(void) {
    static volatile int cached = -1;
    if (cached < 0) {
        __builtin_cpu_init();
        cached = __builtin_cpu_supports("pclmul") ? 1 : 0;
    }
    return cached;
}
#endif

/* -1: not chosen yet; 0: portable; 1: PCLMUL. A benign race: every thread stores the same choice. */
static volatile int use_pclmul = -1;

int ocms_pclmul_active(void) {
#if OCMS_X86_PCLMUL
    if (use_pclmul < 0) use_pclmul = cpu_has_pclmul();
    return use_pclmul;
#else
    return 0;
#endif
}

int ocms_use_pclmul(int enable) {
#if OCMS_X86_PCLMUL
    use_pclmul = enable ? cpu_has_pclmul() : 0;
    return use_pclmul;
#else
    (void)enable;
    return 0;
#endif
}

static void clmul64(uint64_t a, uint64_t b, uint64_t *hi, uint64_t *lo) {
#if OCMS_X86_PCLMUL
    if (ocms_pclmul_active()) {
        clmul64_pclmul(a, b, hi, lo);
        return;
    }
#endif
    ocms_clmul64_portable(a, b, hi, lo);
}

/* ----------------------------------------------------------- binary fields */
/* x^64 = x^4 + x^3 + x + 1: fold hi (degree 64..127) down twice. */
static uint64_t gf64_reduce(uint64_t hi, uint64_t lo) {
    uint64_t over = (hi >> 60) ^ (hi >> 61) ^ (hi >> 63); /* bits pushed past x^63 by hi * (x^4 + x^3 + x) */
    lo ^= hi ^ (hi << 1) ^ (hi << 3) ^ (hi << 4);
    lo ^= over ^ (over << 1) ^ (over << 3) ^ (over << 4);
    return lo;
}

static uint64_t gf64_mul(uint64_t a, uint64_t b) {
    uint64_t hi, lo;
    clmul64(a, b, &hi, &lo);
    return gf64_reduce(hi, lo);
}

/* x^128 = x^7 + x^2 + x + 1 on the 256-bit product (w3 w2 w1 w0). */
static ocms_u128 gf128_mul(const ocms_u128 *a, const ocms_u128 *b) {
    uint64_t l0, h0, l2, h2, lm, hm, w0, w1, w2, w3, over;
    ocms_u128 r;
    clmul64(a->lo, b->lo, &h0, &l0);
    clmul64(a->hi, b->hi, &h2, &l2);
    clmul64(a->lo ^ a->hi, b->lo ^ b->hi, &hm, &lm); /* Karatsuba middle term */
    lm ^= l0 ^ l2;
    hm ^= h0 ^ h2;
    w0 = l0;
    w1 = h0 ^ lm;
    w2 = l2 ^ hm;
    w3 = h2;
    /* (w3 w2) * (x^7 + x^2 + x + 1) folded into (w1 w0); the bits it pushes past x^127 fold once more */
    over = (w3 >> 63) ^ (w3 >> 62) ^ (w3 >> 57);
    r.hi = w1 ^ w3 ^ ((w3 << 1) | (w2 >> 63)) ^ ((w3 << 2) | (w2 >> 62)) ^ ((w3 << 7) | (w2 >> 57));
    r.lo = w0 ^ w2 ^ (w2 << 1) ^ (w2 << 2) ^ (w2 << 7);
    r.lo ^= over ^ (over << 1) ^ (over << 2) ^ (over << 7);
    return r;
}

/* ----------------------------------------------------------- prime fields */
static void mul64(uint64_t a, uint64_t b, uint64_t *hi, uint64_t *lo) {
#if OCMS_HAVE_INT128
    ocms_uint128_t p = (ocms_uint128_t)a * b;
    *hi = (uint64_t)(p >> 64);
    *lo = (uint64_t)p;
#else
    uint64_t a0 = a & 0xffffffffu, a1 = a >> 32, b0 = b & 0xffffffffu, b1 = b >> 32;
    uint64_t p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
    uint64_t mid = (p00 >> 32) + (p01 & 0xffffffffu) + (p10 & 0xffffffffu);
    *lo = (p00 & 0xffffffffu) | (mid << 32);
    *hi = p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
#endif
}

/* (hi * 2^64 + lo) mod p for any p >= 2. */
static uint64_t mod128(uint64_t hi, uint64_t lo, uint64_t p) {
#if OCMS_HAVE_INT128
    return (uint64_t)((((ocms_uint128_t)hi << 64) | lo) % p);
#else
    uint64_t r = hi % p;
    int i;
    for (i = 63; i >= 0; i--) { /* r = (2 r + bit) mod p, with the carry out of 64 bits kept */
        uint64_t carry = r >> 63;
        r = (r << 1) | ((lo >> i) & 1);
        if (carry || r >= p) r -= p;
    }
    return r;
#endif
}

/* (a0 + a1 x) mod (2^64 - 59): 2^64 = 59, folded until below 2^64, then one subtraction. */
static uint64_t hash_p64(uint64_t a0, uint64_t a1, uint64_t x) {
    uint64_t hi, lo, f_hi, f_lo, sum;
    mul64(a1, x, &hi, &lo);
    mul64(hi, 59, &f_hi, &f_lo); /* hi * 2^64 = hi * 59: f_hi < 59 */
    lo += f_lo;
    f_hi += (lo < f_lo);
    lo += f_hi * 59; /* f_hi * 2^64 = f_hi * 59 < 59^2 */
    if (lo < f_hi * 59) lo += 59;
    sum = lo + a0;
    if (sum < a0) sum += 59;      /* a carry out is 2^64 = 59; the sum then stays below p */
    if (sum >= OCMS_P64) sum -= OCMS_P64;
    if (sum >= OCMS_P64) sum -= OCMS_P64;
    return sum;
}

static uint64_t hash_prime(uint64_t p, uint64_t a0, uint64_t a1, uint64_t x) {
    uint64_t hi, lo;
    if (p <= 0xffffffffULL) return (a0 + a1 * x) % p; /* a1 x < p^2 < 2^64 - p */
    if (p == OCMS_P64) return hash_p64(a0, a1, x);
    mul64(a1, x, &hi, &lo);
    lo += a0;
    hi += (lo < a0);
    return mod128(hi, lo, p);
}

ocms_u128 ocms_field_hash(const ocms_params *params, const ocms_u128 *a0, const ocms_u128 *a1, const ocms_u128 *x) {
    ocms_u128 r;
    switch (params->field) {
    case OCMS_FIELD_PRIME:
        r.hi = 0;
        r.lo = hash_prime(params->prime, a0->lo, a1->lo, x->lo);
        return r;
    case OCMS_FIELD_GF2_64:
        r.hi = 0;
        r.lo = a0->lo ^ gf64_mul(a1->lo, x->lo);
        return r;
    default:
        r = gf128_mul(a1, x);
        r.hi ^= a0->hi;
        r.lo ^= a0->lo;
        return r;
    }
}

uint32_t ocms_mod_m(const ocms_u128 *value, uint32_t m) {
    uint64_t r = value->hi % m;
    r = ((r << 32) | (value->lo >> 32)) % m;
    r = ((r << 32) | (value->lo & 0xffffffffu)) % m;
    return (uint32_t)r;
}

size_t ocms_coefficient_bytes(const ocms_params *params) {
    if (params->field == OCMS_FIELD_GF2_64) return 8;
    if (params->field == OCMS_FIELD_GF2_128) return 16;
    return (ocms_bit_length(params->prime - 1) + 7) / 8;
}

size_t ocms_z_bytes(uint32_t m) {
    return (ocms_bit_length((uint64_t)m - 1) + 7) / 8;
}
