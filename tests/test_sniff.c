/* What a file is, by its first bytes (core/sniff.h): each kind told apart,
 * safetensors whatever its length's bytes spell, text as ASCII or UTF-8 and
 * never binary; and every reader (safetensors, token, IDX and NPY files)
 * given another kind of file names that kind and what reads it, where it
 * named only the bytes it expected. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "core/safetensors.h"
#include "core/sniff.h"
#include "data/idx.h"
#include "data/npy.h"
#include "data/tokens.h"

#define B(s) (const uint8_t *)(s), sizeof(s) - 1 /* a literal's bytes, its NUL left out */

static void kind_is(const char *label, const uint8_t *h, size_t n, st_file_format want) {
    const st_file_kind k = st_sniff(h, n);
    CHECK(k.format == want, "%s: format %d, wanted %d (%s)", label, (int)k.format, (int)want, k.what);
    CHECK(k.what && k.use && (want == ST_FILE_UNKNOWN) == (k.what[0] == '\0'), "%s: what '%s'", label,
          k.what ? k.what : "(null)");
}

/* A zip whose first member is `name` (its local header: the name's length at 26, the name at 30) is
 * told as format `want`, said as `what`. */
#define TORCH_ZIP "a zip archive: PyTorch's torch.save (a .pt or .bin checkpoint)"
static void zip_is(const char *label, const char *name, st_file_format want, const char *what) {
    uint8_t h[ST_SNIFF_BYTES] = "PK\x03\x04\x14\x00";
    const size_t len = strlen(name);
    CHECK(30 + len <= sizeof h, "%s: the name is too long for the window", label);
    h[26] = (uint8_t)len;
    memcpy(h + 30, name, len);
    const st_file_kind k = st_sniff(h, 30 + len);
    CHECK(k.format == want && !strcmp(k.what, what), "%s: format %d (%s), wanted %d (%s)", label,
          (int)k.format, k.what, (int)want, what);
}

static void test_kinds(void) {
    kind_is("safetensors", B("\x10\x00\x00\x00\x00\x00\x00\x00{\"a\":1}"), ST_FILE_SAFETENSORS);
    /* a length whose bytes spell a zip's magic, its JSON at byte 8 */
    kind_is("safetensors spelling PK", B("PK\x03\x04\x00\x00\x00\x00{}"), ST_FILE_SAFETENSORS);
    /* a length past any file's size: still safetensors, for its reader to say what is wrong */
    kind_is("safetensors, absurd length", B("\x00\x00\x00\x00\x00\x01\x00\x00{\"a\":1}"),
            ST_FILE_SAFETENSORS);
    kind_is("tokens", B("STTOKENS\x01\x00\x00\x00"), ST_FILE_TOKENS);
    kind_is("llm.c gpt-2", B("\x88\xd8\x34\x01\x01\x00\x00\x00\x10"), ST_FILE_LLMC_TOKENS);   /* 20240520 */
    kind_is("llm.c llama 3", B("\xa1\xd9\x34\x01\x07\x00\x00\x00\x10"), ST_FILE_LLMC_TOKENS); /* 20240801 */
    kind_is("npy", B("\x93NUMPY\x01\x00v\x00{'"), ST_FILE_NPY);
    kind_is("zip",
            B("PK\x03\x04\x14\x00\x08\x08\x08"
              "archive"),
            ST_FILE_ZIP);
    /* the first member's name (at 30, its length at 26) tells numpy.savez's from torch.save's: a .npz
     * given as data was told how to save weights */
    kind_is("npz",
            B("PK\x03\x04\x14\x00\x00\x00\x00\x00\x00\x00!\x00\x00\x00\x00\x00\x00\x00\x00\x00"
              "\x00\x00\x00\x00\x05\x00\x14\x00x.npy"),
            ST_FILE_NPZ);
    zip_is("torch.save's zip", "archive/data.pkl", ST_FILE_ZIP, TORCH_ZIP);
    CHECK(strstr(st_sniff(B("PK\x03\x04\x14\x00\x00\x00\x00\x00\x00\x00!\x00\x00\x00\x00\x00\x00\x00\x00\x00"
                            "\x00\x00\x00\x00\x05\x00\x14\x00x.npy"))
                     .use,
                 "numpy.save(\"x.npy\", numpy.load(\"FILE.npz\")[\"x\"])") != NULL,
          "a .npz's hint");
    kind_is("gzip", B("\x1f\x8b\x08\x00\xed\x0a\xda\x5e\x00"), ST_FILE_GZIP);
    kind_is("pickle",
            B("\x80\x02\x8a\x0al\xfc\x9c"
              "F\xf9"),
            ST_FILE_PICKLE);
    kind_is("gguf", B("GGUF\x03\x00\x00\x00\x01"), ST_FILE_GGUF);
    kind_is("hdf5", B("\x89HDF\r\n\x1a\n\x00"), ST_FILE_HDF5);
    kind_is("idx images", B("\x00\x00\x08\x03\x00\x00\xea\x60\x00"), ST_FILE_IDX);
    kind_is("idx labels", B("\x00\x00\x08\x01\x00\x00\xea\x60"), ST_FILE_IDX);
    kind_is("text", B("== scaletrain\n"), ST_FILE_TEXT);
    kind_is("utf-8 text", B("d\xc3\xa9j\xc3\xa0 vu\t\xe2\x82\xac"), ST_FILE_TEXT);
    kind_is("utf-8 cut by the window", B("abcdefg\xe2\x82"), ST_FILE_TEXT);
    /* a run's metrics.jsonl: text, with report's hint (not tokenize's) */
    kind_is("metrics.jsonl", B("{\"step\":10,\"loss\":2.3}\n"), ST_FILE_TEXT);
    CHECK(strstr(st_sniff((const uint8_t *)"{\"step\":10}\n", 12).use, "scaletrain report") != NULL,
          "a step line");
    CHECK(strstr(st_sniff((const uint8_t *)"{\"eval\":true}\n", 14).use, "scaletrain report") != NULL,
          "an evaluation's line");
    CHECK(strstr(st_sniff((const uint8_t *)"{\"other\":1}\n", 12).use, "tokenize") != NULL,
          "other JSON: text");
    /* the other text files of a run's out_dir, a report's pages and a configuration: not tokenize's
     * hint; a configuration's first key after comments and blank lines, cut by the window too, and
     * only a section's (a corpus's "Data: ..." line, an indented key, "model" alone are text) */
    CHECK(strstr(st_sniff(B("{\"displayTimeUnit\":\"ms\",\"otherData\"")).what, "trace.json") != NULL,
          "a trace");
    CHECK(strstr(st_sniff(B("a run on host vm, pid 12, since 2026-12-07T22:06:49Z\n")).what, "run.lock") !=
              NULL,
          "a run's lock");
    CHECK(strstr(st_sniff(B("<?xml version=\"1.0\"?>\n<svg")).what, "SVG or HTML") != NULL, "an svg");
    CHECK(strstr(st_sniff(B("<!DOCTYPE html>\n<html lang=\"en\">")).what, "SVG or HTML") != NULL, "html");
    kind_is("config", B("model:\n  type: gpt\n"), ST_FILE_CONFIG);
    kind_is("config after comments", B("# a run\n\n  # of mine\r\ntrain:\n  steps: 10\n"), ST_FILE_CONFIG);
    kind_is("config cut in its first key's line", B("# x\nprecision: bf1"), ST_FILE_CONFIG);
    kind_is("config of a key and no value yet", B("\ndist:"), ST_FILE_CONFIG);
    kind_is("a section's word, no colon", B("model airplanes\n"), ST_FILE_TEXT);
    kind_is("an indented section", B("  model:\n"), ST_FILE_TEXT);
    kind_is("another key first", B("Data: 2026\nmodel: x\n"), ST_FILE_TEXT);
    kind_is("comments only", B("# model:\n# train:\n"), ST_FILE_TEXT);
    CHECK(strstr(st_sniff(B("train:\n")).use, "scaletrain train FILE") != NULL, "a config's hint");
    /* (form feeds and vertical tabs: a source file's page breaks) */
    kind_is("text with a form feed", B("int x;\n\f\vint y;\n"), ST_FILE_TEXT);
    kind_is("png", B("\x89PNG\r\n\x1a\n\x00\x00"), ST_FILE_IMAGE);
    kind_is("jpeg", B("\xff\xd8\xff\xe0\x00\x10JFIF"), ST_FILE_IMAGE);
    kind_is("gif", B("GIF89a\x01\x00\x01"), ST_FILE_IMAGE);
    kind_is("webp", B("RIFF\x24\x00\x00\x00WEBPVP8 "), ST_FILE_IMAGE);
    kind_is("pdf", B("%PDF-1.7\n%\xe2\xe3\xcf\xd3\n"), ST_FILE_PDF);
    /* another program's zip (its first member's name is no PyTorch one): an archive to unpack, not
     * torch.save's (it said "PyTorch's torch.save or NumPy's .npz"), a folder's whose first file's name
     * starts as PyTorch's do (corpus/data.txt) too; torch.jit.save's first member (ARCHIVE/data/0) is
     * PyTorch's */
    zip_is("a plain zip", "corpus.txt", ST_FILE_ARCHIVE, "a zip archive");
    zip_is("corpus/data.txt's zip", "corpus/data.txt", ST_FILE_ARCHIVE, "a zip archive");
    zip_is("torch.jit.save's zip", "j/data/0", ST_FILE_ZIP, TORCH_ZIP);
    kind_is("0xff is never utf-8", B("\xff\xff\xff\xff\xff\xff\xff\xff{}"), ST_FILE_UNKNOWN);
    kind_is("a lone continuation byte", B("abc\x82xyzab"), ST_FILE_UNKNOWN);
    kind_is("zeros", B("\x00\x00\x00\x00\x00\x00\x00\x00\x00"), ST_FILE_UNKNOWN);
    kind_is("uint16 tokens", B("\x41\x00\x42\x00\x43\x00\x44\x00\x45"), ST_FILE_UNKNOWN);
    kind_is("nothing", (const uint8_t *)"", 0, ST_FILE_UNKNOWN);
    kind_is("idx of 7 dimensions", B("\x00\x00\x08\x07\x00\x00\x00\x01\x00"), ST_FILE_UNKNOWN);
}

static char dir[64];

static void put(const char *name, const void *buf, size_t n, char *path, size_t size) {
    snprintf(path, size, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(buf, 1, n, f) == n && fclose(f) == 0, "cannot write %s", path);
}

/* Each reader given each other kind: "not <its format> but <kind>; <use>". */
static void test_readers(void) {
    char text[200], zip[200], tok[200], npy[200], st[200], idx[200];
    const char words[] = "the text a user meant to train on, given where a token file belongs\n"
                         "(scaletrain data tokenize makes one of it)\n";
    put("corpus.txt", words, sizeof words - 1, text, sizeof text);
    uint8_t z[512] = "PK\x03\x04\x14\x00\x08\x08\x08";
    put("model.pt", z, sizeof z, zip, sizeof zip);
    const uint32_t toks[40] = {1, 2, 3};
    snprintf(tok, sizeof tok, "%s/t.tokens", dir);
    CHECK_OK(st_tokens_write(tok, toks, 40, 256));
    snprintf(npy, sizeof npy, "%s/x.npy", dir);
    const int64_t dims[2] = {4, 8};
    uint8_t px[32] = {0};
    CHECK_OK(st_npy_write(npy, ST_NPY_U8, 2, dims, px));
    snprintf(st, sizeof st, "%s/w.safetensors", dir);
    const float w[3] = {1, 2, 3};
    const int64_t wd[1] = {3};
    const st_safetensors_tensor t = {.name = "w", .dtype = "F32", .ndim = 1, .shape = wd, .data = w};
    CHECK_OK(st_safetensors_write(st, &t, 1, NULL, 0));
    snprintf(idx, sizeof idx, "%s/x-idx3-ubyte", dir);
    const int64_t id[3] = {2, 4, 4};
    CHECK_OK(st_idx_write(idx, 3, id, px, false));

    st_tokens *tk = NULL;
    CHECK_FAILS(
        st_tokens_open(text, &tk), ST_ERR_FORMAT,
        "corpus.txt: not a token file but what looks like text; `scaletrain data tokenize OUT.tokens FILE`");
    char yaml[200];
    const char run[] = "# my run\nmodel:\n  type: gpt\ndata:\n  train: t.tokens\n";
    put("run.yaml", run, sizeof run - 1, yaml, sizeof yaml);
    CHECK_FAILS(st_tokens_open(yaml, &tk), ST_ERR_FORMAT,
                "run.yaml: not a token file but what looks like a scaletrain configuration (YAML); give it "
                "as the command's CONFIG (scaletrain train FILE)");
    CHECK_FAILS(st_tokens_open(npy, &tk), ST_ERR_FORMAT,
                "x.npy: not a token file but a NumPy .npy array; data.type npy");
    CHECK_FAILS(
        st_tokens_open(st, &tk), ST_ERR_FORMAT,
        "w.safetensors: not a token file but a safetensors file; it holds weights: --init loads them");
    CHECK_FAILS(st_tokens_open(zip, &tk), ST_ERR_FORMAT, "model.pt: not a token file but a zip archive");

    st_idx ix;
    CHECK_FAILS(st_idx_read(text, &ix), ST_ERR_FORMAT,
                "corpus.txt: not an IDX file but what looks like text");
    /* (told by its first bytes past the 8 an IDX file's header needs) */
    CHECK_FAILS(st_idx_read(yaml, &ix), ST_ERR_FORMAT,
                "run.yaml: not an IDX file but what looks like a scaletrain configuration (YAML)");
    CHECK_FAILS(st_idx_read(tok, &ix), ST_ERR_FORMAT,
                "t.tokens: not an IDX file but a scaletrain token file; data.type tokens reads it (with "
                "model.type gpt)");
    CHECK_FAILS(st_idx_read(npy, &ix), ST_ERR_FORMAT, "x.npy: not an IDX file but a NumPy .npy array");

    st_npy nx;
    CHECK_FAILS(st_npy_read(idx, &nx), ST_ERR_FORMAT,
                "x-idx3-ubyte: not an NPY file but an IDX file; data.type idx reads it");
    CHECK_FAILS(st_npy_read(tok, &nx), ST_ERR_FORMAT,
                "t.tokens: not an NPY file but a scaletrain token file");

    st_safetensors *sf = NULL;
    CHECK_FAILS(st_safetensors_open(tok, &sf), ST_ERR_FORMAT,
                "t.tokens: not safetensors but a scaletrain token file; data.type tokens reads it");
    CHECK_FAILS(
        st_safetensors_open(zip, &sf), ST_ERR_FORMAT,
        "model.pt: not safetensors but a zip archive: PyTorch's torch.save (a .pt or .bin checkpoint) or "
        "NumPy's .npz; weights are read from safetensors files: in Python, "
        "safetensors.torch.save_model(model, \"model.safetensors\")");
    CHECK_FAILS(st_safetensors_open(idx, &sf), ST_ERR_FORMAT,
                "x-idx3-ubyte: not safetensors but an IDX file");
    /* NumPy's arrays as weights: how to write them as safetensors (it said what data.type npy reads) */
    CHECK_FAILS(
        st_safetensors_open(npy, &sf), ST_ERR_FORMAT,
        "x.npy: not safetensors but a NumPy .npy array; weights are read from safetensors files, named "
        "tensors (one array is not a model's): in Python, safetensors.numpy.save_file(");
    /* and each reads its own */
    CHECK_OK(st_safetensors_open(st, &sf));
    st_safetensors_close(sf);
}

int main(void) {
    test_kinds();
    snprintf(dir, sizeof dir, "/tmp/st_sniff_XXXXXX");
    if (!mkdtemp(dir)) return st_test_skip("test_sniff", "cannot make a temporary directory in /tmp");
    test_readers();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "note: could not remove %s\n", dir);
    return st_test_finish("test_sniff");
}
