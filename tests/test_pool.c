/* test_pool.c: the worker pool behind --jobs (analyze/pool.c): every task
 * runs once, on one of the workers asked for, and after failures the error
 * kept is that of the smallest key, as one job would meet it first. Tasks
 * here record what ran them; task i's key is 100 - i, so the order of the
 * list is the reverse of the key order.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "../analyze/pool.h"

#define N_TASKS 64

typedef struct run_log {
    an_pool *pool;
    int runs[N_TASKS];
    uint32_t worker_of[N_TASKS];
    const int *fails; /* [N_TASKS]: 1 for the tasks that fail */
} run_log;

static void record(void *arg, uint32_t worker, uint32_t task)
{
    run_log *l = arg;
    pthread_mutex_lock(an_pool_lock(l->pool));
    l->runs[task]++;
    l->worker_of[task] = worker;
    pthread_mutex_unlock(an_pool_lock(l->pool));
    if (l->fails && l->fails[task]) {
        char msg[32];
        snprintf(msg, sizeof msg, "task %u failed", task);
        an_pool_fail(l->pool, 100 - task, msg);
    }
}

static void test_every_task_once(void **state)
{
    (void)state;
    uint64_t keys[N_TASKS];
    for (uint32_t i = 0; i < N_TASKS; i++) keys[i] = 100 - i;
    for (uint32_t workers = 1; workers <= 4; workers++) {
        run_log l;
        memset(&l, 0, sizeof l);
        l.pool = an_pool_new();
        assert_non_null(l.pool);
        assert_int_equal(an_pool_run(l.pool, workers, keys, N_TASKS, record, &l), 0);
        assert_null(an_pool_error(l.pool));
        for (uint32_t i = 0; i < N_TASKS; i++) {
            assert_int_equal(l.runs[i], 1);
            assert_true(l.worker_of[i] < workers);
        }
        an_pool_free(l.pool);
    }
    an_pool_free(NULL);
}

static void test_first_error_kept(void **state)
{
    (void)state;
    uint64_t keys[N_TASKS];
    int fails[N_TASKS] = {0};
    for (uint32_t i = 0; i < N_TASKS; i++) keys[i] = 100 - i;
    /* Keys 90 and 50: one job, in key order, meets task 50's (key 50) first. */
    fails[10] = fails[50] = 1;
    for (uint32_t workers = 1; workers <= 4; workers++) {
        run_log l;
        memset(&l, 0, sizeof l);
        l.pool = an_pool_new();
        l.fails = fails;
        assert_int_equal(an_pool_run(l.pool, workers, keys, N_TASKS, record, &l), -1);
        assert_string_equal(an_pool_error(l.pool), "task 50 failed");
        /* Tasks of smaller keys than the failure still ran: one job would have run them first. */
        for (uint32_t i = 51; i < N_TASKS; i++) assert_int_equal(l.runs[i], 1);
        /* A second run starts clean. */
        l.fails = NULL;
        memset(l.runs, 0, sizeof l.runs);
        assert_int_equal(an_pool_run(l.pool, workers, keys, N_TASKS, record, &l), 0);
        assert_null(an_pool_error(l.pool));
        an_pool_free(l.pool);
    }
}

static void test_cpus(void **state)
{
    (void)state;
    assert_true(an_pool_cpus() >= 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_task_once),
        cmocka_unit_test(test_first_error_kept),
        cmocka_unit_test(test_cpus),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
