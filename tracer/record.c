/* record.c: the hot path. Each registered thread owns a single-producer
 * ring; st_begin/st_end/st_counter_set/st_mark/st_step append one 24-byte
 * record and publish it with a release store. No lock, no allocation, no
 * system call. An unregistered thread, or a disabled trace, costs the one
 * branch on `t->ring`.
 *
 * Drops never break a range: every recorded begin reserves a slot for its
 * end, so a begin or other record is only accepted while the free space
 * exceeds the reserved ends; a begin that is dropped marks its depth so that
 * its end is dropped too. */
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "st_internal.h"

typedef struct st_tls {
    st_ring *ring;        /* NULL: not recording */
    st_record *buf;
    uint64_t mask;
    uint64_t head;        /* local copy of ring->head */
    uint64_t tail_cache;  /* last tail seen; refreshed when the ring looks full */
    uint32_t open;        /* recorded begins whose ends are still to come */
    uint32_t depth;       /* all begins, dropped or not */
    int block;            /* wait instead of dropping */
    uint64_t dropped_depths[ST_STACK_MAX / 64];
} st_tls;

static __thread st_tls tls __attribute__((tls_model("initial-exec")));

/* The slow half of reserve(): refresh the cached tail, and wait for the
 * writer in blocking mode. Kept out of line so the fast path stays small. */
static __attribute__((noinline)) int reserve_slow(st_tls *t, uint64_t need)
{
    uint64_t cap = t->mask + 1;
    /* More than the whole ring (a begin nested deeper than the ring can hold
     * with its ends): no wait can make room, so drop even when blocking. */
    if (need > cap) return 0;
    for (;;) {
        t->tail_cache = atomic_load_explicit(&t->ring->tail, memory_order_acquire);
        if (t->head - t->tail_cache + need <= cap) return 1;
        if (!t->block || atomic_load_explicit(&t->ring->retired, memory_order_relaxed)) return 0;
        st_trace *tr = st_active_trace;
        if (tr) st_wake_writer(tr);
        sched_yield();
    }
}

/* Room for `need` more records? Refreshes the cached tail only when the
 * cached view says no. */
static inline int reserve(st_tls *t, uint64_t need)
{
    if (t->head - t->tail_cache + need <= t->mask + 1) return 1;
    return reserve_slow(t, need);
}

static inline void push(st_tls *t, uint32_t type, uint32_t id, int64_t ts, uint64_t arg)
{
    st_record *r = &t->buf[t->head & t->mask];
    r->ts = ts;
    r->arg = arg;
    r->id = id;
    r->type = type;
    t->head++;
    atomic_store_explicit(&t->ring->head, t->head, memory_order_release);
}

static inline void count_drop(st_tls *t, uint64_t n)
{
    atomic_fetch_add_explicit(&t->ring->dropped, n, memory_order_relaxed);
}

void st_begin(st_stage stage)
{
    st_tls *t = &tls;
    if (!t->ring) return;
    int64_t ts = st_clock_raw();
    uint32_t d = t->depth++;
    /* An id that was never registered is dropped (and counted), so it can
     * neither corrupt the stored chunk nor index past the NVTX table. */
    if (d < ST_STACK_MAX && stage < atomic_load_explicit(&st_stage_limit, memory_order_relaxed) &&
        reserve(t, (uint64_t)t->open + 2)) {
        push(t, ST_REC_BEGIN, stage, ts, 0);
        t->open++;
        t->dropped_depths[d >> 6] &= ~(1ull << (d & 63));
    } else {
        if (d < ST_STACK_MAX) t->dropped_depths[d >> 6] |= 1ull << (d & 63);
        count_drop(t, 1);
    }
    if (st_nvtx_on) st_nvtx_push(stage);
}

void st_end(st_stage stage)
{
    st_tls *t = &tls;
    if (!t->ring) return;
    int64_t ts = st_clock_raw();
    if (t->depth == 0) {
        /* An end without a begin is a program error, not a full ring: the
         * writer counts it in meta unmatched_ends and stores nothing. Only
         * when the ring is full is it a drop. */
        if (reserve(t, (uint64_t)t->open + 1))
            push(t, ST_REC_END, stage, ts, 0);
        else
            count_drop(t, 1);
        return;
    }
    uint32_t d = --t->depth;
    if (d >= ST_STACK_MAX || (t->dropped_depths[d >> 6] >> (d & 63)) & 1) {
        count_drop(t, 1);
    } else {
        push(t, ST_REC_END, stage, ts, 0); /* its slot was reserved by the begin */
        t->open--;
    }
    if (st_nvtx_on) st_nvtx_pop();
}

void st_counter_set(st_counter counter, double value)
{
    st_tls *t = &tls;
    if (!t->ring) return;
    int64_t ts = st_clock_raw();
    uint64_t bits;
    memcpy(&bits, &value, sizeof bits);
    if (reserve(t, (uint64_t)t->open + 1))
        push(t, ST_REC_COUNTER, counter, ts, bits);
    else
        count_drop(t, 1);
}

void st_mark(const char *literal_name)
{
    st_tls *t = &tls;
    if (!t->ring || !literal_name) return;
    int64_t ts = st_clock_raw();
    if (reserve(t, (uint64_t)t->open + 1))
        push(t, ST_REC_MARK, 0, ts, (uint64_t)(uintptr_t)literal_name);
    else
        count_drop(t, 1);
}

void st_step(uint64_t step, uint64_t tokens)
{
    st_tls *t = &tls;
    if (!t->ring) return;
    int64_t ts = st_clock_raw();
    /* Step marks bound the windows: never dropped, the thread waits. */
    int block = t->block;
    t->block = 1;
    int ok = reserve(t, (uint64_t)t->open + 2);
    t->block = block;
    if (!ok) {
        count_drop(t, 2);
        return;
    }
    /* Both records become visible together. */
    st_record *r = &t->buf[t->head & t->mask];
    r->ts = ts;
    r->arg = step;
    r->id = 0;
    r->type = ST_REC_STEP;
    r = &t->buf[(t->head + 1) & t->mask];
    r->ts = ts;
    r->arg = tokens;
    r->id = 0;
    r->type = ST_REC_TOKENS;
    t->head += 2;
    atomic_store_explicit(&t->ring->head, t->head, memory_order_release);
}

/* ---- registration of the calling thread ---- */

static int thread_register(st_trace *trace, const char *name, const char *role, int device,
                           int rank)
{
    if (!trace) return st_set_error(ST_EINVAL, "st_thread_register: no trace");
    if (!name || !*name) return st_set_error(ST_EINVAL, "st_thread_register: empty thread name");
    if (strlen(name) > ST_NAME_MAX || (role && strlen(role) > ST_NAME_MAX))
        return st_set_error(ST_EINVAL, "st_thread_register: thread name or role longer than %d bytes", ST_NAME_MAX);
    if (tls.ring) return st_set_error(ST_ESTATE, "st_thread_register: thread '%s' is already registered", name);
    if (!trace->opt.enabled) return 0;
    st_ring *ring = aligned_alloc(64, sizeof *ring);
    st_record *buf = aligned_alloc(64, sizeof(st_record) * trace->opt.ring_records);
    if (!ring || !buf) {
        free(ring);
        free(buf);
        return st_set_error(ST_ENOMEM, "st_thread_register: out of memory for a %u-record ring",
                            trace->opt.ring_records);
    }
    memset(ring, 0, sizeof *ring);
    ring->buf = buf;
    ring->mask = trace->opt.ring_records - 1;

    pthread_mutex_lock(&trace->lock);
    uint32_t id = atomic_load(&trace->n_threads);
    if (id >= ST_MAX_THREADS) {
        pthread_mutex_unlock(&trace->lock);
        free(ring);
        free(buf);
        return st_set_error(ST_ELIMIT, "st_thread_register: more than %d threads", ST_MAX_THREADS);
    }
    st_thread_def *def = &trace->threads[id];
    def->name = strdup(name);
    def->role = strdup(role && *role ? role : "other");
    def->device = device;
    def->rank = rank;
    def->os_tid = (int64_t)syscall(SYS_gettid);
    def->ring = ring;
    ring->thread_id = id;
    atomic_store(&trace->n_threads, id + 1);
    pthread_mutex_unlock(&trace->lock);

    memset(&tls, 0, sizeof tls);
    tls.buf = buf;
    tls.mask = ring->mask;
    tls.block = trace->opt.block_when_full;
    tls.ring = ring;
    st_nvtx_thread(name);
    return (int)id;
}

/* Signals stay blocked while trace->lock is held: a SIGINT/SIGTERM handler
 * waits for the writer, which needs the lock (see trace.c, st_flush). */
int st_thread_register(st_trace *trace, const char *name, const char *role, int device,
                       int rank)
{
    sigset_t set, saved;
    sigfillset(&set);
    sigdelset(&set, SIGSEGV);
    sigdelset(&set, SIGBUS);
    sigdelset(&set, SIGFPE);
    sigdelset(&set, SIGILL);
    sigdelset(&set, SIGABRT);
    pthread_sigmask(SIG_BLOCK, &set, &saved);
    int rc = thread_register(trace, name, role, device, rank);
    pthread_sigmask(SIG_SETMASK, &saved, NULL);
    return rc;
}

void st_thread_unregister(void)
{
    st_ring *ring = tls.ring;
    if (!ring) return;
    tls.ring = NULL;
    /* The writer frees the ring once it has drained it. */
    atomic_store_explicit(&ring->retired, 1, memory_order_release);
}
