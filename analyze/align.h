/* align.h: a rank set put on one clock (align.c; docs/analyze.md, "Clock
 * alignment"): by the offsets the ranks measured (meta), or offline from
 * the ends of their collectives, by a robust line fit per rank, or not at
 * all. The set reader maps the times (st_reader_set_part_clock); this
 * module decides each rank's clock and says how it was found.
 */
#ifndef ANALYZE_ALIGN_H
#define ANALYZE_ALIGN_H

#include <stddef.h>
#include <stdint.h>

#include "analyze.h"

/* The fewest collective instances a rank must share with the reference
 * rank to be fitted. */
#define AN_ALIGN_MIN_INSTANCES 8
/* The points that enter Theil-Sen's pairwise slopes: all of them up to this
 * many, else this many spread evenly over them (in the order given). */
#define AN_ALIGN_SLOPE_POINTS 512

/* A robust line through (x_k, y_k): y = offset_ns + slope * (x - x0_ns).
 * Theil-Sen: slope the median of the pairwise slopes (pairs of equal x left
 * out; 0 when no pair is left), offset the median of y_k - slope (x_k - x0),
 * x0 the smallest x. A point is kept when its residual is within
 * threshold_ns = max(3 * 1.4826 * median |residual|, 1 ns); uncertainty_ns is
 * the largest |residual| of the kept points, rounded up to the ns. */
typedef struct an_align_line {
    int64_t x0_ns;
    double slope, offset_ns;
    double threshold_ns;
    int64_t uncertainty_ns;
    size_t kept;
} an_align_line;

/* n >= 1 points; keep (n bytes, or NULL) gets 1 for a kept point, else 0.
 * 0, or -1 out of memory. */
int an_align_fit(const int64_t *x, const int64_t *y, size_t n, an_align_line *out, unsigned char *keep);

/* "auto", "meta", "collectives", "none" into *out: 0, or -1. */
int an_align_parse(const char *s, an_align_mode *out);
const char *an_align_mode_name(an_align_mode m);
const char *an_clock_method_name(an_clock_method m);

/* Puts t's parts (an open rank set, t->ranks in part order) on one clock
 * by mode, fills t->align (one per rank) and t->align_used; prints the
 * note of auto or the error of an explicit mode. An exit code. */
int an_align_set(an_trace *t, an_align_mode mode);

#endif
