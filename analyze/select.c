/* select.c: what a command looks at: time and step windows (--steps A:B,
 * --time T0:T1, resolved against a trace's span and step marks) and name
 * filters (--role, --thread, --stage, resolved against its threads and
 * stages). An_select (analyze.h) holds one of each; stats.c and the
 * commands apply them.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "analyze.h"

/* ---- windows --------------------------------------------------------------------------- */

/* Splits "A:B" into its sides (either may be empty); -1 without one ':'. */
static int split_colon(const char *s, char *a, char *b, size_t size)
{
    const char *colon = strchr(s, ':');
    if (!colon || strchr(colon + 1, ':')) return -1;
    size_t la = (size_t)(colon - s), lb = strlen(colon + 1);
    if (la >= size || lb >= size) return -1;
    memcpy(a, s, la);
    a[la] = '\0';
    memcpy(b, colon + 1, lb + 1);
    return 0;
}

int an_window_parse_steps(an_window_spec *w, const char *s)
{
    char a[64], b[64];
    memset(w, 0, sizeof *w);
    w->kind = AN_WIN_STEPS;
    w->text = s;
    if (split_colon(s, a, b, sizeof a) || (*a && an_parse_u64(a, &w->step_a)) ||
        (*b && an_parse_u64(b, &w->step_b))) {
        an_error("--steps '%s': expected A:B with step numbers (A: or :B leave an end open)", s);
        return -1;
    }
    w->has_a = *a != '\0';
    w->has_b = *b != '\0';
    if (w->has_a && w->has_b && w->step_a >= w->step_b) {
        an_error("--steps '%s': the first step must come before the second", s);
        return -1;
    }
    return 0;
}

static int parse_seconds(const char *s, int64_t *ns)
{
    if (!*s) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v) || v < 0 || v > 1e9) return -1;
    *ns = (int64_t)llround(v * 1e9);
    return 0;
}

int an_window_parse_time(an_window_spec *w, const char *s)
{
    char a[64], b[64];
    memset(w, 0, sizeof *w);
    w->kind = AN_WIN_TIME;
    w->text = s;
    if (split_colon(s, a, b, sizeof a) || (*a && parse_seconds(a, &w->time_a_ns)) ||
        (*b && parse_seconds(b, &w->time_b_ns))) {
        an_error("--time '%s': expected T0:T1 in seconds from the trace start (T0: or :T1 leave an end open)", s);
        return -1;
    }
    w->has_a = *a != '\0';
    w->has_b = *b != '\0';
    if (w->has_a && w->has_b && w->time_a_ns >= w->time_b_ns) {
        an_error("--time '%s': T0 must be less than T1", s);
        return -1;
    }
    return 0;
}

static int find_step(const an_trace *t, uint64_t step, int64_t *ts)
{
    uint32_t lo = 0, hi = st_reader_n_steps(t->r);
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        const st_step_info *s = st_reader_step(t->r, mid);
        if (s->step == step) {
            *ts = s->ts_ns;
            return 0;
        }
        if (s->step < step) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

static int64_t add_sat(int64_t a, int64_t b)
{
    if (b > 0 && a > INT64_MAX - b) return INT64_MAX;
    if (b < 0 && a < INT64_MIN - b) return INT64_MIN;
    return a + b;
}

int an_window_resolve(const an_window_spec *w, const an_trace *t, int64_t *t0, int64_t *t1)
{
    *t0 = t->span_t0_ns;
    *t1 = t->span_t1_ns;
    if (w->kind == AN_WIN_ALL) return AN_EXIT_OK;
    if (w->kind == AN_WIN_STEPS) {
        uint32_t n = st_reader_n_steps(t->r);
        if (n == 0) {
            an_error("--steps %s: %s has no step marks", w->text, t->path);
            return AN_EXIT_USAGE;
        }
        const uint64_t first = st_reader_step(t->r, 0)->step, last = st_reader_step(t->r, n - 1)->step;
        const uint64_t steps[2] = {w->step_a, w->step_b};
        const int has[2] = {w->has_a, w->has_b};
        int64_t *out[2] = {t0, t1};
        for (int i = 0; i < 2; i++) {
            if (has[i] && find_step(t, steps[i], out[i])) {
                an_error("--steps %s: step %llu has no mark in %s (marks of steps %llu-%llu)", w->text,
                         (unsigned long long)steps[i], t->path, (unsigned long long)first,
                         (unsigned long long)last);
                return AN_EXIT_USAGE;
            }
        }
    } else {
        if (w->has_a) *t0 = add_sat(t->origin_ns, w->time_a_ns);
        if (w->has_b) *t1 = add_sat(t->origin_ns, w->time_b_ns);
        if (*t0 < t->span_t0_ns) *t0 = t->span_t0_ns;
        if (*t1 > t->span_t1_ns) *t1 = t->span_t1_ns;
    }
    if (*t1 <= *t0) {
        char a[40], b[40];
        an_fmt_fixed(a, t->span_t0_ns - t->origin_ns, 9, 3);
        an_fmt_fixed(b, t->span_t1_ns - t->origin_ns, 9, 3);
        an_error("%s %s selects no time in %s (it spans %s-%s s)", w->kind == AN_WIN_STEPS ? "--steps" : "--time",
                 w->text, t->path, a, b);
        return AN_EXIT_USAGE;
    }
    return AN_EXIT_OK;
}

/* ---- filters --------------------------------------------------------------------------- */

int an_filter_add(const char ***list, uint32_t *n, const char *value)
{
    /* Every name of a comma list gets its own copy, owned by the list. */
    for (const char *p = value;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len > 0) {
            const char **l = realloc((void *)*list, (*n + 1) * sizeof *l);
            if (!l) return -1;
            *list = l;
            char *name = strndup(p, len);
            if (!name) return -1;
            l[(*n)++] = name;
        }
        if (!comma) break;
        p = comma + 1;
    }
    return 0;
}

void an_filter_free(an_filter *f)
{
    const char **lists[3] = {f->roles, f->threads, f->stages};
    uint32_t counts[3] = {f->n_roles, f->n_threads, f->n_stages};
    for (int l = 0; l < 3; l++) {
        for (uint32_t i = 0; i < counts[l]; i++) free((void *)lists[l][i]);
        free((void *)lists[l]);
    }
    memset(f, 0, sizeof *f);
}

static int in_list(const char *const *list, uint32_t n, const char *s)
{
    for (uint32_t i = 0; i < n; i++)
        if (s && strcmp(list[i], s) == 0) return 1;
    return 0;
}

static int thread_matches(const char *name, const st_thread_info *th)
{
    if (strcmp(name, th->name) == 0) return 1;
    uint64_t id;
    return an_parse_u64(name, &id) == 0 && id == th->id;
}

/* The i-th name of the kind: a stage's, a thread's role or a thread's name. */
static const char *name_at(const an_trace *t, an_names_kind kind, uint32_t i)
{
    return kind == AN_NAMES_STAGES ? st_reader_stage(t->r, i)->name
           : kind == AN_NAMES_ROLES ? st_reader_thread(t->r, i)->role
                                    : st_reader_thread(t->r, i)->name;
}

const char *an_names_in(const an_trace *t, an_names_kind kind, char *buf, size_t size)
{
    uint32_t n = kind == AN_NAMES_STAGES ? st_reader_n_stages(t->r) : st_reader_n_threads(t->r);
    size_t len = 0;
    uint32_t shown = 0, more = 0;
    buf[0] = '\0';
    for (uint32_t i = 0; i < n; i++) {
        const char *name = name_at(t, kind, i);
        int seen = 0;
        for (uint32_t j = 0; j < i && !seen; j++) seen = strcmp(name, name_at(t, kind, j)) == 0;
        if (seen) continue;
        char clean[ST_NAME_MAX + 1];
        an_clean(name, clean, sizeof clean);
        /* room for this name, and for the " ... and N more" that may follow */
        if (more || shown >= AN_NAMES_MAX || len + strlen(clean) + 2 + 24 >= size) {
            more++;
            continue;
        }
        len += (size_t)snprintf(buf + len, size - len, "%s%s", shown ? ", " : "", clean);
        shown++;
    }
    if (more) snprintf(buf + len, size - len, " ... and %u more", more);
    if (!shown && !more) snprintf(buf, size, "none");
    return buf;
}

int an_filter_resolve(const an_filter *f, const an_trace *t, uint8_t *thread_on, uint8_t *stage_on)
{
    uint32_t n_threads = st_reader_n_threads(t->r), n_stages = st_reader_n_stages(t->r);
    for (uint32_t i = 0; i < f->n_roles; i++) {
        int found = 0;
        for (uint32_t j = 0; j < n_threads && !found; j++)
            found = strcmp(f->roles[i], st_reader_thread(t->r, j)->role) == 0;
        if (!found) {
            char names[AN_NAMES_BUF], clean[ST_NAME_MAX + 1];
            an_error("--role %s: no thread of %s has that role (roles: %s)", an_clean(f->roles[i], clean, sizeof clean),
                     t->path, an_names_in(t, AN_NAMES_ROLES, names, sizeof names));
            return AN_EXIT_USAGE;
        }
    }
    for (uint32_t i = 0; i < f->n_threads; i++) {
        int found = 0;
        for (uint32_t j = 0; j < n_threads && !found; j++)
            found = thread_matches(f->threads[i], st_reader_thread(t->r, j));
        if (!found) {
            char names[AN_NAMES_BUF], clean[ST_NAME_MAX + 1];
            an_error("--thread %s: %s has no thread of that name or id (threads: %s)",
                     an_clean(f->threads[i], clean, sizeof clean), t->path,
                     an_names_in(t, AN_NAMES_THREADS, names, sizeof names));
            return AN_EXIT_USAGE;
        }
    }
    for (uint32_t i = 0; i < f->n_stages; i++) {
        int found = 0;
        for (uint32_t s = 0; s < n_stages && !found; s++)
            found = strcmp(f->stages[i], st_reader_stage(t->r, s)->name) == 0;
        if (!found) {
            char names[AN_NAMES_BUF], clean[ST_NAME_MAX + 1];
            an_error("--stage %s: %s has no stage of that name (stages: %s)", an_clean(f->stages[i], clean, sizeof clean),
                     t->path, an_names_in(t, AN_NAMES_STAGES, names, sizeof names));
            return AN_EXIT_USAGE;
        }
    }
    for (uint32_t j = 0; j < n_threads; j++) {
        const st_thread_info *th = st_reader_thread(t->r, j);
        int on = !f->n_roles || in_list(f->roles, f->n_roles, th->role);
        if (on && f->n_threads) {
            on = 0;
            for (uint32_t i = 0; i < f->n_threads && !on; i++) on = thread_matches(f->threads[i], th);
        }
        thread_on[j] = (uint8_t)on;
    }
    for (uint32_t s = 0; s < n_stages; s++)
        stage_on[s] = (uint8_t)(!f->n_stages || in_list(f->stages, f->n_stages, st_reader_stage(t->r, s)->name));
    return AN_EXIT_OK;
}
