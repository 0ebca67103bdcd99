/* report_timeline.c: the timeline section of `analyze report` (report.h):
 * a few steps, one lane per thread, ranges as rectangles coloured by stage,
 * nested ranges thinner inside their parents, step marks as dashed lines;
 * ranges narrower than a pixel are merged into one rectangle per pixel
 * column, so the number of rectangles is bounded by lanes x depth x width,
 * whatever the trace. Under the threads, one lane per GPU device and stream
 * with its kernels, copies and memsets, merged the same way.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "demangle.h"
#include "report.h"

/* ---- shared with the summary section: out of memory, the lane order --------------------------------------- */

int an_report_oom(void)
{
    an_error("out of memory");
    return AN_EXIT_FAIL;
}

static const an_pipe *g_lane_pipe; /* qsort has no context argument */

static int cmp_lane(const void *a, const void *b)
{
    const an_report_lane *x = a, *y = b;
    if (x->role != y->role) return x->role < y->role ? -1 : 1;
    int c = strcmp(st_reader_thread(g_lane_pipe->trace->r, x->thread)->name,
                   st_reader_thread(g_lane_pipe->trace->r, y->thread)->name);
    return c ? c : (x->thread < y->thread ? -1 : x->thread > y->thread);
}

void an_report_sort_lanes(an_report_lane *lanes, uint32_t n, const an_pipe *p)
{
    g_lane_pipe = p;
    qsort(lanes, n, sizeof *lanes, cmp_lane);
}

/* One word of a shell command, quoted when the shell would split or expand it. */
static void put_shell_word(FILE *f, const char *w)
{
    int plain = *w != '\0';
    for (const char *c = w; *c; c++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._/-+=:,@%", *c)) plain = 0;
    if (plain) {
        an_html_esc(f, w);
        return;
    }
    fputc('\'', f);
    for (const char *c = w; *c; c++) {
        if (*c == '\'') fputs("'\\''", f);
        else {
            char one[2] = {*c, '\0'};
            an_html_esc(f, one);
        }
    }
    fputc('\'', f);
}

/* The timeline holds a few steps: say which, of how many, and the command
 * that exports every step for a trace viewer. The output's name is the first
 * input's, its extension replaced by .json, in the current directory (a rank
 * set's: its files' directory's, "ranks" in the current one). */
static void put_rest(const an_report *rp, int has_steps, uint64_t first, uint64_t last)
{
    FILE *f = rp->f;
    const an_pipe *p = rp->p;
    fputs("<p class=\"note timeline-rest\">", f);
    if (has_steps && p->has_steps)
        fprintf(f, "It shows steps %llu-%llu of the run&#39;s %llu-%llu. ", (unsigned long long)first,
                (unsigned long long)last, (unsigned long long)p->bin_step_first[0],
                (unsigned long long)p->bin_step_last[p->n_bins - 1]);
    fputs("To see every step, zoomable, in Perfetto (ui.perfetto.dev) or chrome://tracing: <code>analyze export", f);
    /* a rank set: its files in rank order, however they were given (a list, a glob, a directory) */
    const an_trace *t = rp->t;
    int n = t->is_set ? (int)t->n_ranks : rp->n_inputs;
    for (int i = 0; i < n; i++) {
        fputc(' ', f);
        put_shell_word(f, t->is_set ? t->ranks[i].path : rp->inputs[i]);
    }
    char out[256];
    const char *in = n ? (t->is_set ? t->ranks[0].path : rp->inputs[0]) : "trace";
    size_t len = strlen(in);
    if (t->is_set) { /* named after the rank files' directory */
        const char *slash = strrchr(in, '/');
        len = slash ? (size_t)(slash - in) : 0;
        if (!len) in = "ranks", len = 5;
    }
    while (len > 1 && in[len - 1] == '/') len--; /* a directory of rank files */
    const char *base = in;
    for (size_t i = 0; i < len; i++)
        if (in[i] == '/') base = in + i + 1;
    size_t blen = (size_t)(in + len - base);
    const char *dot = NULL;
    for (const char *c = base; c < base + blen; c++)
        if (*c == '.') dot = c;
    if (dot && dot > base) blen = (size_t)(dot - base);
    if (!blen) snprintf(out, sizeof out, "trace.json");
    else snprintf(out, sizeof out, "%.*s.json", (int)(blen < 200 ? blen : 200), base);
    fputs(" --chrome ", f);
    put_shell_word(f, out);
    fputs("</code>; other steps here: <code>analyze report ... --steps A:B</code>.</p>\n", f);
}

#define LANE_H 22
#define MAX_DEPTH 8        /* timeline depths drawn; deeper ranges go to the last */
#define LABEL_W 170        /* timeline: thread names */
#define STEP_LABEL_CHAR_W 6.5 /* width of a character of an 11px label, generous */

/* One row (thread, depth): ranges of at least a pixel are drawn as they are;
 * narrower ones are gathered per pixel column and drawn as one rectangle
 * (the colour of the stage whose ranges cover most of it, opacity the share
 * of the column they all cover). */
typedef struct tl_row {
    FILE *f;
    double y, h;
    const an_html_palette *pal;
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
    an_html_esc(row->f, an_html_col_name(row->p, best));
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
        an_html_esc(row->f, an_html_col_name(row->p, stage));
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
            an_html_esc(row->f, an_demangle(g->name));
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
        if (!st_gpu_kind_is_device_work(g.rec.kind)) continue;
        uint32_t i = 0;
        while (i < *n && !((*out)[i].device == g.device && (*out)[i].stream == g.stream)) i++;
        if (i == *n) {
            gpu_lane *nv = realloc(*out, (*n + 1) * sizeof *nv);
            if (!nv) {
                st_gpu_iter_close(it);
                return an_report_oom();
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
static void put_launchers(FILE *f, const an_report *rp, const gpu_lane *l, double y)
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
    an_html_esc(f, ti ? ti->name : "?");
    fputs(" (", f);
    an_html_esc(f, ti ? ti->role : "?");
    fputs(")", f);
    uint32_t others = l->n_launchers - 1 + l->more_launchers;
    if (others) fprintf(f, " +%u%s", others, l->more_launchers ? " or more" : "");
    fputs("</text>\n", f);
}

int an_report_timeline(an_report *rp)
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
    an_report_lane *lanes = calloc(nt ? nt : 1, sizeof *lanes);
    if (!lanes) return an_report_oom();
    for (uint32_t i = 0; i < nt; i++) lanes[i] = (an_report_lane){i, p->thread_role[i]};
    an_report_sort_lanes(lanes, nt, p);
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
               "nested ranges thinner inside their parents; dashed lines are step marks (the one labelled step N ends step N). Ranges narrower than a pixel "
               "are merged per pixel column (opacity: how much of it they cover).%s</p>\n",
            a, b,
            n_gl ? " Under them, one lane per GPU device and stream: kernels, copies and memsets coloured by kind, "
                   "merged per pixel column the same way." : "");
    put_rest(rp, has_a && has_b, step_a + 1, step_b);
    an_html_svg_open(f, CHART_W, height, "timeline");
    /* time axis */
    double step = an_html_nice_step((double)(t1 - t0) / 1e6, 8);
    for (double ms = 0; ms <= (double)(t1 - t0) / 1e6 + 1e-9; ms += step) {
        double x = LABEL_W + ms * 1e6 * scale;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#eee\"/>", x, top - 4, x, height - 26);
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" fill=\"#555\">%g ms</text>\n", x, height - 12, ms);
    }
    int rc = AN_EXIT_OK;
    uint64_t rects = 0;
    uint8_t *shown = calloc(p->n_cols, 1);
    double *covers = calloc((size_t)MAX_DEPTH * p->n_cols, sizeof *covers);
    if (!shown || !covers) rc = an_report_oom();
    for (uint32_t li = 0; li < nt && !rc; li++) {
        uint32_t ti = lanes[li].thread;
        const st_thread_info *th = st_reader_thread(t->r, ti);
        double y = top + li * (LANE_H + 4);
        fprintf(f, "<rect x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%d\" fill=\"#fafafa\"/>", LABEL_W, y, plot_w, LANE_H);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" fill=\"#222\">", LABEL_W - 6, y + LANE_H / 2 + 4);
        an_html_esc(f, th->name);
        fputs(" <tspan fill=\"#888\">(", f);
        an_html_esc(f, th->role);
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
            if (g.stream != gl[li].stream || !st_gpu_kind_is_device_work(g.rec.kind)) continue;
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
        an_html_legend(f, &rp->pal, rp->p, shown);
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
