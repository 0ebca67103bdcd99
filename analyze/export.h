/* export.h: the converters of `analyze export`, one file per format, under
 * cmd_export.c (which parses the arguments, opens the input and calls them):
 *   export_chrome.c  --chrome: Chrome trace-event JSON (Perfetto, HTA)
 *   export_csv.c     --csv: a CSV file per table
 *   export_rows.c    --rows: a SQLite copy with plain row tables
 *   export_common.c  the gpu and gpu_api rows that CSV and --rows share;
 *   export_firefox.c --firefox: ranges and CPU samples, Firefox Profiler JSON.
 * Private to these files.
 */
#ifndef ANALYZE_EXPORT_H
#define ANALYZE_EXPORT_H

#include <stddef.h>

#include "analyze.h"

/* Each writes the whole trace t to its output and returns an exit code
 * (AN_EXIT_*), having printed its one line on failure. An existing output is
 * replaced only with overwrite; a failed export leaves none behind. */
int an_export_chrome(an_trace *t, const char *path, int overwrite);
int an_export_csv(an_trace *t, const char *dir, int overwrite);
int an_export_rows(an_trace *t, const char *path, int overwrite);
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

#endif
