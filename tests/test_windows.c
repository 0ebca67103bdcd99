/* test_windows.c: the online profile windows (computed by the writer thread
 * while the program runs) equal the windows recomputed from the stored
 * trace, byte for byte once formatted, for a multi-threaded workload whose
 * ranges nest and cross window boundaries; and the windows account for every
 * nanosecond of each thread's wall time. With the CPU capture on, the online
 * lines carry each thread's on-CPU share ("oncpu P%", from the schedstat
 * reads at the closing step marks) and `analyze intervals` prints the same
 * bytes from the trace's cpu_windows; st_reader_windows alone gives the lines
 * without the shares. */
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

#include "common.h"
#include "st_intervals.h"
#include "st_reader.h"
#include "stagetrace.h"

typedef struct captured {
    text_buf text;
    int windows;
    int64_t accounted_bad; /* windows where a thread's time did not add up */
} captured;

/* Called on the writer's thread for the online windows: no asserts here. */
static void on_window(const struct st_window *w, void *arg)
{
    captured *c = arg;
    append_window(w, &c->text);
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

/* The lines without their "  oncpu P%" ends. */
static char *strip_oncpu(const char *text)
{
    char *out = strdup(text), *o = out;
    assert_non_null(out);
    for (const char *p = text; *p;) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        const char *cut = NULL;
        for (const char *q = p; q + 8 <= p + len; q++)
            if (memcmp(q, "  oncpu ", 8) == 0) cut = q;
        size_t keep = cut ? (size_t)(cut - p) : len;
        memcpy(o, p, keep);
        o += keep;
        if (eol) *o++ = '\n';
        p += len + (eol ? 1 : 0);
    }
    *o = 0;
    return out;
}

static void run_and_compare(unsigned every, int steps, int cpu)
{
    char path[PATH_MAX], name[64];
    snprintf(name, sizeof name, "every%u%s.sqlite", every, cpu ? "_cpu" : "");
    tmp_path(path, sizeof path, name);
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
    opt.cpu = cpu;
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

    st_reader *r = open_reader(path);
    assert_int_equal(st_reader_windows(r, every, on_window, &offline), ST_OK);
    st_reader_close(r);

    assert_int_equal(online.windows, steps / (int)every);
    assert_int_equal(offline.windows, online.windows);
    assert_int_equal(online.accounted_bad, 0);
    assert_int_equal(offline.accounted_bad, 0);
    assert_non_null(online.text.data);
    if (cpu) {
        /* shares where the kernel has schedstat; the lines themselves as without them */
        sqlite3 *db;
        assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
        sqlite3_stmt *st = prepare(db, "SELECT value FROM meta WHERE key = 'cpu_window_source'");
        assert_int_equal(sqlite3_step(st), SQLITE_ROW);
        int schedstat = strcmp((const char *)sqlite3_column_text(st, 0), "schedstat") == 0;
        sqlite3_finalize(st);
        sqlite3_close(db);
        if (schedstat) {
            /* thread lines have them (not all: see below) */
            int lines = 0, shares = 0;
            for (const char *p = online.text.data; (p = strchr(p, '\n')) && p[1]; p++)
                if (strncmp(p + 1, "  ", 2) == 0 && strncmp(p + 1, "  role ", 7) != 0) {
                    lines++;
                    const char *eol = strchr(p + 1, '\n');
                    const char *o = strstr(p + 1, "  oncpu ");
                    shares += o && o < eol;
                }
            /* a read that saw no thread run (two marks stored in one writer
             * pass, 1 ms apart) leaves its window without shares */
            assert_true(lines >= online.windows);
            assert_true(shares >= 1);
        }
        char *stripped = strip_oncpu(online.text.data);
        assert_string_equal(stripped, offline.text.data);
        free(stripped);
        /* analyze intervals: the online bytes, shares included */
        char cmd[PATH_MAX + 512];
        snprintf(cmd, sizeof cmd, "'%s/analyze' intervals '%s' 2>/dev/null", build_dir(), path);
        FILE *p = popen(cmd, "r");
        assert_non_null(p);
        text_buf got = {0};
        char buf[4096];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, p)) > 0) {
            got.data = realloc(got.data, got.len + n + 1);
            assert_non_null(got.data);
            memcpy(got.data + got.len, buf, n);
            got.len += n;
            got.data[got.len] = 0;
        }
        assert_int_equal(pclose(p), 0);
        assert_non_null(got.data);
        assert_string_equal(got.data, online.text.data);
        free(got.data);
    } else {
        assert_string_equal(online.text.data, offline.text.data);
        assert_null(strstr(online.text.data, "oncpu"));
    }
    /* every thread shows up, with its stages */
    assert_non_null(strstr(online.text.data, "worker2"));
    assert_non_null(strstr(online.text.data, "main_work"));
    assert_non_null(strstr(online.text.data, "outer"));
    free(online.text.data);
    free(offline.text.data);
    unlink(path);
}

static void test_online_equals_offline_every1(void **state)
{
    (void)state;
    run_and_compare(1, 12, 0);
}

static void test_online_equals_offline_every4(void **state)
{
    (void)state;
    run_and_compare(4, 16, 0);
}

static void test_online_equals_offline_cpu(void **state)
{
    (void)state;
    run_and_compare(1, 12, 1);
    run_and_compare(4, 16, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_online_equals_offline_every1),
        cmocka_unit_test(test_online_equals_offline_every4),
        cmocka_unit_test(test_online_equals_offline_cpu),
    };
    if (make_tmp_dir("test_windows")) return 1;
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    tidy_tmp_dir(failed);
    return failed;
}
