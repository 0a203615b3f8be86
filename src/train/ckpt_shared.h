/* What the checkpoint files share among themselves: checkpoint.c (writing),
 * ckpt_read.c (verifying, finding, loading) and ckpt_folder.c (out_dir's
 * checkpoint folders, its lock and room). Internal to them. */
#ifndef ST_TRAIN_CKPT_SHARED_H
#define ST_TRAIN_CKPT_SHARED_H

#include <stdbool.h>
#include <stdint.h>

#include "scaletrain/status.h"

/* A path's room: out_dir's own length and a checkpoint's names under it. */
#define ST_CKPT_PATH_CAP 4096
/* state.json larger than this is not a checkpoint's (ckpt_read.c). */
#define ST_CKPT_STATE_MAX_NBYTES (16 << 20)

/* The bytes of the regular files under path (0 when it is not there); with
 * `remove`, everything under it and path itself are removed as they are
 * counted. */
int64_t st_ckpt_tree_bytes(const char *path, bool remove);
/* Remove a directory and what it holds: a checkpoint (plain files), or a
 * checkpoint folder (checkpoints, temporary ones, `latest`). */
void st_ckpt_remove_dir(const char *path);
/* The step of a directory name "step-<N>" (exactly, N as a save writes it),
 * or -1. */
int64_t st_ckpt_step_of(const char *name);
/* The step of a temporary directory's name, "step-<N>.tmp" or
 * "step-<N>.tmp.<pid>", or -1. */
int64_t st_ckpt_tmp_step_of(const char *name);

/* What ends a resume's search for a checkpoint rather than passing this one
 * over (an older one taken, this one set aside as abandoned): out of
 * memory, the storage failing to read (ST_ERR_IO), a checkpoint of a newer
 * format (ST_ERR_UNSUPPORTED): none says the checkpoint is damaged. */
static inline bool st_ckpt_search_ends(st_status s) {
    return s == ST_ERR_NOMEM || s == ST_ERR_IO || s == ST_ERR_UNSUPPORTED;
}

#endif
