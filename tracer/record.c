/* record.c: the hot path. Each registered thread owns a single-producer
 * ring; st_begin/st_end/st_counter_set/st_mark/st_step/st_flow_out/
 * st_flow_in append one record and publish it with a release store: a
 * begin or an end one 16-byte slot (ring.h), a counter sample, mark, flow
 * or step two (the record and its payload). No lock, no allocation, no
 * system call. The public header tests the thread's ring pointer inline
 * (st__thread_hot, initial-exec TLS): an unregistered thread, or a
 * disabled trace, costs that one branch and no call; a recording thread
 * writes its ring inline for the common case (stagetrace.h's st__hot_*,
 * also used here by the exported functions): it reads one cache line of
 * producer state (st_ring's `w`) and the published head, and writes the
 * record's slot, one word of that state (w.open) and head.
 *
 * Drops never break a range: every recorded begin reserves a slot for its
 * end (the slots taken are head plus the ends owed, ring.h "Room"), so a
 * begin or other record is only accepted while the reserved ends leave room
 * for it, and an end always fits. A begin that is dropped marks its depth
 * so that its end is dropped too; while no dropped begin is open (the
 * common case) a begin and an end each test w.open with one compare. */
#include <sched.h>
#include <stddef.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ST__OUT_OF_LINE 1 /* this file defines the exported st_begin & co. */
#include "st_cpurec.h"
#include "st_internal.h"

__thread struct st__ring_hot *st__thread_hot __attribute__((tls_model("initial-exec")));
/* The same ring, for binaries built against earlier headers. */
__thread st_ring *st__thread_ring __attribute__((tls_model("initial-exec")));
/* 1 while an enabled trace is open: the inline calls of a thread with no
 * ring test it (relaxed) and report themselves through st__unregistered. */
int st__recording;

/* The open trace (NULL when none) and the stage ids registered in it:
 * st_open, st_close and registration (trace.c) set them, the hot path and
 * its slow paths read them. */
st_trace *st_active_trace;
_Atomic uint32_t st_stage_limit;

/* ---- calls from threads that are not registered ----
 * Reported once per thread and trace through options.log (and the calling
 * thread's st_last_error()), never on the recording path. The lock keeps
 * st_close from freeing the trace while a report uses it. */
static pthread_mutex_t unregistered_lock = PTHREAD_MUTEX_INITIALIZER;
static st_trace *unregistered_trace;      /* under unregistered_lock */
static uint64_t unregistered_generation;  /* under unregistered_lock: one per trace */
static __thread uint64_t reported_generation;

void st_unregistered_watch(st_trace *t)
{
    pthread_mutex_lock(&unregistered_lock);
    unregistered_trace = t;
    if (t) unregistered_generation++;
    __atomic_store_n(&st__recording, t != NULL, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&unregistered_lock);
}

void st__unregistered(const char *call)
{
    if (st__thread_ring) return;
    pthread_mutex_lock(&unregistered_lock);
    st_trace *t = unregistered_trace;
    if (t && reported_generation != unregistered_generation) {
        reported_generation = unregistered_generation;
        long long tid = (long long)syscall(SYS_gettid);
        st_set_error(ST_ESTATE, "%s called from thread %lld, which is not registered "
                     "(st_thread_register): its calls are not recorded", call, tid);
        st_log(t, ST_LOG_WARNING, "trace '%s': %s", t->path, st_last_error());
    }
    pthread_mutex_unlock(&unregistered_lock);
}

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

static inline int64_t ring_clock(const st_ring *r)
{
#if defined(__x86_64__)
    if (likely(r->w_use_tsc)) return (int64_t)__builtin_ia32_rdtsc();
#endif
    return st_clock_mono_ns();
}

/* The next slot to write: head, which only this thread stores. */
static inline uint64_t head_of(st_ring *r)
{
    return atomic_load_explicit(&r->head, memory_order_relaxed);
}

static inline void publish(st_ring *r, uint64_t head)
{
    atomic_store_explicit(&r->head, head, memory_order_release);
}

static inline uint64_t open_depth(uint64_t o) { return o & ST_OPEN_DEPTH; }
static inline uint64_t open_dropped(uint64_t o) { return (o & ST_OPEN_DROPPED_MASK) >> 32; }

/* Slots taken: the records written and the ends owed to recorded begins. */
static inline uint64_t reserved(st_ring *r)
{
    uint64_t o = r->w.open;
    return head_of(r) + open_depth(o) - open_dropped(o);
}

/* Writes one record into a slot: the timestamp, then id and type in one
 * 8-byte store. */
static inline st_record *slot(st_ring *r, uint64_t at) { return (st_record *)r->w.buf + (at & r->w.mask); }
static inline void put(st_record *rec, int64_t ts, uint32_t id, uint32_t type)
{
    uint64_t id_type = (uint64_t)id | (uint64_t)type << 32;
    rec->ts = ts;
    memcpy((char *)rec + offsetof(st_record, id), &id_type, sizeof id_type);
}
/* A two-slot record (counter, mark, flow, step) at head, its room taken:
 * the record, its payload in the next slot, both published by one store. */
static inline void put_pair(st_ring *r, int64_t ts, uint32_t id, uint32_t type, uint64_t arg,
                            uint64_t arg2)
{
    uint64_t h = head_of(r);
    put(slot(r, h), ts, id, type);
    st_record *payload = slot(r, h + 1);
    payload->arg = arg;
    payload->arg2 = arg2;
    publish(r, h + 2);
}

/* Room for `n` more records beyond the reserved ends? Refreshes the tail
 * seen, and waits for the writer when blocking. Out of line: the fast path
 * compares with w.limit itself. */
static __attribute__((noinline)) int reserve_slow(st_ring *r, uint64_t n, int block)
{
    uint64_t cap = (uint64_t)r->w.mask + 1;
    uint64_t taken = reserved(r);
    /* More than the whole ring (a begin nested deeper than the ring can hold
     * with its ends): no wait can make room, so drop even when blocking. */
    if (taken - head_of(r) + n > cap) return 0;
    for (;;) {
        r->w.limit = atomic_load_explicit(&r->tail, memory_order_acquire) + cap;
        if (taken + n <= r->w.limit) return 1;
        if (!block || atomic_load_explicit(&r->retired, memory_order_relaxed)) return 0;
        st_trace *tr = st_active_trace;
        if (tr) st_wake_writer(tr);
        sched_yield();
    }
}

static inline int reserve(st_ring *r, uint64_t n)
{
    if (likely(reserved(r) + n <= r->w.limit)) return 1;
    return reserve_slow(r, n, r->w_block);
}

static __attribute__((noinline)) void count_drop(st_ring *r, uint64_t n)
{
    atomic_fetch_add_explicit(&r->dropped, n, memory_order_relaxed);
}

/* A begin with its timestamp taken, every case: a depth too deep, a stage
 * id above the cached limit (refreshed here: stages registered since), no
 * room seen, a dropped begin open. */
static void record_begin(st_ring *r, st_stage stage, int64_t ts)
{
    uint64_t o = r->w.open;
    uint64_t d = open_depth(o);
    if (d < ST_MAX_DEPTH) {
        if (stage >= r->w.stage_limit)
            r->w.stage_limit = atomic_load_explicit(&st_stage_limit, memory_order_relaxed);
        /* An id that was never registered is dropped (and counted), so it
         * can neither corrupt the stored chunk nor index past NVTX's table. */
        if (stage < r->w.stage_limit && reserve(r, 2)) {
            uint64_t h = head_of(r);
            put(slot(r, h), ts, stage, ST_REC_BEGIN);
            r->w.open = o + 1; /* reserves its end */
            publish(r, h + 1);
            return;
        }
        r->w_dropped_depths[d >> 6] |= 1ull << (d & 63);
    }
    r->w.open = o + 1 + ST_OPEN_DROPPED_ONE;
    count_drop(r, 1);
}

/* An end with its timestamp taken, every case. Returns 1 when it closed a
 * range that NVTX saw open (every begin pushes, so every end with a begin
 * pops). */
static int record_end(st_ring *r, st_stage stage, int64_t ts)
{
    uint64_t o = r->w.open;
    if (open_depth(o) == 0) {
        /* An end without a begin is a program error, not a full ring: the
         * writer counts it in meta unmatched_ends and stores nothing. Only
         * when the ring is full is it a drop. */
        if (reserve(r, 1)) {
            uint64_t h = head_of(r);
            put(slot(r, h), ts, stage, ST_REC_END);
            publish(r, h + 1);
        } else {
            count_drop(r, 1);
        }
        return 0;
    }
    uint64_t d = open_depth(o) - 1;
    if (d >= ST_MAX_DEPTH || (r->w_dropped_depths[d >> 6] >> (d & 63)) & 1) {
        if (d < ST_MAX_DEPTH) r->w_dropped_depths[d >> 6] &= ~(1ull << (d & 63));
        r->w.open = o - 1 - ST_OPEN_DROPPED_ONE;
        count_drop(r, 1);
    } else {
        uint64_t h = head_of(r);
        put(slot(r, h), ts, stage, ST_REC_END); /* its slot was reserved by the begin */
        r->w.open = o - 1;
        publish(r, h + 1);
    }
    return 1;
}

/* Begins and ends off the fast path: any clock, NVTX on or off, drops. */
static __attribute__((noinline)) void begin_general(st_ring *r, st_stage stage)
{
    record_begin(r, stage, ring_clock(r));
    if (r->w_nvtx) st_nvtx_push(stage, stage < atomic_load_explicit(&st_stage_limit, memory_order_relaxed));
}

static __attribute__((noinline)) void end_general(st_ring *r, st_stage stage)
{
    if (record_end(r, stage, ring_clock(r)) && r->w_nvtx) st_nvtx_pop();
}

/* The common case (ring.h, "The common case in one compare"): the TSC, NVTX
 * off, room, no dropped begin open, written by stagetrace.h's st__hot_begin
 * and st__hot_end, which the inline st_begin and st_end also use. */
static inline void ring_begin(st_ring *r, st_stage stage)
{
#if defined(__x86_64__)
    if (likely(st__hot_begin(&r->w, stage))) return;
#endif
    begin_general(r, stage);
}

static inline void ring_end(st_ring *r, st_stage stage)
{
#if defined(__x86_64__)
    if (likely(st__hot_end(&r->w, stage))) return;
#endif
    end_general(r, stage);
}

/* Counter samples, marks and flows: two slots; dropped (and counted, as one
 * event) when the ring is full. */
static inline void ring_pair(st_ring *r, uint32_t id, uint32_t type, uint64_t arg)
{
#if defined(__x86_64__)
    if (likely(st__hot_pair(&r->w, (uint64_t)id | (uint64_t)type << 32, arg))) return;
#endif
    int64_t ts = ring_clock(r);
    if (unlikely(!reserve(r, 2))) {
        count_drop(r, 1);
        return;
    }
    put_pair(r, ts, id, type, arg, 0);
}

static inline void ring_counter(st_ring *r, st_counter counter, double value)
{
    uint64_t bits;
    memcpy(&bits, &value, sizeof bits);
    ring_pair(r, counter, ST_REC_COUNTER, bits);
}

static inline void ring_mark(st_ring *r, const char *literal_name)
{
    if (literal_name) ring_pair(r, 0, ST_REC_MARK, (uint64_t)(uintptr_t)literal_name);
}

static inline void ring_flow(st_ring *r, uint64_t id, uint32_t dir)
{
    ring_pair(r, dir, ST_REC_FLOW, id);
}

static inline void ring_step(st_ring *r, uint64_t step, uint64_t tokens)
{
    int64_t ts = ring_clock(r);
    /* Step marks bound the windows: never dropped, the thread waits. */
    if (!(reserved(r) + 2 <= r->w.limit || reserve_slow(r, 2, 1))) {
        count_drop(r, 1);
        return;
    }
    put_pair(r, ts, 0, ST_REC_STEP, step, tokens);
    if (r->w_nvtx) st_nvtx_step(step, tokens);
}

/* What the public header's inline functions call once they have found the
 * thread's ring. */
void st__ring_begin(st_ring *r, st_stage stage) { ring_begin(r, stage); }
void st__ring_end(st_ring *r, st_stage stage) { ring_end(r, stage); }
void st__ring_counter(st_ring *r, st_counter counter, double value) { ring_counter(r, counter, value); }
void st__ring_mark(st_ring *r, const char *literal_name) { ring_mark(r, literal_name); }
void st__ring_step(st_ring *r, uint64_t step, uint64_t tokens) { ring_step(r, step, tokens); }
void st__ring_flow(st_ring *r, uint64_t id, uint32_t dir) { ring_flow(r, id, dir); }

/* The exported functions, for callers that do not use the inline ones
 * (binaries built against earlier headers, -DST_NO_INLINE, other compilers). */
#define UNREGISTERED(call) \
    else if (unlikely(__atomic_load_n(&st__recording, __ATOMIC_RELAXED))) st__unregistered(call)
void st_begin(st_stage stage)
{
    st_ring *r = st__thread_ring;
    if (r) ring_begin(r, stage);
    UNREGISTERED("st_begin");
}
void st_end(st_stage stage)
{
    st_ring *r = st__thread_ring;
    if (r) ring_end(r, stage);
}
void st_counter_set(st_counter counter, double value)
{
    st_ring *r = st__thread_ring;
    if (r) ring_counter(r, counter, value);
    UNREGISTERED("st_counter_set");
}
void st_mark(const char *literal_name)
{
    st_ring *r = st__thread_ring;
    if (r) ring_mark(r, literal_name);
    UNREGISTERED("st_mark");
}
void st_step(uint64_t step, uint64_t tokens)
{
    st_ring *r = st__thread_ring;
    if (r) ring_step(r, step, tokens);
    UNREGISTERED("st_step");
}
void st_flow_out(uint64_t id)
{
    st_ring *r = st__thread_ring;
    if (r) ring_flow(r, id, 0);
    UNREGISTERED("st_flow_out");
}
void st_flow_in(uint64_t id)
{
    st_ring *r = st__thread_ring;
    if (r) ring_flow(r, id, 1);
    UNREGISTERED("st_flow_in");
}
#undef UNREGISTERED

/* ---- registration of the calling thread ---- */

static int thread_register(st_trace *trace, const char *name, const char *role, int device,
                           int rank)
{
    if (!trace) return st_set_error(ST_EINVAL, "st_thread_register: no trace");
    if (!name || !*name) return st_set_error(ST_EINVAL, "st_thread_register: empty thread name");
    if (strlen(name) > ST_NAME_MAX || (role && strlen(role) > ST_NAME_MAX))
        return st_set_error(ST_EINVAL, "st_thread_register: thread name or role longer than %d bytes", ST_NAME_MAX);
    if (st__thread_ring)
        return st_set_error(ST_ESTATE, "st_thread_register: thread '%s' is already registered", name);
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
    ring->w.buf = buf;
    ring->w.mask = ring->mask;
    ring->w.limit = trace->opt.ring_records;
    ring->w.stage_limit = atomic_load_explicit(&st_stage_limit, memory_order_relaxed);
    ring->w_use_tsc = st_clock_use_tsc != 0;
    ring->w_nvtx = st_nvtx_on != 0;
#if defined(__x86_64__)
    if (!ring->w_use_tsc || ring->w_nvtx) ring->w.open = ST_OPEN_GENERAL;
#else
    ring->w.open = ST_OPEN_GENERAL; /* no TSC read on the fast path */
#endif
    ring->w_block = trace->opt.block_when_full != 0;
    /* The perf event (opt.cpu) is opened here, on the thread it watches,
     * before the thread is visible to the writer. */
    int cpu_status = 0;
    int64_t cpu_start_ns = 0;
    struct st_cpu_thread *cpu = trace->opt.cpu ? st_cpurec_open(&trace->opt, &cpu_status, &cpu_start_ns) : NULL;

    pthread_mutex_lock(&trace->lock);
    uint32_t id = atomic_load(&trace->n_threads);
    if (id >= ST_MAX_THREADS) {
        pthread_mutex_unlock(&trace->lock);
        free(ring);
        free(buf);
        st_cpurec_discard(cpu);
        return st_set_error(ST_ELIMIT, "st_thread_register: more than %d threads", ST_MAX_THREADS);
    }
    st_thread_def *def = &trace->threads[id];
    def->name = strdup(name);
    def->role = strdup(role && *role ? role : "other");
    def->device = device;
    def->rank = rank;
    def->os_tid = (int64_t)syscall(SYS_gettid);
    def->ring = ring;
    def->cpu = cpu;
    def->cpu_status = cpu_status;
    def->cpu_start_ns = cpu_start_ns;
    ring->thread_id = id;
    atomic_store(&trace->n_threads, id + 1);
    pthread_mutex_unlock(&trace->lock);

    st__thread_ring = ring;
    st__thread_hot = &ring->w;
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
    st_ring *ring = st__thread_ring;
    if (!ring) return;
    st__thread_ring = NULL;
    st__thread_hot = NULL;
    /* The writer frees the ring once it has drained it. */
    atomic_store_explicit(&ring->retired, 1, memory_order_release);
}
