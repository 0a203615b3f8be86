/* --resume (resume.h): the checkpoint loaded, and each setting that shapes
 * the trajectory compared with the checkpoint's run's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/text.h"
#include "core/watch.h"
#include "data/sampler.h"
#include "resume.h"

/* A boolean as the configuration writes it. */
static const char *tf(bool b) { return b ? "true" : "false"; }

st_status st_run_resume(st_session *ses, const st_run_opts *opts, st_optim *opt, const st_ckpt_layout *lay,
                        st_scaler *sc, st_ckpt_state *ck, bool *resumed_owed, uint32_t data_crc) {
    st_config *c = ses->cfg;
    st_model *m = ses->model;
    const int64_t steps = c->train.steps, n = ses->train.n;
    const uint64_t seed = (uint64_t)c->train.seed;
    const bool dist = ses->world > 1;
    st_status s = ST_OK;
    /* Ranks read the checkpoint at their own pace: their waits for one
     * another have the checkpoint's limit until they agree on the step. */
    if (opts->resume && dist)
        st_comm_set_timeout(ses->comm, st_ckpt_wait_limit(c, m, opt, lay->sharded ? ses->world : 1),
                            "train.checkpoint_timeout_s");
    if (opts->resume) {
        char dir[4096];
        bool found;
        FILE *log = opts->quiet ? NULL : ses->out;
        /* Its warnings (a damaged checkpoint passed over, settings changed
         * since it was written): rank 0's, on standard error, --quiet or not */
        FILE *warn = ses->rank == 0 ? stderr : NULL;
        st_ckpt_state got; /* what the verification read: the files are read once more, to load */
        char what[4200];
        snprintf(what, sizeof what, "reading the checkpoint to resume from (--resume %s) in %s/ckpt",
                 opts->resume, c->train.out_dir);
        st_watch_begin_limit(ses->store_watch, what,
                             st_ckpt_wait_limit(c, m, opt, lay->sharded ? ses->world : 1));
        /* (with several ranks, each checksums 1/world of the files: st_ckpt_find_shared) */
        s = st_ckpt_find_shared(c->train.out_dir, opts->resume, warn, dir, sizeof dir, &found, &got,
                                dist ? ses->comm : NULL);
        if (s == ST_OK && found) s = st_ckpt_load_verified(dir, &got, m, opt);
        st_watch_end(ses->store_watch);
        /* (each rank loads its own: one that failed, out of memory or its
         * files unreadable, ends every rank here, each saying so, not the
         * others waiting for it in the next collective) */
        ST_GOTO(st_session_agree_outcome(ses, s, "loading the checkpoint"));
        if (found) {
            st_session_take_norm(ses, dir, true);
            *ck = got;
            *resumed_owed = got.eval_owed;
            /* Another global batch (more GPUs, the per-GPU batch kept, say):
             * on from the same place in the data, the sampler's position
             * counted in this run's batches (st_sampler_rebatch); the step
             * count and the schedule by it go on as they are */
            if (ck->batch_size != c->train.batch_size && ck->pos.micro == 0) {
                int64_t again = 0;
                const int64_t at = ck->pos.step * ck->batch_size;
                ck->pos = st_sampler_rebatch(ck->pos, ck->batch_size, c->train.batch_size, &again);
                char re[128] = "";
                if (again)
                    snprintf(re, sizeof re, "; the step starts %lld samples before it, which are read again",
                             (long long)again);
                if (warn)
                    fprintf(
                        warn,
                        "resume: warning: the checkpoint was written with train.batch_size %lld; this run "
                        "has %lld: it goes on at step %lld of epoch %lld in batches of %lld (sample %lld of "
                        "the epoch, where the checkpoint's run stood%s). The steps count on from %lld, "
                        "and optim.lr and its schedule go by steps as set (nothing is scaled with the "
                        "batch: set optim.lr for it if that is meant)\n",
                        (long long)ck->batch_size, (long long)c->train.batch_size, (long long)ck->pos.step,
                        (long long)ck->pos.epoch, (long long)c->train.batch_size, (long long)at, re,
                        (long long)ck->step);
                /* train.steps auto counts this run's batches from step 0, the checkpoint's steps were
                 * of the other: the epochs end elsewhere (where its plan's remaining samples end in
                 * this run's batches) */
                const int64_t plan = st_steps_of_epochs(c->train.epochs, n, ck->batch_size, c->data.drop_last);
                const int64_t end =
                    ck->step + (plan > ck->step ? ((plan - ck->step) * ck->batch_size + c->train.batch_size - 1) /
                                                    c->train.batch_size
                                              : 0);
                if (warn && st_config_source(c, "train.steps") == ST_SRC_AUTO && end != steps)
                    fprintf(warn,
                            "resume: warning: train.steps auto is %lld, train.epochs %g in batches of %lld "
                            "counted from step 0, and the first %lld steps took %lld samples each: the run "
                            "ends %s train.epochs; train.steps: %lld ends it there\n",
                            (long long)steps, c->train.epochs, (long long)c->train.batch_size,
                            (long long)ck->step, (long long)ck->batch_size, end < steps ? "past" : "short of",
                            (long long)end);
            } else if (ck->batch_size != c->train.batch_size) { /* (a checkpoint within a step: none is) */
                s = st_fail(
                    ST_ERR_CONFIG,
                    "%s was written with train.batch_size %lld within a step (micro-batch %lld), this "
                    "run has %lld; resume with its batch size",
                    dir, (long long)ck->batch_size, (long long)ck->pos.micro, (long long)c->train.batch_size);
                ses->agreed_error = true; /* (one checkpoint, agreed settings: every rank has it; none aborts) */
                goto fail;
            }
            if (ck->seed != seed && warn)
                fprintf(warn,
                        "resume: warning: the checkpoint was written with train.seed %llu; this run has "
                        "%llu: from here on the data order (and dropout) differ from the interrupted run's "
                        "(resume with train.seed: %llu to continue it)\n",
                        (unsigned long long)ck->seed, (unsigned long long)seed, (unsigned long long)ck->seed);
            ck->seed = seed; /* this run's, which its sampler and dropout use: its checkpoints record it */
            /* (a checkpoint that did not record them: taken as this run's) */
            const bool was_shuffle = ck->shuffle < 0 ? c->data.shuffle : ck->shuffle;
            const bool was_drop = ck->drop_last < 0 ? c->data.drop_last : ck->drop_last;
            if ((was_shuffle != c->data.shuffle || was_drop != c->data.drop_last) && warn)
                fprintf(warn,
                        "resume: warning: the checkpoint was written with data.shuffle %s and data.drop_last "
                        "%s; this run has %s and %s: its position counts batches of the other order, so from "
                        "here on the data order differs from the interrupted run's (resume with the same "
                        "values to continue it)\n",
                        tf(was_shuffle), tf(was_drop), tf(c->data.shuffle), tf(c->data.drop_last));
            /* optim.lr_scaling on another number of ranks: the rate changes, the global batch does not */
            const double run_lr = c->optim.lr_run > 0 ? c->optim.lr_run : c->optim.lr;
            if (ck->lr > 0 && fabs(ck->lr - run_lr) > 1e-6 * ck->lr && warn) {
                if (strcmp(c->optim.lr_scaling, "none") != 0)
                    fprintf(warn,
                            "resume: warning: the learning rate is %g here (optim.lr %g, optim.lr_scaling %s "
                            "over %d rank%s), where the checkpoint's run trained with %g, and "
                            "train.batch_size (the global batch) is the same; to go on at its rate, set "
                            "optim.lr: %g and optim.lr_scaling: none\n",
                            run_lr, c->optim.lr, c->optim.lr_scaling, ses->world, ses->world == 1 ? "" : "s",
                            ck->lr, ck->lr);
                else /* (changing the rate on resume is allowed: said, so that it is not by mistake) */
                    fprintf(
                        warn,
                        "resume: warning: optim.lr is %g here, where the checkpoint's run trained with %g: "
                        "the schedule goes on from step %lld at the new rate (to continue the interrupted "
                        "run, set optim.lr: %g)\n",
                        run_lr, ck->lr, (long long)ck->step, ck->lr);
            }
            ck->lr = run_lr; /* this run's, which its checkpoints record */
            /* another train.steps: a decaying schedule decays over this run's
             * (said where the rate at the checkpoint's step changes by it, and
             * this run trains a step: one resumed at or past its train.steps
             * trains none, which it says) */
            if (ck->run_steps > 0 && ck->run_steps != steps && ck->step < steps &&
                strcmp(c->optim.schedule, "constant") != 0 && warn) {
                const double here = st_lr_at(c, ck->step, steps), there = st_lr_at(c, ck->step, ck->run_steps);
                /* (the same rate at this step: a warmup, say) */
                const bool differs = fabs(here - there) > 1e-6 * there;
                /* (train.steps auto and train.epochs changed: the user's change is the epochs) */
                char was[64] = "", now[80] = "", plan[64];
                snprintf(plan, sizeof plan, "train.steps: %lld", (long long)ck->run_steps);
                /* (that run's steps were its epochs' where they are what its epochs over its
                 * data give: its train.steps set by hand, the advice is train.steps) */
                const bool was_epochs =
                    ck->samples > 0 && ck->run_epochs > 0 &&
                    st_steps_per_epoch(ck->samples, ck->batch_size, was_drop) > 0 &&
                    st_steps_of_epochs(ck->run_epochs, ck->samples, ck->batch_size, was_drop) == ck->run_steps;
                if (st_config_source(c, "train.steps") == ST_SRC_AUTO && was_epochs &&
                    ck->run_epochs != c->train.epochs) {
                    snprintf(was, sizeof was, " (train.epochs %g)", ck->run_epochs);
                    snprintf(now, sizeof now, " (train.epochs %g, train.steps auto)", c->train.epochs);
                    snprintf(plan, sizeof plan, "train.epochs: %g", ck->run_epochs);
                }
                if (differs && ck->step >= ck->run_steps) /* (that run ended) */
                    fprintf(
                        warn,
                        "resume: warning: the checkpoint's run ended at step %lld, its train.steps%s; "
                        "optim.schedule %s decays over this run's %lld%s, so the learning rate goes from "
                        "%g, where that run ended, to %g at step %lld (optim.schedule: constant trains on "
                        "at one rate)\n",
                        (long long)ck->run_steps, was, c->optim.schedule, (long long)steps, now, there, here,
                        (long long)ck->step);
                else if (differs)
                    fprintf(warn,
                            "resume: warning: the checkpoint's run was set to %lld steps%s and this one to "
                            "%lld%s: optim.schedule %s decays over train.steps, so the learning rate goes "
                            "on from step %lld at %g, where that run's plan had %g (to follow its plan, "
                            "resume with %s; to train on at one rate, optim.schedule: constant)\n",
                            (long long)ck->run_steps, was, (long long)steps, now[0] ? now : " (train.steps)",
                            c->optim.schedule, (long long)ck->step, here, there, plan);
            }
            if (warn) { /* the rest of what shapes the trajectory and may change on a resume */
                static const char *const keys[] = {"optim.schedule",
                                                   "optim.warmup_steps",
                                                   "optim.min_lr",
                                                   "optim.weight_decay",
                                                   "optim.beta1",
                                                   "optim.beta2",
                                                   "optim.eps",
                                                   "optim.momentum",
                                                   "optim.nesterov",
                                                   "optim.grad_clip",
                                                   "precision",
                                                   "model.dropout",
                                                   "optim.loss_scale_window",
                                                   "data.augment_flip",
                                                   "data.augment_crop_pad",
                                                   "dist.grad_dtype",
                                                   "train.micro_batch_size"};
                /* (the micro-batch last: its bits are deterministic mode's promise alone, and auto
                 * picks it by the ranks: elsewhere another one only rounds otherwise) */
                const int nkeys = (int)(sizeof keys / sizeof keys[0]) - (c->dist.deterministic ? 0 : 1);
                char changed[1024];
                const st_status cs = st_ckpt_config_changes(dir, c, keys, nkeys, changed, sizeof changed);
                if (cs != ST_OK) { /* (read a moment ago: the storage, or memory; the run goes on) */
                    fprintf(warn,
                            "resume: warning: this run's settings were not compared with the checkpoint's "
                            "run's (%s)\n",
                            st_last_error());
                    st_clear_error();
                } else if (changed[0]) {
                    /* Its micro-batch, where this run's ranks cannot split train.batch_size into it
                     * (resumed on more ranks): "resume with its values" would be refused, so the rank
                     * counts that can are named. */
                    char ranks[160] = "";
                    const char *mb_was = strstr(changed, "train.micro_batch_size ");
                    const long long was = mb_was ? atoll(mb_was + strlen("train.micro_batch_size ")) : 0;
                    if (was > 0 && was <= c->train.batch_size &&
                        c->train.batch_size % (was * ses->world) != 0) {
                        size_t at = 0;
                        int listed = 0; /* (the first 8: a list cut inside a number would name a wrong one) */
                        for (long long w = 1; w <= c->train.batch_size / was && w <= 1024 && listed < 8; w++)
                            if (c->train.batch_size % (was * w) == 0)
                                st_appendf(ranks, sizeof ranks, &at, "%s%lld", listed++ ? ", " : "", w);
                    }
                    char how[400];
                    if (ranks[0])
                        snprintf(how, sizeof how,
                                 "its train.micro_batch_size %lld does not split train.batch_size %lld on %d "
                                 "ranks: to continue it, resume on %s rank(s) with its values",
                                 was, (long long)c->train.batch_size, ses->world, ranks);
                    else
                        snprintf(how, sizeof how, "resume with its values to continue it");
                    fprintf(warn,
                            "resume: warning: the checkpoint's run trained with other settings (its value -> "
                            "this run's): %s; from step %lld on this run trains differently from the "
                            "interrupted one (%s)\n",
                            changed, (long long)ck->step, how);
                } else
                    st_clear_error(); /* (a state.json just verified: read again, it only fails as it goes) */
            }
            /* (another data.val_split holds out another part: the count differs, the data need not) */
            const double split_was = ses->model->val_split_loaded;
            if (ck->samples >= 0 && ck->samples != ses->train.n && warn && split_was >= 0 &&
                split_was != c->data.val_split)
                fprintf(
                    warn,
                    "resume: warning: data.train (%s) gives %lld training samples with data.val_split %g; "
                    "the run that wrote the checkpoint had %lld with its %g: this epoch's order differs "
                    "from the interrupted run's, and until it ends samples may repeat or be skipped\n",
                    c->data.train, (long long)ses->train.n, c->data.val_split, (long long)ck->samples,
                    split_was);
            else if (ck->samples >= 0 && ck->samples != ses->train.n && warn)
                fprintf(
                    warn,
                    "resume: warning: data.train (%s) holds %lld samples; the run that wrote the checkpoint "
                    "had %lld: the data changed (shards added or removed?), so this epoch's order differs "
                    "from the interrupted run's, and until it ends samples may repeat or be skipped\n",
                    c->data.train, (long long)ses->train.n, (long long)ck->samples);
            else if (ck->data_crc && data_crc && ck->data_crc != data_crc && warn) {
                /* (the checksum covers the labels too: either file may be the one changed) */
                const bool labels = ses->train.kind != ST_DATA_TOKENS && c->data.train_labels[0];
                char files[2 * ST_CFG_STR + 64];
                if (labels)
                    snprintf(files, sizeof files, "data.train and data.train_labels (%s, %s) hold",
                             c->data.train, c->data.train_labels);
                else
                    snprintf(files, sizeof files, "data.train (%s) holds", c->data.train);
                fprintf(
                    warn,
                    "resume: warning: %s other data than the run that wrote the checkpoint trained on (the "
                    "same %lld samples, but their contents differ: CRC32 %08x then, %08x now): the resumed "
                    "run trains on the new data; if that is not meant, give %s the data it had\n",
                    files, (long long)ses->train.n, (unsigned)ck->data_crc, (unsigned)data_crc,
                    labels ? "them" : "data.train");
            }
            ck->samples = ses->train.n;
            ck->data_crc = data_crc;
            if (sc->enabled && ck->loss_scale > 0) { /* the scaler goes on where it was */
                char d[256], was[256] = "";
                static const char *const ls_key[] = {"optim.loss_scale"};
                /* (said where the value differs from the checkpoint's run's: the same command line
                 * again, as a restart runs it, is not a change) */
                if (warn && st_config_source(c, "optim.loss_scale") == ST_SRC_SET &&
                    (float)ck->loss_scale != sc->scale) {
                    if (st_ckpt_config_changes(dir, c, ls_key, 1, was, sizeof was) != ST_OK) {
                        fprintf(warn,
                                "resume: warning: optim.loss_scale was not compared with the "
                                "checkpoint's run's (%s)\n",
                                st_last_error());
                        st_clear_error();
                    } else if (was[0])
                        fprintf(warn,
                                "resume: warning: %s is the scale an fp16 run starts with; this resume goes "
                                "on with the checkpoint's, %g, which the scaler adjusts from there\n",
                                st_config_describe(c, "optim.loss_scale", d, sizeof d), ck->loss_scale);
                }
                sc->scale = (float)ck->loss_scale;
                sc->good_steps = ck->scale_good_steps;
                sc->skipped = ck->skipped_steps;
            }
            if (log) fprintf(log, "resumed from %s at step %lld\n", dir, (long long)ck->step);
        } else if (ses->init_deferred) { /* one was seen at the start (defer_init) */
            ses->agreed_error = dist;    /* (the ranks agreed there is none: st_ckpt_find_shared) */
            s = st_fail(ST_ERR_IO,
                        "resume: --resume %s named a checkpoint in %s/ckpt when the run started, and none is "
                        "there now (moved or removed since, or the folder could not be listed); nothing was "
                        "written. Resume again once the checkpoints are back, or move the folder aside to "
                        "start over",
                        opts->resume, c->train.out_dir);
            goto fail;
        } else if (log) {
            fprintf(log, "resume: no checkpoint in %s/ckpt; starting from step 0\n", c->train.out_dir);
        }
    }
    if (opts->resume && dist) { /* every rank resumed from the same step */
        int64_t v[2] = {ck->step, -ck->step};
        ST_GOTO(st_comm_all_reduce_sync(ses->comm, v, v, 2, ST_COMM_I64, ST_COMM_MAX, "checkpoint loaded"));
        st_comm_set_timeout(ses->comm, 0, NULL);
        if (v[0] != -v[1]) {
            ses->agreed_error = true; /* every rank saw the same sums */
            s = st_fail(
                ST_ERR_CONFIG,
                "rank %d resumed at step %lld, but the ranks resumed at steps %lld to %lld: every rank must "
                "see the same %s/ckpt (one directory shared by all nodes), unchanged while the run starts",
                ses->rank, (long long)ck->step, (long long)-v[1], (long long)v[0], c->train.out_dir);
            goto fail;
        }
    }    return ST_OK;
fail:
    return s;
}
