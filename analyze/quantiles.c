/* quantiles.c: exact percentiles of range durations in bounded memory.
 *
 * Percentiles are nearest-rank: p is the value of rank ceil(p * n) in the
 * sorted data, so every reported percentile is one of the durations, exact
 * to the nanosecond. Keeping every duration would make memory grow with the
 * trace (8 bytes a range), so the work is split in passes over the same data:
 *
 *  pass 1  a group keeps its first `exact_limit` values; a group that grows
 *          beyond that moves to a log-linear histogram (64 sub-buckets per
 *          power of two: a bucket spans at most 1/64 of its values; values
 *          below 64 ns have a bucket each). Blocks of the histogram are
 *          allocated only for the powers of two that occur. At the end of
 *          the pass small groups are sorted and done; for large ones the
 *          bucket holding each wanted rank is found, with the rank inside it.
 *  pass k  the caller replays the same values; only those falling in a
 *          wanted bucket are looked at: they are collected (when the bucket
 *          holds few enough values, within a budget per pass) and the rank
 *          selected exactly, or counted into finer bins of the bucket: one
 *          nanosecond wide while a budget of bins per pass lasts (an eighth
 *          of the values' budget; the next pass then has the answer), else
 *          at least 1024 of them, which narrows it 1024-fold for the next
 *          pass. A bucket one value wide is the answer without collecting
 *          anything.
 *
 * Typical traces need two passes, and so do the groups of many ranks of a
 * run together, whose buckets hold too many values to collect; a bucket of
 * identical values resolves by narrowing, never by collecting them all.
 * Memory: a few kB per large group plus at most `collect_per_pass` values
 * (32 MB by default) and an eighth of that in bins, whatever the trace
 * length.
 *
 * Several threads add to one pass through shards: each thread adds to its
 * own shard (pass 1: its own exact values and histograms; later passes: its
 * own bins, reading the plan of the engine without changing it), and the
 * shards are merged into the engine before the pass ends. Collected values
 * go from a shard to the engine in blocks, under the engine's lock, so the
 * budget stays that of the engine. Every result depends only on the multiset
 * of values a group received (sums of counts, the k-th smallest of the
 * values), never on their order, so the answer is the same however the
 * values were split.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "analyze.h"

#define SUB_BITS 6
#define SUB (1u << SUB_BITS)
#define N_BLOCKS (1 + 63 - SUB_BITS)  /* block 0: v < 64; block b: [2^(b+5), 2^(b+6)) */
#define REFINE_BINS 1024
#define DEFAULT_EXACT 512
#define DEFAULT_COLLECT (4u << 20)

enum { T_DONE, T_COLLECT, T_REFINE };

typedef struct target {
    int64_t lo, hi;      /* the value range holding the rank */
    uint64_t rank;       /* 1-based rank inside [lo, hi] */
    uint64_t n_in;       /* values in [lo, hi] */
    int state;
    int share;           /* collecting: index of the target whose values it uses, or -1 */
    int64_t value;       /* T_DONE */
    int64_t *vals;       /* T_COLLECT */
    uint64_t n_vals;
    uint64_t *bins;      /* T_REFINE */
    uint64_t bin_width;
} target;

/* A shard's part of one target in a later pass. */
#define SHARD_BLOCK 1024 /* collected values a shard hands to the engine at once */
typedef struct shard_target {
    int64_t *vals;       /* [SHARD_BLOCK] */
    uint32_t n_vals;
    uint64_t *bins;      /* as the engine's target's */
} shard_target;

typedef struct qgroup {
    uint64_t n;
    int64_t *vals;       /* exact mode (hist == NULL) */
    uint32_t n_vals, cap;
    uint64_t **hist;     /* [N_BLOCKS] blocks of SUB counts, NULL until used */
    target *targets;     /* [n_pct] while passes remain */
    shard_target *local; /* shards, later passes: [n_pct], NULL until a value comes */
    uint32_t n_active;   /* later passes: the targets fed values, */
    uint8_t active[AN_QUANT_MAX_PCT]; /* their indexes (not done, not shared) */
    int64_t result[AN_QUANT_MAX_PCT];
} qgroup;

struct an_quant {
    uint32_t n_groups, n_pct;
    uint32_t permille[AN_QUANT_MAX_PCT];
    qgroup *groups;
    uint8_t *wants;      /* [n_groups]: the group has targets in this pass */
    int pass;
    int failed;
    uint32_t exact_limit;
    uint64_t collect_limit;
    an_quant *engine;    /* a shard: the engine it adds to; NULL for the engine */
    int defer;           /* an_quant_defer_buffers: a pass's buffers from an_quant_begin_pass */
    pthread_mutex_t lock; /* the engine: guards its targets' collected values */
};

an_quant *an_quant_new(uint32_t n_groups, const uint32_t *permille, uint32_t n_pct)
{
    if (n_pct > AN_QUANT_MAX_PCT) return NULL;
    an_quant *q = calloc(1, sizeof *q);
    if (!q) return NULL;
    q->n_groups = n_groups;
    q->n_pct = n_pct;
    for (uint32_t i = 0; i < n_pct; i++) q->permille[i] = permille[i] > 1000 ? 1000 : permille[i];
    q->groups = calloc(n_groups ? n_groups : 1, sizeof *q->groups);
    q->wants = calloc(n_groups ? n_groups : 1, 1);
    q->pass = 1;
    q->exact_limit = DEFAULT_EXACT;
    q->collect_limit = DEFAULT_COLLECT;
    pthread_mutex_init(&q->lock, NULL);
    if (!q->groups || !q->wants) {
        an_quant_free(q);
        return NULL;
    }
    return q;
}

void an_quant_limits(an_quant *q, uint32_t exact_per_group, uint64_t collect_per_pass)
{
    q->exact_limit = exact_per_group;
    q->collect_limit = collect_per_pass;
}

static void free_hist(qgroup *g)
{
    if (!g->hist) return;
    for (int b = 0; b < (int)N_BLOCKS; b++) free(g->hist[b]);
    free(g->hist);
    g->hist = NULL;
}

static void free_local(qgroup *g, uint32_t n_pct)
{
    if (!g->local) return;
    for (uint32_t i = 0; i < n_pct; i++) {
        free(g->local[i].vals);
        free(g->local[i].bins);
    }
    free(g->local);
    g->local = NULL;
}

static void free_targets(qgroup *g, uint32_t n_pct)
{
    if (!g->targets) return;
    for (uint32_t i = 0; i < n_pct; i++) {
        free(g->targets[i].vals);
        free(g->targets[i].bins);
    }
    free(g->targets);
    g->targets = NULL;
}

void an_quant_free(an_quant *q)
{
    if (!q) return;
    for (uint32_t i = 0; q->groups && i < q->n_groups; i++) {
        free(q->groups[i].vals);
        free_hist(&q->groups[i]);
        free_targets(&q->groups[i], q->n_pct);
        free_local(&q->groups[i], q->n_pct);
    }
    free(q->groups);
    if (!q->engine) free(q->wants); /* a shard borrows its engine's */
    pthread_mutex_destroy(&q->lock);
    free(q);
}

/* ---- the histogram ------------------------------------------------------------- */

static inline void bucket_of(uint64_t v, uint32_t *block, uint32_t *sub)
{
    if (v < SUB) {
        *block = 0;
        *sub = (uint32_t)v;
        return;
    }
    uint32_t e = 63u - (uint32_t)__builtin_clzll(v); /* >= SUB_BITS */
    *block = e - SUB_BITS + 1;
    *sub = (uint32_t)(v >> (e - SUB_BITS)) - SUB;
}

static void bucket_range(uint32_t block, uint32_t sub, int64_t *lo, int64_t *hi)
{
    if (block == 0) {
        *lo = *hi = sub;
        return;
    }
    uint32_t shift = block - 1;
    uint64_t l = ((uint64_t)SUB + sub) << shift;
    *lo = (int64_t)l;
    *hi = (int64_t)(l + (1ULL << shift) - 1);
}

static inline int hist_add(qgroup *g, int64_t v)
{
    uint32_t block, sub;
    bucket_of((uint64_t)v, &block, &sub);
    uint64_t *counts = g->hist[block];
    if (__builtin_expect(counts == NULL, 0)) {
        counts = g->hist[block] = calloc(SUB, sizeof **g->hist);
        if (!counts) return -1;
    }
    counts[sub]++;
    return 0;
}

/* ---- adding values -------------------------------------------------------------------- */

/* Moves a group from its exact values to a histogram (its first overflow). */
static void to_histogram(an_quant *q, qgroup *g)
{
    g->hist = calloc(N_BLOCKS, sizeof *g->hist);
    if (!g->hist) {
        q->failed = 1;
        return;
    }
    for (uint32_t i = 0; i < g->n_vals; i++)
        if (hist_add(g, g->vals[i])) q->failed = 1;
    free(g->vals);
    g->vals = NULL;
    g->n_vals = g->cap = 0;
}

static inline void add_first_pass(an_quant *q, qgroup *g, int64_t v)
{
    g->n++;
    if (!g->hist) {
        if (g->n_vals < q->exact_limit) {
            if (g->n_vals == g->cap) {
                uint32_t cap = g->cap ? g->cap * 2 : 8;
                if (cap > q->exact_limit) cap = q->exact_limit;
                int64_t *vals = realloc(g->vals, cap * sizeof *vals);
                if (!vals) {
                    q->failed = 1;
                    return;
                }
                g->vals = vals;
                g->cap = cap;
            }
            g->vals[g->n_vals++] = v;
            return;
        }
        to_histogram(q, g);
        if (!g->hist) return;
    }
    if (__builtin_expect(hist_add(g, v) != 0, 0)) q->failed = 1;
}

/* Is v in [t->lo, t->hi]? One compare: most values are in no target. */
static inline int in_target(const target *t, int64_t v)
{
    return (uint64_t)v - (uint64_t)t->lo <= (uint64_t)t->hi - (uint64_t)t->lo;
}

static void add_later_pass(an_quant *q, qgroup *g, int64_t v)
{
    for (uint32_t k = 0; k < g->n_active; k++) {
        target *t = &g->targets[g->active[k]];
        if (__builtin_expect(!in_target(t, v), 1)) continue;
        if (t->state == T_COLLECT) {
            if (t->n_vals < t->n_in) t->vals[t->n_vals++] = v;
            else q->failed = 1; /* the replay was not the same data */
        } else {
            uint64_t bin = ((uint64_t)v - (uint64_t)t->lo) / t->bin_width;
            t->bins[bin]++;
        }
    }
}

/* Moves a shard's collected values of one target to the engine; the
 * caller holds the engine's lock. */
static void shard_flush_locked(an_quant *q, uint32_t group, uint32_t i)
{
    shard_target *lt = &q->groups[group].local[i];
    if (!lt->n_vals) return;
    an_quant *e = q->engine;
    target *t = &e->groups[group].targets[i];
    if (t->n_in - t->n_vals >= lt->n_vals) {
        memcpy(t->vals + t->n_vals, lt->vals, lt->n_vals * sizeof *lt->vals);
        t->n_vals += lt->n_vals;
    } else {
        e->failed = 1; /* the replay was not the same data */
    }
    lt->n_vals = 0;
}

static void shard_flush(an_quant *q, uint32_t group, uint32_t i)
{
    pthread_mutex_lock(&q->engine->lock);
    shard_flush_locked(q, group, i);
    pthread_mutex_unlock(&q->engine->lock);
}

/* add_later_pass for a shard: the engine's targets are only read (their
 * bounds, state and bin width do not change during a pass). */
static void shard_add_later_pass(an_quant *q, uint32_t group, int64_t v)
{
    const qgroup *eg = &q->engine->groups[group];
    const target *targets = eg->targets;
    qgroup *g = &q->groups[group];
    for (uint32_t k = 0; k < eg->n_active; k++) {
        uint32_t i = eg->active[k];
        const target *t = &targets[i];
        if (__builtin_expect(!in_target(t, v), 1)) continue;
        if (!g->local && !(g->local = calloc(q->n_pct, sizeof *g->local))) {
            q->failed = 1;
            return;
        }
        shard_target *lt = &g->local[i];
        if (t->state == T_COLLECT) {
            if (!lt->vals && !(lt->vals = malloc(SHARD_BLOCK * sizeof *lt->vals))) {
                q->failed = 1;
                continue;
            }
            lt->vals[lt->n_vals++] = v;
            if (lt->n_vals == SHARD_BLOCK) shard_flush(q, group, i);
        } else {
            if (!lt->bins) {
                uint64_t n_bins = ((uint64_t)t->hi - (uint64_t)t->lo) / t->bin_width + 1;
                if (!(lt->bins = calloc(n_bins, sizeof *lt->bins))) {
                    q->failed = 1;
                    continue;
                }
            }
            lt->bins[((uint64_t)v - (uint64_t)t->lo) / t->bin_width]++;
        }
    }
}

void an_quant_add(an_quant *q, uint32_t group, int64_t value)
{
    an_quant_add_many(q, &group, &value, 1);
}

void an_quant_add_many(an_quant *q, const uint32_t *groups, const int64_t *values, size_t n)
{
    if (q->pass == 1) {
        for (size_t i = 0; i < n; i++) {
            if (groups[i] >= q->n_groups) continue;
            add_first_pass(q, &q->groups[groups[i]], values[i] < 0 ? 0 : values[i]);
        }
        return;
    }
    if (q->engine) {
        for (size_t i = 0; i < n; i++)
            if (groups[i] < q->n_groups && q->wants[groups[i]])
                shard_add_later_pass(q, groups[i], values[i] < 0 ? 0 : values[i]);
        return;
    }
    for (size_t i = 0; i < n; i++)
        if (groups[i] < q->n_groups && q->wants[groups[i]])
            add_later_pass(q, &q->groups[groups[i]], values[i] < 0 ? 0 : values[i]);
}

int an_quant_fold(an_quant *q, uint32_t into, uint32_t from)
{
    if (q->engine) return -1;
    return an_quant_fold_from(q, into, q, from);
}

int an_quant_fold_from(an_quant *q, uint32_t into, const an_quant *src_q, uint32_t from)
{
    if (q->pass != 1 || src_q->pass != 1 || src_q->engine || into >= q->n_groups || from >= src_q->n_groups ||
        (q == src_q && into == from))
        return -1;
    qgroup *g = &q->groups[into];
    const qgroup *src = &src_q->groups[from];
    if (!src->n) return q->failed ? -1 : 0;
    if (!src->hist) {
        for (uint32_t i = 0; i < src->n_vals; i++) add_first_pass(q, g, src->vals[i]);
        return q->failed ? -1 : 0;
    }
    if (!g->hist) {
        to_histogram(q, g);
        if (!g->hist) return -1;
    }
    for (uint32_t b = 0; b < N_BLOCKS; b++) {
        if (!src->hist[b]) continue;
        if (!g->hist[b] && !(g->hist[b] = calloc(SUB, sizeof **g->hist))) {
            q->failed = 1;
            return -1;
        }
        for (uint32_t sub = 0; sub < SUB; sub++) g->hist[b][sub] += src->hist[b][sub];
    }
    g->n += src->n;
    return q->failed ? -1 : 0;
}

uint32_t an_quant_ranges(const an_quant *q, uint32_t group, int64_t *lo, int64_t *hi)
{
    const an_quant *e = q->engine ? q->engine : q;
    if (e->pass < 2 || group >= e->n_groups || !e->wants[group]) return 0;
    const qgroup *g = &e->groups[group];
    for (uint32_t k = 0; k < g->n_active; k++) {
        lo[k] = g->targets[g->active[k]].lo;
        hi[k] = g->targets[g->active[k]].hi;
    }
    return g->n_active;
}

int an_quant_wants(const an_quant *q, uint32_t group)
{
    return q->pass > 1 && group < q->n_groups && q->wants[group];
}

int an_quant_pass(const an_quant *q) { return q->pass; }

/* ---- selecting ------------------------------------------------------------------------ */

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* The k-th smallest (0-based) of a[0..n): three-way quickselect with
 * pseudo-random pivots, linear on average even with many equal values. */
static int64_t select_kth(int64_t *a, uint64_t n, uint64_t k)
{
    uint64_t lo = 0, hi = n, seed = 0x9e3779b97f4a7c15ULL ^ n;
    while (hi - lo > 1) {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        int64_t p = a[lo + seed % (hi - lo)];
        uint64_t lt = lo, i = lo, gt = hi;
        while (i < gt) {
            if (a[i] < p) {
                int64_t tmp = a[lt];
                a[lt++] = a[i];
                a[i++] = tmp;
            } else if (a[i] > p) {
                int64_t tmp = a[--gt];
                a[gt] = a[i];
                a[i] = tmp;
            } else {
                i++;
            }
        }
        if (k < lt) hi = lt;
        else if (k >= gt) lo = gt;
        else return p;
    }
    return a[lo];
}

/* 1-based nearest rank of permille in n values. */
static uint64_t rank_of(uint64_t n, uint32_t permille)
{
#ifdef __SIZEOF_INT128__
    __extension__ unsigned __int128 r = ((unsigned __int128)n * permille + 999) / 1000;
    uint64_t rank = (uint64_t)r;
#else
    uint64_t rank = n / 1000 * permille + ((n % 1000) * permille + 999) / 1000;
#endif
    if (rank < 1) rank = 1;
    if (rank > n) rank = n;
    return rank;
}

/* After pass 1: the bucket of each wanted rank. */
static void targets_from_hist(an_quant *q, qgroup *g)
{
    for (uint32_t i = 0; i < q->n_pct; i++) {
        target *t = &g->targets[i];
        uint64_t rank = rank_of(g->n, q->permille[i]), seen = 0;
        t->share = -1;
        t->state = T_DONE;
        for (uint32_t b = 0; b < N_BLOCKS; b++) {
            if (!g->hist[b]) continue;
            for (uint32_t s = 0; s < SUB; s++) {
                uint64_t c = g->hist[b][s];
                if (seen + c >= rank) {
                    bucket_range(b, s, &t->lo, &t->hi);
                    t->rank = rank - seen;
                    t->n_in = c;
                    t->state = T_REFINE; /* planned below */
                    goto found;
                }
                seen += c;
            }
        }
        q->failed = 1; /* counts do not add up: cannot happen */
    found:;
    }
}

/* After a later pass: resolve collected targets, narrow refined ones. */
static void resolve_targets(an_quant *q, qgroup *g)
{
    for (uint32_t i = 0; i < q->n_pct; i++) {
        target *t = &g->targets[i];
        if (t->state == T_COLLECT) {
            target *src = t->share >= 0 ? &g->targets[t->share] : t;
            if (src->n_vals != src->n_in) {
                q->failed = 1;
                t->value = t->lo;
            } else {
                t->value = select_kth(src->vals, src->n_vals, t->rank - 1);
            }
            t->state = T_DONE;
        } else if (t->state == T_REFINE) {
            uint64_t seen = 0;
            uint64_t n_bins = ((uint64_t)t->hi - (uint64_t)t->lo) / t->bin_width + 1;
            int found = 0;
            for (uint64_t b = 0; b < n_bins; b++) {
                if (seen + t->bins[b] >= t->rank) {
                    int64_t lo = t->lo + (int64_t)(b * t->bin_width);
                    uint64_t top = (uint64_t)lo + t->bin_width - 1;
                    t->hi = top < (uint64_t)t->hi ? (int64_t)top : t->hi;
                    t->lo = lo;
                    t->rank -= seen;
                    t->n_in = t->bins[b];
                    found = 1;
                    break;
                }
                seen += t->bins[b];
            }
            if (!found) q->failed = 1;
        }
    }
    for (uint32_t i = 0; i < q->n_pct; i++) {
        free(g->targets[i].vals);
        g->targets[i].vals = NULL;
        g->targets[i].n_vals = 0;
        free(g->targets[i].bins);
        g->targets[i].bins = NULL;
    }
}

/* Chooses how each open target is handled in the next pass; returns 1 if
 * the group still has work. */
static int plan_targets(an_quant *q, qgroup *g, uint64_t *budget, uint64_t *bin_budget)
{
    int open = 0;
    for (uint32_t i = 0; i < q->n_pct; i++) {
        target *t = &g->targets[i];
        if (t->state == T_DONE) continue;
        t->share = -1;
        if (t->lo == t->hi) { /* one value wide */
            t->value = t->lo;
            t->state = T_DONE;
            continue;
        }
        open = 1;
        for (uint32_t j = 0; j < i; j++) {
            target *o = &g->targets[j];
            if (o->state == T_COLLECT && o->share < 0 && o->lo == t->lo && o->hi == t->hi) {
                t->state = T_COLLECT;
                t->share = (int)j;
                break;
            }
        }
        if (t->share >= 0) continue;
        if (t->n_in <= *budget) {
            t->vals = q->defer ? NULL : malloc((t->n_in ? t->n_in : 1) * sizeof *t->vals);
            if (t->vals || q->defer) {
                *budget -= t->n_in;
                t->n_vals = 0;
                t->state = T_COLLECT;
                continue;
            }
        }
        /* Bins cost what a collected value costs. As many as the bin budget
         * of the pass allows, so that the next pass finds the value (bins
         * one nanosecond wide) or a narrow enough bucket to collect, instead
         * of one more pass; at least REFINE_BINS. */
        uint64_t span = (uint64_t)t->hi - (uint64_t)t->lo; /* bins: span / width + 1 */
        uint64_t width = span / REFINE_BINS + 1;
        if (span < *bin_budget) width = 1;
        else if (*bin_budget > REFINE_BINS) width = span / (*bin_budget - 1) + 1;
        uint64_t n_bins = span / width + 1;
        *bin_budget = n_bins < *bin_budget ? *bin_budget - n_bins : 0;
        t->bin_width = width;
        t->bins = q->defer ? NULL : calloc(((uint64_t)t->hi - (uint64_t)t->lo) / width + 1, sizeof *t->bins);
        if (!t->bins && !q->defer) q->failed = 1;
        t->state = T_REFINE;
    }
    /* The targets the next pass feeds (a shared one takes its values
     * from the one it shares). */
    g->n_active = 0;
    for (uint32_t i = 0; i < q->n_pct; i++) {
        const target *t = &g->targets[i];
        if (t->state != T_DONE && t->share < 0) g->active[g->n_active++] = (uint8_t)i;
    }
    return open;
}

void an_quant_defer_buffers(an_quant *q) { q->defer = 1; }

int an_quant_begin_pass(an_quant *q)
{
    if (q->failed || q->engine) return -1;
    for (uint32_t gi = 0; q->pass > 1 && gi < q->n_groups; gi++) {
        if (!q->wants[gi]) continue;
        qgroup *g = &q->groups[gi];
        for (uint32_t i = 0; i < q->n_pct; i++) {
            target *t = &g->targets[i];
            if (t->state == T_COLLECT && t->share < 0 && !t->vals)
                t->vals = malloc((t->n_in ? t->n_in : 1) * sizeof *t->vals);
            else if (t->state == T_REFINE && !t->bins)
                t->bins = calloc(((uint64_t)t->hi - (uint64_t)t->lo) / t->bin_width + 1, sizeof *t->bins);
            else continue;
            if (!t->vals && !t->bins) q->failed = 1;
        }
    }
    return q->failed ? -1 : 0;
}

int an_quant_end_pass(an_quant *q)
{
    if (q->failed || q->engine) return -1;
    uint64_t budget = q->collect_limit, bin_budget = q->collect_limit / 8;
    int more = 0;
    for (uint32_t gi = 0; gi < q->n_groups; gi++) {
        qgroup *g = &q->groups[gi];
        if (q->pass == 1) {
            if (g->n == 0) continue;
            if (!g->hist) {
                qsort(g->vals, g->n_vals, sizeof *g->vals, cmp_i64);
                for (uint32_t i = 0; i < q->n_pct; i++)
                    g->result[i] = g->vals[rank_of(g->n, q->permille[i]) - 1];
                free(g->vals);
                g->vals = NULL;
                g->n_vals = g->cap = 0;
                continue;
            }
            g->targets = calloc(q->n_pct ? q->n_pct : 1, sizeof *g->targets);
            if (!g->targets) return -1;
            targets_from_hist(q, g);
            free_hist(g);
        } else {
            if (!q->wants[gi]) continue;
            resolve_targets(q, g);
        }
        q->wants[gi] = (uint8_t)plan_targets(q, g, &budget, &bin_budget);
        if (q->wants[gi]) {
            more = 1;
        } else {
            for (uint32_t i = 0; i < q->n_pct; i++) g->result[i] = g->targets[i].value;
            free_targets(g, q->n_pct);
        }
    }
    if (q->failed) return -1;
    q->pass++;
    return more;
}

uint64_t an_quant_count(const an_quant *q, uint32_t group)
{
    return group < q->n_groups ? q->groups[group].n : 0;
}

int64_t an_quant_get(const an_quant *q, uint32_t group, uint32_t pct_index)
{
    if (group >= q->n_groups || pct_index >= q->n_pct) return 0;
    return q->groups[group].result[pct_index];
}

/* ---- shards ------------------------------------------------------------------------- */

an_quant *an_quant_shard(an_quant *q)
{
    if (q->engine) return NULL;
    an_quant *sh = calloc(1, sizeof *sh);
    if (!sh) return NULL;
    sh->n_groups = q->n_groups;
    sh->n_pct = q->n_pct;
    memcpy(sh->permille, q->permille, sizeof sh->permille);
    sh->pass = q->pass;
    sh->exact_limit = q->exact_limit;
    sh->collect_limit = q->collect_limit;
    sh->engine = q;
    sh->wants = q->wants;
    pthread_mutex_init(&sh->lock, NULL);
    sh->groups = calloc(q->n_groups ? q->n_groups : 1, sizeof *sh->groups);
    if (!sh->groups) {
        an_quant_free(sh);
        return NULL;
    }
    return sh;
}

/* Pass 1: a group stays exact while all its values together fit in
 * exact_limit, as it would have had they come to the engine directly. */
static void merge_first_pass(an_quant *q, qgroup *g, qgroup *from)
{
    if (!from->n) return;
    if (!g->hist && !from->hist && (uint64_t)g->n_vals + from->n_vals <= q->exact_limit) {
        uint32_t n = g->n_vals + from->n_vals;
        if (n > g->cap) {
            int64_t *vals = realloc(g->vals, n * sizeof *vals);
            if (!vals) {
                q->failed = 1;
                return;
            }
            g->vals = vals;
            g->cap = n;
        }
        if (from->n_vals) memcpy(g->vals + g->n_vals, from->vals, from->n_vals * sizeof *g->vals);
        g->n_vals = n;
        g->n += from->n;
        return;
    }
    if (!g->hist) {
        to_histogram(q, g);
        if (!g->hist) return;
    }
    if (from->hist) {
        for (uint32_t b = 0; b < N_BLOCKS; b++) {
            if (!from->hist[b]) continue;
            if (!g->hist[b]) {
                g->hist[b] = from->hist[b];
                from->hist[b] = NULL;
                continue;
            }
            for (uint32_t sub = 0; sub < SUB; sub++) g->hist[b][sub] += from->hist[b][sub];
        }
    } else {
        for (uint32_t i = 0; i < from->n_vals; i++)
            if (hist_add(g, from->vals[i])) q->failed = 1;
    }
    g->n += from->n;
}

int an_quant_merge(an_quant *q, an_quant *shard)
{
    if (!shard) return 0;
    pthread_mutex_lock(&q->lock);
    if (shard->engine != q || shard->pass != q->pass || shard->failed) q->failed = 1;
    for (uint32_t gi = 0; gi < q->n_groups && !q->failed; gi++) {
        qgroup *g = &q->groups[gi], *from = &shard->groups[gi];
        if (q->pass == 1) {
            merge_first_pass(q, g, from);
            continue;
        }
        if (!from->local) continue;
        for (uint32_t i = 0; i < q->n_pct; i++) {
            shard_flush_locked(shard, gi, i);
            const uint64_t *bins = from->local[i].bins;
            target *t = &g->targets[i];
            if (!bins) continue;
            if (t->state != T_REFINE || !t->bins) {
                q->failed = 1;
                break;
            }
            uint64_t n_bins = ((uint64_t)t->hi - (uint64_t)t->lo) / t->bin_width + 1;
            for (uint64_t b = 0; b < n_bins; b++) t->bins[b] += bins[b];
        }
    }
    int rc = q->failed ? -1 : 0;
    pthread_mutex_unlock(&q->lock);
    an_quant_free(shard);
    return rc;
}
