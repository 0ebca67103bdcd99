/* trace_path.c: the trainer's trace file names and the stale rank files of an older run
 * (see trace_path.h). */
#include "trace_path.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "stagetrace.h"
#include "stagetrace_reader.h"

#define SHOWN_NAMES 4 /* a list longer than this shows its first and last names */

static int is_directory(const char *path)
{
    struct stat sb;
    size_t len = strlen(path);
    return (len && path[len - 1] == '/') || (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode));
}

int tr_trace_make_dir(const char *path, char *err, size_t err_size)
{
    size_t len = strlen(path);
    if (!len || path[len - 1] != '/')
        return 0;
    char dir[4096];
    if (len >= sizeof dir) {
        snprintf(err, err_size, "the trace path '%s' is too long", path);
        return -1;
    }
    memcpy(dir, path, len + 1);
    /* each prefix that ends before a '/', shortest first */
    for (size_t i = 1; i < len; i++) {
        if (dir[i] != '/' || dir[i - 1] == '/')
            continue;
        dir[i] = 0;
        struct stat sb;
        if (mkdir(dir, 0777) && errno != EEXIST) {
            snprintf(err, err_size, "cannot create the trace directory '%s': %s", dir, strerror(errno));
            return -1;
        }
        if (stat(dir, &sb) || !S_ISDIR(sb.st_mode)) {
            snprintf(err, err_size, "the trace directory '%s' is not a directory", dir);
            return -1;
        }
        dir[i] = '/';
    }
    return 0;
}

int tr_trace_single_path(const char *path, char *out, size_t size, char *err, size_t err_size)
{
    size_t len = strlen(path);
    int n = is_directory(path)
                ? snprintf(out, size, "%s%srank0.sqlite", path, path[len - 1] == '/' ? "" : "/")
                : snprintf(out, size, "%s", path);
    if (n < 0 || (size_t)n >= size) {
        snprintf(err, err_size, "the trace path '%s' is too long", path);
        return -1;
    }
    return 0;
}

/* One rank file of an older run. */
typedef struct stale {
    int rank;
    int fd; /* holds the file's lock (LOCK_EX) until it is removed; -1 when not taken */
    char path[4096];
} stale;

static int by_rank(const void *a, const void *b)
{
    int x = ((const stale *)a)->rank, y = ((const stale *)b)->rank;
    return (x > y) - (x < y);
}

/* The rank in NAME when it is exactly PREFIX<r>.sqlite (r in decimal, no leading zero), else
 * -1. */
static int rank_of(const char *name, const char *prefix)
{
    size_t plen = strlen(prefix);
    if (strncmp(name, prefix, plen))
        return -1;
    const char *p = name + plen, *digits = p;
    long r = 0;
    while (*p >= '0' && *p <= '9' && p - digits < 9)
        r = r * 10 + (*p++ - '0');
    if (p == digits || (*digits == '0' && p - digits > 1) || strcmp(p, ".sqlite"))
        return -1;
    return (int)r;
}

/* Appends text to out (size bytes, at used), cutting what does not fit. */
static void append(char *out, size_t size, size_t *at, const char *text)
{
    size_t len = strlen(text), room = size - 1 - *at;
    if (len > room)
        len = room;
    memcpy(out + *at, text, len);
    *at += len;
    out[*at] = 0;
}

/* "a, b, c", or "a, b, ..., z (N files)" for a long list. */
static void list_names(const stale *s, int n, char *out, size_t size)
{
    size_t at = 0;
    out[0] = 0;
    for (int i = 0; i < n; i++) {
        if (n > SHOWN_NAMES && i == SHOWN_NAMES - 1) {
            char count[32];
            snprintf(count, sizeof count, " (%d files)", n);
            append(out, size, &at, ", ..., ");
            append(out, size, &at, s[n - 1].path);
            append(out, size, &at, count);
            break;
        }
        if (i)
            append(out, size, &at, ", ");
        append(out, size, &at, s[i].path);
    }
}

/* Whether the file may be removed: a finished stagetrace trace that no process is writing.
 * 0 (its lock then held in s->fd), or -1 with err. */
static int lock_finished_trace(stale *s, char *err, size_t n)
{
    s->fd = open(s->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    struct stat sb;
    if (s->fd < 0 || fstat(s->fd, &sb) || !S_ISREG(sb.st_mode)) {
        snprintf(err, n, "'%s' has the name of a rank's trace but cannot be read as one (%s): it "
                         "is never removed; move it away, or trace elsewhere",
                 s->path, s->fd < 0 ? strerror(errno) : "not a regular file");
        return -1;
    }
    /* the tracer holds this lock while it writes a trace (tracer/trace.c) */
    if (flock(s->fd, LOCK_EX | LOCK_NB)) {
        snprintf(err, n, "'%s' is being written by another process: it is never removed; trace "
                         "elsewhere, or wait until that run ends", s->path);
        return -1;
    }
    st_reader *r = NULL;
    if (st_reader_open(&r, s->path) != ST_OK) {
        snprintf(err, n, "'%s' has the name of a rank's trace but is not one (%s): it is never "
                         "removed; move it away, or trace elsewhere", s->path, st_last_error());
        return -1;
    }
    st_reader_close(r);
    return 0;
}

static void remove_trace(const char *path)
{
    static const char *const sides[] = {"-wal", "-shm", "-journal"};
    char side[4096 + 16];
    for (size_t i = 0; i < sizeof sides / sizeof sides[0]; i++) {
        snprintf(side, sizeof side, "%s%s", path, sides[i]);
        unlink(side);
    }
    unlink(path);
}

int tr_trace_clear_stale(const char *path, int world, int overwrite, char *removed,
                         size_t removed_size, char *err, size_t n)
{
    removed[0] = 0;
    /* where the run's rank files go, and the start of their names */
    char dir[4096], prefix[4096], shown[4096];
    size_t len = strlen(path);
    if (is_directory(path)) {
        snprintf(dir, sizeof dir, "%s", path);
        snprintf(prefix, sizeof prefix, "rank");
        snprintf(shown, sizeof shown, "%s%s", path, path[len - 1] == '/' ? "" : "/");
    } else if (world == 1) {
        return 0; /* the file itself: no rank files */
    } else {
        const char *ext = ".sqlite", *slash = strrchr(path, '/');
        size_t stem = len > strlen(ext) && !strcmp(path + len - strlen(ext), ext)
                          ? len - strlen(ext) : len;
        size_t base = slash ? (size_t)(slash - path) + 1 : 0;
        snprintf(dir, sizeof dir, "%.*s", base ? (int)base : 1, base ? path : ".");
        snprintf(prefix, sizeof prefix, "%.*s.rank", (int)(stem - base), path + base);
        snprintf(shown, sizeof shown, "%.*s", (int)base, path);
    }
    DIR *d = opendir(dir);
    if (!d)
        return 0; /* no directory: nothing stale (the trace's own open says what is wrong) */
    stale *found = NULL;
    int n_found = 0, cap = 0, rc = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        int r = rank_of(e->d_name, prefix);
        if (r < world)
            continue;
        if (n_found == cap) {
            cap = cap ? 2 * cap : 8;
            stale *grown = realloc(found, (size_t)cap * sizeof *found);
            if (!grown) {
                snprintf(err, n, "out of memory");
                rc = -1;
                break;
            }
            found = grown;
        }
        stale *s = &found[n_found];
        s->rank = r;
        s->fd = -1;
        int k = snprintf(s->path, sizeof s->path, "%s%s", shown, e->d_name);
        if (k < 0 || (size_t)k >= sizeof s->path)
            continue; /* no run could have written a name this long */
        n_found++;
    }
    closedir(d);
    if (rc == 0 && n_found) {
        qsort(found, (size_t)n_found, sizeof *found, by_rank);
        char names[2048];
        list_names(found, n_found, names, sizeof names);
        if (!overwrite) {
            snprintf(err, n, "an older run left rank files that a run of %d process%s does not "
                             "write: %s; beside this run's they would not read as one run: add "
                             "--overwrite to remove them, or trace elsewhere",
                     world, world == 1 ? "" : "es", names);
            rc = -1;
        }
        for (int i = 0; i < n_found && rc == 0; i++)
            rc = lock_finished_trace(&found[i], err, n);
        if (rc == 0) {
            for (int i = 0; i < n_found; i++)
                remove_trace(found[i].path);
            snprintf(removed, removed_size, "%s", names);
        }
    }
    for (int i = 0; i < n_found; i++)
        if (found[i].fd >= 0)
            close(found[i].fd);
    free(found);
    return rc;
}
