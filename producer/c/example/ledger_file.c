/* See ledger_file.h. File format (text, one record per line):
 *   ocms-c-ledger 1
 *   period_seconds N
 *   memo_key HEX64
 *   spend METRIC_HEX PERIOD SPENT_NANO CHARGES
 *   memo METRIC_HEX PERIOD DIGEST_HEX REPORT_HEX
 *   secret HEX64                     (issue 38: longitudinal metrics' device secret, once used)
 *   seen METRIC_HEX DIGEST_HEX       (a hashed value of a longitudinal metric version already charged)
 * Metric names are written in hex so that any name round-trips. */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "ledger_file.h"

#define KEEP_PERIODS 8

typedef struct {
    char *metric;
    int64_t period;
    uint64_t spent;
    uint64_t charges;
} spend_row;

typedef struct {
    char *metric;
    int64_t period;
    uint8_t digest[32];
    uint8_t report[OCMS_MAX_REPORT_MESSAGE];
    size_t report_len;
} memo_row;

typedef struct {
    char *metric;
    uint8_t digest[32];
} seen_row;

struct ledger_file {
    char *path;
    int lock_fd;
    uint64_t budget;
    int64_t period_seconds;
    uint8_t memo_key[32];
    spend_row *spends;
    size_t nspends, capspends;
    memo_row *memos;
    size_t nmemos, capmemos;
    uint8_t secret[32];
    int have_secret;
    seen_row *seens;
    size_t nseens, capseens;
};

uint64_t ledger_budget_nano(double budget) {
    uint64_t units;
    if (!(budget > 0) || budget > 1e9) return 0;
    units = (uint64_t)(budget * 1e9 + 0.5);
    if ((double)units / 1e9 == budget) return units;
    units = (uint64_t)(budget * 1e9);
    return units > 0 ? units - 1 : 0; /* below the true budget even after rounding: never over-spend */
}

int64_t ledger_file_period(const ledger_file *l) {
    int64_t now = (int64_t)time(NULL);
    int64_t q = now / l->period_seconds;
    if (now % l->period_seconds != 0 && now < 0) q--; /* floor for clocks before 1970 */
    return q;
}

static void to_hex(char *out, const uint8_t *in, size_t n) {
    static const char digits[] = "0123456789abcdef";
    size_t i;
    for (i = 0; i < n; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[2 * n] = '\0';
}

static int from_hex(const char *in, uint8_t *out, size_t max, size_t *n) {
    size_t len = strlen(in), i;
    if (len % 2 || len / 2 > max) return -1;
    for (i = 0; i < len / 2; i++) {
        unsigned v;
        if (sscanf(in + 2 * i, "%2x", &v) != 1) return -1;
        out[i] = (uint8_t)v;
    }
    *n = len / 2;
    return 0;
}

/* ``rows`` with room for one more after ``used`` of ``*cap`` (realloc'ed, doubling from 16, when full);
 * NULL when out of memory (``rows`` is still valid then). */
static void *room_for_one_more(void *rows, size_t *cap, size_t used, size_t row_size) {
    size_t grown_cap;
    void *grown;
    if (used < *cap) return rows;
    grown_cap = *cap ? 2 * *cap : 16;
    grown = realloc(rows, grown_cap * row_size);
    if (grown != NULL) *cap = grown_cap;
    return grown;
}

static spend_row *find_spend(ledger_file *l, const char *metric, int64_t period, int create) {
    size_t i;
    spend_row *grown;
    for (i = 0; i < l->nspends; i++) {
        if (l->spends[i].period == period && strcmp(l->spends[i].metric, metric) == 0) return &l->spends[i];
    }
    if (!create) return NULL;
    grown = room_for_one_more(l->spends, &l->capspends, l->nspends, sizeof *grown);
    if (grown == NULL) return NULL;
    l->spends = grown;
    l->spends[l->nspends].metric = strdup(metric);
    if (l->spends[l->nspends].metric == NULL) return NULL;
    l->spends[l->nspends].period = period;
    l->spends[l->nspends].spent = 0;
    l->spends[l->nspends].charges = 0;
    return &l->spends[l->nspends++];
}

static memo_row *add_memo(ledger_file *l) {
    memo_row *grown = room_for_one_more(l->memos, &l->capmemos, l->nmemos, sizeof *grown);
    if (grown == NULL) return NULL;
    l->memos = grown;
    memset(&l->memos[l->nmemos], 0, sizeof l->memos[0]);
    return &l->memos[l->nmemos++];
}

static int load(ledger_file *l, FILE *f, char *err, size_t errlen) {
    char line[1024];
    int lineno = 0, have_key = 0;
    int64_t stored_period_seconds = -1;
    while (fgets(line, sizeof line, f) != NULL) {
        char a[512], b[512], c[512];
        long long period;
        unsigned long long x, y;
        lineno++;
        if (lineno == 1) {
            if (strcmp(line, "ocms-c-ledger 1\n") != 0)
                return ocms_cfg_problem(err, errlen, "line 1: not an ocms-report-c ledger file (format 1)");
            continue;
        }
        if (sscanf(line, "period_seconds %lld", &period) == 1) {
            stored_period_seconds = period;
        } else if (sscanf(line, "memo_key %511s", a) == 1) {
            size_t n;
            if (from_hex(a, l->memo_key, 32, &n) || n != 32) return ocms_cfg_problem(err, errlen, "line %d: bad memo_key", lineno);
            have_key = 1;
        } else if (sscanf(line, "spend %511s %lld %llu %llu", a, &period, &x, &y) == 4) {
            uint8_t name[256];
            size_t n;
            spend_row *row;
            if (from_hex(a, name, sizeof name - 1, &n)) return ocms_cfg_problem(err, errlen, "line %d: bad metric", lineno);
            name[n] = '\0';
            row = find_spend(l, (const char *)name, period, 1);
            if (row == NULL) return ocms_cfg_problem(err, errlen, "out of memory");
            row->spent = x;
            row->charges = y;
        } else if (sscanf(line, "memo %511s %lld %511s %511s", a, &period, b, c) == 4) {
            uint8_t name[256];
            size_t n;
            memo_row *row = add_memo(l);
            if (row == NULL) return ocms_cfg_problem(err, errlen, "out of memory");
            if (from_hex(a, name, sizeof name - 1, &n)) return ocms_cfg_problem(err, errlen, "line %d: bad metric", lineno);
            name[n] = '\0';
            row->metric = strdup((const char *)name);
            row->period = period;
            if (row->metric == NULL || from_hex(b, row->digest, 32, &n) || n != 32 ||
                from_hex(c, row->report, sizeof row->report, &row->report_len))
                return ocms_cfg_problem(err, errlen, "line %d: bad memo", lineno);
        } else if (sscanf(line, "secret %511s", a) == 1) {
            size_t n;
            if (from_hex(a, l->secret, 32, &n) || n != 32) return ocms_cfg_problem(err, errlen, "line %d: bad secret", lineno);
            l->have_secret = 1;
        } else if (sscanf(line, "seen %511s %511s", a, b) == 2) {
            uint8_t name[256];
            size_t n;
            seen_row *grown = room_for_one_more(l->seens, &l->capseens, l->nseens, sizeof *grown);
            if (grown == NULL) return ocms_cfg_problem(err, errlen, "out of memory");
            l->seens = grown;
            if (from_hex(a, name, sizeof name - 1, &n)) return ocms_cfg_problem(err, errlen, "line %d: bad metric", lineno);
            name[n] = '\0';
            l->seens[l->nseens].metric = strdup((const char *)name);
            if (l->seens[l->nseens].metric == NULL || from_hex(b, l->seens[l->nseens].digest, 32, &n) || n != 32)
                return ocms_cfg_problem(err, errlen, "line %d: bad seen", lineno);
            l->nseens++;
        } else {
            return ocms_cfg_problem(err, errlen, "line %d: unreadable", lineno);
        }
    }
    if (lineno == 0) return 1; /* empty: a new ledger */
    if (!have_key || stored_period_seconds < 1) return ocms_cfg_problem(err, errlen, "incomplete ledger file");
    if (stored_period_seconds != l->period_seconds)
        return ocms_cfg_problem(err, errlen, "this ledger file was created with --period-seconds %lld (periods cannot be "
                       "re-aligned without letting spend escape)", (long long)stored_period_seconds);
    return 0;
}

ledger_file *ledger_file_open(const char *path, uint64_t budget_nano, int64_t period_seconds, char *err,
                              size_t errlen) {
    ledger_file *l = calloc(1, sizeof *l);
    char *lock_path;
    FILE *f;
    int fd, rc;
    if (l == NULL) {
        ocms_cfg_problem(err, errlen, "out of memory");
        return NULL;
    }
    l->lock_fd = -1;
    l->budget = budget_nano;
    l->period_seconds = period_seconds;
    l->path = strdup(path);
    lock_path = malloc(strlen(path) + 6);
    if (l->path == NULL || lock_path == NULL) {
        free(lock_path);
        ledger_file_close(l);
        ocms_cfg_problem(err, errlen, "out of memory");
        return NULL;
    }
    sprintf(lock_path, "%s.lock", path);
    l->lock_fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    free(lock_path);
    if (l->lock_fd < 0 || flock(l->lock_fd, LOCK_EX) != 0) {
        ocms_cfg_problem(err, errlen, "cannot lock %s.lock: %s", path, strerror(errno));
        ledger_file_close(l);
        return NULL;
    }
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600); /* as sensitive as the values it memoizes */
    if (fd < 0 || (f = fdopen(fd, "r")) == NULL) {
        ocms_cfg_problem(err, errlen, "cannot open: %s", strerror(errno));
        if (fd >= 0) close(fd);
        ledger_file_close(l);
        return NULL;
    }
    rc = load(l, f, err, errlen);
    fclose(f);
    if (rc < 0) {
        ledger_file_close(l);
        return NULL;
    }
    if (rc == 1) { /* a new file: its memo key */
        if (ocms_os_random(NULL, l->memo_key, sizeof l->memo_key) != 0 || ledger_file_commit(l, err, errlen) != 0) {
            if (err[0] == '\0') ocms_cfg_problem(err, errlen, "no randomness for the memo key");
            ledger_file_close(l);
            return NULL;
        }
    }
    return l;
}

static int memo_digest(const ledger_file *l, const uint8_t *key, size_t key_len, uint8_t out[32]) {
    ocms_blake2b_state s;
    uint8_t person[16] = "ocms-memo-v1";
    if (ocms_blake2b_init(&s, 32, l->memo_key, 32, person) != OCMS_OK) return -1;
    ocms_blake2b_update(&s, key, key_len);
    ocms_blake2b_final(&s, out);
    return 0;
}

static int charge(void *ctx, const char *metric, uint64_t epsilon_nano, const uint8_t *value_key, size_t key_len,
                  uint8_t *message, size_t *length, size_t capacity) {
    ledger_file *l = (ledger_file *)ctx;
    int64_t period = ledger_file_period(l);
    uint8_t digest[32];
    spend_row *row;
    size_t i;
    if (value_key != NULL) {
        if (memo_digest(l, value_key, key_len, digest) != 0) return OCMS_E_LEDGER;
        for (i = 0; i < l->nmemos; i++) {
            memo_row *m = &l->memos[i];
            if (m->period == period && strcmp(m->metric, metric) == 0 && memcmp(m->digest, digest, 32) == 0) {
                if (m->report_len > capacity) return OCMS_E_LEDGER;
                memcpy(message, m->report, m->report_len);
                *length = m->report_len;
                return OCMS_MEMOIZED;
            }
        }
    }
    row = find_spend(l, metric, period, 1);
    if (row == NULL) return OCMS_E_LEDGER;
    if (epsilon_nano > l->budget || row->spent > l->budget - epsilon_nano) return OCMS_E_BUDGET;
    if (value_key != NULL) {
        memo_row *m = add_memo(l);
        if (m == NULL || *length > sizeof m->report) return OCMS_E_LEDGER;
        m->metric = strdup(metric);
        if (m->metric == NULL) return OCMS_E_LEDGER;
        m->period = period;
        memcpy(m->digest, digest, 32);
        memcpy(m->report, message, *length);
        m->report_len = *length;
    }
    row->spent += epsilon_nano;
    row->charges++;
    return OCMS_OK;
}

int ledger_file_secret(ledger_file *l, uint8_t out[32]) {
    if (!l->have_secret) {
        if (ocms_os_random(NULL, l->secret, sizeof l->secret) != 0) return -1;
        l->have_secret = 1;
    }
    memcpy(out, l->secret, 32);
    return 0;
}

int ledger_file_charge_lifetime(ledger_file *l, const char *metric, uint64_t epsilon_nano, const uint8_t *seen_key,
                                size_t key_len) {
    ocms_blake2b_state s;
    uint8_t person[16] = "ocms-seen-v1", digest[32];
    spend_row *row;
    seen_row *grown;
    size_t i;
    if (ocms_blake2b_init(&s, 32, l->memo_key, 32, person) != OCMS_OK) return OCMS_E_LEDGER;
    ocms_blake2b_update(&s, seen_key, key_len);
    ocms_blake2b_final(&s, digest);
    for (i = 0; i < l->nseens; i++) {
        if (strcmp(l->seens[i].metric, metric) == 0 && memcmp(l->seens[i].digest, digest, 32) == 0) return OCMS_MEMOIZED;
    }
    row = find_spend(l, metric, ledger_file_period(l), 1);
    if (row == NULL) return OCMS_E_LEDGER;
    if (epsilon_nano > l->budget || row->spent > l->budget - epsilon_nano) return OCMS_E_BUDGET;
    grown = room_for_one_more(l->seens, &l->capseens, l->nseens, sizeof *grown);
    if (grown == NULL) return OCMS_E_LEDGER;
    l->seens = grown;
    l->seens[l->nseens].metric = strdup(metric);
    if (l->seens[l->nseens].metric == NULL) return OCMS_E_LEDGER;
    memcpy(l->seens[l->nseens].digest, digest, 32);
    l->nseens++;
    row->spent += epsilon_nano;
    row->charges++;
    return OCMS_OK;
}

ocms_ledger ledger_file_interface(ledger_file *l) {
    ocms_ledger out;
    out.charge = charge;
    out.ctx = l;
    return out;
}

uint64_t ledger_file_spent(const ledger_file *l, const char *metric) {
    size_t i;
    int64_t period = ledger_file_period(l);
    for (i = 0; i < l->nspends; i++) {
        if (l->spends[i].period == period && strcmp(l->spends[i].metric, metric) == 0) return l->spends[i].spent;
    }
    return 0;
}

int ledger_file_commit(ledger_file *l, char *err, size_t errlen) {
    char *tmp = malloc(strlen(l->path) + 5), *dir, *slash, hexname[512], hex[2 * OCMS_MAX_REPORT_MESSAGE + 1];
    int64_t oldest = ledger_file_period(l) - KEEP_PERIODS + 1;
    FILE *f;
    int fd, ok = 1;
    size_t i;
    if (tmp == NULL) return ocms_cfg_problem(err, errlen, "out of memory");
    sprintf(tmp, "%s.tmp", l->path);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || (f = fdopen(fd, "w")) == NULL) {
        ocms_cfg_problem(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
        if (fd >= 0) close(fd);
        free(tmp);
        return -1;
    }
    to_hex(hex, l->memo_key, 32);
    ok &= fprintf(f, "ocms-c-ledger 1\nperiod_seconds %lld\nmemo_key %s\n", (long long)l->period_seconds, hex) > 0;
    for (i = 0; i < l->nspends; i++) {
        const spend_row *r = &l->spends[i];
        if (r->period < oldest) continue;
        to_hex(hexname, (const uint8_t *)r->metric, strlen(r->metric) < 255 ? strlen(r->metric) : 255);
        ok &= fprintf(f, "spend %s %lld %llu %llu\n", hexname, (long long)r->period, (unsigned long long)r->spent,
                      (unsigned long long)r->charges) > 0;
    }
    for (i = 0; i < l->nmemos; i++) {
        const memo_row *r = &l->memos[i];
        char digest[65];
        if (r->period < oldest) continue;
        to_hex(hexname, (const uint8_t *)r->metric, strlen(r->metric) < 255 ? strlen(r->metric) : 255);
        to_hex(digest, r->digest, 32);
        to_hex(hex, r->report, r->report_len);
        ok &= fprintf(f, "memo %s %lld %s %s\n", hexname, (long long)r->period, digest, hex) > 0;
    }
    if (l->have_secret) {
        to_hex(hex, l->secret, 32);
        ok &= fprintf(f, "secret %s\n", hex) > 0;
    }
    for (i = 0; i < l->nseens; i++) { /* lifetime charges: never pruned */
        char digest[65];
        const seen_row *r = &l->seens[i];
        to_hex(hexname, (const uint8_t *)r->metric, strlen(r->metric) < 255 ? strlen(r->metric) : 255);
        to_hex(digest, r->digest, 32);
        ok &= fprintf(f, "seen %s %s\n", hexname, digest) > 0;
    }
    ok &= fflush(f) == 0;
    ok &= fsync(fileno(f)) == 0;
    ok &= fclose(f) == 0;
    if (!ok || rename(tmp, l->path) != 0) {
        ocms_cfg_problem(err, errlen, "cannot write %s: %s", l->path, strerror(errno));
        unlink(tmp);
        free(tmp);
        return -1;
    }
    free(tmp);
    dir = strdup(l->path);
    if (dir != NULL) { /* the rename is durable once the directory is synced */
        slash = strrchr(dir, '/');
        if (slash == NULL) strcpy(dir, ".");
        else if (slash == dir) slash[1] = '\0';
        else *slash = '\0';
        fd = open(dir, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            fsync(fd);
            close(fd);
        }
        free(dir);
    }
    return 0;
}

void ledger_file_close(ledger_file *l) {
    size_t i;
    if (l == NULL) return;
    for (i = 0; i < l->nspends; i++) free(l->spends[i].metric);
    for (i = 0; i < l->nmemos; i++) free(l->memos[i].metric);
    for (i = 0; i < l->nseens; i++) free(l->seens[i].metric);
    free(l->spends);
    free(l->memos);
    free(l->seens);
    memset(l->secret, 0, sizeof l->secret);
    if (l->lock_fd >= 0) close(l->lock_fd); /* releases the lock */
    free(l->path);
    memset(l->memo_key, 0, sizeof l->memo_key);
    free(l);
}
