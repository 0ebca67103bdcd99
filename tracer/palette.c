/* palette.c: the stage colours for readers of a trace
 * (st_reader_stage_colours in stagetrace_reader.h): the colours that
 * tracer/nvtx.c gives each stage's NVTX ranges, from the same table
 * (st_palette.h) by the same rule, the i-th stage of a kind in id order
 * taking the kind's i-th colour. A tool drawing the trace (analyze report)
 * then shows each stage as Nsight Systems does, without the tracer's
 * internal header. Built on the reader's public calls only.
 */
#include <stdint.h>

#include "st_palette.h"
#include "stagetrace_reader.h"

uint32_t st_reader_stage_colours(const st_reader *r, uint32_t *rgb, uint32_t n)
{
    if (!r || !rgb) return 0;
    uint32_t n_stages = st_reader_n_stages(r);
    if (n > n_stages) n = n_stages;
    uint32_t used[ST_KIND_COUNT] = {0};
    for (uint32_t s = 0; s < n; s++) {
        st_kind k = st_reader_stage(r, s)->kind;
        uint32_t ki = (unsigned)k < ST_KIND_COUNT ? (uint32_t)k : 0; /* an unknown kind as work, as nvtx.c does */
        rgb[s] = st_palette_rgb((st_kind)ki, used[ki]++);
    }
    return n;
}
