/* pipeline.c: the trainer's threads, queues and step reports (see pipeline.h). Each thread
 * brackets every blocking call and every backend call with its stage, so the trace shows
 * where each role's time goes; the backend never sees a queue. */
#include "pipeline.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "data.h"
#include "queue.h"

#define REPORT_RING 64 /* drafters may run at most this many steps ahead of main */

/* Flows: each batch is followed from the loader to the drafter that trains on it. Every
 * handoff has its own id, batch index << 16 | hop: the producer records st_flow_out in
 * its put (tr_queue_put_flow), the consumer st_flow_in right after its pop. */

typedef struct target_worker {
    tr_pipeline *p;
    int index, device;
    char tag[16];                  /* names its threads: target<tag>, post<tag> (thread_tag) */
    tr_target *target;
    tr_queue filled, free_staging; /* async only: staging buffers (index + 1) */
    uint64_t staging_batch[2];     /* async only: the batch each staging buffer holds */
    pthread_t thread, post_thread;
    int started, post_started;
} target_worker;

typedef struct drafter_worker {
    tr_pipeline *p;
    int rank, device;
    char tag[16];                  /* drafter<tag> */
    tr_drafter *drafter;
    int32_t *anchors;
    pthread_t thread;
    int started;
} drafter_worker;

struct tr_pipeline {
    const tr_config *cfg;
    const tr_backend *be;
    tr_context *ctx;
    st_trace *trace;
    tr_data *data;

    st_stage s_load, s_queue_put, s_batch_wait, s_forward, s_postprocess, s_handoff,
        s_handoff_wait, s_queue_wait, s_h2d, s_loss, s_backward, s_allreduce, s_optimizer;
    int c_queue_depth, c_batch_depth;

    tr_queue batch_queue, batch_free;
    tr_batch *batches;
    int n_batches;
    int32_t *batch_memory;

    tr_queue hidden_queue, hidden_free;
    tr_hidden *slots;
    int n_slots, n_slots_allocated;

    pthread_t loader_thread;
    int loader_started;
    target_worker *targets;
    drafter_worker *drafters;

    pthread_mutex_t report_lock;
    pthread_cond_t report_cond;
    tr_step_report ring[REPORT_RING];
    int stopping, failed, stopped;
    char error[256];
    atomic_int stop;
};

/* ---- helpers ----------------------------------------------------------------------------- */

static void fail(tr_pipeline *p, const char *who, const char *what)
{
    pthread_mutex_lock(&p->report_lock);
    if (!p->failed) {
        p->failed = 1;
        snprintf(p->error, sizeof p->error, "%s: %s", who, what);
    }
    pthread_cond_broadcast(&p->report_cond);
    pthread_mutex_unlock(&p->report_lock);
    atomic_store(&p->stop, 1);
}

static int stopping(tr_pipeline *p)
{
    return atomic_load(&p->stop);
}

void tr_spin_us(long us)
{
    if (us <= 0)
        return;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do {
        clock_gettime(CLOCK_MONOTONIC, &b);
    } while ((b.tv_sec - a.tv_sec) * 1000000L + (b.tv_nsec - a.tv_nsec) / 1000 < us);
}

/* A role's thread is named by its device ("drafter1"); where the role has several threads on
 * one device, by the device and its order among them ("drafter0.0", "drafter0.1"). */
static void thread_tag(char *tag, size_t n, const int *devices, int count, int i)
{
    int same = 0, before = 0;
    for (int k = 0; k < count; k++) {
        same += devices[k] == devices[i];
        before += k < i && devices[k] == devices[i];
    }
    if (same > 1)
        snprintf(tag, n, "%d.%d", devices[i], before);
    else
        snprintf(tag, n, "%d", devices[i]);
}

static void register_thread(tr_pipeline *p, const char *role, const char *tag, int device)
{
    char name[32];
    snprintf(name, sizeof name, "%s%s", role, tag);
    if (p->trace)
        st_thread_register(p->trace, name, role, device, 0);
}

/* ---- loader ------------------------------------------------------------------------------ */

static void *loader_main(void *arg)
{
    tr_pipeline *p = arg;
    register_thread(p, "loader", "", -1);
    uint64_t index = 0;
    while (!stopping(p)) {
        tr_batch *b = tr_queue_pop(&p->batch_free); /* never waits: the pool covers the queue */
        if (!b)
            break;
        st_begin(p->s_load);
        b->index = index++;
        tr_data_next(p->data, b);
        st_end(p->s_load);
        st_begin(p->s_queue_put);
        int ok = tr_queue_put_flow(&p->batch_queue, b, tr_flow_id(b->index, TR_HOP_BATCH));
        st_end(p->s_queue_put);
        if (!ok)
            break;
    }
    st_thread_unregister();
    return NULL;
}

/* ---- target and post --------------------------------------------------------------------- */

/* postprocess (pack taps as bf16 + copy into a free host slot), then queue_put. When
 * release_staging is given, the staging buffer goes back to its target right after packing. */
static int produce_hidden(target_worker *w, int staging, tr_queue *release_staging)
{
    tr_pipeline *p = w->p;
    char who[32];
    st_begin(p->s_postprocess);
    tr_hidden *h = tr_queue_pop(&p->hidden_free); /* never waits: the pool covers the queue */
    int rc = h ? p->be->target_postprocess(w->target, staging, h) : -1;
    st_end(p->s_postprocess);
    if (release_staging)
        tr_queue_put(release_staging, (void *)(intptr_t)(staging + 1));
    if (!h)
        return -1;
    if (rc) {
        snprintf(who, sizeof who, "target%s", w->tag);
        fail(p, who, tr_backend_error());
        return -1;
    }
    st_begin(p->s_queue_put);
    int ok = tr_queue_put_flow(&p->hidden_queue, h, tr_flow_id(h->batch_index, TR_HOP_HIDDEN));
    st_end(p->s_queue_put);
    return ok ? 0 : -1;
}

static void *target_main(void *arg)
{
    target_worker *w = arg;
    tr_pipeline *p = w->p;
    int async = p->cfg->postprocess_async;
    char who[32];
    snprintf(who, sizeof who, "target%s", w->tag);
    register_thread(p, "target", w->tag, w->device);
    while (!stopping(p)) {
        st_begin(p->s_batch_wait);
        tr_batch *b = tr_queue_pop(&p->batch_queue);
        st_end(p->s_batch_wait);
        if (!b)
            break;
        st_flow_in(tr_flow_id(b->index, TR_HOP_BATCH));
        uint64_t batch_index = b->index;
        int staging = 0;
        if (async) {
            /* waits only when the post thread still packs both staging buffers */
            st_begin(p->s_handoff);
            void *item = tr_queue_pop(&w->free_staging);
            st_end(p->s_handoff);
            if (!item)
                break;
            staging = (int)(intptr_t)item - 1;
        }
        st_begin(p->s_forward);
        tr_spin_us(p->cfg->target_delay_us);
        int rc = p->be->target_forward(w->target, b, staging);
        st_end(p->s_forward);
        tr_queue_put(&p->batch_free, b);
        if (rc) {
            fail(p, who, tr_backend_error());
            break;
        }
        if (async) {
            w->staging_batch[staging] = batch_index; /* read by post after its pop */
            if (!tr_queue_put_flow(&w->filled, (void *)(intptr_t)(staging + 1),
                                   tr_flow_id(batch_index, TR_HOP_STAGING)))
                break;
        } else if (produce_hidden(w, 0, NULL)) {
            break;
        }
    }
    st_thread_unregister();
    return NULL;
}

static void *post_main(void *arg)
{
    target_worker *w = arg;
    tr_pipeline *p = w->p;
    register_thread(p, "post", w->tag, w->device);
    while (!stopping(p)) {
        st_begin(p->s_handoff_wait);
        void *item = tr_queue_pop(&w->filled);
        st_end(p->s_handoff_wait);
        if (!item)
            break;
        st_flow_in(tr_flow_id(w->staging_batch[(intptr_t)item - 1], TR_HOP_STAGING));
        if (produce_hidden(w, (int)(intptr_t)item - 1, &w->free_staging))
            break;
    }
    st_thread_unregister();
    return NULL;
}

/* ---- drafter ----------------------------------------------------------------------------- */

static void report_step(tr_pipeline *p, int rank, uint64_t step, uint64_t tokens,
                        const tr_step_metrics *m)
{
    pthread_mutex_lock(&p->report_lock);
    tr_step_report *r = &p->ring[step % REPORT_RING];
    while (r->step != step && !p->stopping) /* main has not read step - REPORT_RING yet */
        pthread_cond_wait(&p->report_cond, &p->report_lock);
    if (r->step == step) {
        r->tokens += tokens;
        r->loss_sum += m->loss;
        if (m->have_accuracy) {
            r->n_accuracy++;
            r->accuracy_sum += m->accuracy;
            r->topk_sum += m->topk_accuracy;
        }
        if (rank == 0) {
            r->grad_norm = m->grad_norm;
            r->skipped = m->skipped;
        }
        if (++r->n_reported == p->cfg->n_drafters)
            pthread_cond_broadcast(&p->report_cond);
    }
    pthread_mutex_unlock(&p->report_lock);
}

static void *drafter_main(void *arg)
{
    drafter_worker *w = arg;
    tr_pipeline *p = w->p;
    const tr_config *cfg = p->cfg;
    const tr_backend *be = p->be;
    tr_drafter *d = w->drafter;
    char who[32];
    snprintf(who, sizeof who, "drafter%s", w->tag);
    register_thread(p, "drafter", w->tag, w->device);
    for (uint64_t step = 1; step <= (uint64_t)cfg->steps && !stopping(p); step++) {
        tr_step_metrics m;
        memset(&m, 0, sizeof m);
        st_begin(p->s_queue_wait);
        tr_hidden *h = tr_queue_pop(&p->hidden_queue);
        st_end(p->s_queue_wait);
        if (!h)
            break;
        st_flow_in(tr_flow_id(h->batch_index, TR_HOP_HIDDEN));
        st_begin(p->s_h2d);
        int rc = be->drafter_h2d(d, h);
        st_end(p->s_h2d);
        uint64_t tokens = h->n_tokens, batch_index = h->batch_index;
        tr_queue_put(&p->hidden_free, h);
        if (rc)
            goto failed;
        tr_sample_anchors(w->anchors, cfg->seed, batch_index, cfg->batch, cfg->anchors,
                          cfg->seq_len, cfg->block_size);
        st_begin(p->s_forward);
        tr_spin_us(cfg->drafter_delay_us);
        rc = be->drafter_forward(d, w->anchors);
        st_end(p->s_forward);
        if (rc)
            goto failed;
        st_begin(p->s_loss);
        rc = be->drafter_loss(d, step % (uint64_t)cfg->metrics_every == 0, &m);
        st_end(p->s_loss);
        if (rc)
            goto failed;
        st_begin(p->s_backward);
        rc = be->drafter_backward(d);
        st_end(p->s_backward);
        if (rc)
            goto failed;
        if (cfg->n_drafters > 1) {
            st_begin(p->s_allreduce);
            rc = be->drafter_allreduce(d);
            st_end(p->s_allreduce);
            if (rc) {
                if (stopping(p))
                    break; /* aborted by shutdown */
                goto failed;
            }
        }
        st_begin(p->s_optimizer);
        rc = be->drafter_optimizer(d, &m);
        st_end(p->s_optimizer);
        if (rc)
            goto failed;
        report_step(p, w->rank, step, tokens, &m);
        continue;
    failed:
        fail(p, who, tr_backend_error());
        break;
    }
    st_thread_unregister();
    return NULL;
}

/* ---- setup and teardown ------------------------------------------------------------------ */

static int setup_error(char *err, size_t n, const char *what)
{
    snprintf(err, n, "%s", what);
    return -1;
}

int tr_pipeline_create(tr_pipeline **out, const tr_config *cfg, const tr_backend *be,
                       st_trace *trace, tr_data *data, char *err, size_t n)
{
    *out = NULL;
    tr_pipeline *p = calloc(1, sizeof *p);
    if (!p) {
        tr_data_close(data);
        return setup_error(err, n, "out of memory");
    }
    p->data = data;
    p->cfg = cfg;
    p->be = be;
    p->trace = trace;
    pthread_mutex_init(&p->report_lock, NULL);
    pthread_cond_init(&p->report_cond, NULL);
    for (int i = 0; i < REPORT_RING; i++)
        p->ring[i].step = i ? (uint64_t)i : REPORT_RING;
    *out = p; /* from here on, tr_pipeline_destroy cleans up whatever was made */

    struct { st_stage *id; const char *name; st_kind kind; } stages[] = {
        {&p->s_load, "load", ST_WORK},
        {&p->s_batch_wait, "batch_wait", ST_WAIT_INPUT},
        {&p->s_forward, "forward", ST_WORK},
        {&p->s_postprocess, "postprocess", ST_WORK},
        {&p->s_queue_put, "queue_put", ST_WAIT_OUTPUT},
        {&p->s_handoff, "handoff", ST_WAIT_OUTPUT},
        {&p->s_handoff_wait, "handoff_wait", ST_WAIT_INPUT},
        {&p->s_queue_wait, "queue_wait", ST_WAIT_INPUT},
        {&p->s_h2d, "h2d", ST_COPY},
        {&p->s_loss, "loss", ST_WORK},
        {&p->s_backward, "backward", ST_WORK},
        {&p->s_allreduce, "allreduce", ST_COMM},
        {&p->s_optimizer, "optimizer", ST_WORK},
    };
    for (size_t i = 0; i < sizeof stages / sizeof stages[0]; i++) {
        int id = st_stage_register(trace, stages[i].name, stages[i].kind);
        if (id < 0)
            return setup_error(err, n, st_last_error());
        *stages[i].id = (st_stage)id;
    }
    p->c_queue_depth = st_counter_register(trace, "queue_depth", "items");
    p->c_batch_depth = st_counter_register(trace, "batch_queue_depth", "items");
    if (p->c_queue_depth < 0 || p->c_batch_depth < 0)
        return setup_error(err, n, st_last_error());

    tr_backend_set_trace(trace); /* the backend's own stages (host waits, copies) */
    if (be->open(&p->ctx, cfg)) {
        snprintf(err, n, "%s backend: %s", be->name, tr_backend_error());
        return -1;
    }

    /* batches: queue + one per target in forward + one being loaded */
    p->n_batches = cfg->batch_queue_depth + cfg->n_targets + 1;
    size_t rows = (size_t)cfg->batch * cfg->seq_len;
    p->batches = calloc((size_t)p->n_batches, sizeof *p->batches);
    p->batch_memory = malloc((size_t)p->n_batches * rows * 3 * sizeof(int32_t));
    if (!p->batches || !p->batch_memory ||
        tr_queue_init(&p->batch_queue, cfg->batch_queue_depth, p->c_batch_depth) ||
        tr_queue_init(&p->batch_free, p->n_batches, -1))
        return setup_error(err, n, "out of memory for the batches");
    for (int i = 0; i < p->n_batches; i++) {
        tr_batch *b = &p->batches[i];
        b->n_seqs = cfg->batch;
        b->seq_len = cfg->seq_len;
        b->tokens = p->batch_memory + (size_t)i * rows * 3;
        b->doc_ids = b->tokens + rows;
        b->positions = b->doc_ids + rows;
        tr_queue_put(&p->batch_free, b);
    }

    /* hidden-state slots: queue + one per producer packing + one per drafter copying in */
    p->n_slots = cfg->queue_depth + cfg->n_targets + cfg->n_drafters;
    p->slots = calloc((size_t)p->n_slots, sizeof *p->slots);
    if (!p->slots || tr_queue_init(&p->hidden_queue, cfg->queue_depth, p->c_queue_depth) ||
        tr_queue_init(&p->hidden_free, p->n_slots, -1))
        return setup_error(err, n, "out of memory for the hidden-state slots");
    for (int i = 0; i < p->n_slots; i++) {
        if (be->hidden_alloc(p->ctx, &p->slots[i])) {
            snprintf(err, n, "%s backend: %s", be->name, tr_backend_error());
            return -1;
        }
        p->n_slots_allocated++;
        tr_queue_put(&p->hidden_free, &p->slots[i]);
    }

    p->targets = calloc((size_t)cfg->n_targets, sizeof *p->targets);
    p->drafters = calloc((size_t)cfg->n_drafters, sizeof *p->drafters);
    if (!p->targets || !p->drafters)
        return setup_error(err, n, "out of memory");
    int n_staging = cfg->postprocess_async ? 2 : 1;
    for (int i = 0; i < cfg->n_targets; i++) {
        target_worker *w = &p->targets[i];
        w->p = p;
        w->index = i;
        w->device = cfg->target_devices[i];
        thread_tag(w->tag, sizeof w->tag, cfg->target_devices, cfg->n_targets, i);
        if (tr_queue_init(&w->filled, n_staging, -1) ||
            tr_queue_init(&w->free_staging, n_staging, -1))
            return setup_error(err, n, "out of memory");
        for (int k = 0; k < n_staging; k++)
            tr_queue_put(&w->free_staging, (void *)(intptr_t)(k + 1));
        if (be->target_create(p->ctx, i, w->device, n_staging, &w->target)) {
            snprintf(err, n, "%s backend: %s", be->name, tr_backend_error());
            return -1;
        }
    }
    for (int i = 0; i < cfg->n_drafters; i++) {
        drafter_worker *w = &p->drafters[i];
        w->p = p;
        w->rank = i;
        w->device = cfg->drafter_devices[i];
        thread_tag(w->tag, sizeof w->tag, cfg->drafter_devices, cfg->n_drafters, i);
        w->anchors = malloc((size_t)cfg->batch * cfg->anchors * sizeof *w->anchors);
        if (!w->anchors)
            return setup_error(err, n, "out of memory");
        if (be->drafter_create(p->ctx, i, w->device, &w->drafter)) {
            snprintf(err, n, "%s backend: %s", be->name, tr_backend_error());
            return -1;
        }
    }
    return 0;
}

static int start_thread(pthread_t *t, int *started, void *(*fn)(void *), void *arg, char *err,
                        size_t n)
{
    int rc = pthread_create(t, NULL, fn, arg);
    if (rc) {
        snprintf(err, n, "cannot start a thread: %s", strerror(rc));
        return -1;
    }
    *started = 1;
    return 0;
}

int tr_pipeline_start(tr_pipeline *p, char *err, size_t n)
{
    const tr_config *cfg = p->cfg;
    for (int i = 0; i < cfg->n_drafters; i++)
        if (start_thread(&p->drafters[i].thread, &p->drafters[i].started, drafter_main,
                         &p->drafters[i], err, n))
            return -1;
    for (int i = 0; i < cfg->n_targets; i++) {
        target_worker *w = &p->targets[i];
        if (cfg->postprocess_async &&
            start_thread(&w->post_thread, &w->post_started, post_main, w, err, n))
            return -1;
        if (start_thread(&w->thread, &w->started, target_main, w, err, n))
            return -1;
    }
    return start_thread(&p->loader_thread, &p->loader_started, loader_main, p, err, n);
}

int tr_pipeline_wait_step(tr_pipeline *p, uint64_t step, int timeout_ms, tr_step_report *out)
{
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += timeout_ms / 1000;
    deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    int result = 0;
    pthread_mutex_lock(&p->report_lock);
    tr_step_report *r = &p->ring[step % REPORT_RING];
    for (;;) {
        if (p->failed) {
            result = -1;
            break;
        }
        if (r->step == step && r->n_reported == p->cfg->n_drafters) {
            *out = *r;
            memset(r, 0, sizeof *r);
            r->step = step + REPORT_RING;
            pthread_cond_broadcast(&p->report_cond);
            result = 1;
            break;
        }
        if (pthread_cond_timedwait(&p->report_cond, &p->report_lock, &deadline) == ETIMEDOUT)
            break;
    }
    pthread_mutex_unlock(&p->report_lock);
    return result;
}

void tr_pipeline_profiler(tr_pipeline *p, int on)
{
    if (p->ctx && p->be->profiler)
        p->be->profiler(p->ctx, on);
}

int tr_pipeline_queue_depth(tr_pipeline *p)
{
    return tr_queue_depth(&p->hidden_queue);
}

const char *tr_pipeline_error(tr_pipeline *p)
{
    return p->error[0] ? p->error : "unknown failure";
}

void tr_pipeline_stop(tr_pipeline *p)
{
    if (!p || p->stopped)
        return;
    p->stopped = 1;
    atomic_store(&p->stop, 1);
    if (p->batch_queue.items) {
        tr_queue_close(&p->batch_queue);
        tr_queue_close(&p->batch_free);
    }
    if (p->hidden_queue.items) {
        tr_queue_close(&p->hidden_queue);
        tr_queue_close(&p->hidden_free);
    }
    for (int i = 0; p->targets && i < p->cfg->n_targets; i++) {
        if (p->targets[i].filled.items)
            tr_queue_close(&p->targets[i].filled);
        if (p->targets[i].free_staging.items)
            tr_queue_close(&p->targets[i].free_staging);
    }
    if (p->ctx)
        p->be->abort(p->ctx);
    pthread_mutex_lock(&p->report_lock);
    p->stopping = 1;
    pthread_cond_broadcast(&p->report_cond);
    pthread_mutex_unlock(&p->report_lock);

    if (p->loader_started)
        pthread_join(p->loader_thread, NULL);
    for (int i = 0; p->targets && i < p->cfg->n_targets; i++) {
        if (p->targets[i].started)
            pthread_join(p->targets[i].thread, NULL);
        if (p->targets[i].post_started)
            pthread_join(p->targets[i].post_thread, NULL);
    }
    for (int i = 0; p->drafters && i < p->cfg->n_drafters; i++)
        if (p->drafters[i].started)
            pthread_join(p->drafters[i].thread, NULL);
}

void tr_pipeline_destroy(tr_pipeline *p)
{
    if (!p)
        return;
    tr_pipeline_stop(p);
    for (int i = 0; p->targets && i < p->cfg->n_targets; i++) {
        p->be->target_destroy(p->targets[i].target);
        tr_queue_destroy(&p->targets[i].filled);
        tr_queue_destroy(&p->targets[i].free_staging);
    }
    for (int i = 0; p->drafters && i < p->cfg->n_drafters; i++) {
        p->be->drafter_destroy(p->drafters[i].drafter);
        free(p->drafters[i].anchors);
    }
    for (int i = 0; i < p->n_slots_allocated; i++)
        p->be->hidden_free(p->ctx, &p->slots[i]);
    if (p->ctx)
        p->be->close(p->ctx);
    tr_queue_destroy(&p->batch_queue);
    tr_queue_destroy(&p->batch_free);
    tr_queue_destroy(&p->hidden_queue);
    tr_queue_destroy(&p->hidden_free);
    tr_data_close(p->data);
    free(p->targets);
    free(p->drafters);
    free(p->slots);
    free(p->batches);
    free(p->batch_memory);
    pthread_mutex_destroy(&p->report_lock);
    pthread_cond_destroy(&p->report_cond);
    free(p);
}
