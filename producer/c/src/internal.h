/* Library-private declarations of the OCMS C client. */
#ifndef OCMS_INTERNAL_H
#define OCMS_INTERNAL_H

#include "ocms_client.h"

#define OCMS_P64 0xffffffffffffffc5ULL /* 2^64 - 59, the largest prime below 2^64 */

#if defined(__SIZEOF_INT128__) && !defined(OCMS_NO_INT128)
#define OCMS_HAVE_INT128 1
__extension__ typedef unsigned __int128 ocms_uint128_t;
#else
#define OCMS_HAVE_INT128 0
#endif

#include <string.h>

/* Zero memory in a way the compiler may not drop (secrets: draws, hashes, elements). */
#if defined(__GNUC__) || defined(__clang__)
static inline void ocms_wipe(void *p, size_t n) {
    memset(p, 0, n);
    __asm__ __volatile__("" : : "r"(p) : "memory"); /* the zeros count as read: the store stays */
}
#else
void ocms_wipe_portable(void *p, size_t n);
#define ocms_wipe ocms_wipe_portable
#endif

/* Bit length of v (0 for 0). */
static inline unsigned ocms_bit_length(uint64_t v) {
#if defined(__GNUC__) || defined(__clang__)
    return v ? 64u - (unsigned)__builtin_clzll(v) : 0u;
#else
    unsigned n = 0;
    while (v) {
        n++;
        v >>= 1;
    }
    return n;
#endif
}

/* BLAKE2b personalisation: text zero-padded to 16 bytes. */
void ocms_person(uint8_t person[16], const char *text);

/* Field arithmetic: h(x) = a0 + a1 x in the field of params (field.c). */
ocms_u128 ocms_field_hash(const ocms_params *params, const ocms_u128 *a0, const ocms_u128 *a1, const ocms_u128 *x);
/* value mod m for m in [1, 2^32). */
uint32_t ocms_mod_m(const ocms_u128 *value, uint32_t m);
/* 64 x 64 -> 128 carry-less product, portable constant-time code (for tests of the dispatch). */
void ocms_clmul64_portable(uint64_t a, uint64_t b, uint64_t *hi, uint64_t *lo);

/* Bytes a field element takes on the wire: ceil(bits(order - 1) / 8). */
size_t ocms_coefficient_bytes(const ocms_params *params);
size_t ocms_z_bytes(uint32_t m);

/* A parameter check's refusal: the rule broken (a static string) for the caller, OCMS_E_PARAMS. */
static inline int fail_rule(const char **rule, const char *why) {
    if (rule != NULL) *rule = why;
    return OCMS_E_PARAMS;
}

#endif
