/* args.c: the option parser every `analyze` command uses (`--name value`,
 * `--name=value`, flags and positionals in any order, `--` ends the options)
 * and the options they all share (an_args_next_own: --help, --format,
 * --table, --steps, --time, --align), which it reads through table.c (formats) and select.c
 * (windows). Errors print one line naming the command.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "align.h"
#include "analyze.h"

/* ---- options ------------------------------------------------------------------------- */

int an_args_init(an_args *a, const char *cmd, int argc, char **argv)
{
    memset(a, 0, sizeof *a);
    a->cmd = cmd;
    a->argc = argc;
    a->argv = argv;
    a->i = 1; /* argv[0] is the command */
    a->pos = calloc((size_t)(argc > 0 ? argc : 1), sizeof *a->pos);
    return a->pos ? 0 : -1;
}

void an_args_free(an_args *a)
{
    free(a->pos);
    a->pos = NULL;
}

int an_args_next(an_args *a, const an_opt *opts)
{
    while (a->i < a->argc) {
        const char *arg = a->argv[a->i++];
        if (a->only_positionals || arg[0] != '-' || arg[1] == '\0') {
            a->pos[a->n_pos++] = arg; /* "-" alone is a positional (stdout) */
            continue;
        }
        if (strcmp(arg, "--") == 0) {
            a->only_positionals = 1;
            continue;
        }
        if (strcmp(arg, "-h") == 0) return AN_OPT_HELP;
        if (arg[1] != '-') {
            an_usage_error(a->cmd, "unknown option '%s'", arg);
            return -1;
        }
        const char *name = arg + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        for (const an_opt *o = opts; o && o->name; o++) {
            if (strlen(o->name) != len || strncmp(o->name, name, len) != 0) continue;
            a->value = NULL;
            if (o->has_arg) {
                if (eq) {
                    a->value = eq + 1;
                } else if (a->i < a->argc) {
                    a->value = a->argv[a->i++];
                } else {
                    an_usage_error(a->cmd, "option '--%s' needs a value", o->name);
                    return -1;
                }
            } else if (eq) {
                an_usage_error(a->cmd, "option '--%s' takes no value", o->name);
                return -1;
            }
            return o->id;
        }
        an_usage_error(a->cmd, "unknown option '%.*s'", (int)(len + 2), arg);
        return -1;
    }
    return 0;
}

int an_args_next_own(an_args *a, const an_opt *opts, an_common_opts *c)
{
    int id;
    while ((id = an_args_next(a, opts)) > 0) {
        if (id == AN_OPT_HELP) {
            fputs(c->help, stdout);
            c->help_shown = 1;
            return -1;
        }
        if (id == AN_OPT_FORMAT && c->format) {
            if (an_parse_format(a->value, c->format)) {
                an_usage_error(a->cmd, "--format must be text, csv or json, not '%s'", a->value);
                return -1;
            }
            continue;
        }
        if (id == AN_OPT_TABLE && c->tables && c->table) {
            size_t len = strlen(a->value);
            const char *p = c->tables;
            while (*p && !(strncmp(p, a->value, len) == 0 && (p[len] == ',' || p[len] == '\0'))) {
                p = strchr(p, ',');
                p = p ? p + 1 : "";
            }
            if (!*p || len == 0 || strchr(a->value, ',')) {
                char list[512];
                size_t n = 0;
                for (const char *q = c->tables; *q && n + 3 < sizeof list; q++) {
                    list[n++] = *q;
                    if (*q == ',') list[n++] = ' ';
                }
                list[n] = '\0';
                an_usage_error(a->cmd, "--table must be one of %s, not '%s'", list, a->value);
                return -1;
            }
            *c->table = a->value;
            continue;
        }
        if (id == AN_OPT_ALIGN && c->align) {
            if (an_align_parse(a->value, c->align)) {
                an_usage_error(a->cmd, "--align must be auto, meta, collectives or none, not '%s'", a->value);
                return -1;
            }
            continue;
        }
        if ((id == AN_OPT_STEPS || id == AN_OPT_TIME) && c->window) {
            if (c->window->kind != AN_WIN_ALL && !c->window_last_wins) {
                an_usage_error(a->cmd, "give one window: --steps or --time, once");
                return -1;
            }
            if (id == AN_OPT_STEPS ? an_window_parse_steps(c->window, a->value)
                                   : an_window_parse_time(c->window, a->value))
                return -1;
            continue;
        }
        return id;
    }
    return id;
}

int an_opt_every(const char *cmd, const char *value, uint64_t *out)
{
    if (an_parse_u64(value, out) || *out < 1 || *out > UINT32_MAX)
        return an_usage_error(cmd, "--every needs a number of steps >= 1, not '%s'", value);
    return AN_EXIT_OK;
}

int an_opt_speedup(const char *cmd, const char *value, double *out)
{
    char *end;
    *out = strtod(value, &end);
    if (end == value || *end || !isfinite(*out) || *out < 1.0 || *out > 1e6)
        return an_usage_error(cmd, "--speedup needs a factor >= 1, not '%s'", value);
    return AN_EXIT_OK;
}
