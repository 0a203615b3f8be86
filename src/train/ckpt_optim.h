/* The optimizer-state files of a checkpoint (checkpoint.h): the whole state
 * by tensor name (DDP) or one flat shard per rank (ZeRO), and loading any
 * range of the arena from either, which is what resharding is. Internal to
 * src/train (checkpoint.c, ckpt_read.c). */
#ifndef ST_TRAIN_CKPT_OPTIM_H
#define ST_TRAIN_CKPT_OPTIM_H

#include "checkpoint.h"

/* "optim-rank{k}.safetensors" */
void st_ckpt_optim_name(int k, char *buf, size_t size);

/* The whole state (o covers [0, P)) by tensor name. */
st_status st_ckpt_optim_save_tensors(const st_optim *o, const st_params *p, const char *path);
/* o's range as flat m and v, with lo and hi in the metadata. */
st_status st_ckpt_optim_save_shard(const st_optim *o, const char *path);

/* Fill o's range [o->lo, o->hi) and o->t from the optimizer files of dir as
 * *state describes them. */
st_status st_ckpt_optim_load(const char *dir, const st_ckpt_state *state, const st_params *p, st_optim *o);

#endif
