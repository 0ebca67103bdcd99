/* queue.h: the blocking primitives that join the trainer's threads.
 *
 * tr_queue is a bounded multi-producer multi-consumer FIFO of pointers with blocking put and
 * pop. It carries batches (loader -> targets), hidden-state slots (targets -> drafters) and,
 * used as free lists, the preallocated buffers that travel back to their producers, so the hot
 * path never allocates. A queue may record its depth as a stagetrace counter after every put
 * and pop (taken under its lock, so each sample is the depth that operation left behind).
 * Closing a queue is a shutdown: every blocked or later put/pop returns at once with failure,
 * items still queued stay where they are (their owner frees them).
 *
 * tr_barrier is a reusable barrier among a fixed number of threads that can be aborted, so a
 * drafter waiting in the all-reduce is released when the run stops.
 */
#ifndef TR_QUEUE_H
#define TR_QUEUE_H

#include <pthread.h>
#include <stdint.h>

typedef struct tr_queue {
    pthread_mutex_t lock;
    pthread_cond_t not_empty, not_full;
    void **items;
    int capacity, head, length;
    int closed;
    int counter; /* stagetrace counter id for the depth, or -1 */
} tr_queue;

/* capacity >= 1; counter: st_counter id or -1. Returns 0, or -1 without memory. */
int tr_queue_init(tr_queue *q, int capacity, int counter);
void tr_queue_destroy(tr_queue *q);
/* Blocks while full. Returns 1 when queued, 0 when the queue is (or becomes) closed. */
int tr_queue_put(tr_queue *q, void *item);
/* The same, and records st_flow_out(flow_id) under the queue's lock once the item is in:
 * a consumer can take the item only after its out is recorded, so the st_flow_in it
 * records after its pop is never earlier (docs/analyze.md, "flow"). */
int tr_queue_put_flow(tr_queue *q, void *item, uint64_t flow_id);
/* Blocks while empty. Returns the item, or NULL when the queue is (or becomes) closed. */
void *tr_queue_pop(tr_queue *q);
void tr_queue_close(tr_queue *q);
int tr_queue_depth(tr_queue *q);

typedef struct tr_barrier {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int count, waiting, aborted;
    unsigned long generation;
} tr_barrier;

int tr_barrier_init(tr_barrier *b, int count);
void tr_barrier_destroy(tr_barrier *b);
/* Returns 0 once all `count` threads arrived, -1 when the barrier is (or becomes) aborted. */
int tr_barrier_wait(tr_barrier *b);
void tr_barrier_abort(tr_barrier *b);

#endif
