/* reader_set.c: a rank set (st_reader_open_set): the trace files of one
 * run's ranks read as one trace, each rank through its own reader, its
 * stages, counters and threads merged and its times mapped onto rank 0's
 * clock. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reader_int.h"

/* A time of a part onto rank 0's clock, 0 to INT64_MAX (the analysis
 * needs times that are not negative). */
static int set_map(const set_part *p, int64_t t, int64_t *out)
{
    if (st_rank_clock_map(&p->clock, t, out) != ST_OK || *out < 0)
        return st_set_error(ST_ECORRUPT, "rank %d: time %lld does not map onto rank 0's clock within 0..%lld ns",
                            p->rank, (long long)t, (long long)INT64_MAX);
    return ST_OK;
}

static void set_walk_init(set_walk *w, st_reader *set, int64_t thread)
{
    w->set = set;
    w->want_thread = thread;
    w->next_thread = thread < 0 ? 0 : thread >= (int64_t)set->n_threads ? set->n_threads : (uint32_t)thread;
}

/* ---- rank sets (st_reader_open_set) ---- */

/* st_reader_close: the parts and the maps (then the tables every reader has). */
static void set_close(st_reader *r)
{
    for (uint32_t i = 0; i < r->n_parts; i++) {
        st_reader_close(r->parts[i].r);
        free(r->parts[i].stage_map);
        free(r->parts[i].counter_map);
        free(r->parts[i].thread_of);
    }
    free(r->parts);
    free(r->thread_part);
    free(r->thread_local);
    r->parts = NULL;
    r->n_parts = 0;
    r->db = NULL; /* the first part's */
}

/* A rank's clock must run forwards when mapped: rank 0's reading at the
 * close measurement (clock_sync_close_ns + clock_offset_close_ns) not
 * before its reading at the open one, else the linear map would turn
 * every duration negative. */
static int check_part_clock(const set_part *p)
{
    const st_rank_clock *c = &p->clock;
    if (!c->has_open || !c->has_close || c->sync_close_ns <= c->sync_ns) return ST_OK;
    __int128 at_open = (__int128)c->sync_ns + c->offset_ns, at_close = (__int128)c->sync_close_ns + c->offset_close_ns;
    if (at_close < at_open)
        return st_set_error(ST_ECORRUPT,
                            "rank %d: meta 'clock_sync_close_ns' + 'clock_offset_close_ns' is before "
                            "'clock_sync_ns' + 'clock_offset_ns' (rank 0's clock would run backwards): its times "
                            "cannot be mapped onto rank 0's clock",
                            p->rank);
    return ST_OK;
}

/* The set's step marks: part 0's, mapped with its clock, in order. */
static int set_map_steps(st_reader *r)
{
    st_reader *first = r->parts[0].r;
    for (uint32_t i = 0; i < first->n_steps; i++) {
        r->steps[i] = first->steps[i];
        int rc = set_map(&r->parts[0], first->steps[i].ts_ns, &r->steps[i].ts_ns);
        if (rc) return rc;
        if (i && r->steps[i].ts_ns <= r->steps[i - 1].ts_ns)
            return st_set_error(ST_ECORRUPT, "rank %d: step marks %llu and %llu are out of order on rank 0's clock",
                                r->parts[0].rank, (unsigned long long)r->steps[i - 1].step,
                                (unsigned long long)r->steps[i].step);
    }
    r->n_steps = first->n_steps;
    return ST_OK;
}

static int set_build(st_reader *r, st_reader **readers, uint32_t n, const int *ranks)
{
    uint32_t nt = 0, ns = 0, nc = 0;
    for (uint32_t i = 0; i < n; i++) {
        nt += readers[i]->n_threads;
        ns += readers[i]->n_stages;
        nc += readers[i]->n_counters;
    }
    r->parts = calloc(n, sizeof *r->parts);
    r->threads = calloc(nt ? nt : 1, sizeof *r->threads);
    r->thread_part = calloc(nt ? nt : 1, sizeof *r->thread_part);
    r->thread_local = calloc(nt ? nt : 1, sizeof *r->thread_local);
    r->thread_index = calloc(nt ? nt : 1, sizeof *r->thread_index);
    r->stages = calloc(ns ? ns : 1, sizeof *r->stages);
    r->counters = calloc(nc ? nc : 1, sizeof *r->counters);
    if (!r->parts || !r->threads || !r->thread_part || !r->thread_local || !r->thread_index || !r->stages ||
        !r->counters) {
        for (uint32_t i = 0; i < n; i++) st_reader_close(readers[i]);
        return st_set_error(ST_ENOMEM, "out of memory");
    }
    r->n_parts = n;
    for (uint32_t i = 0; i < n; i++) {
        r->parts[i].r = readers[i];
        r->parts[i].rank = ranks[i];
        st_reader_rank_clock(readers[i], &r->parts[i].clock);
    }
    for (uint32_t i = 0; i < n; i++) {
        int rc = check_part_clock(&r->parts[i]);
        if (rc) return rc;
    }
    r->db = readers[0]->db;
    r->owns_db = 0;
    for (uint32_t i = 0; i < n; i++) {
        set_part *p = &r->parts[i];
        st_reader *pr = p->r;
        p->stage_map = calloc(pr->n_stages ? pr->n_stages : 1, sizeof *p->stage_map);
        p->counter_map = calloc(pr->n_counters ? pr->n_counters : 1, sizeof *p->counter_map);
        p->thread_of = calloc(pr->n_threads ? pr->n_threads : 1, sizeof *p->thread_of);
        if (!p->stage_map || !p->counter_map || !p->thread_of) return st_set_error(ST_ENOMEM, "out of memory");
        /* stages are one by name across ranks: the first rank's id and kind */
        for (uint32_t s = 0; s < pr->n_stages; s++) {
            uint32_t k = 0;
            while (k < r->n_stages && strcmp(r->stages[k].name, pr->stages[s].name) != 0) k++;
            if (k == r->n_stages) {
                r->stages[k] = pr->stages[s];
                r->stages[k].id = k;
                if (!(r->stages[k].name = strdup(pr->stages[s].name))) return st_set_error(ST_ENOMEM, "out of memory");
                r->n_stages++;
            } else if (r->stages[k].kind != pr->stages[s].kind) {
                return st_set_error(ST_ECORRUPT, "rank %d's stage '%.64s' is of kind %s, another rank's of kind %s",
                                    p->rank, pr->stages[s].name, st_kind_name(pr->stages[s].kind),
                                    st_kind_name(r->stages[k].kind));
            }
            p->stage_map[s] = k;
        }
        for (uint32_t c = 0; c < pr->n_counters; c++) {
            uint32_t k = 0;
            while (k < r->n_counters && strcmp(r->counters[k].name, pr->counters[c].name) != 0) k++;
            if (k == r->n_counters) {
                r->counters[k] = pr->counters[c];
                r->counters[k].id = k;
                r->counters[k].name = strdup(pr->counters[c].name);
                r->counters[k].unit = strdup(pr->counters[c].unit);
                r->n_counters++;
                if (!r->counters[k].name || !r->counters[k].unit) return st_set_error(ST_ENOMEM, "out of memory");
            }
            p->counter_map[c] = k;
        }
        for (uint32_t t = 0; t < pr->n_threads; t++) {
            st_thread_info *th = &r->threads[r->n_threads];
            *th = pr->threads[t];
            size_t len = strlen(pr->threads[t].name) + 16;
            char *name = malloc(len);
            if (!name) return st_set_error(ST_ENOMEM, "out of memory");
            snprintf(name, len, "r%d/%s", p->rank, pr->threads[t].name);
            th->name = name;
            th->role = strdup(pr->threads[t].role);
            r->n_threads++; /* owned from here: freed by st_reader_close */
            if (!th->role) return st_set_error(ST_ENOMEM, "out of memory");
            r->n_threads--;
            th->id = r->n_threads;
            th->rank = p->rank;
            r->thread_part[r->n_threads] = i;
            r->thread_local[r->n_threads] = pr->threads[t].id;
            r->thread_index[r->n_threads] = (int32_t)r->n_threads;
            p->thread_of[t] = r->n_threads;
            r->n_threads++;
        }
    }
    r->thread_index_len = r->n_threads;
    /* step marks: the first part's (rank 0 normally), on rank 0's clock */
    st_reader *first = r->parts[0].r;
    r->steps = calloc(first->n_steps ? first->n_steps : 1, sizeof *r->steps);
    if (!r->steps) return st_set_error(ST_ENOMEM, "out of memory");
    return set_map_steps(r);
}

int st_run_ids_match(const char *a, const char *b) { return a && b && strcmp(a, b) == 0; }

/* The parts in rank order (stable), each rank once, one run_id: so that
 * nothing of a set depends on the order its traces were given in. */
static int set_order(st_reader **readers, const int *ranks, uint32_t n, st_reader **by_rank, int *rank_of)
{
    for (uint32_t i = 0; i < n; i++) {
        uint32_t j = i;
        while (j > 0 && rank_of[j - 1] > ranks[i]) {
            by_rank[j] = by_rank[j - 1];
            rank_of[j] = rank_of[j - 1];
            j--;
        }
        by_rank[j] = readers[i];
        rank_of[j] = ranks[i];
    }
    for (uint32_t i = 0; i < n; i++) {
        const char *id = st_reader_meta(by_rank[i], "run_id"), *id0 = st_reader_meta(by_rank[0], "run_id");
        if (!id) return st_set_error(ST_EINVAL, "rank %d's trace has no run_id: it cannot be one rank of a set", rank_of[i]);
        if (i && rank_of[i] == rank_of[i - 1])
            return st_set_error(ST_EINVAL, "rank %d is given twice (each rank once)", rank_of[i]);
        if (!st_run_ids_match(id, id0))
            return st_set_error(ST_EINVAL, "rank %d's run_id '%s' is not the run_id '%s' of rank %d: the traces are "
                                "not ranks of one run",
                                rank_of[i], id, id0, rank_of[0]);
    }
    return ST_OK;
}

static const st_reader_methods set_methods;

int st_reader_open_set(st_reader **out, st_reader **readers, const int *ranks, uint32_t n)
{
    *out = NULL;
    if (n == 0) return st_set_error(ST_EINVAL, "a rank set needs at least one trace");
    st_reader *r = calloc(1, sizeof *r);
    st_reader **by_rank = malloc(n * sizeof *by_rank);
    int *rank_of = malloc(n * sizeof *rank_of);
    if (r) r->m = &set_methods;
    if (!r || !by_rank || !rank_of) {
        for (uint32_t i = 0; i < n; i++) st_reader_close(readers[i]);
        free(r);
        free(by_rank);
        free(rank_of);
        return st_set_error(ST_ENOMEM, "out of memory");
    }
    int rc = set_order(readers, ranks, n, by_rank, rank_of);
    if (rc) {
        for (uint32_t i = 0; i < n; i++) st_reader_close(readers[i]);
        free(r);
        free(by_rank);
        free(rank_of);
        return rc;
    }
    rc = set_build(r, by_rank, n, rank_of);
    free(by_rank);
    free(rank_of);
    if (rc) {
        if (!r->parts) {
            free(r->threads);
            free(r->thread_part);
            free(r->thread_local);
            free(r->thread_index);
            free(r->stages);
            free(r->counters);
            free(r);
            return rc;
        }
        char msg[512];
        snprintf(msg, sizeof msg, "%s", st_last_error());
        st_reader_close(r);
        return st_set_error(rc, "%s", msg);
    }
    *out = r;
    return ST_OK;
}

uint32_t st_reader_n_parts(const st_reader *r) { return r->parts ? r->n_parts : 0; }

st_reader *st_reader_part(const st_reader *r, uint32_t i) { return r->parts && i < r->n_parts ? r->parts[i].r : NULL; }

int st_reader_thread_part(const st_reader *r, uint32_t thread, uint32_t *part, uint32_t *local_id)
{
    if (!r->parts || thread >= r->n_threads) return -1;
    *part = r->thread_part[thread];
    *local_id = r->thread_local[thread];
    return 0;
}

int st_reader_part_clock(const st_reader *r, uint32_t index, st_rank_clock *out)
{
    if (!r->parts || index >= r->n_parts)
        return st_set_error(ST_EINVAL, "the reader has no part %u (a rank set's parts: 0..%u)", index,
                            r->parts ? r->n_parts - 1 : 0);
    *out = r->parts[index].clock;
    return ST_OK;
}

int st_reader_set_part_clock(st_reader *r, uint32_t index, const st_rank_clock *c)
{
    st_rank_clock before;
    int rc = st_reader_part_clock(r, index, &before);
    if (rc) return rc;
    r->parts[index].clock = *c;
    rc = check_part_clock(&r->parts[index]);
    if (!rc && index == 0) rc = set_map_steps(r);
    if (rc) {
        r->parts[index].clock = before;
        if (index == 0) set_map_steps(r); /* as they were: they mapped with it */
    }
    return rc;
}

static int set_chunk_totals(st_reader *r, st_chunk_totals *out)
{
    for (uint32_t i = 0; i < r->n_parts; i++) {
        st_chunk_totals t;
        int rc = st_reader_chunk_totals(r->parts[i].r, &t);
        if (rc) return rc;
        out->n_ranges += t.n_ranges;
        out->n_samples += t.n_samples;
        if (!t.has_ranges) continue;
        int64_t a, b;
        if ((rc = set_map(&r->parts[i], t.first_ns, &a)) || (rc = set_map(&r->parts[i], t.last_ns, &b))) return rc;
        if (!out->has_ranges || a < out->first_ns) out->first_ns = a;
        if (!out->has_ranges || b > out->last_ns) out->last_ns = b;
        out->has_ranges = 1;
    }
    return ST_OK;
}

static int set_chunks_per_thread(st_reader *r, st_chunk_count **out, uint32_t *n)
{
    *out = calloc(r->n_threads ? r->n_threads : 1, sizeof **out);
    *n = 0;
    if (!*out) return st_set_error(ST_ENOMEM, "out of memory");
    for (uint32_t i = 0; i < r->n_parts; i++) {
        st_chunk_count *c = NULL;
        uint32_t nc = 0;
        st_reader_range_chunks_per_thread(r->parts[i].r, &c, &nc);
        for (uint32_t k = 0; k < nc; k++) {
            const st_thread_info *th = c[k].key >= 0 && c[k].key <= UINT32_MAX
                                           ? st_reader_thread_by_id(r->parts[i].r, (uint32_t)c[k].key)
                                           : NULL;
            if (!th) continue;
            uint32_t index = (uint32_t)(th - r->parts[i].r->threads);
            (*out)[*n].key = r->parts[i].thread_of[index];
            (*out)[*n].n = c[k].n;
            (*n)++;
        }
        free(c);
    }
    return ST_OK;
}

/* ---- rank sets: the walk over the threads (set_walk) ----
 * One kind of per-file iterator, behind three calls: the thread's iterator
 * opened on its rank over all time (the set filters the mapped times), its
 * next row, its close. */
typedef struct set_walk_kind {
    int (*open)(void **sub, st_reader *rank, uint32_t local_thread);
    int (*next)(void *sub, void *row);
    void (*close)(void *sub);
} set_walk_kind;

/* The next row of the walk, from the current thread's iterator, moving on
 * to the next thread when it ends: 1 (a row, from thread w->cur_thread),
 * 0 (no thread left) or a negative code. */
static int set_walk_next(set_walk *w, const set_walk_kind *kind, void *row)
{
    st_reader *r = w->set;
    for (;;) {
        if (!w->sub) {
            if (w->next_thread >= r->n_threads || (w->want_thread >= 0 && w->next_thread != w->want_thread))
                return 0;
            uint32_t t = w->next_thread++;
            int rc = kind->open(&w->sub, r->parts[r->thread_part[t]].r, r->thread_local[t]);
            if (rc) return rc;
            w->cur_thread = t;
        }
        int rc = kind->next(w->sub, row);
        if (rc != 0) return rc;
        kind->close(w->sub);
        w->sub = NULL;
    }
}

/* The part (rank) of the walk's current thread. */
static const set_part *set_walk_part(const set_walk *w)
{
    return &w->set->parts[w->set->thread_part[w->cur_thread]];
}

static int walk_range_open(void **sub, st_reader *rank, uint32_t thread)
{
    st_range_iter *it = NULL;
    int rc = st_range_iter_open(&it, rank, thread, INT64_MIN, INT64_MAX);
    *sub = it;
    return rc;
}

static int walk_range_next(void *sub, void *row) { return st_range_iter_next(sub, row); }

static void walk_range_close(void *sub) { st_range_iter_close(sub); }

static const set_walk_kind range_walk = {walk_range_open, walk_range_next, walk_range_close};

static int walk_sample_open(void **sub, st_reader *rank, uint32_t thread)
{
    st_sample_iter *it = NULL;
    int rc = st_sample_iter_open(&it, rank, thread, INT64_MIN, INT64_MAX);
    *sub = it;
    return rc;
}

static int walk_sample_next(void *sub, void *row) { return st_sample_iter_next(sub, row); }

static void walk_sample_close(void *sub) { st_sample_iter_close(sub); }

static const set_walk_kind sample_walk = {walk_sample_open, walk_sample_next, walk_sample_close};

static int walk_flow_open(void **sub, st_reader *rank, uint32_t thread)
{
    st_flow_iter *it = NULL;
    int rc = st_flow_iter_open(&it, rank, thread, INT64_MIN, INT64_MAX);
    *sub = it;
    return rc;
}

static int walk_flow_next(void *sub, void *row) { return st_flow_iter_next(sub, row); }

static void walk_flow_close(void *sub) { st_flow_iter_close(sub); }

static const set_walk_kind flow_walk = {walk_flow_open, walk_flow_next, walk_flow_close};

/* The next batch of a rank set's ranges: each thread's, one after another,
 * read on its rank and mapped, kept when they overlap [t0, t1) as a file's
 * iterator keeps them. */
static int set_range_fill(st_range_iter *it, st_range *out)
{
    it->head.next = it->head.end = it->batch;
    size_t n = 0;
    while (n < RANGE_BATCH) {
        st_range g;
        int rc = set_walk_next(&it->walk, &range_walk, &g);
        if (rc < 0) return rc;
        if (rc == 0) break;
        uint32_t t = it->walk.cur_thread;
        const set_part *p = set_walk_part(&it->walk);
        int64_t start, end;
        if ((rc = set_map(p, g.start_ns, &start)) || (rc = set_map(p, g.start_ns + g.dur_ns, &end))) return rc;
        if (start >= it->t1 || end < it->t0 || (end == it->t0 && end != start)) continue;
        it->batch[n].thread = t;
        it->batch[n].stage = p->stage_map[g.stage];
        it->batch[n].depth = g.depth;
        it->batch[n].start_ns = start;
        it->batch[n].dur_ns = end - start;
        n++;
    }
    if (!n) return 0;
    *out = it->batch[0];
    it->head.next = it->batch + 1;
    it->head.end = it->batch + n;
    return 1;
}

static int set_sample_next(st_sample_iter *it, st_sample_row *out)
{
    int rc;
    while ((rc = set_walk_next(&it->walk, &sample_walk, out)) == 1) {
        const set_part *p = set_walk_part(&it->walk);
        if ((rc = set_map(p, out->ts_ns, &out->ts_ns))) return rc;
        if (out->ts_ns < it->t0 || out->ts_ns >= it->t1) continue;
        out->thread = it->walk.cur_thread;
        out->counter = p->counter_map[out->counter];
        return 1;
    }
    return rc;
}

static int set_range_open(st_range_iter *it, st_reader *r, int64_t thread)
{
    set_walk_init(&it->walk, r, thread);
    return ST_OK;
}

static void set_range_close(st_range_iter *it) { st_range_iter_close(it->walk.sub); }

static int set_sample_open(st_sample_iter *it, st_reader *r, int64_t thread)
{
    set_walk_init(&it->walk, r, thread);
    return ST_OK;
}

static void set_sample_close(st_sample_iter *it) { st_sample_iter_close(it->walk.sub); }

/* ---- rank sets: raw events and the ranges left open, of one thread on its rank ---- */

static int set_unended(st_reader *r, uint32_t thread, st_open_range *stack)
{
    if (thread >= r->n_threads) return 0;
    const set_part *p = &r->parts[r->thread_part[thread]];
    int n = st_reader_unended(p->r, r->thread_local[thread], stack);
    for (int i = 0; i < n; i++) {
        stack[i].stage = p->stage_map[stack[i].stage];
        int rc = set_map(p, stack[i].start_ns, &stack[i].start_ns);
        if (rc) return rc;
    }
    return n;
}

static int set_event_open(st_event_iter *it, st_reader *r, uint32_t thread)
{
    if (thread < r->n_threads) {
        it->part = &r->parts[r->thread_part[thread]];
        return st_event_iter_open(&it->sub, it->part->r, r->thread_local[thread]);
    }
    return ST_OK;
}

static int set_event_next(st_event_iter *it, st_event *out)
{
    if (!it->sub) return 0;
    int rc = st_event_iter_next(it->sub, out);
    if (rc != 1) return rc;
    out->stage = it->part->stage_map[out->stage];
    if ((rc = set_map(it->part, out->ts_ns, &out->ts_ns))) return rc;
    if (out->is_end && (rc = set_map(it->part, out->start_ns, &out->start_ns))) return rc;
    return 1;
}

static void set_event_close(st_event_iter *it) { st_event_iter_close(it->sub); }

/* ---- rank sets: flows (set_flow_*) ----
 * Each rank's flow records, per merged thread in the set's thread order, on
 * the thread's rank with its times mapped onto rank 0's clock; ids are the
 * program's, shared by all ranks (an out on one rank pairs with the in on
 * another). */

static int set_has_flows(st_reader *r)
{
    for (uint32_t i = 0; i < r->n_parts; i++) {
        int has = st_reader_has_flows(r->parts[i].r);
        if (has) return has;
    }
    return 0;
}

static int set_flow_next(st_flow_iter *it, st_flow_row *out)
{
    int rc;
    while ((rc = set_walk_next(&it->walk, &flow_walk, out)) == 1) {
        if ((rc = set_map(set_walk_part(&it->walk), out->ts_ns, &out->ts_ns))) return rc;
        if (out->ts_ns < it->t0 || out->ts_ns >= it->t1) continue;
        out->thread = it->walk.cur_thread;
        return 1;
    }
    return rc;
}

static int set_flow_open(st_flow_iter *it, st_reader *r, int64_t thread)
{
    set_walk_init(&it->walk, r, thread);
    return ST_OK;
}

static void set_flow_close(st_flow_iter *it) { st_flow_iter_close(it->walk.sub); }

/* The row's place in its rank's file. */
static void set_flow_pos(const st_flow_iter *it, int64_t *chunk_id, uint32_t *index)
{
    if (it->walk.sub) st_flow_iter_pos(it->walk.sub, chunk_id, index);
    else *chunk_id = 0, *index = 0;
}

int64_t st_reader_flow_slack(const st_reader *r, uint32_t thread_a, uint32_t thread_b)
{
    if (!r->parts || thread_a >= r->n_threads || thread_b >= r->n_threads) return 0;
    const set_part *a = &r->parts[r->thread_part[thread_a]], *b = &r->parts[r->thread_part[thread_b]];
    if (a == b) return 0;
    int64_t ua = st_rank_clock_uncertainty(&a->clock), ub = st_rank_clock_uncertainty(&b->clock);
    if (ua < 0) ua = 0;
    if (ub < 0) ub = 0;
    return ua > INT64_MAX - ub ? INT64_MAX : ua + ub;
}

/* ---- a rank set's GPU records (docs/analyze.md, "Rank sets") ----
 * Each rank's records read by its own reader, times mapped as its ranges
 * are (set_map), device d of rank r numbered r * ST_SET_DEVICE_STRIDE + d,
 * launching threads and stages the set's; API calls keep device -1. */

/* A device of part p as the set numbers it. */
static int set_gpu_device(const set_part *p, int64_t d, int32_t *out)
{
    if (d < 0) {
        *out = -1;
        return ST_OK;
    }
    if (d >= ST_SET_DEVICE_STRIDE || p->rank < 0 ||
        (int64_t)p->rank * ST_SET_DEVICE_STRIDE + d > INT32_MAX)
        return st_set_error(ST_ECORRUPT, "rank %d: GPU device %lld cannot be numbered in a rank set (devices 0..%d of ranks 0..%d)",
                            p->rank, (long long)d, ST_SET_DEVICE_STRIDE - 1, INT32_MAX / ST_SET_DEVICE_STRIDE - 1);
    *out = (int32_t)((int64_t)p->rank * ST_SET_DEVICE_STRIDE + d);
    return ST_OK;
}

/* A time on rank 0's clock back onto part p's, for the windows a part is
 * read with (a bound widened by a few ns; the mapped records are filtered
 * exactly). The map is t + offset (+ drift), so a few fixed-point steps
 * invert it; the ends of the line stay there. */
static int64_t set_unmap(const set_part *p, int64_t m, int lower)
{
    if (m == INT64_MIN || m == INT64_MAX || !p->clock.has_open) return m;
    __int128 t = (__int128)m - p->clock.offset_ns;
    for (int k = 0; k < 4; k++) {
        if (t <= INT64_MIN || t >= INT64_MAX) break;
        int64_t back = 0;
        if (st_rank_clock_map(&p->clock, (int64_t)t, &back) != ST_OK) break;
        t += (__int128)m - back;
    }
    t += lower ? -16 : 16;
    return t <= INT64_MIN ? INT64_MIN : t >= INT64_MAX ? INT64_MAX : (int64_t)t;
}

static int set_gpu_has(st_reader *r)
{
    for (uint32_t i = 0; i < r->n_parts; i++) {
        int h = st_reader_has_gpu(r->parts[i].r);
        if (h) return h;
    }
    return 0;
}

static int set_gpu_open(st_gpu_iter *it, int64_t device)
{
    st_reader *r = it->r;
    it->want_device = device;
    it->sub = calloc(r->n_parts ? r->n_parts : 1, sizeof *it->sub);
    it->tr = calloc(r->n_threads ? r->n_threads : 1, sizeof *it->tr);
    if (!it->sub || !it->tr) return st_set_error(ST_ENOMEM, "out of memory");
    return ST_OK;
}

static void set_gpu_close(st_gpu_iter *it)
{
    for (uint32_t i = 0; it->sub && i < it->r->n_parts; i++) st_gpu_iter_close(it->sub[i]);
    free(it->sub);
}

static void set_gpu_pos(const st_gpu_iter *it, int64_t *chunk_id, uint32_t *index)
{
    if (it->part < it->r->n_parts && it->sub[it->part]) it = it->sub[it->part]; /* the rank's file */
    st_rd_file_gpu_pos(it, chunk_id, index);
}

/* The part's device asked for: -1 all, -2 none of this part's. */
static int64_t set_gpu_local_device(const st_gpu_iter *it, const set_part *p)
{
    if (it->want_device < 0) return -1;
    if (p->rank < 0 || it->want_device / ST_SET_DEVICE_STRIDE != p->rank) return -2;
    return it->want_device % ST_SET_DEVICE_STRIDE;
}

static int set_gpu_next(st_gpu_iter *it, st_gpu_row *out)
{
    st_reader *r = it->r;
    while (it->part < r->n_parts) {
        const set_part *p = &r->parts[it->part];
        st_gpu_iter **sub = &it->sub[it->part];
        int64_t dev = set_gpu_local_device(it, p);
        if (dev == -2) {
            it->part++;
            continue;
        }
        int rc;
        if (!*sub) {
            int64_t a = set_unmap(p, it->t0, 1), b = set_unmap(p, it->t1, 0);
            rc = it->api_mode ? st_gpu_api_iter_open(sub, p->r, a, b) : st_gpu_iter_open(sub, p->r, dev, a, b);
            if (rc) return rc;
        }
        rc = st_gpu_iter_next(*sub, out);
        if (rc < 0) return rc;
        if (rc == 0) {
            it->part++; /* its iterator stays open: the names it gave stay valid */
            continue;
        }
        int64_t start, end;
        if ((rc = set_map(p, out->rec.start_ns, &start)) ||
            (rc = set_map(p, out->rec.start_ns + (out->rec.dur_ns > 0 ? out->rec.dur_ns : 0), &end)))
            return rc;
        int64_t dur = out->rec.dur_ns > 0 ? end - start : out->rec.dur_ns;
        if (start >= it->t1) continue;
        int64_t e = start + (dur > 0 ? dur : 0);
        if (e < it->t0 || (e == it->t0 && dur != 0)) continue;
        out->rec.start_ns = start;
        out->rec.dur_ns = dur;
        int32_t d;
        if ((rc = set_gpu_device(p, out->device, &d))) return rc;
        out->device = d;
        if (out->launch_ns != INT64_MIN && (rc = set_map(p, out->launch_ns, &out->launch_ns))) return rc;
        if (out->thread >= 0) {
            const st_thread_info *th =
                out->thread <= UINT32_MAX ? st_reader_thread_by_id(p->r, (uint32_t)out->thread) : NULL;
            out->thread = th ? (int64_t)p->thread_of[th - p->r->threads] : -1;
        }
        if (out->stage >= 0) out->stage = (uint32_t)out->stage < p->r->n_stages ? (int64_t)p->stage_map[out->stage] : -1;
        return 1;
    }
    return 0;
}

static int set_gpu_records_per_device(st_reader *r, st_chunk_count **out, uint32_t *n)
{
    *out = NULL;
    *n = 0;
    uint32_t cap = 0;
    int64_t api = 0;
    int has_api = 0;
    for (uint32_t i = 0; i < r->n_parts; i++) {
        st_chunk_count *c = NULL;
        uint32_t nc = 0;
        int rc = ST_OK;
        if (st_rd_is_table(r->parts[i].r->db, "gpu_chunks") > 0)
            rc = st_reader_gpu_records_per_device(r->parts[i].r, &c, &nc);
        for (uint32_t k = 0; !rc && k < nc; k++) {
            if (c[k].key < 0) { /* the API calls: one row for the set, under the lowest key */
                api = c[k].n > INT64_MAX - api ? INT64_MAX : api + c[k].n;
                has_api = 1;
                continue;
            }
            int32_t d;
            rc = set_gpu_device(&r->parts[i], c[k].key, &d);
            if (!rc) rc = st_rd_push_count(out, n, &cap, d, c[k].n);
        }
        free(c);
        if (rc) return rc;
    }
    if (has_api) {
        int rc = st_rd_push_count(out, n, &cap, -1, api);
        if (rc) return rc;
        memmove(*out + 1, *out, (*n - 1) * sizeof **out);
        (*out)[0] = (st_chunk_count){-1, api};
    }
    return ST_OK;
}

static int set_gpu_devices(st_reader *r, int32_t **out, uint32_t *n)
{
    int32_t *v = NULL;
    uint32_t len = 0;
    for (uint32_t i = 0; i < r->n_parts; i++) {
        if (st_rd_is_table(r->parts[i].r->db, "gpu_chunks") <= 0) continue;
        int32_t *d = NULL;
        uint32_t nd = 0;
        int rc = st_reader_gpu_devices(r->parts[i].r, &d, &nd);
        int32_t *nv = rc || !nd ? NULL : realloc(v, (len + nd) * sizeof *nv);
        if (!rc && nd && !nv) rc = st_set_error(ST_ENOMEM, "out of memory");
        if (nv) v = nv;
        for (uint32_t k = 0; !rc && k < nd; k++) rc = set_gpu_device(&r->parts[i], d[k], &v[len++]);
        free(d);
        if (rc) {
            free(v);
            return rc;
        }
    }
    *out = v;
    *n = len;
    return ST_OK;
}

static int set_gpu_span(st_reader *r, st_gpu_headers *out)
{
    for (uint32_t i = 0; i < r->n_parts; i++) {
        st_gpu_headers h;
        int rc = st_reader_gpu_span(r->parts[i].r, &h);
        if (rc) return rc;
        if (!h.has) continue;
        int64_t a, b;
        if ((rc = set_map(&r->parts[i], h.t0_ns, &a)) || (rc = set_map(&r->parts[i], h.t1_ns, &b))) return rc;
        out->n_records = h.n_records > INT64_MAX - out->n_records ? INT64_MAX : out->n_records + h.n_records;
        if (!out->has || a < out->t0_ns) out->t0_ns = a;
        if (!out->has || b > out->t1_ns) out->t1_ns = b;
        out->has = 1;
    }
    return ST_OK;
}

static int set_gpu_headers(st_reader *r, int64_t device, int64_t t0_ns, int64_t t1_ns, st_gpu_headers *out)
{
    for (uint32_t i = 0; i < r->n_parts; i++) {
        const set_part *p = &r->parts[i];
        int64_t dev = device;
        if (device >= 0) {
            if (p->rank < 0 || device / ST_SET_DEVICE_STRIDE != p->rank) continue;
            dev = device % ST_SET_DEVICE_STRIDE;
        }
        st_gpu_headers h;
        int rc = st_reader_gpu_headers(p->r, dev, set_unmap(p, t0_ns, 1), set_unmap(p, t1_ns, 0), &h);
        if (rc) return rc;
        if (!h.has) continue;
        int64_t a, b;
        if ((rc = set_map(p, h.t0_ns, &a)) || (rc = set_map(p, h.t1_ns, &b))) return rc;
        out->n_records = h.n_records > INT64_MAX - out->n_records ? INT64_MAX : out->n_records + h.n_records;
        if (!out->has || a < out->t0_ns) out->t0_ns = a;
        if (!out->has || b > out->t1_ns) out->t1_ns = b;
        out->has = 1;
    }
    return ST_OK;
}

/* ---- rank sets: the CPU capture ----
 * Each thread's records come from its rank's reader (which resolves an
 * "unknown" sample's stage on its own clock), then the set maps the time,
 * the stage and the stack: a stack id is the part's index << 32 | the
 * rank's id, so that ids stay unique across the set and lead back to the
 * rank whose process the frames belong to. */

static int set_has_cpu(st_reader *r)
{
    int any = 0;
    for (uint32_t i = 0; i < r->n_parts; i++) {
        int h = st_reader_has_cpu(r->parts[i].r);
        if (h < 0) return h;
        any |= h;
    }
    return any;
}

static int set_cpu_thread(st_reader *r, uint32_t thread, st_cpu_thread_info *out)
{
    if (thread >= r->n_threads) return 0;
    const set_part *p = &r->parts[r->thread_part[thread]];
    int rc = st_reader_cpu_thread(p->r, r->thread_local[thread], out);
    if (rc <= 0) return rc;
    out->thread = thread;
    int mrc = set_map(p, out->start_ns, &out->start_ns);
    return mrc ? mrc : 1;
}

static int set_cpu_open(st_cpu_iter *it, st_reader *r, uint32_t thread)
{
    if (thread >= r->n_threads) return ST_OK;
    it->part_index = r->thread_part[thread];
    it->part = &r->parts[it->part_index];
    return st_cpu_iter_open(&it->sub, it->part->r, r->thread_local[thread], set_unmap(it->part, it->t0, 1),
                            set_unmap(it->part, it->t1, 0));
}

static int set_cpu_next(st_cpu_iter *it, st_cpu_row *out)
{
    if (!it->sub) return 0;
    int rc;
    while ((rc = st_cpu_iter_next(it->sub, out)) == 1) {
        if ((rc = set_map(it->part, out->ts_ns, &out->ts_ns))) return rc;
        if (out->ts_ns < it->t0 || out->ts_ns >= it->t1) continue;
        out->thread = it->thread;
        if (out->kind == ST_CPU_ROW_SAMPLE || out->kind == ST_CPU_ROW_PY_SAMPLE) {
            out->stack |= (uint64_t)it->part_index << 32;
            if (out->stage >= 0) out->stage = (int32_t)it->part->stage_map[out->stage];
        }
        if (out->wait_stack) out->stack |= (uint64_t)it->part_index << 32;
        return 1;
    }
    return rc;
}

static void set_cpu_close(st_cpu_iter *it) { st_cpu_iter_close(it->sub); }

static int set_cpu_part(st_reader *r, uint64_t stack, const set_part **p)
{
    uint64_t part = stack >> 32;
    if (part >= r->n_parts) return st_set_error(ST_EINVAL, "the rank set has no CPU stack %llu", (unsigned long long)stack);
    *p = &r->parts[part];
    return ST_OK;
}

static int set_cpu_stack(st_reader *r, uint64_t stack, const uint64_t **frames, uint32_t *n)
{
    const set_part *p = NULL;
    int rc = set_cpu_part(r, stack, &p);
    return rc ? rc : st_reader_cpu_stack(p->r, stack & 0xffffffffu, frames, n);
}

static int set_cpu_frame_name(st_reader *r, uint64_t stack, uint64_t addr, st_cpu_frame *out)
{
    const set_part *p = NULL;
    int rc = set_cpu_part(r, stack, &p);
    return rc ? rc : st_reader_cpu_frame_name(p->r, stack & 0xffffffffu, addr, out);
}

static int set_cpu_map(st_reader *r, uint64_t stack, int64_t map, st_cpu_map *out)
{
    const set_part *p = NULL;
    int rc = set_cpu_part(r, stack, &p);
    return rc ? rc : st_reader_cpu_map(p->r, stack & 0xffffffffu, map, out);
}

static int set_cpu_frame_lines(st_reader *r, uint64_t stack, uint64_t addr, const st_cpu_line **lines, uint32_t *n)
{
    const set_part *p = NULL;
    int rc = set_cpu_part(r, stack, &p);
    return rc ? rc : st_reader_cpu_frame_lines(p->r, stack & 0xffffffffu, addr, lines, n);
}

/* cpu_blocks: the thread's rank's rows, times mapped. cpu_windows: rank by
 * rank, times mapped, a registered thread's id the set's. */
static int set_cpu_block_open(st_cpu_block_iter *it, st_reader *r, uint32_t thread)
{
    if (thread >= r->n_threads) return ST_OK;
    it->part = &r->parts[r->thread_part[thread]];
    return st_cpu_block_iter_open(&it->sub, it->part->r, r->thread_local[thread], set_unmap(it->part, it->t0, 1),
                                  set_unmap(it->part, it->t1, 0));
}

static int set_cpu_block_next(st_cpu_block_iter *it, st_cpu_block_row *out)
{
    if (!it->sub) return 0;
    int rc;
    while ((rc = st_cpu_block_iter_next(it->sub, out)) == 1) {
        if ((rc = set_map(it->part, out->t_ns, &out->t_ns)) || (rc = set_map(it->part, out->seen_ns, &out->seen_ns)))
            return rc;
        if (out->t_ns < it->t0 || out->t_ns >= it->t1) continue;
        out->thread = it->thread;
        return 1;
    }
    return rc;
}

static void set_cpu_block_close(st_cpu_block_iter *it) { st_cpu_block_iter_close(it->sub); }

static int set_cpu_window_open(st_cpu_window_iter *it, st_reader *r)
{
    it->part = 0;
    return r->n_parts ? st_cpu_window_iter_open(&it->sub, r->parts[0].r) : ST_OK;
}

static int set_cpu_window_next(st_cpu_window_iter *it, st_cpu_window_row *out)
{
    st_reader *r = it->r;
    while (it->sub) {
        int rc = st_cpu_window_iter_next(it->sub, out);
        if (rc < 0) return rc;
        if (rc == 0) {
            st_cpu_window_iter_close(it->sub);
            it->sub = NULL;
            if (++it->part < r->n_parts && (rc = st_cpu_window_iter_open(&it->sub, r->parts[it->part].r))) return rc;
            continue;
        }
        const set_part *p = &r->parts[it->part];
        if ((rc = set_map(p, out->t0_ns, &out->t0_ns)) || (rc = set_map(p, out->t1_ns, &out->t1_ns))) return rc;
        if (out->thread >= 0) {
            const st_thread_info *th = st_rd_thread_by_id(p->r, (uint32_t)out->thread); /* checked by the rank's reader */
            out->thread = th ? (int64_t)p->thread_of[th - p->r->threads] : -1;
        }
        out->part = it->part;
        out->rank = p->rank;
        return 1;
    }
    return 0;
}

static void set_cpu_window_close(st_cpu_window_iter *it) { st_cpu_window_iter_close(it->sub); }

/* ---- the rank set's methods (a file's: reader.c) ---- */

static const char *set_meta(const st_reader *r, const char *key) { return st_reader_meta(r->parts[0].r, key); }

static const st_reader_methods set_methods = {
    .close = set_close,
    .meta = set_meta,
    .chunk_totals = set_chunk_totals,
    .range_chunks_per_thread = set_chunks_per_thread,
    .unended = set_unended,
    .range_open = set_range_open,
    .range_fill = set_range_fill,
    .range_close = set_range_close,
    .event_open = set_event_open,
    .event_next = set_event_next,
    .event_close = set_event_close,
    .sample_open = set_sample_open,
    .sample_next = set_sample_next,
    .sample_close = set_sample_close,
    .has_flows = set_has_flows,
    .flow_open = set_flow_open,
    .flow_next = set_flow_next,
    .flow_close = set_flow_close,
    .flow_pos = set_flow_pos,
    .has_gpu = set_gpu_has,
    .gpu_open = set_gpu_open,
    .gpu_next = set_gpu_next,
    .gpu_close = set_gpu_close,
    .gpu_pos = set_gpu_pos,
    .gpu_records_per_device = set_gpu_records_per_device,
    .gpu_devices = set_gpu_devices,
    .gpu_span = set_gpu_span,
    .gpu_headers = set_gpu_headers,
    .has_cpu = set_has_cpu,
    .cpu_thread = set_cpu_thread,
    .cpu_open = set_cpu_open,
    .cpu_next = set_cpu_next,
    .cpu_close = set_cpu_close,
    .cpu_stack = set_cpu_stack,
    .cpu_frame_name = set_cpu_frame_name,
    .cpu_map = set_cpu_map,
    .cpu_frame_lines = set_cpu_frame_lines,
    .cpu_block_open = set_cpu_block_open,
    .cpu_block_next = set_cpu_block_next,
    .cpu_block_close = set_cpu_block_close,
    .cpu_window_open = set_cpu_window_open,
    .cpu_window_next = set_cpu_window_next,
    .cpu_window_close = set_cpu_window_close,
};
