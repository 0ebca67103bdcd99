/* command.c: the prologue and epilogue that `analyze` commands share, run
 * from a command's definition (an_cmd_def, analyze.h) as git runs a builtin
 * by its RUN_SETUP flags: parse the options, the shared ones (--help,
 * --format, --table, --steps/--time, --align) by the flags and the command's own through its
 * option hook; then, with AN_RUN_TRACE, open the positionals as one trace or
 * a rank set ("no trace file given" without one), with AN_RUN_SET refuse a
 * single file; call the work; with AN_RUN_WARN print the trace's warnings
 * after a work that succeeded (so a failure stays one line); close. A
 * command is then one file: its help, its options and its work.
 */
#include <stdlib.h>
#include <string.h>

#include "analyze.h"

int an_command_run(const an_cmd_def *d, int argc, char **argv)
{
    an_cmd c;
    memset(&c, 0, sizeof c);
    c.def = d;
    c.format = AN_FMT_TEXT;
    c.window.kind = AN_WIN_ALL;
    if (d->own_size && !(c.own = calloc(1, d->own_size))) {
        an_error("out of memory");
        return AN_EXIT_FAIL;
    }
    if (d->init) d->init(&c);
    an_common_opts common = {d->usage, d->flags & AN_RUN_FORMAT ? &c.format : NULL,
                             d->flags & AN_RUN_WINDOW ? &c.window : NULL,
                             (d->flags & AN_RUN_WINDOW_LAST) != 0, 0,
                             d->flags & AN_RUN_FORMAT ? d->tables : NULL, &c.table, &c.align};
    if (an_args_init(&c.args, d->name, argc, argv)) {
        free(c.own);
        return AN_EXIT_FAIL;
    }
    int id, rc = AN_EXIT_OK;
    while (!rc && (id = an_args_next_own(&c.args, d->opts, &common)) != 0)
        rc = id == -1 ? AN_EXIT_USAGE : d->option ? d->option(&c, id) : AN_EXIT_OK;
    if (common.help_shown) {
        rc = AN_EXIT_OK;
        goto out;
    }
    if (!rc && c.table && c.format == AN_FMT_TEXT)
        rc = an_usage_error(d->name, "--table %s needs --format csv or json", c.table);
    if (!rc && d->check) rc = d->check(&c);
    int opened = 0;
    if (!rc && (d->flags & AN_RUN_TRACE)) {
        if (c.args.n_pos == 0) rc = an_usage_error(d->name, "no trace file given");
        if (!rc) {
            rc = an_trace_open_inputs(&c.trace, c.args.pos, c.args.n_pos, c.align);
            opened = rc == AN_EXIT_OK;
        }
        if (!rc && (d->flags & AN_RUN_SET) && !c.trace.is_set) {
            an_error("%s: %s is one trace, not a rank set (give the rank files of one run)", d->name, c.trace.path);
            rc = AN_EXIT_USAGE;
        }
    }
    if (!rc) {
        an_out_only(c.table);
        rc = d->work(&c);
        char printed[512];
        if (!rc && c.table && an_out_only_missing(printed, sizeof printed)) {
            an_error("%s: no table %s in this output (its tables: %s)", d->name, c.table, printed);
            rc = AN_EXIT_USAGE;
        }
        an_out_only(NULL);
    }
    if (!rc && opened && (d->flags & AN_RUN_WARN)) an_trace_warn(&c.trace);
    if (opened) an_trace_close(&c.trace);
out:
    if (d->done) d->done(&c);
    an_args_free(&c.args);
    free(c.own);
    return rc;
}
