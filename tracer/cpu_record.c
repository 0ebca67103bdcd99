/* cpu_record.c: the CPU capture on its way into the trace (st_cpurec.h).
 * The writer calls it on each pass: every registered thread's perf ring
 * (cpu_perf.c) is drained into a queue, each record waits there until the
 * thread's range events say which stage was open at its time, and is then
 * encoded into the thread's cpu_chunks chunk; callchains are cut at their
 * first frame outside the executable mappings and interned into
 * cpu_stacks. At each commit the chunks are stored with the thread's
 * figures (cpu_threads) and the meta keys; at close the events are closed
 * and the mappings and symbols stored (cpu_symbols.c). A block still open
 * after 1 ms gets its reason from /proc (cpu_blocks), and every thread's
 * schedstat is read at each window's end (cpu_windows; cpu_proc.c reads
 * both). Nothing here runs on a range's path: the registering thread only
 * opens its event. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "st_cpurec.h"
#include "st_cpusched.h"
#include "st_internal.h"
#include "st_schema.h"

#define CPU_CHUNK_BYTES 32768
#define HISTORY 64 /* stage changes kept per thread for samples that arrive late */
#define WAITS_PENDING 64 /* wait-stack samples kept until their switch-out record comes */
/* A wait-stack sample is taken in the kernel's switch path just before the
 * switch-out record (1-10 us before it, measured); it belongs to the first
 * switch-out record at most this much later, and to none when that one is
 * a preemption. WAIT_SLACK_NS: how much after the record it may be stamped. */
#define WAIT_MATCH_NS 1000000LL
#define WAIT_SLACK_NS 20000LL

typedef struct wait_sample {
    int64_t ts_ns;
    uint32_t stack;
    uint32_t n_kernel; /* a sched_switch sample's kernel frames (cpu_sched.c) */
    int state;         /* its task state letter; 0: a context-switch event's sample */
} wait_sample;

typedef struct stage_change {
    int64_t ts_ns;
    uint32_t top; /* innermost open stage from ts_ns on */
} stage_change;

struct st_cpurec_thread {
    uint32_t id;
    int64_t os_tid;
    st_cpu_thread *ct;        /* NULL once closed (or without memory) */
    int status;               /* st_cpu_status of the perf event's open */
    st_cpu_timer *timer;      /* the signal sampler (ct->timer), or NULL */
    st_cpu_thread *waits;     /* the wait-stack event (ct->waits; closed when refused), or NULL */
    wait_sample wq[WAITS_PENDING]; /* wait-stack samples not yet matched, in time order */
    uint32_t n_wq;
    uint64_t timer_lost;      /* the timer's lost count already put in the queue */
    uint64_t wait_stacks, gil_samples;
    uint64_t period_timer_ns; /* the signal sampler's period (kept once it is closed) */
    uint64_t overruns;        /* its timer's overruns (kept once it is closed) */
    int sampler;              /* 1 perf samples, 2 the signal sampler, 0 none */
    int has_waits;            /* its wait-stack event opened */
    int64_t start_ns;
    int64_t ring_bytes;       /* the ring's data size (0: none mapped) */
    uint64_t cpu_ns;          /* the event's count: the thread's CPU time since the open */
    st_cpu_encoder enc;
    st_cpu_rec *q;            /* records waiting for their stage, in arrival order */
    size_t q_head, q_len, q_cap;
    stage_change hist[HISTORY];
    uint64_t n_hist;          /* changes pushed (hist is a ring of the last HISTORY) */
    int64_t last_event_ns;    /* the last encoded event's time (valid when n_hist) */
    int64_t last_rec_ns;      /* the last record's time, for a lost record without one */
    uint64_t switches, samples, unknown, lost;
    int64_t out_ns;           /* the last switch record's time when it is a blocked switch-out, else -1 */
    int out_examined;         /* that block's reason was looked for (block_reason) */
    uint64_t blocks;          /* cpu_blocks rows stored */
    int dirty;                /* the cpu_threads row changed */
    uint64_t py_samples;      /* Python-frame samples stored (st_cpu_sample_add) */
    int retired;              /* closed: later Python-frame samples are lost */
};

/* A thread of the process as the last schedstat scan saw it. */
typedef struct win_task {
    int64_t tid;
    uint64_t v[3];            /* on-CPU ns, run-queue ns, timeslices at the last scan */
    uint32_t gen;             /* the scan that last saw it */
    int fd;                   /* its schedstat, kept open; -1: none */
    char name[20];            /* comm, read when first seen */
} win_task;

/* A Python function of the Python-frame samples: "py::QUALNAME:FILE",
 * its file at name + file_off. */
typedef struct py_name {
    char *name;
    uint32_t file_off;
    uint64_t hash;
} py_name;

typedef struct stack_slot {
    uint64_t hash;
    uint32_t id, n;
    size_t off;               /* frames at pool[off .. off + n) */
} stack_slot;

struct st_cpurec {
    st_trace *t;
    st_store *store;
    st_cpu_sink *sink;
    st_cpu_maps maps;
    st_cpurec_thread *cur;    /* the thread being drained (the sink's callbacks) */
    st_cpurec_thread *threads[ST_MAX_THREADS];
    uint32_t n_threads;
    /* interned stacks: open addressing on the frames' hash */
    stack_slot *stacks;
    size_t stacks_cap;
    uint32_t n_stacks;
    uint64_t *pool;
    size_t pool_len, pool_cap;
    /* every frame address seen, for the symbols at close (0: empty slot) */
    uint64_t *addrs;
    size_t addrs_cap, n_addrs;
    /* the addresses seen at depth 0 (sampled ips), for cpu_lines: the
     * others are return addresses, looked up at the byte before */
    uint64_t *ips;
    size_t ips_cap, n_ips;
    st_buf scratch;
    st_cpusym *sym;
    uint64_t period_ns;
    /* meta as last written */
    uint64_t w_samples, w_switches, w_lost, w_unknown, w_cpu_ns;
    char w_mode[32], w_sampler[16], w_levels[16];
    int sched_reason_written; /* meta cpu_sched_reason */
    int reason_written, timer_written, wait_reason_written;
    uint64_t w_overruns, w_wait_stacks, w_gil;
    uint64_t n_blocks, w_blocks; /* cpu_blocks rows stored; as last written to meta */
    /* schedstat windows */
    win_task *tasks;
    size_t n_tasks, tasks_cap;
    int64_t *tids;
    size_t tids_cap;
    uint32_t gen;
    int64_t win_t0_ns;        /* the last scan's time: the current window's start */
    int64_t n_windows;        /* windows stored */
    int schedstat;            /* 1: readable, 0: not (meta cpu_window_source) */
    st_oncpu_queue *oncpu;    /* the profile lines' on-CPU shares, or NULL (cpu_oncpu.c) */
    /* DWARF unwinding (opt.cpu_user_stack; cpu_unwind.c) */
    st_cpu_unwinder *uw;      /* opened at the first sample with a stack copy */
    int uw_failed;            /* its open failed: uw_reason says why */
    char uw_reason[256];      /* why samples are not unwound, "" while they are */
    uint64_t n_dwarf, n_fp;   /* samples with a copy whose stored stack came from the unwinding, from the chain */
    int64_t uw_ns;            /* the writer's time in st_cpu_unwind */
    uint64_t w_dwarf, w_fp;
    char w_unwind[8];
    int uw_reason_written;
    unsigned uw_loads;        /* maps.n_loads when last compared */
    uint64_t uw_maps_hash;    /* the executable mappings then */
    unsigned uw_gen;          /* bumped when they changed: the unwinder reports its modules anew */
    uint64_t uw_frames[ST_CPU_UNWIND_MAX_FRAMES];
    /* Python-frame samples (st_cpurec_pysamples) */
    st_pyq_batch py_batch;
    st_pyq_sample py_sample;
    uint64_t py_frames[ST_CPU_SAMPLE_MAX_FRAMES];
    py_name *py_names;        /* by id */
    uint32_t n_py_names, cap_py_names;
    uint32_t *py_index;       /* open addressing on the names' hash: id + 1, 0 empty */
    uint32_t py_index_cap;
    uint64_t *py_addrs;       /* the synthetic frame addresses seen (a set, 0 empty) */
    size_t py_addrs_cap, n_py_addrs;
    uint64_t py_late;         /* samples for a thread retired or not known yet */
    uint64_t py_queue_lost;   /* the queue's lost count as last taken */
    uint64_t w_py_samples, w_py_lost;
    int py_meta_written;
};

static void meta_text(st_cpurec *r, const char *key, const char *value)
{
    st_val v[2] = {ST_VTEXT(key), ST_VTEXT(value)};
    st_store_row(r->store, ST_S_META, 2, v);
}

static void meta_u64(st_cpurec *r, const char *key, uint64_t value)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)value);
    meta_text(r, key, buf);
}

static const char *status_name(int status)
{
    switch (status) {
    case ST_CPU_TIMER_MODE: return "timer";
    case ST_CPU_OK: return "perf";
    case ST_CPU_REFUSED: return "refused";
    case ST_CPU_UNSUPPORTED: return "unsupported";
    case ST_CPU_NOMEM: return "nomem";
    default: return "error";
    }
}

/* ---- opening, on the registering thread ---- */

/* What samples a thread (docs/cpu.md, "Which sampler"): the perf event's
 * CPU clock; the signal sampler where the perf event is refused, or where a
 * GIL probe is set (the perf event then keeps the switch records only: the
 * hybrid mode) unless DWARF stacks were asked (opt->cpu_user_stack, in a
 * build that can unwind them: only the perf event's samples carry stack
 * copies, so they win over the GIL state); and, where the kernel allows
 * it, the wait-stack event. */
st_cpu_thread *st_cpurec_open(const st_options *opt, int *status, int64_t *start_ns)
{
    st_cpu_thread *ct = calloc(1, sizeof *ct);
    *start_ns = st_now_ns();
    if (!ct) {
        *status = ST_CPU_ERROR;
        return NULL;
    }
    uint64_t period = opt->cpu_period_ns;
    int samples = period != UINT64_MAX;
    int unwinds = samples && opt->cpu_user_stack && !st_cpu_unwind_missing();
    int hybrid = samples && st_cpu_gil_probe_set() && !unwinds;
    /* 16 threads assumed: a program with more gets smaller rings from the
     * open's own halving, which says so in ct->reason. */
    size_t ring = st_cpu_ring_bytes_for(0);
    /* user stacks only for the perf samples, and only where something will unwind them */
    uint32_t ustack = unwinds ? opt->cpu_user_stack : 0;
    st_cpu_config cfg = {hybrid ? UINT64_MAX : period, ustack ? st_cpu_user_stack_ring(ustack) : ring, 0, 0, ustack};
    *status = st_cpu_thread_open(ct, 0, &cfg);
    st_cpu_timer *tm = NULL;
    if (samples && (hybrid || *status != ST_CPU_OK)) {
        char why[256];
        if (st_cpu_timer_open(&tm, period, 0, why, sizeof why) != ST_CPU_OK) {
            tm = NULL;
            if (*status == ST_CPU_OK) {
                /* no signal sampler: perf samples, without the GIL state */
                st_cpu_thread_close(ct);
                cfg.period_ns = period;
                *status = st_cpu_thread_open(ct, 0, &cfg);
            }
            if (!ct->reason[0]) snprintf(ct->reason, sizeof ct->reason, "%s", why);
            else {
                size_t len = strlen(ct->reason);
                snprintf(ct->reason + len, sizeof ct->reason - len, "; %s", why);
            }
        }
    }
    ct->timer = tm;
    if (*status != ST_CPU_OK && tm) *status = ST_CPU_TIMER_MODE;
    if (*status == ST_CPU_OK) {
        /* the sched_switch tracepoint where allowed (its stacks hold the
         * kernel's frames and the state), else the context-switch event */
        st_cpu_thread *w = calloc(1, sizeof *w);
        if (w && st_cpusched_open(w, ring / 2) != ST_CPU_OK) {
            st_cpu_config wc = {0, ring / 2, 0, 1, 0};
            st_cpu_thread_open(w, 0, &wc); /* refused: kept closed, for its reason */
        }
        ct->waits = w;
    }
    return ct;
}

void st_cpurec_discard(st_cpu_thread *ct)
{
    if (!ct) return;
    st_cpu_timer_close(ct->timer);
    ct->timer = NULL;
    if (ct->waits) st_cpu_thread_close(ct->waits);
    free(ct->waits);
    ct->waits = NULL;
    st_cpu_thread_close(ct);
    free(ct);
}

/* ---- stacks ---- */

static uint64_t frames_hash(const uint64_t *f, uint32_t n)
{
    uint64_t h = 0xcbf29ce484222325ull ^ n;
    for (uint32_t i = 0; i < n; i++) {
        h ^= f[i];
        h *= 0x100000001b3ull;
        h ^= h >> 29;
    }
    return h;
}

/* Adds a to the open-addressed set *tab (0: an empty slot). */
static int set_add(uint64_t **tab_p, size_t *cap_p, size_t *n_p, uint64_t a)
{
    if (a == 0) return 0;
    if ((*n_p + 1) * 2 > *cap_p) {
        size_t cap = *cap_p ? *cap_p * 2 : 1024;
        uint64_t *tab = calloc(cap, sizeof *tab);
        if (!tab) return -1;
        for (size_t i = 0; i < *cap_p; i++) {
            uint64_t v = (*tab_p)[i];
            if (!v) continue;
            size_t h = (size_t)((v * 0x9e3779b97f4a7c15ull) >> 20) & (cap - 1);
            while (tab[h]) h = (h + 1) & (cap - 1);
            tab[h] = v;
        }
        free(*tab_p);
        *tab_p = tab;
        *cap_p = cap;
    }
    size_t h = (size_t)((a * 0x9e3779b97f4a7c15ull) >> 20) & (*cap_p - 1);
    while ((*tab_p)[h]) {
        if ((*tab_p)[h] == a) return 0;
        h = (h + 1) & (*cap_p - 1);
    }
    (*tab_p)[h] = a;
    (*n_p)++;
    return 0;
}

static int is_py_addr(uint64_t a) { return a >= ST_CPU_PY_ADDR_BASE && a - ST_CPU_PY_ADDR_BASE < ST_CPU_PY_ADDR_SPAN; }

/* A frame address, for the symbols and lines at close: a Python frame's
 * synthetic one is named from its py_name, never looked up in the files. */
static int addr_note(st_cpurec *r, uint64_t a)
{
    if (is_py_addr(a)) return set_add(&r->py_addrs, &r->py_addrs_cap, &r->n_py_addrs, a);
    return set_add(&r->addrs, &r->addrs_cap, &r->n_addrs, a);
}

/* The id of the stack f[0..n), stored in cpu_stacks when new; UINT32_MAX
 * without memory. */
static uint32_t stack_id(st_cpurec *r, const uint64_t *f, uint32_t n)
{
    if ((r->n_stacks + 1) * 2 > r->stacks_cap) {
        size_t cap = r->stacks_cap ? r->stacks_cap * 2 : 1024;
        stack_slot *tab = calloc(cap, sizeof *tab);
        if (!tab) return UINT32_MAX;
        for (size_t i = 0; i < r->stacks_cap; i++) {
            if (!r->stacks[i].hash) continue;
            size_t h = (size_t)r->stacks[i].hash & (cap - 1);
            while (tab[h].hash) h = (h + 1) & (cap - 1);
            tab[h] = r->stacks[i];
        }
        free(r->stacks);
        r->stacks = tab;
        r->stacks_cap = cap;
    }
    uint64_t hash = frames_hash(f, n) | 1; /* 0 marks an empty slot */
    size_t h = (size_t)hash & (r->stacks_cap - 1);
    while (r->stacks[h].hash) {
        stack_slot *s = &r->stacks[h];
        if (s->hash == hash && s->n == n && memcmp(r->pool + s->off, f, n * sizeof *f) == 0) return s->id;
        h = (h + 1) & (r->stacks_cap - 1);
    }
    if (r->pool_len + n > r->pool_cap) {
        size_t cap = r->pool_cap ? r->pool_cap : 4096;
        while (cap < r->pool_len + n) cap *= 2;
        uint64_t *p = realloc(r->pool, cap * sizeof *p);
        if (!p) return UINT32_MAX;
        r->pool = p;
        r->pool_cap = cap;
    }
    if (n) memcpy(r->pool + r->pool_len, f, n * sizeof *f);
    uint32_t id = r->n_stacks++;
    r->stacks[h] = (stack_slot){hash, id, n, r->pool_len};
    r->pool_len += n;
    for (uint32_t i = 0; i < n; i++) addr_note(r, f[i]);
    if (n && !is_py_addr(f[0])) set_add(&r->ips, &r->ips_cap, &r->n_ips, f[0]);
    r->scratch.len = 0;
    if (st_cpu_stack_put(&r->scratch, f, n) == 0) {
        st_val v[3] = {ST_VINT(id), ST_VINT(n), ST_VBLOB(r->scratch.data, r->scratch.len)};
        st_store_row(r->store, ST_S_CPU_STACK, 3, v);
    }
    return id;
}

/* ---- the queue ---- */

static void queue_push(st_cpurec_thread *c, const st_cpu_rec *rec)
{
    if (c->q_head + c->q_len == c->q_cap) {
        if (c->q_head > c->q_cap / 2) {
            memmove(c->q, c->q + c->q_head, c->q_len * sizeof *c->q);
            c->q_head = 0;
        } else {
            size_t cap = c->q_cap ? c->q_cap * 2 : 256;
            st_cpu_rec *q = realloc(c->q, cap * sizeof *q);
            if (!q) return; /* the record is left out; the counts still say it came */
            c->q = q;
            c->q_cap = cap;
        }
    }
    c->q[c->q_head + c->q_len++] = *rec;
}

/* A record of the signal sampler, drained after the perf ring's: put in
 * time order among the records not yet encoded. */
static void queue_insert(st_cpurec_thread *c, const st_cpu_rec *rec)
{
    size_t before = c->q_len;
    queue_push(c, rec);
    if (c->q_len == before) return;
    st_cpu_rec *q = c->q + c->q_head;
    for (size_t i = c->q_len - 1; i > 0 && q[i - 1].ts_ns > q[i].ts_ns; i--) {
        st_cpu_rec x = q[i];
        q[i] = q[i - 1];
        q[i - 1] = x;
    }
}

/* Gives each pending wait-stack sample to its switch-out record: the first
 * switch-out in the queue stamped at or after it (less WAIT_SLACK_NS), when
 * within WAIT_MATCH_NS and blocked. A sample whose switch-out is not in
 * the queue yet waits (the rings are drained one after the other); one
 * older than the grace is dropped. */
static void waits_match(st_cpurec_thread *c, int64_t now_ns)
{
    uint32_t kept = 0;
    st_cpu_rec *q = c->q + c->q_head;
    for (uint32_t k = 0; k < c->n_wq; k++) {
        wait_sample w = c->wq[k];
        st_cpu_rec *after = NULL, *before = NULL; /* the first switch-out at or after w; the last before it */
        for (size_t i = c->q_len; i > 0; i--) { /* from the newest back */
            st_cpu_rec *x = &q[i - 1];
            if (x->ts_ns < w.ts_ns - WAIT_SLACK_NS) break;
            if (x->kind != ST_CPU_REC_OUT && x->kind != ST_CPU_REC_PREEMPTED && x->kind != ST_CPU_REC_OUT_STACK)
                continue;
            if (x->ts_ns >= w.ts_ns) after = x;
            else if (!before) before = x;
        }
        st_cpu_rec *hit = after ? after : before;
        if (hit) {
            if (hit->kind == ST_CPU_REC_OUT && hit->ts_ns - w.ts_ns <= WAIT_MATCH_NS) {
                hit->kind = w.state ? ST_CPU_REC_OUT_SCHED : ST_CPU_REC_OUT_STACK;
                hit->stack = w.stack;
                hit->n = w.n_kernel;
                hit->flags = (uint32_t)w.state;
                c->wait_stacks++;
            }
            continue;
        }
        if (now_ns - w.ts_ns < ST_CPUREC_GRACE_NS) c->wq[kept++] = w;
    }
    c->n_wq = kept;
}
static void on_switch(void *ctx, const st_cpu_thread *t, const st_cpu_switch *s)
{
    (void)t;
    st_cpurec *r = ctx;
    st_cpurec_thread *c = r->cur;
    st_cpu_rec rec = {0};
    rec.kind = !s->out ? ST_CPU_REC_IN : s->preempted ? ST_CPU_REC_PREEMPTED : ST_CPU_REC_OUT;
    rec.ts_ns = st_clock_mono_to_ns(s->t_ns);
    c->last_rec_ns = rec.ts_ns;
    c->out_ns = rec.kind == ST_CPU_REC_OUT ? rec.ts_ns : -1;
    c->out_examined = 0;
    c->switches++;
    queue_push(c, &rec);
}

/* A wait stack, for the switch-out record that follows: a context-switch
 * event's sample (state 0), or a sched_switch sample whose first n_kernel
 * frames are the kernel's (they lie in no mapping: only the user part is
 * cut). */
static void wait_push(st_cpurec *r, st_cpurec_thread *c, const st_cpu_sample *s, uint32_t n_kernel, int state)
{
    size_t n = n_kernel + st_cpu_chain_cut(&r->maps, s->frames + n_kernel, s->n_frames - n_kernel);
    uint32_t stack = stack_id(r, s->frames, (uint32_t)n);
    if (stack == UINT32_MAX) return;
    if (c->n_wq == WAITS_PENDING) memmove(c->wq, c->wq + 1, --c->n_wq * sizeof *c->wq);
    c->wq[c->n_wq++] = (wait_sample){st_clock_mono_to_ns(s->t_ns), stack, n_kernel, state};
}

static void on_sched(void *ctx, const st_cpu_thread *t, const st_cpu_sample *s, uint32_t n_kernel, int state)
{
    (void)t;
    st_cpurec *r = ctx;
    wait_push(r, r->cur, s, n_kernel, state);
}

/* The sample's stack unwound from its registers and stack copy, in
 * r->uw_frames, cut at the first frame outside the executable mappings as
 * a chain is: the frames kept (0 when there is no unwinder). The Dwfl is
 * reported again when the maps, read again on a frame outside them, have
 * changed (a library loaded or unloaded since). */
static uint64_t maps_hash(const st_cpu_maps *m)
{
    uint64_t h = 0xcbf29ce484222325ull ^ m->n;
    for (size_t i = 0; i < m->n; i++) {
        h = (h ^ m->v[i].lo) * 0x100000001b3ull;
        h = (h ^ m->v[i].hi) * 0x100000001b3ull;
    }
    return h;
}

static size_t unwind(st_cpurec *r, const st_cpu_sample *s)
{
    if (!r->uw && !r->uw_failed) {
        r->uw = st_cpu_unwind_open(r->uw_reason, sizeof r->uw_reason);
        r->uw_failed = !r->uw;
        r->uw_loads = r->maps.n_loads;
        r->uw_maps_hash = maps_hash(&r->maps);
    }
    if (!r->uw) return 0;
    int64_t t0 = st_now_ns();
    /* A garbage frame makes the maps be read again (at most every 100 ms);
     * only a change of the executable mappings costs a new report, which
     * drops every module's CFI read so far. */
    if (r->maps.n_loads != r->uw_loads) {
        r->uw_loads = r->maps.n_loads;
        uint64_t h = maps_hash(&r->maps);
        if (h != r->uw_maps_hash) {
            r->uw_maps_hash = h;
            r->uw_gen++;
        }
    }
    size_t m = st_cpu_unwind(r->uw, s->ustack, (pid_t)s->tid, r->uw_gen, r->uw_frames, ST_CPU_UNWIND_MAX_FRAMES);
    m = st_cpu_chain_cut(&r->maps, r->uw_frames, m);
    r->uw_ns += st_now_ns() - t0;
    return m;
}

static void on_sample(void *ctx, const st_cpu_thread *t, const st_cpu_sample *s)
{
    st_cpurec *r = ctx;
    st_cpurec_thread *c = r->cur;
    if (t && t == c->waits) {
        wait_push(r, c, s, 0, 0);
        return;
    }
    size_t n = st_cpu_chain_cut(&r->maps, s->frames, s->n_frames);
    const uint64_t *frames = s->frames;
    if (s->ustack) {
        size_t m = unwind(r, s);
        if (m > n) { /* longer than the frame-pointer chain */
            frames = r->uw_frames;
            n = m;
            r->n_dwarf++;
        } else {
            r->n_fp++;
        }
    }
    uint32_t stack = stack_id(r, frames, (uint32_t)n);
    int64_t ts = st_clock_mono_to_ns(s->t_ns);
    st_cpu_rec rec = {0};
    rec.kind = ST_CPU_REC_SAMPLE;
    rec.ts_ns = ts;
    rec.stack = stack;
    if (s->gil != ST_CPU_GIL_NO_PROBE) {
        rec.kind = ST_CPU_REC_SAMPLE_FLAGS;
        rec.flags = s->gil == 1 ? ST_CPU_FLAG_GIL_KNOWN | ST_CPU_FLAG_GIL_HELD
                    : s->gil == 0 ? ST_CPU_FLAG_GIL_KNOWN : 0;
    }
    if (rec.stack == UINT32_MAX) return; /* no memory: left out */
    c->samples++;
    if (rec.flags & ST_CPU_FLAG_GIL_KNOWN) c->gil_samples++;
    if (c->timer) {
        if (ts > c->last_rec_ns) c->last_rec_ns = ts;
        queue_insert(c, &rec);
    } else {
        c->last_rec_ns = ts;
        queue_push(c, &rec);
    }
}

static void on_lost(void *ctx, const st_cpu_thread *t, uint64_t n_lost, int64_t t_ns)
{
    (void)t;
    st_cpurec *r = ctx;
    st_cpurec_thread *c = r->cur;
    st_cpu_rec rec = {0};
    rec.kind = ST_CPU_REC_LOST;
    rec.ts_ns = t_ns > 0 ? st_clock_mono_to_ns(t_ns) : c->last_rec_ns;
    rec.n = n_lost;
    c->lost += n_lost;
    queue_push(c, &rec);
}

/* ---- schedstat windows ---- */

static win_task *task_find(st_cpurec *r, int64_t tid)
{
    for (size_t i = 0; i < r->n_tasks; i++)
        if (r->tasks[i].tid == tid) return &r->tasks[i];
    if (r->n_tasks == r->tasks_cap) {
        size_t cap = r->tasks_cap ? r->tasks_cap * 2 : 64;
        win_task *p = realloc(r->tasks, cap * sizeof *p);
        if (!p) return NULL;
        r->tasks = p;
        r->tasks_cap = cap;
    }
    win_task *k = &r->tasks[r->n_tasks++];
    memset(k, 0, sizeof *k);
    k->tid = tid;
    k->fd = -1;
    return k;
}

/* Reads the thread's schedstat into v: 0, or -1 when it is gone. A thread
 * first seen, or whose descriptor says its thread ended while the id is
 * listed again (a new thread given the same id), starts from zero: born
 * since the last scan, its whole use is in this window. */
static int task_read(win_task *k, uint64_t v[3])
{
    if (k->fd >= 0 && st_cpuproc_schedstat_read(k->fd, v) == 0) return 0;
    if (k->fd >= 0) close(k->fd);
    memset(k->v, 0, sizeof k->v);
    st_cpuproc_comm(k->tid, k->name, sizeof k->name);
    k->fd = st_cpuproc_schedstat_open(k->tid);
    return k->fd >= 0 ? st_cpuproc_schedstat_read(k->fd, v) : -1;
}

static int64_t registered_id(const st_cpurec *r, int64_t tid)
{
    for (uint32_t i = 0; i < r->n_threads; i++)
        if (r->threads[i]->os_tid == tid) return r->threads[i]->id;
    return -1;
}

/* Reads every thread's schedstat; store: one cpu_windows row per thread
 * that ran or waited since the last scan (the window [win_t0_ns, now]).
 * A thread that ended since the last scan loses its use in this window. */
static void window_scan(st_cpurec *r, int64_t step, int store)
{
    int64_t now = st_now_ns();
    long n = st_cpuproc_tasks(&r->tids, &r->tids_cap);
    uint32_t gen = ++r->gen;
    int any = 0;
    if (store) st_oncpu_begin(r->oncpu, step, now - r->win_t0_ns);
    for (long i = 0; i < n; i++) {
        uint64_t v[3];
        win_task *k = task_find(r, r->tids[i]);
        if (!k || task_read(k, v) != 0) continue; /* gone, or no schedstat */
        any = 1;
        k->gen = gen;
        uint64_t d[3] = {v[0] - k->v[0], v[1] - k->v[1], v[2] - k->v[2]};
        memcpy(k->v, v, sizeof v);
        if (!store || (d[0] == 0 && d[1] == 0)) continue;
        st_val row[10] = {ST_VINT(r->n_windows), ST_VINT(step), ST_VINT(r->win_t0_ns), ST_VINT(now),
                          ST_VINT(k->tid), ST_VINT(registered_id(r, k->tid)), ST_VTEXT(k->name),
                          ST_VINT(d[0]), ST_VINT(d[1]), ST_VINT(d[2])};
        st_store_row(r->store, ST_S_CPU_WINDOW, 10, row);
        st_oncpu_row(r->oncpu, registered_id(r, k->tid), (int64_t)d[0]);
    }
    if (store) st_oncpu_end(r->oncpu);
    size_t kept = 0;
    for (size_t i = 0; i < r->n_tasks; i++) {
        if (r->tasks[i].gen == gen) r->tasks[kept++] = r->tasks[i];
        else if (r->tasks[i].fd >= 0) close(r->tasks[i].fd);
    }
    r->n_tasks = kept;
    if (!store) r->schedstat = any;
    if (store) r->n_windows++;
    r->win_t0_ns = now;
}

void st_cpurec_step(st_cpurec *r, uint64_t step)
{
    uint32_t every = r->t->opt.profile_interval;
    if (r->schedstat && every && step % every == 0) window_scan(r, (int64_t)step, 1);
}

/* ---- the writer's calls ---- */

st_cpurec *st_cpurec_create(st_trace *t, st_store *store)
{
    st_cpurec *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->sink = calloc(1, sizeof *r->sink);
    if (!r->sink) {
        free(r);
        return NULL;
    }
    r->t = t;
    r->store = store;
    r->sink->ctx = r;
    r->sink->on_switch = on_switch;
    r->sink->on_sample = on_sample;
    r->sink->on_lost = on_lost;
    r->sink->on_sched = on_sched;
    st_cpu_maps_load(&r->maps, NULL);
    r->period_ns = t->opt.cpu_period_ns ? t->opt.cpu_period_ns : ST_CPU_DEFAULT_PERIOD_NS;
    st_store_exec(store, st_cpu_schema_sql);
    meta_u64(r, "cpu_period_ns", r->period_ns == UINT64_MAX ? 0 : r->period_ns);
    meta_u64(r, "cpu_ring_bytes", st_cpu_ring_bytes_for(0));
    meta_text(r, "cpu_lost_records", "0");
    /* why threads block: from /proc, "proc+stacks" once a thread's
     * wait-stack event opened, "proc+sched" once its sched_switch
     * tracepoint event did (docs/cpu.md) */
    meta_text(r, "cpu_block_reasons", "proc");
    snprintf(r->w_levels, sizeof r->w_levels, "proc");
    meta_text(r, "cpu_wait_stacks", "0");
    meta_u64(r, "cpu_block_min_ns", ST_CPUREC_BLOCK_MIN_NS);
    meta_text(r, "cpu_blocks", "0");
    window_scan(r, -1, 0); /* the first window's start */
    meta_text(r, "cpu_window_source", r->schedstat ? "schedstat" : "none");
    if (t->opt.cpu_user_stack) {
        /* the unwinding asked: meta says what ran (st_cpurec_commit) */
        meta_u64(r, "cpu_user_stack", t->opt.cpu_user_stack);
        const char *missing = st_cpu_unwind_missing();
        if (missing) snprintf(r->uw_reason, sizeof r->uw_reason, "%s", missing);
        else meta_u64(r, "cpu_ring_bytes", st_cpu_user_stack_ring(t->opt.cpu_user_stack));
    }
    return r;
}

st_cpurec_thread *st_cpurec_thread_add(st_cpurec *r, uint32_t id, int64_t os_tid, st_cpu_thread *ct,
                                       int status, int64_t start_ns)
{
    st_cpurec_thread *c = calloc(1, sizeof *c);
    if (!c || st_cpu_chunk_start(&c->enc)) {
        free(c);
        st_cpurec_discard(ct);
        return NULL;
    }
    c->id = id;
    c->os_tid = os_tid;
    c->status = ct ? status : ST_CPU_ERROR;
    c->start_ns = start_ns;
    c->last_rec_ns = start_ns;
    c->out_ns = -1;
    if (ct && status == ST_CPU_OK) {
        c->ct = ct;
        c->ring_bytes = (int64_t)ct->data_bytes;
    } else if (ct) {
        st_cpu_thread_close(ct); /* keeps reason and err */
        c->ct = ct;
    }
    if (ct) {
        c->timer = ct->timer;
        c->waits = ct->waits;
        c->has_waits = c->waits && c->waits->map;
        if (c->timer && status != ST_CPU_OK) c->ring_bytes = (int64_t)c->timer->ring_bytes;
        if (c->timer) c->period_timer_ns = c->timer->period_ns;
        c->sampler = c->timer ? 2 : status == ST_CPU_OK && ct->period_ns ? 1 : 0;
    }
    c->dirty = 1;
    if (r->n_threads < ST_MAX_THREADS) r->threads[r->n_threads++] = c;
    return c;
}

/* The perf ring (switches, and samples unless the signal sampler takes
 * them), then the wait-stack ring, whose samples precede their switch-out
 * records in time (so every one whose record was just read is in it now),
 * then the signal sampler's buffer. The records passed. */
static long drain_rings(st_cpurec *r, st_cpurec_thread *c, int64_t now_ns)
{
    long n = 0;
    if (c->ct && c->ct->fd >= 0) n += st_cpu_thread_drain(c->ct, r->sink);
    if (c->waits && c->waits->fd >= 0) {
        if (c->waits->sched) st_cpusched_drain(c->waits, r->sink);
        else st_cpu_thread_drain(c->waits, r->sink);
        if (c->n_wq) waits_match(c, now_ns);
    }
    if (c->timer) {
        n += st_cpu_timer_drain(c->timer, r->sink, c->ct);
        uint64_t lost = __atomic_load_n(&c->timer->lost, __ATOMIC_RELAXED);
        if (lost != c->timer_lost) { /* the buffer was full: as the kernel's lost records */
            st_cpu_rec rec = {0};
            rec.kind = ST_CPU_REC_LOST;
            rec.ts_ns = c->last_rec_ns;
            rec.n = lost - c->timer_lost;
            c->lost += rec.n;
            c->timer_lost = lost;
            queue_push(c, &rec);
            n++;
        }
    }
    return n;
}

/* The thread's last switch record is a blocked switch-out at least
 * ST_CPUREC_BLOCK_MIN_NS old, not yet examined: what /proc says it sleeps
 * in, stored with the block's time. The ring is drained again after the
 * read: a switch record that arrived meanwhile means the thread woke (and
 * may sleep elsewhere now), and the reason is left out rather than given
 * to the wrong block. */
static void block_reason(st_cpurec *r, st_cpurec_thread *c, int64_t now_ns)
{
    if (c->out_ns < 0 || c->out_examined || now_ns - c->out_ns < ST_CPUREC_BLOCK_MIN_NS) return;
    c->out_examined = 1;
    int64_t out_ns = c->out_ns;
    uint64_t switches = c->switches;
    st_cpu_block b;
    int rc = st_cpuproc_block(c->os_tid, &b);
    drain_rings(r, c, now_ns);
    if (rc <= 0 || c->switches != switches) return;
    st_val v[8] = {ST_VINT(c->id),
                   ST_VINT(out_ns),
                   ST_VINT(now_ns),
                   ST_VINT(b.nr),
                   ST_VTEXT(st_cpuproc_syscall_name(b.nr)),
                   ST_VINT((int64_t)b.arg[0]),
                   ST_VINT((int64_t)b.arg[1]),
                   ST_VTEXT(b.wchan)};
    st_store_row(r->store, ST_S_CPU_BLOCK, 8, v);
    c->blocks++;
    r->n_blocks++;
}

void st_cpurec_drain(st_cpurec *r, st_cpurec_thread *c)
{
    st_cpurec_pysamples(r);
    int perf = c->ct && c->ct->fd >= 0;
    if (!perf && !c->timer) return;
    r->cur = c;
    int64_t now = st_now_ns();
    if (drain_rings(r, c, now) > 0) c->dirty = 1;
    if (perf) block_reason(r, c, now);
    r->cur = NULL;
}

/* The stage open at ts_ns, for a record older than the last encoded event. */
static uint32_t stage_at(const st_cpurec_thread *c, int64_t ts_ns, int *known)
{
    uint64_t kept = c->n_hist < HISTORY ? c->n_hist : HISTORY;
    for (uint64_t k = 0; k < kept; k++) {
        const stage_change *h = &c->hist[(c->n_hist - 1 - k) % HISTORY];
        if (h->ts_ns <= ts_ns) {
            *known = 1;
            return h->top;
        }
    }
    /* Before every change kept: before the thread's first event no range was
     * open; past a wrapped history nothing is known. */
    *known = c->n_hist <= HISTORY;
    return ST_CPU_NO_STAGE;
}

static void put(st_cpurec *r, st_cpurec_thread *c, st_cpu_rec *rec)
{
    (void)r;
    if (st_cpu_put(&c->enc, rec) == 0 && c->enc.buf.len >= CPU_CHUNK_BYTES) st_cpurec_flush(r, c);
}

void st_cpurec_emit(st_cpurec *r, st_cpurec_thread *c, int64_t horizon_ns, uint32_t top)
{
    while (c->q_len && c->q[c->q_head].ts_ns < horizon_ns) {
        st_cpu_rec rec = c->q[c->q_head++];
        c->q_len--;
        if (rec.kind == ST_CPU_REC_SAMPLE || rec.kind == ST_CPU_REC_SAMPLE_FLAGS || rec.kind == ST_CPU_REC_PY_SAMPLE) {
            if (c->n_hist && rec.ts_ns < c->last_event_ns) {
                int known;
                rec.stage = stage_at(c, rec.ts_ns, &known);
                if (!known) {
                    rec.kind = rec.kind == ST_CPU_REC_SAMPLE        ? ST_CPU_REC_SAMPLE_UNKNOWN
                               : rec.kind == ST_CPU_REC_PY_SAMPLE ? ST_CPU_REC_PY_SAMPLE_UNKNOWN
                                                                  : ST_CPU_REC_SAMPLE_FLAGS_UNKNOWN;
                    c->unknown++;
                }
            } else {
                rec.stage = top;
            }
        }
        put(r, c, &rec);
    }
    if (!c->q_len) c->q_head = 0;
}

void st_cpurec_event(st_cpurec *r, st_cpurec_thread *c, int64_t ts_ns, uint32_t top_before,
                     uint32_t top_after)
{
    if (c->q_len) st_cpurec_emit(r, c, ts_ns, top_before);
    c->hist[c->n_hist % HISTORY] = (stage_change){ts_ns, top_after};
    c->n_hist++;
    c->last_event_ns = ts_ns;
}

static void read_cpu_ns(st_cpurec_thread *c)
{
    uint64_t v;
    if (c->ct && c->ct->fd >= 0 && read(c->ct->fd, &v, sizeof v) == (ssize_t)sizeof v && v != c->cpu_ns) {
        c->cpu_ns = v;
        c->dirty = 1;
    } else if ((!c->ct || c->ct->fd < 0) && c->timer) { /* no event: the thread's CPU clock */
        int64_t ns = st_cpu_timer_cpu_ns(c->timer);
        if (ns >= 0 && (uint64_t)ns != c->cpu_ns) {
            c->cpu_ns = (uint64_t)ns;
            c->dirty = 1;
        }
    }
}

/* Every thread's timer fires on its own CPU clock, so a stopped timer
 * sends nothing more; what it wrote is drained, then it is freed. */
static void thread_close(st_cpurec *r, st_cpurec_thread *c, uint32_t top)
{
    st_cpu_timer_stop(c->timer);
    st_cpurec_drain(r, c);
    st_cpurec_emit(r, c, INT64_MAX, top);
    c->retired = 1;
    read_cpu_ns(c);
    if (c->ct && c->ct->fd >= 0) {
        st_cpu_thread_close(c->ct);
        c->dirty = 1;
    }
    if (c->waits && c->waits->fd >= 0) st_cpu_thread_close(c->waits);
    if (c->timer) {
        c->period_timer_ns = c->timer->period_ns;
        c->overruns = c->timer->overruns;
        st_cpu_timer_close(c->timer);
        c->timer = NULL;
        if (c->ct) c->ct->timer = NULL;
        c->dirty = 1;
    }
}

void st_cpurec_retire(st_cpurec *r, st_cpurec_thread *c, uint32_t top) { thread_close(r, c, top); }

void st_cpurec_flush(st_cpurec *r, st_cpurec_thread *c)
{
    if (c->enc.n_records == 0) return;
    st_val v[5] = {ST_VINT(c->id), ST_VINT(c->enc.t0_ns), ST_VINT(c->enc.t1_ns), ST_VINT(c->enc.n_records),
                   ST_VBLOB(c->enc.buf.data, c->enc.buf.len)};
    st_store_row(r->store, ST_S_CPU_CHUNK, 5, v);
    st_cpu_chunk_start(&c->enc);
}

static void thread_row(st_cpurec *r, st_cpurec_thread *c)
{
    const st_cpu_thread *ct = c->ct;
    const char *reason = ct ? ct->reason : "out of memory at registration";
    int64_t period = c->sampler == 2 ? (int64_t)c->period_timer_ns
                     : ct && ct->period_ns != UINT64_MAX ? (int64_t)ct->period_ns : 0;
    st_val v[12] = {ST_VINT(c->id),
                    ST_VINT(c->os_tid),
                    ST_VTEXT(status_name(c->status)),
                    ST_VTEXT(reason),
                    ST_VINT(period),
                    ST_VINT(c->ring_bytes),
                    ST_VINT(ct ? (int64_t)ct->refused_bytes : 0),
                    ST_VINT(c->start_ns),
                    ST_VINT(c->cpu_ns),
                    ST_VINT(c->switches),
                    ST_VINT(c->samples),
                    ST_VINT(c->lost)};
    st_store_row(r->store, ST_S_CPU_THREAD, 12, v);
    c->dirty = 0;
}

/* The signal sampler's meta keys, once, with the first thread it samples. */
static void timer_meta(st_cpurec *r, const st_cpurec_thread *c)
{
    if (r->timer_written || !c->timer) return;
    const char *src;
    long hz = st_cpu_timer_tick_hz(&src);
    meta_u64(r, "cpu_timer_period_ns", c->timer->period_ns);
    meta_u64(r, "cpu_timer_signal", (uint64_t)c->timer->signo);
    meta_u64(r, "cpu_timer_tick_hz", (uint64_t)hz);
    meta_text(r, "cpu_timer_tick_source", src);
    r->timer_written = 1;
}

static void set_meta(st_cpurec *r, const char *key, char *last, size_t size, const char *value)
{
    if (strcmp(value, last) == 0) return;
    meta_text(r, key, value);
    snprintf(last, size, "%s", value);
}

/* meta cpu_unwind: dwarf when some thread's samples carry stack copies and
 * the unwinder opened, else fp with cpu_unwind_reason (the build, libdw's
 * error, or the first thread whose event was opened without the copies);
 * and the samples' counts by where their stack came from. */
static void unwind_meta(st_cpurec *r)
{
    const char *why = r->uw_reason[0] ? r->uw_reason : NULL;
    int copies = 0;
    for (uint32_t i = 0; i < r->n_threads; i++) {
        const st_cpurec_thread *c = r->threads[i];
        if (c->sampler != 1 || !c->ct) continue;
        if (c->ct->user_stack) copies = 1;
        else if (!why && c->ct->user_stack_reason[0]) why = c->ct->user_stack_reason;
    }
    if (!r->n_threads) return;
    int dwarf = copies && !r->uw_failed && !st_cpu_unwind_missing();
    if (!dwarf && !why) why = "no thread's samples come from its perf event (the signal sampler's carry no stack copies)";
    set_meta(r, "cpu_unwind", r->w_unwind, sizeof r->w_unwind, dwarf ? "dwarf" : "fp");
    if (why && !r->uw_reason_written) {
        meta_text(r, "cpu_unwind_reason", why);
        r->uw_reason_written = 1;
    }
    if (r->n_dwarf != r->w_dwarf || r->n_fp != r->w_fp) {
        meta_u64(r, "cpu_unwind_dwarf_samples", r->w_dwarf = r->n_dwarf);
        meta_u64(r, "cpu_unwind_fp_samples", r->w_fp = r->n_fp);
        meta_u64(r, "cpu_unwind_ns", (uint64_t)r->uw_ns);
    }
}

/* ---- Python-frame samples (st_cpu_sample_add) ---- */

static uint64_t name_hash(const char *q, size_t ql, const char *f, size_t fl)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < ql; i++) h = (h ^ (uint8_t)q[i]) * 0x100000001b3ull;
    h = (h ^ 0xff) * 0x100000001b3ull; /* no byte of a name: "a" "bc" differs from "ab" "c" */
    for (size_t i = 0; i < fl; i++) h = (h ^ (uint8_t)f[i]) * 0x100000001b3ull;
    return h | 1;
}

static int py_name_is(const py_name *n, const char *q, size_t ql, const char *f, size_t fl)
{
    return n->file_off == 4 + ql + 1 && memcmp(n->name + 4, q, ql) == 0 && n->name[4 + ql] == ':' &&
           strlen(n->name + n->file_off) == fl && memcmp(n->name + n->file_off, f, fl) == 0;
}

/* The id of the function (qualname, file), interned; UINT32_MAX without
 * memory or past the ids that an address can hold. */
static uint32_t py_name_id(st_cpurec *r, const st_pyq_frame *fr)
{
    uint64_t h = name_hash(fr->qualname, fr->qualname_len, fr->file, fr->file_len);
    if ((r->n_py_names + 1) * 2 > r->py_index_cap) {
        uint32_t cap = r->py_index_cap ? r->py_index_cap * 2 : 1024;
        uint32_t *ix = calloc(cap, sizeof *ix);
        if (!ix) return UINT32_MAX;
        for (uint32_t i = 0; i < r->n_py_names; i++) {
            uint32_t k = (uint32_t)r->py_names[i].hash & (cap - 1);
            while (ix[k]) k = (k + 1) & (cap - 1);
            ix[k] = i + 1;
        }
        free(r->py_index);
        r->py_index = ix;
        r->py_index_cap = cap;
    }
    uint32_t k = (uint32_t)h & (r->py_index_cap - 1);
    while (r->py_index[k]) {
        const py_name *n = &r->py_names[r->py_index[k] - 1];
        if (n->hash == h && py_name_is(n, fr->qualname, fr->qualname_len, fr->file, fr->file_len))
            return r->py_index[k] - 1;
        k = (k + 1) & (r->py_index_cap - 1);
    }
    if ((uint64_t)r->n_py_names + 1 >= (ST_CPU_PY_ADDR_SPAN >> 20)) return UINT32_MAX;
    if (r->n_py_names == r->cap_py_names) {
        uint32_t cap = r->cap_py_names ? r->cap_py_names * 2 : 256;
        py_name *v = realloc(r->py_names, cap * sizeof *v);
        if (!v) return UINT32_MAX;
        r->py_names = v;
        r->cap_py_names = cap;
    }
    size_t len = 4 + fr->qualname_len + 1 + fr->file_len;
    char *name = malloc(len + 1);
    if (!name) return UINT32_MAX;
    memcpy(name, "py::", 4);
    memcpy(name + 4, fr->qualname, fr->qualname_len);
    name[4 + fr->qualname_len] = ':';
    if (fr->file_len) memcpy(name + 5 + fr->qualname_len, fr->file, fr->file_len);
    name[len] = 0;
    /* control bytes (and a NUL inside a name) as the perf map's: '?' */
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f) name[i] = '?';
    uint32_t id = r->n_py_names++;
    r->py_names[id] = (py_name){name, (uint32_t)(5 + fr->qualname_len), h};
    r->py_index[k] = id + 1;
    return id;
}

static st_cpurec_thread *thread_by_id(st_cpurec *r, uint32_t id)
{
    for (uint32_t i = 0; i < r->n_threads; i++)
        if (r->threads[i]->id == id) return r->threads[i];
    return NULL;
}

void st_cpurec_pysamples(st_cpurec *r)
{
    if (!r) return;
    st_pyq_take(&r->py_batch);
    r->py_queue_lost = r->py_batch.lost;
    size_t off = 0;
    st_pyq_sample *s = &r->py_sample;
    while (st_pyq_next(&r->py_batch, &off, s)) {
        st_cpurec_thread *c = thread_by_id(r, s->thread);
        if (!c || c->retired) {
            r->py_late++;
            continue;
        }
        uint32_t n = 0;
        for (uint32_t i = 0; i < s->n_frames; i++) {
            uint32_t id = py_name_id(r, &s->frames[i]);
            if (id == UINT32_MAX) break; /* no memory: the stack is cut there */
            uint32_t line = s->frames[i].line < (1u << 20) ? s->frames[i].line : 0;
            r->py_frames[n++] = ST_CPU_PY_ADDR_BASE + ((uint64_t)id << 20) + line;
        }
        st_cpu_rec rec = {0};
        rec.kind = ST_CPU_REC_PY_SAMPLE;
        rec.ts_ns = s->ts_ns;
        rec.stack = stack_id(r, r->py_frames, n);
        if (rec.stack == UINT32_MAX) {
            r->py_late++;
            continue;
        }
        c->py_samples++;
        if (rec.ts_ns > c->last_rec_ns) c->last_rec_ns = rec.ts_ns;
        queue_insert(c, &rec);
        c->dirty = 1;
    }
}

/* meta python_frames_samples and python_frames_lost, once a sample came. */
static void py_meta(st_cpurec *r)
{
    uint64_t samples = 0;
    for (uint32_t i = 0; i < r->n_threads; i++) samples += r->threads[i]->py_samples;
    uint64_t lost = r->py_queue_lost + r->py_late;
    if (!r->py_meta_written && !samples && !lost) return;
    if (!r->py_meta_written || samples != r->w_py_samples) meta_u64(r, "python_frames_samples", r->w_py_samples = samples);
    if (!r->py_meta_written || lost != r->w_py_lost) meta_u64(r, "python_frames_lost", r->w_py_lost = lost);
    r->py_meta_written = 1;
}

/* The Python frames' cpu_symbols rows (no mapping; sym_offset the line)
 * and cpu_lines rows (depth 0: the function, its file and line), after
 * the files' (which replace the tables' rows first). */
static void py_symbols_store(st_cpurec *r)
{
    for (size_t i = 0; i < r->py_addrs_cap; i++) {
        uint64_t a = r->py_addrs ? r->py_addrs[i] : 0;
        if (!a) continue;
        uint64_t id = (a - ST_CPU_PY_ADDR_BASE) >> 20;
        int64_t line = (int64_t)((a - ST_CPU_PY_ADDR_BASE) & ((1u << 20) - 1));
        if (id >= r->n_py_names) continue;
        const py_name *n = &r->py_names[id];
        st_val v[5] = {ST_VINT((int64_t)a), ST_VINT(-1), ST_VINT(0), ST_VTEXT(n->name), ST_VINT(line)};
        st_store_row(r->store, ST_S_CPU_SYMBOL, 5, v);
        st_val l[6] = {ST_VINT((int64_t)a), ST_VINT(0), ST_VTEXT(n->name), ST_VTEXT(n->name + n->file_off),
                       ST_VINT(line), ST_VINT(0)};
        st_store_row(r->store, ST_S_CPU_LINE, 6, l);
    }
}

void st_cpurec_commit(st_cpurec *r, int final, int interrupted)
{
    if (!r) return;
    uint64_t samples = 0, switches = 0, lost = 0, unknown = 0, cpu_ns = 0, overruns = 0, wait_stacks = 0, gil = 0;
    int n_ok = 0, n_timer = 0, n_perf_samples = 0, n_waits = 0, n_sched = 0, n_unsched = 0;
    const st_cpurec_thread *first_bad = NULL, *first_note = NULL, *first_wait_bad = NULL;
    for (uint32_t i = 0; i < r->n_threads; i++) {
        st_cpurec_thread *c = r->threads[i];
        read_cpu_ns(c);
        if (c->timer) c->overruns = __atomic_load_n(&c->timer->overruns, __ATOMIC_RELAXED);
        if (c->dirty) thread_row(r, c);
        samples += c->samples;
        switches += c->switches;
        lost += c->lost;
        unknown += c->unknown;
        cpu_ns += c->cpu_ns;
        overruns += c->overruns;
        wait_stacks += c->wait_stacks;
        gil += c->gil_samples;
        n_timer += c->sampler == 2;
        n_perf_samples += c->sampler == 1;
        if (c->has_waits) n_waits++;
        else if (c->waits && !first_wait_bad) first_wait_bad = c;
        if (c->has_waits && c->waits->sched) n_sched++;
        else if (c->status == ST_CPU_OK) n_unsched++;
        timer_meta(r, c);
        if (c->status == ST_CPU_OK) {
            n_ok++;
            if (!first_note && c->ct && c->ct->reason[0]) first_note = c;
        } else if (!first_bad) {
            first_bad = c;
        }
    }
    if (r->n_threads) {
        const char *mode = n_ok ? "perf" : n_timer ? "timer" : status_name(first_bad->status);
        set_meta(r, "cpu_mode", r->w_mode, sizeof r->w_mode, mode);
        const char *sampler = n_timer && n_perf_samples ? "mixed" : n_timer ? "timer" : n_perf_samples ? "perf" : "none";
        set_meta(r, "cpu_sampler", r->w_sampler, sizeof r->w_sampler, sampler);
        set_meta(r, "cpu_block_reasons", r->w_levels, sizeof r->w_levels,
                 n_sched ? "proc+sched" : n_waits ? "proc+stacks" : "proc");
        if (n_unsched && !r->sched_reason_written && st_cpusched_reason()[0]) {
            meta_text(r, "cpu_sched_reason", st_cpusched_reason());
            r->sched_reason_written = 1;
        }
        if (first_wait_bad && !r->wait_reason_written) {
            meta_text(r, "cpu_wait_stacks_reason", first_wait_bad->waits->reason);
            r->wait_reason_written = 1;
        }
        const st_cpurec_thread *why = first_bad ? first_bad : first_note;
        if (why && !r->reason_written) {
            meta_text(r, "cpu_reason", why->ct ? why->ct->reason : "out of memory at registration");
            r->reason_written = 1;
        }
    }
    if (samples != r->w_samples || cpu_ns != r->w_cpu_ns) {
        meta_u64(r, "cpu_samples", samples);
        char buf[32];
        snprintf(buf, sizeof buf, "%.1f", cpu_ns ? (double)samples * 1e9 / (double)cpu_ns : 0.0);
        meta_text(r, "cpu_sample_hz", buf);
        r->w_samples = samples;
        r->w_cpu_ns = cpu_ns;
    }
    if (switches != r->w_switches) meta_u64(r, "cpu_switches", r->w_switches = switches);
    if (lost != r->w_lost) meta_u64(r, "cpu_lost_records", r->w_lost = lost);
    if (r->n_blocks != r->w_blocks) meta_u64(r, "cpu_blocks", r->w_blocks = r->n_blocks);
    if (unknown != r->w_unknown) meta_u64(r, "cpu_samples_unknown_stage", r->w_unknown = unknown);
    if (r->timer_written && overruns != r->w_overruns) meta_u64(r, "cpu_timer_overruns", r->w_overruns = overruns);
    if (wait_stacks != r->w_wait_stacks) meta_u64(r, "cpu_wait_stacks", r->w_wait_stacks = wait_stacks);
    if (gil != r->w_gil) meta_u64(r, "cpu_gil_samples", r->w_gil = gil);
    if (r->t->opt.cpu_user_stack) unwind_meta(r);
    py_meta(r);
    if (r->schedstat && (final || !r->t->opt.profile_interval)) window_scan(r, -1, 1);
    if (final || interrupted) {
        st_cpusym_store(&r->sym, r->store, r->addrs, r->addrs_cap);
        st_cpulines_store(r->store, r->addrs, r->addrs_cap, r->ips, r->ips_cap, ST_CPU_LINES_BUDGET_NS);
        py_symbols_store(r);
    }
}

void st_cpurec_free(st_cpurec *r)
{
    if (!r) return;
    for (uint32_t i = 0; i < r->n_threads; i++) {
        st_cpurec_thread *c = r->threads[i];
        st_cpurec_discard(c->ct);
        st_buf_free(&c->enc.buf);
        free(c->q);
        free(c);
    }
    st_cpu_maps_free(&r->maps);
    st_cpu_unwind_close(r->uw);
    st_cpusym_free(r->sym);
    st_buf_free(&r->scratch);
    for (size_t i = 0; i < r->n_tasks; i++)
        if (r->tasks[i].fd >= 0) close(r->tasks[i].fd);
    free(r->tasks);
    free(r->tids);
    free(r->stacks);
    free(r->pool);
    free(r->addrs);
    free(r->ips);
    free(r->sink);
    st_oncpu_free(r->oncpu);
    st_pyq_batch_free(&r->py_batch);
    for (uint32_t i = 0; i < r->n_py_names; i++) free(r->py_names[i].name);
    free(r->py_names);
    free(r->py_index);
    free(r->py_addrs);
    free(r);
}

void st_cpurec_attach_agg(st_cpurec *r, st_agg *agg)
{
    if (!r || !agg || r->oncpu) return;
    r->oncpu = st_oncpu_create();
    if (r->oncpu) st_agg_set_oncpu(agg, st_oncpu_window, r->oncpu);
}
