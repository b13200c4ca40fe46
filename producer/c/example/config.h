/* The device configuration (`ocms registry device-config`, or GET /v1/metrics of the collector) read
 * into the library's parameter structs, and value names (JSON strings) mapped to library values.
 * Part of the example program and the test driver, not of the library (it allocates and uses cJSON). */
#ifndef OCMS_EXAMPLE_CONFIG_H
#define OCMS_EXAMPLE_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "ocms_client.h"

typedef struct {
    char *name;
    uint32_t version;
    ocms_params params;
    /* categories: names as bytes (a name may hold any character) */
    char **categories;
    size_t *category_lengths;
    size_t ncategories;
    /* discovery */
    int has_discovery;
    ocms_discovery discovery;
    ocms_params *levels;
    uint32_t *alphabet;
    ocms_metric metric; /* points into this struct: do not copy a loaded metric */
    int longitudinal;   /* issue 38: the config gives a longitudinal mode: memoized two-round reports */
    ocms_longitudinal longitudinal_params; /* its parameters (params points at this struct's params) */
    int has_numeric;      /* issue 40: a numeric metric: a value is a number, reported as its bucket index */
    ocms_numeric numeric; /* its layout (bounds points at this struct's bounds) */
    double *bounds;
    int has_tree;       /* issue 40: a numeric metric reported as a hierarchical histogram ("mechanism": "hierarchy") */
    ocms_tree tree;     /* its levels (level_params points at tree_levels); params are its finest level's */
    ocms_params *tree_levels;
    int has_mean;           /* issue 40: a numeric metric with a Hybrid mean (the config's "mean" entry) */
    ocms_mean mean;         /* its split and thresholds (lower, upper: the numeric entry's) */
    ocms_params mean_params; /* its carrier: direct RR over grid + window + 2 values, binding NAME@VERSION/mean */
    unsigned min_client[3]; /* min_client_version: the oldest client release that may report it; 0.0.0: any */
} ocms_cfg_metric;

typedef struct {
    ocms_cfg_metric *metrics;
    size_t count;
} ocms_cfg;

/* Formats a one-line error into err and returns -1 (the examples' error convention). */
int ocms_cfg_problem(char *err, size_t errlen, const char *fmt, ...);

/* 0, or -1 with a one-line reason in err (naming the JSON path). */
int ocms_cfg_load_text(const char *text, size_t len, ocms_cfg *cfg, char *err, size_t errlen);
int ocms_cfg_load_file(const char *path, ocms_cfg *cfg, char *err, size_t errlen);
void ocms_cfg_free(ocms_cfg *cfg);
const ocms_cfg_metric *ocms_cfg_find(const ocms_cfg *cfg, const char *name);
/* 0 when the linked library (ocms_version()) may report the metric; -1 with err naming the release to upgrade
 * to when the config's min_client_version is newer (issue 39). */
int ocms_cfg_client_too_old(const ocms_cfg_metric *m, char *err, size_t errlen);

/* A value as the library takes it: an integer (integers, category index) or string bytes. */
typedef struct {
    int is_string;
    uint64_t integer;
    double number; /* a numeric metric's number, as read (integer: its bucket); a Hybrid mean reports it */
    const uint8_t *bytes;
    size_t len;
} ocms_cfg_value;

/* Map a value name (the decoded JSON string: a category name, decimal digits, a string; for a numeric metric a
 * decimal number such as "12.5", "1e3" or "-Infinity", reported as its bucket index) to the
 * library's value and validate it against the metric (discovery alphabets included), without
 * drawing anything. 0, or -1 with the reason in err. */
int ocms_cfg_value_of(const ocms_cfg_metric *metric, const uint8_t *name, size_t len, ocms_cfg_value *value,
                      char *err, size_t errlen);

/* Parse one line holding exactly one JSON string (JSON whitespace around it allowed) into out (at
 * least len bytes). 0 with *outlen, or -1 with a static reason. Escapes, surrogate pairs, strict UTF-8. */
int ocms_json_string_line(const char *line, size_t len, uint8_t *out, size_t *outlen, const char **reason);

/* Decimal digits (<= 20, no sign, no spaces) to uint64; 0 ok, -1 not digits, -2 above 2^64 - 1. */
int ocms_parse_u64(const char *text, size_t len, uint64_t *out);

#endif
