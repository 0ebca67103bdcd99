/* test_layout.c: the roles, channels and batch ownership of a multi-process trainer run
 * (trainer/layout.c), and the flags that choose them (--layout, --target-ranks,
 * --drafter-ranks, --test-die-at in trainer/config.c). No MPI: layout.c is arithmetic.
 *
 * The property the channels rely on: for every layout of up to 9 ranks and every batch b of
 * a run, b's owner is one of the sources of the drafter that trains on it, at the position
 * the drafter takes it from; each drafter's items per source add up to its steps; each
 * target's per-drafter counts add up to the batches it owns; and no two targets own a batch.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../trainer/config.h"
#include "../trainer/layout.h"

static int parse(tr_config *cfg, const char *const *args, char *err, size_t n)
{
    char *argv[32];
    int argc = 0;
    argv[argc++] = (char *)"trainer";
    for (; args[argc - 1]; argc++)
        argv[argc] = (char *)args[argc - 1];
    argv[argc] = NULL;
    FILE *devnull = fopen("/dev/null", "w");
    int rc = tr_config_parse(cfg, argc, argv, devnull, err, n);
    fclose(devnull);
    return rc;
}

static tr_layout layout; /* large: not on the stack */

static void test_layout_flag(void **state)
{
    (void)state;
    static tr_config cfg;
    char err[256];
    const char *a[] = {"--layout", "targets=2,drafters=3", NULL};
    assert_int_equal(parse(&cfg, a, err, sizeof err), TR_CONFIG_OK);
    assert_int_equal(cfg.layout_targets, 2);
    assert_int_equal(cfg.layout_drafters, 3);
    assert_int_equal(tr_layout_make(&layout, &cfg, 5, err, sizeof err), 0);
    assert_int_equal(layout.n_targets, 2);
    assert_int_equal(layout.n_drafters, 3);
    int roles[5] = {TR_ROLE_TARGET, TR_ROLE_TARGET, TR_ROLE_DRAFTER, TR_ROLE_DRAFTER,
                    TR_ROLE_DRAFTER};
    int index[5] = {0, 1, 0, 1, 2};
    for (int r = 0; r < 5; r++) {
        assert_int_equal(layout.role[r], roles[r]);
        assert_int_equal(layout.index[r], index[r]);
    }
    assert_int_equal(layout.drafter_rank[2], 4);
    /* the wrong number of processes */
    assert_int_equal(tr_layout_make(&layout, &cfg, 4, err, sizeof err), -1);
    assert_string_equal(err, "--layout targets=2,drafters=3 needs 5 processes, but the run has 4 "
                             "(start it with mpirun -np 5)");

    const char *b[] = {"--layout", "drafters=1,targets=3", NULL}; /* either order */
    assert_int_equal(parse(&cfg, b, err, sizeof err), TR_CONFIG_OK);
    assert_int_equal(cfg.layout_targets, 3);
    assert_int_equal(cfg.layout_drafters, 1);

    const char *bad[][3] = {
        {"--layout", "targets=2", NULL},          {"--layout", "targets=0,drafters=2", NULL},
        {"--layout", "targets=2,drafters=2,", NULL}, {"--layout", "targets=2,targets=2", NULL},
        {"--layout", "t=2,d=2", NULL},            {"--layout", "", NULL},
        {"--layout", "targets=1x,drafters=1", NULL},
        {"--layout", "targets=1025,drafters=1", NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(parse(&cfg, bad[i], err, sizeof err), TR_CONFIG_ERROR);
        assert_non_null(strstr(err, "--layout expects targets=T,drafters=D"));
    }
    const char *both[] = {"--layout", "targets=1,drafters=1", "--target-ranks", "0,", NULL};
    assert_int_equal(parse(&cfg, both, err, sizeof err), TR_CONFIG_ERROR);
    assert_string_equal(err, "--layout and --target-ranks/--drafter-ranks say the same thing: "
                             "give one of them");
}

static void test_rank_lists(void **state)
{
    (void)state;
    static tr_config cfg;
    char err[256];
    /* one list: the other role takes the rest */
    const char *a[] = {"--target-ranks", "3,1", NULL};
    assert_int_equal(parse(&cfg, a, err, sizeof err), TR_CONFIG_OK);
    assert_int_equal(tr_layout_make(&layout, &cfg, 4, err, sizeof err), 0);
    assert_int_equal(layout.n_targets, 2);
    assert_int_equal(layout.target_rank[0], 1); /* indices follow rank order */
    assert_int_equal(layout.target_rank[1], 3);
    assert_int_equal(layout.drafter_rank[0], 0);
    assert_int_equal(layout.drafter_rank[1], 2);
    assert_int_equal(layout.index[3], 1);
    /* both lists must cover every rank */
    const char *b[] = {"--target-ranks", "0,", "--drafter-ranks", "2,", NULL};
    assert_int_equal(parse(&cfg, b, err, sizeof err), TR_CONFIG_OK);
    assert_int_equal(tr_layout_make(&layout, &cfg, 3, err, sizeof err), -1);
    assert_string_equal(err, "rank 1 is in neither --target-ranks nor --drafter-ranks: every "
                             "rank plays one role");
    /* a rank beyond the run */
    assert_int_equal(tr_layout_make(&layout, &cfg, 2, err, sizeof err), -1);
    assert_string_equal(err, "--drafter-ranks names rank 2, but the run has 2 processes "
                             "(ranks 0..1)");
    /* one rank in both lists */
    const char *c[] = {"--target-ranks", "0,1", "--drafter-ranks", "1,2", NULL};
    assert_int_equal(parse(&cfg, c, err, sizeof err), TR_CONFIG_ERROR);
    assert_string_equal(err, "rank 1 is in both --target-ranks and --drafter-ranks: each rank "
                             "plays one role");
    /* every rank a target */
    const char *d[] = {"--target-ranks", "0,1", NULL};
    assert_int_equal(parse(&cfg, d, err, sizeof err), TR_CONFIG_OK);
    assert_int_equal(tr_layout_make(&layout, &cfg, 2, err, sizeof err), -1);
    assert_string_equal(err, "the layout leaves no drafter rank: a run needs at least one "
                             "target and one drafter");
}

static void test_default_layout(void **state)
{
    (void)state;
    static tr_config cfg;
    char err[256];
    const char *none[] = {NULL};
    assert_int_equal(parse(&cfg, none, err, sizeof err), TR_CONFIG_OK);
    /* the first world/2 ranks (rounded down) are targets */
    int expect_targets[] = {0, 0, 1, 1, 2, 2, 3};
    for (int world = 2; world <= 6; world++) {
        assert_int_equal(tr_layout_make(&layout, &cfg, world, err, sizeof err), 0);
        assert_int_equal(layout.n_targets, expect_targets[world]);
        assert_int_equal(layout.n_drafters, world - expect_targets[world]);
        assert_int_equal(layout.role[0], TR_ROLE_TARGET);
        assert_int_equal(layout.role[world - 1], TR_ROLE_DRAFTER);
    }
    assert_int_equal(tr_layout_make(&layout, &cfg, 1, err, sizeof err), -1);
    assert_string_equal(err, "a multi-process run needs 2..1024 processes, got 1");
    assert_int_equal(tr_layout_check_single(&cfg, err, sizeof err), 0);
}

/* A single process (no launcher, mpirun -np 1, a build without MPI) plays every role: each
 * flag that lays out ranks is refused with the line that names it, never ignored. */
static void test_single_process(void **state)
{
    (void)state;
    static tr_config cfg;
    char err[256];
    struct {
        const char *args[3];
        const char *message;
    } cases[] = {
        {{"--layout", "targets=2,drafters=2", NULL},
         "--layout targets=2,drafters=2 needs 4 processes, but the run has 1 (start it with "
         "mpirun -np 4)"},
        {{"--layout", "targets=1,drafters=1", NULL},
         "--layout targets=1,drafters=1 needs 2 processes, but the run has 1 (start it with "
         "mpirun -np 2)"},
        {{"--target-ranks", "0,5", NULL},
         "--target-ranks names rank 5, but the run has 1 process (rank 0)"},
        {{"--drafter-ranks", "3,", NULL},
         "--drafter-ranks names rank 3, but the run has 1 process (rank 0)"},
        {{"--target-ranks", "0,", NULL},
         "--target-ranks lays out the ranks of a multi-process run, but the run has 1 process: "
         "start it with mpirun -np N (N >= 2), or drop the flag"},
        {{"--drafter-ranks", "0,", NULL},
         "--drafter-ranks lays out the ranks of a multi-process run, but the run has 1 process: "
         "start it with mpirun -np N (N >= 2), or drop the flag"},
        {{"--test-die-at", "0:3", NULL},
         "--test-die-at names a rank of a multi-process run, but the run has 1 process: start "
         "it with mpirun -np N (N >= 2), or drop the flag"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(parse(&cfg, cases[i].args, err, sizeof err), TR_CONFIG_OK);
        err[0] = 0;
        assert_int_equal(tr_layout_check_single(&cfg, err, sizeof err), -1);
        assert_string_equal(err, cases[i].message);
    }
}

static void test_die_at_flag(void **state)
{
    (void)state;
    static tr_config cfg;
    char err[256];
    const char *a[] = {"--test-die-at", "3:12", NULL};
    assert_int_equal(parse(&cfg, a, err, sizeof err), TR_CONFIG_OK);
    assert_int_equal(cfg.die_rank, 3);
    assert_int_equal(cfg.die_step, 12);
    const char *bad[][3] = {{"--test-die-at", "3", NULL}, {"--test-die-at", "3:0", NULL},
                            {"--test-die-at", "-1:4", NULL}, {"--test-die-at", "1:4x", NULL}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(parse(&cfg, bad[i], err, sizeof err), TR_CONFIG_ERROR);
        assert_non_null(strstr(err, "--test-die-at expects RANK:STEP"));
    }
}

/* The channel arithmetic, exhaustively over small layouts. */
static void test_channels(void **state)
{
    (void)state;
    static tr_config cfg;
    char err[256];
    const uint64_t steps = 7;
    for (int T = 1; T <= 5; T++)
        for (int D = 1; D <= 5; D++) {
            memset(&cfg, 0, sizeof cfg);
            cfg.layout_targets = T;
            cfg.layout_drafters = D;
            assert_int_equal(tr_layout_make(&layout, &cfg, T + D, err, sizeof err), 0);
            int sources[TR_MAX_RANKS], sinks[TR_MAX_RANKS];
            /* edges: the same pairs seen from both ends; max(T, D) of them */
            int edges = 0;
            for (int t = 0; t < T; t++) {
                int k = tr_layout_sinks(&layout, t, sinks);
                assert_true(k >= 1);
                edges += k;
                for (int i = 0; i < k; i++) {
                    int m = tr_layout_sources(&layout, sinks[i], sources), found = 0;
                    for (int j = 0; j < m; j++)
                        found |= sources[j] == t;
                    assert_true(found);
                }
            }
            assert_int_equal(edges, T > D ? T : D);
            uint64_t owned[8] = {0};
            for (int d = 0; d < D; d++) {
                int k = tr_layout_sources(&layout, d, sources);
                assert_true(k >= 1);
                uint64_t total = 0;
                for (int j = 0; j < k; j++)
                    total += tr_layout_edge_items(&layout, sources[j], d, steps);
                assert_int_equal(total, steps);
                for (uint64_t s = 1; s <= steps; s++) {
                    uint64_t b = tr_layout_batch(&layout, d, s);
                    assert_int_equal(b, (s - 1) * (uint64_t)D + (uint64_t)d);
                    int owner = tr_layout_owner(&layout, b);
                    assert_int_equal(owner, sources[(s - 1) % (uint64_t)k]);
                    owned[owner]++;
                }
            }
            /* every target's items, per drafter, add up to the batches it owns */
            for (int t = 0; t < T; t++) {
                uint64_t sum = 0;
                for (int d = 0; d < D; d++)
                    sum += tr_layout_edge_items(&layout, t, d, steps);
                assert_int_equal(sum, owned[t]);
                assert_true(owned[t] > 0);
            }
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout_flag),
        cmocka_unit_test(test_rank_lists),
        cmocka_unit_test(test_default_layout),
        cmocka_unit_test(test_single_process),
        cmocka_unit_test(test_die_at_flag),
        cmocka_unit_test(test_channels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
