/* export_common.c: what two converters of `analyze export` share (export.h):
 * the rows of the gpu and gpu_api tables, which --csv (export_csv.c) and
 * --rows (export_rows.c) write with the same columns.
 */
#include <stdint.h>
#include <stdio.h>

#include "export.h"

/* The name column of the gpu table, as the SQL table gives it: the kernel,
 * "memcpy DtoH device->pinned", or the kind. */
const char *an_export_gpu_row_name(const st_gpu_row *g, char *buf, size_t size)
{
    if (g->name) return g->name;
    if (g->rec.kind == ST_GPU_MEMCPY) {
        snprintf(buf, size, "memcpy %s %s->%s", st_gpu_copy_name(g->rec.copy_kind), st_gpu_mem_name(g->rec.src_mem),
                 st_gpu_mem_name(g->rec.dst_mem));
        return buf;
    }
    return st_gpu_kind_name(g->rec.kind);
}

/* GPU records (api 0) or API calls (api 1), one by one to fn; an ST_ code. */
int an_export_each_gpu_row(an_trace *t, int api, an_export_gpu_row_fn fn, void *arg)
{
    int has = st_reader_has_gpu(t->r);
    if (has <= 0) return has;
    st_gpu_iter *it = NULL;
    int rc = api ? st_gpu_api_iter_open(&it, t->r, INT64_MIN, INT64_MAX)
                 : st_gpu_iter_open(&it, t->r, -1, INT64_MIN, INT64_MAX);
    st_gpu_row g;
    while (!rc && (rc = st_gpu_iter_next(it, &g)) == 1) rc = fn(&g, arg);
    st_gpu_iter_close(it);
    return rc < 0 ? rc : 0;
}
