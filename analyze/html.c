/* html.c: the HTML and SVG pieces of `analyze report` (html.h): escaping
 * of every string from the trace, the stage colours, and the chart
 * primitives (an SVG element, a y axis with grid lines, a legend). The
 * report's sections (cmd_report.c, report_timeline.c) draw with these.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "html.h"

/* ---- escaping ------------------------------------------------------------------------------------ */

/* Text or attribute value for HTML and SVG (XML-safe). */
void an_html_esc(FILE *f, const char *str)
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
        int n = an_utf8_len(s);
        if (!n) {
            fputs("&#xFFFD;", f);
            s++;
        } else {
            fwrite(s, 1, (size_t)n, f);
            s += n;
        }
    }
}

/* Preformatted text: escaped as an_html_esc() does, newlines kept. */
void an_html_esc_pre(FILE *f, const char *text)
{
    for (const char *line = text, *nl; *line; line = nl + 1) {
        nl = strchr(line, '\n');
        size_t n = nl ? (size_t)(nl - line) : strlen(line);
        char *copy = strndup(line, n);
        if (copy) an_html_esc(f, copy);
        free(copy);
        putc('\n', f);
        if (!nl) break;
    }
}

/* ---- colours --------------------------------------------------------------------------------------- */

/* Stage colours: the ones the tracer gave the stages' NVTX ranges
 * (st_reader_stage_colours), so a stage looks the same in Nsight Systems. */
int an_html_palette_init(an_html_palette *pal, const an_pipe *p)
{
    pal->stage = calloc(p->n_cols, sizeof *pal->stage);
    pal->hex = calloc(p->n_stages ? p->n_stages : 1, sizeof *pal->hex);
    uint32_t *rgb = calloc(p->n_stages ? p->n_stages : 1, sizeof *rgb);
    if (!pal->stage || !pal->hex || !rgb) {
        free(rgb);
        return -1;
    }
    st_reader_stage_colours(p->trace->r, rgb, p->n_stages);
    for (uint32_t s = 0; s < p->n_stages; s++) {
        snprintf(pal->hex[s], sizeof pal->hex[s], "#%06x", (unsigned)rgb[s]);
        pal->stage[s] = pal->hex[s];
    }
    free(rgb);
    pal->stage[p->n_stages] = AN_HTML_IDLE_COLOUR;
    return 0;
}

const char *an_html_col_name(const an_pipe *p, uint32_t col)
{
    return col < p->n_stages ? st_reader_stage(p->trace->r, col)->name : "idle";
}

const char *an_html_col_kind(const an_pipe *p, uint32_t col)
{
    return col < p->n_stages ? st_kind_name(st_reader_stage(p->trace->r, col)->kind) : "no range";
}

/* ---- small SVG helpers ------------------------------------------------------------------------------- */

void an_html_svg_open(FILE *f, int w, int h, const char *label)
{
    /* Inline SVG in HTML needs no xmlns: the file names no URL at all. */
    fprintf(f, "<svg width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\" aria-label=\"",
            w, h, w, h);
    an_html_esc(f, label);
    fputs("\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"11\">\n", f);
}

/* Nice axis step: 1, 2 or 5 times a power of ten, giving about `ticks` ticks. */
double an_html_nice_step(double range, int ticks)
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
void an_html_y_axis(FILE *f, int x, int y, int w, int h, double y_max, const char *unit)
{
    double step = an_html_nice_step(y_max, 4);
    for (double v = 0; v <= y_max * 1.0001; v += step) {
        double py = y + h - v / y_max * h;
        char label[32];
        fmt_num(label, sizeof label, v);
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>", x, py, x + w, py);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" fill=\"#555\">%s%s</text>\n", x - 4, py + 4, label, unit);
    }
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#888\"/>\n", x, y + h, x + w, y + h);
}

void an_html_legend(FILE *f, const an_html_palette *pal, const an_pipe *p, const uint8_t *shown)
{
    fputs("<div class=\"legend\">", f);
    for (uint32_t c = 0; c < p->n_cols; c++) {
        if (!shown[c]) continue;
        fprintf(f, "<span><i style=\"background:%s\"></i>", pal->stage[c]);
        an_html_esc(f, an_html_col_name(p, c));
        fputs(" <small>", f);
        an_html_esc(f, an_html_col_kind(p, c));
        fputs("</small></span>", f);
    }
    fputs("</div>\n", f);
}
