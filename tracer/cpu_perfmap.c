/* cpu_perfmap.c: the names of code that has no file, from the process's
 * perf map (/tmp/perf-PID.map), for cpu_symbols.c. A JIT, or CPython's perf
 * trampoline (sys.activate_stack_trampoline("perf"), 3.12 and later), writes
 * one line per piece of code it generates, "START SIZE NAME" (hex start,
 * hex size, the name to the end of the line: "7f3529fcf759 b
 * py::bar:/run/t.py"), in the format perf reads (the kernel's
 * tools/perf/Documentation/jit-interface.txt). The file is in a world-
 * writable directory and may be anything, so it is read defensively: only a
 * regular file owned by this user and not older than the process, at most
 * ST_PERFMAP_MAX_BYTES (64 MiB), each line at most ST_PERFMAP_LINE_MAX bytes; a line
 * that does not parse is counted and passed over, and a name's control bytes
 * become '?'. Where entries overlap, the later line wins (a JIT that reuses
 * memory writes the new code's line after the old one). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "st_cpurec.h"

static int entry_cmp(const void *a, const void *b)
{
    const st_perfmap_entry *x = a, *y = b;
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* A hex number of 1..16 digits, with or without 0x; *p moves past it. */
static int parse_hex(const char **p, const char *end, uint64_t *out)
{
    const char *s = *p;
    if (end - s >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) s += 2;
    uint64_t v = 0;
    int digits = 0;
    for (; s < end; s++) {
        int d;
        if (*s >= '0' && *s <= '9') d = *s - '0';
        else if (*s >= 'a' && *s <= 'f') d = *s - 'a' + 10;
        else if (*s >= 'A' && *s <= 'F') d = *s - 'A' + 10;
        else break;
        if (++digits > 16) return -1;
        v = v << 4 | (uint64_t)d;
    }
    if (!digits) return -1;
    *p = s;
    *out = v;
    return 0;
}

/* One line [s, end) without its newline: 0 and the entry, or -1. */
static int parse_line(const char *s, const char *end, uint64_t *start, uint64_t *size, const char **name,
                      size_t *name_len)
{
    while (end > s && (end[-1] == '\r' || end[-1] == ' ' || end[-1] == '\t')) end--;
    if (parse_hex(&s, end, start) || s == end || (*s != ' ' && *s != '\t')) return -1;
    while (s < end && (*s == ' ' || *s == '\t')) s++;
    if (parse_hex(&s, end, size) || s == end || (*s != ' ' && *s != '\t')) return -1;
    while (s < end && (*s == ' ' || *s == '\t')) s++;
    if (s == end || *size == 0 || *start + *size < *start) return -1;
    if (memchr(s, '\0', (size_t)(end - s))) return -1;
    *name = s;
    *name_len = (size_t)(end - s);
    return 0;
}

int st_perfmap_parse(st_perfmap *m, const char *text, size_t len)
{
    const char *p = text, *end = text + len;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        const char *line_end = eol ? eol : end;
        uint64_t start, size;
        const char *name;
        size_t name_len;
        if (line_end == p || (line_end - p == 1 && *p == '\r')) {
            /* an empty line: nothing */
        } else if ((size_t)(line_end - p) > ST_PERFMAP_LINE_MAX ||
                   parse_line(p, line_end, &start, &size, &name, &name_len)) {
            m->n_bad++;
        } else {
            if (m->n == m->cap) {
                size_t cap = m->cap ? m->cap * 2 : 256;
                st_perfmap_entry *v = realloc(m->v, cap * sizeof *v);
                if (!v) return -1;
                m->v = v;
                m->cap = cap;
            }
            char *copy = malloc(name_len + 1);
            if (!copy) return -1;
            for (size_t i = 0; i < name_len; i++) {
                unsigned char c = (unsigned char)name[i];
                copy[i] = c < 0x20 || c == 0x7f ? '?' : (char)c;
            }
            copy[name_len] = '\0';
            m->v[m->n] = (st_perfmap_entry){start, size, (uint32_t)m->n_lines, copy};
            m->n++;
        }
        m->n_lines++;
        p = eol ? eol + 1 : end;
    }
    if (m->n) qsort(m->v, m->n, sizeof *m->v, entry_cmp);
    /* The longest entry, so that a lookup knows how far back to look. */
    m->max_size = 0;
    for (size_t i = 0; i < m->n; i++)
        if (m->v[i].size > m->max_size) m->max_size = m->v[i].size;
    return 0;
}

/* The process's start as a Unix time in seconds (/proc/self/stat's
 * starttime, in clock ticks since boot, plus /proc/stat's btime); -1 when
 * unknown. */
static double process_start_unix(void)
{
    char buf[1024];
    FILE *f = fopen("/proc/self/stat", "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the command name may hold spaces and parentheses */
    if (!p) return -1;
    unsigned long long ticks = 0;
    /* fields 3.. after the name; starttime is field 22 */
    if (sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
               &ticks) != 1)
        return -1;
    f = fopen("/proc/stat", "r");
    if (!f) return -1;
    long long btime = -1;
    char line[256];
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "btime %lld", &btime) == 1) break;
    fclose(f);
    long hz = sysconf(_SC_CLK_TCK);
    if (btime < 0 || hz <= 0) return -1;
    return (double)btime + (double)ticks / (double)hz;
}

int st_perfmap_load(st_perfmap *m, const char *path)
{
    memset(m, 0, sizeof *m);
    /* O_NONBLOCK: a FIFO put there must not hold the writer. */
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        if (errno == ENOENT) return 0;
        snprintf(m->refused, sizeof m->refused, "cannot be opened (%s)", strerror(errno));
        return 1;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        snprintf(m->refused, sizeof m->refused, "not a regular file");
        return 1;
    }
    if (sb.st_uid != geteuid()) {
        close(fd);
        snprintf(m->refused, sizeof m->refused, "owned by uid %u, not by this process's user %u",
                 (unsigned)sb.st_uid, (unsigned)geteuid());
        return 1;
    }
    double started = process_start_unix();
    /* btime has whole seconds, starttime clock ticks: 2 s of slack */
    if (started > 0 && (double)sb.st_mtime + 2 < started) {
        close(fd);
        snprintf(m->refused, sizeof m->refused,
                 "older than the process (left by an earlier process with the same pid)");
        return 1;
    }
    size_t want = (uint64_t)sb.st_size > ST_PERFMAP_MAX_BYTES ? ST_PERFMAP_MAX_BYTES : (size_t)sb.st_size;
    char *buf = malloc(want + 1);
    if (!buf) {
        close(fd);
        return -1;
    }
    size_t len = 0;
    while (len < want) {
        ssize_t got = read(fd, buf + len, want - len);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break;
        len += (size_t)got;
    }
    close(fd);
    /* Cut at the last newline: a line still being written (or cut by the
     * size limit) is not read. */
    size_t whole = len;
    while (whole > 0 && buf[whole - 1] != '\n') whole--;
    m->found = 1;
    int rc = st_perfmap_parse(m, buf, whole);
    if (whole < len) m->n_bad++;
    free(buf);
    return rc < 0 ? -1 : 0;
}

const st_perfmap_entry *st_perfmap_find(const st_perfmap *m, uint64_t addr)
{
    size_t lo = 0, hi = m->n;
    while (lo < hi) { /* the first entry starting after addr */
        size_t mid = lo + (hi - lo) / 2;
        if (m->v[mid].start <= addr) lo = mid + 1;
        else hi = mid;
    }
    /* Of the entries that hold addr, the latest line; every entry that can
     * hold it starts within max_size below it (and, against a hostile
     * file's overlaps, only the last ST_PERFMAP_LOOK_BACK are looked at). */
    const st_perfmap_entry *best = NULL;
    for (size_t k = lo; k > 0 && k + ST_PERFMAP_LOOK_BACK > lo; k--) {
        const st_perfmap_entry *e = &m->v[k - 1];
        if (addr - e->start >= m->max_size) break;
        if (addr - e->start < e->size && (!best || e->seq > best->seq)) best = e;
    }
    return best;
}

void st_perfmap_free(st_perfmap *m)
{
    for (size_t i = 0; i < m->n; i++) free(m->v[i].name);
    free(m->v);
    memset(m, 0, sizeof *m);
}
