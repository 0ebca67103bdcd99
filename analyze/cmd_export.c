/* cmd_export.c: `analyze export FILE --chrome OUT.json | --csv DIR | --rows
 * OUT.sqlite`: the trace in formats other tools read.
 *
 *  --chrome  Chrome trace-event JSON, for Perfetto (ui.perfetto.dev) and
 *            chrome://tracing: a process named after the program and rank,
 *            its threads named and ordered by role, each range a complete
 *            event ("ph":"X", ts and dur in microseconds with nanosecond
 *            decimals, cat = the stage kind, args depth and step), counter
 *            samples as counter events ("C"), step marks as instant events,
 *            item handoffs (flows) as flow arrows ("s"/"f").
 *            Streamed: per thread, ranges are written in start order (what
 *            viewers expect of nested slices) from the raw events through a
 *            bounded queue; a range open across more than QUEUE_MAX later
 *            ranges is written as a begin/end pair ("B"/"E") instead, so
 *            memory stays bounded whatever the nesting. GPU activity as
 *            Kineto writes it (chrome_gpu_tracks), for HTA and Perfetto.
 *            (export_chrome.c)
 *  --chrome-dir  the same, one file per rank (export_chrome_dir.c)
 *  --csv     each table as DIR/<table>.csv: meta, threads, stages, steps,
 *            counter_names, and the decoded rows ranges.csv, counters.csv,
 *            gpu.csv (the columns of the SQL row tables) and gpu_api.csv
 *            (the CUDA API calls). (export_csv.c)
 *  --firefox ranges and CPU samples on one timeline, as a Firefox
 *            Profiler processed profile (profiler.firefox.com; Perfetto
 *            imports it with both), over the trace's span or a window
 *            (--steps/--time). (export_firefox.c)
 *  --rows    a new SQLite file with the same tables as plain rows (plus the
 *            views ranges_v, counters_v, gpu_v), for tools that cannot load
 *            the extension (pandas on a Python without extension loading).
 *            (export_rows.c)
 *  --folded  the CPU capture's samples as folded stacks (export_folded.c)
 *  --pprof   the same as a pprof profile (export_pprof.c)
 * Outputs are written to a temporary name and renamed when complete, so a
 * failed export leaves no partial file (--csv: no file at all, see
 * an_export_csv); existing outputs need --overwrite.
 * This file parses the arguments, opens the input and calls each converter
 * asked for (export.h), as perf's builtin-data.c sits over one converter per
 * format.
 */
#include <stddef.h>
#include <string.h>

#include "cpu_stacks.h"
#include "export.h"

static const char help[] =
    "usage: analyze export FILE|SET [--chrome OUT.json] [--chrome-dir DIR] [--csv DIR] [--rows OUT.sqlite]\n"
    "                                [--overwrite]\n"
    "                            [--folded OUT.txt [--folded-weight samples|ns]] [--pprof OUT.pb.gz]\n"
    "       analyze export FILE|SET --firefox OUT.json [--steps A:B | --time T0:T1] [--overwrite]\n"
    "\n"
    "  --chrome OUT.json  Chrome trace-event JSON for Perfetto (ui.perfetto.dev) or\n"
    "                     chrome://tracing: threads named and ordered by role, ranges as\n"
    "                     complete events (cat = stage kind, args depth and step), counters,\n"
    "                     step marks as instant events, GPU activity as Kineto writes it (a\n"
    "                     process per GPU, a track per stream, API calls, launch flows), and\n"
    "                     each item handoff (st_flow_out -> st_flow_in) as a flow arrow. Times in\n"
    "                     microseconds from the trace start, with nanosecond decimals. OUT '-'\n"
    "                     writes to stdout. A rank set: one process per rank, on rank 0's clock.\n"
    "  --chrome-dir DIR   one --chrome file per rank, DIR/rank<R>.pt.trace.json (DIR made if\n"
    "                     missing), the times of all on one origin: a PyTorch profiler trace\n"
    "                     directory, for HTA's TraceAnalysis(trace_dir=DIR)\n"
    "  --csv DIR          DIR/meta.csv, threads.csv, stages.csv, steps.csv, counter_names.csv,\n"
    "                     ranges.csv, counters.csv, gpu.csv (decoded rows, as the SQL row tables)\n"
    "                     and gpu_api.csv (the CUDA API calls)\n"
    "  --rows OUT.sqlite  a SQLite copy with plain tables ranges, counters, gpu and gpu_api (plus\n"
    "                     the small tables and the views ranges_v, counters_v, gpu_v) for any\n"
    "                     SQLite tool, or pandas on a Python that cannot load extensions\n"
    "  --folded OUT.txt   the CPU capture's samples as folded stacks (flamegraph.pl, speedscope,\n"
    "                     Perfetto): one line 'THREAD;STAGE;OUTERMOST;...;INNERMOST COUNT' per\n"
    "                     distinct stack; in names ';' becomes ':', a space or tab '_'\n"
    "  --folded-weight W  COUNT of --folded: samples (default) or ns (their CPU time: samples x\n"
    "                     the thread's period)\n"
    "  --pprof OUT        the CPU capture's samples as a pprof profile (go tool pprof, Pyroscope):\n"
    "                     values samples/count and cpu/nanoseconds, labels thread, stage, role\n"
    "                     (rank in a rank set); Python-frame samples as python_samples/count and\n"
    "                     python_wall/nanoseconds, label source=python-frames; gzipped when\n"
    "                     built with zlib\n"
    "  --firefox OUT.json ranges and CPU samples on one timeline, for the Firefox Profiler\n"
    "                     (profiler.firefox.com) and Perfetto: a thread per trace thread, its\n"
    "                     samples' stacks rooted in a frame stage:NAME, its ranges as markers\n"
    "                     (category = stage kind), step marks as instant markers; a thread's\n"
    "                     Python-frame samples on an entry of their own, 'NAME (Python)'\n"
    "  --steps A:B        (--firefox) the time from step A's mark to step B's mark\n"
    "  --time T0:T1       (--firefox) the same for seconds from the trace start\n"
    "  --overwrite        replace existing output files\n"
    "  --align MODE       a rank set's clocks: auto (default), meta, collectives or none\n"
    "                     (docs/analyze.md, \"Clock alignment\")\n";

enum { OPT_CHROME = 1, OPT_CHROME_DIR, OPT_CSV, OPT_ROWS, OPT_OVERWRITE, OPT_FOLDED, OPT_FOLDED_WEIGHT, OPT_PPROF, OPT_FIREFOX };
static const an_opt opts[] = {
    {"chrome", 1, OPT_CHROME}, {"chrome-dir", 1, OPT_CHROME_DIR}, {"csv", 1, OPT_CSV},           {"rows", 1, OPT_ROWS},
    {"overwrite", 0, OPT_OVERWRITE}, {"help", 0, AN_OPT_HELP},
    {"folded", 1, OPT_FOLDED}, {"folded-weight", 1, OPT_FOLDED_WEIGHT}, {"pprof", 1, OPT_PPROF},
    {"firefox", 1, OPT_FIREFOX}, {"steps", 1, AN_OPT_STEPS}, {"time", 1, AN_OPT_TIME},
    {"align", 1, AN_OPT_ALIGN}, {NULL, 0, 0},
};

/* ---- the command ---------------------------------------------------------------------- */

typedef struct export_opts {
    const char *chrome_out, *chrome_dir, *csv_dir, *rows_out, *firefox_out;
    int overwrite;
    const char *folded_out, *pprof_out, *folded_weight;
} export_opts;

static int option(an_cmd *c, int id)
{
    export_opts *o = c->own;
    switch (id) {
    case OPT_CHROME: o->chrome_out = c->args.value; break;
    case OPT_CHROME_DIR: o->chrome_dir = c->args.value; break;
    case OPT_CSV: o->csv_dir = c->args.value; break;
    case OPT_ROWS: o->rows_out = c->args.value; break;
    case OPT_OVERWRITE: o->overwrite = 1; break;
    case OPT_FOLDED: o->folded_out = c->args.value; break;
    case OPT_PPROF: o->pprof_out = c->args.value; break;
    case OPT_FOLDED_WEIGHT:
        if (strcmp(c->args.value, "samples") != 0 && strcmp(c->args.value, "ns") != 0)
            return an_usage_error("export", "--folded-weight is samples or ns, not '%s'", c->args.value);
        o->folded_weight = c->args.value;
        break;
    case OPT_FIREFOX: o->firefox_out = c->args.value; break;
    }
    return AN_EXIT_OK;
}

static int check(an_cmd *c)
{
    const export_opts *o = c->own;
    if (c->args.n_pos == 0) return an_usage_error("export", "no trace file given");
    if (!o->chrome_out && !o->chrome_dir && !o->csv_dir && !o->rows_out && !o->folded_out && !o->pprof_out &&
        !o->firefox_out)
        return an_usage_error("export", "say what to write: --chrome OUT.json, --chrome-dir DIR, --csv DIR, --rows OUT.sqlite, "
                                        "--folded OUT.txt, --pprof OUT or --firefox OUT.json");
    if (o->folded_weight && !o->folded_out) return an_usage_error("export", "--folded-weight needs --folded OUT.txt");
    if (c->window.kind != AN_WIN_ALL && !o->firefox_out)
        return an_usage_error("export", "--steps and --time select the time of --firefox only");
    return AN_EXIT_OK;
}

static int work(an_cmd *c)
{
    const export_opts *o = c->own;
    int rc = AN_EXIT_OK;
    /* no CPU capture for --folded/--pprof: refused before any output is written */
    if (o->folded_out || o->pprof_out)
        rc = an_cpu_stacks_require(&c->trace, "export", o->folded_out ? "--folded needs one" : "--pprof needs one");
    if (!rc && o->chrome_out) rc = an_export_chrome(&c->trace, o->chrome_out, o->overwrite);
    if (!rc && o->chrome_dir) rc = an_export_chrome_dir(&c->trace, o->chrome_dir, o->overwrite);
    if (!rc && o->csv_dir) rc = an_export_csv(&c->trace, o->csv_dir, o->overwrite);
    if (!rc && o->rows_out) rc = an_export_rows(&c->trace, o->rows_out, o->overwrite);
    if (!rc && o->folded_out)
        rc = an_export_folded(&c->trace, o->folded_out, o->folded_weight && !strcmp(o->folded_weight, "ns"), o->overwrite);
    if (!rc && o->pprof_out) rc = an_export_pprof(&c->trace, o->pprof_out, o->overwrite);
    if (!rc && o->firefox_out) {
        an_trace *t = &c->trace;
        int64_t t0 = t->has_span ? t->span_t0_ns : 0, t1 = t->has_span ? t->span_t1_ns : 0;
        if (c->window.kind != AN_WIN_ALL && (rc = an_window_resolve(&c->window, t, &t0, &t1))) return rc;
        rc = an_export_firefox(t, o->firefox_out, o->overwrite, t0, t1, c->window.kind != AN_WIN_ALL);
    }
    return rc;
}

const an_cmd_def an_cmd_export = {
    .name = "export",
    .usage = help,
    .flags = AN_RUN_TRACE | AN_RUN_WARN | AN_RUN_WINDOW,
    .opts = opts,
    .own_size = sizeof(export_opts),
    .option = option,
    .check = check,
    .work = work,
};
