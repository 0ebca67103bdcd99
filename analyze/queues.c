/* queues.c: counter samples merged across threads in time order, and the
 * model's queue-depth statistics built on them (model.h, queues.h).
 *
 * A counter named like *queue_depth* is read once, every thread's samples
 * merged by time; its value holds from one sample to the next, so its
 * statistics are time-weighted (mean, min, max, time at max and at zero) over
 * the model's period and per bin. Memory: one sample iterator per thread.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "queues.h"

static int queue_oom(void)
{
    an_error("out of memory");
    return AN_EXIT_FAIL;
}

typedef struct merge_head {
    st_sample_iter *it;
    st_sample_row row;
    int has;
} merge_head;

struct an_counter_merge {
    uint32_t counter, n;
    merge_head *heads;
};

static int head_advance(an_counter_merge *m, merge_head *h)
{
    int rc;
    while ((rc = st_sample_iter_next(h->it, &h->row)) == 1)
        if (h->row.counter == m->counter) break;
    h->has = rc == 1;
    return rc < 0 ? rc : 0;
}

int an_counter_merge_open(an_counter_merge **out, an_trace *t, uint32_t counter)
{
    *out = NULL;
    an_counter_merge *m = calloc(1, sizeof *m);
    uint32_t n = st_reader_n_threads(t->r);
    if (!m || !(m->heads = calloc(n ? n : 1, sizeof *m->heads))) {
        free(m);
        return ST_ENOMEM;
    }
    m->counter = counter;
    m->n = n;
    int rc = 0;
    for (uint32_t i = 0; i < n && !rc; i++) {
        rc = st_sample_iter_open(&m->heads[i].it, t->r, st_reader_thread(t->r, i)->id, INT64_MIN, INT64_MAX);
        if (!rc) rc = head_advance(m, &m->heads[i]);
    }
    if (rc) {
        an_counter_merge_close(m);
        return rc;
    }
    *out = m;
    return 0;
}

int an_counter_merge_next(an_counter_merge *m, int64_t *ts, double *value)
{
    merge_head *best = NULL;
    for (uint32_t i = 0; i < m->n; i++)
        if (m->heads[i].has && (!best || m->heads[i].row.ts_ns < best->row.ts_ns)) best = &m->heads[i];
    if (!best) return 0;
    *ts = best->row.ts_ns;
    *value = best->row.value;
    int rc = head_advance(m, best);
    return rc < 0 ? rc : 1;
}

void an_counter_merge_close(an_counter_merge *m)
{
    if (!m) return;
    for (uint32_t i = 0; i < m->n; i++) st_sample_iter_close(m->heads[i].it);
    free(m->heads);
    free(m);
}

typedef struct qacc {
    double *bin_sum;
    int64_t *bin_cov;
} qacc;

/* Value v held over [a, b): into the statistics, split per bin. */
static void queue_hold(an_pipe *p, an_pipe_queue *q, qacc *acc, int64_t a, int64_t b, double v)
{
    if (a < p->bin_t[0]) a = p->bin_t[0];
    if (b > p->bin_t[p->n_bins]) b = p->bin_t[p->n_bins];
    if (b <= a) return;
    int64_t bin = an_pipe_bin_of(p, a);
    while (a < b && bin >= 0 && bin < p->n_bins) {
        int64_t end = b < p->bin_t[bin + 1] ? b : p->bin_t[bin + 1];
        int64_t d = end - a;
        if (d > 0) {
            acc->bin_sum[bin] += v * (double)d;
            acc->bin_cov[bin] += d;
            if (isnan(q->bin_max[bin]) || v > q->bin_max[bin]) q->bin_max[bin] = v;
            if (q->covered_ns == 0 || v > q->max) {
                q->max = v;
                q->at_max_ns = 0;
            }
            if (q->covered_ns == 0 || v < q->min) q->min = v;
            if (v == q->max) q->at_max_ns += d;
            if (v == 0) q->at_zero_ns += d;
            q->covered_ns += d;
        }
        a = end;
        bin++;
    }
}

static int read_queue(an_pipe *p, an_pipe_queue *q)
{
    qacc acc;
    acc.bin_sum = calloc(p->n_bins, sizeof *acc.bin_sum);
    acc.bin_cov = calloc(p->n_bins, sizeof *acc.bin_cov);
    q->bin_mean = malloc(p->n_bins * sizeof *q->bin_mean);
    q->bin_max = malloc(p->n_bins * sizeof *q->bin_max);
    if (!acc.bin_sum || !acc.bin_cov || !q->bin_mean || !q->bin_max) {
        free(acc.bin_sum);
        free(acc.bin_cov);
        return queue_oom();
    }
    for (uint32_t b = 0; b < p->n_bins; b++) q->bin_max[b] = q->bin_mean[b] = NAN;
    q->mean = q->min = q->max = NAN;
    an_counter_merge *m;
    int rc = an_counter_merge_open(&m, p->trace, q->counter);
    int64_t cur_t = 0, ts;
    double cur_v = 0, v;
    int have = 0;
    while (!rc && (rc = an_counter_merge_next(m, &ts, &v)) == 1) {
        rc = 0;
        if (have) queue_hold(p, q, &acc, cur_t, ts, cur_v);
        if (ts >= p->bin_t[0] && ts < p->bin_t[p->n_bins]) q->n_samples++;
        have = isfinite(v);
        cur_t = ts;
        cur_v = v;
    }
    an_counter_merge_close(m);
    if (rc < 0) {
        free(acc.bin_sum);
        free(acc.bin_cov);
        return an_trace_fail(p->trace);
    }
    if (have) queue_hold(p, q, &acc, cur_t, p->bin_t[p->n_bins], cur_v);
    double sum = 0;
    for (uint32_t b = 0; b < p->n_bins; b++) {
        if (acc.bin_cov[b]) q->bin_mean[b] = acc.bin_sum[b] / (double)acc.bin_cov[b];
        sum += acc.bin_sum[b];
    }
    if (q->covered_ns) q->mean = sum / (double)q->covered_ns;
    free(acc.bin_sum);
    free(acc.bin_cov);
    return AN_EXIT_OK;
}

int an_pipe_read_queues(an_pipe *p)
{
    st_reader *r = p->trace->r;
    uint32_t nc = st_reader_n_counters(r);
    p->queues = calloc(nc ? nc : 1, sizeof *p->queues);
    if (!p->queues) return queue_oom();
    for (uint32_t c = 0; c < nc; c++) {
        const st_counter_info *ci = st_reader_counter(r, c);
        if (!strstr(ci->name, "queue_depth")) continue;
        an_pipe_queue *q = &p->queues[p->n_queues++];
        q->counter = ci->id;
        q->name = ci->name;
        q->unit = ci->unit;
        int rc = read_queue(p, q);
        if (rc) return rc;
    }
    return AN_EXIT_OK;
}

