/* whatif.c: the trainer's pipeline rebuilt from a trace as a simulation
 * (whatif.h, sim.h); docs/analyze.md "whatif" states the model.
 *
 * Reading: each modelled thread's events are cut into items at the begin of
 * its loop's first stage (loader `load`, target `batch_wait`, post
 * `handoff_wait`, drafter `queue_wait`). Within an item, time in a wait
 * stage (wait_input, wait_output) is left out, time in `allreduce` (comm) is
 * the drafters' meeting, and every other moment, in a range or between
 * ranges, is the thread's own work. Threads that share processors (every
 * thread on the cpu backend, the threads of one GPU on the cuda backend) were
 * slowed whenever more of them worked than there are processors; each
 * moment's work is divided back by that slowdown, so the samples are the work
 * a thread would do alone, and the simulation shares the processors again in
 * whatever configuration it runs.
 */
#include "whatif.h"
#include "gpu_activity.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *const an_whatif_role_names[AN_WHATIF_N_ROLES] = {"loader", "target", "post", "drafter"};

static int whatif_oom(void)
{
    an_error("out of memory");
    return AN_EXIT_FAIL;
}

/* ---- the recorded configuration from meta argv ---------------------------------------- */

/* The value of --name in argv ("--name V" or "--name=V"), copied into buf; NULL if absent. */
static const char *argv_value(const char *argv, const char *name, char *buf, size_t size)
{
    const char *found = NULL;
    size_t nl = strlen(name);
    const char *p = argv;
    while (p && *p) {
        while (*p == ' ') p++;
        const char *e = p;
        while (*e && *e != ' ') e++;
        if ((size_t)(e - p) >= nl && strncmp(p, name, nl) == 0) {
            const char *v = NULL, *ve = NULL;
            if ((size_t)(e - p) == nl) {
                v = e;
                while (*v == ' ') v++;
                ve = v;
                while (*ve && *ve != ' ') ve++;
            } else if (p[nl] == '=') {
                v = p + nl + 1;
                ve = e;
            }
            if (v && (size_t)(ve - v) < size) {
                memcpy(buf, v, (size_t)(ve - v));
                buf[ve - v] = 0;
                found = buf; /* the last occurrence wins, as in the trainer */
            }
        }
        p = e;
    }
    return found;
}

/* ---- the scan ---------------------------------------------------------------------------- */

enum { SEG_WORK, SEG_POST, SEG_COMM };

typedef struct seg {
    int64_t a, b;
    uint32_t thread;  /* index among the modelled threads */
    int32_t item;     /* -1: before the first item */
    uint8_t cls;      /* SEG_* */
    uint8_t after;    /* drafter: after the item's all-reduce */
    double factor;    /* --stage factors of the stages open */
    double work;      /* filled by the sweep */
} seg;

typedef struct span {
    int64_t a, b;
} span;

typedef struct mthread {
    uint32_t reader_index;
    int role, device, pool;
    int64_t *item_start; /* begin of each item */
    uint32_t n_items;
} mthread;

typedef struct scan {
    an_trace *t;
    const an_whatif_opts *o;
    seg *segs;
    size_t n_segs, cap_segs;
    mthread th[AN_WHATIF_MAX_THREADS * AN_WHATIF_N_ROLES];
    uint32_t n_th;
    /* each queue's puts and pops: batch (loader, targets), hidden-state (targets or post threads, drafters) */
    span *puts[AN_WHATIF_N_QUEUES], *pops[AN_WHATIF_N_QUEUES];
    size_t n_puts[AN_WHATIF_N_QUEUES], n_pops[AN_WHATIF_N_QUEUES], cap_puts[AN_WHATIF_N_QUEUES],
        cap_pops[AN_WHATIF_N_QUEUES];
} scan;

static int push_span(span **arr, size_t *n, size_t *cap, int64_t a, int64_t b)
{
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 1024;
        span *x = realloc(*arr, c * sizeof *x);
        if (!x) return -1;
        *arr = x;
        *cap = c;
    }
    (*arr)[(*n)++] = (span){a, b};
    return 0;
}

static int push_seg(scan *s, const seg *g)
{
    if (g->b <= g->a) return 0;
    if (s->n_segs == s->cap_segs) {
        size_t cap = s->cap_segs ? s->cap_segs * 2 : 4096;
        seg *n = realloc(s->segs, cap * sizeof *n);
        if (!n) return -1;
        s->segs = n;
        s->cap_segs = cap;
    }
    s->segs[s->n_segs++] = *g;
    return 0;
}

static double stage_factor(const scan *s, uint32_t stage)
{
    for (uint32_t i = 0; i < s->o->n_scales; i++)
        if (s->o->scales[i].stage == stage) return s->o->scales[i].factor;
    return 1.0;
}

static const char *const loop_stage[AN_WHATIF_N_ROLES] = {"load", "batch_wait", "handoff_wait", "queue_wait"};

static int scan_thread(scan *s, uint32_t ti)
{
    st_reader *r = s->t->r;
    mthread *m = &s->th[ti];
    const st_thread_info *info = st_reader_thread(r, m->reader_index);
    st_event_iter *it = NULL;
    if (st_event_iter_open(&it, r, info->id)) return an_trace_fail(s->t);
    uint32_t stack[ST_MAX_DEPTH + 1], depth = 0;
    int64_t last = 0;
    int started = 0, after = 0, rc;
    int32_t item = -1;
    size_t cap_items = 0;
    uint32_t n_stages = st_reader_n_stages(r);
    st_event ev;
    while ((rc = st_event_iter_next(it, &ev)) == 1) {
        if (started && ev.ts_ns > last) {
            seg g = {last, ev.ts_ns, ti, item, SEG_WORK, (uint8_t)after, 1.0, 0};
            int wait = 0;
            for (uint32_t k = 0; k < depth; k++) {
                uint32_t st = stack[k];
                if (st >= n_stages) continue;
                const st_stage_info *si = st_reader_stage(r, st);
                g.factor *= stage_factor(s, st);
                if (strcmp(si->name, "postprocess") == 0) g.cls = SEG_POST;
            }
            if (depth && stack[depth - 1] < n_stages) {
                st_kind k = st_reader_stage(r, stack[depth - 1])->kind;
                if (k == ST_WAIT_INPUT || k == ST_WAIT_OUTPUT) wait = 1;
                if (k == ST_COMM) g.cls = SEG_COMM;
            }
            if (!wait && push_seg(s, &g)) {
                st_event_iter_close(it);
                return whatif_oom();
            }
        }
        started = 1;
        last = ev.ts_ns;
        if (ev.is_end) {
            if (depth) {
                uint32_t st = stack[depth - 1];
                if (st < n_stages && st_reader_stage(r, st)->kind == ST_COMM) after = 1;
                const char *name = st < n_stages ? st_reader_stage(r, st)->name : "";
                int bad = 0;
                int q = -1, put = 0;
                if (m->role == AN_WHATIF_LOADER && strcmp(name, "queue_put") == 0) q = AN_WHATIF_BATCH_QUEUE, put = 1;
                if (m->role == AN_WHATIF_TARGET && strcmp(name, "batch_wait") == 0) q = AN_WHATIF_BATCH_QUEUE;
                if ((m->role == AN_WHATIF_TARGET || m->role == AN_WHATIF_POST) && strcmp(name, "queue_put") == 0)
                    q = AN_WHATIF_HIDDEN_QUEUE, put = 1;
                if (m->role == AN_WHATIF_DRAFTER && strcmp(name, "queue_wait") == 0) q = AN_WHATIF_HIDDEN_QUEUE;
                if (q >= 0 && depth == 1)
                    bad = put ? push_span(&s->puts[q], &s->n_puts[q], &s->cap_puts[q], ev.start_ns, ev.ts_ns)
                              : push_span(&s->pops[q], &s->n_pops[q], &s->cap_pops[q], ev.start_ns, ev.ts_ns);
                if (bad) {
                    st_event_iter_close(it);
                    return whatif_oom();
                }
                depth--;
            }
            continue;
        }
        if (depth == 0 && ev.stage < n_stages && strcmp(st_reader_stage(r, ev.stage)->name, loop_stage[m->role]) == 0) {
            if (m->n_items == cap_items) {
                cap_items = cap_items ? cap_items * 2 : 1024;
                int64_t *n = realloc(m->item_start, cap_items * sizeof *n);
                if (!n) {
                    st_event_iter_close(it);
                    return whatif_oom();
                }
                m->item_start = n;
            }
            m->item_start[m->n_items] = ev.ts_ns;
            item = (int32_t)m->n_items++;
            after = 0;
        }
        if (depth <= ST_MAX_DEPTH) stack[depth++] = ev.stage;
    }
    st_event_iter_close(it);
    if (rc < 0) return an_trace_fail(s->t);
    return AN_EXIT_OK;
}

/* ---- contention removed: the sweep per pool ----------------------------------------------- */

typedef struct edge {
    int64_t t;
    int d;
} edge;

static int cmp_edge(const void *x, const void *y)
{
    const edge *a = x, *b = y;
    if (a->t != b->t) return a->t < b->t ? -1 : 1;
    return a->d - b->d;
}

/* For pool p of capacity cap: G(t), the work one computing thread did from
 * the first edge to t (rate min(1, cap / (n + others))); each segment's work is
 * G(b) - G(a). Communication is a meeting, not work: it is neither counted
 * in n nor divided. */
static int sweep_pool(scan *s, int pool, double cap, double others)
{
    size_t n = 0;
    for (size_t i = 0; i < s->n_segs; i++)
        if (s->th[s->segs[i].thread].pool == pool && s->segs[i].cls != SEG_COMM) n++;
    if (!n) return 0;
    edge *e = malloc(2 * n * sizeof *e);
    int64_t *bt = malloc((2 * n + 1) * sizeof *bt);
    double *bg = malloc((2 * n + 1) * sizeof *bg);
    if (!e || !bt || !bg) {
        free(e);
        free(bt);
        free(bg);
        return -1;
    }
    size_t k = 0;
    for (size_t i = 0; i < s->n_segs; i++) {
        const seg *g = &s->segs[i];
        if (s->th[g->thread].pool != pool || g->cls == SEG_COMM) continue;
        e[k++] = (edge){g->a, 1};
        e[k++] = (edge){g->b, -1};
    }
    qsort(e, k, sizeof *e, cmp_edge);
    /* breakpoints: distinct edge times; rate constant between them */
    size_t nb = 0;
    int active = 0;
    double gsum = 0;
    for (size_t i = 0; i < k;) {
        int64_t t = e[i].t;
        if (nb) {
            double rate = active && active + others > cap ? cap / (active + others) : 1.0;
            gsum += rate * (double)(t - bt[nb - 1]);
        }
        bt[nb] = t;
        bg[nb++] = gsum;
        while (i < k && e[i].t == t) active += e[i++].d;
    }
    for (size_t i = 0; i < s->n_segs; i++) {
        seg *g = &s->segs[i];
        if (s->th[g->thread].pool != pool || g->cls == SEG_COMM) continue;
        size_t lo = 0, hi = nb; /* first breakpoint > a, minus one */
        double ga = 0, gb = 0;
        for (int end = 0; end < 2; end++) {
            int64_t t = end ? g->b : g->a;
            lo = 0, hi = nb;
            while (lo < hi) {
                size_t mid = (lo + hi) / 2;
                if (bt[mid] <= t) lo = mid + 1;
                else hi = mid;
            }
            double v = bg[lo - 1]; /* t is an edge time: exact at a breakpoint */
            if (end) gb = v;
            else ga = v;
        }
        g->work = gb - ga;
    }
    free(e);
    free(bt);
    free(bg);
    return 0;
}

/* ---- samples ------------------------------------------------------------------------------ */

typedef struct item_sum {
    double work, post, a, c, b;
    int complete; /* the item began and ended within the steady window */
} item_sum;

static int push_sample(double **arr, uint32_t *n, uint32_t *cap, double v)
{
    if (*n == *cap) {
        uint32_t c = *cap ? *cap * 2 : 256;
        double *x = realloc(*arr, c * sizeof *x);
        if (!x) return -1;
        *arr = x;
        *cap = c;
    }
    (*arr)[(*n)++] = v;
    return 0;
}

static int build_samples(scan *s, an_whatif_input *in)
{
    item_sum **sums = calloc(s->n_th, sizeof *sums);
    if (!sums) return whatif_oom();
    int rc = AN_EXIT_OK;
    for (uint32_t ti = 0; ti < s->n_th && !rc; ti++) {
        mthread *m = &s->th[ti];
        sums[ti] = calloc(m->n_items ? m->n_items : 1, sizeof **sums);
        if (!sums[ti]) rc = whatif_oom();
        for (uint32_t k = 0; !rc && k + 1 < m->n_items; k++)
            sums[ti][k].complete = m->item_start[k] >= in->t0_ns && m->item_start[k + 1] <= in->t1_ns;
    }
    for (size_t i = 0; !rc && i < s->n_segs; i++) {
        const seg *g = &s->segs[i];
        if (g->item < 0) continue;
        item_sum *x = &sums[g->thread][g->item];
        double w = (g->cls == SEG_COMM ? (double)(g->b - g->a) : g->work) * g->factor;
        if (g->cls == SEG_COMM) x->c += w;
        else if (g->cls == SEG_POST) x->post += w;
        else x->work += w;
        if (g->cls != SEG_COMM) {
            if (g->after) x->b += w;
            else x->a += w;
        }
    }
    uint32_t cap_load = 0, cap_fwd = 0, cap_post = 0, cap_a = 0, cap_b = 0, cap_c = 0;
    uint32_t n_b = 0, max_any = 0, n_drafters = 0;
    for (uint32_t ti = 0; ti < s->n_th; ti++) {
        if (s->th[ti].n_items > max_any) max_any = s->th[ti].n_items;
        n_drafters += s->th[ti].role == AN_WHATIF_DRAFTER;
    }
    /* Samples in step order, threads of a role taking turns (item k of each
     * thread, then item k + 1): a replay, whose actors take a role's
     * samples in turn, then gives the drafters that meet at the all-reduce
     * the items of one step together, as they ran. */
    for (uint32_t k = 0; !rc && k < max_any; k++) {
        /* The drafters' step k only when every drafter completed it in the
         * window: one missing item would shift the pairs of every later step.
         * Its all-reduce's own cost: the shortest of the drafters' all-reduce
         * of the step (the last to arrive hardly waits). */
        int drafters_all = n_drafters > 0;
        double allreduce = INFINITY;
        for (uint32_t ti = 0; ti < s->n_th; ti++) {
            if (s->th[ti].role != AN_WHATIF_DRAFTER) continue;
            if (k >= s->th[ti].n_items || !sums[ti][k].complete) drafters_all = 0;
            else if (sums[ti][k].c < allreduce) allreduce = sums[ti][k].c;
        }
        if (drafters_all && in->rec.drafters > 1 && push_sample(&in->draft_c, &in->n_draft_c, &cap_c, allreduce))
            rc = whatif_oom();
        for (uint32_t ti = 0; !rc && ti < s->n_th; ti++) {
            mthread *m = &s->th[ti];
            if (k >= m->n_items) continue;
            item_sum *x = &sums[ti][k];
            if (!x->complete || (m->role == AN_WHATIF_DRAFTER && !drafters_all)) continue;
            int bad = 0;
            switch (m->role) {
            case AN_WHATIF_LOADER: bad = push_sample(&in->load, &in->n_load, &cap_load, x->work + x->post); break;
            case AN_WHATIF_TARGET:
                bad = push_sample(&in->forward, &in->n_forward, &cap_fwd, x->work) ||
                      (!in->rec.async && push_sample(&in->post, &in->n_post, &cap_post, x->post));
                break;
            case AN_WHATIF_POST: bad = push_sample(&in->post, &in->n_post, &cap_post, x->work + x->post); break;
            case AN_WHATIF_DRAFTER:
                bad = push_sample(&in->draft_a, &in->n_draft, &cap_a, x->a) ||
                      push_sample(&in->draft_b, &n_b, &cap_b, x->b);
                break;
            }
            if (bad) rc = whatif_oom();
        }
    }
    if (!rc && in->rec.drafters > 1) in->allreduce_measured = in->n_draft_c > 0;
    for (uint32_t ti = 0; ti < s->n_th; ti++) free(sums[ti]);
    free(sums);
    return rc;
}

/* ---- wake-up latencies ---------------------------------------------------------------------- */

static int cmp_span_end(const void *x, const void *y)
{
    const span *a = x, *b = y;
    if (a->b != b->b) return a->b < b->b ? -1 : 1;
    return (a->a > b->a) - (a->a < b->a);
}

/* One queue of the given depth. It is FIFO: the k-th pop (by end) takes the
 * k-th put (by end). Item k is in the queue at p_k = max(put k's start, the
 * end of pop k - depth). A put blocked when pop k - depth ended after the put
 * began; a pop blocked when it began before p_k. Delays, for operations
 * ending within the steady window:
 *   put wakee  put end - end of pop k - depth (the put had blocked)
 *   put waker  put end - p_k (it released pop k, which had blocked)
 *   put plain  put end - put start (neither)
 *   pop wakee  pop end - p_k (the pop had blocked)
 *   pop waker  pop end - pop start (it released put k + depth, which had blocked)
 *   pop plain  pop end - pop start (neither)
 * On an idle machine they are all near zero; on a busy one a woken thread
 * waits for a processor, and its waker may lose its own to it. */
static int queue_delays(scan *s, an_whatif_input *in, int q, size_t depth)
{
    span *puts = s->puts[q], *pops = s->pops[q];
    size_t np = s->n_puts[q], nc = s->n_pops[q];
    if (np) qsort(puts, np, sizeof *puts, cmp_span_end); /* qsort(NULL, 0) is undefined */
    if (nc) qsort(pops, nc, sizeof *pops, cmp_span_end);
    uint32_t cap[AN_WHATIF_N_DELAYS] = {0};
#define IN_WINDOW(t) ((t) >= in->t0_ns && (t) <= in->t1_ns)
#define ADD(k, v)                                                                                                    \
    do {                                                                                                             \
        if (push_sample(&in->delay[q][k], &in->n_delay[q][k], &cap[k], (double)(v) > 0 ? (double)(v) : 0))          \
            return -1;                                                                                               \
    } while (0)
    for (size_t k = 0; k < np; k++) {
        const span *put = &puts[k];
        int blocked = k >= depth && k - depth < nc && pops[k - depth].b > put->a;
        int64_t p = blocked ? pops[k - depth].b : put->a;
        int released = k < nc && pops[k].a < p;
        if (!IN_WINDOW(put->b)) continue;
        if (blocked) ADD(AN_WHATIF_PUT_WAKEE, put->b - pops[k - depth].b);
        else if (released) ADD(AN_WHATIF_PUT_WAKER, put->b - p);
        else ADD(AN_WHATIF_PUT_PLAIN, put->b - put->a);
    }
    for (size_t k = 0; k < nc && k < np; k++) {
        const span *pop = &pops[k];
        int put_blocked = k >= depth && k - depth < nc && pops[k - depth].b > puts[k].a;
        int64_t p = put_blocked ? pops[k - depth].b : puts[k].a;
        int blocked = pop->a < p;
        int released = k + depth < np && puts[k + depth].a < pop->b;
        if (!IN_WINDOW(pop->b)) continue;
        if (blocked) ADD(AN_WHATIF_POP_WAKEE, pop->b - p);
        else if (released) ADD(AN_WHATIF_POP_WAKER, pop->b - pop->a);
        else ADD(AN_WHATIF_POP_PLAIN, pop->b - pop->a);
    }
#undef ADD
#undef IN_WINDOW
    return 0;
}

/* ---- reading ------------------------------------------------------------------------------ */

/* Each shared device's capacity: what its threads worked on it in the steady window (their
 * time in work, sync and copy stages, the all-reduce's meeting left out) over the time the
 * device was busy then (the union of its kernels, copies and memsets), at least 1: a device
 * busy 73% of the time while two threads each worked 85% of it could have served 2.3 such
 * threads. A device without records keeps 1; one the trace never used takes the mean of the
 * recorded ones. */
static int gpu_capacity(scan *s, an_whatif_input *in, const int *devices, int n_dev)
{
    an_gpu_idle *idle = NULL;
    uint32_t n_idle = 0;
    const char *note = NULL;
    int rc = an_gpu_idle_split(s->t, in->t0_ns, in->t1_ns, &idle, &n_idle, &note);
    if (rc) return rc;
    double sum = 0;
    int n_sum = 0;
    for (int k = 0; k < n_dev; k++) {
        double demand = 0;
        for (size_t i = 0; i < s->n_segs; i++) {
            const seg *g = &s->segs[i];
            if (s->th[g->thread].pool != k || g->cls == SEG_COMM) continue;
            int64_t a = g->a > in->t0_ns ? g->a : in->t0_ns, b = g->b < in->t1_ns ? g->b : in->t1_ns;
            if (b > a) demand += (double)(b - a);
        }
        double cap = 1.0;
        for (uint32_t j = 0; j < n_idle; j++)
            if (idle[j].device == devices[k] && idle[j].busy_ns > 0 && demand > (double)idle[j].busy_ns)
                cap = demand / (double)idle[j].busy_ns;
        in->gpu_cap_device[in->n_gpu_cap] = devices[k];
        in->gpu_cap[in->n_gpu_cap++] = cap;
        sum += cap;
        n_sum++;
    }
    if (n_sum) in->gpu_cap_other = sum / n_sum;
    an_gpu_idle_free(idle, n_idle);
    return AN_EXIT_OK;
}

double an_whatif_gpu_capacity(const an_whatif_input *in, int device)
{
    for (int k = 0; k < in->n_gpu_cap; k++)
        if (in->gpu_cap_device[k] == device) return in->gpu_cap[k];
    return in->n_gpu_cap ? in->gpu_cap_other : 1.0;
}

static int role_of(const char *name)
{
    for (int i = 0; i < AN_WHATIF_N_ROLES; i++)
        if (strcmp(name, an_whatif_role_names[i]) == 0) return i;
    return -1;
}

static int cmp_int(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

int an_whatif_read(an_trace *t, const an_whatif_opts *o, an_whatif_input *in)
{
    memset(in, 0, sizeof *in);
    st_reader *r = t->r;
    scan s;
    memset(&s, 0, sizeof s);
    s.t = t;
    s.o = o;
    int n_role[AN_WHATIF_N_ROLES] = {0};
    char buf[64];
    const char *argv = an_trace_meta(t, "argv");
    const char *dev = argv ? argv_value(argv, "--device", buf, sizeof buf) : NULL;
    in->cuda = dev ? strcmp(dev, "cuda") == 0 : st_reader_has_gpu(r) == 1;
    for (uint32_t i = 0; i < st_reader_n_threads(r); i++) {
        const st_thread_info *ti = st_reader_thread(r, i);
        int role = role_of(ti->role);
        if (role < 0) continue;
        if (n_role[role] >= AN_WHATIF_MAX_THREADS) {
            an_error("whatif: %s has more than %d %s threads", t->path, AN_WHATIF_MAX_THREADS, an_whatif_role_names[role]);
            return AN_EXIT_USAGE;
        }
        if (role == AN_WHATIF_TARGET) in->target_device[n_role[role]] = ti->device;
        if (role == AN_WHATIF_DRAFTER) in->drafter_device[n_role[role]] = ti->device;
        n_role[role]++;
        mthread *m = &s.th[s.n_th++];
        m->reader_index = i;
        m->role = role;
        m->device = ti->device;
    }
    if (!n_role[AN_WHATIF_TARGET] || !n_role[AN_WHATIF_DRAFTER]) {
        an_error("whatif: %s has no %s threads; whatif models the trainer's pipeline (roles loader, target, post, "
                 "drafter)", t->path, n_role[AN_WHATIF_TARGET] ? "drafter" : "target");
        return AN_EXIT_USAGE;
    }
    in->rec.targets = n_role[AN_WHATIF_TARGET];
    in->rec.drafters = n_role[AN_WHATIF_DRAFTER];
    in->rec.async = n_role[AN_WHATIF_POST] > 0;
    qsort(in->target_device, (size_t)in->rec.targets, sizeof(int), cmp_int);
    qsort(in->drafter_device, (size_t)in->rec.drafters, sizeof(int), cmp_int);

    /* queue depths: argv, else the trainer's defaults, else the counters' largest value */
    int64_t qd = 0;
    const char *v = argv ? argv_value(argv, "--queue-depth", buf, sizeof buf) : NULL;
    if (v) {
        char *end;
        long x = strtol(v, &end, 10);
        if (*end == 0 && x >= 1 && x <= 100000) qd = x;
    }
    in->queue_depth_from = "argv";
    const char *program = an_trace_meta(t, "program");
    int is_trainer = program && strcmp(program, "trainer") == 0;
    if (!qd && is_trainer) {
        qd = 60;
        in->queue_depth_from = "trainer default";
    }
    an_pipe p;
    memset(&p, 0, sizeof p);
    double counter_max[2] = {NAN, NAN};
    if (an_pipe_compute(&p, t, NULL) == AN_EXIT_OK) {
        for (uint32_t q = 0; q < p.n_queues; q++) {
            int which = strcmp(p.queues[q].name, "queue_depth") == 0 ? 0
                        : strcmp(p.queues[q].name, "batch_queue_depth") == 0 ? 1 : -1;
            if (which >= 0) counter_max[which] = p.queues[q].max;
        }
        an_pipe_free(&p);
    } else {
        return AN_EXIT_USAGE;
    }
    if (!qd && isfinite(counter_max[0]) && counter_max[0] >= 1 && counter_max[0] <= 100000) {
        qd = (int64_t)counter_max[0];
        in->queue_depth_from = "counter";
    }
    if (!qd) {
        an_error("whatif: %s does not say its queue depth (no --queue-depth in meta argv, no queue_depth counter)",
                 t->path);
        return AN_EXIT_USAGE;
    }
    in->rec.queue_depth = (int)qd;
    in->rec.batch_depth = is_trainer ? 4
                          : isfinite(counter_max[1]) && counter_max[1] >= 1 && counter_max[1] <= 100000
                              ? (int)counter_max[1] : 4;

    /* the steady window */
    uint32_t n_marks = st_reader_n_steps(r);
    uint32_t skip = o->skip_steps;
    if (skip == UINT32_MAX) skip = n_marks / 10 > 1 ? n_marks / 10 : 1;
    if (n_marks < 2 || skip > n_marks - 2) {
        an_error("whatif: %s has %u step marks; the steady window after skipping %u needs at least two", t->path,
                 n_marks, skip);
        return AN_EXIT_USAGE;
    }
    in->skip_steps = skip;
    in->t0_ns = st_reader_step(r, skip)->ts_ns;
    in->t1_ns = st_reader_step(r, n_marks - 1)->ts_ns;
    in->step_first = st_reader_step(r, skip + 1)->step;
    in->step_last = st_reader_step(r, n_marks - 1)->step;
    in->steps = n_marks - 1 - skip;
    for (uint32_t m = skip + 1; m < n_marks; m++) in->tokens += st_reader_step(r, m)->tokens;
    if (in->t1_ns <= in->t0_ns || !in->tokens) {
        an_error("whatif: %s: the steady window (steps %llu-%llu) has %s", t->path,
                 (unsigned long long)in->step_first, (unsigned long long)in->step_last,
                 in->tokens ? "no length" : "no tokens");
        return AN_EXIT_USAGE;
    }
    in->measured_tokens_per_s = (double)in->tokens * 1e9 / (double)(in->t1_ns - in->t0_ns);
    in->items = in->steps * (uint64_t)in->rec.drafters;
    in->tokens_per_item = (double)in->tokens / (double)in->items;

    /* pools: one for the cpu; one per device on cuda (the loader has its own core) */
    int devices[AN_WHATIF_MAX_THREADS * AN_WHATIF_N_ROLES], n_dev = 0;
    in->cores = o->cores > 0 ? o->cores : (double)sysconf(_SC_NPROCESSORS_ONLN);
    if (!(in->cores > 0)) in->cores = 1;
    for (uint32_t i = 0; i < s.n_th; i++) {
        mthread *m = &s.th[i];
        if (!in->cuda) {
            m->pool = 0;
            continue;
        }
        if (m->role == AN_WHATIF_LOADER || m->device < 0) {
            m->pool = -1;
            continue;
        }
        int k = 0;
        while (k < n_dev && devices[k] != m->device) k++;
        if (k == n_dev) devices[n_dev++] = m->device;
        m->pool = o->gpu_share_off ? -1 : k;
    }
    in->allreduce_given = o->allreduce_ns >= 0;
    in->allreduce_ns = o->allreduce_ns >= 0 ? o->allreduce_ns : 0;
    int rc = AN_EXIT_OK;
    for (uint32_t i = 0; i < s.n_th && !rc; i++) rc = scan_thread(&s, i);
    int n_pools = in->cuda ? (o->gpu_share_off ? 0 : n_dev) : 1;
    in->others = in->cuda || o->others < 0 ? 0 : o->others;
    in->gpu_share_off = o->gpu_share_off;
    in->gpu_cap_other = 1.0;
    if (!rc && in->cuda && n_pools > 0 && st_reader_has_gpu(r) == 1) rc = gpu_capacity(&s, in, devices, n_dev);
    for (int p2 = 0; p2 < n_pools && !rc; p2++)
        if (sweep_pool(&s, p2, in->cuda ? an_whatif_gpu_capacity(in, devices[p2]) : in->cores, in->others))
            rc = whatif_oom();
    for (size_t i = 0; i < s.n_segs && !rc; i++)
        if (s.th[s.segs[i].thread].pool < 0 && s.segs[i].cls != SEG_COMM)
            s.segs[i].work = (double)(s.segs[i].b - s.segs[i].a);
    if (!rc) rc = build_samples(&s, in);
    if (!rc && (queue_delays(&s, in, AN_WHATIF_BATCH_QUEUE, (size_t)in->rec.batch_depth) ||
                queue_delays(&s, in, AN_WHATIF_HIDDEN_QUEUE, (size_t)in->rec.queue_depth)))
        rc = whatif_oom();
    for (uint32_t i = 0; i < s.n_th; i++) free(s.th[i].item_start);
    free(s.segs);
    for (int q = 0; q < AN_WHATIF_N_QUEUES; q++) {
        free(s.puts[q]);
        free(s.pops[q]);
    }
    double target_work = 0, drafter_work = 0;
    for (uint32_t i = 0; !rc && i < in->n_forward; i++) target_work += in->forward[i];
    for (uint32_t i = 0; !rc && i < in->n_post; i++) target_work += in->post[i];
    for (uint32_t i = 0; !rc && i < in->n_draft; i++) drafter_work += in->draft_a[i] + in->draft_b[i];
    if (!rc && in->n_forward && in->n_post && in->n_draft && (!(target_work > 0) || !(drafter_work > 0))) {
        an_error("whatif: %s: the %s items of the steady window (steps %llu-%llu) hold no work", t->path,
                 !(target_work > 0) ? "target" : "drafter", (unsigned long long)in->step_first,
                 (unsigned long long)in->step_last);
        rc = AN_EXIT_USAGE;
    }
    if (!rc && (!in->n_forward || !in->n_post || !in->n_draft)) {
        an_error("whatif: %s: no complete %s item in the steady window (steps %llu-%llu)", t->path,
                 !in->n_forward ? "target" : !in->n_post ? "postprocess" : "drafter",
                 (unsigned long long)in->step_first, (unsigned long long)in->step_last);
        rc = AN_EXIT_USAGE;
    }
    if (rc) an_whatif_free(in);
    return rc;
}

void an_whatif_free(an_whatif_input *in)
{
    free(in->load);
    free(in->forward);
    free(in->post);
    free(in->draft_a);
    free(in->draft_b);
    free(in->draft_c);
    for (int q = 0; q < AN_WHATIF_N_QUEUES; q++)
        for (int k = 0; k < AN_WHATIF_N_DELAYS; k++) {
            free(in->delay[q][k]);
            in->delay[q][k] = NULL;
        }
    in->load = in->forward = in->post = in->draft_a = in->draft_b = in->draft_c = NULL;
}

/* ---- the simulated pipeline ---------------------------------------------------------------- */

static an_sim_op op(int kind, int arg)
{
    return (an_sim_op){kind, arg, NULL, NULL, NULL};
}

int an_whatif_simulate(const an_whatif_input *in, const an_whatif_cfg *cfg, int resample, uint64_t seed,
                       uint64_t measure_items, an_sim_result *r, int *n_pools_out, int *pool_device)
{
    enum { D_LOAD, D_FORWARD, D_POST, D_SYNC, D_A, D_C, D_B, N_DISTS };
    static const double zero = 0;
    int T = cfg->targets, D = cfg->drafters;
    int n_actors = 1 + T * (cfg->async ? 2 : 1) + D;
    int n_queues = 2 + (cfg->async ? 2 * T : 0);
    an_sim_actor *actors = calloc((size_t)n_actors, sizeof *actors);
    an_sim_queue *queues = calloc((size_t)n_queues, sizeof *queues);
    uint32_t n_sync = in->n_forward < in->n_post ? in->n_forward : in->n_post;
    double *sync = malloc((n_sync ? n_sync : 1) * sizeof *sync);
    if (!actors || !queues || !sync) {
        free(actors);
        free(queues);
        free(sync);
        return -1;
    }
    /* a target's item without the pool split: forward and postprocess of the same item */
    for (uint32_t k = 0; k < n_sync; k++) sync[k] = in->forward[k] + in->post[k];
    double allreduce = in->allreduce_ns;
    if (D == 1) allreduce = 0; /* the trainer all-reduces only between two or more drafters */
    int use_measured = D > 1 && in->n_draft_c && !in->allreduce_given;
    an_sim_dist dists[N_DISTS] = {
        {in->n_load ? in->load : &zero, in->n_load ? in->n_load : 1, 1},
        {in->forward, in->n_forward, 1},
        {in->post, in->n_post, 1},
        {sync, n_sync ? n_sync : 1, 1},
        {in->draft_a, in->n_draft, 1},
        {use_measured ? in->draft_c : &allreduce, use_measured ? in->n_draft_c : 1, 1},
        {in->draft_b, in->n_draft, 1},
    };
    /* The drafters' samples are stored step by step (one per recorded
     * drafter): the bootstrap draws a step's together, as the replay hands
     * them out, so that the drafters meeting at the all-reduce keep items
     * that ran side by side. */
    if (in->rec.drafters > 1) dists[D_A].group = dists[D_B].group = (uint32_t)in->rec.drafters;
    /* pools: the cpu's; or one per device: recorded devices when the count is
     * the recorded one, else devices 0..N-1 (the trainer's count form) */
    int devices[AN_WHATIF_MAX_THREADS * 2], n_dev = 0;
    double caps[AN_SIM_MAX_POOLS];
    int a = 0, rc = 0;
    an_sim_dist delay[AN_WHATIF_N_QUEUES][AN_WHATIF_N_DELAYS];
    const an_sim_dist *dl[AN_WHATIF_N_QUEUES][AN_WHATIF_N_DELAYS];
    for (int q = 0; q < AN_WHATIF_N_QUEUES; q++)
        for (int k = 0; k < AN_WHATIF_N_DELAYS; k++) {
            delay[q][k] = (an_sim_dist){in->delay[q][k], in->n_delay[q][k], 1};
            dl[q][k] = in->n_delay[q][k] ? &delay[q][k] : NULL;
        }
    /* queue 0 is the batch queue, 1 the hidden-state queue */
    an_sim_op put_batch = {AN_SIM_PUT, 0, dl[0][AN_WHATIF_PUT_WAKEE], dl[0][AN_WHATIF_PUT_WAKER], dl[0][AN_WHATIF_PUT_PLAIN]};
    an_sim_op pop_batch = {AN_SIM_POP, 0, dl[0][AN_WHATIF_POP_WAKEE], dl[0][AN_WHATIF_POP_WAKER], dl[0][AN_WHATIF_POP_PLAIN]};
    an_sim_op put_hidden = {AN_SIM_PUT, 1, dl[1][AN_WHATIF_PUT_WAKEE], dl[1][AN_WHATIF_PUT_WAKER], dl[1][AN_WHATIF_PUT_PLAIN]};
    an_sim_op pop_hidden = {AN_SIM_POP, 1, dl[1][AN_WHATIF_POP_WAKEE], dl[1][AN_WHATIF_POP_WAKER], dl[1][AN_WHATIF_POP_PLAIN]};
    actors[a++] = (an_sim_actor){AN_WHATIF_LOADER, in->cuda ? -1 : 0, 2, {op(AN_SIM_WORK, D_LOAD), put_batch}};
    for (int g = 0; g < T; g++) {
        int dev = cfg->target_devices ? cfg->target_devices[g] : T == in->rec.targets ? in->target_device[g] : g;
        int pool = 0;
        if (in->cuda) {
            int k = 0;
            while (k < n_dev && devices[k] != dev) k++;
            if (k == n_dev) devices[n_dev++] = dev;
            pool = in->gpu_share_off ? -1 : k;
        }
        if (!cfg->async) {
            actors[a++] = (an_sim_actor){AN_WHATIF_TARGET, pool, 3,
                                         {pop_batch, op(AN_SIM_WORK, D_SYNC), put_hidden}};
        } else {
            int filled = 2 + 2 * g, free_staging = filled + 1;
            queues[filled] = (an_sim_queue){2, 0};
            queues[free_staging] = (an_sim_queue){2, 2};
            actors[a++] = (an_sim_actor){AN_WHATIF_TARGET, pool, 4,
                                         {pop_batch, op(AN_SIM_POP, free_staging), op(AN_SIM_WORK, D_FORWARD),
                                          op(AN_SIM_PUT, filled)}};
            actors[a++] = (an_sim_actor){AN_WHATIF_POST, pool, 4,
                                         {op(AN_SIM_POP, filled), op(AN_SIM_WORK, D_POST), op(AN_SIM_PUT, free_staging),
                                          put_hidden}};
        }
    }
    for (int d = 0; d < D; d++) {
        int dev = cfg->drafter_devices ? cfg->drafter_devices[d] : D == in->rec.drafters ? in->drafter_device[d] : d;
        int pool = 0;
        if (in->cuda) {
            int k = 0;
            while (k < n_dev && devices[k] != dev) k++;
            if (k == n_dev) devices[n_dev++] = dev;
            pool = in->gpu_share_off ? -1 : k;
        }
        actors[a++] = (an_sim_actor){AN_WHATIF_DRAFTER, pool, 6,
                                     {pop_hidden, op(AN_SIM_WORK, D_A), op(AN_SIM_BARRIER, 0), op(AN_SIM_WORK, D_C),
                                      op(AN_SIM_WORK, D_B), op(AN_SIM_ITEM, 0)}};
    }
    queues[0] = (an_sim_queue){cfg->batch_depth, 0};
    queues[1] = (an_sim_queue){cfg->queue_depth, 0};
    int n_pools = in->cuda ? (in->gpu_share_off ? 0 : n_dev) : 1;
    if (n_pools > AN_SIM_MAX_POOLS) {
        rc = -1;
    } else {
        double others[AN_SIM_MAX_POOLS];
        for (int p = 0; p < n_pools; p++) {
            caps[p] = in->cuda ? an_whatif_gpu_capacity(in, devices[p]) : in->cores;
            others[p] = in->cuda ? 0 : in->others;
        }
        int barrier = D;
        an_sim_model m;
        memset(&m, 0, sizeof m);
        m.n_actors = n_actors, m.n_queues = n_queues, m.n_dists = N_DISTS, m.n_pools = n_pools;
        m.n_barriers = 1, m.n_roles = AN_WHATIF_N_ROLES;
        m.actors = actors, m.queues = queues, m.dists = dists, m.pool_capacity = caps, m.barrier_count = &barrier;
        m.pool_others = others;
        m.watch_queue = 1;
        m.warmup_items = 2 * (uint64_t)(cfg->queue_depth + cfg->batch_depth + 4 * T) + 20 * (uint64_t)D;
        if (m.warmup_items > AN_WHATIF_MAX_WARMUP) m.warmup_items = AN_WHATIF_MAX_WARMUP;
        m.measure_items = measure_items;
        m.resample = resample;
        m.seed = seed;
        rc = an_sim_run(&m, r);
    }
    if (n_pools_out) *n_pools_out = n_pools;
    for (int p = 0; pool_device && p < n_pools && p < AN_SIM_MAX_POOLS; p++) pool_device[p] = in->cuda ? devices[p] : -1;
    free(actors);
    free(queues);
    free(sync);
    return rc;
}
