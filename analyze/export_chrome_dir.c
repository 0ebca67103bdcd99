/* export_chrome_dir.c: `analyze export FILE|SET --chrome-dir DIR`: one
 * Chrome trace-event JSON file per rank, DIR/rank<R>.pt.trace.json, each
 * what `--chrome` writes of that rank's own trace (export_chrome.c), the
 * layout of a PyTorch profiler run's trace directory, which Holistic Trace
 * Analysis reads with TraceAnalysis(trace_dir=DIR) (each file's rank from
 * its distributedInfo). The ranks' times share one origin: the set's (rank
 * 0's clock), each rank's shifted by its clock offset at that origin, so a
 * collective ends at the same ts in every file (within the offset's
 * uncertainty and the drift over the run). One of the converters under
 * cmd_export.c (export.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "export.h"

/* The origin in rank k's own clock whose mapping onto rank 0's clock is
 * the set's origin (two steps of the fixed point: the mapping has slope 1
 * but for the drift). */
static int64_t rank_origin(const an_trace *set, uint32_t part, int64_t set_origin)
{
    const an_trace *rank = &set->ranks[part];
    st_rank_clock c;
    st_reader_part_clock(set->r, part, &c); /* the set's mapping (--align) */
    int64_t x = set_origin, mapped;
    for (int i = 0; i < 2; i++) {
        if (st_rank_clock_map(&c, x, &mapped) != ST_OK) return rank->origin_ns;
        x = set_origin - (mapped - x);
    }
    return x;
}

int an_export_chrome_dir(an_trace *t, const char *dir, int overwrite)
{
    struct stat st;
    if (stat(dir, &st) == 0 && !S_ISDIR(st.st_mode)) {
        an_error("export: --chrome-dir %s is not a directory", dir);
        return AN_EXIT_USAGE;
    }
    uint32_t n = t->is_set ? t->n_ranks : 1;
    size_t len = strlen(dir) + 64;
    char *path = malloc(len);
    if (!path) {
        an_error("out of memory");
        return AN_EXIT_FAIL;
    }
    /* every file is refused before any is written */
    int rc = AN_EXIT_OK;
    for (uint32_t k = 0; k < n && !rc; k++) {
        an_trace *rt = t->is_set ? &t->ranks[k] : t;
        int64_t rank = 0;
        if (an_trace_meta_i64(rt, "rank", &rank) != 0 || rank < 0) rank = 0;
        snprintf(path, len, "%s/rank%lld.pt.trace.json", dir, (long long)rank);
        rc = an_out_allowed("export", path, overwrite);
    }
    if (!rc && mkdir(dir, 0777) != 0 && errno != EEXIST) {
        an_error("export: cannot create directory %s: %s", dir, strerror(errno));
        rc = AN_EXIT_USAGE;
    }
    for (uint32_t k = 0; k < n && !rc; k++) {
        an_trace *rt = t->is_set ? &t->ranks[k] : t;
        int64_t rank = 0;
        if (an_trace_meta_i64(rt, "rank", &rank) != 0 || rank < 0) rank = 0;
        snprintf(path, len, "%s/rank%lld.pt.trace.json", dir, (long long)rank);
        int64_t own_origin = rt->origin_ns;
        if (t->is_set) rt->origin_ns = rank_origin(t, k, t->origin_ns);
        rc = an_export_chrome(rt, path, overwrite);
        rt->origin_ns = own_origin;
    }
    free(path);
    return rc;
}
