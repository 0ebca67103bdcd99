/* dist.c: the trainer as N processes over MPI (see dist.h, layout.h).
 *
 * Target rank   loader thread: load (it draws every global batch and keeps its own, so batch b
 *               holds the same tokens as in a single-process run), queue_put into a local
 *               batch queue; main thread: batch_wait, forward, postprocess (into one host slot),
 *               queue_put (waits for a credit from the batch's drafter: wait_output), send
 *               (the slot to that drafter rank: copy).
 * Drafter rank  receiver thread (no stages): keeps up to --queue-depth slots posted as
 *               receives, sends one credit to an item's target as it posts the slot for it,
 *               and hands completed items to the drafter in step order; main thread: the
 *               single-process drafter loop (queue_wait, h2d, forward, loss, backward,
 *               allreduce, optimizer) with the all-reduce over the drafter ranks: MPI
 *               (reduce to the first drafter, then broadcast: every rank gets the same bits)
 *               for a backend that exposes host gradients (CPU), the backend's own NCCL
 *               communicator over the drafter processes otherwise (CUDA).
 *
 * The channel is credit-based: a target sends an item only against a credit, and a drafter
 * rank grants a credit only for a slot it has posted as a receive, so at most --queue-depth
 * items per drafter rank are in flight or waiting, and a send never waits for the receiver's
 * compute. Slots are host memory from the backend (pinned on CUDA): the channel is host-staged
 * MPI on both backends; MPI moves it over shared memory or the network.
 *
 * MPI is initialised with MPI_THREAD_MULTIPLE (the receiver and the drafter both call it).
 * Every wait polls (MPI_Test): back to back for its first POLL_SPINS polls, since a large item
 * moves in fragments that advance only while MPI is called, then with sleeps growing from 5 to
 * 100 us, so that a rank blocked on a peer neither burns a core nor misses a stop request.
 *
 * Traces: rank 0 makes the run id and broadcasts it; each rank opens its own file
 * (st_rank_path) with its rank, world size, local rank and device; clocks are measured against
 * rank 0's by ping-pong (CLOCK_PROBES exchanges, st_clock_estimate), widened by both ends' TSC
 * map errors (st_clock_sync_widen), after open and before close.
 *
 * Flows: the ids of the single-process trainer (pipeline.c), global batch index << 16 | hop,
 * unique across the run's ranks since every global batch has one owner: loader -> target
 * (hop 0) inside the target rank, target -> drafter (hop 2) across ranks, st_flow_out as the
 * target hands the item to MPI (first thing in its send), st_flow_in on the drafter rank
 * right after its queue_wait. */
#include "dist.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data.h"

static long env_long(const char *name)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return -1;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    return errno || *end || x < 0 ? -1 : x;
}

/* Only an MPI launcher's variables: they promise a rank 0 started beside this process.
 * torchrun's RANK does not (RANK=1 may be all there is), so it is not read here. */
int tr_dist_env_rank(void)
{
    const char *names[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        long v = env_long(names[i]);
        if (v >= 0)
            return (int)v;
    }
    return 0;
}

/* Started by an MPI launcher? *size: the world size it announces, or -1 (PMIx says only the
 * rank). */
static int mpi_launched(long *size)
{
    long s = env_long("OMPI_COMM_WORLD_SIZE");
    if (s < 0)
        s = env_long("PMI_SIZE");
    *size = s;
    return s >= 0 || getenv("PMIX_RANK") != NULL;
}

/* torchrun (and any launcher that sets only RANK/WORLD_SIZE/MASTER_ADDR): Open MPI cannot
 * join processes from that alone, and the trainer has no store of its own. */
static int refuse_plain_launcher(char *err, size_t n)
{
    long world = env_long("WORLD_SIZE");
    if (world > 1) {
        snprintf(err, n, "WORLD_SIZE=%ld but no MPI launcher started this process (torchrun?): "
                         "the trainer's ranks join over MPI, which cannot start from RANK, "
                         "WORLD_SIZE and MASTER_ADDR alone; use mpirun -np %ld build/trainer ... "
                         "(README, Multi-process runs)", world, world);
        return TR_DIST_REFUSED;
    }
    return TR_DIST_SINGLE;
}

#ifndef ST_HAVE_MPI

int tr_dist_detect(int *argc, char ***argv, char *err, size_t n)
{
    (void)argc;
    (void)argv;
    long size;
    if (!mpi_launched(&size))
        return refuse_plain_launcher(err, n);
    if (size > 1 || (size < 0 && env_long("PMIX_RANK") > 0)) {
        snprintf(err, n, "started as one of several MPI processes, but this trainer was built "
                         "without MPI (make printed '✗ MPI'): install openmpi-bin "
                         "libopenmpi-dev and rebuild, or start one process");
        return TR_DIST_REFUSED;
    }
    return TR_DIST_SINGLE;
}

int tr_dist_main(const tr_config *cfg, const tr_backend *backend, struct tr_data *data,
                 int argc, char **argv)
{
    (void)cfg;
    (void)backend;
    (void)argc;
    (void)argv;
    tr_data_close(data);
    fprintf(stderr, "trainer: internal: a multi-process run in a build without MPI\n");
    return 1;
}

const char *tr_dist_version_note(void)
{
    return "";
}

#else /* ST_HAVE_MPI */

#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <time.h>

#include "layout.h"
#include "pipeline.h"
#include "queue.h"
#include "stagetrace.h"
#include "trace_path.h"

#if defined(ST_WITH_NCCL) && defined(TR_HAVE_CUDA_BACKEND) && __has_include(<nccl.h>)
#include <nccl.h>
#define DIST_NCCL 1
#else
#define DIST_NCCL 0
#endif

#define CLOCK_PROBES 32
#define EXIT_RUNTIME 1
#define EXIT_USAGE 2
#define EXIT_INTERRUPTED 130

enum { TAG_HEADER = 11, TAG_TAPS, TAG_INTS, TAG_CREDIT, TAG_CLOCK };

const char *tr_dist_version_note(void)
{
    return "; multi-process: mpi";
}

int tr_dist_detect(int *argc, char ***argv, char *err, size_t n)
{
    long size;
    if (!mpi_launched(&size))
        return refuse_plain_launcher(err, n);
    if (size == 1)
        return TR_DIST_SINGLE;
    int provided = 0;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
        snprintf(err, n, "MPI_Init_thread failed");
        return TR_DIST_REFUSED;
    }
    int world = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (world == 1) {
        MPI_Finalize();
        return TR_DIST_SINGLE;
    }
    if (provided < MPI_THREAD_MULTIPLE) {
        snprintf(err, n, "this MPI library offers no MPI_THREAD_MULTIPLE, which a "
                         "multi-process run needs (Open MPI 4 has it)");
        MPI_Finalize();
        return TR_DIST_REFUSED;
    }
    return TR_DIST_MULTI;
}

/* ---- one rank's state -------------------------------------------------------------------- */

typedef struct rank_state {
    tr_config cfg; /* this rank's copy: one role on one device */
    const tr_backend *be;
    tr_layout layout;
    int rank, world, local_rank, role, index, device;
    MPI_Comm comm;     /* a duplicate of MPI_COMM_WORLD */
    MPI_Comm drafters; /* the drafter ranks (MPI_COMM_NULL on targets) */
    st_trace *trace;
    int tracing;
    char run_id[65];
    char path[512];
    st_stage s_load, s_queue_put, s_send, s_batch_wait, s_forward, s_postprocess,
        s_queue_wait, s_h2d, s_loss, s_backward, s_allreduce, s_optimizer;
    int c_queue_depth;
    tr_context *ctx;
    tr_data *data;
    atomic_int stop;
    pthread_mutex_t error_lock;
    char error[1024];
    /* what the rank did, for its closing line */
    uint64_t items, tokens;
} rank_state;

static void rank_fail(rank_state *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void rank_fail(rank_state *r, const char *fmt, ...)
{
    pthread_mutex_lock(&r->error_lock);
    if (!r->error[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->error, sizeof r->error, fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&r->error_lock);
    atomic_store(&r->stop, 1);
}

static int stopping(rank_state *r)
{
    if (st_interrupted())
        atomic_store(&r->stop, 1);
    return atomic_load(&r->stop);
}

static void sleep_us(long us)
{
    struct timespec t = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&t, NULL);
}

/* Between two polls of MPI: none for the first POLL_SPINS (a transfer under way advances only
 * while MPI is called: sleeping between its fragments made a 1.5 MB item take milliseconds),
 * then a sleep of 5 us doubling up to 100 us. *polls counts the polls since progress. */
#define POLL_SPINS 2000
static void poll_pause(long *polls)
{
    long n = (*polls)++;
    if (n < POLL_SPINS)
        return;
    n -= POLL_SPINS;
    sleep_us(n >= 5 ? 100 : 5L << n);
}

/* Waits for every request; 0, or -1 when the rank stops meanwhile (the requests are then left
 * to MPI_Abort). */
static int wait_all(rank_state *r, int n, MPI_Request *reqs)
{
    long polls = 0;
    for (;;) {
        int done = 0;
        MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE);
        if (done)
            return 0;
        if (stopping(r))
            return -1;
        poll_pause(&polls);
    }
}

static void maybe_die(const rank_state *r, uint64_t step)
{
    if (r->cfg.die_step && r->rank == r->cfg.die_rank && step == (uint64_t)r->cfg.die_step) {
        fflush(stdout);
        raise(SIGKILL);
    }
}

/* Sizes of one item's three messages. */
static size_t taps_bytes(const tr_config *cfg)
{
    return (size_t)cfg->batch * cfg->seq_len * cfg->n_taps * cfg->dim * sizeof(uint16_t);
}

static size_t ints_count(const tr_config *cfg)
{
    return (size_t)cfg->batch * cfg->seq_len * 4;
}

/* ---- clocks ------------------------------------------------------------------------------ */

/* The larger bound of two map measurements taken before and after an exchange. The map
 * error is linear in time (a fixed map against CLOCK_MONOTONIC's steady rate), so the larger
 * |error| + half bracket of its two ends bounds it at every instant in between, and so at the
 * kept probe's. */
static st_clock_map map_larger(st_clock_map a, st_clock_map b)
{
    __int128 ea = a.error_ns, eb = b.error_ns;
    __int128 ba = (ea < 0 ? -ea : ea) + a.half_bracket_ns, bb = (eb < 0 ? -eb : eb) + b.half_bracket_ns;
    return bb > ba ? b : a;
}

/* Every rank measures its clock against rank 0's: CLOCK_PROBES round trips, rank 0 answering
 * each with st_now_ns(), the best kept (st_clock_estimate). Both ends time the probes with
 * their own TSC map, whose error against CLOCK_MONOTONIC the offset would carry unseen: each
 * measures it before and after the exchange (st_clock_map_measure), rank 0 sends its larger
 * one to the rank right after the last reply, and the rank widens its uncertainty by both
 * (st_clock_sync_widen). Each rank records its own larger one; rank 0's, the one it sent the
 * last rank, with offset 0 and uncertainty 0 (its map is the reference). Collective over
 * r->comm. */
static void clock_sync(rank_state *r, int at)
{
    st_clock_sync sync = {0, 0, 0};
    st_clock_map before, after, own;
    if (r->rank == 0) {
        own = (st_clock_map){0, 0};
        for (int peer = 1; peer < r->world; peer++) {
            st_clock_map_measure(&before);
            for (int k = 0; k < CLOCK_PROBES; k++) {
                int64_t probe;
                MPI_Recv(&probe, 1, MPI_INT64_T, peer, TAG_CLOCK, r->comm, MPI_STATUS_IGNORE);
                int64_t now = st_now_ns();
                MPI_Send(&now, 1, MPI_INT64_T, peer, TAG_CLOCK, r->comm);
            }
            st_clock_map_measure(&after);
            own = map_larger(before, after);
            int64_t map[2] = {own.error_ns, own.half_bracket_ns};
            MPI_Send(map, 2, MPI_INT64_T, peer, TAG_CLOCK, r->comm);
        }
        sync.local_ns = st_now_ns();
    } else {
        st_clock_probe probes[CLOCK_PROBES];
        st_clock_map_measure(&before);
        for (int k = 0; k < CLOCK_PROBES; k++) {
            probes[k].send_ns = st_now_ns();
            MPI_Send(&probes[k].send_ns, 1, MPI_INT64_T, 0, TAG_CLOCK, r->comm);
            MPI_Recv(&probes[k].remote_ns, 1, MPI_INT64_T, 0, TAG_CLOCK, r->comm,
                     MPI_STATUS_IGNORE);
            probes[k].recv_ns = st_now_ns();
        }
        st_clock_map_measure(&after);
        own = map_larger(before, after);
        int64_t map[2];
        MPI_Recv(map, 2, MPI_INT64_T, 0, TAG_CLOCK, r->comm, MPI_STATUS_IGNORE);
        st_clock_map rank0 = {map[0], map[1]};
        if (st_clock_estimate(probes, CLOCK_PROBES, &sync) != ST_OK ||
            st_clock_sync_widen(&sync, &own, &rank0) != ST_OK) {
            fprintf(stderr, "trainer: rank %d: no clock offset: %s\n", r->rank, st_last_error());
            return;
        }
    }
    if (r->tracing && (st_clock_sync_record(r->trace, at, &sync) != ST_OK ||
                       st_clock_map_record(r->trace, at, &own) != ST_OK))
        fprintf(stderr, "trainer: rank %d: cannot record the clock offset: %s\n", r->rank,
                st_last_error());
}

/* ---- target rank ------------------------------------------------------------------------- */

typedef struct target_side {
    rank_state *r;
    tr_target *target;
    tr_queue batch_queue, batch_free;
    tr_batch *batches;
    int32_t *batch_memory;
    int n_batches;
    uint64_t total_batches; /* global: steps * drafters */
    tr_hidden slot;
    int slot_allocated;
    pthread_t loader;
    int loader_started;
} target_side;

static void *loader_main(void *arg)
{
    target_side *t = arg;
    rank_state *r = t->r;
    st_thread_register(r->trace, "loader", "loader", -1, r->rank);
    uint64_t next = 0;
    while (!stopping(r)) {
        uint64_t g = next;
        while (g < t->total_batches && tr_layout_owner(&r->layout, g) != r->index)
            g++;
        if (g >= t->total_batches)
            break;
        tr_batch *b = tr_queue_pop(&t->batch_free);
        if (!b)
            break;
        st_begin(r->s_load);
        for (; next < g; next++) /* the other targets' batches: drawn, not kept */
            tr_data_next(r->data, b);
        b->index = g;
        tr_data_next(r->data, b);
        next = g + 1;
        st_end(r->s_load);
        st_begin(r->s_queue_put);
        int ok = tr_queue_put_flow(&t->batch_queue, b, tr_flow_id(g, TR_HOP_BATCH));
        st_end(r->s_queue_put);
        if (!ok)
            break;
    }
    if (stopping(r))
        tr_queue_close(&t->batch_queue); /* the target may be waiting for a batch */
    st_thread_unregister();
    return NULL;
}

static int target_setup(target_side *t, char *err, size_t n)
{
    rank_state *r = t->r;
    const tr_config *cfg = &r->cfg;
    t->total_batches = (uint64_t)cfg->steps * (uint64_t)r->layout.n_drafters;
    t->n_batches = cfg->batch_queue_depth + 2;
    size_t rows = (size_t)cfg->batch * cfg->seq_len;
    t->batches = calloc((size_t)t->n_batches, sizeof *t->batches);
    t->batch_memory = malloc((size_t)t->n_batches * rows * 3 * sizeof(int32_t));
    if (!t->batches || !t->batch_memory ||
        tr_queue_init(&t->batch_queue, cfg->batch_queue_depth, -1) ||
        tr_queue_init(&t->batch_free, t->n_batches, -1)) {
        snprintf(err, n, "out of memory for the batches");
        return -1;
    }
    for (int i = 0; i < t->n_batches; i++) {
        tr_batch *b = &t->batches[i];
        b->n_seqs = cfg->batch;
        b->seq_len = cfg->seq_len;
        b->tokens = t->batch_memory + (size_t)i * rows * 3;
        b->doc_ids = b->tokens + rows;
        b->positions = b->doc_ids + rows;
        tr_queue_put(&t->batch_free, b);
    }
    if (r->be->hidden_alloc(r->ctx, &t->slot) ||
        (t->slot_allocated = 1,
         r->be->target_create(r->ctx, 0, r->device, 1, &t->target))) {
        snprintf(err, n, "%s backend: %s", r->be->name, tr_backend_error());
        return -1;
    }
    return 0;
}

/* The target's loop on the main thread: every batch it owns, in index order, to its drafter. */
static void target_run(target_side *t)
{
    rank_state *r = t->r;
    const tr_layout *L = &r->layout;
    int *credits = calloc((size_t)L->n_drafters, sizeof *credits);
    if (!credits) {
        rank_fail(r, "out of memory");
        return;
    }
    uint64_t n_items = 0;
    for (int d = 0; d < L->n_drafters; d++)
        n_items += tr_layout_edge_items(L, r->index, d, (uint64_t)r->cfg.steps);
    size_t tb = taps_bytes(&r->cfg), ni = ints_count(&r->cfg);
    for (uint64_t k = 1; k <= n_items && !stopping(r); k++) {
        st_begin(r->s_batch_wait);
        tr_batch *b = tr_queue_pop(&t->batch_queue);
        st_end(r->s_batch_wait);
        if (!b)
            break;
        uint64_t index = b->index;
        st_flow_in(tr_flow_id(index, TR_HOP_BATCH));
        st_begin(r->s_forward);
        tr_spin_us(r->cfg.target_delay_us);
        int rc = r->be->target_forward(t->target, b, 0);
        st_end(r->s_forward);
        tr_queue_put(&t->batch_free, b);
        if (rc) {
            rank_fail(r, "target%d: %s", r->index, tr_backend_error());
            break;
        }
        st_begin(r->s_postprocess);
        rc = r->be->target_postprocess(t->target, 0, &t->slot);
        st_end(r->s_postprocess);
        if (rc) {
            rank_fail(r, "target%d: %s", r->index, tr_backend_error());
            break;
        }
        int drafter = (int)(index % (uint64_t)L->n_drafters);
        int peer = L->drafter_rank[drafter];
        /* a credit: the drafter rank has a slot posted for this item */
        st_begin(r->s_queue_put);
        if (!credits[drafter]) {
            int granted = 0;
            MPI_Request req;
            MPI_Irecv(&granted, 1, MPI_INT, peer, TAG_CREDIT, r->comm, &req);
            if (wait_all(r, 1, &req)) {
                st_end(r->s_queue_put);
                break;
            }
            credits[drafter] += granted;
        }
        credits[drafter]--;
        st_end(r->s_queue_put);
        uint64_t header[3] = {index, t->slot.n_tokens, (uint64_t)r->index};
        st_begin(r->s_send);
        st_flow_out(tr_flow_id(index, TR_HOP_HIDDEN));
        MPI_Request reqs[3];
        MPI_Isend(header, 3, MPI_UINT64_T, peer, TAG_HEADER, r->comm, &reqs[0]);
        MPI_Isend(t->slot.taps_bf16, (int)tb, MPI_BYTE, peer, TAG_TAPS, r->comm, &reqs[1]);
        MPI_Isend(t->slot.predictions, (int)ni, MPI_INT32_T, peer, TAG_INTS, r->comm,
                  &reqs[2]);
        rc = wait_all(r, 3, reqs);
        st_end(r->s_send);
        if (rc)
            break;
        r->items = k;
        r->tokens += t->slot.n_tokens;
        st_step(k, t->slot.n_tokens);
        maybe_die(r, k);
    }
    free(credits);
}

static void target_teardown(target_side *t)
{
    rank_state *r = t->r;
    if (t->batch_queue.items) {
        tr_queue_close(&t->batch_queue);
        tr_queue_close(&t->batch_free);
    }
    if (t->loader_started)
        pthread_join(t->loader, NULL);
    if (t->target)
        r->be->target_destroy(t->target);
    if (t->slot_allocated)
        r->be->hidden_free(r->ctx, &t->slot);
    tr_queue_destroy(&t->batch_queue);
    tr_queue_destroy(&t->batch_free);
    free(t->batches);
    free(t->batch_memory);
}

/* ---- drafter rank ------------------------------------------------------------------------ */

typedef struct posted {
    tr_hidden *slot;
    uint64_t header[3];
    MPI_Request reqs[3];
} posted;

typedef struct drafter_side {
    rank_state *r;
    tr_drafter *drafter;
    int n_sources, sources[TR_MAX_RANKS]; /* target indices */
    tr_hidden *slots;
    int n_slots, n_allocated;
    tr_queue ready, free_slots;
    posted *pending; /* ring of n_slots */
    pthread_t receiver;
    int receiver_started;
    int32_t *anchors;
} drafter_side;

/* Posts receives for the items of steps next.. while fewer than --queue-depth items are
 * posted (credited) or received and waiting in `ready`, granting one credit per posted slot;
 * completes them in step order and hands them to the drafter. The slot pool holds one more
 * than the depth: the one the drafter copies in (h2d) is no longer in the queue. Only this
 * thread puts into `ready`, so the depth it reads never undercounts. */
static uint64_t receive_items(drafter_side *d)
{
    rank_state *r = d->r;
    const tr_config *cfg = &r->cfg;
    uint64_t steps = (uint64_t)cfg->steps, next = 1, done = 0;
    int head = 0, count = 0;
    size_t tb = taps_bytes(cfg), ni = ints_count(cfg);
    long polls = 0;
    while (done < steps && !stopping(r)) {
        int progressed = 0;
        while (next <= steps && count + tr_queue_depth(&d->ready) < cfg->queue_depth &&
               (count == 0 || tr_queue_depth(&d->free_slots) > 0)) {
            tr_hidden *h = tr_queue_pop(&d->free_slots); /* waits only with nothing posted */
            if (!h)
                return done;
            int target = d->sources[(next - 1) % (uint64_t)d->n_sources];
            int peer = r->layout.target_rank[target];
            posted *p = &d->pending[(head + count) % d->n_slots];
            p->slot = h;
            MPI_Irecv(p->header, 3, MPI_UINT64_T, peer, TAG_HEADER, r->comm, &p->reqs[0]);
            MPI_Irecv(h->taps_bf16, (int)tb, MPI_BYTE, peer, TAG_TAPS, r->comm, &p->reqs[1]);
            MPI_Irecv(h->predictions, (int)ni, MPI_INT32_T, peer, TAG_INTS, r->comm,
                      &p->reqs[2]);
            int one = 1;
            MPI_Send(&one, 1, MPI_INT, peer, TAG_CREDIT, r->comm);
            count++;
            next++;
            progressed = 1;
        }
        if (count) {
            posted *p = &d->pending[head];
            int complete = 0;
            MPI_Testall(3, p->reqs, &complete, MPI_STATUSES_IGNORE);
            if (complete) {
                p->slot->batch_index = p->header[0];
                p->slot->n_tokens = p->header[1];
                p->slot->producer = (int)p->header[2];
                if (!tr_queue_put(&d->ready, p->slot))
                    return done;
                head = (head + 1) % d->n_slots;
                count--;
                done++;
                progressed = 1;
            }
        }
        if (progressed)
            polls = 0;
        else
            poll_pause(&polls);
    }
    return done;
}

static void *receiver_main(void *arg)
{
    drafter_side *d = arg;
    if (receive_items(d) < (uint64_t)d->r->cfg.steps)
        tr_queue_close(&d->ready); /* stopped: the drafter may be waiting for an item */
    return NULL;
}

static int drafter_setup(drafter_side *d, char *err, size_t n)
{
    rank_state *r = d->r;
    const tr_config *cfg = &r->cfg;
    d->n_sources = tr_layout_sources(&r->layout, r->index, d->sources);
    /* queue + the one the drafter copies in */
    d->n_slots = cfg->queue_depth + 1;
    d->slots = calloc((size_t)d->n_slots, sizeof *d->slots);
    d->pending = calloc((size_t)d->n_slots, sizeof *d->pending);
    d->anchors = malloc((size_t)cfg->batch * cfg->anchors * sizeof *d->anchors);
    if (!d->slots || !d->pending || !d->anchors ||
        tr_queue_init(&d->ready, d->n_slots, -1) ||
        tr_queue_init(&d->free_slots, d->n_slots, -1)) {
        snprintf(err, n, "out of memory for the hidden-state slots");
        return -1;
    }
    for (int i = 0; i < d->n_slots; i++) {
        if (r->be->hidden_alloc(r->ctx, &d->slots[i])) {
            snprintf(err, n, "%s backend: %s", r->be->name, tr_backend_error());
            return -1;
        }
        d->n_allocated++;
        tr_queue_put(&d->free_slots, &d->slots[i]);
    }
    if (r->be->drafter_create(r->ctx, 0, r->device, &d->drafter)) {
        snprintf(err, n, "%s backend: %s", r->be->name, tr_backend_error());
        return -1;
    }
    return 0;
}

/* The mean gradient over the drafter ranks. With host gradients: a sum at the first drafter,
 * broadcast back, then the same scaling everywhere, so every rank keeps the same bits. */
static int drafter_allreduce(drafter_side *d)
{
    rank_state *r = d->r;
    if (!r->be->drafter_grads)
        return r->be->drafter_allreduce(d->drafter) ? (rank_fail(r, "drafter%d: %s", r->index,
                                                                tr_backend_error()), -1)
                                                    : 0;
    size_t n = 0;
    float *g = r->be->drafter_grads(d->drafter, &n);
    int me = r->index;
    const size_t chunk = (size_t)1 << 28;
    for (size_t off = 0; off < n; off += chunk) {
        int count = (int)(n - off < chunk ? n - off : chunk);
        MPI_Request req;
        MPI_Ireduce(me == 0 ? MPI_IN_PLACE : g + off, g + off, count, MPI_FLOAT, MPI_SUM, 0,
                    r->drafters, &req);
        if (wait_all(r, 1, &req))
            return -1;
        MPI_Ibcast(g + off, count, MPI_FLOAT, 0, r->drafters, &req);
        if (wait_all(r, 1, &req))
            return -1;
    }
    float inv = 1.0f / (float)r->layout.n_drafters;
    for (size_t i = 0; i < n; i++)
        g[i] *= inv;
    return 0;
}

/* The single-process drafter loop on the main thread; the first drafter rank prints the log
 * lines, over every drafter rank. */
static void drafter_run(drafter_side *d)
{
    rank_state *r = d->r;
    const tr_config *cfg = &r->cfg;
    const tr_backend *be = r->be;
    int n_drafters = r->layout.n_drafters, leader = r->index == 0;
    double t_log = MPI_Wtime();
    double loss_log = 0.0, tokens_log = 0.0, accuracy = 0.0, topk = 0.0;
    int steps_log = 0, have_accuracy = 0;
    for (uint64_t step = 1; step <= (uint64_t)cfg->steps && !stopping(r); step++) {
        tr_step_metrics m;
        memset(&m, 0, sizeof m);
        /* queue_depth: items received and not yet trained on, as the drafter comes for the
         * next (the most since its last pop: only the receiver puts) and as it leaves */
        if (r->c_queue_depth >= 0)
            st_counter_set((st_counter)r->c_queue_depth, (double)tr_queue_depth(&d->ready));
        st_begin(r->s_queue_wait);
        tr_hidden *h = tr_queue_pop(&d->ready);
        if (h && r->c_queue_depth >= 0)
            st_counter_set((st_counter)r->c_queue_depth, (double)tr_queue_depth(&d->ready));
        st_end(r->s_queue_wait);
        if (!h)
            break;
        st_flow_in(tr_flow_id(h->batch_index, TR_HOP_HIDDEN));
        st_begin(r->s_h2d);
        int rc = be->drafter_h2d(d->drafter, h);
        st_end(r->s_h2d);
        uint64_t tokens = h->n_tokens, batch_index = h->batch_index;
        tr_queue_put(&d->free_slots, h);
        if (rc)
            goto failed;
        tr_sample_anchors(d->anchors, cfg->seed, batch_index, cfg->batch, cfg->anchors,
                          cfg->seq_len, cfg->block_size);
        st_begin(r->s_forward);
        tr_spin_us(cfg->drafter_delay_us);
        rc = be->drafter_forward(d->drafter, d->anchors);
        st_end(r->s_forward);
        if (rc)
            goto failed;
        st_begin(r->s_loss);
        rc = be->drafter_loss(d->drafter, step % (uint64_t)cfg->metrics_every == 0, &m);
        st_end(r->s_loss);
        if (rc)
            goto failed;
        st_begin(r->s_backward);
        rc = be->drafter_backward(d->drafter);
        st_end(r->s_backward);
        if (rc)
            goto failed;
        if (n_drafters > 1) {
            st_begin(r->s_allreduce);
            rc = drafter_allreduce(d);
            st_end(r->s_allreduce);
            if (rc)
                break;
        }
        st_begin(r->s_optimizer);
        rc = be->drafter_optimizer(d->drafter, &m);
        st_end(r->s_optimizer);
        if (rc)
            goto failed;
        r->items = step;
        r->tokens += tokens;
        st_step(step, tokens);
        loss_log += m.loss;
        tokens_log += (double)tokens;
        steps_log++;
        if (m.have_accuracy) {
            have_accuracy = 1;
            accuracy = m.accuracy;
            topk = m.topk_accuracy;
        }
        if (step % (uint64_t)cfg->log_every == 0 || step == (uint64_t)cfg->steps) {
            double sums[5] = {loss_log, tokens_log, have_accuracy, accuracy, topk};
            MPI_Request req;
            if (n_drafters > 1) {
                MPI_Iallreduce(MPI_IN_PLACE, sums, 5, MPI_DOUBLE, MPI_SUM, r->drafters, &req);
                if (wait_all(r, 1, &req))
                    break;
            }
            double t = MPI_Wtime(), dt = t - t_log;
            if (leader) {
                char line[256], metrics[64];
                if (sums[2] > 0)
                    snprintf(metrics, sizeof metrics, "acc %.3f top%d %.3f",
                             sums[3] / sums[2], cfg->topk, sums[4] / sums[2]);
                else
                    snprintf(metrics, sizeof metrics, "acc - top%d -", cfg->topk);
                snprintf(line, sizeof line, "step %llu loss %.3f %s tok/s %.0f queue %d/%d\n",
                         (unsigned long long)step, sums[0] / ((double)steps_log * n_drafters),
                         metrics, dt > 0 ? sums[1] / dt : 0.0, tr_queue_depth(&d->ready),
                         cfg->queue_depth);
                fputs(line, stdout);
                fflush(stdout);
            }
            t_log = t;
            loss_log = tokens_log = 0.0;
            steps_log = 0;
        }
        maybe_die(r, step);
        continue;
    failed:
        rank_fail(r, "drafter%d: %s", r->index, tr_backend_error());
        break;
    }
}

static void drafter_teardown(drafter_side *d)
{
    rank_state *r = d->r;
    if (d->ready.items) {
        tr_queue_close(&d->ready);
        tr_queue_close(&d->free_slots);
    }
    if (d->receiver_started)
        pthread_join(d->receiver, NULL);
    if (d->drafter)
        r->be->drafter_destroy(d->drafter);
    for (int i = 0; i < d->n_allocated; i++)
        r->be->hidden_free(r->ctx, &d->slots[i]);
    tr_queue_destroy(&d->ready);
    tr_queue_destroy(&d->free_slots);
    free(d->slots);
    free(d->pending);
    free(d->anchors);
}

/* ---- stopping on a signal ---------------------------------------------------------------- */

/* Open MPI 4.1's mpirun, sent SIGTERM or SIGINT, sends every rank SIGCONT, then SIGTERM, then
 * SIGKILL odls_base_sigkill_timeout (1 s) later, or as soon as the first rank exits (about
 * 15-90 ms after that exit): a rank still flushing its trace when a faster one exited was
 * killed, and its file stayed "running". So no rank exits before every rank has flushed: the
 * signal handler only writes the signal's number to a pipe; stop_main, a thread of its own,
 * reads it, flushes the trace (st_signal_flush: everything recorded so far committed, status
 * interrupted, the WAL checkpointed into the file), then joins a non-blocking barrier on a
 * communicator of its own (dup'd at start for this one barrier, so it can never match another
 * collective), polled with MPI_Test until every rank has joined or STOP_DEADLINE_MS have
 * passed (a rank that is stopped, dead or not signalled never joins), and exits 130. The
 * rank's other threads go on meanwhile: what they record after the flush is not stored.
 * Further stop signals are ignored (mpirun may send SIGTERM twice); the deadline bounds the
 * stop. A stop signal ignored when the rank starts (SIG_IGN) stays ignored. */
#define STOP_FLUSH_MS 2000
#define STOP_DEADLINE_MS 3000

static struct {
    int pipe[2];
    MPI_Comm comm;
    pthread_t thread;
    int started;
    int handled[2]; /* SIGINT, SIGTERM: our handler is installed */
    struct sigaction old[2];
    atomic_int seen;
    rank_state *r;
} stop = {.pipe = {-1, -1}, .comm = MPI_COMM_NULL};

static void stop_handler(int sig)
{
    int saved = errno;
    if (atomic_fetch_add(&stop.seen, 1) == 0) {
        unsigned char c = (unsigned char)sig;
        ssize_t n = write(stop.pipe[1], &c, 1);
        (void)n;
    }
    errno = saved;
}

static double stop_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *stop_main(void *arg)
{
    (void)arg;
    rank_state *r = stop.r;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    unsigned char sig = 0;
    ssize_t n;
    while ((n = read(stop.pipe[0], &sig, 1)) < 0 && errno == EINTR) {
    }
    if (n != 1 || sig == 0) /* the rank is ending normally (stop_finish) */
        return NULL;
    double t0 = stop_now_s();
    int flushed = r->tracing ? st_signal_flush(STOP_FLUSH_MS) : ST_OK;
    double t_flushed = stop_now_s();
    MPI_Request req;
    int all_flushed = 0;
    if (MPI_Ibarrier(stop.comm, &req) == MPI_SUCCESS) {
        while (!all_flushed && stop_now_s() - t0 < STOP_DEADLINE_MS / 1000.0) {
            MPI_Test(&req, &all_flushed, MPI_STATUS_IGNORE);
            if (!all_flushed)
                sleep_us(200);
        }
    }
    fflush(stdout);
    fprintf(stderr, "trainer: rank %d: stopped by %s: trace %s in %.0f ms; %s\n", r->rank,
            sig == SIGINT ? "SIGINT" : "SIGTERM",
            !r->tracing ? "off" : flushed == ST_OK ? "flushed" : "not flushed in time",
            (t_flushed - t0) * 1e3,
            all_flushed ? "every rank flushed" : "not every rank answered in time");
    _exit(EXIT_INTERRUPTED);
}

/* Collective over r->comm (the communicator for the barrier). Call with SIGINT and SIGTERM
 * blocked, so that the thread starts with them blocked too. */
static int stop_start(rank_state *r)
{
    stop.r = r;
    if (MPI_Comm_dup(r->comm, &stop.comm) != MPI_SUCCESS)
        return -1;
    if (pipe2(stop.pipe, O_CLOEXEC) != 0)
        return -1;
    if (pthread_create(&stop.thread, NULL, stop_main, NULL) != 0)
        return -1;
    stop.started = 1;
    static const int sigs[2] = {SIGINT, SIGTERM};
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = stop_handler;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (int i = 0; i < 2; i++) {
        struct sigaction cur;
        if (sigaction(sigs[i], NULL, &cur) == 0 && !(cur.sa_flags & SA_SIGINFO) &&
            cur.sa_handler == SIG_IGN)
            continue; /* stays ignored */
        if (sigaction(sigs[i], &sa, &stop.old[i]) == 0)
            stop.handled[i] = 1;
    }
    return 0;
}

/* The normal end: the handlers go first, so that a signal from now on has its old action,
 * then the thread is woken and joined (one that has a signal to handle ends the process). */
static void stop_finish(void)
{
    static const int sigs[2] = {SIGINT, SIGTERM};
    for (int i = 0; i < 2; i++)
        if (stop.handled[i])
            sigaction(sigs[i], &stop.old[i], NULL);
    if (stop.started) {
        unsigned char c = 0;
        if (write(stop.pipe[1], &c, 1) == 1)
            pthread_join(stop.thread, NULL);
        stop.started = 0;
    }
    for (int i = 0; i < 2; i++)
        if (stop.pipe[i] >= 0)
            close(stop.pipe[i]);
    if (stop.comm != MPI_COMM_NULL)
        MPI_Comm_free(&stop.comm);
}

/* ---- set-up ------------------------------------------------------------------------------ */

static void print_log(int level, const char *msg, void *arg)
{
    (void)level;
    rank_state *r = arg;
    fprintf(stderr, "stagetrace: rank %d: %s\n", r->rank, msg);
}

/* Everyone learns whether every rank succeeded (collective). */
static int all_ok(rank_state *r, int ok)
{
    int all = ok;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, r->comm);
    return all;
}

/* Checks that depend on the number of processes; rank 0 reports. 0 or -1 with err. */
static int check_flags(rank_state *r, const tr_config *user, char *err, size_t n)
{
    if (tr_layout_make(&r->layout, user, r->world, err, n))
        return -1;
    if (user->postprocess_async) {
        snprintf(err, n, "--postprocess async is for single-process runs: a target rank "
                         "packs and sends on its own thread");
        return -1;
    }
    if (user->n_targets > 1 || user->n_drafters > 1) {
        snprintf(err, n, "--target-gpus/--drafter-gpus are for single-process runs: each rank "
                         "plays one role on the device of its local rank (--layout)");
        return -1;
    }
    if (taps_bytes(user) > INT_MAX || ints_count(user) > INT_MAX) {
        snprintf(err, n, "one hidden-state item (%zu bytes of taps) is too large for one MPI "
                         "message: lower --batch or --seq-len", taps_bytes(user));
        return -1;
    }
    if (user->die_step && user->die_rank >= r->world) {
        snprintf(err, n, "--test-die-at names rank %d, but the run has %d processes",
                 user->die_rank, r->world);
        return -1;
    }
    return 0;
}

static int open_trace(rank_state *r, int argc, char **argv)
{
    const tr_config *cfg = &r->cfg;
    r->tracing = cfg->trace_path || cfg->profile_interval > 0;
    /* the run id: rank 0's, for every rank */
    if (r->rank == 0)
        snprintf(r->run_id, sizeof r->run_id, "%lld-%ld", (long long)time(NULL),
                 (long)getpid());
    MPI_Bcast(r->run_id, sizeof r->run_id, MPI_CHAR, 0, r->comm);
    /* rank files of an older, larger run where these go (trace_path.h): rank 0 removes them
     * (--overwrite) or stops the run, before any rank opens its file */
    if (cfg->trace_path) {
        /* --trace DIR/: every rank creates it (ranks on other hosts write their own) */
        char dir_err[1024];
        int dir_ok = tr_trace_make_dir(cfg->trace_path, dir_err, sizeof dir_err) == 0;
        if (!dir_ok)
            rank_fail(r, "%s", dir_err);
        if (!all_ok(r, dir_ok))
            return -1;
        int stale_ok = 1;
        if (r->rank == 0) {
            char removed[2048], err[1024];
            stale_ok = tr_trace_clear_stale(cfg->trace_path, r->world, cfg->overwrite, removed,
                                            sizeof removed, err, sizeof err) == 0;
            if (!stale_ok)
                rank_fail(r, "%s", err);
            else if (removed[0])
                printf("trainer: --overwrite removed the rank files of an older run: %s\n",
                       removed);
        }
        MPI_Bcast(&stale_ok, 1, MPI_INT, 0, r->comm);
        if (!stale_ok)
            return -1;
    }
    if (cfg->trace_path) {
        snprintf(r->path, sizeof r->path, "%s", cfg->trace_path);
    } else if (r->tracing) {
        if (mkdir("runs", 0777) && errno != EEXIST) {
            rank_fail(r, "cannot create the trace directory 'runs': %s", strerror(errno));
            return -1;
        }
        snprintf(r->path, sizeof r->path, "runs/%s.sqlite", r->run_id);
    }
    st_options opt;
    st_options_init(&opt);
    opt.enabled = r->tracing;
    opt.path = r->tracing ? r->path : NULL;
    opt.overwrite = cfg->overwrite;
    if (cfg->ring_records)
        opt.ring_records = (uint32_t)cfg->ring_records;
    opt.block_when_full = cfg->block_when_full;
    opt.cpu = cfg->trace_cpu;
    opt.cpu_user_stack = cfg->trace_cpu_user_stack;
    opt.program = "trainer";
    opt.argc = argc;
    opt.argv = argv;
    opt.profile_interval = (uint32_t)cfg->profile_interval;
    /* windows from the first drafter rank only, beside its log lines */
    opt.on_window = cfg->profile_interval > 0 && r->role == TR_ROLE_DRAFTER && r->index == 0
                        ? tr_print_window : NULL;
    opt.log = print_log;
    opt.log_arg = r;
    opt.rank = r->rank;
    opt.world_size = r->world;
    opt.local_rank = r->local_rank;
    opt.device = cfg->device == TR_DEVICE_CUDA ? r->device : -1;
    opt.run_id = r->run_id;
    if (st_open(&r->trace, &opt) != ST_OK) {
        rank_fail(r, "cannot open the trace: %s", st_last_error());
        r->trace = NULL;
        return -1;
    }
    if (r->tracing)
        snprintf(r->path, sizeof r->path, "%s", st_path(r->trace));
    return 0;
}

static int register_stages(rank_state *r)
{
    struct { st_stage *id; const char *name; st_kind kind; } stages[] = {
        {&r->s_load, "load", ST_WORK},
        {&r->s_batch_wait, "batch_wait", ST_WAIT_INPUT},
        {&r->s_forward, "forward", ST_WORK},
        {&r->s_postprocess, "postprocess", ST_WORK},
        {&r->s_queue_put, "queue_put", ST_WAIT_OUTPUT},
        {&r->s_send, "send", ST_COPY},
        {&r->s_queue_wait, "queue_wait", ST_WAIT_INPUT},
        {&r->s_h2d, "h2d", ST_COPY},
        {&r->s_loss, "loss", ST_WORK},
        {&r->s_backward, "backward", ST_WORK},
        {&r->s_allreduce, "allreduce", ST_COMM},
        {&r->s_optimizer, "optimizer", ST_WORK},
    };
    for (size_t i = 0; i < sizeof stages / sizeof stages[0]; i++) {
        int id = st_stage_register(r->trace, stages[i].name, stages[i].kind);
        if (id < 0) {
            rank_fail(r, "%s", st_last_error());
            return -1;
        }
        *stages[i].id = (st_stage)id;
    }
    r->c_queue_depth = st_counter_register(r->trace, "queue_depth", "items");
    if (r->c_queue_depth < 0) {
        rank_fail(r, "%s", st_last_error());
        return -1;
    }
    return 0;
}

/* This rank's copy of the configuration: one role on one device; on CUDA with several drafter
 * ranks, the NCCL id the first drafter made. */
static int local_config(rank_state *r, const tr_config *user)
{
    r->cfg = *user;
    tr_config *cfg = &r->cfg;
    int count = r->be->device_count ? r->be->device_count() : 0;
    if (r->be->device_count && count <= 0) {
        rank_fail(r, "--device %s: no usable device on this host", tr_device_name(cfg->device));
        return -1;
    }
    r->device = count > 0 ? r->local_rank % count : r->local_rank;
    cfg->target_devices[0] = cfg->drafter_devices[0] = r->device;
    cfg->n_targets = r->role == TR_ROLE_TARGET ? 1 : 0;
    cfg->n_drafters = 1;
    cfg->comm_ranks = 0;
    if (r->role == TR_ROLE_DRAFTER && r->layout.n_drafters > 1 && !r->be->drafter_grads) {
#if DIST_NCCL
        ncclUniqueId id;
        memset(&id, 0, sizeof id);
        if (r->index == 0 && ncclGetUniqueId(&id) != ncclSuccess)
            memset(&id, 0, sizeof id); /* the backend's ncclCommInitRank reports it */
        MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, r->drafters);
        memcpy(cfg->nccl_id, &id, sizeof id < sizeof cfg->nccl_id ? sizeof id
                                                                  : sizeof cfg->nccl_id);
        cfg->comm_ranks = r->layout.n_drafters;
        cfg->comm_rank = r->index;
#else
        rank_fail(r, "several drafter ranks on --device %s need NCCL, and this trainer was "
                     "built without it", tr_device_name(cfg->device));
        return -1;
#endif
    }
    return 0;
}

static void print_header(const rank_state *r)
{
    const tr_config *c = &r->cfg;
    printf("trainer: %s backend, preset %s: vocab %d dim %d heads %d ffn %d target-layers %d "
           "taps ", r->be->name, c->preset, c->vocab, c->dim, c->heads, c->ffn, c->target_layers);
    for (int i = 0; i < c->n_taps; i++)
        printf("%s%d", i ? "," : "", c->taps[i]);
    printf(", drafter %d %s layer%s, block %d x %d anchors%s, batch %d x %d tokens\n",
           c->drafter_layers, c->drafter_attention ? "attention" : "MLP-only",
           c->drafter_layers > 1 ? "s" : "", c->block_size, c->anchors,
           c->sliding_window ? ", sliding window" : "", c->batch, c->seq_len);
    printf("trainer: %d processes (run %s): %d target rank%s (", r->world, r->run_id,
           r->layout.n_targets, r->layout.n_targets > 1 ? "s" : "");
    for (int i = 0; i < r->layout.n_targets; i++)
        printf("%s%d", i ? "," : "", r->layout.target_rank[i]);
    printf("), %d drafter rank%s (", r->layout.n_drafters, r->layout.n_drafters > 1 ? "s" : "");
    for (int i = 0; i < r->layout.n_drafters; i++)
        printf("%s%d", i ? "," : "", r->layout.drafter_rank[i]);
    printf("), queue depth %d per drafter rank, %ld steps%s%s\n", c->queue_depth, c->steps,
           r->tracing ? ", traces " : "", r->tracing ? r->path : "");
    fflush(stdout);
}

int tr_dist_main(const tr_config *user, const tr_backend *be, struct tr_data *data, int argc,
                 char **argv)
{
    static rank_state state; /* large (the layout): not on the stack */
    rank_state *r = &state;
    memset(r, 0, sizeof *r);
    r->be = be;
    r->data = data;
    r->drafters = MPI_COMM_NULL;
    pthread_mutex_init(&r->error_lock, NULL);
    atomic_init(&r->stop, 0);
    MPI_Comm_dup(MPI_COMM_WORLD, &r->comm);
    MPI_Comm_rank(r->comm, &r->rank);
    MPI_Comm_size(r->comm, &r->world);
    MPI_Comm local;
    MPI_Comm_split_type(r->comm, MPI_COMM_TYPE_SHARED, r->rank, MPI_INFO_NULL, &local);
    MPI_Comm_rank(local, &r->local_rank);
    MPI_Comm_free(&local);

    char err[512];
    if (check_flags(r, user, err, sizeof err)) {
        if (r->rank == 0)
            fprintf(stderr, "trainer: %s\n", err);
        tr_data_close(data);
        MPI_Comm_free(&r->comm);
        MPI_Finalize();
        return EXIT_USAGE;
    }
    r->role = r->layout.role[r->rank];
    r->index = r->layout.index[r->rank];
    MPI_Comm_split(r->comm, r->role == TR_ROLE_DRAFTER ? 0 : MPI_UNDEFINED, r->rank,
                   &r->drafters);

    int exit_status = 0, ok = local_config(r, user) == 0;
    ok = all_ok(r, ok);
    /* the trace (and its clock) before any work */
    sigset_t stop_signals, old_mask;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, &old_mask);
    if (ok)
        ok = all_ok(r, open_trace(r, argc, argv) == 0);
    if (ok) {
        /* SIGTERM or SIGINT (mpirun stopping the job) flushes the trace and ends the process
         * once every rank has flushed: see stop_main */
        if (stop_start(r))
            rank_fail(r, "cannot set up the stop signals: %s", strerror(errno));
        /* GPU activity before the backend's first CUDA call (as in a single-process run) */
        char gpu_records[400];
        if (r->tracing && !r->cfg.trace_gpu_off && r->cfg.device == TR_DEVICE_CUDA &&
            st_gpu_start_with(r->trace, tr_gpu_records(&r->cfg, gpu_records, sizeof gpu_records)) != ST_OK)
            fprintf(stderr, "trainer: rank %d: warning: no GPU activity in the trace: %s\n",
                    r->rank, st_last_error());
        clock_sync(r, ST_CLOCK_AT_OPEN);
        ok = all_ok(r, register_stages(r) == 0);
    }
    char role_name[32];
    snprintf(role_name, sizeof role_name, "%s%d",
             r->role == TR_ROLE_TARGET ? "target" : "drafter", r->index);
    if (ok)
        st_thread_register(r->trace, role_name,
                           r->role == TR_ROLE_TARGET ? "target" : "drafter", r->device, r->rank);
    tr_backend_set_trace(r->trace);
    if (ok && be->open(&r->ctx, &r->cfg)) {
        rank_fail(r, "%s backend: %s", be->name, tr_backend_error());
        ok = 0;
    }
    ok = all_ok(r, ok);

    target_side target;
    drafter_side drafter;
    memset(&target, 0, sizeof target);
    memset(&drafter, 0, sizeof drafter);
    target.r = drafter.r = r;
    if (ok) {
        int mine = r->role == TR_ROLE_TARGET ? target_setup(&target, err, sizeof err)
                                             : drafter_setup(&drafter, err, sizeof err);
        if (mine)
            rank_fail(r, "%s", err);
        ok = all_ok(r, !mine);
    }
    if (ok && r->rank == 0)
        print_header(r);
    if (ok) {
        int rc = r->role == TR_ROLE_TARGET
                     ? pthread_create(&target.loader, NULL, loader_main, &target)
                     : pthread_create(&drafter.receiver, NULL, receiver_main, &drafter);
        if (rc)
            rank_fail(r, "cannot start a thread: %s", strerror(rc));
        else if (r->role == TR_ROLE_TARGET)
            target.loader_started = 1;
        else
            drafter.receiver_started = 1;
    }
    pthread_sigmask(SIG_SETMASK, &old_mask, NULL);

    double t_start = MPI_Wtime();
    if (ok && !r->error[0]) {
        st_step(0, 0);
        if (r->role == TR_ROLE_TARGET)
            target_run(&target);
        else
            drafter_run(&drafter);
    }
    double elapsed = MPI_Wtime() - t_start;
    atomic_store(&r->stop, 1); /* the loader or receiver: nothing more to do */
    if (r->role == TR_ROLE_TARGET)
        target_teardown(&target);
    else
        drafter_teardown(&drafter);
    if (r->ctx)
        be->close(r->ctx);
    tr_data_close(data);
    int interrupted = st_interrupted();
    int failed = r->error[0] != 0;
    if (failed)
        fprintf(stderr, "trainer: rank %d: %s\n", r->rank, r->error);

    /* A rank that failed or was interrupted mid-run leaves its peers waiting on it: close its
     * trace and stop the whole job. */
    if (ok && (failed || interrupted)) {
        st_thread_unregister();
        st_close(r->trace);
        fflush(stdout);
        MPI_Abort(r->comm, interrupted ? EXIT_INTERRUPTED : EXIT_RUNTIME);
    }
    uint64_t dropped = 0;
    if (ok) {
        clock_sync(r, ST_CLOCK_AT_CLOSE);
        st_thread_unregister();
        dropped = st_dropped(r->trace);
    }
    if (r->trace && st_close(r->trace) != ST_OK) {
        fprintf(stderr, "trainer: rank %d: writing the trace failed: %s\n", r->rank,
                st_last_error());
        exit_status = EXIT_RUNTIME;
    }
    if (!ok)
        exit_status = EXIT_RUNTIME;
    else
        printf("trainer: rank %d %s: done after %llu %s, %llu tokens in %.2f s (%.0f tok/s)%s%s"
               "%s\n", r->rank, role_name, (unsigned long long)r->items,
               r->role == TR_ROLE_TARGET ? "batches" : "steps", (unsigned long long)r->tokens,
               elapsed, elapsed > 0 ? r->tokens / elapsed : 0.0,
               r->tracing ? "; trace " : "", r->tracing ? r->path : "",
               r->tracing && dropped ? " (events dropped)" : "");
    fflush(stdout);
    stop_finish();
    if (r->drafters != MPI_COMM_NULL)
        MPI_Comm_free(&r->drafters);
    MPI_Comm_free(&r->comm);
    MPI_Finalize();
    return exit_status;
}

#endif /* ST_HAVE_MPI */
