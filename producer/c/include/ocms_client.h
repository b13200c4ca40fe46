/*
 * ocms_client.h -- the OCMS+RR device client for native and embedded devices (C99).
 *
 * Privatizes a value into an epsilon-LDP report (OCMS+RR or direct randomized response),
 * encodes it as a wire-v1 message (docs/wire-format.md) and asks the caller's ledger to
 * charge it, exactly as the Python device (cms_core.privatize, producer/reporter.py) does:
 * the same randomness contract byte for byte (docs/device.md, "Randomness contract"), the
 * same integer keep threshold T, the same field arithmetic, value fingerprints and
 * discovery prefixes. The reference is docs/device.md, "The C client".
 *
 * Style (libsodium's): the caller owns every byte of memory; parameters are plain structs
 * the caller fills (from `ocms registry device-config`, see producer/c/example/config.c);
 * the report path allocates nothing, takes no locks and does no I/O besides reading the
 * randomness source; every function returns OCMS_OK (0) or a negative OCMS_E_* code.
 * Thread safety: the functions are reentrant; an ocms_rng must not be shared between
 * threads without the caller's lock.
 */
#ifndef OCMS_CLIENT_H
#define OCMS_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The release (the project's one version, semantic versioning: cms_core/version.py) and the ABI version, the
 * shared object's soname (libocms_client.so.OCMS_ABI_VERSION; producer/c/Makefile reads both from here). The ABI
 * version changes with any change that breaks a program linked against the previous library (a struct's layout,
 * a function's signature or meaning), in 0.x releases too; docs/compatibility.md lists both. */
#define OCMS_VERSION_MAJOR 0
#define OCMS_VERSION_MINOR 2
#define OCMS_VERSION_PATCH 0
#define OCMS_VERSION_STRING "0.2.0"
#define OCMS_ABI_VERSION 0
/* The name of OCMS_VERSION_STRING before release 0.2.0 (it said "1.0.0", a number no release had). */
#define OCMS_CLIENT_VERSION OCMS_VERSION_STRING

/* Every public function is exported from the shared object; nothing else is. */
#if defined(__GNUC__) || defined(__clang__)
#define OCMS_API __attribute__((visibility("default")))
#else
#define OCMS_API
#endif

/* ------------------------------------------------------------------ results */
#define OCMS_OK 0
#define OCMS_MEMOIZED 1        /* the ledger returned this period's earlier report for the value (free) */
#define OCMS_E_PARAMS (-1)     /* a parameter struct is inconsistent (ocms_params_check says which rule) */
#define OCMS_E_VALUE (-2)      /* the value is not in the metric's dictionary (nothing was drawn or charged) */
#define OCMS_E_RANDOM (-3)     /* the randomness source failed (or returned 1000 rejections in a row) */
#define OCMS_E_BUFFER (-4)     /* the output buffer is too small */
#define OCMS_E_BUDGET (-5)     /* the ledger refused: the metric's privacy budget for this period is spent */
#define OCMS_E_LEDGER (-6)     /* the ledger could not record the charge (nothing may be sent) */
#define OCMS_E_MESSAGE (-7)    /* ocms_message_check: the message is not valid wire v1 (see *reason) */

/* A short English description of an OCMS_* code (static storage). */
OCMS_API const char *ocms_strerror(int code);

/* The release of the library linked at run time, "MAJOR.MINOR.PATCH" (static storage): compare with
 * OCMS_VERSION_STRING, the release of the header the program was compiled with (src/version.c). */
OCMS_API const char *ocms_version(void);

/* ------------------------------------------------------------------ sizes */
#define OCMS_HEADER_BYTES 16
#define OCMS_MAX_RECORD_BYTES 36        /* GF(2^128): 16 + 16 + z of at most 4 bytes */
#define OCMS_MAX_REPORT_MESSAGE (OCMS_HEADER_BYTES + OCMS_MAX_RECORD_BYTES)
#define OCMS_MAX_FRAME_RECORDS (1u << 20)
#define OCMS_VALUE_KEY_BYTES 24         /* memoization key: fingerprint (8) | field element (<= 16) */
#define OCMS_MAX_HASH_RANGE 4294967295u /* m <= 2^32 - 1 */

/* ------------------------------------------------------------------ parameters */
/* A field element or a 128-bit integer: value = hi * 2^64 + lo. */
typedef struct {
    uint64_t hi, lo;
} ocms_u128;

typedef enum {
    OCMS_FIELD_PRIME = 1,   /* F(p), 3 <= p <= 2^64 - 59 */
    OCMS_FIELD_GF2_64 = 2,  /* GF(2^64), x^64 + x^4 + x^3 + x + 1 */
    OCMS_FIELD_GF2_128 = 3  /* GF(2^128), x^128 + x^7 + x^2 + x + 1 */
} ocms_field_kind;

typedef enum {
    OCMS_MECHANISM_OCMS = 0,  /* OCMS+RR: report (a0, a1, z) */
    OCMS_MECHANISM_DIRECT = 1 /* direct randomized response over the d values (m = d): report z */
} ocms_mechanism;

typedef enum {
    OCMS_DOMAIN_INTEGERS = 0, /* integers [0, d) (categories: their index in the registry's list) */
    OCMS_DOMAIN_STRINGS = 1   /* strings/bytes, as 128-bit fingerprints in GF(2^128) */
} ocms_value_domain;

/* One parameter set (a metric version, or one discovery level): everything the device needs. */
typedef struct {
    uint8_t fingerprint[8];    /* the parameter fingerprint of the device config (wire header) */
    double epsilon;            /* per-report budget: what the ledger charges */
    uint32_t m;                /* hash range (direct RR: m = d) */
    uint64_t keep_threshold;   /* T: keep the true hash when a uniform 64-bit draw is below T.
                                  Take it from the device config (keep_threshold); never recompute
                                  it from exp(epsilon) with your own libm. */
    ocms_mechanism mechanism;
    ocms_field_kind field;
    uint64_t prime;            /* the order p of OCMS_FIELD_PRIME (also direct RR's descriptor field) */
    ocms_value_domain domain;
    uint64_t max_value;        /* integers: d - 1 (d <= 2^64); unused for strings (d = 2^128) */
} ocms_params;

/* OCMS_OK, or OCMS_E_PARAMS with *rule (if non-NULL) naming the broken rule (static text). */
OCMS_API int ocms_params_check(const ocms_params *params, const char **rule);

/* The parameter fingerprint (docs/wire-format.md, "The parameter fingerprint") of params with an
 * optional binding label ("metric@version", "metric@version/levelL"; NULL for none). The device
 * config carries it; computing it checks that the config's numbers are the ones it names. */
OCMS_API int ocms_params_fingerprint(const ocms_params *params, const char *binding, size_t binding_len, uint8_t out[8]);

/* Bytes of one wire record (a0 | a1 | z, or z alone for direct RR), of a message of count records. */
OCMS_API size_t ocms_record_size(const ocms_params *params);
OCMS_API size_t ocms_message_size(const ocms_params *params, uint32_t count);

/* ------------------------------------------------------------------ randomness */
/* fill(ctx, out, len) writes len random bytes and returns 0, or non-zero on failure. */
typedef int (*ocms_random_fn)(void *ctx, uint8_t *out, size_t len);

/* The randomness source, read as one byte stream through the randomness contract.
 * fill == NULL reads the operating system's CSPRNG (getrandom() on Linux, getentropy() on the
 * BSDs and macOS; elsewhere a fill callback is required). With a buffer, the source is read
 * `capacity` bytes at a time ahead of the draws, and consumed bytes are wiped; the draws read the
 * same byte stream in the same order, so the contract (and every test vector) is unchanged; only
 * the number of calls to the source changes (one per capacity bytes instead of one per draw). */
typedef struct {
    ocms_random_fn fill;
    void *ctx;
    uint8_t *buffer;   /* optional caller-owned read-ahead buffer, or NULL */
    size_t capacity;
    size_t start, end; /* unread bytes are buffer[start, end) (library-private) */
} ocms_rng;

OCMS_API void ocms_rng_init(ocms_rng *rng, ocms_random_fn fill, void *ctx, uint8_t *buffer, size_t capacity);
/* Wipes the unread buffered bytes (call before freeing the buffer). */
OCMS_API void ocms_rng_wipe(ocms_rng *rng);
/* The OS CSPRNG as an ocms_random_fn (what fill == NULL uses); ctx is ignored. */
OCMS_API int ocms_os_random(void *ctx, uint8_t *out, size_t len);

/* The contract's draws (exposed for clients of other mechanisms and for the test vectors). */
OCMS_API int ocms_draw_bits64(ocms_rng *rng, uint64_t *out);
OCMS_API int ocms_draw_below(ocms_rng *rng, uint64_t n, uint64_t *out); /* n >= 1 */

/* ------------------------------------------------------------------ values */
/* The field element of an integer value (OCMS_E_VALUE unless value <= max_value). */
OCMS_API int ocms_element_integer(const ocms_params *params, uint64_t value, ocms_u128 *element);
/* The 128-bit fingerprint of a string value: BLAKE2b-128 of its bytes (UTF-8 for text),
 * personalisation "ocms-value-v1", read big-endian (cms_core.values.string_fingerprint). */
OCMS_API void ocms_string_fingerprint(const void *bytes, size_t len, ocms_u128 *element);

/* ------------------------------------------------------------------ discovery */
typedef enum { OCMS_DISCOVERY_STRINGS = 1, OCMS_DISCOVERY_INTEGERS = 2 } ocms_discovery_kind;

/* A discoverable metric's domain and its levels' parameters (docs/discovery.md). */
typedef struct {
    ocms_discovery_kind kind;
    uint32_t levels;                 /* g: every report describes the prefix at one level */
    const ocms_params *level_params; /* levels entries; entry L - 1 is level L */
    /* strings: symbols are the alphabet's Unicode code points (alphabet, alphabet_size), or the
       value's UTF-8 bytes when alphabet == NULL (the registry's "utf8") */
    const uint32_t *alphabet;
    uint32_t alphabet_size;
    uint32_t max_length, symbols_per_level;
    /* integers: values [0, 2^bits), bits_per_level most significant bits per level */
    uint32_t bits, bits_per_level;
} ocms_discovery;

OCMS_API int ocms_discovery_check(const ocms_discovery *discovery, const char **rule);
/* The dictionary element level L's parameters encode for a value (cms_core.discovery.prefix_value). */
OCMS_API int ocms_prefix_element_string(const ocms_discovery *discovery, const void *value, size_t len, uint32_t level,
                               ocms_u128 *element);
OCMS_API int ocms_prefix_element_integer(const ocms_discovery *discovery, uint64_t value, uint32_t level, ocms_u128 *element);

/* ------------------------------------------------------------------ reports */
typedef struct {
    const ocms_params *params; /* the parameter set it was made with (a discovery level's, for discovery) */
    uint32_t level;            /* discovery level 1..g, 0 for an ordinary report */
    ocms_u128 a0, a1;          /* hash coefficients (direct RR: 0 and 1, not sent) */
    uint32_t z;                /* randomized response, < m */
} ocms_report;

/* One report of a field element with params (the randomness contract: a0, a1, keep, other). */
OCMS_API int ocms_privatize(const ocms_params *params, const ocms_u128 *element, ocms_rng *rng, ocms_report *report);

/* A metric as a device reports it. */
typedef struct {
    const char *name;                /* the ledger account: the metric's name (all versions share it) */
    const ocms_params *params;       /* its newest live version */
    const ocms_discovery *discovery; /* non-NULL: every report is a discovery report */
    int memoize;                     /* ask the ledger to re-send this period's report of a repeated value */
} ocms_metric;

/* Validate the value, then (and only then) draw: a report of the metric (a discovery report of a
 * random level for a discoverable metric). Integers (categories: their index) or string bytes. */
OCMS_API int ocms_privatize_integer(const ocms_metric *metric, uint64_t value, ocms_rng *rng, ocms_report *report);
OCMS_API int ocms_privatize_string(const ocms_metric *metric, const void *value, size_t len, ocms_rng *rng,
                          ocms_report *report);

/* ------------------------------------------------------------------ wire v1 */
OCMS_API int ocms_encode_report(const ocms_report *report, uint8_t *out, size_t capacity, size_t *length);
/* One frame of count reports, all made with the same parameters (same fingerprint). */
OCMS_API int ocms_encode_frame(const ocms_report *reports, uint32_t count, uint8_t *out, size_t capacity, size_t *length);

/* Validate one message as the worker and the collector do (cms_core.wire.decode_message) against
 * nsets parameter sets. OCMS_OK with *which (the matching set) and *count, or OCMS_E_MESSAGE with
 * *reason one of: truncated, bad_magic, bad_version, bad_kind, unknown_fingerprint,
 * count_mismatch, oversized, coefficient_out_of_field, z_out_of_range. */
OCMS_API int ocms_message_check(const ocms_params *sets, size_t nsets, const uint8_t *message, size_t length,
                       size_t *which, uint32_t *count, const char **reason);

/* ------------------------------------------------------------------ the ledger */
/* Epsilon in units of 10^-9, rounded up: exact for every epsilon with at most 9 decimals (the
 * device config writes Python's shortest spelling: 0.1 -> 100000000), so ten charges of 0.1 fill a
 * budget of 1.0 exactly, as producer/ledger.py accounts; never below the true epsilon otherwise. */
OCMS_API uint64_t ocms_epsilon_nano(double epsilon);

/* The caller's privacy ledger (docs/device.md, "The C client": what it must store).
 * charge(ctx, metric, epsilon_nano, value_key, key_len, message, length, capacity):
 *   spend epsilon_nano on `metric` in the current period and return OCMS_OK, or refuse with
 *   OCMS_E_BUDGET when the spend would exceed the budget (spend == budget is allowed), or
 *   OCMS_E_LEDGER when it cannot record the charge durably. With value_key != NULL (memoization)
 *   it may instead copy the report it stored for (metric, period, value_key) into message, set
 *   *length and return OCMS_MEMOIZED (nothing charged); a first charge stores message for that key.
 *   The charge must be durable before it returns: the report is sent only afterwards. */
typedef struct {
    int (*charge)(void *ctx, const char *metric, uint64_t epsilon_nano, const uint8_t *value_key, size_t key_len,
                  uint8_t *message, size_t *length, size_t capacity);
    void *ctx;
} ocms_ledger;

/* What ocms_report_* produced. */
typedef struct {
    size_t length;  /* bytes of the wire message in out */
    uint32_t level; /* discovery or tree level of the message (0: neither) */
    int memoized;   /* 1: the ledger re-sent this period's report of the same value (nothing charged) */
} ocms_sent;

/* The whole device path, as producer/reporter.py orders it: validate the value (OCMS_E_VALUE:
 * nothing drawn or charged), privatize, encode into out (>= OCMS_MAX_REPORT_MESSAGE bytes is
 * always enough), then charge the ledger (ledger may be NULL: the caller accounts). On any error
 * out is wiped and nothing may be sent. */
OCMS_API int ocms_report_integer(const ocms_metric *metric, uint64_t value, ocms_rng *rng, const ocms_ledger *ledger,
                        uint8_t *out, size_t capacity, ocms_sent *sent);
OCMS_API int ocms_report_string(const ocms_metric *metric, const void *value, size_t len, ocms_rng *rng,
                       const ocms_ledger *ledger, uint8_t *out, size_t capacity, ocms_sent *sent);

/* ------------------------------------------------------------------ numeric metrics (issue 40) */
/* A numeric metric is an integer metric over its bucket indices (cms_core/numeric.py, docs/device.md "Numeric
 * metrics"): the device config's "numeric" entry gives lower, upper and the bounds (never recomputed from a scale).
 * A number is clipped into [lower, upper] and reported as the index of the first bound >= it (a value equal to a
 * bound is in the bucket that bound closes; count + 1 buckets, the last above every bound), with
 * ocms_report_integer. Shared vectors: tests/vectors/numeric_v1.json. Caller-owned memory. */
typedef struct {
    double lower, upper;  /* finite, lower < upper */
    const double *bounds; /* count bounds, strictly increasing, strictly inside (lower, upper) */
    size_t count;         /* >= 1; the metric's dictionary size is count + 1 */
} ocms_numeric;

/* OCMS_OK, or OCMS_E_PARAMS with *rule naming what is wrong (rule may be NULL). */
OCMS_API int ocms_numeric_check(const ocms_numeric *numeric, const char **rule);
/* The bucket index of value (+-infinity clipped too); OCMS_E_VALUE for NaN. The layout must pass ocms_numeric_check. */
OCMS_API int ocms_numeric_bucket(const ocms_numeric *numeric, double value, uint64_t *bucket);

/* ------------------------------------------------------------------ hierarchical histograms (issue 40) */
/* A numeric metric reported as a hierarchical histogram (cms_core/hierarchy.py, docs/device.md "Numeric metrics"):
 * the device config's "hierarchy" entry. Level L (1..levels) has its own parameters (binding NAME@VERSION/levelL)
 * over ceil(buckets / span) nodes, span = branching^(levels - L); the finest level (span 1) is the metric version's
 * parameters. A report draws its level first (below(levels) + 1), then reports its bucket's node, bucket / span,
 * with that level's parameters. Shared vectors: tests/vectors/numeric_hierarchy_v1.json. Caller-owned memory. */
typedef struct {
    uint64_t buckets;                /* k: the numeric layout's count + 1 */
    uint32_t branching;              /* B in [2, 16], below buckets */
    uint32_t levels;                 /* the smallest h with B^h >= buckets */
    const ocms_params *level_params; /* levels entries; entry L - 1 is level L */
} ocms_tree;

/* OCMS_OK, or OCMS_E_PARAMS with *rule naming what is wrong (rule may be NULL). */
OCMS_API int ocms_tree_check(const ocms_tree *tree, const char **rule);
/* *span = branching^(levels - level), the buckets one node of level (1..levels) holds (the device config states it
 * per level; a reader checks it against this). OCMS_E_PARAMS (*span 0) for a level outside 1..levels or a shape
 * ocms_tree_check refuses. */
OCMS_API int ocms_tree_span(const ocms_tree *tree, uint32_t level, uint64_t *span);
/* The first draw of a tree report: *level (1..levels) and the bucket's *node there. OCMS_E_VALUE (nothing drawn)
 * unless bucket < buckets. */
OCMS_API int ocms_tree_draw(const ocms_tree *tree, uint64_t bucket, ocms_rng *rng, uint32_t *level, uint64_t *node);
/* ocms_report_integer of a tree metric's bucket (metric->params: its finest level's; discovery NULL): the level
 * and node drawn, the node privatized with the level's parameters, encoded (its fingerprint), charged once
 * (sent->level: the level). With memoize the ledger's key is the bucket (as the finest level encodes it), so a
 * repeat of the bucket in the period re-sends the same message, its level included. */
OCMS_API int ocms_report_tree(const ocms_metric *metric, const ocms_tree *tree, uint64_t bucket, ocms_rng *rng,
                              const ocms_ledger *ledger, uint8_t *out, size_t capacity, ocms_sent *sent);

/* ------------------------------------------------------------------ Hybrid means (issue 40) */
/* A numeric metric's mean by Wang et al.'s Hybrid mechanism (cms_core/hybrid.py, docs/device.md "Numeric means"):
 * the device config's "mean" entry. A report draws its part first, below(parts); part 0 is a Hybrid report z of the
 * number, framed as a direct-RR report over grid + window + 2 values with the entry's fingerprint; any other part
 * is the histogram's report, drawn on from the same rng. Shared vectors: tests/vectors/numeric_mean_v1.json. */
typedef struct {
    double lower, upper;    /* the numeric layout's clipping bounds */
    uint32_t parts;         /* >= 1 (1: every report a Hybrid one, nothing drawn for the part) */
    uint32_t grid;          /* K: even, in [2, 2^20] */
    uint32_t window;        /* W in [1, K] */
    uint64_t pm_share;      /* the Piecewise Mechanism's branch when bits64() < pm_share */
    uint64_t pm_keep;       /* its window kept when bits64() < pm_keep */
    uint64_t duchi_low;     /* Duchi's "+" at grid point j when bits64() < duchi_low + j duchi_step */
    uint64_t duchi_step;
} ocms_mean;

/* OCMS_OK, or OCMS_E_PARAMS with *rule naming what is wrong (rule may be NULL). */
OCMS_API int ocms_mean_check(const ocms_mean *mean, const char **rule);
/* The part, then for part 0 the Hybrid report of value: *is_mean 1 and *z in [0, grid + window + 2); any other
 * part: *is_mean 0, nothing more drawn. OCMS_E_VALUE (nothing drawn) for NaN; +-infinity is clipped. */
OCMS_API int ocms_mean_draw(const ocms_mean *mean, double value, ocms_rng *rng, int *is_mean, uint32_t *z);
/* The whole device path of a number of a numeric metric with a Hybrid mean (metric->params: the histogram's, a
 * tree's finest level's; tree NULL unless the metric is one; numeric as ocms_numeric_check passes it; carrier: the
 * mean entry's direct-RR parameters over grid + window + 2 values, its binding NAME@VERSION/mean): the value
 * bucketed (OCMS_E_VALUE for NaN: nothing drawn or charged), the part drawn (ocms_mean_draw), then part 0's z
 * framed with the carrier's fingerprint, or the histogram's report of the bucket (ocms_report_integer's, or
 * ocms_report_tree's level and node) from the same rng; encoded, charged once (the metric's epsilon, whatever the
 * part). With memoize the ledger's key is the bucket (as metric->params encodes it), so a number of a bucket seen
 * this period re-sends that report, a Hybrid one included. sent->level: the tree level (0 for a Hybrid report). */
OCMS_API int ocms_report_mean(const ocms_metric *metric, const ocms_numeric *numeric, const ocms_tree *tree,
                              const ocms_mean *mean, const ocms_params *carrier, double value, ocms_rng *rng,
                              const ocms_ledger *ledger, uint8_t *out, size_t capacity, ocms_sent *sent);

/* ------------------------------------------------------------------ longitudinal reports (issue 38) */
/* A metric version's longitudinal mode (device config "longitudinal"; src/longitudinal.c, docs/device.md):
 * the hash of (device, metric version) and the memoized first round are derived from a device secret
 * (keyed BLAKE2b), the second round drawn from rng. One report is epsilon-LDP (eps_1); all reports of one
 * hashed value together lifetime_epsilon-LDP (eps_inf). The caller's ledger charges lifetime_epsilon the
 * first time a seen key (ocms_longitudinal_seen_key) is reported, and nothing for later reports of it. */
typedef struct {
    const ocms_params *params; /* the report parameters: epsilon = eps_1, m = g */
    double lifetime_epsilon;   /* eps_inf */
    uint64_t memo_threshold;   /* T1: from the device config (longitudinal.memo_threshold) */
    uint64_t report_threshold; /* T2: from the device config (longitudinal.report_threshold) */
} ocms_longitudinal;

#define OCMS_SEEN_KEY_BYTES 37 /* "ocms-longitudinal-v1/seen" | fingerprint (8) | hashed value (4, big-endian) */

/* OCMS_OK, or OCMS_E_PARAMS with *rule: T1 must belong to (eps_inf, m), T2 with T1 to (eps_1, m). */
OCMS_API int ocms_longitudinal_check(const ocms_longitudinal *l, const char **rule);
/* One report of a field element (ocms_element_integer / ocms_string_fingerprint); *hashed is y, the
 * ledger's key (never sent). secret: 16 to 64 bytes, the same for the device's life. */
OCMS_API int ocms_longitudinal_privatize(const ocms_longitudinal *l, const uint8_t *secret, size_t secret_len,
                                         const ocms_u128 *element, ocms_rng *rng, ocms_report *report, uint32_t *hashed);
OCMS_API void ocms_longitudinal_seen_key(const ocms_longitudinal *l, uint32_t hashed, uint8_t out[OCMS_SEEN_KEY_BYTES]);

/* ------------------------------------------------------------------ BLAKE2b (RFC 7693) */
typedef struct {
    uint64_t h[8], t[2];
    uint8_t block[128];
    size_t filled, outlen;
} ocms_blake2b_state;

/* outlen 1..64, keylen 0..64, person: 16 bytes or NULL (zero padded by the caller). */
OCMS_API int ocms_blake2b_init(ocms_blake2b_state *state, size_t outlen, const void *key, size_t keylen,
                      const uint8_t person[16]);
OCMS_API void ocms_blake2b_update(ocms_blake2b_state *state, const void *data, size_t len);
OCMS_API void ocms_blake2b_final(ocms_blake2b_state *state, uint8_t *out);

/* ------------------------------------------------------------------ carry-less multiply */
/* Which carry-less multiply the binary fields use: 1 = PCLMULQDQ (x86-64, chosen at run time
 * when the CPU has it), 0 = the portable constant-time code. ocms_use_pclmul(0) forces the
 * portable one, (1) asks for PCLMUL (ignored without it); both return what is now in use. Building
 * with -DOCMS_NO_PCLMUL leaves only the portable code. */
OCMS_API int ocms_pclmul_active(void);
OCMS_API int ocms_use_pclmul(int enable);

#ifdef __cplusplus
}
#endif
#endif /* OCMS_CLIENT_H */
