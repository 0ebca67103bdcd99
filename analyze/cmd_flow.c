/* cmd_flow.c: `analyze flow FILE`: each item followed through the pipeline
 * from the trace's flow records (flow.h): how long items wait in each queue
 * (residence), how long each role holds them, end-to-end latency, where an
 * item's time goes per role and stage, and each step's critical path.
 * docs/analyze.md, "flow", defines every number. This file checks the
 * trace and resolves the window (command.c reads the options and opens the
 * trace); the tables are flow_tables.c's (report prints them too).
 */
#include "flow.h"

static const char help[] =
    "usage: analyze flow [options] FILE|SET\n"
    "(SET: the rank files of one run, listed, as a directory or a quoted glob: docs/analyze.md, \"Rank sets\")\n"
    "\n"
    "Follows each item (st_flow_out / st_flow_in) through the pipeline. A handoff is an\n"
    "id with one out and one in; its queue residence is in - out. On a thread an in is\n"
    "continued by the thread's next flow record when it is an out: the item's next\n"
    "handoff, and the time between them is the item's time in that role. End-to-end\n"
    "latency is the item's last in - its first out. Percentiles are exact (nearest rank).\n"
    "Per step, the critical path walks back from the step's end on the thread that\n"
    "receives items through its outermost ranges and, at a wait_input range the item\n"
    "ended, through the flow to its producer (docs/analyze.md, \"flow\").\n"
    "in_before_out counts ids whose in was recorded before their out: the producer called\n"
    "st_flow_out after the consumer could take the item (after the queue's lock was\n"
    "released); they are left out of every figure. A trace or window with no flow record\n"
    "is an error (exit 2).\n"
    "\n"
    "options:\n"
    "  --steps A:B      items whose first out, and steps whose span, lie in the time from\n"
    "                   step A's mark to step B's mark (A: or :B leave an end open)\n"
    "  --time T0:T1     the same for seconds from the trace start\n"
    "  --format F       text (default), csv or json\n"
    "  --table NAME     only the table NAME (with --format csv or json): flow, latency, queues,\n"
    "                   roles, breakdown, critical_path_steps, critical_path\n"
    "  --align MODE     a rank set's clocks: auto (default), meta, collectives or none\n"
    "                   (docs/analyze.md, \"Clock alignment\")\n";

static const an_opt opts[] = {
    {"steps", 1, AN_OPT_STEPS}, {"time", 1, AN_OPT_TIME}, {"format", 1, AN_OPT_FORMAT}, {"table", 1, AN_OPT_TABLE},
    {"help", 0, AN_OPT_HELP},   {"align", 1, AN_OPT_ALIGN}, {NULL, 0, 0},
};

static int work(an_cmd *c)
{
    an_trace *t = &c->trace;
    int64_t t0 = INT64_MIN, t1 = INT64_MAX;
    int rc = AN_EXIT_OK;
    if (c->window.kind != AN_WIN_ALL) rc = an_window_resolve(&c->window, t, &t0, &t1);
    if (!rc) {
        int has = st_reader_has_flows(t->r);
        if (has < 0) rc = an_trace_fail(t);
        else if (!has) {
            an_error("flow: %s has no flow records (the program did not call st_flow_out/st_flow_in)", t->path);
            rc = AN_EXIT_USAGE;
        }
    }
    if (!rc) rc = an_flow_tables(t, t0, t1, c->format, stdout);
    return rc;
}

const an_cmd_def an_cmd_flow = {
    .name = "flow",
    .usage = help,
    .flags = AN_RUN_FORMAT | AN_RUN_WINDOW | AN_RUN_TRACE | AN_RUN_WARN,
    .opts = opts,
    .work = work,
    .tables = "flow,latency,queues,roles,breakdown,critical_path_steps,critical_path",
};
