/* train.out_dir, the folder a run writes (out_dir.h): its checks before the
 * run, its lock, a run before this one's checkpoints set aside, the folder
 * seen by every rank, and the lock still held while the run trains. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "core/atomic_file.h"
#include "core/ticker.h"
#include "core/watch.h"
#include "dist/agree.h"
#include "out_dir.h"

/* Setting aside a finished run's checkpoints (ses->aside_ckpts) replaces
 * out_dir/ckpt.previous: where --resume (from, another folder's) or --init
 * names a checkpoint in it, the run would remove what it reads (and a
 * restart as it was started would read whatever then lies at that path):
 * refused, with what to do. Rank 0's (st_out_dir_check, st_out_dir_take). */
static st_status aside_keeps_source(const st_session *ses, const st_run_opts *opts, const char *from) {
    if (!ses->aside_ckpts) return ST_OK;
    const char *out = ses->cfg->train.out_dir;
    char prev[4200];
    snprintf(prev, sizeof prev, "%s/ckpt.previous", out);
    const char *opt = from[0] && st_path_within(from, prev)                             ? "--resume"
                      : !opts->resume && opts->init && st_path_within(opts->init, prev) ? "--init"
                                                                                        : NULL;
    if (!opt) return ST_OK;
    return st_fail(
        ST_ERR_CONFIG,
        "%s %s names a checkpoint in %s, but train.out_dir %s holds %s (in %s/ckpt), which would be "
        "set aside there in its place, removing it: move %s elsewhere and name it there, or give "
        "this run another train.out_dir (nothing was written)",
        opt, !strcmp(opt, "--init") ? opts->init : opts->resume, prev, out,
        ses->aside_step >= 0 ? "a finished run's checkpoints" : "damaged checkpoints", out, prev);
}

/* A run that will save: room on train.out_dir's filesystem for its
 * checkpoints (st_ckpt_space_check), and, started without --resume, a
 * train.out_dir that holds checkpoints: an unfinished run's (its latest good checkpoint before
 * that run's last step: a --resume forgotten, or a stop's checkpoint) is an
 * error, before anything is written; a finished run's (or only damaged
 * ones) are to be set aside in ckpt.previous (set_aside_previous, where the
 * run first writes: a run refused later, its --init not loading, moves
 * nothing), so that the two runs' checkpoints never mix: pruning and
 * --resume's fallback go by step number, and would keep the old run's later
 * steps over the new run's. The same for a --resume that names another
 * folder's checkpoint (st_ckpt_resume_source): out_dir's are not that run's,
 * and its own later steps' would be moved aside as abandoned by it, its
 * earlier ones pruned as its own. Rank 0 looks (out_dir is one directory for
 * all ranks); every rank returns its outcome. */
st_status st_out_dir_check(st_session *ses, const st_run_opts *opts) {
    st_status s = ST_OK;
    const char *out = ses->cfg->train.out_dir;
    char what[4200], warn[12000] = ""; /* said after the watch */
    snprintf(what, sizeof what, "looking at %s and its checkpoints before the run", out);
    st_watch_begin(ses->store_watch, what);
    /* One run at a time in train.out_dir (st_ckpt_lock_out_dir), in two
     * calls, so that a run refused, or one that fails before it writes (out
     * of device memory), writes nothing: here a run.lock that exists is
     * locked; where the run first writes to out_dir (train_loop, before
     * metrics.jsonl) out_dir and run.lock are made if need be, locked if not
     * yet, and say who holds them. */
    if (ses->rank == 0 && ses->save) s = st_ckpt_lock_out_dir(out, false, &ses->out_lock_fd);
    if (s == ST_OK && ses->rank == 0 && ses->save) s = st_ckpt_folder_check(out);
    char from[4096] = ""; /* (a --resume from another folder: that folder) */
    const bool elsewhere = s == ST_OK && ses->rank == 0 && ses->save && opts->resume &&
                           st_ckpt_resume_source(out, opts->resume, from, sizeof from);
    ses->resume_elsewhere = elsewhere;
    if (s == ST_OK && ses->rank == 0 && ses->save && (!opts->resume || elsewhere))
        s = st_ckpt_new_run_check(out, elsewhere ? from : NULL, &ses->aside_ckpts, &ses->aside_step);
    if (s == ST_OK) s = aside_keeps_source(ses, opts, elsewhere ? from : "");
    if (s == ST_OK && ses->rank == 0 && ses->save) { /* room for the checkpoints (and what moved aside) */
        const st_params *p = &ses->model->params;
        int64_t ckpt, weights;
        st_ckpt_bytes(p->count + p->buffer_count, ses->cfg->optim.type, &ckpt, &weights);
        /* (resumed at its last step: only the final weights are written,
         * the run that reached it having failed to write them) */
        const int64_t start = opts->resume ? st_ckpt_peek_step(out, opts->resume) : 0;
        if (opts->resume && start >= ses->cfg->train.steps) ckpt = 0;
        s = st_ckpt_space_check(
            out, ckpt, weights, ses->cfg->train.keep_checkpoints, -1,
            st_ckpt_planned(start > 0 ? start : 0, ses->cfg->train.steps, ses->cfg->train.checkpoint_every),
            NULL, warn, sizeof warn);
    }
    st_watch_end(ses->store_watch);
    /* Said after the watch, which is the storage's: a standard error that
     * takes no bytes holds each say 5 s at most (st_ticker_say), which a
     * short train.checkpoint_timeout_s would count against the storage. */
    if (warn[0]) st_ticker_say(warn);
    return st_session_agree_outcome(ses, s, "train.out_dir");
}

/* Rank 0 takes train.out_dir once the run's set-up is done: out_dir and
 * run.lock made if need be and locked (st_ckpt_lock_out_dir), a killed
 * run's temporary files swept. Where st_out_dir_check found no run.lock to lock
 * (a new out_dir, or a run before this one that never saved), another run
 * may have come and gone there since, or even started and stopped: its
 * checkpoints are looked at again now, under the lock, as st_out_dir_check
 * did (a finished run's set aside by st_out_dir_first_writes, an unfinished one's an
 * error). Before, a run that finished in that gap was overwritten: its
 * checkpoints, metrics.jsonl and model.safetensors replaced without a word. */
st_status st_out_dir_take(st_session *ses, const st_run_opts *opts) {
    const char *out = ses->cfg->train.out_dir;
    const bool held = ses->out_lock_fd >= 0; /* (since st_out_dir_check: nothing can have changed) */
    ST_TRY(st_ckpt_lock_out_dir(out, true, &ses->out_lock_fd)); /* (makes out_dir) */
    st_ckpt_sweep_leftovers(out); /* (a killed run's temporary files; the lock is ours) */
    if (held || (opts->resume && !ses->resume_elsewhere)) return ST_OK;
    char from[4096] = "", what[4200];
    if (ses->resume_elsewhere) st_ckpt_resume_source(out, opts->resume, from, sizeof from);
    snprintf(what, sizeof what, "looking at %s/ckpt again, under its lock", out);
    st_watch_begin(ses->store_watch, what);
    const st_status s =
        st_ckpt_new_run_check(out, ses->resume_elsewhere ? from : NULL, &ses->aside_ckpts, &ses->aside_step);
    st_watch_end(ses->store_watch);
    ST_TRY(s);
    return aside_keeps_source(ses, opts, from); /* (a run that finished in the gap, set aside now) */
}

/* The checkpoints st_out_dir_check found of a run before this one, moved to
 * out_dir/ckpt.previous, saying so: rank 0, where the run first writes. */
static st_status set_aside_previous(st_session *ses, int64_t start) {
    if (!ses->aside_ckpts) return ST_OK;
    const char *out = ses->cfg->train.out_dir;
    char what[4200], dir[4096], aside[4700];
    snprintf(what, sizeof what, "moving the checkpoints in %s/ckpt to ckpt.previous", out);
    st_watch_begin(ses->store_watch, what);
    const st_status s = st_ckpt_set_aside(out, dir, sizeof dir);
    st_watch_end(ses->store_watch);
    ST_TRY(s);
    if (ses->aside_step >= 0)
        snprintf(aside, sizeof aside,
                 "scaletrain: warning: train.out_dir %s holds a finished run (the latest checkpoint at step "
                 "%lld): its checkpoints are now in %s (replacing any there before); this run starts from "
                 "step %lld and replaces its model.safetensors and metrics\n",
                 out, (long long)ses->aside_step, dir, (long long)start);
    else
        snprintf(
            aside, sizeof aside,
            "scaletrain: warning: train.out_dir %s holds %d checkpoint(s), none good: they are now in %s\n",
            out, ses->aside_ckpts, dir);
    st_ticker_say(aside);
    ses->aside_ckpts = 0;
    return ST_OK;
}

/* Rank 0's first writes to train.out_dir, where the run's set-up can no
 * longer refuse it (a configuration refused later, the data loader's or sync
 * batch-norm's, moves nothing and keeps the previous run's metrics): a
 * finished run's checkpoints set aside (st_out_dir_check), a resumed run's own
 * later ones (another trajectory), and metrics.jsonl opened. */
st_status st_out_dir_first_writes(st_session *ses, const st_run_opts *opts, int64_t start, st_metrics *met) {
    const st_config *c = ses->cfg;
    ST_TRY(set_aside_previous(ses, start)); /* (a run started over a finished one) */
    if (opts->resume) {                     /* its own later checkpoints are the trajectory it leaves */
        int moved;
        char names[1024];
        ST_TRY(st_ckpt_set_aside_after(c->train.out_dir, start, &moved, names, sizeof names));
        if (moved) { /* (rank 0's: a warning, --quiet or not) */
            char aside[9000];
            st_ckpt_aside_note(c->train.out_dir, aside, sizeof aside);
            fprintf(stderr,
                    "resume: warning: %s/ckpt held %d checkpoint%s after step %lld (%s), of the run this "
                    "one leaves at that step: moved to %s/ckpt.abandoned, so that keep_checkpoints and "
                    "--resume's fallback see only this run's (%s)\n",
                    c->train.out_dir, moved, moved == 1 ? "" : "s", (long long)start, names, c->train.out_dir,
                    aside);
        }
    }
    ST_TRY(st_metrics_open(met, c->train.out_dir, start, !ses->resume_elsewhere, c->log.tensorboard,
                           ses->store_watch));
    return ST_OK;
}

/* Every rank writes into train.out_dir (ZeRO: its optimizer shard in each
 * checkpoint): every rank must see the directory rank 0 writes to, checked
 * before the first step (a rank with a path of its own found it only at
 * the first checkpoint, and the run ended with nothing saved). Rank 0 makes
 * a folder there and names it; each rank looks for it in its own
 * train.out_dir (the save's own check at each checkpoint is the same). */
st_status st_out_dir_shared(st_session *ses) {
    const char *out = ses->cfg->train.out_dir;
    char name[64] = {0}, path[4200];
    st_status s = ST_OK;
    if (ses->rank == 0) {
        snprintf(name, sizeof name, ".ranks-see-%ld-%llx", (long)getpid(), (unsigned long long)(st_now() * 1e6));
        snprintf(path, sizeof path, "%s/%s", out, name);
        if (mkdir(path, 0755) != 0)
            s = st_fail(ST_ERR_IO, "%s: cannot create directory: %s", path, strerror(errno));
    }
    s = st_agree_status(ses->comm, s, "train.out_dir");
    if (s == ST_OK) s = st_comm_broadcast_sync(ses->comm, name, sizeof name, ST_COMM_U8, 0, "train.out_dir");
    if (s == ST_OK && ses->rank != 0) {
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", out, name);
        if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
            s = st_fail(ST_ERR_CONFIG,
                        "rank %d does not see in its train.out_dir, %s, the folder rank 0 just made in its "
                        "own: under dist.strategy %s every rank writes its optimizer shard into the "
                        "checkpoints, so train.out_dir must be one directory that every rank sees (the same "
                        "path, on a filesystem every node shares)",
                        ses->rank, out, ses->cfg->dist.strategy);
    }
    if (s == ST_OK || s == ST_ERR_CONFIG) s = st_agree_status(ses->comm, s, "train.out_dir seen by every rank");
    if (ses->rank == 0 && name[0]) {
        snprintf(path, sizeof path, "%s/%s", out, name);
        rmdir(path);
    }
    ses->agreed_error = s != ST_OK; /* every rank has the outcome */
    return s;
}

/* Rank 0, before it writes a checkpoint or the final weights: the run.lock
 * it holds is still train.out_dir's. A folder removed under the run (rm -rf)
 * would be made again by the save, silently, and with its lock gone a
 * second run there is not refused (the two would mix their checkpoints);
 * one replaced may be another run's now. Either way nothing more is written
 * there, and the run stops, saying so. (Watched: a stat on storage that
 * stopped answering.) */
st_status st_out_dir_held(st_session *ses) {
    if (ses->rank != 0 || ses->out_lock_fd < 0) return ST_OK;
    const char *out = ses->cfg->train.out_dir;
    char path[ST_CFG_STR + 16], what[ST_CFG_STR + 64];
    snprintf(path, sizeof path, "%s/run.lock", out);
    snprintf(what, sizeof what, "looking at %s", path);
    struct stat held, now;
    if (fstat(ses->out_lock_fd, &held) != 0) return ST_OK; /* (nothing to compare) */
    st_watch_begin(ses->store_watch, what);
    const int rc = stat(path, &now);
    const int err = errno;
    st_watch_end(ses->store_watch);
    if (rc == 0 && now.st_dev == held.st_dev && now.st_ino == held.st_ino) return ST_OK;
    ses->out_dir_lost = true;
    return st_fail(
        ST_ERR_IO,
        "train.out_dir %s was %s while the run trained (the run.lock it held there %s): nothing more "
        "is written there, where another run may be now (the two would mix their checkpoints), so "
        "the run stops; to keep training, start it again with --resume auto from a copy of its "
        "checkpoints, or from the start",
        out, rc != 0 && err == ENOENT ? "removed" : "replaced",
        rc != 0 && err == ENOENT ? "is gone" : "is another file");
}
