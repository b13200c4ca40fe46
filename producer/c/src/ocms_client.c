/* The OCMS C client: parameters, values, discovery prefixes, privatization, wire v1, the device path.
 * Every rule here mirrors a Python function named in its comment; tests/producer/test_c_client.py
 * replays tests/vectors/ against it. */
#include <string.h>

#include "draw.h"

const char *ocms_strerror(int code) {
    switch (code) {
    case OCMS_OK: return "ok";
    case OCMS_MEMOIZED: return "memoized: this period's report of the same value was re-sent (nothing charged)";
    case OCMS_E_PARAMS: return "inconsistent parameters";
    case OCMS_E_VALUE: return "value not in the metric's dictionary";
    case OCMS_E_RANDOM: return "the randomness source failed";
    case OCMS_E_BUFFER: return "output buffer too small";
    case OCMS_E_BUDGET: return "privacy budget exhausted for this metric and period";
    case OCMS_E_LEDGER: return "the ledger could not record the charge";
    case OCMS_E_MESSAGE: return "not a valid wire-v1 message";
    default: return "unknown error";
    }
}

/* ------------------------------------------------------------------ parameters */
int ocms_params_check(const ocms_params *p, const char **rule) {
    if (rule != NULL) *rule = NULL;
    if (p == NULL) return fail_rule(rule, "no parameters");
    if (!(p->epsilon > 0.0 && p->epsilon <= 100.0)) return fail_rule(rule, "epsilon must be in (0, 100]");
    if (p->m < 2) return fail_rule(rule, "the hash range m must be >= 2");
    if (p->keep_threshold == 0) return fail_rule(rule, "keep_threshold must be > 0");
    if (p->field != OCMS_FIELD_PRIME && p->field != OCMS_FIELD_GF2_64 && p->field != OCMS_FIELD_GF2_128)
        return fail_rule(rule, "unknown field kind");
    if (p->field == OCMS_FIELD_PRIME && (p->prime < 3 || p->prime > OCMS_P64 || (p->prime & 1) == 0))
        return fail_rule(rule, "a prime field needs an odd prime order in [3, 2^64 - 59]");
    if (p->domain != OCMS_DOMAIN_INTEGERS && p->domain != OCMS_DOMAIN_STRINGS) return fail_rule(rule, "unknown value domain");
    if (p->mechanism == OCMS_MECHANISM_DIRECT) {
        if (p->domain != OCMS_DOMAIN_INTEGERS) return fail_rule(rule, "direct randomized response needs integer values");
        if (p->field != OCMS_FIELD_PRIME) return fail_rule(rule, "direct randomized response uses a prime field");
        if (p->max_value != (uint64_t)p->m - 1) return fail_rule(rule, "direct randomized response has m = d");
        return OCMS_OK;
    }
    if (p->mechanism != OCMS_MECHANISM_OCMS) return fail_rule(rule, "unknown mechanism");
    if (p->domain == OCMS_DOMAIN_STRINGS && p->field != OCMS_FIELD_GF2_128)
        return fail_rule(rule, "string values need the field GF(2^128)");
    if (p->field == OCMS_FIELD_PRIME && p->max_value > p->prime - 2)
        return fail_rule(rule, "the prime field cannot hold the dictionary (needs p >= d + 1)");
    return OCMS_OK;
}

static void store_be(uint8_t *out, uint64_t v, size_t n) {
    while (n--) {
        out[n] = (uint8_t)v;
        v >>= 8;
    }
}

int ocms_params_fingerprint(const ocms_params *p, const char *binding, size_t binding_len, uint8_t out[8]) {
    ocms_blake2b_state s;
    uint8_t person[16], head[13], d[17], len2[2];
    uint64_t eps_bits;
    if (ocms_params_check(p, NULL) != OCMS_OK || binding_len > 0xffff || (binding == NULL && binding_len > 0))
        return OCMS_E_PARAMS;
    ocms_person(person, "ocms-params");
    ocms_blake2b_init(&s, 8, NULL, 0, person);
    /* struct.pack(">BdI", 1, epsilon, m) */
    memcpy(&eps_bits, &p->epsilon, 8);
    head[0] = 1;
    store_be(head + 1, eps_bits, 8);
    store_be(head + 9, p->m, 4);
    ocms_blake2b_update(&s, head, sizeof head);
    /* the field descriptor */
    if (p->field == OCMS_FIELD_PRIME) {
        uint8_t order[8];
        store_be(order, p->prime, 8);
        ocms_blake2b_update(&s, "prime:", 6);
        ocms_blake2b_update(&s, order, 8);
    } else {
        uint8_t degree[2], poly[17];
        memset(poly, 0, sizeof poly);
        if (p->field == OCMS_FIELD_GF2_64) {
            store_be(degree, 64, 2);
            poly[8] = 1; /* x^64 + x^4 + x^3 + x + 1 */
            poly[16] = 0x1b;
        } else {
            store_be(degree, 128, 2);
            poly[0] = 1; /* x^128 + x^7 + x^2 + x + 1 */
            poly[16] = 0x87;
        }
        ocms_blake2b_update(&s, "binary:", 7);
        ocms_blake2b_update(&s, degree, 2);
        ocms_blake2b_update(&s, poly, 17);
    }
    /* d as 17 bytes: max_value + 1 (up to 2^64), or 2^128 for strings */
    memset(d, 0, sizeof d);
    if (p->domain == OCMS_DOMAIN_STRINGS) {
        d[0] = 1;
    } else if (p->max_value == ~0ULL) {
        d[8] = 1;
    } else {
        store_be(d + 9, p->max_value + 1, 8);
    }
    ocms_blake2b_update(&s, d, 17);
    if (p->domain == OCMS_DOMAIN_STRINGS) ocms_blake2b_update(&s, "string", 6);
    else ocms_blake2b_update(&s, "integer", 7);
    if (p->mechanism == OCMS_MECHANISM_DIRECT) ocms_blake2b_update(&s, "mechanismdirect", 15);
    if (binding != NULL) {
        store_be(len2, binding_len, 2);
        ocms_blake2b_update(&s, "binding", 7);
        ocms_blake2b_update(&s, len2, 2);
        ocms_blake2b_update(&s, binding, binding_len);
    }
    ocms_blake2b_final(&s, out);
    return OCMS_OK;
}

size_t ocms_record_size(const ocms_params *p) {
    size_t z = ocms_z_bytes(p->m);
    return p->mechanism == OCMS_MECHANISM_DIRECT ? z : 2 * ocms_coefficient_bytes(p) + z;
}

size_t ocms_message_size(const ocms_params *p, uint32_t count) {
    return OCMS_HEADER_BYTES + (size_t)count * ocms_record_size(p);
}

uint64_t ocms_epsilon_nano(double epsilon) {
    double scaled;
    uint64_t units;
    if (!(epsilon > 0.0) || epsilon > 1e9) return ~0ULL; /* nothing fits: refused by any budget */
    scaled = epsilon * 1e9;
    units = (uint64_t)(scaled + 0.5);
    /* exact when epsilon is the double nearest units / 10^9: then that decimal is its shortest
       spelling (doubles this small are far closer together than 10^-9) */
    if ((double)units / 1e9 == epsilon) return units;
    units = (uint64_t)scaled;
    return units + 2; /* above scaled even after its rounding: never under-count */
}

/* ------------------------------------------------------------------ values */
int ocms_element_integer(const ocms_params *p, uint64_t value, ocms_u128 *element) {
    element->hi = element->lo = 0;
    if (p->domain != OCMS_DOMAIN_INTEGERS || value > p->max_value) return OCMS_E_VALUE;
    element->lo = value;
    return OCMS_OK;
}

static void fingerprint_with(const char *person_text, const void *bytes, size_t len, uint8_t *out, size_t outlen) {
    ocms_blake2b_state s;
    uint8_t person[16];
    ocms_person(person, person_text);
    ocms_blake2b_init(&s, outlen, NULL, 0, person);
    ocms_blake2b_update(&s, bytes, len);
    ocms_blake2b_final(&s, out);
}

static uint64_t load_be64(const uint8_t *p) {
    uint64_t v = 0;
    int i;
    for (i = 0; i < 8; i++) v = (v << 8) | p[i];
    return v;
}

void ocms_string_fingerprint(const void *bytes, size_t len, ocms_u128 *element) {
    uint8_t digest[16];
    fingerprint_with("ocms-value-v1", bytes, len, digest, 16);
    element->hi = load_be64(digest);
    element->lo = load_be64(digest + 8);
    ocms_wipe(digest, sizeof digest);
}

/* ------------------------------------------------------------------ discovery */
int ocms_discovery_check(const ocms_discovery *d, const char **rule) {
    uint32_t i, length, step, expected_levels;
    if (rule != NULL) *rule = NULL;
    if (d == NULL) return fail_rule(rule, "no discovery domain");
    if (d->kind == OCMS_DISCOVERY_STRINGS) {
        uint64_t branching = 0, power = 1;
        if (d->alphabet != NULL && (d->alphabet_size < 1 || d->alphabet_size > 65535))
            return fail_rule(rule, "the alphabet must hold 1..65535 characters");
        if (d->max_length < 1 || d->max_length > 4096) return fail_rule(rule, "max_length must be in [1, 4096]");
        if (d->symbols_per_level < 1 || d->symbols_per_level > d->max_length)
            return fail_rule(rule, "symbols_per_level must be in [1, max_length]");
        for (i = 0; i <= d->symbols_per_level; i++) { /* branching(1) = sum of A^j, j = 0..k */
            branching += power;
            if (branching > 65536) return fail_rule(rule, "more than 65,536 candidates per prefix per level");
            power *= d->alphabet != NULL ? d->alphabet_size : 256;
        }
        length = d->max_length;
        step = d->symbols_per_level;
    } else if (d->kind == OCMS_DISCOVERY_INTEGERS) {
        if (d->bits < 1 || d->bits > 64) return fail_rule(rule, "bits must be in [1, 64]");
        if (d->bits_per_level < 1 || d->bits_per_level > d->bits || d->bits_per_level > 16)
            return fail_rule(rule, "bits_per_level must be in [1, min(bits, 16)]");
        length = d->bits;
        step = d->bits_per_level;
    } else {
        return fail_rule(rule, "unknown discovery kind");
    }
    expected_levels = (length + step - 1) / step;
    if (d->levels != expected_levels || d->levels > 256) return fail_rule(rule, "levels must be ceil(length / step) <= 256");
    if (d->level_params == NULL) return fail_rule(rule, "no level parameters");
    for (i = 0; i < d->levels; i++) {
        const ocms_params *lp = &d->level_params[i];
        if (ocms_params_check(lp, rule) != OCMS_OK) return OCMS_E_PARAMS;
        if (lp->mechanism != OCMS_MECHANISM_OCMS || lp->domain != OCMS_DOMAIN_INTEGERS)
            return fail_rule(rule, "discovery levels use OCMS+RR over integers");
        if (d->kind == OCMS_DISCOVERY_STRINGS && lp->max_value != (1ULL << 63) - 1)
            return fail_rule(rule, "string discovery levels have the dictionary [0, 2^63)");
        if (d->kind == OCMS_DISCOVERY_INTEGERS) {
            uint32_t plen = (i + 1) * step < length ? (i + 1) * step : length;
            uint64_t expect = plen == 64 ? ~0ULL : ((1ULL << plen) - 1);
            if (lp->max_value != expect) return fail_rule(rule, "integer discovery level L has the dictionary [0, 2^prefix_length)");
        }
    }
    return OCMS_OK;
}

/* Strict UTF-8 decoding of one code point at s[*pos]; -1 when malformed (overlong, surrogate, > U+10FFFF). */
static int32_t next_code_point(const uint8_t *s, size_t len, size_t *pos) {
    uint32_t c = s[*pos], cp, min;
    size_t n, i;
    if (c < 0x80) {
        *pos += 1;
        return (int32_t)c;
    }
    if ((c & 0xe0) == 0xc0) n = 2, cp = c & 0x1f, min = 0x80;
    else if ((c & 0xf0) == 0xe0) n = 3, cp = c & 0x0f, min = 0x800;
    else if ((c & 0xf8) == 0xf0) n = 4, cp = c & 0x07, min = 0x10000;
    else return -1;
    if (*pos + n > len) return -1;
    for (i = 1; i < n; i++) {
        uint8_t b = s[*pos + i];
        if ((b & 0xc0) != 0x80) return -1;
        cp = (cp << 6) | (b & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return -1;
    *pos += n;
    return (int32_t)cp;
}

/* Symbol reader over a string value: the alphabet index of each character, or each byte (utf8). */
typedef struct {
    const ocms_discovery *d;
    const uint8_t *s;
    size_t len, pos;
} symbol_reader;

/* 1 with *symbol, 0 at the end, -1 for a character outside the alphabet or malformed UTF-8. */
static int next_symbol(symbol_reader *r, uint32_t *symbol) {
    int32_t cp;
    uint32_t i;
    if (r->pos >= r->len) return 0;
    if (r->d->alphabet == NULL) {
        *symbol = r->s[r->pos++];
        return 1;
    }
    cp = next_code_point(r->s, r->len, &r->pos);
    if (cp < 0) return -1;
    for (i = 0; i < r->d->alphabet_size; i++) {
        if (r->d->alphabet[i] == (uint32_t)cp) {
            *symbol = i;
            return 1;
        }
    }
    return -1;
}

/* Every character of the value is a symbol of the domain (prefix_of's validation); *count symbols. */
static int string_symbols(const ocms_discovery *d, const void *value, size_t len, size_t *count) {
    symbol_reader r;
    uint32_t symbol;
    int got;
    r.d = d;
    r.s = (const uint8_t *)value;
    r.len = len;
    r.pos = 0;
    *count = 0;
    if (value == NULL && len > 0) return OCMS_E_VALUE;
    while ((got = next_symbol(&r, &symbol)) == 1) (*count)++;
    return got == 0 ? OCMS_OK : OCMS_E_VALUE;
}

static uint32_t prefix_length(const ocms_discovery *d, uint32_t level) {
    uint32_t length = d->kind == OCMS_DISCOVERY_STRINGS ? d->max_length : d->bits;
    uint32_t step = d->kind == OCMS_DISCOVERY_STRINGS ? d->symbols_per_level : d->bits_per_level;
    uint64_t want = (uint64_t)level * step;
    return want < length ? (uint32_t)want : length;
}

static unsigned bit_length(uint64_t v) {
    unsigned n = 0;
    while (v) {
        n++;
        v >>= 1;
    }
    return n;
}

int ocms_prefix_element_string(const ocms_discovery *d, const void *value, size_t len, uint32_t level,
                               ocms_u128 *element) {
    symbol_reader r;
    ocms_blake2b_state s;
    uint8_t person[16], be[4], digest[8];
    uint64_t alphabet, branching = 0, power = 1, index = 0, rank = 0, parent_hash;
    uint32_t length, step, child_bits, i, symbol;
    size_t count, plen, parent_length, tail;
    int ended;
    element->hi = element->lo = 0;
    if (d->kind != OCMS_DISCOVERY_STRINGS || level < 1 || level > d->levels) return OCMS_E_VALUE;
    alphabet = d->alphabet != NULL ? d->alphabet_size : 256;
    step = d->symbols_per_level;
    if (alphabet < 1 || step < 1 || step > d->max_length) return OCMS_E_PARAMS;
    for (i = 0; i <= step; i++) { /* branching(1); child_bits = max(1, bit_length(branching - 1)) */
        branching += power;
        if (branching > 65536) return OCMS_E_PARAMS; /* ocms_discovery_check's bound: the shifts below stay defined */
        power *= alphabet;
    }
    if (string_symbols(d, value, len, &count) != OCMS_OK) return OCMS_E_VALUE;
    child_bits = bit_length(branching - 1);
    if (child_bits < 1) child_bits = 1;
    length = prefix_length(d, level);
    ended = count < length;
    plen = ended ? count : length;
    /* the parent is the prefix without its last step (an ended value's tail may be shorter than a step) */
    parent_length = plen == 0 ? 0 : ((plen - (ended ? 0 : 1)) / step) * step;
    /* H(parent): blake2b(len(parent) as 4 bytes | each symbol as 2 bytes, 8 bytes, "ocms-prefix-v1") */
    ocms_person(person, "ocms-prefix-v1");
    ocms_blake2b_init(&s, 8, NULL, 0, person);
    store_be(be, parent_length, 4);
    ocms_blake2b_update(&s, be, 4);
    r.d = d;
    r.s = (const uint8_t *)value;
    r.len = len;
    r.pos = 0;
    for (i = 0; i < parent_length; i++) {
        next_symbol(&r, &symbol);
        store_be(be, symbol, 2);
        ocms_blake2b_update(&s, be, 2);
    }
    ocms_blake2b_final(&s, digest);
    parent_hash = load_be64(digest) >> (64 - (63 - child_bits));
    /* the tail's position among the parent's children: sum of A^i (i < t), then its rank in base A */
    tail = plen - parent_length;
    for (power = 1, i = 0; i < tail; i++) {
        index += power;
        power *= alphabet;
    }
    for (i = 0; i < tail; i++) {
        next_symbol(&r, &symbol);
        rank = rank * alphabet + symbol;
    }
    element->lo = (parent_hash << child_bits) + index + rank;
    ocms_wipe(digest, sizeof digest);
    ocms_wipe(be, sizeof be);
    return OCMS_OK;
}

int ocms_prefix_element_integer(const ocms_discovery *d, uint64_t value, uint32_t level, ocms_u128 *element) {
    uint32_t length;
    element->hi = element->lo = 0;
    if (d->kind != OCMS_DISCOVERY_INTEGERS || level < 1 || level > d->levels) return OCMS_E_VALUE;
    if (d->bits < 1 || d->bits > 64 || d->bits_per_level < 1) return OCMS_E_PARAMS;
    if (d->bits < 64 && value >> d->bits) return OCMS_E_VALUE;
    length = prefix_length(d, level);
    element->lo = value >> (d->bits - length);
    return OCMS_OK;
}

/* ------------------------------------------------------------------ privatization */
static int element_in_field(const ocms_params *p, const ocms_u128 *x) {
    if (p->mechanism == OCMS_MECHANISM_DIRECT) return x->hi == 0 && x->lo < p->m;
    if (p->field == OCMS_FIELD_PRIME) return x->hi == 0 && x->lo < p->prime;
    if (p->field == OCMS_FIELD_GF2_64) return x->hi == 0;
    return 1;
}

int ocms_privatize(const ocms_params *p, const ocms_u128 *element, ocms_rng *rng, ocms_report *report) {
    ocms_u128 h;
    uint64_t keep_draw = 0, other = 0;
    uint32_t y;
    int rc;
    memset(report, 0, sizeof *report);
    if (p == NULL || element == NULL || rng == NULL || p->m < 2 || p->keep_threshold == 0 ||
        (p->field == OCMS_FIELD_PRIME && p->prime < 3) ||
        (p->field != OCMS_FIELD_PRIME && p->field != OCMS_FIELD_GF2_64 && p->field != OCMS_FIELD_GF2_128))
        return OCMS_E_PARAMS;
    if (!element_in_field(p, element)) return OCMS_E_VALUE;
    report->params = p;
    if (p->mechanism == OCMS_MECHANISM_DIRECT) {
        report->a1.lo = 1; /* the identity hash (0, 1), never sent */
        y = (uint32_t)element->lo;
    } else {
        if ((rc = draw_coefficient(p, rng, &report->a0)) != OCMS_OK) goto failed;
        if ((rc = draw_coefficient(p, rng, &report->a1)) != OCMS_OK) goto failed;
        h = ocms_field_hash(p, &report->a0, &report->a1, element);
        y = ocms_mod_m(&h, p->m);
        ocms_wipe(&h, sizeof h);
    }
    if ((rc = draw_bits64(rng, &keep_draw)) != OCMS_OK) goto failed;
    if (keep_draw < p->keep_threshold) {
        report->z = y;
    } else {
        if ((rc = draw_below(rng, (uint64_t)p->m - 1, &other)) != OCMS_OK) goto failed;
        report->z = (uint32_t)other + (uint32_t)(other >= y); /* uniform over the m - 1 others */
    }
    ocms_wipe(&keep_draw, sizeof keep_draw);
    ocms_wipe(&other, sizeof other);
    ocms_wipe(&y, sizeof y);
    return OCMS_OK;
failed:
    ocms_wipe(&y, sizeof y);
    memset(report, 0, sizeof *report);
    return rc;
}

static int draw_level(const ocms_discovery *d, ocms_rng *rng, uint32_t *level) {
    uint64_t drawn;
    int rc;
    if (d->level_params == NULL || d->levels < 1) return OCMS_E_PARAMS;
    rc = draw_below(rng, d->levels, &drawn);
    *level = (uint32_t)drawn + 1;
    return rc;
}

int ocms_privatize_integer(const ocms_metric *metric, uint64_t value, ocms_rng *rng, ocms_report *report) {
    const ocms_discovery *d = metric->discovery;
    ocms_u128 element;
    uint32_t level;
    int rc;
    memset(report, 0, sizeof *report);
    if ((rc = ocms_element_integer(metric->params, value, &element)) != OCMS_OK) return rc;
    if (d == NULL) {
        rc = ocms_privatize(metric->params, &element, rng, report);
        ocms_wipe(&element, sizeof element);
        return rc;
    }
    /* validate before anything is drawn: the prefix at level 1 exists */
    if ((rc = ocms_prefix_element_integer(d, value, 1, &element)) != OCMS_OK) return rc;
    if ((rc = draw_level(d, rng, &level)) != OCMS_OK) return rc;
    if ((rc = ocms_prefix_element_integer(d, value, level, &element)) == OCMS_OK)
        rc = ocms_privatize(&d->level_params[level - 1], &element, rng, report);
    report->level = rc == OCMS_OK ? level : 0;
    ocms_wipe(&element, sizeof element);
    return rc;
}

int ocms_privatize_string(const ocms_metric *metric, const void *value, size_t len, ocms_rng *rng,
                          ocms_report *report) {
    const ocms_discovery *d = metric->discovery;
    ocms_u128 element;
    uint32_t level;
    size_t count;
    int rc;
    memset(report, 0, sizeof *report);
    if (metric->params->domain != OCMS_DOMAIN_STRINGS || (value == NULL && len > 0)) return OCMS_E_VALUE;
    if (d == NULL) {
        ocms_string_fingerprint(value, len, &element);
        rc = ocms_privatize(metric->params, &element, rng, report);
        ocms_wipe(&element, sizeof element);
        return rc;
    }
    if (d->kind != OCMS_DISCOVERY_STRINGS) return OCMS_E_VALUE;
    if ((rc = string_symbols(d, value, len, &count)) != OCMS_OK) return rc;
    if ((rc = draw_level(d, rng, &level)) != OCMS_OK) return rc;
    if ((rc = ocms_prefix_element_string(d, value, len, level, &element)) == OCMS_OK)
        rc = ocms_privatize(&d->level_params[level - 1], &element, rng, report);
    report->level = rc == OCMS_OK ? level : 0;
    ocms_wipe(&element, sizeof element);
    return rc;
}

/* ------------------------------------------------------------------ wire v1 */
static void write_header(uint8_t *out, const ocms_params *p, uint8_t kind, uint32_t count) {
    out[0] = 0x4f; /* "OC" */
    out[1] = 0x43;
    out[2] = 1; /* version */
    out[3] = kind;
    memcpy(out + 4, p->fingerprint, 8);
    store_be(out + 12, count, 4);
}

static uint8_t *write_element(uint8_t *out, const ocms_u128 *v, size_t width) {
    if (width > 8) {
        store_be(out, v->hi, width - 8);
        store_be(out + width - 8, v->lo, 8);
    } else {
        store_be(out, v->lo, width);
    }
    return out + width;
}

static uint8_t *write_record(uint8_t *out, const ocms_report *r) {
    const ocms_params *p = r->params;
    size_t zw = ocms_z_bytes(p->m);
    if (p->mechanism != OCMS_MECHANISM_DIRECT) {
        size_t w = ocms_coefficient_bytes(p);
        out = write_element(out, &r->a0, w);
        out = write_element(out, &r->a1, w);
    }
    store_be(out, r->z, zw);
    return out + zw;
}

static int report_fits(const ocms_report *r) {
    const ocms_params *p = r->params;
    return p != NULL && r->z < p->m && (p->mechanism == OCMS_MECHANISM_DIRECT ||
                                        (element_in_field(p, &r->a0) && element_in_field(p, &r->a1)));
}

int ocms_encode_report(const ocms_report *report, uint8_t *out, size_t capacity, size_t *length) {
    size_t need;
    *length = 0;
    if (report == NULL || !report_fits(report)) return OCMS_E_PARAMS;
    need = ocms_message_size(report->params, 1);
    if (capacity < need) return OCMS_E_BUFFER;
    write_header(out, report->params, 1, 1);
    write_record(out + OCMS_HEADER_BYTES, report);
    *length = need;
    return OCMS_OK;
}

int ocms_encode_frame(const ocms_report *reports, uint32_t count, uint8_t *out, size_t capacity, size_t *length) {
    const ocms_params *p;
    uint8_t *at;
    uint32_t i;
    *length = 0;
    if (reports == NULL || count < 1 || count > OCMS_MAX_FRAME_RECORDS || reports[0].params == NULL)
        return OCMS_E_PARAMS;
    p = reports[0].params;
    for (i = 0; i < count; i++) {
        if (!report_fits(&reports[i]) || memcmp(reports[i].params->fingerprint, p->fingerprint, 8) != 0)
            return OCMS_E_PARAMS;
    }
    if (capacity < ocms_message_size(p, count)) return OCMS_E_BUFFER;
    write_header(out, p, 2, count);
    at = out + OCMS_HEADER_BYTES;
    for (i = 0; i < count; i++) at = write_record(at, &reports[i]);
    *length = (size_t)(at - out);
    return OCMS_OK;
}

static int reject(const char **reason, const char *code) {
    if (reason != NULL) *reason = code;
    return OCMS_E_MESSAGE;
}

static int coefficient_ok(const ocms_params *p, const uint8_t *raw, size_t width) {
    uint64_t v = 0;
    size_t i;
    if (p->field != OCMS_FIELD_PRIME) return 1;
    for (i = 0; i < width; i++) v = (v << 8) | raw[i];
    return v < p->prime;
}

int ocms_message_check(const ocms_params *sets, size_t nsets, const uint8_t *msg, size_t length, size_t *which,
                       uint32_t *count, const char **reason) {
    const ocms_params *p = NULL;
    size_t i, size, expected, w, zw, body;
    uint32_t n, r;
    if (reason != NULL) *reason = NULL;
    if (which != NULL) *which = 0;
    if (count != NULL) *count = 0;
    if (msg == NULL && length > 0) return OCMS_E_PARAMS;
    if (length < OCMS_HEADER_BYTES) return reject(reason, "truncated");
    if (msg[0] != 0x4f || msg[1] != 0x43) return reject(reason, "bad_magic");
    if (msg[2] != 1) return reject(reason, "bad_version");
    if (msg[3] != 1 && msg[3] != 2) return reject(reason, "bad_kind");
    for (i = 0; i < nsets; i++) {
        if (memcmp(sets[i].fingerprint, msg + 4, 8) == 0) {
            p = &sets[i];
            if (which != NULL) *which = i;
            break;
        }
    }
    if (p == NULL) return reject(reason, "unknown_fingerprint");
    n = ((uint32_t)msg[12] << 24) | ((uint32_t)msg[13] << 16) | ((uint32_t)msg[14] << 8) | msg[15];
    if (msg[3] == 1 && n != 1) return reject(reason, "count_mismatch");
    if (n == 0 || n > OCMS_MAX_FRAME_RECORDS) return reject(reason, "count_mismatch");
    size = ocms_record_size(p);
    expected = OCMS_HEADER_BYTES + (size_t)n * size;
    if (length < expected) return reject(reason, "truncated");
    if (length > expected) {
        body = length - OCMS_HEADER_BYTES;
        return reject(reason, body % size == 0 ? "count_mismatch" : "oversized");
    }
    zw = ocms_z_bytes(p->m);
    w = p->mechanism == OCMS_MECHANISM_DIRECT ? 0 : ocms_coefficient_bytes(p);
    if (w > 0) {
        for (r = 0; r < n; r++) {
            const uint8_t *rec = msg + OCMS_HEADER_BYTES + (size_t)r * size;
            if (!coefficient_ok(p, rec, w) || !coefficient_ok(p, rec + w, w)) return reject(reason, "coefficient_out_of_field");
        }
    }
    for (r = 0; r < n; r++) {
        const uint8_t *z = msg + OCMS_HEADER_BYTES + (size_t)r * size + 2 * w;
        uint64_t v = 0;
        for (i = 0; i < zw; i++) v = (v << 8) | z[i];
        if (v >= p->m) return reject(reason, "z_out_of_range");
    }
    if (count != NULL) *count = n;
    return OCMS_OK;
}

/* ------------------------------------------------------------------ the device path */
/* fingerprint | element as coefficient_bytes big-endian (producer.reporter.value_key). */
static size_t value_key(const ocms_params *p, const ocms_u128 *element, uint8_t key[OCMS_VALUE_KEY_BYTES]) {
    size_t w = ocms_coefficient_bytes(p);
    memcpy(key, p->fingerprint, 8);
    write_element(key + 8, element, w);
    return 8 + w;
}

static uint32_t level_of(const ocms_metric *metric, const uint8_t *message, size_t length) {
    uint32_t i;
    if (metric->discovery == NULL || length < OCMS_HEADER_BYTES) return 0;
    for (i = 0; i < metric->discovery->levels; i++) {
        if (memcmp(metric->discovery->level_params[i].fingerprint, message + 4, 8) == 0) return i + 1;
    }
    return 0;
}

static int finish(const ocms_metric *metric, const ocms_report *report, const uint8_t *key, size_t key_len,
                  const ocms_ledger *ledger, uint8_t *out, size_t capacity, ocms_sent *sent) {
    size_t length;
    int rc = ocms_encode_report(report, out, capacity, &length);
    if (rc == OCMS_OK && ledger != NULL) {
        rc = ledger->charge(ledger->ctx, metric->name, ocms_epsilon_nano(metric->params->epsilon), key, key_len, out,
                            &length, capacity);
        if (rc == OCMS_MEMOIZED) {
            if (length < OCMS_HEADER_BYTES || length > capacity) {
                rc = OCMS_E_LEDGER;
            } else {
                sent->memoized = 1;
                sent->length = length;
                sent->level = level_of(metric, out, length);
                return OCMS_OK;
            }
        } else if (rc != OCMS_OK && rc != OCMS_E_BUDGET && rc != OCMS_E_LEDGER) {
            rc = OCMS_E_LEDGER;
        }
    }
    if (rc != OCMS_OK) {
        ocms_wipe(out, capacity < OCMS_MAX_REPORT_MESSAGE ? capacity : OCMS_MAX_REPORT_MESSAGE);
        return rc;
    }
    sent->length = length;
    sent->level = report->level;
    return OCMS_OK;
}

/* A value of either kind, as the two public entry points take it. */
typedef struct {
    int is_string;
    uint64_t integer;
    const void *bytes;
    size_t len;
} value_t;

/* The memoization key: the value as the last level describes it (the whole value, not the level
 * drawn) for a discoverable metric, else its element; 0 when the value is invalid. */
static size_t memo_key(const ocms_metric *metric, const value_t *v, uint8_t key[OCMS_VALUE_KEY_BYTES]) {
    const ocms_discovery *d = metric->discovery;
    const ocms_params *p = d != NULL ? &d->level_params[d->levels - 1] : metric->params;
    ocms_u128 element;
    size_t key_len;
    int rc;
    if (d != NULL) {
        rc = v->is_string ? ocms_prefix_element_string(d, v->bytes, v->len, d->levels, &element)
                          : ocms_prefix_element_integer(d, v->integer, d->levels, &element);
    } else if (v->is_string) {
        ocms_string_fingerprint(v->bytes, v->len, &element);
        rc = OCMS_OK;
    } else {
        rc = ocms_element_integer(p, v->integer, &element);
    }
    key_len = rc == OCMS_OK ? value_key(p, &element, key) : 0;
    ocms_wipe(&element, sizeof element);
    return key_len;
}

static int report_value(const ocms_metric *metric, const value_t *v, ocms_rng *rng, const ocms_ledger *ledger,
                        uint8_t *out, size_t capacity, ocms_sent *sent) {
    ocms_report report;
    uint8_t key[OCMS_VALUE_KEY_BYTES];
    size_t key_len = 0;
    int rc;
    if (sent != NULL) memset(sent, 0, sizeof *sent);
    if (metric == NULL || metric->params == NULL || metric->name == NULL || out == NULL || sent == NULL || rng == NULL)
        return OCMS_E_PARAMS;
    rc = v->is_string ? ocms_privatize_string(metric, v->bytes, v->len, rng, &report)
                      : ocms_privatize_integer(metric, v->integer, rng, &report);
    if (rc != OCMS_OK) return rc;
    if (ledger != NULL && metric->memoize) key_len = memo_key(metric, v, key);
    rc = finish(metric, &report, key_len ? key : NULL, key_len, ledger, out, capacity, sent);
    ocms_wipe(key, sizeof key);
    ocms_wipe(&report, sizeof report);
    return rc;
}

int ocms_report_integer(const ocms_metric *metric, uint64_t value, ocms_rng *rng, const ocms_ledger *ledger,
                        uint8_t *out, size_t capacity, ocms_sent *sent) {
    value_t v = {0, 0, NULL, 0};
    v.integer = value;
    return report_value(metric, &v, rng, ledger, out, capacity, sent);
}

int ocms_report_string(const ocms_metric *metric, const void *value, size_t len, ocms_rng *rng,
                       const ocms_ledger *ledger, uint8_t *out, size_t capacity, ocms_sent *sent) {
    value_t v = {1, 0, NULL, 0};
    v.bytes = value;
    v.len = len;
    return report_value(metric, &v, rng, ledger, out, capacity, sent);
}

/* A tree metric's level and node drawn, the node privatized with the level's parameters (report.level set). */
static int tree_privatize(const ocms_tree *tree, uint64_t bucket, ocms_rng *rng, ocms_report *report) {
    ocms_u128 element;
    uint32_t level = 0;
    uint64_t node = 0;
    int rc = ocms_tree_draw(tree, bucket, rng, &level, &node);
    if (rc == OCMS_OK) rc = ocms_element_integer(&tree->level_params[level - 1], node, &element);
    if (rc == OCMS_OK) rc = ocms_privatize(&tree->level_params[level - 1], &element, rng, report);
    if (rc == OCMS_OK) report->level = level;
    ocms_wipe(&element, sizeof element);
    ocms_wipe(&node, sizeof node);
    return rc;
}

/* A memoized message's tree level, from its fingerprint (0: not a tree level's, e.g. a Hybrid mean's). */
static uint32_t tree_level_of(const ocms_tree *tree, const uint8_t *message) {
    uint32_t i;
    for (i = 0; tree != NULL && i < tree->levels; i++) {
        if (memcmp(tree->level_params[i].fingerprint, message + 4, 8) == 0) return i + 1;
    }
    return 0;
}

static int tree_usable(const ocms_metric *metric, const ocms_tree *tree) {
    return tree->level_params != NULL && tree->levels >= 1
           && memcmp(metric->params->fingerprint, tree->level_params[tree->levels - 1].fingerprint, 8) == 0;
}

/* A tree metric's report (issue 40; include/ocms_client.h): the memo key is the bucket, the level drawn after it. */
int ocms_report_tree(const ocms_metric *metric, const ocms_tree *tree, uint64_t bucket, ocms_rng *rng,
                     const ocms_ledger *ledger, uint8_t *out, size_t capacity, ocms_sent *sent) {
    ocms_report report;
    ocms_u128 element;
    uint8_t key[OCMS_VALUE_KEY_BYTES];
    size_t key_len = 0;
    int rc;
    if (sent != NULL) memset(sent, 0, sizeof *sent);
    if (metric == NULL || metric->params == NULL || metric->name == NULL || metric->discovery != NULL || tree == NULL
        || !tree_usable(metric, tree) || out == NULL || sent == NULL || rng == NULL)
        return OCMS_E_PARAMS;
    memset(&report, 0, sizeof report);
    if ((rc = ocms_element_integer(metric->params, bucket, &element)) != OCMS_OK) return rc; /* nothing drawn */
    if (ledger != NULL && metric->memoize) key_len = value_key(metric->params, &element, key);
    rc = tree_privatize(tree, bucket, rng, &report);
    if (rc == OCMS_OK) rc = finish(metric, &report, key_len ? key : NULL, key_len, ledger, out, capacity, sent);
    if (rc == OCMS_OK && sent->memoized) sent->level = tree_level_of(tree, out); /* the stored message's level */
    ocms_wipe(key, sizeof key);
    ocms_wipe(&element, sizeof element);
    ocms_wipe(&report, sizeof report);
    return rc;
}

/* A numeric metric with a Hybrid mean (issue 40; include/ocms_client.h): the value checked and its bucket's memo key
 * taken before any draw, then the part (ocms_mean_draw), then z framed with the carrier or the histogram's report
 * from the same rng; one charge of the metric's epsilon (finish), whatever the part. */
int ocms_report_mean(const ocms_metric *metric, const ocms_numeric *numeric, const ocms_tree *tree,
                     const ocms_mean *mean, const ocms_params *carrier, double value, ocms_rng *rng,
                     const ocms_ledger *ledger, uint8_t *out, size_t capacity, ocms_sent *sent) {
    ocms_report report;
    ocms_u128 element;
    uint8_t key[OCMS_VALUE_KEY_BYTES];
    size_t key_len = 0;
    uint64_t bucket = 0;
    uint32_t z = 0;
    int rc, is_mean = 0;
    if (sent != NULL) memset(sent, 0, sizeof *sent);
    if (metric == NULL || metric->params == NULL || metric->name == NULL || metric->discovery != NULL
        || numeric == NULL || mean == NULL || ocms_mean_check(mean, NULL) != OCMS_OK || carrier == NULL
        || carrier->mechanism != OCMS_MECHANISM_DIRECT
        || carrier->m != mean->grid + mean->window + 2 || (tree != NULL && !tree_usable(metric, tree)) || out == NULL
        || sent == NULL || rng == NULL)
        return OCMS_E_PARAMS;
    memset(&report, 0, sizeof report);
    if ((rc = ocms_numeric_bucket(numeric, value, &bucket)) != OCMS_OK) return rc; /* NaN: nothing drawn */
    if ((rc = ocms_element_integer(metric->params, bucket, &element)) != OCMS_OK) return rc;
    if (ledger != NULL && metric->memoize) key_len = value_key(metric->params, &element, key);
    rc = ocms_mean_draw(mean, value, rng, &is_mean, &z);
    if (rc == OCMS_OK && is_mean) {
        report.params = carrier; /* direct RR's record: z alone */
        report.z = z;
    } else if (rc == OCMS_OK) {
        rc = tree != NULL ? tree_privatize(tree, bucket, rng, &report) : ocms_privatize(metric->params, &element, rng, &report);
    }
    if (rc == OCMS_OK) rc = finish(metric, &report, key_len ? key : NULL, key_len, ledger, out, capacity, sent);
    if (rc == OCMS_OK && sent->memoized) sent->level = tree_level_of(tree, out);
    ocms_wipe(key, sizeof key);
    ocms_wipe(&element, sizeof element);
    ocms_wipe(&bucket, sizeof bucket);
    ocms_wipe(&z, sizeof z);
    ocms_wipe(&report, sizeof report);
    return rc;
}
