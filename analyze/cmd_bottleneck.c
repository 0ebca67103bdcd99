/* cmd_bottleneck.c: `analyze bottleneck FILE`: which role and stage limit
 * the pipeline's throughput, with the evidence and a what-if bound.
 *
 * The numbers come from the per-step model of model.c: per role, the
 * share of its threads' wall time in each kind of stage; the bottleneck is
 * the role that is busiest (least time waiting on its neighbours), its
 * limiting stage its largest work stage; the evidence is the waits on both
 * sides of it (downstream roles waiting for input, upstream roles blocked on
 * output) and the queue-depth counters; the what-if bound says how much
 * faster the pipeline could go with that stage k times faster. The same
 * verdict per window of N steps shows whether the bottleneck moved. This file
 * parses the options and prints the tables.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_verdict.h"
#include "stragglers.h"
#include "verdict.h"

static const char help[] =
    "usage: analyze bottleneck [--speedup K] [--every N] [--skip-steps N]\n"
    "                          [--format text|csv|json [--table NAME]] FILE|SET\n"
    "(SET: the rank files of one run, listed, as a directory or a quoted glob: docs/analyze.md, \"Rank sets\")\n"
    "\n"
    "Names the role and the stage that limit the pipeline, with the evidence, over the\n"
    "steps of the trace (from the first step mark to the last; the whole trace when it has\n"
    "fewer than two marks).\n"
    "\n"
    "Model. Each role's wall time (all its threads) is split by stage kind: busy = work +\n"
    "sync + comm + copy (the role's own work, its device, its collectives, its copies), and\n"
    "waits on its neighbours = wait_input (nothing to consume yet) + wait_output (the queue\n"
    "downstream is full), plus idle (in no range). In a pipeline every role processes the\n"
    "same steps, so the role that needs the most busy time per step has the least capacity:\n"
    "it is the bottleneck, and its neighbours show it: downstream roles wait for input,\n"
    "upstream roles are blocked on output. The limiting stage is the bottleneck's largest\n"
    "work stage (self time). Roles are ordered as a pipeline: loader -> target -> post ->\n"
    "drafter, main last (the trainer's names); otherwise roles that wait only for output\n"
    "come first, then those that wait for both, then those that wait only for input, then\n"
    "the rest, main last (ties by name).\n"
    "\n"
    "With GPU activity (trainer --trace-gpu), a host thread's sync time is a wait on a\n"
    "device that may run other roles' work too, so a role needs the larger of its host time\n"
    "without sync (host = work + comm + copy) and the GPU time of the work it launched (the\n"
    "union of its kernels, copies and memsets per device). Each device is a candidate too,\n"
    "with its busy time: a GPU busier than every role's need by more than 5 points (roles,\n"
    "or several threads of one role, share it) is the bottleneck; the verdict names it, its\n"
    "largest user, and that role's stage that launched the most GPU time.\n"
    "\n"
    "What-if. With the limiting stage K times faster, the bottleneck needs its need per\n"
    "step minus the stage's time per step x (1 - 1/K) (host self time; with GPU activity\n"
    "also the GPU time it launched, taken off each device it ran on); every other role and\n"
    "device still needs what it was measured to need. The step time becomes the largest\n"
    "need, so throughput rises at most by (step time now) / (that need): an upper bound,\n"
    "which assumes waits disappear and the other roles' work does not grow.\n"
    "\n"
    "Tables: roles (shares by kind, host and gpu shares, busy and need ms per step, capacity\n"
    "in tokens/s = tokens per step / need per step), devices (with GPU activity: each GPU's\n"
    "busy share, in all and per launching role), queues (each pair of neighbouring roles:\n"
    "the upstream role's wait_output stages and the downstream role's wait_input stages),\n"
    "queue depth (counters named like *queue_depth*, time-weighted: mean, min, max, share\n"
    "of time at max and at zero), windows (per window of N steps: the bottleneck, its\n"
    "busy or need share, every role's waits; moved '*' when the bottleneck changed). With\n"
    "GPU activity, each device's idle time is also split into host wait, launch gaps and\n"
    "other (see analyze gpu --help),\n"
    "naming the stage the launching thread was in while the device waited on the host.\n"
    "\n"
    "With the CPU capture (--trace-cpu): each role's work time on and off the CPU (table\n"
    "cpu, verdict column cpu_verdict): compute-bound (off-CPU at most 50%), else CPU-starved\n"
    "(preempted >= blocked: runnable, no core) or blocked; sync stages on-CPU more than 50%\n"
    "of their time spin.\n"
    "\n"
    "options:\n"
    "  --speedup K     the what-if factor for the limiting stage (default 2)\n"
    "  --every N       steps per window (default: meta profile_interval, else 10)\n"
    "  --skip-steps N  leave out the first N steps (warm-up)\n"
    "  --format F      text (default: the verdict, then the tables), csv or json (tables:\n"
    "                  verdict, roles, devices, queues, queue_depth, windows)\n"
    "  --table NAME    only the table NAME (with --format csv or json): verdict, roles, cpu,\n"
    "                  ranks, devices, queues, queue_depth, windows\n"
    "  --align MODE    a rank set's clocks: auto (default), meta, collectives or none\n"
    "                  (docs/analyze.md, \"Clock alignment\")\n";

enum { OPT_SPEEDUP = 1, OPT_EVERY, OPT_SKIP };
static const an_opt opts[] = {
    {"speedup", 1, OPT_SPEEDUP}, {"every", 1, OPT_EVERY}, {"skip-steps", 1, OPT_SKIP},
    {"format", 1, AN_OPT_FORMAT}, {"table", 1, AN_OPT_TABLE}, {"help", 0, AN_OPT_HELP}, {"align", 1, AN_OPT_ALIGN}, {NULL, 0, 0},
};

static const an_col verdict_cols[] = {
    {"file", AN_T_STR, 0},                 {"program", AN_T_STR, 0},
    {"rank", AN_T_INT, 0},                 {"steps", AN_T_INT, 0},
    {"step_first", AN_T_INT, 0},           {"step_last", AN_T_INT, 0},
    {"period_s", AN_T_REAL, 9},            {"step_ms", AN_T_REAL, 6},
    {"tokens_per_s", AN_T_REAL, 3},        {"bottleneck_device", AN_T_INT, 0},
    {"device_busy_pct", AN_T_PCT, 0},      {"bottleneck", AN_T_STR, 0},
    {"threads", AN_T_INT, 0},              {"busy_pct", AN_T_PCT, 0},
    {"work_pct", AN_T_PCT, 0},             {"saturated", AN_T_INT, 0},
    {"stage", AN_T_STR, 0},                {"stage_pct", AN_T_PCT, 0},
    {"stage_ms_per_step", AN_T_REAL, 6},   {"downstream", AN_T_STR, 0},
    {"downstream_wait_input_pct", AN_T_PCT, 0}, {"upstream", AN_T_STR, 0},
    {"upstream_wait_output_pct", AN_T_PCT, 0},  {"speedup", AN_T_REAL, 3},
    {"need_ms_per_step", AN_T_REAL, 6},    {"need_ms_per_step_after", AN_T_REAL, 6},
    {"whatif_limit", AN_T_STR, 0},         {"whatif_step_ms", AN_T_REAL, 6},
    {"whatif_factor", AN_T_REAL, 6},       {"whatif_tokens_per_s", AN_T_REAL, 3},
    {"moved", AN_T_INT, 0},                {"role_order", AN_T_STR, 0},
    {"gpu", AN_T_STR, 0},
    {"cpu_verdict", AN_T_STR, 0}, /* the last: only with the CPU capture */
};

static const an_col role_cols[] = {
    {"role", AN_T_STR, 0},           {"threads", AN_T_INT, 0},         {"busy_pct", AN_T_PCT, 0},
    {"work_pct", AN_T_PCT, 0},       {"wait_input_pct", AN_T_PCT, 0},  {"wait_output_pct", AN_T_PCT, 0},
    {"sync_pct", AN_T_PCT, 0},       {"comm_pct", AN_T_PCT, 0},        {"copy_pct", AN_T_PCT, 0},
    {"idle_pct", AN_T_PCT, 0},       {"host_pct", AN_T_PCT, 0},        {"gpu_pct", AN_T_PCT, 0},
    {"busy_ms_per_step", AN_T_REAL, 3}, {"need_ms_per_step", AN_T_REAL, 3}, {"capacity_tokens_per_s", AN_T_REAL, 1},
    {"top_stage", AN_T_STR, 0},      {"top_stage_pct", AN_T_PCT, 0},   {"top_gpu_stage", AN_T_STR, 0},
    {"bottleneck", AN_T_STR, 0},
};

/* With the CPU capture: per role, its work and sync stages' self time on
 * and off the CPU (cpu_verdict.c). */
static const an_col cpu_cols[] = {
    {"role", AN_T_STR, 0},           {"threads", AN_T_INT, 0},            {"cpu_threads", AN_T_INT, 0},
    {"work_ms", AN_T_MS, 0},         {"work_on_cpu_pct", AN_T_PCT, 0},    {"work_preempted_pct", AN_T_PCT, 0},
    {"work_blocked_pct", AN_T_PCT, 0}, {"work_verdict", AN_T_STR, 0},     {"sync_ms", AN_T_MS, 0},
    {"sync_on_cpu_pct", AN_T_PCT, 0}, {"spinning_stage", AN_T_STR, 0},    {"spinning_on_cpu_pct", AN_T_PCT, 0},
    {"bottleneck", AN_T_STR, 0},
};

static const an_col device_cols[] = {
    {"device", AN_T_INT, 0}, {"role", AN_T_STR, 0}, {"busy_pct", AN_T_PCT, 0}, {"ms_per_step", AN_T_REAL, 3},
    {"bottleneck", AN_T_STR, 0},
};

static const an_col queue_cols[] = {
    {"queue", AN_T_STR, 0}, {"side", AN_T_STR, 0}, {"role", AN_T_STR, 0},    {"stage", AN_T_STR, 0},
    {"kind", AN_T_STR, 0},  {"pct", AN_T_PCT, 0},  {"ms_per_step", AN_T_REAL, 3},
};

static const an_col depth_cols[] = {
    {"counter", AN_T_STR, 0},     {"unit", AN_T_STR, 0},       {"samples", AN_T_INT, 0},
    {"mean", AN_T_REAL, 3},       {"min", AN_T_REAL, 3},       {"max", AN_T_REAL, 3},
    {"at_max_pct", AN_T_PCT, 0},  {"at_zero_pct", AN_T_PCT, 0}, {"covered_s", AN_T_REAL, 6},
};

#define N_OF(a) ((int)(sizeof a / sizeof a[0]))

static int oom(void)
{
    an_error("out of memory");
    return AN_EXIT_FAIL;
}

static double pct_of(int64_t part, int64_t whole) { return whole > 0 ? 100.0 * (double)part / (double)whole : 0.0; }

static const char *role_name(const an_pipe *p, int32_t r) { return r >= 0 ? p->role_names[r] : NULL; }

static const char *stage_name(const an_pipe *p, int32_t s)
{
    return s >= 0 ? st_reader_stage(p->trace->r, (uint32_t)s)->name : NULL;
}

static void put_verdict(an_out *out, const an_pipe *p, const an_role_load *loads, const an_verdict *v, int moved,
                        const char *gpu_note, const an_cpu_role *cpu)
{
    an_table *t = an_table_new(out, "verdict", verdict_cols, N_OF(verdict_cols) - (cpu ? 0 : 1));
    const char *program = an_trace_meta(p->trace, "program");
    int64_t rank;
    an_put_str(t, p->trace->path);
    an_put_str(t, program);
    if (an_trace_meta_i64(p->trace, "rank", &rank) == 0) an_put_int(t, rank);
    else an_put_null(t);
    an_put_int(t, (int64_t)v->steps);
    if (p->has_steps) {
        an_put_int(t, (int64_t)p->bin_step_first[v->bin0]);
        an_put_int(t, (int64_t)p->bin_step_last[v->bin1 - 1]);
    } else {
        an_put_null(t);
        an_put_null(t);
    }
    an_put_real(t, (double)(v->t1_ns - v->t0_ns) * 1e-9);
    an_put_real_or_null(t, v->step_ns / 1e6);
    an_put_real_or_null(t, v->tokens_per_s);
    const an_role_load *l = v->role >= 0 ? &loads[v->role] : NULL;
    if (v->device >= 0) {
        an_put_int(t, p->devices[v->device]);
        an_put_pct(t, v->load_pct);
    } else {
        an_put_null(t);
        an_put_null(t);
    }
    an_put_str(t, role_name(p, v->role));
    if (l) {
        an_put_int(t, p->role_threads[v->role]);
        an_put_pct(t, l->busy_pct);
        an_put_pct(t, l->work_pct);
        an_put_int(t, v->saturated);
    } else {
        for (int i = 0; i < 4; i++) an_put_null(t);
    }
    an_put_str(t, stage_name(p, v->stage));
    if (l && v->stage >= 0) {
        /* the stage's host self time, or the GPU time it launched when that is what the bottleneck needs */
        int64_t stage_ns = v->device >= 0 || l->device_bound ? l->top_device_stage_ns : l->top_stage_ns;
        an_put_pct(t, pct_of(stage_ns, l->wall_ns));
        an_put_real_or_null(t, v->steps ? (double)stage_ns / p->role_threads[v->role] / (double)v->steps / 1e6 : NAN);
    } else {
        an_put_null(t);
        an_put_null(t);
    }
    an_put_str(t, role_name(p, v->down_role));
    if (v->down_role >= 0) an_put_pct(t, v->down_wait_pct);
    else an_put_null(t);
    an_put_str(t, role_name(p, v->up_role));
    if (v->up_role >= 0) an_put_pct(t, v->up_wait_pct);
    else an_put_null(t);
    an_put_real(t, v->speedup);
    an_put_real_or_null(t, !l ? NAN : v->device >= 0 ? v->load_pct / 100.0 * v->step_ns / 1e6 : l->need_per_step_ns / 1e6);
    an_put_real_or_null(t, v->busy_after_ns / 1e6);
    char limit[160];
    an_put_str(t, v->whatif_limit_device >= 0 ? (snprintf(limit, sizeof limit, "GPU %d", p->devices[v->whatif_limit_device]), limit)
                                              : role_name(p, v->whatif_limit_role));
    an_put_real_or_null(t, v->whatif_step_ns / 1e6);
    an_put_real_or_null(t, v->whatif_factor);
    an_put_real_or_null(t, v->whatif_tokens_per_s);
    an_put_int(t, moved);
    an_put_str(t, p->order_inferred ? "inferred" : "trainer");
    an_put_str(t, gpu_note);
    if (cpu) an_put_str(t, v->role >= 0 ? an_cpu_verdict_name(cpu[v->role].verdict) : NULL);
    an_row_end(t);
    an_table_end(t);
}

static double share_or_nan(int64_t part, int64_t whole) { return whole > 0 ? 100.0 * (double)part / (double)whole : NAN; }

/* The CPU lines of the text: the bottleneck's work judged on and off the
 * CPU, then each role's spinning sync stage. */
static void put_cpu_lines(an_out *out, const an_pipe *p, const an_verdict *v, const an_cpu_role *cpu)
{
    char rn[128], sn[128], on[32], pre[32], blk[32], ms[40];
    if (v->role >= 0) {
        const an_cpu_role *c = &cpu[v->role];
        const char *role = an_clean(p->role_names[v->role], rn, sizeof rn);
        if (!c->threads_known) {
            an_out_text(out, "CPU: no CPU records for %s's threads (their perf events did not open): its work is not "
                             "judged.\n", role);
        } else if (c->verdict == AN_CPU_NO_WORK) {
            an_out_text(out, "CPU: %s has no work time in its threads with CPU records.\n", role);
        } else {
            an_fmt_pct1(pct_of(c->work_on_ns, c->work_wall_ns), on, sizeof on);
            an_fmt_pct1(pct_of(c->work_preempted_ns, c->work_wall_ns), pre, sizeof pre);
            an_fmt_pct1(pct_of(c->work_blocked_ns, c->work_wall_ns), blk, sizeof blk);
            an_fmt_fixed(ms, c->work_wall_ns, 6, 3);
            an_out_text(out, "CPU: %s's work is %s on-CPU, %s preempted, %s blocked (%s ms of work self time on %u "
                             "thread%s): ",
                        role, on, pre, blk, ms, c->threads_known, c->threads_known == 1 ? "" : "s");
            if (c->verdict == AN_CPU_COMPUTE)
                an_out_text(out, "compute-bound, on a core; faster code%s%s is the lever.\n", v->stage >= 0 ? " in " : "",
                            v->stage >= 0 ? an_clean(stage_name(p, v->stage), sn, sizeof sn) : "");
            else if (c->verdict == AN_CPU_STARVED)
                an_out_text(out, "CPU-starved, not compute-bound: runnable but without a core for %s of it (fewer busy "
                                 "threads on its cores, or more cores, would speed it more than faster code).\n", pre);
            else if (c->verdict == AN_CPU_LOCK_BOUND) {
                char fx[16];
                an_fmt_pct1(pct_of(c->work_futex_ns, c->work_blocked_ns), fx, sizeof fx);
                an_out_text(out, "lock-bound, not compute-bound: its threads gave up the CPU for %s of it inside work "
                                 "stages, %s of that in futex waits (a mutex, a condition variable; analyze cpu shows "
                                 "which).\n", blk, fx);
            } else
                an_out_text(out, "blocked, not compute-bound: its threads gave up the CPU for %s of it inside work "
                                 "stages (a lock, I/O, a sleep or a device wait; analyze cpu shows where).\n", blk);
        }
    }
    for (uint32_t r = 0; r < p->n_roles; r++) {
        const an_cpu_role *c = &cpu[r];
        if (c->spin_stage < 0) continue;
        an_fmt_pct1(pct_of(c->spin_on_ns, c->spin_wall_ns), on, sizeof on);
        an_out_text(out, "spinning: %s waits in %s (sync) %s on-CPU (cudaDeviceScheduleBlockingSync or events would "
                         "free the core).\n",
                    an_clean(p->role_names[r], rn, sizeof rn), an_clean(stage_name(p, c->spin_stage), sn, sizeof sn), on);
    }
}

static void put_cpu_table(an_out *out, const an_pipe *p, const an_verdict *v, const an_cpu_role *cpu)
{
    an_out_text(out, "cpu: each role's work and sync stages (self time of its threads with CPU records) on and off "
                     "the CPU; work_verdict: compute-bound (off-CPU at most 50%%), else CPU-starved (preempted >= "
                     "blocked) or blocked\n");
    an_table *t = an_table_new(out, "cpu", cpu_cols, N_OF(cpu_cols));
    for (uint32_t r = 0; r < p->n_roles; r++) {
        const an_cpu_role *c = &cpu[r];
        an_put_str(t, p->role_names[r]);
        an_put_int(t, c->threads);
        an_put_int(t, c->threads_known);
        an_put_ns(t, c->work_wall_ns);
        an_put_pct_or_null(t, share_or_nan(c->work_on_ns, c->work_wall_ns));
        an_put_pct_or_null(t, share_or_nan(c->work_preempted_ns, c->work_wall_ns));
        an_put_pct_or_null(t, share_or_nan(c->work_blocked_ns, c->work_wall_ns));
        an_put_str(t, an_cpu_verdict_name(c->verdict));
        an_put_ns(t, c->sync_wall_ns);
        an_put_pct_or_null(t, share_or_nan(c->sync_on_ns, c->sync_wall_ns));
        an_put_str(t, stage_name(p, c->spin_stage));
        an_put_pct_or_null(t, c->spin_stage >= 0 ? share_or_nan(c->spin_on_ns, c->spin_wall_ns) : NAN);
        an_put_str(t, (int32_t)r == v->role ? "yes" : NULL);
        an_row_end(t);
    }
    an_table_end(t);
}

static int put_roles(an_out *out, const an_pipe *p, const an_role_load *loads, const an_verdict *v)
{
    an_role_row *rows = an_roles_table(p, loads, v);
    if (!rows) return -1;
    an_out_text(out, "roles: shares of each role's wall time (all its threads); busy = work + sync + comm + copy; "
                     "with GPU activity, host = busy - sync, gpu = the device time of the work it launched, and "
                     "need = the larger of the two (else busy); capacity = tokens per step / need per step\n");
    an_table *t = an_table_new(out, "roles", role_cols, N_OF(role_cols));
    for (uint32_t r = 0; r < p->n_roles; r++) {
        const an_role_row *row = &rows[r];
        an_put_str(t, row->role);
        an_put_int(t, row->threads);
        an_put_pct(t, row->busy_pct);
        an_put_pct(t, row->work_pct);
        for (int k = 0; k < 5; k++) an_put_pct(t, row->kind_pct[k]);
        an_put_pct(t, row->idle_pct);
        if (p->n_devices) {
            an_put_pct(t, row->host_pct);
            an_put_pct(t, row->gpu_pct);
        } else {
            an_put_null(t);
            an_put_null(t);
        }
        an_put_real_or_null(t, row->busy_ms_per_step);
        an_put_real_or_null(t, row->need_ms_per_step);
        an_put_real_or_null(t, row->capacity_tokens_per_s);
        an_put_str(t, row->top_stage);
        if (row->top_stage) an_put_pct(t, row->top_stage_pct);
        else an_put_null(t);
        an_put_str(t, row->top_gpu_stage);
        an_put_str(t, row->bottleneck);
        an_row_end(t);
    }
    an_table_end(t);
    free(rows);
    return 0;
}

/* Each device: its busy share over the period, then each role's GPU work on
 * it (the union of that role's records; roles overlap, so the parts add up
 * to more than the total when they run concurrently). */
static int put_devices(an_out *out, const an_pipe *p, const an_verdict *v)
{
    if (!p->n_devices && an_out_format(out) == AN_FMT_TEXT) return 0;
    an_device_load *d = an_pipe_device_loads(p, v->bin0, v->bin1);
    if (!d) return -1;
    an_out_text(out, "devices: GPU busy time (kernels, copies, memsets) as a share of the period, in all and per "
                     "launching role (roles overlap in time)\n");
    if (p->bin_rec_ns && p->n_devices) {
        double scale = an_pipe_dev_scale(p, v->bin0, v->bin1);
        if (scale > 0)
            an_out_text(out, "  GPU recording was paused for part of the period: these figures are estimated from "
                             "the recorded %.1f %% of it (device time there x %.3f)\n",
                        100.0 / scale, scale);
        else
            an_out_text(out, "  GPU recording was paused for the whole period: no device time is known\n");
    }
    an_table *t = an_table_new(out, "devices", device_cols, N_OF(device_cols));
    for (uint32_t i = 0; i < p->n_devices; i++) {
        for (int64_t r = -1; r < (int64_t)p->n_roles; r++) {
            int64_t ns = r < 0 ? d[i].busy_ns : d[i].role_ns[r];
            if (r >= 0 && ns <= 0) continue;
            an_put_int(t, d[i].device);
            an_put_str(t, r < 0 ? "*" : p->role_names[r]);
            an_put_pct(t, pct_of(ns, d[i].span_ns));
            an_put_real_or_null(t, v->steps ? (double)ns / (double)v->steps / 1e6 : NAN);
            an_put_str(t, r < 0 && (int32_t)i == v->device ? "yes" : NULL);
            an_row_end(t);
        }
    }
    an_table_end(t);
    free(d);
    return 0;
}

/* Each pair of neighbouring roles: the upstream side's wait_output stages,
 * the downstream side's wait_input stages. */
static int put_queues(an_out *out, const an_pipe *p, const an_role_load *loads, const an_verdict *v)
{
    int64_t *ns = calloc(p->n_cols, sizeof *ns);
    if (!ns) return -1;
    an_out_text(out, "queues: each pair of neighbouring roles; put = the upstream role blocked on output, "
                     "get = the downstream role waiting for input (shares of that role's wall time)\n");
    an_table *t = an_table_new(out, "queues", queue_cols, N_OF(queue_cols));
    for (uint32_t r = 0; r + 1 < p->n_roles; r++) {
        char label[300], a[128], b[128];
        snprintf(label, sizeof label, "%s -> %s", an_clean(p->role_names[r], a, sizeof a),
                 an_clean(p->role_names[r + 1], b, sizeof b));
        int rows = 0;
        for (int side = 0; side < 2; side++) {
            uint32_t role = side ? r + 1 : r;
            st_kind kind = side ? ST_WAIT_INPUT : ST_WAIT_OUTPUT;
            an_pipe_stage_ns(p, v->bin0, v->bin1, role, ns);
            for (uint32_t s = 0; s < p->n_stages; s++) {
                const st_stage_info *si = st_reader_stage(p->trace->r, s);
                if (si->kind != kind || ns[s] <= 0) continue;
                an_put_str(t, label);
                an_put_str(t, side ? "get" : "put");
                an_put_str(t, p->role_names[role]);
                an_put_str(t, si->name);
                an_put_str(t, st_kind_name(kind));
                an_put_pct(t, pct_of(ns[s], loads[role].wall_ns));
                an_put_real_or_null(t, v->steps ? (double)ns[s] / p->role_threads[role] / (double)v->steps / 1e6 : NAN);
                an_row_end(t);
                rows++;
            }
        }
        if (rows) an_table_gap(t);
    }
    an_table_end(t);
    free(ns);
    return 0;
}

static void put_depths(an_out *out, const an_pipe *p)
{
    if (!p->n_queues && an_out_format(out) == AN_FMT_TEXT) return;
    an_out_text(out, "queue depth: counters named like *queue_depth*, time-weighted over the steps (from the first "
                     "sample on)\n");
    an_table *t = an_table_new(out, "queue_depth", depth_cols, N_OF(depth_cols));
    for (uint32_t i = 0; i < p->n_queues; i++) {
        const an_pipe_queue *q = &p->queues[i];
        an_put_str(t, q->name);
        an_put_str(t, q->unit);
        an_put_int(t, (int64_t)q->n_samples);
        an_put_real_or_null(t, q->mean);
        an_put_real_or_null(t, q->covered_ns ? q->min : NAN);
        an_put_real_or_null(t, q->covered_ns ? q->max : NAN);
        if (q->covered_ns) {
            an_put_pct(t, pct_of(q->at_max_ns, q->covered_ns));
            an_put_pct(t, pct_of(q->at_zero_ns, q->covered_ns));
        } else {
            an_put_null(t);
            an_put_null(t);
        }
        an_put_real(t, (double)q->covered_ns * 1e-9);
        an_row_end(t);
    }
    an_table_end(t);
}

static int put_windows(an_out *out, const an_pipe *p, const an_window_verdict *w, uint32_t n, uint64_t every)
{
    static const an_col lead[] = {
        {"window", AN_T_INT, 0},      {"step_first", AN_T_INT, 0}, {"step_last", AN_T_INT, 0},
        {"tokens_per_s", AN_T_REAL, 1}, {"device", AN_T_INT, 0},    {"bottleneck", AN_T_STR, 0},
        {"stage", AN_T_STR, 0},       {"busy_pct", AN_T_PCT, 0},   {"moved", AN_T_STR, 0},
    };
    int n_lead = N_OF(lead), n_cols = n_lead + (int)p->n_roles;
    an_col *cols = calloc((size_t)n_cols, sizeof *cols);
    char (*names)[160] = calloc(p->n_roles ? p->n_roles : 1, sizeof *names);
    an_role_load *loads = calloc(p->n_roles ? p->n_roles : 1, sizeof *loads);
    if (!cols || !names || !loads) {
        free(cols);
        free(names);
        free(loads);
        return -1;
    }
    memcpy(cols, lead, sizeof lead);
    for (uint32_t r = 0; r < p->n_roles; r++) {
        char clean[128];
        snprintf(names[r], sizeof names[r], "%s_wait_pct", an_clean(p->role_names[r], clean, sizeof clean));
        cols[n_lead + (int)r] = (an_col){names[r], AN_T_PCT, 0};
    }
    if (p->has_steps)
        an_out_text(out, "windows of %llu steps: the bottleneck of each; moved '*' when it changed; <role>_wait_pct = "
                         "wait_input + wait_output share of that role\n",
                    (unsigned long long)every);
    else
        an_out_text(out, "windows: the trace has fewer than two step marks, so one window over the whole trace\n");
    an_table *t = an_table_new(out, "windows", cols, n_cols);
    for (uint32_t i = 0; i < n; i++) {
        an_pipe_loads(p, w[i].bin0, w[i].bin1, loads);
        an_put_int(t, (int64_t)w[i].index);
        if (p->has_steps) {
            an_put_int(t, (int64_t)w[i].step_first);
            an_put_int(t, (int64_t)w[i].step_last);
        } else {
            an_put_null(t);
            an_put_null(t);
        }
        an_put_real_or_null(t, w[i].tokens_per_s);
        if (w[i].device >= 0) an_put_int(t, p->devices[w[i].device]);
        else an_put_null(t);
        an_put_str(t, role_name(p, w[i].role));
        an_put_str(t, stage_name(p, w[i].stage));
        if (w[i].role >= 0) an_put_pct(t, w[i].busy_pct);
        else an_put_null(t);
        an_put_str(t, w[i].moved ? "*" : NULL);
        for (uint32_t r = 0; r < p->n_roles; r++)
            an_put_pct(t, loads[r].kind_pct[ST_WAIT_INPUT] + loads[r].kind_pct[ST_WAIT_OUTPUT]);
        an_row_end(t);
    }
    an_table_end(t);
    /* Windows that overlap a span the writer could not store (lost_spans). */
    int lost_windows = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (!an_trace_lost_in(p->trace, p->bin_t[w[i].bin0], p->bin_t[w[i].bin1], NULL)) continue;
        an_out_text(out, lost_windows++ ? ", %u" : "windows overlapping time the trace could not store "
                                                   "(undercounted): %u", i);
    }
    if (lost_windows) an_out_text(out, "\n");
    free(cols);
    free(names);
    free(loads);
    return 0;
}

static void heading(an_out *out, const an_pipe *p, const an_verdict *v)
{
    char a[512], b[128], period[40];
    const char *program = an_trace_meta(p->trace, "program");
    int64_t rank = 0;
    an_trace_meta_i64(p->trace, "rank", &rank);
    an_fmt_fixed(period, v->t1_ns - v->t0_ns, 9, 3);
    an_out_text(out, "== %s: %s rank %lld; ", an_clean(p->trace->path, a, sizeof a),
                an_clean(program ? program : "?", b, sizeof b), (long long)rank);
    if (p->has_steps)
        an_out_text(out, "steps %llu-%llu (%llu steps in %s s, %.3f ms per step)",
                    (unsigned long long)p->bin_step_first[v->bin0], (unsigned long long)p->bin_step_last[v->bin1 - 1],
                    (unsigned long long)v->steps, period, v->step_ns / 1e6);
    else
        an_out_text(out, "whole trace, %s s (fewer than two step marks)", period);
    if (isfinite(v->tokens_per_s)) an_out_text(out, "; %.1f tokens/s", v->tokens_per_s);
    an_out_text(out, "\n");
}

/* Rank sets: per rank, the own share of the role's threads on it over the
 * period: time in top-level ranges of work, sync and copy (not comm: the
 * wait inside a collective is the other ranks' time),
 * clipped to [bin_t[0], bin_t[n_bins]), over threads x period. The rank
 * with the most is the limiting rank (ties: the lowest). */
static const an_col rank_cols[] = {{"role", AN_T_STR, 0}, {"rank", AN_T_INT, 0}, {"threads", AN_T_INT, 0},
                                   {"own_pct", AN_T_PCT, 0}, {"own_ms_per_step", AN_T_MS, 0},
                                   {"limiting", AN_T_STR, 0}};

/* "Stragglers: ..." (text, a set): of the collectives of `stragglers`, the
 * one whose late rank costs the others the most (mean wait x instances;
 * ties: the first in the stragglers table). Nothing when no collective is
 * shared by two ranks. -4: no memory, -3: a read failed (both printed). */
static int put_straggler_line(an_out *out, an_trace *t)
{
    an_stragglers s;
    int rc = an_stragglers_compute(t, &s);
    if (rc) return rc == AN_EXIT_FAIL ? -4 : -3; /* printed */
    const an_straggler *best = NULL;
    for (uint32_t i = 0; i < s.n_coll; i++)
        if (!best || (double)s.coll[i].mean_wait_ns * (double)s.coll[i].instances >
                         (double)best->mean_wait_ns * (double)best->instances)
            best = &s.coll[i];
    if (best) {
        char ms[40], stage[256];
        an_fmt_fixed(ms, best->mean_wait_ns, 6, 3);
        an_out_text(out, "Stragglers: rank %d is late most often at %s (last in %u of %llu instances%s); the others "
                         "wait %s ms for it on average.\n",
                    best->last_rank, an_clean(best->stage, stage, sizeof stage), best->times_last,
                    (unsigned long long)best->instances, best->every ? ", every time" : "", ms);
    }
    an_stragglers_free(&s);
    return 0;
}

static int put_ranks(an_out *out, const an_pipe *p, const an_trace *t, int32_t role)
{
    if (!t->is_set || role < 0) return 0;
    st_reader *r = t->r;
    uint32_t n = t->n_ranks, nt = st_reader_n_threads(r);
    int64_t *busy = calloc(n, sizeof *busy);
    uint32_t *threads = calloc(n, sizeof *threads);
    if (!busy || !threads) {
        free(busy);
        free(threads);
        return -1;
    }
    int64_t a = p->bin_t[0], b = p->bin_t[p->n_bins];
    int rc = 0;
    for (uint32_t th = 0; th < nt && !rc; th++) {
        if (strcmp(st_reader_thread(r, th)->role, p->role_names[role]) != 0) continue;
        uint32_t part, local;
        st_reader_thread_part(r, th, &part, &local);
        threads[part]++;
        st_range_iter *it;
        if (st_range_iter_open(&it, r, th, a, b) != ST_OK) {
            rc = -2;
            break;
        }
        st_range g;
        int k;
        while ((k = st_range_iter_next(it, &g)) == 1) {
            st_kind kind = st_reader_stage(r, g.stage)->kind;
            if (g.depth != 0 || !an_kind_is_busy(kind) || kind == ST_COMM) continue;
            int64_t s0 = g.start_ns > a ? g.start_ns : a, e = g.start_ns + g.dur_ns < b ? g.start_ns + g.dur_ns : b;
            if (e > s0) busy[part] += e - s0;
        }
        st_range_iter_close(it);
        if (k < 0) rc = -2;
    }
    if (!rc) {
        uint32_t top = UINT32_MAX;
        double top_share = -1;
        for (uint32_t i = 0; i < n; i++) {
            if (!threads[i]) continue;
            double share = (double)busy[i] / ((double)threads[i] * (double)(b - a));
            if (share > top_share) {
                top_share = share;
                top = i;
            }
        }
        an_out_text(out, "ranks of the bottleneck role: own_pct = work + sync + copy (not comm: the wait inside a "
                         "collective is time lost to the other ranks) over its threads' time on that rank\n");
        an_table *tb = an_table_new(out, "ranks", rank_cols, 6);
        if (!tb) rc = -1;
        uint32_t steps = 0;
        for (uint32_t i = 0; i < p->n_bins; i++) steps += p->bin_steps[i];
        for (uint32_t i = 0; tb && i < n; i++) {
            if (!threads[i]) continue;
            const st_thread_info *any = NULL;
            for (uint32_t th = 0; th < nt && !any; th++) {
                uint32_t part, local;
                st_reader_thread_part(r, th, &part, &local);
                if (part == i) any = st_reader_thread(r, th);
            }
            an_put_str(tb, p->role_names[role]);
            an_put_int(tb, any ? any->rank : (int64_t)i);
            an_put_int(tb, threads[i]);
            an_put_pct(tb, 100.0 * (double)busy[i] / ((double)threads[i] * (double)(b - a)));
            if (steps) an_put_ns(tb, busy[i] / threads[i] / steps);
            else an_put_null(tb);
            an_put_str(tb, i == top ? "yes" : "-");
            an_row_end(tb);
        }
        an_table_end(tb);
        if (top != UINT32_MAX && an_out_format(out) == AN_FMT_TEXT) {
            const st_thread_info *any = NULL;
            for (uint32_t th = 0; th < nt && !any; th++) {
                uint32_t part, local;
                st_reader_thread_part(r, th, &part, &local);
                if (part == top) any = st_reader_thread(r, th);
            }
            an_out_text(out, "Limiting rank: rank %d of %s, its own work %.1f%% of its time.\n", any ? any->rank : (int)top,
                        p->role_names[role], 100.0 * top_share);
            rc = put_straggler_line(out, (an_trace *)t);
            an_out_text(out, "\n");
        }
    }
    free(busy);
    free(threads);
    return rc;
}

typedef struct own_opts {
    uint64_t every, skip;
    double speedup;
    int have_every;
} own_opts;

static void init(an_cmd *c)
{
    own_opts *o = c->own;
    o->speedup = 2.0;
}

static int option(an_cmd *c, int id)
{
    own_opts *o = c->own;
    int rc = AN_EXIT_OK;
    switch (id) {
    case OPT_SPEEDUP: rc = an_opt_speedup("bottleneck", c->args.value, &o->speedup); break;
    case OPT_EVERY:
        rc = an_opt_every("bottleneck", c->args.value, &o->every);
        o->have_every = 1;
        break;
    case OPT_SKIP:
        if (an_parse_u64(c->args.value, &o->skip) || o->skip > UINT32_MAX)
            rc = an_usage_error("bottleneck", "--skip-steps needs a number of steps, not '%s'", c->args.value);
        break;
    }
    return rc;
}

static int work(an_cmd *c)
{
    own_opts *o = c->own;
    an_trace *t = &c->trace;
    int rc = AN_EXIT_OK;
    if (!o->have_every) o->every = an_trace_every(t);
    an_pipe p;
    memset(&p, 0, sizeof p);
    an_role_load *loads = NULL;
    an_window_verdict *w = NULL;
    uint32_t n_windows = 0;
    char *story = NULL;
    if (!rc) {
        an_pipe_opts po;
        memset(&po, 0, sizeof po);
        po.skip_steps = (uint32_t)o->skip;
        po.gpu_idle = 1;
        rc = an_pipe_compute(&p, t, &po);
    }
    if (!rc && o->skip && !p.has_steps) {
        an_error("bottleneck: --skip-steps %llu leaves fewer than one step window in %s", (unsigned long long)o->skip, t->path);
        rc = AN_EXIT_USAGE;
    }
    an_verdict v;
    if (!rc) {
        loads = calloc(p.n_roles ? p.n_roles : 1, sizeof *loads);
        if (!loads) rc = oom();
    }
    if (!rc) {
        an_pipe_loads(&p, 0, p.n_bins, loads);
        an_pipe_verdict(&p, 0, p.n_bins, loads, o->speedup, &v);
        n_windows = an_pipe_window_verdicts(&p, o->every, &w);
        if (!w) rc = AN_EXIT_FAIL;
    }
    /* With the CPU capture: the period's self time on and off the CPU, per role */
    an_cpu_role *cpu = NULL;
    if (!rc) {
        int has = st_reader_has_cpu(t->r);
        if (has < 0) rc = an_trace_fail(t);
        if (has > 0) {
            an_cpu_result res;
            cpu = calloc(p.n_roles ? p.n_roles : 1, sizeof *cpu);
            if (!cpu) rc = oom();
            if (!rc) rc = an_cpu_compute(t, p.bin_t[0], p.bin_t[p.n_bins], &res);
            if (!rc) {
                an_cpu_roles(&p, &res, cpu);
                an_cpu_free(&res);
            }
        }
    }
    /* read with the model (po.gpu_idle): the verdict's period is all bins */
    const char *gpu_note = p.gpu_idle_text;
    if (!rc && c->format == AN_FMT_TEXT) {
        story = an_pipe_story(&p, loads, &v, w, n_windows, o->every);
        if (!story) rc = oom();
    }
    if (!rc) {
        an_out *out = an_out_new(stdout, c->format);
        if (!out) {
            rc = oom();
        } else {
            int moved = 0;
            for (uint32_t i = 1; i < n_windows; i++) moved |= w[i].moved;
            if (c->format == AN_FMT_TEXT) {
                heading(out, &p, &v);
                an_out_text(out, "%s", story);
                if (cpu) put_cpu_lines(out, &p, &v, cpu);
                an_out_text(out, "GPU idle: %s.\n\n", gpu_note);
            } else {
                put_verdict(out, &p, loads, &v, moved, gpu_note, cpu);
            }
            if (put_roles(out, &p, loads, &v)) rc = AN_EXIT_FAIL; /* printed */
            if (!rc && cpu) put_cpu_table(out, &p, &v, cpu);
            if (!rc) {
                int rrc = put_ranks(out, &p, t, v.role);
                if (rrc == -1) rc = oom();
                else if (rrc == -2) rc = an_trace_fail(t);
                else if (rrc == -3) rc = AN_EXIT_USAGE;
                else if (rrc == -4) rc = AN_EXIT_FAIL;
            }
            if (!rc && put_devices(out, &p, &v)) rc = AN_EXIT_FAIL; /* printed */
            if (!rc && put_queues(out, &p, loads, &v)) rc = oom();
            put_depths(out, &p);
            if (!rc && put_windows(out, &p, w, n_windows, o->every)) rc = oom();
            if (an_out_finish(out) && !rc) {
                an_error("bottleneck: cannot write the output");
                rc = AN_EXIT_FAIL;
            }
        }
    }
    if (!rc) an_trace_warn(t);
    free(story);
    free(w);
    free(loads);
    free(cpu);
    an_pipe_free(&p);
    return rc;
}

const an_cmd_def an_cmd_bottleneck = {
    .name = "bottleneck",
    .usage = help,
    .flags = AN_RUN_FORMAT | AN_RUN_TRACE,
    .opts = opts,
    .own_size = sizeof(own_opts),
    .init = init,
    .option = option,
    .work = work,
    .tables = "verdict,roles,cpu,ranks,devices,queues,queue_depth,windows",
};
