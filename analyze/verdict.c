/* verdict.c: loads, the bottleneck verdict, its windows and its sentences,
 * judged from the model (see verdict.h).
 *
 * A role's load over a run of bins is its self time by stage kind; its need
 * is its busy time, or with GPU activity the larger of its host time without
 * sync and the device time it launched. The bottleneck is the role (or a
 * device shared by roles) with the largest need per thread; the what-if
 * bound takes the limiting stage's time off it and finds the next largest.
 * The story tells the same in sentences, the neighbours' waits as evidence.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verdict.h"

static int verdict_oom(void)
{
    an_error("out of memory");
    return AN_EXIT_FAIL;
}

/* ---- loads, verdict, windows ----------------------------------------------------------------- */

void an_pipe_stage_ns(const an_pipe *p, uint32_t bin0, uint32_t bin1, uint32_t role, int64_t *stage_ns)
{
    memset(stage_ns, 0, p->n_cols * sizeof *stage_ns);
    for (uint32_t b = bin0; b < bin1; b++)
        for (uint32_t c = 0; c < p->n_cols; c++) stage_ns[c] += an_pipe_self(p, b, role, c);
}

static double pct(int64_t part, int64_t whole) { return whole > 0 ? 100.0 * (double)part / (double)whole : 0.0; }

/* Device time recorded over bins [bin0, bin1) as an estimate for their
 * whole length (an_pipe_dev_scale; unchanged when nothing was paused). */
static int64_t dev_estimate(const an_pipe *p, uint32_t bin0, uint32_t bin1, int64_t recorded_ns)
{
    return p->bin_rec_ns ? (int64_t)llround((double)recorded_ns * an_pipe_dev_scale(p, bin0, bin1)) : recorded_ns;
}

/* Device time of (role, stage) over bins. */
static int64_t dev_stage_sum(const an_pipe *p, uint32_t bin0, uint32_t bin1, uint32_t role, uint32_t stage)
{
    int64_t v = 0;
    if (!p->n_devices) return 0;
    for (uint32_t b = bin0; b < bin1; b++) v += p->dev_stage_ns[((size_t)b * p->n_roles + role) * p->n_stages + stage];
    return dev_estimate(p, bin0, bin1, v);
}

static int64_t dev_sum(const an_pipe *p, uint32_t bin0, uint32_t bin1, uint32_t dev, uint32_t role)
{
    int64_t v = 0;
    for (uint32_t b = bin0; b < bin1; b++) v += an_pipe_dev(p, b, dev, role);
    return dev_estimate(p, bin0, bin1, v);
}

void an_pipe_loads(const an_pipe *p, uint32_t bin0, uint32_t bin1, an_role_load *loads)
{
    uint64_t steps = 0;
    int64_t len = 0;
    for (uint32_t b = bin0; b < bin1; b++) {
        steps += p->bin_steps[b];
        len += p->bin_t[b + 1] - p->bin_t[b];
    }
    for (uint32_t r = 0; r < p->n_roles; r++) {
        an_role_load *l = &loads[r];
        memset(l, 0, sizeof *l);
        l->top_stage = l->top_device_stage = -1;
        l->wall_ns = len * (int64_t)p->role_threads[r];
        for (uint32_t s = 0; s < p->n_stages; s++) {
            int64_t v = 0;
            for (uint32_t b = bin0; b < bin1; b++) v += an_pipe_self(p, b, r, s);
            st_kind k = st_reader_stage(p->trace->r, s)->kind;
            if ((unsigned)k >= ST_KIND_COUNT) continue;
            l->kind_ns[k] += v;
            if (an_kind_is_busy(k)) l->busy_ns += v;
            if (k == ST_WORK && v > 0 && (l->top_stage < 0 || v > l->top_stage_ns)) {
                l->top_stage = (int32_t)s;
                l->top_stage_ns = v;
            }
            int64_t d = dev_stage_sum(p, bin0, bin1, r, s);
            if (d > 0 && (l->top_device_stage < 0 || d > l->top_device_stage_ns)) {
                l->top_device_stage = (int32_t)s;
                l->top_device_stage_ns = d;
            }
        }
        for (uint32_t b = bin0; b < bin1; b++) l->idle_ns += an_pipe_self(p, b, r, p->n_stages);
        l->host_ns = l->busy_ns;
        if (p->n_devices) {
            l->host_ns -= l->kind_ns[ST_SYNC];
            for (uint32_t d = 0; d < p->n_devices; d++) l->device_ns += dev_sum(p, bin0, bin1, d, r);
        }
        l->device_bound = l->device_ns > l->host_ns;
        l->need_ns = p->n_devices ? (l->device_bound ? l->device_ns : l->host_ns) : l->busy_ns;
        l->busy_pct = pct(l->busy_ns, l->wall_ns);
        l->work_pct = pct(l->kind_ns[ST_WORK], l->wall_ns);
        l->idle_pct = pct(l->idle_ns, l->wall_ns);
        l->host_pct = pct(l->host_ns, l->wall_ns);
        l->device_pct = pct(l->device_ns, l->wall_ns);
        l->need_pct = pct(l->need_ns, l->wall_ns);
        for (int k = 0; k < ST_KIND_COUNT; k++) l->kind_pct[k] = pct(l->kind_ns[k], l->wall_ns);
        l->busy_per_step_ns = steps && p->role_threads[r]
                                  ? (double)l->busy_ns / p->role_threads[r] / (double)steps
                                  : NAN;
        l->need_per_step_ns = steps && p->role_threads[r]
                                  ? (double)l->need_ns / p->role_threads[r] / (double)steps
                                  : NAN;
    }
}

an_device_load *an_pipe_device_loads(const an_pipe *p, uint32_t bin0, uint32_t bin1)
{
    size_t n = p->n_devices ? p->n_devices : 1;
    an_device_load *out = malloc(n * sizeof *out + n * (p->n_roles ? p->n_roles : 1) * sizeof(int64_t));
    if (!out) {
        verdict_oom();
        return NULL;
    }
    int64_t *role_ns = (int64_t *)(out + n);
    int64_t len = p->bin_t[bin1] - p->bin_t[bin0];
    for (uint32_t d = 0; d < p->n_devices; d++) {
        an_device_load *l = &out[d];
        l->role_ns = role_ns + (size_t)d * p->n_roles;
        l->device = p->devices[d];
        l->span_ns = len;
        l->busy_ns = dev_sum(p, bin0, bin1, d, p->n_roles);
        l->busy_pct = pct(l->busy_ns, len);
        l->n_roles_on = 0;
        l->top_role = -1;
        for (uint32_t r = 0; r < p->n_roles; r++) {
            l->role_ns[r] = dev_sum(p, bin0, bin1, d, r);
            if (l->role_ns[r] > 0) l->n_roles_on++;
            if (l->role_ns[r] > 0 && (l->top_role < 0 || l->role_ns[r] > l->role_ns[l->top_role])) l->top_role = (int32_t)r;
        }
    }
    return out;
}

/* What a role needs over the period, per thread. */
static double need_per_thread(const an_pipe *p, const an_role_load *l, uint32_t r)
{
    return p->role_threads[r] ? (double)l->need_ns / p->role_threads[r] : 0.0;
}

/* The nearest neighbours' waits: downstream wait_input, upstream wait_output. */
static double neighbour_evidence(const an_pipe *p, const an_role_load *loads, uint32_t r, int32_t *down, int32_t *up)
{
    double evidence = 0;
    *down = *up = -1;
    for (uint32_t d = r + 1; d < p->n_roles; d++)
        if (loads[d].kind_ns[ST_WAIT_INPUT] > 0) {
            evidence += loads[d].kind_pct[ST_WAIT_INPUT];
            *down = (int32_t)d;
            break;
        }
    for (uint32_t u = r; u-- > 0;)
        if (loads[u].kind_ns[ST_WAIT_OUTPUT] > 0) {
            evidence += loads[u].kind_pct[ST_WAIT_OUTPUT];
            *up = (int32_t)u;
            break;
        }
    return evidence;
}

void an_pipe_verdict(const an_pipe *p, uint32_t bin0, uint32_t bin1, const an_role_load *loads, double speedup,
                     an_verdict *v)
{
    memset(v, 0, sizeof *v);
    v->bin0 = bin0;
    v->bin1 = bin1;
    v->t0_ns = p->bin_t[bin0];
    v->t1_ns = p->bin_t[bin1];
    for (uint32_t b = bin0; b < bin1; b++) {
        v->steps += p->bin_steps[b];
        v->tokens += p->bin_tokens[b];
    }
    int64_t period = v->t1_ns - v->t0_ns;
    v->step_ns = v->steps ? (double)period / (double)v->steps : NAN;
    v->tokens_per_s = v->steps && period > 0 && v->tokens ? (double)v->tokens * 1e9 / (double)period : NAN;
    v->role = v->stage = v->down_role = v->up_role = v->whatif_limit_role = v->whatif_limit_device = v->device = -1;
    v->speedup = speedup;
    v->load_pct = NAN;
    v->busy_after_ns = v->whatif_step_ns = v->whatif_factor = v->whatif_tokens_per_s = NAN;
    /* The bottleneck: the role with the most need per thread, i.e. the least
     * capacity; within one percentage point, the one with the stronger
     * evidence from its neighbours' waits. */
    double best_evidence = -1;
    for (uint32_t r = 0; r < p->n_roles; r++) {
        const an_role_load *l = &loads[r];
        if (l->need_ns <= 0) continue;
        int32_t down, up;
        double evidence = neighbour_evidence(p, loads, r, &down, &up);
        if (v->role >= 0) {
            double cur = loads[v->role].need_pct;
            if (l->need_pct < cur - 1.0) continue;
            if (l->need_pct <= cur + 1.0 && evidence <= best_evidence) continue;
        }
        v->role = (int32_t)r;
        best_evidence = evidence;
    }
    /* A device busier than any role needs, by more than AN_DEVICE_MARGIN_PCT
     * (less is a role's own copies on the copy engines, or another role's
     * odd kernel): roles share it, and it is the limit. Of devices within
     * one percentage point of the busiest, the first, so that twin devices
     * do not trade places on noise. */
    double role_pct = v->role >= 0 ? loads[v->role].need_pct : 0.0, top_pct = -1.0;
    for (uint32_t d = 0; d < p->n_devices; d++) {
        double bp = pct(dev_sum(p, bin0, bin1, d, p->n_roles), period);
        if (bp > top_pct) top_pct = bp;
    }
    double dev_pct = 0;
    for (uint32_t d = 0; d < p->n_devices && top_pct > role_pct + AN_DEVICE_MARGIN_PCT; d++) {
        double bp = pct(dev_sum(p, bin0, bin1, d, p->n_roles), period);
        if (bp <= role_pct + AN_DEVICE_MARGIN_PCT || bp < top_pct - 1.0) continue;
        int32_t top = -1;
        int64_t top_ns = 0;
        for (uint32_t r = 0; r < p->n_roles; r++) {
            int64_t x = dev_sum(p, bin0, bin1, d, r);
            if (x > 0 && (top < 0 || x > top_ns)) {
                top = (int32_t)r;
                top_ns = x;
            }
        }
        if (top < 0) continue; /* only records of unknown threads: no role to name */
        v->device = (int32_t)d;
        v->role = top;
        dev_pct = bp;
        break;
    }
    if (v->role < 0) return;
    uint32_t br = (uint32_t)v->role;
    const an_role_load *bl = &loads[br];
    if (v->device >= 0) {
        v->stage = bl->top_device_stage;
        v->load_pct = dev_pct;
    } else {
        v->stage = bl->device_bound ? bl->top_device_stage : bl->top_stage;
        v->load_pct = bl->need_pct;
    }
    v->saturated = v->load_pct >= AN_SATURATED_PCT;
    neighbour_evidence(p, loads, br, &v->down_role, &v->up_role);
    if (v->down_role >= 0) v->down_wait_pct = loads[v->down_role].kind_pct[ST_WAIT_INPUT];
    if (v->up_role >= 0) v->up_wait_pct = loads[v->up_role].kind_pct[ST_WAIT_OUTPUT];
    /* What-if: each role needs its need per thread for the period's work,
     * each device its busy time; the pipeline cannot go faster than the
     * largest. With the limiting stage k times faster, its host self time and
     * the device time it launched shrink by (1 - 1/k): the bottleneck role's
     * host and device parts, and each device by the part of the stage's
     * device time that ran there (in proportion to the role's time on it). */
    if (speedup <= 0 || period <= 0) return;
    double cut = 1.0 - 1.0 / speedup, threads = p->role_threads[br];
    double stage_host = 0, stage_dev = 0;
    if (v->stage >= 0) {
        int64_t *ns = calloc(p->n_cols, sizeof *ns);
        if (!ns) return;
        an_pipe_stage_ns(p, bin0, bin1, br, ns);
        st_kind k = st_reader_stage(p->trace->r, (uint32_t)v->stage)->kind;
        stage_host = an_kind_is_busy(k) && (k != ST_SYNC || !p->n_devices) ? (double)ns[v->stage] : 0.0;
        free(ns);
        stage_dev = (double)dev_stage_sum(p, bin0, bin1, br, (uint32_t)v->stage);
    }
    double host_after = ((double)(p->n_devices ? bl->host_ns : bl->busy_ns) - stage_host * cut) / threads;
    double dev_after = ((double)bl->device_ns - stage_dev * cut) / threads;
    double role_after = host_after > dev_after ? host_after : dev_after;
    double need = role_after, after = role_after;
    v->whatif_limit_role = (int32_t)br;
    for (uint32_t r = 0; r < p->n_roles; r++) {
        if (r == br) continue;
        double b = need_per_thread(p, &loads[r], r);
        if (b > need) {
            need = b;
            v->whatif_limit_role = (int32_t)r;
        }
    }
    for (uint32_t d = 0; d < p->n_devices; d++) {
        double busy = (double)dev_sum(p, bin0, bin1, d, p->n_roles);
        if (bl->device_ns > 0) busy -= stage_dev * cut * (double)dev_sum(p, bin0, bin1, d, br) / (double)bl->device_ns;
        if ((int32_t)d == v->device) after = busy;
        if (busy > need) {
            need = busy;
            v->whatif_limit_role = -1;
            v->whatif_limit_device = (int32_t)d;
        }
    }
    if (need <= 0) return;
    v->whatif_factor = (double)period / need;
    if (v->steps) {
        v->busy_after_ns = after / (double)v->steps;
        v->whatif_step_ns = need / (double)v->steps;
    }
    if (isfinite(v->tokens_per_s)) v->whatif_tokens_per_s = v->tokens_per_s * v->whatif_factor;
}

/* Does a window boundary fall at the closing mark of bin b? With a bin per
 * step: when that mark's step is a multiple of every, as the profile lines
 * have it. With bins of several steps: when a multiple of every is among the
 * bin's steps (the window then ends with that bin). */
static int boundary_after(const an_pipe *p, uint32_t b, uint64_t every)
{
    uint64_t s0 = b ? p->bin_step_last[b - 1] : p->step_open, s1 = p->bin_step_last[b];
    if (p->steps_per_bin <= 1) return s1 % every == 0;
    return s1 / every > s0 / every;
}

uint32_t an_pipe_windows(const an_pipe *p, uint64_t every, uint32_t *first)
{
    if (!p->has_steps || every == 0) {
        first[0] = 0;
        first[1] = p->n_bins;
        return 1;
    }
    /* Windows run from one boundary mark to the next; the bins before the
     * first boundary and after the last are in no window. */
    uint32_t n = 0, start = 0;
    int open = p->step_open % every == 0;
    for (uint32_t b = 0; b < p->n_bins; b++) {
        if (!boundary_after(p, b, every)) continue;
        if (open) first[n++] = start;
        open = 1;
        start = b + 1;
    }
    first[n] = open ? start : 0;
    return n;
}

uint32_t an_pipe_window_verdicts(const an_pipe *p, uint64_t every, an_window_verdict **out)
{
    *out = NULL;
    uint32_t *first = malloc(((size_t)p->n_bins + 1) * sizeof *first);
    an_role_load *loads = calloc(p->n_roles ? p->n_roles : 1, sizeof *loads);
    if (!first || !loads) {
        free(first);
        free(loads);
        verdict_oom();
        return 0;
    }
    uint32_t n = an_pipe_windows(p, every, first);
    an_window_verdict *w = calloc(n ? n : 1, sizeof *w);
    if (!w) {
        free(first);
        free(loads);
        verdict_oom();
        return 0;
    }
    for (uint32_t i = 0; i < n; i++) {
        an_verdict v;
        an_pipe_loads(p, first[i], first[i + 1], loads);
        an_pipe_verdict(p, first[i], first[i + 1], loads, 0, &v);
        w[i].bin0 = first[i];
        w[i].bin1 = first[i + 1];
        w[i].step_first = p->has_steps ? p->bin_step_first[first[i]] : 0;
        w[i].step_last = p->has_steps ? p->bin_step_last[first[i + 1] - 1] : 0;
        w[i].index = p->has_steps && every ? (w[i].step_last - 1) / every : 0;
        w[i].tokens_per_s = v.tokens_per_s;
        w[i].role = v.role;
        w[i].device = v.device;
        w[i].stage = v.stage;
        w[i].busy_pct = v.load_pct;
        w[i].moved = i > 0 && (w[i].role != w[i - 1].role || w[i].device != w[i - 1].device);
    }
    free(first);
    free(loads);
    *out = w;
    return n;
}

const st_kind an_role_row_kinds[5] = {ST_WAIT_INPUT, ST_WAIT_OUTPUT, ST_SYNC, ST_COMM, ST_COPY};

an_role_row *an_roles_table(const an_pipe *p, const an_role_load *loads, const an_verdict *v)
{
    an_role_row *rows = calloc(p->n_roles ? p->n_roles : 1, sizeof *rows);
    if (!rows) {
        verdict_oom();
        return NULL;
    }
    double tokens_per_step = v->steps ? (double)v->tokens / (double)v->steps : NAN;
    for (uint32_t r = 0; r < p->n_roles; r++) {
        const an_role_load *l = &loads[r];
        an_role_row *row = &rows[r];
        row->role = p->role_names[r];
        row->threads = p->role_threads[r];
        row->busy_pct = l->busy_pct;
        row->work_pct = l->work_pct;
        for (int k = 0; k < 5; k++) row->kind_pct[k] = l->kind_pct[an_role_row_kinds[k]];
        row->idle_pct = l->idle_pct;
        row->host_pct = l->host_pct;
        row->gpu_pct = l->device_pct;
        row->busy_ms_per_step = l->busy_per_step_ns / 1e6;
        row->need_ms_per_step = l->need_per_step_ns / 1e6;
        row->capacity_tokens_per_s =
            l->need_per_step_ns > 0 && v->tokens ? tokens_per_step / l->need_per_step_ns * 1e9 : NAN;
        row->top_stage = l->top_stage >= 0 ? st_reader_stage(p->trace->r, (uint32_t)l->top_stage)->name : NULL;
        row->top_stage_pct = l->top_stage >= 0 ? pct(l->top_stage_ns, l->wall_ns) : NAN;
        row->top_gpu_stage =
            l->top_device_stage >= 0 ? st_reader_stage(p->trace->r, (uint32_t)l->top_device_stage)->name : NULL;
        row->bottleneck = (int32_t)r == v->role ? (v->device >= 0 ? "its GPU" : "yes") : NULL;
    }
    return rows;
}

const char *an_pipe_label(const an_pipe *p, int32_t role, int32_t device, char *buf, size_t size)
{
    char name[128];
    if (role < 0) snprintf(buf, size, "none");
    else if (device >= 0) snprintf(buf, size, "GPU %d (%s)", p->devices[device], an_clean(p->role_names[role], name, sizeof name));
    else an_clean(p->role_names[role], buf, size);
    return buf;
}

/* "queue_wait 60.0%, batch_wait 2.0%": a role's stages of one kind, largest first. */
static void stages_of_kind(FILE *f, const an_pipe *p, const an_verdict *v, uint32_t role, st_kind kind, int64_t wall)
{
    int64_t *ns = calloc(p->n_cols, sizeof *ns);
    if (!ns) return;
    an_pipe_stage_ns(p, v->bin0, v->bin1, role, ns);
    int first = 1;
    for (;;) {
        int32_t best = -1;
        for (uint32_t s = 0; s < p->n_stages; s++)
            if (st_reader_stage(p->trace->r, s)->kind == kind && ns[s] > 0 && (best < 0 || ns[s] > ns[best]))
                best = (int32_t)s;
        if (best < 0) break;
        char name[128], pc[32];
        fprintf(f, "%s%s %s", first ? "" : ", ", an_clean(st_reader_stage(p->trace->r, (uint32_t)best)->name, name, sizeof name),
                an_fmt_pct1(pct(ns[best], wall), pc, sizeof pc));
        ns[best] = 0;
        first = 0;
    }
    free(ns);
}

static double max_need_pct(const an_pipe *p, const an_role_load *loads)
{
    double m = 0;
    for (uint32_t r = 0; r < p->n_roles; r++)
        if (loads[r].need_pct > m) m = loads[r].need_pct;
    return m;
}

/* The verdict's first line when a shared device is the limit: its busy
 * share, each role's part of it, the largest user and its stage, and what
 * the roles' host threads do meanwhile. */
static void story_device(FILE *f, const an_pipe *p, const an_role_load *loads, const an_verdict *v)
{
    char a[128], b[128], p1[32], p2[32];
    uint32_t d = (uint32_t)v->device;
    an_device_load *loads_d = an_pipe_device_loads(p, v->bin0, v->bin1);
    if (!loads_d) return;
    int64_t *role_ns = loads_d[d].role_ns, period = v->t1_ns - v->t0_ns;
    uint32_t n_on = loads_d[d].n_roles_on;
    if (n_on == 1)
        fprintf(f, "Bottleneck: GPU %d, busy %s of the time, used by one role:", p->devices[d],
                an_fmt_pct1(v->load_pct, p1, sizeof p1));
    else
        fprintf(f, "Bottleneck: GPU %d, busy %s of the time, shared by %u roles:", p->devices[d],
                an_fmt_pct1(v->load_pct, p1, sizeof p1), n_on);
    for (int first = 1;; first = 0) {
        int32_t best = -1;
        for (uint32_t r = 0; r < p->n_roles; r++)
            if (role_ns[r] > 0 && (best < 0 || role_ns[r] > role_ns[best])) best = (int32_t)r;
        if (best < 0) break;
        fprintf(f, "%s %s %s", first ? "" : ",", an_clean(p->role_names[best], a, sizeof a),
                an_fmt_pct1(pct(role_ns[best], period), p1, sizeof p1));
        role_ns[best] = 0;
    }
    free(loads_d);
    const an_role_load *l = &loads[v->role];
    fprintf(f, " (the time each role's GPU work ran on it; they overlap); its largest user is %s", an_clean(p->role_names[v->role], a, sizeof a));
    if (v->stage >= 0) {
        fprintf(f, ", whose stage %s launched %s of its time in GPU work",
                an_clean(st_reader_stage(p->trace->r, (uint32_t)v->stage)->name, b, sizeof b),
                an_fmt_pct1(pct(l->top_device_stage_ns, l->wall_ns), p1, sizeof p1));
        if (v->steps)
            fprintf(f, " (%.3f ms per step)", (double)l->top_device_stage_ns / p->role_threads[v->role] / (double)v->steps / 1e6);
    }
    fprintf(f, ".\nOn the host, the roles on it ");
    int first = 1;
    for (uint32_t r = 0; r < p->n_roles; r++) {
        if (dev_sum(p, v->bin0, v->bin1, d, r) <= 0) continue;
        fprintf(f, "%s%s %s busy without sync (sync %s)", first ? "are: " : ", ", an_clean(p->role_names[r], a, sizeof a),
                an_fmt_pct1(loads[r].host_pct, p1, sizeof p1), an_fmt_pct1(loads[r].kind_pct[ST_SYNC], p2, sizeof p2));
        first = 0;
    }
    fprintf(f, "; no role needs more than %s of its threads' time, so the device, not a role, sets the pace.\n",
            an_fmt_pct1(max_need_pct(p, loads), p1, sizeof p1));
}

char *an_pipe_story(const an_pipe *p, const an_role_load *loads, const an_verdict *v, const an_window_verdict *w,
                    uint32_t n_windows, uint64_t every)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return NULL;
    char a[128], b[128], p1[32], p2[32];
    st_reader *r = p->trace->r;
    if (v->role < 0) {
        fprintf(f, "Bottleneck: none found: no role spends time in work, sync, comm or copy stages.\n");
    } else {
        const an_role_load *l = &loads[v->role];
        if (v->device >= 0) {
            story_device(f, p, loads, v);
        } else {
            fprintf(f, "Bottleneck: %s (%u thread%s), busy %s of its time (work %s",
                    an_clean(p->role_names[v->role], a, sizeof a), p->role_threads[v->role],
                    p->role_threads[v->role] == 1 ? "" : "s", an_fmt_pct1(l->busy_pct, p1, sizeof p1),
                    an_fmt_pct1(l->work_pct, p2, sizeof p2));
            static const st_kind other[] = {ST_SYNC, ST_COMM, ST_COPY};
            for (int i = 0; i < 3; i++)
                if (l->kind_ns[other[i]] > 0)
                    fprintf(f, ", %s %s", st_kind_name(other[i]), an_fmt_pct1(l->kind_pct[other[i]], p1, sizeof p1));
            fprintf(f, ")");
            if (p->n_devices)
                fprintf(f, "; it needs %s: %s of GPU time (the work it launched) against %s on the host without sync",
                        an_fmt_pct1(l->need_pct, p1, sizeof p1), an_fmt_pct1(l->device_pct, p2, sizeof p2),
                        an_fmt_pct1(l->host_pct, b, sizeof b));
            if (v->stage >= 0) {
                /* a device-bound role's limiting stage is measured by the GPU time it launched */
                int64_t stage_ns = l->device_bound ? l->top_device_stage_ns : l->top_stage_ns;
                fprintf(f, "; limiting stage: %s, %s%s of its time%s",
                        an_clean(st_reader_stage(r, (uint32_t)v->stage)->name, b, sizeof b),
                        l->device_bound ? "which launched " : "", an_fmt_pct1(pct(stage_ns, l->wall_ns), p1, sizeof p1),
                        l->device_bound ? " in GPU work" : "");
                if (v->steps)
                    fprintf(f, ", %.3f ms per step", (double)stage_ns / p->role_threads[v->role] / (double)v->steps / 1e6);
            } else {
                fprintf(f, "; it has no work stage (its busy time is sync, comm or copy)");
            }
            fprintf(f, ".\n");
        }
        if (!v->saturated) {
            fprintf(f, "No role is saturated: the busiest, %s, is busy only %s of its time (idle %s); the limit is "
                       "probably outside the traced stages (untraced code, or the pace of the step marks).\n",
                    an_clean(p->role_names[v->role], a, sizeof a), an_fmt_pct1(v->load_pct, p1, sizeof p1),
                    an_fmt_pct1(l->idle_pct, p2, sizeof p2));
        }
        fprintf(f, "Evidence: ");
        if (v->down_role >= 0) {
            const an_role_load *d = &loads[v->down_role];
            fprintf(f, "downstream, %s waits for input %s of its time (", an_clean(p->role_names[v->down_role], a, sizeof a),
                    an_fmt_pct1(v->down_wait_pct, p1, sizeof p1));
            stages_of_kind(f, p, v, (uint32_t)v->down_role, ST_WAIT_INPUT, d->wall_ns);
            fprintf(f, ")");
        } else {
            fprintf(f, "no downstream role waits for input");
        }
        if (v->up_role >= 0) {
            const an_role_load *u = &loads[v->up_role];
            fprintf(f, "; upstream, %s is blocked on output %s of its time (", an_clean(p->role_names[v->up_role], a, sizeof a),
                    an_fmt_pct1(v->up_wait_pct, p1, sizeof p1));
            stages_of_kind(f, p, v, (uint32_t)v->up_role, ST_WAIT_OUTPUT, u->wall_ns);
            fprintf(f, ")");
        } else {
            fprintf(f, "; no upstream role is blocked on output");
        }
        fprintf(f, ".\n");
        if (v->stage >= 0 && isfinite(v->whatif_factor)) {
            fprintf(f, "What if %s were %gx faster: ", an_clean(st_reader_stage(r, (uint32_t)v->stage)->name, b, sizeof b),
                    v->speedup);
            if (v->device >= 0) snprintf(a, sizeof a, "GPU %d", p->devices[v->device]);
            else an_clean(p->role_names[v->role], a, sizeof a);
            double before = v->device >= 0 ? v->load_pct / 100.0 * v->step_ns : l->need_per_step_ns;
            if (v->steps) fprintf(f, "%s would need %.3f ms per step instead of %.3f ms; ", a, v->busy_after_ns / 1e6, before / 1e6);
            if (v->whatif_limit_device >= 0 ? v->whatif_limit_device == v->device
                                            : v->device < 0 && v->whatif_limit_role == v->role)
                fprintf(f, "%s stays the limit", a);
            else if (v->whatif_limit_device >= 0)
                fprintf(f, "the limit becomes GPU %d", p->devices[v->whatif_limit_device]);
            else
                fprintf(f, "the limit becomes %s (%s %s now)", an_clean(p->role_names[v->whatif_limit_role], b, sizeof b),
                        p->n_devices ? "needs" : "busy",
                        an_fmt_pct1(loads[v->whatif_limit_role].need_pct, p1, sizeof p1));
            if (v->steps) fprintf(f, " at %.3f ms per step", v->whatif_step_ns / 1e6);
            if (isfinite(v->whatif_tokens_per_s))
                fprintf(f, ": at most %.1f tokens/s, %.2fx the measured %.1f.\n", v->whatif_tokens_per_s, v->whatif_factor,
                        v->tokens_per_s);
            else
                fprintf(f, ": throughput at most %.2fx the measured.\n", v->whatif_factor);
        }
    }
    if (n_windows > 1) {
        int moved = 0;
        for (uint32_t i = 1; i < n_windows; i++) moved |= w[i].moved;
        if (!moved) {
            fprintf(f, "Per window of %llu steps: the bottleneck did not move (%s in all %u windows).\n",
                    (unsigned long long)every, an_pipe_label(p, w[0].role, w[0].device, a, sizeof a), n_windows);
        } else {
            fprintf(f, "Per window of %llu steps: the bottleneck moved:", (unsigned long long)every);
            uint32_t runs = 0;
            for (uint32_t i = 0; i < n_windows; i++) {
                uint32_t j = i;
                while (j + 1 < n_windows && !w[j + 1].moved) j++;
                if (++runs > 12) {
                    fprintf(f, " ...");
                    break;
                }
                fprintf(f, "%s %s in steps %llu-%llu", runs > 1 ? "," : "",
                        an_pipe_label(p, w[i].role, w[i].device, a, sizeof a), (unsigned long long)w[i].step_first,
                        (unsigned long long)w[j].step_last);
                i = j;
            }
            fprintf(f, ".\n");
        }
    }
    fprintf(f, "Role order: ");
    for (uint32_t i = 0; i < p->n_roles; i++)
        fprintf(f, "%s%s", i ? " -> " : "", an_clean(p->role_names[i], a, sizeof a));
    fprintf(f, p->order_inferred ? " (inferred from the waits: roles that wait only for output first, then those "
                                   "that wait for both, then those that wait only for input, main last).\n"
                                 : " (the trainer's roles).\n");
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}
