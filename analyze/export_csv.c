/* export_csv.c: `analyze export --csv DIR`: each table as DIR/<table>.csv:
 * meta, threads, stages, steps, counter_names, and the decoded rows
 * ranges.csv, counters.csv, gpu.csv (the columns of the SQL row tables) and
 * gpu_api.csv (the CUDA API calls), and with a CPU capture its tables
 * (export_cpu.c: cpu_samples.csv, ...), written through an_table in its
 * CSV format. No file at all is left by a failed export (see an_export_csv).
 * One of the converters under cmd_export.c (export.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "export.h"

static const an_col meta_cols[] = {{"key", AN_T_STR, 0}, {"value", AN_T_STR, 0}};
static const an_col thread_cols[] = {{"id", AN_T_INT, 0},     {"os_tid", AN_T_INT, 0}, {"name", AN_T_STR, 0},
                                     {"role", AN_T_STR, 0},   {"device", AN_T_INT, 0}, {"rank", AN_T_INT, 0},
                                     {"dropped", AN_T_INT, 0}};
static const an_col stage_cols[] = {{"id", AN_T_INT, 0}, {"name", AN_T_STR, 0}, {"kind", AN_T_STR, 0}};
static const an_col step_cols[] = {{"step", AN_T_INT, 0}, {"ts_ns", AN_T_INT, 0}, {"tokens", AN_T_INT, 0}};
static const an_col counter_name_cols[] = {{"id", AN_T_INT, 0}, {"name", AN_T_STR, 0}, {"unit", AN_T_STR, 0}};
static const an_col range_cols[] = {{"thread", AN_T_INT, 0},   {"stage", AN_T_INT, 0}, {"start_ns", AN_T_INT, 0},
                                    {"dur_ns", AN_T_INT, 0},   {"end_ns", AN_T_INT, 0}, {"depth", AN_T_INT, 0},
                                    {"step", AN_T_INT, 0}};
static const an_col counter_cols[] = {{"thread", AN_T_INT, 0}, {"counter", AN_T_INT, 0},
                                      {"ts_ns", AN_T_INT, 0},  {"value", AN_T_ANY, 0}};

static const an_col gpu_cols[] = {{"device", AN_T_INT, 0},  {"stream", AN_T_INT, 0},      {"kind", AN_T_STR, 0},
                                  {"name", AN_T_STR, 0},    {"start_ns", AN_T_INT, 0},    {"dur_ns", AN_T_INT, 0},
                                  {"bytes", AN_T_INT, 0},   {"correlation", AN_T_INT, 0}, {"thread", AN_T_INT, 0},
                                  {"stage", AN_T_INT, 0},   {"launch_tid", AN_T_INT, 0},  {"launch_thread", AN_T_STR, 0}};
static const an_col gpu_api_cols[] = {{"thread", AN_T_INT, 0},   {"os_tid", AN_T_INT, 0}, {"api", AN_T_STR, 0},
                                      {"name", AN_T_STR, 0},     {"cbid", AN_T_INT, 0},   {"start_ns", AN_T_INT, 0},
                                      {"dur_ns", AN_T_INT, 0},   {"correlation", AN_T_INT, 0},
                                      {"stage", AN_T_INT, 0}};

enum { TAB_META, TAB_THREADS, TAB_STAGES, TAB_STEPS, TAB_COUNTER_NAMES, TAB_RANGES, TAB_COUNTERS, TAB_GPU, TAB_GPU_API,
       N_TABS };
static const struct {
    const char *name;
    const an_col *cols;
    int n_cols;
} tabs[N_TABS] = {
    {"meta", meta_cols, 2},           {"threads", thread_cols, 7}, {"stages", stage_cols, 3},
    {"steps", step_cols, 3},          {"counter_names", counter_name_cols, 3},
    {"ranges", range_cols, 7},        {"counters", counter_cols, 4},
    {"gpu", gpu_cols, 12},            {"gpu_api", gpu_api_cols, 9},
};

static int csv_gpu_row(const st_gpu_row *g, void *arg)
{
    an_table *tb = arg;
    char buf[96];
    an_put_int(tb, g->device);
    an_put_int(tb, g->stream);
    an_put_str(tb, st_gpu_kind_name(g->rec.kind));
    an_put_str(tb, an_export_gpu_row_name(g, buf, sizeof buf));
    an_put_int(tb, g->rec.start_ns);
    an_put_int(tb, g->rec.dur_ns);
    an_put_int(tb, (int64_t)g->rec.bytes);
    an_put_int(tb, g->rec.correlation);
    if (g->thread >= 0) an_put_int(tb, g->thread);
    else an_put_null(tb);
    if (g->stage >= 0) an_put_int(tb, g->stage);
    else an_put_null(tb);
    if (g->launch_os_tid > 0) an_put_int(tb, g->launch_os_tid);
    else an_put_null(tb);
    an_put_str(tb, g->launch_thread);
    an_row_end(tb);
    return 0;
}

static int csv_api_row(const st_gpu_row *g, void *arg)
{
    an_table *tb = arg;
    if (g->thread >= 0) an_put_int(tb, g->thread);
    else an_put_null(tb);
    an_put_int(tb, g->rec.os_tid);
    an_put_str(tb, g->stream == 1 ? "driver" : "runtime");
    an_put_str(tb, g->name); /* NULL: a trace that did not store names */
    an_put_int(tb, g->rec.copy_kind);
    an_put_int(tb, g->rec.start_ns);
    an_put_int(tb, g->rec.dur_ns);
    an_put_int(tb, g->rec.correlation);
    if (g->stage >= 0) an_put_int(tb, g->stage);
    else an_put_null(tb);
    an_row_end(tb);
    return 0;
}

/* A CPU table's row: each cell as SQLite typed it (NULL: empty). */
static int csv_cpu_row(sqlite3_stmt *row, void *arg)
{
    an_table *tb = arg;
    for (int i = 0; i < sqlite3_column_count(row); i++) {
        switch (sqlite3_column_type(row, i)) {
        case SQLITE_NULL: an_put_null(tb); break;
        case SQLITE_INTEGER: an_put_int(tb, sqlite3_column_int64(row, i)); break;
        default: an_put_str(tb, (const char *)sqlite3_column_text(row, i)); break;
        }
    }
    an_row_end(tb);
    return 0;
}

/* The files to write: the tables above, then the CPU tables present. */
typedef struct csv_file {
    const char *name;
    const an_col *cols;
    int n_cols;
    int tab; /* TAB_*, or N_TABS + the an_export_cpu_tables index */
} csv_file;

/* Writes table `tab` as rows of an an_table (CSV); returns an ST_ code. */
static int write_rows(an_trace *t, int tab, an_table *tb, an_progress *p)
{
    st_reader *r = t->r;
    switch (tab) {
    case TAB_META: {
        sqlite3_stmt *st;
        if (sqlite3_prepare_v2(st_reader_db(r), "SELECT key, value FROM main.meta ORDER BY key", -1, &st,
                               NULL) != SQLITE_OK)
            return ST_ECORRUPT;
        while (sqlite3_step(st) == SQLITE_ROW) {
            an_put_str(tb, (const char *)sqlite3_column_text(st, 0));
            an_put_str(tb, (const char *)sqlite3_column_text(st, 1));
            an_row_end(tb);
        }
        sqlite3_finalize(st);
        return 0;
    }
    case TAB_THREADS:
        for (uint32_t i = 0; i < st_reader_n_threads(r); i++) {
            const st_thread_info *th = st_reader_thread(r, i);
            an_put_int(tb, th->id);
            an_put_int(tb, th->os_tid);
            an_put_str(tb, th->name);
            an_put_str(tb, th->role);
            an_put_int(tb, th->device);
            an_put_int(tb, th->rank);
            an_put_int(tb, (int64_t)th->dropped);
            an_row_end(tb);
        }
        return 0;
    case TAB_STAGES:
        for (uint32_t i = 0; i < st_reader_n_stages(r); i++) {
            const st_stage_info *s = st_reader_stage(r, i);
            an_put_int(tb, s->id);
            an_put_str(tb, s->name);
            an_put_str(tb, st_kind_name(s->kind));
            an_row_end(tb);
        }
        return 0;
    case TAB_STEPS:
        for (uint32_t i = 0; i < st_reader_n_steps(r); i++) {
            const st_step_info *s = st_reader_step(r, i);
            an_put_int(tb, (int64_t)s->step);
            an_put_int(tb, s->ts_ns);
            an_put_int(tb, (int64_t)s->tokens);
            an_row_end(tb);
        }
        return 0;
    case TAB_COUNTER_NAMES:
        for (uint32_t i = 0; i < st_reader_n_counters(r); i++) {
            const st_counter_info *c = st_reader_counter(r, i);
            an_put_int(tb, c->id);
            an_put_str(tb, c->name);
            an_put_str(tb, c->unit);
            an_row_end(tb);
        }
        return 0;
    case TAB_RANGES: {
        st_range_iter *it = NULL;
        int rc = st_range_iter_open(&it, r, -1, INT64_MIN, INT64_MAX);
        st_range x;
        while (!rc && (rc = st_range_iter_next(it, &x)) == 1) {
            rc = 0;
            an_progress_add(p, 1);
            an_put_int(tb, x.thread);
            an_put_int(tb, x.stage);
            an_put_int(tb, x.start_ns);
            an_put_int(tb, x.dur_ns);
            an_put_int(tb, x.start_ns + x.dur_ns);
            an_put_int(tb, x.depth);
            int has;
            uint64_t step = an_step_of(t, x.start_ns, &has);
            if (has) an_put_int(tb, (int64_t)step);
            else an_put_null(tb);
            an_row_end(tb);
        }
        st_range_iter_close(it);
        return rc;
    }
    case TAB_COUNTERS: {
        st_sample_iter *it = NULL;
        int rc = st_sample_iter_open(&it, r, -1, INT64_MIN, INT64_MAX);
        st_sample_row s;
        while (!rc && (rc = st_sample_iter_next(it, &s)) == 1) {
            rc = 0;
            an_progress_add(p, 1);
            an_put_int(tb, s.thread);
            an_put_int(tb, s.counter);
            an_put_int(tb, s.ts_ns);
            an_put_real(tb, s.value);
            an_row_end(tb);
        }
        st_sample_iter_close(it);
        return rc;
    }
    case TAB_GPU: return an_export_each_gpu_row(t, 0, csv_gpu_row, tb);
    case TAB_GPU_API: return an_export_each_gpu_row(t, 1, csv_api_row, tb);
    }
    if (tab >= N_TABS) return an_export_each_cpu_row(t, tab - N_TABS, csv_cpu_row, tb);
    return 0;
}

/* The files of --csv are written into a staging directory and moved into
 * place only when every one is complete, so a failed export leaves DIR as
 * it was: a new DIR is staged beside it (DIR.tmpPID) and renamed to DIR; an
 * existing DIR gets a staging directory inside it (DIR/.csv.tmpPID, on
 * DIR's own file system), whose files are then renamed over DIR's. On
 * failure the staging directory and what it holds are removed. */
static void remove_stage(const char *stage, char *path, size_t len, const csv_file *files, int n_files)
{
    for (int i = 0; i < n_files; i++) {
        snprintf(path, len, "%s/%s.csv", stage, files[i].name);
        unlink(path);
    }
    rmdir(stage);
}

int an_export_csv(an_trace *t, const char *dir_arg, int overwrite)
{
    size_t dir_len = strlen(dir_arg);
    while (dir_len > 1 && dir_arg[dir_len - 1] == '/') dir_len--; /* "out/" is "out" */
    size_t len = dir_len + 64;
    char *dir = malloc(len), *stage = malloc(len), *path = malloc(len), *dest = malloc(len);
    int rc = dir && stage && path && dest ? AN_EXIT_OK : AN_EXIT_FAIL;
    if (rc) an_error("out of memory");
    csv_file files[N_TABS + AN_EXPORT_CPU_TABLES];
    int n_files = 0, cpu[AN_EXPORT_CPU_TABLES], n_cpu = 0;
    for (int i = 0; i < N_TABS; i++) files[n_files++] = (csv_file){tabs[i].name, tabs[i].cols, tabs[i].n_cols, i};
    if (!rc && an_export_cpu_list(t, cpu, &n_cpu)) rc = AN_EXIT_USAGE;
    for (int i = 0; i < n_cpu; i++) {
        const an_export_cpu_table *c = &an_export_cpu_tables[cpu[i]];
        files[n_files++] = (csv_file){c->name, c->cols, c->n_cols, N_TABS + cpu[i]};
    }
    struct stat sb;
    int existed = 0;
    if (!rc) {
        snprintf(dir, len, "%.*s", (int)dir_len, dir_arg);
        if (stat(dir, &sb) == 0) {
            existed = 1;
            if (!S_ISDIR(sb.st_mode)) {
                an_error("export: %s is not a directory", dir);
                rc = AN_EXIT_USAGE;
            }
        } else if (errno != ENOENT) {
            an_error("export: cannot use directory %s: %s", dir, strerror(errno));
            rc = AN_EXIT_USAGE;
        }
    }
    for (int i = 0; i < n_files && !rc && existed; i++) {
        snprintf(path, len, "%s/%s.csv", dir, files[i].name);
        rc = an_out_allowed("export", path, overwrite);
    }
    if (!rc) {
        if (existed)
            snprintf(stage, len, "%s/.csv.tmp%ld", dir, (long)getpid());
        else
            snprintf(stage, len, "%s.tmp%ld", dir, (long)getpid());
        /* a signal removes the staging directory and the files it may hold by then */
        const char *names[N_TABS + AN_EXPORT_CPU_TABLES];
        char name_buf[N_TABS + AN_EXPORT_CPU_TABLES][64];
        for (int i = 0; i < n_files; i++) {
            snprintf(name_buf[i], sizeof name_buf[i], "%s.csv", files[i].name);
            names[i] = name_buf[i];
        }
        rc = an_tmp_add_dir(stage, names, (uint32_t)n_files);
        if (!rc && mkdir(stage, 0777) != 0) {
            an_error("export: cannot create directory %s: %s", dir, strerror(errno));
            an_tmp_forget(stage);
            rc = AN_EXIT_USAGE;
        }
    }
    if (rc) {
        free(dir), free(stage), free(path), free(dest);
        return rc;
    }
    an_progress p;
    an_progress_start(&p, "export --csv", t->n_ranges_hint + t->n_samples_hint);
    for (int i = 0; i < n_files && !rc; i++) {
        snprintf(path, len, "%s/%s.csv", stage, files[i].name);
        snprintf(dest, len, "%s/%s.csv", dir, files[i].name);
        an_file o;
        rc = an_file_open(&o, "export", path, 1);
        if (rc) break;
        an_out *out = an_out_new(o.f, AN_FMT_CSV);
        an_table *tb = out ? an_table_new(out, files[i].name, files[i].cols, files[i].n_cols) : NULL;
        int st = tb ? write_rows(t, files[i].tab, tb, &p) : ST_ENOMEM;
        an_table_end(tb);
        int bad = an_out_finish(out) != 0;
        if (st == ST_ENOMEM || (bad && !st)) an_error("export: cannot write %s", dest);
        else if (st && st != AN_EXPORT_PRINTED) an_trace_fail(t); /* AN_EXPORT_PRINTED: its line is out */
        rc = an_file_close(&o, st == 0 && !bad);
        if (st && st != ST_ENOMEM) rc = AN_EXIT_USAGE;
        else if (st || bad) rc = AN_EXIT_FAIL;
    }
    an_progress_end(&p);
    if (!rc) {
        if (!existed) {
            if (rename(stage, dir) != 0) {
                an_error("export: cannot create directory %s: %s", dir, strerror(errno));
                rc = AN_EXIT_FAIL;
            }
        } else {
            for (int i = 0; i < n_files && !rc; i++) {
                snprintf(path, len, "%s/%s.csv", stage, files[i].name);
                snprintf(dest, len, "%s/%s.csv", dir, files[i].name);
                if (rename(path, dest) != 0) {
                    an_error("export: cannot write %s: %s", dest, strerror(errno));
                    rc = AN_EXIT_FAIL;
                }
            }
            if (!rc) rmdir(stage);
        }
    }
    if (rc) remove_stage(stage, path, len, files, n_files);
    an_tmp_forget(stage);
    free(dir), free(stage), free(path), free(dest);
    return rc;
}
