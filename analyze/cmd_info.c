/* cmd_info.c: `analyze info FILE...`: what a trace is and what it holds.
 *
 * Per file: program, rank, run id, host, start time, schema and tool
 * version, status (a run that did not finish is said to be incomplete; the
 * rest of the analysis still works on what it holds), counts (threads by
 * role, stages by kind, ranges, counter samples, steps, tokens), dropped
 * events and other recording errors, duration and tokens/s. Counts of ranges
 * and samples come from the chunk headers, so info is instant on any size.
 * A file that cannot be opened gets its one-line error and the others are
 * still shown (exit status 2 at the end). The ranks of a multi-process run
 * come in rank order (an_inputs_by_rank) and get a block of their own: the
 * missing and incomplete ranks, each rank's status in words, the ranks that
 * died (status running) and those stopped because of them (interrupted),
 * and how each rank's clock is put on the set's (--align: the set opened as
 * the other commands open it, align.c).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "align.h"
#include "analyze.h"

static const char help[] =
    "usage: analyze info [--verify] [--format text|csv|json [--table NAME]] FILE...\n"
    "\n"
    "Shows, per trace: program, rank, run id, host, start time, schema version, status\n"
    "(complete, interrupted, or running: the run did not finish, an incomplete trace whose\n"
    "contents can still be analyzed), threads by role, stages by kind, ranges, counter\n"
    "samples, steps, tokens, dropped events, duration and tokens/s, and GPU activity\n"
    "(devices, their records, API calls, CUPTI's dropped records; 'none' without it).\n"
    "\n"
    "  duration    the trace span: from the first range event or step mark to the last\n"
    "  tokens/s    tokens of the steps after the first mark / time from first to last mark\n"
    "Range and sample counts come from the chunk headers, so info is instant; --verify\n"
    "decodes every chunk instead, and fails on one that is corrupt.\n"
    "\n"
    "options:\n"
    "  --verify    decode every chunk: exact counts, corruption found\n"
    "  --format F  text (default), csv or json: one row per file\n"
    "  --table NAME\n"
    "              only the table NAME (with --format csv or json): info, rank_sets,\n"
    "              rank_clocks\n"
    "  --align MODE\n"
    "               a rank set's clocks: auto (default), meta, collectives or none\n"
    "               (docs/analyze.md, \"Clock alignment\")\n";

enum { OPT_FORMAT = AN_OPT_FORMAT, OPT_HELP = AN_OPT_HELP, OPT_VERIFY = 1 };
static const an_opt opts[] = {
    {"verify", 0, OPT_VERIFY},
    {"format", 1, OPT_FORMAT}, {"table", 1, AN_OPT_TABLE},
    {"help", 0, OPT_HELP},
    {"align", 1, AN_OPT_ALIGN}, {NULL, 0, 0},
};

static const an_col cols[] = {
    {"file", AN_T_STR, 0},           {"program", AN_T_STR, 0},         {"rank", AN_T_INT, 0},
    {"world_size", AN_T_INT, 0},     {"run_id", AN_T_STR, 0},          {"host", AN_T_STR, 0},
    {"pid", AN_T_INT, 0},            {"start_utc", AN_T_STR, 0},       {"schema_version", AN_T_INT, 0},
    {"tool_version", AN_T_STR, 0},   {"clock", AN_T_STR, 0},           {"status", AN_T_STR, 0},
    {"threads", AN_T_INT, 0},        {"threads_by_role", AN_T_STR, 0}, {"stages", AN_T_INT, 0},
    {"stages_by_kind", AN_T_STR, 0}, {"ranges", AN_T_INT, 0},          {"counters", AN_T_INT, 0},
    {"counter_samples", AN_T_INT, 0}, {"steps", AN_T_INT, 0},          {"first_step", AN_T_INT, 0},
    {"last_step", AN_T_INT, 0},      {"tokens", AN_T_INT, 0},          {"dropped_events", AN_T_INT, 0},
    {"duration_s", AN_T_REAL, 9},    {"tokens_per_s", AN_T_REAL, 3},   {"profile_interval", AN_T_INT, 0},
    {"gpu_devices", AN_T_STR, 0},    {"gpu_records", AN_T_INT, 0},     {"gpu_api_calls", AN_T_INT, 0},
    {"gpu_dropped_records", AN_T_INT, 0}, {"gpu_pauses", AN_T_INT, 0},   {"gpu_paused_s", AN_T_REAL, 9},
    {"gpu_every_steps", AN_T_INT, 0},
};
#define N_COLS ((int)(sizeof cols / sizeof cols[0]))

/* Recording errors the writer counted (docs/trace-format.md, meta). */
static const char *const error_keys[] = {"unmatched_ends", "rejected_steps", "clock_clamped", "bad_counters"};

typedef struct info {
    uint32_t n_threads, n_stages, n_counters;
    char by_role[1024], by_kind[256];
    uint64_t ranges, samples; /* from the chunk headers, or decoded (--verify) */
    int verified;
    uint64_t steps, first_step, last_step, tokens, step_tokens;
    int has_steps;
    double duration_s, tokens_per_s; /* NaN when unknown */
    int64_t dropped;
    /* GPU activity, from the gpu_chunks headers: device records (kernels,
     * copies, memsets, syncs) and API calls (device -1) */
    int has_gpu;
    char gpu_devices[256];
    int64_t gpu_records, gpu_api_calls;
} info;

/* Counts from the chunk headers of gpu_chunks, per device; 0, or 1 with the
 * error printed. */
static int gather_gpu(const an_trace *t, info *in)
{
    int has = st_reader_has_gpu(t->r);
    if (has < 0) {
        an_trace_fail(t);
        return 1;
    }
    if (!has) return 0;
    st_chunk_count *c;
    uint32_t n_c;
    int rc = st_reader_gpu_records_per_device(t->r, &c, &n_c);
    if (rc == ST_ENOMEM) {
        an_error("out of memory");
        return 1;
    }
    for (uint32_t i = 0; i < n_c; i++) {
        int64_t device = c[i].key, n = c[i].n;
        if (__builtin_add_overflow(device < 0 ? in->gpu_api_calls : in->gpu_records, n,
                                   device < 0 ? &in->gpu_api_calls : &in->gpu_records)) {
            an_error("%s: trace table 'gpu_chunks': the record counts (n_records) add up past %lld", t->path,
                     (long long)INT64_MAX);
            free(c);
            return 1;
        }
        if (device < 0) continue;
        size_t len = strlen(in->gpu_devices);
        if (len < sizeof in->gpu_devices)
            snprintf(in->gpu_devices + len, sizeof in->gpu_devices - len, "%s%lld", len ? ", " : "", (long long)device);
    }
    free(c);
    if (rc) {
        an_trace_fail(t);
        return 1;
    }
    in->has_gpu = 1;
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void append(char *buf, size_t size, const char *fmt, const char *name, unsigned n)
{
    size_t len = strlen(buf);
    if (len < size) snprintf(buf + len, size - len, fmt, len ? ", " : "", name, n);
}

/* Decodes every chunk; ST_OK or the reader's error. */
static int verify(an_trace *t, info *in)
{
    st_range_iter *ri = NULL;
    st_range x;
    int rc = st_range_iter_open(&ri, t->r, -1, INT64_MIN, INT64_MAX);
    an_progress p;
    an_progress_start(&p, "info --verify", t->n_ranges_hint + t->n_samples_hint);
    in->ranges = in->samples = 0;
    while (!rc && (rc = st_range_iter_next(ri, &x)) == 1) {
        rc = 0;
        in->ranges++;
        an_progress_add(&p, 1);
    }
    st_range_iter_close(ri);
    st_sample_iter *si = NULL;
    st_sample_row s;
    if (!rc) rc = st_sample_iter_open(&si, t->r, -1, INT64_MIN, INT64_MAX);
    while (!rc && (rc = st_sample_iter_next(si, &s)) == 1) {
        rc = 0;
        in->samples++;
        an_progress_add(&p, 1);
    }
    st_sample_iter_close(si);
    an_progress_end(&p);
    if (rc < 0) return rc;
    in->verified = 1;
    if (in->ranges != t->n_ranges_hint || in->samples != t->n_samples_hint)
        an_warn("%s: chunk headers count %llu ranges and %llu samples, the chunks hold %llu and %llu", t->path,
                (unsigned long long)t->n_ranges_hint, (unsigned long long)t->n_samples_hint,
                (unsigned long long)in->ranges, (unsigned long long)in->samples);
    return ST_OK;
}

static int gather(const an_trace *t, info *in)
{
    memset(in, 0, sizeof *in);
    st_reader *r = t->r;
    in->ranges = t->n_ranges_hint;
    in->samples = t->n_samples_hint;
    in->n_threads = st_reader_n_threads(r);
    in->n_stages = st_reader_n_stages(r);
    in->n_counters = st_reader_n_counters(r);
    /* Threads by role, roles sorted by name. */
    const char **roles = malloc((in->n_threads ? in->n_threads : 1) * sizeof *roles);
    if (!roles) return -1;
    for (uint32_t i = 0; i < in->n_threads; i++) roles[i] = st_reader_thread(r, i)->role;
    qsort(roles, in->n_threads, sizeof *roles, cmp_str);
    for (uint32_t i = 0; i < in->n_threads;) {
        uint32_t j = i;
        while (j < in->n_threads && strcmp(roles[j], roles[i]) == 0) j++;
        append(in->by_role, sizeof in->by_role, "%s%s %u", roles[i], j - i);
        i = j;
    }
    free(roles);
    unsigned kinds[ST_KIND_COUNT] = {0};
    for (uint32_t s = 0; s < in->n_stages; s++) {
        st_kind k = st_reader_stage(r, s)->kind;
        if ((unsigned)k < ST_KIND_COUNT) kinds[k]++;
    }
    for (int k = 0; k < ST_KIND_COUNT; k++)
        if (kinds[k]) append(in->by_kind, sizeof in->by_kind, "%s%s %u", st_kind_name((st_kind)k), kinds[k]);
    uint32_t n_marks = st_reader_n_steps(r);
    in->has_steps = n_marks > 0;
    in->duration_s = t->has_span ? (double)(t->span_t1_ns - t->span_t0_ns) * 1e-9 : 0.0;
    in->tokens_per_s = NAN;
    if (n_marks) {
        const st_step_info *first = st_reader_step(r, 0), *last = st_reader_step(r, n_marks - 1);
        in->first_step = first->step;
        in->last_step = last->step;
        in->steps = n_marks - 1; /* steps completed after the first mark */
        for (uint32_t i = 0; i < n_marks; i++) in->tokens += st_reader_step(r, i)->tokens;
        in->step_tokens = in->tokens - first->tokens;
        if (last->ts_ns > first->ts_ns)
            in->tokens_per_s = (double)in->step_tokens * 1e9 / (double)(last->ts_ns - first->ts_ns);
    }
    if (an_trace_meta_i64(t, "dropped_events", &in->dropped) != 0) {
        /* Each count is 0 to INT64_MAX (the reader checks), so the sum is
         * caught before it can wrap. */
        uint64_t sum = 0;
        for (uint32_t i = 0; i < in->n_threads; i++) {
            sum += st_reader_thread(r, i)->dropped;
            if (sum > (uint64_t)INT64_MAX) {
                an_error("%s: trace table 'threads': the dropped counts add up past %lld (thread %u)", t->path,
                         (long long)INT64_MAX, st_reader_thread(r, i)->id);
                return 1;
            }
        }
        in->dropped = (int64_t)sum;
    }
    return gather_gpu(t, in);
}

/* Text values from the trace: control characters would reach the terminal. */
static void put_clean(FILE *f, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)(s ? s : "-"); *p; p++)
        putc(*p < 0x20 || *p == 0x7f ? '?' : *p, f);
}

/* The CPU capture's line (text only; only when the trace has meta cpu_mode):
 * its mode and sampler, samples and their rate, switch records and the
 * records the kernel lost; a capture that did not open says why. */
static void put_cpu_capture(FILE *f, const an_trace *t)
{
    const char *mode = an_trace_meta(t, "cpu_mode");
    if (!mode) return;
    fputs("\n  cpu capture: ", f);
    put_clean(f, mode);
    int64_t samples = 0, switches = 0, lost = 0;
    if (strcmp(mode, "perf") == 0 || strcmp(mode, "timer") == 0) {
        const char *sampler = an_trace_meta(t, "cpu_sampler"), *hz = an_trace_meta(t, "cpu_sample_hz");
        if (sampler) {
            fputs(" (sampler ", f);
            put_clean(f, sampler);
            fputs(")", f);
        }
        an_trace_meta_i64(t, "cpu_samples", &samples);
        an_trace_meta_i64(t, "cpu_switches", &switches);
        an_trace_meta_i64(t, "cpu_lost_records", &lost);
        fprintf(f, ", %lld samples", (long long)samples);
        if (hz) {
            fputs(" at ", f);
            put_clean(f, hz);
            fputs(" Hz", f);
        }
        fprintf(f, ", %lld switch records, %lld records lost", (long long)switches, (long long)lost);
        if (lost > 0) fputs(" (samples and off-CPU time may be undercounted)", f);
    }
    const char *reason = an_trace_meta(t, "cpu_reason");
    if (reason) {
        fputs("; ", f);
        put_clean(f, reason);
    }
}

static const char *meta_or(const an_trace *t, const char *key, const char *dflt)
{
    const char *v = an_trace_meta(t, key);
    return v && *v ? v : dflt;
}

/* Only when the writer met a failed commit: what it retried, and what it
 * could not store (lost_spans). */
static void put_lost(FILE *f, const an_trace *t)
{
    int64_t failed = 0;
    if (an_trace_meta_i64(t, "failed_commits", &failed) || failed < 0) failed = 0;
    if (t->lost_events > 0 || t->n_lost > 0) {
        fprintf(f, "\n  lost events: %lld", (long long)t->lost_events);
        if (t->n_lost) {
            int64_t end = t->lost[0].t1_ns;
            for (uint32_t i = 1; i < t->n_lost; i++)
                if (t->lost[i].t1_ns > end) end = t->lost[i].t1_ns;
            fprintf(f, " in %u span%s between %.3f s and %.3f s", t->n_lost, t->n_lost == 1 ? "" : "s",
                    ((double)t->lost[0].t0_ns - (double)t->origin_ns) * 1e-9,
                    ((double)end - (double)t->origin_ns) * 1e-9);
        }
        fputs(" (the trace could not be written: stage times there are undercounted", f);
        if (failed > 0) fprintf(f, "; %lld failed commits", (long long)failed);
        fputs(")", f);
    } else if (failed > 0) {
        fprintf(f, "\n  failed commits: %lld (retried: nothing lost)", (long long)failed);
    }
}

static void print_text(FILE *f, const an_trace *t, const info *in)
{
    put_clean(f, t->path);
    fputs("\n  program: ", f);
    put_clean(f, meta_or(t, "program", "?"));
    fputs(", rank ", f);
    put_clean(f, meta_or(t, "rank", "?"));
    fputs(" of ", f);
    put_clean(f, meta_or(t, "world_size", "?"));
    fputs(", run ", f);
    put_clean(f, meta_or(t, "run_id", "?"));
    fputs(", host ", f);
    put_clean(f, meta_or(t, "host", "?"));
    fputs(", pid ", f);
    put_clean(f, meta_or(t, "pid", "?"));
    fputs("\n  started: ", f);
    put_clean(f, meta_or(t, "start_utc", "?"));
    fputs("\n  schema: version ", f);
    put_clean(f, meta_or(t, "schema_version", "?"));
    fputs(" (written by stagetrace ", f);
    put_clean(f, meta_or(t, "tool_version", "?"));
    fputs(", clock ", f);
    put_clean(f, meta_or(t, "clock", "?"));
    fputs(")\n  status: ", f);
    const char *status = meta_or(t, "status", "");
    if (strcmp(status, "complete") == 0) fputs("complete", f);
    else if (strcmp(status, "running") == 0) fputs("running (the run did not finish: incomplete trace)", f);
    else if (strcmp(status, "interrupted") == 0)
        fputs("interrupted (stopped by SIGINT/SIGTERM; what was recorded was flushed)", f);
    else {
        fputs("unknown '", f);
        put_clean(f, status);
        fputs("' (treated as incomplete)", f);
    }
    char a[40];
    an_fmt_fixed(a, t->has_span ? t->span_t1_ns - t->span_t0_ns : 0, 9, 3);
    fprintf(f, "\n  duration: %s s (first to last range event or step mark)", a);
    int64_t start, end;
    if (an_trace_meta_i64(t, "start_ns", &start) == 0 && an_trace_meta_i64(t, "end_ns", &end) == 0 && end >= start) {
        an_fmt_fixed(a, end - start, 9, 3);
        fprintf(f, "; run %s s (open to close)", a);
    }
    fprintf(f, "\n  threads: %u", in->n_threads);
    if (in->n_threads) {
        fputs(" (", f);
        put_clean(f, in->by_role);
        fputs(")", f);
    }
    fprintf(f, "\n  stages: %u", in->n_stages);
    if (in->n_stages) fprintf(f, " (%s)", in->by_kind);
    fprintf(f, "\n  ranges: %llu%s\n  counter samples: %llu (%u counter%s)", (unsigned long long)in->ranges,
            in->verified ? " (every chunk decoded)" : "", (unsigned long long)in->samples, in->n_counters,
            in->n_counters == 1 ? "" : "s");
    if (in->has_steps)
        fprintf(f, "\n  steps: %llu (marks of steps %llu-%llu)", (unsigned long long)in->steps,
                (unsigned long long)in->first_step, (unsigned long long)in->last_step);
    else
        fputs("\n  steps: 0 (no step marks)", f);
    fprintf(f, "\n  tokens: %llu", (unsigned long long)in->tokens);
    if (!isnan(in->tokens_per_s)) fprintf(f, ", %.1f tokens/s", in->tokens_per_s);
    fprintf(f, "\n  dropped events: %lld", (long long)in->dropped);
    if (in->dropped > 0) fputs(" (rings were full: stage times may be undercounted)", f);
    put_lost(f, t);
    if (in->has_gpu) {
        fprintf(f, "\n  gpu activity: %lld records on device%s ", (long long)in->gpu_records,
                strchr(in->gpu_devices, ',') ? "s" : "");
        put_clean(f, in->gpu_devices[0] ? in->gpu_devices : "-");
        fprintf(f, " (kernels, copies, memsets, syncs), %lld API calls", (long long)in->gpu_api_calls);
        int64_t gd;
        if (an_trace_meta_i64(t, "gpu_dropped_records", &gd) == 0)
            fprintf(f, "; CUPTI dropped %lld%s", (long long)gd, gd > 0 ? " (GPU times may be undercounted)" : "");
    } else {
        fputs("\n  gpu activity: none", f);
    }
    char paused[160];
    if (an_trace_gpu_pauses_text(t, paused, sizeof paused)) {
        const char *every = an_trace_meta(t, "gpu_every_steps");
        if (every) {
            fputs("\n  gpu recording: sampled, one step in ", f);
            put_clean(f, every);
            fprintf(f, " (every_steps): %s; GPU figures are of the recorded time", paused);
        } else {
            fprintf(f, "\n  gpu recording: %s (st_gpu_pause: GPU work then is not in the trace)", paused);
        }
    }
    put_cpu_capture(f, t);
    const char *pi = an_trace_meta(t, "profile_interval");
    if (pi) {
        fputs("\n  profile interval: ", f);
        put_clean(f, pi);
        fputs(strcmp(pi, "0") == 0 ? " (no profile lines)" : " steps", f);
    }
    int first = 1;
    for (size_t i = 0; i < sizeof error_keys / sizeof error_keys[0]; i++) {
        int64_t v;
        if (an_trace_meta_i64(t, error_keys[i], &v) || v == 0) continue;
        fprintf(f, first ? "\n  recording errors: %s %lld" : ", %s %lld", error_keys[i], (long long)v);
        first = 0;
    }
    fputs("\n", f);
}

static void put_meta_int(an_table *tb, const an_trace *t, const char *key)
{
    int64_t v;
    if (an_trace_meta_i64(t, key, &v) == 0) an_put_int(tb, v);
    else an_put_null(tb);
}

static void put_row(an_table *tb, const an_trace *t, const info *in)
{
    an_put_str(tb, t->path);
    an_put_str(tb, an_trace_meta(t, "program"));
    put_meta_int(tb, t, "rank");
    put_meta_int(tb, t, "world_size");
    an_put_str(tb, an_trace_meta(t, "run_id"));
    an_put_str(tb, an_trace_meta(t, "host"));
    put_meta_int(tb, t, "pid");
    an_put_str(tb, an_trace_meta(t, "start_utc"));
    put_meta_int(tb, t, "schema_version");
    an_put_str(tb, an_trace_meta(t, "tool_version"));
    an_put_str(tb, an_trace_meta(t, "clock"));
    an_put_str(tb, an_trace_meta(t, "status"));
    an_put_int(tb, in->n_threads);
    an_put_str(tb, in->by_role);
    an_put_int(tb, in->n_stages);
    an_put_str(tb, in->by_kind);
    an_put_int(tb, (int64_t)in->ranges);
    an_put_int(tb, in->n_counters);
    an_put_int(tb, (int64_t)in->samples);
    an_put_int(tb, (int64_t)in->steps);
    if (in->has_steps) {
        an_put_int(tb, (int64_t)in->first_step);
        an_put_int(tb, (int64_t)in->last_step);
    } else {
        an_put_null(tb);
        an_put_null(tb);
    }
    an_put_int(tb, (int64_t)in->tokens);
    an_put_int(tb, in->dropped);
    an_put_real(tb, in->duration_s);
    an_put_real(tb, in->tokens_per_s);
    put_meta_int(tb, t, "profile_interval");
    an_put_str(tb, in->has_gpu ? in->gpu_devices : NULL);
    if (in->has_gpu) {
        an_put_int(tb, in->gpu_records);
        an_put_int(tb, in->gpu_api_calls);
    } else {
        an_put_null(tb);
        an_put_null(tb);
    }
    put_meta_int(tb, t, "gpu_dropped_records");
    if (in->has_gpu || t->n_gpu_pauses) {
        an_put_int(tb, t->n_gpu_pauses);
        an_put_real(tb, (double)an_trace_gpu_paused_in(t, INT64_MIN, INT64_MAX, NULL) * 1e-9);
    } else {
        an_put_null(tb);
        an_put_null(tb);
    }
    int64_t every;
    if (an_trace_meta_i64(t, "gpu_every_steps", &every) == 0)
        an_put_int(tb, every);
    else if (in->has_gpu)
        an_put_int(tb, 1); /* every step recorded */
    else
        an_put_null(tb);
    an_row_end(tb);
}

/* What the rank-set block needs of each file (docs/analyze.md, "Rank sets"). */
typedef struct rank_row {
    char *run_id, *status;
    const char *path;
    int64_t rank, world_size;
    int has_clock;
    st_rank_clock clock;
    int done;
} rank_row;

static int cmp_rank_row(const void *a, const void *b)
{
    const rank_row *x = a, *y = b;
    int c = strcmp(x->run_id, y->run_id);
    if (c) return c;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

/* A rank's status in words, for the rank-set block. */
static const char *status_words(const char *status)
{
    if (strcmp(status, "complete") == 0) return "complete";
    if (strcmp(status, "running") == 0) return "running (killed: no clean close, the trace was never finished)";
    if (strcmp(status, "interrupted") == 0) return "interrupted (stopped by a signal; what it recorded was flushed)";
    return NULL;
}

/* Appends ", N" (or "N" first) to a list of ranks in buf, cut with "..." */
static void list_add(char *buf, size_t size, size_t *len, int64_t r)
{
    if (*len >= size - 24) {
        if (!strstr(buf, "...")) *len += (size_t)snprintf(buf + *len, size - *len, ", ...");
        return;
    }
    *len += (size_t)snprintf(buf + *len, size - *len, "%s%lld", *len ? ", " : "", (long long)r);
}

/* One group per run_id of world_size > 1: present, missing, incomplete
 * ranks, each rank's status, the ranks that died (status running) and
 * those stopped by a signal (interrupted), and clock offsets. Text: a
 * block; CSV/JSON: a table rank_sets. */
/* The group's files opened as one set, aligned by mode, into *set (a set
 * whose alignment says how each rank's clock was found); an exit code
 * (errors printed). */
static int open_group(rank_row *rows, uint32_t n, an_align_mode mode, an_trace *set)
{
    char **paths = malloc(n * sizeof *paths);
    if (!paths) {
        an_error("out of memory");
        return AN_EXIT_FAIL;
    }
    for (uint32_t k = 0; k < n; k++) paths[k] = (char *)rows[k].path;
    int rc = an_trace_open_set(set, paths, n, mode);
    free(paths);
    return rc;
}

/* Text: one line per rank of how its clock was put on the set's. */
static void print_rank_clocks(an_out *out, const an_trace *set)
{
    for (uint32_t p = 0; p < set->n_ranks; p++) {
        const an_rank_align *al = &set->align[p];
        int64_t rank = 0;
        an_trace_meta_i64(&set->ranks[p], "rank", &rank);
        switch (al->method) {
        case AN_CLOCK_NONE:
            an_out_text(out, "  rank %lld clock: none (its own clock, as recorded)\n", (long long)rank);
            break;
        case AN_CLOCK_META:
            an_out_text(out, "  rank %lld clock: meta (its measured offsets), within %lld ns\n", (long long)rank,
                        (long long)al->uncertainty_ns);
            break;
        case AN_CLOCK_REFERENCE:
            an_out_text(out, "  rank %lld clock: reference (the others' collectives are fitted to it)\n",
                        (long long)rank);
            break;
        case AN_CLOCK_COLLECTIVES:
            an_out_text(out,
                        "  rank %lld clock: collectives (fitted to rank %d from %u instances, %u kept, their ends within %lld "
                        "ns), within %lld ns\n",
                        (long long)rank, al->reference_rank, al->instances, al->kept, (long long)al->spread_ns,
                        (long long)al->uncertainty_ns);
            break;
        }
    }
}

static const an_col clock_cols[] = {{"run_id", AN_T_STR, 0},        {"rank", AN_T_INT, 0},
                                    {"method", AN_T_STR, 0},        {"uncertainty_ns", AN_T_INT, 0},
                                    {"reference_rank", AN_T_INT, 0}, {"instances", AN_T_INT, 0},
                                    {"kept", AN_T_INT, 0},          {"spread_ns", AN_T_INT, 0},
                                    {"sync_ns", AN_T_INT, 0},
                                    {"offset_ns", AN_T_INT, 0},     {"sync_close_ns", AN_T_INT, 0},
                                    {"offset_close_ns", AN_T_INT, 0}};

/* CSV/JSON: the rank_clocks rows of one set (the clock its times are mapped with). */
static void put_rank_clocks(an_table *tb, const char *run_id, const an_trace *set)
{
    for (uint32_t p = 0; tb && p < set->n_ranks; p++) {
        const an_rank_align *al = &set->align[p];
        int64_t rank = 0;
        an_trace_meta_i64(&set->ranks[p], "rank", &rank);
        st_rank_clock c;
        st_reader_part_clock(set->r, p, &c);
        an_put_str(tb, run_id);
        an_put_int(tb, rank);
        an_put_str(tb, an_clock_method_name(al->method));
        an_put_int(tb, al->uncertainty_ns);
        if (al->method == AN_CLOCK_COLLECTIVES || al->method == AN_CLOCK_REFERENCE) an_put_int(tb, al->reference_rank);
        else an_put_null(tb);
        if (al->method == AN_CLOCK_COLLECTIVES) {
            an_put_int(tb, al->instances);
            an_put_int(tb, al->kept);
            an_put_int(tb, al->spread_ns);
        } else {
            an_put_null(tb);
            an_put_null(tb);
            an_put_null(tb);
        }
        if (c.has_open) {
            an_put_int(tb, c.sync_ns);
            an_put_int(tb, c.offset_ns);
        } else {
            an_put_null(tb);
            an_put_null(tb);
        }
        if (c.has_close) {
            an_put_int(tb, c.sync_close_ns);
            an_put_int(tb, c.offset_close_ns);
        } else {
            an_put_null(tb);
            an_put_null(tb);
        }
        an_row_end(tb);
    }
}

static int print_rank_sets(an_out *out, rank_row *rows, uint32_t n, int expanded, an_align_mode mode)
{
    int rc = AN_EXIT_OK;
    an_table *clock_tb = NULL;
    qsort(rows, n, sizeof *rows, cmp_rank_row);
    an_format fmt = an_out_format(out);
    static const an_col cols[] = {{"run_id", AN_T_STR, 0},   {"world_size", AN_T_INT, 0},
                                  {"ranks_present", AN_T_INT, 0}, {"missing_ranks", AN_T_STR, 0},
                                  {"incomplete_ranks", AN_T_STR, 0}, {"duplicate_ranks", AN_T_STR, 0},
                                  {"max_clock_uncertainty_ns", AN_T_INT, 0}, {"died_ranks", AN_T_STR, 0},
                                  {"interrupted_ranks", AN_T_STR, 0}, {"align", AN_T_STR, 0}};
    an_table *tb = NULL;
    struct {
        const char *run_id;
        an_trace set;
    } *pending = calloc(n ? n : 1, sizeof *pending);
    uint32_t n_pending = 0;
    if (!pending) {
        an_error("out of memory");
        return AN_EXIT_FAIL;
    }
    for (uint32_t i = 0; i < n;) {
        uint32_t j = i;
        while (j < n && strcmp(rows[j].run_id, rows[i].run_id) == 0) j++;
        int64_t ws = rows[i].world_size;
        int uniform = 1;
        for (uint32_t k = i; k < j; k++) uniform &= rows[k].world_size == ws;
        if (ws > 1 && uniform && (j - i >= 2 || expanded)) {
            char missing[512] = "", incomplete[1024] = "", dup[512] = "", died[512] = "", stopped[512] = "";
            size_t lm = 0, li = 0, ld = 0, ldied = 0, lstop = 0;
            int64_t present = 0, unc = 0, n_died = 0, n_stopped = 0;
            uint32_t k = i;
            for (int64_t r = 0; r < ws; r++) {
                int have = 0;
                for (; k < j && rows[k].rank == r; k++) {
                    if (have && ld < sizeof dup - 24) ld += (size_t)snprintf(dup + ld, sizeof dup - ld, "%s%lld", ld ? ", " : "", (long long)r);
                    if (!have) {
                        present++;
                        if (strcmp(rows[k].status, "running") == 0) {
                            list_add(died, sizeof died, &ldied, r);
                            n_died++;
                        } else if (strcmp(rows[k].status, "interrupted") == 0) {
                            list_add(stopped, sizeof stopped, &lstop, r);
                            n_stopped++;
                        }
                    }
                    have = 1;
                    if (strcmp(rows[k].status, "complete") != 0 && li < sizeof incomplete - 64)
                        li += (size_t)snprintf(incomplete + li, sizeof incomplete - li, "%s%lld (%.20s)", li ? ", " : "",
                                               (long long)r, rows[k].status);
                    int64_t u = rows[k].has_clock ? st_rank_clock_uncertainty(&rows[k].clock) : 0;
                    if (u > unc) unc = u;
                }
                if (!have && lm < sizeof missing - 24)
                    lm += (size_t)snprintf(missing + lm, sizeof missing - lm, "%s%lld", lm ? ", " : "", (long long)r);
                else if (!have && lm < sizeof missing - 4 && !strstr(missing, "..."))
                    lm += (size_t)snprintf(missing + lm, sizeof missing - lm, ", ...");
                if (r > 1000000 && k >= j) { /* nothing more to find: the rest are missing */
                    if (!strstr(missing, "...")) snprintf(missing + lm, sizeof missing - lm, ", ...");
                    break;
                }
            }
            /* the ranks' clocks as the other commands map them: the files opened as one set */
            an_trace set;
            memset(&set, 0, sizeof set);
            int opened = 0;
            if (!ld) {
                int orc = open_group(&rows[i], j - i, mode, &set);
                opened = orc == AN_EXIT_OK;
                if (orc && mode != AN_ALIGN_AUTO) rc = orc; /* an alignment asked for and refused */
            }
            const char *align = opened ? an_align_mode_name(set.align_used) : "";
            if (opened) {
                unc = 0;
                for (uint32_t p = 0; p < set.n_ranks; p++)
                    if (set.align[p].uncertainty_ns > unc) unc = set.align[p].uncertainty_ns;
            }
            if (fmt == AN_FMT_TEXT) {
                an_out_text(out, "\nrank set: run %s, world size %lld, %lld rank%s present\n", rows[i].run_id,
                            (long long)ws, (long long)present, present == 1 ? "" : "s");
                an_out_text(out, "  missing ranks: %s\n", lm ? missing : "none");
                an_out_text(out, "  incomplete ranks: %s\n", li ? incomplete : "none");
                if (ld) an_out_text(out, "  duplicate ranks: %s (a set holds each rank once)\n", dup);
                for (uint32_t q = i; q < j; q++) {
                    if (q > i && rows[q].rank == rows[q - 1].rank) continue; /* a duplicate: said above */
                    const char *words = status_words(rows[q].status);
                    if (words) {
                        an_out_text(out, "  rank %lld: %s\n", (long long)rows[q].rank, words);
                    } else {
                        char clean[41];
                        size_t c = 0;
                        for (; rows[q].status[c] && c < sizeof clean - 1; c++) {
                            unsigned char ch = (unsigned char)rows[q].status[c];
                            clean[c] = ch < 0x20 || ch == 0x7f ? '?' : (char)ch;
                        }
                        clean[c] = '\0';
                        an_out_text(out, "  rank %lld: unknown status '%s' (treated as incomplete)\n",
                                    (long long)rows[q].rank, clean);
                    }
                }
                if (n_died)
                    an_out_text(out, "  died: rank%s %s (status running: killed, no clean close)\n",
                                n_died == 1 ? "" : "s", died);
                else
                    an_out_text(out, "  died: none\n");
                if (n_stopped)
                    an_out_text(out, "  %s: rank%s %s (status interrupted)\n",
                                n_died ? (n_died == 1 ? "stopped because of it" : "stopped because of them")
                                       : "stopped by a signal",
                                n_stopped == 1 ? "" : "s", stopped);
                if (!opened)
                    an_out_text(out, "  clock: mapped onto rank 0's, within %lld ns\n", (long long)unc);
                else if (set.align_used == AN_ALIGN_META)
                    an_out_text(out, "  clock: mapped onto rank 0's, within %lld ns (align meta)\n", (long long)unc);
                else if (set.align_used == AN_ALIGN_COLLECTIVES)
                    an_out_text(out, "  clock: fitted from collectives, within %lld ns (align collectives)\n",
                                (long long)unc);
                else
                    an_out_text(out, "  clock: not aligned (align none)\n");
                if (opened) print_rank_clocks(out, &set);
            } else {
                if (!tb) tb = an_table_new(out, "rank_sets", cols, 10);
                if (!tb) {
                    if (opened) an_trace_close(&set);
                    rc = AN_EXIT_FAIL;
                    break;
                }
                an_put_str(tb, rows[i].run_id);
                an_put_int(tb, ws);
                an_put_int(tb, present);
                an_put_str(tb, missing);
                an_put_str(tb, incomplete);
                an_put_str(tb, dup);
                an_put_int(tb, unc);
                an_put_str(tb, died);
                an_put_str(tb, stopped);
                an_put_str(tb, align);
                an_row_end(tb);
            }
            if (opened) {
                pending[n_pending].run_id = rows[i].run_id;
                pending[n_pending++].set = set;
            }
        }
        i = j;
    }
    an_table_end(tb);
    /* rank_clocks after rank_sets: one table at a time */
    for (uint32_t k = 0; k < n_pending; k++) {
        if (fmt != AN_FMT_TEXT) {
            if (!clock_tb) clock_tb = an_table_new(out, "rank_clocks", clock_cols, 12);
            put_rank_clocks(clock_tb, pending[k].run_id, &pending[k].set);
        }
        an_trace_close(&pending[k].set);
    }
    an_table_end(clock_tb);
    free(pending);
    return rc;
}

typedef struct own_opts {
    int want_verify;
} own_opts;

static int option(an_cmd *cmd, int id)
{
    own_opts *o = cmd->own;
    int rc = AN_EXIT_OK;
    switch (id) {
    case OPT_VERIFY: o->want_verify = 1; break;
    }
    return rc;
}

static int check(an_cmd *cmd)
{
    int rc = AN_EXIT_OK;
    if (cmd->args.n_pos == 0) rc = an_usage_error("info", "no trace file given");
    return rc;
}

static int work(an_cmd *cmd)
{
    own_opts *o = cmd->own;
    int rc = AN_EXIT_OK;
    an_out *out = an_out_new(stdout, cmd->format);
    an_table *tb = cmd->format == AN_FMT_TEXT || !out ? NULL : an_table_new(out, "info", cols, N_COLS);
    int shown = 0;
    char **paths = NULL;
    uint32_t n_paths = 0;
    /* each argument on its own, so that one that cannot be expanded leaves the others shown */
    int expanded = 0;
    for (int i = 0; i < cmd->args.n_pos; i++) {
        char **p1;
        uint32_t n1;
        int erc = an_inputs_expand((const char *const *)&cmd->args.pos[i], 1, &p1, &n1);
        if (erc) {
            rc = erc;
            continue;
        }
        if (n1 != 1 || strcmp(p1[0], cmd->args.pos[i]) != 0) expanded = 1;
        char **np = realloc(paths, (n_paths + n1) * sizeof *np);
        if (!np) {
            an_paths_free(p1, n1);
            rc = AN_EXIT_FAIL;
            break;
        }
        paths = np;
        for (uint32_t k = 0; k < n1; k++) paths[n_paths++] = p1[k];
        free(p1);
    }
    an_inputs_by_rank(paths, n_paths); /* the files of one run, in rank order whatever the order given */
    rank_row *rows = calloc(n_paths ? n_paths : 1, sizeof *rows);
    uint32_t n_rows = 0;
    for (uint32_t i = 0; i < n_paths && out && rows; i++) {
        an_trace t;
        if (an_trace_open(&t, paths[i])) {
            rc = AN_EXIT_USAGE;
            continue;
        }
        {
            const char *id = an_trace_meta(&t, "run_id");
            rank_row *row = &rows[n_rows];
            if (id && an_trace_meta_i64(&t, "rank", &row->rank) == 0 &&
                an_trace_meta_i64(&t, "world_size", &row->world_size) == 0) {
                const char *st = an_trace_meta(&t, "status");
                row->run_id = strdup(id);
                row->status = strdup(st ? st : "(none)");
                for (char *c = row->status; c && *c; c++) /* shown in text: no control characters */
                    if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
                row->path = paths[i];
                st_reader_rank_clock(t.r, &row->clock);
                row->has_clock = row->clock.has_open;
                if (row->run_id && row->status) n_rows++;
                else {
                    free(row->run_id);
                    free(row->status);
                }
            }
        }
        info in;
        int grc = gather(&t, &in);
        if (grc == -1) {
            an_error("out of memory");
            rc = AN_EXIT_FAIL;
        } else if (grc) {
            rc = AN_EXIT_USAGE;
        } else if (o->want_verify && verify(&t, &in) != ST_OK) {
            rc = an_trace_fail(&t);
        } else if (cmd->format == AN_FMT_TEXT) {
            if (shown++) putc('\n', stdout);
            print_text(stdout, &t, &in);
        } else {
            put_row(tb, &t, &in);
        }
        an_trace_close(&t);
    }
    an_table_end(tb);
    if (out && rows) {
        int src = print_rank_sets(out, rows, n_rows, expanded, cmd->align);
        if (src && !rc) rc = src;
    }
    for (uint32_t i = 0; rows && i < n_rows; i++) {
        free(rows[i].run_id);
        free(rows[i].status);
    }
    free(rows);
    an_paths_free(paths, n_paths);
    if (an_out_finish(out)) {
        an_error("info: cannot write the output");
        rc = AN_EXIT_FAIL;
    }
    return rc;
}

const an_cmd_def an_cmd_info = {
    .name = "info",
    .usage = help,
    .flags = AN_RUN_FORMAT,
    .opts = opts,
    .own_size = sizeof(own_opts),
    .option = option,
    .check = check,
    .work = work,
    .tables = "info,rank_sets,rank_clocks",
};
