/* cpu_timer.c: the signal sampler (st_cpu.h, "The signal sampler"), for
 * where perf events are refused (a seccomp filter, perf_event_paranoid 3)
 * and for samples that must say whether the thread held the GIL. Per
 * registered thread a POSIX timer on the thread's own CPU clock
 * (CLOCK_THREAD_CPUTIME_ID) sends one real-time signal to that thread
 * (SIGEV_THREAD_ID) every period of its CPU time; the handler walks the
 * interrupted context's frame pointers inside the thread's stack and puts
 * the sample into the thread's single-producer buffer, which one consumer
 * (the writer) drains into the same sink as the perf samples.
 *
 * The handler is async-signal-safe: no allocation, no lock, no libc call
 * but clock_gettime and the gettid system call; it touches only the
 * thread's buffer, allocated at the open, and the stack above the
 * interrupted stack pointer, inside the bounds pthread_getattr_np gave at
 * the open. glibc's backtrace() is not used: it may load libgcc_s and
 * allocate on first use, and it crashed a PyTorch process in a handler.
 * The handler reaches its buffer through the timer's sigev_value (a slot
 * index into a static table), never through thread-local storage, whose
 * first use in a dlopen'ed library may allocate. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "st_cpu.h"
#include "stagetrace.h"

#ifndef sigev_notify_thread_id
#define sigev_notify_thread_id _sigev_un._tid
#endif

/* The handler's view of the timers: slot i holds the timer whose
 * sigev_value is i, and busy[i] counts handlers inside it, so that close
 * can wait for them before the buffer is unmapped. */
static st_cpu_timer *slot_timer[ST_MAX_THREADS];
static int slot_busy[ST_MAX_THREADS];
static pthread_mutex_t timer_lock = PTHREAD_MUTEX_INITIALIZER;
static int timer_signo;     /* the signal in use; 0 before the first open */
static int (*gil_probe)(void);

void st_cpu_set_gil_probe(int (*probe)(void)) { __atomic_store_n(&gil_probe, probe, __ATOMIC_RELEASE); }

int st_cpu_gil_probe_set(void) { return __atomic_load_n(&gil_probe, __ATOMIC_ACQUIRE) != NULL; }

int st_cpu_timer_signal(void)
{
    pthread_mutex_lock(&timer_lock);
    int s = timer_signo;
    pthread_mutex_unlock(&timer_lock);
    return s;
}

/* ---- the kernel's tick ---------------------------------------------------
 * A CPU-clock timer is checked at the scheduler tick, so it fires at most
 * CONFIG_HZ times a second (measured: 1 ms asked, 262 signals per CPU
 * second with 734 overruns at CONFIG_HZ 250). */
long st_cpu_timer_tick_hz(const char **source)
{
    struct utsname u;
    char path[128 + sizeof u.release];
    long hz = 0;
    if (uname(&u) == 0) {
        snprintf(path, sizeof path, "/boot/config-%s", u.release);
        FILE *f = fopen(path, "r");
        if (f) {
            char line[256];
            while (fgets(line, sizeof line, f))
                if (strncmp(line, "CONFIG_HZ=", 10) == 0) hz = strtol(line + 10, NULL, 10);
            fclose(f);
        }
    }
    if (hz >= 24 && hz <= 100000) {
        if (source) *source = "boot-config";
        return hz;
    }
    if (source) *source = "assumed";
    return ST_CPU_TIMER_ASSUMED_TICK_HZ;
}

uint64_t st_cpu_timer_period_for(uint64_t asked_ns)
{
    uint64_t p = asked_ns ? asked_ns : ST_CPU_DEFAULT_PERIOD_NS;
    uint64_t tick_ns = 1000000000ull / (uint64_t)st_cpu_timer_tick_hz(NULL);
    return p < tick_ns ? tick_ns : p;
}

/* ---- the handler ---------------------------------------------------------- */

/* The frame-pointer walk of the interrupted context: frames[0] = ip, then
 * the return address of each frame record [fp] = caller's fp, [fp + 8] =
 * return address (x86-64 and AArch64 alike), followed only while the
 * record lies in [floor, hi) and is 8-aligned, floor starting at the
 * interrupted stack pointer and rising past each record read (so the walk
 * ends, and reads only the live part of the thread's stack, which is
 * mapped). Not instrumented by the sanitizers: with ASan a frame pointer
 * register holding a general value may point into an ASan redzone of a
 * live frame, which a checked load reports, although the load is in
 * bounds of the thread's stack and harmless; UBSan would only see uintptr
 * arithmetic. */
__attribute__((no_sanitize_address, no_sanitize("undefined"), no_sanitize("thread"), noinline))
static uint32_t fp_walk(uint64_t ip, uintptr_t fp, uintptr_t sp, uintptr_t lo, uintptr_t hi, uint64_t *out,
                        uint32_t max)
{
    uint32_t n = 0;
    out[n++] = ip;
    if (sp < lo || sp >= hi) return n; /* on another stack (an alternate signal stack, a coroutine's) */
    uintptr_t floor = sp;
    while (n < max) {
        if (fp < floor || fp > hi - 16 || (fp & 7) != 0) break;
        const volatile uint64_t *rec = (const volatile uint64_t *)fp;
        uint64_t next = rec[0], ret = rec[1];
        if (ret == 0) break;
        out[n++] = ret;
        floor = fp + 16;
        fp = (uintptr_t)next;
    }
    return n;
}

static void on_signal(int signo, siginfo_t *si, void *ucv)
{
    (void)signo;
    int saved_errno = errno;
    if (!si || si->si_code != SI_TIMER) goto out;
    int i = si->si_value.sival_int;
    if (i < 0 || i >= ST_MAX_THREADS) goto out;
    __atomic_add_fetch(&slot_busy[i], 1, __ATOMIC_SEQ_CST);
    st_cpu_timer *tm = __atomic_load_n(&slot_timer[i], __ATOMIC_SEQ_CST);
    if (tm && (pid_t)syscall(SYS_gettid) == tm->tid) {
        __atomic_add_fetch(&tm->signals, 1, __ATOMIC_RELAXED);
        if (si->si_overrun > 0) __atomic_add_fetch(&tm->overruns, (uint64_t)si->si_overrun, __ATOMIC_RELAXED);
        uint64_t head = __atomic_load_n(&tm->head, __ATOMIC_RELAXED);
        uint64_t tail = __atomic_load_n(&tm->tail, __ATOMIC_ACQUIRE);
        if (head - tail >= tm->ring_n) {
            __atomic_add_fetch(&tm->lost, 1, __ATOMIC_RELAXED);
        } else {
            st_cpu_timer_sample *s = &tm->ring[head % tm->ring_n];
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            s->t_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
            /* a thread opened with a probe keeps flagged samples: -1 once the probe is removed */
            int g = ST_CPU_GIL_NO_PROBE;
            if (tm->gil) {
                int (*probe)(void) = __atomic_load_n(&gil_probe, __ATOMIC_ACQUIRE);
                g = probe ? probe() : -1;
                if (g != 0 && g != 1) g = -1;
            }
            s->gil = g;
            const ucontext_t *uc = ucv;
#if defined(__x86_64__)
            const greg_t *r = uc->uc_mcontext.gregs;
            s->n_frames = fp_walk((uint64_t)r[REG_RIP], (uintptr_t)r[REG_RBP], (uintptr_t)r[REG_RSP], tm->stack_lo,
                                  tm->stack_hi, s->frames, ST_CPU_TIMER_MAX_FRAMES);
#elif defined(__aarch64__)
            s->n_frames = fp_walk(uc->uc_mcontext.pc, (uintptr_t)uc->uc_mcontext.regs[29],
                                  (uintptr_t)uc->uc_mcontext.sp, tm->stack_lo, tm->stack_hi, s->frames,
                                  ST_CPU_TIMER_MAX_FRAMES);
#else
            (void)uc;
            s->frames[0] = 0;
            s->n_frames = 0;
#endif
            __atomic_store_n(&tm->head, head + 1, __ATOMIC_RELEASE);
        }
    } /* else a signal for a closed timer, or sent by someone else: ignored */
    __atomic_sub_fetch(&slot_busy[i], 1, __ATOMIC_SEQ_CST);
out:
    errno = saved_errno;
}

/* Installs the handler on the highest real-time signal that nobody uses
 * (disposition SIG_DFL), once per process; it stays installed (a signal
 * still queued for a deleted timer must not meet SIG_DFL, which ends the
 * process). Called with timer_lock held. */
static int install_handler(char *reason, size_t n)
{
    if (timer_signo) return 0;
    for (int s = SIGRTMAX; s >= SIGRTMIN; s--) {
        struct sigaction old;
        if (sigaction(s, NULL, &old) != 0) continue;
        if (!(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_DFL) {
            struct sigaction sa;
            memset(&sa, 0, sizeof sa);
            sa.sa_sigaction = on_signal;
            sa.sa_flags = SA_SIGINFO | SA_RESTART;
            sigemptyset(&sa.sa_mask);
            if (sigaction(s, &sa, NULL) != 0) continue;
            timer_signo = s;
            return 0;
        }
    }
    snprintf(reason, n, "signal sampler: every real-time signal (%d-%d) has a handler already", SIGRTMIN, SIGRTMAX);
    return -1;
}

int st_cpu_timer_open(st_cpu_timer **out, uint64_t period_ns, uint32_t ring_samples, char *reason, size_t reason_size)
{
    *out = NULL;
    reason[0] = 0;
    st_cpu_timer *tm = calloc(1, sizeof *tm);
    if (!tm) {
        snprintf(reason, reason_size, "signal sampler: out of memory");
        return ST_CPU_ERROR;
    }
    tm->slot = -1;
    tm->tid = (pid_t)syscall(SYS_gettid);
    tm->period_ns = st_cpu_timer_period_for(period_ns);
    tm->gil = st_cpu_gil_probe_set();
    if (pthread_getcpuclockid(pthread_self(), &tm->cpu_clock) != 0) tm->cpu_clock = CLOCK_THREAD_CPUTIME_ID;
    struct timespec ts;
    tm->cpu0_ns = clock_gettime(tm->cpu_clock, &ts) == 0 ? (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec : 0;
    pthread_attr_t attr;
    void *addr = NULL;
    size_t size = 0;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
        if (pthread_attr_getstack(&attr, &addr, &size) != 0) size = 0;
        pthread_attr_destroy(&attr);
    }
    if (!size) {
        snprintf(reason, reason_size, "signal sampler: pthread_getattr_np gave no stack bounds");
        free(tm);
        return ST_CPU_ERROR;
    }
    tm->stack_lo = (uintptr_t)addr;
    tm->stack_hi = (uintptr_t)addr + size;
    /* anonymous memory: pages are touched only as samples fill them */
    tm->ring_n = ring_samples ? ring_samples : ST_CPU_TIMER_RING;
    tm->ring_bytes = sizeof(st_cpu_timer_sample) * tm->ring_n;
    void *ring = mmap(NULL, tm->ring_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (ring == MAP_FAILED) {
        snprintf(reason, reason_size, "signal sampler: mmap of the sample buffer: %s", strerror(errno));
        free(tm);
        return ST_CPU_NOMEM;
    }
    tm->ring = ring;
    pthread_mutex_lock(&timer_lock);
    int rc = install_handler(reason, reason_size);
    for (int i = 0; rc == 0 && i < ST_MAX_THREADS; i++) {
        if (slot_timer[i]) continue;
        tm->slot = i;
        __atomic_store_n(&slot_timer[i], tm, __ATOMIC_SEQ_CST);
        break;
    }
    int signo = timer_signo;
    pthread_mutex_unlock(&timer_lock);
    if (rc == 0 && tm->slot < 0) {
        snprintf(reason, reason_size, "signal sampler: more than %d timers", ST_MAX_THREADS);
        rc = -1;
    }
    if (rc != 0) {
        st_cpu_timer_close(tm);
        return ST_CPU_ERROR;
    }
    tm->signo = signo;
    struct sigevent ev;
    memset(&ev, 0, sizeof ev);
    ev.sigev_notify = SIGEV_THREAD_ID;
    ev.sigev_signo = signo;
    ev.sigev_value.sival_int = tm->slot;
    ev.sigev_notify_thread_id = tm->tid;
    if (timer_create(CLOCK_THREAD_CPUTIME_ID, &ev, &tm->timer) != 0) {
        int e = errno;
        snprintf(reason, reason_size, "signal sampler: timer_create(CLOCK_THREAD_CPUTIME_ID): %s", strerror(e));
        st_cpu_timer_close(tm);
        return e == EPERM || e == EACCES ? ST_CPU_REFUSED : ST_CPU_ERROR;
    }
    tm->has_timer = 1;
    struct itimerspec its;
    its.it_interval.tv_sec = (time_t)(tm->period_ns / 1000000000u);
    its.it_interval.tv_nsec = (long)(tm->period_ns % 1000000000u);
    its.it_value = its.it_interval;
    if (timer_settime(tm->timer, 0, &its, NULL) != 0) {
        snprintf(reason, reason_size, "signal sampler: timer_settime: %s", strerror(errno));
        st_cpu_timer_close(tm);
        return ST_CPU_ERROR;
    }
    *out = tm;
    return ST_CPU_OK;
}

int64_t st_cpu_timer_cpu_ns(const st_cpu_timer *tm)
{
    struct timespec ts;
    if (!tm || clock_gettime(tm->cpu_clock, &ts) != 0) return -1; /* the thread ended */
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec - tm->cpu0_ns;
}

long st_cpu_timer_drain(st_cpu_timer *tm, st_cpu_sink *sink, const st_cpu_thread *t)
{
    if (!tm || !tm->ring || !sink) return 0;
    uint64_t head = __atomic_load_n(&tm->head, __ATOMIC_ACQUIRE), tail = tm->tail;
    long n = 0;
    pid_t pid = getpid();
    for (; tail < head; tail++, n++) {
        const st_cpu_timer_sample *s = &tm->ring[tail % tm->ring_n];
        uint32_t nf = s->n_frames <= ST_CPU_TIMER_MAX_FRAMES ? s->n_frames : ST_CPU_TIMER_MAX_FRAMES;
        memcpy(sink->frames, s->frames, nf * sizeof *s->frames);
        st_cpu_sample out = {s->t_ns, (uint32_t)pid, (uint32_t)tm->tid, nf, sink->frames, s->gil, NULL};
        /* the slot may be refilled once tail moves past it: copied first */
        __atomic_store_n(&tm->tail, tail + 1, __ATOMIC_RELEASE);
        tm->n_samples++;
        if (sink->on_sample) sink->on_sample(sink->ctx, t, &out);
    }
    return n;
}

void st_cpu_timer_stop(st_cpu_timer *tm)
{
    if (!tm || !tm->has_timer) return;
    timer_delete(tm->timer);
    tm->has_timer = 0;
}

void st_cpu_timer_close(st_cpu_timer *tm)
{
    if (!tm) return;
    st_cpu_timer_stop(tm);
    if (tm->slot >= 0) {
        /* a signal already queued finds the slot empty; one being handled
         * is waited for before its buffer goes */
        __atomic_store_n(&slot_timer[tm->slot], NULL, __ATOMIC_SEQ_CST);
        while (__atomic_load_n(&slot_busy[tm->slot], __ATOMIC_SEQ_CST)) sched_yield();
    }
    if (tm->ring) munmap(tm->ring, tm->ring_bytes);
    free(tm);
}
