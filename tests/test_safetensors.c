/* safetensors: round trips, float conversions, and every malformed file we can
 * think of (each must give a clean error naming the file, never a crash: this
 * also runs under AddressSanitizer), including the file cut at every length.
 *
 * Also a helper for tests/py/test_safetensors_numpy.py (interop with a writer
 * and a reader built on NumPy):
 *   test_safetensors --check FILE EXPECTED   read FILE, compare with EXPECTED
 *   test_safetensors --write FILE            write the fixed file that script checks */
#include <dirent.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "core/safetensors.h"

static char dir[64];

static void put_file(const char *path, const void *buf, size_t n) {
    FILE *fp = fopen(path, "wb");
    if (!fp || fwrite(buf, 1, n, fp) != n || fclose(fp) != 0) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
}

/* Write a file from a header length, JSON text and ndata zero data bytes. */
static void put_raw(const char *path, uint64_t hlen, const char *json, size_t ndata) {
    size_t jn = strlen(json), n = 8 + jn + ndata;
    uint8_t *buf = calloc(1, n);
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)(hlen >> (8 * i));
    memcpy(buf + 8, json, jn);
    put_file(path, buf, n);
    free(buf);
}

/* A file with `json` as its header must fail to open with `code`, naming the
 * file and saying `needle`. */
static void bad_json(const char *label, const char *json, size_t ndata, st_status code, const char *needle) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, label);
    put_raw(path, strlen(json), json, ndata);
    st_safetensors *f = (st_safetensors *)1;
    st_clear_error();
    st_status s = st_safetensors_open(path, &f);
    CHECK(s == code && f == NULL, "%s: got %s (%s), expected %s", label, st_status_name(s), st_last_error(),
          st_status_name(code));
    CHECK(strstr(st_last_error(), path) && strstr(st_last_error(), needle), "%s: message \"%s\" lacks '%s'",
          label, st_last_error(), needle);
    st_safetensors_close(f == (st_safetensors *)1 ? NULL : f);
}

static bool same_bits(float a, float b) { return memcmp(&a, &b, 4) == 0 || (isnan(a) && isnan(b)); }

static bool no_tmp_files(void) {
    DIR *d = opendir(dir);
    bool ok = true;
    for (struct dirent *e; d && (e = readdir(d));)
        ok = ok && !strstr(e->d_name, ".tmp.");
    if (d) closedir(d);
    return ok;
}

static void test_round_trip(void) {
    char path[256];
    snprintf(path, sizeof path, "%s/rt.safetensors", dir);
    float w[6] = {1, -2, 3.5f, 0, 1e-30f, -1e30f}, b[3] = {0.25f, 0.5f, 0.75f}, sc = 3.5f;
    uint16_t h[4] = {0x3C00, 0xC000, 0x3800, 0x7BFF}; /* 1, -2, 0.5, 65504 */
    uint16_t g[2] = {0x3F80, 0x4049};                 /* 1, 3.140625 */
    double d[3] = {0.5, -1.25, 1e10};
    int64_t iv[2] = {-7, (int64_t)1 << 40};
    uint8_t u[5] = {1, 2, 3, 4, 255};
    int64_t s_w[2] = {2, 3}, s_b[1] = {3}, s_e[2] = {0, 4}, s_h[1] = {4}, s_g[1] = {2}, s_d[1] = {3},
            s_i[1] = {2}, s_u[1] = {5};
    st_safetensors_tensor t[] = {
        {"h.0.w", "F32", 2, s_w, w},    {"h.0.b", "F32", 1, s_b, b}, {"scalar", "F32", 0, NULL, &sc},
        {"empty", "F32", 2, s_e, NULL}, {"half", "F16", 1, s_h, h},  {"brain", "BF16", 1, s_g, g},
        {"dbl", "F64", 1, s_d, d},      {"ints", "I64", 1, s_i, iv}, {"bytes", "U8", 1, s_u, u},
    };
    const char *meta[] = {"format", "pt", "step", "1000"};
    CHECK_OK(st_safetensors_write(path, t, 9, meta, 2));
    CHECK_OK(st_safetensors_write(path, t, 9, meta, 2)); /* over an existing file */
    CHECK(no_tmp_files(), "a temporary file was left behind");
    FILE *fp = fopen(path, "rb");
    uint8_t len8[8] = {0};
    CHECK(fp && fread(len8, 1, 8, fp) == 8, "cannot read back %s", path);
    if (fp) fclose(fp);
    CHECK(len8[0] % 8 == 0, "header length %u is not a multiple of 8", len8[0]);

    st_safetensors *f = NULL;
    CHECK_OK(st_safetensors_open(path, &f));
    if (!f) return;
    CHECK(st_safetensors_count(f) == 9, "count %d", st_safetensors_count(f));
    for (int i = 0; i < 9 && i < st_safetensors_count(f); i++) { /* file order is the written order */
        const st_safetensors_entry *e = st_safetensors_entry_at(f, i);
        CHECK(strcmp(e->name, t[i].name) == 0 && strcmp(e->dtype, t[i].dtype) == 0 && e->ndim == t[i].ndim,
              "entry %d is %s %s", i, e->name, e->dtype);
        for (int k = 0; k < e->ndim; k++)
            CHECK(e->shape[k] == t[i].shape[k], "%s shape[%d]", e->name, k);
    }
    CHECK(st_safetensors_entry_at(f, 9) == NULL && st_safetensors_entry_at(f, -1) == NULL, "entry_at range");
    const st_safetensors_entry *e = st_safetensors_find(f, "scalar");
    CHECK(e && e->ndim == 0 && e->count == 1 && e->nbytes == 4, "0-d entry");
    e = st_safetensors_find(f, "empty");
    CHECK(e && e->count == 0 && e->nbytes == 0, "empty entry");
    e = st_safetensors_find(f, "bytes");
    CHECK(e && e->nbytes == 5 && e->count == 5, "U8 entry");
    CHECK(st_safetensors_find(f, "nope") == NULL, "find of a missing name");
    CHECK(st_safetensors_metadata(f, "format") && strcmp(st_safetensors_metadata(f, "format"), "pt") == 0,
          "metadata format");
    CHECK(st_safetensors_metadata(f, "step") && strcmp(st_safetensors_metadata(f, "step"), "1000") == 0,
          "metadata step");
    CHECK(st_safetensors_metadata(f, "h.0.w") == NULL, "metadata of a tensor name");

    float out[8];
    CHECK_OK(st_safetensors_read_f32(f, "h.0.w", out, 6));
    for (int i = 0; i < 6; i++)
        CHECK(same_bits(out[i], w[i]), "w[%d] = %g", i, out[i]);
    CHECK_OK(st_safetensors_read_f32(f, "scalar", out, 1));
    CHECK(out[0] == 3.5f, "scalar %g", out[0]);
    CHECK_OK(st_safetensors_read_f32(f, "empty", NULL, 0));
    CHECK_OK(st_safetensors_read_f32(f, "half", out, 4));
    CHECK(out[0] == 1 && out[1] == -2 && out[2] == 0.5f && out[3] == 65504, "half %g %g %g %g", out[0],
          out[1], out[2], out[3]);
    CHECK_OK(st_safetensors_read_f32(f, "brain", out, 2));
    CHECK(out[0] == 1 && out[1] == 3.140625f, "bf16 %g %g", out[0], out[1]);
    CHECK_OK(st_safetensors_read_f32(f, "dbl", out, 3));
    CHECK(out[0] == 0.5f && out[1] == -1.25f && out[2] == 1e10f, "f64 %g %g %g", out[0], out[1], out[2]);
    int64_t iv2[2] = {0};
    uint8_t u2[5] = {0};
    CHECK_OK(st_safetensors_read_raw(f, "ints", iv2, 16));
    CHECK(iv2[0] == -7 && iv2[1] == (int64_t)1 << 40, "I64 raw");
    CHECK_OK(st_safetensors_read_raw(f, "bytes", u2, 5));
    CHECK(memcmp(u, u2, 5) == 0, "U8 raw");

    CHECK_FAILS(st_safetensors_read_f32(f, "h.0.w", out, 5), ST_ERR_SHAPE, "'h.0.w' has 6 elements but 5");
    CHECK_FAILS(st_safetensors_read_f32(f, "ints", out, 2), ST_ERR_UNSUPPORTED, "'ints' is I64");
    CHECK_FAILS(st_safetensors_read_f32(f, "missing", out, 1), ST_ERR_FORMAT, "no tensor named 'missing'");
    CHECK_FAILS(st_safetensors_read_raw(f, "bytes", u2, 4), ST_ERR_SHAPE, "'bytes' holds 5 bytes");
    st_safetensors_close(f);
    st_safetensors_close(NULL);
}

/* Half and bfloat16 against hand-computed values (bitwise, so -0 counts). */
static void test_conversions(void) {
    static const struct {
        uint16_t h;
        float f;
    } f16[] = {{0x0000, 0.0f},      {0x8000, -0.0f},           {0x3C00, 1.0f},
               {0xC000, -2.0f},     {0x7BFF, 65504.f},         {0x0400, 0x1p-14f},
               {0x0001, 0x1p-24f},  {0x03FF, 1023 * 0x1p-24f}, {0x3555, 0.333251953125f},
               {0x4248, 3.140625f}, {0x7C00, INFINITY},        {0xFC00, -INFINITY},
               {0x7E00, NAN}},
      bf16[] = {{0x3F80, 1.0f},        {0xC000, -2.0f},     {0x4049, 3.140625f}, {0x8000, -0.0f},
                {0x7F7F, 0x1.fep127f}, {0x0001, 0x1p-133f}, {0x7F80, INFINITY},  {0x7FC0, NAN}};
    enum { NH = sizeof f16 / sizeof f16[0], NB = sizeof bf16 / sizeof bf16[0] };
    uint16_t hb[NH], bb[NB];
    for (int i = 0; i < NH; i++)
        hb[i] = f16[i].h;
    for (int i = 0; i < NB; i++)
        bb[i] = bf16[i].h;
    double dv[4] = {0.1, 1e300, -3.5, 1e-50};
    int64_t sh = NH, sb = NB, sd = 4;
    st_safetensors_tensor t[] = {
        {"h", "F16", 1, &sh, hb}, {"b", "BF16", 1, &sb, bb}, {"d", "F64", 1, &sd, dv}};
    char path[256];
    snprintf(path, sizeof path, "%s/conv.safetensors", dir);
    CHECK_OK(st_safetensors_write(path, t, 3, NULL, 0));
    st_safetensors *f = NULL;
    CHECK_OK(st_safetensors_open(path, &f));
    if (!f) return;
    float out[NH];
    CHECK_OK(st_safetensors_read_f32(f, "h", out, NH));
    for (int i = 0; i < NH; i++)
        CHECK(same_bits(out[i], f16[i].f), "F16 0x%04x -> %a, expected %a", f16[i].h, out[i], f16[i].f);
    CHECK_OK(st_safetensors_read_f32(f, "b", out, NB));
    for (int i = 0; i < NB; i++)
        CHECK(same_bits(out[i], bf16[i].f), "BF16 0x%04x -> %a, expected %a", bf16[i].h, out[i], bf16[i].f);
    CHECK_OK(st_safetensors_read_f32(f, "d", out, 4));
    uint32_t bits;
    memcpy(&bits, &out[0], 4);
    CHECK(bits == 0x3DCCCCCD && isinf(out[1]) && out[2] == -3.5f && out[3] == 0, "F64 %a %a %a %a", out[0],
          out[1], out[2], out[3]);
    st_safetensors_close(f);
}

static void test_bad_headers(void) {
    char path[256];
    /* too short to hold the length */
    for (int n = 0; n < 8; n += 3) {
        snprintf(path, sizeof path, "%s/short%d.safetensors", dir, n);
        put_file(path, "\x10\0\0\0\0\0\0", (size_t)n);
        CHECK_FAILS(st_safetensors_open(path, &(st_safetensors *){0}), ST_ERR_FORMAT, "8-byte header length");
    }
    snprintf(path, sizeof path, "%s/long.safetensors", dir);
    put_raw(path, 5000, "{}", 118);
    CHECK_FAILS(st_safetensors_open(path, &(st_safetensors *){0}), ST_ERR_FORMAT,
                "header says 5000 bytes but the file has 120 after the length");
    put_raw(path, UINT64_MAX, "{}", 0);
    CHECK_FAILS(st_safetensors_open(path, &(st_safetensors *){0}), ST_ERR_FORMAT, "but the file has 2");
    put_raw(path, 0, "", 64);
    CHECK_FAILS(st_safetensors_open(path, &(st_safetensors *){0}), ST_ERR_FORMAT, "header length is 0");
    /* a NUL in a name cut it short as read (head.bias\u0000x loaded as head.bias); an escaped backslash
     * before u0000 is text */
    bad_json("nul", "{\"a\\u0000x\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4,
             ST_ERR_FORMAT, "the header holds a NUL character (at byte 11)");
    const char *text = "{\"a\\\\u0000x\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}";
    put_raw(path, strlen(text), text, 4);
    st_safetensors *bs = NULL;
    CHECK_OK(st_safetensors_open(path, &bs));
    CHECK(bs && st_safetensors_find(bs, "a\\u0000x"), "a name with a backslash and u0000 as text");
    st_safetensors_close(bs);
    /* another format is named by the sniffer (each kind: test_sniff.c); one
     * under 8 bytes is too short to hold the length, whatever it starts with */
    static const char torch_zip[] = "PK\x03\x04\x00\x00\x08\x08\x00"
                                    "archive/data.pkl";
    put_file(path, torch_zip, sizeof torch_zip - 1);
    CHECK_FAILS(st_safetensors_open(path, &(st_safetensors *){0}), ST_ERR_FORMAT,
                "not safetensors but a zip archive: PyTorch's torch.save");
    put_file(path, torch_zip, 6);
    CHECK_FAILS(st_safetensors_open(path, &(st_safetensors *){0}), ST_ERR_FORMAT, "8-byte header length");
    /* a length whose bytes spell a magic, its JSON at byte 8: safetensors' own errors */
    put_file(path, "PK\x03\x04\x00\x00\x00\x00{}", 10);
    CHECK_FAILS(st_safetensors_open(path, &(st_safetensors *){0}), ST_ERR_FORMAT,
                "header says 67324752 bytes but the file has 2");
    /* a header over the cap, in a sparse file big enough to hold it */
    put_raw(path, 150000000, "{}", 0);
    if (truncate(path, 200000000) == 0)
        CHECK_FAILS(st_safetensors_open(path, &(st_safetensors *){0}), ST_ERR_FORMAT,
                    "over the 100000000-byte");
    unlink(path);
    snprintf(path, sizeof path, "%s/does-not-exist.safetensors", dir);
    CHECK_FAILS(st_safetensors_open(path, &(st_safetensors *){0}), ST_ERR_IO, "does-not-exist.safetensors");
    CHECK_FAILS(st_safetensors_open(dir, &(st_safetensors *){0}), ST_ERR_IO, "not a regular file");

    const st_status F = ST_ERR_FORMAT;
    bad_json("array", "[1,2,3]", 0, F, "not an object");
    bad_json("invalid", "{\"a\": {\"dtype\": ", 0, F, "not valid JSON");
    bad_json("garbage", "{}  x     ", 0, F, "bytes after its JSON");
    bad_json("dtype", "{\"a\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, F,
             "unknown dtype");
    bad_json("nodtype", "{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, F, "\"dtype\" is missing");
    bad_json("range", "{\"a\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[0,24]}}", 16, F,
             "tensor 'a': data_offsets [0, 24] reach past the 16 data bytes");
    bad_json("size", "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,16]}}", 16, F,
             "hold 16 bytes but F32 shape needs 12");
    bad_json("overlap",
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
             "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}",
             24, F, "tensor 'b' (bytes 8..24) overlaps tensor 'a'");
    bad_json("same", /* identical offsets overlap too */
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
             "\"b\":{\"dtype\":\"I32\",\"shape\":[4],\"data_offsets\":[0,16]}}",
             16, F, "overlaps");
    bad_json("float", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,10]}}", 16, F,
             "shape[0] is not an integer");
    bad_json("negative", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,0]}}", 0, F,
             "shape[0] is negative");
    bad_json("string", "{\"a\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}}", 8, F,
             "shape[0] is not a number");
    bad_json("huge", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1e300],\"data_offsets\":[0,8]}}", 8, F,
             "too large");
    bad_json("overflow",
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4],\"data_offsets\":[0,8]}}", 8, F,
             "overflows");
    bad_json("noshape", "{\"a\":{\"dtype\":\"F32\",\"shape\":3,\"data_offsets\":[0,4]}}", 4, F,
             "\"shape\" is missing or not an array");
    bad_json("offs1", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, F, "[begin, end]");
    bad_json("offsneg", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 4, F,
             "a data offset is negative");
    bad_json("backwards", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4, F,
             "begin after they end");
    bad_json("notobj", "{\"a\":5}", 0, F, "tensor 'a': the entry is not a JSON object");
    bad_json("dup",
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
             "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
             8, F, "tensor 'a' appears twice");
    /* the same name twice over the same bytes: said as a name given twice (it was said to overlap itself) */
    bad_json("dup_same_bytes",
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
             "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
             4, F, "tensor 'a' appears twice");
    bad_json("metaval", "{\"__metadata__\":{\"k\":1}}", 0, F, "value for 'k' is not a string");
    bad_json("metaobj", "{\"__metadata__\":[1]}", 0, F, "\"__metadata__\" is not an object");
    bad_json("ndim", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
             ST_ERR_UNSUPPORTED, "9 dimensions");

    /* Valid oddities: no tensors; gaps and trailing bytes are tolerated. */
    snprintf(path, sizeof path, "%s/odd.safetensors", dir);
    put_raw(path, 2, "{}", 0);
    st_safetensors *f = NULL;
    CHECK_OK(st_safetensors_open(path, &f));
    CHECK(f && st_safetensors_count(f) == 0, "empty header");
    st_safetensors_close(f);
    const char *gap =
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]},\"__metadata__\":null}";
    put_raw(path, strlen(gap), gap, 20);
    CHECK_OK(st_safetensors_open(path, &f));
    CHECK(f && st_safetensors_count(f) == 1 && st_safetensors_find(f, "a")->offset == 8, "gap");
    st_safetensors_close(f);
}

static void test_writer_errors(void) {
    char path[256];
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    float x[2] = {1, 2};
    int64_t s2 = 2;
    st_safetensors_tensor dup[2] = {{"a", "F32", 1, &s2, x}, {"a", "F32", 1, &s2, x}};
    CHECK_FAILS(st_safetensors_write(path, dup, 2, NULL, 0), ST_ERR_ARG, "'a' is given twice");
    st_safetensors_tensor bad = {"a", "F17", 1, &s2, x};
    CHECK_FAILS(st_safetensors_write(path, &bad, 1, NULL, 0), ST_ERR_ARG, "unknown dtype");
    st_safetensors_tensor meta = {"__metadata__", "F32", 1, &s2, x};
    CHECK_FAILS(st_safetensors_write(path, &meta, 1, NULL, 0), ST_ERR_ARG, "__metadata__");
    st_safetensors_tensor nodata = {"a", "F32", 1, &s2, NULL};
    CHECK_FAILS(st_safetensors_write(path, &nodata, 1, NULL, 0), ST_ERR_ARG, "data is NULL");
    const char *kv[] = {"k", "v", "k", "w"};
    CHECK_FAILS(st_safetensors_write(path, dup, 1, kv, 2), ST_ERR_ARG, "duplicate key");
    snprintf(path, sizeof path, "%s/no/such/dir/w.safetensors", dir);
    CHECK_FAILS(st_safetensors_write(path, dup, 1, NULL, 0), ST_ERR_IO, "no/such/dir");
    CHECK(no_tmp_files(), "a temporary file was left behind");
}

/* Cut a valid file at every length, and flip bytes of its header at random:
 * every result must open cleanly or fail with a message naming the file. */
static void test_truncate_and_corrupt(void) {
    char full[256], cut[256];
    snprintf(full, sizeof full, "%s/full.safetensors", dir);
    snprintf(cut, sizeof cut, "%s/cut.safetensors", dir);
    float a[6] = {1, 2, 3, 4, 5, 6}, c = 9;
    uint16_t h[3] = {0x3C00, 0x4000, 0x4200};
    int64_t sa[2] = {2, 3}, sh = 3, se = 0;
    st_safetensors_tensor t[] = {{"a", "F32", 2, sa, a},
                                 {"e", "F32", 1, &se, NULL},
                                 {"h", "F16", 1, &sh, h},
                                 {"c", "F32", 0, NULL, &c}};
    const char *kv[] = {"note", "a \"quoted\" \\ value"};
    CHECK_OK(st_safetensors_write(full, t, 4, kv, 1));
    FILE *fp = fopen(full, "rb");
    uint8_t buf[4096];
    size_t size = fp ? fread(buf, 1, sizeof buf, fp) : 0;
    if (fp) fclose(fp);
    CHECK(size > 100 && size < sizeof buf, "the file is %zu bytes", size);
    size_t hlen = 0;
    for (int i = 7; i >= 0 && size >= 8; i--)
        hlen = hlen << 8 | buf[i];
    for (size_t len = 0; len <= size; len++) {
        put_file(cut, buf, len);
        st_safetensors *f = NULL;
        st_clear_error();
        st_status s = st_safetensors_open(cut, &f);
        if (len == size) {
            CHECK(s == ST_OK && f, "the whole file: %s", st_last_error());
            CHECK(f && strcmp(st_safetensors_metadata(f, "note"), kv[1]) == 0, "escaped metadata");
        } else {
            CHECK(s != ST_OK && !f && strstr(st_last_error(), cut), "cut at %zu of %zu: %s (%s)", len, size,
                  st_status_name(s), st_last_error());
        }
        st_safetensors_close(f);
    }
    uint64_t seed = 12345;
    int opened = 0;
    for (int iter = 0; iter < 3000; iter++) {
        uint8_t bad[4096];
        memcpy(bad, buf, size);
        for (int k = 0; k < 1 + iter % 3; k++) {
            seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
            size_t at = (size_t)(seed >> 33) % (8 + hlen); /* in the length or the JSON */
            bad[at] = (uint8_t)(seed >> 20);
        }
        put_file(cut, bad, size);
        st_safetensors *f = NULL;
        st_status s = st_safetensors_open(cut, &f);
        CHECK(s == ST_OK || (!f && strstr(st_last_error(), cut)), "corruption %d: %s", iter, st_last_error());
        for (int i = 0; f && i < st_safetensors_count(f); i++) { /* what opened must read in bounds */
            const st_safetensors_entry *e = st_safetensors_entry_at(f, i);
            void *dst = malloc((size_t)e->nbytes + 1);
            CHECK_OK(st_safetensors_read_raw(f, e->name, dst, e->nbytes));
            free(dst);
        }
        opened += s == ST_OK;
        st_safetensors_close(f);
    }
    printf("  corrupted headers: %d of 3000 still valid, the rest refused cleanly\n", opened);
}

/* --check FILE EXPECTED: lines "meta KEY VALUE" and
 * "tensor NAME DTYPE NDIM D... COUNT V..." (values as decimal floats). */
static int check_external(const char *path, const char *expected) {
    st_safetensors *f = NULL;
    CHECK_OK(st_safetensors_open(path, &f));
    FILE *ex = fopen(expected, "r");
    CHECK(ex != NULL, "cannot open %s", expected);
    if (!f || !ex) return st_test_finish("test_safetensors --check");
    char kind[16], name[256], val[256];
    int n_tensors = 0;
    while (fscanf(ex, "%15s %255s", kind, name) == 2) {
        if (strcmp(kind, "meta") == 0) {
            CHECK(fscanf(ex, "%255s", val) == 1, "bad expected line");
            const char *m = st_safetensors_metadata(f, name);
            CHECK(m && strcmp(m, val) == 0, "metadata %s = %s, expected %s", name, m ? m : "(none)", val);
            continue;
        }
        char dtype[16];
        int ndim;
        long long count, dim;
        CHECK(fscanf(ex, "%15s %d", dtype, &ndim) == 2, "bad expected line");
        const st_safetensors_entry *e = st_safetensors_find(f, name);
        CHECK(e && strcmp(e->dtype, dtype) == 0 && e->ndim == ndim,
              "tensor %s: not found or wrong dtype/ndim", name);
        for (int k = 0; k < ndim; k++)
            CHECK(fscanf(ex, "%lld", &dim) == 1 && e && e->shape[k] == dim, "tensor %s shape[%d]", name, k);
        CHECK(fscanf(ex, "%lld", &count) == 1 && e && e->count == count, "tensor %s count", name);
        float *got = malloc((size_t)count * 4 + 4);
        CHECK_OK(st_safetensors_read_f32(f, name, got, count));
        for (long long i = 0; i < count; i++) {
            double want;
            CHECK(fscanf(ex, "%lf", &want) == 1, "bad expected value");
            CHECK(same_bits(got[i], (float)want), "tensor %s[%lld] = %.9g, expected %.9g", name, i, got[i],
                  want);
        }
        free(got);
        n_tensors++;
    }
    CHECK(n_tensors == st_safetensors_count(f), "%d tensors expected, the file has %d", n_tensors,
          st_safetensors_count(f));
    fclose(ex);
    st_safetensors_close(f);
    return st_test_finish("test_safetensors --check");
}

/* --write FILE: the fixed file tests/py/test_safetensors_numpy.py checks. */
static int write_fixed(const char *path) {
    float a[6] = {0, 0.5f, 1, 1.5f, 2, 2.5f}, s = 7.25f;
    uint16_t b[3] = {0x3C00, 0xC000, 0x3800};
    int64_t c[2] = {-1, (int64_t)1 << 40}, sa[2] = {2, 3}, sb = 3, sc = 2, se = 0;
    st_safetensors_tensor t[] = {{"a", "F32", 2, sa, a},
                                 {"b", "F16", 1, &sb, b},
                                 {"c", "I64", 1, &sc, c},
                                 {"s", "F32", 0, NULL, &s},
                                 {"e", "F32", 1, &se, NULL}};
    const char *kv[] = {"k", "v"};
    CHECK_OK(st_safetensors_write(path, t, 5, kv, 1));
    return st_test_finish("test_safetensors --write");
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "--check") == 0) return check_external(argv[2], argv[3]);
    if (argc == 3 && strcmp(argv[1], "--write") == 0) return write_fixed(argv[2]);
    if (argc != 1) {
        fprintf(stderr, "usage: %s [--check FILE EXPECTED | --write FILE]\n", argv[0]);
        return 2;
    }
    snprintf(dir, sizeof dir, "/tmp/st_safetensors_XXXXXX");
    if (!mkdtemp(dir)) return st_test_skip("test_safetensors", "cannot make a temporary directory in /tmp");
    test_round_trip();
    test_conversions();
    test_bad_headers();
    test_writer_errors();
    test_truncate_and_corrupt();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "note: could not remove %s\n", dir);
    return st_test_finish("test_safetensors");
}
