/* report.h: what the parts of `analyze report` share: cmd_report.c (the
 * arguments, the document and most sections) and report_timeline.c (the
 * timeline), report_kernels.c (the top kernels) and report_cpu.c (the CPU section). Private to them.
 */
#ifndef ANALYZE_REPORT_H
#define ANALYZE_REPORT_H

#include <stdint.h>
#include <stdio.h>

#include "html.h"
#include "verdict.h"

#define CHART_W 1100       /* SVG width of every chart */

typedef struct an_report {
    FILE *f;
    an_trace *t;
    an_pipe *p;
    an_html_palette pal;
    an_role_load *loads;
    an_verdict v;
    uint64_t every;          /* chart windows */
    uint32_t n_windows;
    uint32_t *first;         /* [n_windows + 1] bins */
    an_window_spec steps;    /* timeline */
    double speedup;
    const char *const *inputs;     /* the trace arguments as given (the export command quoted) */
    int n_inputs;
    const char *const *cpu_stages; /* --cpu-stage values (comma lists) */
    uint32_t n_cpu_stages;
} an_report;

/* Prints "out of memory"; returns AN_EXIT_FAIL. */
int an_report_oom(void);

/* Threads in the order the timeline's lanes and the summary's rows share:
 * by role (the pipeline's order, as bottleneck's), then by name, then id. */
typedef struct an_report_lane {
    uint32_t thread; /* reader thread index */
    uint32_t role;
} an_report_lane;
void an_report_sort_lanes(an_report_lane *lanes, uint32_t n, const an_pipe *p);

/* The timeline section, of rp->steps (default: three steps in the middle
 * of the run); an exit code. */
int an_report_timeline(an_report *rp);

/* The top-kernels section (report_kernels.c), only with GPU activity; an
 * exit code. */
int an_report_kernels(an_report *rp);

/* The CPU section (report_cpu.c), only with the CPU capture; an exit code.
 * an_report_cpu_check: --cpu-stage's names, before anything is written. */
int an_report_cpu(an_report *rp);
int an_report_cpu_check(an_trace *t, const char *const *names, uint32_t n);

#endif
