/* st_testing.h: the part of libstagetrace's internals that its tests and
 * benchmarks may use, and nothing more: the trace clock (st_clock.h;
 * bench_range.c times its raw read) and the knobs st_open reads. None of
 * it is exported by libstagetrace.so or installed; a program reaches it by
 * linking libstagetrace.a. The library's own files get it through
 * st_internal.h.
 */
#ifndef ST_TESTING_H
#define ST_TESTING_H

#include <stdint.h>

#include "st_clock.h" /* the trace clock */

/* ---- knobs for tests and benchmarks (not exported by libstagetrace.so;
 * programs reach them through libstagetrace.a). Each is read by st_open:
 * it applies to the traces opened after the call. ---- */
/* The writer sleeps `us` microseconds after each batch it drains from a
 * ring (a slow writer, to fill rings). 0: no sleep (the default). */
void st__test_set_writer_delay(uint32_t us);
/* 1: SQLite's auto-checkpoint runs on the writer thread (the scheme before
 * the checkpointer thread; bench/bench_writer.c compares them). 0: the
 * checkpointer thread (the default). */
void st__test_set_checkpoint_on_writer(int on);

#endif
