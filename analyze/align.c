/* align.c: a rank set put on one clock (align.h; docs/analyze.md, "Clock
 * alignment"). Ranks that measured their offsets to rank 0 (meta clock_*)
 * are mapped by them; a set without them (torchrun, srun, ssh, old traces)
 * is aligned offline from its collectives: the ranks of one collective
 * leave it together (the last arrival releases everyone), so the ends of
 * many instances, matched across ranks as `stragglers` matches them, give
 * each rank's offset and drift to a reference rank by a robust line fit.
 * One method serves the whole set: measured and fitted offsets are never
 * combined. The fit is Theil-Sen (a median of pairwise slopes: half the
 * points may be outliers, a preempted rank's late end, without moving it);
 * its uncertainty is the largest residual of the points it keeps.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "align.h"
#include "stragglers.h"

int an_align_parse(const char *s, an_align_mode *out)
{
    static const char *const names[] = {"auto", "meta", "collectives", "none"};
    for (int i = 0; i < 4; i++)
        if (strcmp(s, names[i]) == 0) {
            *out = (an_align_mode)i;
            return 0;
        }
    return -1;
}

const char *an_align_mode_name(an_align_mode m)
{
    switch (m) {
    case AN_ALIGN_AUTO: return "auto";
    case AN_ALIGN_META: return "meta";
    case AN_ALIGN_COLLECTIVES: return "collectives";
    case AN_ALIGN_NONE: return "none";
    }
    return "?";
}

const char *an_clock_method_name(an_clock_method m)
{
    switch (m) {
    case AN_CLOCK_NONE: return "none";
    case AN_CLOCK_META: return "meta";
    case AN_CLOCK_REFERENCE: return "reference";
    case AN_CLOCK_COLLECTIVES: return "collectives";
    }
    return "?";
}

/* ---- the robust fit ---------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v[0..n) (n >= 1; v reordered): the mean of the two middle values when n is even. */
static double median(double *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int an_align_fit(const int64_t *x, const int64_t *y, size_t n, an_align_line *out, unsigned char *keep)
{
    memset(out, 0, sizeof *out);
    size_t m = n < AN_ALIGN_SLOPE_POINTS ? n : AN_ALIGN_SLOPE_POINTS;
    double *slopes = malloc((m * (m - 1) / 2 + 1) * sizeof *slopes);
    double *res = malloc(n * sizeof *res), *abs_r = malloc(n * sizeof *abs_r);
    size_t *pick = malloc(m * sizeof *pick);
    if (!slopes || !res || !abs_r || !pick) {
        free(slopes);
        free(res);
        free(abs_r);
        free(pick);
        return -1;
    }
    int64_t x0 = x[0];
    for (size_t k = 1; k < n; k++)
        if (x[k] < x0) x0 = x[k];
    for (size_t k = 0; k < m; k++) pick[k] = m == n ? k : m == 1 ? 0 : k * (n - 1) / (m - 1);
    size_t ns = 0;
    for (size_t i = 0; i < m; i++)
        for (size_t j = i + 1; j < m; j++) {
            int64_t xi = x[pick[i]], xj = x[pick[j]];
            if (xi == xj) continue;
            /* differences on 128 bits: any two int64s apart */
            double dy = (double)((__int128)y[pick[j]] - y[pick[i]]), dx = (double)((__int128)xj - xi);
            slopes[ns++] = dy / dx;
        }
    double slope = ns ? median(slopes, ns) : 0.0;
    /* x - x0 and y are exact in a double below 2^53 ns (104 days): the fit's arithmetic stays in ns */
    for (size_t k = 0; k < n; k++) abs_r[k] = (double)y[k] - slope * (double)(x[k] - x0);
    double offset = median(abs_r, n);
    for (size_t k = 0; k < n; k++) abs_r[k] = res[k] = fabs((double)y[k] - offset - slope * (double)(x[k] - x0));
    double madn = 1.4826 * median(abs_r, n);
    double threshold = 3.0 * madn > 1.0 ? 3.0 * madn : 1.0;
    double worst = 0;
    size_t kept = 0;
    for (size_t k = 0; k < n; k++) {
        int in = res[k] <= threshold;
        if (keep) keep[k] = (unsigned char)in;
        if (in) {
            kept++;
            if (res[k] > worst) worst = res[k];
        }
    }
    free(slopes);
    free(res);
    free(abs_r);
    free(pick);
    out->x0_ns = x0;
    out->slope = slope;
    out->offset_ns = offset;
    out->threshold_ns = threshold;
    out->uncertainty_ns = (int64_t)ceil(worst);
    out->kept = kept;
    return 0;
}

/* ---- the set ----------------------------------------------------------------------------- */

static int rank_of_part(const an_trace *t, uint32_t part)
{
    int64_t v = 0;
    an_trace_meta_i64(&t->ranks[part], "rank", &v);
    return (int)v;
}

/* Every part on its own clock, as recorded. */
static void clocks_none(an_trace *t)
{
    st_rank_clock zero;
    memset(&zero, 0, sizeof zero);
    for (uint32_t i = 0; i < t->n_ranks; i++) {
        st_reader_set_part_clock(t->r, i, &zero); /* the identity cannot be refused */
        t->align[i] = (an_rank_align){AN_CLOCK_NONE, 0, 0, 0, -1, 0};
    }
    t->align_used = AN_ALIGN_NONE;
}

/* Every comm range of the set, on the parts' own clocks (clocks_none first), matched. */
static int read_collectives(an_trace *t, an_stragglers_arrival **out, size_t *n_out)
{
    st_reader *r = t->r;
    an_stragglers_arrival *arr = NULL;
    size_t n = 0, cap = 0;
    uint32_t nt = st_reader_n_threads(r);
    for (uint32_t th = 0; th < nt; th++) {
        uint32_t part, local;
        if (st_reader_thread_part(r, th, &part, &local)) continue;
        st_range_iter *it;
        if (st_range_iter_open(&it, r, th, INT64_MIN, INT64_MAX) != ST_OK) {
            free(arr);
            return an_trace_fail(t);
        }
        st_range g;
        int k;
        while ((k = st_range_iter_next(it, &g)) == 1) {
            if (st_reader_stage(r, g.stage)->kind != ST_COMM) continue;
            if (n == cap) {
                cap = cap ? cap * 2 : 1024;
                an_stragglers_arrival *na = realloc(arr, cap * sizeof *na);
                if (!na) break;
                arr = na;
            }
            arr[n++] = (an_stragglers_arrival){g.stage, part, th, 0, g.start_ns, g.start_ns + g.dur_ns};
        }
        st_range_iter_close(it);
        if (k < 0) {
            free(arr);
            return an_trace_fail(t);
        }
        if (k == 1) {
            free(arr);
            an_error("out of memory");
            return AN_EXIT_FAIL;
        }
    }
    an_stragglers_match(arr, n);
    *out = arr;
    *n_out = n;
    return AN_EXIT_OK;
}

/* The lines theta(x) = c + s (x - x0) that every kept instance's bounds allow: for a slope s, c
 * lies in [bound_lo(s), bound_hi(s)], the largest lower bound and the smallest upper bound less
 * s (x - x0); bound_gap(s) = their difference, concave in s, and >= 0 where some line of slope s
 * is inside them all. */
typedef struct bounds_ctx {
    const int64_t *x, *lo, *hi;
    const unsigned char *keep;
    size_t m;
    int64_t x0;
} bounds_ctx;

static double bound_lo(const bounds_ctx *b, double s)
{
    double v = -INFINITY;
    for (size_t k = 0; k < b->m; k++)
        if (b->keep[k]) {
            double e = (double)b->lo[k] - s * (double)(b->x[k] - b->x0);
            if (e > v) v = e;
        }
    return v;
}

static double bound_hi(const bounds_ctx *b, double s)
{
    double v = INFINITY;
    for (size_t k = 0; k < b->m; k++)
        if (b->keep[k]) {
            double e = (double)b->hi[k] - s * (double)(b->x[k] - b->x0);
            if (e < v) v = e;
        }
    return v;
}

static double bound_gap(const bounds_ctx *b, double s) { return bound_hi(b, s) - bound_lo(b, s); }

/* The slopes a clock may have: within 1000 parts per million of drift either way, far beyond any
 * two clocks' (a few ppm) and any TSC map's slope error (tens of ppm). A fitted slope outside is
 * the ends' noise (a millisecond of exit latency over a second of run is 1000 ppm), not a clock. */
#define ALIGN_SLOPE_SPAN 1e-3
#define ALIGN_SEARCH_STEPS 200

/* The slope of [lo_s, hi_s] where f (concave: sign -1 for a convex one) is largest. */
static double ternary_max(const bounds_ctx *b, double lo_s, double hi_s, double dx, int what)
{
    for (int i = 0; i < ALIGN_SEARCH_STEPS && hi_s - lo_s > 1e-15; i++) {
        double m1 = lo_s + (hi_s - lo_s) / 3, m2 = hi_s - (hi_s - lo_s) / 3;
        double f1, f2;
        if (what == 0) f1 = bound_gap(b, m1), f2 = bound_gap(b, m2);
        else if (what == 1) f1 = bound_hi(b, m1) + m1 * dx, f2 = bound_hi(b, m2) + m2 * dx;
        else f1 = -(bound_lo(b, m1) + m1 * dx), f2 = -(bound_lo(b, m2) + m2 * dx);
        if (f1 < f2) lo_s = m1;
        else hi_s = m2;
    }
    return (lo_s + hi_s) / 2;
}

/* From a slope `in` with bound_gap >= 0 towards `out`, the last slope with bound_gap >= 0. */
static double feasible_edge(const bounds_ctx *b, double in, double out)
{
    for (int i = 0; i < ALIGN_SEARCH_STEPS / 2; i++) {
        double mid = (in + out) / 2;
        if (bound_gap(b, mid) >= 0) in = mid;
        else out = mid;
    }
    return in;
}

/* The fit of part p against the reference part ref (docs/analyze.md, "Clock alignment"). Per
 * instance both share: x = p's end, y = ref's end - p's end, and the bounds that causality puts
 * on the offset theta (ref's clock minus p's) whatever the ends do: neither rank leaves before
 * the other has entered, so ref's start - p's end <= theta <= ref's end - p's start. The line
 * through (x, y) (an_align_fit), moved into the bounds of its kept instances when it lies
 * outside them, is the clock, linear through the first and the last point's x; its uncertainty,
 * exact on the clock as the set maps with it, is the larger of the ends' spread (the largest
 * |y - theta(x)| of the kept instances) and the farthest that the kept bounds leave theta room
 * to be. 0 fitted; 1 fewer than AN_ALIGN_MIN_INSTANCES shared instances; 2 bounds that no line
 * of the fitted slope meets (the ranges are not barriers); -1 out of memory. */
static int fit_part(const an_stragglers_arrival *arr, size_t n, uint32_t ref, uint32_t p, st_rank_clock *clock,
                    an_rank_align *al)
{
    size_t cap = n ? n : 1;
    int64_t *x = malloc(cap * sizeof *x), *y = malloc(cap * sizeof *y);
    int64_t *lo = malloc(cap * sizeof *lo), *hi = malloc(cap * sizeof *hi);
    unsigned char *keep = malloc(cap);
    int rc = -1;
    if (!x || !y || !lo || !hi || !keep) goto done;
    size_t m = 0;
    for (size_t i = 0; i < n;) {
        size_t e = i;
        const an_stragglers_arrival *a = NULL, *b = NULL;
        while (e < n && arr[e].stage == arr[i].stage && arr[e].instance == arr[i].instance) {
            if (arr[e].rank_ix == ref) a = &arr[e];
            if (arr[e].rank_ix == p) b = &arr[e];
            e++;
        }
        if (a && b) { /* every time in 0..INT64_MAX: the differences fit */
            x[m] = b->end_ns;
            y[m] = a->end_ns - b->end_ns;
            lo[m] = a->start_ns - b->end_ns;
            hi[m] = a->end_ns - b->start_ns;
            m++;
        }
        i = e;
    }
    al->instances = (uint32_t)(m > UINT32_MAX ? UINT32_MAX : m);
    rc = 1;
    if (m < AN_ALIGN_MIN_INSTANCES) goto done;
    an_align_line line;
    rc = -1;
    if (an_align_fit(x, y, m, &line, keep)) goto done;
    /* Inside the bounds: the fitted slope, limited to +-ALIGN_SLOPE_SPAN, when some offset of it
     * is; else the slope nearest it for which one is (the ends' slope is noisy, the truth is a
     * line inside every bound); refused when no slope within +-ALIGN_SLOPE_SPAN has one. */
    bounds_ctx bc = {x, lo, hi, keep, m, line.x0_ns};
    double s_fit = line.slope < -ALIGN_SLOPE_SPAN ? -ALIGN_SLOPE_SPAN
                   : line.slope > ALIGN_SLOPE_SPAN ? ALIGN_SLOPE_SPAN
                                                   : line.slope;
    double s_use = s_fit;
    double s_best = ternary_max(&bc, -ALIGN_SLOPE_SPAN, ALIGN_SLOPE_SPAN, 0, 0);
    if (bound_gap(&bc, s_fit) > bound_gap(&bc, s_best)) s_best = s_fit;
    rc = 2;
    if (bound_gap(&bc, s_best) < 0) goto done;
    if (bound_gap(&bc, s_fit) < 0) s_use = feasible_edge(&bc, s_best, s_fit);
    /* the offset: the fit's, or for another slope the median of the kept points' y - s (x - x0)
     * at that slope; then moved by the least that puts it inside the bounds */
    double c0 = line.offset_ns;
    if (s_use != line.slope) {
        size_t nk = 0;
        double *v = malloc(m * sizeof *v);
        rc = -1;
        if (!v) goto done;
        for (size_t k = 0; k < m; k++)
            if (keep[k]) v[nk++] = (double)y[k] - s_use * (double)(x[k] - line.x0_ns);
        if (nk) c0 = median(v, nk);
        free(v);
    }
    double c_lo = bound_lo(&bc, s_use), c_hi = bound_hi(&bc, s_use);
    double c = c0 < c_lo ? c_lo : c0 > c_hi ? c_hi : c0;
    int64_t x1 = x[0];
    for (size_t k = 1; k < m; k++)
        if (x[k] > x1) x1 = x[k];
    memset(clock, 0, sizeof *clock);
    clock->has_open = 1;
    clock->sync_ns = line.x0_ns;
    clock->offset_ns = llround(c);
    if (x1 > line.x0_ns) {
        clock->has_close = 1;
        clock->sync_close_ns = x1;
        clock->offset_close_ns = llround(c + s_use * (double)(x1 - line.x0_ns));
    }
    /* the spread: the largest |y - theta(x)| of the kept instances, exactly, on the clock the set
     * maps with */
    int64_t spread = 0;
    for (size_t k = 0; k < m; k++) {
        int64_t mapped;
        if (!keep[k] || st_rank_clock_map(clock, x[k], &mapped) != ST_OK) continue;
        __int128 theta = (__int128)mapped - x[k], d = (__int128)y[k] - theta;
        if (d < 0) d = -d;
        if (d > spread) spread = d > INT64_MAX ? INT64_MAX : (int64_t)d;
    }
    /* the room: how far from theta any line inside every kept bound can be, slope and offset
     * both free. The difference of two lines is largest at an end of the span, so over the
     * lines of slopes [s_a, s_b] (those with bound_gap >= 0) the room is the largest, at x0 and
     * at x1, of max(bound_hi(s) + s dx) - theta and theta - min(bound_lo(s) + s dx). */
    double s_a = feasible_edge(&bc, s_best, -ALIGN_SLOPE_SPAN);
    double s_b = feasible_edge(&bc, s_best, ALIGN_SLOPE_SPAN);
    double room = 0;
    for (int end = 0; end < 2; end++) {
        double dx = end ? (double)(x1 - line.x0_ns) : 0;
        double th = c + s_use * dx;
        double sh = ternary_max(&bc, s_a, s_b, dx, 1), sl = ternary_max(&bc, s_a, s_b, dx, 2);
        double up = bound_hi(&bc, sh) + sh * dx - th, down = th - (bound_lo(&bc, sl) + sl * dx);
        /* the ends of the slope interval too: the searches stop short of them */
        for (int e = 0; e < 2; e++) {
            double se = e ? s_b : s_a;
            if (bound_hi(&bc, se) + se * dx - th > up) up = bound_hi(&bc, se) + se * dx - th;
            if (th - (bound_lo(&bc, se) + se * dx) > down) down = th - (bound_lo(&bc, se) + se * dx);
        }
        if (up > room) room = up;
        if (down > room) room = down;
    }
    /* + 2 ns: the clock's rounding to the ns at both ends */
    double bound_d = ceil(room) + 2;
    int64_t bound = bound_d >= 9.2e18 ? INT64_MAX : (int64_t)bound_d;
    int64_t u = spread > bound ? spread : bound;
    clock->uncertainty_ns = clock->uncertainty_close_ns = u;
    al->kept = (uint32_t)(line.kept > UINT32_MAX ? UINT32_MAX : line.kept);
    al->uncertainty_ns = u;
    al->spread_ns = spread;
    rc = 0;
done:
    if (rc < 0) an_error("out of memory");
    free(x);
    free(y);
    free(lo);
    free(hi);
    free(keep);
    return rc;
}

/* Collectives: the reference is the lowest rank with a comm range; every other rank with one
 * is fitted to it; a rank without any keeps its own clock. 0 aligned; else why not in why
 * (for the note or the error) and 1, or -1 on a failure already printed (exit code in *fail). */
static int align_collectives(an_trace *t, char *why, size_t why_size, int *fail)
{
    an_stragglers_arrival *arr = NULL;
    size_t n = 0;
    clocks_none(t);
    int rc = read_collectives(t, &arr, &n);
    if (rc) {
        *fail = rc;
        return -1;
    }
    uint32_t nr = t->n_ranks, with = 0, ref = nr;
    unsigned char *has = calloc(nr ? nr : 1, 1);
    st_rank_clock *clocks = calloc(nr ? nr : 1, sizeof *clocks);
    if (!has || !clocks) {
        free(arr);
        free(has);
        free(clocks);
        an_error("out of memory");
        *fail = AN_EXIT_FAIL;
        return -1;
    }
    for (size_t i = 0; i < n; i++) has[arr[i].rank_ix] = 1;
    for (uint32_t p = 0; p < nr; p++)
        if (has[p]) {
            with++;
            if (ref == nr) ref = p;
        }
    int out = 0;
    if (with < 2) {
        snprintf(why, why_size, "%s of its ranks has a comm range (collectives need two ranks or more)",
                 with ? "only one" : "none");
        out = 1;
    }
    for (uint32_t p = 0; !out && p < nr; p++) {
        if (p == ref || !has[p]) continue;
        int f = fit_part(arr, n, ref, p, &clocks[p], &t->align[p]);
        if (f < 0) {
            *fail = AN_EXIT_FAIL;
            out = -1;
        } else if (f == 2) {
            snprintf(why, why_size,
                     "rank %d's collectives with rank %d are not barriers (no offset lets every kept instance's "
                     "ranks both enter it before either leaves)",
                     rank_of_part(t, p), rank_of_part(t, ref));
            out = 1;
        } else if (f > 0) {
            snprintf(why, why_size, "rank %d shares %u collective instance%s with rank %d, fewer than the %d needed",
                     rank_of_part(t, p), t->align[p].instances, t->align[p].instances == 1 ? "" : "s",
                     rank_of_part(t, ref), AN_ALIGN_MIN_INSTANCES);
            out = 1;
        }
    }
    for (uint32_t p = 0; !out && p < nr; p++) {
        if (p == ref || !has[p]) continue;
        if (st_reader_set_part_clock(t->r, p, &clocks[p]) != ST_OK) {
            snprintf(why, why_size, "rank %d's fitted clock cannot be used: %s", rank_of_part(t, p), st_last_error());
            out = 1;
        }
    }
    if (!out) {
        for (uint32_t p = 0; p < nr; p++) {
            an_rank_align *al = &t->align[p];
            al->reference_rank = rank_of_part(t, ref);
            if (p == ref) *al = (an_rank_align){AN_CLOCK_REFERENCE, 0, 0, 0, al->reference_rank, 0};
            else if (has[p]) al->method = AN_CLOCK_COLLECTIVES;
            else *al = (an_rank_align){AN_CLOCK_NONE, 0, 0, 0, -1, 0};
        }
        t->align_used = AN_ALIGN_COLLECTIVES;
    } else {
        clocks_none(t);
    }
    free(arr);
    free(has);
    free(clocks);
    return out;
}

/* "0, 2, 5" of the parts whose meta clock is (want 1) or is not (0) present, cut with "...". */
static void list_meta_ranks(const an_trace *t, int want, char *buf, size_t size)
{
    size_t len = 0;
    buf[0] = '\0';
    for (uint32_t p = 0; p < t->n_ranks; p++) {
        st_rank_clock c;
        st_reader_rank_clock(t->ranks[p].r, &c);
        if (c.has_open != want) continue;
        if (len + 24 >= size) {
            snprintf(buf + len, size - len, ", ...");
            return;
        }
        len += (size_t)snprintf(buf + len, size - len, "%s%d", len ? ", " : "", rank_of_part(t, p));
    }
}

int an_align_set(an_trace *t, an_align_mode mode)
{
    free(t->align);
    if (!(t->align = calloc(t->n_ranks ? t->n_ranks : 1, sizeof *t->align))) {
        an_error("out of memory");
        return AN_EXIT_FAIL;
    }
    uint32_t with_meta = 0;
    for (uint32_t p = 0; p < t->n_ranks; p++) {
        st_rank_clock c;
        st_reader_rank_clock(t->ranks[p].r, &c);
        with_meta += (uint32_t)(c.has_open != 0);
    }
    int all_meta = with_meta == t->n_ranks;
    char without[256], with[256];
    list_meta_ranks(t, 0, without, sizeof without);
    list_meta_ranks(t, 1, with, sizeof with);
    if (mode == AN_ALIGN_AUTO && t->n_ranks < 2) mode = all_meta ? AN_ALIGN_META : AN_ALIGN_NONE; /* nothing to align to */
    if (mode == AN_ALIGN_NONE) {
        clocks_none(t);
        return AN_EXIT_OK;
    }
    if (mode == AN_ALIGN_META || (mode == AN_ALIGN_AUTO && all_meta)) {
        if (!all_meta) {
            an_error("%s: --align meta: rank%s %s %s no clock offsets in meta (clock_offset_ns); give --align "
                     "collectives or none",
                     t->label, t->n_ranks - with_meta == 1 ? "" : "s", without,
                     t->n_ranks - with_meta == 1 ? "has" : "have");
            return AN_EXIT_USAGE;
        }
        for (uint32_t p = 0; p < t->n_ranks; p++) {
            st_rank_clock c;
            st_reader_part_clock(t->r, p, &c); /* as the set opened: meta's */
            t->align[p] = (an_rank_align){AN_CLOCK_META, st_rank_clock_uncertainty(&c), 0, 0, -1, 0};
        }
        t->align_used = AN_ALIGN_META;
        return AN_EXIT_OK;
    }
    char why[512];
    int fail = AN_EXIT_OK;
    int rc = align_collectives(t, why, sizeof why, &fail);
    if (rc < 0) return fail;
    if (rc > 0 && mode == AN_ALIGN_COLLECTIVES) {
        an_error("%s: --align collectives: %s", t->label, why);
        return AN_EXIT_USAGE;
    }
    if (rc > 0) {
        an_note("%s: rank%s %s %s no clock offsets in meta and %s: the ranks are not aligned (each on its own "
                "clock; --align none)",
                t->label, t->n_ranks - with_meta == 1 ? "" : "s", without,
                t->n_ranks - with_meta == 1 ? "has" : "have", why);
        return AN_EXIT_OK;
    }
    if (with_meta && mode == AN_ALIGN_AUTO)
        an_note("%s: rank%s %s %s no clock offsets in meta: every rank is aligned from its collectives, the "
                "offsets that rank%s %s measured left unused",
                t->label, t->n_ranks - with_meta == 1 ? "" : "s", without,
                t->n_ranks - with_meta == 1 ? "has" : "have", with_meta == 1 ? "" : "s", with);
    return AN_EXIT_OK;
}
