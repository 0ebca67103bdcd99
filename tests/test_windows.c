/* test_windows.c: the online profile windows (computed by the writer thread
 * while the program runs) equal the windows recomputed from the stored
 * trace, byte for byte once formatted, for a multi-threaded workload whose
 * ranges nest and cross window boundaries; and the windows account for every
 * nanosecond of each thread's wall time. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "st_intervals.h"
#include "st_reader.h"
#include "stagetrace.h"

typedef struct captured {
    char *text;
    size_t len, cap;
    int windows;
    int64_t accounted_bad; /* windows where a thread's time did not add up */
} captured;

static void append(captured *c, const char *s, size_t n)
{
    if (c->len + n + 1 > c->cap) {
        c->cap = (c->len + n + 1) * 2;
        c->text = realloc(c->text, c->cap);
    }
    memcpy(c->text + c->len, s, n);
    c->len += n;
    c->text[c->len] = 0;
}

static void on_window(const struct st_window *w, void *arg)
{
    captured *c = arg;
    size_t need = st_window_format(w, NULL, 0);
    char *buf = malloc(need + 1);
    st_window_format(w, buf, need + 1);
    append(c, buf, need);
    free(buf);
    c->windows++;
    for (uint32_t i = 0; i < w->n_threads; i++) {
        int64_t sum = w->threads[i].idle_ns;
        for (uint32_t s = 0; s < w->n_stages; s++) sum += w->threads[i].stage_ns[s];
        if (sum != w->t1_ns - w->t0_ns) c->accounted_bad++;
    }
}

static st_trace *trace;
static int st_outer, st_inner, st_wait;
static _Atomic int workers_stop;
static _Atomic int workers_started;

static void spin_ns(long ns)
{
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do {
        clock_gettime(CLOCK_MONOTONIC, &b);
    } while ((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) < ns);
}

static void *worker(void *arg)
{
    long id = (long)(intptr_t)arg;
    char name[16];
    snprintf(name, sizeof name, "worker%ld", id);
    st_thread_register(trace, name, id % 2 ? "odd" : "even", -1, 0);
    atomic_fetch_add(&workers_started, 1);
    while (!workers_stop) {
        st_begin((st_stage)st_outer);
        spin_ns(20000 + 7000 * id);
        st_begin((st_stage)st_inner);
        spin_ns(5000);
        st_end((st_stage)st_inner);
        st_end((st_stage)st_outer);
        st_begin((st_stage)st_wait);
        usleep(50 + 30 * (unsigned)id); /* sleeps cross step marks often */
        st_end((st_stage)st_wait);
    }
    st_thread_unregister();
    return NULL;
}

static void run_and_compare(unsigned every, int steps)
{
    char path[256];
    const char *dir = getenv("ST_TEST_TMP") ? getenv("ST_TEST_TMP") : "/tmp";
    snprintf(path, sizeof path, "%s/test_windows_%d_%u.sqlite", dir, (int)getpid(), every);
    captured online = {0}, offline = {0};

    st_options opt;
    st_options_init(&opt);
    opt.path = path;
    opt.overwrite = 1;
    opt.nvtx = 0;
    opt.profile_interval = every;
    opt.on_window = on_window;
    opt.on_window_arg = &online;
    opt.block_when_full = 1;
    assert_int_equal(st_open(&trace, &opt), ST_OK);
    st_outer = st_stage_register(trace, "outer", ST_WORK);
    st_inner = st_stage_register(trace, "inner", ST_SYNC);
    st_wait = st_stage_register(trace, "wait", ST_WAIT_INPUT);
    int st_main = st_stage_register(trace, "main_work", ST_WORK);
    assert_true(st_main >= 0);
    assert_true(st_thread_register(trace, "main", "main", -1, 0) >= 0);

    workers_stop = 0;
    workers_started = 0;
    pthread_t th[3];
    for (long i = 0; i < 3; i++) pthread_create(&th[i], NULL, worker, (void *)(intptr_t)i);
    /* every worker records from the first window on, however late the
     * scheduler starts it */
    while (atomic_load(&workers_started) < 3) usleep(100);
    st_step(0, 0);
    for (int s = 1; s <= steps; s++) {
        /* main's own range straddles every step mark */
        st_begin((st_stage)st_main);
        spin_ns(1000000);
        st_step((uint64_t)s, (uint64_t)(1000 + s));
        spin_ns(100000);
        st_end((st_stage)st_main);
    }
    workers_stop = 1;
    for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
    assert_int_equal(st_close(trace), ST_OK);

    st_reader *r;
    assert_int_equal(st_reader_open(&r, path), ST_OK);
    assert_int_equal(st_reader_windows(r, every, on_window, &offline), ST_OK);
    st_reader_close(r);

    assert_int_equal(online.windows, steps / (int)every);
    assert_int_equal(offline.windows, online.windows);
    assert_int_equal(online.accounted_bad, 0);
    assert_int_equal(offline.accounted_bad, 0);
    assert_non_null(online.text);
    assert_string_equal(online.text, offline.text);
    /* every thread shows up, with its stages */
    assert_non_null(strstr(online.text, "worker2"));
    assert_non_null(strstr(online.text, "main_work"));
    assert_non_null(strstr(online.text, "outer"));
    free(online.text);
    free(offline.text);
    unlink(path);
}

static void test_online_equals_offline_every1(void **state)
{
    (void)state;
    run_and_compare(1, 12);
}

static void test_online_equals_offline_every4(void **state)
{
    (void)state;
    run_and_compare(4, 16);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_online_equals_offline_every1),
        cmocka_unit_test(test_online_equals_offline_every4),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
