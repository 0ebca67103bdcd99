/* cmd_whatif.c: `analyze whatif FILE [changes]`: the trainer's pipeline
 * simulated from the trace (whatif.c on sim.c), first in the recorded
 * configuration (its prediction against the measured tokens/s), then with
 * the changes asked for: predicted tokens/s with an interval, the bottleneck,
 * the hidden-state queue's occupancy. This file parses the options and
 * prints the tables; docs/analyze.md "whatif" is the reference.
 */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "whatif.h"

static const char help[] =
    "usage: analyze whatif [--queue-depth N] [--drafters N] [--targets N] [--postprocess sync|async]\n"
    "                      [--drafter-gpus I,J,...] [--target-gpus I,J,...] [--stage NAME=FACTORx]...\n"
    "                      [--cores X] [--other-load X] [--gpu-share on|off]\n"
    "                      [--allreduce-ms X] [--runs N] [--seed N]\n"
    "                      [--skip-steps N] [--format text|json] [--json] [--table NAME] FILE\n"
    "\n"
    "Simulates the trainer's pipeline (loader -> target -> post -> hidden-state queue ->\n"
    "drafters) from a trace: each thread's measured work per item, the queues with their\n"
    "depths, the drafters meeting at the all-reduce every step, and the processors the\n"
    "threads share (the cpu backend: one pool of --cores processors for every thread; cuda:\n"
    "each GPU is shared by the threads on it, as many at once as its busy time in the trace\n"
    "allows). It replays the recorded configuration first (predicted against measured\n"
    "tokens/s), then the configuration with the changes given:\n"
    "predicted tokens/s, its 5th-95th percentile over --runs simulations with the work\n"
    "samples drawn again (bootstrap), the bottleneck, and the hidden-state queue's occupancy.\n"
    "\n"
    "changes (any together; none: only the replay)\n"
    "  --queue-depth N            hidden-state queue capacity, 1..100000\n"
    "  --drafters N               drafter threads, 1..64 (all-reduced every step)\n"
    "  --targets N                target threads, 1..64\n"
    "  --drafter-gpus I,J,...     the drafters and their devices, one id (0..999) per thread,\n"
    "                             as the trainer's flag (0,0: two drafters on GPU 0); sets\n"
    "                             --drafters; cuda traces\n"
    "  --target-gpus I,J,...      the same for the targets; sets --targets\n"
    "  --postprocess sync|async   postprocess on the target thread, or on a post thread per target\n"
    "  --stage NAME=FACTORx       the stage's time (with the stages nested in it) times FACTOR\n"
    "                             (0 < FACTOR <= 1000; the x is optional); repeat for more stages\n"
    "model\n"
    "  --cores X                  cpu backend: processors shared by the threads (default: this\n"
    "                             machine's online CPUs); 0 < X <= 4096\n"
    "  --other-load X             cpu backend: always-runnable threads of other programs on\n"
    "                             those processors, 0..65536 (default 0)\n"
    "  --gpu-share on|off         cuda backend: the threads of one GPU share it (default on), or\n"
    "                             each runs as if alone\n"
    "  --allreduce-ms X           the all-reduce's cost per step, 0..1000000 (default: measured\n"
    "                             with 2+ drafters, else 0)\n"
    "  --runs N                   bootstrap simulations for the interval, 1..10000 (default 50)\n"
    "  --seed N                   the bootstrap's seed (default 1); same seed, same output\n"
    "  --skip-steps N             step windows left out at the start (default: a tenth of the\n"
    "                             step marks, at least 1)\n"
    "  --format text|json, --json output format (default text)\n"
    "  --table NAME  only the table NAME, with --format json: whatif, roles, pools\n"
    "\n"
    "Tables: whatif (one row per configuration: measured, replay, changed), roles (per\n"
    "configuration and role: threads, busy, waiting for input, blocked on output), pools.\n"
    "See docs/analyze.md \"whatif\" for the model, its assumptions and its limits.\n";

enum {
    OPT_QUEUE = 1, OPT_DRAFTERS, OPT_TARGETS, OPT_POST, OPT_STAGE, OPT_CORES, OPT_ALLREDUCE, OPT_RUNS, OPT_SEED,
    OPT_SKIP, OPT_JSON, OPT_OTHERS, OPT_GPU_SHARE, OPT_DRAFTER_GPUS, OPT_TARGET_GPUS
};

static const an_opt opts[] = {
    {"queue-depth", 1, OPT_QUEUE},   {"drafters", 1, OPT_DRAFTERS}, {"targets", 1, OPT_TARGETS},
    {"postprocess", 1, OPT_POST},    {"stage", 1, OPT_STAGE},       {"cores", 1, OPT_CORES},
    {"allreduce-ms", 1, OPT_ALLREDUCE}, {"runs", 1, OPT_RUNS},      {"seed", 1, OPT_SEED},
    {"skip-steps", 1, OPT_SKIP},     {"json", 0, OPT_JSON},         {"other-load", 1, OPT_OTHERS}, {"gpu-share", 1, OPT_GPU_SHARE},         {"format", 1, AN_OPT_FORMAT}, {"table", 1, AN_OPT_TABLE},
    {"drafter-gpus", 1, OPT_DRAFTER_GPUS}, {"target-gpus", 1, OPT_TARGET_GPUS},
    {"help", 0, AN_OPT_HELP},        {NULL, 0, 0},
};

#define MAX_SCALES 64
#define AN_WHATIF_MAX_ITEMS 200000 /* items measured per simulated run, at most */

typedef struct stage_arg {
    char name[ST_NAME_MAX + 1];
    double factor;
} stage_arg;

static int parse_int(const char *flag, const char *s, int lo, int hi, int *out)
{
    uint64_t v;
    if (an_parse_u64(s, &v) || v < (uint64_t)lo || v > (uint64_t)hi)
        return an_usage_error("whatif", "%s needs a whole number from %d to %d, not '%s'", flag, lo, hi, s);
    *out = (int)v;
    return 0;
}

/* "I,J,..." (a trailing comma allowed: "3," is device 3 alone): device ids 0..999, one per
 * thread, repeats allowed, 1..AN_WHATIF_MAX_THREADS of them. */
static int parse_devices(const char *flag, const char *s, int *out, int *count)
{
    int k = 0;
    const char *p = s;
    if (!strchr(s, ','))
        return an_usage_error("whatif", "%s needs device ids separated by commas (3, for device 3 alone), not '%s'",
                              flag, s);
    while (*p) {
        char num[8];
        size_t n = strcspn(p, ",");
        uint64_t v;
        if (!n || n >= sizeof num) v = UINT64_MAX;
        else {
            memcpy(num, p, n);
            num[n] = 0;
            if (an_parse_u64(num, &v)) v = UINT64_MAX;
        }
        if (v > 999 || k == AN_WHATIF_MAX_THREADS)
            return an_usage_error("whatif", "%s needs 1 to %d device ids from 0 to 999 separated by commas, not '%s'",
                                  flag, AN_WHATIF_MAX_THREADS, s);
        out[k++] = (int)v;
        p += n;
        if (*p == ',') p++;
    }
    *count = k;
    return 0;
}

static int parse_real(const char *flag, const char *s, double lo, int lo_open, double hi, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !isfinite(v) || (lo_open ? v <= lo : v < lo) || v > hi || isspace((unsigned char)*s))
        return an_usage_error("whatif", "%s needs a number %s %g and at most %g, not '%s'", flag,
                              lo_open ? "above" : "from", lo, hi, s);
    *out = v;
    return 0;
}

static int parse_stage(const char *s, stage_arg *out)
{
    const char *eq = strrchr(s, '=');
    if (!eq || eq == s || (size_t)(eq - s) > ST_NAME_MAX)
        return an_usage_error("whatif", "--stage needs NAME=FACTORx (e.g. forward=0.5x), not '%s'", s);
    memcpy(out->name, s, (size_t)(eq - s));
    out->name[eq - s] = 0;
    const char *f = eq + 1;
    size_t n = strlen(f);
    char num[64];
    if (n && (f[n - 1] == 'x' || f[n - 1] == 'X')) n--;
    if (!n || n >= sizeof num)
        return an_usage_error("whatif", "--stage needs NAME=FACTORx (e.g. forward=0.5x), not '%s'", s);
    memcpy(num, f, n);
    num[n] = 0;
    char *end;
    double v = strtod(num, &end);
    if (end == num || *end || isspace((unsigned char)num[0]) || !isfinite(v) || v <= 0 || v > 1000)
        return an_usage_error("whatif", "--stage %s: the factor must be a number above 0 and at most 1000, not '%s'",
                              out->name, f);
    out->factor = v;
    return 0;
}

static const char *yes_no_post(int async) { return async ? "async" : "sync"; }

typedef struct prediction {
    const char *name;
    an_whatif_cfg cfg;
    an_sim_result point;
    int n_pools;
    int pool_device[AN_SIM_MAX_POOLS];
    double tokens_per_s, p5, p95;
    int stalled;
} prediction;

/* The configuration's bottleneck: a pool whose threads were slowed by each
 * other more than half the time, else the role busiest per thread (the later
 * role on a tie). */
static const char *bottleneck(const an_whatif_input *in, const struct prediction *pr, char *buf, size_t size)
{
    const an_whatif_cfg *cfg = &pr->cfg;
    const an_sim_result *r = &pr->point;
    int n_pools = pr->n_pools;
    int best_pool = -1;
    for (int p = 0; p < n_pools; p++)
        if (r->pool_contended[p] > 0.5 && (best_pool < 0 || r->pool_contended[p] > r->pool_contended[best_pool]))
            best_pool = p;
    if (best_pool >= 0) {
        if (in->cuda) snprintf(buf, size, "shared GPU %d", pr->pool_device[best_pool]);
        else snprintf(buf, size, "shared cpu (%g cores)", in->cores);
        return buf;
    }
    int best = -1;
    for (int k = 0; k < AN_WHATIF_N_ROLES; k++) {
        if (k == AN_WHATIF_POST && !cfg->async) continue;
        if (best < 0 || r->role_busy[k] >= r->role_busy[best]) best = k;
    }
    snprintf(buf, size, "%s", an_whatif_role_names[best]);
    return buf;
}


static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int predict(const an_whatif_input *in, prediction *pr, int runs, uint64_t seed)
{
    uint64_t measure = in->items > 500 ? in->items : 500;
    if (measure > AN_WHATIF_MAX_ITEMS) measure = AN_WHATIF_MAX_ITEMS;
    uint64_t measure_boot = in->items > 50 ? in->items : 50;
    if (measure_boot > AN_WHATIF_MAX_ITEMS) measure_boot = AN_WHATIF_MAX_ITEMS;
    if (an_whatif_simulate(in, &pr->cfg, 0, 0, measure, &pr->point, &pr->n_pools, pr->pool_device)) return -1;
    pr->tokens_per_s = pr->point.items_per_s * in->tokens_per_item;
    pr->stalled = pr->point.stalled || !isfinite(pr->tokens_per_s);
    double *v = malloc((size_t)runs * sizeof *v);
    if (!v) return -1;
    uint64_t state = seed;
    int n = 0;
    for (int i = 0; i < runs; i++) {
        an_sim_result r;
        uint64_t run_seed = an_sim_rand(&state);
        if (an_whatif_simulate(in, &pr->cfg, 1, run_seed, measure_boot, &r, NULL, NULL)) {
            free(v);
            return -1;
        }
        double tps = r.items_per_s * in->tokens_per_item;
        if (!r.stalled && isfinite(tps)) v[n++] = tps;
    }
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    /* nearest rank */
    pr->p5 = n ? v[(size_t)ceil(0.05 * n) - 1 < (size_t)n ? (size_t)ceil(0.05 * n) - 1 : 0] : NAN;
    pr->p95 = n ? v[(size_t)ceil(0.95 * n) - 1] : NAN;
    free(v);
    return 0;
}

static const an_col whatif_cols[] = {
    {"config", AN_T_STR, 0},        {"targets", AN_T_INT, 0},      {"drafters", AN_T_INT, 0},
    {"postprocess", AN_T_STR, 0},   {"queue_depth", AN_T_INT, 0},  {"tokens_per_s", AN_T_REAL, 1},
    {"vs_measured_pct", AN_T_REAL, 1}, {"p5_tokens_per_s", AN_T_REAL, 1}, {"p95_tokens_per_s", AN_T_REAL, 1},
    {"bottleneck", AN_T_STR, 0},    {"queue_mean", AN_T_REAL, 2},  {"queue_full_pct", AN_T_PCT, 0},
    {"queue_empty_pct", AN_T_PCT, 0},
};
static const an_col role_cols[] = {
    {"config", AN_T_STR, 0},         {"role", AN_T_STR, 0},            {"threads", AN_T_INT, 0},
    {"busy_pct", AN_T_PCT, 0},       {"wait_input_pct", AN_T_PCT, 0},  {"wait_output_pct", AN_T_PCT, 0},
};
static const an_col pool_cols[] = {
    {"config", AN_T_STR, 0},   {"pool", AN_T_STR, 0},           {"capacity", AN_T_REAL, 2},
    {"load_pct", AN_T_PCT, 0}, {"contended_pct", AN_T_PCT, 0},
};

static int role_threads(const an_whatif_cfg *c, int role)
{
    switch (role) {
    case AN_WHATIF_LOADER: return 1;
    case AN_WHATIF_TARGET: return c->targets;
    case AN_WHATIF_POST: return c->async ? c->targets : 0;
    default: return c->drafters;
    }
}

static int print(FILE *f, an_format fmt, const an_trace *t, const an_whatif_input *in, prediction *pr, int n_pr,
                 const char *change_text)
{
    an_out *o = an_out_new(f, fmt);
    if (!o) return AN_EXIT_FAIL;
    char path[512], b1[160];
    an_out_text(o, "== %s: whatif; steps %llu-%llu (%llu steps, %d skipped), %s backend", an_clean(t->path, path, sizeof path),
                (unsigned long long)in->step_first, (unsigned long long)in->step_last, (unsigned long long)in->steps,
                (int)in->skip_steps, in->cuda ? "cuda" : "cpu");
    if (in->cuda) an_out_text(o, in->gpu_share_off ? ", GPUs not shared (--gpu-share off)\n" : ", each GPU shared by its threads\n");
    else
        an_out_text(o, ", %g cores shared by all threads and %g runnable threads of other programs\n", in->cores,
                    in->others);
    an_out_text(o, "recorded: %d target%s, %d drafter%s, postprocess %s, queue depth %d (%s)\n", in->rec.targets,
                in->rec.targets == 1 ? "" : "s", in->rec.drafters, in->rec.drafters == 1 ? "" : "s",
                yes_no_post(in->rec.async), in->rec.queue_depth, in->queue_depth_from);
    an_out_text(o, "measured: %.1f tokens/s\n", in->measured_tokens_per_s);
    for (int i = 0; i < n_pr; i++) {
        prediction *p = &pr[i];
        if (p->stalled) {
            an_out_text(o, "%s: the simulation stalled (no thread could move)\n", p->name);
            continue;
        }
        double err = (p->tokens_per_s - in->measured_tokens_per_s) / in->measured_tokens_per_s * 100;
        if (i == 0)
            an_out_text(o, "replay:   %.1f tokens/s predicted for the recorded configuration, %+.1f%% vs measured "
                           "(5-95%%: %.1f-%.1f)\n", p->tokens_per_s, err, p->p5, p->p95);
        else
            an_out_text(o, "changed:  %s\npredicted: %.1f tokens/s (5-95%%: %.1f-%.1f), %+.1f%% vs measured, %+.1f%% vs "
                           "replay; bottleneck %s; hidden-state queue mean %.2f of %d, full %.1f%%, empty %.1f%%\n",
                        change_text, p->tokens_per_s, p->p5, p->p95, err,
                        pr[0].stalled ? NAN : (p->tokens_per_s - pr[0].tokens_per_s) / pr[0].tokens_per_s * 100,
                        bottleneck(in, p, b1, sizeof b1), p->point.queue_mean,
                        p->cfg.queue_depth, p->point.queue_full * 100, p->point.queue_empty * 100);
    }
    if (!in->allreduce_measured && !in->allreduce_given && n_pr > 1 && pr[n_pr - 1].cfg.drafters > 1)
        an_out_text(o, "note: the trace has no all-reduce (one drafter); its cost is taken as 0 (--allreduce-ms)\n");
    an_out_text(o, "\n");

    an_table *tb = an_table_new(o, "whatif", whatif_cols, (int)(sizeof whatif_cols / sizeof *whatif_cols));
    if (!tb) return AN_EXIT_FAIL;
    an_put_str(tb, "measured");
    an_put_int(tb, in->rec.targets);
    an_put_int(tb, in->rec.drafters);
    an_put_str(tb, yes_no_post(in->rec.async));
    an_put_int(tb, in->rec.queue_depth);
    an_put_real(tb, in->measured_tokens_per_s);
    for (int k = 0; k < 7; k++) an_put_null(tb);
    an_row_end(tb);
    for (int i = 0; i < n_pr; i++) {
        prediction *p = &pr[i];
        an_put_str(tb, p->name);
        an_put_int(tb, p->cfg.targets);
        an_put_int(tb, p->cfg.drafters);
        an_put_str(tb, yes_no_post(p->cfg.async));
        an_put_int(tb, p->cfg.queue_depth);
        if (p->stalled) {
            for (int k = 0; k < 8; k++) an_put_null(tb);
        } else {
            an_put_real(tb, p->tokens_per_s);
            an_put_real(tb, (p->tokens_per_s - in->measured_tokens_per_s) / in->measured_tokens_per_s * 100);
            if (isfinite(p->p5)) an_put_real(tb, p->p5);
            else an_put_null(tb);
            if (isfinite(p->p95)) an_put_real(tb, p->p95);
            else an_put_null(tb);
            an_put_str(tb, bottleneck(in, p, b1, sizeof b1));
            an_put_real(tb, p->point.queue_mean);
            an_put_pct(tb, p->point.queue_full * 100);
            an_put_pct(tb, p->point.queue_empty * 100);
        }
        an_row_end(tb);
    }
    an_table_end(tb);

    tb = an_table_new(o, "roles", role_cols, (int)(sizeof role_cols / sizeof *role_cols));
    if (!tb) return AN_EXIT_FAIL;
    for (int i = 0; i < n_pr; i++) {
        prediction *p = &pr[i];
        if (p->stalled) continue;
        if (i) an_table_gap(tb);
        for (int k = 0; k < AN_WHATIF_N_ROLES; k++) {
            int n = role_threads(&p->cfg, k);
            if (!n) continue;
            an_put_str(tb, p->name);
            an_put_str(tb, an_whatif_role_names[k]);
            an_put_int(tb, n);
            an_put_pct(tb, p->point.role_busy[k] * 100);
            an_put_pct(tb, p->point.role_blocked_in[k] * 100);
            an_put_pct(tb, p->point.role_blocked_out[k] * 100);
            an_row_end(tb);
        }
    }
    an_table_end(tb);

    tb = an_table_new(o, "pools", pool_cols, (int)(sizeof pool_cols / sizeof *pool_cols));
    if (!tb) return AN_EXIT_FAIL;
    for (int i = 0; i < n_pr; i++) {
        prediction *p = &pr[i];
        if (p->stalled) continue;
        for (int k = 0; k < p->n_pools; k++) {
            char name[32];
            if (in->cuda) snprintf(name, sizeof name, "gpu%d", p->pool_device[k]);
            else snprintf(name, sizeof name, "cpu");
            an_put_str(tb, p->name);
            an_put_str(tb, name);
            an_put_real(tb, in->cuda ? an_whatif_gpu_capacity(in, p->pool_device[k]) : in->cores);
            an_put_pct(tb, p->point.pool_load[k] * 100);
            an_put_pct(tb, p->point.pool_contended[k] * 100);
            an_row_end(tb);
        }
    }
    an_table_end(tb);
    return an_out_finish(o) ? AN_EXIT_FAIL : AN_EXIT_OK;
}

typedef struct own_opts {
    an_whatif_cfg change;
    int target_devs[AN_WHATIF_MAX_THREADS], drafter_devs[AN_WHATIF_MAX_THREADS], n_tdev, n_ddev;
    stage_arg stages[MAX_SCALES];
    int n_stages, runs;
    uint64_t seed, skip;
    double cores, allreduce_ms, others;
    int gpu_share_off;
} own_opts;

static void init(an_cmd *cmd)
{
    own_opts *o = cmd->own;
    o->change = (an_whatif_cfg){0, 0, -1, 0, 0, NULL, NULL};
    o->runs = 50;
    o->seed = 1;
    o->skip = UINT32_MAX;
    o->allreduce_ms = -1;
    o->others = -1;
}

static int option(an_cmd *cmd, int id)
{
    own_opts *o = cmd->own;
    int rc = AN_EXIT_OK;
    switch (id) {
    case OPT_QUEUE: rc = parse_int("--queue-depth", cmd->args.value, 1, 100000, &o->change.queue_depth) ? AN_EXIT_USAGE : 0; break;
    case OPT_DRAFTERS: rc = parse_int("--drafters", cmd->args.value, 1, AN_WHATIF_MAX_THREADS, &o->change.drafters) ? AN_EXIT_USAGE : 0; break;
    case OPT_TARGETS: rc = parse_int("--targets", cmd->args.value, 1, AN_WHATIF_MAX_THREADS, &o->change.targets) ? AN_EXIT_USAGE : 0; break;
    case OPT_POST:
        if (strcmp(cmd->args.value, "sync") == 0) o->change.async = 0;
        else if (strcmp(cmd->args.value, "async") == 0) o->change.async = 1;
        else rc = an_usage_error("whatif", "--postprocess must be sync or async, not '%s'", cmd->args.value);
        break;
    case OPT_STAGE:
        if (o->n_stages == MAX_SCALES) {
            rc = an_usage_error("whatif", "at most %d --stage options", MAX_SCALES);
            break;
        }
        if (parse_stage(cmd->args.value, &o->stages[o->n_stages])) {
            rc = AN_EXIT_USAGE;
            break;
        }
        for (int i = 0; i < o->n_stages; i++)
            if (strcmp(o->stages[i].name, o->stages[o->n_stages].name) == 0)
                rc = an_usage_error("whatif", "--stage %s is given twice", o->stages[i].name);
        o->n_stages++;
        break;
    case OPT_CORES: rc = parse_real("--cores", cmd->args.value, 0, 1, 4096, &o->cores) ? AN_EXIT_USAGE : 0; break;
    case OPT_GPU_SHARE:
        if (strcmp(cmd->args.value, "on") == 0) o->gpu_share_off = 0;
        else if (strcmp(cmd->args.value, "off") == 0) o->gpu_share_off = 1;
        else rc = an_usage_error("whatif", "--gpu-share must be on or off, not '%s'", cmd->args.value);
        break;
    case OPT_OTHERS: rc = parse_real("--other-load", cmd->args.value, 0, 0, 65536, &o->others) ? AN_EXIT_USAGE : 0; break;
    case OPT_ALLREDUCE: rc = parse_real("--allreduce-ms", cmd->args.value, 0, 0, 1e6, &o->allreduce_ms) ? AN_EXIT_USAGE : 0; break;
    case OPT_RUNS: rc = parse_int("--runs", cmd->args.value, 1, 10000, &o->runs) ? AN_EXIT_USAGE : 0; break;
    case OPT_SEED:
        if (an_parse_u64(cmd->args.value, &o->seed)) rc = an_usage_error("whatif", "--seed needs a whole number, not '%s'", cmd->args.value);
        break;
    case OPT_SKIP:
        if (an_parse_u64(cmd->args.value, &o->skip) || o->skip >= UINT32_MAX)
            rc = an_usage_error("whatif", "--skip-steps needs a number of steps, not '%s'", cmd->args.value);
        break;
    case OPT_JSON: cmd->format = AN_FMT_JSON; break;
    case OPT_DRAFTER_GPUS: rc = parse_devices("--drafter-gpus", cmd->args.value, o->drafter_devs, &o->n_ddev) ? AN_EXIT_USAGE : 0; break;
    case OPT_TARGET_GPUS: rc = parse_devices("--target-gpus", cmd->args.value, o->target_devs, &o->n_tdev) ? AN_EXIT_USAGE : 0; break;
    }
    return rc;
}

static int check(an_cmd *cmd)
{
    own_opts *o = cmd->own;
    int rc = AN_EXIT_OK;
    if (!rc && o->n_ddev) {
        if (o->change.drafters && o->change.drafters != o->n_ddev)
            rc = an_usage_error("whatif", "--drafters %d and --drafter-gpus (%d devices) disagree", o->change.drafters, o->n_ddev);
        o->change.drafters = o->n_ddev;
        o->change.drafter_devices = o->drafter_devs;
    }
    if (!rc && o->n_tdev) {
        if (o->change.targets && o->change.targets != o->n_tdev)
            rc = an_usage_error("whatif", "--targets %d and --target-gpus (%d devices) disagree", o->change.targets, o->n_tdev);
        o->change.targets = o->n_tdev;
        o->change.target_devices = o->target_devs;
    }
    if (!rc && cmd->format == AN_FMT_CSV) rc = an_usage_error("whatif", "--format must be text or json, not 'csv'");
    if (!rc && cmd->args.n_pos != 1) rc = an_usage_error("whatif", cmd->args.n_pos ? "give one trace file" : "no trace file given");
    return rc;
}

static int work(an_cmd *cmd)
{
    own_opts *o = cmd->own;
    an_trace trace, *t = &trace;
    int rc = an_trace_open(t, cmd->args.pos[0]);
    int opened = rc == AN_EXIT_OK;
    an_whatif_scale scales[MAX_SCALES];
    for (int i = 0; !rc && i < o->n_stages; i++) {
        uint32_t ns = st_reader_n_stages(t->r), s;
        for (s = 0; s < ns; s++)
            if (strcmp(st_reader_stage(t->r, s)->name, o->stages[i].name) == 0) break;
        char clean[ST_NAME_MAX + 1];
        if (s == ns) {
            char names[AN_NAMES_BUF];
            an_error("whatif: --stage %s: %s has no stage of that name (stages: %s)",
                     an_clean(o->stages[i].name, clean, sizeof clean), t->path,
                     an_names_in(t, AN_NAMES_STAGES, names, sizeof names));
            rc = AN_EXIT_USAGE;
        } else if (!an_kind_is_busy(st_reader_stage(t->r, s)->kind)) {
            an_error("whatif: --stage %s is a wait (%s); scale the work that the wait waits for", 
                     an_clean(o->stages[i].name, clean, sizeof clean), st_kind_name(st_reader_stage(t->r, s)->kind));
            rc = AN_EXIT_USAGE;
        } else {
            scales[i] = (an_whatif_scale){s, o->stages[i].factor};
        }
    }
    an_whatif_input in;
    memset(&in, 0, sizeof in);
    int have_input = 0;
    if (!rc) {
        an_trace_warn(t);
        an_whatif_opts wo = {(uint32_t)o->skip, o->cores, o->others, o->gpu_share_off, o->allreduce_ms >= 0 ? o->allreduce_ms * 1e6 : -1,
                             scales, (uint32_t)o->n_stages};
        rc = an_whatif_read(t, &wo, &in);
        have_input = rc == AN_EXIT_OK;
    }
    prediction pr[2];
    memset(pr, 0, sizeof pr);
    int n_pr = 0;
    char change_text[1024] = "";
    if (!rc) {
        pr[0].name = "replay";
        pr[0].cfg = in.rec;
        an_whatif_cfg c = in.rec;
        int changed = o->n_stages > 0;
        size_t off = 0;
#define NOTE(...) off += (size_t)snprintf(change_text + (off < sizeof change_text ? off : sizeof change_text - 1), off < sizeof change_text ? sizeof change_text - off : 1, __VA_ARGS__)
        if (o->change.queue_depth && o->change.queue_depth != c.queue_depth) {
            NOTE("%squeue depth %d -> %d", off ? ", " : "", c.queue_depth, o->change.queue_depth);
            c.queue_depth = o->change.queue_depth;
        }
        if (o->change.queue_depth) changed = 1;
        if (o->change.drafters) {
            if (o->change.drafters != c.drafters) NOTE("%sdrafters %d -> %d", off ? ", " : "", c.drafters, o->change.drafters);
            c.drafters = o->change.drafters;
            changed = 1;
        }
        if (o->change.drafter_devices) {
            NOTE("%sdrafters on devices ", off ? ", " : "");
            for (int i = 0; i < o->n_ddev; i++) NOTE("%s%d", i ? "," : "", o->drafter_devs[i]);
            c.drafter_devices = o->drafter_devs;
        }
        if (o->change.targets) {
            if (o->change.targets != c.targets) NOTE("%stargets %d -> %d", off ? ", " : "", c.targets, o->change.targets);
            c.targets = o->change.targets;
            changed = 1;
        }
        if (o->change.target_devices) {
            NOTE("%stargets on devices ", off ? ", " : "");
            for (int i = 0; i < o->n_tdev; i++) NOTE("%s%d", i ? "," : "", o->target_devs[i]);
            c.target_devices = o->target_devs;
        }
        if (o->change.async >= 0) {
            if (o->change.async != c.async)
                NOTE("%spostprocess %s -> %s", off ? ", " : "", yes_no_post(c.async), yes_no_post(o->change.async));
            c.async = o->change.async;
            changed = 1;
        }
        for (int i = 0; i < o->n_stages; i++) {
            char clean[ST_NAME_MAX + 1];
            NOTE("%sstage %s x%g", off ? ", " : "", an_clean(o->stages[i].name, clean, sizeof clean), o->stages[i].factor);
        }
        if (!off) NOTE("none (the recorded configuration)");
#undef NOTE
        n_pr = 1;
        if (changed) {
            pr[1].name = "changed";
            pr[1].cfg = c;
            n_pr = 2;
        }
        /* the replay never takes the stage factors: read the trace again without them */
        if (o->n_stages) {
            an_whatif_input plain;
            an_whatif_opts wo = {(uint32_t)o->skip, o->cores, o->others, o->gpu_share_off, o->allreduce_ms >= 0 ? o->allreduce_ms * 1e6 : -1,
                                 NULL, 0};
            rc = an_whatif_read(t, &wo, &plain);
            if (!rc && predict(&plain, &pr[0], o->runs, o->seed)) rc = AN_EXIT_FAIL;
            if (!rc) an_whatif_free(&plain);
        } else if (predict(&in, &pr[0], o->runs, o->seed)) {
            rc = AN_EXIT_FAIL;
        }
        if (!rc && n_pr == 2 && predict(&in, &pr[1], o->runs, o->seed)) rc = AN_EXIT_FAIL;
        if (rc == AN_EXIT_FAIL) an_error("out of memory");
    }
    if (!rc) rc = print(stdout, cmd->format, t, &in, pr, n_pr, change_text);
    if (have_input) an_whatif_free(&in);
    if (opened) an_trace_close(t);
    return rc;
}

const an_cmd_def an_cmd_whatif = {
    .name = "whatif",
    .usage = help,
    .flags = AN_RUN_FORMAT,
    .opts = opts,
    .own_size = sizeof(own_opts),
    .init = init,
    .option = option,
    .check = check,
    .work = work,
    .tables = "whatif,roles,pools",
};
