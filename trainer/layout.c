/* layout.c: the roles, channels and batch ownership of a multi-process run (see layout.h). */
#include "layout.h"

#include <stdio.h>
#include <string.h>

/* "the run has 1 process (rank 0)", "the run has 3 processes (ranks 0..2)" */
static const char *processes(int world, char *buf, size_t n)
{
    if (world == 1)
        snprintf(buf, n, "the run has 1 process (rank 0)");
    else
        snprintf(buf, n, "the run has %d processes (ranks 0..%d)", world, world - 1);
    return buf;
}

static int fill_from_lists(tr_layout *l, const int *targets, int n_targets, const int *drafters,
                           int n_drafters, int world, char *err, size_t n)
{
    char have[64];
    for (int r = 0; r < world; r++)
        l->role[r] = -1;
    for (int i = 0; i < n_targets; i++) {
        if (targets[i] >= world) {
            snprintf(err, n, "--target-ranks names rank %d, but %s", targets[i],
                     processes(world, have, sizeof have));
            return -1;
        }
        l->role[targets[i]] = TR_ROLE_TARGET;
    }
    for (int i = 0; i < n_drafters; i++) {
        if (drafters[i] >= world) {
            snprintf(err, n, "--drafter-ranks names rank %d, but %s", drafters[i],
                     processes(world, have, sizeof have));
            return -1;
        }
        l->role[drafters[i]] = TR_ROLE_DRAFTER;
    }
    return 0;
}

int tr_layout_make(tr_layout *l, const tr_config *cfg, int world, char *err, size_t n)
{
    memset(l, 0, sizeof *l);
    if (world < 1 || world > TR_MAX_RANKS) { /* world 1: the flags are checked first */
        snprintf(err, n, "a multi-process run needs 2..%d processes, got %d", TR_MAX_RANKS,
                 world);
        return -1;
    }
    l->world = world;
    /* the flags against the number of processes first: that mistake is the one to name */
    if (cfg->layout_targets) {
        int need = cfg->layout_targets + cfg->layout_drafters;
        if (need != world) {
            snprintf(err, n, "--layout targets=%d,drafters=%d needs %d processes, but the run "
                             "has %d (start it with mpirun -np %d)", cfg->layout_targets,
                     cfg->layout_drafters, need, world, need);
            return -1;
        }
    } else if (cfg->n_target_ranks || cfg->n_drafter_ranks) {
        if (fill_from_lists(l, cfg->target_ranks, cfg->n_target_ranks, cfg->drafter_ranks,
                            cfg->n_drafter_ranks, world, err, n))
            return -1;
    }
    if (world < 2) {
        const char *flag = cfg->n_target_ranks    ? "--target-ranks"
                           : cfg->n_drafter_ranks ? "--drafter-ranks"
                                                  : NULL;
        /* one process plays every role: no layout of ranks applies to it */
        if (flag)
            snprintf(err, n, "%s lays out the ranks of a multi-process run, but the run has 1 "
                             "process: start it with mpirun -np N (N >= 2), or drop the flag",
                     flag);
        else
            snprintf(err, n, "a multi-process run needs 2..%d processes, got %d", TR_MAX_RANKS,
                     world);
        return -1;
    }
    if (cfg->layout_targets) {
        for (int r = 0; r < world; r++)
            l->role[r] = r < cfg->layout_targets ? TR_ROLE_TARGET : TR_ROLE_DRAFTER;
    } else if (cfg->n_target_ranks || cfg->n_drafter_ranks) {
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

int tr_layout_check_single(const tr_config *cfg, char *err, size_t n)
{
    if (cfg->layout_targets || cfg->n_target_ranks || cfg->n_drafter_ranks) {
        static tr_layout l; /* large: not on the stack; main's thread only */
        tr_layout_make(&l, cfg, 1, err, n); /* fails: it says how */
        return -1;
    }
    if (cfg->die_step) {
        snprintf(err, n, "--test-die-at names a rank of a multi-process run, but the run has 1 "
                         "process: start it with mpirun -np N (N >= 2), or drop the flag");
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
