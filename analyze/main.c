/* main.c: the `analyze` program, a git-style CLI over finished traces.
 *
 * `analyze CMD [options] FILE...` runs one subcommand from the table below,
 * each in its own file (cmd_<name>.c), which returns an exit code: 0 done,
 * 2 bad flags or an input that cannot be analyzed (one line on stderr), 1
 * anything else. Each is a definition (an_cmd_def: help, options, flags,
 * work) that the harness runs (command.c: it parses the shared options and
 * opens the trace by the flags, as git's RUN_SETUP does). A new command is
 * a file and a row.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analyze.h"
#include "gpu_activity.h"

static const an_command commands[] = {
    {"info", "metadata, status, counts, duration and throughput of traces", &an_cmd_info},
    {"summary", "per thread, role and stage: total, self, count, mean, p50/p95/p99, max, share", &an_cmd_summary},
    {"intervals", "where each thread's time went per window of N steps (the profile lines)", &an_cmd_intervals},
    {"sql", "run a read-only SQL query with the ranges/counters/gpu/flows row tables", &an_cmd_sql},
    {"export", "write Chrome trace JSON (Perfetto), CSV files, or a plain-rows SQLite copy", &an_cmd_export},
    {"bottleneck", "the role and stage that limit the pipeline, with evidence and a what-if bound", &an_cmd_bottleneck},
    {"gpu", "GPU kernels, copies, busy share, idle split (host wait, launch gaps) and GPU time per CPU stage", &an_cmd_gpu},
    {"cpu", "per thread and stage: on-CPU, preempted and blocked time, samples and top functions", &an_cmd_cpu},
    {"flow", "each item followed through the pipeline: queue residence, latency, per-step critical path", &an_cmd_flow},
    {"diff", "what changed between two traces, role by role and stage by stage, per step", &an_cmd_diff},
    {"stragglers", "rank sets: who arrives last at each collective, and the slowest rank per stage", &an_cmd_stragglers},
    {"report", "one self-contained HTML file with the verdict, charts, a timeline and the summary", &an_cmd_report},
    {"whatif", "simulate the pipeline from the trace: replay it, then predict a change (queue, drafters, ...)", &an_cmd_whatif},
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

static int run_command(const an_command *c, int argc, char **argv)
{
    return an_command_run(c->def, argc, argv);
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: analyze <command> [options] FILE...\n"
            "\n"
            "Explains where time went in a stagetrace trace (one SQLite file per run or rank).\n"
            "\n"
            "commands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++) fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
    fprintf(f,
            "\n"
            "Every command takes --help; tables print as aligned text, or with --format csv|json.\n"
            "Traces are opened read-only and never trusted (docs/analyze.md, docs/trace-format.md).\n"
            "  analyze --version    the tool and trace schema versions\n");
}

int main(int argc, char **argv)
{
    static char out_buf[1 << 16];
    setvbuf(stdout, out_buf, _IOFBF, sizeof out_buf);
    if (argc < 2) {
        an_error("no command given (see: analyze --help)");
        return AN_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    /* a signal removes the temporary files of what is being written (docs/analyze.md) */
    if (an_signals_install()) {
        an_error("cannot install the signal handlers");
        return AN_EXIT_FAIL;
    }
    /* GPU records per time slice (docs/analyze.md, "Memory"): less memory, more passes */
    const char *slice = getenv("ST_GPU_SLICE_RECORDS");
    if (slice && *slice) {
        uint64_t v;
        if (an_parse_u64(slice, &v) || v < 1 || v > UINT32_MAX) {
            an_error("ST_GPU_SLICE_RECORDS must be a number of records from 1 to %u, not '%s'", UINT32_MAX, slice);
            return AN_EXIT_USAGE;
        }
        an_gpu_slice_records = (uint32_t)v;
    }
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        usage(stdout);
        return AN_EXIT_OK;
    }
    if (strcmp(cmd, "--version") == 0) {
        printf("analyze (stagetrace) %s, trace schema version %d\n", ST_VERSION_STRING, ST_SCHEMA_VERSION);
        return AN_EXIT_OK;
    }
    if (strcmp(cmd, "help") == 0) {
        if (argc < 3) {
            usage(stdout);
            return AN_EXIT_OK;
        }
        for (size_t i = 0; i < N_COMMANDS; i++) {
            if (strcmp(argv[2], commands[i].name) != 0) continue;
            char *help_argv[] = {argv[2], "--help", NULL};
            return run_command(&commands[i], 2, help_argv);
        }
        cmd = argv[2];
    } else {
        for (size_t i = 0; i < N_COMMANDS; i++)
            if (strcmp(cmd, commands[i].name) == 0) return run_command(&commands[i], argc - 1, argv + 1);
    }
    if (cmd[0] == '-') an_error("unknown option '%s' (see: analyze --help)", cmd);
    else an_error("unknown command '%s' (see: analyze --help)", cmd);
    return AN_EXIT_USAGE;
}
