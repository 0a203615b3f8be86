/* Argument parsing shared by train and eval. */
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "core/atomic_file.h"
#include "core/config_schema.h"
#include "core/device.h"
#include "core/launcher.h"
#include "core/safetensors.h"
#include "core/sniff.h"
#include "core/text.h"
#include "core/ticker.h"
#include "core/watch.h"
#include "hw/probe.h"
#include "model/model.h"
#include "train/checkpoint.h"

st_status st_cli_probe(const char *cmd, const st_config *cfg, st_hw_info *h) {
    char who[96];
    snprintf(who, sizeof who, "scaletrain %s (pid %d)", cmd, (int)getpid());
    st_watch *w =
        st_watch_one((double)cfg->train.device_timeout_s, who, "train.device_timeout_s", ST_WATCH_GPU,
                     "nothing was written", "probing the GPUs (the CUDA driver, NVML)");
    const st_status s = st_hw_probe(h);
    st_watch_stop(w);
    return s;
}

bool st_cli_gpus_unusable(const st_hw_info *h, int gpus, const char *why, char *out, size_t n) {
    if (!h || h->n_gpus == 0 || gpus > 0 || !st_device_cuda_built()) return false;
    snprintf(out, n, "the driver sees %d GPU%s (%s), and this build cannot use %s: %s", h->n_gpus,
             h->n_gpus == 1 ? "" : "s", h->gpu[0].name, h->n_gpus == 1 ? "it" : "them", why);
    return true;
}

bool st_cli_int_arg(const char *cmd, const char *opt, const char *v, long long min, long long max,
                    const char *usage, int64_t *out) {
    char *end;
    errno = 0;
    const long long n = v ? strtoll(v, &end, 10) : 0;
    if (!v || !*v || *end || errno || n < min || n > max) {
        fprintf(stderr, "scaletrain %s: %s needs a whole number from %lld to %lld, not '%s'\n%s", cmd, opt,
                min, max, v ? v : "", usage);
        return false;
    }
    *out = n;
    return true;
}

static bool reported; /* st_cli_report_agreed printed the error */

void st_cli_report_agreed(st_status s) {
    st_cli_error(s);
    reported = true;
}

/* In one write, given up after a few seconds (st_ticker_say): standard
 * error on storage that stopped answering (the very error being reported,
 * often) must not keep the process from ending. */
int st_cli_error(st_status s) {
    if (reported) return ST_EXIT_FAIL;
    const char *rank = st_launcher_rank();
    /* (a message may quote a file's bytes: a tensor name, a config value) */
    static char shown[8192];
    const char *msg =
        st_printable(shown, sizeof shown, st_last_error()[0] ? st_last_error() : st_status_name(s));
    /* Host memory ran out: say how much this process holds and what limits
     * it (a device's messages, its allocator's and CUDA's and cuBLAS's, say
     * that of the device themselves). */
    char state[480], mem[512] = "";
    if (s == ST_ERR_NOMEM && !strstr(msg, "device memory") && !strstr(msg, "cudaErrorMemoryAllocation") &&
        !strstr(msg, "cuBLAS status") && st_hw_mem_state(state, sizeof state))
        snprintf(mem, sizeof mem, " (%s)", state);
    char line[8192];
    if (rank)
        snprintf(line, sizeof line, "scaletrain: error (rank %s): %s%s\n", rank, msg, mem);
    else
        snprintf(line, sizeof line, "scaletrain: error: %s%s\n", msg, mem);
    st_ticker_say(line);
    return ST_EXIT_FAIL;
}

static int listed(const char *a, const char *const *list) {
    for (int k = 0; list && list[k]; k++)
        if (!strcmp(a, list[k])) return k;
    return -1;
}

int st_cli_once(const char *cmd, int argc, char **argv, const char *const *once, const char *const *repeat) {
    int n = 0;
    while (once[n])
        n++;
    int *seen = calloc((size_t)n + 1, sizeof *seen); /* (argv index of each one's first value + 1) */
    if (!seen) return -1;                            /* (out of memory: the last wins, as it did) */
    int rc = -1;
    for (int i = 0; i + 1 < argc && rc < 0; i++) {
        const int k = listed(argv[i], once);
        if (k >= 0 && seen[k]) {
            fprintf(stderr, "scaletrain %s: %s given twice ('%s' and '%s'); give it once\n", cmd, argv[i],
                    argv[seen[k]], argv[i + 1]);
            rc = ST_EXIT_USAGE;
        }
        if (k >= 0) seen[k] = i + 1;
        if (k >= 0 || listed(argv[i], repeat) >= 0) i++;
    }
    free(seen);
    return rc;
}

/* The bytes of the regular files under --init (nftw's callback: a sum of
 * its own, the walk being one thread's, once), three folders deep at most:
 * out_dir/ckpt/step-N/FILE. */
static double bytes_sum;
static int bytes_add(const char *path, const struct stat *sb, int type, struct FTW *at) {
    (void)path;
    if (type == FTW_F && S_ISREG(sb->st_mode)) bytes_sum += (double)sb->st_size;
    /* (out_dir/ckpt/step-N/FILE: deeper holds no checkpoint file) */
    return type == FTW_D && at->level >= 3 ? FTW_SKIP_SUBTREE : FTW_CONTINUE;
}

/* eval's model where the user did not set it: the one its --init weights
 * record (their metadata, st_model_config_from_file), and data.type tokens
 * for a gpt's, which reads them. The weights are found as a run finds them
 * (st_ckpt_weights: a checkpoint verified, a damaged one passed over, said
 * by rank 0), watched as a run's reading is, once: the run loads that file
 * (opts->init_weights). A file that cannot be read or is not weights is
 * its own error, here, before the settings it would have given are
 * missed (the data's type named instead). */
static st_status model_from_init(st_config *cfg, st_run_opts *opts) {
    char who[96], what[4200];
    snprintf(who, sizeof who, "scaletrain eval (pid %d)", (int)getpid());
    snprintf(what, sizeof what, "looking at the weights %s (--init)", opts->init);
    /* The wait a reading is given, as a run's (st_ckpt_wait_limit): 1 s per
     * 10 MB past dist.timeout_s, of the files --init names (a run's every
     * checkpoint: more than is read, never less) */
    st_watch *w = st_watch_one((double)cfg->dist.timeout_s, who, "dist.timeout_s", ST_WATCH_STORAGE,
                               "an evaluation writes nothing", what);
    bytes_sum = 0;
    if (nftw(opts->init, bytes_add, 16, FTW_PHYS | FTW_ACTIONRETVAL) != 0) bytes_sum = 0;
    st_watch_stop(w);
    snprintf(what, sizeof what, "reading the weights %s (--init)", opts->init);
    w = st_watch_one(st_ckpt_wait_limit_bytes(cfg, bytes_sum), who, "train.checkpoint_timeout_s",
                     ST_WATCH_STORAGE, "an evaluation writes nothing", what);
    const char *rank = st_launcher_rank();
    char *path = opts->init_weights;
    const size_t size = sizeof opts->init_weights;
    st_safetensors *f = NULL;
    st_status s = st_ckpt_weights(opts->init, !rank || !strcmp(rank, "0") ? stderr : NULL, path, size,
                                  &opts->init_step);
    if (s == ST_OK) s = st_safetensors_open(path, &f);
    st_watch_stop(w);
    if (s == ST_OK) s = st_model_file_is_weights(f, path);
    const char *type = f ? st_safetensors_metadata(f, "model.type") : NULL;
    const bool gpt = type && !strcmp(type, "gpt");
    if (s == ST_OK) s = st_model_config_from_file(cfg, f, path);
    if (f) st_safetensors_close(f);
    const int row = st_cfg_find("data.type");
    if (s == ST_OK && gpt && !strcmp(cfg->model.type, "gpt") && row >= 0 &&
        cfg->src_[row] == ST_SRC_DEFAULT && !cfg->note_[row][0] &&
        (s = st_config_set(cfg, "data.type=tokens")) == ST_OK) {
        char why[4200];
        snprintf(why, sizeof why, "%s's model, a gpt, reads tokens", path);
        st_config_mark_auto(cfg, "data.type", why);
    }
    if (s != ST_OK) path[0] = '\0';
    return s;
}

/* The config file's path names weights, a run's folder, data: not a config
 * (YAML) but what an option takes (--init forgotten): said, with that
 * option, as a usage error (it was "invalid trailing UTF-8 octet" or "Is a
 * directory"). Returns the exit code, or -1 for a path to read as YAML. */
static int not_a_config(const char *cmd, const char *path) {
    /* (sample takes --init too: as eval's) */
    const bool eval = !strcmp(cmd, "eval") || !strcmp(cmd, "sample"), train = !strcmp(cmd, "train");
    char how[8400] = "";
    if (st_path_is_dir(path)) {
        char where[4096], plain[4200];
        snprintf(plain, sizeof plain, "%s/model.safetensors", path);
        const bool run =
            st_ckpt_classify(path, where, sizeof where) != ST_CKPT_NONE || st_path_is_file(plain);
        st_clear_error();
        if (run && eval) snprintf(how, sizeof how, "give its weights with --init %s", path);
        if (run && train)
            snprintf(how, sizeof how,
                     "continue that run with --resume %s, or start from its weights with --init %s", path,
                     path);
        fprintf(stderr, "scaletrain %s: %s is a %s, not a config file (YAML)%s%s\n", cmd, path,
                run ? "run's folder or checkpoint" : "directory", how[0] ? ": " : "", how);
        return ST_EXIT_USAGE;
    }
    /* (a regular file alone: a pipe's bytes, `train <(envsubst < run.yaml)`, would be taken from the
     * config's reader, which then read the defaults) */
    st_file_kind k;
    if (!st_sniff_regular(path, &k)) return -1; /* (st_config_load says why) */
    if (k.format == ST_FILE_TEXT || k.format == ST_FILE_CONFIG || k.format == ST_FILE_UNKNOWN) return -1;
    if (k.format == ST_FILE_SAFETENSORS && (eval || train))
        snprintf(how, sizeof how, "give %s with --init %s", eval ? "weights" : "the weights to start from",
                 path);
    else if (k.format == ST_FILE_SAFETENSORS)
        snprintf(how, sizeof how,
                 "weights are for scaletrain train, eval and sample (--init); %s reads a config", cmd);
    else
        snprintf(how, sizeof how, "%s", k.use);
    fprintf(stderr, "scaletrain %s: %s is %s, not a config file (YAML): %s\n", cmd, path, k.what, how);
    return ST_EXIT_USAGE;
}

int st_cli_run_args(const char *cmd, int argc, char **argv, st_config *cfg, st_run_opts *opts) {
    st_config_defaults(cfg);
    opts->report_agreed_error = st_cli_report_agreed;
    /* sample's one model and data, under the file and --set, which validate
     * against them (a message names them as sample's, not as --set) */
    if (!strcmp(cmd, "sample"))
        for (int i = 0; i < 2; i++) {
            const st_status f = st_config_set(cfg, i ? "data.type=tokens" : "model.type=gpt");
            if (f != ST_OK) return st_cli_error(f);
            st_config_mark_auto(cfg, i ? "data.type" : "model.type", "scaletrain sample draws from a gpt");
        }
    const char *path = NULL;
    /* The file first, then every --set in order, whatever the argument order. */
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--set") == 0 || strcmp(a, "--init") == 0 || strcmp(a, "--resume") == 0 ||
            strcmp(a, "--profile") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "scaletrain %s: %s needs a value\n", cmd, a);
                return ST_EXIT_USAGE;
            }
            if ((strcmp(a, "--resume") == 0 || strcmp(a, "--profile") == 0) && strcmp(cmd, "train") != 0) {
                fprintf(stderr, "scaletrain %s: %s is an option of scaletrain train\n", cmd, a);
                return ST_EXIT_USAGE;
            }
            if (strcmp(a, "--init") == 0 && (!strcmp(cmd, "plan") || !strcmp(cmd, "check"))) {
                fprintf(stderr,
                        "scaletrain %s: --init is an option of train and eval (a plan is of the settings, "
                        "not of weights)\n",
                        cmd);
                return ST_EXIT_USAGE;
            }
            /* given twice: which one was meant is not for us to guess (the last won, silently) */
            const char **one = !strcmp(a, "--init")     ? &opts->init
                               : !strcmp(a, "--resume") ? &opts->resume
                                                        : NULL;
            if (one && *one) {
                fprintf(stderr, "scaletrain %s: %s given twice ('%s' and '%s'); give it once\n", cmd, a, *one,
                        argv[i + 1]);
                return ST_EXIT_USAGE;
            }
            if (one && !argv[i + 1][0]) { /* (its error read "error: : cannot open") */
                fprintf(stderr, "scaletrain %s: %s '' names no file; give %s\n", cmd, a,
                        !strcmp(a, "--init")
                            ? "the weights: a safetensors file, a checkpoint or a run's out_dir"
                            : "auto, a checkpoint or a run's out_dir");
                return ST_EXIT_USAGE;
            }
            if (one) *one = argv[i + 1];
            i++;
        } else if ((strcmp(a, "--json") == 0 || strcmp(a, "--quiet") == 0) && strcmp(cmd, "train") != 0 &&
                   strcmp(cmd, "eval") != 0 && strcmp(cmd, "slurm") != 0) {
            /* (it was taken and did nothing: check --json printed text; slurm passes it on to train) */
            fprintf(stderr, "scaletrain %s: %s is an option of scaletrain train and eval%s\n", cmd, a,
                    !strcmp(cmd, "plan") && !strcmp(a, "--quiet") ? " (plan takes --json)" : "");
            return ST_EXIT_USAGE;
        } else if (strcmp(a, "--json") == 0) {
            opts->json = true;
        } else if (strcmp(a, "--quiet") == 0) {
            opts->quiet = true;
        } else if (a[0] == '-' && a[1] == '-' && strchr(a, '=') && strncmp(a, "--set=", 6) == 0) {
            continue;
        } else if (a[0] == '-') {
            fprintf(stderr, "scaletrain %s: unknown option '%s' (scaletrain --help lists each command's options)\n", cmd, a);
            return ST_EXIT_USAGE;
        } else if (!a[0]) {
            fprintf(stderr, "scaletrain %s: an empty argument ('') where the config file's path goes\n", cmd);
            return ST_EXIT_USAGE;
        } else if (!path) {
            path = a;
        } else {
            fprintf(stderr, "scaletrain %s: more than one config file ('%s' and '%s')\n", cmd, path, a);
            return ST_EXIT_USAGE;
        }
    }
    st_status s;
    const int not_config = path ? not_a_config(cmd, path) : -1;
    if (not_config >= 0) return not_config;
    if (path && (s = st_config_load(cfg, path)) != ST_OK) return st_cli_error(s);
    /* --profile and a --set of the keys it sets: one of them (the later one won without a word: --set
     * log.trace=false dropped the profile) */
    const char *profile = NULL, *trace_set = NULL;
    for (int i = 0; i < argc; i++) {
        const char *v = NULL;
        if (strcmp(argv[i], "--set") == 0) v = argv[++i];
        else if (strncmp(argv[i], "--set=", 6) == 0) v = argv[i] + 6;
        else if (strcmp(argv[i], "--init") == 0 || strcmp(argv[i], "--resume") == 0) i++;
        else if (strcmp(argv[i], "--profile") == 0) { /* FIRST-LAST or STEP: log.trace and log.trace_steps */
            char set[96], *end;
            if (profile) { /* (the last won without a word) */
                fprintf(stderr, "scaletrain %s: --profile given twice ('%s' and '%s'); give it once\n", cmd,
                        profile, argv[i + 1]);
                return ST_EXIT_USAGE;
            }
            const char *r = profile = argv[++i];
            errno = 0; /* (past 2^63: ERANGE) */
            long long first = strtoll(r, &end, 10), last = first;
            if (end != r && *end == '-') last = strtoll(end + 1, &end, 10);
            if (end == r || *end || errno || first < 1 || last < first) {
                fprintf(stderr,
                        "scaletrain %s: --profile '%s': expected FIRST-LAST steps (counted from 1)%s, e.g. "
                        "--profile 10-20\n",
                        cmd, r,
                        end != r && !*end && !errno && first >= 1 && last < first ? ", FIRST <= LAST" : "");
                return ST_EXIT_USAGE;
            }
            snprintf(set, sizeof set, "log.trace_steps=[%lld, %lld]", first, last);
            if ((s = st_config_set(cfg, "log.trace=true")) != ST_OK || (s = st_config_set(cfg, set)) != ST_OK)
                return st_cli_error(s);
        }
        if (v && (s = st_config_set(cfg, v)) != ST_OK) return st_cli_error(s);
        if (v && !strncmp(v + strspn(v, " "), "log.trace", 9)) trace_set = v;
    }
    if (profile && trace_set) {
        fprintf(stderr,
                "scaletrain %s: --profile %s sets log.trace and log.trace_steps, and so does --set %s; "
                "give one of them\n",
                cmd, profile, trace_set);
        return ST_EXIT_USAGE;
    }
    if (opts->config_only) return -1;
    /* (nothing to evaluate first: said before the weights are read, a checkpoint verified) */
    if (!strcmp(cmd, "eval") && (s = st_config_validate_eval(cfg)) != ST_OK) return st_cli_error(s);
    if (!strcmp(cmd, "eval") && opts->init && (s = model_from_init(cfg, opts)) != ST_OK)
        return st_cli_error(s);
    if ((s = st_config_validate(cfg)) != ST_OK) return st_cli_error(s);
    const bool reads_data = !strcmp(cmd, "train") || !strcmp(cmd, "eval") || !strcmp(cmd, "slurm");
    if (reads_data && (s = st_config_validate_data(cfg, !strcmp(cmd, "eval"))) != ST_OK)
        return st_cli_error(s);
    /* Under `scaletrain launch` a rank's stdout is mpirun's pseudo-terminal
     * even when the launcher's own output goes to a file or a pipe: the
     * launcher says which (launch.c), and a bar is drawn only on a terminal. */
    const char *tty = getenv("SCALETRAIN_LAUNCH_TTY");
    if (tty && strcmp(tty, "0") == 0 && strcmp(cfg->log.progress, "auto") == 0) {
        snprintf(cfg->log.progress, sizeof cfg->log.progress, "off");
        st_config_mark_auto(cfg, "log.progress", "scaletrain launch's output is not a terminal");
    }
    return -1;
}
