/* layout.h: who does what in a multi-process run (dist.c), as plain arithmetic that needs no
 * MPI, so that it is tested on its own.
 *
 * Roles. Each rank plays one role: target (loader + frozen target forward, sends hidden states)
 * or drafter (receives them, trains, all-reduces gradients with the other drafter ranks). The
 * flags decide which (config.h): --layout targets=T,drafters=D gives ranks 0..T-1 to targets
 * and T..T+D-1 to drafters; --target-ranks/--drafter-ranks name them (one list alone: the other
 * role takes every rank it leaves); neither: the first world/2 ranks (rounded down) are
 * targets, the rest drafters. Every rank must get exactly one role and each role at least one
 * rank, so a run has at least 2 processes. A role's index is the rank's position among that
 * role's ranks, in rank order. A single process (no MPI launcher, mpirun -np 1, a build
 * without MPI) plays every role itself: any flag that lays out ranks is a mistake there
 * (tr_layout_check_single), never ignored.
 *
 * Channels. Edge i, for i in 0..max(T,D)-1, joins target i mod T to drafter i mod D: with
 * T == D target k feeds drafter k; with more targets, drafter d is fed by targets d, d+D, ...;
 * with more drafters, target t feeds drafters t, t+T, ... Each edge is one credit-based
 * channel of --queue-depth items.
 *
 * Batches. Drafter d consumes global batch (s-1)*D + d at its step s (1-based), so the drafters
 * of one step hold batches of consecutive indices, as in a single-process run. A drafter with
 * k sources takes step s's batch from its sources[(s-1) mod k]; that source is the batch's
 * owner, which produces its batches in increasing index order (per channel that is the order
 * the drafter takes them, which MPI keeps).
 */
#ifndef TR_LAYOUT_H
#define TR_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"

enum { TR_ROLE_TARGET = 0, TR_ROLE_DRAFTER = 1 };

typedef struct tr_layout {
    int world;
    int n_targets, n_drafters;
    int role[TR_MAX_RANKS];         /* [world]: TR_ROLE_* */
    int index[TR_MAX_RANKS];        /* [world]: position among its role's ranks */
    int target_rank[TR_MAX_RANKS];  /* [n_targets] */
    int drafter_rank[TR_MAX_RANKS]; /* [n_drafters] */
} tr_layout;

/* Builds the layout of `world` ranks from cfg's flags. 0, or -1 with one line in err: a flag
 * for another number of processes is named first (for world 1, every layout flag is). */
int tr_layout_make(tr_layout *l, const tr_config *cfg, int world, char *err, size_t err_size);

/* For a one-process run: 0 when no flag of a multi-process run (--layout, --target-ranks,
 * --drafter-ranks, --test-die-at) is given, else -1 with one line in err. */
int tr_layout_check_single(const tr_config *cfg, char *err, size_t err_size);

/* The targets feeding drafter d (its sources, in edge order); returns their count. */
int tr_layout_sources(const tr_layout *l, int drafter, int *targets /* [n_targets] */);
/* The drafters target t feeds (its sinks, in edge order); returns their count. */
int tr_layout_sinks(const tr_layout *l, int target, int *drafters /* [n_drafters] */);

/* The global batch drafter d trains on at step s (1-based). */
uint64_t tr_layout_batch(const tr_layout *l, int drafter, uint64_t step);
/* The target that produces global batch b. */
int tr_layout_owner(const tr_layout *l, uint64_t batch);
/* How many of its batches drafter d takes from its source target t over `steps` steps. */
uint64_t tr_layout_edge_items(const tr_layout *l, int target, int drafter, uint64_t steps);

#endif
