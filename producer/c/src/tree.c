/* Hierarchical histograms (issue 40): a tree metric's levels checked, and a report's level and node drawn
 * (include/ocms_client.h, "hierarchical histograms"; cms_core/hierarchy.py is the reference,
 * tests/vectors/numeric_hierarchy_v1.json the shared cases). */
#include "draw.h"

/* branching^power, or 0 above 2^63 (no tree reaches it: levels <= 64) */
static uint64_t power_of(uint32_t branching, uint32_t power) {
    uint64_t out = 1;
    while (power-- > 0) {
        if (out > (UINT64_C(1) << 63) / branching) return 0;
        out *= branching;
    }
    return out;
}

int ocms_tree_check(const ocms_tree *tree, const char **rule) {
    uint32_t height = 1, i;
    if (rule != NULL) *rule = NULL;
    if (tree == NULL || tree->level_params == NULL) return fail_rule(rule, "hierarchy: no level parameters");
    if (tree->buckets < 3 || tree->buckets > 4096) return fail_rule(rule, "hierarchy: buckets must be in [3, 4096]");
    if (tree->branching < 2 || tree->branching > 16 || tree->branching >= tree->buckets)
        return fail_rule(rule, "hierarchy: branching must be in [2, 16], below buckets");
    while (power_of(tree->branching, height) < tree->buckets) height++;
    if (tree->levels != height) return fail_rule(rule, "hierarchy: levels must be the smallest h with branching^h >= buckets");
    for (i = 0; i < tree->levels; i++) {
        const ocms_params *p = &tree->level_params[i];
        uint64_t span = power_of(tree->branching, tree->levels - 1 - i);
        if (ocms_params_check(p, rule) != OCMS_OK) return OCMS_E_PARAMS;
        if (p->domain != OCMS_DOMAIN_INTEGERS || p->max_value != (tree->buckets + span - 1) / span - 1)
            return fail_rule(rule, "hierarchy: level L holds ceil(buckets / branching^(levels - L)) integer nodes");
    }
    return OCMS_OK;
}

int ocms_tree_span(const ocms_tree *tree, uint32_t level, uint64_t *span) {
    *span = 0;
    if (tree == NULL || tree->levels < 1 || tree->levels > 64 || tree->branching < 2 || tree->branching > 16)
        return OCMS_E_PARAMS;
    if (level < 1 || level > tree->levels) return OCMS_E_PARAMS;
    *span = power_of(tree->branching, tree->levels - level);
    return *span == 0 ? OCMS_E_PARAMS : OCMS_OK;
}

int ocms_tree_draw(const ocms_tree *tree, uint64_t bucket, ocms_rng *rng, uint32_t *level, uint64_t *node) {
    uint64_t drawn = 0, span = 0;
    int rc;
    *level = 0;
    *node = 0;
    if (tree == NULL || tree->levels < 1 || tree->levels > 64 || tree->branching < 2) return OCMS_E_PARAMS;
    if (bucket >= tree->buckets) return OCMS_E_VALUE;
    if ((rc = draw_below(rng, tree->levels, &drawn)) != OCMS_OK) return rc;
    if ((rc = ocms_tree_span(tree, (uint32_t)drawn + 1, &span)) != OCMS_OK) return rc;
    *level = (uint32_t)drawn + 1;
    *node = bucket / span;
    return OCMS_OK;
}
