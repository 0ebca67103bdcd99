/* export.h: the converters of `analyze export`, one file per format, under
 * cmd_export.c (which parses the arguments, opens the input and calls them):
 *   export_chrome.c  --chrome: Chrome trace-event JSON (Perfetto, HTA)
 *   export_csv.c     --csv: a CSV file per table
 *   export_rows.c    --rows: a SQLite copy with plain row tables
 *   export_folded.c  --folded: the CPU samples as folded stacks
 *   export_pprof.c   --pprof: the CPU samples as a pprof profile
 *   export_firefox.c --firefox: ranges and CPU samples, Firefox Profiler JSON
 *   export_common.c  the gpu and gpu_api rows that CSV and --rows share
 *   export_cpu.c     the CPU capture's tables that CSV and --rows share.
 * Private to these files.
 */
#ifndef ANALYZE_EXPORT_H
#define ANALYZE_EXPORT_H

#include <stddef.h>

#include <sqlite3.h>

#include "analyze.h"

/* Each writes the whole trace t to its output and returns an exit code
 * (AN_EXIT_*), having printed its one line on failure. An existing output is
 * replaced only with overwrite; a failed export leaves none behind. */
int an_export_chrome(an_trace *t, const char *path, int overwrite);
/* DIR/rank<R>.pt.trace.json per rank of t (a file: its one rank), each
 * an_export_chrome of that rank on the set's origin (export_chrome_dir.c);
 * DIR is made when missing, and every file is checked before any is written. */
int an_export_chrome_dir(an_trace *t, const char *dir, int overwrite);
int an_export_csv(an_trace *t, const char *dir, int overwrite);
int an_export_rows(an_trace *t, const char *path, int overwrite);
/* The CPU capture's stacks over the trace's span (cpu_stacks.h): folded
 * stacks (export_folded.c; weight_ns 1: COUNT is CPU ns, else samples) and
 * a pprof profile (export_pprof.c). A trace without the CPU tables: one
 * line, AN_EXIT_USAGE, nothing written. */
int an_export_folded(an_trace *t, const char *path, int weight_ns, int overwrite);
int an_export_pprof(an_trace *t, const char *path, int overwrite);
/* The analysed time [t0_ns, t1_ns) holds the samples written; windowed 0:
 * every range (the whole trace), 1: the ranges overlapping it. */
int an_export_firefox(an_trace *t, const char *path, int overwrite, int64_t t0_ns, int64_t t1_ns, int windowed);

/* The name column of the gpu table, as the SQL table gives it: the kernel,
 * "memcpy DtoH device->pinned", or the kind (in buf when built). */
const char *an_export_gpu_row_name(const st_gpu_row *g, char *buf, size_t size);

/* GPU records (api 0) or API calls (api 1), one by one to fn, until fn
 * returns nonzero; an ST_ code, or fn's own return when negative. */
typedef int (*an_export_gpu_row_fn)(const st_gpu_row *g, void *arg);
int an_export_each_gpu_row(an_trace *t, int api, an_export_gpu_row_fn fn, void *arg);

/* The CPU capture's tables (export_cpu.c), in the order they are written:
 * name, columns, the query that reads them; optional ones only where the
 * trace has them. */
#define AN_EXPORT_CPU_TABLES 8
typedef struct an_export_cpu_table {
    const char *name;
    const an_col *cols;
    int n_cols;
    const char *select;
    int optional;
} an_export_cpu_table;
extern const an_export_cpu_table an_export_cpu_tables[AN_EXPORT_CPU_TABLES];
/* A failure already printed as one line (not an ST_ code). */
#define AN_EXPORT_PRINTED (-20000)
/* The indices of the CPU tables to write into tables[AN_EXPORT_CPU_TABLES],
 * their number in *n (0 without a CPU capture); 0 or AN_EXPORT_PRINTED. */
int an_export_cpu_list(an_trace *t, int *tables, int *n);
/* Each row of CPU table `table` to fn (its columns those of the table's
 * an_col list) until fn returns nonzero; 0, fn's return or AN_EXPORT_PRINTED. */
typedef int (*an_export_cpu_row_fn)(sqlite3_stmt *row, void *arg);
int an_export_each_cpu_row(an_trace *t, int table, an_export_cpu_row_fn fn, void *arg);

#endif
