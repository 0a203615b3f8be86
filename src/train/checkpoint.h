/* Checkpoints: one directory per step under out_dir/ckpt (docs/formats.md),
 * written under a temporary name, synced and renamed, then the `latest`
 * pointer, then the oldest beyond train.keep_checkpoints are deleted; and the
 * way back: find the latest good one, check every file's checksum, restore
 * weights, buffers, optimizer state and the position in the run.
 *
 * Optimizer state: under DDP rank 0 writes optim-rank0.safetensors with the
 * whole state by tensor name (m.NAME, v.NAME); under ZeRO every rank K writes
 * optim-rank{K}.safetensors with its shard [lo, hi) of the flat arena as two
 * flat tensors m and v (metadata lo, hi), and state.json's "optim" records
 * the layout (world size, shard size, parameter count). Loading takes, for
 * the range this run's rank updates, the overlapping parts of whichever files
 * the checkpoint has: so a checkpoint resumes on any number of ranks, DDP or
 * ZeRO (resharded on load). Every file's CRC32 and size are in state.json; a
 * missing or damaged one is an error naming it. A model and optimizer on a
 * CUDA device are written from host copies and restored through them.
 *
 * Internal to src/train. Not here: RNG streams other than the seed (dropout
 * seeds depend on the step only). */
#ifndef ST_TRAIN_CHECKPOINT_H
#define ST_TRAIN_CHECKPOINT_H

#include <stdio.h>

#include "comm/comm.h"
#include "data/sampler.h"
#include "model/model.h"
#include "optim/optim.h"
#include "scaletrain/config.h"

#define ST_CKPT_VERSION 1

/* Where a run stands after `step` optimizer steps. */
typedef struct st_ckpt_state {
    int64_t step;       /* optimizer steps done (the schedule position) */
    st_sampler_pos pos; /* the next micro-batch to read */
    uint64_t seed;      /* train.seed of the run that wrote it */
    int64_t batch_size; /* train.batch_size of that run (read from its config) */
    int64_t run_steps;  /* train.steps of that run, as resolved (its config); -1 when not recorded */
    double run_epochs;  /* train.epochs of that run (its config); 0 when not recorded */
    int64_t samples;    /* samples in that run's training data; -1 when not recorded */
    uint32_t data_crc;  /* st_dataset_fingerprint of that run's training data; 0: not recorded */
    int shuffle, drop_last; /* data.shuffle and data.drop_last of that run (its config): 1 or 0; -1 when not
                               recorded */
    double lr; /* optim.lr of that run as it trained (its config, after optim.lr_scaling); 0: not recorded */
    /* fp16 dynamic loss scaling (src/optim/scaler.h); loss_scale 0: none saved */
    double loss_scale;
    int64_t scale_good_steps, skipped_steps;
    /* a stop or an error cut short the evaluation of this step's weights (train.eval_every): the run that
     * saved it wrote none, and a run resumed from it into another out_dir makes it first */
    bool eval_owed;
    /* the optimizer files (filled by verify) */
    bool optim_sharded; /* optim-rank0..world-1 hold flat shards; else optim-rank0 by tensor name */
    int optim_world;
    int64_t optim_shard, optim_count; /* S and P of the run that wrote it */
} st_ckpt_state;

/* How this run writes optimizer state. world 1 or sharded false: rank 0 alone
 * writes (the others' calls return at once); sharded: every rank calls save
 * (collectives over comm) and writes its own file. */
typedef struct st_ckpt_layout {
    st_comm *comm;
    int rank, world;
    bool sharded;
    int64_t shard; /* S (elements), when sharded */
} st_ckpt_layout;

/* How long ranks wait for one another while a checkpoint is written or read:
 * train.checkpoint_timeout_s, or (0, auto) dist.timeout_s plus 1 s per 10 MB
 * of the checkpoint (the model and optim_world shards of o's state; o NULL:
 * the weights alone). */
double st_ckpt_wait_limit(const st_config *cfg, const st_model *m, const st_optim *o, int optim_world);
/* ... for `bytes` of files, before the model is known (eval's --init). */
double st_ckpt_wait_limit_bytes(const st_config *cfg, double bytes);

/* Write out_dir/ckpt/step-<state->step> (replacing one of that step), point
 * `latest` at it, and keep only the newest `keep` (0 = keep all). The
 * directory's path goes to saved (size bytes) once it is committed (its
 * folder renamed into place), on every rank. A failure before that leaves
 * saved, the previous checkpoints and `latest` as they were; one after it
 * (`latest`, the folder's fsync) fails with saved naming the checkpoint,
 * which is whole (--resume auto takes it). In a distributed run (lay->world > 1)
 * every rank calls it: rank 0 (or, sharded, every rank) writes, and every rank
 * returns the same outcome; their waits have st_ckpt_wait_limit. */
st_status st_ckpt_save(const st_config *cfg, const st_model *m, const st_optim *o, const st_ckpt_state *state,
                       const st_ckpt_layout *lay, char *saved, size_t size);

/* An asynchronous checkpoint (train.checkpoint_async): st_ckpt_save_async
 * (every rank of a distributed run, at the same step) makes the temporary
 * directory, copies the weights and the optimizer state to host memory, and
 * starts a thread that writes this rank's files while training goes on.
 * Nothing is committed until st_ckpt_async_finish (every rank, at the same
 * step): it waits for the writer, then checksums to rank 0, state.json,
 * rename and `latest` as st_ckpt_save. A failure of the writer, or of the
 * save's start on any rank (out of memory, the directory), is reported
 * there, on every rank: st_ckpt_save_async itself returns ST_OK, so that no
 * rank leaves the agreements the others are in. A crash before it leaves the previous checkpoints
 * and `latest` as they were. NULL is "none pending" throughout. */
typedef struct st_ckpt_async st_ckpt_async;
st_status st_ckpt_save_async(st_ckpt_async **out, const st_config *cfg, const st_model *m, const st_optim *o,
                             const st_ckpt_state *state, const st_ckpt_layout *lay);
/* This rank's writer has not finished (no wait). */
bool st_ckpt_async_busy(const st_ckpt_async *a);
/* The step being saved, or -1. */
int64_t st_ckpt_async_step(const st_ckpt_async *a);
/* Wait for the writer and commit; *a becomes NULL. saved: the directory, as
 * st_ckpt_save's (set when committed, even if what follows fails);
 * write_s (may be NULL): how long this rank's writer took. */
st_status st_ckpt_async_finish(st_ckpt_async **a, char *saved, size_t size, double *write_s);
/* On an error path (no collective): wait for the writer and drop it. */
void st_ckpt_async_abandon(st_ckpt_async **a);

/* The keys among keys[0..n) whose value in the config of dir's state.json
 * (the run that wrote it) differs from cfg's, into out as "KEY SAVED ->
 * CURRENT; ..." ("" when none, or when the checkpoint recorded none of
 * them). For a resume's warning about settings that change the trajectory
 * but may change (train.c). */
st_status st_ckpt_config_changes(const char *dir, const st_config *cfg, const char *const *keys, int n,
                                 char *out, size_t cap);

/* Check dir's state.json and the checksum and size of every file it lists;
 * fill *state. A damaged file is ST_ERR_FORMAT naming it. */
st_status st_ckpt_verify(const char *dir, st_ckpt_state *state);
/* The same for model.safetensors alone (the weights --init reads: a
 * checkpoint's optimizer files, twice the weights' bytes under AdamW, are
 * not read through). */
st_status st_ckpt_verify_weights(const char *dir, st_ckpt_state *state);

/* The steps of the checkpoints (step-N directories) in the checkpoint folder
 * ckdir, newest first; *n of them in *steps (malloc'd; NULL when none, and
 * none when ckdir does not exist). A folder that exists and cannot be
 * listed (permissions, a network file system's error) is ST_ERR_IO: a
 * resume must not take it for an empty one and start over. */
st_status st_ckpt_list(const char *ckdir, int64_t **steps, int *n);

/* What a path names among checkpoints, and the directory that goes with it:
 * one checkpoint (a step-N directory, or its state.json: that directory), a
 * checkpoint folder (out_dir/ckpt, or its `latest` pointer: the folder), a
 * run's out_dir (one with ckpt/: that folder), or none of these. */
typedef enum { ST_CKPT_NONE, ST_CKPT_ONE, ST_CKPT_FOLDER, ST_CKPT_RUN } st_ckpt_kind;
st_ckpt_kind st_ckpt_classify(const char *path, char *dir, size_t size);

/* Which checkpoint to resume from: spec "auto" is out_dir/ckpt/latest (a
 * good checkpoint newer than it first: its save was committed, the process
 * ended before `latest` was written), or the
 * newest older good one when that is missing or damaged (saying so on `log`,
 * which may be NULL); *found is false when there is none at all. Any other
 * spec names one checkpoint, which must be good, or a checkpoint folder or
 * run's out_dir, whose latest good checkpoint is taken as "auto" does (an
 * error when it has none). The directory goes to dir, and (state not NULL)
 * the state its verification read. */
st_status st_ckpt_find(const char *out_dir, const char *spec, FILE *log, char *dir, size_t size, bool *found,
                       st_ckpt_state *state);
/* st_ckpt_find on every rank of a job together (comm, world > 1; all of
 * them call it with the same spec): the verification is shared, each rank
 * reading 1/world of every file's bytes and the parts' CRC32s gathered and
 * joined, so that every rank has every file's checksum (the same verdict
 * everywhere) for 1/world of the reading. The ranks take or pass over each
 * checkpoint together; ranks that see different checkpoints (not one
 * out_dir shared by all) end with the same error, naming them. comm NULL
 * or a world of 1: st_ckpt_find. */
st_status st_ckpt_find_shared(const char *out_dir, const char *spec, FILE *log, char *dir, size_t size,
                              bool *found, st_ckpt_state *state, st_comm *comm);

/* The weights file that --init names (to path): a file itself; a checkpoint
 * directory (state.json and every file's checksum verified first); a
 * checkpoint folder (out_dir/ckpt) or its `latest` pointer: its latest good
 * checkpoint, falling back past damaged ones as "auto" does (saying so on
 * log, which may be NULL); a run's out_dir: its final model.safetensors, or
 * else its latest good checkpoint; a folder that holds a model.safetensors
 * alone (weights copied there): that file. *step: the checkpoint's step, -1 for a
 * file named directly or a run's final weights. */
st_status st_ckpt_weights(const char *spec, FILE *log, char *path, size_t size, int64_t *step);

/* For a look before a run (slurm's note on out_dir), never for what a run
 * loads: the checkpoint of folder ckdir that a search (st_ckpt_find) most likely takes, found by
 * reading state.json files alone: the first, in the search's order, whose
 * state.json reads (no file's checksum is verified: where that checkpoint
 * is damaged, the search takes an older one). Into dir, and its state into
 * *state (NULL: not wanted); false where none reads. */
bool st_ckpt_peek(const char *ckdir, char *dir, size_t size, st_ckpt_state *state);
/* Remove out_dir/ckpt and every checkpoint in it: for a caller that owns
 * out_dir and its runs are throwaway (scaletrain bench). */
void st_ckpt_remove_all(const char *out_dir);

/* What a new run (no --resume, or resume_from: a --resume naming another
 * folder's checkpoint, st_ckpt_resume_source) finds in out_dir/ckpt: none,
 * or a finished run's (or only damaged ones), which it sets aside (*aside
 * checkpoints, the latest good one's step in *aside_step, -1 when none is
 * good): ST_OK. An unfinished run's (its latest good checkpoint short of its
 * train.steps): ST_ERR_CONFIG, naming --resume auto. Checkpoints it cannot
 * list or read (the storage): that error, since they may be an unfinished
 * run's. */
st_status st_ckpt_new_run_check(const char *out_dir, const char *resume_from, int *aside,
                                int64_t *aside_step);

/* out_dir/ckpt, where it exists, is a folder: a file there (or anything
 * else) is ST_ERR_CONFIG naming it, before a run trains and then finds no
 * place for its checkpoints. */
st_status st_ckpt_folder_check(const char *out_dir);

/* Where a --resume spec's checkpoint lies: its checkpoint folder (the one
 * that holds step-N) into folder, and true when that is not out_dir/ckpt
 * (another run's out_dir, a copy elsewhere, out_dir/ckpt.previous): out_dir's
 * own checkpoints are then not that run's, and a resume into it is a new run
 * there as far as they go (st_ckpt_new_run_check). False for auto and for a
 * spec that names no checkpoint (the resume's search says what is wrong). */
bool st_ckpt_resume_source(const char *out_dir, const char *spec, char *folder, size_t size);

/* A new run in the out_dir of a finished one: its checkpoint folder becomes
 * out_dir/ckpt.previous (an older one there is removed first), so that the
 * two runs' checkpoints never mix (pruning and --resume's fallback go by step
 * number). Its path goes to moved. */
st_status st_ckpt_set_aside(const char *out_dir, char *moved, size_t size);

/* A run resumed at step `step` with checkpoints of later steps in its own
 * out_dir/ckpt (a rewind to an older checkpoint, or a fallback past damaged
 * ones): those are another trajectory's, so each moves to
 * out_dir/ckpt.abandoned/step-N (step-N.1, ... when that is taken), where
 * pruning and --resume's fallback, which go by step number, cannot mix
 * them with this run's; `latest` names step-`step` when that is in
 * out_dir/ckpt, else it is removed. *moved: how many; names (cap bytes):
 * their names, ", "-separated. Nothing moves when none is later. */
st_status st_ckpt_set_aside_after(const char *out_dir, int64_t step, int *moved, char *names, size_t cap);

/* What the folders set aside in out_dir hold, for a message about space:
 * "OUT/ckpt.abandoned holds X MiB, the checkpoints of ...; ...: nothing
 * prunes them; remove them once ..." into note (cap bytes), or "" when both
 * are empty or absent. ckpt.abandoned grows with every rewind. */
void st_ckpt_aside_note(const char *out_dir, char *note, size_t cap);

/* Remove what a process killed while writing left in out_dir: the
 * temporary files of model.safetensors, metrics.jsonl and trace.json, and
 * ckpt/latest's (`<name>.tmp.<pid>`), and a rescue's lock files
 * (ckpt/rescue-step-N.lock*). Only with out_dir's run.lock held (no other
 * run writes there). */
void st_ckpt_sweep_leftovers(const char *out_dir);

/* The bytes of one checkpoint (weights and optimizer state, every shard
 * together) and of a weights file, for a model of `params` floats (its
 * parameters and buffers) and optim.type optim_type; headers rounded up. */
void st_ckpt_bytes(int64_t params, const char *optim_type, int64_t *ckpt_bytes, int64_t *model_bytes);

/* A checkpoint named by hand whose folder is a save's temporary one
 * (step-N.tmp.PID: never renamed into place, the run stopped while writing
 * it): a warning on log (when not NULL) for `who`; nothing for another. */
void st_ckpt_uncommitted_note(const char *dir, const char *who, FILE *log);

/* The step of the checkpoint --resume `spec` would take, from the names
 * alone (no file read): "auto" and a folder or out_dir their newest step-N,
 * one checkpoint its own; -1 when none is named. (A damaged one would send
 * the resume further back: a guess, for sizing.) */
int64_t st_ckpt_peek_step(const char *out_dir, const char *spec);

/* Can train.out_dir's filesystem hold this run's checkpoints? ckpt_bytes:
 * one checkpoint (weights and optimizer state, every shard), model_bytes:
 * the final weights file, keep: train.keep_checkpoints (0 = all),
 * free_bytes: the space free there (< 0: asked of the filesystem of out_dir,
 * or of its nearest existing parent). An error, before anything is written,
 * when the first checkpoint and the final weights do not fit; a warning
 * (one line, "scaletrain: warning: ...\n") in warn when the checkpoints
 * kept (keep + 1 at once while a save commits, less those already in
 * out_dir/ckpt) will not: warn[0] is '\0' when there is none. planned: the
 * checkpoints the run commits at least (st_ckpt_planned; -1: not known):
 * where those alone will not fit, the warning says the disk fills for
 * certain, *certain (when not NULL) set; it also sizes a run that keeps
 * every checkpoint (keep 0), said nothing of without it. */
st_status st_ckpt_space_check(const char *out_dir, int64_t ckpt_bytes, int64_t model_bytes, int64_t keep,
                              int64_t free_bytes, int64_t planned, bool *certain, char *warn,
                              size_t warn_cap);

/* The checkpoints a run from step `start` to `steps` commits at least:
 * every train.checkpoint_every steps and the last step's (train.
 * checkpoint_every_s and a stop may add more). */
int64_t st_ckpt_planned(int64_t start, int64_t steps, int64_t every);

/* One run at a time in a train.out_dir: rank 0 of a run that saves holds an
 * flock of out_dir/run.lock (which says who holds it: "a run on host h,
 * pid p, since T") to the end of the run, so a second run there (the same
 * job started twice, a --resume auto while the first still trains) is
 * refused before it writes, naming the first, where the two would mix their
 * checkpoints (pruning and `latest` go by step number) and truncate each
 * other's metrics.jsonl. *lock_fd: -1 until the lock is held, then its
 * descriptor (the caller closes it at the run's end; the lock goes with the
 * process however it ends). create false: lock run.lock if it exists;
 * true: make out_dir and run.lock if need be, lock them if not yet, and
 * write who holds them. Held by another process: ST_ERR_CONFIG naming it.
 * A file system without locks (ENOLCK, EOPNOTSUPP: Lustre mounted without
 * flock): ST_OK, unlocked, and with create a warning said. flock over
 * NFS is the server's lock, seen by every node. */
st_status st_ckpt_lock_out_dir(const char *out_dir, bool create, int *lock_fd);
/* Whether a run holds out_dir's lock now; its line ("a run on host h, pid
 * p, since T") in who. */
bool st_ckpt_out_dir_in_use(const char *out_dir, char *who, size_t cap);

/* Verify dir, then restore the weights and buffers of m, the state of o
 * for its range [o->lo, o->hi) (whose kind must match) and *state. */
st_status st_ckpt_load(const char *dir, st_model *m, st_optim *o, st_ckpt_state *state);

/* st_ckpt_load for a dir that was just verified (by st_ckpt_find, which
 * filled *state): its files are read once more, not twice. */
st_status st_ckpt_load_verified(const char *dir, const st_ckpt_state *state, st_model *m, st_optim *o);

#endif
