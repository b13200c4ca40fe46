/* Numeric metrics (issue 40): a number's bucket index (include/ocms_client.h, "numeric metrics";
 * cms_core/numeric.py BucketLayout.bucket is the reference, tests/vectors/numeric_v1.json the shared cases). */
#include <math.h>

#include "ocms_client.h"

int ocms_numeric_check(const ocms_numeric *numeric, const char **rule) {
    const char *why = NULL;
    size_t i;
    if (numeric == NULL || numeric->bounds == NULL || numeric->count == 0) why = "numeric: needs at least one bound";
    else if (!isfinite(numeric->lower) || !isfinite(numeric->upper) || !(numeric->lower < numeric->upper))
        why = "numeric: lower and upper must be finite, lower < upper";
    else {
        for (i = 0; i < numeric->count && why == NULL; i++) {
            double previous = i == 0 ? numeric->lower : numeric->bounds[i - 1];
            if (!isfinite(numeric->bounds[i]) || !(previous < numeric->bounds[i]))
                why = "numeric: bounds must increase strictly inside (lower, upper)";
        }
        if (why == NULL && !(numeric->bounds[numeric->count - 1] < numeric->upper))
            why = "numeric: bounds must lie below upper";
    }
    if (rule != NULL) *rule = why;
    return why == NULL ? OCMS_OK : OCMS_E_PARAMS;
}

int ocms_numeric_bucket(const ocms_numeric *numeric, double value, uint64_t *bucket) {
    size_t lo = 0, hi = numeric->count; /* the first index with bounds[i] >= x, or count: the last bucket */
    double x = value;
    if (isnan(value)) return OCMS_E_VALUE;
    if (x < numeric->lower) x = numeric->lower;
    if (x > numeric->upper) x = numeric->upper;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (numeric->bounds[mid] < x) lo = mid + 1;
        else hi = mid;
    }
    *bucket = (uint64_t)lo;
    return OCMS_OK;
}
