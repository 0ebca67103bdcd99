/* gpu_activity.h: GPU records for the analyses (gpu_activity.c): read a
 * time slice at a time, and the GPU idle time split by cause (host wait,
 * launch gaps, other) as Holistic Trace Analysis splits it. `gpu`,
 * `bottleneck`, `report` and `diff` use it; the model (model.h) reads its
 * per-window GPU busy time through it.
 */
#ifndef ANALYZE_GPU_ACTIVITY_H
#define ANALYZE_GPU_ACTIVITY_H

#include <stddef.h>
#include <stdint.h>

#include "analyze.h"

/* ---- GPU records in time slices --------------------------------------------------------
 * A long run holds tens of millions of GPU records; the analyses read them a
 * time slice at a time (about an_gpu_slice_records records each, judged by
 * the chunk headers), so that memory follows the slice, not the trace. */
extern uint32_t an_gpu_slice_records; /* default AN_GPU_SLICE_RECORDS; tests lower it */
#define AN_GPU_SLICE_RECORDS (1u << 16)
/* The devices that hold records, ascending (*out malloc'd, NULL when none).
 * Returns an exit code. */
int an_gpu_devices(an_trace *t, int32_t **out, uint32_t *n);
/* Calls fn for every record of `device` (kernels, copies, memsets: not
 * syncs, which are host waits) whose start is in [t0, t1), in start order
 * (ties: the longer first), with its launching thread and stage. The row's
 * name is valid during the call. fn returns 0 to go on; anything else stops
 * and is returned. Returns an exit code (errors printed) or fn's. */
typedef int (*an_gpu_fn)(const st_gpu_row *row, void *arg);
int an_gpu_each(an_trace *t, int32_t device, int64_t t0, int64_t t1, an_gpu_fn fn, void *arg);
/* The same for the CUDA API calls (st_gpu_api_iter_open) starting in [t0,
 * t1), in order of (thread, start), the enclosing call first. */
int an_gpu_api_each(an_trace *t, int64_t t0, int64_t t1, an_gpu_fn fn, void *arg);

/* ---- one pass over the GPU records for several readers ----------------------------------
 * A command that needs a device's records for several things (the model's
 * busy time, the idle split, kernel sums) reads them once: each reader is a
 * tap with its own window of start times, and an_gpu_read walks each
 * device's records once (an_gpu_each over the union of the windows), handing
 * each record, in an_gpu_each's order, to every tap whose window holds its
 * start. begin and end (either may be NULL) run for every tap around each
 * device's records, end only when all went well. A tap with an empty window
 * sees no records. Returns an exit code or the first nonzero callback's. */
typedef struct an_gpu_tap {
    int64_t from_ns, to_ns;                  /* records starting in [from_ns, to_ns) */
    int (*begin)(int32_t device, void *arg);
    an_gpu_fn record;
    int (*end)(int32_t device, void *arg);
    void *arg;
} an_gpu_tap;
int an_gpu_read(an_trace *t, const int32_t *devices, uint32_t n_devices, const an_gpu_tap *taps, uint32_t n_taps);
/* How many times an_gpu_read has run in this process (the tests check that
 * a command reads the GPU records once). */
extern unsigned long an_gpu_read_count;

/* GPU idle time per device over [t0, t1), split by cause as HTA does.
 * Busy: the union of the device's kernels, copies and memsets (sync records
 * are host waits, not device work), clipped to the window. Each idle gap
 * ends where a record R starts (the gap before the first record in the
 * window starts at t0); L is the start of the API call that launched R:
 *   host_wait  = the part of the gap before L (nothing was queued: the
 *                device waited for the host to issue R);
 *   launch_gap = the rest, from max(L, gap start) to R's start, when at most
 *                AN_GPU_LAUNCH_GAP_MAX_NS (launch overhead);
 *   other      = the rest when longer (dependencies: events, other streams),
 *                gaps whose L is unknown, and the gap after the last record.
 * Each host-wait part is split by the innermost stage open on R's launching
 * thread at each instant (time in no range counts as stage -1, "(no
 * stage)"): waits[n_waits] holds the host wait per (thread, stage), largest
 * first. host_stage/host_thread/host_stage_ns are its largest entry
 * (host_stage -1 when that is time in no stage; host_thread -1 with no host
 * wait). Time during which GPU recording was paused (the trace's
 * gpu_pauses, their union) is taken out of every part, busy and idle alike,
 * and summed in unrecorded_ns: busy + idle + unrecorded = t1 - t0, and a
 * share of busy or idle is of busy + idle, the recorded time. The launch
 * gap test applies to a gap's recorded rest. Returns 0 devices and *note
 * "no GPU activity in this trace" when there is none. Returns an exit code; free with an_gpu_idle_free. */
#define AN_GPU_LAUNCH_GAP_MAX_NS 50000
typedef struct an_gpu_wait {
    int64_t thread, stage, ns;
} an_gpu_wait;
typedef struct an_gpu_idle {
    int device;
    int64_t busy_ns, idle_ns, host_wait_ns, launch_gap_ns, other_ns;
    int64_t unrecorded_ns; /* GPU recording paused (gpu_pauses): neither busy nor idle */
    uint64_t n_records;
    int64_t host_stage, host_stage_ns, host_thread;
    an_gpu_wait *waits;
    uint32_t n_waits;
} an_gpu_idle;
int an_gpu_idle_split(an_trace *t, int64_t t0_ns, int64_t t1_ns, an_gpu_idle **out, uint32_t *n,
                      const char **note);
void an_gpu_idle_free(an_gpu_idle *d, uint32_t n);
/* The same split as a tap of an_gpu_read: open fills *tap (an empty window
 * when nothing is to be read: no GPU activity, or t1 <= t0) and returns the
 * split (NULL with *rc on an error, printed); close ends it: with ok, *out,
 * *n and *note as an_gpu_idle_split gives them; without, it only frees. */
typedef struct an_gpu_split an_gpu_split;
an_gpu_split *an_gpu_split_open(an_trace *t, int64_t t0_ns, int64_t t1_ns, an_gpu_tap *tap, int *rc);
int an_gpu_split_close(an_gpu_split *s, int ok, an_gpu_idle **out, uint32_t *n, const char **note);
/* The window the GPU split describes. w NULL or AN_WIN_ALL: the steady
 * state, from the second step mark (step 1's in the trainer's traces: the
 * first step holds start-up) to the last (the two marks with exactly two,
 * [all_t0, all_t1) with fewer); --steps: an_window_resolve's; --time: from
 * the trace start (t->origin_ns, meta.start_ns) plus T0 to it plus T1,
 * clipped to [origin, max(span end, all_t1)]. desc gets
 * e.g. "steps 1:20 (0.010-0.200 s, the first step left out as start-up)".
 * Returns an exit code (a bad --steps/--time is printed). */
int an_gpu_window(const an_trace *t, const an_window_spec *w, int64_t all_t0, int64_t all_t1, int64_t *t0_ns,
                  int64_t *t1_ns, char *desc, size_t desc_size);
/* 1 when an_gpu_window's window depends on the caller's span, so that it is
 * known only once the span is: [all_t0, all_t1) (no window given and fewer
 * than two step marks, or none between them), or a --time window (clipped to
 * the span's end, where the GPU records may end after the last range). */
int an_gpu_window_needs_span(const an_trace *t, const an_window_spec *w);
/* The split as one sentence per device, joined by "; " (malloc'd; NULL on
 * no memory), e.g. "GPU 0 busy 61.0%, idle 120.000 ms: host wait 80.000 ms
 * (mostly while target0 is in 'postprocess', 50.000 ms: the device is
 * host-bound there; make that stage asynchronous or move it off the
 * launching thread), launch gaps 1.000 ms, other 39.000 ms". note when
 * there are no devices. */
char *an_gpu_idle_text(const an_trace *t, const an_gpu_idle *d, uint32_t n, const char *note);

/* The GPU idle line of `bottleneck` and `report`: the split over the
 * analysed window [v0, v1) intersected with an_gpu_window's steady state
 * (the analysed window alone when they do not meet), as text: "over steps
 * 1:20 (...): GPU 0 busy ..." with GPU activity, the note alone without.
 * *text malloc'd; *out and *n: the devices (an_gpu_idle_free). Returns an exit
 * code. */
int an_gpu_idle_steady(an_trace *t, int64_t v0, int64_t v1, an_gpu_idle **out, uint32_t *n, char **text);
/* Its two halves, for a split read with other taps (the model's, model.h):
 * the window and its description (desc_size >= 160), and the text from the
 * split's result (malloc'd; NULL on no memory). */
int an_gpu_steady_window(an_trace *t, int64_t v0, int64_t v1, int64_t *w0_ns, int64_t *w1_ns, char *desc,
                         size_t desc_size);
char *an_gpu_idle_steady_text(const an_trace *t, const char *desc, const an_gpu_idle *d, uint32_t n,
                              const char *note);

#endif
