/* ring.h: the per-thread ring between a recording thread and the writer.
 *
 * Layout. Each registered thread owns one st_ring (record.c allocates it in
 * st_thread_register, 64-byte aligned) and a power-of-two array of 16-byte
 * st_record slots (options.ring_records, 64..2^28). Slot i lives at
 * buf[i & mask]; head and tail count records since registration and never
 * wrap (64 bits). The struct is cut into cache lines so that the two sides
 * never write the same line:
 *   - lines 0-1, `w` and w_*: the producer's own state, read and written
 *     only by the owning thread (the hot path touches only `w`, in line 0,
 *     the slot it writes and `head`; w_dropped_depths, used when begins
 *     are dropped, runs into line 1);
 *   - `head`, on line 2 (ST__RING_HEAD_OFFSET): written by the producer,
 *     read by the writer (the producer also reads it back: it is the only
 *     one that writes it);
 *   - `tail`: written by the writer, read by the producer;
 *   - `dropped`: the producer's drop count, read by anyone (st_dropped);
 *   - then the fields written once before the ring is published (mask,
 *     thread_id, buf) and `retired`.
 *
 * Memory ordering (single producer, single consumer):
 *   - The producer writes a slot, then publishes it with a release store of
 *     head (record.c, publish()). The writer loads head with acquire and only
 *     then reads the slots below it: a record is read only after it is
 *     whole. A record and its payload slot are published by one store.
 *   - The writer reads slots, then stores tail with release (writer.c,
 *     drain_ring()). The producer loads tail with acquire before it reuses a
 *     slot (reserve_slow()): a slot is overwritten only after it was read.
 *     The producer caches tail + capacity in w.limit and reloads it only
 *     when the cached room runs out.
 *   - dropped is a relaxed counter: exact once the producer stops, live
 *     (possibly behind by the calls in flight) before.
 *   - Retiring: st_thread_unregister clears the thread's pointer, then
 *     stores retired = 1 with release; it writes nothing more. The writer
 *     loads retired with acquire BEFORE it loads head, so when it sees 1 the
 *     head it then reads is final: it drains up to it, adds `dropped` to the
 *     trace's retired_dropped and clears the thread's ring slot under
 *     st_trace.lock, and frees the ring (st_dropped sums live rings under
 *     the same lock).
 *
 * Room. A begin reserves the slot of its end: the slots taken are
 * reserved = head + the ends owed to recorded open begins, which is
 * depth - dropped of w.open. A begin (2: its own and its end's), counter,
 * mark, flow or step (2: head and payload) is accepted only while
 * reserved + its slots fit in the ring, so an end always fits and a drop
 * never breaks a range. A begin dropped at depth d marks bit d of
 * w_dropped_depths so that its end is dropped too; depth beyond
 * ST_MAX_DEPTH is dropped (and counted) with its end.
 *
 * The common case in one compare. w.open holds the depth (bits 0-31), the
 * dropped begins still open (bits 32-62) and ST_OPEN_GENERAL (bit 63: the
 * clock is not the TSC, or NVTX is on). A begin is on the fast path when
 * w.open < ST_MAX_DEPTH (TSC, no NVTX, no dropped begin open, depth below
 * the limit), its stage below w.stage_limit and head + w.open + 2 <=
 * w.limit; an end when w.open - 1 < ST_MAX_DEPTH. Everything else goes
 * through record.c's general path, which keeps the rules above.
 */
#ifndef ST_RING_H
#define ST_RING_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "stagetrace.h"

/* ---- ring records ----
 * A slot is 16 bytes, so four share a cache line and none straddles one
 * (buf is 64-byte aligned). Begins and ends take one slot: the timestamp,
 * and id and type in one 8-byte word. A record that carries 64-bit values
 * (a counter sample, a mark, a flow, a step) takes two: its head slot, then
 * a payload slot holding arg (and arg2) in place of ts, id and type. The
 * producer reserves and publishes both with one store of head, so the
 * writer never sees a head slot without its payload. */
enum st_rec_type {
    ST_REC_BEGIN = 1,   /* id = stage */
    ST_REC_END = 2,     /* id = stage */
    ST_REC_COUNTER = 3, /* id = counter; payload arg = double bits */
    ST_REC_MARK = 4,    /* payload arg = const char * (literal) */
    ST_REC_STEP = 5,    /* payload arg = step, arg2 = tokens */
    ST_REC_FLOW = 7,    /* id = direction (0 out, 1 in); payload arg = item id */
};

typedef struct st_record {
    union {
        struct {
            int64_t ts;    /* raw clock (TSC ticks or ns; see clock.c) */
            uint32_t id;
            uint32_t type;
        };
        struct {           /* the payload slot after a COUNTER, MARK, STEP or FLOW */
            uint64_t arg;
            uint64_t arg2;
        };
    };
} st_record;               /* 16 bytes */
_Static_assert(sizeof(st_record) == 16, "a ring slot is 16 bytes");

/* Slots a record of this type takes: the head slot, plus the payload. */
static inline uint32_t st_rec_slots(uint32_t type)
{
    return type == ST_REC_BEGIN || type == ST_REC_END ? 1 : 2;
}

/* w.open: the producer's open-range state in one word, so that the common
 * begin and end test and update it with one load, one compare and one
 * store. */
#define ST_OPEN_DEPTH 0xffffffffull          /* bits 0-31: open begins, dropped or not */
#define ST_OPEN_DROPPED_ONE (1ull << 32)     /* bits 32-62: open begins that were dropped */
#define ST_OPEN_DROPPED_MASK (0x7fffffffull << 32)
#define ST_OPEN_GENERAL (1ull << 63)         /* NVTX on or no TSC: record.c's general path */

typedef struct st_ring {
    /* line 0: the producer's own state. w.open: the open begins
     * (ST_OPEN_DEPTH), the dropped ones among them (ST_OPEN_DROPPED_*) and
     * ST_OPEN_GENERAL; w.limit: last tail seen + capacity, room while
     * reserved + n <= w.limit; w.buf, w.mask: = buf, mask; w.stage_limit:
     * st_stage_limit when last read. stagetrace.h's inline calls use w. */
    _Alignas(64) struct st__ring_hot w;
    uint8_t w_use_tsc, w_nvtx, w_block; /* copies of the clock, NVTX, blocking mode */
    uint64_t w_dropped_depths[ST_MAX_DEPTH / 64]; /* depths of dropped open begins */
    _Alignas(64) _Atomic uint64_t head; /* next slot the producer writes */
    _Alignas(64) _Atomic uint64_t tail; /* next slot the writer reads */
    _Alignas(64) _Atomic uint64_t dropped;
    _Atomic int retired;                /* producer gone; free once drained */
    uint32_t mask;
    uint32_t thread_id;
    st_record *buf;
} st_ring;
_Static_assert(offsetof(st_ring, w) == 0 && offsetof(st_ring, head) == ST__RING_HEAD_OFFSET,
               "stagetrace.h's inline calls find w at the ring's start and head at ST__RING_HEAD_OFFSET");
_Static_assert(ST_REC_BEGIN == 1 && ST_REC_END == 2 && ST_REC_COUNTER == 3 && ST_REC_MARK == 4 &&
               ST_REC_FLOW == 7, "stagetrace.h writes these types");
/* A ring's slot in st_trace.threads is cleared, and its drops added to
 * st_trace.retired_dropped, under st_trace.lock before the ring is freed,
 * so that st_dropped can sum the live rings under the same lock. */

#endif
