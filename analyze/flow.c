/* flow.c: items followed through the pipeline (flow.h). The rules, which
 * docs/analyze.md ("flow") states for users:
 *  - a handoff is an id with exactly one out and one in, the in not before
 *    the out; an id with more than one out or in (repeated), with only an out
 *    (in flight at the end, or lost), with only an in, or with its in before
 *    its out pairs nothing, and is only counted;
 *  - on a thread, a handoff's in is continued by the thread's next flow
 *    record when that is an out: a valid out makes it the item's next
 *    handoff; an out that does not pair leaves the item in flight;
 *  - an item is a chain of handoffs, from one whose out continues no in.
 */
#include <stdlib.h>
#include <string.h>

#include "flow.h"

static int cmp_by_id(const void *pa, const void *pb)
{
    const an_flow_rec *const *a = pa, *const *b = pb;
    if ((*a)->id != (*b)->id) return (*a)->id < (*b)->id ? -1 : 1;
    return *a < *b ? -1 : *a > *b;
}

static int oom(void)
{
    an_error("out of memory");
    return AN_EXIT_FAIL;
}

static int load_recs(an_flow *f)
{
    st_flow_iter *it;
    if (st_flow_iter_open(&it, f->trace->r, -1, INT64_MIN, INT64_MAX) != ST_OK) return an_trace_fail(f->trace);
    uint64_t cap = 0;
    st_flow_row row;
    int rc;
    while ((rc = st_flow_iter_next(it, &row)) == 1) {
        if (f->n_recs == cap) {
            cap = cap ? cap * 2 : 1024;
            an_flow_rec *a = realloc(f->recs, cap * sizeof *a);
            if (!a) {
                st_flow_iter_close(it);
                return oom();
            }
            f->recs = a;
        }
        const st_thread_info *th = st_reader_thread_by_id(f->trace->r, row.thread);
        uint32_t index = (uint32_t)(th - st_reader_thread(f->trace->r, 0));
        f->recs[f->n_recs++] = (an_flow_rec){row.ts_ns, row.id, index, row.dir, -1};
    }
    st_flow_iter_close(it);
    if (rc < 0) return an_trace_fail(f->trace);
    /* the iterator gives threads by id; the reader's index follows id order too */
    for (uint64_t i = 0; i < f->n_recs; i++) f->thread_recs[f->recs[i].thread + 1]++;
    for (uint32_t i = 0; i < f->n_threads; i++) f->thread_recs[i + 1] += f->thread_recs[i];
    return AN_EXIT_OK;
}

static int load_ranges(an_flow *f)
{
    uint64_t cap = 0, n = 0;
    for (uint32_t i = 0; i < f->n_threads; i++) {
        f->thread_ranges[i] = n;
        st_range_iter *it;
        if (st_range_iter_open(&it, f->trace->r, st_reader_thread(f->trace->r, i)->id, INT64_MIN, INT64_MAX) != ST_OK)
            return an_trace_fail(f->trace);
        st_range r;
        int rc;
        while ((rc = st_range_iter_next(it, &r)) == 1) {
            if (r.depth != 0) continue;
            if (n == cap) {
                cap = cap ? cap * 2 : 4096;
                an_flow_range *a = realloc(f->ranges, cap * sizeof *a);
                if (!a) {
                    st_range_iter_close(it);
                    return oom();
                }
                f->ranges = a;
            }
            /* depth-0 ranges end in start order: they do not overlap */
            f->ranges[n++] = (an_flow_range){r.start_ns, r.start_ns + r.dur_ns, r.stage};
        }
        st_range_iter_close(it);
        if (rc < 0) return an_trace_fail(f->trace);
    }
    f->thread_ranges[f->n_threads] = n;
    return AN_EXIT_OK;
}

/* In a rank set, an in on another rank than its out may map before it by
 * as much as the two ranks' clock uncertainties together and still pair:
 * it is then taken at its out's time (residence 0). 0 in a file. */
static int64_t set_flow_slack(const an_flow *f, uint32_t out_thread, uint32_t in_thread)
{
    st_reader *r = f->trace->r;
    return st_reader_flow_slack(r, st_reader_thread(r, out_thread)->id, st_reader_thread(r, in_thread)->id);
}

static int pair(an_flow *f)
{
    if (!f->n_recs) return AN_EXIT_OK;
    an_flow_rec **by_id = malloc(f->n_recs * sizeof *by_id);
    f->handoffs = malloc(f->n_recs / 2 * sizeof *f->handoffs + sizeof *f->handoffs);
    if (!by_id || !f->handoffs) {
        free(by_id);
        return oom();
    }
    for (uint64_t i = 0; i < f->n_recs; i++) by_id[i] = &f->recs[i];
    qsort(by_id, f->n_recs, sizeof *by_id, cmp_by_id);
    for (uint64_t i = 0; i < f->n_recs;) {
        uint64_t j = i, outs = 0, ins = 0;
        an_flow_rec *out = NULL, *in = NULL;
        for (; j < f->n_recs && by_id[j]->id == by_id[i]->id; j++) {
            if (by_id[j]->dir == ST_FLOW_OUT) outs++, out = by_id[j];
            else ins++, in = by_id[j];
        }
        f->n_ids++;
        if (outs > 1 || ins > 1) f->repeated++;
        else if (!ins) f->out_only++;
        else if (!outs) f->in_only++;
        else if (in->ts_ns < out->ts_ns &&
                 out->ts_ns - in->ts_ns > set_flow_slack(f, out->thread, in->thread))
            f->in_before_out++;
        else {
            if (in->ts_ns < out->ts_ns) in->ts_ns = out->ts_ns; /* within the clocks' uncertainty */
            int64_t h = (int64_t)f->n_handoffs++;
            f->handoffs[h] = (an_handoff){(uint64_t)(out - f->recs), (uint64_t)(in - f->recs), -1, -1, 0};
            out->handoff = in->handoff = h;
        }
        i = j;
    }
    free(by_id);
    return AN_EXIT_OK;
}

static int chain(an_flow *f)
{
    for (uint32_t t = 0; t < f->n_threads; t++) {
        int64_t pending = -1; /* the handoff whose in this thread holds */
        for (uint64_t i = f->thread_recs[t]; i < f->thread_recs[t + 1]; i++) {
            const an_flow_rec *r = &f->recs[i];
            if (r->dir == ST_FLOW_IN) {
                pending = r->handoff;
                continue;
            }
            if (pending >= 0) {
                if (r->handoff >= 0) {
                    f->handoffs[pending].next = r->handoff;
                    f->handoffs[r->handoff].prev = pending;
                } else {
                    f->handoffs[pending].continued_unpaired = 1;
                }
            }
            pending = -1;
        }
    }
    for (uint64_t h = 0; h < f->n_handoffs; h++) f->thread_sends[f->recs[f->handoffs[h].out_rec].thread] = 1;
    f->item_first = malloc((f->n_handoffs + 1) * sizeof *f->item_first);
    if (!f->item_first) return oom();
    /* items in the order of their first out: by time, then by thread */
    for (uint64_t h = 0; h < f->n_handoffs; h++)
        if (f->handoffs[h].prev < 0) f->item_first[f->n_items++] = (int64_t)h;
    return AN_EXIT_OK;
}

static const an_flow *sort_flow;
static int cmp_item(const void *pa, const void *pb)
{
    const an_flow_rec *a = &sort_flow->recs[sort_flow->handoffs[*(const int64_t *)pa].out_rec];
    const an_flow_rec *b = &sort_flow->recs[sort_flow->handoffs[*(const int64_t *)pb].out_rec];
    if (a->ts_ns != b->ts_ns) return a->ts_ns < b->ts_ns ? -1 : 1;
    if (a->thread != b->thread) return a->thread < b->thread ? -1 : 1;
    return a < b ? -1 : a > b;
}

int an_flow_load(an_flow *f, an_trace *t)
{
    memset(f, 0, sizeof *f);
    f->trace = t;
    f->n_threads = st_reader_n_threads(t->r);
    f->thread_recs = calloc((size_t)f->n_threads + 1, sizeof *f->thread_recs);
    f->thread_ranges = calloc((size_t)f->n_threads + 1, sizeof *f->thread_ranges);
    f->thread_sends = calloc((size_t)f->n_threads + 1, 1);
    if (!f->thread_recs || !f->thread_ranges || !f->thread_sends) return oom();
    int rc = load_recs(f);
    if (!rc) rc = load_ranges(f);
    if (!rc) rc = pair(f);
    if (!rc) rc = chain(f);
    if (!rc && f->n_items > 1) {
        sort_flow = f;
        qsort(f->item_first, f->n_items, sizeof *f->item_first, cmp_item);
    }
    return rc;
}

void an_flow_free(an_flow *f)
{
    free(f->recs);
    free(f->thread_recs);
    free(f->handoffs);
    free(f->item_first);
    free(f->ranges);
    free(f->thread_ranges);
    free(f->thread_sends);
    memset(f, 0, sizeof *f);
}

int64_t an_flow_item_last(const an_flow *f, uint64_t item, uint32_t *n_hops, int *in_flight)
{
    int64_t h = f->item_first[item];
    uint32_t n = 1;
    while (f->handoffs[h].next >= 0) {
        h = f->handoffs[h].next;
        n++;
    }
    if (n_hops) *n_hops = n;
    if (in_flight)
        *in_flight = f->handoffs[h].continued_unpaired || f->thread_sends[f->recs[f->handoffs[h].in_rec].thread];
    return h;
}

/* ---- critical path ---- */

/* The last depth-0 range of thread t that starts before ts; -1 none. */
static int64_t range_before(const an_flow *f, uint32_t t, int64_t ts)
{
    uint64_t lo = f->thread_ranges[t], hi = f->thread_ranges[t + 1];
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (f->ranges[mid].start_ns < ts) lo = mid + 1;
        else hi = mid;
    }
    return lo == f->thread_ranges[t] ? -1 : (int64_t)lo - 1;
}

/* The first flow record of thread t at or after ts; -1 none. */
static int64_t rec_from(const an_flow *f, uint32_t t, int64_t ts)
{
    uint64_t lo = f->thread_recs[t], hi = f->thread_recs[t + 1];
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (f->recs[mid].ts_ns < ts) lo = mid + 1;
        else hi = mid;
    }
    return lo == f->thread_recs[t + 1] ? -1 : (int64_t)lo;
}

typedef struct seg_list {
    an_path_seg *a;
    uint64_t n, cap;
} seg_list;

static int add_seg(seg_list *l, uint32_t thread, int64_t stage, int64_t start, int64_t end)
{
    if (end <= start) return 0;
    if (l->n && l->a[l->n - 1].thread == thread && l->a[l->n - 1].stage == stage && l->a[l->n - 1].start_ns == end) {
        l->a[l->n - 1].start_ns = start;
        return 0;
    }
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 16;
        an_path_seg *a = realloc(l->a, l->cap * sizeof *a);
        if (!a) return -1;
        l->a = a;
    }
    l->a[l->n++] = (an_path_seg){thread, stage, start, end};
    return 0;
}

/* The thread the walk starts on: of the threads that receive items and send
 * none on (sinks), else of every thread, the one whose last depth-0 range
 * ending in (lo, hi] ends last (the first such thread on ties); -1 none. */
static int64_t start_thread(const an_flow *f, int64_t lo, int64_t hi)
{
    for (int pass = 0; pass < 2; pass++) {
        int64_t best = -1, best_end = INT64_MIN;
        for (uint32_t t = 0; t < f->n_threads; t++) {
            if (pass == 0) {
                int ins = 0;
                for (uint64_t i = f->thread_recs[t]; i < f->thread_recs[t + 1]; i++)
                    if (f->recs[i].handoff >= 0 && f->recs[i].dir == ST_FLOW_IN) ins = 1;
                if (!ins || f->thread_sends[t]) continue;
            }
            int64_t r = range_before(f, t, hi);
            while (r >= (int64_t)f->thread_ranges[t] && f->ranges[r].end_ns > hi) r--;
            if (r < (int64_t)f->thread_ranges[t] || f->ranges[r].end_ns <= lo) continue;
            if (f->ranges[r].end_ns > best_end) {
                best_end = f->ranges[r].end_ns;
                best = t;
            }
        }
        if (best >= 0) return best;
    }
    return -1;
}

int an_flow_critical_path(const an_flow *f, uint32_t mark, an_path_seg **segs, uint64_t *n)
{
    *segs = NULL;
    *n = 0;
    const st_reader *rd = f->trace->r;
    if (mark < 1 || mark >= st_reader_n_steps(rd)) return AN_EXIT_OK;
    int64_t lo = st_reader_step(rd, mark - 1)->ts_ns, t = st_reader_step(rd, mark)->ts_ns;
    int64_t th = start_thread(f, lo, t);
    if (th < 0) return AN_EXIT_OK;
    uint32_t p = (uint32_t)th;
    seg_list l = {0};
    int err = 0;
    while (!err && t > lo) {
        int64_t r = range_before(f, p, t);
        if (r < 0) {
            err = add_seg(&l, p, -1, lo, t);
            break;
        }
        const an_flow_range *g = &f->ranges[r];
        if (g->end_ns < t) {
            err = add_seg(&l, p, -1, g->end_ns > lo ? g->end_ns : lo, t);
            t = g->end_ns;
            continue;
        }
        const st_stage_info *si = st_reader_stage(rd, g->stage);
        if (si && si->kind == ST_WAIT_INPUT) {
            /* the item it waited for: the thread's first in from the wait's start,
             * before its next depth-0 range begins */
            int64_t next_start = (uint64_t)r + 1 < f->thread_ranges[p + 1] ? f->ranges[r + 1].start_ns : INT64_MAX;
            int64_t i = rec_from(f, p, g->start_ns);
            while (i >= 0 && (uint64_t)i < f->thread_recs[p + 1] && f->recs[i].dir != ST_FLOW_IN) i++;
            if (i >= 0 && (uint64_t)i < f->thread_recs[p + 1] && f->recs[i].ts_ns <= next_start &&
                f->recs[i].handoff >= 0) {
                const an_flow_rec *out = &f->recs[f->handoffs[f->recs[i].handoff].out_rec];
                if (out->ts_ns > g->start_ns && out->ts_ns < t) {
                    err = add_seg(&l, p, g->stage, out->ts_ns > lo ? out->ts_ns : lo, t);
                    t = out->ts_ns;
                    p = out->thread;
                    continue;
                }
            }
        }
        err = add_seg(&l, p, g->stage, g->start_ns > lo ? g->start_ns : lo, t);
        t = g->start_ns;
    }
    if (err) {
        free(l.a);
        return oom();
    }
    *segs = l.a;
    *n = l.n;
    return AN_EXIT_OK;
}
