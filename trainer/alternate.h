/* alternate.h: --gpu-alternate N, what recording GPU activity costs the trainer measured
 * inside one process. After a warm-up block of N steps (recorded, not timed), GPU recording
 * (st_gpu_pause / st_gpu_resume) is on and paused in blocks of N steps, in pairs whose order
 * alternates (on-paused, paused-on, on-paused, ...: a drift of the process's rate over the run
 * cancels); each block's rate and CPU time are taken between the marks of its steps settle
 * and N, so the steps where CUPTI's buffers and the switch settle are left out. The figure:
 * the mean over pairs of the rate recorded over the rate paused, with its 95 % interval
 * (Student's t over the pairs), and the process's CPU time per timed step in each state. The
 * same scheme as samples/python/dflash_torch.py --gpu-alternate. */
#ifndef TR_ALTERNATE_H
#define TR_ALTERNATE_H

#include <stddef.h>

typedef struct tr_alt_block {
    int on;                    /* GPU recording on in this block */
    double s_per_step, cpu_per_step;
} tr_alt_block;

typedef struct tr_alternate {
    long block, settle;
    int paused;
    int have_mark;
    double mark_s, mark_cpu;
    tr_alt_block *blocks;
    size_t n_blocks, cap;
} tr_alternate;

enum { TR_ALT_NONE = 0, TR_ALT_PAUSE = 1, TR_ALT_RESUME = 2 };

/* Whether block k records (block 0 is the warm-up: on). */
int tr_alternate_on(long k);
void tr_alternate_init(tr_alternate *a, long block, long settle);
/* At the mark of step `step` (1, 2, ...), with the wall and process CPU clocks in seconds:
 * TR_ALT_PAUSE or TR_ALT_RESUME when the caller is to switch GPU recording now, else
 * TR_ALT_NONE. -1 when a block could not be stored (out of memory). */
int tr_alternate_at_step(tr_alternate *a, long step, double now_s, double cpu_s);
/* The summary line (no newline), e.g. "gpu-alternate: 20 block pairs of 50 steps (40 timed):
 * rate recorded / paused mean 0.9650, 95% interval [0.9500, 0.9800], median 0.9660; CPU ms
 * per step recorded 1.234, paused 1.100"; the pair count. */
int tr_alternate_summary(const tr_alternate *a, char *buf, size_t size);
void tr_alternate_free(tr_alternate *a);

#endif
