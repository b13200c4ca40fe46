/* Longitudinal reports (issue 38; cms_core/longitudinal.py module doc, docs/device.md "Longitudinal reports"):
 * memoized two-round randomized response, byte for byte as the Python and JS clients
 * (tests/vectors/longitudinal_v1.json).
 *
 *   PRF(label)  the bytes BLAKE2b-512(key = device secret, label || i), i = 0, 1, ... (4 bytes big-endian)
 *   hash        a0, a1: the contract's first two draws from PRF("ocms-longitudinal-v1/hash" || F): fixed for the
 *               life of (device, metric version); direct RR: the identity, y = x
 *   memoized    randomized response over [g] of y keeping with T1, from PRF("ocms-longitudinal-v1/memo" || F || y)
 *   report      from rng (the CSPRNG): keep the memoized y1 when bits64() < T2, else other = below(g - 1),
 *               z = other < y1 ? other : other + 1
 *
 * F is the 8-byte parameter fingerprint of the report parameters (epsilon = eps_1, m = g). */
#include "draw.h"

#define LABEL_HASH "ocms-longitudinal-v1/hash"
#define LABEL_MEMO "ocms-longitudinal-v1/memo"
#define LABEL_SEEN "ocms-longitudinal-v1/seen"
#define LABEL_BYTES 25 /* each of the three labels */

typedef struct {
    const uint8_t *secret;
    size_t secret_len;
    uint8_t label[LABEL_BYTES + 8 + 4 + 4];
    size_t label_len;
    uint32_t counter;
    uint8_t block[64];
    size_t pos;
} prf_t;

static void put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static int prf_fill(void *ctx, uint8_t *out, size_t len) {
    prf_t *prf = (prf_t *)ctx;
    size_t i;
    for (i = 0; i < len; i++) {
        if (prf->pos == sizeof prf->block) {
            ocms_blake2b_state s;
            put_be32(prf->label + prf->label_len, prf->counter++);
            if (ocms_blake2b_init(&s, 64, prf->secret, prf->secret_len, NULL) != OCMS_OK) return -1;
            ocms_blake2b_update(&s, prf->label, prf->label_len + 4);
            ocms_blake2b_final(&s, prf->block);
            ocms_wipe(&s, sizeof s);
            prf->pos = 0;
        }
        out[i] = prf->block[prf->pos++];
    }
    return 0;
}

static void prf_init(prf_t *prf, ocms_rng *rng, const uint8_t *secret, size_t secret_len, const char *label,
                     const uint8_t fingerprint[8], const uint32_t *y) {
    memset(prf, 0, sizeof *prf);
    prf->secret = secret;
    prf->secret_len = secret_len;
    memcpy(prf->label, label, LABEL_BYTES);
    memcpy(prf->label + LABEL_BYTES, fingerprint, 8);
    prf->label_len = LABEL_BYTES + 8;
    if (y != NULL) {
        put_be32(prf->label + prf->label_len, *y);
        prf->label_len += 4;
    }
    prf->pos = sizeof prf->block;
    ocms_rng_init(rng, prf_fill, prf, NULL, 0);
}

/* Randomized response over [m] of y keeping when bits64() < threshold (the one-shot contract's last two draws). */
static int respond(ocms_rng *rng, uint64_t threshold, uint32_t m, uint32_t y, uint32_t *z) {
    uint64_t keep = 0, other = 0;
    int rc;
    if ((rc = draw_bits64(rng, &keep)) != OCMS_OK) return rc;
    if (keep < threshold) {
        *z = y;
    } else {
        if ((rc = draw_below(rng, (uint64_t)m - 1, &other)) != OCMS_OK) return rc;
        *z = (uint32_t)other + (uint32_t)(other >= y);
    }
    ocms_wipe(&keep, sizeof keep);
    ocms_wipe(&other, sizeof other);
    return OCMS_OK;
}

/* No libm here (the library's rule): T2 is checked against the keep threshold of the report parameters, which
 * belongs to eps_1 and m (the device config's loader checks T and T1 against exp, as for every keep threshold). */
int ocms_longitudinal_check(const ocms_longitudinal *l, const char **rule) {
    long double two64 = 18446744073709551616.0L, g, p1, p2, q2, keep, ratio, memo_ratio, target;
    if (rule != NULL) *rule = NULL;
    if (l == NULL || l->params == NULL) return fail_rule(rule, "no parameters");
    if (ocms_params_check(l->params, rule) != OCMS_OK) return OCMS_E_PARAMS;
    if (!(l->lifetime_epsilon > l->params->epsilon) || !(l->lifetime_epsilon <= 100.0))
        return fail_rule(rule, "lifetime_epsilon must be above epsilon and at most 100");
    if (l->memo_threshold == 0 || l->report_threshold == 0) return fail_rule(rule, "thresholds must be >= 1");
    g = (long double)l->params->m;
    target = (long double)l->params->keep_threshold / two64;
    target = target * (g - 1) / (1 - target); /* e^eps_1 as the one-shot threshold realises it */
    p1 = (long double)l->memo_threshold / two64;
    memo_ratio = p1 * (g - 1) / (1 - p1);
    if (!(memo_ratio > target)) return fail_rule(rule, "memo_threshold keeps less often than one report's threshold");
    p2 = (long double)l->report_threshold / two64;
    q2 = (1 - p2) / (g - 1);
    keep = p1 * p2 + (1 - p1) * q2;
    ratio = keep / ((1 - keep) / (g - 1));
    if (ratio > target * (1 + 1e-9L) || ratio < target * (1 - 1e-9L))
        return fail_rule(rule, "report_threshold with memo_threshold does not give one report the ratio e^epsilon");
    return OCMS_OK;
}

int ocms_longitudinal_privatize(const ocms_longitudinal *l, const uint8_t *secret, size_t secret_len,
                                const ocms_u128 *element, ocms_rng *rng, ocms_report *report, uint32_t *hashed) {
    const ocms_params *p;
    prf_t prf;
    ocms_rng derived;
    ocms_u128 h;
    uint32_t y = 0, y1 = 0;
    int rc;
    memset(report, 0, sizeof *report);
    if (l == NULL || l->params == NULL || secret == NULL || secret_len < 16 || secret_len > 64 || element == NULL ||
        rng == NULL || hashed == NULL)
        return OCMS_E_PARAMS;
    p = l->params;
    if (p->mechanism == OCMS_MECHANISM_DIRECT) {
        if (element->hi != 0 || element->lo >= p->m) return OCMS_E_VALUE;
        report->a1.lo = 1; /* the identity hash (0, 1), never sent */
        y = (uint32_t)element->lo;
    } else {
        /* a0, a1: the first two draws of ocms_privatize from the hash stream (the rest of its draws are unused) */
        prf_init(&prf, &derived, secret, secret_len, LABEL_HASH, p->fingerprint, NULL);
        rc = ocms_privatize(p, element, &derived, report);
        ocms_wipe(&prf, sizeof prf);
        if (rc != OCMS_OK) return rc;
        h = ocms_field_hash(p, &report->a0, &report->a1, element);
        y = ocms_mod_m(&h, p->m);
        ocms_wipe(&h, sizeof h);
    }
    report->params = p;
    report->level = 0;
    prf_init(&prf, &derived, secret, secret_len, LABEL_MEMO, p->fingerprint, &y);
    rc = respond(&derived, l->memo_threshold, p->m, y, &y1);
    ocms_wipe(&prf, sizeof prf);
    if (rc == OCMS_OK) rc = respond(rng, l->report_threshold, p->m, y1, &report->z);
    ocms_wipe(&y1, sizeof y1);
    if (rc != OCMS_OK) {
        memset(report, 0, sizeof *report);
        ocms_wipe(&y, sizeof y);
        return rc;
    }
    *hashed = y;
    ocms_wipe(&y, sizeof y);
    return OCMS_OK;
}

void ocms_longitudinal_seen_key(const ocms_longitudinal *l, uint32_t hashed, uint8_t out[OCMS_SEEN_KEY_BYTES]) {
    memcpy(out, LABEL_SEEN, LABEL_BYTES);
    memcpy(out + LABEL_BYTES, l->params->fingerprint, 8);
    put_be32(out + LABEL_BYTES + 8, hashed);
}
