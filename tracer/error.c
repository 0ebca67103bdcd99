/* error.c: the per-thread error message behind st_last_error(), the
 * names of stage kinds, and st_log (a trace's messages to options.log).
 * Shared by the library, the reader and the SQLite extension; the
 * recording files, the writer and the store all report through it. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "st_internal.h"

static __thread char st_error_msg[512];

int st_set_error(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(st_error_msg, sizeof st_error_msg, fmt, ap);
    va_end(ap);
    return code;
}

const char *st_last_error(void)
{
    return st_error_msg[0] ? st_error_msg : "no error";
}

static const char *const kind_names[ST_KIND_COUNT] = {
    "work", "wait_input", "wait_output", "sync", "comm", "copy",
};

const char *st_kind_name(st_kind kind)
{
    return (unsigned)kind < ST_KIND_COUNT ? kind_names[kind] : "unknown";
}

int st_kind_parse(const char *name)
{
    for (int i = 0; name && i < ST_KIND_COUNT; i++)
        if (strcmp(name, kind_names[i]) == 0) return i;
    return -1;
}

void st_log(st_trace *t, int level, const char *fmt, ...)
{
    if (!t || !t->opt.log) return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&t->log_lock);
    t->opt.log(level, msg, t->opt.log_arg);
    pthread_mutex_unlock(&t->log_lock);
}
