/* Uploads to an `ocms collector` (the example program only; libcurl). */
#ifndef OCMS_EXAMPLE_UPLOAD_H
#define OCMS_EXAMPLE_UPLOAD_H

#include <stddef.h>
#include <stdint.h>

#include "ocms_client.h"

typedef struct {
    const char *url;    /* the endpoint, e.g. http://host:8080/v1/reports */
    const char *token;  /* bearer token, or NULL */
    int retries;        /* at most this many retries after the first attempt */
    double max_backoff; /* seconds: cap of the backoff and of Retry-After */
    double deadline;    /* upload_now() after which no attempt starts: the delivery timeout */
    int verbose;        /* one stderr line per failed attempt */
} upload_options;

/* POST body (wire-v1 messages of one parameter set) until 202: 0, or -1 with the reason. */
int upload_body(const upload_options *options, const uint8_t *body, size_t len, int *attempts, char *err,
                size_t errlen);
/* Monotonic seconds (the clock of deadline). */
double upload_now(void);
/* 32 characters of base64url from 24 random bytes. */
int upload_new_key(char out[33]);

#endif
