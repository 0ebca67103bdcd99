/* report_cpu.c: the CPU section of `analyze report` (report.h;
 * docs/analyze.md, "report"), only for a trace with the CPU capture, so a
 * report of any other trace is what it was. Over the trace's span:
 *  - per thread (in the lanes' order) and stage, a bar of the stage's self
 *    time split into on-CPU, preempted and blocked, the figures of
 *    `analyze cpu` (an_cpu_compute);
 *  - an icicle flame graph (callers above callees, the root on top) of the
 *    samples of each selected (thread, stage): by default the three with the
 *    most samples, or those of the stages named by --cpu-stage. Widths are
 *    proportional to samples; each frame has a tooltip (name, samples, share
 *    of the graph's samples). Frames narrower than a pixel are left out, and
 *    stacks deeper than FLAME_MAX_DEPTH frames are cut there, so the SVG
 *    stays small whatever the trace. The stacks are cpu_stacks.c's;
 *  - with Python-frame samples (python_stacks 'frames'), the same graphs of
 *    those, chosen the same way by their own counts, under "Python stacks
 *    (sampled from the interpreter at N Hz)": wall-time samples, apart.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "cpu_stacks.h"
#include "report.h"

#define BAR_LABEL_W 260   /* "thread · stage" left of the bars */
#define BAR_TEXT_W 250    /* the figures right of them */
#define BAR_H 16
#define FLAME_ROW_H 17
#define FLAME_MAX_DEPTH 96
#define FLAME_DEFAULT_CELLS 3
#define FLAME_MAX_CELLS 12
#define FLAME_MIN_PX 1.0  /* narrower frames are not drawn */

#define ON_COLOUR "#59a14f"
#define PREEMPTED_COLOUR "#f28e2b"
#define BLOCKED_COLOUR "#bab0ac"

static const char *stage_label(st_reader *r, int32_t s) { return s < 0 ? "(none)" : st_reader_stage(r, (uint32_t)s)->name; }

/* Each name of names (a comma list each): "(none)" or one of the trace's
 * stages, found; the trace must have the CPU capture. */
int an_report_cpu_check(an_trace *t, const char *const *names, uint32_t n)
{
    if (!n) return AN_EXIT_OK;
    int rc = an_cpu_stacks_require(t, "report", "--cpu-stage needs one");
    if (rc) return rc;
    st_reader *r = t->r;
    for (uint32_t i = 0; i < n; i++)
        for (const char *p = names[i]; *p;) {
            const char *e = strchr(p, ',');
            size_t len = e ? (size_t)(e - p) : strlen(p);
            int found = len == 6 && !strncmp(p, "(none)", 6);
            for (uint32_t s = 0; !found && s < st_reader_n_stages(r); s++) {
                const char *name = st_reader_stage(r, s)->name;
                found = strlen(name) == len && !strncmp(name, p, len);
            }
            if (!found) {
                char want[200], clean[200];
                snprintf(want, sizeof want, "%.*s", (int)(len < 190 ? len : 190), p);
                an_error("report: --cpu-stage: %s has no stage '%s'", t->path, an_clean(want, clean, sizeof clean));
                return AN_EXIT_USAGE;
            }
            p += len;
            if (*p == ',') p++;
        }
    return AN_EXIT_OK;
}

static int stage_wanted(st_reader *r, const an_report *rp, int32_t stage)
{
    const char *name = stage_label(r, stage);
    size_t nl = strlen(name);
    for (uint32_t i = 0; i < rp->n_cpu_stages; i++)
        for (const char *p = rp->cpu_stages[i]; *p;) {
            const char *e = strchr(p, ',');
            size_t len = e ? (size_t)(e - p) : strlen(p);
            if (len == nl && !strncmp(p, name, len)) return 1;
            p += len;
            if (*p == ',') p++;
        }
    return 0;
}

/* ---- the bars ---- */

static void put_bar(FILE *f, st_reader *r, const st_thread_info *ti, const an_cpu_cell *c, int y)
{
    double w = CHART_W - BAR_LABEL_W - BAR_TEXT_W;
    double wall = (double)c->wall_ns;
    double on = wall > 0 ? (double)c->on_ns / wall : 0, pre = wall > 0 ? (double)c->preempted_ns / wall : 0,
           blk = wall > 0 ? (double)c->blocked_ns / wall : 0;
    char p_on[32], p_pre[32], p_blk[32];
    an_fmt_pct1(100 * on, p_on, sizeof p_on);
    an_fmt_pct1(100 * pre, p_pre, sizeof p_pre);
    an_fmt_pct1(100 * blk, p_blk, sizeof p_blk);
    fputs("<g class=\"cpu-bar\" data-thread=\"", f);
    an_html_esc(f, ti->name);
    fputs("\" data-stage=\"", f);
    an_html_esc(f, stage_label(r, c->stage));
    fprintf(f, "\"><text x=\"%d\" y=\"%d\" text-anchor=\"end\" fill=\"#333\">", BAR_LABEL_W - 6, y + BAR_H - 4);
    an_html_esc(f, ti->name);
    fputs(" \xc2\xb7 ", f);
    an_html_esc(f, stage_label(r, c->stage));
    fputs("</text>\n", f);
    const struct {
        double share;
        const char *colour, *what, *pct;
        int64_t ns;
    } parts[] = {{on, ON_COLOUR, "on-CPU", p_on, c->on_ns},
                 {pre, PREEMPTED_COLOUR, "preempted", p_pre, c->preempted_ns},
                 {blk, BLOCKED_COLOUR, "blocked", p_blk, c->blocked_ns}};
    double x = BAR_LABEL_W;
    for (int i = 0; i < 3; i++) {
        fprintf(f, "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"%s\"><title>", x, y + 1,
                parts[i].share * w, BAR_H - 2, parts[i].colour);
        an_html_esc(f, ti->name);
        fputs(" \xc2\xb7 ", f);
        an_html_esc(f, stage_label(r, c->stage));
        fprintf(f, ": %s %s (%.3f ms of %.3f ms)</title></rect>\n", parts[i].what, parts[i].pct,
                (double)parts[i].ns / 1e6, wall / 1e6);
        x += parts[i].share * w;
    }
    fprintf(f, "<text x=\"%.2f\" y=\"%d\" fill=\"#333\">%s on-CPU of %.3f ms, %llu samples</text></g>\n",
            (double)(CHART_W - BAR_TEXT_W + 6), y + BAR_H - 4, p_on, wall / 1e6, (unsigned long long)c->samples);
}

/* ---- the flame graphs ---- */

typedef struct fnode {
    uint32_t name;   /* an_cpu_stacks.names; UINT32_MAX: the root */
    uint32_t first_child, next; /* node indices + 1, 0 none */
    uint64_t samples;
} fnode;

typedef struct ftree {
    fnode *v;
    size_t n, cap;
} ftree;

static int64_t tree_child(ftree *t, uint32_t parent, uint32_t name)
{
    for (uint32_t c = t->v[parent].first_child; c; c = t->v[c - 1].next)
        if (t->v[c - 1].name == name) return c - 1;
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 256;
        fnode *v = realloc(t->v, cap * sizeof *v);
        if (!v) return -1;
        t->v = v;
        t->cap = cap;
    }
    t->v[t->n] = (fnode){name, 0, t->v[parent].first_child, 0};
    t->v[parent].first_child = (uint32_t)++t->n;
    return (int64_t)t->n - 1;
}

typedef struct flame_ctx {
    FILE *f;
    const an_cpu_stacks *s;
    const ftree *t;
    double px_per_sample;
    uint64_t total;
    const char *root_label;
    uint32_t max_depth;
} flame_ctx;

static const an_cpu_stacks *g_sort_stacks; /* qsort has no context argument */
static const ftree *g_sort_tree;

static int cmp_child(const void *a, const void *b)
{
    const fnode *x = &g_sort_tree->v[*(const uint32_t *)a], *y = &g_sort_tree->v[*(const uint32_t *)b];
    return strcmp(g_sort_stacks->names[x->name], g_sort_stacks->names[y->name]);
}

static void frame_colour(const char *name, char *out, size_t size)
{
    uint64_t h = an_hash_name(name);
    snprintf(out, size, "#%02x%02x%02x", 205 + (unsigned)(h % 51), (unsigned)((h >> 8) % 200),
             (unsigned)((h >> 16) % 56));
}

/* Node i at (x, depth) and, when wide enough, its children (ordered by name). */
static int put_node(flame_ctx *x, uint32_t i, double left, uint32_t depth)
{
    const fnode *n = &x->t->v[i];
    double w = (double)n->samples * x->px_per_sample;
    if (w < FLAME_MIN_PX) return 0;
    FILE *f = x->f;
    const char *name = n->name == UINT32_MAX ? x->root_label : x->s->names[n->name];
    char colour[8], pct[32];
    if (n->name == UINT32_MAX) snprintf(colour, sizeof colour, "#d0d0d0");
    else frame_colour(name, colour, sizeof colour);
    an_fmt_pct1(100.0 * (double)n->samples / (double)x->total, pct, sizeof pct);
    double y = 4 + (double)depth * FLAME_ROW_H;
    fputs("<g><title>", f);
    an_html_esc(f, name);
    fprintf(f, ": %llu samples, %s</title><rect x=\"%.2f\" y=\"%.0f\" width=\"%.2f\" height=\"%d\" fill=\"%s\" "
               "stroke=\"#fff\" stroke-width=\"0.5\"/>",
            (unsigned long long)n->samples, pct, left, y, w, FLAME_ROW_H - 1, colour);
    int chars = (int)((w - 6) / 6.5);
    if (chars >= 3) {
        char label[512];
        size_t len = strlen(name);
        if (len > (size_t)chars) snprintf(label, sizeof label, "%.*s..", chars - 2 > 500 ? 500 : chars - 2, name);
        else snprintf(label, sizeof label, "%s", name);
        fprintf(f, "<text x=\"%.2f\" y=\"%.0f\" fill=\"#000\">", left + 3, y + FLAME_ROW_H - 5);
        an_html_esc(f, label);
        fputs("</text>", f);
    }
    fputs("</g>\n", f);
    uint32_t nc = 0;
    for (uint32_t c = n->first_child; c; c = x->t->v[c - 1].next) nc++;
    if (!nc) return 0;
    uint32_t *kids = malloc(nc * sizeof *kids);
    if (!kids) return -1;
    nc = 0;
    for (uint32_t c = n->first_child; c; c = x->t->v[c - 1].next) kids[nc++] = c - 1;
    g_sort_stacks = x->s;
    g_sort_tree = x->t;
    if (nc) qsort(kids, nc, sizeof *kids, cmp_child);
    int rc = 0;
    for (uint32_t k = 0; k < nc && !rc; k++) {
        rc = put_node(x, kids[k], left, depth + 1);
        left += (double)x->t->v[kids[k]].samples * x->px_per_sample;
    }
    free(kids);
    return rc;
}

/* The rows [a, b) of one (thread, stage) as one graph; python: of the
 * Python-frame samples (the root "THREAD · STAGE (Python)"). */
static int put_flame(FILE *f, st_reader *r, const an_cpu_stacks *s, size_t a, size_t b, int python)
{
    const st_thread_info *ti = st_reader_thread(r, s->rows[a].thread);
    const char *stage = stage_label(r, s->rows[a].stage);
    ftree t = {0};
    t.v = malloc(256 * sizeof *t.v);
    if (!t.v) return an_report_oom();
    t.cap = 256;
    t.v[0] = (fnode){UINT32_MAX, 0, 0, 0};
    t.n = 1;
    uint32_t depth_max = 0;
    for (size_t i = a; i < b; i++) {
        const an_cpu_srow *row = &s->rows[i];
        uint32_t node = 0, depth = 0;
        t.v[0].samples += row->samples;
        for (uint32_t k = row->n_frames; k-- > 0 && depth < FLAME_MAX_DEPTH;) {
            int64_t c = tree_child(&t, node, s->frames[s->stack_frames[row->frames_off + k]].name);
            if (c < 0) {
                free(t.v);
                return an_report_oom();
            }
            node = (uint32_t)c;
            t.v[node].samples += row->samples;
            depth++;
        }
        if (depth > depth_max) depth_max = depth;
    }
    size_t label_len = strlen(ti->name) + strlen(stage) + 18;
    char *root = malloc(label_len);
    if (!root) {
        free(t.v);
        return an_report_oom();
    }
    snprintf(root, label_len, "%s \xc2\xb7 %s%s", ti->name, stage, python ? " (Python)" : "");
    fputs("<h3>", f);
    an_html_esc(f, root);
    fprintf(f, ": %llu samples</h3>\n", (unsigned long long)t.v[0].samples);
    int height = 8 + (int)(depth_max + 1) * FLAME_ROW_H;
    fputs(python ? "<svg class=\"flame\" data-source=\"python-frames\" data-thread=\"" : "<svg class=\"flame\" data-thread=\"", f);
    an_html_esc(f, ti->name);
    fputs("\" data-stage=\"", f);
    an_html_esc(f, stage);
    fprintf(f, "\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\" aria-label=\"flame graph of ", CHART_W,
            height, CHART_W, height);
    an_html_esc(f, root);
    fputs("\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"11\">\n", f);
    flame_ctx x = {f, s, &t, (double)(CHART_W - 20) / (double)t.v[0].samples, t.v[0].samples, root, depth_max};
    int rc = put_node(&x, 0, 10, 0) ? an_report_oom() : AN_EXIT_OK;
    fputs("</svg>\n", f);
    free(root);
    free(t.v);
    return rc;
}

/* ---- the section ---- */

typedef struct cell_ref {
    size_t a, b; /* rows of cpu_stacks */
    uint64_t samples;
} cell_ref;

static int cmp_cell(const void *pa, const void *pb)
{
    const cell_ref *x = pa, *y = pb;
    if (x->samples != y->samples) return x->samples > y->samples ? -1 : 1;
    return x->a < y->a ? -1 : x->a > y->a;
}

/* The flame graphs of s: the kernel's samples, or (hz_text not NULL) the
 * Python-frame samples, under a heading of their own. */
static int put_flames(an_report *rp, const an_cpu_stacks *s, const char *hz_text)
{
    FILE *f = rp->f;
    st_reader *r = rp->t->r;
    cell_ref *cells = malloc((s->n_rows ? s->n_rows : 1) * sizeof *cells);
    if (!cells) return an_report_oom();
    size_t n = 0;
    for (size_t i = 0; i < s->n_rows;) {
        size_t j = i;
        uint64_t sum = 0;
        for (; j < s->n_rows && s->rows[j].thread == s->rows[i].thread && s->rows[j].stage == s->rows[i].stage; j++)
            sum += s->rows[j].samples;
        if (!rp->n_cpu_stages || stage_wanted(r, rp, s->rows[i].stage)) cells[n++] = (cell_ref){i, j, sum};
        i = j;
    }
    if (n) qsort(cells, n, sizeof *cells, cmp_cell);
    size_t max = rp->n_cpu_stages ? FLAME_MAX_CELLS : FLAME_DEFAULT_CELLS;
    int python = hz_text != NULL;
    if (python) {
        fputs("<h3>Python stacks (sampled from the interpreter at ", f);
        an_html_esc(f, hz_text);
        fputs(" Hz)</h3>\n<p class=\"note\">The Python-frame samples (python_stacks &#39;frames&#39;: the "
              "package&#39;s sampler read each thread&#39;s Python stack), apart from the kernel&#39;s: each stands "
              "for wall time, on-CPU or not, never added to the graphs above. ", f);
    } else {
        fputs("<h3>Flame graphs</h3>\n<p class=\"note\">", f);
    }
    if (rp->n_cpu_stages)
        fprintf(f, "The samples of the stages chosen with --cpu-stage, per thread (at most %d, the most samples first)",
                FLAME_MAX_CELLS);
    else
        fprintf(f, "The %d threads and stages with the most samples (choose others with --cpu-stage)",
                FLAME_DEFAULT_CELLS);
    fprintf(f, ", as icicles: the outermost frame on top, each frame above the frames it called, its width its "
               "samples. Frames narrower than a pixel are left out, stacks are cut at %d frames.</p>\n",
            FLAME_MAX_DEPTH);
    if (!n) fputs("<p class=\"note\">No samples in the chosen stages.</p>\n", f);
    int rc = AN_EXIT_OK;
    for (size_t k = 0; k < n && k < max && !rc; k++) rc = put_flame(f, r, s, cells[k].a, cells[k].b, python);
    free(cells);
    return rc;
}

int an_report_cpu(an_report *rp)
{
    an_trace *t = rp->t;
    st_reader *r = t->r;
    int has = st_reader_has_cpu(r);
    if (has < 0) return an_trace_fail(t);
    if (!has) return AN_EXIT_OK;
    int64_t t0 = t->has_span ? t->span_t0_ns : 0, t1 = t->has_span ? t->span_t1_ns : 0;
    an_cpu_result res;
    int rc = an_cpu_compute(t, t0, t1, &res);
    if (rc) return rc;
    an_cpu_stacks s, py;
    if ((rc = an_cpu_stacks_compute_both(t, t0, t1, &s, &py))) {
        an_cpu_free(&res);
        return rc;
    }
    FILE *f = rp->f;
    const char *mode = an_trace_meta(t, "cpu_mode"), *hz = an_trace_meta(t, "cpu_sample_hz");
    fputs("<section id=\"cpu\"><h2>CPU</h2>\n<p class=\"note\">From the CPU capture (mode ", f);
    an_html_esc(f, mode ? mode : "unknown");
    fputs(", ", f);
    an_html_esc(f, hz ? hz : "?");
    fprintf(f, " samples per second of CPU time; %llu samples) over the whole trace (%.3f ms), as "
               "<code>analyze cpu</code> gives it: per thread and stage, the stage&#39;s self time split into "
               "on-CPU, preempted (runnable, no core free) and blocked (waiting: sleep, lock, I/O).</p>\n",
            (unsigned long long)s.samples, (double)(t1 - t0) / 1e6);
    fputs("<div class=\"legend\"><span><i style=\"background:" ON_COLOUR "\"></i>on-CPU</span><span><i style=\"background:"
          PREEMPTED_COLOUR "\"></i>preempted</span><span><i style=\"background:" BLOCKED_COLOUR
          "\"></i>blocked</span></div>\n",
          f);
    an_report_lane *order = calloc(res.n_threads ? res.n_threads : 1, sizeof *order);
    if (!order) rc = an_report_oom();
    uint32_t n_bars = 0;
    for (uint32_t i = 0; !rc && i < res.n_threads; i++) {
        uint32_t ti = res.threads[i].thread;
        order[i] = (an_report_lane){ti, ti < rp->p->n_threads ? rp->p->thread_role[ti] : UINT32_MAX};
        if (!res.threads[i].has_switches) continue;
        for (uint32_t c = 0; c <= res.n_stages; c++) n_bars += res.threads[i].cells[c].wall_ns > 0;
    }
    if (!rc) {
        an_report_sort_lanes(order, res.n_threads, rp->p);
        an_html_svg_open(f, CHART_W, 8 + (int)n_bars * BAR_H, "on-CPU, preempted and blocked time per thread and stage");
        int y = 4;
        for (uint32_t k = 0; k < res.n_threads; k++) {
            const an_cpu_thread *th = NULL;
            for (uint32_t i = 0; i < res.n_threads && !th; i++)
                if (res.threads[i].thread == order[k].thread) th = &res.threads[i];
            if (!th || !th->has_switches) continue;
            const st_thread_info *ti = st_reader_thread(r, th->thread);
            /* stages in id order, (none) last */
            for (uint32_t c = 1; c <= res.n_stages + 1; c++) {
                const an_cpu_cell *cell = &th->cells[c % (res.n_stages + 1)];
                if (cell->wall_ns <= 0) continue;
                put_bar(f, r, ti, cell, y);
                y += BAR_H;
            }
        }
        fputs("</svg>\n", f);
        for (uint32_t i = 0; i < res.n_threads; i++)
            if (res.threads[i].has_samples && !res.threads[i].has_switches) {
                fputs("<p class=\"note\">No switch records for ", f);
                an_html_esc(f, st_reader_thread(r, res.threads[i].thread)->name);
                fputs(": the signal sampler took its samples (timer), so it has no bar; its samples are in "
                      "the flame graphs.</p>\n", f);
            } else if (!res.threads[i].has_samples) {
                fputs("<p class=\"note\">No CPU records for ", f);
                an_html_esc(f, st_reader_thread(r, res.threads[i].thread)->name);
                fputs(": ", f);
                an_html_esc(f, res.threads[i].info.status);
                fputs(" (", f);
                an_html_esc(f, res.threads[i].info.reason);
                fputs(").</p>\n", f);
            }
        rc = put_flames(rp, &s, NULL);
        if (!rc && py.n_rows) {
            const char *py_hz = an_trace_meta(t, "python_frames_hz");
            rc = put_flames(rp, &py, py_hz ? py_hz : "?");
        }
        fputs("</section>\n", f);
    }
    free(order);
    an_cpu_stacks_free(&s);
    an_cpu_stacks_free(&py);
    an_cpu_free(&res);
    return rc;
}
