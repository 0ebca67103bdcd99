/* html.h: HTML and SVG for `analyze report` (html.c).
 * Escaping: every string from the trace goes through an_html_esc, which
 * makes it XML-safe and sanitized (control characters as '?', invalid UTF-8
 * as U+FFFD). Colours: a stage has the same colour in every chart and in
 * Nsight Systems (the tracer's NVTX colours). Charts: the primitives the
 * report's sections share.
 */
#ifndef ANALYZE_HTML_H
#define ANALYZE_HTML_H

#include <stdint.h>
#include <stdio.h>

#include "model.h"

/* Text or attribute value for HTML and SVG (XML-safe); NULL writes nothing. */
void an_html_esc(FILE *f, const char *str);
/* Preformatted text: escaped as an_html_esc() does, newlines kept. */
void an_html_esc_pre(FILE *f, const char *text);

/* Stage colours, per column of the pipeline model: stage[s] for stage s,
 * stage[n_stages] for idle. an_html_palette_init returns 0, or -1 out of
 * memory; the caller frees stage and hex. */
#define AN_HTML_IDLE_COLOUR "#e6e6e6"

typedef struct an_html_palette {
    const char **stage; /* [n_stages + 1]; the last is idle */
    char (*hex)[8];     /* [n_stages] the strings stage[] points to */
} an_html_palette;

int an_html_palette_init(an_html_palette *pal, const an_pipe *p);
/* Name and kind of a column: a stage, or "idle" / "no range". */
const char *an_html_col_name(const an_pipe *p, uint32_t col);
const char *an_html_col_kind(const an_pipe *p, uint32_t col);

/* <svg> of w x h with an accessible label (escaped). */
void an_html_svg_open(FILE *f, int w, int h, const char *label);
/* Nice axis step: 1, 2 or 5 times a power of ten, giving about `ticks` ticks. */
double an_html_nice_step(double range, int ticks);
/* y axis with grid lines for [0, y_max] over a plot of w x h at (x, y). */
void an_html_y_axis(FILE *f, int x, int y, int w, int h, double y_max, const char *unit);
/* The legend of the columns c with shown[c]: colour, name, kind. */
void an_html_legend(FILE *f, const an_html_palette *pal, const an_pipe *p, const uint8_t *shown);

#endif
