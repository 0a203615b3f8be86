/* What started this process (launcher.h has the variables each launcher sets). */
#include "core/launcher.h"

#include <stdlib.h>

static const char *env(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

static long env_long(const char *name) {
    const char *v = env(name);
    return v ? strtol(v, NULL, 10) : 0;
}

/* This node's entry of a SLURM tasks-per-node list ("2(x3),1": 2 on each of
 * the first three nodes, then 1), SLURM_NTASKS_PER_NODE where the list does
 * not read; 0 when neither does. */
static long slurm_local_tasks(void) {
    const char *list = env("SLURM_STEP_TASKS_PER_NODE");
    if (!list) list = env("SLURM_TASKS_PER_NODE");
    long node = env_long("SLURM_NODEID");
    if (list && node >= 0) {
        const char *p = list;
        while (*p) {
            char *end;
            const long n = strtol(p, &end, 10);
            long times = 1;
            if (end == p || n < 0) break;
            if (end[0] == '(' && end[1] == 'x') {
                times = strtol(end + 2, &end, 10);
                if (*end++ != ')' || times < 1) break;
            }
            if (node < times) return n;
            node -= times;
            if (*end != ',') break;
            p = end + 1;
        }
    }
    return env_long("SLURM_NTASKS_PER_NODE");
}

st_launcher st_launcher_get(void) {
    st_launcher l = {.name = "none", .size = 1};
    l.mpi_wired = env("OMPI_COMM_WORLD_SIZE") || env("PMIX_RANK") || env("PMI_RANK") || env("PMI_SIZE");
    if (env("OMPI_COMM_WORLD_SIZE")) {
        l.name = "mpirun";
        l.size_var = "OMPI_COMM_WORLD_SIZE";
        l.rank = env("OMPI_COMM_WORLD_RANK");
        l.local_size = env_long("OMPI_COMM_WORLD_LOCAL_SIZE");
    } else if (env("SLURM_STEP_ID")) { /* an srun step, not only an allocation */
        l.name = "srun";
        l.size_var = env("SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS";
        l.rank = env("SLURM_PROCID");
        l.local_size = slurm_local_tasks();
    } else if (env("PMI_SIZE")) {
        l.name = "mpiexec";
        l.size_var = "PMI_SIZE";
        l.rank = env("PMI_RANK");
        l.local_size = env_long("MPI_LOCALNRANKS");
    } else if (env("PMIX_RANK")) { /* a PMIx launcher that does not say the size */
        l.name = "pmix";
        l.size = 0;
        l.rank = env("PMIX_RANK");
        return l;
    } else {
        return l;
    }
    l.size = env_long(l.size_var);
    if (l.size < 0) l.size = 0;
    return l;
}

const char *st_launcher_rank(void) {
    const st_launcher l = st_launcher_get();
    return l.size > 1 ? l.rank : NULL;
}
