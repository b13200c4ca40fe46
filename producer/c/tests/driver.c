/* ocms-c-driver: the test driver of the C client (tests/producer/test_c_client.py).
 *
 * Reads one JSON command per line on stdin and answers one JSON line each. It is the only program
 * that can inject recorded random bytes into the library (the "report" and "frame" commands): it
 * is built by `make test-tools` for the tests and never installed; ocms-report-c always reads the
 * OS CSPRNG. Values go through the same code as ocms-report-c (example/config.c): the JSON line
 * parser, category/integer/string mapping and the device configuration loader.
 *
 * Commands (see the Python test for their use): load, load_text, params, value, report, frame,
 * fingerprint, encode, check, blake2b, field_hash, pclmul, sample. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "config.h"
#include "internal.h"

__extension__ typedef unsigned __int128 u128;

static ocms_cfg config;
static int loaded = 0;

/* ------------------------------------------------------------ helpers */
static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static uint8_t *from_hex(const char *hex, size_t *n) {
    size_t len = hex ? strlen(hex) : 0, i;
    uint8_t *out = malloc(len / 2 + 1);
    if (out == NULL) return NULL;
    for (i = 0; i + 1 < len; i += 2) out[i / 2] = (uint8_t)(hexval(hex[i]) << 4 | hexval(hex[i + 1]));
    *n = len / 2;
    return out;
}

static char *to_hex(const uint8_t *in, size_t n) {
    static const char d[] = "0123456789abcdef";
    char *out = malloc(2 * n + 1);
    size_t i;
    for (i = 0; i < n; i++) {
        out[2 * i] = d[in[i] >> 4];
        out[2 * i + 1] = d[in[i] & 15];
    }
    out[2 * n] = '\0';
    return out;
}

/* An encoder's answer: the message as hex under ``key``, or its error. */
static void reply_message(cJSON *reply, const char *key, int rc, const uint8_t *message, size_t len) {
    char *hex;
    if (rc != OCMS_OK) {
        cJSON_AddStringToObject(reply, "error", ocms_strerror(rc));
        return;
    }
    hex = to_hex(message, len);
    cJSON_AddStringToObject(reply, key, hex);
    free(hex);
}

static int parse_u128(const char *s, u128 *out) {
    u128 v = 0;
    if (s == NULL || *s == '\0') return -1;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return -1;
        v = v * 10 + (u128)(*s - '0');
    }
    *out = v;
    return 0;
}

static void u128_text(u128 v, char *out) {
    char tmp[48];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + (int)(v % 10));
        v /= 10;
    } while (v);
    while (n) *out++ = tmp[--n];
    *out = '\0';
}

static ocms_u128 to_el(u128 v) {
    ocms_u128 e;
    e.hi = (uint64_t)(v >> 64);
    e.lo = (uint64_t)v;
    return e;
}

static u128 from_el(const ocms_u128 *e) { return ((u128)e->hi << 64) | e->lo; }

static void add_u128(cJSON *obj, const char *key, const ocms_u128 *e) {
    char text[48];
    u128_text(from_el(e), text);
    cJSON_AddStringToObject(obj, key, text);
}

static cJSON *object_in(cJSON *array) {
    cJSON *obj = cJSON_CreateObject();
    cJSON_AddItemToArray(array, obj);
    return obj;
}

static const char *str(const cJSON *cmd, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cmd, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static double num(const cJSON *cmd, const char *key, double dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cmd, key);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

/* A recorded byte stream: fill() hands out the bytes in order; past the end it fails, or pads with
 * zeros when padding is allowed (a read-ahead buffer may fetch more than the draws use). */
typedef struct {
    const uint8_t *data;
    size_t len, pos;
    int pad;
} stream_t;

static int stream_fill(void *ctx, uint8_t *out, size_t n) {
    stream_t *s = (stream_t *)ctx;
    size_t i;
    for (i = 0; i < n; i++) {
        if (s->pos < s->len) out[i] = s->data[s->pos];
        else if (s->pad) out[i] = 0;
        else return -1;
        s->pos++;
    }
    return 0;
}

typedef struct {
    stream_t stream;
    ocms_rng rng;
    uint8_t buffer[64];
} recorded_t;

static void recorded_init(recorded_t *r, const uint8_t *data, size_t len, int buffered) {
    r->stream.data = data;
    r->stream.len = len;
    r->stream.pos = 0;
    r->stream.pad = buffered;
    ocms_rng_init(&r->rng, stream_fill, &r->stream, buffered ? r->buffer : NULL, buffered ? 37 : 0);
}

/* Bytes the draws consumed (fetched minus what still waits in the buffer). */
static size_t recorded_used(const recorded_t *r) { return r->stream.pos - (r->rng.end - r->rng.start); }

static const ocms_cfg_metric *find_metric(const cJSON *cmd, cJSON *reply) {
    const char *name = str(cmd, "metric");
    const ocms_cfg_metric *m = loaded && name ? ocms_cfg_find(&config, name) : NULL;
    if (m == NULL) cJSON_AddStringToObject(reply, "error", "no such metric loaded");
    return m;
}

/* The value of a JSON line (as ocms-report-c reads it); buf must hold strlen(line) bytes. */
static int value_of_line(const ocms_cfg_metric *m, const char *line, uint8_t *buf, ocms_cfg_value *value, cJSON *reply) {
    const char *reason;
    char err[512];
    size_t len;
    if (line == NULL) {
        cJSON_AddStringToObject(reply, "error", "no line");
        return -1;
    }
    if (ocms_json_string_line(line, strlen(line), buf, &len, &reason) != 0) {
        cJSON_AddStringToObject(reply, "error", reason);
        return -1;
    }
    if (ocms_cfg_value_of(m, buf, len, value, err, sizeof err) != 0) {
        cJSON_AddStringToObject(reply, "error", err);
        return -1;
    }
    return 0;
}

static int privatize_value(const ocms_cfg_metric *m, const ocms_cfg_value *v, ocms_rng *rng, ocms_report *r) {
    if (m->has_mean) { /* issue 40: the part first (ocms_mean_draw); part 0's z framed with the mean's carrier */
        int is_mean = 0, rc;
        uint32_t z = 0;
        memset(r, 0, sizeof *r);
        rc = ocms_mean_draw(&m->mean, v->number, rng, &is_mean, &z);
        if (rc != OCMS_OK || is_mean) {
            r->params = &m->mean_params;
            r->z = z;
            return rc;
        }
    }
    if (m->has_tree) { /* issue 40: the level and node drawn (ocms_tree_draw), the node privatized with its level's */
        uint32_t level = 0;
        uint64_t node = 0;
        ocms_u128 element;
        int rc = ocms_tree_draw(&m->tree, v->integer, rng, &level, &node);
        memset(r, 0, sizeof *r);
        if (rc == OCMS_OK) rc = ocms_element_integer(&m->tree_levels[level - 1], node, &element);
        if (rc == OCMS_OK) rc = ocms_privatize(&m->tree_levels[level - 1], &element, rng, r);
        r->level = rc == OCMS_OK ? level : 0;
        return rc;
    }
    return v->is_string ? ocms_privatize_string(&m->metric, v->bytes, v->len, rng, r)
                        : ocms_privatize_integer(&m->metric, v->integer, rng, r);
}

static void add_report(cJSON *obj, const ocms_report *r) {
    add_u128(obj, "a0", &r->a0);
    add_u128(obj, "a1", &r->a1);
    cJSON_AddNumberToObject(obj, "z", r->z);
}

/* Parameters given in a command (wire and binding vectors): fingerprint computed or given. */
static int params_from(const cJSON *cmd, ocms_params *p, cJSON *reply) {
    const cJSON *field = cJSON_GetObjectItemCaseSensitive(cmd, "field");
    const char *kind = str(field, "kind"), *d = str(cmd, "dictionary_size"), *domain = str(cmd, "domain");
    const char *mech = str(cmd, "mechanism"), *fp = str(cmd, "fingerprint");
    u128 dv = 0;
    memset(p, 0, sizeof *p);
    p->epsilon = num(cmd, "epsilon", 1.0);
    p->m = (uint32_t)num(cmd, "m", 2);
    p->keep_threshold = 1; /* not used by these commands */
    p->mechanism = mech && strcmp(mech, "direct") == 0 ? OCMS_MECHANISM_DIRECT : OCMS_MECHANISM_OCMS;
    p->domain = domain && strcmp(domain, "string") == 0 ? OCMS_DOMAIN_STRINGS : OCMS_DOMAIN_INTEGERS;
    if (kind && strcmp(kind, "prime") == 0) {
        u128 order;
        p->field = OCMS_FIELD_PRIME;
        if (parse_u128(str(field, "order"), &order) == 0) p->prime = (uint64_t)order;
    } else {
        p->field = num(field, "degree", 0) == 64 ? OCMS_FIELD_GF2_64 : OCMS_FIELD_GF2_128;
    }
    if (p->domain == OCMS_DOMAIN_INTEGERS) {
        if (parse_u128(d, &dv) != 0 || dv < 1 || dv > ((u128)1 << 64)) {
            cJSON_AddStringToObject(reply, "error", "bad dictionary_size");
            return -1;
        }
        p->max_value = (uint64_t)(dv - 1);
    }
    if (fp != NULL && strlen(fp) == 16) {
        size_t n;
        uint8_t *raw = from_hex(fp, &n);
        memcpy(p->fingerprint, raw, 8);
        free(raw);
    }
    return 0;
}

/* ------------------------------------------------------------ commands */
static void cmd_report(const cJSON *cmd, cJSON *reply) {
    const ocms_cfg_metric *m = find_metric(cmd, reply);
    const char *line = str(cmd, "line");
    int buffered = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cmd, "buffered"));
    size_t n = 0;
    uint8_t *bytes, *buf, message[OCMS_MAX_REPORT_MESSAGE], again[OCMS_MAX_REPORT_MESSAGE];
    recorded_t rec, rec2;
    ocms_cfg_value v;
    ocms_report r;
    ocms_sent sent;
    size_t len = 0;
    int rc;
    char *hex;
    if (m == NULL) return;
    buf = malloc(line ? strlen(line) + 1 : 1);
    if (value_of_line(m, line, buf, &v, reply) != 0) {
        cJSON_AddNumberToObject(reply, "used", 0);
        free(buf);
        return;
    }
    bytes = from_hex(str(cmd, "random_hex"), &n);
    recorded_init(&rec, bytes, n, buffered);
    rc = privatize_value(m, &v, &rec.rng, &r);
    cJSON_AddNumberToObject(reply, "used", (double)recorded_used(&rec));
    if (rc != OCMS_OK) {
        cJSON_AddStringToObject(reply, "error", ocms_strerror(rc));
    } else {
        ocms_encode_report(&r, message, sizeof message, &len);
        cJSON_AddNumberToObject(reply, "level", r.level);
        add_report(reply, &r);
        hex = to_hex(message, len);
        cJSON_AddStringToObject(reply, "message_hex", hex);
        free(hex);
        /* the one-call device path on the same bytes gives the same message */
        recorded_init(&rec2, bytes, n, buffered);
        rc = m->has_mean ? ocms_report_mean(&m->metric, &m->numeric, m->has_tree ? &m->tree : NULL, &m->mean,
                                            &m->mean_params, v.number, &rec2.rng, NULL, again, sizeof again, &sent)
             : m->has_tree ? ocms_report_tree(&m->metric, &m->tree, v.integer, &rec2.rng, NULL, again, sizeof again, &sent)
             : v.is_string ? ocms_report_string(&m->metric, v.bytes, v.len, &rec2.rng, NULL, again, sizeof again, &sent)
                           : ocms_report_integer(&m->metric, v.integer, &rec2.rng, NULL, again, sizeof again, &sent);
        hex = rc == OCMS_OK ? to_hex(again, sent.length) : NULL;
        cJSON_AddStringToObject(reply, "device_path_hex", hex ? hex : ocms_strerror(rc));
        cJSON_AddNumberToObject(reply, "device_path_level", sent.level);
        free(hex);
    }
    free(bytes);
    free(buf);
}

/* Issue 38: one longitudinal report of a loaded metric with the command's T1, T2, eps_inf and secret, its second
 * round from the recorded bytes (tests/vectors/longitudinal_v1.json). */
static void cmd_longitudinal(const cJSON *cmd, cJSON *reply) {
    const ocms_cfg_metric *m = find_metric(cmd, reply);
    const char *line = str(cmd, "line"), *rule = NULL;
    size_t n = 0, secret_len = 0, len = 0;
    uint8_t *bytes, *secret, *buf, message[OCMS_MAX_REPORT_MESSAGE], seen[OCMS_SEEN_KEY_BYTES];
    u128 t1 = 0, t2 = 0;
    recorded_t rec;
    ocms_cfg_value v;
    ocms_longitudinal l;
    ocms_u128 element;
    ocms_report r;
    uint32_t hashed = 0;
    int rc;
    char *hex;
    if (m == NULL) return;
    buf = malloc(line ? strlen(line) + 1 : 1);
    if (value_of_line(m, line, buf, &v, reply) != 0) {
        free(buf);
        return;
    }
    parse_u128(str(cmd, "memo_threshold"), &t1);
    parse_u128(str(cmd, "report_threshold"), &t2);
    l.params = &m->params;
    l.lifetime_epsilon = num(cmd, "lifetime_epsilon", 0);
    l.memo_threshold = (uint64_t)t1;
    l.report_threshold = (uint64_t)t2;
    rc = ocms_longitudinal_check(&l, &rule);
    cJSON_AddStringToObject(reply, "check", rc == OCMS_OK ? "ok" : rule);
    if (v.is_string) {
        ocms_string_fingerprint(v.bytes, v.len, &element);
    } else if (ocms_element_integer(&m->params, v.integer, &element) != OCMS_OK) {
        cJSON_AddStringToObject(reply, "error", "value");
        free(buf);
        return;
    }
    secret = from_hex(str(cmd, "secret_hex"), &secret_len);
    bytes = from_hex(str(cmd, "random_hex"), &n);
    recorded_init(&rec, bytes, n, 0);
    rc = ocms_longitudinal_privatize(&l, secret, secret_len, &element, &rec.rng, &r, &hashed);
    cJSON_AddNumberToObject(reply, "used", (double)recorded_used(&rec));
    if (rc != OCMS_OK) {
        cJSON_AddStringToObject(reply, "error", ocms_strerror(rc));
    } else {
        ocms_encode_report(&r, message, sizeof message, &len);
        add_report(reply, &r);
        cJSON_AddNumberToObject(reply, "hashed", hashed);
        hex = to_hex(message, len);
        cJSON_AddStringToObject(reply, "message_hex", hex);
        free(hex);
        ocms_longitudinal_seen_key(&l, hashed, seen);
        hex = to_hex(seen, sizeof seen);
        cJSON_AddStringToObject(reply, "seen_key_hex", hex);
        free(hex);
    }
    free(secret);
    free(bytes);
    free(buf);
}

static void cmd_frame(const cJSON *cmd, cJSON *reply) {
    const ocms_cfg_metric *m = find_metric(cmd, reply);
    const cJSON *lines = cJSON_GetObjectItemCaseSensitive(cmd, "lines"), *line;
    size_t n = 0, count, i = 0, len;
    uint8_t *bytes, *message;
    ocms_report *reports;
    recorded_t rec;
    cJSON *list;
    int rc;
    if (m == NULL || !cJSON_IsArray(lines)) return;
    count = (size_t)cJSON_GetArraySize(lines);
    reports = calloc(count ? count : 1, sizeof *reports);
    bytes = from_hex(str(cmd, "random_hex"), &n);
    recorded_init(&rec, bytes, n, cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cmd, "buffered")));
    list = cJSON_AddArrayToObject(reply, "reports");
    cJSON_ArrayForEach(line, lines) {
        ocms_cfg_value v;
        uint8_t *buf = malloc(strlen(line->valuestring) + 1);
        if (value_of_line(m, line->valuestring, buf, &v, reply) != 0 ||
            (rc = privatize_value(m, &v, &rec.rng, &reports[i])) != OCMS_OK) {
            if (!cJSON_GetObjectItemCaseSensitive(reply, "error")) cJSON_AddStringToObject(reply, "error", "privatize failed");
            free(buf);
            goto done;
        }
        add_report(object_in(list), &reports[i]);
        free(buf);
        i++;
    }
    message = malloc(ocms_message_size(reports[0].params, (uint32_t)count));
    rc = ocms_encode_frame(reports, (uint32_t)count, message, ocms_message_size(reports[0].params, (uint32_t)count), &len);
    reply_message(reply, "message_hex", rc, message, len);
    free(message);
    cJSON_AddNumberToObject(reply, "used", (double)recorded_used(&rec));
done:
    free(reports);
    free(bytes);
}

static void cmd_params(const cJSON *cmd, cJSON *reply) {
    const ocms_cfg_metric *m = find_metric(cmd, reply);
    cJSON *levels = NULL;
    uint32_t i;
    char text[48], *hex;
    if (m == NULL) return;
    for (i = 0; i <= (m->has_discovery ? m->discovery.levels : 0); i++) {
        const ocms_params *p = i == 0 ? &m->params : &m->levels[i - 1];
        cJSON *obj = i == 0 ? reply : object_in(levels);
        u128_text(p->keep_threshold, text);
        cJSON_AddStringToObject(obj, "keep_threshold", text);
        cJSON_AddNumberToObject(obj, "m", p->m);
        cJSON_AddNumberToObject(obj, "epsilon", p->epsilon);
        cJSON_AddStringToObject(obj, "mechanism", p->mechanism == OCMS_MECHANISM_DIRECT ? "direct" : "ocms");
        cJSON_AddStringToObject(obj, "field", p->field == OCMS_FIELD_PRIME ? "prime" : p->field == OCMS_FIELD_GF2_64 ? "gf64" : "gf128");
        u128_text(p->prime, text);
        cJSON_AddStringToObject(obj, "prime", text);
        u128_text((u128)p->max_value + 1, text);
        cJSON_AddStringToObject(obj, "dictionary_size", p->domain == OCMS_DOMAIN_STRINGS ? "340282366920938463463374607431768211456" : text);
        hex = to_hex(p->fingerprint, 8);
        cJSON_AddStringToObject(obj, "fingerprint", hex);
        free(hex);
        if (i == 0) levels = cJSON_AddArrayToObject(reply, "levels");
    }
}

static void cmd_fingerprint(const cJSON *cmd, cJSON *reply) {
    ocms_params p;
    uint8_t out[8];
    const char *binding = str(cmd, "binding");
    const char *rule = NULL;
    char *hex;
    if (params_from(cmd, &p, reply) != 0) return;
    if (ocms_params_check(&p, &rule) != OCMS_OK) {
        cJSON_AddStringToObject(reply, "error", rule);
        return;
    }
    ocms_params_fingerprint(&p, binding, binding ? strlen(binding) : 0, out);
    hex = to_hex(out, 8);
    cJSON_AddStringToObject(reply, "fingerprint", hex);
    free(hex);
}

static void cmd_encode(const cJSON *cmd, cJSON *reply) {
    const cJSON *records = cJSON_GetObjectItemCaseSensitive(cmd, "records"), *rec;
    ocms_params p;
    ocms_report *reports;
    size_t count, i = 0, len;
    uint8_t *out;
    int rc;
    if (params_from(cmd, &p, reply) != 0 || !cJSON_IsArray(records)) return;
    count = (size_t)cJSON_GetArraySize(records);
    reports = calloc(count ? count : 1, sizeof *reports);
    cJSON_ArrayForEach(rec, records) {
        u128 a0 = 0, a1 = 0;
        parse_u128(str(rec, "a0"), &a0);
        parse_u128(str(rec, "a1"), &a1);
        reports[i].params = &p;
        reports[i].a0 = to_el(a0);
        reports[i].a1 = to_el(a1);
        reports[i].z = (uint32_t)num(rec, "z", 0);
        i++;
    }
    out = malloc(ocms_message_size(&p, (uint32_t)count) + 1);
    if (num(cmd, "kind", 2) == 1) rc = ocms_encode_report(&reports[0], out, ocms_message_size(&p, 1), &len);
    else rc = ocms_encode_frame(reports, (uint32_t)count, out, ocms_message_size(&p, (uint32_t)count), &len);
    reply_message(reply, "hex", rc, out, len);
    free(out);
    free(reports);
}

static void cmd_check(const cJSON *cmd, cJSON *reply) {
    ocms_params p;
    size_t n, which;
    uint32_t count;
    const char *reason = NULL;
    uint8_t *msg;
    if (params_from(cmd, &p, reply) != 0) return;
    msg = from_hex(str(cmd, "hex"), &n);
    if (ocms_message_check(&p, 1, msg, n, &which, &count, &reason) == OCMS_OK) cJSON_AddNumberToObject(reply, "count", count);
    else cJSON_AddStringToObject(reply, "reason", reason);
    free(msg);
}

static void cmd_blake2b(const cJSON *cmd, cJSON *reply) {
    size_t dn, kn, pn;
    uint8_t *data = from_hex(str(cmd, "data_hex"), &dn), *key = from_hex(str(cmd, "key_hex"), &kn);
    uint8_t *person = from_hex(str(cmd, "person_hex"), &pn), padded[16], out[64];
    ocms_blake2b_state s;
    size_t outlen = (size_t)num(cmd, "digest_size", 64), chunk = (size_t)num(cmd, "chunk", 0), i;
    char *hex;
    memset(padded, 0, sizeof padded);
    memcpy(padded, person, pn > 16 ? 16 : pn);
    if (ocms_blake2b_init(&s, outlen, key, kn, pn ? padded : NULL) != OCMS_OK) {
        cJSON_AddStringToObject(reply, "error", "bad parameters");
    } else {
        if (chunk == 0) chunk = dn ? dn : 1;
        for (i = 0; i < dn; i += chunk) ocms_blake2b_update(&s, data + i, dn - i < chunk ? dn - i : chunk);
        ocms_blake2b_final(&s, out);
        hex = to_hex(out, outlen);
        cJSON_AddStringToObject(reply, "digest", hex);
        free(hex);
    }
    free(data);
    free(key);
    free(person);
}

static void cmd_field_hash(const cJSON *cmd, cJSON *reply) {
    ocms_params p;
    u128 a0 = 0, a1 = 0, x = 0;
    ocms_u128 e0, e1, ex, h;
    if (params_from(cmd, &p, reply) != 0) return;
    parse_u128(str(cmd, "a0"), &a0);
    parse_u128(str(cmd, "a1"), &a1);
    parse_u128(str(cmd, "x"), &x);
    e0 = to_el(a0);
    e1 = to_el(a1);
    ex = to_el(x);
    h = ocms_field_hash(&p, &e0, &e1, &ex);
    add_u128(reply, "hash", &h);
    cJSON_AddNumberToObject(reply, "residue", ocms_mod_m(&h, p.m));
}

/* n reports of one value from the OS CSPRNG (buffered), optionally with another keep threshold
 * (the leaky negative control of the privacy audit), written as a capture. */
static void cmd_sample(const cJSON *cmd, cJSON *reply) {
    const ocms_cfg_metric *m = find_metric(cmd, reply);
    const char *threshold = str(cmd, "keep_threshold"), *path = str(cmd, "out"), *line = str(cmd, "line");
    long n = (long)num(cmd, "n", 0), k;
    uint8_t rbuf[4096], message[OCMS_MAX_REPORT_MESSAGE], *buf;
    ocms_params params;
    ocms_metric metric;
    ocms_cfg_value v;
    ocms_rng rng;
    ocms_sent sent;
    FILE *f;
    if (m == NULL || path == NULL) return;
    buf = malloc(line ? strlen(line) + 1 : 1);
    if (value_of_line(m, line, buf, &v, reply) != 0) {
        free(buf);
        return;
    }
    params = m->params;
    if (threshold != NULL) { /* a test parameter struct: same fingerprint, another T */
        u128 t = 0;
        parse_u128(threshold, &t);
        params.keep_threshold = (uint64_t)t;
    }
    metric = m->metric;
    metric.params = &params;
    ocms_rng_init(&rng, NULL, NULL, rbuf, sizeof rbuf);
    f = fopen(path, "wb");
    for (k = 0; f != NULL && k < n; k++) {
        uint8_t prefix[4];
        int rc = v.is_string ? ocms_report_string(&metric, v.bytes, v.len, &rng, NULL, message, sizeof message, &sent)
                             : ocms_report_integer(&metric, v.integer, &rng, NULL, message, sizeof message, &sent);
        if (rc != OCMS_OK) {
            cJSON_AddStringToObject(reply, "error", ocms_strerror(rc));
            break;
        }
        prefix[0] = prefix[1] = 0;
        prefix[2] = (uint8_t)(sent.length >> 8);
        prefix[3] = (uint8_t)sent.length;
        fwrite(prefix, 1, 4, f);
        fwrite(message, 1, sent.length, f);
    }
    if (f != NULL) fclose(f);
    ocms_rng_wipe(&rng);
    cJSON_AddNumberToObject(reply, "written", (double)k);
    free(buf);
}

/* Issue 40: {"metric", "value": a number or "Infinity" / "-Infinity" / "NaN"} -> {"bucket"} (the library alone,
 * ocms_numeric_bucket, on the loaded metric's layout). */
static void cmd_numeric_bucket(const cJSON *cmd, cJSON *reply) {
    const ocms_cfg_metric *m = find_metric(cmd, reply);
    const cJSON *value = cJSON_GetObjectItemCaseSensitive(cmd, "value");
    double x;
    uint64_t bucket = 0;
    if (m == NULL) return;
    if (!m->has_numeric) {
        cJSON_AddStringToObject(reply, "error", "not a numeric metric");
        return;
    }
    if (cJSON_IsNumber(value)) x = value->valuedouble;
    else if (cJSON_IsString(value) && strcmp(value->valuestring, "Infinity") == 0) x = HUGE_VAL;
    else if (cJSON_IsString(value) && strcmp(value->valuestring, "-Infinity") == 0) x = -HUGE_VAL;
    else if (cJSON_IsString(value) && strcmp(value->valuestring, "NaN") == 0) x = nan("");
    else {
        cJSON_AddStringToObject(reply, "error", "value: a number, \"Infinity\", \"-Infinity\" or \"NaN\"");
        return;
    }
    if (ocms_numeric_bucket(&m->numeric, x, &bucket) != OCMS_OK) {
        cJSON_AddStringToObject(reply, "error", ocms_strerror(OCMS_E_VALUE));
        return;
    }
    cJSON_AddNumberToObject(reply, "bucket", (double)bucket);
}

/* Issue 40: {"mean": the device config's mean entry, "value": a number or "Infinity" / "-Infinity" / "NaN",
 * "random_hex", "buffered"} -> {"is_mean", "z", "used"} (the library alone, ocms_mean_draw, on recorded bytes). */
static void cmd_mean(const cJSON *cmd, cJSON *reply) {
    const cJSON *entry = cJSON_GetObjectItemCaseSensitive(cmd, "mean"), *value = cJSON_GetObjectItemCaseSensitive(cmd, "value");
    const char *names[] = {"pm_share", "pm_keep", "duchi_low", "duchi_step"}, *rule = NULL;
    uint64_t *slots[4];
    ocms_mean mean;
    recorded_t rec;
    uint8_t *bytes;
    size_t n, i;
    double x;
    uint32_t z = 0;
    int is_mean = 0, rc;
    memset(&mean, 0, sizeof mean);
    slots[0] = &mean.pm_share, slots[1] = &mean.pm_keep, slots[2] = &mean.duchi_low, slots[3] = &mean.duchi_step;
    if (!cJSON_IsObject(entry)) {
        cJSON_AddStringToObject(reply, "error", "mean: expected the device config's mean entry");
        return;
    }
    mean.lower = cJSON_GetObjectItemCaseSensitive(entry, "lower")->valuedouble;
    mean.upper = cJSON_GetObjectItemCaseSensitive(entry, "upper")->valuedouble;
    mean.parts = (uint32_t)cJSON_GetObjectItemCaseSensitive(entry, "parts")->valuedouble;
    mean.grid = (uint32_t)cJSON_GetObjectItemCaseSensitive(entry, "grid")->valuedouble;
    mean.window = (uint32_t)cJSON_GetObjectItemCaseSensitive(entry, "window")->valuedouble;
    for (i = 0; i < 4; i++) *slots[i] = strtoull(cJSON_GetObjectItemCaseSensitive(entry, names[i])->valuestring, NULL, 10);
    if (ocms_mean_check(&mean, &rule) != OCMS_OK) {
        cJSON_AddStringToObject(reply, "error", rule);
        return;
    }
    if (cJSON_IsNumber(value)) x = value->valuedouble;
    else if (cJSON_IsString(value) && strcmp(value->valuestring, "Infinity") == 0) x = HUGE_VAL;
    else if (cJSON_IsString(value) && strcmp(value->valuestring, "-Infinity") == 0) x = -HUGE_VAL;
    else x = nan("");
    bytes = from_hex(str(cmd, "random_hex"), &n);
    recorded_init(&rec, bytes, n, cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cmd, "buffered")));
    rc = ocms_mean_draw(&mean, x, &rec.rng, &is_mean, &z);
    if (rc != OCMS_OK) cJSON_AddStringToObject(reply, "error", ocms_strerror(rc));
    cJSON_AddBoolToObject(reply, "is_mean", is_mean);
    cJSON_AddNumberToObject(reply, "z", (double)z);
    cJSON_AddNumberToObject(reply, "used", (double)recorded_used(&rec));
    ocms_rng_wipe(&rec.rng);
    free(bytes);
}

static void cmd_load(const cJSON *cmd, cJSON *reply, int from_text) {
    char err[1024];
    int rc;
    if (loaded) ocms_cfg_free(&config);
    loaded = 0;
    if (from_text) {
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(cmd, "text");
        rc = cJSON_IsString(text) ? ocms_cfg_load_text(text->valuestring, strlen(text->valuestring), &config, err, sizeof err) : -1;
        if (!cJSON_IsString(text)) strcpy(err, "no text");
    } else {
        rc = ocms_cfg_load_file(str(cmd, "path") ? str(cmd, "path") : "", &config, err, sizeof err);
    }
    if (rc != 0) {
        cJSON_AddStringToObject(reply, "error", err);
        return;
    }
    loaded = 1;
    cJSON_AddNumberToObject(reply, "metrics", (double)config.count);
    {
        size_t i, means = 0;
        for (i = 0; i < config.count; i++) means += (size_t)config.metrics[i].has_mean;
        cJSON_AddNumberToObject(reply, "means", (double)means); /* issue 40: metrics whose "mean" entry was read */
    }
}

int main(void) {
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    setvbuf(stdout, NULL, _IOLBF, 0);
    while ((got = getline(&line, &cap, stdin)) > 0) {
        cJSON *cmd = cJSON_Parse(line), *reply = cJSON_CreateObject();
        const char *op = str(cmd, "op");
        const cJSON *pclmul = cJSON_GetObjectItemCaseSensitive(cmd, "pclmul");
        char *text;
        if (cJSON_IsBool(pclmul)) ocms_use_pclmul(cJSON_IsTrue(pclmul));
        if (op == NULL) cJSON_AddStringToObject(reply, "error", "no op");
        else if (strcmp(op, "load") == 0) cmd_load(cmd, reply, 0);
        else if (strcmp(op, "load_text") == 0) cmd_load(cmd, reply, 1);
        else if (strcmp(op, "params") == 0) cmd_params(cmd, reply);
        else if (strcmp(op, "value") == 0) {
            const ocms_cfg_metric *m = find_metric(cmd, reply);
            if (m != NULL) {
                const char *l = str(cmd, "line");
                uint8_t *buf = malloc(l ? strlen(l) + 1 : 1);
                ocms_cfg_value v;
                if (value_of_line(m, l, buf, &v, reply) == 0) cJSON_AddBoolToObject(reply, "valid", 1);
                free(buf);
            }
        } else if (strcmp(op, "report") == 0) cmd_report(cmd, reply);
        else if (strcmp(op, "frame") == 0) cmd_frame(cmd, reply);
        else if (strcmp(op, "longitudinal") == 0) cmd_longitudinal(cmd, reply);
        else if (strcmp(op, "fingerprint") == 0) cmd_fingerprint(cmd, reply);
        else if (strcmp(op, "encode") == 0) cmd_encode(cmd, reply);
        else if (strcmp(op, "check") == 0) cmd_check(cmd, reply);
        else if (strcmp(op, "blake2b") == 0) cmd_blake2b(cmd, reply);
        else if (strcmp(op, "field_hash") == 0) cmd_field_hash(cmd, reply);
        else if (strcmp(op, "sample") == 0) cmd_sample(cmd, reply);
        else if (strcmp(op, "pclmul") == 0) cJSON_AddNumberToObject(reply, "active", ocms_pclmul_active());
        else if (strcmp(op, "numeric_bucket") == 0) cmd_numeric_bucket(cmd, reply);
        else if (strcmp(op, "mean") == 0) cmd_mean(cmd, reply);
        else cJSON_AddStringToObject(reply, "error", "unknown op");
        cJSON_AddNumberToObject(reply, "pclmul_active", ocms_pclmul_active());
        text = cJSON_PrintUnformatted(reply);
        puts(text);
        free(text);
        cJSON_Delete(reply);
        cJSON_Delete(cmd);
    }
    free(line);
    if (loaded) ocms_cfg_free(&config);
    return 0;
}
