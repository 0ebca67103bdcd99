/* cmd_cpu.c: `analyze cpu FILE|SET`: what the CPU did per thread and stage
 * (docs/analyze.md, "cpu"): on-CPU, preempted and blocked shares of each
 * stage's self time, the samples and top functions (self and inclusive),
 * the blocked time by reason, the top libraries, every OS thread's
 * schedstat use (and per window with --windows), and a line for each sync
 * stage that spins. The options and the tables; the figures are cpu.c's.
 */
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "cpu_stacks.h"

static const char help[] =
    "usage: analyze cpu [options] FILE|SET\n"
    "(SET: the rank files of one run, listed, as a directory or a quoted glob: docs/analyze.md, \"Rank sets\")\n"
    "\n"
    "What the CPU did per thread and stage, from the CPU capture (--trace-cpu,\n"
    "st_options.cpu). A stage's wall time is its self time (nested ranges' time\n"
    "belongs to the innermost); its on-CPU time is that minus its overlap with the\n"
    "thread's off-CPU intervals (switch records), split into preempted (runnable,\n"
    "no core) and blocked. Samples are attributed to the stage open at their time;\n"
    "a function's self samples have it as the leaf frame, its inclusive samples\n"
    "anywhere in the stack (once per sample); a library's, its file's. Blocked\n"
    "time is split by why the thread blocked (the system call and kernel wait\n"
    "channel read for blocks of 1 ms and more) and, where the trace has the\n"
    "sched_switch tracepoint (root), the task state and kernel function of every\n"
    "block. Every OS thread of the process,\n"
    "registered or not, with its on-CPU and run-queue time from schedstat, as\n"
    "pidstat and top -H show it. A sync stage mostly on-CPU is spinning.\n"
    "\n"
    "options:\n"
    "  --stage S        only stage S (by name)\n"
    "  --top N          functions per thread and stage, by self and by inclusive\n"
    "                   samples, and libraries by self samples (default 5; 0 = none)\n"
    "  --windows        also every OS thread per schedstat window (table windows)\n"
    "  --lines          also each function's hottest source line, FILE:LINE (column\n"
    "                   line of table functions; from the trace's cpu_lines)\n"
    "  --steps A:B      the time from step A's mark to step B's mark (A: or :B leave an end open)\n"
    "  --time T0:T1     the same for seconds from the trace start\n"
    "  --format F       text (default), csv or json: tables threads, stages, functions,\n"
    "                   blocks, libraries, os_threads (and windows), python, python_functions\n"
    "  --table NAME     only the table NAME (with --format csv or json): threads, stages,\n"
    "                   functions, blocks, libraries, os_threads, windows, python,\n"
    "                   python_functions\n"
    "\n"
    "Python-frame samples (python_stacks='frames': the package's sampler read each\n"
    "thread's Python stack at python_hz) are shown apart, in tables python (per\n"
    "thread and stage) and python_functions (self: the innermost Python frame;\n"
    "inclusive: anywhere in the stack): each stands for 1/python_hz s of wall time,\n"
    "on or off the CPU, so they are never summed with the kernel's samples.\n"
    "  --align MODE     a rank set's clocks: auto (default), meta, collectives or none\n"
    "                   (docs/analyze.md, \"Clock alignment\")\n";

enum { OPT_STAGE = 1, OPT_TOP, OPT_WINDOWS, OPT_LINES };

static const an_opt opts[] = {
    {"stage", 1, OPT_STAGE}, {"top", 1, OPT_TOP},       {"steps", 1, AN_OPT_STEPS}, {"time", 1, AN_OPT_TIME},
    {"windows", 0, OPT_WINDOWS}, {"lines", 0, OPT_LINES},
    {"format", 1, AN_OPT_FORMAT}, {"table", 1, AN_OPT_TABLE}, {"help", 0, AN_OPT_HELP}, {"align", 1, AN_OPT_ALIGN}, {NULL, 0, 0},
};

static const an_col thread_cols[] = {
    {"thread", AN_T_STR, 0},       {"role", AN_T_STR, 0},         {"status", AN_T_STR, 0},
    {"wall_ms", AN_T_MS, 0},       {"on_cpu_ms", AN_T_MS, 0},     {"on_cpu_pct", AN_T_PCT, 0},
    {"preempted_pct", AN_T_PCT, 0}, {"blocked_pct", AN_T_PCT, 0}, {"samples", AN_T_INT, 0},
    {"lost", AN_T_INT, 0}};
static const an_col stage_cols[] = {
    {"thread", AN_T_STR, 0},       {"role", AN_T_STR, 0},         {"stage", AN_T_STR, 0},
    {"kind", AN_T_STR, 0},         {"wall_ms", AN_T_MS, 0},       {"on_cpu_ms", AN_T_MS, 0},
    {"on_cpu_pct", AN_T_PCT, 0},   {"preempted_pct", AN_T_PCT, 0}, {"blocked_pct", AN_T_PCT, 0},
    {"samples", AN_T_INT, 0}};
static const an_col fn_cols[] = {{"thread", AN_T_STR, 0},   {"stage", AN_T_STR, 0},   {"by", AN_T_STR, 0},
                                 {"rank", AN_T_INT, 0},     {"function", AN_T_STR, 0}, {"file", AN_T_STR, 0},
                                 {"samples", AN_T_INT, 0},  {"pct", AN_T_PCT, 0},   {"line", AN_T_STR, 0}};
static const an_col block_cols[] = {{"thread", AN_T_STR, 0},     {"stage", AN_T_STR, 0},
                                    {"reason", AN_T_STR, 0},     {"state", AN_T_STR, 0},
                                    {"kernel_function", AN_T_STR, 0}, {"blocked_ms", AN_T_MS, 0},
                                    {"count", AN_T_INT, 0},      {"pct", AN_T_PCT, 0}};
static const an_col lib_cols[] = {{"thread", AN_T_STR, 0},   {"stage", AN_T_STR, 0},     {"rank", AN_T_INT, 0},
                                  {"library", AN_T_STR, 0},  {"self", AN_T_INT, 0},      {"self_pct", AN_T_PCT, 0},
                                  {"inclusive", AN_T_INT, 0}, {"inclusive_pct", AN_T_PCT, 0}};
static const an_col py_cols[] = {{"thread", AN_T_STR, 0}, {"role", AN_T_STR, 0}, {"stage", AN_T_STR, 0},
                                 {"kind", AN_T_STR, 0},   {"samples", AN_T_INT, 0}, {"pct", AN_T_PCT, 0},
                                 {"wall_ms", AN_T_MS, 0}};
static const an_col py_fn_cols[] = {{"thread", AN_T_STR, 0},  {"stage", AN_T_STR, 0},    {"by", AN_T_STR, 0},
                                    {"rank", AN_T_INT, 0},    {"function", AN_T_STR, 0}, {"file", AN_T_STR, 0},
                                    {"samples", AN_T_INT, 0}, {"pct", AN_T_PCT, 0}};
static const an_col os_cols[] = {{"thread", AN_T_STR, 0},   {"registered", AN_T_STR, 0}, {"os_tid", AN_T_INT, 0},
                                 {"wall_ms", AN_T_MS, 0},   {"on_cpu_ms", AN_T_MS, 0},   {"on_cpu_pct", AN_T_PCT, 0},
                                 {"runq_ms", AN_T_MS, 0},   {"runq_pct", AN_T_PCT, 0},   {"slices", AN_T_INT, 0},
                                 {"windows", AN_T_INT, 0}};
static const an_col win_cols[] = {{"window", AN_T_INT, 0},   {"step", AN_T_INT, 0},       {"start_ms", AN_T_MS, 0},
                                  {"dur_ms", AN_T_MS, 0},    {"thread", AN_T_STR, 0},     {"os_tid", AN_T_INT, 0},
                                  {"on_cpu_ms", AN_T_MS, 0}, {"on_cpu_pct", AN_T_PCT, 0}, {"runq_ms", AN_T_MS, 0},
                                  {"runq_pct", AN_T_PCT, 0}, {"slices", AN_T_INT, 0}};

typedef struct own_opts {
    const char *stage;
    uint64_t top;
    int windows, lines;
} own_opts;

static void init(an_cmd *c)
{
    own_opts *o = c->own;
    o->top = 5;
}

static int option(an_cmd *c, int id)
{
    own_opts *o = c->own;
    switch (id) {
    case OPT_STAGE:
        o->stage = c->args.value;
        break;
    case OPT_TOP:
        if (an_parse_u64(c->args.value, &o->top) || o->top > UINT32_MAX)
            return an_usage_error("cpu", "--top needs a number of functions (0 = none), not '%s'", c->args.value);
        break;
    case OPT_WINDOWS:
        o->windows = 1;
        break;
    case OPT_LINES:
        o->lines = 1;
        break;
    }
    return AN_EXIT_OK;
}

static double pct(int64_t part, int64_t whole) { return whole > 0 ? 100.0 * (double)part / (double)whole : 0.0; }

static void put_shares(an_table *tb, const an_cpu_cell *c)
{
    an_put_ns(tb, c->wall_ns);
    if (c->on_ns >= 0) an_put_ns(tb, c->on_ns);
    else an_put_null(tb); /* no switch records (the signal sampler): unknown */
    if (c->wall_ns > 0 && c->on_ns >= 0) {
        an_put_pct(tb, pct(c->on_ns, c->wall_ns));
        an_put_pct(tb, pct(c->preempted_ns, c->wall_ns));
        an_put_pct(tb, pct(c->blocked_ns, c->wall_ns));
    } else {
        an_put_null(tb);
        an_put_null(tb);
        an_put_null(tb);
    }
    an_put_int(tb, (int64_t)c->samples);
}

static const char *stage_name(st_reader *r, int32_t s) { return s < 0 ? "(none)" : st_reader_stage(r, (uint32_t)s)->name; }

/* Tables python and python_functions: the Python-frame samples per thread
 * and stage, and their top functions, with the rate they were taken at. */
static void python_tables(an_out *out, an_trace *t, const an_cpu_result *res, int32_t want, uint32_t top_n,
                          const an_cpu_fn **top)
{
    st_reader *r = t->r;
    uint64_t any = 0;
    for (uint32_t i = 0; i < res->n_threads; i++) any += res->threads[i].py_samples;
    if (!any) return;
    const char *hz_text = an_trace_meta(t, "python_frames_hz");
    double hz = hz_text ? strtod(hz_text, NULL) : 0.0;
    an_out_text(out, "Python stacks (sampled from the interpreter at %s Hz)\n", hz_text ? hz_text : "?");
    an_table *tb = an_table_new(out, "python", py_cols, 7);
    for (uint32_t i = 0; tb && i < res->n_threads; i++) {
        const an_cpu_thread *th = &res->threads[i];
        const st_thread_info *ti = st_reader_thread(r, th->thread);
        for (uint32_t s = 0; s <= res->n_stages; s++) {
            const an_cpu_cell *cell = &th->py_cells[s];
            if ((want >= -1 && cell->stage != want) || !cell->samples) continue;
            const st_stage_info *si = cell->stage >= 0 ? st_reader_stage(r, (uint32_t)cell->stage) : NULL;
            an_put_str(tb, ti->name);
            an_put_str(tb, ti->role);
            an_put_str(tb, stage_name(r, cell->stage));
            an_put_str(tb, si ? st_kind_name(si->kind) : "");
            an_put_int(tb, (int64_t)cell->samples);
            an_put_pct(tb, 100.0 * (double)cell->samples / (double)th->py_samples);
            if (hz > 0) an_put_ns(tb, (int64_t)((double)cell->samples * 1e9 / hz));
            else an_put_null(tb);
            an_row_end(tb);
        }
    }
    an_table_end(tb);
    tb = an_table_new(out, "python_functions", py_fn_cols, 8);
    for (uint32_t i = 0; tb && top_n && i < res->n_threads; i++) {
        const an_cpu_thread *th = &res->threads[i];
        const st_thread_info *ti = st_reader_thread(r, th->thread);
        for (uint32_t s = 0; s <= res->n_stages; s++) {
            const an_cpu_cell *cell = &th->py_cells[s];
            if ((want >= -1 && cell->stage != want) || !cell->samples) continue;
            for (int by = 0; by < 2; by++) {
                uint32_t n = an_cpu_top(res, cell, by, top_n, top);
                for (uint32_t k = 0; k < n; k++) {
                    const char *name = res->names[top[k]->name].name;
                    an_put_str(tb, ti->name);
                    an_put_str(tb, stage_name(r, cell->stage));
                    an_put_str(tb, by ? "inclusive" : "self");
                    an_put_int(tb, k + 1);
                    an_put_str(tb, name);
                    an_put_str(tb, an_cpu_py_file(name));
                    uint64_t v = by ? top[k]->incl : top[k]->self;
                    an_put_int(tb, (int64_t)v);
                    an_put_pct(tb, 100.0 * (double)v / (double)cell->samples);
                    an_row_end(tb);
                }
            }
        }
    }
    an_table_end(tb);
    int64_t lost;
    if (an_trace_meta_i64(t, "python_frames_lost", &lost) == 0 && lost > 0)
        an_out_text(out, "python frames: %lld samples lost (the sampler's queue was full, or their thread had ended)\n",
                    (long long)lost);
}

static int work(an_cmd *c)
{
    own_opts *o = c->own;
    an_trace *t = &c->trace;
    st_reader *r = t->r;
    int has = st_reader_has_cpu(r);
    if (has < 0) return an_trace_fail(t);
    if (!has) {
        an_error("cpu: %s has no CPU capture (record with --trace-cpu / st_options.cpu)", t->path);
        return AN_EXIT_USAGE;
    }
    int32_t want = -2; /* every stage */
    if (o->stage) {
        for (uint32_t s = 0; s < st_reader_n_stages(r) && want < -1; s++)
            if (strcmp(st_reader_stage(r, s)->name, o->stage) == 0) want = (int32_t)s;
        if (want < -1) {
            char buf[128], names[AN_NAMES_BUF];
            an_error("cpu: %s has no stage '%s' (stages: %s)", t->path, an_clean(o->stage, buf, sizeof buf),
                     an_names_in(t, AN_NAMES_STAGES, names, sizeof names));
            return AN_EXIT_USAGE;
        }
    }
    int64_t t0 = t->has_span ? t->span_t0_ns : 0, t1 = t->has_span ? t->span_t1_ns : 0;
    int rc = AN_EXIT_OK;
    if (c->window.kind != AN_WIN_ALL && (rc = an_window_resolve(&c->window, t, &t0, &t1))) return rc;
    an_cpu_result res;
    if ((rc = o->lines ? an_cpu_compute_lines(t, t0, t1, &res) : an_cpu_compute(t, t0, t1, &res))) return rc;
    an_cpu_windows win;
    if ((rc = an_cpu_windows_compute(t, c->window.kind == AN_WIN_ALL, t0, t1, &win))) {
        an_cpu_free(&res);
        return rc;
    }
    const an_cpu_fn **top = malloc((o->top ? o->top : 1) * sizeof *top);
    const an_cpu_lib **top_libs = malloc((o->top ? o->top : 1) * sizeof *top_libs);
    const an_cpu_reason_ns **reasons = malloc((res.max_cell_reasons ? res.max_cell_reasons : 1) * sizeof *reasons);
    an_out *out = top && top_libs && reasons ? an_out_new(stdout, c->format) : NULL;
    if (!out) {
        free(top);
        free(top_libs);
        free(reasons);
        an_cpu_windows_free(&win);
        an_cpu_free(&res);
        an_error("out of memory");
        return AN_EXIT_FAIL;
    }
    const char *mode = an_trace_meta(t, "cpu_mode"), *hz = an_trace_meta(t, "cpu_sample_hz");
    an_out_text(out, "== %s: CPU per thread and stage over %.3f ms (capture %s, %s samples/s of CPU time)\n", t->path,
                (double)(t1 - t0) / 1e6, mode ? mode : "unknown", hz ? hz : "?");
    an_table *tb = an_table_new(out, "threads", thread_cols, 10);
    for (uint32_t i = 0; tb && i < res.n_threads; i++) {
        const an_cpu_thread *th = &res.threads[i];
        const st_thread_info *ti = st_reader_thread(r, th->thread);
        an_put_str(tb, ti->name);
        an_put_str(tb, ti->role);
        an_put_str(tb, th->info.status);
        put_shares(tb, &th->total);
        an_put_int(tb, (int64_t)th->lost);
        an_row_end(tb);
    }
    an_table_end(tb);
    tb = an_table_new(out, "stages", stage_cols, 10);
    char spin[2048] = "";
    size_t slen = 0;
    for (uint32_t i = 0; tb && i < res.n_threads; i++) {
        const an_cpu_thread *th = &res.threads[i];
        const st_thread_info *ti = st_reader_thread(r, th->thread);
        for (uint32_t s = 0; s <= res.n_stages; s++) {
            const an_cpu_cell *cell = &th->cells[s];
            if ((want >= -1 && cell->stage != want) || (!cell->wall_ns && !cell->samples)) continue;
            const st_stage_info *si = cell->stage >= 0 ? st_reader_stage(r, (uint32_t)cell->stage) : NULL;
            an_put_str(tb, ti->name);
            an_put_str(tb, ti->role);
            an_put_str(tb, stage_name(r, cell->stage));
            an_put_str(tb, si ? st_kind_name(si->kind) : "");
            put_shares(tb, cell);
            an_row_end(tb);
            if (si && si->kind == ST_SYNC && cell->wall_ns > 0 && cell->on_ns >= 0 && 2 * cell->on_ns > cell->wall_ns &&
                slen < sizeof spin - 400) {
                char p[32], n1[64], n2[64];
                an_fmt_pct1(pct(cell->on_ns, cell->wall_ns), p, sizeof p);
                slen += (size_t)snprintf(spin + slen, sizeof spin - slen,
                                         "spinning: %s waits in %s (sync) %s on-CPU (cudaDeviceScheduleBlockingSync "
                                         "or events would free the core)\n",
                                         an_clean(ti->name, n1, sizeof n1), an_clean(si->name, n2, sizeof n2), p);
            }
        }
    }
    an_table_end(tb);
    tb = an_table_new(out, "functions", fn_cols, o->lines ? 9 : 8);
    for (uint32_t i = 0; tb && o->top && i < res.n_threads; i++) {
        const an_cpu_thread *th = &res.threads[i];
        const st_thread_info *ti = st_reader_thread(r, th->thread);
        for (uint32_t s = 0; s <= res.n_stages; s++) {
            const an_cpu_cell *cell = &th->cells[s];
            if ((want >= -1 && cell->stage != want) || !cell->samples) continue;
            for (int by = 0; by < 2; by++) {
                uint32_t n = an_cpu_top(&res, cell, by, (uint32_t)o->top, top);
                for (uint32_t k = 0; k < n; k++) {
                    an_put_str(tb, ti->name);
                    an_put_str(tb, stage_name(r, cell->stage));
                    an_put_str(tb, by ? "inclusive" : "self");
                    an_put_int(tb, k + 1);
                    an_put_str(tb, res.names[top[k]->name].name);
                    an_put_str(tb, res.names[top[k]->name].path);
                    uint64_t v = by ? top[k]->incl : top[k]->self;
                    an_put_int(tb, (int64_t)v);
                    an_put_pct(tb, 100.0 * (double)v / (double)cell->samples);
                    if (o->lines) {
                        uint32_t src = by ? top[k]->incl_src : top[k]->self_src;
                        if (src) an_put_str(tb, res.srcs[src - 1]);
                        else an_put_null(tb);
                    }
                    an_row_end(tb);
                }
            }
        }
    }
    an_table_end(tb);
    tb = an_table_new(out, "blocks", block_cols, 8);
    for (uint32_t i = 0; tb && i < res.n_threads; i++) {
        const an_cpu_thread *th = &res.threads[i];
        const st_thread_info *ti = st_reader_thread(r, th->thread);
        for (uint32_t s = 0; s <= res.n_stages; s++) {
            const an_cpu_cell *cell = &th->cells[s];
            if ((want >= -1 && cell->stage != want) || cell->blocked_ns <= 0) continue;
            uint32_t n = an_cpu_reasons_sorted(&res, cell, reasons);
            for (uint32_t k = 0; k < n; k++) {
                an_put_str(tb, ti->name);
                an_put_str(tb, stage_name(r, cell->stage));
                an_put_str(tb, res.reasons[reasons[k]->reason]);
                char state[2] = {(char)reasons[k]->state, 0};
                an_put_str(tb, state);
                an_put_str(tb, res.kfns[reasons[k]->kfn]);
                an_put_ns(tb, reasons[k]->ns);
                an_put_int(tb, (int64_t)reasons[k]->count);
                an_put_pct(tb, pct(reasons[k]->ns, cell->blocked_ns));
                an_row_end(tb);
            }
        }
    }
    an_table_end(tb);
    tb = an_table_new(out, "libraries", lib_cols, 8);
    for (uint32_t i = 0; tb && o->top && i < res.n_threads; i++) {
        const an_cpu_thread *th = &res.threads[i];
        const st_thread_info *ti = st_reader_thread(r, th->thread);
        for (uint32_t s = 0; s <= res.n_stages; s++) {
            const an_cpu_cell *cell = &th->cells[s];
            if ((want >= -1 && cell->stage != want) || !cell->samples) continue;
            uint32_t n = an_cpu_top_libs(&res, cell, (uint32_t)o->top, top_libs);
            for (uint32_t k = 0; k < n; k++) {
                an_put_str(tb, ti->name);
                an_put_str(tb, stage_name(r, cell->stage));
                an_put_int(tb, k + 1);
                an_put_str(tb, res.libs[top_libs[k]->lib]);
                an_put_int(tb, (int64_t)top_libs[k]->self);
                an_put_pct(tb, 100.0 * (double)top_libs[k]->self / (double)cell->samples);
                an_put_int(tb, (int64_t)top_libs[k]->incl);
                an_put_pct(tb, 100.0 * (double)top_libs[k]->incl / (double)cell->samples);
                an_row_end(tb);
            }
        }
    }
    an_table_end(tb);
    tb = an_table_new(out, "os_threads", os_cols, 10);
    for (uint32_t i = 0; tb && i < win.n_threads; i++) {
        const an_cpu_os_thread *ot = &win.threads[i];
        an_put_str(tb, ot->name);
        an_put_str(tb, ot->thread >= 0 ? "yes" : "no");
        an_put_int(tb, ot->os_tid);
        an_put_ns(tb, ot->wall_ns);
        an_put_ns(tb, ot->oncpu_ns);
        if (ot->wall_ns > 0) an_put_pct(tb, pct(ot->oncpu_ns, ot->wall_ns));
        else an_put_null(tb);
        an_put_ns(tb, ot->runq_ns);
        if (ot->wall_ns > 0) an_put_pct(tb, pct(ot->runq_ns, ot->wall_ns));
        else an_put_null(tb);
        an_put_int(tb, ot->slices);
        an_put_int(tb, ot->n_windows);
        an_row_end(tb);
    }
    an_table_end(tb);
    if (o->windows) {
        tb = an_table_new(out, "windows", win_cols, 11);
        for (size_t i = 0; tb && i < win.n_rows; i++) {
            const an_cpu_window *w = &win.rows[i];
            int64_t dur = w->t1_ns - w->t0_ns;
            an_put_int(tb, w->window);
            an_put_int(tb, w->step);
            an_put_ns(tb, w->t0_ns - t->origin_ns);
            an_put_ns(tb, dur);
            an_put_str(tb, win.threads[w->os_thread].name);
            an_put_int(tb, win.threads[w->os_thread].os_tid);
            an_put_ns(tb, w->oncpu_ns);
            if (dur > 0) an_put_pct(tb, pct(w->oncpu_ns, dur));
            else an_put_null(tb);
            an_put_ns(tb, w->runq_ns);
            if (dur > 0) an_put_pct(tb, pct(w->runq_ns, dur));
            else an_put_null(tb);
            an_put_int(tb, w->slices);
            an_row_end(tb);
        }
        an_table_end(tb);
    }
    python_tables(out, t, &res, want, (uint32_t)o->top, top);
    if (slen) an_out_text(out, "%s", spin);
    for (uint32_t i = 0; i < res.n_threads; i++)
        if (res.threads[i].has_samples && !res.threads[i].has_switches) {
            char n1[64];
            an_out_text(out, "no switch records for %s: sampled by the signal sampler (timer), so its on-CPU, "
                             "preempted and blocked time per stage is unknown; os_threads has its CPU time\n",
                        an_clean(st_reader_thread(r, res.threads[i].thread)->name, n1, sizeof n1));
        } else if (!res.threads[i].has_samples) {
            char n1[64], n2[256];
            an_out_text(out, "no CPU records for %s: %s (%s)\n", an_clean(st_reader_thread(r, res.threads[i].thread)->name, n1, sizeof n1),
                        res.threads[i].info.status, an_clean(res.threads[i].info.reason, n2, sizeof n2));
        }
    if (an_out_finish(out)) {
        an_error("cpu: cannot write the output");
        rc = AN_EXIT_FAIL;
    }
    free(top);
    free(top_libs);
    free(reasons);
    an_cpu_windows_free(&win);
    an_cpu_free(&res);
    return rc;
}

const an_cmd_def an_cmd_cpu = {
    .name = "cpu",
    .usage = help,
    .flags = AN_RUN_FORMAT | AN_RUN_WINDOW | AN_RUN_TRACE | AN_RUN_WARN,
    .opts = opts,
    .own_size = sizeof(own_opts),
    .init = init,
    .option = option,
    .work = work,
    .tables = "threads,stages,functions,blocks,libraries,os_threads,windows,python,python_functions",
};
