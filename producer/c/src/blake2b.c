/* BLAKE2b as specified by RFC 7693, with the parameter block's key length, digest length and
 * personalisation (the salt stays zero), as Python's hashlib.blake2b(digest_size=, key=, person=).
 * Used for string value fingerprints ("ocms-value-v1"), discovery prefix hashes ("ocms-prefix-v1"),
 * parameter fingerprints ("ocms-params") and, in the example program, keyed memo digests. */
#include <string.h>

#include "internal.h"

static const uint64_t IV[8] = {
    0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL, 0x3c6ef372fe94f82bULL, 0xa54ff53a5f1d36f1ULL,
    0x510e527fade682d1ULL, 0x9b05688c2b3e6c1fULL, 0x1f83d9abfb41bd6bULL, 0x5be0cd19137e2179ULL,
};

/* The message word schedule of RFC 7693 section 2.7; rounds 10 and 11 use rows 0 and 1 again. */
static const uint8_t SIGMA[10][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4},
    {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13},
    {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11},
    {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5},
    {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
};

static uint64_t rotr64(uint64_t x, unsigned n) { return (x >> n) | (x << (64 - n)); }

static uint64_t load_le64(const uint8_t *p) {
    uint64_t v = 0;
    int i;
    for (i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

#define G(a, b, c, d, x, y)              \
    do {                                 \
        v[a] = v[a] + v[b] + (x);        \
        v[d] = rotr64(v[d] ^ v[a], 32);  \
        v[c] = v[c] + v[d];              \
        v[b] = rotr64(v[b] ^ v[c], 24);  \
        v[a] = v[a] + v[b] + (y);        \
        v[d] = rotr64(v[d] ^ v[a], 16);  \
        v[c] = v[c] + v[d];              \
        v[b] = rotr64(v[b] ^ v[c], 63);  \
    } while (0)

static void compress(ocms_blake2b_state *s, int last) {
    uint64_t v[16], m[16];
    int i, r;
    for (i = 0; i < 16; i++) m[i] = load_le64(s->block + 8 * i);
    for (i = 0; i < 8; i++) {
        v[i] = s->h[i];
        v[i + 8] = IV[i];
    }
    v[12] ^= s->t[0];
    v[13] ^= s->t[1];
    if (last) v[14] = ~v[14];
    for (r = 0; r < 12; r++) {
        const uint8_t *sg = SIGMA[r % 10];
        G(0, 4, 8, 12, m[sg[0]], m[sg[1]]);
        G(1, 5, 9, 13, m[sg[2]], m[sg[3]]);
        G(2, 6, 10, 14, m[sg[4]], m[sg[5]]);
        G(3, 7, 11, 15, m[sg[6]], m[sg[7]]);
        G(0, 5, 10, 15, m[sg[8]], m[sg[9]]);
        G(1, 6, 11, 12, m[sg[10]], m[sg[11]]);
        G(2, 7, 8, 13, m[sg[12]], m[sg[13]]);
        G(3, 4, 9, 14, m[sg[14]], m[sg[15]]);
    }
    for (i = 0; i < 8; i++) s->h[i] ^= v[i] ^ v[i + 8];
    ocms_wipe(v, sizeof v);
    ocms_wipe(m, sizeof m);
}

static void add_counter(ocms_blake2b_state *s, uint64_t n) {
    s->t[0] += n;
    if (s->t[0] < n) s->t[1]++;
}

int ocms_blake2b_init(ocms_blake2b_state *s, size_t outlen, const void *key, size_t keylen, const uint8_t person[16]) {
    int i;
    if (s == NULL || outlen < 1 || outlen > 64 || keylen > 64 || (keylen > 0 && key == NULL)) return OCMS_E_PARAMS;
    memset(s, 0, sizeof *s);
    for (i = 0; i < 8; i++) s->h[i] = IV[i];
    s->h[0] ^= 0x01010000ULL ^ ((uint64_t)keylen << 8) ^ (uint64_t)outlen;
    if (person != NULL) {
        s->h[6] ^= load_le64(person);
        s->h[7] ^= load_le64(person + 8);
    }
    s->outlen = outlen;
    if (keylen > 0) { /* the key, zero padded, is the first block */
        memcpy(s->block, key, keylen);
        s->filled = 128;
    }
    return OCMS_OK;
}

void ocms_blake2b_update(ocms_blake2b_state *s, const void *data, size_t len) {
    const uint8_t *in = (const uint8_t *)data;
    while (len > 0) {
        size_t take;
        if (s->filled == 128) { /* compress a full block only once more input follows it */
            add_counter(s, 128);
            compress(s, 0);
            s->filled = 0;
        }
        take = 128 - s->filled;
        if (take > len) take = len;
        memcpy(s->block + s->filled, in, take);
        s->filled += take;
        in += take;
        len -= take;
    }
}

void ocms_blake2b_final(ocms_blake2b_state *s, uint8_t *out) {
    size_t i;
    add_counter(s, (uint64_t)s->filled);
    memset(s->block + s->filled, 0, 128 - s->filled);
    compress(s, 1);
    for (i = 0; i < s->outlen; i++) out[i] = (uint8_t)(s->h[i / 8] >> (8 * (i % 8)));
    ocms_wipe(s, sizeof *s);
}

void ocms_person(uint8_t person[16], const char *text) {
    size_t n = strlen(text);
    memset(person, 0, 16);
    memcpy(person, text, n > 16 ? 16 : n);
}
