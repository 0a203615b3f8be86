/* `scaletrain data`: tokenize text into a token file; inspect a data or
 * weights file, a checkpoint, or a run's checkpoints. */
#include <dirent.h>
#include <errno.h>
#include <float.h>
#include <glob.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "core/atomic_file.h"
#include "core/config_schema.h"
#include "core/safetensors.h"
#include "core/sniff.h"
#include "core/text.h"
#include "data/idx.h"
#include "data/npy.h"
#include "data/tokens.h"
#include "hw/probe.h"
#include "train/checkpoint.h"

#define TOKENIZE_USAGE                                                                                       \
    "usage: scaletrain data tokenize OUT.tokens TEXT_FILE... [--shard-tokens N] [--jobs J]\n"

/* A count for an option, 1..max. */
static bool count_arg(const char *opt, const char *v, int64_t max, int64_t *out) {
    return st_cli_int_arg("data tokenize", opt, v, 1, max, TOKENIZE_USAGE, out);
}

/* A stream that holds X.tokens and shards named from it (data tokenize's
 * whole and sharded outputs of one text): said to stderr, as training on
 * the folder or pattern reads both. */
static void twice_say(const st_tokens *t, const char *spec, const char *lead) {
    st_tokens_twice tw;
    if (!st_tokens_read_twice(t, &tw)) return;
    char what[3 * 4096];
    const bool same = st_tokens_twice_what(t, &tw, what, sizeof what);
    fflush(stdout); /* (after what was said of it) */
    fprintf(stderr,
            "scaletrain data: %s%s holds %s: %s training on %s %s; delete one, or name the files to read in "
            "data.train\n",
            lead, spec, what,
            same ? "one text tokenized whole and in shards, which" : "if one text was tokenized twice,", spec,
            same ? "reads twice" : "reads it twice");
}

static int tokenize(int argc, char **argv) {
    const char **pos = calloc((size_t)argc + 1, sizeof *pos);
    int npos = 0;
    int64_t shard_tokens = 0, jobs = 0;
    if (!pos) return st_cli_error(st_fail(ST_ERR_NOMEM, "data tokenize: out of memory"));
    static const char *const once[] = {"--shard-tokens", "--jobs", NULL};
    const int twice = st_cli_once("data tokenize", argc, argv, once, NULL);
    if (twice >= 0) {
        free(pos);
        return twice;
    }
    for (int i = 0; i < argc; i++) {
        const bool st = strcmp(argv[i], "--shard-tokens") == 0, jb = strcmp(argv[i], "--jobs") == 0;
        if ((st &&
             !count_arg("--shard-tokens", i + 1 < argc ? argv[i + 1] : NULL, INT64_MAX / 2, &shard_tokens)) ||
            (jb && !count_arg("--jobs", i + 1 < argc ? argv[i + 1] : NULL, 1024, &jobs))) {
            free(pos);
            return ST_EXIT_USAGE;
        }
        if (st || jb) {
            i++;
        } else if (argv[i][0] == '-' && argv[i][1] == '-') { /* (a misspelt option read as a text file) */
            fprintf(
                stderr,
                "scaletrain data tokenize: unknown option '%s' (--shard-tokens N, --jobs J)\n" TOKENIZE_USAGE,
                argv[i]);
            free(pos);
            return ST_EXIT_USAGE;
        } else if (!argv[i][0]) {
            fprintf(stderr,
                    "scaletrain data tokenize: an empty argument ('') where %s path goes\n" TOKENIZE_USAGE,
                    npos ? "a text file's" : "the token file's");
            free(pos);
            return ST_EXIT_USAGE;
        } else {
            pos[npos++] = argv[i];
        }
    }
    if (jobs > 0 && shard_tokens == 0) {
        fprintf(stderr,
                "scaletrain data tokenize: --jobs writes shards J at a time, and needs --shard-tokens N; "
                "one token file is written by one job\n" TOKENIZE_USAGE);
        free(pos);
        return ST_EXIT_USAGE;
    }
    if (npos < 2) {
        fprintf(stderr, TOKENIZE_USAGE);
        free(pos);
        return ST_EXIT_USAGE;
    }
    const size_t out_len = strlen(pos[0]);
    if (st_path_is_dir(pos[0]) || (out_len && pos[0][out_len - 1] == '/')) { /* (made or not) */
        fprintf(
            stderr,
            "scaletrain data tokenize: %s is a directory; the first path is the token file to write: name "
            "a file in it (%s/train.tokens)\n" TOKENIZE_USAGE,
            pos[0], pos[0]);
        free(pos);
        return ST_EXIT_USAGE;
    }
    /* OUT is replaced: refused when it holds something other than tokens (a
     * text file named first, OUT left out, or OUT among the inputs) */
    struct stat os;
    st_file_kind k;
    const bool exists = shard_tokens == 0 && stat(pos[0], &os) == 0;
    if (exists && !S_ISREG(os.st_mode)) { /* (a FIFO: opening it waited) */
        fprintf(
            stderr,
            "scaletrain data tokenize: %s exists and is not a file (a pipe or a device), so the token file "
            "cannot replace it; name another OUT.tokens\n" TOKENIZE_USAGE,
            pos[0]);
        free(pos);
        return ST_EXIT_USAGE;
    }
    if (exists && os.st_size > 0 && st_sniff_regular(pos[0], &k)) {
        if (k.format != ST_FILE_TOKENS) {
            fprintf(stderr,
                    "scaletrain data tokenize: %s exists and is not a token file (%s); the first path is the "
                    "token file to write, which would replace it: name a new OUT.tokens first, or remove "
                    "%s if it is meant to go\n" TOKENIZE_USAGE,
                    pos[0], k.what[0] ? k.what : "its bytes are not scaletrain's token format", pos[0]);
            free(pos);
            return ST_EXIT_USAGE;
        }
    }
    char parent[4096]; /* (OUT's folder is made, as train.out_dir is: `data/train.tokens` on a fresh checkout)
                        */
    snprintf(parent, sizeof parent, "%s", pos[0]);
    char *slash = strrchr(parent, '/');
    char made[4096] = ""; /* the first folder this makes (its own ones are removed if it fails) */
    if (slash && slash != parent) {
        *slash = '\0';
        struct stat ps;
        char up[4096]; /* (from parent up, while missing: made ends the shallowest) */
        snprintf(up, sizeof up, "%s", parent);
        for (char *c; stat(up, &ps) != 0; *c = '\0') {
            snprintf(made, sizeof made, "%s", up);
            if (!(c = strrchr(up, '/')) || c == up) break;
        }
        const st_status m = stat(parent, &ps) == 0 && !S_ISDIR(ps.st_mode)
                                ? st_fail(ST_ERR_IO, "%s is a file, not a folder", parent)
                                : st_mkdirs(parent);
        if (m != ST_OK) {
            st_fail_context(m, "data tokenize: the folder of %s: ", pos[0]);
            free(pos);
            return st_cli_error(m);
        }
    }
    if (jobs == 0) jobs = st_hw_allowed_cpus(); /* the cores this process may use */
    const st_tokenize_opts o = {.inputs = pos + 1,
                                .n_inputs = npos - 1,
                                .out = pos[0],
                                .shard_tokens = shard_tokens,
                                .jobs = (int)jobs,
                                /* (a stop: the files being written removed, OUT as it was) */
                                .stop = st_cli_catch_stops(),
                                .log = stderr};
    st_tokenize_result r;
    st_status s = st_tokens_tokenize(&o, &r);
    if (s != ST_OK && made[0]) /* (the folders it made, from parent up to made: a failure writes nothing) */
        for (size_t keep = strlen(made); strlen(parent) >= keep && rmdir(parent) == 0;) {
            char *c = strrchr(parent, '/');
            if (!c) break;
            *c = '\0';
        }
    const int sig = atomic_load_explicit(o.stop, memory_order_relaxed);
    if (s == ST_ERR_INTERRUPTED && sig) {
        char sig_name[16];
        fprintf(stderr,
                "scaletrain data tokenize: stopped by %s; %s%s %s as %s (the files being written "
                "were removed)\n",
                st_signal_name(sig, sig_name), shard_tokens > 0 ? "the shards of " : "", pos[0],
                shard_tokens > 0 ? "are" : "is", shard_tokens > 0 ? "they were" : "it was");
        free(pos);
        return 128 + sig;
    }
    free(pos);
    if (s != ST_OK) return st_cli_error(s);
    if (shard_tokens > 0) { /* (in YAML's single quotes: the pattern's backslashes as they are) */
        char quoted[2 * sizeof r.pattern + 2];
        size_t at = 0;
        for (const char *c = r.pattern; *c && at + 3 < sizeof quoted; c++) {
            if (*c == '\'') quoted[at++] = '\'';
            quoted[at++] = *c;
        }
        quoted[at] = '\0';
        printf("%s: %lld tokens in %d shard%s of up to %lld (byte-level vocabulary of 256) from %d file(s); "
               "train on them with data.train: '%s'\n",
               r.pattern, (long long)r.count, r.shards, r.shards == 1 ? "" : "s", (long long)shard_tokens,
               o.n_inputs, quoted);
    } else
        printf("%s: %lld tokens, byte-level vocabulary of 256, from %d file(s)\n", r.pattern,
               (long long)r.count, o.n_inputs);
    st_tokens *folder = NULL; /* (OUT's folder, as a run given it reads it) */
    const char *dir = !slash ? "." : slash == parent ? "/" : parent;
    if (st_tokens_open(dir, &folder) == ST_OK)
        twice_say(folder, dir, "warning: ");
    else
        st_clear_error(); /* (what else the folder holds is not this command's) */
    st_tokens_close(folder);
    return ST_EXIT_OK;
}

static int inspect_tokens(const char *path) {
    st_tokens *t = NULL;
    st_status s = st_tokens_open(path, &t);
    if (s != ST_OK) return st_cli_error(s);
    const int n = st_tokens_shards(t);
    char kind[64] = ""; /* llm.c's files name their format */
    if (strcmp(st_tokens_format(t), "scaletrain") != 0)
        snprintf(kind, sizeof kind, " (%s format)", st_tokens_format(t));
    if (n == 1)
        printf("%s: token file%s, %lld tokens of %d bytes, vocabulary %llu\n", path, kind,
               (long long)st_tokens_count(t), st_tokens_token_bytes(t),
               (unsigned long long)st_tokens_vocab_size(t));
    else
        printf("%s: %d token files read as one stream, %lld tokens, vocabulary %llu\n", path, n,
               (long long)st_tokens_count(t), (unsigned long long)st_tokens_vocab_size(t));
    for (int k = 0; n > 1 && k < n; k++)
        if (k < 5 || k >= n - 5)
            printf("  %s: %lld tokens\n", st_tokens_shard_path(t, k), (long long)st_tokens_shard_count(t, k));
        else if (k == 5)
            printf("  ... %d more\n", n - 10);
    if (n > 1) twice_say(t, path, "");
    s = st_tokens_check_range(t);
    if (s == ST_OK) printf("  every token is below the vocabulary size\n");
    st_tokens_close(t);
    return s == ST_OK ? ST_EXIT_OK : st_cli_error(s);
}

static int inspect_idx(const char *path) {
    st_idx x = {0};
    st_status s = st_idx_read(path, &x);
    if (s != ST_OK) return st_cli_error(s);
    printf("%s: IDX, uint8, shape [", path);
    for (int i = 0; i < x.ndim; i++)
        printf("%s%lld", i ? ", " : "", (long long)x.dims[i]);
    int lo = 255, hi = 0;
    for (int64_t i = 0; i < x.count; i++) {
        if (x.data[i] < lo) lo = x.data[i];
        if (x.data[i] > hi) hi = x.data[i];
    }
    printf("], values %d..%d\n", lo, hi);
    st_idx_free(&x);
    return ST_EXIT_OK;
}

static int inspect_npy(const char *path) {
    static const char *const names[] = {"uint8", "int32", "int64", "float32", "float64"};
    st_npy a = {0};
    st_status s = st_npy_read(path, &a);
    if (s != ST_OK) return st_cli_error(s);
    printf("%s: NPY %d.0, %s, shape [", path, a.major, names[a.dtype]);
    for (int i = 0; i < a.ndim; i++)
        printf("%s%lld", i ? ", " : "", (long long)a.dims[i]);
    printf("]");
    double lo = 0, hi = 0, first_bad = 0; /* the value range (finite values): for labels, the classes */
    int64_t finite = 0, bad = 0, bad_at = -1, past_f32 = 0;
    const bool ints = a.dtype == ST_NPY_U8 || a.dtype == ST_NPY_I32 || a.dtype == ST_NPY_I64;
    int64_t ilo = 0, ihi = 0; /* (integers exactly: %g showed 16777216 and 16777217 alike) */
    for (int64_t i = 0; ints && i < a.count; i++) {
        const int64_t v = st_npy_int_at(&a, i);
        if (!i || v < ilo) ilo = v;
        if (!i || v > ihi) ihi = v;
    }
    for (int64_t i = 0; !ints && i < a.count; i++) { /* (float32 or float64) */
        const double v = a.dtype == ST_NPY_F32 ? ((const float *)a.data)[i] : ((const double *)a.data)[i];
        if (!isfinite(v)) { /* (a NaN compares false: it would hide in the range, or be all of it) */
            if (!bad++) bad_at = i, first_bad = v;
            continue;
        }
        if (!finite++ || v < lo) lo = v;
        if (finite == 1 || v > hi) hi = v;
        past_f32 += fabs(v) > FLT_MAX;
    }
    if (ints && a.count) printf(", values %lld..%lld", (long long)ilo, (long long)ihi);
    if (finite) { /* (+ 0.0: -0 said as 0; digits enough to tell the ends apart: 1.7e+09..1.7e+09 hid a
                     spread) */
        char a1[32], b1[32];
        int digits = 6;
        do {
            snprintf(a1, sizeof a1, "%.*g", digits, lo + 0.0);
            snprintf(b1, sizeof b1, "%.*g", digits, hi + 0.0);
        } while (lo != hi && !strcmp(a1, b1) && ++digits <= 17);
        printf(", values %s..%s", a1, b1);
    }
    if (past_f32)
        printf(", %lld value%s past float32's range (+-3.4e38): training reads float32 and refuses them as "
               "infinite",
               (long long)past_f32, past_f32 == 1 ? "" : "s");
    if (bad)
        printf(", %lld value%s not finite (the first, %g, at element %lld): training refuses them (inputs and "
               "labels must be finite)",
               (long long)bad, bad == 1 ? "" : "s", first_bad, (long long)bad_at);
    printf("\n");
    /* (as train warns: PyTorch's (n, channels, height, width) read channels last) */
    const int64_t *d = a.dims;
    if (a.ndim == 4 && d[3] > 4 && (d[1] <= 4 || (d[2] == d[3] && d[1] < d[2])))
        printf(
            "  read as images %lldx%lldx%lld (height, width, channels): if the array is (n, channels, "
            "height, width), PyTorch's layout, save it channels last: numpy.save(path, x.transpose(0, 2, 3, "
            "1))\n",
            (long long)d[1], (long long)d[2], (long long)d[3]);
    st_npy_free(&a);
    return ST_EXIT_OK;
}

static int inspect_safetensors(const char *path) {
    st_safetensors *f = NULL;
    st_status s = st_safetensors_open(path, &f);
    if (s != ST_OK) return st_cli_error(s);
    int n = st_safetensors_count(f);
    int64_t total = 0;
    printf("%s: safetensors, %d tensors\n", path, n);
    /* the model settings a scaletrain save records (src/model/weights.c) */
    bool any = false;
    for (int row = 0; row < st_cfg_nkeys; row++) {
        const char *key = st_cfg_keys[row].key, *v = st_safetensors_metadata(f, key);
        if (strncmp(key, "model.", 6) != 0 || !v) continue;
        char shown[ST_CFG_STR * 4 + 8];
        printf("%s%s %s", any ? ", " : "  saved with ", key, st_printable(shown, sizeof shown, v));
        any = true;
    }
    if (any) printf("\n");
    const char *mean = st_safetensors_metadata(f, "data.mean"), *std = st_safetensors_metadata(f, "data.std");
    if (mean && std) {
        char m[64], d[64];
        printf("  trained on inputs normalised with data.mean %s, data.std %s\n",
               st_printable(m, sizeof m, mean), st_printable(d, sizeof d, std));
    }
    for (int i = 0; i < n; i++) {
        const st_safetensors_entry *e = st_safetensors_entry_at(f, i);
        char shown[4 * ST_NAME_MAX + 8];
        printf("  %-40s %-5s [", st_printable(shown, sizeof shown, e->name), e->dtype);
        for (int k = 0; k < e->ndim; k++)
            printf("%s%lld", k ? ", " : "", (long long)e->shape[k]);
        printf("]\n");
        total += e->count;
    }
    printf("  %lld elements in all\n", (long long)total);
    st_safetensors_close(f);
    return ST_EXIT_OK;
}

/* One checkpoint: verified (every file's checksum), its files and where the
 * run stood. */
static int inspect_checkpoint(const char *dir) {
    st_ckpt_state st;
    st_status s = st_ckpt_verify(dir, &st);
    if (s != ST_OK) return st_cli_error(s);
    printf("%s: checkpoint of step %lld, every file's size and CRC32 as state.json records\n", dir,
           (long long)st.step);
    st_ckpt_uncommitted_note(dir, "data inspect", stderr);
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char path[4096];
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode))
            printf("  %-28s %10.3f MiB\n", e->d_name, (double)sb.st_size / 1048576.0);
    }
    if (d) closedir(d);
    printf("  resumes at epoch %lld, step %lld of the epoch, micro-batch %lld; train.seed %llu, "
           "train.batch_size %lld\n",
           (long long)st.pos.epoch, (long long)st.pos.step, (long long)st.pos.micro,
           (unsigned long long)st.seed, (long long)st.batch_size);
    if (st.samples > 0) printf("  its run trained on %lld samples (data.train)\n", (long long)st.samples);
    if (st.optim_sharded)
        printf("  optimizer state in %d shards of %lld elements (%lld parameters): resumes on any number of "
               "ranks\n",
               st.optim_world, (long long)st.optim_shard, (long long)st.optim_count);
    else
        printf("  optimizer state whole, by tensor name (%lld parameters)\n", (long long)st.optim_count);
    if (st.loss_scale > 0)
        printf("  fp16 loss scale %g after %lld clean steps; %lld steps skipped\n", st.loss_scale,
               (long long)st.scale_good_steps, (long long)st.skipped_steps);
    if (st.eval_owed)
        printf("  the evaluation of step %lld was cut short (a stop or an error during it): a run resumed "
               "from here makes it first\n",
               (long long)st.step);
    return ST_EXIT_OK;
}

/* A checkpoint folder (out_dir/ckpt): each checkpoint newest first, good or
 * damaged, and which one `latest` names. Fails when none is good. */
static int inspect_ckpt_folder(const char *ckdir) {
    int64_t *steps = NULL;
    int n = 0;
    st_status s = st_ckpt_list(ckdir, &steps, &n);
    if (s != ST_OK) return st_cli_error(s);
    char latest[256] = "", path[4096];
    snprintf(path, sizeof path, "%s/latest", ckdir);
    FILE *f = fopen(path, "r");
    if (f) {
        if (!fgets(latest, sizeof latest, f)) latest[0] = '\0';
        latest[strcspn(latest, "\r\n")] = '\0';
        fclose(f);
    }
    char named[4400];
    snprintf(named, sizeof named, "%s/%s", ckdir, latest);
    printf("%s: %d checkpoint(s), newest first; latest -> %s%s\n", ckdir, n, latest[0] ? latest : "(missing)",
           latest[0] && !st_path_is_dir(named) ? " (not there)" : "");
    int good = 0;
    for (int i = 0; i < n; i++) {
        char name[64];
        st_ckpt_state st;
        snprintf(name, sizeof name, "step-%lld", (long long)steps[i]);
        snprintf(path, sizeof path, "%s/%s", ckdir, name);
        const st_status v = st_ckpt_verify(path, &st);
        const bool ok = v == ST_OK;
        good += ok;
        /* (a read the storage failed says nothing of the checkpoint) */
        printf("  %-16s %s%s\n", name,
               ok                        ? "good"
               : v == ST_ERR_IO          ? "NOT READ (the storage; --resume auto stops here until it reads): "
               : v == ST_ERR_NOMEM       ? "NOT READ: "
               : v == ST_ERR_UNSUPPORTED ? "NEWER FORMAT (--resume auto stops here): "
                                         : "DAMAGED: ",
               ok ? "" : st_last_error());
    }
    free(steps);
    st_clear_error();
    if (!good) {
        fprintf(stderr, "scaletrain: error: %s: no good checkpoint\n", ckdir);
        return ST_EXIT_FAIL;
    }
    /* What --resume and --init take, found as they find it (`latest` first: a name they refuse, say, is
     * refused here too; it read "they take the newest good one" where they refused) */
    char took[4096];
    bool found = false;
    if (st_ckpt_find("", ckdir, NULL, took, sizeof took, &found, NULL) != ST_OK) {
        fprintf(stderr, "scaletrain: error: --resume and --init refuse this folder: %s\n", st_last_error());
        st_clear_error();
        return ST_EXIT_FAIL;
    }
    printf("  --resume auto and --init take %s\n", took);
    return ST_EXIT_OK;
}

/* The line naming the run that holds out_dir's lock. */
static void say_holder(const char *out_dir, const char *who, const char *more) {
    printf("in use: %s (it holds %s/run.lock)%s\n", who[0] ? who : "a run that does not say who", out_dir,
           more);
}

static int inspect(const char *path) {
    char dir[4096];
    switch (st_ckpt_classify(path, dir, sizeof dir)) {
    case ST_CKPT_ONE:
        return inspect_checkpoint(dir);
    case ST_CKPT_FOLDER:
        return inspect_ckpt_folder(dir);
    case ST_CKPT_RUN: {
        char final[4096];
        snprintf(final, sizeof final, "%s/model.safetensors", path);
        char who[512] = "";
        const bool busy = st_ckpt_out_dir_in_use(path, who, sizeof who);
        printf("%s: a run's out_dir; final weights %s\n", path,
               st_path_is_file(final) ? final
               : busy                 ? "not written yet (a run is training there)"
                                      : "not written (the run did not end)");
        /* (final weights that do not open: --init of this out_dir takes them, and fails; it read as
         * whole) */
        st_safetensors *w = NULL;
        int rc_w = ST_EXIT_OK;
        if (st_path_is_file(final) && st_safetensors_open(final, &w) != ST_OK) {
            fprintf(stderr,
                    "scaletrain: error: the final weights are DAMAGED: %s; --init %s takes them and fails: "
                    "give --init %s (its latest good checkpoint) instead\n",
                    st_last_error(), path, dir);
            st_clear_error();
            rc_w = ST_EXIT_FAIL;
        }
        st_safetensors_close(w);
        if (busy) say_holder(path, who, "");
        const int rc_c = inspect_ckpt_folder(dir);
        return rc_c != ST_EXIT_OK ? rc_c : rc_w;
    }
    case ST_CKPT_NONE:
        break;
    }
    /* A pattern whose first file is not a token file (x*.npy, *.safetensors): each file described on
     * its own (it was taken for token shards, and refused on the first) */
    if (strpbrk(path, "*?[") && !st_path_is_file(path)) {
        glob_t g;
        st_file_kind k;
        if (glob(path, 0, NULL, &g) == 0 && g.gl_pathc > 0 && st_sniff_regular(g.gl_pathv[0], &k) &&
            k.format != ST_FILE_TOKENS && k.format != ST_FILE_LLMC_TOKENS) {
            int rc = ST_EXIT_OK;
            for (size_t i = 0; i < g.gl_pathc; i++) {
                const int r = inspect(g.gl_pathv[i]);
                if (r != ST_EXIT_OK) rc = r;
            }
            globfree(&g);
            return rc;
        }
        globfree(&g);
    }
    if (st_tokens_names_shards(path))
        return inspect_tokens(path); /* a pattern, or a folder of .tokens files */
    /* A run's out_dir before its first checkpoint (its lock, its metrics): said as one, in use or not
     * (it read "not a run's out_dir (no ckpt/)" while a run trained there) */
    char lock[4200], metrics[4200], final[4200], who[512] = "";
    snprintf(lock, sizeof lock, "%s/run.lock", path);
    snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", path);
    snprintf(final, sizeof final, "%s/model.safetensors", path);
    if (st_path_is_dir(path) && (st_path_is_file(lock) || st_path_is_file(metrics))) {
        if (st_path_is_file(final)) {
            /* (its checkpoints removed: --init takes the final weights, --resume has nothing) */
            printf("%s: a run's out_dir with no checkpoint (no ckpt/); final weights %s: --init takes them, "
                   "--resume auto starts the run over\n",
                   path, final);
            return inspect_safetensors(final);
        }
        const bool busy = st_ckpt_out_dir_in_use(path, who, sizeof who);
        printf("%s: a run's out_dir with no checkpoint yet%s\n", path,
               busy ? "" : "; final weights not written (the run did not end)");
        if (busy) {
            say_holder(path, who, ": its first checkpoint comes at train.checkpoint_every");
            return ST_EXIT_OK;
        }
        fprintf(stderr, "scaletrain: error: %s: no checkpoint: --resume auto starts the run over\n", path);
        return ST_EXIT_FAIL;
    }
    if (st_path_is_dir(path)) {
        char pat[4096];
        const bool bins = st_tokens_bin_pattern(path, pat, sizeof pat);
        fprintf(
            stderr,
            "scaletrain: error: %s: a directory, but not a checkpoint (no state.json), a checkpoint folder "
            "(no step-N or latest), a run's out_dir (no ckpt/) nor a folder of token files (no "
            "*.tokens)%s%s%s\n",
            path, bins ? "; it holds .bin files (llm.c's token files?): name them by a pattern, e.g. '" : "",
            bins ? pat : "", bins ? "'" : "");
        return ST_EXIT_FAIL;
    }
    unsigned char magic[ST_SNIFF_BYTES] = {0};
    /* (not waiting on a FIFO, whose open waits for a writer: inspect would never end) */
    struct stat sb;
    const int fd = st_open_read(path, &sb);
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (!f) {
        const int e = errno;
        if (fd >= 0) close(fd);
        fprintf(stderr, "scaletrain: error: %s: cannot open: %s\n", path, strerror(e));
        return ST_EXIT_FAIL;
    }
    if (!S_ISREG(sb.st_mode)) {
        fclose(f);
        fprintf(stderr,
                "scaletrain: error: %s: %s, not a regular file; data inspect reads files, a checkpoint or a "
                "run's folder\n",
                path, st_file_type_name(sb.st_mode));
        return ST_EXIT_FAIL;
    }
    size_t got = fread(magic, 1, sizeof magic, f);
    fclose(f);
    const st_file_kind kind = st_sniff(magic, got);
    switch (kind.format) {
    case ST_FILE_TOKENS:
    case ST_FILE_LLMC_TOKENS:
        return inspect_tokens(path);
    case ST_FILE_NPY:
        return inspect_npy(path);
    case ST_FILE_GZIP:
    case ST_FILE_IDX:
        return inspect_idx(path);
    case ST_FILE_ZIP:
    case ST_FILE_NPZ:
    case ST_FILE_PICKLE:
    case ST_FILE_GGUF:
    case ST_FILE_HDF5:
    case ST_FILE_ELF:
    case ST_FILE_ARCHIVE:
    case ST_FILE_IMAGE:
    case ST_FILE_PDF:
    case ST_FILE_TEXT:
        fprintf(stderr, "scaletrain: error: %s: %s, which scaletrain does not read; %s\n", path, kind.what,
                kind.use);
        return ST_EXIT_FAIL;
    case ST_FILE_CONFIG:
        fprintf(stderr,
                "scaletrain: error: %s: %s, not data; `scaletrain check %s` checks it and its data, "
                "`scaletrain train %s` runs it\n",
                path, kind.what, path, path);
        return ST_EXIT_FAIL;
    case ST_FILE_SAFETENSORS:
        return inspect_safetensors(path);
    case ST_FILE_UNKNOWN:
        break;
    }
    /* a JSON header at byte 8 behind a length past 2^48 (a damaged safetensors file): its reader says the
     * length is wrong (it was read as an IDX file's magic) */
    if (got >= 9 && magic[8] == '{') return inspect_safetensors(path);
    /* IDX's 00 00 of another element type or dimension count: its reader says what is wrong */
    if (got >= 2 && magic[0] == 0 && magic[1] == 0) return inspect_idx(path);
    char what[128] = "empty (0 bytes)";
    size_t at = 0;
    for (size_t i = 0; i < got && i < 9; i++)
        st_appendf(what, sizeof what, &at, "%s%02x",
                   i ? " " : "not a format scaletrain reads (its first bytes: ", magic[i]);
    if (got) st_appendf(what, sizeof what, &at, ")");
    fprintf(stderr,
            "scaletrain: error: %s: %s; data inspect reads token files (scaletrain's, llm.c's), IDX "
            "(gzipped too), NPY and safetensors files, checkpoints and runs' out_dirs\n",
            path, what);
    return ST_EXIT_FAIL;
}

int st_cmd_data(int argc, char **argv) {
    if (argc >= 1 && strcmp(argv[0], "tokenize") == 0) return tokenize(argc - 1, argv + 1);
    if (argc == 2 && strcmp(argv[0], "inspect") == 0 && !argv[1][0]) {
        fprintf(stderr, "scaletrain data inspect: an empty argument ('') where the file's path goes\n");
        return ST_EXIT_USAGE;
    }
    if (argc == 2 && strcmp(argv[0], "inspect") == 0) return inspect(argv[1]);
    fprintf(stderr, TOKENIZE_USAGE "       scaletrain data inspect FILE|PATTERN|CHECKPOINT|RUN_DIR\n");
    return ST_EXIT_USAGE;
}
