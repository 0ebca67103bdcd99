/* st_palette.h: the stage colours of the NVTX ranges (tracer/nvtx.c), which
 * readers get through st_reader_stage_colours (tracer/palette.c, public in
 * stagetrace_reader.h): the HTML report (analyze/html.c) uses them, so a
 * stage looks the same in Nsight Systems and in the report.
 *
 * One hue family per kind: `work` gets 16 strong colours; the waiting kinds
 * get light tints of one family each (wait_input blues, wait_output oranges,
 * sync purples, comm greens, copy reds). The i-th stage of a kind, counted
 * in registration (id) order, takes the kind's i-th colour, cyclically.
 * Header-only, no state.
 */
#ifndef ST_PALETTE_H
#define ST_PALETTE_H

#include <stdint.h>

#include "stagetrace.h"

#define ST_PALETTE_WORK_N 16
#define ST_PALETTE_FAMILY_N 4

static const uint32_t st_palette_work[ST_PALETTE_WORK_N] = {
    0x1f5fa8, 0xc8102e, 0x2e8b3a, 0x7b3fa0, 0xe08a00, 0x8c564b, 0x0e9aa7, 0xd6338a,
    0x5a6e00, 0x393b79, 0xb35900, 0x843c39, 0x4a7fd6, 0x9b7d00, 0x6b2d5c, 0x1b5e4a,
};
/* [kind - 1][i]: wait_input, wait_output, sync, comm, copy */
static const uint32_t st_palette_family[ST_KIND_COUNT - 1][ST_PALETTE_FAMILY_N] = {
    {0x9ecae1, 0xc6dbef, 0x6baed6, 0xdeebf7}, /* wait_input: blues */
    {0xfdae6b, 0xfdd0a2, 0xfd8d3c, 0xfee6ce}, /* wait_output: oranges */
    {0xbcbddc, 0x9e9ac8, 0xdadaeb, 0x807dba}, /* sync: purples */
    {0xa1d99b, 0x74c476, 0xc7e9c0, 0x41ab5d}, /* comm: greens */
    {0xfc9272, 0xfcbba1, 0xfb6a4a, 0xfee0d2}, /* copy: reds */
};

/* 0xRRGGBB of the i-th stage of kind (0-based among the stages of that kind). */
static inline uint32_t st_palette_rgb(st_kind kind, uint32_t i)
{
    if ((unsigned)kind > ST_WORK && (unsigned)kind < ST_KIND_COUNT)
        return st_palette_family[kind - 1][i % ST_PALETTE_FAMILY_N];
    return st_palette_work[i % ST_PALETTE_WORK_N];
}

#endif
