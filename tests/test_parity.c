/* Parity against PyTorch: every layer's output and gradients, the three models'
 * logits, loss and parameter gradients, and ten AdamW steps, compared with a
 * PyTorch reference by tests/parity/torch_parity.py.
 *
 * One program, two roles. With no arguments (or with options for the script,
 * e.g. `test_parity --seed 42 --case conv2d`) it runs the script with
 * /usr/bin/python3 (Debian's python3-torch) and returns its exit status; it
 * skips (77) when that interpreter cannot import torch. With arguments
 * `CASE in.safetensors out.safetensors` it is the driver the script calls:
 * it runs one case on the inputs the script wrote and writes what it got.
 * What this is not: a tolerance policy; the script owns the tolerances. */
#include <errno.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "parity_layers.h"
#include "parity_models.h"

#define PYTHON "/usr/bin/python3"
#define SCRIPT "tests/parity/torch_parity.py"

static const struct {
    const char *name;
    pd_layer_fn build;
} layer_cases[] = {
    {"linear", pl_linear},
    {"embedding", pl_embedding},
    {"pos_embedding", pl_pos_embedding},
    {"layernorm", pl_layernorm},
    {"gelu", pl_gelu},
    {"relu", pl_relu},
    {"add", pl_add},
    {"dropout", pl_dropout},
    {"attention", pl_attention},
    {"conv2d", pl_conv2d},
    {"maxpool2d", pl_maxpool2d},
    {"batchnorm", pl_batchnorm},
    {"flatten", pl_flatten},
    {"softmax_ce", pl_softmax_ce},
    {"linear_ce", pl_linear_ce},
    {"mse", pl_mse},
};

static st_status run_case(pd_ctx *c, const char *name) {
    for (size_t i = 0; i < sizeof layer_cases / sizeof layer_cases[0]; i++)
        if (strcmp(name, layer_cases[i].name) == 0) return pd_layer_case(c, layer_cases[i].build);
    if (strcmp(name, "linear_bf16") == 0) return pd_layer_case_prec(c, pl_linear, ST_PREC_BF16);
    if (strcmp(name, "linear_fp16") == 0) return pd_layer_case_prec(c, pl_linear, ST_PREC_FP16);
    if (strncmp(name, "model_", 6) == 0) return pm_model_case(c, name + 6);
    if (strncmp(name, "train_", 6) == 0) return pm_train_case(c, name + 6);
    return st_fail(ST_ERR_ARG, "unknown parity case '%s'", name);
}

/* The driver role: exit 0 when the case ran and its results were written. */
static int driver(const char *name, const char *in, const char *out) {
    pd_ctx c;
    st_status s = pd_open(&c, in);
    if (s == ST_OK) s = run_case(&c, name);
    if (s == ST_OK) s = pd_write(&c, out);
    if (s != ST_OK) fprintf(stderr, "test_parity %s: %s: %s\n", name, st_status_name(s), st_last_error());
    pd_close(&c);
    return s == ST_OK ? 0 : 1;
}

/* Run argv[0] (a path) and return its exit status, or -1 if it did not exit. */
static int spawn(char *const *argv, bool quiet) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        if (quiet) {
            if (!freopen("/dev/null", "w", stdout) || !freopen("/dev/null", "w", stderr)) _exit(127);
        }
        execv(argv[0], argv);
        _exit(127);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static bool is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The script: under $ST_SOURCE_DIR, the working directory (the repository
 * root, where tests run), or two levels above this binary (build/tests/). */
static bool find_script(const char *self, char *path, size_t size) {
    const char *src = getenv("ST_SOURCE_DIR");
    if (src && *src) {
        snprintf(path, size, "%s/%s", src, SCRIPT);
        return is_file(path);
    }
    snprintf(path, size, "%s", SCRIPT);
    if (is_file(path)) return true;
    const char *slash = strrchr(self, '/');
    if (!slash) return false;
    snprintf(path, size, "%.*s/../../%s", (int)(slash - self), self, SCRIPT);
    return is_file(path);
}

static int runner(int argc, char **argv) {
    char self[PATH_MAX], script[PATH_MAX + 64];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        if (!realpath(argv[0], self)) snprintf(self, sizeof self, "%s", argv[0]);
    } else {
        self[n] = '\0';
    }
    if (access(PYTHON, X_OK) != 0) return st_test_skip("test_parity", PYTHON " is not installed");
    char *probe[] = {PYTHON, "-c", "import torch", NULL};
    if (spawn(probe, true) != 0)
        return st_test_skip("test_parity",
                            "torch is not importable by " PYTHON " (apt install python3-torch)");
    if (!find_script(self, script, sizeof script)) {
        fprintf(stderr, "test_parity: cannot find %s; run from the repository root or set ST_SOURCE_DIR\n",
                SCRIPT);
        return 1;
    }
    char *args[64] = {PYTHON, script, "--driver", self};
    int k = 4;
    for (int i = 1; i < argc && k < 63; i++)
        args[k++] = argv[i];
    args[k] = NULL;
    int rc = spawn(args, false);
    if (rc < 0) {
        fprintf(stderr, "test_parity: %s did not exit normally\n", script);
        return 1;
    }
    return rc;
}

int main(int argc, char **argv) {
    if (argc == 4 && argv[1][0] != '-') return driver(argv[1], argv[2], argv[3]);
    if (argc > 1 && argv[1][0] != '-') {
        fprintf(stderr,
                "usage: %s [script options]   (run the parity test)\n"
                "       %s CASE in.safetensors out.safetensors   (the driver)\n",
                argv[0], argv[0]);
        return 2;
    }
    return runner(argc, argv);
}
