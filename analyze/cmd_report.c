/* cmd_report.c: `analyze report FILE --html OUT.html`: one self-contained
 * HTML file that tells the story of a run, readable offline.
 *
 * Inline CSS and inline SVG only: no script, no external font, image or
 * link, so the file opens anywhere and shows the same. Sections: the
 * bottleneck verdict (verdict.c's story) with the roles table; the run's
 * metadata (one line, the table folded); per role, a stacked chart of where its time went per window (stage
 * colours are the same in every chart: one colour family per stage kind);
 * a timeline of a few steps (one lane per thread, ranges as rectangles
 * coloured by stage, nested ranges thinner inside their parents; ranges
 * narrower than a pixel are merged into one rectangle per pixel column, so
 * the number of rectangles is bounded by lanes x depth x width, whatever the
 * trace); the queue-depth counters over time; tokens/s per window; the
 * summary table (stats.c). Every string from the trace is escaped and
 * sanitized (control characters as '?', invalid UTF-8 as U+FFFD).
 *
 * The output is written under a temporary name and renamed when complete
 * (regular files), like `export`; an existing file needs --overwrite.
 * This file holds the arguments, the document and its sections but the
 * timeline (report_timeline.c, sharing report.h); the escaping, colours and
 * chart primitives are html.c's.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "flow.h"
#include "queues.h"
#include "report.h"
#include "stragglers.h"
#include "verdict.h"

static const char help[] =
    "usage: analyze report FILE --html OUT.html [--steps A:B] [--every N] [--speedup K] [--cpu-stage S]...\n"
    "                      [--overwrite]\n"
    "\n"
    "Writes one self-contained HTML file (inline CSS and SVG, no scripts, no external\n"
    "fonts or links: it reads offline) with:\n"
    "  - first the bottleneck verdict and the roles table (as `analyze bottleneck`);\n"
    "  - the run in one line (program, steps, duration, tokens/s, status), its metadata\n"
    "    folded under it;\n"
    "  - with GPU activity, per GPU the 10 kernels with the most device time over the\n"
    "    whole trace (as `analyze gpu`'s kernels table): count, total, share of the GPU's\n"
    "    busy time, mean;\n"
    "  - per role, where its time went per window of N steps: stacked shares of its\n"
    "    threads' wall time per stage (self time) and idle; a stage has the same colour in\n"
    "    every chart (blues: wait_input, oranges: wait_output, purples: sync, greens: comm,\n"
    "    reds: copy, grey: idle, strong colours: work); a role busy under 1% of its time\n"
    "    (it only waits) gets one line instead of a chart;\n"
    "  - a timeline of a few steps: one lane per thread, ranges coloured by stage, nested\n"
    "    ranges drawn thinner inside their parents, step marks as dashed lines; ranges\n"
    "    narrower than a pixel are merged per pixel column;\n"
    "  - queue depth over time (counters named like *queue_depth*: mean per pixel column,\n"
    "    with the min-max band);\n"
    "  - tokens/s per window;\n"
    "  - with flow records, the item flow: `analyze flow`'s latency breakdown;\n"
    "  - the summary table (per thread and stage, as `analyze summary`);\n"
    "  - with the CPU capture, a CPU section: per thread and stage, on-CPU, preempted\n"
    "    and blocked shares of its self time, and flame graphs of the samples (and,\n"
    "    apart, of the Python-frame samples when the trace has them).\n"
    "\n"
    "options:\n"
    "  --html OUT.html  the output file, whose path is then printed on stdout ('-' writes the\n"
    "                   page to stdout, and nothing else)\n"
    "  --steps A:B      the timeline's steps (default: three steps in the middle of the run)\n"
    "  --every N        steps per window of the charts (default: meta profile_interval, else\n"
    "                   10; more when the run has over 150 windows)\n"
    "  --speedup K      the verdict's what-if factor (default 2)\n"
    "  --cpu-stage S    flame graphs of stage S ('(none)': no range open) per thread, instead\n"
    "                   of the three threads and stages with the most samples; repeatable or a\n"
    "                   comma list\n"
    "  --overwrite      replace an existing output file\n"
    "  --align MODE     a rank set's clocks: auto (default), meta, collectives or none\n"
    "                   (docs/analyze.md, \"Clock alignment\")\n";

enum { OPT_HTML = 1, OPT_EVERY, OPT_SPEEDUP, OPT_OVERWRITE, OPT_CPU_STAGE };
static const an_opt opts[] = {
    {"html", 1, OPT_HTML},       {"steps", 1, AN_OPT_STEPS},         {"every", 1, OPT_EVERY},
    {"speedup", 1, OPT_SPEEDUP}, {"overwrite", 0, OPT_OVERWRITE}, {"help", 0, AN_OPT_HELP},
    {"cpu-stage", 1, OPT_CPU_STAGE},
    {"align", 1, AN_OPT_ALIGN}, {NULL, 0, 0},
};

#define PLOT_X 60          /* left margin: axis labels */
#define PLOT_W (CHART_W - PLOT_X - 20)
#define MAX_WINDOWS 150
#define MAX_CPU_STAGES 64 /* --cpu-stage options */

/* ---- sections ---------------------------------------------------------------------------------------------- */

static void put_meta_row(FILE *f, const char *key, const char *value)
{
    fputs("<tr><th>", f);
    an_html_esc(f, key);
    fputs("</th><td>", f);
    an_html_esc(f, value ? value : "-");
    fputs("</td></tr>\n", f);
}

static void section_meta(an_report *rp)
{
    FILE *f = rp->f;
    an_trace *t = rp->t;
    static const char *const keys[] = {"program", "run_id", "host", "pid", "rank", "world_size", "start_utc",
                                       "status", "tool_version", "clock", "profile_interval", "dropped_events", "argv"};
    /* after the verdict: what a reader needs first is the verdict; the
     * metadata is one line in view, its table folded */
    fputs("<section id=\"run\"><h2>Run</h2>\n<p class=\"run-line\">", f);
    const char *program = an_trace_meta(t, "program"), *status = an_trace_meta(t, "status");
    an_html_esc(f, program ? program : "(program unknown)");
    if (rp->p->has_steps)
        fprintf(f, ", %llu steps (%llu-%llu)", (unsigned long long)rp->v.steps,
                (unsigned long long)rp->p->bin_step_first[0], (unsigned long long)rp->p->bin_step_last[rp->p->n_bins - 1]);
    fprintf(f, " in %.3f s", ((double)t->span_t1_ns - (double)t->span_t0_ns) / 1e9);
    if (isfinite(rp->v.tokens_per_s)) fprintf(f, ", %.1f tokens/s", rp->v.tokens_per_s);
    fputs(", status ", f);
    an_html_esc(f, status ? status : "-");
    fputs(".</p>\n<details><summary>Run metadata: host, pid, argv, clock, threads by role</summary>\n"
          "<table class=\"meta\">\n",
          f);
    put_meta_row(f, "file", t->path);
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) put_meta_row(f, keys[i], an_trace_meta(t, keys[i]));
    char buf[160];
    snprintf(buf, sizeof buf, "%.3f s", ((double)t->span_t1_ns - (double)t->span_t0_ns) / 1e9);
    put_meta_row(f, "duration (trace span)", buf);
    if (rp->p->has_steps) {
        snprintf(buf, sizeof buf, "%llu (steps %llu-%llu), %.3f ms per step", (unsigned long long)rp->v.steps,
                 (unsigned long long)rp->p->bin_step_first[0], (unsigned long long)rp->p->bin_step_last[rp->p->n_bins - 1],
                 rp->v.step_ns / 1e6);
        put_meta_row(f, "steps", buf);
    }
    if (isfinite(rp->v.tokens_per_s)) {
        snprintf(buf, sizeof buf, "%llu tokens, %.1f tokens/s", (unsigned long long)rp->v.tokens, rp->v.tokens_per_s);
        put_meta_row(f, "throughput", buf);
    }
    char *roles = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&roles, &len);
    if (m) {
        for (uint32_t r = 0; r < rp->p->n_roles; r++)
            fprintf(m, "%s%s %u", r ? ", " : "", rp->p->role_names[r], rp->p->role_threads[r]);
        fclose(m);
        put_meta_row(f, "threads by role", roles);
        free(roles);
    }
    fputs("</table>\n</details></section>\n", f);
}

static void put_pct_cell(FILE *f, double v)
{
    char buf[32];
    fprintf(f, "<td class=\"n\">%s</td>", an_fmt_pct1(v, buf, sizeof buf));
}

/* Milliseconds as a cell, "-" when not finite. */
static void put_ms_value_cell(FILE *f, double ms)
{
    if (isfinite(ms)) fprintf(f, "<td class=\"n\">%.3f</td>", ms);
    else fputs("<td class=\"n\">-</td>", f);
}

/* Nanoseconds per step as a milliseconds cell, "-" when not finite. */
static void put_ms_cell(FILE *f, double ns) { put_ms_value_cell(f, ns / 1e6); }

/* The verdict's window, named as every command names one ("steps A-B"). */
static void put_verdict_window(const an_report *rp)
{
    const an_pipe *p = rp->p;
    if (p->has_steps && rp->v.bin1 > rp->v.bin0)
        fprintf(rp->f, "steps %llu-%llu", (unsigned long long)p->bin_step_first[rp->v.bin0],
                (unsigned long long)p->bin_step_last[rp->v.bin1 - 1]);
    else
        fputs("the whole trace", rp->f);
}

/* Each GPU's busy share over the analysed steps, in all and per launching
 * role (bottleneck's devices table): who shares a GPU named as the limit. */
static int put_device_roles(an_report *rp)
{
    FILE *f = rp->f;
    const an_pipe *p = rp->p;
    an_device_load *d = an_pipe_device_loads(p, rp->v.bin0, rp->v.bin1);
    if (!d) return AN_EXIT_FAIL;
    fputs("<table class=\"data\" id=\"device-roles-table\"><caption>GPU busy per launching role over ", f);
    put_verdict_window(rp);
    fputs(" (the verdict&#39;s window)</caption>\n<tr><th>GPU</th><th>launched by</th><th>busy</th>"
          "<th>ms/step</th></tr>\n",
          f);
    for (uint32_t i = 0; i < p->n_devices; i++)
        for (int64_t r = -1; r < (int64_t)p->n_roles; r++) {
            int64_t ns = r < 0 ? d[i].busy_ns : d[i].role_ns[r];
            if (r >= 0 && ns <= 0) continue;
            fprintf(f, "<tr%s><td class=\"n\">%d</td><td>", r < 0 && (int32_t)i == rp->v.device ? " class=\"hot\"" : "",
                    d[i].device);
            an_html_esc(f, r < 0 ? "all (union)" : p->role_names[r]);
            fputs("</td>", f);
            put_pct_cell(f, d[i].span_ns ? 100.0 * (double)ns / (double)d[i].span_ns : 0);
            put_ms_cell(f, rp->v.steps ? (double)ns / (double)rp->v.steps : NAN);
            fputs("</tr>\n", f);
        }
    fputs("</table>\n", f);
    free(d);
    return 0;
}

/* The verdict in one sentence of plain words, before its evidence. */
static void put_headline(an_report *rp)
{
    FILE *f = rp->f;
    const an_pipe *p = rp->p;
    const an_verdict *v = &rp->v;
    const char *stage = v->stage >= 0 ? st_reader_stage(rp->t->r, (uint32_t)v->stage)->name : NULL;
    fputs("<p class=\"headline\">", f);
    if (v->device >= 0) {
        fprintf(f, "GPU %d sets the pace: over ", p->devices[v->device]);
        put_verdict_window(rp);
        fprintf(f, " it is busy %.0f%% of the time", v->load_pct);
        if (v->role >= 0) {
            fputs(", most of it with work launched by ", f);
            an_html_esc(f, p->role_names[v->role]);
        }
    } else if (v->role >= 0 && v->saturated) {
        fputs("The ", f);
        an_html_esc(f, p->role_names[v->role]);
        fputs(" role sets the pace: over ", f);
        put_verdict_window(rp);
        fprintf(f, " its threads are busy %.0f%% of the time", v->load_pct);
    } else {
        fputs("No role or GPU is saturated over ", f);
        put_verdict_window(rp);
        fputs(": the pipeline is not held back by one stage", f);
    }
    if (stage && isfinite(v->whatif_factor)) {
        fputs(". Making ", f);
        an_html_esc(f, stage);
        fprintf(f, " %gx faster would speed the run up by at most %.2fx", v->speedup, v->whatif_factor);
    }
    fputs(".</p>\n", f);
}

static int section_verdict(an_report *rp)
{
    FILE *f = rp->f;
    const an_pipe *p = rp->p;
    an_window_verdict *w = NULL;
    uint32_t nw = an_pipe_window_verdicts(p, rp->every, &w);
    if (!w) return AN_EXIT_FAIL;
    char *story = an_pipe_story(p, rp->loads, &rp->v, w, nw, rp->every);
    free(w);
    if (!story) return an_report_oom();
    /* read with the model (opts gpu_idle): the verdict's period is all bins */
    const an_gpu_idle *gpu = p->gpu_idle;
    uint32_t n_gpu = p->n_gpu_idle;
    const char *gpu_text = p->gpu_idle_text;
    fputs("<section id=\"verdict\"><h2>Bottleneck</h2>\n<div class=\"verdict\">\n", f);
    put_headline(rp);
    /* The story's lines: the verdict and its evidence stay in view; the
     * rest (host shares, the windows, role order, GPU idle) is folded. */
    char *folded = NULL;
    size_t folded_len = 0;
    FILE *fold = open_memstream(&folded, &folded_len);
    if (!fold) {
        free(story);
        return an_report_oom();
    }
    for (char *line = story, *nl; *line; line = nl + 1) {
        nl = strchr(line, '\n');
        if (!nl) nl = line + strlen(line) - 1;
        *nl = '\0';
        int shown = !strncmp(line, "Bottleneck:", 11) || !strncmp(line, "Evidence:", 9) || !strncmp(line, "What if", 7) ||
                    !strncmp(line, "No role", 7);
        FILE *to = shown ? f : fold;
        fputs(shown ? "<p>" : "<p class=\"more\">", to);
        an_html_esc(to, line);
        fputs("</p>\n", to);
    }
    fputs("<p class=\"more\">GPU idle: ", fold);
    an_html_esc(fold, gpu_text);
    fputs(".</p>\n", fold);
    if (fclose(fold) != 0) {
        free(folded);
        free(story);
        return an_report_oom();
    }
    fputs("<details><summary>How the verdict was reached: host shares, windows, role order, GPU idle</summary>\n", f);
    fputs(folded, f);
    fputs("</details>\n</div>\n", f);
    free(folded);
    if (n_gpu) {
        /* its window: the steady state (gpu's default window within the verdict's) */
        char desc[200];
        int64_t w0, w1;
        if (an_gpu_steady_window(rp->t, p->bin_t[0], p->bin_t[p->n_bins], &w0, &w1, desc, sizeof desc))
            snprintf(desc, sizeof desc, "the verdict's window");
        else if (w0 != p->bin_t[0] || w1 != p->bin_t[p->n_bins]) {
            /* two windows on one screen: say which figure is whose, and why they differ */
            fputs("<p class=\"note window-note\">Windows: the verdict, the GPU-per-role and the roles tables cover ", f);
            put_verdict_window(rp);
            fputs("; the GPU idle table and line cover ", f);
            an_html_esc(f, desc);
            fputs(", as <code>analyze gpu</code>&#39;s devices table. The first holds the start-up the second leaves "
                  "out, so one GPU&#39;s busy shares differ between them.</p>\n",
                  f);
        }
        fputs("<table class=\"data\" id=\"gpu-table\"><caption>GPU idle split over ", f);
        an_html_esc(f, desc);
        fputs("</caption>\n<tr><th>GPU</th><th>records</th><th>busy</th><th>busy ms</th>"
              "<th>idle ms</th><th>host wait ms</th><th>launch gap ms</th><th>other ms</th><th>host wait mostly in</th></tr>\n",
              f);
        for (uint32_t i = 0; i < n_gpu; i++) {
            const an_gpu_idle *g = &gpu[i];
            int64_t span = g->busy_ns + g->idle_ns;
            fprintf(f, "<tr><td class=\"n\">%d</td><td class=\"n\">%llu</td>", g->device, (unsigned long long)g->n_records);
            put_pct_cell(f, span ? 100.0 * (double)g->busy_ns / (double)span : 0);
            fprintf(f, "<td class=\"n\">%.3f</td><td class=\"n\">%.3f</td><td class=\"n\">%.3f</td><td class=\"n\">%.3f</td>"
                       "<td class=\"n\">%.3f</td><td>",
                    (double)g->busy_ns / 1e6, (double)g->idle_ns / 1e6, (double)g->host_wait_ns / 1e6,
                    (double)g->launch_gap_ns / 1e6, (double)g->other_ns / 1e6);
            if (g->host_thread >= 0) {
                const st_thread_info *ti = st_reader_thread_by_id(rp->t->r, (uint32_t)g->host_thread);
                const st_stage_info *si = g->host_stage >= 0 ? st_reader_stage(rp->t->r, (uint32_t)g->host_stage) : NULL;
                an_html_esc(f, ti ? ti->name : "(unknown)");
                fputs(" / ", f);
                an_html_esc(f, si ? si->name : "(no stage)");
                fprintf(f, " (%.3f ms)", (double)g->host_stage_ns / 1e6);
            } else {
                fputs("-", f);
            }
            fputs("</td></tr>\n", f);
        }
        fputs("</table>\n", f);
    }
    free(story);
    if (p->n_devices && put_device_roles(rp)) return AN_EXIT_FAIL; /* printed */
    fputs("<table class=\"data\" id=\"roles-table\"><caption>Roles over ", f);
    put_verdict_window(rp);
    fputs(" (the verdict&#39;s window): shares of each role&#39;s wall time</caption>\n<tr><th>role</th><th>threads</th><th>busy</th><th>work</th>"
          "<th>wait_input</th><th>wait_output</th><th>sync</th><th>comm</th><th>copy</th><th>idle</th>",
          f);
    if (p->n_devices) fputs("<th>host (busy - sync)</th><th>GPU work</th>", f);
    fputs("<th>busy ms/step</th>", f);
    if (p->n_devices) fputs("<th>need ms/step</th>", f);
    fputs("<th>largest work stage</th>", f);
    if (p->n_devices) fputs("<th>largest GPU stage</th>", f);
    fputs("</tr>\n", f);
    an_role_row *rows = an_roles_table(p, rp->loads, &rp->v);
    if (!rows) return AN_EXIT_FAIL;
    for (uint32_t r = 0; r < p->n_roles; r++) {
        const an_role_row *row = &rows[r];
        fprintf(f, "<tr%s><td>", row->bottleneck ? " class=\"hot\"" : "");
        an_html_esc(f, row->role);
        fprintf(f, "</td><td class=\"n\">%u</td>", row->threads);
        put_pct_cell(f, row->busy_pct);
        put_pct_cell(f, row->work_pct);
        for (int k = 0; k < 5; k++) put_pct_cell(f, row->kind_pct[k]);
        put_pct_cell(f, row->idle_pct);
        if (p->n_devices) {
            put_pct_cell(f, row->host_pct);
            put_pct_cell(f, row->gpu_pct);
        }
        put_ms_value_cell(f, row->busy_ms_per_step);
        if (p->n_devices) put_ms_value_cell(f, row->need_ms_per_step);
        fputs("<td>", f);
        an_html_esc(f, row->top_stage ? row->top_stage : "-");
        if (p->n_devices) {
            fputs("</td><td>", f);
            an_html_esc(f, row->top_gpu_stage ? row->top_gpu_stage : "-");
        }
        fputs("</td></tr>\n", f);
    }
    free(rows);
    fputs("</table>\n", f);
    if (p->n_queues) {
        fputs("<table class=\"data\"><tr><th>queue counter</th><th>mean</th><th>min</th><th>max</th>"
              "<th>time at max</th><th>time at zero</th></tr>\n",
              f);
        for (uint32_t i = 0; i < p->n_queues; i++) {
            const an_pipe_queue *q = &p->queues[i];
            fputs("<tr><td>", f);
            an_html_esc(f, q->name);
            if (q->covered_ns) {
                fprintf(f, "</td><td class=\"n\">%.2f</td><td class=\"n\">%g</td><td class=\"n\">%g</td>", q->mean, q->min,
                        q->max);
                put_pct_cell(f, 100.0 * (double)q->at_max_ns / (double)q->covered_ns);
                put_pct_cell(f, 100.0 * (double)q->at_zero_ns / (double)q->covered_ns);
            } else {
                fputs("</td><td>-</td><td>-</td><td>-</td><td>-</td><td>-</td>", f);
            }
            fputs("</tr>\n", f);
        }
        fputs("</table>\n", f);
    }
    fputs("</section>\n", f);
    return AN_EXIT_OK;
}


static void x_window_labels(FILE *f, const an_report *rp, int y, double bar_w)
{
    const an_pipe *p = rp->p;
    uint32_t every_label = (uint32_t)ceil(70.0 / bar_w);
    if (every_label < 1) every_label = 1;
    for (uint32_t i = 0; i < rp->n_windows; i += every_label) {
        char label[64];
        if (p->has_steps)
            snprintf(label, sizeof label, "%llu-%llu", (unsigned long long)p->bin_step_first[rp->first[i]],
                     (unsigned long long)p->bin_step_last[rp->first[i + 1] - 1]);
        else
            snprintf(label, sizeof label, "all");
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" fill=\"#555\">%s</text>\n",
                PLOT_X + (i + 0.5) * bar_w, y, label);
    }
}

/* A role busy (work, sync, comm, copy) under WAIT_ONLY_BUSY_PCT of its
 * wall time over every step gets one line instead of a chart of one
 * colour: its busy share and its largest stages (or idle), at most three of
 * at least 1% each. ns: its self
 * time per column over the same steps. Returns 1 when it printed the line. */
#define WAIT_ONLY_BUSY_PCT 1.0
static int put_wait_only(an_report *rp, uint32_t r, const int64_t *ns)
{
    const an_pipe *p = rp->p;
    int64_t wall = 0, busy = 0;
    for (uint32_t c = 0; c < p->n_cols; c++) {
        wall += ns[c];
        if (c < p->n_stages && an_kind_is_busy(st_reader_stage(p->trace->r, c)->kind)) busy += ns[c];
    }
    if (wall <= 0 || 100.0 * (double)busy / (double)wall >= WAIT_ONLY_BUSY_PCT) return 0;
    FILE *f = rp->f;
    fputs("<p class=\"wait-only\" data-role=\"", f);
    an_html_esc(f, p->role_names[r]);
    fputs("\"><b>", f);
    an_html_esc(f, p->role_names[r]);
    fprintf(f, "</b> (%u thread%s): no chart, it only waits: busy %.1f%% of its time; ", p->role_threads[r],
            p->role_threads[r] == 1 ? "" : "s", 100.0 * (double)busy / (double)wall);
    /* its stages (and idle) of at least 1%, largest first, at most three */
    uint8_t *done = calloc(p->n_cols, 1);
    for (int i = 0; i < 3; i++) {
        int64_t best = -1;
        for (uint32_t c = 0; c < p->n_cols; c++)
            if (!(done && done[c]) && ns[c] * 100 >= wall && (best < 0 || ns[c] > ns[best])) best = c;
        if (best < 0 || (i && !done)) break;
        if (done) done[best] = 1;
        if (i) fputs(", ", f);
        an_html_esc(f, an_html_col_name(p, (uint32_t)best));
        fprintf(f, " %.1f%% (", 100.0 * (double)ns[best] / (double)wall);
        an_html_esc(f, an_html_col_kind(p, (uint32_t)best));
        fputc(')', f);
    }
    free(done);
    fputs(".</p>\n", f);
    return 1;
}

static int section_breakdown(an_report *rp)
{
    FILE *f = rp->f;
    const an_pipe *p = rp->p;
    int64_t *ns = calloc(p->n_cols, sizeof *ns);
    uint8_t *shown = calloc(p->n_cols, 1);
    if (!ns || !shown) {
        free(ns);
        free(shown);
        return an_report_oom();
    }
    fprintf(f, "<section id=\"breakdown\"><h2>Where each role&#39;s time went, per window of %llu steps</h2>\n"
               "<p class=\"note\">Share of the role&#39;s wall time (all its threads) per stage (self time), and idle "
               "(in no range). The same stage has the same colour in every chart.</p>\n",
            (unsigned long long)rp->every);
    const int h = 180, top = 28, height = top + h + 36;
    double bar_w = (double)PLOT_W / (rp->n_windows ? rp->n_windows : 1);
    for (uint32_t r = 0; r < p->n_roles; r++) {
        memset(shown, 0, p->n_cols);
        an_pipe_stage_ns(p, 0, p->n_bins, r, ns);
        for (uint32_t c = 0; c < p->n_cols; c++) shown[c] = ns[c] > 0;
        if (put_wait_only(rp, r, ns)) continue;
        char title[300], name[128];
        snprintf(title, sizeof title, "%s (%u thread%s): share of time per stage, per window",
                 an_clean(p->role_names[r], name, sizeof name), p->role_threads[r], p->role_threads[r] == 1 ? "" : "s");
        fputs("<div class=\"chart\"><h3>", f);
        an_html_esc(f, title);
        fputs("</h3>\n", f);
        an_html_svg_open(f, CHART_W, height, title);
        an_html_y_axis(f, PLOT_X, top, PLOT_W, h, 100, "%");
        for (uint32_t i = 0; i < rp->n_windows; i++) {
            an_pipe_stage_ns(p, rp->first[i], rp->first[i + 1], r, ns);
            int64_t wall = 0;
            for (uint32_t c = 0; c < p->n_cols; c++) wall += ns[c];
            if (wall <= 0) continue;
            double x = PLOT_X + i * bar_w, w = bar_w > 3 ? bar_w - 1 : bar_w, y = top + h;
            for (uint32_t c = 0; c < p->n_cols; c++) {
                if (ns[c] <= 0) continue;
                double share = (double)ns[c] / (double)wall, hh = share * h;
                y -= hh;
                fprintf(f, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\"><title>", x, y, w, hh,
                        rp->pal.stage[c]);
                an_html_esc(f, an_html_col_name(p, c));
                if (p->has_steps)
                    fprintf(f, ", steps %llu-%llu", (unsigned long long)p->bin_step_first[rp->first[i]],
                            (unsigned long long)p->bin_step_last[rp->first[i + 1] - 1]);
                fprintf(f, ": %.1f%%</title></rect>\n", 100.0 * share);
            }
        }
        x_window_labels(f, rp, top + h + 16, bar_w);
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" fill=\"#333\">steps</text>\n", PLOT_X + PLOT_W / 2,
                top + h + 32);
        fputs("</svg>\n", f);
        an_html_legend(f, &rp->pal, rp->p, shown);
        fputs("</div>\n", f);
    }
    fputs("</section>\n", f);
    free(ns);
    free(shown);
    return AN_EXIT_OK;
}

/* ---- queue depth ------------------------------------------------------------------------------------------ */

static int section_queues(an_report *rp)
{
    FILE *f = rp->f;
    const an_pipe *p = rp->p;
    fputs("<section id=\"queues\"><h2>Queue depth over time</h2>\n", f);
    if (!p->n_queues) {
        fputs("<p class=\"note\">No counter named like *queue_depth* in this trace.</p></section>\n", f);
        return AN_EXIT_OK;
    }
    const int cols = PLOT_W, h = 160, top = 14, height = top + h + 36;
    double *sum = malloc(cols * sizeof *sum), *cov = malloc(cols * sizeof *cov), *lo = malloc(cols * sizeof *lo),
           *hi = malloc(cols * sizeof *hi);
    if (!sum || !cov || !lo || !hi) {
        free(sum);
        free(cov);
        free(lo);
        free(hi);
        return an_report_oom();
    }
    int64_t t0 = p->bin_t[0], t1 = p->bin_t[p->n_bins];
    if (t1 <= t0) t1 = t0 + 1;
    double per_col = (double)(t1 - t0) / cols;
    int rc = AN_EXIT_OK;
    for (uint32_t qi = 0; qi < p->n_queues && !rc; qi++) {
        const an_pipe_queue *q = &p->queues[qi];
        for (int c = 0; c < cols; c++) {
            sum[c] = cov[c] = 0;
            lo[c] = INFINITY;
            hi[c] = -INFINITY;
        }
        an_counter_merge *m;
        if (an_counter_merge_open(&m, rp->t, q->counter)) {
            rc = an_trace_fail(rp->t);
            break;
        }
        int64_t cur_t = 0, ts;
        double cur_v = 0, v;
        int have = 0, n;
        for (;;) {
            n = an_counter_merge_next(m, &ts, &v);
            if (n < 0) break;
            int64_t end = n == 1 ? ts : t1;
            if (have) {
                int64_t a = cur_t < t0 ? t0 : cur_t, b = end > t1 ? t1 : end;
                while (a < b) {
                    int c = (int)((double)(a - t0) / per_col);
                    if (c >= cols) c = cols - 1;
                    int64_t col_end = t0 + (int64_t)ceil((c + 1) * per_col);
                    if (col_end <= a) col_end = a + 1;
                    int64_t e = b < col_end ? b : col_end;
                    sum[c] += cur_v * (double)(e - a);
                    cov[c] += (double)(e - a);
                    if (cur_v < lo[c]) lo[c] = cur_v;
                    if (cur_v > hi[c]) hi[c] = cur_v;
                    a = e;
                }
            }
            if (n == 0) break;
            have = isfinite(v);
            cur_t = ts;
            cur_v = v;
        }
        an_counter_merge_close(m);
        if (n < 0) {
            rc = an_trace_fail(rp->t);
            break;
        }
        double y_max = isfinite(q->max) && q->max > 0 ? q->max : 1;
        char title[300], name[128];
        snprintf(title, sizeof title, "queue depth: %s (%s)", an_clean(q->name, name, sizeof name),
                 q->unit && *q->unit ? q->unit : "value");
        fputs("<div class=\"chart\"><h3>", f);
        an_html_esc(f, title);
        fputs("</h3>\n", f);
        an_html_svg_open(f, CHART_W, height, title);
        an_html_y_axis(f, PLOT_X, top, PLOT_W, h, y_max * 1.05, "");
        /* min-max band, then the mean line */
        fputs("<path fill=\"#9ecae1\" fill-opacity=\"0.5\" stroke=\"none\" d=\"", f);
        int started = 0;
        for (int c = 0; c < cols; c++) {
            if (!cov[c]) continue;
            fprintf(f, "%s%d %.1f", started ? " L" : "M", PLOT_X + c, top + h - hi[c] / (y_max * 1.05) * h);
            started = 1;
        }
        for (int c = cols; c-- > 0;) {
            if (!cov[c]) continue;
            fprintf(f, " L%d %.1f", PLOT_X + c + 1, top + h - lo[c] / (y_max * 1.05) * h);
        }
        fputs(started ? " Z\"/>\n" : "\"/>\n", f);
        fputs("<polyline fill=\"none\" stroke=\"#08519c\" stroke-width=\"1.5\" points=\"", f);
        for (int c = 0; c < cols; c++)
            if (cov[c]) fprintf(f, "%d,%.1f ", PLOT_X + c, top + h - sum[c] / cov[c] / (y_max * 1.05) * h);
        fputs("\"/>\n", f);
        /* ticks at round seconds from the trace start */
        double from_s = (double)(t0 - rp->t->origin_ns) / 1e9, span_s = (double)(t1 - t0) / 1e9;
        double st = an_html_nice_step(span_s, 8);
        for (double s = ceil(from_s / st) * st; s <= from_s + span_s + 1e-12; s += st)
            fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" fill=\"#555\">%g s</text>\n",
                    PLOT_X + (s - from_s) / span_s * PLOT_W, top + h + 16, s);
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" fill=\"#333\">seconds from the trace start</text>\n",
                PLOT_X + PLOT_W / 2, top + h + 32);
        fputs("</svg>\n", f);
        if (q->covered_ns)
            fprintf(f, "<p class=\"note\">mean %.2f, max %g; at max %.1f%% of the time, at zero %.1f%%.</p>\n", q->mean,
                    q->max, 100.0 * (double)q->at_max_ns / (double)q->covered_ns,
                    100.0 * (double)q->at_zero_ns / (double)q->covered_ns);
        fputs("</div>\n", f);
    }
    fputs("</section>\n", f);
    free(sum);
    free(cov);
    free(lo);
    free(hi);
    return rc;
}

/* ---- tokens/s --------------------------------------------------------------------------------------------- */

static void section_tokens(an_report *rp)
{
    FILE *f = rp->f;
    const an_pipe *p = rp->p;
    fprintf(f, "<section id=\"tokens\"><h2>Tokens/s per window of %llu steps</h2>\n", (unsigned long long)rp->every);
    double y_max = 0;
    for (uint32_t i = 0; i < rp->n_windows; i++) {
        uint64_t tok = 0;
        for (uint32_t b = rp->first[i]; b < rp->first[i + 1]; b++) tok += p->bin_tokens[b];
        int64_t len = p->bin_t[rp->first[i + 1]] - p->bin_t[rp->first[i]];
        double v = len > 0 ? (double)tok * 1e9 / (double)len : 0;
        if (v > y_max) y_max = v;
    }
    if (p->has_steps && rp->n_windows == 0) {
        fprintf(f, "<p class=\"note\">No complete window of %llu steps in this trace.</p></section>\n",
                (unsigned long long)rp->every);
        return;
    }
    if (!p->has_steps || y_max <= 0) {
        fputs("<p class=\"note\">No tokens in the step marks of this trace.</p></section>\n", f);
        return;
    }
    const int h = 160, top = 14, height = top + h + 36;
    an_html_svg_open(f, CHART_W, height, "tokens per second per window");
    an_html_y_axis(f, PLOT_X, top, PLOT_W, h, y_max * 1.1, "");
    double bar_w = (double)PLOT_W / rp->n_windows;
    for (uint32_t i = 0; i < rp->n_windows; i++) {
        uint64_t tok = 0;
        for (uint32_t b = rp->first[i]; b < rp->first[i + 1]; b++) tok += p->bin_tokens[b];
        int64_t len = p->bin_t[rp->first[i + 1]] - p->bin_t[rp->first[i]];
        double v = len > 0 ? (double)tok * 1e9 / (double)len : 0, hh = v / (y_max * 1.1) * h;
        fprintf(f, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"#4e79a7\"><title>steps %llu-%llu: %.1f tokens/s</title></rect>\n",
                PLOT_X + i * bar_w, top + h - hh, bar_w > 3 ? bar_w - 1 : bar_w, hh,
                (unsigned long long)p->bin_step_first[rp->first[i]],
                (unsigned long long)p->bin_step_last[rp->first[i + 1] - 1], v);
    }
    x_window_labels(f, rp, top + h + 16, bar_w);
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" fill=\"#333\">steps</text>\n", PLOT_X + PLOT_W / 2,
            top + h + 32);
    fputs("</svg>\n</section>\n", f);
}

/* ---- ranks (a rank set) ------------------------------------------------------------------------------------ */

static void ms_cell(FILE *f, int64_t ns) { fprintf(f, "<td class=\"n\">%.3f</td>", (double)ns / 1e6); }

/* Per rank, a bar of its threads' busy and waiting time, and the collectives
 * table of `stragglers`. Only for a rank set. */
static int section_ranks(an_report *rp)
{
    an_trace *t = rp->t;
    if (!t->is_set) return AN_EXIT_OK;
    an_stragglers s;
    int rc = an_stragglers_compute(t, &s);
    if (rc) return rc;
    FILE *f = rp->f;
    fprintf(f, "<section id=\"ranks\"><h2>Ranks</h2>\n<p class=\"note\">%u of %lld ranks, on rank 0&#39;s clock. "
               "Per rank, its threads&#39; top-level ranges over the whole run, as shares of the threads&#39; time: "
               "busy (work, sync and copy stages) and waiting (wait_input, wait_output and comm stages: the wait "
               "inside a collective is time lost to the other ranks).</p>\n",
            s.n_ranks, (long long)t->world_size);
    fputs("<div class=\"legend\"><span><i style=\"background:#4e79a7\"></i>busy</span>"
          "<span><i style=\"background:#f28e2b\"></i>waiting</span></div>\n", f);
    const int row_h = 18, top = 6, height = top + (int)s.n_ranks * row_h + 24;
    an_html_svg_open(f, CHART_W, height, "busy and waiting time per rank");
    for (uint32_t k = 0; k < s.n_ranks; k++) {
        const an_rank_load *rl = &s.ranks[k];
        double busy = rl->total_ns > 0 ? 100.0 * (double)rl->busy_ns / (double)rl->total_ns : 0;
        double wait = rl->total_ns > 0 ? 100.0 * (double)rl->wait_ns / (double)rl->total_ns : 0;
        if (busy > 100) busy = 100;
        if (busy + wait > 100) wait = 100 - busy;
        int y = top + (int)k * row_h;
        fprintf(f, "<g class=\"rank\" data-rank=\"%d\"><text x=\"%d\" y=\"%d\" text-anchor=\"end\" fill=\"#333\">rank %d</text>\n",
                rl->rank, PLOT_X - 6, y + row_h - 5, rl->rank);
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"#4e79a7\"><title>rank %d: busy %.1f%% "
                   "(%u threads)</title></rect>\n",
                PLOT_X, y + 2, busy / 100.0 * PLOT_W, row_h - 4, rl->rank, busy, rl->threads);
        fprintf(f, "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"#f28e2b\"><title>rank %d: waiting "
                   "%.1f%%</title></rect></g>\n",
                PLOT_X + busy / 100.0 * PLOT_W, y + 2, wait / 100.0 * PLOT_W, row_h - 4, rl->rank, wait);
    }
    for (int pct = 0; pct <= 100; pct += 25)
        fprintf(f, "<text x=\"%.2f\" y=\"%d\" text-anchor=\"middle\" fill=\"#555\">%d%%</text>\n",
                PLOT_X + pct / 100.0 * PLOT_W, height - 8, pct);
    fputs("</svg>\n<h3>Stragglers</h3>\n", f);
    if (!s.n_coll) {
        fputs("<p class=\"note\">No collective (comm stage) is shared by two ranks.</p>\n</section>\n", f);
        an_stragglers_free(&s);
        return AN_EXIT_OK;
    }
    fputs("<p class=\"note\">As <code>analyze stragglers</code>: instance k of a collective is the k-th range of its "
          "comm stage on each rank, in start order; the rank that begins it last is the one the others wait for.</p>\n"
          "<table class=\"data\" id=\"stragglers\"><tr><th>stage</th><th>instances</th><th>ranks</th>"
          "<th>last rank</th><th>times last</th><th>last %</th><th>every time</th><th>mean wait ms</th>"
          "<th>max wait ms</th></tr>\n",
          f);
    for (uint32_t i = 0; i < s.n_coll; i++) {
        const an_straggler *c = &s.coll[i];
        fputs("<tr><td>", f);
        an_html_esc(f, c->stage);
        fprintf(f, "</td><td class=\"n\">%llu</td><td class=\"n\">%u</td><td class=\"n\">%d</td><td class=\"n\">%u</td>",
                (unsigned long long)c->instances, c->ranks, c->last_rank, c->times_last);
        put_pct_cell(f, 100.0 * c->times_last / (double)c->instances);
        fprintf(f, "<td>%s</td>", c->every ? "yes" : "no");
        ms_cell(f, c->mean_wait_ns);
        ms_cell(f, c->max_wait_ns);
        fputs("</tr>\n", f);
    }
    fputs("</table>\n</section>\n", f);
    an_stragglers_free(&s);
    return AN_EXIT_OK;
}

/* ---- summary table ----------------------------------------------------------------------------------------- */


static int section_summary(an_report *rp)
{
    FILE *f = rp->f;
    an_select sel;
    memset(&sel, 0, sizeof sel);
    an_stats s;
    int rc = an_stats_compute(&s, rp->t, 1, &sel, 0);
    if (rc) {
        an_stats_free(&s);
        return rc;
    }
    const an_file_stats *fs = &s.files[0];
    fprintf(f, "<section id=\"summary\"><h2>Summary</h2>\n<p class=\"note\">Per thread and stage over the whole trace "
               "(%.3f ms of wall time per thread): inclusive and self time, share of the wall time, count, mean and "
               "exact percentiles of the ranges&#39; durations.</p>\n",
            (double)fs->wall_ns / 1e6);
    fputs("<table class=\"data\"><tr><th>thread</th><th>role</th><th>stage</th><th>kind</th><th>total ms</th>"
          "<th>self ms</th><th>self</th><th>count</th><th>mean ms</th><th>p50 ms</th><th>p95 ms</th><th>p99 ms</th>"
          "<th>max ms</th></tr>\n",
          f);
    uint32_t ns = fs->n_stages;
    /* threads in role order (the pipeline's, as bottleneck's), then by name */
    an_report_lane *order = calloc(fs->n_threads ? fs->n_threads : 1, sizeof *order);
    if (!order) {
        an_stats_free(&s);
        return an_report_oom();
    }
    for (uint32_t i = 0; i < fs->n_threads; i++)
        order[i] = (an_report_lane){i, i < rp->p->n_threads ? rp->p->thread_role[i] : UINT32_MAX};
    an_report_sort_lanes(order, fs->n_threads, rp->p);
    for (uint32_t oi = 0; oi < fs->n_threads; oi++) {
        uint32_t ti = order[oi].thread;
        const st_thread_info *th = st_reader_thread(rp->t->r, ti);
        for (;;) {
            /* stages of the thread by total, largest first */
            int32_t best = -1;
            for (uint32_t st = 0; st < ns; st++) {
                const an_stage_stats *x = &fs->thread_stage[(size_t)ti * ns + st];
                if (x->count && x->count != UINT64_MAX && (best < 0 || x->total_ns > fs->thread_stage[(size_t)ti * ns + best].total_ns))
                    best = (int32_t)st;
            }
            if (best < 0) break;
            an_stage_stats *x = &fs->thread_stage[(size_t)ti * ns + (uint32_t)best];
            fputs("<tr><td>", f);
            an_html_esc(f, th->name);
            fputs("</td><td>", f);
            an_html_esc(f, th->role);
            fputs("</td><td>", f);
            an_html_esc(f, st_reader_stage(rp->t->r, (uint32_t)best)->name);
            fputs("</td><td>", f);
            an_html_esc(f, st_kind_name(st_reader_stage(rp->t->r, (uint32_t)best)->kind));
            fputs("</td>", f);
            ms_cell(f, x->total_ns);
            ms_cell(f, x->self_ns);
            put_pct_cell(f, fs->wall_ns > 0 ? 100.0 * (double)x->self_ns / (double)fs->wall_ns : 0);
            fprintf(f, "<td class=\"n\">%llu</td>", (unsigned long long)x->count);
            ms_cell(f, (int64_t)(((uint64_t)x->total_ns + x->count / 2) / x->count));
            for (int pi = 0; pi < AN_NPCT; pi++) ms_cell(f, x->pct_ns[pi]);
            ms_cell(f, x->max_ns);
            fputs("</tr>\n", f);
            x->count = UINT64_MAX; /* printed */
        }
        int64_t idle = fs->wall_ns > fs->thread_busy_ns[ti] ? fs->wall_ns - fs->thread_busy_ns[ti] : 0;
        fputs("<tr class=\"idle\"><td>", f);
        an_html_esc(f, th->name);
        fputs("</td><td>", f);
        an_html_esc(f, th->role);
        fputs("</td><td>idle</td><td>-</td>", f);
        ms_cell(f, idle);
        ms_cell(f, idle);
        put_pct_cell(f, fs->wall_ns > 0 ? 100.0 * (double)idle / (double)fs->wall_ns : 0);
        fputs("<td></td><td></td><td></td><td></td><td></td><td></td></tr>\n", f);
    }
    fputs("</table></section>\n", f);
    free(order);
    an_stats_free(&s);
    return AN_EXIT_OK;
}

/* ---- item flow (issue: follow each batch) ------------------------------------------------------------ */

/* With flow records: `analyze flow`'s tables (end-to-end latency
 * p50/p95/p99, queue residence, time in each role, the latency breakdown by
 * stage, critical paths) as preformatted text, the end-to-end latency
 * quoted first. Without them, nothing. */
static int section_flow(an_report *rp)
{
    int has = st_reader_has_flows(rp->t->r);
    if (has < 0) return an_trace_fail(rp->t);
    if (!has) return AN_EXIT_OK;
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (!m) return an_report_oom();
    int rc = an_flow_text(rp->t, m);
    if (fclose(m) != 0 && !rc) rc = an_report_oom();
    if (!rc) {
        FILE *f = rp->f;
        fputs("<section id=\"flow\"><h2>Item flow: where each batch spent its time</h2>\n<p class=\"note\">Each item "
              "followed from its first flow out to its last flow in (st_flow_out / st_flow_in): end-to-end latency, "
              "time in each queue and in each role, the latency breakdown by stage and each step&#39;s critical path, "
              "as <code>analyze flow</code> prints them.</p>\n<pre class=\"flow\">",
              f);
        an_html_esc_pre(f, text);
        fputs("</pre>\n</section>\n", f);
    }
    free(text);
    return rc;
}

/* ---- the document ----------------------------------------------------------------------------------------- */

static const char css[] =
    "body{font-family:Helvetica,Arial,sans-serif;color:#222;margin:24px auto;max-width:1160px;padding:0 16px;"
    "font-size:14px;line-height:1.4}\n"
    "h1{font-size:22px;margin:0 0 8px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd;"
    "padding-bottom:4px}h3{font-size:14px;margin:14px 0 4px}\n"
    "table{border-collapse:collapse;margin:8px 0}caption{text-align:left;font-size:12px;color:#555;padding:2px 0}td,th{padding:2px 8px;text-align:left;vertical-align:top}\n"
    "table.meta th{color:#555;font-weight:normal}table.data th{border-bottom:1px solid #999;background:#f4f4f4}\n"
    "table.data td{border-bottom:1px solid #eee}td.n{text-align:right;font-variant-numeric:tabular-nums}\n"
    "tr.hot td{background:#fff3cd;font-weight:bold}tr.idle td{color:#777}\n"
    ".verdict{background:#f7f9fc;border-left:4px solid #4e79a7;padding:6px 12px}.verdict p{margin:4px 0}\n"
    ".note{color:#555;font-size:12px;margin:4px 0}\n"
    ".legend{font-size:12px;margin:2px 0 10px}.legend span{display:inline-block;margin-right:14px}\n"
    ".legend i{display:inline-block;width:11px;height:11px;margin-right:4px;vertical-align:-1px;"
    "border:1px solid #999}\n"
    "svg{display:block}pre.flow{font-size:12px;background:#f7f7f7;padding:8px;overflow-x:auto}\n"
    ".verdict p.headline{font-size:16px;font-weight:bold;margin:6px 0}.verdict details{margin:6px 0;color:#444}\n"
    ".verdict summary{cursor:pointer;color:#4e79a7}\n"
    "td.kname{word-break:break-all;max-width:760px;font-family:monospace;font-size:12px}\n"
    "p.wait-only{margin:6px 0 10px}\n"
    "p.warn{background:#fff3cd;border-left:4px solid #e0a800;padding:4px 10px;margin:4px 0}\n"
    "#run summary{cursor:pointer;color:#4e79a7;font-size:13px}p.run-line{margin:4px 0}\n";

/* What the trace says it could not record (the warnings every command
 * prints on stderr: incomplete, dropped and lost events, GPU records
 * CUPTI dropped, CPU records the kernel lost, GPU pauses; for a rank set
 * the missing ranks first), one paragraph each, above the verdict: a
 * reader of the page does not see the command's stderr. Nothing when the
 * trace has none. */
static void section_warnings(an_report *rp)
{
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (!m) return;
    an_warn_to(m);
    an_trace_warn(rp->t);
    an_warn_to(NULL);
    fclose(m);
    if (len) {
        FILE *f = rp->f;
        fputs("<section id=\"warnings\">\n", f);
        char *save = NULL;
        for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
            const char *shown = strncmp(line, "analyze: ", 9) == 0 ? line + 9 : line;
            fputs("<p class=\"warn\">", f);
            an_html_esc(f, shown);
            fputs("</p>\n", f);
        }
        fputs("</section>\n", f);
    }
    free(text);
}

static int write_report(an_report *rp)
{
    FILE *f = rp->f;
    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n<title>stagetrace report: ", f);
    an_html_esc(f, rp->t->path);
    fprintf(f, "</title>\n<style>\n%s</style>\n</head>\n<body>\n<h1>stagetrace report: ", css);
    an_html_esc(f, rp->t->path);
    fputs("</h1>\n", f);
    section_warnings(rp);
    int rc = section_verdict(rp);
    if (!rc) section_meta(rp);
    if (!rc) rc = section_ranks(rp);
    if (!rc) rc = an_report_kernels(rp);
    if (!rc) rc = section_breakdown(rp);
    if (!rc) rc = an_report_timeline(rp);
    if (!rc) rc = an_report_cpu(rp);
    if (!rc) rc = section_queues(rp);
    if (!rc) section_tokens(rp);
    if (!rc) rc = section_flow(rp);
    if (!rc) rc = section_summary(rp);
    fprintf(f, "<p class=\"note\">Written by analyze (stagetrace) %s from trace schema version %d.</p>\n</body>\n</html>\n",
            ST_VERSION_STRING, ST_SCHEMA_VERSION);
    return rc;
}

typedef struct report_opts {
    const char *html;
    int overwrite, have_every;
    uint64_t every; /* chart windows, steps */
    double speedup; /* the what-if bound's factor */
    const char *cpu_stages[MAX_CPU_STAGES];
    uint32_t n_cpu_stages;
} report_opts;

static void init(an_cmd *c)
{
    report_opts *o = c->own;
    o->speedup = 2.0;
}

static int option(an_cmd *c, int id)
{
    report_opts *o = c->own;
    const char *v = c->args.value;
    switch (id) {
    case OPT_HTML: o->html = v; break;
    case OPT_OVERWRITE: o->overwrite = 1; break;
    case OPT_EVERY:
        o->have_every = 1;
        return an_opt_every("report", v, &o->every);
    case OPT_SPEEDUP: return an_opt_speedup("report", v, &o->speedup);
    case OPT_CPU_STAGE:
        if (o->n_cpu_stages == MAX_CPU_STAGES)
            return an_usage_error("report", "--cpu-stage is given more than %d times (use a comma list)", MAX_CPU_STAGES);
        o->cpu_stages[o->n_cpu_stages++] = v;
        break;
    }
    return AN_EXIT_OK;
}

static int check(an_cmd *c)
{
    const report_opts *o = c->own;
    if (c->args.n_pos == 0) return an_usage_error("report", "no trace file given");
    if (!o->html) return an_usage_error("report", "--html OUT.html is needed");
    return AN_EXIT_OK;
}

static int work(an_cmd *c)
{
    report_opts *o = c->own;
    an_report rp;
    memset(&rp, 0, sizeof rp);
    rp.every = o->every;
    rp.speedup = o->speedup;
    rp.inputs = c->args.pos;
    rp.n_inputs = c->args.n_pos;
    rp.cpu_stages = o->cpu_stages;
    rp.n_cpu_stages = o->n_cpu_stages;
    an_trace *t = &c->trace;
    int rc = AN_EXIT_OK;
    rp.steps = c->window;
    an_pipe p;
    memset(&p, 0, sizeof p);
    rp.t = t;
    rp.p = &p;
    if (!o->have_every) rp.every = an_trace_every(t);
    if (rp.steps.kind != AN_WIN_ALL) {
        int64_t t0, t1;
        rc = an_window_resolve(&rp.steps, t, &t0, &t1); /* a bad --steps fails before anything is written */
    }
    if (!rc) rc = an_report_cpu_check(t, o->cpu_stages, o->n_cpu_stages);
    if (!rc) {
        an_pipe_opts po;
        memset(&po, 0, sizeof po);
        po.gpu_idle = 1;
        rc = an_pipe_compute(&p, t, &po);
    }
    if (!rc) {
        rp.loads = calloc(p.n_roles ? p.n_roles : 1, sizeof *rp.loads);
        rp.first = malloc(((size_t)p.n_bins + 1) * sizeof *rp.first);
        if (!rp.loads || !rp.first || an_html_palette_init(&rp.pal, &p)) rc = an_report_oom();
    }
    if (!rc) {
        an_pipe_loads(&p, 0, p.n_bins, rp.loads);
        an_pipe_verdict(&p, 0, p.n_bins, rp.loads, rp.speedup, &rp.v);
        rp.n_windows = an_pipe_windows(&p, rp.every, rp.first);
        if (rp.n_windows > MAX_WINDOWS) {
            rp.every *= (rp.n_windows + MAX_WINDOWS - 1) / MAX_WINDOWS;
            rp.n_windows = an_pipe_windows(&p, rp.every, rp.first);
        }
    }
    an_file f;
    memset(&f, 0, sizeof f);
    if (!rc) rc = an_file_open(&f, "report", o->html, o->overwrite);
    if (!rc) {
        rp.f = f.f;
        rc = write_report(&rp);
        int crc = an_file_close(&f, rc == AN_EXIT_OK);
        if (!rc) rc = crc;
        /* say where it went (the one line on stdout), unless stdout was the page */
        if (!rc && strcmp(o->html, "-") != 0 && (printf("%s\n", o->html) < 0 || fflush(stdout) != 0)) {
            an_error("report: cannot write to stdout");
            rc = AN_EXIT_FAIL;
        }
    }
    free(rp.pal.stage);
    free(rp.pal.hex);
    free(rp.loads);
    free(rp.first);
    an_pipe_free(&p);
    return rc;
}

const an_cmd_def an_cmd_report = {
    .name = "report",
    .usage = help,
    .flags = AN_RUN_WINDOW | AN_RUN_WINDOW_LAST | AN_RUN_TRACE | AN_RUN_WARN,
    .opts = opts,
    .own_size = sizeof(report_opts),
    .init = init,
    .option = option,
    .check = check,
    .work = work,
};
