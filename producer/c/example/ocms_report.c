/* ocms-report-c: the C client's command-line example (the same flags and behaviour as
 * producer/js/bin/ocms-report.mjs).
 *
 *   ocms-report-c --config DEVICE_CONFIG.json --metric NAME (--out CAPTURE | --collector URL) < values.jsonl
 *
 * Reads one JSON string per line (a category name, an integer's decimal digits, a string),
 * privatizes each with the OS CSPRNG through libocms_client and writes a capture (4-byte
 * big-endian length + wire message per report, as `ocms simulate --out`) holding one report per
 * input line in input order, or uploads them to an `ocms collector`. Every line is read and
 * checked before anything is drawn, charged or written: a bad line is a one-line error naming it
 * (exit 2) and nothing is produced. With --ledger, each report is charged to the metric in a
 * ledger file first (exit 1 when the budget runs out: the reports before that line are produced).
 * Exit 1 too when the capture could not be written or an upload failed within --timeout. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>

#include "config.h"
#include "ledger_file.h"
#include "upload.h"

#define PROG "ocms-report-c"
#define EXIT_FAILED 1
#define EXIT_USAGE 2
/* Above a shuffling collector's default wait for its batch (60 s) plus 2 x 5 s for Kafka's acknowledgement:
   one upload is answered only when its batch is in Kafka (docs/collector.md, "Shuffling"). */
#define DEFAULT_TIMEOUT_S 90
#define STRINGIFY(x) #x
#define TEXT_OF(x) STRINGIFY(x)
#define EXIT_BUDGET 1 /* as producer/js/bin/ocms-report.mjs: the run stops, the reports before are produced */

static const char USAGE[] =
    "usage: " PROG " --config DEVICE_CONFIG.json --metric NAME (--out CAPTURE | --collector URL)\n"
    "                     [--ledger FILE --budget EPSILON [--period-seconds N] [--memoize]]\n"
    "                     [--token TOKEN] [--max-upload-reports N] [--timeout S] [--retries N] [--max-backoff S]\n"
    "                     [--verbose]\n"
    "                     < values.jsonl\n";

static const char HELP[] =
    "\nReads one JSON string per line on stdin (a category name, an integer's decimal digits, a string),\n"
    "privatizes each value with the OS CSPRNG (libocms_client) and writes one report per line, in order.\n\n"
    "  --config FILE         the device configuration (`ocms registry device-config`, or GET /v1/metrics)\n"
    "  --metric NAME         the metric the values belong to\n"
    "  --out CAPTURE         write a capture file (4-byte big-endian length + wire message per report)\n"
    "  --collector URL       upload to an ocms collector (URL of the collector, or of its /v1/... endpoint)\n"
    "  --ledger FILE         charge every report to the metric in this ledger file first (created 0600)\n"
    "  --budget EPSILON      the most epsilon one metric may spend per period (with --ledger)\n"
    "  --period-seconds N    ledger period length, fixed per file (default 86400)\n"
    "  --memoize             re-send this period's report of a repeated value, free (with --ledger)\n"
    "                        (a longitudinal metric needs --ledger: it keeps the device secret, and charges\n"
    "                        lifetime_epsilon once per hashed value, nothing for repeats)\n"
    "  --token TOKEN         bearer token of the collector (Authorization header)\n"
    "  --max-upload-reports N  reports per upload (default 1000, the collector's default limit)\n"
    "  --retries N           at most N retries of one upload (default 1000: --timeout decides)\n"
    "  --max-backoff S       cap of backoff and Retry-After in seconds (default 30)\n"
    "  --timeout S           give up when the reports are not delivered within S seconds (default "
    TEXT_OF(DEFAULT_TIMEOUT_S) ")\n"
    "  --verbose             one line on stderr per failed upload attempt\n\n"
    "Exit status: 0 done; 1 the capture could not be written, an upload failed or the privacy budget ran out\n"
    "(the reports before that line were written or uploaded); 2 bad flags, config or input line (nothing written).\n";

static void die(int code, const char *fmt, ...) {
    va_list ap;
    fputs(PROG ": error: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(code);
}

typedef struct {
    int is_string;
    uint64_t integer;
    double number;      /* a numeric metric's number (a Hybrid mean reports it; integer is its bucket) */
    size_t offset, len; /* string bytes in the arena */
} entry;

static double number_flag(const char *flag, const char *text, double lo, double hi) {
    char *end;
    double v;
    errno = 0;
    v = strtod(text, &end);
    if (errno != 0 || end == text || *end != '\0' || !(v >= lo && v <= hi))
        die(EXIT_USAGE, "%s %s: must be a number in [%g, %g]", flag, text, lo, hi);
    return v;
}

static void *grow(void *p, size_t *cap, size_t need, size_t size) {
    size_t c = *cap ? *cap : 64;
    void *q;
    if (need <= *cap) return p;
    while (c < need) c *= 2;
    q = realloc(p, c * size);
    if (q == NULL) die(EXIT_FAILED, "out of memory");
    *cap = c;
    return q;
}

static char *endpoint(const char *url) {
    const char *scheme = strstr(url, "://");
    char *out;
    size_t n = strlen(url);
    if (scheme == NULL || (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0))
        die(EXIT_USAGE, "--collector %s: must be an http:// or https:// URL", url);
    out = malloc(n + 16);
    if (out == NULL) die(EXIT_FAILED, "out of memory");
    strcpy(out, url);
    if (strstr(scheme + 3, "/v1/") == NULL) { /* the collector's address: the fingerprint routes */
        while (n > 0 && out[n - 1] == '/') out[--n] = '\0';
        strcat(out, "/v1/reports");
    }
    return out;
}

/* Issue 38: one longitudinal report (hash and memoized response from the ledger's secret, second round from rng),
 * charged lifetime_epsilon the first time its hashed value is reported and nothing later. */
static int longitudinal_report(const ocms_cfg_metric *m, const entry *e, const uint8_t *arena, ocms_rng *rng,
                               ledger_file *ledger, uint8_t *out, size_t *length) {
    uint8_t secret[32], seen[OCMS_SEEN_KEY_BYTES];
    ocms_u128 element;
    ocms_report r;
    uint32_t hashed = 0;
    int rc;
    if (e->is_string) {
        ocms_string_fingerprint(arena + e->offset, e->len, &element);
    } else if ((rc = ocms_element_integer(&m->params, e->integer, &element)) != OCMS_OK) {
        return rc;
    }
    if (ledger_file_secret(ledger, secret) != 0) return OCMS_E_RANDOM;
    rc = ocms_longitudinal_privatize(&m->longitudinal_params, secret, sizeof secret, &element, rng, &r, &hashed);
    memset(secret, 0, sizeof secret);
    memset(&element, 0, sizeof element);
    if (rc == OCMS_OK) rc = ocms_encode_report(&r, out, OCMS_MAX_REPORT_MESSAGE, length);
    if (rc == OCMS_OK) {
        ocms_longitudinal_seen_key(&m->longitudinal_params, hashed, seen);
        rc = ledger_file_charge_lifetime(ledger, m->name, ocms_epsilon_nano(m->longitudinal_params.lifetime_epsilon),
                                         seen, sizeof seen);
        if (rc == OCMS_MEMOIZED) rc = OCMS_OK; /* a hashed value already paid for: free */
    }
    memset(&r, 0, sizeof r);
    hashed = 0;
    if (rc != OCMS_OK) memset(out, 0, OCMS_MAX_REPORT_MESSAGE);
    return rc;
}

int main(int argc, char **argv) {
    const char *config_path = NULL, *metric_name = NULL, *out_path = NULL, *collector = NULL, *ledger_path = NULL;
    const char *token = NULL;
    double budget = 0, period_seconds = 86400;
    int memoize = 0, have_budget = 0, i;
    long upload_reports = 1000;
    upload_options upload = {NULL, NULL, 1000, 30.0, 0.0, 0};
    double timeout = DEFAULT_TIMEOUT_S;
    ocms_cfg cfg;
    const ocms_cfg_metric *metric;
    ocms_metric device_metric;
    char err[1024];
    entry *entries = NULL;
    size_t nentries = 0, capentries = 0, arena_len = 0, arena_cap = 0, line_cap = 0, produced = 0;
    uint8_t *arena = NULL, *messages;
    size_t *lengths;
    char *line = NULL;
    ssize_t got;
    long lineno = 0, budget_line = 0;
    ledger_file *ledger = NULL;
    ocms_ledger ledger_if;
    ocms_rng rng;
    uint8_t random_buffer[4096];

    for (i = 1; i < argc; i++) {
        const char *arg = argv[i], *value = NULL, *eq;
        char flag[64];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            fputs(USAGE, stdout);
            fputs(HELP, stdout);
            return 0;
        }
        if (strcmp(arg, "--version") == 0) {
            printf(PROG " %s (libocms_client)\n", OCMS_CLIENT_VERSION);
            return 0;
        }
        if (strcmp(arg, "--memoize") == 0) {
            memoize = 1;
            continue;
        }
        if (strcmp(arg, "--verbose") == 0) {
            upload.verbose = 1;
            continue;
        }
        if (strncmp(arg, "--", 2) != 0) {
            fputs(USAGE, stderr);
            die(EXIT_USAGE, "unexpected argument %s (values come on stdin, one JSON string per line)", arg);
        }
        eq = strchr(arg, '=');
        snprintf(flag, sizeof flag, "%.*s", eq ? (int)(eq - arg) : (int)strlen(arg), arg);
        if (eq != NULL) value = eq + 1;
        else if (i + 1 < argc) value = argv[++i];
        else {
            fputs(USAGE, stderr);
            die(EXIT_USAGE, "%s needs a value", flag);
        }
        if (strcmp(flag, "--config") == 0) config_path = value;
        else if (strcmp(flag, "--metric") == 0) metric_name = value;
        else if (strcmp(flag, "--out") == 0) out_path = value;
        else if (strcmp(flag, "--collector") == 0) collector = value;
        else if (strcmp(flag, "--ledger") == 0) ledger_path = value;
        else if (strcmp(flag, "--budget") == 0) budget = number_flag(flag, value, 1e-9, 1e9), have_budget = 1;
        else if (strcmp(flag, "--period-seconds") == 0) period_seconds = number_flag(flag, value, 1, 1e12);
        else if (strcmp(flag, "--token") == 0) token = value;
        else if (strcmp(flag, "--max-upload-reports") == 0) upload_reports = (long)number_flag(flag, value, 1, 1048576);
        else if (strcmp(flag, "--retries") == 0) upload.retries = (int)number_flag(flag, value, 0, 1000);
        else if (strcmp(flag, "--max-backoff") == 0) upload.max_backoff = number_flag(flag, value, 0, 3600);
        else if (strcmp(flag, "--timeout") == 0) timeout = number_flag(flag, value, 0.1, 86400);
        else {
            fputs(USAGE, stderr);
            die(EXIT_USAGE, "unknown flag %s", flag);
        }
    }
    if (config_path == NULL || metric_name == NULL || (out_path == NULL) == (collector == NULL)) {
        fputs(USAGE, stderr);
        if (config_path == NULL) die(EXIT_USAGE, "--config is required");
        if (metric_name == NULL) die(EXIT_USAGE, "--metric is required");
        die(EXIT_USAGE, "give exactly one of --out CAPTURE and --collector URL");
    }
    if (period_seconds != (double)(long long)period_seconds) die(EXIT_USAGE, "--period-seconds: must be an integer");
    if ((have_budget || memoize) && ledger_path == NULL) die(EXIT_USAGE, "--budget and --memoize need --ledger FILE");
    if (ledger_path != NULL && !have_budget) die(EXIT_USAGE, "--ledger needs --budget EPSILON");
    if (ocms_cfg_load_file(config_path, &cfg, err, sizeof err) != 0) die(EXIT_USAGE, "--config %s: %s", config_path, err);
    metric = ocms_cfg_find(&cfg, metric_name);
    if (metric == NULL) {
        size_t k, o = 0;
        char names[600] = "";
        for (k = 0; k < cfg.count && o + 110 < sizeof names; k++)
            o += (size_t)snprintf(names + o, sizeof names - o, "%s%s", k ? ", " : "", cfg.metrics[k].name);
        die(EXIT_USAGE, "--metric %s: not in %s (it has: %s)", metric_name, config_path, cfg.count ? names : "no metrics");
    }
    if (ocms_cfg_client_too_old(metric, err, sizeof err) != 0) die(EXIT_USAGE, "--metric %s: %s", metric_name, err);
    if (metric->longitudinal && ledger_path == NULL) /* the secret and the lifetime charges live in the ledger */
        die(EXIT_USAGE, "--metric %s: longitudinal (memoized two-round reports): give --ledger FILE --budget EPSILON "
            "(it keeps the device secret and charges lifetime_epsilon once per hashed value)", metric_name);
    if (metric->longitudinal && memoize) die(EXIT_USAGE, "--memoize: not with a longitudinal metric (it memoizes itself)");
    device_metric = metric->metric;
    device_metric.memoize = memoize;

    /* 1. every line, checked before anything is drawn or written */
    while ((got = getline(&line, &line_cap, stdin)) >= 0) {
        size_t len = (size_t)got, outlen;
        const char *reason;
        ocms_cfg_value value;
        lineno++;
        if (len > 0 && line[len - 1] == '\n') len--;
        arena = grow(arena, &arena_cap, arena_len + len + 1, 1);
        if (ocms_json_string_line(line, len, arena + arena_len, &outlen, &reason) != 0)
            die(EXIT_USAGE, "line %ld: %s", lineno, reason);
        if (ocms_cfg_value_of(metric, arena + arena_len, outlen, &value, err, sizeof err) != 0)
            die(EXIT_USAGE, "line %ld: %s", lineno, err);
        entries = grow(entries, &capentries, nentries + 1, sizeof *entries);
        entries[nentries].is_string = value.is_string;
        entries[nentries].integer = value.integer;
        entries[nentries].number = value.number;
        entries[nentries].offset = arena_len;
        entries[nentries].len = outlen;
        nentries++;
        if (value.is_string) arena_len += outlen;
    }
    if (ferror(stdin)) die(EXIT_FAILED, "reading stdin: %s", strerror(errno));
    free(line);

    /* 2. privatize (and charge) in input order */
    if (ledger_path != NULL) {
        ledger = ledger_file_open(ledger_path, ledger_budget_nano(budget), (int64_t)period_seconds, err, sizeof err);
        if (ledger == NULL) die(EXIT_USAGE, "--ledger %s: %s", ledger_path, err);
        ledger_if = ledger_file_interface(ledger);
    }
    messages = malloc(nentries ? nentries * OCMS_MAX_REPORT_MESSAGE : 1);
    lengths = malloc(nentries ? nentries * sizeof *lengths : 1);
    if (messages == NULL || lengths == NULL) die(EXIT_FAILED, "out of memory");
    ocms_rng_init(&rng, NULL, NULL, random_buffer, sizeof random_buffer); /* getrandom(), 4 KiB at a time */
    for (produced = 0; produced < nentries; produced++) {
        const entry *e = &entries[produced];
        uint8_t *out = messages + produced * OCMS_MAX_REPORT_MESSAGE;
        ocms_sent sent;
        int rc = metric->longitudinal ? longitudinal_report(metric, e, arena, &rng, ledger, out, &sent.length)
                 : metric->has_mean /* issue 40: the part drawn first; part 0 a Hybrid report (the bucket memoized) */
                     ? ocms_report_mean(&device_metric, &metric->numeric, metric->has_tree ? &metric->tree : NULL,
                                        &metric->mean, &metric->mean_params, e->number, &rng, ledger ? &ledger_if : NULL,
                                        out, OCMS_MAX_REPORT_MESSAGE, &sent)
                 : metric->has_tree /* issue 40: the level drawn per report, its node reported (the bucket memoized) */
                     ? ocms_report_tree(&device_metric, &metric->tree, e->integer, &rng, ledger ? &ledger_if : NULL, out,
                                        OCMS_MAX_REPORT_MESSAGE, &sent)
                 : e->is_string
                     ? ocms_report_string(&device_metric, arena + e->offset, e->len, &rng, ledger ? &ledger_if : NULL,
                                          out, OCMS_MAX_REPORT_MESSAGE, &sent)
                     : ocms_report_integer(&device_metric, e->integer, &rng, ledger ? &ledger_if : NULL, out,
                                           OCMS_MAX_REPORT_MESSAGE, &sent);
        if (rc == OCMS_E_BUDGET) {
            budget_line = (long)produced + 1;
            break;
        }
        if (rc != OCMS_OK) die(rc == OCMS_E_VALUE ? EXIT_USAGE : EXIT_FAILED, "line %zu: %s", produced + 1, ocms_strerror(rc));
        lengths[produced] = sent.length;
    }
    ocms_rng_wipe(&rng);
    if (ledger != NULL && ledger_file_commit(ledger, err, sizeof err) != 0) /* durable before anything leaves */
        die(EXIT_FAILED, "--ledger %s: %s (nothing was written)", ledger_path, err);

    /* 3. the capture, or the uploads */
    if (out_path != NULL) { /* written whole or not at all: a temporary file renamed over CAPTURE */
        char *tmp = malloc(strlen(out_path) + 32);
        FILE *f;
        size_t k;
        int ok;
        if (tmp == NULL) die(EXIT_FAILED, "out of memory");
        sprintf(tmp, "%s.tmp-%ld", out_path, (long)getpid());
        f = fopen(tmp, "wb");
        ok = f != NULL;
        for (k = 0; ok && k < produced; k++) {
            uint8_t prefix[4];
            prefix[0] = (uint8_t)(lengths[k] >> 24);
            prefix[1] = (uint8_t)(lengths[k] >> 16);
            prefix[2] = (uint8_t)(lengths[k] >> 8);
            prefix[3] = (uint8_t)lengths[k];
            ok = fwrite(prefix, 1, 4, f) == 4 &&
                 fwrite(messages + k * OCMS_MAX_REPORT_MESSAGE, 1, lengths[k], f) == lengths[k];
        }
        if (f != NULL && fclose(f) != 0) ok = 0;
        if (!ok || rename(tmp, out_path) != 0) {
            int saved = errno;
            remove(tmp);
            die(EXIT_FAILED, "--out %s: cannot write: %s", out_path, strerror(saved));
        }
        free(tmp);
        fprintf(stderr, PROG ": wrote %zu reports of %s@%u to %s\n", produced, metric->name, (unsigned)metric->version,
                out_path);
    } else if (produced > 0) {
        uint8_t (*seen)[8] = malloc((metric->has_discovery ? metric->discovery.levels /* + 8: a Hybrid mean's part */
                                     : metric->has_tree ? metric->tree.levels : 1) * 8 + 8);
        uint8_t *body = malloc((size_t)upload_reports * OCMS_MAX_REPORT_MESSAGE);
        size_t nseen = 0, k, uploads = 0;
        if (seen == NULL || body == NULL) die(EXIT_FAILED, "out of memory");
        upload.url = endpoint(collector);
        upload.token = token;
        upload.deadline = upload_now() + timeout;
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0) die(EXIT_FAILED, "libcurl could not start");
        /* one parameter set per upload (the collector refuses mixed bodies): a discovery or tree metric's
           levels, and a Hybrid mean's part, go in separate uploads; each upload keeps the input order of its reports */
        for (k = 0; k < produced; k++) {
            const uint8_t *fp = messages + k * OCMS_MAX_REPORT_MESSAGE + 4;
            size_t s, j, body_len = 0, in_body = 0, first_line = 0;
            for (s = 0; s < nseen && memcmp(seen[s], fp, 8) != 0; s++) {
            }
            if (s < nseen) continue;
            memcpy(seen[nseen++], fp, 8);
            for (j = k; j <= produced; j++) {
                int attempts;
                if (j < produced && memcmp(messages + j * OCMS_MAX_REPORT_MESSAGE + 4, fp, 8) == 0) {
                    if (in_body == 0) first_line = j + 1;
                    memcpy(body + body_len, messages + j * OCMS_MAX_REPORT_MESSAGE, lengths[j]);
                    body_len += lengths[j];
                    in_body++;
                }
                if (in_body > 0 && (in_body == (size_t)upload_reports || j == produced)) {
                    if (upload_body(&upload, body, body_len, &attempts, err, sizeof err) != 0)
                        die(EXIT_FAILED, "--collector %s: upload of %zu reports (from line %zu on) %s", upload.url,
                            in_body, first_line, err);
                    uploads++;
                    body_len = in_body = 0;
                }
            }
        }
        fprintf(stderr, PROG ": uploaded %zu report%s of %s@%u to %s in %zu upload%s\n", produced,
                produced == 1 ? "" : "s", metric->name, (unsigned)metric->version, upload.url, uploads,
                uploads == 1 ? "" : "s");
        free(seen);
        free(body);
        free((char *)upload.url);
        curl_global_cleanup();
    } else {
        fprintf(stderr, PROG ": no reports to upload\n");
    }
    if (budget_line > 0) {
        uint64_t spent = ledger_file_spent(ledger, metric->name);
        fprintf(stderr, PROG ": error: line %ld: privacy budget exhausted for metric %s in period %lld: spent %.9g, "
                "requested %.9g, budget %.9g; the %zu reports before this line were produced\n", budget_line,
                metric->name, (long long)ledger_file_period(ledger), (double)spent / 1e9,
                metric->longitudinal ? metric->longitudinal_params.lifetime_epsilon : metric->params.epsilon,
                budget, produced);
    }
    ledger_file_close(ledger);
    free(messages);
    free(lengths);
    free(entries);
    free(arena);
    ocms_cfg_free(&cfg);
    return budget_line > 0 ? EXIT_BUDGET : 0;
}
