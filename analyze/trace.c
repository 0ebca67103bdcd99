/* trace.c: an_trace, the one reader every command analyses: one trace
 * file, or the rank set of a multi-process run. A file is opened through
 * the tracer's defensive reader, with one-line errors, its meta values
 * checked and its span measured; several files are the ranks of one run,
 * checked to be one (the reader's rule for one run, st_run_ids_match; same
 * world_size; each rank once) and read as one trace on rank 0's clock
 * through the reader's rank set (st_reader_open_set). The inputs come
 * resolved from inputs.c. Missing ranks and ranks that did not complete are
 * warned about here, for every command: a run with a killed rank stays
 * analysable.
 */
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "align.h"
#include "analyze.h"

/* ---- one file -------------------------------------------------------------------------- */

const char *an_trace_meta(const an_trace *t, const char *key) { return st_reader_meta(t->r, key); }

int an_trace_meta_i64(const an_trace *t, const char *key, int64_t *out)
{
    return an_parse_i64(an_trace_meta(t, key), out);
}

uint64_t an_trace_every(const an_trace *t)
{
    int64_t pi;
    return an_trace_meta_i64(t, "profile_interval", &pi) == 0 && pi >= 1 && pi <= UINT32_MAX ? (uint64_t)pi : 10;
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

/* Appends span to *v (*n of *cap), growing it; -1 (said) when out of memory. */
static int push_span(an_lost_span **v, uint32_t *n, size_t *cap, an_lost_span span)
{
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 16;
        an_lost_span *a = c < UINT32_MAX ? realloc(*v, c * sizeof *a) : NULL;
        if (!a) {
            an_error("out of memory");
            return -1;
        }
        *v = a;
        *cap = c;
    }
    (*v)[(*n)++] = span;
    return 0;
}

/* The latest end of n spans (INT64_MIN for none). */
static int64_t spans_end(const an_lost_span *v, uint32_t n)
{
    int64_t end = INT64_MIN;
    for (uint32_t i = 0; i < n; i++)
        if (v[i].t1_ns > end) end = v[i].t1_ns;
    return end;
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
            an_lost_span l = {sqlite3_column_int64(st, 4), sqlite3_column_int64(st, 5), sqlite3_column_int64(st, 6)};
            if (push_span(&t->lost, &t->n_lost, &cap, l)) {
                rc = -1;
                break;
            }
            sum += l.n_records;
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

/* gpu_pauses (optional): the times GPU recording was paused. The reader
 * checked the shape and the column types; here t0_ns <= t1_ns. */
static int read_gpu_pauses(an_trace *t)
{
    sqlite3 *db = st_reader_db(t->r);
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, "SELECT 1 FROM main.sqlite_master WHERE name = 'gpu_pauses'", -1, &st, NULL) !=
        SQLITE_OK)
        goto sql_fail;
    int step = sqlite3_step(st);
    sqlite3_finalize(st);
    if (step == SQLITE_DONE) return 0;
    if (step != SQLITE_ROW ||
        sqlite3_prepare_v2(db, "SELECT id, t0_ns, t1_ns FROM main.gpu_pauses ORDER BY t0_ns, id", -1, &st, NULL) !=
            SQLITE_OK)
        goto sql_fail;
    size_t cap = 0;
    int rc = 0;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t t0 = sqlite3_column_int64(st, 1), t1 = sqlite3_column_int64(st, 2);
        if (t0 < 0 || t1 < t0) {
            an_error("%s: trace table 'gpu_pauses': row %lld: t0_ns and t1_ns must be times with t0_ns <= t1_ns",
                     t->path, (long long)sqlite3_column_int64(st, 0));
            rc = -1;
            break;
        }
        if (push_span(&t->gpu_pauses, &t->n_gpu_pauses, &cap, (an_lost_span){t0, t1, 0})) {
            rc = -1;
            break;
        }
    }
    sqlite3_finalize(st);
    if (!rc && step != SQLITE_DONE) goto sql_fail;
    if (!rc && t->n_gpu_pauses) {
        /* their union, for the sweeps of an_trace_gpu_paused_next */
        t->gpu_unrecorded = malloc(t->n_gpu_pauses * sizeof *t->gpu_unrecorded);
        if (!t->gpu_unrecorded) {
            an_error("%s: out of memory reading table 'gpu_pauses'", t->path);
            return -1;
        }
        uint32_t n = 0;
        for (uint32_t i = 0; i < t->n_gpu_pauses; i++) {
            an_lost_span p = t->gpu_pauses[i];
            if (p.t1_ns == p.t0_ns) continue;
            if (n && p.t0_ns <= t->gpu_unrecorded[n - 1].t1_ns) {
                if (p.t1_ns > t->gpu_unrecorded[n - 1].t1_ns) t->gpu_unrecorded[n - 1].t1_ns = p.t1_ns;
            } else {
                t->gpu_unrecorded[n++] = p;
            }
        }
        t->n_gpu_unrecorded = n;
    }
    return rc;
sql_fail:
    an_error("%s: cannot read table 'gpu_pauses': %s", t->path, sqlite3_errmsg(db));
    return -1;
}

int64_t an_trace_gpu_paused_in(const an_trace *t, int64_t t0_ns, int64_t t1_ns, uint32_t *n)
{
    if (n) {
        uint32_t count = 0;
        for (uint32_t i = 0; i < t->n_gpu_pauses; i++)
            count += t->gpu_pauses[i].t1_ns > t0_ns && t->gpu_pauses[i].t0_ns < t1_ns;
        *n = count;
    }
    uint32_t cursor = 0;
    return an_trace_gpu_paused_next(t, &cursor, t0_ns, t1_ns); /* the rows' union */
}

int64_t an_trace_gpu_paused_next(const an_trace *t, uint32_t *cursor, int64_t t0_ns, int64_t t1_ns)
{
    const an_lost_span *u = t->gpu_unrecorded;
    uint32_t i = *cursor;
    while (i < t->n_gpu_unrecorded && u[i].t1_ns <= t0_ns) i++;
    *cursor = i;
    int64_t sum = 0;
    for (; i < t->n_gpu_unrecorded && u[i].t0_ns < t1_ns; i++) {
        int64_t a = u[i].t0_ns > t0_ns ? u[i].t0_ns : t0_ns, b = u[i].t1_ns < t1_ns ? u[i].t1_ns : t1_ns;
        if (b > a) sum += b - a;
    }
    return sum;
}

int an_trace_gpu_paused_at(const an_trace *t, int64_t ts_ns)
{
    uint32_t lo = 0, hi = t->n_gpu_unrecorded;
    while (lo < hi) { /* the first span ending after ts */
        uint32_t m = lo + (hi - lo) / 2;
        if (t->gpu_unrecorded[m].t1_ns <= ts_ns) lo = m + 1;
        else hi = m;
    }
    return lo < t->n_gpu_unrecorded && t->gpu_unrecorded[lo].t0_ns <= ts_ns;
}

int an_trace_gpu_pauses_text(const an_trace *t, char *buf, size_t size)
{
    if (!t->n_gpu_pauses) return 0;
    int64_t end = spans_end(t->gpu_pauses, t->n_gpu_pauses);
    snprintf(buf, size, "paused %u time%s, %.3f s in all, between %.3f s and %.3f s", t->n_gpu_pauses,
             t->n_gpu_pauses == 1 ? "" : "s", (double)an_trace_gpu_paused_in(t, INT64_MIN, INT64_MAX, NULL) * 1e-9,
             ((double)t->gpu_pauses[0].t0_ns - (double)t->origin_ns) * 1e-9,
             ((double)end - (double)t->origin_ns) * 1e-9);
    return 1;
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
                                         "failed_commits", "lost_events", "cpu_lost_records",
                                         "python_frames_lost"};
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
    const char *every = an_trace_meta(t, "gpu_every_steps");
    if (every && (an_trace_meta_i64(t, "gpu_every_steps", &v) || v < 2 || v > 1000000)) {
        an_error("%s: trace table 'meta': key 'gpu_every_steps' is '%s', not a number of steps from 2 to 1000000",
                 t->path, meta_shown(every, clean, sizeof clean));
        return -1;
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
        (!t->is_set && (read_lost_spans(t) || read_gpu_pauses(t))))
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
        st_reader_part_clock(t->r, 0, &c);
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

/* ---- the set -------------------------------------------------------------------------- */

static void set_close(an_trace *t)
{
    for (uint32_t i = 0; i < t->n_ranks; i++) {
        t->ranks[i].r = NULL; /* the set's */
        free((char *)t->ranks[i].path);
        an_trace_close(&t->ranks[i]);
    }
    free(t->ranks);
    t->ranks = NULL;
    t->n_ranks = 0;
    free(t->label);
    t->label = NULL;
    free(t->align);
    t->align = NULL;
    t->is_set = 0;
}

/* One run: run_id (the reader's rule) and world_size as the first file's;
 * ranks in 0..world_size-1, each once. In the order given, which
 * an_inputs_by_rank has made rank order for the files of one run. */
static int check_one_run(an_trace *ranks, uint32_t n, int64_t *world_size)
{
    const char *id0 = NULL;
    int64_t ws0 = 0;
    for (uint32_t i = 0; i < n; i++) {
        an_trace *r = &ranks[i];
        const char *id = an_trace_meta(r, "run_id");
        int64_t ws, rank;
        if (!id) {
            an_error("%s: the trace has no run_id: it cannot be one rank of a set", r->path);
            return AN_EXIT_USAGE;
        }
        if (an_trace_meta_i64(r, "world_size", &ws) || ws < 1 || ws > INT32_MAX) {
            an_error("%s: world_size '%s' is not a count of ranks (1 to %d)", r->path,
                     an_trace_meta(r, "world_size") ? an_trace_meta(r, "world_size") : "(absent)", INT32_MAX);
            return AN_EXIT_USAGE;
        }
        if (an_trace_meta_i64(r, "rank", &rank) || rank < 0 || rank >= ws) {
            an_error("%s: rank '%s' is not in 0..%lld (world_size %lld)", r->path,
                     an_trace_meta(r, "rank") ? an_trace_meta(r, "rank") : "(absent)", (long long)ws - 1,
                     (long long)ws);
            return AN_EXIT_USAGE;
        }
        if (i == 0) {
            id0 = id;
            ws0 = ws;
        } else if (!st_run_ids_match(id, id0)) {
            an_error("%s: run_id '%s' is not the run_id '%s' of %s: the files are not ranks of one run", r->path, id,
                     id0, ranks[0].path);
            return AN_EXIT_USAGE;
        } else if (ws != ws0) {
            an_error("%s: world_size %lld is not the world_size %lld of %s: the files are not ranks of one run",
                     r->path, (long long)ws, (long long)ws0, ranks[0].path);
            return AN_EXIT_USAGE;
        }
        for (uint32_t j = 0; j < i; j++) {
            int64_t other;
            an_trace_meta_i64(&ranks[j], "rank", &other);
            if (other == rank) {
                an_error("%s: rank %lld is also the rank of %s (each rank once)", r->path, (long long)rank,
                         ranks[j].path);
                return AN_EXIT_USAGE;
            }
        }
    }
    *world_size = ws0;
    return AN_EXIT_OK;
}

int an_trace_open_set(an_trace *t, char **paths, uint32_t n, an_align_mode align)
{
    memset(t, 0, sizeof *t);
    an_trace *ranks = calloc(n, sizeof *ranks);
    st_reader **readers = malloc(n * sizeof *readers);
    int *rank_of = malloc(n * sizeof *rank_of);
    if (!ranks || !readers || !rank_of) {
        free(ranks);
        free(readers);
        free(rank_of);
        an_error("out of memory");
        return AN_EXIT_FAIL;
    }
    int rc = AN_EXIT_OK;
    uint32_t opened = 0;
    for (; opened < n && !rc; opened++) {
        rc = an_trace_open(&ranks[opened], paths[opened]);
        if (rc) break;
    }
    int64_t ws = 0;
    if (!rc) rc = check_one_run(ranks, n, &ws);
    for (uint32_t i = 0; !rc && i < n; i++) {
        if (!(ranks[i].path = strdup(paths[i]))) {
            for (uint32_t k = 0; k < i; k++) free((char *)ranks[k].path);
            an_error("out of memory");
            rc = AN_EXIT_FAIL;
        }
    }
    if (rc) {
        for (uint32_t i = 0; i < opened && i < n; i++) an_trace_close(&ranks[i]);
        free(ranks);
        free(readers);
        free(rank_of);
        return rc;
    }
    const char *id0 = an_trace_meta(&ranks[0], "run_id");
    size_t label_len = strlen(id0) + 8;
    t->label = malloc(label_len);
    t->is_set = 1;
    t->ranks = ranks;
    t->n_ranks = n;
    t->world_size = ws;
    t->path = t->label;
    if (!t->label) {
        free(readers);
        free(rank_of);
        an_error("out of memory");
        an_trace_close(t);
        return AN_EXIT_FAIL;
    }
    snprintf(t->label, label_len, "run %s", id0);
    for (uint32_t i = 0; i < n; i++) {
        int64_t v;
        an_trace_meta_i64(&ranks[i], "rank", &v);
        rank_of[i] = (int)v;
        readers[i] = ranks[i].r;
    }
    int src = st_reader_open_set(&t->r, readers, rank_of, n);
    free(rank_of);
    if (src != ST_OK) {
        free(readers);
        an_error("%s: %s", t->label, st_last_error());
        for (uint32_t i = 0; i < n; i++) ranks[i].r = NULL; /* closed by the failed set */
        an_trace_close(t);
        return AN_EXIT_USAGE;
    }
    /* ranks[i] as the set's part i: the reader orders its parts by rank */
    an_trace *by_part = malloc(n * sizeof *by_part);
    if (!by_part) {
        free(readers);
        an_error("out of memory");
        an_trace_close(t);
        return AN_EXIT_FAIL;
    }
    for (uint32_t p = 0; p < n; p++)
        for (uint32_t i = 0; i < n; i++)
            if (readers[i] == st_reader_part(t->r, p)) by_part[p] = ranks[i];
    memcpy(ranks, by_part, n * sizeof *ranks);
    free(by_part);
    free(readers);
    if ((rc = an_align_set(t, align))) {
        an_trace_close(t);
        return rc;
    }
    if (an_trace_init(t)) {
        an_trace_close(t);
        return AN_EXIT_USAGE;
    }
    return AN_EXIT_OK;
}

int an_trace_open_inputs(an_trace *t, const char *const *args, int n, an_align_mode align)
{
    char **paths;
    uint32_t n_paths;
    int rc = an_inputs_expand(args, n, &paths, &n_paths);
    if (rc) return rc;
    if (n_paths == 1 && n == 1 && strcmp(paths[0], args[0]) == 0) {
        an_paths_free(paths, n_paths);
        return an_trace_open(t, args[0]); /* a file as before: its path as given */
    }
    rc = an_trace_open_set(t, paths, n_paths, align);
    an_paths_free(paths, n_paths);
    return rc;
}

/* "0, 2, 3" into buf (cut with "..." when long) */
static void list_ranks(char *buf, size_t size, const int64_t *v, uint32_t n)
{
    size_t used = 0;
    buf[0] = '\0';
    for (uint32_t i = 0; i < n; i++) {
        int w = snprintf(buf + used, size - used, "%s%lld", i ? ", " : "", (long long)v[i]);
        if (w < 0 || (size_t)w >= size - used - 4) {
            snprintf(buf + used, size - used, ", ...");
            return;
        }
        used += (size_t)w;
    }
}

void an_warn_missing_ranks(const char *run_id, int64_t world_size, const int64_t *ranks, uint32_t n)
{
    /* ranks: distinct, ascending, in 0..world_size-1 (a checked set), so the
     * missing are world_size - n; the first 64 are listed, gap by gap */
    int64_t n_miss = world_size - (int64_t)n, miss[64], prev = -1;
    uint32_t listed = 0;
    for (uint32_t k = 0; k <= n && listed < 64; k++) {
        int64_t next = k < n ? ranks[k] : world_size;
        for (int64_t r = prev + 1; r < next && listed < 64; r++) miss[listed++] = r;
        prev = next;
    }
    if (n_miss <= 0) return;
    char buf[400];
    list_ranks(buf, sizeof buf, miss, listed);
    if (n_miss > (int64_t)listed && !strstr(buf, "...")) snprintf(buf + strlen(buf), sizeof buf - strlen(buf), ", ...");
    an_warn("run %s: %lld of %lld ranks have no trace (missing rank%s %s); analysing the %u present", run_id,
            (long long)n_miss, (long long)world_size, n_miss == 1 ? "" : "s", buf, n);
}

/* Every command's warnings on a set: the missing ranks, then each rank's
 * own (an_trace_warn_rank: incomplete, interrupted too, dropped, lost),
 * ranks ascending. */
static void set_warn(const an_trace *t)
{
    int64_t *present = malloc((t->n_ranks ? t->n_ranks : 1) * sizeof *present);
    if (present) {
        for (uint32_t i = 0; i < t->n_ranks; i++) an_trace_meta_i64(&t->ranks[i], "rank", &present[i]);
        an_warn_missing_ranks(an_trace_meta(&t->ranks[0], "run_id"), t->world_size, present, t->n_ranks);
        free(present);
    }
    for (uint32_t i = 0; i < t->n_ranks; i++) {
        an_trace tmp = t->ranks[i];
        tmp.r = st_reader_part(t->r, i);
        an_trace_warn_rank(&tmp);
    }
}

/* ---- either ---------------------------------------------------------------------------- */

void an_trace_close(an_trace *t)
{
    if (!t) return;
    if (t->is_set) set_close(t);
    st_reader_close(t->r);
    t->r = NULL;
    free(t->lost);
    free(t->gpu_pauses);
    free(t->gpu_unrecorded);
    t->lost = t->gpu_pauses = t->gpu_unrecorded = NULL;
    t->n_lost = t->n_gpu_pauses = t->n_gpu_unrecorded = 0;
}

int an_trace_fail(const an_trace *t)
{
    an_error("%s: %s", t->path, st_last_error());
    return AN_EXIT_USAGE;
}

/* The one place of a trace's warnings (docs/analyze.md, "Incomplete
 * traces"): its incomplete status, dropped and lost events, GPU records
 * CUPTI dropped, CPU capture records lost, GPU pauses. A rank of a set
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
                    ((double)spans_end(t->lost, t->n_lost) - (double)t->origin_ns) * 1e-9);
        else
            an_warn("%s: %lld events were lost (the trace could not be written); stage times may be undercounted",
                    t->path, (long long)t->lost_events);
    }
    int64_t gpu_dropped, cpu_lost;
    if (an_trace_meta_i64(t, "gpu_dropped_records", &gpu_dropped) == 0 && gpu_dropped > 0)
        an_warn("%s: %lld GPU records were dropped by CUPTI (no buffer space); GPU busy time may be undercounted",
                t->path, (long long)gpu_dropped);
    if (an_trace_meta_i64(t, "cpu_lost_records", &cpu_lost) == 0 && cpu_lost > 0)
        an_warn("%s: %lld CPU capture records were lost by the kernel (full perf rings); samples and off-CPU "
                "time may be undercounted",
                t->path, (long long)cpu_lost);
    int64_t py_lost;
    if (an_trace_meta_i64(t, "python_frames_lost", &py_lost) == 0 && py_lost > 0)
        an_warn("%s: %lld Python-frame samples were lost (the sampler's queue was full, or their thread had "
                "ended); the Python stacks' counts may be undercounted",
                t->path, (long long)py_lost);
    char paused[160];
    if (an_trace_gpu_pauses_text(t, paused, sizeof paused))
        an_warn("%s: GPU recording was %s (%s): GPU work of that time is not in the trace; it counts as "
                "neither busy nor idle",
                t->path, paused, an_trace_meta(t, "gpu_every_steps") ? "sampled capture, every_steps" : "st_gpu_pause");
}

void an_trace_warn(const an_trace *t)
{
    if (t->is_set) set_warn(t);
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
