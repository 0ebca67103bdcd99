/* cmd_report.c: `analyze report FILE --html OUT.html`: one self-contained
 * HTML file that tells the story of a run, readable offline.
 *
 * Inline CSS and inline SVG only: no script, no external font, image or
 * link, so the file opens anywhere and shows the same. Sections: run
 * metadata; the bottleneck verdict (verdict.c's story) with the roles
 * table; per role, a stacked chart of where its time went per window (stage
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
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "flow.h"
#include "queues.h"
#include "../tracer/st_palette.h" /* the stage colours NVTX uses too */
#include "verdict.h"

static const char help[] =
    "usage: analyze report FILE --html OUT.html [--steps A:B] [--every N] [--speedup K] [--overwrite]\n"
    "\n"
    "Writes one self-contained HTML file (inline CSS and SVG, no scripts, no external\n"
    "fonts or links: it reads offline) with:\n"
    "  - the run's metadata;\n"
    "  - the bottleneck verdict and the roles table (as `analyze bottleneck`);\n"
    "  - per role, where its time went per window of N steps: stacked shares of its\n"
    "    threads' wall time per stage (self time) and idle; a stage has the same colour in\n"
    "    every chart (blues: wait_input, oranges: wait_output, purples: sync, greens: comm,\n"
    "    reds: copy, grey: idle, strong colours: work);\n"
    "  - a timeline of a few steps: one lane per thread, ranges coloured by stage, nested\n"
    "    ranges drawn thinner inside their parents, step marks as dashed lines; ranges\n"
    "    narrower than a pixel are merged per pixel column;\n"
    "  - queue depth over time (counters named like *queue_depth*: mean per pixel column,\n"
    "    with the min-max band);\n"
    "  - tokens/s per window;\n"
    "  - with flow records, the item flow: `analyze flow`'s latency breakdown;\n"
    "  - the summary table (per thread and stage, as `analyze summary`).\n"
    "\n"
    "options:\n"
    "  --html OUT.html  the output file ('-' writes to stdout)\n"
    "  --steps A:B      the timeline's steps (default: three steps in the middle of the run)\n"
    "  --every N        steps per window of the charts (default: meta profile_interval, else\n"
    "                   10; more when the run has over 150 windows)\n"
    "  --speedup K      the verdict's what-if factor (default 2)\n"
    "  --overwrite      replace an existing output file\n";

enum { OPT_HTML = 1, OPT_EVERY, OPT_SPEEDUP, OPT_OVERWRITE };
static const an_opt opts[] = {
    {"html", 1, OPT_HTML},       {"steps", 1, AN_OPT_STEPS},         {"every", 1, OPT_EVERY},
    {"speedup", 1, OPT_SPEEDUP}, {"overwrite", 0, OPT_OVERWRITE}, {"help", 0, AN_OPT_HELP},
    {NULL, 0, 0},
};

#define CHART_W 1100       /* SVG width of every chart */
#define PLOT_X 60          /* left margin: axis labels */
#define PLOT_W (CHART_W - PLOT_X - 20)
#define MAX_WINDOWS 150
#define LANE_H 22
#define MAX_DEPTH 8        /* timeline depths drawn; deeper ranges go to the last */
#define LABEL_W 170        /* timeline: thread names */
#define STEP_LABEL_CHAR_W 6.5 /* width of a character of an 11px label, generous */

static int oom(void)
{
    an_error("out of memory");
    return AN_EXIT_FAIL;
}

/* ---- escaping ------------------------------------------------------------------------------------ */

/* Length of the valid UTF-8 sequence at s (1..4), or 0. */
static int utf8_seq(const unsigned char *s)
{
    unsigned c = s[0], cp, min;
    int n;
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) { n = 2; cp = c & 0x1f; min = 0x80; }
    else if (c >= 0xe0 && c <= 0xef) { n = 3; cp = c & 0x0f; min = 0x800; }
    else if (c >= 0xf0 && c <= 0xf4) { n = 4; cp = c & 0x07; min = 0x10000; }
    else return 0;
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return n;
}

/* Text or attribute value for HTML and SVG (XML-safe). */
static void esc(FILE *f, const char *str)
{
    const unsigned char *s = (const unsigned char *)(str ? str : "");
    while (*s) {
        unsigned char c = *s;
        switch (c) {
        case '&': fputs("&amp;", f); s++; continue;
        case '<': fputs("&lt;", f); s++; continue;
        case '>': fputs("&gt;", f); s++; continue;
        case '"': fputs("&quot;", f); s++; continue;
        case '\'': fputs("&#39;", f); s++; continue;
        default: break;
        }
        if (c < 0x20 || c == 0x7f) {
            putc('?', f);
            s++;
            continue;
        }
        int n = utf8_seq(s);
        if (!n) {
            fputs("&#xFFFD;", f);
            s++;
        } else {
            fwrite(s, 1, (size_t)n, f);
            s += n;
        }
    }
}

/* Preformatted text: escaped as esc() does, newlines kept. */
static void esc_pre(FILE *f, const char *text)
{
    for (const char *line = text, *nl; *line; line = nl + 1) {
        nl = strchr(line, '\n');
        size_t n = nl ? (size_t)(nl - line) : strlen(line);
        char *copy = strndup(line, n);
        if (copy) esc(f, copy);
        free(copy);
        putc('\n', f);
        if (!nl) break;
    }
}

/* ---- colours --------------------------------------------------------------------------------------- */

/* Stage colours: the shared palette (tracer/st_palette.h), as NVTX gives
 * them: the i-th stage of a kind, in id order, takes the kind's i-th colour. */
#define IDLE_COLOUR "#e6e6e6"

typedef struct palette {
    const char **stage; /* [n_stages + 1]; the last is idle */
    char (*hex)[8];     /* [n_stages] the strings stage[] points to */
} palette;

static int palette_init(palette *pal, const an_pipe *p)
{
    pal->stage = calloc(p->n_cols, sizeof *pal->stage);
    pal->hex = calloc(p->n_stages ? p->n_stages : 1, sizeof *pal->hex);
    if (!pal->stage || !pal->hex) return -1;
    uint32_t used[ST_KIND_COUNT] = {0};
    for (uint32_t s = 0; s < p->n_stages; s++) {
        st_kind k = st_reader_stage(p->trace->r, s)->kind;
        uint32_t ki = (unsigned)k < ST_KIND_COUNT ? (uint32_t)k : 0;
        snprintf(pal->hex[s], sizeof pal->hex[s], "#%06x", (unsigned)st_palette_rgb((st_kind)ki, used[ki]++));
        pal->stage[s] = pal->hex[s];
    }
    pal->stage[p->n_stages] = IDLE_COLOUR;
    return 0;
}

static const char *col_name(const an_pipe *p, uint32_t col)
{
    return col < p->n_stages ? st_reader_stage(p->trace->r, col)->name : "idle";
}

static const char *col_kind(const an_pipe *p, uint32_t col)
{
    return col < p->n_stages ? st_kind_name(st_reader_stage(p->trace->r, col)->kind) : "no range";
}

/* ---- small SVG helpers ------------------------------------------------------------------------------- */

static void svg_open(FILE *f, int w, int h, const char *label)
{
    /* Inline SVG in HTML needs no xmlns: the file names no URL at all. */
    fprintf(f, "<svg width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\" aria-label=\"",
            w, h, w, h);
    esc(f, label);
    fputs("\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"11\">\n", f);
}

/* Nice axis step: 1, 2 or 5 times a power of ten, giving about `ticks` ticks. */
static double nice_step(double range, int ticks)
{
    if (!(range > 0)) return 1;
    double raw = range / ticks, mag = pow(10, floor(log10(raw))), r = raw / mag;
    return (r < 1.5 ? 1 : r < 3.5 ? 2 : r < 7.5 ? 5 : 10) * mag;
}

static void fmt_num(char *buf, size_t size, double v)
{
    double a = fabs(v);
    if (a >= 1e6) snprintf(buf, size, "%.3gM", v / 1e6);
    else if (a >= 1e4) snprintf(buf, size, "%.3gk", v / 1e3);
    else snprintf(buf, size, "%.4g", v);
}

/* y axis with grid lines for [0, y_max] over a plot of height h at (x, y). */
static void y_axis(FILE *f, int x, int y, int w, int h, double y_max, const char *unit)
{
    double step = nice_step(y_max, 4);
    for (double v = 0; v <= y_max * 1.0001; v += step) {
        double py = y + h - v / y_max * h;
        char label[32];
        fmt_num(label, sizeof label, v);
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>", x, py, x + w, py);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" fill=\"#555\">%s%s</text>\n", x - 4, py + 4, label, unit);
    }
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#888\"/>\n", x, y + h, x + w, y + h);
}

/* ---- sections ---------------------------------------------------------------------------------------------- */

typedef struct report {
    FILE *f;
    an_trace *t;
    an_pipe *p;
    palette pal;
    an_role_load *loads;
    an_verdict v;
    uint64_t every;          /* chart windows */
    uint32_t n_windows;
    uint32_t *first;         /* [n_windows + 1] bins */
    an_window_spec steps;    /* timeline */
    double speedup;
} report;

static void put_meta_row(FILE *f, const char *key, const char *value)
{
    fputs("<tr><th>", f);
    esc(f, key);
    fputs("</th><td>", f);
    esc(f, value ? value : "-");
    fputs("</td></tr>\n", f);
}

static void section_meta(report *rp)
{
    FILE *f = rp->f;
    an_trace *t = rp->t;
    static const char *const keys[] = {"program", "run_id", "host", "pid", "rank", "world_size", "start_utc",
                                       "status", "tool_version", "clock", "profile_interval", "dropped_events", "argv"};
    fputs("<section id=\"run\"><h2>Run</h2><table class=\"meta\">\n", f);
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
    fputs("</table></section>\n", f);
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
static void put_verdict_window(const report *rp)
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
static int put_device_roles(report *rp)
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
            esc(f, r < 0 ? "all (union)" : p->role_names[r]);
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
static void put_headline(report *rp)
{
    FILE *f = rp->f;
    const an_pipe *p = rp->p;
    const an_verdict *v = &rp->v;
    const char *stage = v->stage >= 0 ? st_reader_stage(rp->t->r, (uint32_t)v->stage)->name : NULL;
    fputs("<p class=\"headline\">", f);
    if (v->device >= 0) {
        fprintf(f, "GPU %d sets the pace: it is busy %.0f%% of the time", p->devices[v->device], v->load_pct);
        if (v->role >= 0) {
            fputs(", most of it with work launched by ", f);
            esc(f, p->role_names[v->role]);
        }
    } else if (v->role >= 0 && v->saturated) {
        fputs("The ", f);
        esc(f, p->role_names[v->role]);
        fprintf(f, " role sets the pace: its threads are busy %.0f%% of the time", v->load_pct);
    } else {
        fputs("No role or GPU is saturated: the pipeline is not held back by one stage", f);
    }
    if (stage && isfinite(v->whatif_factor)) {
        fputs(". Making ", f);
        esc(f, stage);
        fprintf(f, " %gx faster would speed the run up by at most %.2fx", v->speedup, v->whatif_factor);
    }
    fputs(".</p>\n", f);
}

static int section_verdict(report *rp)
{
    FILE *f = rp->f;
    const an_pipe *p = rp->p;
    an_window_verdict *w = NULL;
    uint32_t nw = an_pipe_window_verdicts(p, rp->every, &w);
    if (!w) return AN_EXIT_FAIL;
    char *story = an_pipe_story(p, rp->loads, &rp->v, w, nw, rp->every);
    free(w);
    if (!story) return oom();
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
        return oom();
    }
    for (char *line = story, *nl; *line; line = nl + 1) {
        nl = strchr(line, '\n');
        if (!nl) nl = line + strlen(line) - 1;
        *nl = '\0';
        int shown = !strncmp(line, "Bottleneck:", 11) || !strncmp(line, "Evidence:", 9) || !strncmp(line, "What if", 7) ||
                    !strncmp(line, "No role", 7);
        FILE *to = shown ? f : fold;
        fputs(shown ? "<p>" : "<p class=\"more\">", to);
        esc(to, line);
        fputs("</p>\n", to);
    }
    fputs("<p class=\"more\">GPU idle: ", fold);
    esc(fold, gpu_text);
    fputs(".</p>\n", fold);
    if (fclose(fold) != 0) {
        free(folded);
        free(story);
        return oom();
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
        fputs("<table class=\"data\" id=\"gpu-table\"><caption>GPU idle split over ", f);
        esc(f, desc);
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
                esc(f, ti ? ti->name : "(unknown)");
                fputs(" / ", f);
                esc(f, si ? si->name : "(no stage)");
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
    fputs("<table class=\"data\" id=\"roles-table\"><tr><th>role</th><th>threads</th><th>busy</th><th>work</th>"
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
        esc(f, row->role);
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
        esc(f, row->top_stage ? row->top_stage : "-");
        if (p->n_devices) {
            fputs("</td><td>", f);
            esc(f, row->top_gpu_stage ? row->top_gpu_stage : "-");
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
            esc(f, q->name);
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

static void legend(FILE *f, const report *rp, const uint8_t *shown)
{
    fputs("<div class=\"legend\">", f);
    for (uint32_t c = 0; c < rp->p->n_cols; c++) {
        if (!shown[c]) continue;
        fprintf(f, "<span><i style=\"background:%s\"></i>", rp->pal.stage[c]);
        esc(f, col_name(rp->p, c));
        fputs(" <small>", f);
        esc(f, col_kind(rp->p, c));
        fputs("</small></span>", f);
    }
    fputs("</div>\n", f);
}

static void x_window_labels(FILE *f, const report *rp, int y, double bar_w)
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

static int section_breakdown(report *rp)
{
    FILE *f = rp->f;
    const an_pipe *p = rp->p;
    int64_t *ns = calloc(p->n_cols, sizeof *ns);
    uint8_t *shown = calloc(p->n_cols, 1);
    if (!ns || !shown) {
        free(ns);
        free(shown);
        return oom();
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
        char title[300], name[128];
        snprintf(title, sizeof title, "%s (%u thread%s): share of time per stage, per window",
                 an_clean(p->role_names[r], name, sizeof name), p->role_threads[r], p->role_threads[r] == 1 ? "" : "s");
        fputs("<div class=\"chart\"><h3>", f);
        esc(f, title);
        fputs("</h3>\n", f);
        svg_open(f, CHART_W, height, title);
        y_axis(f, PLOT_X, top, PLOT_W, h, 100, "%");
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
                esc(f, col_name(p, c));
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
        legend(f, rp, shown);
        fputs("</div>\n", f);
    }
    fputs("</section>\n", f);
    free(ns);
    free(shown);
    return AN_EXIT_OK;
}

/* ---- timeline ------------------------------------------------------------------------------------------- */

/* One row (thread, depth): ranges of at least a pixel are drawn as they are;
 * narrower ones are gathered per pixel column and drawn as one rectangle
 * (the colour of the stage whose ranges cover most of it, opacity the share
 * of the column they all cover). */
typedef struct tl_row {
    FILE *f;
    double y, h;
    const palette *pal;
    const an_pipe *p;
    int64_t col;          /* pixel column gathered, -1 none */
    double cover;         /* fraction of the column covered */
    double *stage_cover;  /* [n_stages] per stage, in the column */
    uint64_t merged;      /* ranges in the column */
    uint64_t rects;
} tl_row;

static void tl_flush(tl_row *row)
{
    if (row->col < 0) return;
    uint32_t best = 0;
    for (uint32_t s = 1; s < row->p->n_stages; s++)
        if (row->stage_cover[s] > row->stage_cover[best]) best = s;
    double op = row->cover > 1 ? 1 : row->cover < 0.25 ? 0.25 : row->cover;
    fprintf(row->f, "<rect x=\"%lld\" y=\"%.1f\" width=\"1\" height=\"%.1f\" fill=\"%s\" fill-opacity=\"%.2f\"><title>%llu ranges, mostly ",
            (long long)row->col + LABEL_W, row->y, row->h, row->pal->stage[best], op, (unsigned long long)row->merged);
    esc(row->f, col_name(row->p, best));
    fputs("</title></rect>\n", row->f);
    row->rects++;
    row->col = -1;
}

static void tl_range(tl_row *row, uint32_t stage, double x0, double x1, int64_t dur_ns)
{
    if (x1 - x0 >= 1.0) {
        tl_flush(row);
        fprintf(row->f, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\"><title>", x0 + LABEL_W,
                row->y, x1 - x0, row->h, row->pal->stage[stage]);
        esc(row->f, col_name(row->p, stage));
        fprintf(row->f, " %.3f ms</title></rect>\n", (double)dur_ns / 1e6);
        row->rects++;
        return;
    }
    int64_t col = (int64_t)floor(x0);
    if (col != row->col) {
        tl_flush(row);
        row->col = col;
        row->cover = 0;
        row->merged = 0;
        memset(row->stage_cover, 0, row->p->n_stages * sizeof *row->stage_cover);
    }
    row->cover += x1 - x0;
    row->stage_cover[stage] += x1 - x0;
    row->merged++;
}

typedef struct lane {
    uint32_t thread;
    uint32_t role;
} lane;

/* GPU lanes: one per (device, stream) with kernels, copies or memsets in the
 * window, under the CPU lanes. Records of at least a pixel are drawn as they
 * are; narrower ones merged per pixel column (the colour of the kind that
 * covers most of it), so a lane has at most about plot-width rectangles. */
static const char *const gpu_kind_colours[4] = {"#999999", "#2ca02c", "#ff7f0e", "#9467bd"}; /* -, kernel, memcpy, memset */

#define LANE_LAUNCHERS 4 /* launching threads tracked per GPU lane */

typedef struct gpu_lane {
    int32_t device;
    uint32_t stream;
    /* the threads whose launches ran on it, with their device time in the
     * window; a lane's label names the largest, and how many others */
    int64_t launcher[LANE_LAUNCHERS], launcher_ns[LANE_LAUNCHERS];
    uint32_t n_launchers, more_launchers;
} gpu_lane;

static void lane_add_launcher(gpu_lane *l, int64_t thread, int64_t ns)
{
    if (thread < 0) return;
    for (uint32_t i = 0; i < l->n_launchers; i++)
        if (l->launcher[i] == thread) {
            l->launcher_ns[i] += ns;
            return;
        }
    if (l->n_launchers < LANE_LAUNCHERS) {
        l->launcher[l->n_launchers] = thread;
        l->launcher_ns[l->n_launchers++] = ns;
    } else {
        l->more_launchers = 1;
    }
}

typedef struct gpu_row {
    FILE *f;
    double y;
    int64_t col;
    double cover, kind_cover[4];
    uint64_t merged, rects;
} gpu_row;

static void gpu_flush(gpu_row *row)
{
    if (row->col < 0) return;
    int best = 1;
    for (int k = 2; k < 4; k++)
        if (row->kind_cover[k] > row->kind_cover[best]) best = k;
    double op = row->cover > 1 ? 1 : row->cover < 0.25 ? 0.25 : row->cover;
    fprintf(row->f,
            "<rect class=\"gpu\" x=\"%lld\" y=\"%.1f\" width=\"1\" height=\"%d\" fill=\"%s\" fill-opacity=\"%.2f\">"
            "<title>%llu GPU records, mostly %s</title></rect>\n",
            (long long)row->col + LABEL_W, row->y, LANE_H, gpu_kind_colours[best], op, (unsigned long long)row->merged,
            st_gpu_kind_name((uint32_t)best));
    row->rects++;
    row->col = -1;
}

static void gpu_rec(gpu_row *row, const st_gpu_row *g, double x0, double x1)
{
    int k = g->rec.kind >= 1 && g->rec.kind <= 3 ? (int)g->rec.kind : 0;
    if (x1 - x0 >= 1.0) {
        gpu_flush(row);
        fprintf(row->f, "<rect class=\"gpu\" x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%d\" fill=\"%s\"><title>",
                x0 + LABEL_W, row->y, x1 - x0, LANE_H, gpu_kind_colours[k]);
        fputs(st_gpu_kind_name(g->rec.kind), row->f);
        if (g->name) {
            fputs(" ", row->f);
            esc(row->f, g->name);
        } else if (g->rec.kind == ST_GPU_MEMCPY) {
            fprintf(row->f, " %s %llu bytes", st_gpu_copy_name(g->rec.copy_kind), (unsigned long long)g->rec.bytes);
        }
        fprintf(row->f, " %.3f ms</title></rect>\n", (double)g->rec.dur_ns / 1e6);
        row->rects++;
        return;
    }
    int64_t col = (int64_t)floor(x0);
    if (col != row->col) {
        gpu_flush(row);
        row->col = col;
        row->cover = 0;
        memset(row->kind_cover, 0, sizeof row->kind_cover);
        row->merged = 0;
    }
    row->cover += x1 - x0;
    row->kind_cover[k] += x1 - x0;
    row->merged++;
}

/* The (device, stream) pairs with device work in [t0, t1), in the
 * iterator's order (device, then stream). */
static int gpu_lanes(an_trace *t, int64_t t0, int64_t t1, gpu_lane **out, uint32_t *n)
{
    *out = NULL;
    *n = 0;
    int has = st_reader_has_gpu(t->r);
    if (has < 0) return an_trace_fail(t);
    if (!has) return AN_EXIT_OK;
    st_gpu_iter *it;
    if (st_gpu_iter_open(&it, t->r, -1, t0, t1)) return an_trace_fail(t);
    st_gpu_row g;
    int r;
    while ((r = st_gpu_iter_next(it, &g)) == 1) {
        if (g.rec.kind < ST_GPU_KERNEL || g.rec.kind > ST_GPU_MEMSET) continue;
        uint32_t i = 0;
        while (i < *n && !((*out)[i].device == g.device && (*out)[i].stream == g.stream)) i++;
        if (i == *n) {
            gpu_lane *nv = realloc(*out, (*n + 1) * sizeof *nv);
            if (!nv) {
                st_gpu_iter_close(it);
                return oom();
            }
            *out = nv;
            memset(&nv[*n], 0, sizeof nv[*n]);
            nv[*n].device = g.device;
            nv[*n].stream = g.stream;
            (*n)++;
        }
        int64_t e = g.rec.start_ns + g.rec.dur_ns;
        lane_add_launcher(&(*out)[i], g.thread, (e > t1 ? t1 : e) - (g.rec.start_ns < t0 ? t0 : g.rec.start_ns));
    }
    st_gpu_iter_close(it);
    return r < 0 ? an_trace_fail(t) : AN_EXIT_OK;
}


/* Under a GPU lane's name: who launched its work ("by target0 (target)",
 * "+1" when others did too), the launcher's role in its role colour. */
static void put_launchers(FILE *f, const report *rp, const gpu_lane *l, double y)
{
    uint32_t best = 0;
    for (uint32_t i = 1; i < l->n_launchers; i++)
        if (l->launcher_ns[i] > l->launcher_ns[best]) best = i;
    fprintf(f, "<text class=\"gpu-launcher\" x=\"%d\" y=\"%.1f\" text-anchor=\"end\" font-size=\"9\" fill=\"#555\">",
            LABEL_W - 6, y);
    if (!l->n_launchers) {
        fputs("launcher unknown</text>\n", f);
        return;
    }
    const st_thread_info *ti = st_reader_thread_by_id(rp->t->r, (uint32_t)l->launcher[best]);
    fputs("by ", f);
    esc(f, ti ? ti->name : "?");
    fputs(" (", f);
    esc(f, ti ? ti->role : "?");
    fputs(")", f);
    uint32_t others = l->n_launchers - 1 + l->more_launchers;
    if (others) fprintf(f, " +%u%s", others, l->more_launchers ? " or more" : "");
    fputs("</text>\n", f);
}

static const an_pipe *g_lane_pipe; /* qsort has no context argument */

static int cmp_lane(const void *a, const void *b)
{
    const lane *x = a, *y = b;
    if (x->role != y->role) return x->role < y->role ? -1 : 1;
    int c = strcmp(st_reader_thread(g_lane_pipe->trace->r, x->thread)->name,
                   st_reader_thread(g_lane_pipe->trace->r, y->thread)->name);
    return c ? c : (x->thread < y->thread ? -1 : x->thread > y->thread);
}

static int section_timeline(report *rp)
{
    FILE *f = rp->f;
    const an_pipe *p = rp->p;
    an_trace *t = rp->t;
    int64_t t0, t1;
    if (rp->steps.kind == AN_WIN_ALL) {
        uint32_t n = st_reader_n_steps(t->r);
        if (n >= 2) {
            uint32_t a = n / 2 >= 2 ? n / 2 - 2 : 0, b = a + 3 < n ? a + 3 : n - 1;
            t0 = st_reader_step(t->r, a)->ts_ns;
            t1 = st_reader_step(t->r, b)->ts_ns;
        } else {
            int64_t span = t->span_t1_ns - t->span_t0_ns;
            t0 = t->span_t0_ns + span / 2 - span / 20;
            t1 = t->span_t0_ns + span / 2 + span / 20 + 1;
        }
    } else {
        int rc = an_window_resolve(&rp->steps, t, &t0, &t1);
        if (rc) return rc;
    }
    if (t1 <= t0) t1 = t0 + 1;
    uint32_t nt = p->n_threads;
    lane *lanes = calloc(nt ? nt : 1, sizeof *lanes);
    if (!lanes) return oom();
    for (uint32_t i = 0; i < nt; i++) lanes[i] = (lane){i, p->thread_role[i]};
    g_lane_pipe = p;
    qsort(lanes, nt, sizeof *lanes, cmp_lane);
    gpu_lane *gl = NULL;
    uint32_t n_gl = 0;
    int grc = gpu_lanes(t, t0, t1, &gl, &n_gl);
    if (grc) {
        free(lanes);
        return grc;
    }
    const int plot_w = CHART_W - LABEL_W - 30, top = 24;
    const int height = top + (int)(nt + n_gl) * (LANE_H + 4) + (n_gl ? 8 : 0) + 30;
    const double scale = (double)plot_w / (double)(t1 - t0);
    char a[40], b[40];
    an_fmt_fixed(a, t0 - t->origin_ns, 9, 3);
    an_fmt_fixed(b, t1 - t->origin_ns, 9, 3);
    fputs("<section id=\"timeline\"><h2>Timeline", f);
    uint64_t step_a = 0, step_b = 0;
    int has_a = 0, has_b = 0;
    for (uint32_t i = 0; i < st_reader_n_steps(t->r); i++) {
        const st_step_info *s = st_reader_step(t->r, i);
        if (s->ts_ns == t0) { step_a = s->step; has_a = 1; }
        if (s->ts_ns == t1) { step_b = s->step; has_b = 1; }
    }
    if (has_a && has_b) fprintf(f, " of steps %llu-%llu", (unsigned long long)step_a + 1, (unsigned long long)step_b);
    fprintf(f, " (%s-%s s from the trace start)</h2>\n<p class=\"note\">One lane per thread; ranges coloured by stage, "
               "nested ranges thinner inside their parents; dashed lines are step marks. Ranges narrower than a pixel "
               "are merged per pixel column (opacity: how much of it they cover).%s</p>\n",
            a, b,
            n_gl ? " Under them, one lane per GPU device and stream: kernels, copies and memsets coloured by kind, "
                   "merged per pixel column the same way." : "");
    svg_open(f, CHART_W, height, "timeline");
    /* time axis */
    double step = nice_step((double)(t1 - t0) / 1e6, 8);
    for (double ms = 0; ms <= (double)(t1 - t0) / 1e6 + 1e-9; ms += step) {
        double x = LABEL_W + ms * 1e6 * scale;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#eee\"/>", x, top - 4, x, height - 26);
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" fill=\"#555\">%g ms</text>\n", x, height - 12, ms);
    }
    int rc = AN_EXIT_OK;
    uint64_t rects = 0;
    uint8_t *shown = calloc(p->n_cols, 1);
    double *covers = calloc((size_t)MAX_DEPTH * p->n_cols, sizeof *covers);
    if (!shown || !covers) rc = oom();
    for (uint32_t li = 0; li < nt && !rc; li++) {
        uint32_t ti = lanes[li].thread;
        const st_thread_info *th = st_reader_thread(t->r, ti);
        double y = top + li * (LANE_H + 4);
        fprintf(f, "<rect x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%d\" fill=\"#fafafa\"/>", LABEL_W, y, plot_w, LANE_H);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" fill=\"#222\">", LABEL_W - 6, y + LANE_H / 2 + 4);
        esc(f, th->name);
        fputs(" <tspan fill=\"#888\">(", f);
        esc(f, th->role);
        fputs(")</tspan></text>\n", f);
        tl_row rows[MAX_DEPTH];
        for (int d = 0; d < MAX_DEPTH; d++) {
            double inset = d * 2.5;
            rows[d] = (tl_row){f, y + inset, LANE_H - 2 * inset < 3 ? 3 : LANE_H - 2 * inset, &rp->pal, p, -1, 0,
                               covers + (size_t)d * p->n_cols, 0, 0};
        }
        /* The iterator gives a thread's ranges in end order: children before
         * their parent. Ranges of one depth never overlap, so per depth they
         * come in time order; one pass per depth draws parents first and
         * their (thinner) children on top. The window is a few steps, so the
         * passes are cheap. */
        uint32_t max_depth = 0;
        for (uint32_t pass = 0; pass <= max_depth && !rc; pass++) {
            st_range_iter *it = NULL;
            if (st_range_iter_open(&it, t->r, th->id, t0, t1)) {
                rc = an_trace_fail(t);
                break;
            }
            st_range r;
            int n;
            while ((n = st_range_iter_next(it, &r)) == 1) {
                uint32_t d = r.depth < MAX_DEPTH ? r.depth : MAX_DEPTH - 1;
                if (d > max_depth) max_depth = d;
                if (d != pass) continue;
                int64_t s0 = r.start_ns < t0 ? t0 : r.start_ns, s1 = r.start_ns + r.dur_ns > t1 ? t1 : r.start_ns + r.dur_ns;
                if (s1 < s0 || r.stage >= p->n_stages) continue;
                shown[r.stage] = 1;
                tl_range(&rows[d], r.stage, (double)(s0 - t0) * scale, (double)(s1 - t0) * scale, r.dur_ns);
            }
            st_range_iter_close(it);
            if (n < 0) rc = an_trace_fail(t);
            tl_flush(&rows[pass]);
        }
        for (int d = 0; d < MAX_DEPTH; d++) rects += rows[d].rects;
    }
    /* GPU lanes */
    for (uint32_t li = 0; li < n_gl && !rc; li++) {
        double y = top + (nt + li) * (LANE_H + 4) + 8;
        fprintf(f, "<rect x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%d\" fill=\"#f4f7f4\"/>", LABEL_W, y, plot_w, LANE_H);
        fprintf(f, "<text class=\"gpu-lane\" x=\"%d\" y=\"%.1f\" text-anchor=\"end\" fill=\"#222\">GPU %d <tspan fill=\"#888\">"
                   "(stream %u)</tspan></text>\n",
                LABEL_W - 6, y + 10, gl[li].device, gl[li].stream);
        put_launchers(f, rp, &gl[li], y + 20);
        gpu_row row = {f, y, -1, 0, {0, 0, 0, 0}, 0, 0};
        st_gpu_iter *it = NULL;
        if (st_gpu_iter_open(&it, t->r, gl[li].device, t0, t1)) {
            rc = an_trace_fail(t);
            break;
        }
        st_gpu_row g;
        int n;
        while ((n = st_gpu_iter_next(it, &g)) == 1) {
            if (g.stream != gl[li].stream || g.rec.kind < ST_GPU_KERNEL || g.rec.kind > ST_GPU_MEMSET) continue;
            int64_t e = g.rec.start_ns + g.rec.dur_ns;
            int64_t s0 = g.rec.start_ns < t0 ? t0 : g.rec.start_ns, s1 = e > t1 ? t1 : e;
            if (s1 < s0) continue;
            gpu_rec(&row, &g, (double)(s0 - t0) * scale, (double)(s1 - t0) * scale);
        }
        gpu_flush(&row);
        st_gpu_iter_close(it);
        if (n < 0) rc = an_trace_fail(t);
        rects += row.rects;
    }
    /* step marks; a label that would overlap the previous one is left out
     * (its dashed line stays) */
    double label_end = -INFINITY;
    for (uint32_t i = 0; i < st_reader_n_steps(t->r) && !rc; i++) {
        const st_step_info *s = st_reader_step(t->r, i);
        if (s->ts_ns < t0 || s->ts_ns > t1) continue;
        double x = LABEL_W + (double)(s->ts_ns - t0) * scale;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#333\" stroke-dasharray=\"4 3\"/>", x, top - 8,
                x, height - 26);
        char label[32];
        int len = snprintf(label, sizeof label, "step %llu", (unsigned long long)s->step);
        double half = len * STEP_LABEL_CHAR_W / 2;
        if (x - half < label_end + 4) continue;
        label_end = x + half;
        fprintf(f, "<text class=\"step-label\" x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" fill=\"#333\">%s</text>\n", x,
                top - 10, label);
    }
    fputs("</svg>\n", f);
    if (!rc) {
        legend(f, rp, shown);
        if (n_gl)
            fprintf(f, "<p class=\"legend\">GPU: <span><i style=\"background:%s\"></i>kernel</span> "
                       "<span><i style=\"background:%s\"></i>memcpy</span> <span><i style=\"background:%s\"></i>memset</span></p>\n",
                    gpu_kind_colours[1], gpu_kind_colours[2], gpu_kind_colours[3]);
        fprintf(f, "<p class=\"note\">%llu rectangles.</p>\n", (unsigned long long)rects);
    }
    fputs("</section>\n", f);
    free(shown);
    free(covers);
    free(lanes);
    free(gl);
    return rc;
}

/* ---- queue depth ------------------------------------------------------------------------------------------ */

static int section_queues(report *rp)
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
        return oom();
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
        esc(f, title);
        fputs("</h3>\n", f);
        svg_open(f, CHART_W, height, title);
        y_axis(f, PLOT_X, top, PLOT_W, h, y_max * 1.05, "");
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
        double st = nice_step(span_s, 8);
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

static void section_tokens(report *rp)
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
    svg_open(f, CHART_W, height, "tokens per second per window");
    y_axis(f, PLOT_X, top, PLOT_W, h, y_max * 1.1, "");
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
static int section_ranks(report *rp)
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
    svg_open(f, CHART_W, height, "busy and waiting time per rank");
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
        esc(f, c->stage);
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


static int section_summary(report *rp)
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
    lane *order = calloc(fs->n_threads ? fs->n_threads : 1, sizeof *order);
    if (!order) {
        an_stats_free(&s);
        return oom();
    }
    for (uint32_t i = 0; i < fs->n_threads; i++)
        order[i] = (lane){i, i < rp->p->n_threads ? rp->p->thread_role[i] : UINT32_MAX};
    g_lane_pipe = rp->p;
    qsort(order, fs->n_threads, sizeof *order, cmp_lane);
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
            esc(f, th->name);
            fputs("</td><td>", f);
            esc(f, th->role);
            fputs("</td><td>", f);
            esc(f, st_reader_stage(rp->t->r, (uint32_t)best)->name);
            fputs("</td><td>", f);
            esc(f, st_kind_name(st_reader_stage(rp->t->r, (uint32_t)best)->kind));
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
        esc(f, th->name);
        fputs("</td><td>", f);
        esc(f, th->role);
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
static int section_flow(report *rp)
{
    int has = st_reader_has_flows(rp->t->r);
    if (has < 0) return an_trace_fail(rp->t);
    if (!has) return AN_EXIT_OK;
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (!m) return oom();
    int rc = an_flow_text(rp->t, m);
    if (fclose(m) != 0 && !rc) rc = oom();
    if (!rc) {
        FILE *f = rp->f;
        fputs("<section id=\"flow\"><h2>Item flow: where each batch spent its time</h2>\n<p class=\"note\">Each item "
              "followed from its first flow out to its last flow in (st_flow_out / st_flow_in): end-to-end latency, "
              "time in each queue and in each role, the latency breakdown by stage and each step&#39;s critical path, "
              "as <code>analyze flow</code> prints them.</p>\n<pre class=\"flow\">",
              f);
        esc_pre(f, text);
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
    ".verdict summary{cursor:pointer;color:#4e79a7}\n";

static int write_report(report *rp)
{
    FILE *f = rp->f;
    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n<title>stagetrace report: ", f);
    esc(f, rp->t->path);
    fprintf(f, "</title>\n<style>\n%s</style>\n</head>\n<body>\n<h1>stagetrace report: ", css);
    esc(f, rp->t->path);
    fputs("</h1>\n", f);
    section_meta(rp);
    int rc = section_verdict(rp);
    if (!rc) rc = section_ranks(rp);
    if (!rc) rc = section_breakdown(rp);
    if (!rc) rc = section_timeline(rp);
    if (!rc) rc = section_queues(rp);
    if (!rc) section_tokens(rp);
    if (!rc) rc = section_flow(rp);
    if (!rc) rc = section_summary(rp);
    fprintf(f, "<p class=\"note\">Written by analyze (stagetrace) %s from trace schema version %d.</p>\n</body>\n</html>\n",
            ST_VERSION_STRING, ST_SCHEMA_VERSION);
    return rc;
}

int cmd_report(int argc, char **argv)
{
    an_args a;
    const char *html = NULL;
    int overwrite = 0, have_every = 0, id, rc = AN_EXIT_OK;
    report rp;
    memset(&rp, 0, sizeof rp);
    rp.speedup = 2.0;
    an_common_opts common = {help, NULL, &rp.steps, 1, 0};
    if (an_args_init(&a, "report", argc, argv)) return AN_EXIT_FAIL;
    while (!rc && (id = an_args_next_own(&a, opts, &common)) != 0) {
        switch (id) {
        case -1: rc = AN_EXIT_USAGE; break;
        case OPT_HTML: html = a.value; break;
        case OPT_OVERWRITE: overwrite = 1; break;
        case OPT_EVERY:
            if (an_parse_u64(a.value, &rp.every) || rp.every < 1 || rp.every > UINT32_MAX)
                rc = an_usage_error("report", "--every needs a number of steps >= 1, not '%s'", a.value);
            have_every = 1;
            break;
        case OPT_SPEEDUP: {
            char *end;
            rp.speedup = strtod(a.value, &end);
            if (end == a.value || *end || !isfinite(rp.speedup) || rp.speedup < 1.0 || rp.speedup > 1e6)
                rc = an_usage_error("report", "--speedup needs a factor >= 1, not '%s'", a.value);
            break;
        }
        }
    }
    if (common.help_shown) {
        an_args_free(&a);
        return AN_EXIT_OK;
    }
    if (!rc && a.n_pos == 0) rc = an_usage_error("report", "no trace file given");
    if (!rc && !html) rc = an_usage_error("report", "--html OUT.html is needed");
    an_trace t;
    int opened = 0;
    if (!rc) {
        rc = an_trace_open_inputs(&t, a.pos, a.n_pos);
        opened = rc == AN_EXIT_OK;
    }
    an_pipe p;
    memset(&p, 0, sizeof p);
    if (!rc) {
        rp.t = &t;
        rp.p = &p;
        if (!have_every) {
            int64_t pi;
            rp.every = an_trace_meta_i64(&t, "profile_interval", &pi) == 0 && pi >= 1 && pi <= UINT32_MAX ? (uint64_t)pi : 10;
        }
        if (rp.steps.kind != AN_WIN_ALL) {
            int64_t t0, t1;
            rc = an_window_resolve(&rp.steps, &t, &t0, &t1); /* a bad --steps fails before anything is written */
        }
    }
    if (!rc) {
        an_pipe_opts po;
        memset(&po, 0, sizeof po);
        po.gpu_idle = 1;
        rc = an_pipe_compute(&p, &t, &po);
    }
    if (!rc) {
        rp.loads = calloc(p.n_roles ? p.n_roles : 1, sizeof *rp.loads);
        rp.first = malloc(((size_t)p.n_bins + 1) * sizeof *rp.first);
        if (!rp.loads || !rp.first || palette_init(&rp.pal, &p)) rc = oom();
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
    an_file o;
    memset(&o, 0, sizeof o);
    if (!rc) rc = an_file_open(&o, "report", html, overwrite);
    if (!rc) {
        rp.f = o.f;
        rc = write_report(&rp);
        int crc = an_file_close(&o, rc == AN_EXIT_OK);
        if (!rc) rc = crc;
    }
    if (!rc) an_trace_warn(&t);
    free(rp.pal.stage);
    free(rp.pal.hex);
    free(rp.loads);
    free(rp.first);
    an_pipe_free(&p);
    if (opened) an_trace_close(&t);
    an_args_free(&a);
    return rc;
}
