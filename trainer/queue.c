/* queue.c: bounded blocking MPMC queue and abortable barrier (see queue.h). Plain mutex and
 * condition variables: items are whole batches, so one lock per item costs nothing next to
 * the work they carry. */
#include "queue.h"

#include <stdlib.h>

#include "stagetrace.h"

int tr_queue_init(tr_queue *q, int capacity, int counter)
{
    q->items = calloc((size_t)(capacity > 0 ? capacity : 1), sizeof *q->items);
    if (!q->items)
        return -1;
    q->capacity = capacity > 0 ? capacity : 1;
    q->head = q->length = q->closed = 0;
    q->counter = counter;
    pthread_mutex_init(&q->lock, NULL);
    pthread_cond_init(&q->not_empty, NULL);
    pthread_cond_init(&q->not_full, NULL);
    return 0;
}

void tr_queue_destroy(tr_queue *q)
{
    if (!q->items)
        return;
    pthread_mutex_destroy(&q->lock);
    pthread_cond_destroy(&q->not_empty);
    pthread_cond_destroy(&q->not_full);
    free(q->items);
    q->items = NULL;
}

static int queue_put(tr_queue *q, void *item, int flow, uint64_t flow_id)
{
    pthread_mutex_lock(&q->lock);
    while (q->length == q->capacity && !q->closed)
        pthread_cond_wait(&q->not_full, &q->lock);
    int ok = !q->closed;
    if (ok) {
        q->items[(q->head + q->length) % q->capacity] = item;
        q->length++;
        if (flow)
            st_flow_out(flow_id);
        if (q->counter >= 0)
            st_counter_set((st_counter)q->counter, (double)q->length);
        pthread_cond_signal(&q->not_empty);
    }
    pthread_mutex_unlock(&q->lock);
    return ok;
}

int tr_queue_put(tr_queue *q, void *item)
{
    return queue_put(q, item, 0, 0);
}

int tr_queue_put_flow(tr_queue *q, void *item, uint64_t flow_id)
{
    return queue_put(q, item, 1, flow_id);
}

void *tr_queue_pop(tr_queue *q)
{
    void *item = NULL;
    pthread_mutex_lock(&q->lock);
    while (q->length == 0 && !q->closed)
        pthread_cond_wait(&q->not_empty, &q->lock);
    if (!q->closed) {
        item = q->items[q->head];
        q->head = (q->head + 1) % q->capacity;
        q->length--;
        if (q->counter >= 0)
            st_counter_set((st_counter)q->counter, (double)q->length);
        pthread_cond_signal(&q->not_full);
    }
    pthread_mutex_unlock(&q->lock);
    return item;
}

void tr_queue_close(tr_queue *q)
{
    pthread_mutex_lock(&q->lock);
    q->closed = 1;
    pthread_cond_broadcast(&q->not_empty);
    pthread_cond_broadcast(&q->not_full);
    pthread_mutex_unlock(&q->lock);
}

int tr_queue_depth(tr_queue *q)
{
    pthread_mutex_lock(&q->lock);
    int n = q->length;
    pthread_mutex_unlock(&q->lock);
    return n;
}

int tr_barrier_init(tr_barrier *b, int count)
{
    b->count = count;
    b->waiting = b->aborted = 0;
    b->generation = 0;
    pthread_mutex_init(&b->lock, NULL);
    pthread_cond_init(&b->cond, NULL);
    return 0;
}

void tr_barrier_destroy(tr_barrier *b)
{
    pthread_mutex_destroy(&b->lock);
    pthread_cond_destroy(&b->cond);
}

int tr_barrier_wait(tr_barrier *b)
{
    pthread_mutex_lock(&b->lock);
    unsigned long gen = b->generation;
    if (!b->aborted && ++b->waiting == b->count) {
        b->waiting = 0;
        b->generation++;
        pthread_cond_broadcast(&b->cond);
    } else {
        while (gen == b->generation && !b->aborted)
            pthread_cond_wait(&b->cond, &b->lock);
    }
    int rc = gen != b->generation ? 0 : -1;
    pthread_mutex_unlock(&b->lock);
    return rc;
}

void tr_barrier_abort(tr_barrier *b)
{
    pthread_mutex_lock(&b->lock);
    b->aborted = 1;
    pthread_cond_broadcast(&b->cond);
    pthread_mutex_unlock(&b->lock);
}
