/* Upload to an `ocms collector` (docs/collector.md) with libcurl: POST of wire-v1 messages,
 * Content-Type application/vnd.ocms.wire-v1, one random Idempotency-Key per upload reused by its
 * retries, 429/503 retried after Retry-After (capped), connection errors, timeouts and other 5xx
 * with jittered exponential backoff until the deadline (--timeout, over all uploads), any other
 * answer is permanent. Nothing identifying is sent:
 * no device key, no User-Agent (libcurl sends none unless asked), no cookie. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>
#include <curl/curl.h>

#include "config.h"
#include "upload.h"

typedef struct {
    char *data;
    size_t len;
} buffer_t;

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *userdata) {
    buffer_t *b = (buffer_t *)userdata;
    size_t n = size * nmemb;
    char *grown;
    if (b->len + n > 65536) return n; /* an answer is a short JSON document; keep its start */
    grown = realloc(b->data, b->len + n + 1);
    if (grown == NULL) return 0;
    b->data = grown;
    memcpy(b->data + b->len, ptr, n);
    b->len += n;
    b->data[b->len] = '\0';
    return n;
}

static size_t on_header(char *ptr, size_t size, size_t nmemb, void *userdata) {
    long *retry_after = (long *)userdata;
    size_t n = size * nmemb;
    if (n > 12 && strncmp(ptr, "Retry-After:", 12) == 0) *retry_after = strtol(ptr + 12, NULL, 10);
    else if (n > 12 && strncmp(ptr, "retry-after:", 12) == 0) *retry_after = strtol(ptr + 12, NULL, 10);
    return n;
}

double upload_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_seconds(double s) {
    struct timespec ts;
    if (s <= 0) return;
    ts.tv_sec = (time_t)s;
    ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* Uniform in [0.5, 1): the jitter factor of a backoff. */
static double jitter(void) {
    uint8_t raw[4];
    uint32_t v;
    if (ocms_os_random(NULL, raw, sizeof raw) != 0) return 0.75;
    v = (uint32_t)raw[0] << 24 | (uint32_t)raw[1] << 16 | (uint32_t)raw[2] << 8 | raw[3];
    return 0.5 + 0.5 * ((double)v / 4294967296.0);
}

int upload_new_key(char out[33]) {
    static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    uint8_t raw[24];
    int i;
    if (ocms_os_random(NULL, raw, sizeof raw) != 0) return -1;
    for (i = 0; i < 8; i++) { /* base64url of 24 bytes: 32 characters */
        uint32_t v = (uint32_t)raw[3 * i] << 16 | (uint32_t)raw[3 * i + 1] << 8 | raw[3 * i + 2];
        out[4 * i] = alphabet[v >> 18 & 63];
        out[4 * i + 1] = alphabet[v >> 12 & 63];
        out[4 * i + 2] = alphabet[v >> 6 & 63];
        out[4 * i + 3] = alphabet[v & 63];
    }
    out[32] = '\0';
    return 0;
}

static void describe_answer(const buffer_t *body, char *out, size_t outlen) {
    cJSON *doc = body->data != NULL ? cJSON_Parse(body->data) : NULL;
    const cJSON *reason = cJSON_GetObjectItemCaseSensitive(doc, "reason");
    const cJSON *detail = cJSON_GetObjectItemCaseSensitive(doc, "detail");
    if (cJSON_IsString(reason)) {
        snprintf(out, outlen, "%s%s%s", reason->valuestring, cJSON_IsString(detail) ? ": " : "",
                 cJSON_IsString(detail) ? detail->valuestring : "");
    } else {
        snprintf(out, outlen, "%.200s", body->data != NULL ? body->data : "(no answer body)");
    }
    cJSON_Delete(doc);
}

int upload_body(const upload_options *opt, const uint8_t *body, size_t len, int *attempts, char *err, size_t errlen) {
    char key[33], header[64], auth[1100], answer[600];
    double backoff = 0.1;
    int attempt;
    CURL *curl;
    if (errlen > 0) err[0] = '\0';
    if (upload_new_key(key) != 0) return ocms_cfg_problem(err, errlen, "no randomness for the Idempotency-Key");
    curl = curl_easy_init();
    if (curl == NULL) return ocms_cfg_problem(err, errlen, "libcurl could not start");
    *attempts = 0;
    for (attempt = 0; attempt <= opt->retries; attempt++) {
        struct curl_slist *headers = NULL;
        buffer_t answer_body = {NULL, 0};
        long status = 0, retry_after = -1;
        CURLcode rc;
        double wait, remaining = opt->deadline - upload_now();
        if (remaining <= 0) break;
        headers = curl_slist_append(headers, "Content-Type: application/vnd.ocms.wire-v1");
        snprintf(header, sizeof header, "Idempotency-Key: %s", key); /* the same key for every retry */
        headers = curl_slist_append(headers, header);
        headers = curl_slist_append(headers, "Expect:");
        if (opt->token != NULL) {
            snprintf(auth, sizeof auth, "Authorization: Bearer %.1024s", opt->token);
            headers = curl_slist_append(headers, auth);
        }
        curl_easy_reset(curl);
        curl_easy_setopt(curl, CURLOPT_URL, opt->url);
        curl_easy_setopt(curl, CURLOPT_POST, 1L);
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, (const char *)body);
        curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
        curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
        curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(curl, CURLOPT_WRITEDATA, &answer_body);
        curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(curl, CURLOPT_HEADERDATA, &retry_after);
        curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, (long)(remaining * 1000) + 1);
        curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
        rc = curl_easy_perform(curl);
        curl_slist_free_all(headers);
        *attempts = attempt + 1;
        if (rc == CURLE_OK) curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
        if (rc == CURLE_OK && status == 202) {
            free(answer_body.data);
            curl_easy_cleanup(curl);
            return 0;
        }
        if (rc != CURLE_OK) {
            snprintf(answer, sizeof answer, "%s", curl_easy_strerror(rc));
            wait = backoff * jitter();
            backoff = backoff * 2 > opt->max_backoff ? opt->max_backoff : backoff * 2;
        } else {
            describe_answer(&answer_body, answer, sizeof answer);
            if (status == 429 || status == 503) {
                wait = retry_after >= 0 ? (double)retry_after : backoff;
                if (wait > opt->max_backoff) wait = opt->max_backoff;
                wait = wait * (0.5 + jitter() / 2); /* spread the retries of many devices */
            } else if (status >= 500) {
                wait = backoff * jitter();
                backoff = backoff * 2 > opt->max_backoff ? opt->max_backoff : backoff * 2;
            } else { /* 4xx: the upload itself is refused, a retry would be too */
                free(answer_body.data);
                curl_easy_cleanup(curl);
                return ocms_cfg_problem(err, errlen, "refused with HTTP %ld %s", status, answer);
            }
        }
        free(answer_body.data);
        if (rc == CURLE_OK) snprintf(err, errlen, "HTTP %ld %s", status, answer);
        else snprintf(err, errlen, "%s", answer);
        if (opt->verbose)
            fprintf(stderr, "ocms-report-c: upload attempt %d failed (%s); %s\n", attempt + 1, err,
                    attempt < opt->retries ? "retrying" : "giving up");
        remaining = opt->deadline - upload_now();
        if (attempt < opt->retries) sleep_seconds(wait < remaining ? wait : remaining);
    }
    curl_easy_cleanup(curl);
    {
        char last[700];
        snprintf(last, sizeof last, "%s", err);
        if (upload_now() >= opt->deadline)
            return ocms_cfg_problem(err, errlen, "not delivered within the --timeout (%d attempts), last: %s", *attempts,
                                    last[0] ? last : "none");
        return ocms_cfg_problem(err, errlen, "gave up after %d attempts, last: %s", *attempts, last);
    }
}
