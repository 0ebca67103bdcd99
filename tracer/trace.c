/* trace.c: the life of a trace: options, st_open (validation, file
 * creation, schema), registration of stages and counters, st_flush, the
 * signal path and st_close. The writer thread (writer.c) owns the SQLite
 * connection once the trace is open. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "st_cpu.h"
#include "st_internal.h"
#include "st_schema.h"

static _Atomic uint32_t test_writer_delay_us;
static _Atomic int test_checkpoint_on_writer;
void st__test_set_writer_delay(uint32_t us) { atomic_store(&test_writer_delay_us, us); }
void st__test_set_checkpoint_on_writer(int on) { atomic_store(&test_checkpoint_on_writer, on != 0); }

void st_options_init(st_options *opt)
{
    memset(opt, 0, sizeof *opt);
    opt->enabled = 1;
    opt->program = "stagetrace";
    opt->world_size = 1;
    opt->ring_records = 262144;
    opt->commit_ms = 250;
    opt->retry_mib = 64;
    opt->nvtx = -1;
    opt->device = -1;
}

static int validate(const st_options *o)
{
    if (o->enabled && (!o->path || !*o->path))
        return st_set_error(ST_EINVAL, "no trace path given (options.path is empty)");
    if (o->ring_records < 64 || o->ring_records > (1u << 28) ||
        (o->ring_records & (o->ring_records - 1)))
        return st_set_error(ST_EINVAL,
                            "ring size %u is invalid: use a power of two from 64 to 268435456",
                            o->ring_records);
    if (o->commit_ms < 1 || o->commit_ms > 60000)
        return st_set_error(ST_EINVAL, "commit interval %u ms is out of range 1..60000", o->commit_ms);
    if (o->retry_mib > 65536)
        return st_set_error(ST_EINVAL, "retry memory %u MiB is out of range 0..65536", o->retry_mib);
    if (o->world_size < 1 || o->rank < 0 || o->rank >= o->world_size)
        return st_set_error(ST_EINVAL, "rank %d is out of range for world size %d", o->rank,
                            o->world_size);
    if (o->local_rank < 0)
        return st_set_error(ST_EINVAL, "local rank %d is negative", o->local_rank);
    if (o->device < -1)
        return st_set_error(ST_EINVAL, "device %d is invalid: use a GPU index or -1", o->device);
    if (o->run_id) {
        size_t n = strlen(o->run_id);
        int ok = n >= 1 && n <= 64;
        for (size_t i = 0; ok && i < n; i++) {
            char c = o->run_id[i];
            ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '.' || c == '_' || c == '-';
        }
        if (!ok)
            return st_set_error(ST_EINVAL,
                                "run id '%.80s' is invalid: use 1 to 64 characters of A-Z a-z 0-9 . _ -",
                                o->run_id);
    }
    if (o->nvtx < -1 || o->nvtx > 1) return st_set_error(ST_EINVAL, "nvtx option must be -1, 0 or 1");
    if (o->clock < 0 || o->clock > 1) return st_set_error(ST_EINVAL, "clock option must be 0 or 1");
    if (o->cpu < 0 || o->cpu > 1) return st_set_error(ST_EINVAL, "cpu option must be 0 (off) or 1 (on)");
    if (o->cpu_user_stack && (o->cpu_user_stack < 8192 || o->cpu_user_stack > 65536))
        return st_set_error(ST_EINVAL, "cpu_user_stack %u bytes is out of range: use 0 (off) or 8192..65536",
                            o->cpu_user_stack);
    if (o->profile_interval > 100000000)
        return st_set_error(ST_EINVAL, "profile interval %u is too large", o->profile_interval);
    return ST_OK;
}

/* The side files SQLite keeps beside a database. */
static void remove_side_files(const char *path)
{
    static const char *const suffixes[] = {"-wal", "-shm", "-journal"};
    size_t len = strlen(path);
    char *side = malloc(len + 16);
    if (!side) return;
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
        snprintf(side, len + 16, "%s%s", path, suffixes[i]);
        unlink(side);
    }
    free(side);
}

/* ---- one file, one writer ----
 * A trace file is flock'ed (LOCK_EX) by the process writing it, through
 * t->lock_fd, from before its name appears until after st_close has closed
 * SQLite. A new trace is made under a temporary name, locked, then linked to
 * its path (link fails if the path exists), so the path never names an
 * unlocked new file. Replacing (overwrite) takes the old file's lock first
 * and checks that the path still names the locked file before removing it:
 * a locked file is live and is never removed. flock locks are separate from
 * the fcntl locks SQLite takes on the same file. */

enum { CREATE_RETRY = 1 }; /* the path changed under us: look again */

static int busy_error(const char *path)
{
    return st_set_error(ST_EBUSY,
                        "trace file '%s' is being written by another process (choose another path, "
                        "or wait until that run ends)",
                        path);
}

static int same_file(int fd, const char *path)
{
    struct stat a, b;
    return fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* Opens the regular file at path without blocking on it. -1: errno set. */
static int open_existing(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) return -1;
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        errno = EINVAL;
        return -1;
    }
    return fd;
}

/* Whether another process holds the lock of the file at path: 1 yes, 0 no
 * (or the file is gone). */
static int file_is_live(const char *path)
{
    int fd = open_existing(path);
    if (fd < 0) return 0;
    int live = flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    close(fd);
    return live;
}

/* For overwrite: removes the finished (unlocked) trace at path and its side
 * files. ST_OK: the path is free; CREATE_RETRY; or an error. */
static int remove_finished(const char *path)
{
    int fd = open_existing(path);
    if (fd < 0) {
        if (errno == ENOENT) return CREATE_RETRY;
        if (errno == EINVAL) return st_set_error(ST_EINVAL, "trace path '%s' is not a regular file", path);
        return st_set_error(ST_EIO, "cannot replace trace file '%s': %s", path, strerror(errno));
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        close(fd);
        if (e == EWOULDBLOCK) return busy_error(path);
        return st_set_error(ST_EIO, "cannot lock trace file '%s': %s", path, strerror(e));
    }
    if (!same_file(fd, path)) { /* replaced since we opened it */
        close(fd);
        return CREATE_RETRY;
    }
    remove_side_files(path);
    int rc = unlink(path) == 0 || errno == ENOENT
                 ? CREATE_RETRY
                 : st_set_error(ST_EIO, "cannot replace trace file '%s': %s", path, strerror(errno));
    close(fd);
    return rc;
}

static int create_error(const char *path, int err)
{
    return st_set_error(ST_EIO, "cannot create trace file '%s': %s", path, strerror(err));
}

/* create_locked without a temporary name (a file system without hard
 * links, or a name too long for a suffix): another process may see the new
 * file unlocked for a moment; if it then removes it, this process finds out
 * (same_file) and gives up. */
static int create_direct(const char *path, int *fd_out)
{
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return errno == EEXIST ? CREATE_RETRY : create_error(path, errno);
    if (flock(fd, LOCK_EX | LOCK_NB) != 0 || !same_file(fd, path)) {
        close(fd);
        return busy_error(path);
    }
    *fd_out = fd;
    return ST_OK;
}

/* Creates path as a new, empty, locked file; its descriptor in *fd_out.
 * ST_OK, CREATE_RETRY (the path exists now), or an error. */
static int create_locked(const char *path, int *fd_out)
{
    size_t len = strlen(path) + 32;
    char *tmp = malloc(len);
    if (!tmp) return st_set_error(ST_ENOMEM, "out of memory");
    snprintf(tmp, len, "%s.st-new-%ld", path, (long)getpid());
    int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno == EEXIST) { /* left by a killed process with our pid */
        unlink(tmp);
        fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    }
    if (fd < 0) {
        int e = errno;
        free(tmp);
        return e == ENAMETOOLONG ? create_direct(path, fd_out) : create_error(path, e);
    }
    int rc = ST_OK, direct = 0;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        rc = st_set_error(ST_EIO, "cannot lock trace file '%s': %s", path, strerror(errno));
    } else if (link(tmp, path) != 0) {
        int e = errno;
        if (e == EEXIST)
            rc = CREATE_RETRY;
        else if (e == EPERM || e == ENOTSUP || e == ENOSYS || e == EMLINK)
            direct = 1;
        else
            rc = create_error(path, e);
    } else if (!same_file(fd, path)) {
        rc = busy_error(path);
    }
    unlink(tmp);
    free(tmp);
    if (rc != ST_OK || direct) {
        close(fd);
        return direct ? create_direct(path, fd_out) : rc;
    }
    *fd_out = fd;
    return ST_OK;
}

/* Removes the trace this process created (t->lock_fd still holds its
 * lock, so the path still names it) and releases the lock. */
static void remove_own_trace(st_trace *t)
{
    if (t->lock_fd < 0) return;
    if (same_file(t->lock_fd, t->path)) {
        remove_side_files(t->path);
        unlink(t->path);
    }
    close(t->lock_fd);
    t->lock_fd = -1;
}

static int exec_sql(sqlite3 *db, const char *sql)
{
    char *err = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
        st_set_error(ST_EIO, "SQLite: %s", err ? err : sqlite3_errmsg(db));
        sqlite3_free(err);
        return ST_EIO;
    }
    return ST_OK;
}

static int put_meta(sqlite3 *db, const char *key, const char *value)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", -1, &st,
                           NULL) != SQLITE_OK)
        return st_set_error(ST_EIO, "SQLite: %s", sqlite3_errmsg(db));
    sqlite3_bind_text(st, 1, key, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, value, -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? ST_OK : st_set_error(ST_EIO, "SQLite: %s", sqlite3_errmsg(db));
}

static int write_initial_meta(st_trace *t)
{
    char buf[4096];
    sqlite3 *db = t->db;
    int rc = ST_OK;
    snprintf(buf, sizeof buf, "%d", ST_SCHEMA_VERSION);
    rc |= put_meta(db, "schema_version", buf);
    rc |= put_meta(db, "status", "running");
    rc |= put_meta(db, "program", t->program);
    rc |= put_meta(db, "tool_version", ST_VERSION_STRING);
    rc |= put_meta(db, "clock", st_clock_name());
    snprintf(buf, sizeof buf, "%.0f", st_clock_tsc_hz());
    rc |= put_meta(db, "tsc_hz", buf);
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    rc |= put_meta(db, "start_utc", buf);
    snprintf(buf, sizeof buf, "%lld", (long long)st_now_ns());
    rc |= put_meta(db, "start_ns", buf);
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    rc |= put_meta(db, "host", host);
    snprintf(buf, sizeof buf, "%ld", (long)getpid());
    rc |= put_meta(db, "pid", buf);
    if (t->run_id[0])
        snprintf(buf, sizeof buf, "%s", t->run_id);
    else
        snprintf(buf, sizeof buf, "%lld-%ld", (long long)now, (long)getpid());
    rc |= put_meta(db, "run_id", buf);
    snprintf(buf, sizeof buf, "%d", t->opt.local_rank);
    rc |= put_meta(db, "local_rank", buf);
    snprintf(buf, sizeof buf, "%d", t->opt.device);
    rc |= put_meta(db, "device", buf);
    snprintf(buf, sizeof buf, "%d", t->opt.rank);
    rc |= put_meta(db, "rank", buf);
    snprintf(buf, sizeof buf, "%d", t->opt.world_size);
    rc |= put_meta(db, "world_size", buf);
    snprintf(buf, sizeof buf, "%u", t->opt.profile_interval);
    rc |= put_meta(db, "profile_interval", buf);
    snprintf(buf, sizeof buf, "%u", t->opt.commit_ms);
    rc |= put_meta(db, "commit_ms", buf);
    snprintf(buf, sizeof buf, "%u", t->opt.ring_records);
    rc |= put_meta(db, "ring_records", buf);
    rc |= put_meta(db, "dropped_events", "0");
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; i < t->opt.argc && t->opt.argv && t->opt.argv[i]; i++) {
        int n = snprintf(buf + len, sizeof buf - len, "%s%s", i ? " " : "", t->opt.argv[i]);
        if (n < 0 || (size_t)n >= sizeof buf - len) break;
        len += (size_t)n;
    }
    rc |= put_meta(db, "argv", buf);
    return rc ? ST_EIO : ST_OK;
}

static int create_file(st_trace *t)
{
    const char *path = t->path;
    int rc = CREATE_RETRY;
    for (int attempt = 0; rc == CREATE_RETRY; attempt++) {
        struct stat sb;
        if (attempt == 8) return busy_error(path); /* others keep making and removing it */
        if (stat(path, &sb) == 0) {
            if (S_ISDIR(sb.st_mode))
                return st_set_error(ST_EINVAL, "trace path '%s' is a directory", path);
            if (!S_ISREG(sb.st_mode))
                return st_set_error(ST_EINVAL, "trace path '%s' is not a regular file", path);
            if (file_is_live(path)) return busy_error(path);
            if (!t->opt.overwrite)
                return st_set_error(ST_EEXIST,
                                    "trace file '%s' already exists (choose another path, or allow "
                                    "overwriting it)",
                                    path);
            rc = remove_finished(path);
            if (rc != CREATE_RETRY) return rc;
        }
        rc = create_locked(path, &t->lock_fd);
        if (rc < 0) return rc;
    }
    /* The path is ours now: side files left there belong to no live trace
     * (a -wal of a removed file would be replayed into the new one). */
    remove_side_files(path);

    if (sqlite3_open_v2(path, &t->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                        NULL) != SQLITE_OK) {
        st_set_error(ST_EIO, "cannot create trace file '%s': %s", path,
                     t->db ? sqlite3_errmsg(t->db) : "out of memory");
        sqlite3_close(t->db);
        t->db = NULL;
        remove_own_trace(t);
        return ST_EIO;
    }
    rc = exec_sql(t->db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;");
    if (!rc) rc = exec_sql(t->db, "BEGIN");
    if (!rc) rc = exec_sql(t->db, st_schema_sql);
    if (!rc) rc = write_initial_meta(t);
    if (!rc) rc = exec_sql(t->db, "COMMIT");
    if (rc) {
        char msg[600];
        snprintf(msg, sizeof msg, "cannot create trace file '%s': %s", path, st_last_error());
        sqlite3_close(t->db);
        t->db = NULL;
        remove_own_trace(t);
        return st_set_error(ST_EIO, "%s", msg);
    }
    return ST_OK;
}

static void free_trace(st_trace *t)
{
    if (!t) return;
    for (uint32_t i = 0; i < ST_MAX_STAGES; i++) free(t->stages[i].name);
    for (uint32_t i = 0; i < ST_MAX_COUNTERS; i++) {
        free(t->counters[i].name);
        free(t->counters[i].unit);
    }
    for (uint32_t i = 0; i < ST_MAX_THREADS; i++) {
        free(t->threads[i].name);
        free(t->threads[i].role);
    }
    for (int i = 0; i < 2; i++) {
        if (t->wake_pipe[i] > 0) close(t->wake_pipe[i]);
        if (t->sig_req_pipe[i] > 0) close(t->sig_req_pipe[i]);
        if (t->sig_resp_pipe[i] > 0) close(t->sig_resp_pipe[i]);
    }
    st_agg_free(t->agg);
    st_meta_free(t);
    pthread_mutex_destroy(&t->lock);
    pthread_mutex_destroy(&t->log_lock);
    pthread_cond_destroy(&t->flushed);
    pthread_mutex_destroy(&t->gpu_lock);
    free(t->gpu_items);
    free(t->gpu_pauses);
    for (size_t i = 0; i < t->gpu_strings_len; i++) free(t->gpu_strings[i].value);
    free(t->gpu_strings);
    if (t->lock_fd >= 0) close(t->lock_fd); /* after SQLite closed the file: the trace is finished */
    free(t->path);
    free(t->program);
    free(t);
}

static int make_pipe(int fds[2])
{
    if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return -1;
    return 0;
}

int st_open(st_trace **out, const st_options *opt)
{
    if (!out || !opt) return st_set_error(ST_EINVAL, "st_open: no options");
    *out = NULL;
    int rc = validate(opt);
    if (rc) return rc;
    if (st_active_trace) return st_set_error(ST_ESTATE, "a trace is already open in this process");

    st_trace *t = calloc(1, sizeof *t);
    if (!t) return st_set_error(ST_ENOMEM, "out of memory");
    t->lock_fd = -1;
    t->opt = *opt;
    /* the kernel takes a multiple of 8 below 65535 (st_cpu.h) */
    t->opt.cpu_user_stack &= ~7u;
    if (t->opt.cpu_user_stack > ST_CPU_USER_STACK_MAX) t->opt.cpu_user_stack = ST_CPU_USER_STACK_MAX;
    t->writer_delay_us = atomic_load(&test_writer_delay_us);
    t->checkpoint_on_writer = atomic_load(&test_checkpoint_on_writer);
    t->program = strdup(opt->program && *opt->program ? opt->program : "stagetrace");
    t->path = NULL;
    if (opt->path) {
        size_t size = strlen(opt->path) + 64;
        t->path = malloc(size);
        if (t->path && (rc = st_rank_path(opt->path, opt->rank, opt->world_size, t->path, size))) {
            free(t->path);
            free(t->program);
            free(t);
            return rc;
        }
    }
    t->opt.program = t->program;
    t->opt.path = t->path;
    if (opt->run_id) snprintf(t->run_id, sizeof t->run_id, "%s", opt->run_id); /* validated */
    t->opt.run_id = NULL; /* the caller's string need not outlive st_open */
    t->opt.argv = NULL;
    t->opt.argc = 0;
    pthread_mutex_init(&t->lock, NULL);
    pthread_mutex_init(&t->log_lock, NULL);
    pthread_cond_init(&t->flushed, NULL);
    pthread_mutex_init(&t->gpu_lock, NULL);
    atomic_store(&t->gpu_dropped, -1);

    if (!t->opt.enabled) {
        st_nvtx_on = 0;
        *out = t;
        return ST_OK;
    }
    if (make_pipe(t->wake_pipe) || make_pipe(t->sig_req_pipe) || make_pipe(t->sig_resp_pipe)) {
        free_trace(t);
        return st_set_error(ST_EIO, "cannot create pipes: %s", strerror(errno));
    }
    int64_t shift_ns;
    rc = st_clock_shift_from_env(opt->rank, &shift_ns);
    if (rc) {
        free_trace(t);
        return rc;
    }
    st_clock_init(opt->clock == 1);
    st_clock_set_shift(shift_ns);
    t->opt.argc = opt->argc;
    t->opt.argv = opt->argv;
    rc = create_file(t);
    t->opt.argc = 0;
    t->opt.argv = NULL;
    if (rc) {
        free_trace(t);
        return rc;
    }
    if (opt->profile_interval && opt->on_window) {
        t->agg = st_agg_create(opt->profile_interval, opt->on_window, opt->on_window_arg);
        if (!t->agg) {
            sqlite3_close(t->db);
            remove_own_trace(t);
            free_trace(t);
            return st_set_error(ST_ENOMEM, "out of memory");
        }
    }
    if (opt->nvtx != 0)
        st_nvtx_init(t->program);
    else
        st_nvtx_on = 0;
    st_active_trace = t;
    rc = st_writer_start(t);
    if (rc) {
        st_active_trace = NULL;
        st_nvtx_shutdown();
        sqlite3_close(t->db);
        remove_own_trace(t);
        free_trace(t);
        return rc;
    }
    *out = t;
    st_unregistered_watch(t);
    return ST_OK;
}

int st_close(st_trace *t)
{
    if (!t) return ST_OK;
    st_thread_unregister();
    int rc = ST_OK;
    if (t->opt.enabled) {
        st_unregistered_watch(NULL);
        /* GPU activity first: CUPTI's forced flush hands over the last
         * buffers, which the writer's final commit then stores. */
        if (t->gpu_stop) t->gpu_stop(t);
        st_writer_stop(t);
        rc = t->writer_error;
        if (st_active_trace == t) st_active_trace = NULL;
        st_nvtx_shutdown();
        atomic_store(&st_stage_limit, 0);
    }
    free_trace(t);
    return rc;
}

int st_enabled(const st_trace *t) { return t && t->opt.enabled; }
const char *st_path(const st_trace *t) { return t ? t->path : NULL; }

static void signals_block(sigset_t *saved);
static void signals_restore(const sigset_t *saved);

/* Live: each ring's own counter (the producers add to it as they drop),
 * plus the final counts of rings the writer has freed, read under the lock
 * that the writer holds while it moves a ring's count over. Never the
 * writer's last committed total, which lags by up to a commit interval. */
uint64_t st_dropped(const st_trace *t)
{
    if (!t || !t->opt.enabled) return 0;
    st_trace *mt = (st_trace *)t; /* the lock only; nothing is changed */
    sigset_t saved;
    signals_block(&saved);
    pthread_mutex_lock(&mt->lock);
    uint64_t total = t->retired_dropped;
    uint32_t n = atomic_load(&t->n_threads);
    for (uint32_t i = 0; i < n; i++) {
        const st_ring *ring = t->threads[i].ring;
        if (ring) total += atomic_load_explicit(&ring->dropped, memory_order_relaxed);
    }
    pthread_mutex_unlock(&mt->lock);
    signals_restore(&saved);
    return total;
}

/* Signals are blocked while a thread may hold t->lock. A SIGINT/SIGTERM
 * handler runs st_signal_flush, which waits for the writer, and the writer
 * takes t->lock on every pass: a handler that interrupted the lock's holder
 * would wait out its timeout, and the flush (and "interrupted") would be
 * lost. Faults stay unblocked. */
static void signals_block(sigset_t *saved)
{
    sigset_t set;
    sigfillset(&set);
    sigdelset(&set, SIGSEGV);
    sigdelset(&set, SIGBUS);
    sigdelset(&set, SIGFPE);
    sigdelset(&set, SIGILL);
    sigdelset(&set, SIGABRT);
    pthread_sigmask(SIG_BLOCK, &set, saved);
}

static void signals_restore(const sigset_t *saved) { pthread_sigmask(SIG_SETMASK, saved, NULL); }

static int flush_and_wait(st_trace *t)
{
    pthread_mutex_lock(&t->lock);
    uint64_t ticket = ++t->flush_requested;
    pthread_mutex_unlock(&t->lock);
    st_wake_writer(t);
    pthread_mutex_lock(&t->lock);
    while (t->flush_done < ticket && !atomic_load(&t->stop)) pthread_cond_wait(&t->flushed, &t->lock);
    pthread_mutex_unlock(&t->lock);
    if (t->writer_error) return t->writer_error;
    if (atomic_load(&t->commit_failed))
        return st_set_error(ST_EIO, "trace '%s': the commit failed (the disk may be full); the "
                            "records are kept in memory and retried at the next commit", t->path);
    return ST_OK;
}

int st_flush(st_trace *t)
{
    if (!t || !t->opt.enabled) return ST_OK;
    sigset_t saved;
    signals_block(&saved);
    int rc = flush_and_wait(t);
    signals_restore(&saved);
    return rc;
}

int st_signal_flush(int timeout_ms)
{
    st_trace *t = st_active_trace;
    if (!t || !t->opt.enabled) return ST_ESTATE;
    int saved = errno;
    char c = 1, drain[64];
    /* Forget answers to earlier requests, then ask. */
    while (read(t->sig_resp_pipe[0], drain, sizeof drain) > 0) {
    }
    if (write(t->sig_req_pipe[1], &c, 1) < 0) {
        errno = saved;
        return ST_EIO;
    }
    struct pollfd p = {.fd = t->sig_resp_pipe[0], .events = POLLIN};
    int rc = ST_ETIMEDOUT;
    if (poll(&p, 1, timeout_ms) == 1 && read(t->sig_resp_pipe[0], drain, 1) == 1) rc = ST_OK;
    errno = saved;
    return rc;
}

/* Read by any thread (st_interrupted), written by the handler: a lock-free
 * atomic, which is async-signal-safe, not a sig_atomic_t (same thread only). */
static _Atomic int st_signal_count;
static int st_exit_on_term;
/* The handlers replaced, for SIGINT and SIGTERM, and whether each was
 * replaced: a signal ignored (SIG_IGN) when the handlers are installed stays
 * ignored, as a program started with `trap '' INT` or by nohup expects. */
static struct sigaction st_old_action[2]; /* [0] SIGINT, [1] SIGTERM */
static _Atomic int st_handled[2];

static void st_signal_handler(int sig)
{
    int saved_errno = errno;
    int count = atomic_fetch_add(&st_signal_count, 1) + 1;
    st_signal_flush(5000);
    if (count > 1 || (sig == SIGTERM && st_exit_on_term)) {
        static const int sigs[2] = {SIGINT, SIGTERM};
        for (int i = 0; i < 2; i++)
            if (atomic_load(&st_handled[i])) sigaction(sigs[i], &st_old_action[i], NULL);
        signal(sig, SIG_DFL);
        raise(sig);
    }
    errno = saved_errno;
}

int st_install_signal_handlers(st_trace *t, int exit_on_term)
{
    if (!t) return st_set_error(ST_EINVAL, "st_install_signal_handlers: no trace");
    st_exit_on_term = exit_on_term;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = st_signal_handler;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    static const int sigs[2] = {SIGINT, SIGTERM};
    for (int i = 0; i < 2; i++) {
        struct sigaction cur;
        if (sigaction(sigs[i], NULL, &cur))
            return st_set_error(ST_EINVAL, "cannot install signal handlers: %s", strerror(errno));
        if (!(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == SIG_IGN) continue; /* stays ignored */
        if (!(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == st_signal_handler) continue; /* ours already */
        st_old_action[i] = cur;
        atomic_store(&st_handled[i], 1);
        if (sigaction(sigs[i], &sa, NULL))
            return st_set_error(ST_EINVAL, "cannot install signal handlers: %s", strerror(errno));
    }
    return ST_OK;
}

int st_interrupted(void) { return atomic_load(&st_signal_count) > 0; }

/* ---- stages and counters ---- */

static int stage_register(st_trace *t, const char *name, st_kind kind)
{
    if (!t) return st_set_error(ST_EINVAL, "st_stage_register: no trace");
    if (!name || !*name) return st_set_error(ST_EINVAL, "st_stage_register: empty stage name");
    if (strlen(name) > ST_NAME_MAX)
        return st_set_error(ST_EINVAL, "st_stage_register: stage name longer than %d bytes", ST_NAME_MAX);
    if ((unsigned)kind >= ST_KIND_COUNT)
        return st_set_error(ST_EINVAL, "st_stage_register: stage '%s' has an unknown kind %d", name,
                            (int)kind);
    pthread_mutex_lock(&t->lock);
    uint32_t n = atomic_load(&t->n_stages);
    for (uint32_t i = 0; i < n; i++) {
        if (strcmp(t->stages[i].name, name) == 0) {
            pthread_mutex_unlock(&t->lock);
            if (t->stages[i].kind != kind)
                return st_set_error(ST_EINVAL, "stage '%s' was registered as %s, not %s", name,
                                    st_kind_name(t->stages[i].kind), st_kind_name(kind));
            return (int)i;
        }
    }
    if (n >= ST_MAX_STAGES) {
        pthread_mutex_unlock(&t->lock);
        return st_set_error(ST_ELIMIT, "more than %d stages", ST_MAX_STAGES);
    }
    t->stages[n].name = strdup(name);
    t->stages[n].kind = kind;
    if (t->opt.enabled) st_nvtx_stage(n, name, kind);
    atomic_store(&t->n_stages, n + 1);
    if (t->opt.enabled) atomic_store(&st_stage_limit, n + 1);
    pthread_mutex_unlock(&t->lock);
    return (int)n;
}

int st_stage_register(st_trace *t, const char *name, st_kind kind)
{
    sigset_t saved;
    signals_block(&saved);
    int rc = stage_register(t, name, kind);
    signals_restore(&saved);
    return rc;
}

static int counter_register(st_trace *t, const char *name, const char *unit)
{
    if (!t) return st_set_error(ST_EINVAL, "st_counter_register: no trace");
    if (!name || !*name) return st_set_error(ST_EINVAL, "st_counter_register: empty counter name");
    if (strlen(name) > ST_NAME_MAX || (unit && strlen(unit) > ST_NAME_MAX))
        return st_set_error(ST_EINVAL, "st_counter_register: counter name or unit longer than %d bytes", ST_NAME_MAX);
    pthread_mutex_lock(&t->lock);
    uint32_t n = atomic_load(&t->n_counters);
    for (uint32_t i = 0; i < n; i++) {
        if (strcmp(t->counters[i].name, name) == 0) {
            pthread_mutex_unlock(&t->lock);
            return (int)i;
        }
    }
    if (n >= ST_MAX_COUNTERS) {
        pthread_mutex_unlock(&t->lock);
        return st_set_error(ST_ELIMIT, "more than %d counters", ST_MAX_COUNTERS);
    }
    t->counters[n].name = strdup(name);
    t->counters[n].unit = strdup(unit ? unit : "");
    atomic_store(&t->n_counters, n + 1);
    pthread_mutex_unlock(&t->lock);
    return (int)n;
}

int st_counter_register(st_trace *t, const char *name, const char *unit)
{
    sigset_t saved;
    signals_block(&saved);
    int rc = counter_register(t, name, unit);
    signals_restore(&saved);
    return rc;
}
