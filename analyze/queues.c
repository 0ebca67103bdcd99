/* queues.c: a counter's samples, every thread's merged in time order
 * (queues.h): one sample iterator per thread, the earliest head next. The
 * model's queue-depth statistics (model.c) and `report`'s queue chart read
 * counters through it.
 */
#include <stdlib.h>

#include "queues.h"

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
