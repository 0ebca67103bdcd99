/* sim.c: the discrete-event simulator of sim.h.
 *
 * Between two events every actor is either computing (WORK, with the work it
 * has left) or blocked; the next event is the earliest end of a computation
 * at the current rates (processor sharing per pool). After each event the
 * actors take every step that needs no time (queue operations, barriers,
 * items, zero work) in index order until none can move, so the run is
 * deterministic. Models are a dozen actors at most: every step scans them all.
 */
#include "sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { READY, WORKING, BLOCKED_IN, BLOCKED_OUT, WAKING_IN, WAKING_OUT };

typedef struct actor_state {
    int pc, status, arrived;
    int advance_on_wake; /* released from a barrier: go on after waking */
    int woken;           /* the current operation had blocked */
    double left_ns;
} actor_state;

uint64_t an_sim_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static int check_model(const an_sim_model *m)
{
    if (m->n_actors < 1 || m->n_roles < 1 || m->n_roles > AN_SIM_MAX_ROLES || m->n_pools < 0 ||
        m->n_pools > AN_SIM_MAX_POOLS || m->measure_items < 1)
        return -1;
    for (int d = 0; d < m->n_dists; d++)
        if (!m->dists[d].n || !m->dists[d].ns) return -1;
    for (int p = 0; p < m->n_pools; p++)
        if (!(m->pool_capacity[p] > 0) || !isfinite(m->pool_capacity[p]) ||
            (m->pool_others && (!(m->pool_others[p] >= 0) || !isfinite(m->pool_others[p]))))
            return -1;
    for (int b = 0; b < m->n_barriers; b++)
        if (m->barrier_count[b] < 1) return -1;
    if (m->watch_queue >= m->n_queues) return -1;
    for (int a = 0; a < m->n_actors; a++) {
        const an_sim_actor *x = &m->actors[a];
        if (x->role < 0 || x->role >= m->n_roles || x->pool >= m->n_pools || x->n_ops < 1 ||
            x->n_ops > AN_SIM_MAX_OPS)
            return -1;
        for (int i = 0; i < x->n_ops; i++) {
            int k = x->ops[i].kind, arg = x->ops[i].arg;
            if ((k == AN_SIM_POP || k == AN_SIM_PUT) && (arg < 0 || arg >= m->n_queues)) return -1;
            if (k == AN_SIM_WORK && (arg < 0 || arg >= m->n_dists)) return -1;
            if (k == AN_SIM_BARRIER && (arg < 0 || arg >= m->n_barriers)) return -1;
            if (k < AN_SIM_POP || k > AN_SIM_ITEM) return -1;
                    const an_sim_dist *w[3] = {x->ops[i].wakee, x->ops[i].waker, x->ops[i].plain};
            for (int j = 0; j < 3; j++)
                if (w[j] && (!w[j]->n || !w[j]->ns)) return -1;
        }
    }
    return 0;
}

typedef struct sim {
    const an_sim_model *m;
    actor_state *a;
    int *count;        /* items per queue */
    int *arrived;      /* per barrier */
    uint32_t *cursor;  /* per distribution (replay; resample: the next value of a group) */
    uint32_t *left;    /* per distribution (resample): values left in the current group */
    uint32_t *wake_cursor; /* [actor][op][wakee, waker, plain] */
    uint64_t rng, items, events, max_events;
    double now, t_start;
    int measuring, done;
} sim;

/* Value i of a distribution; a negative or non-finite one counts as 0. */
static double value_at(const an_sim_dist *x, uint32_t i)
{
    double v = x->ns[i];
    return v > 0 && isfinite(v) ? v : 0;
}

static double draw_from(sim *s, const an_sim_dist *x, uint32_t *cursor)
{
    uint32_t i;
    if (s->m->resample) {
        i = (uint32_t)(an_sim_rand(&s->rng) % x->n);
    } else {
        i = *cursor;
        *cursor = i + 1 == x->n ? 0 : i + 1;
    }
    return value_at(x, i);
}

static double draw(sim *s, int d)
{
    const an_sim_dist *x = &s->m->dists[d];
    uint32_t g = x->group;
    if (!s->m->resample || g <= 1 || x->n < g) return draw_from(s, x, &s->cursor[d]);
    if (s->left[d] == 0) {
        s->cursor[d] = (uint32_t)(an_sim_rand(&s->rng) % (x->n / g)) * g;
        s->left[d] = g;
    }
    s->left[d]--;
    return value_at(x, s->cursor[d]++);
}

static void advance_pc(sim *s, int i)
{
    actor_state *st = &s->a[i];
    st->pc = (st->pc + 1) % s->m->actors[i].n_ops;
    st->status = READY;
    st->woken = 0;
}

/* A delay of actor i drawn from its current operation's wakee (which 0),
 * waker (1) or plain (2) distribution; 1 when it sleeps (status becomes
 * waking_status). */
static int wake(sim *s, int i, int which, int waking_status)
{
    const an_sim_op *op = &s->m->actors[i].ops[s->a[i].pc];
    const an_sim_dist *d = which == 0 ? op->wakee : which == 1 ? op->waker : op->plain;
    if (!d) return 0;
    double l = draw_from(s, d, &s->wake_cursor[((size_t)i * AN_SIM_MAX_OPS + (size_t)s->a[i].pc) * 3 + (size_t)which]);
    if (l <= 0) return 0;
    s->a[i].status = waking_status;
    s->a[i].left_ns = l;
    return 1;
}

/* Whether an actor other than i waits blocked in `status` on an operation of `kind` on queue q. */
static int someone_blocked(const sim *s, int i, int status, int kind, int q)
{
    for (int j = 0; j < s->m->n_actors; j++) {
        const an_sim_op *o = &s->m->actors[j].ops[s->a[j].pc];
        if (j != i && s->a[j].status == status && o->kind == kind && o->arg == q) return 1;
    }
    return 0;
}

/* Actor i finished its operation: on to the next, after its waker delay
 * when it released someone, or its plain delay when it neither blocked
 * (blocked) nor released anyone. */
static void finish_op(sim *s, int i, int released, int blocked, int waking_status)
{
    int which = released ? 1 : blocked ? -1 : 2;
    if (which > 0 && wake(s, i, which, waking_status)) s->a[i].advance_on_wake = 1;
    else advance_pc(s, i);
}

/* One step of actor i that takes no time; 1 when it moved. */
static int step(sim *s, int i)
{
    const an_sim_model *m = s->m;
    actor_state *st = &s->a[i];
    if (st->status == WORKING || st->status == WAKING_IN || st->status == WAKING_OUT) return 0;
    const an_sim_op *op = &m->actors[i].ops[st->pc];
    const an_sim_queue *q = op->kind == AN_SIM_POP || op->kind == AN_SIM_PUT ? &m->queues[op->arg] : NULL;
    switch (op->kind) {
    case AN_SIM_POP:
        if (q->initial >= 0 && s->count[op->arg] == 0) {
            st->status = BLOCKED_IN;
            return 0;
        }
        if (st->status == BLOCKED_IN) {
            st->woken = 1;
            if (wake(s, i, 0, WAKING_IN)) return 1;
        }
        if (q->initial >= 0) s->count[op->arg]--;
        finish_op(s, i, someone_blocked(s, i, BLOCKED_OUT, AN_SIM_PUT, op->arg), st->woken, WAKING_IN);
        return 1;
    case AN_SIM_PUT:
        if (q->initial >= 0 && q->capacity > 0 && s->count[op->arg] >= q->capacity) {
            st->status = BLOCKED_OUT;
            return 0;
        }
        if (st->status == BLOCKED_OUT) {
            st->woken = 1;
            if (wake(s, i, 0, WAKING_OUT)) return 1;
        }
        if (q->initial >= 0) s->count[op->arg]++;
        finish_op(s, i, someone_blocked(s, i, BLOCKED_IN, AN_SIM_POP, op->arg), st->woken, WAKING_OUT);
        return 1;
    case AN_SIM_WORK: {
        double w = draw(s, op->arg);
        if (w > 0) {
            st->status = WORKING;
            st->left_ns = w;
            return 0;
        }
        advance_pc(s, i);
        return 1;
    }
    case AN_SIM_BARRIER:
        if (st->arrived) return 0;
        st->arrived = 1;
        if (++s->arrived[op->arg] < m->barrier_count[op->arg]) {
            st->status = BLOCKED_IN;
            return 1; /* arriving is a move: a later actor may complete the barrier */
        }
        s->arrived[op->arg] = 0;
        for (int j = 0; j < m->n_actors; j++) {
            const an_sim_op *o = &m->actors[j].ops[s->a[j].pc];
            if (j != i && s->a[j].arrived && o->kind == AN_SIM_BARRIER && o->arg == op->arg) {
                s->a[j].arrived = 0;
                if (wake(s, j, 0, WAKING_IN)) s->a[j].advance_on_wake = 1;
                else advance_pc(s, j);
            }
        }
        st->arrived = 0;
        finish_op(s, i, m->barrier_count[op->arg] > 1, 1, WAKING_IN);
        return 1;
    default: /* AN_SIM_ITEM */
        s->items++;
        if (!s->measuring && s->items == m->warmup_items) {
            s->measuring = 1;
            s->t_start = s->now;
        } else if (s->measuring && s->items == m->warmup_items + m->measure_items) {
            s->done = 1;
        }
        advance_pc(s, i);
        return 1;
    }
}

/* Every step that takes no time; -1 past max_events. */
static int settle(sim *s)
{
    int moved = 1;
    while (moved && !s->done) {
        moved = 0;
        for (int i = 0; i < s->m->n_actors && !s->done; i++)
            while (!s->done && step(s, i)) {
                moved = 1;
                if (++s->events > s->max_events) return -1;
            }
    }
    return 0;
}

int an_sim_run(const an_sim_model *m, an_sim_result *r)
{
    memset(r, 0, sizeof *r);
    if (check_model(m)) return -1;
    sim s;
    memset(&s, 0, sizeof s);
    s.m = m;
    s.rng = m->seed;
    s.max_events = m->max_events ? m->max_events : 100000000ULL;
    s.a = calloc((size_t)m->n_actors, sizeof *s.a);
    s.count = calloc((size_t)m->n_queues + 1, sizeof *s.count);
    s.arrived = calloc((size_t)m->n_barriers + 1, sizeof *s.arrived);
    s.cursor = calloc((size_t)m->n_dists + 1, sizeof *s.cursor);
    s.left = calloc((size_t)m->n_dists + 1, sizeof *s.left);
    s.wake_cursor = calloc((size_t)m->n_actors * AN_SIM_MAX_OPS * 3, sizeof *s.wake_cursor);
    if (!s.a || !s.count || !s.arrived || !s.cursor || !s.left || !s.wake_cursor) {
        free(s.wake_cursor);
        free(s.a);
        free(s.count);
        free(s.arrived);
        free(s.cursor);
        free(s.left);
        return -1;
    }
    for (int q = 0; q < m->n_queues; q++) s.count[q] = m->queues[q].initial > 0 ? m->queues[q].initial : 0;
    if (m->warmup_items == 0) s.measuring = 1;

    int role_actors[AN_SIM_MAX_ROLES] = {0};
    for (int i = 0; i < m->n_actors; i++) role_actors[m->actors[i].role]++;
    double busy[AN_SIM_MAX_ROLES] = {0}, in[AN_SIM_MAX_ROLES] = {0}, out[AN_SIM_MAX_ROLES] = {0};
    double sat[AN_SIM_MAX_POOLS] = {0}, load[AN_SIM_MAX_POOLS] = {0};
    double q_sum = 0, q_full = 0, q_empty = 0;
    int n_on[AN_SIM_MAX_POOLS];
    double rate[AN_SIM_MAX_POOLS];

    while (!s.done) {
        if (settle(&s)) break;
        if (s.done) break;
        memset(n_on, 0, sizeof n_on);
        int working = 0;
        for (int i = 0; i < m->n_actors; i++) {
            if (s.a[i].status == WAKING_IN || s.a[i].status == WAKING_OUT) working++;
            if (s.a[i].status == WORKING) {
                working++;
                if (m->actors[i].pool >= 0) n_on[m->actors[i].pool]++;
            }
        }
        if (!working) break; /* deadlock */
        for (int p = 0; p < m->n_pools; p++) {
            double demand = n_on[p] + (m->pool_others ? m->pool_others[p] : 0);
            rate[p] = n_on[p] && demand > m->pool_capacity[p] ? m->pool_capacity[p] / demand : 1.0;
        }
        double dt = INFINITY;
        int first = -1;
        for (int i = 0; i < m->n_actors; i++) {
            if (s.a[i].status != WORKING && s.a[i].status != WAKING_IN && s.a[i].status != WAKING_OUT) continue;
            double rt = s.a[i].status == WORKING && m->actors[i].pool >= 0 ? rate[m->actors[i].pool] : 1.0;
            double t = s.a[i].left_ns / rt;
            if (t < dt) {
                dt = t;
                first = i;
            }
        }
        if (s.measuring) {
            for (int i = 0; i < m->n_actors; i++) {
                int role = m->actors[i].role;
                if (s.a[i].status == WORKING) busy[role] += dt;
                else if (s.a[i].status == BLOCKED_OUT || s.a[i].status == WAKING_OUT) out[role] += dt;
                else in[role] += dt;
            }
            for (int p = 0; p < m->n_pools; p++) {
                double c = m->pool_capacity[p];
                if (n_on[p] && n_on[p] + (m->pool_others ? m->pool_others[p] : 0) > c + 1e-9) sat[p] += dt;
                load[p] += dt * (n_on[p] < c ? n_on[p] / c : 1.0);
            }
            if (m->watch_queue >= 0) {
                const an_sim_queue *q = &m->queues[m->watch_queue];
                int c = s.count[m->watch_queue];
                q_sum += c * dt;
                if (q->capacity > 0 && c >= q->capacity) q_full += dt;
                if (c == 0) q_empty += dt;
            }
        }
        s.now += dt;
        for (int i = 0; i < m->n_actors; i++) {
            int st = s.a[i].status;
            if (st != WORKING && st != WAKING_IN && st != WAKING_OUT) continue;
            double rt = st == WORKING && m->actors[i].pool >= 0 ? rate[m->actors[i].pool] : 1.0;
            s.a[i].left_ns -= rt * dt;
            /* ends within a millionth of a ns of the first are the same event */
            if (i != first && s.a[i].left_ns > 1e-6) continue;
            if (st == WORKING || s.a[i].advance_on_wake) {
                s.a[i].advance_on_wake = 0;
                advance_pc(&s, i);
            } else {
                s.a[i].status = READY; /* awake: the operation is tried again */
            }
        }
        if (++s.events > s.max_events) break;
    }
    if (s.done) {
        double w = s.now - s.t_start;
        r->window_ns = w;
        r->items = m->measure_items;
        r->items_per_s = w > 0 ? (double)m->measure_items * 1e9 / w : INFINITY;
        for (int k = 0; k < m->n_roles; k++) {
            double d = w > 0 && role_actors[k] ? w * role_actors[k] : 1;
            r->role_busy[k] = busy[k] / d;
            r->role_blocked_in[k] = in[k] / d;
            r->role_blocked_out[k] = out[k] / d;
        }
        for (int p = 0; p < m->n_pools; p++) {
            r->pool_contended[p] = w > 0 ? sat[p] / w : 0;
            r->pool_load[p] = w > 0 ? load[p] / w : 0;
        }
        r->queue_mean = w > 0 ? q_sum / w : 0;
        r->queue_full = w > 0 ? q_full / w : 0;
        r->queue_empty = w > 0 ? q_empty / w : 0;
    } else {
        r->stalled = 1;
    }
    free(s.a);
    free(s.count);
    free(s.arrived);
    free(s.cursor);
    free(s.left);
    free(s.wake_cursor);
    return 0;
}
