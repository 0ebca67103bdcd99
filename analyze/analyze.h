/* analyze.h: what the parts of the `analyze` program share.
 *
 * `analyze` is a git-style CLI: main.c dispatches `analyze CMD ...` through a
 * table of commands, each in its own file (cmd_info.c, cmd_summary.c, ...),
 * most of them a definition that the harness runs (command.c: the shared
 * options and the opening of the trace, by flags). They share:
 *   - messages and exit codes (messages.c), the option parser and the options
 *     every command shares (args.c), numbers and name hashes (values.c);
 *   - the trace, one file or a rank set, opened with one-line errors and
 *     warned about in one place (trace.c), from inputs that may be lists,
 *     globs or directories (inputs.c);
 *   - time/step windows and name filters (select.c), progress (progress.c);
 *   - output tables in three formats: aligned text, CSV, JSON (table.c);
 *   - exact percentiles in bounded memory (quantiles.c);
 *   - per thread/role/stage statistics over a selection (stats.c), used by
 *     summary and meant for diff/bottleneck/report as well.
 * Traces are untrusted input: they are only ever opened through the tracer's
 * reader (read-only, defensive), and every string from them is escaped or
 * sanitized on output.
 */
#ifndef ANALYZE_H
#define ANALYZE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "stagetrace_reader.h"

/* ---- exit codes and messages (messages.c) ---------------------------------- */

enum {
    AN_EXIT_OK = 0,
    AN_EXIT_FAIL = 1,  /* could not finish: out of memory, output not writable */
    AN_EXIT_USAGE = 2, /* bad flags or an input that cannot be analyzed */
};

/* One line on stderr: "analyze: <message>". */
void an_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* One line on stderr: "analyze: warning: <message>". */
void an_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* One line where warnings go: "analyze: note: <message>" (what a command
 * chose for the user, not a fault of the trace). */
void an_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Where an_warn writes (NULL: stderr again): warnings kept to print later. */
void an_warn_to(FILE *f);

/* ---- output files (output.c) ------------------------------------------------ */

enum { AN_PATH_NONE, AN_PATH_FILE, AN_PATH_DIR, AN_PATH_OTHER };
int an_path_kind(const char *path); /* AN_PATH_*: none, regular, directory, other */
/* Whether `what` (the command, for messages) may write path; prints why not. */
int an_out_allowed(const char *what, const char *path, int overwrite);

/* A file being written: regular files under a temporary name, renamed into
 * place by an_file_close(ok = 1); devices and FIFOs directly; "-" stdout. */
typedef struct an_file {
    const char *what, *path;
    char *tmp; /* NULL: written in place */
    char *buf;
    FILE *f;
} an_file;
int an_file_open(an_file *o, const char *what, const char *path, int overwrite);
/* Finishes (ok) or abandons the file; returns an exit code. */
int an_file_close(an_file *o, int ok);

/* Temporary paths that a signal must not leave behind (tmpfiles.c). Register
 * a path before creating it, forget it once it is renamed or removed:
 * an_tmp_add_file (the file and SQLite's -journal, -wal, -shm beside it),
 * an_tmp_add_dir (the directory, after its files names[0..n)). Both return
 * AN_EXIT_OK or AN_EXIT_FAIL (printed). an_signals_install, from main: on
 * SIGINT, SIGTERM or SIGHUP remove them all, erase the progress line and die
 * of the signal (status 128 + its number); one the caller ignores stays so. */
int an_tmp_add_file(const char *path);
int an_tmp_add_dir(const char *dir, const char *const *names, uint32_t n);
void an_tmp_forget(const char *path);
int an_signals_install(void);

struct an_cmd_def;
/* A row of main.c's command table: the command's name, its line in
 * `analyze --help`, and its definition, which the harness runs (command.c). */
typedef struct an_command {
    const char *name;
    const char *help;
    const struct an_cmd_def *def;
} an_command;

/* ---- command-line options (args.c) -------------------------------------------
 * `--name value`, `--name=value`, flags, positionals in any order; `--`
 * ends the options. Errors print one line naming the command and return -1. */

typedef struct an_opt {
    const char *name; /* without the leading "--" */
    int has_arg;
    int id;           /* > 0 */
} an_opt;

typedef struct an_args {
    const char *cmd;
    int argc, i;
    char **argv;
    int only_positionals;
    const char **pos; /* collected positionals */
    int n_pos;
    const char *value; /* the current option's value */
} an_args;

enum { AN_OPT_HELP = 1000, AN_OPT_FORMAT, AN_OPT_STEPS, AN_OPT_TIME, AN_OPT_TABLE, AN_OPT_ALIGN }; /* ids every command may use */

int an_args_init(an_args *a, const char *cmd, int argc, char **argv);
void an_args_free(an_args *a);
/* Next option's id, 0 when all are read, -1 on an error (message printed). */
int an_args_next(an_args *a, const an_opt *opts);
/* "analyze CMD: unknown ..." style error; returns AN_EXIT_USAGE. */
int an_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Values of options that several commands take, with one message each:
 * --every N (steps per window, 1..UINT32_MAX) and --speedup K (a factor
 * from 1 to 1e6). 0, or AN_EXIT_USAGE after the message. */
int an_opt_every(const char *cmd, const char *value, uint64_t *out);
int an_opt_speedup(const char *cmd, const char *value, double *out);

/* ---- numbers and names (values.c) ---- */
/* FNV-1a of a name, for the analyzer's hash tables keyed by kernel or function name. */
uint64_t an_hash_name(const char *s);
int an_parse_u64(const char *s, uint64_t *out);  /* decimal, whole string; 0 or -1 */
/* A signed decimal as meta holds it (strtoll's syntax), whole string; NULL or
 * empty is -1 too. 0 or -1. */
int an_parse_i64(const char *s, int64_t *out);

/* ---- output tables (table.c) ------------------------------------------------- */

typedef enum an_format { AN_FMT_TEXT, AN_FMT_CSV, AN_FMT_JSON } an_format;
int an_parse_format(const char *s, an_format *out); /* 0 or -1 */

typedef enum an_type {
    AN_T_STR,  /* text */
    AN_T_INT,  /* int64 */
    AN_T_MS,   /* int64 nanoseconds shown as milliseconds: text 3 decimals, CSV/JSON 6 (exact) */
    AN_T_PCT,  /* double percent: text "62.5%" (tenths, half up), CSV/JSON the shortest exact decimal */
    AN_T_REAL, /* double with col.decimals decimals */
    AN_T_ANY,  /* per cell (sql): whatever an_put_* is used */
} an_type;

typedef struct an_col {
    const char *name;
    an_type type;
    int decimals; /* AN_T_REAL */
} an_col;

typedef struct an_out an_out;
typedef struct an_table an_table;

/* A document on f: text tables separated by blank lines; CSV tables
 * separated by a blank line; JSON one object {"table name": [rows...], ...}. */
an_out *an_out_new(FILE *f, an_format fmt);
an_format an_out_format(const an_out *o);
/* Free text, printed only in text format (headings, notes). */
void an_out_text(an_out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Ends the document and frees o. 0, or -1 when writing failed. */
int an_out_finish(an_out *o);
/* --table NAME: the documents made from now on (an_out_new) print only the
 * tables named NAME (CSV: their header and rows, nothing else; JSON: an
 * object with that one key); the others are built and dropped. NULL: all. */
void an_out_only(const char *name);
/* After a selection: 1 when no table of that name was printed; printed then
 * holds the names of the tables the documents had ("a, b"; "none"). */
int an_out_only_missing(char *printed, size_t size);

/* A growable array (vec.c): an_vec_push returns room for one more item of
 * size bytes (zero-initialize the struct; free(v) when done), NULL when out
 * of memory. */
typedef struct an_vec {
    void *v;
    size_t n, cap;
} an_vec;
void *an_vec_push(an_vec *x, size_t size);

/* Text tables buffer their first rows to size the columns, then stream. */
an_table *an_table_new(an_out *o, const char *name, const an_col *cols, int n_cols);
void an_put_str(an_table *t, const char *s); /* NULL: null */
void an_put_int(an_table *t, int64_t v);
void an_put_ns(an_table *t, int64_t ns);
void an_put_pct(an_table *t, double pct);
void an_put_real(an_table *t, double v);
void an_put_null(an_table *t);
/* an_put_real / an_put_pct, or null for a value that is not finite (NaN: not defined). */
void an_put_real_or_null(an_table *t, double v);
void an_put_pct_or_null(an_table *t, double v);
void an_row_end(an_table *t);
void an_table_gap(an_table *t); /* blank line between row groups (text only) */
void an_table_end(an_table *t); /* frees t */

/* Escapers shared with the streaming writers (export). */
/* The length of the UTF-8 sequence that s begins (1 for ASCII and the NUL),
 * 0 when s begins none (a stray byte, an overlong or surrogate form). */
int an_utf8_len(const unsigned char *s);
void an_json_string(FILE *f, const char *s);   /* quoted, valid UTF-8 JSON string */
void an_csv_field(FILE *f, const char *s);     /* quoted when needed */
/* A name from the trace for a line of text: control characters as '?'. */
const char *an_clean(const char *s, char *buf, size_t size);
/* Percent with one decimal, rounded half up like the profile lines: "62.5%". */
const char *an_fmt_pct1(double pct, char *buf, size_t size);
/* The change from a to b in percent of a (NaN when a <= 0 or b is not finite),
 * and a change for sentences: "+69.7%", "-0.8%", "0.0%" (buf >= 40 bytes). */
double an_change_pct(double a, double b);
const char *an_fmt_signed_pct(double v, char *buf, size_t size);
/* Writes v in decimal into buf (>= 21 bytes); returns the length. */
int an_fmt_i64(char *buf, int64_t v);
/* ns as "<ns / 10^digits>.<digits decimals>" exactly, e.g. (1234567, 6) ->
 * "1.234567"; rounded half away from zero to `decimals` (<= digits). */
int an_fmt_fixed(char *buf, int64_t ns, int digits, int decimals);

/* ---- exact percentiles in bounded memory (quantiles.c) ------------------------
 * Groups of non-negative values (durations in ns); after all values are
 * added, the nearest-rank percentiles are exact (they are values of the
 * data: the smallest v with at least p% of the values <= v). Small groups
 * keep their values; large ones keep a log-linear histogram (1.6% buckets)
 * and the caller replays the same values in further passes, in which only
 * the values falling in the buckets that hold the wanted ranks are kept (or,
 * when those are too many, counted in a finer histogram). Memory is bounded
 * by the number of groups, not by the number of values. */

#define AN_QUANT_MAX_PCT 4
typedef struct an_quant an_quant;
/* permille: the percentiles in thousandths (500 = p50), at most 4. */
an_quant *an_quant_new(uint32_t n_groups, const uint32_t *permille, uint32_t n_pct);
void an_quant_free(an_quant *q);
void an_quant_add(an_quant *q, uint32_t group, int64_t value);
/* The same for n (group, value) pairs: one call per batch on hot paths. */
void an_quant_add_many(an_quant *q, const uint32_t *groups, const int64_t *values, size_t n);
/* Pass 1, after the last add of the pass (and the shards' merge): adds a
 * copy of every value group `from` received to group `into`, as if each had
 * been added to both (cheaper than adding each value twice). 0 or -1. */
int an_quant_fold(an_quant *q, uint32_t into, uint32_t from);
/* The same from a group of another engine (q may be a shard; src_q not):
 * both in pass 1. */
int an_quant_fold_from(an_quant *q, uint32_t into, const an_quant *src_q, uint32_t from);
/* Later passes: the value ranges [lo[k], hi[k]] that the group still looks
 * at (at most AN_QUANT_MAX_PCT); a value in none of them would be ignored by
 * an add, so a caller may skip it. Returns their number (0 in pass 1, or
 * when the group is done). A shard answers for its engine. */
uint32_t an_quant_ranges(const an_quant *q, uint32_t group, int64_t *lo, int64_t *hi);
/* 1 while the group needs the values again in the next pass (pass >= 2). */
int an_quant_wants(const an_quant *q, uint32_t group);
/* After a pass: 1 when another pass is needed, 0 when done, -1 no memory. */
int an_quant_end_pass(an_quant *q);
/* An engine held between passes while others work (a file of many, summary):
 * an_quant_end_pass only plans the next pass, and an_quant_begin_pass, just
 * before it, allocates its buffers (collected values, bins). 0, or -1: no
 * memory. */
void an_quant_defer_buffers(an_quant *q);
int an_quant_begin_pass(an_quant *q);
int an_quant_pass(const an_quant *q); /* 1, 2, ... */
uint64_t an_quant_count(const an_quant *q, uint32_t group);
int64_t an_quant_get(const an_quant *q, uint32_t group, uint32_t pct_index); /* 0 if empty */
/* Tuning, for tests: values kept exactly per group, values collected per pass. */
void an_quant_limits(an_quant *q, uint32_t exact_per_group, uint64_t collect_per_pass);
/* Several threads in one pass: each adds to its own shard of q (made from
 * one thread at the start of the pass) and merges it into q (which frees it)
 * when done, before an_quant_end_pass. The results do not depend on how the
 * values were split among shards. */
an_quant *an_quant_shard(an_quant *q);            /* NULL: no memory */
int an_quant_merge(an_quant *q, an_quant *shard); /* 0, or -1: no memory, or not the same data */

/* ---- traces: one file or a rank set (trace.c), their inputs (inputs.c) ---------- */

/* How a rank set is put on one clock (--align; align.h, docs/analyze.md
 * "Clock alignment"), and how each of its ranks was. */
typedef enum { AN_ALIGN_AUTO, AN_ALIGN_META, AN_ALIGN_COLLECTIVES, AN_ALIGN_NONE } an_align_mode;
typedef enum {
    AN_CLOCK_NONE,        /* its own clock, as recorded */
    AN_CLOCK_META,        /* its measured offsets (meta clock_*) */
    AN_CLOCK_REFERENCE,   /* the rank the others' collectives were fitted to */
    AN_CLOCK_COLLECTIVES, /* fitted to the reference from the ends of shared collectives */
} an_clock_method;
typedef struct an_rank_align {
    an_clock_method method;
    int64_t uncertainty_ns; /* of the mapping the set uses (st_rank_clock_uncertainty) */
    uint32_t instances;     /* collectives: the instances shared with the reference */
    uint32_t kept;          /* ... and those the fit kept */
    int reference_rank;     /* collectives: the reference's rank */
    int64_t spread_ns;      /* collectives: the ends' spread (align.c), within uncertainty_ns */
} an_rank_align;

typedef struct an_trace {
    const char *path;
    st_reader *r;
    int64_t origin_ns;              /* time 0 of --time and of exports */
    int has_span;                   /* span: first to last range event or step mark */
    int64_t span_t0_ns, span_t1_ns;
    uint64_t n_ranges_hint;         /* from chunk headers (progress, info) */
    uint64_t n_samples_hint;
    struct an_lost_span *lost;      /* lost_spans rows, by t0_ns (docs/trace-format.md) */
    uint32_t n_lost;
    int64_t lost_events;            /* meta lost_events, else the spans' sum */
    struct an_lost_span *gpu_pauses; /* gpu_pauses rows (st_gpu_pause), by t0_ns; n_records 0 */
    uint32_t n_gpu_pauses;
    struct an_lost_span *gpu_unrecorded; /* their union: disjoint, by t0_ns, no empty span */
    uint32_t n_gpu_unrecorded;
    /* A rank set: r is the set's reader, path its label "run
     * <run_id>"; ranks[] each rank's own trace (reader borrowed from the set). */
    int is_set;
    struct an_trace *ranks;
    uint32_t n_ranks;
    int64_t world_size;
    char *label;
    an_align_mode align_used;       /* a set: meta, collectives or none */
    an_rank_align *align;           /* a set: [n_ranks], in ranks[] order */
} an_trace;

/* A span of time whose records the writer could not store (a full disk). */
typedef struct an_lost_span {
    int64_t t0_ns, t1_ns;
    int64_t n_records;
} an_lost_span;

/* Opens through st_reader_open; on failure prints one line and returns
 * AN_EXIT_USAGE. */
int an_trace_open(an_trace *t, const char *path);
/* The inputs of a command (inputs.c, docs/analyze.md "Rank sets"): each
 * argument a file, a directory (its *.sqlite files) or a glob pattern.
 * *paths malloc'd (strings too: an_paths_free). Errors printed; exit code. */
int an_inputs_expand(const char *const *args, int n, char ***paths, uint32_t *n_paths);
/* Puts the files of one run (each opens, has a rank, and their run_ids
 * match: st_run_ids_match) in rank order, stable; any other list stays as
 * given. an_inputs_expand ends with it, so every command sees a rank set in
 * rank order however it was given. */
void an_inputs_by_rank(char **paths, uint32_t n);
/* The one warning for the ranks a set lacks ("run ID: 1 of 4 ranks have no
 * trace (missing rank 1); analysing the 3 present"); ranks: those present,
 * ascending. Nothing when none is missing. */
void an_warn_missing_ranks(const char *run_id, int64_t world_size, const int64_t *ranks, uint32_t n);
void an_paths_free(char **paths, uint32_t n);
/* One file, or the rank set of several: opened as one trace on rank 0's
 * clock. Errors printed; exit code. */
int an_trace_open_inputs(an_trace *t, const char *const *args, int n, an_align_mode align);
int an_trace_open_set(an_trace *t, char **paths, uint32_t n, an_align_mode align);
/* Shared by an_trace_open and the set: checks and span of an open reader. */
int an_trace_init(an_trace *t);
void an_trace_close(an_trace *t);
/* Prints "analyze: PATH: <st_last_error()>" and returns AN_EXIT_USAGE. */
int an_trace_fail(const an_trace *t);
/* The warnings of a trace (stderr), every command's, in one place
 * (trace.c): a file that did not finish (status running), dropped and lost
 * events; a set's missing ranks, then each rank's as an_trace_warn_rank
 * gives them, ranks ascending. an_trace_warn_rank: one rank of a set, also
 * incomplete when interrupted. */
void an_trace_warn(const an_trace *t);
void an_trace_warn_rank(const an_trace *t);
/* Lost spans overlapping [t0_ns, t1_ns], and their records in *records
 * (may be NULL): a window they touch is undercounted. */
uint32_t an_trace_lost_in(const an_trace *t, int64_t t0_ns, int64_t t1_ns, int64_t *records);
/* The time of [t0_ns, t1_ns) during which GPU recording was paused
 * (gpu_pauses; overlapping rows count once), and in *n the pauses that
 * meet it. 0 for a rank set and for a trace without pauses. */
int64_t an_trace_gpu_paused_in(const an_trace *t, int64_t t0_ns, int64_t t1_ns, uint32_t *n);
/* Sweeps: the paused time inside [t0_ns, t1_ns), for calls whose t0_ns
 * never decreases; *cursor starts at 0 and is kept between calls. */
int64_t an_trace_gpu_paused_next(const an_trace *t, uint32_t *cursor, int64_t t0_ns, int64_t t1_ns);
/* 1 when GPU recording was paused at ts_ns (t0_ns <= ts_ns < t1_ns of a
 * pause), else 0. */
int an_trace_gpu_paused_at(const an_trace *t, int64_t ts_ns);
/* "paused N times, X s in all, between A s and B s" (times from the
 * trace's origin) into buf; 0 (buf untouched) when there was no pause. */
int an_trace_gpu_pauses_text(const an_trace *t, char *buf, size_t size);
const char *an_trace_meta(const an_trace *t, const char *key); /* NULL if absent */
int an_trace_meta_i64(const an_trace *t, const char *key, int64_t *out); /* 0 or -1 */
/* The steps per chart or verdict window when --every is not given: meta
 * profile_interval when it is 1..UINT32_MAX, else 10. */
uint64_t an_trace_every(const an_trace *t);
/* The first step whose mark is after ts (0 and *has = 0 when none). */
uint64_t an_step_of(const an_trace *t, int64_t ts_ns, int *has);

/* ---- windows and filters (select.c) ---------------------------------------------- */

typedef struct an_window_spec {
    enum { AN_WIN_ALL, AN_WIN_STEPS, AN_WIN_TIME } kind;
    int has_a, has_b;          /* open ends when 0 */
    uint64_t step_a, step_b;   /* --steps A:B */
    int64_t time_a_ns, time_b_ns; /* --time T0:T1, relative to origin */
    const char *text;          /* as given */
} an_window_spec;

int an_window_parse_steps(an_window_spec *w, const char *s); /* 0 or -1 (printed) */
int an_window_parse_time(an_window_spec *w, const char *s);
/* The window in trace time, [t0, t1), intersected with the trace span.
 * Returns 0, or AN_EXIT_USAGE with a message (a step without a mark, ...). */
int an_window_resolve(const an_window_spec *w, const an_trace *t, int64_t *t0_ns, int64_t *t1_ns);

/* The options every command shares, read by an_args_next_own (args.c): --help (and
 * -h) prints help on stdout and sets help_shown; with format, --format F sets
 * it ("--format must be text, csv or json, not 'F'"); with window, --steps
 * A:B and --time T0:T1 set it, one of them once ("give one window: --steps
 * or --time, once"), or with window_last_wins the last one given; with
 * tables (the command's table names, "a,b,c"), --table NAME sets *table to
 * one of them ("--table must be one of a, b, c, not 'NAME'"). */
typedef struct an_common_opts {
    const char *help;
    an_format *format;
    an_window_spec *window;
    int window_last_wins;
    int help_shown;
    const char *tables;
    const char **table;
    an_align_mode *align; /* --align auto|meta|collectives|none ("--align must be ..., not 'X'") */
} an_common_opts;
/* The next option that is the command's own (> 0), 0 when all are read, -1
 * when the command stops: an error (printed) or --help (help_shown). */
int an_args_next_own(an_args *a, const an_opt *opts, an_common_opts *c);

/* Name filters: --role, --thread, --stage; each may repeat or hold a comma
 * list. A thread is also matched by its numeric id. */
typedef struct an_filter {
    const char **roles, **threads, **stages;
    uint32_t n_roles, n_threads, n_stages;
} an_filter;
int an_filter_add(const char ***list, uint32_t *n, const char *value);
void an_filter_free(an_filter *f);
/* thread_on[index], stage_on[id] (n_threads, n_stages entries). A name that
 * matches nothing in the trace is an error (printed; AN_EXIT_USAGE). */
int an_filter_resolve(const an_filter *f, const an_trace *t, uint8_t *thread_on, uint8_t *stage_on);
/* The distinct roles, thread names or stage names of a trace, in trace order, for an error
 * line: "a, b, c", at most AN_NAMES_MAX names (then " ... and N more"), cleaned of control
 * characters; "none" when there are none. buf: AN_NAMES_BUF bytes. */
typedef enum an_names_kind { AN_NAMES_ROLES, AN_NAMES_THREADS, AN_NAMES_STAGES } an_names_kind;
enum { AN_NAMES_MAX = 12, AN_NAMES_BUF = 400 };
const char *an_names_in(const an_trace *t, an_names_kind kind, char *buf, size_t size);

/* Progress on stderr, only when stderr is a terminal and the work is long (progress.c). */
typedef struct an_progress {
    int enabled, shown;
    const char *what;
    uint64_t total, done, next_check;
    double start_s, last_s;
} an_progress;
void an_progress_start(an_progress *p, const char *what, uint64_t total);
void an_progress_tick_slow(an_progress *p);
static inline void an_progress_add(an_progress *p, uint64_t n)
{
    p->done += n;
    if (p->done >= p->next_check) an_progress_tick_slow(p);
}
void an_progress_end(an_progress *p);

/* ---- statistics per thread / role / stage (stats.c) ---------------------------- */

enum { AN_P50, AN_P95, AN_P99, AN_NPCT };

typedef struct an_stage_stats {
    int64_t total_ns;  /* inclusive, clipped to the window */
    int64_t self_ns;   /* minus nested children */
    int64_t max_ns;
    uint64_t count;    /* ranges overlapping the window */
    int64_t pct_ns[AN_NPCT];
} an_stage_stats;

typedef struct an_select {
    an_window_spec window;
    an_filter filter;
} an_select;

typedef struct an_file_stats {
    an_trace *trace;
    int64_t t0_ns, t1_ns, wall_ns;   /* the window; wall = t1 - t0 */
    uint32_t n_threads, n_stages;    /* thread index as in the reader; stage ids */
    uint8_t *thread_on, *stage_on;
    uint32_t n_roles;
    const char **role_names;         /* [n_roles], sorted */
    uint32_t *thread_role;           /* [n_threads] */
    uint32_t *role_threads;          /* [n_roles] selected threads in the role */
    an_stage_stats *thread_stage;    /* [n_threads * n_stages] */
    an_stage_stats *role_stage;      /* [n_roles * n_stages] */
    int64_t *thread_busy_ns;         /* [n_threads] time in some range */
    uint64_t n_ranges;               /* selected ranges */
    int rank;                        /* meta rank, or the file's index */
    /* What printing and merging need once the file is closed (copies):
     * threads' names, roles and ids by index, stages' names and kinds. */
    char **thread_names, **thread_roles;
    uint32_t *thread_ids;
    char **stage_names;
    uint8_t *stage_kinds;
    char *program, *run_id;          /* meta, NULL if absent */
    int has_rank;                    /* meta rank present (0..INT32_MAX-1) */
    int64_t world_size;              /* meta world_size, 0 if absent or out of 1..INT32_MAX */
    char *warnings;                  /* an_stats_compute_paths: the file's warnings, to print after the work */
    char *rank_warnings;             /* the same as one rank of a set (an_trace_warn_rank) */
} an_file_stats;

/* Across files of one run: per role name and stage name. */
typedef struct an_merged_stats {
    uint32_t n_roles, n_stages;
    const char **role_names, **stage_names;
    uint8_t *stage_kinds;
    an_stage_stats *role_stage;      /* [n_roles * n_stages], all ranks */
    int32_t **file_role;             /* [file][merged role] -> file role or -1 */
    int32_t **file_stage;            /* [file][merged stage] -> file stage or -1 */
} an_merged_stats;

typedef struct an_stats {
    uint32_t n_files;
    an_file_stats *files;
    int merged_valid;
    an_merged_stats merged;
    uint32_t passes;                 /* passes over the ranges (percentiles) */
} an_stats;

/* Computes everything; prints its own errors and returns an exit code. */
int an_stats_compute(an_stats *s, an_trace *traces, uint32_t n, const an_select *sel, int merge);
/* The same with up to `jobs` threads, each reading whole trace threads through
 * its own reader; the results are the same for every jobs (1: no threads). */
int an_stats_compute_jobs(an_stats *s, an_trace *traces, uint32_t n, const an_select *sel, int merge,
                          int jobs);
/* Many files (the ranks of a run): opens each in turn, sets it up, keeps
 * what printing needs (the an_file_stats copies; traces[f] keeps path,
 * origin and hints, its reader closed) and closes it; each pass then opens
 * the files again, each job one file at a time, so that memory does not grow
 * with the number of files. merge < 0: merge when the files are ranks of one
 * run (an_stats_same_run); jobs 0: an_stats_default_jobs. Warnings of each
 * file are kept in files[f].warnings. Errors printed; exit code. */
int an_stats_compute_paths(an_stats *s, an_trace *traces, char **paths, uint32_t n, const an_select *sel, int merge,
                           int jobs);
/* Files that are ranks of one run, by the reader's one rule (run_ids equal:
 * st_run_ids_match), of one world_size, each with its own rank in
 * 0..world_size-1; an_stats_same_run: two or more such files. */
int an_stats_rank_set(const an_stats *s);
int an_stats_same_run(const an_stats *s);
/* The default --jobs: the CPUs this process may use, at most 8; 1 under
 * 500000 ranges. */
int an_stats_default_jobs(uint64_t n_ranges);
void an_stats_free(an_stats *s);
/* Whether reader b holds the same trace as a (run id, stages, threads): a
 * worker's second open of a file must find the trace the first found. */
int an_stats_same_trace(const st_reader *a, const st_reader *b);

/* ---- the command harness (command.c) -------------------------------------------
 * What every command did first and last, done once by its definition's
 * flags (git's RUN_SETUP): */
enum {
    AN_RUN_FORMAT = 1 << 0, /* --format text|csv|json into an_cmd.format */
    AN_RUN_WINDOW = 1 << 1, /* --steps A:B or --time T0:T1 into an_cmd.window */
    AN_RUN_TRACE = 1 << 2,  /* the positionals opened as an_cmd.trace (a file or a rank set) */
    AN_RUN_SET = 1 << 3,    /* ... and refused unless a rank set */
    AN_RUN_WARN = 1 << 4,   /* the trace's warnings after the work, when it succeeded */
    AN_RUN_WINDOW_LAST = 1 << 5, /* with AN_RUN_WINDOW: a later --steps/--time replaces an earlier one */
};

typedef struct an_cmd {
    const struct an_cmd_def *def;
    an_args args;            /* positionals in args.pos; the current option's value in args.value */
    an_format format;
    const char *table;       /* --table NAME (one of def->tables), or NULL */
    an_window_spec window;
    an_align_mode align;     /* --align, for the rank sets it opens (auto by default) */
    an_trace trace;
    void *own;               /* the command's own options: own_size bytes, zeroed, then init */
} an_cmd;

typedef struct an_cmd_def {
    const char *name;
    const char *usage;       /* the --help text */
    unsigned flags;          /* AN_RUN_* */
    const an_opt *opts;
    size_t own_size;
    void (*init)(an_cmd *c);             /* defaults of the own options (NULL: zeros) */
    int (*option)(an_cmd *c, int id);    /* one own option; an exit code (errors printed) */
    int (*check)(an_cmd *c);             /* after the options, before the trace: an exit code */
    int (*work)(an_cmd *c);              /* the command itself: an exit code */
    void (*done)(an_cmd *c);             /* frees what the options hold (NULL: nothing) */
    /* The tables the command prints, in their order ("a,b,c"): with
     * AN_RUN_FORMAT, --table NAME prints only table NAME (csv or json). */
    const char *tables;
} an_cmd_def;

/* Runs a command from its definition: argv[0] is its name; an exit code. */
int an_command_run(const an_cmd_def *d, int argc, char **argv);

/* The commands under the harness (cmd_<name>.c). */
extern const an_cmd_def an_cmd_bottleneck, an_cmd_cpu, an_cmd_diff, an_cmd_flow, an_cmd_gpu, an_cmd_info, an_cmd_intervals,
    an_cmd_sql, an_cmd_stragglers, an_cmd_summary, an_cmd_whatif, an_cmd_export, an_cmd_report;

#endif
