/* trace_path.h: where the trainer's traces go, and what an older run left there.
 *
 * A run of N processes writes the files st_rank_path names for --trace PATH (README, "Multi-
 * process runs"): DIR/rank<r>.sqlite for a directory (PATH ends in '/' or names one),
 * STEM.rank<r>.sqlite otherwise. A one-process run (plain, mpirun -np 1, a build without MPI)
 * writes DIR/rank0.sqlite for a directory, as rank 0 of any run does, and the file PATH itself
 * otherwise. A directory named with a trailing '/' need not exist: the run creates it.
 *
 * A run of N ranks must leave a set that reads as that run: rank files r >= N of an older,
 * larger run beside it would make `analyze DIR/` refuse a mixed set. tr_trace_clear_stale
 * finds them (names of exactly that pattern, r >= N) before the run opens its traces. Without
 * --overwrite they stop the run; with it each one that is a finished stagetrace trace (it
 * opens with the reader, and no process holds its lock) is removed with its SQLite side files.
 * Anything else of that name (not a trace, or a trace being written) is never removed and
 * stops the run. Other files are never looked at.
 */
#ifndef TR_TRACE_PATH_H
#define TR_TRACE_PATH_H

#include <stddef.h>

/* --trace DIR/ (a path ending in '/') names a directory: it and its missing parents are
 * created (mode 0777 less the umask; one that exists is fine, so ranks of one host may race).
 * Any other path is left alone. 0, or -1 with one line in err. */
int tr_trace_make_dir(const char *path, char *err, size_t err_size);

/* The trace file of a one-process run for --trace PATH. 0, or -1 with one line in err. */
int tr_trace_single_path(const char *path, char *out, size_t size, char *err, size_t err_size);

/* Looks for rank files of ranks >= world beside where a run of `world` processes writes for
 * --trace PATH. Returns 0 when there are none or all were removed (overwrite), `removed`
 * then naming the removed files ("" when none); -1 with one line in err when some stop the
 * run. */
int tr_trace_clear_stale(const char *path, int world, int overwrite, char *removed,
                         size_t removed_size, char *err, size_t err_size);

#endif
