/* layout.c: the roles, channels and batch ownership of a multi-process run (see layout.h). */
#include "layout.h"

#include <stdio.h>
#include <string.h>

static int fill_from_lists(tr_layout *l, const int *targets, int n_targets, const int *drafters,
                           int n_drafters, int world, char *err, size_t n)
{
    for (int r = 0; r < world; r++)
        l->role[r] = -1;
    for (int i = 0; i < n_targets; i++) {
        if (targets[i] >= world) {
            snprintf(err, n, "--target-ranks names rank %d, but the run has %d processes "
                             "(ranks 0..%d)", targets[i], world, world - 1);
            return -1;
        }
        l->role[targets[i]] = TR_ROLE_TARGET;
    }
    for (int i = 0; i < n_drafters; i++) {
        if (drafters[i] >= world) {
            snprintf(err, n, "--drafter-ranks names rank %d, but the run has %d processes "
                             "(ranks 0..%d)", drafters[i], world, world - 1);
            return -1;
        }
        l->role[drafters[i]] = TR_ROLE_DRAFTER;
    }
    return 0;
}

int tr_layout_make(tr_layout *l, const tr_config *cfg, int world, char *err, size_t n)
{
    memset(l, 0, sizeof *l);
    if (world < 2 || world > TR_MAX_RANKS) {
        snprintf(err, n, "a multi-process run needs 2..%d processes, got %d", TR_MAX_RANKS,
                 world);
        return -1;
    }
    l->world = world;
    if (cfg->layout_targets) {
        if (cfg->layout_targets + cfg->layout_drafters != world) {
            snprintf(err, n, "--layout targets=%d,drafters=%d needs %d processes, but the run "
                             "has %d", cfg->layout_targets, cfg->layout_drafters,
                     cfg->layout_targets + cfg->layout_drafters, world);
            return -1;
        }
        for (int r = 0; r < world; r++)
            l->role[r] = r < cfg->layout_targets ? TR_ROLE_TARGET : TR_ROLE_DRAFTER;
    } else if (cfg->n_target_ranks || cfg->n_drafter_ranks) {
        if (fill_from_lists(l, cfg->target_ranks, cfg->n_target_ranks, cfg->drafter_ranks,
                            cfg->n_drafter_ranks, world, err, n))
            return -1;
        for (int r = 0; r < world; r++) {
            if (l->role[r] >= 0)
                continue;
            if (cfg->n_target_ranks && cfg->n_drafter_ranks) {
                snprintf(err, n, "rank %d is in neither --target-ranks nor --drafter-ranks: "
                                 "every rank plays one role", r);
                return -1;
            }
            l->role[r] = cfg->n_target_ranks ? TR_ROLE_DRAFTER : TR_ROLE_TARGET;
        }
    } else {
        for (int r = 0; r < world; r++)
            l->role[r] = r < world / 2 ? TR_ROLE_TARGET : TR_ROLE_DRAFTER;
    }
    for (int r = 0; r < world; r++) {
        if (l->role[r] == TR_ROLE_TARGET) {
            l->index[r] = l->n_targets;
            l->target_rank[l->n_targets++] = r;
        } else {
            l->index[r] = l->n_drafters;
            l->drafter_rank[l->n_drafters++] = r;
        }
    }
    if (!l->n_targets || !l->n_drafters) {
        snprintf(err, n, "the layout leaves no %s rank: a run needs at least one target and "
                         "one drafter", l->n_targets ? "drafter" : "target");
        return -1;
    }
    return 0;
}

static int max_int(int a, int b)
{
    return a > b ? a : b;
}

int tr_layout_sources(const tr_layout *l, int drafter, int *targets)
{
    int k = 0, edges = max_int(l->n_targets, l->n_drafters);
    for (int i = 0; i < edges; i++)
        if (i % l->n_drafters == drafter)
            targets[k++] = i % l->n_targets;
    return k;
}

int tr_layout_sinks(const tr_layout *l, int target, int *drafters)
{
    int k = 0, edges = max_int(l->n_targets, l->n_drafters);
    for (int i = 0; i < edges; i++)
        if (i % l->n_targets == target)
            drafters[k++] = i % l->n_drafters;
    return k;
}

uint64_t tr_layout_batch(const tr_layout *l, int drafter, uint64_t step)
{
    return (step - 1) * (uint64_t)l->n_drafters + (uint64_t)drafter;
}

/* Drafter d's sources are the targets i with i mod D == d (i < T) when T > D, else the one
 * target d mod T; the k-th of them (k = 0, 1, ...) is d + k*D. */
static int source_count(const tr_layout *l, int drafter)
{
    if (l->n_targets <= l->n_drafters)
        return 1;
    return (l->n_targets - drafter + l->n_drafters - 1) / l->n_drafters;
}

int tr_layout_owner(const tr_layout *l, uint64_t batch)
{
    int d = (int)(batch % (uint64_t)l->n_drafters);
    uint64_t step = batch / (uint64_t)l->n_drafters + 1;
    if (l->n_targets <= l->n_drafters)
        return d % l->n_targets;
    int k = source_count(l, d);
    return d + (int)((step - 1) % (uint64_t)k) * l->n_drafters;
}

uint64_t tr_layout_edge_items(const tr_layout *l, int target, int drafter, uint64_t steps)
{
    if (l->n_targets <= l->n_drafters)
        return drafter % l->n_targets == target ? steps : 0;
    if (target % l->n_drafters != drafter)
        return 0;
    uint64_t k = (uint64_t)source_count(l, drafter), j = (uint64_t)(target / l->n_drafters);
    /* steps s with (s-1) mod k == j */
    return steps > j ? (steps - j + k - 1) / k : 0;
}
