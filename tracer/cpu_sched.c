/* cpu_sched.c: the sched_switch tracepoint event per thread (st_cpusched.h;
 * docs/cpu.md, "The sched_switch tracepoint"): where tracepoint events are
 * allowed (root, CAP_PERFMON, perf_event_paranoid -1) and tracefs is
 * mounted, each registered thread's switch-outs are sampled with the task
 * state the thread left the CPU in (prev_state, read at the field offset
 * the tracepoint's format file gives) and the callchain with its kernel
 * part: futex_wait, pipe_read, hrtimer_nanosleep, a driver's ioctl path.
 * The kernel frames are named at close from /proc/kallsyms (st_ksyms_*).
 * The library never mounts tracefs: a library has no business mounting
 * filesystems; without it the level stays where it was, with the reason. */
#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "st_cpusched.h"

static const char *const tracefs_roots[] = {"/sys/kernel/tracing", "/sys/kernel/debug/tracing"};

static pthread_once_t fmt_once = PTHREAD_ONCE_INIT;
static st_cpusched_format fmt;
static uint64_t switch_id;
static char fmt_reason[256];
/* the first open's refusal, for meta cpu_sched_reason: written once, by the
 * thread that set `refusal` from 0 to 1, then published by `refused` */
static char open_reason[256];
static int refusal, refused;

const char *st_cpusched_reason(void)
{
    return __atomic_load_n(&refused, __ATOMIC_ACQUIRE) ? open_reason : "";
}

static int refuse(st_cpu_thread *t, int status)
{
    if (__atomic_exchange_n(&refusal, 1, __ATOMIC_ACQ_REL) == 0) {
        snprintf(open_reason, sizeof open_reason, "%s", t->reason);
        __atomic_store_n(&refused, 1, __ATOMIC_RELEASE);
    }
    return status;
}

/* Reads a file whole (at most size - 1 bytes); its length, or -1 with errno. */
static ssize_t read_text(const char *path, char *buf, size_t size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    size_t n = 0;
    while (n < size - 1) {
        ssize_t k = read(fd, buf + n, size - 1 - n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        n += (size_t)k;
    }
    int e = errno;
    close(fd);
    errno = e;
    buf[n] = 0;
    return (ssize_t)n;
}

/* "field:TYPE NAME;\toffset:N;\tsize:N;" of the field named name. */
static int field_of(const char *text, const char *name, int *off, int *size)
{
    size_t len = strlen(name);
    for (const char *p = strstr(text, "field:"); p; p = strstr(p + 1, "field:")) {
        const char *semi = strchr(p, ';');
        if (!semi) return -1;
        /* the name is the last word before ';', with an array's [N] after it */
        const char *e = semi;
        const char *br = memchr(p, '[', (size_t)(semi - p));
        if (br) e = br;
        if ((size_t)(e - p) < len || memcmp(e - len, name, len) != 0) continue;
        char c = e - len > p ? e[-(long)len - 1] : 0;
        if (c != ' ' && c != '\t' && c != '*') continue;
        const char *o = strstr(semi, "offset:"), *s = strstr(semi, "size:");
        const char *nl = strchr(semi, '\n');
        if (!o || !s || (nl && (o > nl || s > nl))) return -1;
        *off = atoi(o + 7);
        *size = atoi(s + 5);
        return *off >= 0 && *size > 0 ? 0 : -1;
    }
    return -1;
}

int st_cpusched_parse_format(const char *text, st_cpusched_format *f)
{
    memset(f, 0, sizeof *f);
    if (field_of(text, "prev_pid", &f->prev_pid_off, &f->prev_pid_size) ||
        field_of(text, "prev_state", &f->prev_state_off, &f->prev_state_size))
        return -1;
    int sz;
    if (field_of(text, "common_type", &f->common_type_off, &sz)) f->common_type_off = -1;
    if (f->prev_pid_size != 4 || (f->prev_state_size != 4 && f->prev_state_size != 8)) return -1;
    /* __print_flags(..., { 0x00000001, "S" }, { 0x00000002, "D" }, ...): the
     * letters of this kernel (they changed over the years) */
    const char *p = strstr(text, "print fmt:");
    uint64_t top = 0;
    for (p = p ? strstr(p, "{ 0x") : NULL; p; p = strstr(p + 1, "{ 0x")) {
        char *end;
        unsigned long long bit = strtoull(p + 2, &end, 16);
        const char *q = end;
        while (*q == ',' || *q == ' ') q++;
        if (*q != '"' || !q[1] || q[2] != '"' || !bit || (bit & (bit - 1))) continue;
        int i = __builtin_ctzll(bit);
        if (i < 32) f->letters[i] = q[1];
        if (bit > top) top = bit;
    }
    if (!top) { /* the letters of Linux 4.14 and later */
        static const char def[] = "SDTtXZPI";
        for (int i = 0; def[i]; i++) f->letters[i] = def[i];
        top = 0x80;
    }
    f->preempt_bit = top << 1; /* TASK_REPORT_MAX: above every reported state */
    return 0;
}

int st_cpusched_state(const st_cpusched_format *f, uint64_t s)
{
    if (s & f->preempt_bit) return '+';
    s &= f->preempt_bit - 1;
    if (!s) return 'R';
    int i = __builtin_ctzll(s);
    return i < 32 && f->letters[i] ? f->letters[i] : '?';
}

static void fmt_load(void)
{
    char path[128], buf[8192];
    int first_err = 0;
    for (size_t i = 0; i < sizeof tracefs_roots / sizeof tracefs_roots[0]; i++) {
        snprintf(path, sizeof path, "%s/events/sched/sched_switch/id", tracefs_roots[i]);
        if (read_text(path, buf, sizeof buf) <= 0) {
            if (!first_err) first_err = errno ? errno : ENOENT;
            if (errno == EACCES) {
                snprintf(fmt_reason, sizeof fmt_reason, "tracefs: %s: EACCES (readable by root only)", path);
                return;
            }
            continue;
        }
        switch_id = strtoull(buf, NULL, 10);
        snprintf(path, sizeof path, "%s/events/sched/sched_switch/format", tracefs_roots[i]);
        if (read_text(path, buf, sizeof buf) <= 0 || st_cpusched_parse_format(buf, &fmt) != 0) {
            snprintf(fmt_reason, sizeof fmt_reason, "tracefs: %s: unreadable, or without prev_pid and prev_state",
                     path);
            return;
        }
        return;
    }
    snprintf(fmt_reason, sizeof fmt_reason,
             "tracefs not mounted (no %s/events/sched/sched_switch/id, nor under %s; as root: mount -t tracefs "
             "nodev %s)", tracefs_roots[0], tracefs_roots[1], tracefs_roots[0]);
    (void)first_err;
}

static void set_reason(st_cpu_thread *t, int e)
{
    t->err = e;
    if (e == EACCES || e == EPERM) {
        char buf[32] = "?";
        read_text("/proc/sys/kernel/perf_event_paranoid", buf, sizeof buf);
        buf[strcspn(buf, "\n")] = 0;
        snprintf(t->reason, sizeof t->reason,
                 "perf_event_open: %s: perf_event_paranoid %s refuses the sched_switch tracepoint to this user "
                 "(needs -1, CAP_PERFMON or root)", st_cpu_errno_name(e), buf);
    } else {
        snprintf(t->reason, sizeof t->reason, "perf_event_open: %s (%d): %s (the sched_switch tracepoint)",
                 st_cpu_errno_name(e), e, strerror(e));
    }
}

int st_cpusched_open(st_cpu_thread *t, size_t ring_bytes)
{
    memset(t, 0, sizeof *t);
    t->fd = -1;
    t->tid = (pid_t)syscall(SYS_gettid);
    t->sched = 1;
    t->wait_stacks = 1;
    t->callchain = 1;
    pthread_once(&fmt_once, fmt_load);
    if (fmt_reason[0]) {
        snprintf(t->reason, sizeof t->reason, "%s", fmt_reason);
        return refuse(t, ST_CPU_UNSUPPORTED);
    }
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.type = PERF_TYPE_TRACEPOINT;
    a.config = switch_id;
    a.sample_period = 1;
    a.sample_type = PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CALLCHAIN | PERF_SAMPLE_RAW;
    a.disabled = 1;
    a.exclude_hv = 1;
    a.use_clockid = 1;
    a.clockid = CLOCK_MONOTONIC;
    a.watermark = 1;
    a.wakeup_watermark = 0;
    int fd = (int)syscall(SYS_perf_event_open, &a, t->tid, -1, -1, PERF_FLAG_FD_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        set_reason(t, e);
        return refuse(t, e == EACCES || e == EPERM ? ST_CPU_REFUSED : ST_CPU_UNSUPPORTED);
    }
    t->fd = fd;
    int map_err = st_cpu_ring_map(t, fd, ring_bytes);
    if (!t->map || ioctl(fd, PERF_EVENT_IOC_ENABLE, 0) != 0) {
        int e = t->map ? errno : map_err;
        st_cpu_thread_close(t);
        t->err = e;
        snprintf(t->reason, sizeof t->reason, "%s of the sched_switch event's ring: %s",
                 t->map ? "PERF_EVENT_IOC_ENABLE" : "mmap", st_cpu_errno_name(e));
        return refuse(t, ST_CPU_NOMEM);
    }
    return ST_CPU_OK;
}

/* One PERF_RECORD_SAMPLE: ip, pid/tid, time, the chain (nr, then entries
 * with PERF_CONTEXT_KERNEL before the kernel frames and PERF_CONTEXT_USER
 * before the user ones), then the raw record (u32 size, bytes). 0, or -1
 * when malformed. */
static int parse_sample(st_cpu_thread *t, st_cpu_sink *sink, const unsigned char *rec, size_t size)
{
    size_t at = sizeof(struct perf_event_header);
    if (size < at + 32) return -1;
    uint64_t ip, tm, nr;
    uint32_t pt[2];
    memcpy(&ip, rec + at, 8);
    memcpy(pt, rec + at + 8, 8);
    memcpy(&tm, rec + at + 16, 8);
    memcpy(&nr, rec + at + 24, 8);
    at += 32;
    if (nr > (size - at) / 8) return -1;
    const unsigned char *chain = rec + at;
    at += nr * 8;
    uint32_t raw_size;
    if (size < at + 4) return -1;
    memcpy(&raw_size, rec + at, 4);
    at += 4;
    if (raw_size > size - at) return -1;
    const unsigned char *raw = rec + at;
    if ((size_t)fmt.prev_pid_off + 4 > raw_size || (size_t)fmt.prev_state_off + (size_t)fmt.prev_state_size > raw_size)
        return -1;
    int32_t prev_pid;
    memcpy(&prev_pid, raw + fmt.prev_pid_off, 4);
    if (prev_pid != (int32_t)t->tid) return 0; /* not this thread's switch-out */
    uint64_t state = 0;
    if (fmt.prev_state_size == 8) memcpy(&state, raw + fmt.prev_state_off, 8);
    else {
        uint32_t s32;
        memcpy(&s32, raw + fmt.prev_state_off, 4);
        state = s32;
    }
    st_cpu_sample s = {(int64_t)tm, pt[0], pt[1], 0, sink->frames, ST_CPU_GIL_NO_PROBE, NULL};
    uint32_t n_kernel = 0;
    size_t max = sizeof sink->frames / sizeof sink->frames[0];
    int user = 0;
    for (uint64_t i = 0; i < nr; i++) {
        uint64_t a;
        memcpy(&a, chain + 8 * i, 8);
        if (a >= (uint64_t)PERF_CONTEXT_MAX) {
            if (a == (uint64_t)PERF_CONTEXT_USER) user = 1;
            else if (a == (uint64_t)PERF_CONTEXT_KERNEL) user = 0;
            continue;
        }
        if (s.n_frames == max) break;
        /* kernel frames first; a kernel entry after the user ones would break
         * that order, and is left out (not seen: the kernel writes its part first) */
        if (!user && s.n_frames != n_kernel) continue;
        sink->frames[s.n_frames++] = a;
        if (!user) n_kernel++;
    }
    (void)ip;
    t->n_samples++;
    if (sink->on_sched) sink->on_sched(sink->ctx, t, &s, n_kernel, st_cpusched_state(&fmt, state));
    return 0;
}

/* The tracepoint event's records: its samples and losses (no
 * sample_id_all: a loss has no time). */
static void sched_record(st_cpu_thread *t, st_cpu_sink *sink, uint32_t type, uint16_t misc, const unsigned char *rec,
                         size_t size)
{
    const size_t hdr = sizeof(struct perf_event_header);
    (void)misc;
    if (type == PERF_RECORD_SAMPLE) {
        if (parse_sample(t, sink, rec, size)) t->n_corrupt++;
    } else if (type == PERF_RECORD_LOST && size >= hdr + 16) {
        uint64_t lost;
        memcpy(&lost, rec + hdr + 8, 8);
        t->lost += lost;
        if (sink->on_lost) sink->on_lost(sink->ctx, t, lost, 0);
    } else {
        t->n_other++;
    }
}

long st_cpusched_drain(st_cpu_thread *t, st_cpu_sink *sink)
{
    return st_cpu_ring_each(t, sink, sched_record);
}

/* ---- /proc/kallsyms ---- */

typedef struct ksym {
    uint64_t addr;
    uint32_t name; /* offset in names */
} ksym;

struct st_ksyms {
    ksym *v;
    size_t n, cap;
    char *names;
    size_t names_len, names_cap;
    uint64_t lo, hi;
};

static int ksym_cmp(const void *a, const void *b)
{
    uint64_t x = ((const ksym *)a)->addr, y = ((const ksym *)b)->addr;
    return x < y ? -1 : x > y;
}

void st_ksyms_free(st_ksyms *k)
{
    if (!k) return;
    free(k->v);
    free(k->names);
    free(k);
}

st_ksyms *st_ksyms_load(const char *path, char *reason, size_t size)
{
    if (!path) path = "/proc/kallsyms";
    FILE *f = fopen(path, "re");
    if (!f) {
        snprintf(reason, size, "%s: %s", path, strerror(errno));
        return NULL;
    }
    st_ksyms *k = calloc(1, sizeof *k);
    char line[512];
    int nonzero = 0;
    while (k && fgets(line, sizeof line, f)) {
        char *end;
        unsigned long long a = strtoull(line, &end, 16);
        if (end == line || end[0] != ' ' || !end[1] || end[2] != ' ') continue;
        char type = end[1];
        if (a) nonzero = 1;
        /* text symbols only (T, t; W, w weak ones in text) */
        if (type != 'T' && type != 't' && type != 'W' && type != 'w') continue;
        char *name = end + 3;
        size_t len = strcspn(name, " \t\n");
        if (!len) continue;
        if (k->n == k->cap) {
            size_t cap = k->cap ? k->cap * 2 : 65536;
            ksym *v = realloc(k->v, cap * sizeof *v);
            if (!v) goto oom;
            k->v = v;
            k->cap = cap;
        }
        if (k->names_len + len + 1 > k->names_cap) {
            size_t cap = k->names_cap ? k->names_cap * 2 : 1 << 20;
            while (cap < k->names_len + len + 1) cap *= 2;
            char *v = realloc(k->names, cap);
            if (!v) goto oom;
            k->names = v;
            k->names_cap = cap;
        }
        memcpy(k->names + k->names_len, name, len);
        k->names[k->names_len + len] = 0;
        k->v[k->n++] = (ksym){a, (uint32_t)k->names_len};
        k->names_len += len + 1;
    }
    fclose(f);
    if (!k) {
        snprintf(reason, size, "out of memory");
        return NULL;
    }
    if (!nonzero || !k->n) {
        snprintf(reason, size, "%s shows no addresses (kptr_restrict, or not root)", path);
        st_ksyms_free(k);
        return NULL;
    }
    qsort(k->v, k->n, sizeof *k->v, ksym_cmp);
    k->lo = k->v[0].addr;
    k->hi = k->v[k->n - 1].addr + 1;
    return k;
oom:
    fclose(f);
    st_ksyms_free(k);
    snprintf(reason, size, "out of memory");
    return NULL;
}

void st_ksyms_span(const st_ksyms *k, uint64_t *lo, uint64_t *hi)
{
    *lo = k->lo;
    *hi = k->hi;
}

/* The last symbol at or below addr. kallsyms gives no sizes: a symbol
 * holds everything up to the next one. */
static const ksym *ksym_at(const st_ksyms *k, uint64_t addr)
{
    if (!k->n || addr < k->v[0].addr) return NULL;
    size_t lo = 0, hi = k->n;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (k->v[mid].addr <= addr) lo = mid;
        else hi = mid;
    }
    return &k->v[lo];
}

const char *st_ksyms_find(const st_ksyms *k, uint64_t addr, uint64_t *offset)
{
    if (!k) return NULL;
    const ksym *s = ksym_at(k, addr);
    /* a return address equal to the next symbol's start is its caller's
     * last call: the byte before names it */
    if (s && s->addr == addr && s > k->v) s = ksym_at(k, addr - 1);
    if (!s) return NULL;
    *offset = addr - s->addr;
    return k->names + s->name;
}
