/* test_queues.c: counter merging and the queue-depth statistics of the
 * model (analyze/queues.c, model.c), on target.sqlite of tests/traces.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "st_reader.h"
#include "traces.h"

#include "../analyze/queues.h"
#include "../analyze/verdict.h"

static void open_pipe(an_trace *t, an_pipe *p, const char *name, const an_pipe_opts *o)
{
    assert_int_equal(an_trace_open(t, tmp_file(name)), 0);
    assert_int_equal(an_pipe_compute(p, t, o), 0);
}

#define assert_close(a, b) assert_true(fabs((double)(a) - (double)(b)) < 1e-9 * (1.0 + fabs((double)(b))))

static void test_queue_depth(void **state)
{
    (void)state;
    an_trace t;
    an_pipe p;
    open_pipe(&t, &p, "target.sqlite", NULL);
    assert_int_equal(p.n_queues, 1);
    const an_pipe_queue *q = &p.queues[0];
    assert_string_equal(q->name, "queue_depth");
    assert_int_equal(q->n_samples, 40);
    assert_int_equal(q->covered_ns, 200 * MS);
    assert_close(q->mean, 1.5);
    assert_close(q->min, 0);
    assert_close(q->max, 3);
    assert_int_equal(q->at_max_ns, 100 * MS);
    assert_int_equal(q->at_zero_ns, 100 * MS);
    assert_close(q->bin_mean[7], 1.5);
    assert_close(q->bin_max[7], 3);
    an_pipe_free(&p);
    an_trace_close(&t);
}

static int setup(void **state)
{
    (void)state;
    if (make_tmp_dir("test_queues")) return -1;
    write_model_traces(tmp_dir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return remove_tmp_dir();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_queue_depth),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
