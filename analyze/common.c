/* common.c: helpers every `analyze` command uses: one-line messages, the
 * option parser, opening a trace (through the tracer's defensive reader,
 * with one-line errors) and measuring its span, time and step windows
 * (--steps A:B, --time T0:T1), name filters (--role, --thread, --stage) and
 * progress on a terminal. Commands print errors where they find them and
 * return an exit code; only main() exits.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "analyze.h"

/* ---- messages --------------------------------------------------------------------- */

/* Messages are one line: a newline inside (from a trace or SQLite) is shown as a space. */
static FILE *g_warn_to; /* NULL: stderr */

void an_warn_to(FILE *f) { g_warn_to = f; }

static void vmessage_to(FILE *to, const char *prefix, const char *fmt, va_list ap)
{
    char buf[1024];
    vsnprintf(buf, sizeof buf, fmt, ap);
    for (char *p = buf; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
    fprintf(to, "analyze: %s%s\n", prefix, buf);
}

static void vmessage(const char *prefix, const char *fmt, va_list ap) { vmessage_to(stderr, prefix, fmt, ap); }

void an_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmessage("", fmt, ap);
    va_end(ap);
}

void an_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmessage_to(g_warn_to ? g_warn_to : stderr, "warning: ", fmt, ap);
    va_end(ap);
}

int an_usage_error(const char *cmd, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    an_error("%s: %s (see: analyze %s --help)", cmd, buf, cmd);
    return AN_EXIT_USAGE;
}

/* ---- options ------------------------------------------------------------------------- */

int an_args_init(an_args *a, const char *cmd, int argc, char **argv)
{
    memset(a, 0, sizeof *a);
    a->cmd = cmd;
    a->argc = argc;
    a->argv = argv;
    a->i = 1; /* argv[0] is the command */
    a->pos = calloc((size_t)(argc > 0 ? argc : 1), sizeof *a->pos);
    return a->pos ? 0 : -1;
}

void an_args_free(an_args *a)
{
    free(a->pos);
    a->pos = NULL;
}

int an_args_next(an_args *a, const an_opt *opts)
{
    while (a->i < a->argc) {
        const char *arg = a->argv[a->i++];
        if (a->only_positionals || arg[0] != '-' || arg[1] == '\0') {
            a->pos[a->n_pos++] = arg; /* "-" alone is a positional (stdout) */
            continue;
        }
        if (strcmp(arg, "--") == 0) {
            a->only_positionals = 1;
            continue;
        }
        if (strcmp(arg, "-h") == 0) return AN_OPT_HELP;
        if (arg[1] != '-') {
            an_usage_error(a->cmd, "unknown option '%s'", arg);
            return -1;
        }
        const char *name = arg + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        for (const an_opt *o = opts; o && o->name; o++) {
            if (strlen(o->name) != len || strncmp(o->name, name, len) != 0) continue;
            a->value = NULL;
            if (o->has_arg) {
                if (eq) {
                    a->value = eq + 1;
                } else if (a->i < a->argc) {
                    a->value = a->argv[a->i++];
                } else {
                    an_usage_error(a->cmd, "option '--%s' needs a value", o->name);
                    return -1;
                }
            } else if (eq) {
                an_usage_error(a->cmd, "option '--%s' takes no value", o->name);
                return -1;
            }
            return o->id;
        }
        an_usage_error(a->cmd, "unknown option '%.*s'", (int)(len + 2), arg);
        return -1;
    }
    return 0;
}

int an_args_next_own(an_args *a, const an_opt *opts, an_common_opts *c)
{
    int id;
    while ((id = an_args_next(a, opts)) > 0) {
        if (id == AN_OPT_HELP) {
            fputs(c->help, stdout);
            c->help_shown = 1;
            return -1;
        }
        if (id == AN_OPT_FORMAT && c->format) {
            if (an_parse_format(a->value, c->format)) {
                an_usage_error(a->cmd, "--format must be text, csv or json, not '%s'", a->value);
                return -1;
            }
            continue;
        }
        if ((id == AN_OPT_STEPS || id == AN_OPT_TIME) && c->window) {
            if (c->window->kind != AN_WIN_ALL && !c->window_last_wins) {
                an_usage_error(a->cmd, "give one window: --steps or --time, once");
                return -1;
            }
            if (id == AN_OPT_STEPS ? an_window_parse_steps(c->window, a->value)
                                   : an_window_parse_time(c->window, a->value))
                return -1;
            continue;
        }
        return id;
    }
    return id;
}

uint64_t an_hash_name(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

int an_parse_u64(const char *s, uint64_t *out)
{
    if (!s || *s < '0' || *s > '9') return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end) return -1;
    *out = v;
    return 0;
}

int an_parse_format(const char *s, an_format *out)
{
    if (strcmp(s, "text") == 0) *out = AN_FMT_TEXT;
    else if (strcmp(s, "csv") == 0) *out = AN_FMT_CSV;
    else if (strcmp(s, "json") == 0) *out = AN_FMT_JSON;
    else return -1;
    return 0;
}

/* ---- traces ---------------------------------------------------------------------------- */

const char *an_trace_meta(const an_trace *t, const char *key) { return st_reader_meta(t->r, key); }

int an_trace_meta_i64(const an_trace *t, const char *key, int64_t *out)
{
    const char *s = an_trace_meta(t, key);
    if (!s || !*s) return -1;
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (errno || *end) return -1;
    *out = v;
    return 0;
}

/* First and last range event from the chunk headers, and totals for progress
 * and info (the reader's one pass over them, which also type-checks every
 * chunk row, so every command refuses a mistyped one). */
static int read_chunk_headers(an_trace *t, int64_t *first, int64_t *last, int *has)
{
    st_chunk_totals tot;
    if (st_reader_chunk_totals(t->r, &tot) != ST_OK) {
        an_trace_fail(t);
        return -1;
    }
    *has = tot.has_ranges;
    if (*has) {
        *first = tot.first_ns;
        *last = tot.last_ns;
    }
    t->n_ranges_hint = tot.n_ranges > 0 && tot.n_ranges < 1.8e19 ? (uint64_t)tot.n_ranges : 0;
    t->n_samples_hint = tot.n_samples > 0 && tot.n_samples < 1.8e19 ? (uint64_t)tot.n_samples : 0;
    return 0;
}

/* lost_spans (optional): spans the writer could not store. A row of the
 * wrong types is refused like any table's. */
static int read_lost_spans(an_trace *t)
{
    sqlite3 *db = st_reader_db(t->r);
    sqlite3_stmt *st;
    int rc = 0;
    /* The reader checked its shape (a plain table) and check_values the
     * meta count lost_events. */
    if (sqlite3_prepare_v2(db, "SELECT 1 FROM main.sqlite_master WHERE name = 'lost_spans'", -1, &st, NULL) !=
        SQLITE_OK)
        goto sql_fail;
    int step = sqlite3_step(st);
    int exists = step == SQLITE_ROW;
    sqlite3_finalize(st);
    if (step != SQLITE_ROW && step != SQLITE_DONE) goto sql_fail;
    int64_t meta_lost = -1;
    if (an_trace_meta(t, "lost_events")) an_trace_meta_i64(t, "lost_events", &meta_lost);
    int64_t sum = 0;
    if (exists) {
        if (sqlite3_prepare_v2(db,
                               "SELECT id, source, thread, device, t0_ns, t1_ns, n_records FROM main.lost_spans "
                               "ORDER BY t0_ns, id",
                               -1, &st, NULL) != SQLITE_OK)
            goto sql_fail;
        size_t cap = 0;
        while ((step = sqlite3_step(st)) == SQLITE_ROW) {
            const char *bad = NULL;
            const char *src = (const char *)sqlite3_column_text(st, 1);
            if (sqlite3_column_type(st, 1) != SQLITE_TEXT ||
                (strcmp(src, "ranges") && strcmp(src, "counters") && strcmp(src, "gpu")))
                bad = "source must be 'ranges', 'counters' or 'gpu'";
            else if (sqlite3_column_type(st, 2) != SQLITE_INTEGER && sqlite3_column_type(st, 2) != SQLITE_NULL)
                bad = "thread must be an integer or NULL";
            else if (sqlite3_column_type(st, 3) != SQLITE_INTEGER && sqlite3_column_type(st, 3) != SQLITE_NULL)
                bad = "device must be an integer or NULL";
            else if (sqlite3_column_type(st, 4) != SQLITE_INTEGER || sqlite3_column_type(st, 5) != SQLITE_INTEGER ||
                     sqlite3_column_int64(st, 4) > sqlite3_column_int64(st, 5))
                bad = "t0_ns and t1_ns must be integers with t0_ns <= t1_ns";
            else if (sqlite3_column_type(st, 6) != SQLITE_INTEGER || sqlite3_column_int64(st, 6) < 0 ||
                     sqlite3_column_int64(st, 6) > INT64_MAX - sum)
                bad = "n_records must be a count";
            if (bad) {
                an_error("%s: trace table 'lost_spans': row %lld: %s", t->path,
                         (long long)sqlite3_column_int64(st, 0), bad);
                rc = -1;
                break;
            }
            if (t->n_lost == cap) {
                cap = cap ? cap * 2 : 16;
                an_lost_span *a = cap < UINT32_MAX ? realloc(t->lost, cap * sizeof *a) : NULL;
                if (!a) {
                    an_error("out of memory");
                    rc = -1;
                    break;
                }
                t->lost = a;
            }
            an_lost_span *l = &t->lost[t->n_lost++];
            l->t0_ns = sqlite3_column_int64(st, 4);
            l->t1_ns = sqlite3_column_int64(st, 5);
            l->n_records = sqlite3_column_int64(st, 6);
            sum += l->n_records;
        }
        sqlite3_finalize(st);
        if (!rc && step != SQLITE_DONE) goto sql_fail;
    }
    t->lost_events = meta_lost >= 0 ? meta_lost : sum;
    return rc;
sql_fail:
    an_error("%s: cannot read table 'lost_spans': %s", t->path, sqlite3_errmsg(db));
    return -1;
}

uint32_t an_trace_lost_in(const an_trace *t, int64_t t0_ns, int64_t t1_ns, int64_t *records)
{
    uint32_t n = 0;
    int64_t sum = 0;
    for (uint32_t i = 0; i < t->n_lost; i++) {
        if (t->lost[i].t1_ns < t0_ns || t->lost[i].t0_ns > t1_ns) continue;
        n++;
        sum += t->lost[i].n_records;
    }
    if (records) *records = sum;
    return n;
}

/* Values the format bounds (docs/analyze.md, "Values out of range"): counts
 * in meta are 0 or more; times on the run's clock (meta start_ns and end_ns,
 * step marks) are 0 or more, and the run ends after it starts; the tokens of
 * all steps add up within int64. With every time in [0, INT64_MAX], any
 * difference of two times fits in an int64, and so does any sum of tokens. */
static const char *meta_shown(const char *s, char *buf, size_t size)
{
    size_t i = 0;
    for (; s[i] && i + 1 < size; i++) buf[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
    buf[i] = '\0';
    return buf;
}

static int check_values(an_trace *t)
{
    static const char *const counts[] = {"dropped_events", "gpu_dropped_records", "unmatched_ends",
                                         "rejected_steps", "clock_clamped", "bad_counters",
                                         "failed_commits", "lost_events"};
    static const char *const times[] = {"start_ns", "end_ns"};
    char clean[64];
    int64_t v;
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        const char *s = an_trace_meta(t, counts[i]);
        if (s && (an_trace_meta_i64(t, counts[i], &v) || v < 0)) {
            an_error("%s: trace table 'meta': key '%s' is '%s', not a count (0 to %lld)", t->path, counts[i],
                     meta_shown(s, clean, sizeof clean), (long long)INT64_MAX);
            return -1;
        }
    }
    int64_t tv[2] = {0, 0};
    for (int i = 0; i < 2; i++) {
        const char *s = an_trace_meta(t, times[i]);
        if (s && (an_trace_meta_i64(t, times[i], &tv[i]) || tv[i] < 0)) {
            an_error("%s: trace table 'meta': key '%s' is '%s', not a time on the run's clock (0 to %lld ns)",
                     t->path, times[i], meta_shown(s, clean, sizeof clean), (long long)INT64_MAX);
            return -1;
        }
    }
    if (an_trace_meta(t, "start_ns") && an_trace_meta(t, "end_ns") && tv[1] < tv[0]) {
        an_error("%s: trace table 'meta': end_ns %lld is before start_ns %lld", t->path, (long long)tv[1],
                 (long long)tv[0]);
        return -1;
    }
    uint64_t tokens = 0;
    for (uint32_t i = 0, n = st_reader_n_steps(t->r); i < n; i++) {
        const st_step_info *st = st_reader_step(t->r, i);
        if (st->ts_ns < 0) {
            an_error("%s: trace table 'steps': step %llu: ts_ns %lld is negative (times on the run's clock are not)",
                     t->path, (unsigned long long)st->step, (long long)st->ts_ns);
            return -1;
        }
        tokens += st->tokens; /* each at most INT64_MAX: the sum cannot wrap before it is caught */
        if (tokens > (uint64_t)INT64_MAX) {
            an_error("%s: trace table 'steps': step %llu: the tokens of the steps up to it add up past %lld", t->path,
                     (unsigned long long)st->step, (long long)INT64_MAX);
            return -1;
        }
    }
    return 0;
}

int an_trace_open(an_trace *t, const char *path)
{
    memset(t, 0, sizeof *t);
    t->path = path;
    if (st_reader_open(&t->r, path) != ST_OK) {
        /* Most of the reader's messages name the file; the others get it. */
        const char *msg = st_last_error();
        if (strstr(msg, path)) an_error("%s", msg);
        else an_error("%s: %s", path, msg);
        return AN_EXIT_USAGE;
    }
    if (an_trace_init(t)) {
        an_trace_close(t);
        return AN_EXIT_USAGE;
    }
    return AN_EXIT_OK;
}

int an_trace_init(an_trace *t)
{
    int64_t first = 0, last = 0;
    int has = 0;
    if ((!t->is_set && check_values(t)) || read_chunk_headers(t, &first, &last, &has) ||
        (!t->is_set && read_lost_spans(t)))
        return AN_EXIT_USAGE;
    uint32_t n_steps = st_reader_n_steps(t->r);
    if (n_steps) {
        int64_t s0 = st_reader_step(t->r, 0)->ts_ns, s1 = st_reader_step(t->r, n_steps - 1)->ts_ns;
        if (!has || s0 < first) first = s0;
        if (!has || s1 > last) last = s1;
        has = 1;
    }
    int64_t start;
    int has_start = an_trace_meta_i64(t, "start_ns", &start) == 0;
    if (has_start && t->is_set) {
        /* the first rank's open, on rank 0's clock */
        st_rank_clock c;
        st_reader_rank_clock(st_reader_part(t->r, 0), &c);
        has_start = st_rank_clock_map(&c, start, &start) == ST_OK;
    }
    if (has_start && (!has || start <= first)) t->origin_ns = start;
    else t->origin_ns = has ? first : 0;
    /* An empty trace spans nothing, at its start. */
    t->has_span = has;
    t->span_t0_ns = has ? first : t->origin_ns;
    t->span_t1_ns = has ? last : t->origin_ns;
    return AN_EXIT_OK;
}

void an_set_close(an_trace *t);

void an_trace_close(an_trace *t)
{
    if (!t) return;
    if (t->is_set) an_set_close(t);
    st_reader_close(t->r);
    t->r = NULL;
    free(t->lost);
    t->lost = NULL;
    t->n_lost = 0;
}

int an_trace_fail(const an_trace *t)
{
    an_error("%s: %s", t->path, st_last_error());
    return AN_EXIT_USAGE;
}

static int64_t lost_end(const an_trace *t)
{
    int64_t end = INT64_MIN;
    for (uint32_t i = 0; i < t->n_lost; i++)
        if (t->lost[i].t1_ns > end) end = t->lost[i].t1_ns;
    return end;
}

void an_set_warn(const an_trace *t);

/* The one place of a trace's warnings (docs/analyze.md, "Incomplete
 * traces"): its incomplete status, dropped and lost events. A rank of a set
 * is also incomplete when interrupted: one rank stopped by a signal is a run
 * cut short (mpirun stops the others when one dies), where a file alone that
 * was interrupted was stopped on purpose and flushed whole. */
static void warn_trace(const an_trace *t, int as_rank)
{
    const char *status = an_trace_meta(t, "status");
    if (status && strcmp(status, "running") == 0)
        an_warn("%s is incomplete (status running: the run did not finish); analysing what it holds",
                t->path);
    else if (as_rank && status && strcmp(status, "interrupted") == 0)
        an_warn("%s is incomplete (status interrupted: the run was stopped by a signal); analysing what it holds",
                t->path);
    int64_t dropped;
    if (an_trace_meta_i64(t, "dropped_events", &dropped) == 0 && dropped > 0)
        an_warn("%s: %lld events were dropped (full rings); stage times may be undercounted", t->path,
                (long long)dropped);
    if (t->lost_events > 0 || t->n_lost > 0) {
        if (t->n_lost)
            an_warn("%s: %lld events were lost (the trace could not be written) in %u span%s between %.3f s and "
                    "%.3f s; stage times there are undercounted",
                    t->path, (long long)t->lost_events, t->n_lost, t->n_lost == 1 ? "" : "s",
                    ((double)t->lost[0].t0_ns - (double)t->origin_ns) * 1e-9,
                    ((double)lost_end(t) - (double)t->origin_ns) * 1e-9);
        else
            an_warn("%s: %lld events were lost (the trace could not be written); stage times may be undercounted",
                    t->path, (long long)t->lost_events);
    }
}

void an_trace_warn(const an_trace *t)
{
    if (t->is_set) an_set_warn(t);
    else warn_trace(t, 0);
}

void an_trace_warn_rank(const an_trace *t) { warn_trace(t, 1); }

uint64_t an_step_of(const an_trace *t, int64_t ts_ns, int *has)
{
    uint32_t lo = 0, hi = st_reader_n_steps(t->r);
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (st_reader_step(t->r, mid)->ts_ns > ts_ns) hi = mid;
        else lo = mid + 1;
    }
    *has = lo < st_reader_n_steps(t->r);
    return *has ? st_reader_step(t->r, lo)->step : 0;
}

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

int an_filter_resolve(const an_filter *f, const an_trace *t, uint8_t *thread_on, uint8_t *stage_on)
{
    uint32_t n_threads = st_reader_n_threads(t->r), n_stages = st_reader_n_stages(t->r);
    for (uint32_t i = 0; i < f->n_roles; i++) {
        int found = 0;
        for (uint32_t j = 0; j < n_threads && !found; j++)
            found = strcmp(f->roles[i], st_reader_thread(t->r, j)->role) == 0;
        if (!found) {
            an_error("--role %s: no thread of %s has that role", f->roles[i], t->path);
            return AN_EXIT_USAGE;
        }
    }
    for (uint32_t i = 0; i < f->n_threads; i++) {
        int found = 0;
        for (uint32_t j = 0; j < n_threads && !found; j++)
            found = thread_matches(f->threads[i], st_reader_thread(t->r, j));
        if (!found) {
            an_error("--thread %s: %s has no thread of that name or id", f->threads[i], t->path);
            return AN_EXIT_USAGE;
        }
    }
    for (uint32_t i = 0; i < f->n_stages; i++) {
        int found = 0;
        for (uint32_t s = 0; s < n_stages && !found; s++)
            found = strcmp(f->stages[i], st_reader_stage(t->r, s)->name) == 0;
        if (!found) {
            an_error("--stage %s: %s has no stage of that name", f->stages[i], t->path);
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

/* ---- progress -------------------------------------------------------------------------- */

#define PROGRESS_EVERY 65536

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void an_progress_start(an_progress *p, const char *what, uint64_t total)
{
    memset(p, 0, sizeof *p);
    p->what = what;
    p->total = total;
    p->enabled = isatty(STDERR_FILENO);
    p->next_check = p->enabled ? PROGRESS_EVERY : UINT64_MAX;
    if (p->enabled) p->start_s = p->last_s = now_s();
}

void an_progress_tick_slow(an_progress *p)
{
    p->next_check = p->done + PROGRESS_EVERY;
    double now = now_s();
    /* Quiet for the first half second, then at most five updates a second. */
    if (now - p->start_s < 0.5 || now - p->last_s < 0.2) return;
    p->last_s = now;
    p->shown = 1;
    if (p->total && p->done <= p->total)
        fprintf(stderr, "\ranalyze: %s %3d%%", p->what, (int)(100.0 * (double)p->done / (double)p->total));
    else
        fprintf(stderr, "\ranalyze: %s %llu", p->what, (unsigned long long)p->done);
    fflush(stderr);
}

void an_progress_end(an_progress *p)
{
    if (p->shown) fputs("\r\033[K", stderr);
    p->shown = 0;
    p->next_check = UINT64_MAX;
}
