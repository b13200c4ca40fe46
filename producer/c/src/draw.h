/* The randomness contract's draws (cms_core/privatize.py, module doc), inlined into the report path:
 *   bits64()  = the next 8 bytes, big-endian;
 *   below(n)  = n == 1: nothing drawn, 0; else k = bit length of n - 1, per try the next ceil(k/8)
 *               bytes big-endian with the low k bits kept, the first try below n.
 * The public ocms_draw_* (rng.c) are these functions. */
#ifndef OCMS_DRAW_H
#define OCMS_DRAW_H

#include "internal.h"

/* A try fails with probability < 1/2; 1000 failures in a row (< 2^-1000) means a broken source. */
#define OCMS_MAX_REJECTIONS 1000

/* The slow path of draw_take: no buffer, or not enough buffered bytes (rng.c). */
int ocms_rng_take_slow(ocms_rng *rng, uint8_t *out, size_t len);

/* The next len (<= 16) bytes of the stream; consumed buffer bytes are wiped (a used keep draw
 * must not stay readable in memory). */
static inline int draw_take(ocms_rng *rng, uint8_t *out, size_t len) {
    if (rng->buffer != NULL && rng->end - rng->start >= len) {
        memcpy(out, rng->buffer + rng->start, len);
        ocms_wipe(rng->buffer + rng->start, len);
        rng->start += len;
        return OCMS_OK;
    }
    return ocms_rng_take_slow(rng, out, len);
}

static inline uint64_t draw_load_be(const uint8_t *p, size_t n) {
    uint64_t v = 0;
    size_t i;
    for (i = 0; i < n; i++) v = (v << 8) | p[i];
    return v;
}

static inline int draw_bits64(ocms_rng *rng, uint64_t *out) {
    uint8_t raw[8];
    int rc = draw_take(rng, raw, 8);
    *out = rc == OCMS_OK ? draw_load_be(raw, 8) : 0;
    ocms_wipe(raw, sizeof raw);
    return rc;
}

static inline int draw_below(ocms_rng *rng, uint64_t n, uint64_t *out) {
    uint8_t raw[8];
    unsigned bits;
    uint64_t mask;
    size_t width;
    int tries;
    *out = 0;
    if (n == 0) return OCMS_E_PARAMS;
    if (n == 1) return OCMS_OK;
    bits = ocms_bit_length(n - 1);
    width = (bits + 7) / 8;
    mask = bits == 64 ? ~0ULL : ((1ULL << bits) - 1);
    for (tries = 0; tries < OCMS_MAX_REJECTIONS; tries++) {
        uint64_t candidate;
        if (draw_take(rng, raw, width) != OCMS_OK) {
            ocms_wipe(raw, sizeof raw);
            return OCMS_E_RANDOM;
        }
        candidate = draw_load_be(raw, width) & mask;
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
static inline int draw_coefficient(const ocms_params *params, ocms_rng *rng, ocms_u128 *out) {
    uint8_t raw[16];
    int rc;
    out->hi = out->lo = 0;
    if (params->field == OCMS_FIELD_PRIME) return draw_below(rng, params->prime, &out->lo);
    if (params->field == OCMS_FIELD_GF2_64) return draw_bits64(rng, &out->lo);
    rc = draw_take(rng, raw, 16);
    if (rc == OCMS_OK) {
        out->hi = draw_load_be(raw, 8);
        out->lo = draw_load_be(raw + 8, 8);
    }
    ocms_wipe(raw, sizeof raw);
    return rc;
}

#endif
