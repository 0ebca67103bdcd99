/* pool.h: the worker pool behind --jobs (pool.c).
 *
 * A pool runs a list of tasks on up to n workers: the calling thread is
 * worker 0 (so a task may use what that thread opened), the others are
 * threads started for the run and joined before it returns; a worker that
 * cannot start leaves its share to the others. Workers take the tasks in
 * the order given (callers put the largest first, for balance). Each task
 * has a key, its place in the order one job would run them in: once a task
 * fails, only tasks of smaller keys are still started, and the error kept is
 * that of the smallest key, so the error reported is the one a single job
 * meets first, whatever the number of workers. The pool knows nothing of
 * what its tasks do (stats.c reads trace threads or files with it).
 */
#ifndef ANALYZE_POOL_H
#define ANALYZE_POOL_H

#include <pthread.h>
#include <stdint.h>

typedef struct an_pool an_pool;
/* Runs task `task` on worker `worker` (0 .. workers-1). */
typedef void (*an_pool_task_fn)(void *arg, uint32_t worker, uint32_t task);

an_pool *an_pool_new(void); /* NULL: no memory */
void an_pool_free(an_pool *p); /* NULL is harmless */
/* Guards the pool's queue and error; tasks may guard what they share with it. */
pthread_mutex_t *an_pool_lock(an_pool *p);
/* Runs tasks 0 .. n_tasks-1 in that order (keys[i]: task i's key) on up to
 * n_workers workers and returns when all are done: 0, or -1 when a task
 * failed (an_pool_error says how). */
int an_pool_run(an_pool *p, uint32_t n_workers, const uint64_t *keys, uint32_t n_tasks, an_pool_task_fn fn,
                void *arg);
/* From a task of key `key`: it failed with msg (copied, at most 1023 bytes);
 * kept when no task of a smaller key failed in this run. */
void an_pool_fail(an_pool *p, uint64_t key, const char *msg);
const char *an_pool_error(const an_pool *p); /* the last run's error; NULL when none */
/* The CPUs this process may run on: the online ones, within its affinity
 * mask; at least 1. */
int an_pool_cpus(void);

#endif
