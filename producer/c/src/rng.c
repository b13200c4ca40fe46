/* The randomness source and the contract's draws (cms_core/privatize.py, module doc):
 *   bits64()  = the next 8 bytes, big-endian;
 *   below(n)  = n == 1: nothing drawn, 0; else k = bit length of n - 1, per try the next ceil(k/8)
 *               bytes big-endian with the low k bits kept, the first try below n. */
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* getrandom() */
#endif
#if (defined(__APPLE__) || defined(__OpenBSD__) || defined(__FreeBSD__)) && !defined(_DARWIN_C_SOURCE)
#define _DARWIN_C_SOURCE
#endif
#include <errno.h>
#include <string.h>

#include "internal.h"

#if defined(__linux__)
#include <sys/random.h>
#define OCMS_HAVE_GETRANDOM 1
#elif defined(__APPLE__) || defined(__OpenBSD__) || defined(__FreeBSD__)
#include <unistd.h>
#include <sys/random.h>
#define OCMS_HAVE_GETENTROPY 1
#endif

/* A try fails with probability < 1/2; 1000 failures in a row (< 2^-1000) means a broken source. */
#define OCMS_MAX_REJECTIONS 1000

void ocms_wipe(void *p, size_t n) {
    volatile unsigned char *v = (volatile unsigned char *)p;
    while (n--) *v++ = 0;
}

int ocms_os_random(void *ctx, uint8_t *out, size_t len) {
    (void)ctx;
#if defined(OCMS_HAVE_GETRANDOM)
    while (len > 0) {
        ssize_t got = getrandom(out, len, 0);
        if (got < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        out += got;
        len -= (size_t)got;
    }
    return 0;
#elif defined(OCMS_HAVE_GETENTROPY)
    while (len > 0) {
        size_t take = len > 256 ? 256 : len; /* getentropy's limit per call */
        if (getentropy(out, take) != 0) return -1;
        out += take;
        len -= take;
    }
    return 0;
#else
    (void)out;
    (void)len;
    return -1; /* no OS CSPRNG known here: pass a fill callback to ocms_rng_init */
#endif
}

void ocms_rng_init(ocms_rng *rng, ocms_random_fn fill, void *ctx, uint8_t *buffer, size_t capacity) {
    rng->fill = fill;
    rng->ctx = ctx;
    /* a buffer must hold the widest single draw (16 bytes); a smaller one is not used */
    rng->buffer = buffer != NULL && capacity >= 16 ? buffer : NULL;
    rng->capacity = rng->buffer != NULL ? capacity : 0;
    rng->start = rng->end = 0;
}

void ocms_rng_wipe(ocms_rng *rng) {
    if (rng->buffer != NULL) ocms_wipe(rng->buffer, rng->capacity);
    rng->start = rng->end = 0;
}

static int source(ocms_rng *rng, uint8_t *out, size_t len) {
    int rc = rng->fill != NULL ? rng->fill(rng->ctx, out, len) : ocms_os_random(NULL, out, len);
    return rc == 0 ? OCMS_OK : OCMS_E_RANDOM;
}

/* The next len bytes of the stream (len <= 16). */
static int take(ocms_rng *rng, uint8_t *out, size_t len) {
    size_t have;
    if (rng->buffer == NULL) return source(rng, out, len);
    have = rng->end - rng->start;
    if (have >= len) {
        memcpy(out, rng->buffer + rng->start, len);
        ocms_wipe(rng->buffer + rng->start, len); /* a used draw (e.g. the keep draw) must not stay in memory */
        rng->start += len;
        return OCMS_OK;
    }
    /* the unread tail first, then a refill: the stream's order is kept across refills */
    memcpy(out, rng->buffer + rng->start, have);
    ocms_wipe(rng->buffer + rng->start, have);
    rng->start = rng->end = 0;
    if (source(rng, rng->buffer, rng->capacity) != OCMS_OK) return OCMS_E_RANDOM;
    rng->end = rng->capacity;
    return take(rng, out + have, len - have);
}

static uint64_t load_be(const uint8_t *p, size_t n) {
    uint64_t v = 0;
    size_t i;
    for (i = 0; i < n; i++) v = (v << 8) | p[i];
    return v;
}

int ocms_draw_bits64(ocms_rng *rng, uint64_t *out) {
    uint8_t raw[8];
    int rc = take(rng, raw, 8);
    *out = rc == OCMS_OK ? load_be(raw, 8) : 0;
    ocms_wipe(raw, sizeof raw);
    return rc;
}

int ocms_draw_below(ocms_rng *rng, uint64_t n, uint64_t *out) {
    uint8_t raw[8];
    unsigned bits = 0;
    uint64_t top, mask;
    size_t width;
    int tries;
    *out = 0;
    if (n == 0) return OCMS_E_PARAMS;
    if (n == 1) return OCMS_OK;
    for (top = n - 1; top; top >>= 1) bits++;
    width = (bits + 7) / 8;
    mask = bits == 64 ? ~0ULL : ((1ULL << bits) - 1);
    for (tries = 0; tries < OCMS_MAX_REJECTIONS; tries++) {
        uint64_t candidate;
        if (take(rng, raw, width) != OCMS_OK) {
            ocms_wipe(raw, sizeof raw);
            return OCMS_E_RANDOM;
        }
        candidate = load_be(raw, width) & mask;
        if (candidate < n) {
            *out = candidate;
            ocms_wipe(raw, sizeof raw);
            return OCMS_OK;
        }
    }
    ocms_wipe(raw, sizeof raw);
    return OCMS_E_RANDOM;
}

/* below(field order): a prime p; 2^64 (8 bytes, all kept); 2^128 (16 bytes, all kept). */
int ocms_draw_coefficient(const ocms_params *params, ocms_rng *rng, ocms_u128 *out) {
    uint8_t raw[16];
    int rc;
    out->hi = out->lo = 0;
    if (params->field == OCMS_FIELD_PRIME) return ocms_draw_below(rng, params->prime, &out->lo);
    if (params->field == OCMS_FIELD_GF2_64) return ocms_draw_bits64(rng, &out->lo);
    rc = take(rng, raw, 16);
    if (rc == OCMS_OK) {
        out->hi = load_be(raw, 8);
        out->lo = load_be(raw + 8, 8);
    }
    ocms_wipe(raw, sizeof raw);
    return rc;
}
