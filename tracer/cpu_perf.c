/* cpu_perf.c: per-thread CPU capture through perf_event_open (st_cpu.h):
 * a software CPU-clock event per thread, in period mode, with context
 * switch records (and, when asked, each sample's user registers and stack
 * copy, for DWARF unwinding), its ring mapped and drained by one consumer;
 * the pure on/off-CPU accounting over a thread's switch records; and the frame
 * validation of callchains against the process's executable mappings.
 * Every failure is a status and a one-line reason, so that a refused
 * perf_event_open (a container's seccomp filter, perf_event_paranoid 3)
 * leaves the caller free to fall back. */
#include <errno.h>
#include <limits.h>
#include <linux/perf_event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "st_cpu.h"

#ifndef PERF_RECORD_MISC_SWITCH_OUT_PREEMPT
#define PERF_RECORD_MISC_SWITCH_OUT_PREEMPT (1 << 14)
#endif

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

const char *st_cpu_errno_name(int e)
{
    switch (e) {
    case EPERM: return "EPERM";
    case EACCES: return "EACCES";
    case ENOSYS: return "ENOSYS";
    case ENOENT: return "ENOENT";
    case ENODEV: return "ENODEV";
    case EOPNOTSUPP: return "EOPNOTSUPP";
    case EINVAL: return "EINVAL";
    case ENOMEM: return "ENOMEM";
    case EMFILE: return "EMFILE";
    case ENFILE: return "ENFILE";
    case ESRCH: return "ESRCH";
    case EBUSY: return "EBUSY";
    case E2BIG: return "E2BIG";
    case EOVERFLOW: return "EOVERFLOW";
    default: return "errno";
    }
}

static long read_long_file(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return LONG_MIN;
    long v;
    int ok = fscanf(f, "%ld", &v) == 1;
    fclose(f);
    return ok ? v : LONG_MIN;
}

/* A field of /proc/self/status ("Seccomp:", "CapEff:"), as text. */
static int status_field(const char *name, char *out, size_t n)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    size_t len = strlen(name);
    int found = -1;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, name, len) != 0) continue;
        const char *p = line + len;
        while (*p == ' ' || *p == '\t') p++;
        snprintf(out, n, "%s", p);
        out[strcspn(out, "\n")] = 0;
        found = 0;
        break;
    }
    fclose(f);
    return found;
}

static int have_cap(int cap)
{
    char v[64];
    if (status_field("CapEff:", v, sizeof v) != 0) return 0;
    unsigned long long bits = strtoull(v, NULL, 16);
    return (bits >> cap) & 1;
}

#define CAP_IPC_LOCK_BIT 14

size_t st_cpu_lock_budget(long *mlock_kb, long *rlimit_kb)
{
    long mk = read_long_file("/proc/sys/kernel/perf_event_mlock_kb");
    struct rlimit rl;
    long rk = -1;
    int unlimited = 0;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0) {
        if (rl.rlim_cur == RLIM_INFINITY) unlimited = 1;
        else rk = (long)(rl.rlim_cur / 1024);
    }
    if (mlock_kb) *mlock_kb = mk == LONG_MIN ? -1 : mk;
    if (rlimit_kb) *rlimit_kb = rk;
    /* perf_mmap: past perf_event_mlock_kb per online CPU (counted per user),
     * pinned pages count against RLIMIT_MEMLOCK unless CAP_IPC_LOCK. */
    if (unlimited || have_cap(CAP_IPC_LOCK_BIT) || read_long_file("/proc/sys/kernel/perf_event_paranoid") == -1)
        return SIZE_MAX;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus < 1) cpus = 1;
    size_t b = 0;
    if (mk > 0) b += (size_t)mk * 1024 * (size_t)cpus;
    if (rk > 0) b += (size_t)rk * 1024;
    return b;
}

static size_t page_bytes(void)
{
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? (size_t)p : 4096;
}

/* Rounds down to a power of two number of pages, at least one. */
static size_t ring_round(size_t bytes)
{
    size_t pg = page_bytes(), r = pg;
    while (r * 2 <= bytes && r * 2 > r) r *= 2;
    return r;
}

int st_cpu_ring_map(st_cpu_thread *t, int fd, size_t bytes)
{
    size_t pg = page_bytes();
    int map_err = 0;
    for (size_t data = ring_round(bytes);; data /= 2) {
        void *p = mmap(NULL, pg + data, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p != MAP_FAILED) {
            t->map = p;
            t->map_bytes = pg + data;
            t->data = (unsigned char *)p + pg;
            t->data_bytes = data;
            return 0;
        }
        map_err = errno;
        if (!t->refused_bytes) t->refused_bytes = data;
        if ((map_err != EPERM && map_err != ENOMEM) || data <= pg) return map_err;
    }
}

size_t st_cpu_ring_bytes_for(unsigned n_threads)
{
    if (n_threads == 0) n_threads = 16;
    size_t budget = st_cpu_lock_budget(NULL, NULL);
    size_t want = ST_CPU_DEFAULT_RING_BYTES;
    if (budget != SIZE_MAX) {
        size_t per = budget / n_threads;
        /* each ring also locks its metadata page */
        per = per > page_bytes() ? per - page_bytes() : page_bytes();
        if (per < want) want = per;
    }
    return ring_round(want);
}

/* Why perf_event_open failed, in one line, and the status it maps to. */
static int open_failure(st_cpu_thread *t, int e)
{
    long paranoid = read_long_file("/proc/sys/kernel/perf_event_paranoid");
    char seccomp[32] = "?";
    status_field("Seccomp:", seccomp, sizeof seccomp);
    int filtered = strcmp(seccomp, "2") == 0;
    char par[32];
    if (paranoid == LONG_MIN) snprintf(par, sizeof par, "unreadable");
    else snprintf(par, sizeof par, "%ld", paranoid);
    t->err = e;
    switch (e) {
    case EPERM:
    case ENOSYS:
        if (filtered || e == EPERM)
            snprintf(t->reason, sizeof t->reason,
                     "perf_event_open: %s: %s (perf_event_paranoid %s, Seccomp %s)", st_cpu_errno_name(e),
                     filtered ? "seccomp refused perf_event_open"
                              : "refused (a seccomp filter, lockdown or missing capability)",
                     par, seccomp);
        else
            snprintf(t->reason, sizeof t->reason,
                     "perf_event_open: ENOSYS: the kernel has no perf events (perf_event_paranoid %s)", par);
        return e == ENOSYS && !filtered ? ST_CPU_UNSUPPORTED : ST_CPU_REFUSED;
    case EACCES:
        if (t->wait_stacks)
            snprintf(t->reason, sizeof t->reason,
                     "perf_event_open: EACCES: perf_event_paranoid %s refuses the context-switch event to this "
                     "user (it counts in the kernel: needs <= 1, or CAP_PERFMON)", par);
        else
            snprintf(t->reason, sizeof t->reason,
                     "perf_event_open: EACCES: perf_event_paranoid %s refuses user-space events to this user "
                     "(needs <= 2, or CAP_PERFMON)", par);
        return ST_CPU_REFUSED;
    case ENOENT:
    case ENODEV:
    case EOPNOTSUPP:
    case EINVAL:
        snprintf(t->reason, sizeof t->reason,
                 "perf_event_open: %s: the kernel does not support this event (cpu-clock with "
                 "context_switch, CLOCK_MONOTONIC)", st_cpu_errno_name(e));
        return ST_CPU_UNSUPPORTED;
    case ESRCH:
        snprintf(t->reason, sizeof t->reason, "perf_event_open: ESRCH: no thread %d", (int)t->tid);
        return ST_CPU_EINVAL;
    default:
        snprintf(t->reason, sizeof t->reason, "perf_event_open: %s (%d): %s", st_cpu_errno_name(e), e, strerror(e));
        return ST_CPU_ERROR;
    }
}

static void thread_reset(st_cpu_thread *t, pid_t tid)
{
    memset(t, 0, sizeof *t);
    t->fd = -1;
    t->tid = tid;
}

size_t st_cpu_user_stack_ring(uint32_t user_stack)
{
    size_t want = (size_t)ST_CPU_USER_STACK_RECORDS * (user_stack + ST_CPU_USER_STACK_OVERHEAD);
    size_t r = page_bytes();
    while (r < want && r * 2 > r) r *= 2;
    return r < ST_CPU_DEFAULT_RING_BYTES ? ST_CPU_DEFAULT_RING_BYTES : r;
}

/* The user registers a sample copies for unwinding: bp, sp, ip (x86-64
 * perf_regs numbering, arch/x86/include/uapi/asm/perf_regs.h). */
#define ST_PERF_REG_X86_BP 6
#define ST_PERF_REG_X86_SP 7
#define ST_PERF_REG_X86_IP 8
#define USER_REGS_MASK ((1ull << ST_PERF_REG_X86_BP) | (1ull << ST_PERF_REG_X86_SP) | (1ull << ST_PERF_REG_X86_IP))

static int open_event(st_cpu_thread *t, pid_t tid, const st_cpu_config *cfg);

/* A user-stack open that failed or got too small a ring: the same event
 * without the user stack, the reason kept (t->user_stack_reason, and at the
 * front of t->reason). */
static int open_without_user_stack(st_cpu_thread *t, pid_t tid, const st_cpu_config *cfg, const char *why)
{
    char keep[sizeof t->user_stack_reason];
    snprintf(keep, sizeof keep, "%s", why);
    st_cpu_config plain = *cfg;
    plain.user_stack = 0;
    int rc = st_cpu_thread_open(t, tid, &plain);
    snprintf(t->user_stack_reason, sizeof t->user_stack_reason, "%s", keep);
    char rest[sizeof t->reason];
    snprintf(rest, sizeof rest, "%s", t->reason);
    size_t len = strlen(keep);
    snprintf(t->reason, sizeof t->reason, "%s", keep);
    if (rest[0]) snprintf(t->reason + len, sizeof t->reason - len, "; %.*s", (int)(sizeof t->reason - len - 3), rest);
    return rc;
}

int st_cpu_thread_open(st_cpu_thread *t, pid_t tid, const st_cpu_config *cfg)
{
    if (!t) return ST_CPU_EINVAL;
    if (tid <= 0) tid = (pid_t)syscall(SYS_gettid);
    thread_reset(t, tid);
    st_cpu_config def = {0};
    if (!cfg) cfg = &def;
    if (cfg->user_stack && (cfg->user_stack < ST_CPU_USER_STACK_MIN || cfg->user_stack > ST_CPU_USER_STACK_MAX ||
                            (cfg->user_stack & 7) != 0)) {
        snprintf(t->reason, sizeof t->reason, "user stack of %u bytes: use a multiple of 8 from %u to %u",
                 cfg->user_stack, ST_CPU_USER_STACK_MIN, ST_CPU_USER_STACK_MAX);
        return ST_CPU_EINVAL;
    }
#if !defined(__x86_64__)
    if (cfg->user_stack)
        return open_without_user_stack(t, tid, cfg, "user stacks: x86-64 only (its perf_regs numbering)");
#endif
    int rc = open_event(t, tid, cfg);
    if (!t->user_stack || rc != ST_CPU_OK) {
        if (t->user_stack && rc == ST_CPU_UNSUPPORTED) { /* the fields refused: EINVAL and the like */
            char why[sizeof t->user_stack_reason];
            snprintf(why, sizeof why, "user stacks off: %.140s", t->reason);
            st_cpu_thread_close(t);
            return open_without_user_stack(t, tid, cfg, why);
        }
        return rc;
    }
    /* A ring that holds fewer than 2 samples loses nearly every one. */
    size_t rec = cfg->user_stack + ST_CPU_USER_STACK_OVERHEAD;
    if (t->data_bytes < 2 * rec) {
        char why[sizeof t->user_stack_reason];
        snprintf(why, sizeof why, "user stacks off: a ring of %zu KiB holds fewer than 2 samples of a %u-byte user stack",
                 t->data_bytes / 1024, cfg->user_stack);
        st_cpu_thread_close(t);
        return open_without_user_stack(t, tid, cfg, why);
    }
    return rc;
}

static int open_event(st_cpu_thread *t, pid_t tid, const st_cpu_config *cfg)
{

    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.type = PERF_TYPE_SOFTWARE;
    a.config = PERF_COUNT_SW_CPU_CLOCK;
    uint64_t period = cfg->period_ns ? cfg->period_ns : ST_CPU_DEFAULT_PERIOD_NS;
    if (cfg->wait_stacks) {
        /* A sample at every context switch, the user chain only. The switch
         * happens in the kernel, so the event must count kernel-mode events
         * (exclude_kernel 0: perf_event_paranoid <= 1, CAP_PERFMON or root);
         * with exclude_kernel the kernel drops every one of them. */
        a.config = PERF_COUNT_SW_CONTEXT_SWITCHES;
        period = 1;
        t->wait_stacks = 1;
    }
    if (period != UINT64_MAX) {
        a.sample_period = period;
        t->period_ns = cfg->wait_stacks ? 0 : period;
    }
    a.sample_type = PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME |
                    (cfg->no_callchain && !cfg->wait_stacks ? 0 : PERF_SAMPLE_CALLCHAIN);
    t->callchain = !cfg->no_callchain || cfg->wait_stacks;
#if defined(__x86_64__)
    if (cfg->user_stack && !cfg->wait_stacks && period != UINT64_MAX) {
        a.sample_type |= PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER;
        a.sample_regs_user = USER_REGS_MASK;
        a.sample_stack_user = cfg->user_stack;
        t->user_stack = cfg->user_stack;
    }
#endif
    a.disabled = 1;  /* enabled once the ring is mapped */
    a.inherit = 0;   /* an inherited per-thread event cannot be mapped */
    a.exclude_kernel = cfg->wait_stacks ? 0 : 1;
    a.exclude_hv = 1;
    a.exclude_callchain_kernel = 1;
    a.context_switch = cfg->wait_stacks ? 0 : 1;
    a.sample_id_all = 1;
    a.use_clockid = 1;
    a.clockid = CLOCK_MONOTONIC;
    /* No wakeups: the consumer polls the ring. */
    a.watermark = 1;
    a.wakeup_watermark = 0;

    int fd = (int)syscall(SYS_perf_event_open, &a, tid, -1, -1, PERF_FLAG_FD_CLOEXEC);
    if (fd < 0) return open_failure(t, errno);
    t->fd = fd;

    size_t want = cfg->ring_bytes ? ring_round(cfg->ring_bytes) : st_cpu_ring_bytes_for(0);
    if (t->user_stack && want < st_cpu_user_stack_ring(t->user_stack)) want = st_cpu_user_stack_ring(t->user_stack);
    int map_err = st_cpu_ring_map(t, fd, want);
    long mk, rk;
    st_cpu_lock_budget(&mk, &rk);
    if (!t->map) {
        snprintf(t->reason, sizeof t->reason,
                 "mmap of the perf ring refused (%s) down to one page: perf_event_mlock_kb %ld, "
                 "RLIMIT_MEMLOCK %ld KiB", st_cpu_errno_name(map_err), mk, rk);
        t->err = map_err;
        close(fd);
        t->fd = -1;
        return map_err == EPERM || map_err == ENOMEM ? ST_CPU_NOMEM : ST_CPU_ERROR;
    }
    if (t->refused_bytes)
        snprintf(t->reason, sizeof t->reason,
                 "ring of %zu KiB refused (%s: perf_event_mlock_kb %ld, RLIMIT_MEMLOCK %ld KiB): %zu KiB used",
                 t->refused_bytes / 1024, st_cpu_errno_name(map_err), mk, rk, t->data_bytes / 1024);
    if (ioctl(fd, PERF_EVENT_IOC_ENABLE, 0) != 0) {
        int e = errno;
        st_cpu_thread_close(t);
        t->err = e;
        snprintf(t->reason, sizeof t->reason, "PERF_EVENT_IOC_ENABLE: %s", st_cpu_errno_name(e));
        return ST_CPU_ERROR;
    }
    return ST_CPU_OK;
}

void st_cpu_thread_close(st_cpu_thread *t)
{
    if (!t) return;
    if (t->map) munmap(t->map, t->map_bytes);
    if (t->fd >= 0) close(t->fd);
    t->map = NULL;
    t->data = NULL;
    t->data_bytes = 0;
    t->map_bytes = 0;
    t->fd = -1;
}

/* Copies n bytes at ring offset off (which may wrap the end). */
static void ring_copy(const st_cpu_thread *t, uint64_t off, void *dst, size_t n)
{
    size_t mask = t->data_bytes - 1, at = (size_t)(off & mask);
    size_t first = t->data_bytes - at;
    if (first >= n) {
        memcpy(dst, t->data + at, n);
    } else {
        memcpy(dst, t->data + at, first);
        memcpy((unsigned char *)dst + first, t->data, n - first);
    }
}

/* The sample_id_all trailer for IP|TID|TIME: pid, tid (u32 each), time. */
#define ID_TRAILER 16

static int64_t trailer_time(const unsigned char *rec, size_t size)
{
    uint64_t tm;
    memcpy(&tm, rec + size - 8, 8);
    return (int64_t)tm;
}

long st_cpu_ring_each(st_cpu_thread *t, st_cpu_sink *sink, st_cpu_record_fn fn)
{
    if (!t || !t->map || !sink) return 0;
    struct perf_event_mmap_page *meta = t->map;
    uint64_t head = __atomic_load_n(&meta->data_head, __ATOMIC_ACQUIRE);
    uint64_t tail = meta->data_tail;
    long n = 0;
    if (head - tail > t->data_bytes) { /* cannot happen with a sane kernel: resynchronise */
        t->n_corrupt++;
        tail = head;
    }
    unsigned char *rec = (unsigned char *)sink->rec;
    while (tail < head) {
        uint64_t avail = head - tail;
        struct perf_event_header h;
        if (avail < sizeof h) { t->n_corrupt++; tail = head; break; }
        ring_copy(t, tail, &h, sizeof h);
        if (h.size < sizeof h || h.size > avail || (h.size & 7) != 0) {
            t->n_corrupt++;
            tail = head;
            break;
        }
        ring_copy(t, tail, rec, h.size);
        tail += h.size;
        n++;
        fn(t, sink, h.type, h.misc, rec, h.size);
    }
    __atomic_store_n(&meta->data_tail, tail, __ATOMIC_RELEASE);
    return n;
}

int st_cpu_sample_parse(const st_cpu_thread *t, const unsigned char *rec, size_t size, st_cpu_sample *s,
                        uint64_t *frames, size_t max_frames, st_cpu_ustack *us)
{
    /* ip, pid, tid, time, then nr and the chain when asked for. */
    size_t at = sizeof(struct perf_event_header);
    if (size < at + 24) return -1;
    uint64_t ip, tm, nr = 0;
    uint32_t pt[2];
    memcpy(&ip, rec + at, 8);
    memcpy(pt, rec + at + 8, 8);
    memcpy(&tm, rec + at + 16, 8);
    at += 24;
    *s = (st_cpu_sample){(int64_t)tm, pt[0], pt[1], 0, frames, ST_CPU_GIL_NO_PROBE, NULL};
    /* a wait-stack sample's ip is the kernel's (the switch): its
     * user chain starts at the user ip instead */
    if (!t->wait_stacks && max_frames) frames[s->n_frames++] = ip;
    if (t->callchain) {
        if (size - at < 8) return t->user_stack ? -1 : 0;
        memcpy(&nr, rec + at, 8);
        at += 8;
        if (nr > (size - at) / 8) return -1;
        int first = 1;
        for (uint64_t i = 0; i < nr; i++) {
            uint64_t a;
            memcpy(&a, rec + at + 8 * i, 8);
            if (a >= (uint64_t)PERF_CONTEXT_MAX) continue; /* PERF_CONTEXT_USER and the like */
            /* the chain repeats the sampled ip as its first user frame */
            if (first && a == ip && !t->wait_stacks) { first = 0; continue; }
            first = 0;
            if (s->n_frames < max_frames) frames[s->n_frames++] = a;
        }
        at += 8 * (size_t)nr;
    }
    if (!t->user_stack) return 0;
    /* PERF_SAMPLE_REGS_USER: abi, then the registers of the mask in bit
     * order (bp, sp, ip) unless abi is PERF_SAMPLE_REGS_ABI_NONE (a sample
     * with no user context); PERF_SAMPLE_STACK_USER: size, the bytes, and
     * dyn_size after a non-empty copy. */
    uint64_t abi, regs[3] = {0, 0, 0}, copy, dyn = 0;
    if (size - at < 8) return -1;
    memcpy(&abi, rec + at, 8);
    at += 8;
    if (abi != PERF_SAMPLE_REGS_ABI_NONE) {
        if (size - at < sizeof regs) return -1;
        memcpy(regs, rec + at, sizeof regs);
        at += sizeof regs;
    }
    if (size - at < 8) return -1;
    memcpy(&copy, rec + at, 8);
    at += 8;
    if (copy > size - at) return -1;
    const unsigned char *data = rec + at;
    at += (size_t)copy;
    if (copy) {
        if (size - at < 8) return -1;
        memcpy(&dyn, rec + at, 8);
        if (dyn > copy) return -1;
    }
    if (abi != PERF_SAMPLE_REGS_ABI_NONE && dyn) {
        *us = (st_cpu_ustack){regs[2], regs[1], regs[0], data, dyn};
        s->ustack = us;
    }
    return 0;
}

/* The CPU-clock event's records: switches, samples, losses. */
static void perf_record(st_cpu_thread *t, st_cpu_sink *sink, uint32_t type, uint16_t misc, const unsigned char *rec,
                        size_t size)
{
    switch (type) {
    case PERF_RECORD_SWITCH: {
        if (size < sizeof(struct perf_event_header) + ID_TRAILER) { t->n_corrupt++; return; }
        st_cpu_switch s;
        s.t_ns = trailer_time(rec, size);
        s.out = (misc & PERF_RECORD_MISC_SWITCH_OUT) != 0;
        s.preempted = s.out && (misc & PERF_RECORD_MISC_SWITCH_OUT_PREEMPT) != 0;
        t->n_switches++;
        if (sink->on_switch) sink->on_switch(sink->ctx, t, &s);
        break;
    }
    case PERF_RECORD_SAMPLE: {
        st_cpu_sample s;
        st_cpu_ustack us;
        if (st_cpu_sample_parse(t, rec, size, &s, sink->frames, sizeof sink->frames / sizeof sink->frames[0], &us) != 0) {
            t->n_corrupt++;
            return;
        }
        t->n_samples++;
        if (sink->on_sample) sink->on_sample(sink->ctx, t, &s);
        break;
    }
    case PERF_RECORD_LOST: {
        if (size < sizeof(struct perf_event_header) + 16) { t->n_corrupt++; return; }
        uint64_t lost;
        memcpy(&lost, rec + sizeof(struct perf_event_header) + 8, 8);
        t->lost += lost;
        int64_t tm = size >= sizeof(struct perf_event_header) + 16 + ID_TRAILER ? trailer_time(rec, size) : 0;
        if (sink->on_lost) sink->on_lost(sink->ctx, t, lost, tm);
        break;
    }
    default: /* throttle records and the like */
        t->n_other++;
        break;
    }
}

long st_cpu_thread_drain(st_cpu_thread *t, st_cpu_sink *sink)
{
    return st_cpu_ring_each(t, sink, perf_record);
}

/* ---- frame validation ---------------------------------------------------- */

int st_cpu_maps_parse(st_cpu_maps *m, const char *text)
{
    m->n = 0;
    const char *p = text;
    while (p && *p) {
        const char *eol = strchr(p, '\n');
        unsigned long long lo, hi;
        char perms[8];
        if (sscanf(p, "%llx-%llx %7s", &lo, &hi, perms) == 3 && perms[2] == 'x' && hi > lo) {
            if (m->n == m->cap) {
                size_t cap = m->cap ? m->cap * 2 : 64;
                st_cpu_exec_map *v = realloc(m->v, cap * sizeof *v);
                if (!v) return -1;
                m->v = v;
                m->cap = cap;
            }
            m->v[m->n++] = (st_cpu_exec_map){lo, hi};
        }
        p = eol ? eol + 1 : NULL;
    }
    /* /proc/PID/maps lists mappings in address order; a hand-made text may not. */
    for (size_t i = 1; i < m->n; i++) {
        st_cpu_exec_map x = m->v[i];
        size_t j = i;
        for (; j > 0 && m->v[j - 1].lo > x.lo; j--) m->v[j] = m->v[j - 1];
        m->v[j] = x;
    }
    return 0;
}

static int maps_reload(st_cpu_maps *m);

int st_cpu_maps_load(st_cpu_maps *m, const char *path)
{
    snprintf(m->path, sizeof m->path, "%s", path ? path : "/proc/self/maps");
    return maps_reload(m);
}

static int maps_reload(st_cpu_maps *m)
{
    if (!m->min_refresh_ns) m->min_refresh_ns = 100000000;
    m->loaded_ns = mono_ns();
    m->n_loads++;
    FILE *f = fopen(m->path, "r");
    if (!f) return -1;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    if (!buf) { fclose(f); return -1; }
    for (;;) {
        if (len + 4096 > cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) { free(buf); fclose(f); return -1; }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + len, 1, cap - len - 1, f);
        if (got == 0) break;
        len += got;
    }
    fclose(f);
    buf[len] = 0;
    int rc = st_cpu_maps_parse(m, buf);
    free(buf);
    return rc;
}

int st_cpu_maps_contains(const st_cpu_maps *m, uint64_t addr)
{
    size_t lo = 0, hi = m->n;
    while (lo < hi) { /* the last mapping that starts at or below addr */
        size_t mid = lo + (hi - lo) / 2;
        if (m->v[mid].lo <= addr) lo = mid + 1;
        else hi = mid;
    }
    return lo > 0 && addr <= m->v[lo - 1].hi;
}

size_t st_cpu_chain_cut(st_cpu_maps *m, const uint64_t *frames, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (st_cpu_maps_contains(m, frames[i])) continue;
        if (m->path[0] && mono_ns() - m->loaded_ns >= m->min_refresh_ns && maps_reload(m) == 0 &&
            st_cpu_maps_contains(m, frames[i]))
            continue;
        return i;
    }
    return n;
}

void st_cpu_maps_free(st_cpu_maps *m)
{
    if (!m) return;
    free(m->v);
    m->v = NULL;
    m->n = m->cap = 0;
}
