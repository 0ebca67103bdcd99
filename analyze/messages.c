/* messages.c: the one-line messages of `analyze` on stderr: errors,
 * warnings (which a command may keep to print after its work, an_warn_to)
 * and the usage error that points at a command's --help. Every other file
 * reports through these; this one calls none of them. Commands print errors
 * where they find them and return an exit code; only main() exits.
 */
#include <stdarg.h>
#include <stdio.h>

#include "analyze.h"

/* ---- messages --------------------------------------------------------------------- */

/* Messages are one line: a newline inside (from a trace or SQLite) is shown as a space. */
static FILE *g_warn_to; /* NULL: stderr */

void an_warn_to(FILE *f) { g_warn_to = f; }

static void vmessage_to(FILE *to, const char *prefix, const char *fmt, va_list ap)
{
    char buf[1024];
    vsnprintf(buf, sizeof buf, fmt, ap);
    for (char *p = buf; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
    fprintf(to, "analyze: %s%s\n", prefix, buf);
}

static void vmessage(const char *prefix, const char *fmt, va_list ap) { vmessage_to(stderr, prefix, fmt, ap); }

void an_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmessage("", fmt, ap);
    va_end(ap);
}

void an_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmessage_to(g_warn_to ? g_warn_to : stderr, "warning: ", fmt, ap);
    va_end(ap);
}

void an_note(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmessage_to(g_warn_to ? g_warn_to : stderr, "note: ", fmt, ap);
    va_end(ap);
}

int an_usage_error(const char *cmd, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    an_error("%s: %s (see: analyze %s --help)", cmd, buf, cmd);
    return AN_EXIT_USAGE;
}
