/* Device configuration -> library structs (see config.h). Every field is checked, the keep
 * threshold against epsilon (libm, tiny tolerance) and the fingerprint against the numbers it names,
 * so a garbled or hand-edited config is refused instead of producing reports nobody can count. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "config.h"

#define MAX_CONFIG_BYTES (64u * 1024u * 1024u)

int ocms_cfg_problem(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

int ocms_parse_u64(const char *text, size_t len, uint64_t *out) {
    uint64_t v = 0;
    size_t i;
    if (len == 0) return -1;
    for (i = 0; i < len; i++) {
        if (text[i] < '0' || text[i] > '9') return -1;
    }
    for (i = 0; i < len; i++) {
        unsigned digit = (unsigned)(text[i] - '0');
        if (v > (UINT64_MAX - digit) / 10) return -2;
        v = v * 10 + digit;
    }
    *out = v;
    return 0;
}

/* ------------------------------------------------------------ JSON helpers */
typedef struct {
    char path[160];
    char *err;
    size_t errlen;
} ctx_t;

static const cJSON *member(const cJSON *obj, const char *key) {
    return cJSON_GetObjectItemCaseSensitive(obj, key);
}

static int get_uint(ctx_t *c, const cJSON *obj, const char *key, uint64_t lo, uint64_t hi, uint64_t *out) {
    const cJSON *v = member(obj, key);
    double d;
    if (!cJSON_IsNumber(v)) return ocms_cfg_problem(c->err, c->errlen, "%s.%s: missing or not a number", c->path, key);
    d = v->valuedouble;
    if (!(d >= (double)lo && d <= (double)hi) || d != floor(d))
        return ocms_cfg_problem(c->err, c->errlen, "%s.%s: must be an integer in [%llu, %llu]", c->path, key,
                       (unsigned long long)lo, (unsigned long long)hi);
    *out = (uint64_t)d;
    return 0;
}

static int get_string(ctx_t *c, const cJSON *obj, const char *key, const char **out) {
    const cJSON *v = member(obj, key);
    if (!cJSON_IsString(v) || v->valuestring == NULL)
        return ocms_cfg_problem(c->err, c->errlen, "%s.%s: missing or not a string", c->path, key);
    *out = v->valuestring;
    return 0;
}

/* A decimal string (the device config writes big integers as strings). */
static int get_decimal(ctx_t *c, const cJSON *obj, const char *key, uint64_t *out, int *is_2_64) {
    const char *text;
    int rc;
    if (get_string(c, obj, key, &text)) return -1;
    if (is_2_64 != NULL) *is_2_64 = strcmp(text, "18446744073709551616") == 0;
    if (is_2_64 != NULL && *is_2_64) return 0;
    rc = ocms_parse_u64(text, strlen(text), out);
    if (rc == -1) return ocms_cfg_problem(c->err, c->errlen, "%s.%s: must be decimal digits in a string", c->path, key);
    if (rc == -2) return ocms_cfg_problem(c->err, c->errlen, "%s.%s: above 2^64 - 1", c->path, key);
    return 0;
}

static int hex_nibble(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    return -1;
}

static int get_fingerprint(ctx_t *c, const cJSON *obj, uint8_t out[8]) {
    const char *text;
    int i;
    if (get_string(c, obj, "fingerprint", &text)) return -1;
    if (strlen(text) != 16) return ocms_cfg_problem(c->err, c->errlen, "%s.fingerprint: must be 16 lowercase hex digits", c->path);
    for (i = 0; i < 8; i++) {
        int hi = hex_nibble(text[2 * i]), lo = hex_nibble(text[2 * i + 1]);
        if (hi < 0 || lo < 0) return ocms_cfg_problem(c->err, c->errlen, "%s.fingerprint: must be 16 lowercase hex digits", c->path);
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

static int parse_field(ctx_t *c, const cJSON *obj, ocms_params *p) {
    const cJSON *field = member(obj, "field");
    const char *kind;
    size_t n = strlen(c->path);
    int rc = -1;
    if (!cJSON_IsObject(field)) return ocms_cfg_problem(c->err, c->errlen, "%s.field: missing or not an object", c->path);
    snprintf(c->path + n, sizeof c->path - n, ".field");
    if (get_string(c, field, "kind", &kind)) goto done;
    if (strcmp(kind, "prime") == 0) {
        p->field = OCMS_FIELD_PRIME;
        if (get_decimal(c, field, "order", &p->prime, NULL)) goto done;
    } else if (strcmp(kind, "binary") == 0) {
        uint64_t degree;
        const char *poly;
        if (get_uint(c, field, "degree", 64, 128, &degree)) goto done;
        if (get_string(c, field, "polynomial", &poly)) goto done;
        if (degree == 64 && strcmp(poly, "18446744073709551643") == 0) {
            p->field = OCMS_FIELD_GF2_64;
        } else if (degree == 128 && strcmp(poly, "340282366920938463463374607431768211591") == 0) {
            p->field = OCMS_FIELD_GF2_128;
        } else {
            ocms_cfg_problem(c->err, c->errlen, "%s: unsupported binary field (GF(2^64) with x^64+x^4+x^3+x+1, "
                    "GF(2^128) with x^128+x^7+x^2+x+1)", c->path);
            goto done;
        }
    } else {
        ocms_cfg_problem(c->err, c->errlen, "%s.kind: must be \"prime\" or \"binary\"", c->path);
        goto done;
    }
    rc = 0;
done:
    c->path[n] = '\0';
    return rc;
}

/* T must be the Python device's integer floor(2^64 e/(e + m - 1)) (e = exp(eps) less two ulps): we
 * recompute it in long double and refuse a T off by more than 1e-12 relative (Python's own
 * rounding is ~4e-16), which catches a config whose T does not belong to its epsilon and m. */
static int check_threshold(ctx_t *c, const char *where, const ocms_params *p) {
    long double e = expl((long double)p->epsilon);
    long double expect = ldexpl(e / (e + (long double)p->m - 1.0L), 64);
    long double got = (long double)p->keep_threshold;
    if (fabsl(got - expect) > 1e-12L * expect)
        return ocms_cfg_problem(c->err, c->errlen, "%s.keep_threshold: %llu does not belong to epsilon %.17g and m %u "
                       "(expected about %.0Lf); the config is damaged", where, (unsigned long long)p->keep_threshold,
                       p->epsilon, (unsigned)p->m, expect);
    return 0;
}

static int parse_params(ctx_t *c, const cJSON *obj, ocms_params *p, const char *binding) {
    uint64_t m;
    const char *threshold;
    uint8_t computed[8];
    const char *rule = NULL;
    const cJSON *eps;
    if (get_fingerprint(c, obj, p->fingerprint)) return -1;
    eps = member(obj, "epsilon");
    if (!cJSON_IsNumber(eps)) return ocms_cfg_problem(c->err, c->errlen, "%s.epsilon: missing or not a number", c->path);
    p->epsilon = eps->valuedouble;
    if (!(p->epsilon > 0 && p->epsilon <= 100)) return ocms_cfg_problem(c->err, c->errlen, "%s.epsilon: must be in (0, 100]", c->path);
    if (get_uint(c, obj, "m", 2, OCMS_MAX_HASH_RANGE, &m)) return -1;
    p->m = (uint32_t)m;
    if (get_string(c, obj, "keep_threshold", &threshold)) return -1;
    if (ocms_parse_u64(threshold, strlen(threshold), &p->keep_threshold) != 0 || p->keep_threshold == 0)
        return ocms_cfg_problem(c->err, c->errlen, "%s.keep_threshold: must be decimal digits of an integer in [1, 2^64)", c->path);
    if (check_threshold(c, c->path, p)) return -1;
    if (parse_field(c, obj, p)) return -1;
    if (ocms_params_check(p, &rule) != OCMS_OK) return ocms_cfg_problem(c->err, c->errlen, "%s: %s", c->path, rule);
    ocms_params_fingerprint(p, binding, strlen(binding), computed);
    if (memcmp(computed, p->fingerprint, 8) != 0)
        return ocms_cfg_problem(c->err, c->errlen, "%s.fingerprint: does not match the parameters it names (binding %s); "
                       "the config is damaged or from another registry version", c->path, binding);
    return 0;
}

/* Issue 40: a numeric metric's buckets ("numeric": {"lower", "upper", "bounds"}), checked against the dictionary. */
static int parse_numeric(ctx_t *c, const cJSON *obj, ocms_cfg_metric *m) {
    const cJSON *num = member(obj, "numeric"), *lower, *upper, *bounds, *b;
    const char *rule = NULL;
    size_t i = 0;
    if (!cJSON_IsObject(num) || m->params.domain != OCMS_DOMAIN_INTEGERS || m->ncategories > 0 || m->has_discovery)
        return ocms_cfg_problem(c->err, c->errlen, "%s.numeric: an object, on an integer metric without discovery", c->path);
    lower = member(num, "lower");
    upper = member(num, "upper");
    bounds = member(num, "bounds");
    if (!cJSON_IsNumber(lower) || !cJSON_IsNumber(upper) || !cJSON_IsArray(bounds) || cJSON_GetArraySize(bounds) < 1)
        return ocms_cfg_problem(c->err, c->errlen, "%s.numeric: needs numbers lower, upper and a list of bounds", c->path);
    m->numeric.count = (size_t)cJSON_GetArraySize(bounds);
    m->bounds = calloc(m->numeric.count, sizeof *m->bounds);
    if (m->bounds == NULL) return ocms_cfg_problem(c->err, c->errlen, "out of memory");
    cJSON_ArrayForEach(b, bounds) {
        if (!cJSON_IsNumber(b)) return ocms_cfg_problem(c->err, c->errlen, "%s.numeric.bounds[%zu]: not a number", c->path, i);
        m->bounds[i++] = b->valuedouble;
    }
    m->numeric.lower = lower->valuedouble;
    m->numeric.upper = upper->valuedouble;
    m->numeric.bounds = m->bounds;
    if (ocms_numeric_check(&m->numeric, &rule) != OCMS_OK) return ocms_cfg_problem(c->err, c->errlen, "%s.%s", c->path, rule);
    if (m->params.max_value != m->numeric.count)
        return ocms_cfg_problem(c->err, c->errlen, "%s.numeric: %zu buckets, but the dictionary holds %llu values", c->path,
                                m->numeric.count + 1, (unsigned long long)m->params.max_value + 1);
    m->has_numeric = 1;
    return 0;
}

/* Issue 38: a longitudinal metric's lifetime epsilon and thresholds. T1 is checked as every keep threshold (it
 * belongs to lifetime_epsilon and m), T2 by the library (with T1 it gives one report the ratio of epsilon). */
static int parse_longitudinal(ctx_t *c, const cJSON *obj, ocms_cfg_metric *m) {
    const cJSON *l = member(obj, "longitudinal"), *life;
    const char *t1, *t2, *rule = NULL;
    ocms_params memo;
    ocms_longitudinal *lp = &m->longitudinal_params;
    if (!cJSON_IsObject(l)) return ocms_cfg_problem(c->err, c->errlen, "%s.longitudinal: expected an object", c->path);
    if (m->has_discovery)
        return ocms_cfg_problem(c->err, c->errlen, "%s: a discoverable metric is reported one-shot, not longitudinal", c->path);
    life = member(l, "lifetime_epsilon");
    if (!cJSON_IsNumber(life) || !(life->valuedouble > m->params.epsilon) || life->valuedouble > 100)
        return ocms_cfg_problem(c->err, c->errlen, "%s.longitudinal.lifetime_epsilon: must be a number above epsilon "
                                "and at most 100", c->path);
    if (get_string(c, l, "memo_threshold", &t1) || get_string(c, l, "report_threshold", &t2)) return -1;
    memset(lp, 0, sizeof *lp);
    lp->params = &m->params;
    lp->lifetime_epsilon = life->valuedouble;
    if (ocms_parse_u64(t1, strlen(t1), &lp->memo_threshold) != 0 || ocms_parse_u64(t2, strlen(t2), &lp->report_threshold) != 0)
        return ocms_cfg_problem(c->err, c->errlen, "%s.longitudinal: thresholds must be decimal digits below 2^64", c->path);
    memo = m->params;
    memo.epsilon = lp->lifetime_epsilon;
    memo.keep_threshold = lp->memo_threshold;
    if (check_threshold(c, "longitudinal.memo_threshold", &memo)) return -1;
    if (ocms_longitudinal_check(lp, &rule) != OCMS_OK)
        return ocms_cfg_problem(c->err, c->errlen, "%s.longitudinal: %s", c->path, rule);
    m->longitudinal = 1;
    return 0;
}

/* UTF-8 text to code points (strict); the count, or -1. out may be NULL to count. */
static long utf8_code_points(const char *text, uint32_t *out) {
    const unsigned char *s = (const unsigned char *)text;
    long n = 0;
    while (*s) {
        uint32_t cp, min;
        int len, i;
        if (*s < 0x80) cp = *s, len = 1, min = 0;
        else if ((*s & 0xe0) == 0xc0) cp = *s & 0x1f, len = 2, min = 0x80;
        else if ((*s & 0xf0) == 0xe0) cp = *s & 0x0f, len = 3, min = 0x800;
        else if ((*s & 0xf8) == 0xf0) cp = *s & 0x07, len = 4, min = 0x10000;
        else return -1;
        for (i = 1; i < len; i++) {
            if ((s[i] & 0xc0) != 0x80) return -1;
            cp = cp << 6 | (s[i] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return -1;
        if (out != NULL) out[n] = cp;
        n++;
        s += len;
    }
    return n;
}

/* A part's parameters (a discovery level's, a tree level's, a Hybrid mean's carrier): its mechanism and domain already
 * in *lp; its dictionary from "dictionary_size" (2^64 allowed with allow_2_64), its epsilon the metric's (the part
 * carries none), its fingerprint checked under binding. */
static int parse_part_params(ctx_t *c, const cJSON *part, const ocms_cfg_metric *m, const char *binding, int allow_2_64,
                             ocms_params *lp) {
    uint64_t v;
    int is_2_64 = 0, rc;
    cJSON *copy;
    if (get_decimal(c, part, "dictionary_size", &v, &is_2_64)) return -1;
    if ((is_2_64 && !allow_2_64) || (!is_2_64 && v < 1))
        return ocms_cfg_problem(c->err, c->errlen, "%s.dictionary_size: must be >= 1", c->path);
    lp->max_value = is_2_64 ? UINT64_MAX : v - 1;
    lp->epsilon = m->params.epsilon;
    copy = cJSON_Duplicate(part, 1);
    if (copy == NULL) return ocms_cfg_problem(c->err, c->errlen, "out of memory");
    cJSON_DeleteItemFromObjectCaseSensitive(copy, "epsilon");
    cJSON_AddNumberToObject(copy, "epsilon", m->params.epsilon);
    rc = parse_params(c, copy, lp, binding);
    cJSON_Delete(copy);
    return rc ? -1 : 0;
}

/* A level's parameters (a discovery level's, a tree's): binding NAME@VERSION/levelL. */
static int parse_level_params(ctx_t *c, const cJSON *level, const ocms_cfg_metric *m, size_t index, int allow_2_64,
                              ocms_params *lp) {
    char binding[256];
    snprintf(binding, sizeof binding, "%s@%u/level%zu", m->name, (unsigned)m->version, index + 1);
    return parse_part_params(c, level, m, binding, allow_2_64, lp);
}

/* The "mean" entry of a numeric metric with a Hybrid mean (issue 40; docs/device.md "Numeric means"): the split and
 * the Hybrid thresholds (ocms_mean, checked by ocms_mean_check), its bounds the numeric entry's, and its carrier's
 * parameters: direct RR over grid + window + 2 values at the metric's epsilon, fingerprint bound NAME@VERSION/mean. */
static int parse_mean(ctx_t *c, const cJSON *obj, ocms_cfg_metric *m) {
    const cJSON *entry = member(obj, "mean"), *lower, *upper, *mech;
    ocms_mean *mean = &m->mean;
    const char *rule = NULL;
    char binding[256];
    uint64_t v;
    size_t n = strlen(c->path);
    snprintf(c->path + n, sizeof c->path - n, ".mean");
    if (!cJSON_IsObject(entry) || !m->has_numeric)
        return ocms_cfg_problem(c->err, c->errlen, "%s: an object, on a numeric metric", c->path);
    lower = member(entry, "lower");
    upper = member(entry, "upper");
    if (!cJSON_IsNumber(lower) || !cJSON_IsNumber(upper) || lower->valuedouble != m->numeric.lower
        || upper->valuedouble != m->numeric.upper)
        return ocms_cfg_problem(c->err, c->errlen, "%s.lower, upper: must be the numeric entry's (%.17g, %.17g)", c->path,
                                m->numeric.lower, m->numeric.upper);
    mean->lower = m->numeric.lower;
    mean->upper = m->numeric.upper;
    if (get_uint(c, entry, "parts", 1, 65536, &v)) return -1;
    mean->parts = (uint32_t)v;
    if (get_uint(c, entry, "grid", 2, UINT32_C(1) << 20, &v)) return -1;
    mean->grid = (uint32_t)v;
    if (get_uint(c, entry, "window", 1, mean->grid, &v)) return -1;
    mean->window = (uint32_t)v;
    if (get_decimal(c, entry, "pm_share", &mean->pm_share, NULL) || get_decimal(c, entry, "pm_keep", &mean->pm_keep, NULL)
        || get_decimal(c, entry, "duchi_low", &mean->duchi_low, NULL)
        || get_decimal(c, entry, "duchi_step", &mean->duchi_step, NULL))
        return -1;
    if (ocms_mean_check(mean, &rule) != OCMS_OK) return ocms_cfg_problem(c->err, c->errlen, "%s: %s", c->path, rule);
    mech = member(entry, "mechanism");
    if (!cJSON_IsString(mech) || strcmp(mech->valuestring, "direct") != 0)
        return ocms_cfg_problem(c->err, c->errlen, "%s.mechanism: must be \"direct\" (z alone)", c->path);
    m->mean_params.mechanism = OCMS_MECHANISM_DIRECT;
    m->mean_params.domain = OCMS_DOMAIN_INTEGERS;
    snprintf(binding, sizeof binding, "%s@%u/mean", m->name, (unsigned)m->version);
    if (parse_part_params(c, entry, m, binding, 0, &m->mean_params)) return -1;
    if (m->mean_params.m != mean->grid + mean->window + 2 || m->mean_params.max_value != m->mean_params.m - 1)
        return ocms_cfg_problem(c->err, c->errlen, "%s.m, dictionary_size: the carrier is direct RR over grid + window "
                                "+ 2 = %lu report values", c->path, (unsigned long)mean->grid + mean->window + 2);
    c->path[n] = '\0';
    m->has_mean = 1;
    return 0;
}

static int parse_discovery(ctx_t *c, const cJSON *obj, ocms_cfg_metric *m) {
    const cJSON *disc = member(obj, "discovery"), *levels, *level;
    ocms_discovery *d = &m->discovery;
    const char *kind, *rule = NULL;
    uint64_t v;
    size_t n = strlen(c->path), i;
    if (!cJSON_IsObject(disc)) return ocms_cfg_problem(c->err, c->errlen, "%s.discovery: not an object", c->path);
    snprintf(c->path + n, sizeof c->path - n, ".discovery");
    memset(d, 0, sizeof *d);
    if (get_string(c, disc, "kind", &kind)) return -1;
    if (strcmp(kind, "strings") == 0) {
        const char *alphabet;
        d->kind = OCMS_DISCOVERY_STRINGS;
        if (m->params.domain != OCMS_DOMAIN_STRINGS)
            return ocms_cfg_problem(c->err, c->errlen, "%s.kind: strings discovery on a metric of integers", c->path);
        if (get_string(c, disc, "alphabet", &alphabet)) return -1;
        if (strcmp(alphabet, "utf8") != 0) {
            long count = utf8_code_points(alphabet, NULL), a, b;
            if (count < 1 || count > 65535)
                return ocms_cfg_problem(c->err, c->errlen, "%s.alphabet: must be \"utf8\" or 1..65535 characters", c->path);
            m->alphabet = calloc((size_t)count, sizeof *m->alphabet);
            if (m->alphabet == NULL) return ocms_cfg_problem(c->err, c->errlen, "out of memory");
            utf8_code_points(alphabet, m->alphabet);
            for (a = 0; a < count; a++) {
                for (b = a + 1; b < count; b++) {
                    if (m->alphabet[a] == m->alphabet[b])
                        return ocms_cfg_problem(c->err, c->errlen, "%s.alphabet: lists U+%04X twice", c->path, (unsigned)m->alphabet[a]);
                }
            }
            d->alphabet = m->alphabet;
            d->alphabet_size = (uint32_t)count;
        }
        if (get_uint(c, disc, "max_length", 1, 4096, &v)) return -1;
        d->max_length = (uint32_t)v;
        if (get_uint(c, disc, "symbols_per_level", 1, 4096, &v)) return -1;
        d->symbols_per_level = (uint32_t)v;
    } else if (strcmp(kind, "integers") == 0) {
        d->kind = OCMS_DISCOVERY_INTEGERS;
        if (m->params.domain != OCMS_DOMAIN_INTEGERS || m->ncategories > 0)
            return ocms_cfg_problem(c->err, c->errlen, "%s.kind: integers discovery on a metric that is not of integers", c->path);
        if (get_uint(c, disc, "bits", 1, 64, &v)) return -1;
        d->bits = (uint32_t)v;
        if (get_uint(c, disc, "bits_per_level", 1, 64, &v)) return -1;
        d->bits_per_level = (uint32_t)v;
    } else {
        return ocms_cfg_problem(c->err, c->errlen, "%s.kind: must be \"strings\" or \"integers\"", c->path);
    }
    levels = member(disc, "levels");
    if (!cJSON_IsArray(levels) || cJSON_GetArraySize(levels) < 1 || cJSON_GetArraySize(levels) > 256)
        return ocms_cfg_problem(c->err, c->errlen, "%s.levels: must be an array of 1..256 levels", c->path);
    d->levels = (uint32_t)cJSON_GetArraySize(levels);
    m->levels = calloc(d->levels, sizeof *m->levels);
    if (m->levels == NULL) return ocms_cfg_problem(c->err, c->errlen, "out of memory");
    i = 0;
    cJSON_ArrayForEach(level, levels) {
        ocms_params *lp = &m->levels[i];
        size_t k = strlen(c->path);
        snprintf(c->path + k, sizeof c->path - k, ".levels[%zu]", i);
        if (!cJSON_IsObject(level)) return ocms_cfg_problem(c->err, c->errlen, "%s: not an object", c->path);
        if (get_uint(c, level, "level", i + 1, i + 1, &v)) return -1;
        lp->mechanism = OCMS_MECHANISM_OCMS;
        lp->domain = OCMS_DOMAIN_INTEGERS;
        if (parse_level_params(c, level, m, i, 1, lp)) return -1;
        c->path[k] = '\0';
        i++;
    }
    d->level_params = m->levels;
    if (ocms_discovery_check(d, &rule) != OCMS_OK) return ocms_cfg_problem(c->err, c->errlen, "%s: %s", c->path, rule);
    c->path[n] = '\0';
    m->has_discovery = 1;
    return 0;
}

/* Each level's "span" as the device config states it, against the span its shape gives (ocms_tree_span; the
 * shape checked by ocms_tree_check first): a config whose spans disagree would report other nodes than the server
 * counts, so it is refused naming the level's field rather than reported with spans of the reader's own. */
static int check_tree_spans(ctx_t *c, const cJSON *levels, const ocms_tree *tree) {
    const cJSON *level;
    uint64_t stated, expected;
    uint32_t i = 0;
    size_t k = strlen(c->path);
    cJSON_ArrayForEach(level, levels) {
        snprintf(c->path + k, sizeof c->path - k, ".levels[%u]", (unsigned)i);
        if (ocms_tree_span(tree, i + 1, &expected) != OCMS_OK)
            return ocms_cfg_problem(c->err, c->errlen, "%s: no span for level %u", c->path, (unsigned)(i + 1));
        if (get_uint(c, level, "span", 1, UINT64_C(1) << 53, &stated)) return -1;
        if (stated != expected)
            return ocms_cfg_problem(c->err, c->errlen, "%s.span: states %llu, but level %u of %u at branching %u spans "
                                    "%llu buckets (branching^(levels - level))", c->path, (unsigned long long)stated,
                                    (unsigned)(i + 1), (unsigned)tree->levels, (unsigned)tree->branching,
                                    (unsigned long long)expected);
        c->path[k] = '\0';
        i++;
    }
    return 0;
}

/* The "hierarchy" entry of a tree metric (issue 40): each level's parameters (its binding NAME@VERSION/levelL, the
 * metric's epsilon), checked by ocms_tree_check, and the spans it states (check_tree_spans); the finest level's are
 * the metric's own (parsed with them). */
static int parse_tree(ctx_t *c, const cJSON *obj, ocms_cfg_metric *m) {
    const cJSON *tree = member(obj, "hierarchy"), *levels, *level;
    const char *rule = NULL;
    uint64_t v;
    size_t i = 0, n = strlen(c->path);
    snprintf(c->path + n, sizeof c->path - n, ".hierarchy");
    if (!cJSON_IsObject(tree)) return ocms_cfg_problem(c->err, c->errlen, "%s: not an object", c->path);
    if (get_uint(c, tree, "buckets", 3, 4096, &v)) return -1;
    m->tree.buckets = v;
    if (get_uint(c, tree, "branching", 2, 16, &v)) return -1;
    m->tree.branching = (uint32_t)v;
    levels = member(tree, "levels");
    if (!cJSON_IsArray(levels) || cJSON_GetArraySize(levels) < 1 || cJSON_GetArraySize(levels) > 64)
        return ocms_cfg_problem(c->err, c->errlen, "%s.levels: must be an array of 1..64 levels", c->path);
    m->tree.levels = (uint32_t)cJSON_GetArraySize(levels);
    m->tree_levels = calloc(m->tree.levels, sizeof *m->tree_levels);
    if (m->tree_levels == NULL) return ocms_cfg_problem(c->err, c->errlen, "out of memory");
    cJSON_ArrayForEach(level, levels) {
        ocms_params *lp = &m->tree_levels[i];
        const cJSON *mech = cJSON_IsObject(level) ? member(level, "mechanism") : NULL;
        size_t k = strlen(c->path);
        snprintf(c->path + k, sizeof c->path - k, ".levels[%zu]", i);
        if (!cJSON_IsObject(level)) return ocms_cfg_problem(c->err, c->errlen, "%s: not an object", c->path);
        if (get_uint(c, level, "level", i + 1, i + 1, &v)) return -1;
        if (mech != NULL && (!cJSON_IsString(mech) || (strcmp(mech->valuestring, "direct") != 0
                                                       && strcmp(mech->valuestring, "ocms") != 0)))
            return ocms_cfg_problem(c->err, c->errlen, "%s.mechanism: must be \"ocms\" or \"direct\"", c->path);
        lp->mechanism = mech != NULL && strcmp(mech->valuestring, "direct") == 0 ? OCMS_MECHANISM_DIRECT
                                                                                 : OCMS_MECHANISM_OCMS;
        lp->domain = OCMS_DOMAIN_INTEGERS;
        if (parse_level_params(c, level, m, i, 0, lp)) return -1;
        c->path[k] = '\0';
        i++;
    }
    m->tree.level_params = m->tree_levels;
    if (ocms_tree_check(&m->tree, &rule) != OCMS_OK) return ocms_cfg_problem(c->err, c->errlen, "%s: %s", c->path, rule);
    if (check_tree_spans(c, levels, &m->tree)) return -1;
    if (memcmp(m->tree_levels[m->tree.levels - 1].fingerprint, m->params.fingerprint, 8) != 0
        || m->tree.buckets != m->params.max_value + 1)
        return ocms_cfg_problem(c->err, c->errlen, "%s: the finest level must be the metric's own parameters", c->path);
    c->path[n] = '\0';
    m->has_tree = 1;
    return 0;
}

/* A release "X.Y.Z" (no leading zeros, no pre-release) into out[3]; 0, or -1 when it is not one. */
static int parse_release(const char *text, unsigned out[3]) {
    int part;
    for (part = 0; part < 3; part++) {
        unsigned long v = 0;
        const char *start = text;
        while (*text >= '0' && *text <= '9') {
            v = v * 10 + (unsigned long)(*text++ - '0');
            if (v > 999999) return -1;
        }
        if (text == start || (*start == '0' && text - start > 1)) return -1;
        out[part] = (unsigned)v;
        if (*text != (part < 2 ? '.' : '\0')) return -1;
        if (part < 2) text++;
    }
    return 0;
}

int ocms_cfg_client_too_old(const ocms_cfg_metric *m, char *err, size_t errlen) {
    unsigned have[3];
    const unsigned *need = m->min_client;
    if (parse_release(ocms_version(), have) != 0) return ocms_cfg_problem(err, errlen, "library version %s", ocms_version());
    if (have[0] != need[0] ? have[0] > need[0] : have[1] != need[1] ? have[1] > need[1] : have[2] >= need[2]) return 0;
    return ocms_cfg_problem(err, errlen, "metric \"%s\" needs an ocms client of release %u.%u.%u or later; this client "
                            "is %s: upgrade it to %u.%u.%u or later", m->name, need[0], need[1], need[2], ocms_version(),
                            need[0], need[1], need[2]);
}

static int parse_metric(ctx_t *c, const cJSON *obj, ocms_cfg_metric *m) {
    const char *name, *domain, *mechanism = "ocms";
    const cJSON *mech = member(obj, "mechanism");
    uint64_t version;
    int tree_levels;
    char binding[256];
    if (!cJSON_IsObject(obj)) return ocms_cfg_problem(c->err, c->errlen, "%s: not an object", c->path);
    if (get_string(c, obj, "name", &name)) return -1;
    if (name[0] == '\0' || strlen(name) > 100) return ocms_cfg_problem(c->err, c->errlen, "%s.name: must be 1..100 characters", c->path);
    m->name = malloc(strlen(name) + 1);
    if (m->name == NULL) return ocms_cfg_problem(c->err, c->errlen, "out of memory");
    strcpy(m->name, name);
    if (get_uint(c, obj, "version", 1, 0xffffffffu, &version)) return -1;
    m->version = (uint32_t)version;
    if (member(obj, "min_client_version") != NULL) {
        const cJSON *need = member(obj, "min_client_version");
        if (!cJSON_IsString(need) || parse_release(need->valuestring, m->min_client) != 0)
            return ocms_cfg_problem(c->err, c->errlen, "%s.min_client_version: expected a release \"X.Y.Z\"", c->path);
    }
    if (mech != NULL) {
        if (!cJSON_IsString(mech) || (strcmp(mech->valuestring, "direct") != 0 && strcmp(mech->valuestring, "ocms") != 0
                                      && strcmp(mech->valuestring, "hierarchy") != 0))
            return ocms_cfg_problem(c->err, c->errlen, "%s.mechanism: must be \"ocms\", \"direct\" or \"hierarchy\"", c->path);
        mechanism = mech->valuestring;
    }
    tree_levels = cJSON_GetArraySize(member(member(obj, "hierarchy"), "levels"));
    if ((strcmp(mechanism, "hierarchy") == 0) != (member(obj, "hierarchy") != NULL) || (member(obj, "hierarchy") != NULL
        && (member(obj, "numeric") == NULL || tree_levels < 1)))
        return ocms_cfg_problem(c->err, c->errlen, "%s.hierarchy: a numeric metric's levels, with mechanism \"hierarchy\"", c->path);
    if (tree_levels > 0) { /* the metric's own parameters are its finest level's */
        const cJSON *finest = cJSON_GetArrayItem(member(member(obj, "hierarchy"), "levels"), tree_levels - 1);
        mechanism = cJSON_IsString(member(finest, "mechanism")) ? member(finest, "mechanism")->valuestring : "ocms";
    }
    m->params.mechanism = strcmp(mechanism, "direct") == 0 ? OCMS_MECHANISM_DIRECT : OCMS_MECHANISM_OCMS;
    if (get_string(c, obj, "domain", &domain)) return -1;
    if (strcmp(domain, "categories") == 0) {
        const cJSON *cats = member(obj, "categories"), *cat;
        size_t i = 0, j;
        m->params.domain = OCMS_DOMAIN_INTEGERS;
        if (!cJSON_IsArray(cats) || cJSON_GetArraySize(cats) < 2)
            return ocms_cfg_problem(c->err, c->errlen, "%s.categories: must be an array of at least 2 names", c->path);
        m->ncategories = (size_t)cJSON_GetArraySize(cats);
        m->categories = calloc(m->ncategories, sizeof *m->categories);
        m->category_lengths = calloc(m->ncategories, sizeof *m->category_lengths);
        if (m->categories == NULL || m->category_lengths == NULL) return ocms_cfg_problem(c->err, c->errlen, "out of memory");
        cJSON_ArrayForEach(cat, cats) {
            if (!cJSON_IsString(cat) || cat->valuestring == NULL)
                return ocms_cfg_problem(c->err, c->errlen, "%s.categories[%zu]: not a string", c->path, i);
            m->category_lengths[i] = strlen(cat->valuestring);
            m->categories[i] = malloc(m->category_lengths[i] + 1);
            if (m->categories[i] == NULL) return ocms_cfg_problem(c->err, c->errlen, "out of memory");
            memcpy(m->categories[i], cat->valuestring, m->category_lengths[i] + 1);
            for (j = 0; j < i; j++) {
                if (strcmp(m->categories[j], m->categories[i]) == 0)
                    return ocms_cfg_problem(c->err, c->errlen, "%s.categories[%zu]: repeats categories[%zu]", c->path, i, j);
            }
            i++;
        }
        m->params.max_value = m->ncategories - 1;
    } else if (strcmp(domain, "integers") == 0) {
        uint64_t d = 0;
        int is_2_64 = 0;
        m->params.domain = OCMS_DOMAIN_INTEGERS;
        if (get_decimal(c, obj, "dictionary_size", &d, &is_2_64)) return -1;
        if (!is_2_64 && d < 2) return ocms_cfg_problem(c->err, c->errlen, "%s.dictionary_size: must be in [2, 2^64]", c->path);
        m->params.max_value = is_2_64 ? UINT64_MAX : d - 1;
    } else if (strcmp(domain, "strings") == 0) {
        m->params.domain = OCMS_DOMAIN_STRINGS;
    } else {
        return ocms_cfg_problem(c->err, c->errlen, "%s.domain: must be \"categories\", \"integers\" or \"strings\"", c->path);
    }
    if (tree_levels > 0) snprintf(binding, sizeof binding, "%s@%u/level%d", m->name, (unsigned)m->version, tree_levels);
    else snprintf(binding, sizeof binding, "%s@%u", m->name, (unsigned)m->version);
    if (parse_params(c, obj, &m->params, binding)) return -1;
    if (member(obj, "discovery") != NULL && parse_discovery(c, obj, m)) return -1;
    if (member(obj, "numeric") != NULL && parse_numeric(c, obj, m)) return -1;
    if (tree_levels > 0 && parse_tree(c, obj, m)) return -1;
    if (member(obj, "mean") != NULL && parse_mean(c, obj, m)) return -1;
    m->metric.name = m->name;
    m->metric.params = &m->params;
    m->metric.discovery = m->has_discovery ? &m->discovery : NULL;
    m->metric.memoize = 0;
    if (member(obj, "longitudinal") != NULL && parse_longitudinal(c, obj, m)) return -1;
    return 0;
}

void ocms_cfg_free(ocms_cfg *cfg) {
    size_t i, j;
    if (cfg == NULL || cfg->metrics == NULL) return;
    for (i = 0; i < cfg->count; i++) {
        ocms_cfg_metric *m = &cfg->metrics[i];
        free(m->name);
        if (m->categories != NULL) {
            for (j = 0; j < m->ncategories; j++) free(m->categories[j]);
        }
        free(m->categories);
        free(m->category_lengths);
        free(m->levels);
        free(m->alphabet);
        free(m->bounds);
        free(m->tree_levels);
    }
    free(cfg->metrics);
    cfg->metrics = NULL;
    cfg->count = 0;
}

int ocms_cfg_load_text(const char *text, size_t len, ocms_cfg *cfg, char *err, size_t errlen) {
    cJSON *doc;
    const cJSON *format, *metrics, *item;
    ctx_t c;
    size_t i = 0, j;
    memset(cfg, 0, sizeof *cfg);
    c.err = err;
    c.errlen = errlen;
    strcpy(c.path, "config");
    doc = cJSON_ParseWithLength(text, len);
    if (doc == NULL) return ocms_cfg_problem(err, errlen, "not valid JSON (near byte %ld)", (long)(cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() - text : 0));
    format = member(doc, "format");
    metrics = member(doc, "metrics");
    if (!cJSON_IsObject(doc) || !cJSON_IsNumber(format) || format->valuedouble != 1) {
        cJSON_Delete(doc);
        return ocms_cfg_problem(err, errlen, "not a device configuration of format 1 (`ocms registry device-config`)");
    }
    if (!cJSON_IsArray(metrics)) {
        cJSON_Delete(doc);
        return ocms_cfg_problem(err, errlen, "config.metrics: missing or not an array");
    }
    cfg->count = (size_t)cJSON_GetArraySize(metrics);
    cfg->metrics = calloc(cfg->count ? cfg->count : 1, sizeof *cfg->metrics);
    if (cfg->metrics == NULL) {
        cJSON_Delete(doc);
        return ocms_cfg_problem(err, errlen, "out of memory");
    }
    cJSON_ArrayForEach(item, metrics) {
        snprintf(c.path, sizeof c.path, "config.metrics[%zu]", i);
        if (parse_metric(&c, item, &cfg->metrics[i])) {
            cJSON_Delete(doc);
            ocms_cfg_free(cfg);
            return -1;
        }
        for (j = 0; j < i; j++) {
            if (strcmp(cfg->metrics[j].name, cfg->metrics[i].name) == 0) {
                ocms_cfg_problem(err, errlen, "%s.name: metric %s appears twice", c.path, cfg->metrics[i].name);
                cJSON_Delete(doc);
                ocms_cfg_free(cfg);
                return -1;
            }
        }
        i++;
    }
    /* the metric structs point into the array: fix the pointers now that it no longer moves */
    for (i = 0; i < cfg->count; i++) {
        ocms_cfg_metric *m = &cfg->metrics[i];
        m->metric.params = &m->params;
        m->metric.discovery = m->has_discovery ? &m->discovery : NULL;
        if (m->has_discovery) m->discovery.level_params = m->levels;
    }
    cJSON_Delete(doc);
    return 0;
}

int ocms_cfg_load_file(const char *path, ocms_cfg *cfg, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    char *text = NULL;
    size_t len = 0, cap = 0;
    int rc;
    memset(cfg, 0, sizeof *cfg);
    if (f == NULL) return ocms_cfg_problem(err, errlen, "cannot read: %s", strerror(errno));
    for (;;) {
        size_t got;
        if (cap - len < 65536) {
            char *grown;
            if (cap >= MAX_CONFIG_BYTES) {
                free(text);
                fclose(f);
                return ocms_cfg_problem(err, errlen, "larger than %u bytes", MAX_CONFIG_BYTES);
            }
            grown = realloc(text, cap ? cap * 2 : 65536 * 2);
            if (grown == NULL) {
                free(text);
                fclose(f);
                return ocms_cfg_problem(err, errlen, "out of memory");
            }
            text = grown;
            cap = cap ? cap * 2 : 65536 * 2;
        }
        got = fread(text + len, 1, cap - len, f);
        len += got;
        if (got == 0) break;
    }
    if (ferror(f)) {
        free(text);
        fclose(f);
        return ocms_cfg_problem(err, errlen, "cannot read: %s", strerror(errno));
    }
    fclose(f);
    rc = ocms_cfg_load_text(text, len, cfg, err, errlen);
    free(text);
    return rc;
}

const ocms_cfg_metric *ocms_cfg_find(const ocms_cfg *cfg, const char *name) {
    size_t i;
    for (i = 0; i < cfg->count; i++) {
        if (strcmp(cfg->metrics[i].name, name) == 0) return &cfg->metrics[i];
    }
    return NULL;
}

/* ------------------------------------------------------------ values */
/* A value shown in an error: printable text as is, control bytes escaped, long values cut at a
 * character boundary (the message stays UTF-8). out must hold 256 bytes. */
static void show(char *out, const uint8_t *s, size_t len) {
    size_t o = 0, i, cut = len;
    if (len > 50) {
        cut = 40;
        while (cut > 0 && (s[cut] & 0xc0) == 0x80) cut--;
    }
    for (i = 0; i < cut; i++) {
        if (s[i] < 0x20 || s[i] == 0x7f || s[i] == '"' || s[i] == '\\') o += (size_t)sprintf(out + o, "\\x%02x", s[i]);
        else out[o++] = (char)s[i];
    }
    if (cut < len) o += (size_t)sprintf(out + o, "...(%zu bytes)", len);
    out[o] = '\0';
}

int ocms_cfg_value_of(const ocms_cfg_metric *m, const uint8_t *name, size_t len, ocms_cfg_value *value, char *err,
                      size_t errlen) {
    char shown[256];
    ocms_u128 element;
    memset(value, 0, sizeof *value);
    show(shown, name, len);
    if (m->ncategories > 0) {
        size_t i;
        for (i = 0; i < m->ncategories; i++) {
            if (m->category_lengths[i] == len && memcmp(m->categories[i], name, len) == 0) {
                value->integer = i;
                return 0;
            }
        }
        return ocms_cfg_problem(err, errlen, "\"%s\" is not a category of metric %s (names are case-sensitive)", shown, m->name);
    }
    if (m->has_numeric) { /* issue 40: a decimal number, clipped, as its bucket index */
        char text[64], *end = NULL;
        double x;
        if (len == 0 || len >= sizeof text || memchr(name, '\0', len) != NULL)
            return ocms_cfg_problem(err, errlen, "\"%s\" is not a number (metric %s takes a decimal number)", shown, m->name);
        memcpy(text, name, len);
        text[len] = '\0';
        errno = 0;
        x = strtod(text, &end);
        if (end != text + len || isspace((unsigned char)text[0]) || ocms_numeric_bucket(&m->numeric, x, &value->integer) != OCMS_OK)
            return ocms_cfg_problem(err, errlen, "\"%s\" is not a number (metric %s takes a decimal number, not NaN)", shown,
                                    m->name);
        value->number = x;
        return 0;
    }
    if (m->params.domain == OCMS_DOMAIN_INTEGERS) {
        uint64_t v = 0;
        int rc = len > 40 ? -2 : ocms_parse_u64((const char *)name, len, &v);
        size_t i;
        for (i = 0; i < len && rc == -2; i++) {
            if (name[i] < '0' || name[i] > '9') rc = -1;
        }
        if (rc == -1 || len == 0)
            return ocms_cfg_problem(err, errlen, "\"%s\" is not a non-negative decimal integer (integers are decimal digits in a "
                           "JSON string)", shown);
        if (rc == -2 || v > m->params.max_value) {
            char d[24];
            if (m->params.max_value == UINT64_MAX) strcpy(d, "18446744073709551616");
            else snprintf(d, sizeof d, "%llu", (unsigned long long)m->params.max_value + 1);
            return ocms_cfg_problem(err, errlen, "%s is outside the dictionary [0, %s) of metric %s", shown, d, m->name);
        }
        if (m->has_discovery && ocms_prefix_element_integer(&m->discovery, v, 1, &element) != OCMS_OK)
            return ocms_cfg_problem(err, errlen, "%s is outside [0, 2^%u) of metric %s", shown, (unsigned)m->discovery.bits, m->name);
        value->integer = v;
        return 0;
    }
    value->is_string = 1;
    value->bytes = name;
    value->len = len;
    if (m->has_discovery && ocms_prefix_element_string(&m->discovery, name, len, 1, &element) != OCMS_OK)
        return ocms_cfg_problem(err, errlen, "\"%s\" holds a character outside the alphabet of metric %s", shown, m->name);
    return 0;
}

/* ------------------------------------------------------------ one JSON string per line */
static int hex4(const char *s, uint32_t *out) {
    uint32_t v = 0;
    int i;
    for (i = 0; i < 4; i++) {
        char ch = s[i];
        v <<= 4;
        if (ch >= '0' && ch <= '9') v |= (uint32_t)(ch - '0');
        else if (ch >= 'a' && ch <= 'f') v |= (uint32_t)(ch - 'a' + 10);
        else if (ch >= 'A' && ch <= 'F') v |= (uint32_t)(ch - 'A' + 10);
        else return -1;
    }
    *out = v;
    return 0;
}

static size_t put_utf8(uint8_t *out, uint32_t cp) {
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xc0 | cp >> 6);
        out[1] = (uint8_t)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xe0 | cp >> 12);
        out[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3f));
        out[2] = (uint8_t)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (uint8_t)(0xf0 | cp >> 18);
    out[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3f));
    out[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3f));
    out[3] = (uint8_t)(0x80 | (cp & 0x3f));
    return 4;
}

static int is_ws(char ch) { return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n'; }

int ocms_json_string_line(const char *line, size_t len, uint8_t *out, size_t *outlen, const char **reason) {
    size_t i = 0, o = 0;
    *outlen = 0;
    while (i < len && is_ws(line[i])) i++;
    if (i == len) {
        *reason = "empty line (expected one JSON string, e.g. \"home\" or \"42\")";
        return -1;
    }
    if (line[i] != '"') {
        *reason = "not a JSON string (every value is a JSON string; integers as decimal digits, e.g. \"42\")";
        return -1;
    }
    i++;
    for (;;) {
        unsigned char ch;
        if (i >= len) {
            *reason = "unterminated JSON string";
            return -1;
        }
        ch = (unsigned char)line[i];
        if (ch == '"') {
            i++;
            break;
        }
        if (ch < 0x20) {
            *reason = "control character inside a JSON string (escape it)";
            return -1;
        }
        if (ch == '\\') {
            char e;
            if (i + 1 >= len) {
                *reason = "unterminated escape";
                return -1;
            }
            e = line[i + 1];
            i += 2;
            switch (e) {
            case '"': out[o++] = '"'; break;
            case '\\': out[o++] = '\\'; break;
            case '/': out[o++] = '/'; break;
            case 'b': out[o++] = '\b'; break;
            case 'f': out[o++] = '\f'; break;
            case 'n': out[o++] = '\n'; break;
            case 'r': out[o++] = '\r'; break;
            case 't': out[o++] = '\t'; break;
            case 'u': {
                uint32_t cp, low;
                if (i + 4 > len || hex4(line + i, &cp)) {
                    *reason = "bad \\u escape (four hex digits)";
                    return -1;
                }
                i += 4;
                if (cp >= 0xdc00 && cp <= 0xdfff) {
                    *reason = "lone low surrogate escape (not encodable as UTF-8)";
                    return -1;
                }
                if (cp >= 0xd800 && cp <= 0xdbff) {
                    if (i + 6 > len || line[i] != '\\' || line[i + 1] != 'u' || hex4(line + i + 2, &low) ||
                        low < 0xdc00 || low > 0xdfff) {
                        *reason = "lone high surrogate escape (not encodable as UTF-8)";
                        return -1;
                    }
                    i += 6;
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
                }
                o += put_utf8(out + o, cp); /* at most 4 bytes for the 6 or 12 escape characters read */
                break;
            }
            default:
                *reason = "invalid escape in a JSON string";
                return -1;
            }
            continue;
        }
        if (ch < 0x80) {
            out[o++] = ch;
            i++;
        } else { /* raw UTF-8: strictly valid */
            size_t n, k;
            uint32_t cp, min;
            if ((ch & 0xe0) == 0xc0) n = 2, cp = ch & 0x1f, min = 0x80;
            else if ((ch & 0xf0) == 0xe0) n = 3, cp = ch & 0x0f, min = 0x800;
            else if ((ch & 0xf8) == 0xf0) n = 4, cp = ch & 0x07, min = 0x10000;
            else {
                *reason = "not valid UTF-8";
                return -1;
            }
            if (i + n > len) {
                *reason = "not valid UTF-8";
                return -1;
            }
            for (k = 1; k < n; k++) {
                unsigned char b = (unsigned char)line[i + k];
                if ((b & 0xc0) != 0x80) {
                    *reason = "not valid UTF-8";
                    return -1;
                }
                cp = cp << 6 | (b & 0x3f);
            }
            if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
                *reason = "not valid UTF-8";
                return -1;
            }
            memcpy(out + o, line + i, n);
            o += n;
            i += n;
        }
    }
    while (i < len && is_ws(line[i])) i++;
    if (i != len) {
        *reason = "text after the JSON string (one value per line)";
        return -1;
    }
    *outlen = o;
    return 0;
}
