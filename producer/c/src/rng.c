/* The randomness source: the OS CSPRNG or the caller's fill callback, read directly or through a
 * caller-owned read-ahead buffer (draw.h has the contract's draws). */
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* getrandom() */
#endif
#if (defined(__APPLE__) || defined(__OpenBSD__) || defined(__FreeBSD__)) && !defined(_DARWIN_C_SOURCE)
#define _DARWIN_C_SOURCE
#endif
#include <errno.h>
#include <string.h>

#include "draw.h"

#if defined(__linux__)
#include <sys/random.h>
#define OCMS_HAVE_GETRANDOM 1
#elif defined(__APPLE__) || defined(__OpenBSD__) || defined(__FreeBSD__)
#include <unistd.h>
#include <sys/random.h>
#define OCMS_HAVE_GETENTROPY 1
#endif

#if !defined(__GNUC__) && !defined(__clang__)
void ocms_wipe_portable(void *p, size_t n) {
    volatile unsigned char *v = (volatile unsigned char *)p;
    while (n--) *v++ = 0;
}
#endif

int ocms_os_random(void *ctx, uint8_t *out, size_t len) {
    (void)ctx;
#if defined(OCMS_HAVE_GETRANDOM)
    while (len > 0) {
        ssize_t got = getrandom(out, len, 0);
        if (got < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        out += got;
        len -= (size_t)got;
    }
    return 0;
#elif defined(OCMS_HAVE_GETENTROPY)
    while (len > 0) {
        size_t take = len > 256 ? 256 : len; /* getentropy's limit per call */
        if (getentropy(out, take) != 0) return -1;
        out += take;
        len -= take;
    }
    return 0;
#else
    (void)out;
    (void)len;
    return -1; /* no OS CSPRNG known here: pass a fill callback to ocms_rng_init */
#endif
}

void ocms_rng_init(ocms_rng *rng, ocms_random_fn fill, void *ctx, uint8_t *buffer, size_t capacity) {
    rng->fill = fill;
    rng->ctx = ctx;
    /* a buffer must hold the widest single draw (16 bytes); a smaller one is not used */
    rng->buffer = buffer != NULL && capacity >= 16 ? buffer : NULL;
    rng->capacity = rng->buffer != NULL ? capacity : 0;
    rng->start = rng->end = 0;
}

void ocms_rng_wipe(ocms_rng *rng) {
    if (rng->buffer != NULL) ocms_wipe(rng->buffer, rng->capacity);
    rng->start = rng->end = 0;
}

static int source(ocms_rng *rng, uint8_t *out, size_t len) {
    int rc = rng->fill != NULL ? rng->fill(rng->ctx, out, len) : ocms_os_random(NULL, out, len);
    return rc == 0 ? OCMS_OK : OCMS_E_RANDOM;
}

int ocms_rng_take_slow(ocms_rng *rng, uint8_t *out, size_t len) {
    size_t have;
    if (rng->buffer == NULL) return source(rng, out, len);
    have = rng->end - rng->start;
    if (have >= len) return draw_take(rng, out, len);
    /* the unread tail first, then a refill: the stream's order is kept across refills */
    memcpy(out, rng->buffer + rng->start, have);
    ocms_wipe(rng->buffer + rng->start, have);
    rng->start = rng->end = 0;
    if (source(rng, rng->buffer, rng->capacity) != OCMS_OK) return OCMS_E_RANDOM;
    rng->end = rng->capacity;
    return draw_take(rng, out + have, len - have);
}

int ocms_draw_bits64(ocms_rng *rng, uint64_t *out) { return draw_bits64(rng, out); }

int ocms_draw_below(ocms_rng *rng, uint64_t n, uint64_t *out) { return draw_below(rng, n, out); }
