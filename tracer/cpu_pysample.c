/* cpu_pysample.c: the queue between st_cpu_sample_add (stagetrace.h), called
 * by an interpreter's own sampler on any thread, and the writer thread,
 * which places each sample in its thread's CPU records (cpu_record.c,
 * st_cpurec_pysamples). One queue per process (one trace is open at a
 * time), under one mutex: the call checks its arguments, stamps the
 * sample, and copies its frames into a byte buffer of at most
 * PYQ_MAX_BYTES and ST_CPU_SAMPLE_QUEUE_MAX samples; the writer swaps the
 * buffer for an empty one and decodes it outside the lock. A sample that
 * does not fit is counted as lost, never blocks the caller. st_writer_start
 * opens the queue for its trace and the writer's end closes it, so a call
 * that races the close sees ST_ESTATE and never touches a freed trace (the
 * trace pointer is only compared until the queue says it is the open one).
 *
 * A queued sample: int64 ts_ns, uint32 thread (the st_trace thread id),
 * uint32 n_frames, then per frame uint32 line, uint16 qualname bytes,
 * uint16 file bytes, the two names (no NUL). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "st_cpurec.h"
#include "st_internal.h"

#define PYQ_MAX_BYTES (4u << 20)
#define PYQ_FIRST_BYTES (64u << 10)

static struct {
    pthread_mutex_t lock;
    const st_trace *t;  /* the trace whose capture is open, NULL none */
    uint8_t *buf;
    size_t len, cap;
    uint32_t n;
    _Atomic uint64_t lost;    /* samples that did not fit, since the open */
    _Atomic uint32_t pending; /* n, read by the writer without the lock */
} pyq = {PTHREAD_MUTEX_INITIALIZER, NULL, NULL, 0, 0, 0, 0, 0};

void st_pyq_open(const st_trace *t)
{
    pthread_mutex_lock(&pyq.lock);
    pyq.t = t;
    pyq.len = pyq.n = 0;
    atomic_store(&pyq.lost, 0);
    atomic_store(&pyq.pending, 0);
    pthread_mutex_unlock(&pyq.lock);
}

void st_pyq_close(const st_trace *t)
{
    pthread_mutex_lock(&pyq.lock);
    if (pyq.t == t) {
        pyq.t = NULL;
        free(pyq.buf);
        pyq.buf = NULL;
        pyq.len = pyq.cap = pyq.n = 0;
        atomic_store(&pyq.pending, 0);
    }
    pthread_mutex_unlock(&pyq.lock);
}

static size_t name_len(const char *s) { return s ? strnlen(s, ST_PYQ_NAME_MAX) : 0; }

int st_cpu_sample_add(st_trace *trace, int os_tid, int64_t ts_ns, const st_py_frame *frames, size_t n_frames,
                      unsigned flags)
{
    int64_t now = st_now_ns();
    if (!trace) return st_set_error(ST_EINVAL, "st_cpu_sample_add: trace is NULL");
    if (flags & ~ST_CPU_SAMPLE_NOW)
        return st_set_error(ST_EINVAL, "st_cpu_sample_add: unknown flags 0x%x (ST_CPU_SAMPLE_NOW is the only one)",
                            flags);
    if (n_frames > ST_CPU_SAMPLE_MAX_FRAMES)
        return st_set_error(ST_EINVAL, "st_cpu_sample_add: %zu frames, more than %d (pass the innermost %d)",
                            n_frames, ST_CPU_SAMPLE_MAX_FRAMES, ST_CPU_SAMPLE_MAX_FRAMES);
    if (n_frames && !frames) return st_set_error(ST_EINVAL, "st_cpu_sample_add: frames is NULL with %zu frames", n_frames);
    if (os_tid <= 0) return st_set_error(ST_EINVAL, "st_cpu_sample_add: os_tid %d is not a thread id", os_tid);
    size_t need = 16;
    for (size_t i = 0; i < n_frames; i++) {
        if (!frames[i].qualname) return st_set_error(ST_EINVAL, "st_cpu_sample_add: frame %zu has no qualname", i);
        if (frames[i].line < 0)
            return st_set_error(ST_EINVAL, "st_cpu_sample_add: frame %zu has line %d", i, (int)frames[i].line);
        need += 8 + name_len(frames[i].qualname) + name_len(frames[i].file);
    }
    if (flags & ST_CPU_SAMPLE_NOW) ts_ns = now;
    else if (ts_ns > now)
        return st_set_error(ST_EINVAL, "st_cpu_sample_add: time %lld ns is after now (%lld ns)", (long long)ts_ns,
                            (long long)now);
    pthread_mutex_lock(&pyq.lock);
    if (!pyq.t || pyq.t != trace) {
        pthread_mutex_unlock(&pyq.lock);
        return st_set_error(ST_ESTATE, "st_cpu_sample_add: no trace with the CPU capture is open "
                                       "(st_options.cpu = 1; python: stagetrace.open(..., cpu=True))");
    }
    /* the trace is open while the queue is: its thread table can be read
     * (a definition is complete before n_threads counts it); the latest
     * registration of a reused thread id wins */
    uint32_t n_threads = atomic_load(&trace->n_threads);
    uint32_t id = UINT32_MAX;
    for (uint32_t i = n_threads; i > 0; i--)
        if (trace->threads[i - 1].os_tid == os_tid) {
            id = i - 1;
            break;
        }
    if (id == UINT32_MAX) {
        pthread_mutex_unlock(&pyq.lock);
        return st_set_error(ST_EINVAL, "st_cpu_sample_add: os tid %d is not a thread registered with the trace", os_tid);
    }
    int64_t start = trace->threads[id].cpu_start_ns;
    if (ts_ns < start) {
        pthread_mutex_unlock(&pyq.lock);
        return st_set_error(ST_EINVAL, "st_cpu_sample_add: time %lld ns is before thread %u's capture began (%lld ns)",
                            (long long)ts_ns, id, (long long)start);
    }
    if (pyq.n >= ST_CPU_SAMPLE_QUEUE_MAX || pyq.len + need > PYQ_MAX_BYTES) {
        atomic_fetch_add(&pyq.lost, 1);
        pthread_mutex_unlock(&pyq.lock);
        return 1;
    }
    if (pyq.len + need > pyq.cap) {
        size_t cap = pyq.cap ? pyq.cap : PYQ_FIRST_BYTES;
        while (cap < pyq.len + need) cap *= 2;
        if (cap > PYQ_MAX_BYTES) cap = PYQ_MAX_BYTES;
        uint8_t *b = realloc(pyq.buf, cap);
        if (!b) {
            atomic_fetch_add(&pyq.lost, 1);
            pthread_mutex_unlock(&pyq.lock);
            return 1;
        }
        pyq.buf = b;
        pyq.cap = cap;
    }
    uint8_t *p = pyq.buf + pyq.len;
    uint32_t nf = (uint32_t)n_frames;
    memcpy(p, &ts_ns, 8);
    memcpy(p + 8, &id, 4);
    memcpy(p + 12, &nf, 4);
    p += 16;
    for (size_t i = 0; i < n_frames; i++) {
        uint32_t line = (uint32_t)frames[i].line;
        uint16_t ql = (uint16_t)name_len(frames[i].qualname), fl = (uint16_t)name_len(frames[i].file);
        memcpy(p, &line, 4);
        memcpy(p + 4, &ql, 2);
        memcpy(p + 6, &fl, 2);
        memcpy(p + 8, frames[i].qualname, ql);
        if (fl) memcpy(p + 8 + ql, frames[i].file, fl);
        p += 8 + ql + fl;
    }
    pyq.len += need;
    pyq.n++;
    atomic_store_explicit(&pyq.pending, pyq.n, memory_order_release);
    pthread_mutex_unlock(&pyq.lock);
    return ST_OK;
}

void st_pyq_take(st_pyq_batch *b)
{
    b->n = 0;
    b->len = 0;
    b->lost = atomic_load(&pyq.lost);
    if (!atomic_load_explicit(&pyq.pending, memory_order_acquire)) return;
    pthread_mutex_lock(&pyq.lock);
    if (pyq.n) {
        /* swap buffers: the caller's (emptied) becomes the queue's */
        uint8_t *buf = pyq.buf;
        size_t cap = pyq.cap;
        b->n = pyq.n;
        b->len = pyq.len;
        pyq.buf = b->buf;
        pyq.cap = b->cap;
        b->buf = buf;
        b->cap = cap;
        pyq.len = pyq.n = 0;
        atomic_store(&pyq.pending, 0);
    }
    pthread_mutex_unlock(&pyq.lock);
}

int st_pyq_next(st_pyq_batch *b, size_t *off, st_pyq_sample *s)
{
    if (*off + 16 > b->len) return 0;
    const uint8_t *p = b->buf + *off;
    memcpy(&s->ts_ns, p, 8);
    memcpy(&s->thread, p + 8, 4);
    memcpy(&s->n_frames, p + 12, 4);
    size_t at = *off + 16;
    for (uint32_t i = 0; i < s->n_frames; i++) {
        uint16_t ql, fl;
        memcpy(&s->frames[i].line, b->buf + at, 4);
        memcpy(&ql, b->buf + at + 4, 2);
        memcpy(&fl, b->buf + at + 6, 2);
        s->frames[i].qualname = (const char *)b->buf + at + 8;
        s->frames[i].qualname_len = ql;
        s->frames[i].file = (const char *)b->buf + at + 8 + ql;
        s->frames[i].file_len = fl;
        at += 8u + ql + fl;
    }
    *off = at;
    return 1;
}

void st_pyq_batch_free(st_pyq_batch *b)
{
    free(b->buf);
    memset(b, 0, sizeof *b);
}
