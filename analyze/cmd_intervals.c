/* cmd_intervals.c: `analyze intervals FILE [--every N]`: the per-window
 * breakdown of each thread's wall time, recomputed from the trace.
 *
 * The windows come from st_reader_windows, which feeds the stored events
 * and step marks to the same aggregator the recording program runs, and the
 * text is st_window_format's: for the same trace and N, the output is
 * byte-identical to the program's own "profile" lines. CSV and JSON give one
 * row per (window, thread, stage), idle included, with nanoseconds,
 * milliseconds, share of the window and count, plus the window's tokens.
 * With a CPU capture, each thread line ends in its on-CPU share from the
 * trace's cpu_windows, matched to the windows as the writer matches them
 * online (tracer/cpu_oncpu.c), so that the text stays the program's.
 */
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "analyze.h"

static const char help[] =
    "usage: analyze intervals [--every N] [--format text|csv|json] FILE|SET\n"
    "(SET: the rank files of one run, listed, as a directory or a quoted glob: docs/analyze.md, \"Rank sets\")\n"
    "\n"
    "Splits each thread's wall time by stage in windows of N steps (from the mark of\n"
    "step kN to the mark of step (k+1)N), exactly as the recording program's profile\n"
    "lines do: self time per stage (nested ranges are not counted twice), 'idle' when\n"
    "no range is open, ranges split at window boundaries, roles with several threads\n"
    "averaged. The text is the same, byte for byte, as the online profile lines.\n"
    "\n"
    "options:\n"
    "  --every N    steps per window (default: the trace's meta profile_interval)\n"
    "  --format F   text (default), csv or json: one row per window, thread and stage,\n"
    "               with ns, ms, share_pct, count and the window's tokens and tokens/s\n"
    "  --align MODE\n"
    "               a rank set's clocks: auto (default), meta, collectives or none\n"
    "               (docs/analyze.md, \"Clock alignment\")\n";

enum { OPT_EVERY = 1 };
static const an_opt opts[] = {
    {"every", 1, OPT_EVERY},
    {"format", 1, AN_OPT_FORMAT},
    {"help", 0, AN_OPT_HELP},
    {"align", 1, AN_OPT_ALIGN}, {NULL, 0, 0},
};

static const an_col cols[] = {
    {"window", AN_T_INT, 0},        {"step_first", AN_T_INT, 0}, {"step_last", AN_T_INT, 0},
    {"start_s", AN_T_REAL, 9},      {"window_ms", AN_T_MS, 0},   {"tokens", AN_T_INT, 0},
    {"tokens_per_s", AN_T_REAL, 3}, {"thread", AN_T_INT, 0},     {"thread_name", AN_T_STR, 0},
    {"role", AN_T_STR, 0},          {"stage", AN_T_STR, 0},      {"kind", AN_T_STR, 0},
    {"ns", AN_T_INT, 0},            {"ms", AN_T_MS, 0},          {"share_pct", AN_T_PCT, 0},
    {"count", AN_T_INT, 0},
};
#define N_COLS ((int)(sizeof cols / sizeof cols[0]))

/* The trace's cpu_windows rows (docs/trace-format.md), in window order:
 * the schedstat reads, each with its step, its span and its rows. */
typedef struct oncpu_read {
    int64_t step, span_ns;
    uint32_t first, n; /* rows[first .. first + n) */
} oncpu_read;
typedef struct oncpu_row {
    int64_t thread, oncpu_ns; /* oncpu_ns -1: not a non-negative integer */
} oncpu_row;
typedef struct oncpu_table {
    oncpu_read *reads;
    uint32_t n_reads, next; /* next: the first read not yet passed */
    oncpu_row *rows;
    uint32_t n_rows;
    int64_t *shares; /* a window's oncpu_ns */
    uint32_t shares_cap;
} oncpu_table;

typedef struct emit {
    const an_trace *trace;
    an_table *table; /* CSV / JSON */
    char *text;      /* text: st_window_format's buffer */
    size_t text_cap;
    uint64_t windows;
    int failed;
    an_progress progress; /* in trace time: the windows' ends past the first step mark */
    int64_t progress_t0_ns;
    oncpu_table *oncpu; /* text with a CPU capture, else NULL */
} emit;

static int64_t int_col(sqlite3_stmt *st, int col, int *ok)
{
    if (sqlite3_column_type(st, col) != SQLITE_INTEGER) *ok = 0;
    return sqlite3_column_int64(st, col);
}

/* Reads cpu_windows when the windows are the trace's own (a single trace,
 * N its profile_interval) and it has the table. 0, or an exit code. */
static int oncpu_load(an_trace *t, uint64_t every, oncpu_table **out)
{
    *out = NULL;
    int64_t pi;
    if (t->is_set || an_trace_meta_i64(t, "profile_interval", &pi) || pi < 1 || (uint64_t)pi != every) return 0;
    sqlite3 *db = st_reader_db(t->r);
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, "SELECT 1 FROM main.sqlite_schema WHERE type = 'table' AND name = 'cpu_windows'", -1,
                           &st, NULL) != SQLITE_OK)
        goto bad;
    int present = sqlite3_step(st) == SQLITE_ROW;
    sqlite3_finalize(st);
    if (!present) return 0;
    if (sqlite3_prepare_v2(db,
                           "SELECT window, step, t0_ns, t1_ns, thread, oncpu_ns FROM main.cpu_windows "
                           "ORDER BY window, os_tid",
                           -1, &st, NULL) != SQLITE_OK)
        goto bad;
    oncpu_table *o = calloc(1, sizeof *o);
    uint32_t cap_reads = 0, cap_rows = 0;
    int rc, oom = !o, have = 0;
    int64_t cur = 0;
    while (!oom && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        int ok = 1;
        int64_t window = int_col(st, 0, &ok), step = int_col(st, 1, &ok), t0 = int_col(st, 2, &ok),
                t1 = int_col(st, 3, &ok), thread = int_col(st, 4, &ok);
        if (!ok) continue; /* not a row the writer stores */
        int ok_ns = 1;
        int64_t ns = int_col(st, 5, &ok_ns);
        if (!have || window != cur) {
            if (o->n_reads == cap_reads) {
                cap_reads = cap_reads ? cap_reads * 2 : 64;
                oncpu_read *v = realloc(o->reads, cap_reads * sizeof *v);
                if (!v) {
                    oom = 1;
                    break;
                }
                o->reads = v;
            }
            int64_t span;
            if (__builtin_sub_overflow(t1, t0, &span) || span < 0) span = 0;
            o->reads[o->n_reads++] = (oncpu_read){step, span, o->n_rows, 0};
            cur = window;
            have = 1;
        }
        if (o->n_rows == cap_rows) {
            cap_rows = cap_rows ? cap_rows * 2 : 256;
            oncpu_row *v = realloc(o->rows, cap_rows * sizeof *v);
            if (!v) {
                oom = 1;
                break;
            }
            o->rows = v;
        }
        o->rows[o->n_rows++] = (oncpu_row){thread, ok_ns && ns >= 0 ? ns : -1};
        o->reads[o->n_reads - 1].n++;
    }
    sqlite3_finalize(st);
    if (!oom && rc != SQLITE_DONE) {
        if (o) free(o->reads), free(o->rows), free(o);
        goto bad;
    }
    if (oom) {
        if (o) free(o->reads), free(o->rows), free(o);
        an_error("out of memory");
        return AN_EXIT_FAIL;
    }
    *out = o;
    return 0;
bad:
    an_error("%s: trace table 'cpu_windows' cannot be read: %s", t->path, sqlite3_errmsg(db));
    return AN_EXIT_USAGE;
}

static void oncpu_free(oncpu_table *o)
{
    if (!o) return;
    free(o->reads);
    free(o->rows);
    free(o->shares);
    free(o);
}

/* The window's on-CPU times into w (as the writer does online): the reads
 * before the window's last step are passed; the next one, if its step is
 * that step, gives each thread its row's on-CPU time (0 without a row). */
static int oncpu_match(oncpu_table *o, st_window *w)
{
    while (o->next < o->n_reads && (o->reads[o->next].step < 0 || (uint64_t)o->reads[o->next].step < w->step_last))
        o->next++;
    if (o->next >= o->n_reads || (uint64_t)o->reads[o->next].step != w->step_last || !w->n_threads) return 0;
    if (o->shares_cap < w->n_threads) {
        int64_t *v = realloc(o->shares, w->n_threads * sizeof *v);
        if (!v) return -1;
        o->shares = v;
        o->shares_cap = w->n_threads;
    }
    const oncpu_read *x = &o->reads[o->next++];
    for (uint32_t i = 0; i < w->n_threads; i++) {
        o->shares[i] = 0;
        for (uint32_t k = x->first; k < x->first + x->n; k++)
            if (o->rows[k].thread == (int64_t)w->threads[i].thread) {
                o->shares[i] = o->rows[k].oncpu_ns;
                break;
            }
    }
    w->oncpu_ns = o->shares;
    w->oncpu_span_ns = x->span_ns;
    return 1;
}

static void put_row_head(an_table *tb, const emit *e, const st_window *w, const st_window_thread *th)
{
    int64_t window_ns = w->t1_ns - w->t0_ns;
    an_put_int(tb, (int64_t)w->index);
    an_put_int(tb, (int64_t)w->step_first);
    an_put_int(tb, (int64_t)w->step_last);
    an_put_real(tb, (double)(w->t0_ns - e->trace->origin_ns) * 1e-9);
    an_put_ns(tb, window_ns);
    an_put_int(tb, (int64_t)w->tokens);
    if (window_ns > 0) an_put_real(tb, (double)w->tokens * 1e9 / (double)window_ns);
    else an_put_null(tb);
    an_put_int(tb, th->thread);
    an_put_str(tb, th->name);
    an_put_str(tb, th->role);
}

static void put_row_tail(an_table *tb, int64_t ns, int64_t window_ns)
{
    an_put_int(tb, ns);
    an_put_ns(tb, ns);
    an_put_pct(tb, window_ns > 0 ? 100.0 * (double)ns / (double)window_ns : 0.0);
}

static void on_window(const st_window *w, void *arg)
{
    emit *e = arg;
    e->windows++;
    if (w->t1_ns > e->progress_t0_ns && (uint64_t)(w->t1_ns - e->progress_t0_ns) > e->progress.done)
        an_progress_add(&e->progress, (uint64_t)(w->t1_ns - e->progress_t0_ns) - e->progress.done);
    if (e->failed) return;
    if (!e->table) {
        st_window with_cpu = *w;
        if (e->oncpu) {
            if (oncpu_match(e->oncpu, &with_cpu) < 0) {
                e->failed = 1;
                return;
            }
            w = &with_cpu;
        }
        size_t len = st_window_format(w, e->text, e->text_cap);
        if (len >= e->text_cap) {
            char *t = realloc(e->text, len + 1);
            if (!t) {
                e->failed = 1;
                return;
            }
            e->text = t;
            e->text_cap = len + 1;
            len = st_window_format(w, e->text, e->text_cap);
        }
        fwrite(e->text, 1, len, stdout);
        int64_t lost;
        if (an_trace_lost_in(e->trace, w->t0_ns, w->t1_ns, &lost))
            printf("  lost: %lld events in this window could not be stored (the trace has a hole): its times "
                   "are undercounted\n",
                   (long long)lost);
        return;
    }
    int64_t window_ns = w->t1_ns - w->t0_ns;
    for (uint32_t i = 0; i < w->n_threads; i++) {
        const st_window_thread *th = &w->threads[i];
        for (uint32_t s = 0; s < w->n_stages; s++) {
            if (th->stage_ns[s] == 0 && th->stage_count[s] == 0) continue;
            put_row_head(e->table, e, w, th);
            an_put_str(e->table, w->stage_names[s]);
            an_put_str(e->table, w->stage_kinds[s] < ST_KIND_COUNT ? st_kind_name((st_kind)w->stage_kinds[s]) : NULL);
            put_row_tail(e->table, th->stage_ns[s], window_ns);
            an_put_int(e->table, (int64_t)th->stage_count[s]);
            an_row_end(e->table);
        }
        if (th->idle_ns > 0) {
            put_row_head(e->table, e, w, th);
            an_put_str(e->table, "idle");
            an_put_null(e->table);
            put_row_tail(e->table, th->idle_ns, window_ns);
            an_put_null(e->table);
            an_row_end(e->table);
        }
    }
}

typedef struct own_opts {
    uint64_t every;
    int have_every;
} own_opts;

static int option(an_cmd *c, int id)
{
    own_opts *o = c->own;
    int rc = AN_EXIT_OK;
    switch (id) {
    case OPT_EVERY:
        rc = an_opt_every("intervals", c->args.value, &o->every);
        o->have_every = 1;
        break;
    }
    return rc;
}

static int work(an_cmd *c)
{
    own_opts *o = c->own;
    an_trace *t = &c->trace;
    int rc = AN_EXIT_OK;
    if (!rc && !o->have_every) {
        int64_t pi;
        if (an_trace_meta_i64(t, "profile_interval", &pi) || pi < 1 || pi > UINT32_MAX) {
            an_error("intervals: %s has no profile interval (meta profile_interval is 0 or absent); "
                     "pass --every N", t->path);
            rc = AN_EXIT_USAGE;
        }
        o->every = (uint64_t)pi;
    }
    if (!rc) {
        an_out *out = an_out_new(stdout, c->format);
        emit e = {.trace = t};
        /* progress: the share of the time from the first step mark to the last
         * that the windows have covered */
        uint32_t n_marks = st_reader_n_steps(t->r);
        uint64_t span = 0;
        if (n_marks >= 2) {
            e.progress_t0_ns = st_reader_step(t->r, 0)->ts_ns;
            int64_t last = st_reader_step(t->r, n_marks - 1)->ts_ns;
            span = last > e.progress_t0_ns ? (uint64_t)(last - e.progress_t0_ns) : 0;
        }
        an_progress_start(&e.progress, "intervals", span);
        if (c->format != AN_FMT_TEXT) e.table = an_table_new(out, "intervals", cols, N_COLS);
        else rc = oncpu_load(t, o->every, &e.oncpu);
        if (rc) {
            /* cpu_windows unreadable: its line is out */
        } else if (!out || (c->format != AN_FMT_TEXT && !e.table)) {
            an_error("out of memory");
            rc = AN_EXIT_FAIL;
        } else if (st_reader_windows(t->r, (uint32_t)o->every, on_window, &e) != ST_OK) {
            rc = an_trace_fail(t);
        } else if (e.failed) {
            an_error("out of memory");
            rc = AN_EXIT_FAIL;
        }
        an_progress_end(&e.progress);
        an_table_end(e.table);
        if (an_out_finish(out) && !rc) {
            an_error("intervals: cannot write the output");
            rc = AN_EXIT_FAIL;
        }
        free(e.text);
        oncpu_free(e.oncpu);
        if (!rc) an_trace_warn(t); /* after the work: a failure stays one line */
        if (!rc && e.windows == 0) {
            uint32_t n = st_reader_n_steps(t->r);
            if (n)
                an_warn("%s: no complete window of %llu steps (step marks %llu-%llu)", t->path,
                        (unsigned long long)o->every, (unsigned long long)st_reader_step(t->r, 0)->step,
                        (unsigned long long)st_reader_step(t->r, n - 1)->step);
            else
                an_warn("%s has no step marks, so no windows", t->path);
        }
    }
    return rc;
}

const an_cmd_def an_cmd_intervals = {
    .name = "intervals",
    .usage = help,
    .flags = AN_RUN_FORMAT | AN_RUN_TRACE,
    .opts = opts,
    .own_size = sizeof(own_opts),
    .option = option,
    .work = work,
};
