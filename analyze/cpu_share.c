/* cpu_share.c: on/off-CPU splits of the time other commands already count
 * (cpu_share.h): summary's ranges (inclusive time) and diff's self time per
 * step bin. Per thread: its switch records read once into off-CPU intervals
 * (st_cpu_off_intervals), the time to split collected as st_cpu_range
 * pieces, and one st_cpu_account over them all.
 */
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "cpu_share.h"


static int oom(void)
{
    an_error("out of memory");
    return AN_EXIT_FAIL;
}

int an_cpu_thread_known(st_reader *r, uint32_t thread_index, st_cpu_thread_info *info)
{
    int has = st_reader_cpu_thread(r, st_reader_thread(r, thread_index)->id, info);
    if (has <= 0) return has;
    return an_cpu_status_has_switches(info);
}

/* The thread's off-CPU intervals (malloc'd into *off). 0, or an exit code. */
static int read_off(an_trace *t, uint32_t id, const st_cpu_thread_info *info, int64_t now_ns, st_cpu_off **off,
                    size_t *n_off)
{
    an_vec sw = {0};
    st_cpu_iter *it;
    *off = NULL;
    *n_off = 0;
    if (st_cpu_iter_open(&it, t->r, id, INT64_MIN, INT64_MAX)) return an_trace_fail(t);
    st_cpu_row row;
    int n, rc = 0;
    while ((n = st_cpu_iter_next(it, &row)) == 1) {
        if (row.kind != ST_CPU_ROW_IN && row.kind != ST_CPU_ROW_OUT_BLOCKED && row.kind != ST_CPU_ROW_OUT_PREEMPTED)
            continue;
        st_cpu_switch *s = an_vec_push(&sw, sizeof *s);
        if (!s) {
            rc = -1;
            break;
        }
        *s = (st_cpu_switch){row.ts_ns, row.kind != ST_CPU_ROW_IN, row.kind == ST_CPU_ROW_OUT_PREEMPTED};
    }
    st_cpu_iter_close(it);
    if (!rc && n < 0) rc = an_trace_fail(t);
    else if (!rc && !(*off = malloc((sw.n + 1) * sizeof **off))) rc = -1;
    if (!rc) *n_off = st_cpu_off_intervals(sw.v, sw.n, info->start_ns, now_ns, *off);
    free(sw.v);
    return rc < 0 ? oom() : rc;
}

/* Splits pieces[0..n) and returns the splits (malloc'd), NULL on no memory. */
static st_cpu_share *account(const st_cpu_off *off, size_t n_off, const an_vec *pieces)
{
    st_cpu_share *share = malloc((pieces->n ? pieces->n : 1) * sizeof *share);
    if (share) st_cpu_account(off, n_off, pieces->v, pieces->n, share);
    return share;
}

/* Adds [a, b) clipped to [lo, hi) as a piece of column col. */
static int add_piece(an_vec *pieces, an_vec *cols, int64_t a, int64_t b, int64_t lo, int64_t hi, uint32_t col)
{
    if (a < lo) a = lo;
    if (b > hi) b = hi;
    if (b <= a) return 0;
    st_cpu_range *p = an_vec_push(pieces, sizeof *p);
    uint32_t *c = an_vec_push(cols, sizeof *c);
    if (!p || !c) return -1;
    *p = (st_cpu_range){a, b};
    *c = col;
    return 0;
}

int an_cpu_range_shares(an_trace *t, int64_t t0, int64_t t1, const uint8_t *thread_on, uint8_t *known,
                        an_cpu_split *split)
{
    st_reader *r = t->r;
    uint32_t nt = st_reader_n_threads(r), ns = st_reader_n_stages(r);
    memset(known, 0, nt);
    memset(split, 0, (size_t)nt * ns * sizeof *split);
    an_vec pieces = {0}, cols = {0};
    int rc = 0;
    for (uint32_t i = 0; i < nt && !rc; i++) {
        if (thread_on && !thread_on[i]) continue;
        st_cpu_thread_info info;
        int k = an_cpu_thread_known(r, i, &info);
        if (k < 0) {
            rc = an_trace_fail(t);
            break;
        }
        if (!k) continue;
        known[i] = 1;
        uint32_t id = st_reader_thread(r, i)->id;
        /* time before the capture started is in no part */
        int64_t lo = t0 > info.start_ns ? t0 : info.start_ns;
        pieces.n = cols.n = 0;
        st_range_iter *it;
        if (st_range_iter_open(&it, r, id, t0, t1)) {
            rc = an_trace_fail(t);
            break;
        }
        st_range g;
        while ((k = st_range_iter_next(it, &g)) == 1)
            if (g.stage < ns && add_piece(&pieces, &cols, g.start_ns, g.start_ns + g.dur_ns, lo, t1, g.stage)) {
                k = -2;
                break;
            }
        st_range_iter_close(it);
        if (k == -2) {
            rc = oom();
            break;
        }
        if (k < 0) {
            rc = an_trace_fail(t);
            break;
        }
        st_open_range open[ST_MAX_DEPTH];
        int n_open = st_reader_unended(r, id, open);
        if (n_open < 0) {
            rc = an_trace_fail(t);
            break;
        }
        for (int j = 0; j < n_open && !rc; j++)
            if (open[j].stage < ns && add_piece(&pieces, &cols, open[j].start_ns, t1, lo, t1, open[j].stage)) rc = oom();
        st_cpu_off *off = NULL;
        size_t n_off = 0;
        if (!rc) rc = read_off(t, id, &info, t1, &off, &n_off);
        st_cpu_share *share = rc ? NULL : account(off, n_off, &pieces);
        if (!rc && !share) rc = oom();
        for (size_t p = 0; !rc && p < pieces.n; p++) {
            an_cpu_split *s = &split[(size_t)i * ns + ((uint32_t *)cols.v)[p]];
            s->on_ns += share[p].on_ns;
            s->preempted_ns += share[p].preempted_ns;
            s->blocked_ns += share[p].blocked_ns;
        }
        free(off);
        free(share);
    }
    free(pieces.v);
    free(cols.v);
    return rc;
}

int an_cpu_bin_on(an_trace *t, const int64_t *bin_t, uint32_t n_bins, const uint32_t *thread_role, uint32_t n_roles,
                  int64_t *on_ns, uint32_t *role_known)
{
    st_reader *r = t->r;
    uint32_t nt = st_reader_n_threads(r), ns = st_reader_n_stages(r), n_cols = ns + 1;
    memset(role_known, 0, n_roles * sizeof *role_known);
    if (!n_bins) return 0;
    int64_t end = bin_t[n_bins];
    an_vec pieces = {0}, cols = {0}, bins = {0};
    int rc = 0;
    for (uint32_t i = 0; i < nt && !rc; i++) {
        if (thread_role[i] >= n_roles) continue;
        st_cpu_thread_info info;
        int k = an_cpu_thread_known(r, i, &info);
        if (k < 0) {
            rc = an_trace_fail(t);
            break;
        }
        if (!k) continue;
        role_known[thread_role[i]]++;
        uint32_t id = st_reader_thread(r, i)->id;
        int64_t lo = bin_t[0] > info.start_ns ? bin_t[0] : info.start_ns;
        pieces.n = cols.n = bins.n = 0;
        st_event_iter *ei;
        if (st_event_iter_open(&ei, r, id)) {
            rc = an_trace_fail(t);
            break;
        }
        /* the self-time pieces, between consecutive events, cut at the bin edges */
        uint32_t stack[ST_MAX_DEPTH], depth = 0, b = 0;
        int64_t at = INT64_MIN;
        uint32_t cur = ns;
        st_event e;
        for (;;) {
            int n = st_event_iter_next(ei, &e);
            if (n < 0) {
                rc = an_trace_fail(t);
                break;
            }
            int64_t stop = n == 1 && e.ts_ns < end ? e.ts_ns : end;
            int64_t a = at > lo ? at : lo;
            while (b < n_bins && bin_t[b + 1] <= a) b++;
            while (a < stop && b < n_bins) {
                int64_t cut = bin_t[b + 1] < stop ? bin_t[b + 1] : stop;
                uint32_t *pb = an_vec_push(&bins, sizeof *pb);
                if (!pb || add_piece(&pieces, &cols, a, cut, lo, end, cur)) {
                    rc = oom();
                    break;
                }
                if (cols.n < bins.n) bins.n--; /* clipped away: no piece */
                else *pb = b;
                a = cut;
                if (a >= bin_t[b + 1]) b++;
            }
            if (rc || n == 0 || e.ts_ns >= end) break;
            if (e.depth < ST_MAX_DEPTH) {
                if (!e.is_end) {
                    stack[e.depth] = e.stage;
                    depth = e.depth + 1;
                } else {
                    depth = e.depth;
                }
            }
            at = e.ts_ns;
            cur = depth && stack[depth - 1] < ns ? stack[depth - 1] : ns;
        }
        st_event_iter_close(ei);
        st_cpu_off *off = NULL;
        size_t n_off = 0;
        if (!rc) rc = read_off(t, id, &info, end, &off, &n_off);
        st_cpu_share *share = rc ? NULL : account(off, n_off, &pieces);
        if (!rc && !share) rc = oom();
        for (size_t p = 0; !rc && p < pieces.n; p++) {
            uint32_t bin = ((uint32_t *)bins.v)[p], col = ((uint32_t *)cols.v)[p];
            on_ns[((size_t)bin * n_roles + thread_role[i]) * n_cols + col] += share[p].on_ns;
        }
        free(off);
        free(share);
    }
    free(pieces.v);
    free(cols.v);
    free(bins.v);
    return rc;
}
