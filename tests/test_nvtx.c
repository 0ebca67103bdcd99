/* test_nvtx.c: checks that libstagetrace emits every range to NVTX exactly
 * as it records it in the trace (tracer/nvtx.c, tracer/record.c).
 *
 * Each test re-executes this binary as a child ("test_nvtx child MODE TRACE")
 * with NVTX_INJECTION64_PATH naming the test tool build/tests/libnvtx_inject.so
 * (tests/nvtx_inject.c; $ST_BUILD picks the build folder, default "build")
 * and NVTX_INJECT_LOG naming the file where the tool writes every NVTX call
 * it saw. The child opens a trace with program "nvtxtest", registers one
 * stage of each kind, records scripted nested ranges on the main thread and
 * on two concurrent worker threads, marks steps on the main thread (one of
 * them rejected by the writer), and closes. It marks "child:start" and
 * "child:end" with plain NVTX calls of its own, so the tool is loaded, and
 * logs, even when the tracer makes no NVTX call at all. The parent then reads
 * the tool's log and the trace (st_reader) and compares them: one domain named
 * after the program; each stage registered once as a string and named once
 * as category id + 1; per thread, pushes and pops in the same order, stages
 * and nesting as the trace's begins and ends (and as the script); one NVTX
 * mark per st_step call, in the domain, between the pushes and pops where
 * the script called it, message "step <step>" and the tokens as a u64
 * payload; threads named with their trace names and os_tid; the CUDA stream
 * named (CUDA builds); one colour per stage, the same in two runs. With
 * options.nvtx = 0 and with options.enabled = 0 the tool must see no call
 * from the tracer. A child with several stages of each kind ("colours")
 * checks that the reader's st_reader_stage_colours gives back the colours
 * NVTX saw.
 *
 * Without the NVTX headers (ST_HAVE_NVTX undefined) there is nothing to
 * test: the binary prints a "SKIP:" line and exits 0.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>

#ifndef ST_HAVE_NVTX

int main(void)
{
    printf("SKIP: built without the NVTX headers (nvtx3/nvToolsExt.h): nothing is emitted to NVTX\n");
    return 0;
}

#else

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nvtx3/nvToolsExt.h>

#include "common.h"
#include "st_reader.h"
#include "stagetrace.h"
#include "st_palette.h"

/* ---- what the child records (shared by both sides) ---- */

typedef struct stage_spec {
    char letter; /* its name in the scripts */
    const char *name;
    st_kind kind;
} stage_spec;

static const stage_spec stage_specs[] = {
    {'f', "forward", ST_WORK},        {'w', "queue_wait", ST_WAIT_INPUT},
    {'p', "queue_put", ST_WAIT_OUTPUT}, {'s', "stream_sync", ST_SYNC},
    {'a', "allreduce", ST_COMM},      {'d', "d2h", ST_COPY},
};
#define N_STAGES (sizeof stage_specs / sizeof stage_specs[0])

/* The "colours" child: several stages of a kind, interleaved, so that the
 * i-th stage of a kind must take the kind's i-th colour. */
static const stage_spec colour_specs[] = {
    {0, "forward", ST_WORK},     {0, "queue_wait", ST_WAIT_INPUT}, {0, "backward", ST_WORK},
    {0, "stream_sync", ST_SYNC}, {0, "batch_wait", ST_WAIT_INPUT}, {0, "loss", ST_WORK},
    {0, "event_sync", ST_SYNC},  {0, "d2h", ST_COPY},
};
#define N_COLOUR_STAGES (sizeof colour_specs / sizeof colour_specs[0])

/* A step mark: st_step(step, tokens). stored: whether the writer keeps it
 * (steps must increase; one that does not is counted in meta
 * rejected_steps and left out of the trace, but was marked in NVTX all the
 * same, when it was recorded). */
typedef struct step_spec {
    uint64_t step, tokens;
    int stored;
} step_spec;

/* A script: a letter begins that stage's range, ')' ends the innermost one,
 * '#' marks the thread's next step (from `steps`), '|' waits for the other
 * workers (so both threads hold open ranges while the other records, and
 * their NVTX calls interleave), '(' is only for the reader's eye. Each is
 * run `repeat` times. */
typedef struct thread_spec {
    const char *name, *role;
    int device;
    const char *script;
    int repeat;
    const step_spec *steps;
    size_t n_steps;
} thread_spec;

static const step_spec main_steps[] = {
    {0, 0, 1},
    {1, 4096, 1},
    {1, 7, 0}, /* not above the last step: rejected by the writer */
    {2, 1, 1},
    {INT64_MAX, INT64_MAX, 1}, /* the largest step a trace stores: 19 digits */
};
#define N_MAIN_STEPS (sizeof main_steps / sizeof main_steps[0])

/* Only the main thread marks steps, so which ones the writer rejects does
 * not depend on how the threads interleave. Marks inside ranges and
 * between them. */
static const thread_spec main_spec = {"main", "main", -1, "#s(#)#s(#)#", 1, main_steps, N_MAIN_STEPS};
static const thread_spec worker_specs[] = {
    {"target-0", "target", 0, "f(d()|s(d()))p()", 40, NULL, 0},
    {"drafter 1", "drafter", 1, "w()f(a(|d())s())", 40, NULL, 0}, /* a space, to exercise the log's encoding */
};
#define N_WORKERS (sizeof worker_specs / sizeof worker_specs[0])

/* st_name_stream only passes the handle on, so any value will do. */
#define STREAM_HANDLE ((void *)(uintptr_t)0x5eed0)
#define STREAM_HANDLE_TEXT "0x5eed0"
#define STREAM_NAME "side stream"
#ifdef ST_HAVE_CUDA_HEADERS
#define STREAM_NAMES_EXPECTED 1
#else
#define STREAM_NAMES_EXPECTED 0 /* st_name_stream is a no-op without CUDA headers */
#endif

static int stage_of_letter(char c)
{
    for (size_t i = 0; i < N_STAGES; i++)
        if (stage_specs[i].letter == c) return (int)i;
    return -1;
}

/* ---- the child ---- */

static int stage_ids[N_STAGES];
static pthread_barrier_t workers_meet;

static int run_script(const thread_spec *spec)
{
    st_stage open[64];
    int depth = 0;
    size_t next_step = 0;
    for (int r = 0; r < spec->repeat; r++) {
        for (const char *c = spec->script; *c; c++) {
            if (*c == '(') continue;
            if (*c == '#') {
                if (next_step == spec->n_steps) return -1;
                st_step(spec->steps[next_step].step, spec->steps[next_step].tokens);
                next_step++;
                continue;
            }
            if (*c == '|') {
                pthread_barrier_wait(&workers_meet);
                continue;
            }
            if (*c == ')') {
                if (depth == 0) return -1;
                st_end(open[--depth]);
                continue;
            }
            int s = stage_of_letter(*c);
            if (s < 0 || depth == 64) return -1;
            open[depth++] = (st_stage)stage_ids[s];
            st_begin(open[depth - 1]);
        }
    }
    return depth == 0 && next_step == spec->n_steps ? 0 : -1;
}

typedef struct worker_arg {
    st_trace *trace;
    const thread_spec *spec;
    int rc;
} worker_arg;

static void *worker_main(void *p)
{
    worker_arg *w = p;
    int id = st_thread_register(w->trace, w->spec->name, w->spec->role, w->spec->device, 0);
    pthread_barrier_wait(&workers_meet);
    /* Even a failed registration runs the script, for its barriers. */
    int rc = run_script(w->spec);
    w->rc = id < 0 ? -1 : rc;
    st_thread_unregister();
    return NULL;
}

/* The tool's nvtx_inject_flush, found in the library NVTX loaded. */
static int flush_tool_log(void)
{
    const char *lib = getenv("NVTX_INJECTION64_PATH");
    void *h = lib ? dlopen(lib, RTLD_NOW | RTLD_NOLOAD) : NULL;
    if (!h) {
        fprintf(stderr, "child: the NVTX tool %s is not loaded\n", lib ? lib : "(unset)");
        return -1;
    }
    int (*flush)(void);
    *(void **)&flush = dlsym(h, "nvtx_inject_flush");
    int rc = flush ? flush() : -1;
    dlclose(h);
    return rc;
}

#define CHILD_CHECK(cond)                                                                  \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "child: %s:%d: %s failed (%s)\n", __FILE__, __LINE__, #cond,   \
                    st_last_error());                                                      \
            return 3;                                                                      \
        }                                                                                  \
    } while (0)

/* modes: "full" (NVTX on), "nvtx_off" (options.nvtx = 0), "disabled"
 * (options.enabled = 0), "step_max" (NVTX on; the main thread only marks
 * step UINT64_MAX with UINT64_MAX tokens, the longest message). */
static int child_end(void);

static int child_main(const char *mode, const char *trace_path)
{
    alarm(60); /* a hang fails the test instead of stalling it */
    nvtxMarkA("child:start");

    st_options opt;
    st_options_init(&opt);
    opt.path = trace_path;
    opt.overwrite = 1;
    opt.program = "nvtxtest";
    opt.commit_ms = 10;
    if (strcmp(mode, "nvtx_off") == 0)
        opt.nvtx = 0;
    else if (strcmp(mode, "disabled") == 0)
        opt.enabled = 0;
    else if (strcmp(mode, "step_max") != 0 && strcmp(mode, "colours") != 0)
        CHILD_CHECK(strcmp(mode, "full") == 0);

    st_trace *trace = NULL;
    CHILD_CHECK(st_open(&trace, &opt) == ST_OK);
    if (strcmp(mode, "step_max") == 0) {
        CHILD_CHECK(st_thread_register(trace, main_spec.name, main_spec.role, main_spec.device, 0) >= 0);
        st_step(UINT64_MAX, UINT64_MAX);
        CHILD_CHECK(st_close(trace) == ST_OK);
        return child_end();
    }
    if (strcmp(mode, "colours") == 0) {
        CHILD_CHECK(st_thread_register(trace, main_spec.name, main_spec.role, main_spec.device, 0) >= 0);
        for (size_t i = 0; i < N_COLOUR_STAGES; i++) {
            int id = st_stage_register(trace, colour_specs[i].name, colour_specs[i].kind);
            CHILD_CHECK(id >= 0);
            st_begin((st_stage)id);
            st_end((st_stage)id);
        }
        CHILD_CHECK(st_close(trace) == ST_OK);
        return child_end();
    }
    for (size_t i = 0; i < N_STAGES; i++) {
        stage_ids[i] = st_stage_register(trace, stage_specs[i].name, stage_specs[i].kind);
        CHILD_CHECK(stage_ids[i] >= 0);
    }
    /* Registering a name again gives the same stage (and must not register
     * it with NVTX a second time). */
    CHILD_CHECK(st_stage_register(trace, stage_specs[0].name, stage_specs[0].kind) == stage_ids[0]);

    CHILD_CHECK(st_thread_register(trace, main_spec.name, main_spec.role, main_spec.device, 0) >= 0);
    CHILD_CHECK(pthread_barrier_init(&workers_meet, NULL, N_WORKERS) == 0);
    pthread_t threads[N_WORKERS];
    worker_arg args[N_WORKERS];
    for (size_t i = 0; i < N_WORKERS; i++) {
        args[i] = (worker_arg){.trace = trace, .spec = &worker_specs[i], .rc = -1};
        CHILD_CHECK(pthread_create(&threads[i], NULL, worker_main, &args[i]) == 0);
    }
    st_name_stream(STREAM_HANDLE, STREAM_NAME);
    CHILD_CHECK(run_script(&main_spec) == 0);
    for (size_t i = 0; i < N_WORKERS; i++) {
        pthread_join(threads[i], NULL);
        CHILD_CHECK(args[i].rc == 0);
    }
    pthread_barrier_destroy(&workers_meet);
    CHILD_CHECK(st_close(trace) == ST_OK);
    return child_end();
}

/* The child's last NVTX call, and the check that the tool's log holds it. */
static int child_end(void)
{
    nvtxMarkA("child:end");
    CHILD_CHECK(flush_tool_log() == 0);
    /* The flushed log must already hold the last call. */
    const char *log_path = getenv("NVTX_INJECT_LOG");
    FILE *f = log_path ? fopen(log_path, "r") : NULL;
    CHILD_CHECK(f != NULL);
    char line[512], last[512] = "";
    while (fgets(line, sizeof line, f)) snprintf(last, sizeof last, "%s", line);
    fclose(f);
    CHILD_CHECK(strstr(last, "mark ") == last && strstr(last, " child:end -\n") != NULL);
    return 0;
}

/* ---- the parent: running a child ---- */

static char tool_path[PATH_MAX];

/* Runs "this-binary child MODE TRACE" with the tool attached; returns its
 * exit status (or 128 + signal). */
static int run_child(const char *mode, const char *trace_path, const char *log_path)
{
    unlink(log_path);
    remove_trace_files(trace_path);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        setenv("NVTX_INJECTION64_PATH", tool_path, 1);
        setenv("NVTX_INJECT_LOG", log_path, 1);
        char *argv[] = {"test_nvtx", "child", (char *)mode, (char *)trace_path, NULL};
        execv("/proc/self/exe", argv);
        fprintf(stderr, "cannot re-execute /proc/self/exe: %s\n", strerror(errno));
        _exit(127);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return -1;
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    return 128 + WTERMSIG(status);
}

/* ---- the parent: reading the tool's log ---- */

#define MAX_FIELDS 9

typedef struct log_line {
    char *raw[MAX_FIELDS];  /* the fields as written */
    char *text[MAX_FIELDS]; /* decoded; NULL for "-" and "*" */
    int n;
    unsigned long tid;
} log_line;

typedef struct tool_log {
    log_line *lines;
    size_t n;
} tool_log;

static char *decode(const char *s)
{
    if (strcmp(s, "-") == 0 || strcmp(s, "*") == 0) return NULL;
    char *out = malloc(strlen(s) + 1), *o = out;
    assert_non_null(out);
    if (strcmp(s, "%") != 0) {
        for (const char *p = s; *p; p++) {
            if (*p == '%' && p[1] && p[2]) {
                char hex[3] = {p[1], p[2], 0};
                *o++ = (char)strtol(hex, NULL, 16);
                p += 2;
            } else {
                *o++ = *p;
            }
        }
    }
    *o = 0;
    return out;
}

static void tool_log_load(tool_log *log, const char *path)
{
    memset(log, 0, sizeof *log);
    FILE *f = fopen(path, "r");
    if (!f) fail_msg("the NVTX tool wrote no log at %s (was it loaded?)", path);
    char line[8192];
    assert_non_null(fgets(line, sizeof line, f));
    assert_string_equal(line, "# nvtx_inject log v2\n");
    size_t cap = 0;
    while (fgets(line, sizeof line, f)) {
        size_t len = strlen(line);
        assert_true(len > 0 && line[len - 1] == '\n');
        line[len - 1] = 0;
        if (log->n == cap) {
            cap = cap ? cap * 2 : 128;
            log->lines = realloc(log->lines, cap * sizeof *log->lines);
            assert_non_null(log->lines);
        }
        log_line *l = &log->lines[log->n++];
        memset(l, 0, sizeof *l);
        char *save = NULL;
        for (char *tok = strtok_r(line, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
            assert_true(l->n < MAX_FIELDS);
            l->raw[l->n] = strdup(tok);
            l->text[l->n] = decode(tok);
            l->n++;
        }
        assert_true(l->n >= 2);
        l->tid = strtoul(l->raw[1], NULL, 10);
    }
    fclose(f);
}

static void tool_log_free(tool_log *log)
{
    for (size_t i = 0; i < log->n; i++)
        for (int k = 0; k < log->lines[i].n; k++) {
            free(log->lines[i].raw[k]);
            free(log->lines[i].text[k]);
        }
    free(log->lines);
    memset(log, 0, sizeof *log);
}

static bool is_verb(const log_line *l, const char *verb) { return strcmp(l->raw[0], verb) == 0; }

static size_t count_verb(const tool_log *log, const char *verb)
{
    size_t n = 0;
    for (size_t i = 0; i < log->n; i++) n += is_verb(&log->lines[i], verb);
    return n;
}

/* Marks in the default domain: the child's own (the tracer marks in the
 * program's domain). */
static size_t count_default_domain_marks(const tool_log *log)
{
    size_t n = 0;
    for (size_t i = 0; i < log->n; i++)
        n += is_verb(&log->lines[i], "mark") && strcmp(log->lines[i].raw[2], "-") == 0;
    return n;
}

/* The calls the child makes itself, around whatever the tracer does. */
static void check_child_marks(const tool_log *log)
{
    assert_true(log->n >= 3);
    assert_true(is_verb(&log->lines[0], "init"));
    const log_line *first = &log->lines[1], *last = &log->lines[log->n - 1];
    assert_true(is_verb(first, "mark") && first->n == 8);
    assert_string_equal(first->raw[2], "-");
    assert_string_equal(first->raw[5], "ascii");
    assert_string_equal(first->text[6], "child:start");
    assert_string_equal(first->raw[7], "-"); /* no payload */
    assert_true(is_verb(last, "mark") && last->n == 8);
    assert_string_equal(last->raw[2], "-");
    assert_string_equal(last->text[6], "child:end");
    assert_int_equal(first->tid, last->tid);
    assert_int_equal(count_verb(log, "init"), 1);
    assert_int_equal(count_default_domain_marks(log), 2);
}

/* ---- the parent: comparing the log with the trace ---- */

/* One begin, end or step mark on one thread: for a begin or an end, the
 * stage (for an end, the stage of the range it closes) and the nesting
 * level (0 = outermost); for a step mark, its index in the thread's
 * step_spec list and the number of ranges open around it. */
enum { EV_BEGIN, EV_END, EV_STEP };

typedef struct event {
    int kind;
    int stage; /* EV_STEP: the step's index */
    int depth;
} event;

typedef struct event_list {
    event *v;
    size_t n, cap;
} event_list;

static void event_add(event_list *l, int kind, int stage, int depth)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 64;
        l->v = realloc(l->v, l->cap * sizeof *l->v);
        assert_non_null(l->v);
    }
    l->v[l->n++] = (event){kind, stage, depth};
}

/* The begins and ends of a list, without its step marks. */
static void ranges_only(const event_list *in, event_list *out)
{
    for (size_t i = 0; i < in->n; i++)
        if (in->v[i].kind != EV_STEP) event_add(out, in->v[i].kind, in->v[i].stage, in->v[i].depth);
}

/* What the script says the thread did (stage = index into stage_specs;
 * the child registers them in that order, so it is also the stage id). */
static void expected_events(const thread_spec *spec, event_list *out)
{
    int stack[64], depth = 0, next_step = 0;
    for (int r = 0; r < spec->repeat; r++)
        for (const char *c = spec->script; *c; c++) {
            if (*c == '(' || *c == '|') continue;
            if (*c == '#') {
                event_add(out, EV_STEP, next_step++, depth);
            } else if (*c == ')') {
                depth--;
                event_add(out, EV_END, stack[depth], depth);
            } else {
                stack[depth] = stage_of_letter(*c);
                event_add(out, EV_BEGIN, stack[depth], depth);
                depth++;
            }
        }
}

static void trace_events(st_reader *r, uint32_t thread, event_list *out)
{
    st_event_iter *it = NULL;
    assert_int_equal(st_event_iter_open(&it, r, thread), ST_OK);
    st_event ev;
    int rc;
    while ((rc = st_event_iter_next(it, &ev)) == 1)
        event_add(out, ev.is_end ? EV_END : EV_BEGIN, (int)ev.stage, (int)ev.depth);
    assert_int_equal(rc, 0);
    st_event_iter_close(it);
}

/* The thread's pushes, pops and step marks as the tool saw them; checks
 * each push against the domain, the stage's category and registered name,
 * pairs every pop with the innermost open push, and checks the k-th step
 * mark in the domain against the thread's k-th step_spec: message
 * "step <step>" in ASCII, payload the tokens as an unsigned 64-bit
 * integer, no category, no colour. colors[stage] collects colours. */
static void tool_events(const tool_log *log, unsigned long tid, const char *domain, st_reader *r,
                        const thread_spec *spec, event_list *out, char colors[][16])
{
    int stack[256], depth = 0;
    size_t marks = 0;
    for (size_t i = 0; i < log->n; i++) {
        const log_line *l = &log->lines[i];
        if (l->tid != tid) continue;
        if (is_verb(l, "mark") && strcmp(l->raw[2], "-") != 0) {
            assert_int_equal(l->n, 8);
            assert_non_null(l->text[2]);
            assert_string_equal(l->text[2], domain);
            if (marks >= spec->n_steps) fail_msg("thread '%s': more step marks than st_step calls", spec->name);
            const step_spec *want = &spec->steps[marks];
            char message[64], payload[64];
            snprintf(message, sizeof message, "step %llu", (unsigned long long)want->step);
            snprintf(payload, sizeof payload, "u64:%llu", (unsigned long long)want->tokens);
            assert_string_equal(l->raw[3], "0"); /* no category */
            assert_string_equal(l->raw[4], "-"); /* no colour */
            assert_string_equal(l->raw[5], "ascii");
            assert_non_null(l->text[6]);
            assert_string_equal(l->text[6], message);
            assert_string_equal(l->raw[7], payload);
            event_add(out, EV_STEP, (int)marks++, depth);
        } else if (is_verb(l, "push")) {
            assert_int_equal(l->n, 9);
            assert_string_equal(l->raw[8], "-"); /* no payload */
            assert_non_null(l->text[2]);
            assert_string_equal(l->text[2], domain);
            assert_int_equal(atoi(l->raw[3]), depth);
            long category = strtol(l->raw[4], NULL, 10);
            assert_true(category >= 1 && category <= (long)st_reader_n_stages(r));
            int stage = (int)category - 1;
            assert_string_equal(l->raw[6], "reg"); /* a registered string, not a copy */
            assert_non_null(l->text[7]);
            assert_string_equal(l->text[7], st_reader_stage(r, (uint32_t)stage)->name);
            assert_int_equal(strlen(l->raw[5]), 8); /* an ARGB colour */
            if (colors[stage][0])
                assert_string_equal(colors[stage], l->raw[5]);
            else
                snprintf(colors[stage], 16, "%s", l->raw[5]);
            assert_true(depth < 256);
            stack[depth] = stage;
            event_add(out, EV_BEGIN, stage, depth);
            depth++;
        } else if (is_verb(l, "pop")) {
            assert_int_equal(l->n, 4);
            assert_non_null(l->text[2]);
            assert_string_equal(l->text[2], domain);
            assert_true(depth > 0); /* a pop with no push open */
            depth--;
            assert_int_equal(atoi(l->raw[3]), depth);
            event_add(out, EV_END, stack[depth], depth);
        }
    }
    assert_int_equal(depth, 0); /* every push popped */
}

static const char *event_text(const event *e, char *buf, size_t size)
{
    if (e->kind == EV_STEP)
        snprintf(buf, size, "step mark #%d depth %d", e->stage, e->depth);
    else
        snprintf(buf, size, "%s %s depth %d", e->kind == EV_END ? "end" : "begin", stage_specs[e->stage].name,
                 e->depth);
    return buf;
}

static void assert_events_equal(const event_list *a, const event_list *b, const char *what, const char *thread)
{
    if (a->n != b->n) fail_msg("thread '%s': %s: %zu vs %zu events", thread, what, a->n, b->n);
    for (size_t i = 0; i < a->n; i++)
        if (a->v[i].kind != b->v[i].kind || a->v[i].stage != b->v[i].stage || a->v[i].depth != b->v[i].depth) {
            char ta[96], tb[96];
            fail_msg("thread '%s': %s differ at event %zu: %s vs %s", thread, what, i,
                     event_text(&a->v[i], ta, sizeof ta), event_text(&b->v[i], tb, sizeof tb));
        }
}

/* Ranges per (stage, depth) from the range iterator, against the begins
 * and ends. */
static void check_range_counts(st_reader *r, uint32_t thread, const event_list *events)
{
    enum { MAX_DEPTH = 16 };
    unsigned from_ranges[N_STAGES][MAX_DEPTH] = {{0}}, from_events[N_STAGES][MAX_DEPTH] = {{0}};
    st_range_iter *it = NULL;
    assert_int_equal(st_range_iter_open(&it, r, thread, INT64_MIN, INT64_MAX), ST_OK);
    st_range range;
    int rc;
    while ((rc = st_range_iter_next(it, &range)) == 1) {
        assert_int_equal(range.thread, thread);
        assert_true(range.stage < N_STAGES && range.depth < MAX_DEPTH);
        assert_true(range.dur_ns >= 0);
        from_ranges[range.stage][range.depth]++;
    }
    assert_int_equal(rc, 0);
    st_range_iter_close(it);
    for (size_t i = 0; i < events->n; i++)
        if (events->v[i].kind == EV_BEGIN) from_events[events->v[i].stage][events->v[i].depth]++;
    assert_memory_equal(from_ranges, from_events, sizeof from_ranges);
}

typedef struct run_result {
    char colors[N_STAGES][16]; /* per stage id, "aarrggbb" */
} run_result;

/* Everything about a run with NVTX on. */
static void check_full_run(const tool_log *log, const char *trace_path, run_result *result)
{
    memset(result, 0, sizeof *result);
    check_child_marks(log);

    st_reader *r = open_reader(trace_path);
    assert_string_equal(st_reader_meta(r, "program"), "nvtxtest");
    assert_string_equal(st_reader_meta(r, "status"), "complete");

    /* One domain, named after the program, created first and destroyed
     * last, by the thread that opened and closed the trace. */
    assert_int_equal(count_verb(log, "domain_create"), 1);
    assert_int_equal(count_verb(log, "domain_destroy"), 1);
    const log_line *create = &log->lines[2], *destroy = &log->lines[log->n - 2];
    assert_true(is_verb(create, "domain_create"));
    assert_non_null(create->text[3]);
    assert_string_equal(create->text[3], "nvtxtest");
    assert_true(is_verb(destroy, "domain_destroy"));
    assert_string_equal(destroy->raw[2], create->raw[2]);
    assert_string_equal(destroy->raw[3], "nvtxtest");
    assert_int_equal(create->tid, log->lines[1].tid);
    assert_int_equal(destroy->tid, log->lines[1].tid);

    /* Stages: as registered; each name registered once as a string and
     * named once as category id + 1, in the program's domain. */
    assert_int_equal(st_reader_n_stages(r), N_STAGES);
    assert_int_equal(count_verb(log, "register_string"), N_STAGES);
    assert_int_equal(count_verb(log, "name_category"), N_STAGES);
    for (uint32_t id = 0; id < N_STAGES; id++) {
        const st_stage_info *s = st_reader_stage(r, id);
        assert_string_equal(s->name, stage_specs[id].name);
        assert_int_equal(s->kind, stage_specs[id].kind);
        int registered = 0, named = 0;
        for (size_t i = 0; i < log->n; i++) {
            const log_line *l = &log->lines[i];
            if (is_verb(l, "register_string") && l->text[4] && strcmp(l->text[4], s->name) == 0) {
                assert_non_null(l->text[2]);
                assert_string_equal(l->text[2], "nvtxtest");
                assert_true(strtoul(l->raw[3], NULL, 10) > 0);
                registered++;
            }
            if (is_verb(l, "name_category") && l->text[4] && strcmp(l->text[4], s->name) == 0) {
                assert_non_null(l->text[2]);
                assert_string_equal(l->text[2], "nvtxtest");
                assert_int_equal(strtoul(l->raw[3], NULL, 10), id + 1);
                named++;
            }
        }
        assert_int_equal(registered, 1);
        assert_int_equal(named, 1);
    }

    /* Threads: each trace thread named once in NVTX, by itself, with its
     * trace name and its os_tid; its pushes and pops are its begins and
     * ends, and its step marks come between them where it called st_step,
     * every call marked, stored or not. */
    assert_int_equal(st_reader_n_threads(r), 1 + N_WORKERS);
    assert_int_equal(count_verb(log, "name_thread"), 1 + N_WORKERS);
    size_t pushes_seen = 0, pops_seen = 0, step_marks_seen = 0;
    for (uint32_t t = 0; t < st_reader_n_threads(r); t++) {
        const st_thread_info *th = st_reader_thread(r, t);
        const thread_spec *spec = NULL;
        if (strcmp(th->name, main_spec.name) == 0) spec = &main_spec;
        for (size_t i = 0; i < N_WORKERS; i++)
            if (strcmp(th->name, worker_specs[i].name) == 0) spec = &worker_specs[i];
        if (!spec) fail_msg("unexpected thread '%s' in the trace", th->name);
        assert_string_equal(th->role, spec->role);
        assert_int_equal(th->device, spec->device);

        int named = 0;
        for (size_t i = 0; i < log->n; i++) {
            const log_line *l = &log->lines[i];
            if (!is_verb(l, "name_thread") || !l->text[3] || strcmp(l->text[3], th->name) != 0) continue;
            assert_int_equal(strtoll(l->raw[2], NULL, 10), th->os_tid);
            assert_int_equal((int64_t)l->tid, th->os_tid);
            named++;
        }
        if (named != 1) fail_msg("thread '%s' was named %d times in NVTX", th->name, named);
        if (spec == &main_spec) assert_int_equal(th->os_tid, log->lines[1].tid);

        event_list want = {0}, want_ranges = {0}, recorded = {0}, emitted = {0}, emitted_ranges = {0};
        expected_events(spec, &want);
        ranges_only(&want, &want_ranges);
        trace_events(r, th->id, &recorded);
        tool_events(log, (unsigned long)th->os_tid, "nvtxtest", r, spec, &emitted, result->colors);
        ranges_only(&emitted, &emitted_ranges);
        assert_events_equal(&want_ranges, &recorded, "script and trace", th->name);
        assert_events_equal(&recorded, &emitted_ranges, "trace and NVTX", th->name);
        assert_events_equal(&want, &emitted, "script and NVTX", th->name);
        check_range_counts(r, th->id, &recorded);
        for (size_t i = 0; i < emitted.n; i++) {
            pushes_seen += emitted.v[i].kind == EV_BEGIN;
            pops_seen += emitted.v[i].kind == EV_END;
            step_marks_seen += emitted.v[i].kind == EV_STEP;
        }
        free(want.v);
        free(want_ranges.v);
        free(recorded.v);
        free(emitted.v);
        free(emitted_ranges.v);
    }
    /* The step marks: one NVTX mark per st_step call; the trace holds the
     * ones the writer kept, and counts the other. */
    assert_int_equal(step_marks_seen, N_MAIN_STEPS);
    size_t stored = 0;
    for (size_t k = 0; k < N_MAIN_STEPS; k++) {
        if (!main_steps[k].stored) continue;
        assert_true(stored < st_reader_n_steps(r));
        const st_step_info *si = st_reader_step(r, (uint32_t)stored++);
        assert_int_equal(si->step, main_steps[k].step);
        assert_int_equal(si->tokens, main_steps[k].tokens);
    }
    assert_int_equal(st_reader_n_steps(r), stored);
    assert_string_equal(st_reader_meta(r, "rejected_steps"), "1");
    /* The CUDA stream, named by the main thread (CUDA builds only). */
    assert_int_equal(count_verb(log, "name_cuda_stream"), STREAM_NAMES_EXPECTED);
    for (size_t i = 0; i < log->n; i++) {
        const log_line *l = &log->lines[i];
        if (!is_verb(l, "name_cuda_stream")) continue;
        assert_int_equal(l->n, 4);
        assert_int_equal(l->tid, log->lines[1].tid);
        assert_string_equal(l->raw[2], STREAM_HANDLE_TEXT);
        assert_non_null(l->text[3]);
        assert_string_equal(l->text[3], STREAM_NAME);
    }

    /* No push, pop or step mark from a thread the trace does not know, and
     * no other kind of call. */
    assert_int_equal(count_verb(log, "push"), pushes_seen);
    assert_int_equal(count_verb(log, "pop"), pops_seen);
    assert_int_equal(count_verb(log, "mark"), 2 + step_marks_seen);
    size_t known = count_verb(log, "init") + count_verb(log, "mark") + count_verb(log, "domain_create") +
                   count_verb(log, "domain_destroy") + count_verb(log, "register_string") +
                   count_verb(log, "name_category") + count_verb(log, "name_thread") + count_verb(log, "name_cuda_stream") +
                   pushes_seen + pops_seen;
    assert_int_equal(known, log->n);

    /* One colour per stage: every stage was pushed, each push of a stage had
     * the same colour (tool_events), and stages do not share colours. */
    for (size_t a = 0; a < N_STAGES; a++) {
        assert_int_equal(strlen(result->colors[a]), 8);
        for (size_t b = 0; b < a; b++) assert_string_not_equal(result->colors[a], result->colors[b]);
    }
    /* The colours are the shared palette's (the report's): each stage is
     * the first of its kind here, so it has its kind's first colour. */
    for (size_t a = 0; a < N_STAGES; a++) {
        char want[16];
        snprintf(want, sizeof want, "ff%06x", (unsigned)st_palette_rgb(stage_specs[a].kind, 0));
        assert_string_equal(result->colors[a], want);
    }
    st_reader_close(r);
}

/* ---- the tests ---- */

/* The shared stage palette: more than 12 distinct colours for work, one
 * family per other kind, no colour in two places. */
static void test_palette(void **state)
{
    (void)state;
    uint32_t all[ST_PALETTE_WORK_N + (ST_KIND_COUNT - 1) * ST_PALETTE_FAMILY_N];
    size_t n = 0;
    for (uint32_t i = 0; i < ST_PALETTE_WORK_N; i++) all[n++] = st_palette_rgb(ST_WORK, i);
    for (int k = ST_WAIT_INPUT; k < ST_KIND_COUNT; k++)
        for (uint32_t i = 0; i < ST_PALETTE_FAMILY_N; i++) all[n++] = st_palette_rgb((st_kind)k, i);
    assert_true(ST_PALETTE_WORK_N > 12);
    for (size_t a = 0; a < n; a++)
        for (size_t b = 0; b < a; b++) assert_int_not_equal(all[a], all[b]);
    /* cyclic past the end; an unknown kind is coloured as work */
    assert_int_equal(st_palette_rgb(ST_WORK, ST_PALETTE_WORK_N + 3), st_palette_rgb(ST_WORK, 3));
    assert_int_equal(st_palette_rgb(ST_SYNC, ST_PALETTE_FAMILY_N), st_palette_rgb(ST_SYNC, 0));
    assert_int_equal(st_palette_rgb((st_kind)99, 2), st_palette_rgb(ST_WORK, 2));
}

static void test_nvtx_matches_trace(void **state)
{
    (void)state;
    char trace_path[PATH_MAX], log_path[PATH_MAX];
    run_result runs[2];
    for (int run = 0; run < 2; run++) {
        tmp_path(trace_path, sizeof trace_path, "full.sqlite");
        tmp_path(log_path, sizeof log_path, "full.nvtx.log");
        int rc = run_child("full", trace_path, log_path);
        if (rc != 0) fail_msg("the child (mode full, run %d) exited with status %d", run + 1, rc);
        tool_log log;
        tool_log_load(&log, log_path);
        check_full_run(&log, trace_path, &runs[run]);
        tool_log_free(&log);
        remove_trace_files(trace_path);
        unlink(log_path);
    }
    /* Colours are a function of the stage, the same from run to run. */
    for (size_t s = 0; s < N_STAGES; s++) assert_string_equal(runs[0].colors[s], runs[1].colors[s]);
}

/* options.nvtx = 0: the trace is recorded as usual, NVTX sees nothing. */
static void test_nvtx_off(void **state)
{
    (void)state;
    char trace_path[PATH_MAX], log_path[PATH_MAX];
    tmp_path(trace_path, sizeof trace_path, "nvtx_off.sqlite");
    tmp_path(log_path, sizeof log_path, "nvtx_off.nvtx.log");
    int rc = run_child("nvtx_off", trace_path, log_path);
    if (rc != 0) fail_msg("the child (mode nvtx_off) exited with status %d", rc);
    tool_log log;
    tool_log_load(&log, log_path);
    check_child_marks(&log);
    assert_int_equal(count_verb(&log, "push"), 0);
    assert_int_equal(count_verb(&log, "pop"), 0);
    assert_int_equal(log.n, 3); /* init and the child's own two marks: nothing from the tracer */
    tool_log_free(&log);

    st_reader *r = open_reader(trace_path);
    assert_int_equal(st_reader_n_threads(r), 1 + N_WORKERS);
    for (uint32_t t = 0; t < st_reader_n_threads(r); t++) {
        const st_thread_info *th = st_reader_thread(r, t);
        const thread_spec *spec = strcmp(th->name, main_spec.name) == 0 ? &main_spec : NULL;
        for (size_t i = 0; i < N_WORKERS; i++)
            if (strcmp(th->name, worker_specs[i].name) == 0) spec = &worker_specs[i];
        assert_non_null(spec);
        event_list want = {0}, want_ranges = {0}, recorded = {0};
        expected_events(spec, &want);
        ranges_only(&want, &want_ranges);
        trace_events(r, th->id, &recorded);
        assert_events_equal(&want_ranges, &recorded, "script and trace", th->name);
        free(want.v);
        free(want_ranges.v);
        free(recorded.v);
    }
    st_reader_close(r);
    remove_trace_files(trace_path);
    unlink(log_path);
}

/* The longest step message: 20 digits, and the largest payload. */
static void test_step_max(void **state)
{
    (void)state;
    char trace_path[PATH_MAX], log_path[PATH_MAX];
    tmp_path(trace_path, sizeof trace_path, "step_max.sqlite");
    tmp_path(log_path, sizeof log_path, "step_max.nvtx.log");
    int rc = run_child("step_max", trace_path, log_path);
    if (rc != 0) fail_msg("the child (mode step_max) exited with status %d", rc);
    tool_log log;
    tool_log_load(&log, log_path);
    check_child_marks(&log);
    assert_int_equal(count_verb(&log, "mark"), 3);
    size_t seen = 0;
    for (size_t i = 0; i < log.n; i++) {
        const log_line *l = &log.lines[i];
        if (!is_verb(l, "mark") || strcmp(l->raw[2], "-") == 0) continue;
        assert_int_equal(l->n, 8);
        assert_string_equal(l->raw[2], "nvtxtest");
        assert_int_equal(l->tid, log.lines[1].tid);
        assert_string_equal(l->raw[3], "0");
        assert_string_equal(l->raw[4], "-");
        assert_string_equal(l->raw[5], "ascii");
        assert_string_equal(l->text[6], "step 18446744073709551615");
        assert_string_equal(l->raw[7], "u64:18446744073709551615");
        seen++;
    }
    assert_int_equal(seen, 1);
    tool_log_free(&log);
    remove_trace_files(trace_path);
    unlink(log_path);
}

/* st_reader_stage_colours gives back the colours NVTX saw: each stage's
 * pushes carry colour ff + the reader's 0xRRGGBB for it. The expected
 * numbers come from the tool's log, not from the palette; the palette only
 * confirms the per-kind numbering (the i-th stage of a kind, in id order,
 * takes the kind's i-th colour) that makes stages of one kind differ. */
static void test_reader_colours(void **state)
{
    (void)state;
    char trace_path[PATH_MAX], log_path[PATH_MAX];
    tmp_path(trace_path, sizeof trace_path, "colours.sqlite");
    tmp_path(log_path, sizeof log_path, "colours.nvtx.log");
    int rc = run_child("colours", trace_path, log_path);
    if (rc != 0) fail_msg("the child (mode colours) exited with status %d", rc);
    tool_log log;
    tool_log_load(&log, log_path);
    check_child_marks(&log);
    st_reader *r = NULL;
    assert_int_equal(st_reader_open(&r, trace_path), ST_OK);
    assert_int_equal(st_reader_n_stages(r), N_COLOUR_STAGES);
    /* NVTX's colour of each stage, by category (stage id + 1) */
    char nvtx[N_COLOUR_STAGES][16];
    memset(nvtx, 0, sizeof nvtx);
    for (size_t i = 0; i < log.n; i++) {
        const log_line *l = &log.lines[i];
        if (!is_verb(l, "push")) continue;
        assert_int_equal(l->n, 9);
        long category = strtol(l->raw[4], NULL, 10);
        assert_true(category >= 1 && category <= (long)N_COLOUR_STAGES);
        assert_int_equal(strlen(l->raw[5]), 8);
        assert_true(nvtx[category - 1][0] == 0); /* one push per stage */
        snprintf(nvtx[category - 1], sizeof nvtx[0], "%s", l->raw[5]);
    }
    uint32_t rgb[N_COLOUR_STAGES + 2];
    memset(rgb, 0, sizeof rgb);
    assert_int_equal(st_reader_stage_colours(r, rgb, N_COLOUR_STAGES + 2), N_COLOUR_STAGES);
    assert_int_equal(rgb[N_COLOUR_STAGES], 0); /* nothing written past the stages */
    uint32_t used[ST_KIND_COUNT] = {0};
    for (uint32_t id = 0; id < N_COLOUR_STAGES; id++) {
        const st_stage_info *si = st_reader_stage(r, id);
        assert_string_equal(si->name, colour_specs[id].name);
        char want[16];
        snprintf(want, sizeof want, "ff%06x", (unsigned)rgb[id]);
        assert_string_equal(nvtx[id], want);
        assert_int_equal(rgb[id], st_palette_rgb(si->kind, used[si->kind]++));
        for (uint32_t b = 0; b < id; b++) assert_int_not_equal(rgb[id], rgb[b]);
    }
    /* fewer than the stages: the first n, the same; nothing for NULL */
    uint32_t first[3] = {0};
    assert_int_equal(st_reader_stage_colours(r, first, 3), 3);
    assert_memory_equal(first, rgb, sizeof first);
    assert_int_equal(st_reader_stage_colours(r, first, 0), 0);
    assert_int_equal(st_reader_stage_colours(NULL, first, 3), 0);
    assert_int_equal(st_reader_stage_colours(r, NULL, 3), 0);
    st_reader_close(r);
    tool_log_free(&log);
    remove_trace_files(trace_path);
    unlink(log_path);
}

/* options.enabled = 0: no trace file, and nothing reaches NVTX. */
static void test_disabled(void **state)
{
    (void)state;
    char trace_path[PATH_MAX], log_path[PATH_MAX];
    tmp_path(trace_path, sizeof trace_path, "disabled.sqlite");
    tmp_path(log_path, sizeof log_path, "disabled.nvtx.log");
    int rc = run_child("disabled", trace_path, log_path);
    if (rc != 0) fail_msg("the child (mode disabled) exited with status %d", rc);
    tool_log log;
    tool_log_load(&log, log_path);
    check_child_marks(&log);
    assert_int_equal(count_verb(&log, "push"), 0);
    assert_int_equal(count_verb(&log, "pop"), 0);
    assert_int_equal(log.n, 3);
    tool_log_free(&log);
    assert_int_equal(access(trace_path, F_OK), -1);
    unlink(log_path);
}

static int setup(void **state)
{
    (void)state;
    char rel[PATH_MAX];
    snprintf(rel, sizeof rel, "%s/tests/libnvtx_inject.so", build_dir());
    if (!realpath(rel, tool_path)) {
        fprintf(stderr, "the NVTX test tool %s is missing (%s): build it with make %s\n", rel,
                strerror(errno), rel);
        return -1;
    }
    return make_tmp_dir("test_nvtx");
}

static int teardown(void **state)
{
    (void)state;
    rmdir(tmp_dir); /* left behind, with its files, when a test failed */
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "child") == 0) return child_main(argv[2], argv[3]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_palette),
        cmocka_unit_test(test_nvtx_matches_trace),
        cmocka_unit_test(test_nvtx_off),
        cmocka_unit_test(test_step_max),
        cmocka_unit_test(test_reader_colours),
        cmocka_unit_test(test_disabled),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

#endif /* ST_HAVE_NVTX */
