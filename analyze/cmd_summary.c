/* cmd_summary.c: `analyze summary FILE...`: where each thread's time went,
 * per stage, over the whole trace or a window.
 *
 * The numbers come from stats.c; this file parses the options, orders the
 * rows and prints them: per file, each thread's stages, then each role's
 * (all its threads together); for several files of one run, a table across
 * ranks with a column per rank and the slowest rank of every stage.
 * --jobs N reads the trace threads on N threads (stats.c); several files
 * are read a whole file per job, one open at a time, so that memory does not
 * grow with the files (an_stats_compute_paths). The output is the same for
 * every N.
 */
#include <stdlib.h>
#include <string.h>

#include "analyze.h"
#include "cpu_share.h"

#define JOBS_MAX 256 /* --jobs; the default: an_stats_default_jobs */

static const char help[] =
    "usage: analyze summary [options] FILE...\n"
    "\n"
    "Per thread and per role, per stage: total (inclusive) time, self time (minus nested\n"
    "ranges), their shares of the thread's wall time, count, mean, p50, p95, p99 and max.\n"
    "A thread's wall time is the trace span, the same for every thread: from the first\n"
    "range event or step mark of the trace to the last (or the window given). Time in no\n"
    "range is the 'idle' row. Role rows (thread '*', for roles of several threads) sum\n"
    "the role's threads; their shares are of the threads' wall time added up.\n"
    "Percentiles are exact (nearest rank: the smallest duration with at least p% of\n"
    "the ranges at or below it). In a window, ranges count with their part inside it.\n"
    "With the CPU capture (--trace-cpu): on_cpu_ms and the on-CPU, preempted and blocked\n"
    "shares of each stage's total time (docs/analyze.md, \"summary\").\n"
    "\n"
    "options:\n"
    "  --role R[,R]     only threads of these roles (repeatable)\n"
    "  --thread T[,T]   only these threads, by name or id (repeatable)\n"
    "  --stage S[,S]    only these stages (repeatable; self time still excludes any child)\n"
    "  --steps A:B      ranges overlapping the time from step A's mark to step B's mark,\n"
    "                   clipped to it (A: or :B leave an end open)\n"
    "  --time T0:T1     the same for seconds from the trace start (meta start_ns, when\n"
    "                   the trace was opened; T0: or :T1 leave an end open)\n"
    "  --sort KEY       total (default), count, mean, p99 or name\n"
    "  --merge          treat the files as ranks of one run (per-rank columns), even if\n"
    "                   their run ids differ; --separate never does. By default the ranks of\n"
    "                   one run are merged: equal run_ids, one world_size, each rank once\n"
    "  --format F       text (default), csv or json\n"
    "  --table NAME     only the table NAME (with --format csv or json): summary, ranks\n"
    "  --jobs N         read the trace threads on N threads, 1 to 256 (default: the CPUs this\n"
    "                   process may use, at most 8; 1 for traces under 500000 ranges); several\n"
    "                   files: a whole file per job, one open at a time. The output is the\n"
    "                   same for every N\n";

enum { OPT_ROLE = 1, OPT_THREAD, OPT_STAGE, OPT_SORT, OPT_MERGE, OPT_SEPARATE, OPT_JOBS };
static const an_opt opts[] = {
    {"role", 1, OPT_ROLE},   {"thread", 1, OPT_THREAD},       {"stage", 1, OPT_STAGE},
    {"steps", 1, AN_OPT_STEPS}, {"time", 1, AN_OPT_TIME},           {"sort", 1, OPT_SORT},
    {"merge", 0, OPT_MERGE}, {"separate", 0, OPT_SEPARATE},   {"format", 1, AN_OPT_FORMAT}, {"table", 1, AN_OPT_TABLE},
    {"jobs", 1, OPT_JOBS},   {"help", 0, AN_OPT_HELP},        {NULL, 0, 0},
};

enum sort_key { SORT_TOTAL, SORT_COUNT, SORT_MEAN, SORT_P99, SORT_NAME };

/* Columns; text leaves out the first three (file is a heading, scope and
 * threads show in the thread column). */
static const an_col cols[] = {
    {"file", AN_T_STR, 0},     {"scope", AN_T_STR, 0},    {"threads", AN_T_INT, 0},
    {"thread", AN_T_STR, 0},   {"role", AN_T_STR, 0},     {"stage", AN_T_STR, 0},
    {"kind", AN_T_STR, 0},     {"total_ms", AN_T_MS, 0},  {"total_pct", AN_T_PCT, 0},
    {"self_ms", AN_T_MS, 0},   {"self_pct", AN_T_PCT, 0}, {"count", AN_T_INT, 0},
    {"mean_ms", AN_T_MS, 0},   {"p50_ms", AN_T_MS, 0},    {"p95_ms", AN_T_MS, 0},
    {"p99_ms", AN_T_MS, 0},    {"max_ms", AN_T_MS, 0},
    /* the last four only for traces with the CPU capture (cpu_share.c) */
    {"on_cpu_ms", AN_T_MS, 0}, {"on_cpu_pct", AN_T_PCT, 0}, {"preempted_pct", AN_T_PCT, 0},
    {"blocked_pct", AN_T_PCT, 0},
};
#define N_CPU_COLS 4
#define N_COLS ((int)(sizeof cols / sizeof cols[0]) - N_CPU_COLS)
#define TEXT_SKIP 3

/* A file's CPU figures: per selected thread whether it has them, and the
 * split of each (thread, stage)'s inclusive time (an_cpu_range_shares). */
typedef struct file_cpu {
    int has;          /* the file has the CPU tables */
    uint8_t *known;   /* [n_threads] */
    an_cpu_split *split; /* [n_threads * n_stages] */
    an_cpu_split *role_split; /* [n_roles * n_stages], for roles whose selected threads all have figures */
    uint8_t *role_known; /* [n_roles] */
} file_cpu;

typedef struct sort_item {
    const an_stage_stats *x;
    const char *name;
    uint32_t stage;
} sort_item;

static enum sort_key g_sort; /* qsort has no context argument in C11 */

static int64_t mean_ns(const an_stage_stats *x)
{
    if (!x->count) return 0;
    /* Rounded half up, in integers: exact for any total. */
    return (int64_t)(((uint64_t)x->total_ns + x->count / 2) / x->count);
}

static int cmp_items(const void *pa, const void *pb)
{
    const sort_item *a = pa, *b = pb;
    int64_t ka = 0, kb = 0;
    switch (g_sort) {
    case SORT_TOTAL: ka = a->x->total_ns; kb = b->x->total_ns; break;
    case SORT_COUNT: ka = (int64_t)a->x->count; kb = (int64_t)b->x->count; break;
    case SORT_MEAN: ka = mean_ns(a->x); kb = mean_ns(b->x); break;
    case SORT_P99: ka = a->x->pct_ns[AN_P99]; kb = b->x->pct_ns[AN_P99]; break;
    case SORT_NAME: {
        int c = strcmp(a->name, b->name);
        if (c) return c;
        break;
    }
    }
    if (ka != kb) return ka > kb ? -1 : 1; /* largest first */
    return a->stage < b->stage ? -1 : a->stage > b->stage;
}

static double pct_of(int64_t part, int64_t whole)
{
    return whole > 0 ? 100.0 * (double)part / (double)whole : 0.0;
}

static void put_stats(an_table *tb, const an_stage_stats *x, int64_t wall)
{
    an_put_ns(tb, x->total_ns);
    an_put_pct(tb, pct_of(x->total_ns, wall));
    an_put_ns(tb, x->self_ns);
    an_put_pct(tb, pct_of(x->self_ns, wall));
    an_put_int(tb, (int64_t)x->count);
    an_put_ns(tb, mean_ns(x));
    for (int p = 0; p < AN_NPCT; p++) an_put_ns(tb, x->pct_ns[p]);
    an_put_ns(tb, x->max_ns);
}

/* on_cpu_ms and the shares of the stage's total (null without figures or
 * time). */
static void put_cpu(an_table *tb, const an_cpu_split *c, int64_t total_ns)
{
    if (!c) {
        for (int i = 0; i < N_CPU_COLS; i++) an_put_null(tb);
        return;
    }
    an_put_ns(tb, c->on_ns);
    if (total_ns > 0) {
        an_put_pct(tb, pct_of(c->on_ns, total_ns));
        an_put_pct(tb, pct_of(c->preempted_ns, total_ns));
        an_put_pct(tb, pct_of(c->blocked_ns, total_ns));
    } else {
        for (int i = 0; i < 3; i++) an_put_null(tb);
    }
}

/* The leading cells of a row; text leaves out file, scope and threads. */
static void put_lead(an_table *tb, an_format fmt, const char *file, const char *scope, uint32_t threads,
                     const char *thread, const char *role)
{
    if (fmt != AN_FMT_TEXT) {
        an_put_str(tb, file);
        an_put_str(tb, scope);
        an_put_int(tb, threads);
    }
    an_put_str(tb, fmt == AN_FMT_TEXT && !thread ? "*" : thread);
    an_put_str(tb, role);
}

/* One block of rows: the stages of a thread (or a role), sorted, then idle. */
static int put_block(an_table *tb, an_format fmt, const an_file_stats *fs, const an_stage_stats *row,
                     const char *scope, uint32_t threads, const char *thread, const char *role,
                     int64_t wall, int64_t busy, int with_idle, sort_item *items, int with_cpu,
                     const an_cpu_split *cpu_row)
{
    uint32_t n = 0;
    for (uint32_t st = 0; st < fs->n_stages; st++) {
        if (!row[st].count) continue;
        items[n++] = (sort_item){&row[st], fs->stage_names[st], st};
    }
    qsort(items, n, sizeof *items, cmp_items);
    for (uint32_t i = 0; i < n; i++) {
        put_lead(tb, fmt, fs->trace->path, scope, threads, thread, role);
        an_put_str(tb, items[i].name);
        an_put_str(tb, st_kind_name((st_kind)fs->stage_kinds[items[i].stage]));
        put_stats(tb, items[i].x, wall);
        if (with_cpu) put_cpu(tb, cpu_row ? &cpu_row[items[i].stage] : NULL, items[i].x->total_ns);
        an_row_end(tb);
    }
    if (with_idle) {
        int64_t idle = wall > busy ? wall - busy : 0;
        put_lead(tb, fmt, fs->trace->path, scope, threads, thread, role);
        an_put_str(tb, "idle");
        an_put_null(tb);
        an_put_ns(tb, idle);
        an_put_pct(tb, pct_of(idle, wall));
        an_put_ns(tb, idle);
        an_put_pct(tb, pct_of(idle, wall));
        for (int i = 0; i < 7 + (with_cpu ? N_CPU_COLS : 0); i++) an_put_null(tb);
        an_row_end(tb);
        n++;
    }
    return (int)n;
}

static void describe_window(char *buf, size_t size, const an_select *sel, const an_file_stats *fs)
{
    char a[40], b[40];
    an_fmt_fixed(a, fs->t0_ns - fs->trace->origin_ns, 9, 3);
    an_fmt_fixed(b, fs->t1_ns - fs->trace->origin_ns, 9, 3);
    if (sel->window.kind == AN_WIN_STEPS)
        snprintf(buf, size, "steps %s (%s-%s s)", sel->window.text, a, b);
    else if (sel->window.kind == AN_WIN_TIME)
        snprintf(buf, size, "time %s-%s s", a, b);
    else
        snprintf(buf, size, "whole trace, %s-%s s", a, b);
}

static void print_file(an_out *out, an_table **shared, const an_file_stats *fs, const an_select *sel,
                       int with_idle, const file_cpu *cpu, int shared_cpu)
{
    an_format fmt = an_out_format(out);
    an_table *tb = *shared;
    char win[160], wall[40];
    describe_window(win, sizeof win, sel, fs);
    an_fmt_fixed(wall, fs->wall_ns, 6, 3);
    if (fmt == AN_FMT_TEXT) {
        const char *program = fs->program;
        an_out_text(out, "== ");
        /* Names from the trace are printed through the table, sanitized; the
         * heading gets the same treatment by hand. */
        for (const unsigned char *p = (const unsigned char *)fs->trace->path; *p; p++)
            an_out_text(out, "%c", *p < 0x20 || *p == 0x7f ? '?' : *p);
        an_out_text(out, ": ");
        for (const unsigned char *p = (const unsigned char *)(program ? program : "?"); *p; p++)
            an_out_text(out, "%c", *p < 0x20 || *p == 0x7f ? '?' : *p);
        an_out_text(out, " rank %d; %s; wall time %s ms per thread\n", fs->rank, win, wall);
        tb = an_table_new(out, "summary", cols + TEXT_SKIP, N_COLS - TEXT_SKIP + (cpu->has ? N_CPU_COLS : 0));
    }
    int with_cpu = fmt == AN_FMT_TEXT ? cpu->has : shared_cpu;
    sort_item *items = malloc((fs->n_stages + 1) * sizeof *items);
    if (!items || !tb) {
        free(items);
        if (fmt == AN_FMT_TEXT) an_table_end(tb);
        return;
    }
    uint32_t ns = fs->n_stages;
    for (uint32_t ti = 0; ti < fs->n_threads; ti++) {
        if (!fs->thread_on[ti]) continue;
        put_block(tb, fmt, fs, &fs->thread_stage[(size_t)ti * ns], "thread", 1, fs->thread_names[ti], fs->thread_roles[ti],
                  fs->wall_ns, fs->thread_busy_ns[ti], with_idle, items, with_cpu,
                  cpu->has && cpu->known[ti] ? &cpu->split[(size_t)ti * ns] : NULL);
        an_table_gap(tb);
    }
    for (uint32_t role = 0; role < fs->n_roles; role++) {
        /* A role of one thread would repeat that thread's rows. */
        uint32_t n = fs->role_threads[role];
        if (n < 2) continue;
        int64_t busy = 0;
        for (uint32_t ti = 0; ti < fs->n_threads; ti++)
            if (fs->thread_on[ti] && fs->thread_role[ti] == role) busy += fs->thread_busy_ns[ti];
        put_block(tb, fmt, fs, &fs->role_stage[(size_t)role * ns], "role", n, NULL, fs->role_names[role],
                  fs->wall_ns * (int64_t)n, busy, with_idle, items, with_cpu,
                  cpu->has && cpu->role_known[role] ? &cpu->role_split[(size_t)role * ns] : NULL);
        an_table_gap(tb);
    }
    free(items);
    if (fmt == AN_FMT_TEXT) an_table_end(tb);
    *shared = fmt == AN_FMT_TEXT ? NULL : tb;
}

/* Across ranks: per (role, stage), all ranks' ranges, the total of each
 * rank, and the rank with the most time in it. */
static int print_ranks(an_out *out, const an_stats *s)
{
    const an_merged_stats *m = &s->merged;
    static const an_col lead[] = {
        {"role", AN_T_STR, 0},   {"stage", AN_T_STR, 0},   {"kind", AN_T_STR, 0},
        {"total_ms", AN_T_MS, 0}, {"count", AN_T_INT, 0},  {"mean_ms", AN_T_MS, 0},
        {"p50_ms", AN_T_MS, 0},  {"p95_ms", AN_T_MS, 0},   {"p99_ms", AN_T_MS, 0},
        {"max_ms", AN_T_MS, 0},
    };
    const int n_lead = (int)(sizeof lead / sizeof lead[0]);
    int n_cols = n_lead + (int)s->n_files + 2;
    an_col *cols_all = calloc((size_t)n_cols, sizeof *cols_all);
    char (*names)[32] = calloc(s->n_files, sizeof *names);
    sort_item *items = malloc((m->n_stages + 1) * sizeof *items);
    if (!cols_all || !names || !items) {
        free(cols_all);
        free(names);
        free(items);
        an_error("out of memory");
        return AN_EXIT_FAIL;
    }
    memcpy(cols_all, lead, sizeof lead);
    for (uint32_t f = 0; f < s->n_files; f++) {
        snprintf(names[f], sizeof names[f], "rank%d_ms", s->files[f].rank);
        cols_all[n_lead + (int)f] = (an_col){names[f], AN_T_MS, 0};
    }
    cols_all[n_cols - 2] = (an_col){"slowest_rank", AN_T_INT, 0};
    cols_all[n_cols - 1] = (an_col){"slowest_vs_mean_pct", AN_T_PCT, 0};
    an_out_text(out, "== ranks of one run (%u files): per role and stage over all ranks; rank<r>_ms is each "
                     "rank's total, slowest_rank the rank with the most, and by how much over the ranks' mean\n",
                s->n_files);
    an_table *tb = an_table_new(out, "ranks", cols_all, n_cols);
    for (uint32_t mr = 0; mr < m->n_roles && tb; mr++) {
        uint32_t n = 0;
        for (uint32_t ms = 0; ms < m->n_stages; ms++) {
            const an_stage_stats *x = &m->role_stage[(size_t)mr * m->n_stages + ms];
            if (x->count) items[n++] = (sort_item){x, m->stage_names[ms], ms};
        }
        qsort(items, n, sizeof *items, cmp_items);
        for (uint32_t i = 0; i < n; i++) {
            uint32_t ms = items[i].stage;
            const an_stage_stats *x = items[i].x;
            an_put_str(tb, m->role_names[mr]);
            an_put_str(tb, m->stage_names[ms]);
            an_put_str(tb, st_kind_name((st_kind)m->stage_kinds[ms]));
            an_put_ns(tb, x->total_ns);
            an_put_int(tb, (int64_t)x->count);
            an_put_ns(tb, mean_ns(x));
            for (int p = 0; p < AN_NPCT; p++) an_put_ns(tb, x->pct_ns[p]);
            an_put_ns(tb, x->max_ns);
            int slowest = -1, n_ranks = 0;
            int64_t slowest_ns = 0, sum_ns = 0;
            for (uint32_t f = 0; f < s->n_files; f++) {
                const an_file_stats *fs = &s->files[f];
                int32_t role = m->file_role[f][mr], st = m->file_stage[f][ms];
                if (role < 0 || st < 0 || !fs->role_threads[role]) {
                    an_put_null(tb);
                    continue;
                }
                int64_t v = fs->role_stage[(size_t)role * fs->n_stages + (uint32_t)st].total_ns;
                an_put_ns(tb, v);
                sum_ns += v;
                n_ranks++;
                if (slowest < 0 || v > slowest_ns) {
                    slowest = (int)f;
                    slowest_ns = v;
                }
            }
            if (slowest >= 0) {
                double mean = (double)sum_ns / n_ranks;
                an_put_int(tb, s->files[slowest].rank);
                an_put_pct(tb, mean > 0 ? 100.0 * ((double)slowest_ns - mean) / mean : 0.0);
            } else {
                an_put_null(tb);
                an_put_null(tb);
            }
            an_row_end(tb);
        }
    }
    an_table_end(tb);
    free(cols_all);
    free(names);
    free(items);
    return AN_EXIT_OK;
}

/* The CPU figures of file f (fs), read from t, open. 0, or an exit code
 * after the message. */
static int cpu_of_file(an_trace *t, const an_file_stats *fs, file_cpu *c)
{
    st_reader *r = t->r;
    int has = st_reader_has_cpu(r);
    if (has < 0) return an_trace_fail(t);
    if (!has) return 0;
    if (st_reader_n_threads(r) != fs->n_threads || st_reader_n_stages(r) != fs->n_stages) {
        an_error("summary: %s changed while it was read (other threads or stages)", t->path);
        return AN_EXIT_USAGE;
    }
    size_t nt = fs->n_threads ? fs->n_threads : 1, ns = fs->n_stages, nr = fs->n_roles ? fs->n_roles : 1;
    c->known = calloc(nt, 1);
    c->split = calloc(nt * (ns ? ns : 1), sizeof *c->split);
    c->role_split = calloc(nr * (ns ? ns : 1), sizeof *c->role_split);
    c->role_known = calloc(nr, 1);
    if (!c->known || !c->split || !c->role_split || !c->role_known) {
        an_error("out of memory");
        return AN_EXIT_FAIL;
    }
    int rc = an_cpu_range_shares(t, fs->t0_ns, fs->t1_ns, fs->thread_on, c->known, c->split);
    if (rc) return rc;
    c->has = 1;
    /* a role's figures: only when every selected thread of it has them */
    memset(c->role_known, 1, nr);
    for (uint32_t ti = 0; ti < fs->n_threads; ti++) {
        if (!fs->thread_on[ti]) continue;
        uint32_t role = fs->thread_role[ti];
        if (!c->known[ti]) c->role_known[role] = 0;
        for (size_t st = 0; st < ns; st++) {
            an_cpu_split *d = &c->role_split[role * ns + st];
            const an_cpu_split *x = &c->split[(size_t)ti * ns + st];
            d->on_ns += x->on_ns;
            d->preempted_ns += x->preempted_ns;
            d->blocked_ns += x->blocked_ns;
        }
    }
    return 0;
}

static void file_cpu_free(file_cpu *c)
{
    free(c->known);
    free(c->split);
    free(c->role_split);
    free(c->role_known);
}

typedef struct own_opts {
    an_select sel;
    enum sort_key sort;
    int merge, jobs;
} own_opts;

static void init(an_cmd *cmd)
{
    own_opts *o = cmd->own;
    o->sort = SORT_TOTAL;
    o->merge = -1;
}

static int option(an_cmd *cmd, int id)
{
    own_opts *o = cmd->own;
    int rc = AN_EXIT_OK;
    switch (id) {
    case OPT_ROLE: rc = an_filter_add(&o->sel.filter.roles, &o->sel.filter.n_roles, cmd->args.value) ? AN_EXIT_FAIL : 0; break;
    case OPT_THREAD: rc = an_filter_add(&o->sel.filter.threads, &o->sel.filter.n_threads, cmd->args.value) ? AN_EXIT_FAIL : 0; break;
    case OPT_STAGE: rc = an_filter_add(&o->sel.filter.stages, &o->sel.filter.n_stages, cmd->args.value) ? AN_EXIT_FAIL : 0; break;
    case OPT_SORT: {
        static const char *const keys[] = {"total", "count", "mean", "p99", "name"};
        int found = -1;
        for (int k = 0; k < 5; k++)
            if (strcmp(cmd->args.value, keys[k]) == 0) found = k;
        if (found < 0) rc = an_usage_error("summary", "--sort must be total, count, mean, p99 or name, not '%s'", cmd->args.value);
        else o->sort = (enum sort_key)found;
        break;
    }
    case OPT_MERGE: o->merge = 1; break;
    case OPT_SEPARATE: o->merge = 0; break;
    case OPT_JOBS: {
        uint64_t v;
        if (an_parse_u64(cmd->args.value, &v) || v < 1 || v > JOBS_MAX)
            rc = an_usage_error("summary", "--jobs needs a number of threads from 1 to %d, not '%s'", JOBS_MAX,
                                cmd->args.value);
        else o->jobs = (int)v;
        break;
    }
    }
    return rc;
}

static int check(an_cmd *cmd)
{
    int rc = AN_EXIT_OK;
    if (!rc && cmd->args.n_pos == 0) rc = an_usage_error("summary", "no trace file given");
    return rc;
}

static void done(an_cmd *cmd)
{
    own_opts *o = cmd->own;
    an_filter_free(&o->sel.filter);
}

static int work(an_cmd *cmd)
{
    own_opts *o = cmd->own;
    int rc = AN_EXIT_OK;
    o->sel.window = cmd->window; /* --steps/--time, read by the harness */
    char **paths = NULL;
    uint32_t n_paths = 0;
    if (!rc) rc = an_inputs_expand(cmd->args.pos, cmd->args.n_pos, &paths, &n_paths);
    an_trace *traces = rc ? NULL : calloc((size_t)n_paths, sizeof *traces);
    int n_open = 0;
    if (!rc && !traces) rc = AN_EXIT_FAIL;
    an_stats s;
    memset(&s, 0, sizeof s);
    if (!rc && n_paths == 1) {
        /* One file: open while it is read. */
        rc = an_trace_open(&traces[0], paths[0]);
        if (!rc) n_open = 1;
        if (!rc) rc = an_stats_compute_jobs(&s, traces, 1, &o->sel, 0, o->jobs ? o->jobs : an_stats_default_jobs(traces[0].n_ranges_hint));
    } else if (!rc) {
        /* Many files (the ranks of a run): one open at a time per job, so
         * that memory does not grow with the files (stats.c). */
        n_open = (int)n_paths;
        rc = an_stats_compute_paths(&s, traces, paths, n_paths, &o->sel, o->merge, o->jobs);
    }
    /* The CPU capture's figures, per file: the one file is open; several are
     * opened again, one at a time. */
    file_cpu *cpu = NULL;
    int any_cpu = 0;
    if (!rc) {
        cpu = calloc(s.n_files ? s.n_files : 1, sizeof *cpu);
        if (!cpu) {
            an_error("out of memory");
            rc = AN_EXIT_FAIL;
        }
    }
    for (uint32_t f = 0; !rc && f < s.n_files; f++) {
        if (n_paths == 1) {
            rc = cpu_of_file(&traces[0], &s.files[f], &cpu[f]);
        } else {
            an_trace again;
            rc = an_trace_open(&again, s.files[f].trace->path);
            if (!rc) {
                rc = cpu_of_file(&again, &s.files[f], &cpu[f]);
                an_trace_close(&again);
            }
        }
        any_cpu |= cpu[f].has;
    }
    if (!rc) {
        g_sort = o->sort;
        an_out *out = an_out_new(stdout, cmd->format);
        if (!out) {
            an_error("out of memory");
            rc = AN_EXIT_FAIL;
            goto done;
        }
        an_table *shared =
            cmd->format == AN_FMT_TEXT ? NULL : an_table_new(out, "summary", cols, N_COLS + (any_cpu ? N_CPU_COLS : 0));
        uint64_t n_ranges = 0;
        for (uint32_t f = 0; f < s.n_files; f++) {
            print_file(out, &shared, &s.files[f], &o->sel, o->sel.filter.n_stages == 0, &cpu[f], any_cpu);
            n_ranges += s.files[f].n_ranges;
        }
        an_table_end(shared);
        if (s.merged_valid) rc = print_ranks(out, &s);
        if (an_out_finish(out)) {
            an_error("summary: cannot write the output");
            rc = AN_EXIT_FAIL;
        }
        /* Warnings after the work: a failure stays one line. A rank set's
         * are every command's (an_set_warn): its missing ranks, then each
         * rank's own, ranks ascending. */
        int as_set = (n_paths > 1 || cmd->args.n_pos != 1 || strcmp(paths[0], cmd->args.pos[0]) != 0) && an_stats_rank_set(&s);
        if (!rc && as_set) {
            int64_t *present = malloc(s.n_files * sizeof *present);
            if (present) {
                for (uint32_t f = 0; f < s.n_files; f++) present[f] = s.files[f].rank;
                an_warn_missing_ranks(s.files[0].run_id, s.files[0].world_size, present, s.n_files);
                free(present);
            }
        }
        for (int i = 0; !rc && i < n_open; i++)
            if (as_set && n_paths == 1) an_trace_warn_rank(&traces[i]);
            else if (n_paths == 1) an_trace_warn(&traces[i]);
            else if (as_set && s.files[i].rank_warnings) fputs(s.files[i].rank_warnings, stderr);
            else if (s.files[i].warnings) fputs(s.files[i].warnings, stderr);
        if (!rc && n_ranges == 0) an_warn("no ranges in the selection");
    }
done:
    for (uint32_t f = 0; cpu && f < s.n_files; f++) file_cpu_free(&cpu[f]);
    free(cpu);
    an_stats_free(&s);
    for (int i = 0; i < n_open; i++) an_trace_close(&traces[i]);
    free(traces);
    an_paths_free(paths, n_paths);
    return rc;
}

const an_cmd_def an_cmd_summary = {
    .name = "summary",
    .usage = help,
    .flags = AN_RUN_FORMAT | AN_RUN_WINDOW,
    .opts = opts,
    .own_size = sizeof(own_opts),
    .init = init,
    .option = option,
    .check = check,
    .work = work,
    .done = done,
    .tables = "summary,ranks",
};
