/* The example program's privacy ledger: epsilon spent per metric per period, kept in a text file
 * (the library leaves the ledger to the caller through ocms_ledger; docs/device.md, "The C client").
 *
 * Same rules as producer/ledger.py: periods are floor(now / period_seconds) (fixed per file),
 * spend + epsilon <= budget is allowed and anything above refused, epsilons are summed exactly in
 * units of 10^-9 (ocms_epsilon_nano), memoization keyed by a keyed BLAKE2b-256 digest of the value
 * key (random 32-byte key created with the file, person "ocms-memo-v1"), never the value.
 *
 * Durability: the whole process holds an exclusive lock (FILE.lock, flock) from open to close;
 * charges are made in memory and ledger_file_commit() writes FILE.tmp, fsyncs it, renames it over
 * FILE and fsyncs the directory. The program commits before it writes or uploads any report, so a
 * crash can lose reports but never a charge. Rows of periods older than the last 8 are dropped. */
#ifndef OCMS_EXAMPLE_LEDGER_FILE_H
#define OCMS_EXAMPLE_LEDGER_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "ocms_client.h"

typedef struct ledger_file ledger_file;

/* NULL with a reason in err; budget_nano: the budget in 10^-9 units (rounded down). */
ledger_file *ledger_file_open(const char *path, uint64_t budget_nano, int64_t period_seconds, char *err, size_t errlen);
/* An ocms_ledger whose charge() spends in memory (commit to make it durable). */
ocms_ledger ledger_file_interface(ledger_file *ledger);
int ledger_file_commit(ledger_file *ledger, char *err, size_t errlen);
/* Spend (10^-9 units) of a metric in the current period. */
uint64_t ledger_file_spent(const ledger_file *ledger, const char *metric);
int64_t ledger_file_period(const ledger_file *ledger);
void ledger_file_close(ledger_file *ledger);

/* Issue 38, longitudinal metrics: the device secret their hashes and memoized responses derive from (32 bytes
 * from the OS CSPRNG, created on first use and kept in the file with the next commit); 0, or -1 without
 * randomness. */
int ledger_file_secret(ledger_file *ledger, uint8_t out[32]);
/* Charge epsilon_nano to metric in the current period the first time seen_key (ocms_longitudinal_seen_key) is
 * given, nothing later: OCMS_OK (charged), OCMS_MEMOIZED (seen before, nothing charged), OCMS_E_BUDGET or
 * OCMS_E_LEDGER. The file keeps a keyed BLAKE2b-256 digest of each seen key (never pruned), not the key. */
int ledger_file_charge_lifetime(ledger_file *ledger, const char *metric, uint64_t epsilon_nano, const uint8_t *seen_key,
                                size_t key_len);

/* The budget in 10^-9 units, rounded down (exact for <= 9 decimals); 0 for a non-positive budget. */
uint64_t ledger_budget_nano(double budget);

#endif
