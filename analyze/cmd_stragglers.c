/* cmd_stragglers.c: `analyze stragglers SET`: which rank holds the others
 * up (docs/analyze.md, "stragglers"): the options and the tables
 * (collectives, instances, stages) with their closing lines; the matching
 * and the figures are stragglers.c's.
 */
#include <stdlib.h>
#include <string.h>

#include "stragglers.h"

static const char help[] =
    "usage: analyze stragglers [--format text|csv|json [--table NAME]] SET\n"
    "\n"
    "SET: the rank files of one run (several files, a directory or a quoted glob\n"
    "pattern; see docs/analyze.md, \"Rank sets\"). Per collective (ranges of comm\n"
    "stages; on each rank the ranges of a stage are numbered in start order over the\n"
    "rank's threads, and the k-th of every rank is its part of instance k): the rank\n"
    "that arrives last, how long the others wait for it, whether the same rank is\n"
    "last every time; NCCL's kernels in the GPU activity count as collectives of the\n"
    "stages nccl:AllReduce, nccl:AllGather, ...; per role and stage: the slowest rank\n"
    "and how far over the median of the ranks it is.\n"
    "\n"
    "options:\n"
    "  --format F   text (default), csv or json: tables collectives, instances, stages\n"
    "  --table NAME\n"
    "               only the table NAME (with --format csv or json): collectives, instances,\n"
    "               stages\n"
    "  --align MODE\n"
    "               a rank set's clocks: auto (default), meta, collectives or none\n"
    "               (docs/analyze.md, \"Clock alignment\")\n";

static const an_opt opts[] = {
    {"format", 1, AN_OPT_FORMAT}, {"table", 1, AN_OPT_TABLE},
    {"help", 0, AN_OPT_HELP},
    {"align", 1, AN_OPT_ALIGN}, {NULL, 0, 0},
};

static const an_col coll_cols[] = {{"stage", AN_T_STR, 0},          {"instances", AN_T_INT, 0},
                                   {"ranks", AN_T_INT, 0},          {"last_rank", AN_T_INT, 0},
                                   {"times_last", AN_T_INT, 0},     {"last_pct", AN_T_PCT, 0},
                                   {"every_time", AN_T_STR, 0},     {"mean_wait_ms", AN_T_MS, 0},
                                   {"max_wait_ms", AN_T_MS, 0}};
static const an_col inst_cols[] = {{"stage", AN_T_STR, 0},      {"instance", AN_T_INT, 0},
                                   {"step", AN_T_INT, 0},       {"ranks", AN_T_INT, 0},
                                   {"last_rank", AN_T_INT, 0},  {"late_vs_median_ms", AN_T_MS, 0},
                                   {"wait_ms", AN_T_MS, 0},     {"max_wait_ms", AN_T_MS, 0}};
static const an_col stage_cols[] = {{"role", AN_T_STR, 0},           {"stage", AN_T_STR, 0},
                                    {"kind", AN_T_STR, 0},           {"ranks", AN_T_INT, 0},
                                    {"slowest_rank", AN_T_INT, 0},   {"slowest_ms", AN_T_MS, 0},
                                    {"median_ms", AN_T_MS, 0},       {"over_median_pct", AN_T_PCT, 0}};

/* A row of the instances table. */
typedef struct instance_rows {
    an_table *tb;
    st_reader *r;
    const int *rank_of;
    const an_stragglers_marks *marks;
} instance_rows;

static void put_instance_row(void *arg, uint32_t stage, const an_stragglers_instance *in)
{
    instance_rows *rows = arg;
    an_table *tb = rows->tb;
    uint64_t step = 0;
    an_put_str(tb, an_stragglers_stage_name(rows->r, stage));
    an_put_int(tb, (int64_t)in->first->instance);
    if (an_stragglers_instance_step(rows->marks, in, &step)) an_put_int(tb, (int64_t)step);
    else an_put_null(tb);
    an_put_int(tb, in->m);
    an_put_int(tb, rows->rank_of[in->last->rank_ix]);
    an_put_ns(tb, in->last->start_ns - in->median_start_ns);
    an_put_ns(tb, in->mean_wait_ns);
    an_put_ns(tb, in->max_wait_ns);
    an_row_end(tb);
}

static int run(an_trace *t, an_format fmt)
{
    st_reader *r = t->r;
    uint32_t n_ranks = t->n_ranks;
    an_stragglers_data d;
    int rc = an_stragglers_read(t, &d);
    if (rc) return rc;
    const int *rank_of = d.rank_of;
    const char *const *roles = d.roles;
    const an_stragglers_arrival *arr = d.arr;
    size_t n_arr = d.n_arr;
    const an_stragglers_total *tot = d.tot;
    uint32_t n_tot = d.n_tot;
    const an_stragglers_marks *marks = d.marks;
    an_out *out = an_out_new(stdout, fmt);
    if (!out) goto oom;
    an_out_text(out, "== %s: stragglers over %u of %lld ranks; collectives (comm stages) matched by stage and "
                     "instance (the k-th range of the stage on each rank)\n",
                t->label, n_ranks, (long long)t->world_size);
    /* per stage: instances, how often each rank is last, the others' waits */
    an_table *ct = an_table_new(out, "collectives", coll_cols, 9);
    an_table *it_tb = NULL;
    uint32_t *last_count = calloc(n_ranks, sizeof *last_count);
    int64_t *starts = malloc(n_ranks * sizeof *starts);
    char verdict[1024] = "";
    size_t vlen = 0;
    if (!ct || !last_count || !starts) goto oom_out;
    /* two passes over the instances: the collectives table first, then each instance */
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            an_table_end(ct);
            ct = NULL;
            it_tb = an_table_new(out, "instances", inst_cols, 8);
            if (!it_tb) goto oom_out;
        }
        instance_rows rows = {it_tb, r, rank_of, marks};
        for (size_t i = 0; i < n_arr;) {
            uint32_t stage = arr[i].stage;
            an_stragglers_coll c;
            i = an_stragglers_aggregate(arr, n_arr, i, n_ranks, last_count, starts, &c,
                                pass == 1 ? put_instance_row : NULL, &rows);
            if (pass == 0 && c.instances) {
                an_put_str(ct, an_stragglers_stage_name(r, stage));
                an_put_int(ct, (int64_t)c.instances);
                an_put_int(ct, c.ranks_with);
                an_put_int(ct, rank_of[c.top]);
                an_put_int(ct, c.times_last);
                an_put_pct(ct, 100.0 * c.times_last / (double)c.instances);
                an_put_str(ct, c.every ? "yes" : "no");
                an_put_ns(ct, c.mean_wait_ns);
                an_put_ns(ct, c.max_wait_ns);
                an_row_end(ct);
                char ms[40];
                an_fmt_fixed(ms, c.mean_wait_ns, 6, 3);
                if (vlen < sizeof verdict - 200)
                    vlen += (size_t)snprintf(verdict + vlen, sizeof verdict - vlen,
                                             "Straggler at %.64s: rank %d arrives last in %u of %llu instances%s; the "
                                             "others wait %s ms for it on average.\n",
                                             an_stragglers_stage_name(r, stage), rank_of[c.top], c.times_last,
                                             (unsigned long long)c.instances, c.every ? " (every time)" : "", ms);
            }
        }
    }
    an_table_end(it_tb);
    it_tb = NULL;
    /* per role and stage: the slowest rank against the median of the ranks with the stage */
    an_table *st = an_table_new(out, "stages", stage_cols, 8);
    if (!st) goto oom_out;
    int64_t *vals = malloc(n_ranks * sizeof *vals);
    if (!vals) {
        an_table_end(st);
        goto oom_out;
    }
    char slow_line[512] = "";
    double worst_pct = 0;
    for (uint32_t k = 0; k < n_tot; k++) {
        uint32_t slow;
        int64_t median;
        double pct;
        uint32_t m = an_stragglers_slowest(t, &d, k, vals, &slow, &median, &pct);
        if (m < 2) continue;
        const st_stage_info *si = st_reader_stage(r, tot[k].stage);
        an_put_str(st, roles[tot[k].role]);
        an_put_str(st, si->name);
        an_put_str(st, st_kind_name(si->kind));
        an_put_int(st, m);
        an_put_int(st, rank_of[slow]);
        an_put_ns(st, tot[k].ns[slow]);
        an_put_ns(st, median);
        an_put_pct(st, pct);
        an_row_end(st);
        if (si->kind == ST_WORK && pct > worst_pct) {
            worst_pct = pct;
            snprintf(slow_line, sizeof slow_line, "Slowest rank in work: rank %d in %.64s (%.64s), %.1f%% over the median of %u ranks.\n",
                     rank_of[slow], si->name, roles[tot[k].role], pct, m);
        }
    }
    free(vals);
    an_table_end(st);
    if (an_out_format(out) == AN_FMT_TEXT) {
        if (!n_arr || !vlen) an_out_text(out, "No collective (comm stage) is shared by two ranks.\n");
        else an_out_text(out, "%s", verdict);
        if (*slow_line) an_out_text(out, "%s", slow_line);
    }
    free(last_count);
    free(starts);
    if (an_out_finish(out)) {
        an_error("stragglers: cannot write the output");
        rc = AN_EXIT_FAIL;
    }
    goto done;
oom_out:
    an_table_end(ct);
    an_table_end(it_tb);
    an_out_finish(out);
    free(last_count);
    free(starts);
oom:
    an_error("out of memory");
    rc = AN_EXIT_FAIL;
done:
    an_stragglers_data_free(&d);
    return rc;
}

static int work(an_cmd *c) { return run(&c->trace, c->format); }

const an_cmd_def an_cmd_stragglers = {
    .name = "stragglers",
    .usage = help,
    .flags = AN_RUN_FORMAT | AN_RUN_TRACE | AN_RUN_SET | AN_RUN_WARN,
    .opts = opts,
    .work = work,
    .tables = "collectives,instances,stages",
};
