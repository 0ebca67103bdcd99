/* intervals.c: the interval aggregator behind the "profile" lines (the
 * contract is in st_intervals.h).
 *
 * It consumes one merged, ordered event stream. Per thread it keeps the stack
 * of open ranges and the time point it has accounted up to; every event first
 * charges the time since that point to the innermost open stage (or to idle),
 * so each nanosecond of a window is charged exactly once and a range crossing
 * a boundary is split at it. A boundary step mark charges every thread up to
 * the mark, hands the window to the callback and clears the per-window
 * counters; the stacks carry over. State is O(threads x stages) and does not
 * grow with the trace. The writer thread (online) and the analyzer (offline)
 * both run this code, and st_window_format uses integer arithmetic only, so
 * a window prints to the same bytes on both sides.
 *
 * What the header leaves open (mostly malformed input, which a trace read
 * from disk may be):
 *  - window pointers (names, arrays, threads) are valid only during the
 *    callback; the callback must not call back into the aggregator;
 *  - events for a thread or stage never declared are accepted (NULL names);
 *    stage ids >= ST_MAX_STAGES are refused by st_agg_stage, and a range of
 *    such a stage is tracked on the stack but its time goes nowhere;
 *  - nesting deeper than 256 is counted, its time goes to the 256th level;
 *    an end with nothing open is ignored;
 *  - time never runs backwards: an event older than its thread's accounted
 *    point charges nothing; a repeated or older boundary mark is ignored, and
 *    so are the tokens of marks not after the window's first step;
 *  - the last, unfinished window is never emitted.
 */
#include "st_intervals.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AGG_STAGE_CAP0 16     /* initial stage capacity */

typedef struct agg_thread {
    uint32_t id;
    char *name, *role;
    int64_t accounted_ns;   /* time charged up to (valid while a window is open) */
    uint32_t depth;         /* open ranges; may exceed ST_MAX_DEPTH */
    int64_t idle_ns;        /* per-window accumulators */
    int64_t *stage_ns;      /* [agg->stage_cap] */
    uint64_t *stage_count;  /* [agg->stage_cap] */
    uint32_t stack[ST_MAX_DEPTH];
} agg_thread;

struct st_agg {
    uint32_t every_steps;
    st_window_fn cb;
    void *arg;

    uint32_t n_stages;      /* 1 + highest stage id declared or used */
    uint32_t stage_cap;     /* allocated entries of every stage array */
    char **stage_names;     /* [stage_cap], NULL where never declared */
    uint8_t *stage_kinds;   /* [stage_cap] */

    agg_thread **threads;   /* sorted by id */
    uint32_t n_threads, threads_cap;
    agg_thread *recent;     /* lookup cache: consecutive events share a thread */
    st_window_thread *out;  /* [threads_cap]: the emitted window's rows */
    int64_t *oncpu;         /* [threads_cap]: their on-CPU times (st_agg_set_oncpu) */
    st_agg_oncpu_fn oncpu_fn;
    void *oncpu_arg;

    bool window_open;       /* a boundary mark has been seen */
    uint64_t window_step;   /* step of the mark that opened the window */
    int64_t window_t0_ns;
    uint64_t window_tokens;
};

/* ---- small helpers ---------------------------------------------------------- */

static int64_t add_sat(int64_t a, int64_t b) /* both >= 0 */
{
    return a > INT64_MAX - b ? INT64_MAX : a + b;
}

/* Nanoseconds from a to b, 0 when b <= a, without signed overflow. */
static int64_t span_ns(int64_t a, int64_t b)
{
    if (b <= a) return 0;
    uint64_t d = (uint64_t)b - (uint64_t)a;
    return d > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)d;
}

static char *dup_or_null(const char *s, bool *failed)
{
    if (!s) return NULL;
    char *d = strdup(s);
    if (!d) *failed = true;
    return d;
}

/* ---- stages ------------------------------------------------------------------ */

/* Makes every stage array hold at least `need` entries (new ones zeroed).
 * On failure the arrays already grown keep their larger size; stage_cap is
 * raised only when all of them are. */
static int grow_stages(st_agg *agg, uint32_t need)
{
    if (need <= agg->stage_cap) return ST_OK;
    uint32_t cap = agg->stage_cap ? agg->stage_cap : AGG_STAGE_CAP0;
    while (cap < need) cap *= 2;
    if (cap > ST_MAX_STAGES) cap = ST_MAX_STAGES;
    if (cap < need) return ST_ELIMIT;
    size_t old = agg->stage_cap, add = cap - old;

    char **names = realloc(agg->stage_names, cap * sizeof *names);
    if (!names) return ST_ENOMEM;
    agg->stage_names = names;
    memset(names + old, 0, add * sizeof *names);
    uint8_t *kinds = realloc(agg->stage_kinds, cap * sizeof *kinds);
    if (!kinds) return ST_ENOMEM;
    agg->stage_kinds = kinds;
    memset(kinds + old, 0, add * sizeof *kinds);
    for (uint32_t i = 0; i < agg->n_threads; i++) {
        agg_thread *th = agg->threads[i];
        int64_t *ns = realloc(th->stage_ns, cap * sizeof *ns);
        if (!ns) return ST_ENOMEM;
        th->stage_ns = ns;
        memset(ns + old, 0, add * sizeof *ns);
        uint64_t *count = realloc(th->stage_count, cap * sizeof *count);
        if (!count) return ST_ENOMEM;
        th->stage_count = count;
        memset(count + old, 0, add * sizeof *count);
    }
    agg->stage_cap = cap;
    return ST_OK;
}

/* Makes `stage` a valid index of the per-window arrays. */
static int use_stage(st_agg *agg, uint32_t stage)
{
    if (stage >= ST_MAX_STAGES) return ST_ELIMIT;
    if (stage < agg->n_stages) return ST_OK;
    int rc = grow_stages(agg, stage + 1);
    if (rc != ST_OK) return rc;
    agg->n_stages = stage + 1;
    return ST_OK;
}

/* ---- threads ----------------------------------------------------------------- */

/* Index of the first thread whose id >= id. */
static uint32_t thread_slot(const st_agg *agg, uint32_t id)
{
    uint32_t lo = 0, hi = agg->n_threads;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (agg->threads[mid]->id < id) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static void thread_free(agg_thread *th)
{
    if (!th) return;
    free(th->name);
    free(th->role);
    free(th->stage_ns);
    free(th->stage_count);
    free(th);
}

/* The thread with this id; created (unnamed) when `create` and unknown.
 * NULL when unknown and not created, or out of memory. */
static agg_thread *thread_get(st_agg *agg, uint32_t id, bool create)
{
    if (agg->recent && agg->recent->id == id) return agg->recent;
    uint32_t slot = thread_slot(agg, id);
    if (slot < agg->n_threads && agg->threads[slot]->id == id)
        return agg->recent = agg->threads[slot];
    if (!create) return NULL;

    if (agg->n_threads == agg->threads_cap) {
        uint32_t cap = agg->threads_cap ? agg->threads_cap * 2 : 8;
        agg_thread **threads = realloc(agg->threads, cap * sizeof *threads);
        if (!threads) return NULL;
        agg->threads = threads;
        st_window_thread *out = realloc(agg->out, cap * sizeof *out);
        if (!out) return NULL;
        agg->out = out;
        int64_t *oncpu = realloc(agg->oncpu, cap * sizeof *oncpu);
        if (!oncpu) return NULL;
        agg->oncpu = oncpu;
        agg->threads_cap = cap;
    }
    agg_thread *th = calloc(1, sizeof *th);
    if (!th) return NULL;
    th->id = id;
    th->stage_ns = calloc(agg->stage_cap, sizeof *th->stage_ns);
    th->stage_count = calloc(agg->stage_cap, sizeof *th->stage_count);
    if (!th->stage_ns || !th->stage_count) {
        thread_free(th);
        return NULL;
    }
    /* Time in the window before a thread's first event is idle. */
    th->accounted_ns = agg->window_t0_ns;
    memmove(agg->threads + slot + 1, agg->threads + slot,
            (agg->n_threads - slot) * sizeof *agg->threads);
    agg->threads[slot] = th;
    agg->n_threads++;
    return agg->recent = th;
}

/* Charges the thread's time from its accounted point up to ts. */
static void charge(st_agg *agg, agg_thread *th, int64_t ts_ns)
{
    if (!agg->window_open) return;
    int64_t dt = span_ns(th->accounted_ns, ts_ns);
    if (dt == 0) return;
    th->accounted_ns = ts_ns;
    if (th->depth == 0) {
        th->idle_ns = add_sat(th->idle_ns, dt);
        return;
    }
    uint32_t level = th->depth < ST_MAX_DEPTH ? th->depth : ST_MAX_DEPTH;
    uint32_t stage = th->stack[level - 1];
    if (stage < agg->n_stages) th->stage_ns[stage] = add_sat(th->stage_ns[stage], dt);
}

static void reset_window(st_agg *agg)
{
    for (uint32_t i = 0; i < agg->n_threads; i++) {
        agg_thread *th = agg->threads[i];
        th->idle_ns = 0;
        memset(th->stage_ns, 0, agg->n_stages * sizeof *th->stage_ns);
        memset(th->stage_count, 0, agg->n_stages * sizeof *th->stage_count);
    }
    agg->window_tokens = 0;
}

static bool thread_active(const st_agg *agg, const agg_thread *th)
{
    for (uint32_t s = 0; s < agg->n_stages; s++)
        if (th->stage_ns[s] != 0 || th->stage_count[s] != 0) return true;
    return false;
}

/* ---- public API -------------------------------------------------------------- */

st_agg *st_agg_create(uint32_t every_steps, st_window_fn cb, void *arg)
{
    if (every_steps == 0 || !cb) return NULL;
    st_agg *agg = calloc(1, sizeof *agg);
    if (!agg) return NULL;
    agg->every_steps = every_steps;
    agg->cb = cb;
    agg->arg = arg;
    if (grow_stages(agg, AGG_STAGE_CAP0) != ST_OK) {
        st_agg_free(agg);
        return NULL;
    }
    return agg;
}

void st_agg_free(st_agg *agg)
{
    if (!agg) return;
    for (uint32_t i = 0; i < agg->n_threads; i++) thread_free(agg->threads[i]);
    for (uint32_t s = 0; s < agg->stage_cap; s++) free(agg->stage_names[s]);
    free(agg->threads);
    free(agg->out);
    free(agg->oncpu);
    free(agg->stage_names);
    free(agg->stage_kinds);
    free(agg);
}

void st_agg_set_oncpu(st_agg *agg, st_agg_oncpu_fn fn, void *arg)
{
    if (!agg) return;
    agg->oncpu_fn = fn;
    agg->oncpu_arg = arg;
}

int st_agg_thread(st_agg *agg, uint32_t thread, const char *name, const char *role)
{
    if (!agg) return ST_EINVAL;
    bool failed = false;
    char *name_copy = dup_or_null(name, &failed);
    char *role_copy = dup_or_null(role, &failed);
    agg_thread *th = failed ? NULL : thread_get(agg, thread, true);
    if (!th) {
        free(name_copy);
        free(role_copy);
        return ST_ENOMEM;
    }
    free(th->name);
    free(th->role);
    th->name = name_copy;
    th->role = role_copy;
    return ST_OK;
}

int st_agg_stage(st_agg *agg, uint32_t stage, const char *name, st_kind kind)
{
    if (!agg || (unsigned)kind >= ST_KIND_COUNT) return ST_EINVAL;
    if (stage >= ST_MAX_STAGES) return ST_ELIMIT;
    bool failed = false;
    char *name_copy = dup_or_null(name, &failed);
    if (failed) return ST_ENOMEM;
    int rc = use_stage(agg, stage);
    if (rc != ST_OK) {
        free(name_copy);
        return rc;
    }
    free(agg->stage_names[stage]);
    agg->stage_names[stage] = name_copy;
    agg->stage_kinds[stage] = (uint8_t)kind;
    return ST_OK;
}

void st_agg_begin(st_agg *agg, uint32_t thread, uint32_t stage, int64_t ts_ns)
{
    if (!agg) return;
    agg_thread *th = thread_get(agg, thread, true);
    if (!th) return; /* out of memory: the event is lost */
    (void)use_stage(agg, stage); /* on failure the range's time goes nowhere */
    charge(agg, th, ts_ns);
    if (th->depth < ST_MAX_DEPTH) th->stack[th->depth] = stage;
    if (th->depth < UINT32_MAX) th->depth++;
    /* Events are ordered, so a begin seen while a window is open lies in it. */
    if (agg->window_open && stage < agg->n_stages) th->stage_count[stage]++;
}

void st_agg_end(st_agg *agg, uint32_t thread, int64_t ts_ns)
{
    if (!agg) return;
    agg_thread *th = thread_get(agg, thread, false);
    if (!th) return; /* nothing was ever open on it */
    charge(agg, th, ts_ns);
    if (th->depth > 0) th->depth--;
}

void st_agg_step(st_agg *agg, uint64_t step, int64_t ts_ns, uint64_t tokens)
{
    if (!agg) return;
    bool boundary = step % agg->every_steps == 0;
    if (!agg->window_open) {
        if (!boundary) return; /* before the first boundary: nothing to count */
        agg->window_open = true;
        agg->window_step = step;
        agg->window_t0_ns = ts_ns;
        for (uint32_t i = 0; i < agg->n_threads; i++) agg->threads[i]->accounted_ns = ts_ns;
        reset_window(agg);
        return;
    }
    if (step <= agg->window_step) return; /* repeated or older mark */
    agg->window_tokens += tokens;
    if (!boundary) return;

    for (uint32_t i = 0; i < agg->n_threads; i++) charge(agg, agg->threads[i], ts_ns);

    st_window w;
    memset(&w, 0, sizeof w);
    w.index = step / agg->every_steps - 1;
    w.step_first = agg->window_step + 1;
    w.step_last = step;
    w.t0_ns = agg->window_t0_ns;
    w.t1_ns = ts_ns;
    w.tokens = agg->window_tokens;
    w.n_stages = agg->n_stages;
    w.stage_names = (const char *const *)agg->stage_names;
    w.stage_kinds = agg->stage_kinds;
    uint32_t n = 0;
    for (uint32_t i = 0; i < agg->n_threads; i++) {
        agg_thread *th = agg->threads[i];
        if (!thread_active(agg, th)) continue;
        agg->out[n++] = (st_window_thread){
            .thread = th->id, .name = th->name, .role = th->role, .idle_ns = th->idle_ns,
            .stage_ns = th->stage_ns, .stage_count = th->stage_count,
        };
    }
    w.n_threads = n;
    w.threads = agg->out;
    int64_t span = 0;
    if (agg->oncpu_fn && n && agg->oncpu_fn(agg->oncpu_arg, &w, agg->oncpu, &span)) {
        w.oncpu_ns = agg->oncpu;
        w.oncpu_span_ns = span;
    }
    agg->cb(&w, agg->arg);

    reset_window(agg);
    agg->window_step = step;
    agg->window_t0_ns = ts_ns;
    /* Every thread was charged up to ts_ns; threads seen from now on start
     * there too (thread_get). */
}

/* ---- formatting -------------------------------------------------------------- */

/* Text appended with snprintf semantics: len counts everything asked for,
 * buf holds what fits, always NUL-terminated when size > 0. */
typedef struct text {
    char *buf;
    size_t size, len;
} text;

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static void put(text *t, const char *fmt, ...)
{
    size_t room = t->len < t->size ? t->size - t->len : 0;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(room ? t->buf + t->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0) t->len += (size_t)n;
}

static void put_spaces(text *t, size_t n)
{
    while (n--) put(t, " ");
}

#ifdef __SIZEOF_INT128__
__extension__ typedef unsigned __int128 u128;
#endif

/* round(a * m / (b * n)), half up, saturating; 0 when the divisor is 0. */
static uint64_t muldiv_round(uint64_t a, uint64_t m, uint64_t b, uint64_t n)
{
#ifdef __SIZEOF_INT128__
    u128 div = (u128)b * n;
    if (div == 0) return 0;
    u128 q = ((u128)a * m + div / 2) / div;
    return q > UINT64_MAX ? UINT64_MAX : (uint64_t)q;
#else
    long double div = (long double)b * n;
    if (div == 0) return 0;
    long double q = (long double)a * m / div + 0.5L;
    return q >= 18446744073709551615.0L ? UINT64_MAX : (uint64_t)q;
#endif
}

static uint64_t nonneg(int64_t v) { return v > 0 ? (uint64_t)v : 0; }

/* A line's subject: one thread (role == NULL) or every thread of a role,
 * starting at index `first`. Values are sums over its threads. */
typedef struct group {
    const st_window *w;
    uint32_t first;
    const char *role;
    uint32_t n;  /* threads in it */
} group;

static bool group_has(const group *g, uint32_t j)
{
    if (!g->role) return j == g->first;
    const char *role = g->w->threads[j].role;
    return role && strcmp(role, g->role) == 0;
}

static uint64_t group_stage_ns(const group *g, uint32_t stage)
{
    uint64_t sum = 0;
    for (uint32_t j = g->first; j < g->w->n_threads; j++)
        if (group_has(g, j)) sum += nonneg(g->w->threads[j].stage_ns[stage]);
    return sum;
}

static uint64_t group_idle_ns(const group *g)
{
    uint64_t sum = 0;
    for (uint32_t j = g->first; j < g->w->n_threads; j++)
        if (group_has(g, j)) sum += nonneg(g->w->threads[j].idle_ns);
    return sum;
}

/* "name P.P% M.Mms": the group's average over its threads; the percent is of
 * the window, both rounded half up from the exact integer sums. */
static void put_entry(text *t, const group *g, const char *name, uint32_t stage,
                      uint64_t sum_ns, uint64_t window_ns, bool first_entry)
{
    uint64_t permille = muldiv_round(sum_ns, 1000, window_ns, g->n);
    uint64_t tenths_ms = muldiv_round(sum_ns, 1, 100000, g->n);
    if (!first_entry) put(t, " | ");
    if (name) put(t, "%s", name);
    else put(t, "stage%" PRIu32, stage);
    put(t, " %" PRIu64 ".%" PRIu64 "%% %" PRIu64 ".%" PRIu64 "ms", permille / 10,
        permille % 10, tenths_ms / 10, tenths_ms % 10);
}

static bool group_has_entries(const group *g)
{
    if (group_idle_ns(g) > 0) return true;
    for (uint32_t s = 0; s < g->w->n_stages; s++)
        if (group_stage_ns(g, s) > 0) return true;
    return false;
}

/* Stages by self time, descending, ties by id; zero ones left out; idle
 * last. Selection without a sort buffer: each pass takes the largest entry
 * that comes after the previous one, so formatting never allocates. */
static void put_entries(text *t, const group *g, uint64_t window_ns)
{
    const st_window *w = g->w;
    bool have_prev = false, first_entry = true;
    uint64_t prev_ns = 0;
    uint32_t prev_stage = 0;
    for (;;) {
        bool found = false;
        uint64_t best_ns = 0;
        uint32_t best_stage = 0;
        for (uint32_t s = 0; s < w->n_stages; s++) {
            uint64_t ns = group_stage_ns(g, s);
            if (ns == 0) continue;
            if (have_prev && !(ns < prev_ns || (ns == prev_ns && s > prev_stage))) continue;
            if (!found || ns > best_ns) {
                found = true;
                best_ns = ns;
                best_stage = s;
            }
        }
        if (!found) break;
        const char *name = w->stage_names ? w->stage_names[best_stage] : NULL;
        put_entry(t, g, name, best_stage, best_ns, window_ns, first_entry);
        first_entry = false;
        have_prev = true;
        prev_ns = best_ns;
        prev_stage = best_stage;
    }
    uint64_t idle = group_idle_ns(g);
    if (idle > 0) put_entry(t, g, "idle", 0, idle, window_ns, first_entry);
}

static size_t thread_label_len(const st_window_thread *th)
{
    if (th->name) return strlen(th->name);
    return (size_t)snprintf(NULL, 0, "thread%" PRIu32, th->thread);
}

static const char *role_label(const st_window_thread *th) { return th->role ? th->role : "-"; }

/* First thread of its role in the window, and how many share the role. */
static uint32_t role_count(const st_window *w, uint32_t i, bool *first)
{
    const char *role = w->threads[i].role;
    *first = role != NULL;
    if (!role) return 1;
    uint32_t n = 0;
    for (uint32_t j = 0; j < w->n_threads; j++) {
        const char *other = w->threads[j].role;
        if (!other || strcmp(other, role) != 0) continue;
        if (j < i) *first = false;
        n++;
    }
    return n;
}

size_t st_window_format(const st_window *w, char *buf, size_t size)
{
    text t = { buf, size, 0 };
    if (size > 0) buf[0] = '\0';
    if (!w) return 0;

    uint64_t window_ns = (uint64_t)span_ns(w->t0_ns, w->t1_ns);
    uint64_t window_ms = muldiv_round(window_ns, 1, 1000000, 1);
    put(&t, "profile steps %" PRIu64 "-%" PRIu64 "  window %" PRIu64 ".%03" PRIu64 " s  tokens %" PRIu64,
        w->step_first, w->step_last, window_ms / 1000, window_ms % 1000, w->tokens);
    if (window_ns > 0) put(&t, "  tokens/s %" PRIu64 "\n", muldiv_round(w->tokens, 1000000000, window_ns, 1));
    else put(&t, "  tokens/s -\n");

    /* Columns: name, role, then the entries, aligned across thread and role
     * lines. */
    size_t name_w = 12, role_w = 8, label_w = 0;
    for (uint32_t i = 0; i < w->n_threads; i++) {
        size_t len = thread_label_len(&w->threads[i]);
        if (len > name_w) name_w = len;
        len = strlen(role_label(&w->threads[i]));
        if (len > role_w) role_w = len;
    }
    label_w = name_w + 1 + role_w;
    for (uint32_t i = 0; i < w->n_threads; i++) {
        bool first;
        uint32_t n = role_count(w, i, &first);
        if (!first || n < 2) continue;
        size_t len = (size_t)snprintf(NULL, 0, "role %s (%" PRIu32 " threads)", w->threads[i].role, n);
        if (len > label_w) label_w = len;
    }
    role_w = label_w - name_w - 1;

    for (uint32_t i = 0; i < w->n_threads; i++) {
        const st_window_thread *th = &w->threads[i];
        group g = { w, i, NULL, 1 };
        put(&t, "  ");
        if (th->name) put(&t, "%s", th->name);
        else put(&t, "thread%" PRIu32, th->thread);
        put_spaces(&t, name_w - thread_label_len(th));
        const char *role = role_label(th);
        put(&t, " %s", role);
        if (group_has_entries(&g)) {
            put_spaces(&t, role_w - strlen(role) + 2);
            put_entries(&t, &g, window_ns);
        }
        if (w->oncpu_ns && w->oncpu_ns[i] >= 0) {
            /* the thread's share of the time between the two schedstat reads */
            uint64_t permille = muldiv_round((uint64_t)w->oncpu_ns[i], 1000, nonneg(w->oncpu_span_ns), 1);
            put(&t, "  oncpu %" PRIu64 ".%" PRIu64 "%%", permille / 10, permille % 10);
        }
        put(&t, "\n");
    }
    for (uint32_t i = 0; i < w->n_threads; i++) {
        bool first;
        uint32_t n = role_count(w, i, &first);
        if (!first || n < 2) continue;
        group g = { w, i, w->threads[i].role, n };
        int len = snprintf(NULL, 0, "role %s (%" PRIu32 " threads)", g.role, n);
        put(&t, "  role %s (%" PRIu32 " threads)", g.role, n);
        if (group_has_entries(&g)) {
            put_spaces(&t, label_w - (size_t)len + 2);
            put_entries(&t, &g, window_ns);
        }
        put(&t, "\n");
    }
    return t.len;
}
