/* progress.c: a progress line on stderr, only when stderr is a terminal and
 * the work is long (half a second); commands count their work with
 * an_progress_add, which costs a compare until the next check.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "analyze.h"

/* ---- progress -------------------------------------------------------------------------- */

#define PROGRESS_EVERY 65536

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void an_progress_start(an_progress *p, const char *what, uint64_t total)
{
    memset(p, 0, sizeof *p);
    p->what = what;
    p->total = total;
    p->enabled = isatty(STDERR_FILENO);
    p->next_check = p->enabled ? PROGRESS_EVERY : UINT64_MAX;
    if (p->enabled) p->start_s = p->last_s = now_s();
}

void an_progress_tick_slow(an_progress *p)
{
    p->next_check = p->done + PROGRESS_EVERY;
    double now = now_s();
    /* Quiet for the first half second, then at most five updates a second. */
    if (now - p->start_s < 0.5 || now - p->last_s < 0.2) return;
    p->last_s = now;
    p->shown = 1;
    if (p->total && p->done <= p->total)
        fprintf(stderr, "\ranalyze: %s %3d%%", p->what, (int)(100.0 * (double)p->done / (double)p->total));
    else
        fprintf(stderr, "\ranalyze: %s %llu", p->what, (unsigned long long)p->done);
    fflush(stderr);
}

void an_progress_end(an_progress *p)
{
    if (p->shown) fputs("\r\033[K", stderr);
    p->shown = 0;
    p->next_check = UINT64_MAX;
}
