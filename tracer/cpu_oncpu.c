/* cpu_oncpu.c: the on-CPU shares of the online profile lines (st_cpurec.h,
 * "on-CPU per profile window"). Each schedstat read that the writer stores
 * at a step mark (cpu_windows rows of that step) is queued here with the
 * registered threads' on-CPU times; the interval aggregator, which emits a
 * window up to ST_AGG_GRACE_NS after its closing mark, asks for the read of
 * that mark's step (st_agg_set_oncpu). The match is the one `analyze
 * intervals` makes from the trace (docs/analyze.md, "intervals"): the first
 * stored read whose step is the window's last step; a thread of the window
 * with no row in it had no CPU time there (0); a read that stored no row at
 * all, like one that never happened, gives the window no shares. Reads
 * older than the window asked for are dropped, so the queue holds only the
 * reads of windows still on their way. Runs on the writer thread only.
 */
#include <stdlib.h>
#include <string.h>

#include "st_cpurec.h"

#define ONCPU_MAX_READS 4096 /* reads queued at most: the oldest go first (no aggregator asks) */

typedef struct oncpu_read {
    int64_t step, span_ns;
    uint32_t n_rows;   /* rows stored, registered threads or not */
    uint32_t n, cap;   /* registered threads' entries */
    int64_t *thread, *oncpu_ns;
} oncpu_read;

struct st_oncpu_queue {
    oncpu_read *reads;
    size_t head, n, cap; /* reads[head .. head + n) */
    oncpu_read *open;    /* the read being filled (st_oncpu_begin .. st_oncpu_end) */
};

st_oncpu_queue *st_oncpu_create(void) { return calloc(1, sizeof(st_oncpu_queue)); }

static void read_free(oncpu_read *x)
{
    free(x->thread);
    free(x->oncpu_ns);
    memset(x, 0, sizeof *x);
}

static void pop_front(st_oncpu_queue *q)
{
    read_free(&q->reads[q->head]);
    q->head++;
    q->n--;
    if (!q->n) q->head = 0;
}

void st_oncpu_free(st_oncpu_queue *q)
{
    if (!q) return;
    while (q->n) pop_front(q);
    free(q->reads);
    free(q);
}

void st_oncpu_begin(st_oncpu_queue *q, int64_t step, int64_t span_ns)
{
    if (!q) return;
    q->open = NULL;
    if (step < 0) return;
    if (q->n == ONCPU_MAX_READS) pop_front(q);
    if (q->head + q->n == q->cap) {
        if (q->head) { /* slide down before growing */
            memmove(q->reads, q->reads + q->head, q->n * sizeof *q->reads);
            q->head = 0;
        } else {
            size_t cap = q->cap ? q->cap * 2 : 16;
            oncpu_read *v = realloc(q->reads, cap * sizeof *v);
            if (!v) return; /* no memory: this window goes out without shares */
            q->reads = v;
            q->cap = cap;
        }
    }
    q->open = &q->reads[q->head + q->n];
    memset(q->open, 0, sizeof *q->open);
    q->open->step = step;
    q->open->span_ns = span_ns;
}

void st_oncpu_row(st_oncpu_queue *q, int64_t thread, int64_t oncpu_ns)
{
    oncpu_read *x = q ? q->open : NULL;
    if (!x) return;
    x->n_rows++;
    if (thread < 0) return;
    if (x->n == x->cap) {
        uint32_t cap = x->cap ? x->cap * 2 : 8;
        int64_t *t = realloc(x->thread, cap * sizeof *t);
        if (t) x->thread = t;
        int64_t *o = t ? realloc(x->oncpu_ns, cap * sizeof *o) : NULL;
        if (o) x->oncpu_ns = o;
        if (!t || !o) { /* no memory: the read is dropped at st_oncpu_end */
            x->n_rows = 0;
            q->open = NULL;
            read_free(x);
            return;
        }
        x->cap = cap;
    }
    x->thread[x->n] = thread;
    x->oncpu_ns[x->n++] = oncpu_ns;
}

void st_oncpu_end(st_oncpu_queue *q)
{
    if (!q) return;
    oncpu_read *x = q->open;
    q->open = NULL;
    if (!x) return;
    if (x->n_rows == 0) { /* no cpu_windows row of this step: as if there were no read */
        read_free(x);
        return;
    }
    q->n++;
}

int st_oncpu_window(void *arg, const st_window *w, int64_t *oncpu_ns, int64_t *span_ns)
{
    st_oncpu_queue *q = arg;
    while (q->n && (q->reads[q->head].step < 0 || (uint64_t)q->reads[q->head].step < w->step_last)) pop_front(q);
    if (!q->n || (uint64_t)q->reads[q->head].step != w->step_last) return 0;
    const oncpu_read *x = &q->reads[q->head];
    for (uint32_t i = 0; i < w->n_threads; i++) {
        oncpu_ns[i] = 0;
        for (uint32_t k = 0; k < x->n; k++)
            if (x->thread[k] == (int64_t)w->threads[i].thread) {
                oncpu_ns[i] = x->oncpu_ns[k] < 0 ? -1 : x->oncpu_ns[k];
                break;
            }
    }
    *span_ns = x->span_ns;
    pop_front(q);
    return 1;
}
