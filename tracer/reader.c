/* reader.c: opens a trace written by the writer (see reader_int.h for how
 * the reader's files divide the work) and holds its small tables: meta,
 * threads, stages, counter names, steps. The file is untrusted: read-only,
 * defensive, trusted_schema off, every table checked (reader_check.c)
 * before it is read. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "reader_int.h"

static const char *const required_tables[] = {"meta", "threads", "stages", "counter_names",
                                              "steps", "range_chunks", "counter_chunks"};

static char *dup_text(sqlite3_stmt *st, int col)
{
    const unsigned char *s = sqlite3_column_text(st, col);
    return strdup(s ? (const char *)s : "");
}

/* Out of memory while a table's statement is stepped: finalizes it. */
static int oom(sqlite3_stmt *st)
{
    sqlite3_finalize(st);
    return st_set_error(ST_ENOMEM, "out of memory");
}

static int load_meta(st_reader *r)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(r->db, "SELECT key, value FROM main.meta", -1, &st, NULL) != SQLITE_OK)
        return st_rd_bad("meta", sqlite3_errmsg(r->db));
    int rc;
    uint32_t cap = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (r->n_meta == cap) {
            cap = cap ? cap * 2 : 32;
            meta_kv *m = realloc(r->meta, cap * sizeof *m);
            if (!m) {
                return oom(st);
            }
            r->meta = m;
        }
        meta_kv *kv = &r->meta[r->n_meta++]; /* owned from here: freed by st_reader_close */
        kv->key = dup_text(st, 0);
        kv->value = dup_text(st, 1);
        if (!kv->key || !kv->value) {
            return oom(st);
        }
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) return st_rd_bad("meta", sqlite3_errmsg(r->db));
    return ST_OK;
}

static int load_threads(st_reader *r)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(r->db,
                           "SELECT id, os_tid, name, role, device, rank, dropped FROM main.threads "
                           "ORDER BY id",
                           -1, &st, NULL) != SQLITE_OK)
        return st_rd_bad("threads", sqlite3_errmsg(r->db));
    int rc;
    uint32_t cap = 0;
    int64_t max_id = -1;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t id, tid, device, rank, dropped;
        if (st_rd_int_col(st, 0, &id) || st_rd_int_col(st, 1, &tid) || st_rd_int_col(st, 4, &device) ||
            st_rd_int_col(st, 5, &rank) || st_rd_int_col(st, 6, &dropped) || id < 0 || id >= ST_MAX_THREADS ||
            dropped < 0) {
            sqlite3_finalize(st);
            return st_rd_bad("threads", "a row has a missing, non-integer or out-of-range value");
        }
        if (r->n_threads == cap) {
            cap = cap ? cap * 2 : 16;
            st_thread_info *t = realloc(r->threads, cap * sizeof *t);
            if (!t) {
                return oom(st);
            }
            r->threads = t;
        }
        st_thread_info *t = &r->threads[r->n_threads++];
        t->id = (uint32_t)id;
        t->os_tid = tid;
        t->name = dup_text(st, 2);
        t->role = dup_text(st, 3);
        t->device = (int)device;
        t->rank = (int)rank;
        t->dropped = (uint64_t)dropped;
        if (id > max_id) max_id = id;
        if (!t->name || !t->role) {
            return oom(st);
        }
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) return st_rd_bad("threads", sqlite3_errmsg(r->db));
    r->thread_index_len = (uint32_t)(max_id + 1);
    r->thread_index = malloc((r->thread_index_len + 1) * sizeof *r->thread_index);
    if (!r->thread_index) return st_set_error(ST_ENOMEM, "out of memory");
    for (uint32_t i = 0; i < r->thread_index_len; i++) r->thread_index[i] = -1;
    for (uint32_t i = 0; i < r->n_threads; i++) r->thread_index[r->threads[i].id] = (int32_t)i;
    return ST_OK;
}

static int load_stages(st_reader *r)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(r->db, "SELECT id, name, kind FROM main.stages ORDER BY id", -1, &st,
                           NULL) != SQLITE_OK)
        return st_rd_bad("stages", sqlite3_errmsg(r->db));
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t id;
        if (st_rd_int_col(st, 0, &id) || id < 0 || id >= ST_MAX_STAGES) {
            sqlite3_finalize(st);
            return st_rd_bad("stages", "a row has a missing or out-of-range id");
        }
        const unsigned char *kind = sqlite3_column_text(st, 2);
        int k = st_kind_parse((const char *)kind);
        if (k < 0) {
            /* The message first: kind points into the statement's row. */
            int err = st_set_error(ST_ECORRUPT, "trace table 'stages': stage %lld has unknown kind '%s'",
                                   (long long)id, kind ? (const char *)kind : "");
            sqlite3_finalize(st);
            return err;
        }
        if ((uint32_t)id >= r->n_stages) {
            st_stage_info *s = realloc(r->stages, ((size_t)id + 1) * sizeof *s);
            if (!s) {
                return oom(st);
            }
            for (uint32_t i = r->n_stages; i <= (uint32_t)id; i++) {
                char name[32];
                snprintf(name, sizeof name, "stage%u", i);
                s[i] = (st_stage_info){i, strdup(name), ST_WORK};
            }
            r->stages = s;
            uint32_t first = r->n_stages;
            r->n_stages = (uint32_t)id + 1; /* owned from here: freed by st_reader_close */
            for (uint32_t i = first; i < (uint32_t)id; i++)
                if (!s[i].name) {
                    return oom(st);
                }
        }
        free((char *)r->stages[id].name);
        r->stages[id].name = dup_text(st, 1);
        r->stages[id].kind = (st_kind)k;
        if (!r->stages[id].name) {
            return oom(st);
        }
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) return st_rd_bad("stages", sqlite3_errmsg(r->db));
    return ST_OK;
}

static int load_counters(st_reader *r)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(r->db, "SELECT id, name, unit FROM main.counter_names ORDER BY id", -1,
                           &st, NULL) != SQLITE_OK)
        return st_rd_bad("counter_names", sqlite3_errmsg(r->db));
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t id;
        if (st_rd_int_col(st, 0, &id) || id < 0 || id >= ST_MAX_COUNTERS) {
            sqlite3_finalize(st);
            return st_rd_bad("counter_names", "a row has a missing or out-of-range id");
        }
        if ((uint32_t)id >= r->n_counters) {
            st_counter_info *c = realloc(r->counters, ((size_t)id + 1) * sizeof *c);
            if (!c) {
                return oom(st);
            }
            for (uint32_t i = r->n_counters; i <= (uint32_t)id; i++) {
                char name[32];
                snprintf(name, sizeof name, "counter%u", i);
                c[i] = (st_counter_info){i, strdup(name), strdup("")};
            }
            r->counters = c;
            uint32_t first = r->n_counters;
            r->n_counters = (uint32_t)id + 1; /* owned from here: freed by st_reader_close */
            for (uint32_t i = first; i < (uint32_t)id; i++)
                if (!c[i].name || !c[i].unit) {
                    return oom(st);
                }
        }
        free((char *)r->counters[id].name);
        free((char *)r->counters[id].unit);
        r->counters[id].name = dup_text(st, 1);
        r->counters[id].unit = dup_text(st, 2);
        if (!r->counters[id].name || !r->counters[id].unit) {
            return oom(st);
        }
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) return st_rd_bad("counter_names", sqlite3_errmsg(r->db));
    return ST_OK;
}

static int load_steps(st_reader *r)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(r->db, "SELECT step, ts_ns, tokens FROM main.steps ORDER BY step", -1,
                           &st, NULL) != SQLITE_OK)
        return st_rd_bad("steps", sqlite3_errmsg(r->db));
    int rc;
    uint32_t cap = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t step, ts, tokens;
        if (st_rd_int_col(st, 0, &step) || st_rd_int_col(st, 1, &ts) || st_rd_int_col(st, 2, &tokens) || step < 0 ||
            tokens < 0) {
            sqlite3_finalize(st);
            return st_rd_bad("steps", "a row has a missing, negative or non-integer value");
        }
        if (r->n_steps && ts < r->steps[r->n_steps - 1].ts_ns) {
            sqlite3_finalize(st);
            return st_rd_bad("steps", "step marks go back in time");
        }
        if (r->n_steps == cap) {
            cap = cap ? cap * 2 : 256;
            st_step_info *s = realloc(r->steps, cap * sizeof *s);
            if (!s) {
                return oom(st);
            }
            r->steps = s;
        }
        r->steps[r->n_steps++] = (st_step_info){(uint64_t)step, ts, (uint64_t)tokens};
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) return st_rd_bad("steps", sqlite3_errmsg(r->db));
    return ST_OK;
}

/* Whether a file without stagetrace tables is plausibly a trace copied
 * without its write-ahead log (no PATH-wal beside it when it was opened,
 * or an empty one, which a reader's earlier open may have left:
 * r->wal_absent): a SQLite database in WAL mode, header bytes 18
 * and 19 (the file format's write and read versions) both 2. While a
 * program records, its commits sit in the -wal file, so the main file alone
 * can be an empty database. */
static int wal_mode(const char *path)
{
    unsigned char h[20];
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t got = read(fd, h, sizeof h);
    close(fd);
    return got == (ssize_t)sizeof h && memcmp(h, "SQLite format 3", 16) == 0 && h[18] == 2 && h[19] == 2;
}

static int load(st_reader *r, const char *path)
{
    const char *file = r->db ? sqlite3_db_filename(r->db, "main") : NULL;
    const char *where = path ? path : file && *file ? file : "database";
    for (size_t i = 0; i < sizeof required_tables / sizeof required_tables[0]; i++) {
        int kind = st_rd_object_kind(r->db, required_tables[i]);
        if (kind < 0) {
            int code = sqlite3_errcode(r->db);
            if (code == SQLITE_NOTADB)
                return st_set_error(ST_ECORRUPT, "'%s' is not a SQLite file, so not a stagetrace trace", where);
            return st_set_error(ST_ECORRUPT, "cannot read '%s': %s", where, sqlite3_errmsg(r->db));
        }
        if (!kind) {
            if (strcmp(required_tables[i], "meta") == 0 && path && r->wal_absent && wal_mode(path))
                return st_set_error(ST_ECORRUPT,
                                    "'%s' has no stagetrace tables; its write-ahead log '%s-wal' is %s (was "
                                    "the file copied without it?)",
                                    where, where, r->wal_absent == 2 ? "empty" : "missing");
            if (strcmp(required_tables[i], "meta") == 0)
                return st_set_error(ST_ECORRUPT, "'%s' is not a stagetrace trace (it has no meta table)", where);
            return st_set_error(ST_ECORRUPT, "'%s' is not a complete stagetrace trace: table '%s' is missing",
                                where, required_tables[i]);
        }
    }
    int rc;
    if ((rc = st_rd_check_meta_table(r)) || (rc = load_meta(r)) || (rc = st_rd_check_rank_meta(r)))
        return rc;
    const char *version = st_reader_meta(r, "schema_version");
    if (!version)
        return st_set_error(ST_ECORRUPT, "'%s' is not a stagetrace trace (meta has no schema_version)", where);
    char *end;
    long v = strtol(version, &end, 10);
    if (*end || v < 1)
        return st_set_error(ST_ECORRUPT, "'%s' has an invalid schema_version '%s'", where, version);
    if (v != ST_SCHEMA_VERSION)
        return st_set_error(ST_EVERSION,
                            "'%s' uses trace schema version %ld; this stagetrace reads version %d "
                            "(use a matching stagetrace release)",
                            where, v, ST_SCHEMA_VERSION);
    if ((rc = st_rd_check_small_tables(r))) return rc;
    if ((rc = load_threads(r)) || (rc = load_stages(r)) || (rc = load_counters(r)) || (rc = load_steps(r)))
        return rc;
    return st_rd_check_chunk_tables(r);
}

static const char *file_kind(mode_t mode)
{
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    if (S_ISDIR(mode)) return "a directory";
    return "not a plain file";
}

static void harden(sqlite3 *db)
{
    sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, 1, (int *)0);
    sqlite3_db_config(db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, (int *)0);
    sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_TRIGGER, 0, (int *)0);
    sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, 0, (int *)0);
}

/* ---- one file's methods (a rank set's: reader_set.c) ---- */

static void file_close(st_reader *r)
{
    if (r->owns_db) sqlite3_close(r->db);
}

static const char *file_meta(const st_reader *r, const char *key);

static const st_reader_methods file_methods = {
    .close = file_close,
    .meta = file_meta,
    .chunk_totals = st_rd_file_chunk_totals,
    .range_chunks_per_thread = st_rd_file_range_chunks_per_thread,
    .unended = st_rd_file_unended,
    .range_open = st_rd_file_range_open,
    .range_fill = st_rd_file_range_fill,
    .range_close = st_rd_file_range_close,
    .event_open = st_rd_file_event_open,
    .event_next = st_rd_file_event_next,
    .event_close = st_rd_file_event_close,
    .sample_open = st_rd_file_sample_open,
    .sample_next = st_rd_file_sample_next,
    .sample_close = st_rd_file_sample_close,
    .has_flows = st_rd_file_has_flows,
    .flow_open = st_rd_file_flow_open,
    .flow_next = st_rd_file_flow_next,
    .flow_close = st_rd_file_flow_close,
    .flow_pos = st_rd_file_flow_pos,
    .has_gpu = st_rd_file_has_gpu,
    .gpu_open = st_rd_file_gpu_open,
    .gpu_next = st_rd_file_gpu_next,
    .gpu_close = st_rd_file_gpu_close,
    .gpu_pos = st_rd_file_gpu_pos,
    .gpu_records_per_device = st_rd_file_gpu_records_per_device,
    .gpu_devices = st_rd_file_gpu_devices,
    .gpu_span = st_rd_file_gpu_span,
    .gpu_headers = st_rd_file_gpu_headers,
    .has_cpu = st_rd_file_has_cpu,
    .cpu_thread = st_rd_file_cpu_thread,
    .cpu_open = st_rd_file_cpu_open,
    .cpu_next = st_rd_file_cpu_next,
    .cpu_close = st_rd_file_cpu_close,
    .cpu_stack = st_rd_file_cpu_stack,
    .cpu_frame_name = st_rd_file_cpu_frame_name,
    .cpu_map = st_rd_file_cpu_map,
    .cpu_frame_lines = st_rd_file_cpu_frame_lines,
    .cpu_block_open = st_rd_file_cpu_block_open,
    .cpu_block_next = st_rd_file_cpu_block_next,
    .cpu_block_close = st_rd_file_cpu_block_close,
    .cpu_window_open = st_rd_file_cpu_window_open,
    .cpu_window_next = st_rd_file_cpu_window_next,
    .cpu_window_close = st_rd_file_cpu_window_close,
};

int st_reader_open(st_reader **out, const char *path)
{
    *out = NULL;
    if (!path || !*path) return st_set_error(ST_EINVAL, "no trace file given");
    struct stat sb;
    if (stat(path, &sb) != 0)
        return st_set_error(ST_EIO, "cannot open trace '%s': %s", path, strerror(errno));
    if (S_ISDIR(sb.st_mode)) return st_set_error(ST_EIO, "cannot open trace '%s': it is a directory", path);
    /* SQLite would block opening a FIFO, and read a device forever. */
    if (!S_ISREG(sb.st_mode))
        return st_set_error(ST_EIO, "cannot open trace '%s': it is not a regular file (%s)", path, file_kind(sb.st_mode));
    /* The same for the side files SQLite opens beside it. */
    static const char *const sides[] = {"-wal", "-shm", "-journal"};
    int wal_absent = 0; /* looked at before SQLite opens the file: it may make an empty one, and leave it */
    for (size_t i = 0; i < sizeof sides / sizeof sides[0]; i++) {
        size_t n = strlen(path);
        char *side = malloc(n + 9);
        if (!side) return st_set_error(ST_ENOMEM, "out of memory");
        memcpy(side, path, n);
        strcpy(side + n, sides[i]);
        struct stat ss;
        int found = stat(side, &ss) == 0;
        int odd = found && !S_ISREG(ss.st_mode);
        if (i == 0) wal_absent = found ? (S_ISREG(ss.st_mode) && ss.st_size == 0 ? 2 : 0) : errno == ENOENT;
        free(side);
        if (odd)
            return st_set_error(ST_EIO, "cannot open trace '%s': its side file '%s%s' is not a regular file (%s)", path,
                                path, sides[i], file_kind(ss.st_mode));
    }
    st_reader *r = calloc(1, sizeof *r);
    if (!r) return st_set_error(ST_ENOMEM, "out of memory");
    r->m = &file_methods;
    r->owns_db = 1;
    r->wal_absent = wal_absent;
    if (sqlite3_open_v2(path, &r->db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        int rc = st_set_error(ST_EIO, "cannot open trace '%s': %s", path,
                              r->db ? sqlite3_errmsg(r->db) : "out of memory");
        st_reader_close(r);
        return rc;
    }
    harden(r->db);
    sqlite3_busy_timeout(r->db, 2000);
    int rc = load(r, path);
    if (rc) {
        st_reader_close(r);
        return rc;
    }
    *out = r;
    return ST_OK;
}

int st_reader_open_db(st_reader **out, sqlite3 *db)
{
    *out = NULL;
    st_reader *r = calloc(1, sizeof *r);
    if (!r) return st_set_error(ST_ENOMEM, "out of memory");
    r->m = &file_methods;
    r->db = db;
    int rc = load(r, NULL);
    if (rc) {
        st_reader_close(r);
        return rc;
    }
    *out = r;
    return ST_OK;
}

void st_reader_close(st_reader *r)
{
    if (!r) return;
    r->m->close(r);
    st_rd_cpu_free(r);
    for (uint32_t i = 0; i < r->n_meta; i++) {
        free(r->meta[i].key);
        free(r->meta[i].value);
    }
    for (uint32_t i = 0; i < r->n_threads; i++) {
        free((char *)r->threads[i].name);
        free((char *)r->threads[i].role);
    }
    for (uint32_t i = 0; i < r->n_stages; i++) free((char *)r->stages[i].name);
    for (uint32_t i = 0; i < r->n_counters; i++) {
        free((char *)r->counters[i].name);
        free((char *)r->counters[i].unit);
    }
    free(r->meta);
    free(r->threads);
    free(r->thread_index);
    free(r->stages);
    free(r->counters);
    free(r->steps);
    free(r);
}

sqlite3 *st_reader_db(const st_reader *r) { return r->db; }

const char *st_reader_meta(const st_reader *r, const char *key) { return st_rd_meta(r, key); }

static const char *file_meta(const st_reader *r, const char *key)
{
    for (uint32_t i = 0; i < r->n_meta; i++)
        if (strcmp(r->meta[i].key, key) == 0) return r->meta[i].value;
    return NULL;
}

uint32_t st_reader_n_threads(const st_reader *r) { return r->n_threads; }

const st_thread_info *st_reader_thread(const st_reader *r, uint32_t i)
{
    return i < r->n_threads ? &r->threads[i] : NULL;
}

const st_thread_info *st_reader_thread_by_id(const st_reader *r, uint32_t id) { return st_rd_thread_by_id(r, id); }

uint32_t st_reader_n_stages(const st_reader *r) { return r->n_stages; }

const st_stage_info *st_reader_stage(const st_reader *r, uint32_t id)
{
    return id < r->n_stages ? &r->stages[id] : NULL;
}

uint32_t st_reader_n_counters(const st_reader *r) { return r->n_counters; }

const st_counter_info *st_reader_counter(const st_reader *r, uint32_t id)
{
    return id < r->n_counters ? &r->counters[id] : NULL;
}

uint32_t st_reader_n_steps(const st_reader *r) { return r->n_steps; }

const st_step_info *st_reader_step(const st_reader *r, uint32_t i)
{
    return i < r->n_steps ? &r->steps[i] : NULL;
}
