/* ocms-c-bench: reports/s of the C client on one core (privatize + encode, ocms_report_*), per field
 * kind, with the OS CSPRNG read per draw (getrandom() each time) and through a 4 KiB read-ahead
 * buffer, and for GF(2^k) with PCLMUL and with the portable carry-less multiply.
 * Run by benchmarks/bench_c_client.py; prints one line per case:
 *   CASE<TAB>RANDOMNESS<TAB>CLMUL<TAB>REPORTS<TAB>CPU_SECONDS
 * (thread CPU time, kernel time in getrandom() included: reports per second of one core). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ocms_client.h"

/* CPU seconds of this thread: the rate on one core, whatever else the machine runs. */
static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct {
    const char *name;
    ocms_params params;
    int strings;
} bench_case;

static const char *WORDS[] = {"the", "café", "東京タワー", "launch", "settings", "onboarding", "deep_link", "wallet"};

static double run(const bench_case *c, int buffered, double seconds, long *reports_out) {
    static uint8_t buffer[4096];
    ocms_metric metric;
    ocms_rng rng;
    ocms_sent sent;
    uint8_t out[OCMS_MAX_REPORT_MESSAGE];
    uint64_t checksum = 0;
    long n = 0, batch = 4096, i;
    uint64_t values = c->params.max_value < 1000 ? c->params.max_value + 1 : 1000;
    double start, elapsed;
    metric.name = c->name;
    metric.params = &c->params;
    metric.discovery = NULL;
    metric.memoize = 0;
    ocms_rng_init(&rng, NULL, NULL, buffered ? buffer : NULL, buffered ? sizeof buffer : 0);
    start = now();
    do {
        for (i = 0; i < batch; i++) {
            int rc;
            if (c->strings) {
                const char *w = WORDS[(n + i) & 7];
                rc = ocms_report_string(&metric, w, strlen(w), &rng, NULL, out, sizeof out, &sent);
            } else {
                rc = ocms_report_integer(&metric, (uint64_t)(n + i) % values, &rng, NULL, out,
                                         sizeof out, &sent);
            }
            if (rc != OCMS_OK) {
                fprintf(stderr, "%s: %s\n", c->name, ocms_strerror(rc));
                exit(1);
            }
            checksum += out[sent.length - 1];
        }
        n += batch;
        elapsed = now() - start;
    } while (elapsed < seconds);
    if (checksum == 42) fputc(' ', stderr); /* keeps the loop's work observable */
    *reports_out = n;
    return elapsed;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 1.0;
    /* the vector registry's metrics (tests/vectors/privatize_v1.json): T as the device config gives it */
    bench_case cases[5];
    size_t k;
    int buffered, pclmul;
    memset(cases, 0, sizeof cases);
    cases[0].name = "small prime F(29), m=4 (categories, OCMS+RR)";
    cases[0].params = (ocms_params){{0}, 2.0, 4, 13119962536085083114ULL, OCMS_MECHANISM_OCMS, OCMS_FIELD_PRIME, 29,
                                    OCMS_DOMAIN_INTEGERS, 11};
    cases[1].name = "direct RR d=5 (categories)";
    cases[1].params = (ocms_params){{0}, 1.0, 5, 7463731128007845702ULL, OCMS_MECHANISM_DIRECT, OCMS_FIELD_PRIME, 17,
                                    OCMS_DOMAIN_INTEGERS, 4};
    cases[2].name = "F(2^64-59), m=3 (integers < 2^62)";
    cases[2].params = (ocms_params){{0}, 1.5, 3, 12754788204327673622ULL, OCMS_MECHANISM_OCMS, OCMS_FIELD_PRIME,
                                    18446744073709551557ULL, OCMS_DOMAIN_INTEGERS, (1ULL << 62) - 1};
    cases[3].name = "GF(2^64), m=6 (64-bit integers)";
    cases[3].params = (ocms_params){{0}, 3.0, 6, 14769975238704385906ULL, OCMS_MECHANISM_OCMS, OCMS_FIELD_GF2_64, 0,
                                    OCMS_DOMAIN_INTEGERS, ~0ULL};
    cases[4].name = "GF(2^128), m=5 (strings, BLAKE2b fingerprint)";
    cases[4].params = (ocms_params){{0}, 2.5, 5, 13887065171680125549ULL, OCMS_MECHANISM_OCMS, OCMS_FIELD_GF2_128, 0,
                                    OCMS_DOMAIN_STRINGS, 0};
    cases[4].strings = 1;
    for (k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int binary = cases[k].params.field != OCMS_FIELD_PRIME;
        for (pclmul = 1; pclmul >= (binary ? 0 : 1); pclmul--) {
            int active = ocms_use_pclmul(pclmul);
            if (pclmul && !active && binary) continue; /* no PCLMUL on this CPU: the portable line says it all */
            for (buffered = 1; buffered >= 0; buffered--) {
                long n;
                double t = run(&cases[k], buffered, seconds, &n);
                printf("%s\t%s\t%s\t%ld\t%.6f\n", cases[k].name, buffered ? "getrandom, 4 KiB buffer" : "getrandom per draw",
                       binary ? (active ? "pclmul" : "portable") : "-", n, t);
                fflush(stdout);
            }
        }
    }
    ocms_use_pclmul(1);
    return 0;
}
