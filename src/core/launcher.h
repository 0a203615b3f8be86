/* What started this process, read from the variables launchers set: one
 * rule for every part that asks (MPI start-up, the rank prefix on errors,
 * the hardware probe's line, check's refusal to run as one of many).
 *
 * Checked on a real SLURM 22.05 with OpenMPI 4.1 (tests/slurm/cluster.sh):
 * - mpirun (and scaletrain launch) sets OMPI_COMM_WORLD_SIZE/_RANK/
 *   _LOCAL_SIZE, and PMIX_RANK.
 * - An srun step sets SLURM_STEP_ID, SLURM_STEP_NUM_TASKS, SLURM_PROCID and
 *   SLURM_NTASKS (the step's count); `srun --mpi=pmix` adds PMIX_RANK but
 *   no PMIX_SIZE.
 * - A batch script's own shell has SLURM_NTASKS (the allocation's) and
 *   SLURM_PROCID=0 but no SLURM_STEP_ID: it is one process, whatever -n the
 *   job asked for.
 * - MPICH's and Intel MPI's mpiexec (hydra) set PMI_SIZE/PMI_RANK and
 *   MPI_LOCALNRANKS. */
#ifndef ST_CORE_LAUNCHER_H
#define ST_CORE_LAUNCHER_H

#include <stdbool.h>

typedef struct {
    const char *name;     /* "mpirun", "srun", "mpiexec", "pmix", or "none" */
    long size;            /* processes it started with this one: 1 without a launcher, 0 when it does not say */
    const char *size_var; /* the variable size came from; NULL without one */
    const char *rank;     /* this process's rank as the launcher wrote it; NULL when it does not say */
    long local_size;      /* its processes on this node; 0 when it does not say */
    bool mpi_wired;       /* an MPI process manager set this process up (OMPI_*, PMIX_RANK, PMI_*) */
} st_launcher;

/* From the environment, each call (cheap: a few getenv). */
st_launcher st_launcher_get(void);

/* This process's rank when a launcher started several, else NULL (the
 * prefix of a rank's error messages). */
const char *st_launcher_rank(void);

#endif
