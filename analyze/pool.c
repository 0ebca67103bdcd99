/* pool.c: the worker pool behind --jobs (pool.h states its contract). The
 * queue is an index into the caller's task list under one lock; workers are
 * started for each run, the calling thread being worker 0, and joined
 * before the run returns.
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "pool.h"

struct an_pool {
    pthread_mutex_t lock;      /* guards next and the error */
    const uint64_t *keys;
    uint32_t n_tasks, next;
    an_pool_task_fn fn;
    void *arg;
    uint64_t err_key;          /* the failed task first in key order; UINT64_MAX none */
    char err_msg[1024];
};

typedef struct worker {
    an_pool *pool;
    uint32_t index;
    pthread_t tid;
} worker;

an_pool *an_pool_new(void)
{
    an_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    pthread_mutex_init(&p->lock, NULL);
    p->err_key = UINT64_MAX;
    return p;
}

void an_pool_free(an_pool *p)
{
    if (!p) return;
    pthread_mutex_destroy(&p->lock);
    free(p);
}

pthread_mutex_t *an_pool_lock(an_pool *p) { return &p->lock; }

void an_pool_fail(an_pool *p, uint64_t key, const char *msg)
{
    pthread_mutex_lock(&p->lock);
    if (key < p->err_key) {
        p->err_key = key;
        snprintf(p->err_msg, sizeof p->err_msg, "%s", msg);
    }
    pthread_mutex_unlock(&p->lock);
}

const char *an_pool_error(const an_pool *p) { return p->err_key != UINT64_MAX ? p->err_msg : NULL; }

static void *worker_main(void *arg)
{
    worker *w = arg;
    an_pool *p = w->pool;
    for (;;) {
        uint32_t tk = UINT32_MAX;
        pthread_mutex_lock(&p->lock);
        /* After an error only tasks before it in key order run:
         * the error reported is the one a single job would meet first. */
        while (tk == UINT32_MAX && p->next < p->n_tasks) {
            uint32_t t = p->next++;
            if (p->keys[t] < p->err_key) tk = t;
        }
        pthread_mutex_unlock(&p->lock);
        if (tk == UINT32_MAX) return NULL;
        p->fn(p->arg, w->index, tk);
    }
}

int an_pool_run(an_pool *p, uint32_t n_workers, const uint64_t *keys, uint32_t n_tasks, an_pool_task_fn fn,
                void *arg)
{
    p->keys = keys;
    p->n_tasks = n_tasks;
    p->next = 0;
    p->fn = fn;
    p->arg = arg;
    p->err_key = UINT64_MAX;
    if (n_workers < 1) n_workers = 1;
    worker *w = calloc(n_workers, sizeof *w);
    worker one = {p, 0, 0};
    if (!w) {
        w = &one; /* no memory for more: this thread does it all */
        n_workers = 1;
    }
    for (uint32_t i = 0; i < n_workers; i++) w[i] = (worker){p, i, 0};
    /* This thread is worker 0; a worker that cannot start leaves its share to the others. */
    uint32_t started = 1;
    for (uint32_t i = 1; i < n_workers; i++)
        if (pthread_create(&w[i].tid, NULL, worker_main, &w[i]) == 0) started = i + 1;
        else break;
    worker_main(&w[0]);
    for (uint32_t i = 1; i < started; i++) pthread_join(w[i].tid, NULL);
    if (w != &one) free(w);
    return p->err_key != UINT64_MAX ? -1 : 0;
}

int an_pool_cpus(void)
{
    long n_cpus = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0 && CPU_COUNT(&set) < n_cpus)
        n_cpus = CPU_COUNT(&set);
    return n_cpus < 1 ? 1 : (int)n_cpus;
}
