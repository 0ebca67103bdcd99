/* dist.h: the trainer as N processes (mpirun -np N build/trainer ..., or srun through the
 * same MPI): one role per rank (layout.h), the hidden-state queue as a credit-based channel
 * between processes, the drafters' gradient all-reduce over the drafter ranks, and one trace
 * per rank on rank 0's clock. README, "Multi-process runs", is the user's side of it.
 *
 * main calls tr_dist_detect first. It reads the launcher's environment without starting MPI
 * (a single process never initialises it): Open MPI's OMPI_COMM_WORLD_SIZE/RANK/LOCAL_RANK,
 * PMI_SIZE/PMI_RANK (srun --mpi=pmi2, MPICH), PMIX_RANK (srun --mpi=pmix); torchrun's RANK and
 * WORLD_SIZE without any of those is refused (Open MPI cannot start from them alone).
 */
#ifndef TR_DIST_H
#define TR_DIST_H

#include <stddef.h>

#include "backend.h"
#include "config.h"

struct tr_data;

enum {
    TR_DIST_SINGLE = 0, /* one process: run the single-process pipeline as always */
    TR_DIST_MULTI = 1,  /* several ranks: MPI is initialised; call tr_dist_main */
    TR_DIST_REFUSED = -1 /* a launch that cannot work: err holds one line (exit status 2) */
};

/* How the process was started; on TR_DIST_MULTI, MPI_Init_thread has run. */
int tr_dist_detect(int *argc, char ***argv, char *err, size_t err_size);

/* The MPI launcher's rank of this process before MPI starts (0 when no MPI launcher started
 * it: torchrun's RANK does not count), so that only rank 0 prints a usage error that every
 * rank found. */
int tr_dist_env_rank(void);

/* Runs this rank's role to the end, writes its trace, finalises MPI. Returns the exit status:
 * 0, 1 (runtime failure), 2 (bad layout or flags for a multi-process run), 130 (signal).
 * Takes ownership of data. */
int tr_dist_main(const tr_config *cfg, const tr_backend *backend, struct tr_data *data,
                 int argc, char **argv);

/* "; multi-process: mpi" in MPI builds, "" otherwise (for --version). */
const char *tr_dist_version_note(void);

/* main.c: prints one profile window to stdout in one write (the trace's on_window). */
struct st_window;
void tr_print_window(const struct st_window *w, void *arg);

#endif
