/* `scaletrain data`: tokenize text into a token file; inspect a data or weights file. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "core/safetensors.h"
#include "data/idx.h"
#include "data/npy.h"
#include "data/tokens.h"

static int tokenize(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: scaletrain data tokenize OUT.tokens TEXT_FILE...\n");
        return ST_EXIT_USAGE;
    }
    int64_t count = 0;
    st_status s = st_tokens_from_text((const char *const *)argv + 1, argc - 1, argv[0], &count);
    if (s != ST_OK) return st_cli_error(s);
    printf("%s: %lld tokens, byte-level vocabulary of 256, from %d file(s)\n", argv[0], (long long)count,
           argc - 1);
    return ST_EXIT_OK;
}

static int inspect_tokens(const char *path) {
    st_tokens *t = NULL;
    st_status s = st_tokens_open(path, &t);
    if (s != ST_OK) return st_cli_error(s);
    printf("%s: token file, %lld tokens of %d bytes, vocabulary %llu\n", path, (long long)st_tokens_count(t),
           st_tokens_token_bytes(t), (unsigned long long)st_tokens_vocab_size(t));
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
    for (int i = 0; i < x.ndim; i++) printf("%s%lld", i ? ", " : "", (long long)x.dims[i]);
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
    for (int i = 0; i < a.ndim; i++) printf("%s%lld", i ? ", " : "", (long long)a.dims[i]);
    printf("]");
    double lo = 0, hi = 0; /* the value range: for labels, the classes */
    for (int64_t i = 0; i < a.count; i++) {
        double v = a.dtype == ST_NPY_U8    ? ((const uint8_t *)a.data)[i]
                   : a.dtype == ST_NPY_I32 ? ((const int32_t *)a.data)[i]
                   : a.dtype == ST_NPY_I64 ? (double)((const int64_t *)a.data)[i]
                   : a.dtype == ST_NPY_F32 ? ((const float *)a.data)[i]
                                           : ((const double *)a.data)[i];
        if (i == 0 || v < lo) lo = v;
        if (i == 0 || v > hi) hi = v;
    }
    if (a.count) printf(", values %g..%g", lo, hi);
    printf("\n");
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
    for (int i = 0; i < n; i++) {
        const st_safetensors_entry *e = st_safetensors_entry_at(f, i);
        printf("  %-40s %-5s [", e->name, e->dtype);
        for (int k = 0; k < e->ndim; k++) printf("%s%lld", k ? ", " : "", (long long)e->shape[k]);
        printf("]\n");
        total += e->count;
    }
    printf("  %lld elements in all\n", (long long)total);
    st_safetensors_close(f);
    return ST_EXIT_OK;
}

static int inspect(const char *path) {
    unsigned char magic[8] = {0};
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return ST_EXIT_FAIL;
    }
    size_t got = fread(magic, 1, sizeof magic, f);
    fclose(f);
    if (got == 8 && memcmp(magic, "STTOKENS", 8) == 0) return inspect_tokens(path);
    if (got >= 6 && memcmp(magic, "\x93NUMPY", 6) == 0) return inspect_npy(path);
    if (got >= 2 && ((magic[0] == 0x1f && magic[1] == 0x8b) || (magic[0] == 0 && magic[1] == 0)))
        return inspect_idx(path);
    return inspect_safetensors(path);
}

int st_cmd_data(int argc, char **argv) {
    if (argc >= 1 && strcmp(argv[0], "tokenize") == 0) return tokenize(argc - 1, argv + 1);
    if (argc == 2 && strcmp(argv[0], "inspect") == 0) return inspect(argv[1]);
    fprintf(stderr, "usage: scaletrain data tokenize OUT.tokens TEXT_FILE...\n"
                    "       scaletrain data inspect FILE\n");
    return ST_EXIT_USAGE;
}
