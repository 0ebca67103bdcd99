/* test_intervals.c: unit tests of the interval aggregator (tracer/intervals.c)
 * and of st_window_format, the text of the "profile" lines.
 *
 * Each test feeds a scripted, already merged event stream and checks every
 * emitted window against values computed by hand in the comments. The
 * callback copies each window (its pointers live only during the call),
 * checks that each thread's time adds up exactly to the window, and formats
 * it twice to check that the text is byte-identical.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "st_intervals.h"

#define MS 1000000LL /* scripted times are in ms unless said otherwise */

#define CAP_WINDOWS 16
#define CAP_THREADS 8
#define CAP_STAGES 64
#define CAP_TEXT 4096

typedef struct cap_thread {
    uint32_t thread;
    bool has_name, has_role;
    char name[32], role[32];
    int64_t idle_ns;
    int64_t stage_ns[CAP_STAGES];
    uint64_t stage_count[CAP_STAGES];
} cap_thread;

typedef struct cap_window {
    uint64_t index, step_first, step_last, tokens;
    int64_t t0_ns, t1_ns;
    uint32_t n_stages, n_threads;
    bool has_stage_name[CAP_STAGES];
    char stage_name[CAP_STAGES][32];
    uint8_t stage_kind[CAP_STAGES];
    cap_thread threads[CAP_THREADS];
    char text[CAP_TEXT];
} cap_window;

typedef struct capture {
    int n;
    cap_window w[CAP_WINDOWS];
} capture;

static void on_window(const st_window *w, void *arg)
{
    capture *cap = arg;
    assert_true(cap->n < CAP_WINDOWS);
    assert_true(w->n_stages <= CAP_STAGES);
    assert_true(w->n_threads <= CAP_THREADS);
    cap_window *c = &cap->w[cap->n++];
    c->index = w->index;
    c->step_first = w->step_first;
    c->step_last = w->step_last;
    c->tokens = w->tokens;
    c->t0_ns = w->t0_ns;
    c->t1_ns = w->t1_ns;
    c->n_stages = w->n_stages;
    c->n_threads = w->n_threads;
    for (uint32_t s = 0; s < w->n_stages; s++) {
        c->has_stage_name[s] = w->stage_names[s] != NULL;
        if (w->stage_names[s]) snprintf(c->stage_name[s], sizeof c->stage_name[s], "%s", w->stage_names[s]);
        c->stage_kind[s] = w->stage_kinds[s];
    }
    for (uint32_t i = 0; i < w->n_threads; i++) {
        const st_window_thread *th = &w->threads[i];
        cap_thread *ct = &c->threads[i];
        if (i > 0) assert_true(w->threads[i - 1].thread < th->thread); /* sorted by id */
        ct->thread = th->thread;
        ct->has_name = th->name != NULL;
        ct->has_role = th->role != NULL;
        if (th->name) snprintf(ct->name, sizeof ct->name, "%s", th->name);
        if (th->role) snprintf(ct->role, sizeof ct->role, "%s", th->role);
        ct->idle_ns = th->idle_ns;
        /* Every nanosecond of the window is charged exactly once. */
        int64_t total = th->idle_ns;
        for (uint32_t s = 0; s < w->n_stages; s++) {
            ct->stage_ns[s] = th->stage_ns[s];
            ct->stage_count[s] = th->stage_count[s];
            total += th->stage_ns[s];
        }
        assert_int_equal(total, w->t1_ns - w->t0_ns);
    }
    size_t len = st_window_format(w, c->text, sizeof c->text);
    assert_true(len < sizeof c->text);
    char again[CAP_TEXT];
    assert_int_equal(st_window_format(w, again, sizeof again), len);
    assert_string_equal(again, c->text);
}

static const cap_thread *find_thread(const cap_window *w, uint32_t thread)
{
    for (uint32_t i = 0; i < w->n_threads; i++)
        if (w->threads[i].thread == thread) return &w->threads[i];
    return NULL;
}

static void check_window(const cap_window *w, uint64_t index, uint64_t step_first, uint64_t step_last,
                         int64_t t0_ns, int64_t t1_ns, uint64_t tokens, uint32_t n_threads)
{
    assert_int_equal(w->index, index);
    assert_int_equal(w->step_first, step_first);
    assert_int_equal(w->step_last, step_last);
    assert_int_equal(w->t0_ns, t0_ns);
    assert_int_equal(w->t1_ns, t1_ns);
    assert_int_equal(w->tokens, tokens);
    assert_int_equal(w->n_threads, n_threads);
}

/* Checks one thread's idle time and, for every stage, its self time and
 * count: ns[] and count[] list all n_stages entries. */
static void check_thread(const cap_window *w, uint32_t thread, int64_t idle_ns, const int64_t *ns,
                         const uint64_t *count)
{
    const cap_thread *t = find_thread(w, thread);
    assert_non_null(t);
    assert_int_equal(t->idle_ns, idle_ns);
    for (uint32_t s = 0; s < w->n_stages; s++) {
        assert_int_equal(t->stage_ns[s], ns[s]);
        assert_int_equal(t->stage_count[s], count[s]);
    }
}

/* Rebuilds an st_window from a captured one, to format it after the call. */
typedef struct rebuilt {
    st_window w;
    const char *names[CAP_STAGES];
    st_window_thread threads[CAP_THREADS];
} rebuilt;

static void rebuild(rebuilt *r, cap_window *c)
{
    memset(r, 0, sizeof *r);
    r->w.index = c->index;
    r->w.step_first = c->step_first;
    r->w.step_last = c->step_last;
    r->w.t0_ns = c->t0_ns;
    r->w.t1_ns = c->t1_ns;
    r->w.tokens = c->tokens;
    r->w.n_stages = c->n_stages;
    for (uint32_t s = 0; s < c->n_stages; s++) r->names[s] = c->has_stage_name[s] ? c->stage_name[s] : NULL;
    r->w.stage_names = r->names;
    r->w.stage_kinds = c->stage_kind;
    r->w.n_threads = c->n_threads;
    for (uint32_t i = 0; i < c->n_threads; i++) {
        cap_thread *t = &c->threads[i];
        r->threads[i] = (st_window_thread){
            .thread = t->thread, .name = t->has_name ? t->name : NULL,
            .role = t->has_role ? t->role : NULL, .idle_ns = t->idle_ns,
            .stage_ns = t->stage_ns, .stage_count = t->stage_count,
        };
    }
    r->w.threads = r->threads;
}

/* ---- the main scripted trace ---------------------------------------------------
 *
 * every_steps = 2. Stages (declared out of order, ids sparse; 3 and 5 never
 * declared, so n_stages = 7):
 *   0 forward, 1 postprocess, 2 queue_put, 4 train, 6 queue_wait
 * Threads: 1 target0/target, 2 target1/target, 5 drafter0/drafter.
 *
 * Marks (ms): step 0 @100, 1 @200 (10 tok), 2 @300 (20), 3 @400 (40),
 * 4 @500 (50), 5 @600 (60), 6 @700 (70).
 * Windows: W0 [100,300) steps 1-2 tokens 30; W1 [300,500) steps 3-4
 * tokens 90; W2 [500,700) steps 5-6 tokens 130. A range begun @750 stays in
 * the unfinished window, which is never emitted.
 *
 * thread 1:  forward [0 ............................ 250)  (begun before step 0: counted nowhere)
 *               postprocess [150,180) nested
 *            forward [260 ......................... 350)
 *               queue_put [290 ......... 320) crosses the boundary @300
 *            postprocess [650,650)  zero length
 * thread 2:  forward [120 ........................................ 620)  open across W0, W1, W2
 * thread 5:  queue_wait [300,340)  begins exactly on the boundary: W1
 *            train [340,460), train [480,500)  ends exactly on the boundary
 */
enum { FORWARD = 0, POSTPROCESS = 1, QUEUE_PUT = 2, TRAIN = 4, QUEUE_WAIT = 6 };

static void run_main_trace(capture *cap)
{
    st_agg *agg = st_agg_create(2, on_window, cap);
    assert_non_null(agg);
    assert_int_equal(st_agg_stage(agg, TRAIN, "train", ST_WORK), ST_OK);
    assert_int_equal(st_agg_stage(agg, FORWARD, "forward", ST_WORK), ST_OK);
    assert_int_equal(st_agg_stage(agg, QUEUE_PUT, "queue_put", ST_WAIT_OUTPUT), ST_OK);
    assert_int_equal(st_agg_stage(agg, QUEUE_WAIT, "queue_wait", ST_WAIT_INPUT), ST_OK);
    assert_int_equal(st_agg_stage(agg, POSTPROCESS, "postprocess", ST_WORK), ST_OK);
    assert_int_equal(st_agg_thread(agg, 5, "drafter0", "drafter"), ST_OK);
    assert_int_equal(st_agg_thread(agg, 1, "target0", "target"), ST_OK);
    assert_int_equal(st_agg_thread(agg, 2, "target1", "target"), ST_OK);

    st_agg_begin(agg, 1, FORWARD, 0 * MS);
    st_agg_step(agg, 0, 100 * MS, 7); /* opens W0; its own tokens belong to no window */
    st_agg_begin(agg, 2, FORWARD, 120 * MS);
    st_agg_begin(agg, 1, POSTPROCESS, 150 * MS);
    st_agg_end(agg, 1, 180 * MS);
    st_agg_step(agg, 1, 200 * MS, 10);
    st_agg_end(agg, 1, 250 * MS);
    st_agg_begin(agg, 1, FORWARD, 260 * MS);
    st_agg_begin(agg, 1, QUEUE_PUT, 290 * MS);
    st_agg_step(agg, 2, 300 * MS, 20); /* emits W0 */
    st_agg_begin(agg, 5, QUEUE_WAIT, 300 * MS);
    st_agg_end(agg, 1, 320 * MS);
    st_agg_end(agg, 5, 340 * MS);
    st_agg_begin(agg, 5, TRAIN, 340 * MS);
    st_agg_end(agg, 1, 350 * MS);
    st_agg_step(agg, 3, 400 * MS, 40);
    st_agg_end(agg, 5, 460 * MS);
    st_agg_begin(agg, 5, TRAIN, 480 * MS);
    st_agg_step(agg, 4, 500 * MS, 50); /* emits W1 */
    st_agg_end(agg, 5, 500 * MS);
    st_agg_step(agg, 5, 600 * MS, 60);
    st_agg_end(agg, 2, 620 * MS);
    st_agg_begin(agg, 1, POSTPROCESS, 650 * MS);
    st_agg_end(agg, 1, 650 * MS);
    st_agg_step(agg, 6, 700 * MS, 70); /* emits W2 */
    st_agg_begin(agg, 2, QUEUE_PUT, 750 * MS);
    st_agg_step(agg, 7, 800 * MS, 80);
    st_agg_free(agg);
}

static void test_main_trace_windows(void **state)
{
    capture *cap = calloc(1, sizeof *cap);
    assert_non_null(cap);
    run_main_trace(cap);
    assert_int_equal(cap->n, 3);

    /* Names and kinds by stage id; 3 and 5 never declared. */
    const cap_window *w0 = &cap->w[0];
    assert_int_equal(w0->n_stages, 7);
    assert_string_equal(w0->stage_name[FORWARD], "forward");
    assert_string_equal(w0->stage_name[QUEUE_WAIT], "queue_wait");
    assert_false(w0->has_stage_name[3]);
    assert_false(w0->has_stage_name[5]);
    assert_int_equal(w0->stage_kind[QUEUE_PUT], ST_WAIT_OUTPUT);
    assert_int_equal(w0->stage_kind[QUEUE_WAIT], ST_WAIT_INPUT);

    /* W0 [100,300) = 200 ms, steps 1-2, tokens 10+20 = 30; thread 5 has no
     * event yet: absent.
     * thread 1: forward  100-150 (50) + 180-250 (70) + 260-290 (30) = 150,
     *                    count 1 (the one begun @260; @0 was before step 0)
     *           postprocess 150-180 = 30, count 1
     *           queue_put   290-300 = 10 (split at the boundary), count 1
     *           idle        250-260 = 10;  150+30+10+10 = 200
     * thread 2: idle 100-120 = 20 (before its first event), forward
     *           120-300 = 180, count 1 */
    check_window(w0, 0, 1, 2, 100 * MS, 300 * MS, 30, 2);
    assert_int_equal(w0->threads[0].thread, 1);
    assert_string_equal(w0->threads[0].name, "target0");
    assert_string_equal(w0->threads[0].role, "target");
    check_thread(w0, 1, 10 * MS, (int64_t[]){ 150 * MS, 30 * MS, 10 * MS, 0, 0, 0, 0 },
                 (uint64_t[]){ 1, 1, 1, 0, 0, 0, 0 });
    check_thread(w0, 2, 20 * MS, (int64_t[]){ 180 * MS, 0, 0, 0, 0, 0, 0 },
                 (uint64_t[]){ 1, 0, 0, 0, 0, 0, 0 });
    assert_null(find_thread(w0, 5));

    /* W1 [300,500) = 200 ms, steps 3-4, tokens 40+50 = 90
     * thread 1: queue_put 300-320 = 20, forward 320-350 = 30, idle
     *           350-500 = 150; nothing begun here: counts 0
     * thread 2: forward 300-500 = 200, count 0
     * thread 5: queue_wait 300-340 = 40, count 1 (begun on the boundary,
     *           after the mark); train 340-460 (120) + 480-500 (20) = 140,
     *           count 2; idle 460-480 = 20; 40+140+20 = 200 */
    const cap_window *w1 = &cap->w[1];
    check_window(w1, 1, 3, 4, 300 * MS, 500 * MS, 90, 3);
    check_thread(w1, 1, 150 * MS, (int64_t[]){ 30 * MS, 0, 20 * MS, 0, 0, 0, 0 },
                 (uint64_t[]){ 0, 0, 0, 0, 0, 0, 0 });
    check_thread(w1, 2, 0, (int64_t[]){ 200 * MS, 0, 0, 0, 0, 0, 0 },
                 (uint64_t[]){ 0, 0, 0, 0, 0, 0, 0 });
    check_thread(w1, 5, 20 * MS, (int64_t[]){ 0, 0, 0, 0, 140 * MS, 0, 40 * MS },
                 (uint64_t[]){ 0, 0, 0, 0, 2, 0, 1 });

    /* W2 [500,700), steps 5-6, tokens 60+70 = 130
     * thread 1: only a zero-length postprocess @650: count 1, idle 200;
     *           present because of the count
     * thread 2: forward 500-620 = 120, idle 620-700 = 80
     * thread 5: its train ended @500, charged 0 here: only idle, absent */
    const cap_window *w2 = &cap->w[2];
    check_window(w2, 2, 5, 6, 500 * MS, 700 * MS, 130, 2);
    check_thread(w2, 1, 200 * MS, (int64_t[]){ 0, 0, 0, 0, 0, 0, 0 },
                 (uint64_t[]){ 0, 1, 0, 0, 0, 0, 0 });
    check_thread(w2, 2, 80 * MS, (int64_t[]){ 120 * MS, 0, 0, 0, 0, 0, 0 },
                 (uint64_t[]){ 0, 0, 0, 0, 0, 0, 0 });
    assert_null(find_thread(w2, 5));
    free(cap);
}

/* The exact text of W1 of the main trace.
 * Header: 200 ms -> "0.200 s"; 90 tokens / 0.2 s = 450 tokens/s.
 * Columns: names padded to 12, roles to 8; the role label
 * "role target (2 threads)" is 23 wide > 12+1+8, so the role column widens
 * to 23-12-1 = 10 and entries start at column 2+23+2 = 27 on every line.
 * thread 1: forward 30/200 = 15.0%, queue_put 20/200 = 10.0%, idle 75.0%
 * thread 2: forward 200/200 = 100.0%
 * thread 5: train 140 (70.0%), queue_wait 40 (20.0%), idle 20 (10.0%)
 * role target, averages of threads 1 and 2: forward (30+200)/2 = 115 ms =
 * 57.5%, queue_put (20+0)/2 = 10 ms = 5.0%, idle (150+0)/2 = 75 ms = 37.5%.
 * drafter has one thread: no role line. */
static const char W1_TEXT[] =
    "profile steps 3-4  window 0.200 s  tokens 90  tokens/s 450\n"
    "  target0      target      forward 15.0% 30.0ms | queue_put 10.0% 20.0ms | idle 75.0% 150.0ms\n"
    "  target1      target      forward 100.0% 200.0ms\n"
    "  drafter0     drafter     train 70.0% 140.0ms | queue_wait 20.0% 40.0ms | idle 10.0% 20.0ms\n"
    "  role target (2 threads)  forward 57.5% 115.0ms | queue_put 5.0% 10.0ms | idle 37.5% 75.0ms\n";

static void test_main_trace_format(void **state)
{
    capture *cap = calloc(1, sizeof *cap);
    assert_non_null(cap);
    run_main_trace(cap);
    assert_int_equal(cap->n, 3);
    assert_string_equal(cap->w[1].text, W1_TEXT);

    /* W0: thread 1 forward 150 (75.0%), postprocess 30 (15.0%), queue_put
     * 10 (5.0%), idle 10 (5.0%); thread 2 forward 180 (90.0%), idle 20
     * (10.0%); role target: forward 165 (82.5%), postprocess 15 (7.5%),
     * queue_put 5 (2.5%), idle 15 (7.5%). 30 tokens / 0.2 s = 150/s. */
    assert_string_equal(cap->w[0].text,
        "profile steps 1-2  window 0.200 s  tokens 30  tokens/s 150\n"
        "  target0      target      forward 75.0% 150.0ms | postprocess 15.0% 30.0ms | queue_put 5.0% 10.0ms | idle 5.0% 10.0ms\n"
        "  target1      target      forward 90.0% 180.0ms | idle 10.0% 20.0ms\n"
        "  role target (2 threads)  forward 82.5% 165.0ms | postprocess 7.5% 15.0ms | queue_put 2.5% 5.0ms | idle 7.5% 15.0ms\n");

    /* The same events give the same bytes on a second run (online and
     * offline compare them). */
    capture *again = calloc(1, sizeof *again);
    assert_non_null(again);
    run_main_trace(again);
    for (int i = 0; i < 3; i++) assert_string_equal(again->w[i].text, cap->w[i].text);
    free(again);
    free(cap);
}

static void test_format_truncation(void **state)
{
    capture *cap = calloc(1, sizeof *cap);
    rebuilt *r = calloc(1, sizeof *r);
    assert_non_null(cap);
    assert_non_null(r);
    run_main_trace(cap);
    rebuild(r, &cap->w[1]);
    size_t full = strlen(W1_TEXT);

    /* Measuring only. */
    assert_int_equal(st_window_format(&r->w, NULL, 0), full);

    /* Every size returns the full length and writes size-1 bytes + NUL,
     * never past size (the rest of the buffer keeps its 'X'). */
    const size_t sizes[] = { 1, 2, 10, 60, 61, full - 1, full, full + 1 };
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t size = sizes[k];
        char buf[CAP_TEXT];
        memset(buf, 'X', sizeof buf);
        assert_int_equal(st_window_format(&r->w, buf, size), full);
        size_t kept = size - 1 < full ? size - 1 : full;
        assert_int_equal(strlen(buf), kept);
        assert_memory_equal(buf, W1_TEXT, kept);
        for (size_t i = kept + 1; i < sizeof buf; i++) assert_int_equal(buf[i], 'X');
    }
    /* Size 0 with a buffer: nothing written at all. */
    char one = 'X';
    assert_int_equal(st_window_format(&r->w, &one, 0), full);
    assert_int_equal(one, 'X');
    free(r);
    free(cap);
}

/* ---- every_steps = 1 ------------------------------------------------------------
 * Thread 3 "main"/"main", stage 0 "step". Marks (ns): 0 @0, 1 @10 (4 tok),
 * 2 @30 (4), 3 @60 (8). Ranges: [5,45) crosses two boundaries, [50,55).
 * W0 [0,10):  idle 0-5 = 5, step 5-10 = 5, count 1; tokens 4
 * W1 [10,30): step 20 (the middle of the range), count 0; tokens 4
 * W2 [30,60): step 30-45 (15) + 50-55 (5) = 20, count 1, idle 45-50 +
 *             55-60 = 10; tokens 8 */
static void test_every_step(void **state)
{
    capture *cap = calloc(1, sizeof *cap);
    assert_non_null(cap);
    st_agg *agg = st_agg_create(1, on_window, cap);
    assert_non_null(agg);
    assert_int_equal(st_agg_stage(agg, 0, "step", ST_WORK), ST_OK);
    assert_int_equal(st_agg_thread(agg, 3, "main", "main"), ST_OK);
    st_agg_step(agg, 0, 0, 0);
    st_agg_begin(agg, 3, 0, 5);
    st_agg_step(agg, 1, 10, 4);
    st_agg_step(agg, 2, 30, 4);
    st_agg_end(agg, 3, 45);
    st_agg_begin(agg, 3, 0, 50);
    st_agg_end(agg, 3, 55);
    st_agg_step(agg, 3, 60, 8);
    st_agg_free(agg);

    assert_int_equal(cap->n, 3);
    check_window(&cap->w[0], 0, 1, 1, 0, 10, 4, 1);
    check_thread(&cap->w[0], 3, 5, (int64_t[]){ 5 }, (uint64_t[]){ 1 });
    check_window(&cap->w[1], 1, 2, 2, 10, 30, 4, 1);
    check_thread(&cap->w[1], 3, 0, (int64_t[]){ 20 }, (uint64_t[]){ 0 });
    check_window(&cap->w[2], 2, 3, 3, 30, 60, 8, 1);
    check_thread(&cap->w[2], 3, 10, (int64_t[]){ 20 }, (uint64_t[]){ 1 });
    free(cap);
}

/* ---- every_steps = 3: a late first boundary, skipped and repeated marks ----------
 * Thread 1, stages 0 "a", 1 "b". Times in ns.
 *   10 begin a            before any boundary: never counted
 *   20 step 4 (100 tok)   before the first boundary: ignored
 *   30 step 5 (100 tok)   ignored
 *   40 step 6 (1 tok)     first boundary, 6 = 2N: the first window is index 2
 *   50 step 7 (2)
 *   55 end a
 *   60 step 8 (4)
 *   65 begin b
 *   70 step 9 (8)         W index 2, steps 7-9, [40,70), tokens 2+4+8 = 14
 *                         a 40-55 = 15 (count 0), idle 55-65 = 10,
 *                         b 65-70 = 5 (count 1)
 *   80 step 10 (16), 90 step 11 (32)
 *   95 end b
 *      (step 12 never marked: its boundary is skipped)
 *  100 step 13 (64), 110 step 14 (128)
 *  120 step 15 (256)      W index 15/3-1 = 4, steps 10-15, [70,120),
 *                         tokens 16+32+64+128+256 = 496;
 *                         b 70-95 = 25, idle 95-120 = 25, counts 0
 *  120 step 15 (1000)     repeated: ignored, tokens too
 *  130 step 16 (1), 140 step 17 (2)
 *  150 step 18 (4)        W index 5, steps 16-18, [120,150), tokens 7;
 *                         thread 1 only idle: no threads */
static void test_every_three_steps_skips(void **state)
{
    capture *cap = calloc(1, sizeof *cap);
    assert_non_null(cap);
    st_agg *agg = st_agg_create(3, on_window, cap);
    assert_non_null(agg);
    assert_int_equal(st_agg_stage(agg, 0, "a", ST_WORK), ST_OK);
    assert_int_equal(st_agg_stage(agg, 1, "b", ST_SYNC), ST_OK);
    assert_int_equal(st_agg_thread(agg, 1, "worker", "work"), ST_OK);
    st_agg_begin(agg, 1, 0, 10);
    st_agg_step(agg, 4, 20, 100);
    st_agg_step(agg, 5, 30, 100);
    st_agg_step(agg, 6, 40, 1);
    st_agg_step(agg, 7, 50, 2);
    st_agg_end(agg, 1, 55);
    st_agg_step(agg, 8, 60, 4);
    st_agg_begin(agg, 1, 1, 65);
    st_agg_step(agg, 9, 70, 8);
    st_agg_step(agg, 10, 80, 16);
    st_agg_step(agg, 11, 90, 32);
    st_agg_end(agg, 1, 95);
    st_agg_step(agg, 13, 100, 64);
    st_agg_step(agg, 14, 110, 128);
    st_agg_step(agg, 15, 120, 256);
    st_agg_step(agg, 15, 120, 1000);
    st_agg_step(agg, 16, 130, 1);
    st_agg_step(agg, 17, 140, 2);
    st_agg_step(agg, 18, 150, 4);
    st_agg_free(agg);

    assert_int_equal(cap->n, 3);
    check_window(&cap->w[0], 2, 7, 9, 40, 70, 14, 1);
    check_thread(&cap->w[0], 1, 10, (int64_t[]){ 15, 5 }, (uint64_t[]){ 0, 1 });
    check_window(&cap->w[1], 4, 10, 15, 70, 120, 496, 1);
    check_thread(&cap->w[1], 1, 25, (int64_t[]){ 0, 25 }, (uint64_t[]){ 0, 0 });
    check_window(&cap->w[2], 5, 16, 18, 120, 150, 7, 0);
    /* 7 tokens / 30 ns = 233333333.3/s; 30 ns is 0.000 s. No thread lines. */
    assert_string_equal(cap->w[2].text,
                        "profile steps 16-18  window 0.000 s  tokens 7  tokens/s 233333333\n");
    free(cap);
}

/* ---- nesting deeper than the 256 kept levels ---------------------------------------
 * every_steps = 1; stages 0 "even", 1 "odd"; level i (0-based) begins stage
 * i % 2, all at 0 ns, 300 levels: 150 begins of each (all counted). Level 255
 * (the deepest kept) is "odd".
 *   100: 44 ends pop the levels 299..256 -> 0-100 goes to level 255: odd 100
 *   110: one end pops level 255          -> odd 100-110 = 10
 *   130: step 1 -> W0 [0,130): odd 110, even (level 254) 110-130 = 20
 *   140: 300 ends: 255 pop, 45 find nothing open and are ignored
 *        -> even 130-140 = 10
 *   150: step 2 -> W1 [130,150): even 10, idle 10, no counts */
static void test_deep_nesting(void **state)
{
    capture *cap = calloc(1, sizeof *cap);
    assert_non_null(cap);
    st_agg *agg = st_agg_create(1, on_window, cap);
    assert_non_null(agg);
    assert_int_equal(st_agg_stage(agg, 0, "even", ST_WORK), ST_OK);
    assert_int_equal(st_agg_stage(agg, 1, "odd", ST_WORK), ST_OK);
    assert_int_equal(st_agg_thread(agg, 1, "deep", "deep"), ST_OK);
    st_agg_step(agg, 0, 0, 0);
    for (uint32_t i = 0; i < 300; i++) st_agg_begin(agg, 1, i % 2, 0);
    for (int i = 0; i < 44; i++) st_agg_end(agg, 1, 100);
    st_agg_end(agg, 1, 110);
    st_agg_step(agg, 1, 130, 0);
    for (int i = 0; i < 300; i++) st_agg_end(agg, 1, 140);
    st_agg_step(agg, 2, 150, 0);
    st_agg_free(agg);

    assert_int_equal(cap->n, 2);
    check_window(&cap->w[0], 0, 1, 1, 0, 130, 0, 1);
    check_thread(&cap->w[0], 1, 0, (int64_t[]){ 20, 110 }, (uint64_t[]){ 150, 150 });
    check_window(&cap->w[1], 1, 2, 2, 130, 150, 0, 1);
    check_thread(&cap->w[1], 1, 10, (int64_t[]){ 10, 0 }, (uint64_t[]){ 0, 0 });
    free(cap);
}

/* ---- sparse ids, late and missing declarations, copied names ----------------------
 * every_steps = 1, times in ns from 1000 (so that a thread first seen
 * mid-window is charged from the window's start, not from 0). Thread 1000 is
 * declared with names from a buffer that is then overwritten; thread 7 and
 * stage 9 are never declared; stage 40 is declared in the middle of the
 * window, before its first use.
 *  1000 step 0; 1000 begins "a" (stage 2)
 *  1010 thread 7 (first seen) begins stage 9; 1020 it ends
 *  1030 1000 begins "late" (40); 1035 ends; 1050 ends "a"
 *  1100 step 1 -> W0 [1000,1100), n_stages 41, threads 7 then 1000:
 *      7:    idle 1000-1010 + 1020-1100 = 90, stage 9 = 10, count 1
 *      1000: a 1000-1030 + 1035-1050 = 45, late 1030-1035 = 5,
 *            counts 1 and 1, idle 1050-1100 = 50 */
static void test_sparse_ids_and_names(void **state)
{
    capture *cap = calloc(1, sizeof *cap);
    assert_non_null(cap);
    st_agg *agg = st_agg_create(1, on_window, cap);
    assert_non_null(agg);
    char name[16] = "gpu-thread", role[16] = "drafter", stage[16] = "a";
    assert_int_equal(st_agg_thread(agg, 1000, name, role), ST_OK);
    assert_int_equal(st_agg_stage(agg, 2, stage, ST_WORK), ST_OK);
    strcpy(name, "overwritten");
    strcpy(role, "overwritten");
    strcpy(stage, "overwritten");
    st_agg_step(agg, 0, 1000, 0);
    st_agg_begin(agg, 1000, 2, 1000);
    st_agg_begin(agg, 7, 9, 1010);
    st_agg_end(agg, 7, 1020);
    assert_int_equal(st_agg_stage(agg, 40, "late", ST_COMM), ST_OK);
    st_agg_begin(agg, 1000, 40, 1030);
    st_agg_end(agg, 1000, 1035);
    st_agg_end(agg, 1000, 1050);
    st_agg_step(agg, 1, 1100, 0);
    st_agg_free(agg);

    assert_int_equal(cap->n, 1);
    cap_window *w = &cap->w[0];
    check_window(w, 0, 1, 1, 1000, 1100, 0, 2);
    assert_int_equal(w->n_stages, 41);
    assert_int_equal(w->threads[0].thread, 7);
    assert_int_equal(w->threads[1].thread, 1000);
    assert_false(w->threads[0].has_name);
    assert_false(w->threads[0].has_role);
    assert_string_equal(w->threads[1].name, "gpu-thread");
    assert_string_equal(w->threads[1].role, "drafter");
    assert_string_equal(w->stage_name[2], "a");
    assert_string_equal(w->stage_name[40], "late");
    assert_int_equal(w->stage_kind[40], ST_COMM);
    assert_false(w->has_stage_name[0]);
    assert_false(w->has_stage_name[9]);
    const cap_thread *t7 = find_thread(w, 7), *t1000 = find_thread(w, 1000);
    assert_int_equal(t7->idle_ns, 90);
    assert_int_equal(t7->stage_ns[9], 10);
    assert_int_equal(t7->stage_count[9], 1);
    assert_int_equal(t1000->idle_ns, 50);
    assert_int_equal(t1000->stage_ns[2], 45);
    assert_int_equal(t1000->stage_ns[40], 5);
    assert_int_equal(t1000->stage_count[2], 1);
    assert_int_equal(t1000->stage_count[40], 1);
    for (uint32_t s = 0; s < w->n_stages; s++) {
        if (s != 9) assert_int_equal(t7->stage_ns[s] + (int64_t)t7->stage_count[s], 0);
        if (s != 2 && s != 40) assert_int_equal(t1000->stage_ns[s] + (int64_t)t1000->stage_count[s], 0);
    }
    /* Unnamed threads, roles and stages print as thread7, "-" and stage9.
     * 100 ns: 10 ns is 10.0% and rounds to 0.0ms; 0 tokens -> 0/s. */
    assert_string_equal(w->text,
        "profile steps 1-1  window 0.000 s  tokens 0  tokens/s 0\n"
        "  thread7      -         stage9 10.0% 0.0ms | idle 90.0% 0.0ms\n"
        "  gpu-thread   drafter   a 45.0% 0.0ms | late 5.0% 0.0ms | idle 50.0% 0.0ms\n");
    free(cap);
}

/* ---- formatting of hand-built windows -----------------------------------------------
 * Window [5 ms, 8 ms) = 3 ms, 1000 tokens -> 333333.3 -> 333333 tokens/s.
 * Stages 0 "b", 1 "a", 2 "c", 3 unnamed.
 * thread 3 "t"/"r": a 1.0 ms and c 1.0 ms (a tie: lower id first), b 0.5,
 *   stage 3 zero time (count 2: left out), idle 0.5.
 *   1/3 = 33.3%, 0.5/3 = 16.666 -> 16.7%.
 * thread 4 "u"/"r": stage3 3.0 ms = 100.0%.
 * role r, averages: stage3 1.5 ms (50.0%), a 0.5 (16.7%), c 0.5 (16.7%),
 *   b 0.25 ms (8.3%, and 2.5 tenths of a ms round half up to 0.3ms),
 *   idle 0.25 (8.3% 0.3ms).
 * Label "role r (2 threads)" is 18 wide < 12+1+8 = 21: columns stay. */
static void test_format_order_and_rounding(void **state)
{
    const char *names[4] = { "b", "a", "c", NULL };
    const uint8_t kinds[4] = { ST_WORK, ST_WORK, ST_COPY, ST_SYNC };
    int64_t ns3[4] = { 500000, 1000000, 1000000, 0 }, ns4[4] = { 0, 0, 0, 3000000 };
    uint64_t count3[4] = { 1, 1, 1, 2 }, count4[4] = { 0, 0, 0, 1 };
    st_window_thread threads[2] = {
        { .thread = 3, .name = "t", .role = "r", .idle_ns = 500000, .stage_ns = ns3, .stage_count = count3 },
        { .thread = 4, .name = "u", .role = "r", .idle_ns = 0, .stage_ns = ns4, .stage_count = count4 },
    };
    st_window w = {
        .index = 0, .step_first = 1, .step_last = 1, .t0_ns = 5 * MS, .t1_ns = 8 * MS,
        .tokens = 1000, .n_stages = 4, .stage_names = names, .stage_kinds = kinds,
        .n_threads = 2, .threads = threads,
    };
    static const char expected[] =
        "profile steps 1-1  window 0.003 s  tokens 1000  tokens/s 333333\n"
        "  t            r         a 33.3% 1.0ms | c 33.3% 1.0ms | b 16.7% 0.5ms | idle 16.7% 0.5ms\n"
        "  u            r         stage3 100.0% 3.0ms\n"
        "  role r (2 threads)     stage3 50.0% 1.5ms | a 16.7% 0.5ms | c 16.7% 0.5ms | b 8.3% 0.3ms | idle 8.3% 0.3ms\n";
    char buf[1024];
    assert_int_equal(st_window_format(&w, buf, sizeof buf), strlen(expected));
    assert_string_equal(buf, expected);

    /* Long names widen the columns of every line alike. */
    threads[1].name = "a-rather-long-name";
    threads[1].role = "longrole";
    static const char widened[] =
        "profile steps 1-1  window 0.003 s  tokens 1000  tokens/s 333333\n"
        "  t                  r         a 33.3% 1.0ms | c 33.3% 1.0ms | b 16.7% 0.5ms | idle 16.7% 0.5ms\n"
        "  a-rather-long-name longrole  stage3 100.0% 3.0ms\n";
    assert_int_equal(st_window_format(&w, buf, sizeof buf), strlen(widened));
    assert_string_equal(buf, widened);
}

/* t1 == t0: no division by zero; a thread present only by a count prints no
 * entries and no trailing blanks; tokens/s is "-". */
static void test_format_empty_window(void **state)
{
    const char *names[1] = { "s" };
    const uint8_t kinds[1] = { ST_WORK };
    int64_t ns[1] = { 0 };
    uint64_t count[1] = { 1 };
    st_window_thread th = { .thread = 9, .name = "main", .role = "main", .stage_ns = ns, .stage_count = count };
    st_window w = {
        .step_first = 1, .step_last = 1, .t0_ns = 42, .t1_ns = 42, .tokens = 5, .n_stages = 1,
        .stage_names = names, .stage_kinds = kinds, .n_threads = 1, .threads = &th,
    };
    char buf[256];
    static const char expected[] =
        "profile steps 1-1  window 0.000 s  tokens 5  tokens/s -\n"
        "  main         main\n";
    assert_int_equal(st_window_format(&w, buf, sizeof buf), strlen(expected));
    assert_string_equal(buf, expected);
    assert_int_equal(st_window_format(NULL, buf, sizeof buf), 0);
    assert_string_equal(buf, "");
}

/* Argument checks and the harmless NULLs. */
static void test_api_edges(void **state)
{
    capture *cap = calloc(1, sizeof *cap);
    assert_non_null(cap);
    st_agg_free(NULL);
    assert_null(st_agg_create(0, on_window, cap));
    assert_null(st_agg_create(1, NULL, cap));
    st_agg *agg = st_agg_create(4, on_window, cap);
    assert_non_null(agg);
    assert_int_equal(st_agg_stage(agg, ST_MAX_STAGES, "x", ST_WORK), ST_ELIMIT);
    assert_int_equal(st_agg_stage(agg, 1, "x", (st_kind)ST_KIND_COUNT), ST_EINVAL);
    assert_int_equal(st_agg_stage(NULL, 1, "x", ST_WORK), ST_EINVAL);
    assert_int_equal(st_agg_thread(NULL, 1, "x", "y"), ST_EINVAL);
    /* Redeclaring replaces the names. */
    assert_int_equal(st_agg_thread(agg, 1, "old", "old"), ST_OK);
    assert_int_equal(st_agg_thread(agg, 1, "new", "role"), ST_OK);
    assert_int_equal(st_agg_stage(agg, 0, "old", ST_WORK), ST_OK);
    assert_int_equal(st_agg_stage(agg, 0, "new", ST_SYNC), ST_OK);
    /* An end on an unknown thread, and events before any boundary, do
     * nothing. Without a second boundary no window is emitted. */
    st_agg_end(agg, 99, 1);
    st_agg_begin(agg, 1, 0, 2);
    st_agg_step(agg, 1, 3, 10);
    st_agg_step(agg, 4, 10, 10); /* first boundary */
    st_agg_end(agg, 1, 20);
    assert_int_equal(cap->n, 0);
    st_agg_step(agg, 8, 40, 1); /* W index 1 [10,40): 0 begun in it */
    assert_int_equal(cap->n, 1);
    check_window(&cap->w[0], 1, 5, 8, 10, 40, 1, 1);
    check_thread(&cap->w[0], 1, 20, (int64_t[]){ 10 }, (uint64_t[]){ 0 });
    assert_string_equal(cap->w[0].threads[0].name, "new");
    assert_string_equal(cap->w[0].stage_name[0], "new");
    assert_int_equal(cap->w[0].stage_kind[0], ST_SYNC);
    st_agg_free(agg);
    free(cap);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_main_trace_windows),
        cmocka_unit_test(test_main_trace_format),
        cmocka_unit_test(test_format_truncation),
        cmocka_unit_test(test_every_step),
        cmocka_unit_test(test_every_three_steps_skips),
        cmocka_unit_test(test_deep_nesting),
        cmocka_unit_test(test_sparse_ids_and_names),
        cmocka_unit_test(test_format_order_and_rounding),
        cmocka_unit_test(test_format_empty_window),
        cmocka_unit_test(test_api_edges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
