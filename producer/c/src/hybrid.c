/* Hybrid means (issue 40): a report's part drawn, and a number's Hybrid report z (include/ocms_client.h, "Hybrid
 * means"; cms_core/hybrid.py privatize_value and draw_mean_message are the reference,
 * tests/vectors/numeric_mean_v1.json the shared cases). */
#include <math.h>

#include "draw.h"

int ocms_mean_check(const ocms_mean *mean, const char **rule) {
    if (rule != NULL) *rule = NULL;
    if (mean == NULL) return fail_rule(rule, "mean: missing");
    if (!isfinite(mean->lower) || !isfinite(mean->upper) || !(mean->lower < mean->upper))
        return fail_rule(rule, "mean: lower and upper must be finite, lower < upper");
    if (mean->parts < 1) return fail_rule(rule, "mean: parts must be at least 1");
    if (mean->grid < 2 || mean->grid > (UINT32_C(1) << 20) || mean->grid % 2 != 0)
        return fail_rule(rule, "mean: grid must be even, in [2, 2^20]");
    if (mean->window < 1 || mean->window > mean->grid) return fail_rule(rule, "mean: window must be in [1, grid]");
    /* duchi_low + grid * duchi_step must stay below 2^64: the comparison is one 64-bit one */
    if (mean->duchi_step > (UINT64_MAX - mean->duchi_low) / mean->grid)
        return fail_rule(rule, "mean: duchi_low + grid * duchi_step must be below 2^64");
    return OCMS_OK;
}

int ocms_mean_draw(const ocms_mean *mean, double value, ocms_rng *rng, int *is_mean, uint32_t *z) {
    uint64_t part = 0, drawn = 0, threshold;
    double x, s;
    uint32_t j;
    int rc;
    *is_mean = 0;
    *z = 0;
    if (isnan(value)) return OCMS_E_VALUE;
    if ((rc = draw_below(rng, mean->parts, &part)) != OCMS_OK || part != 0) return rc;
    *is_mean = 1;
    x = value < mean->lower ? mean->lower : value > mean->upper ? mean->upper : value;
    s = (x - mean->lower) / (mean->upper - mean->lower) * (double)mean->grid; /* in this order: every client's */
    /* s >= 0, so truncation is floor; and s - j in [0, 1) times 2^64 (a power of two: exact) is below 2^64. Casts,
     * not floor()/ldexp(): the library links against no libm (tests/producer/test_c_client's symbol check). */
    j = s >= (double)mean->grid ? mean->grid : (uint32_t)s;
    threshold = (uint64_t)((s - (double)j) * 18446744073709551616.0);
    if ((rc = draw_bits64(rng, &drawn)) != OCMS_OK) return rc;
    j += drawn < threshold;
    if ((rc = draw_bits64(rng, &drawn)) != OCMS_OK) return rc;
    if (drawn < mean->pm_share) {
        if ((rc = draw_bits64(rng, &drawn)) != OCMS_OK) return rc;
        if (drawn < mean->pm_keep) {
            if ((rc = draw_below(rng, mean->window, &drawn)) != OCMS_OK) return rc;
            *z = j + (uint32_t)drawn;
            return OCMS_OK;
        }
        if ((rc = draw_below(rng, mean->grid, &drawn)) != OCMS_OK) return rc;
        *z = (uint32_t)drawn < j ? (uint32_t)drawn : (uint32_t)drawn + mean->window;
        return OCMS_OK;
    }
    if ((rc = draw_bits64(rng, &drawn)) != OCMS_OK) return rc;
    *z = mean->grid + mean->window + (drawn < mean->duchi_low + (uint64_t)j * mean->duchi_step);
    return OCMS_OK;
}
