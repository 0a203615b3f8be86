#include "core/sniff.h"

#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/atomic_file.h"

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Whether the first line of h that is neither blank nor a comment starts
 * with one of the configuration's sections as a key ("train:", "model:"):
 * a scaletrain configuration, not a corpus. A window that ends within that
 * line still tells (the key is at its start). */
static bool looks_like_config(const uint8_t *h, size_t n) {
    static const char *const sections[] = {"model", "data", "train", "optim", "precision", "dist", "log"};
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        while (j < n && (h[j] == ' ' || h[j] == '\t' || h[j] == '\r'))
            j++;
        if (j == n) return false;
        if (h[j] == '\n' || h[j] == '#') { /* blank or a comment: the next line */
            while (j < n && h[j] != '\n')
                j++;
            i = j + 1;
            continue;
        }
        if (j != i) return false; /* (an indented first key: not a section) */
        for (size_t s = 0; s < sizeof sections / sizeof sections[0]; s++) {
            const size_t m = strlen(sections[s]);
            if (n - i > m && !memcmp(h + i, sections[s], m) && h[i + m] == ':') return true;
        }
        return false;
    }
    return false;
}

static bool starts_with(const uint8_t *h, size_t n, const char *s) {
    const size_t m = strlen(s);
    return n >= m && !memcmp(h, s, m);
}

/* Printable ASCII, tabs and line ends, and well-formed UTF-8 (a sequence cut
 * off by the window's end counts): what a text file's first bytes are. */
static bool looks_like_text(const uint8_t *h, size_t n) {
    if (n == 0) return false;
    for (size_t i = 0; i < n;) {
        const uint8_t c = h[i];
        /* (form feeds and vertical tabs too: source files' page breaks) */
        if ((c >= 0x20 && c < 0x7f) || c == '\n' || c == '\r' || c == '\t' || c == '\f' || c == '\v') {
            i++;
            continue;
        }
        const size_t len = c >= 0xc2 && c <= 0xdf   ? 2
                           : c >= 0xe0 && c <= 0xef ? 3
                           : c >= 0xf0 && c <= 0xf4 ? 4
                                                    : 0;
        if (len == 0) return false;
        for (size_t j = 1; j < len && i + j < n; j++)
            if ((h[i + j] & 0xc0) != 0x80) return false;
        i += len;
    }
    return true;
}

#define WEIGHTS_USE                                                                                          \
    "weights are read from safetensors files: in Python, safetensors.torch.save_model(model, "               \
    "\"model.safetensors\") writes one (tied weights once; docs/formats.md)"

st_file_kind st_sniff(const uint8_t *h, size_t n) {
    const st_file_kind none = {ST_FILE_UNKNOWN, "", ""};
    /* safetensors first: its first 8 bytes are a length (any bytes; below
     * 2^48 however absurd, for its reader to say so) and its JSON header
     * starts at byte 8 with '{' */
    if (n >= 9 && h[8] == '{' && h[6] == 0 && h[7] == 0)
        return (st_file_kind){ST_FILE_SAFETENSORS, "a safetensors file",
                              "it holds weights: --init loads them"};
    if (n >= 8 && !memcmp(h, "STTOKENS", 8))
        return (st_file_kind){ST_FILE_TOKENS, "a scaletrain token file",
                              "data.type tokens reads it (with model.type gpt)"};
    if (n >= 4 && (le32(h) == 20240520 || le32(h) == 20240801))
        return (st_file_kind){ST_FILE_LLMC_TOKENS, "an llm.c token file",
                              "data.type tokens reads it (with model.type gpt)"};
    if (n >= 6 && !memcmp(h, "\x93NUMPY", 6))
        return (st_file_kind){ST_FILE_NPY, "a NumPy .npy array",
                              "data.type npy reads image and label pairs of them"};
    if (n >= 4 && !memcmp(h, "PK\x03\x04", 4)) {
        /* the first member's name: at 30, its length at 26 (numpy.savez: "x.npy"; torch.save:
         * "archive/data.pkl") */
        const size_t len = n >= 28 ? (size_t)h[26] | (size_t)h[27] << 8 : 0;
        const bool named = len >= 4 && n >= 30 + len;
        if (named && !memcmp(h + 30 + len - 4, ".npy", 4))
            return (st_file_kind){ST_FILE_NPZ, "NumPy's .npz (a zip of .npy arrays)",
                                  "data.type npy reads .npy files: save each array on its own (in Python, "
                                  "numpy.save(\"x.npy\", numpy.load(\"FILE.npz\")[\"x\"]))"};
        /* PyTorch's members are ARCHIVE/data.pkl (torch.save's first), ARCHIVE/data/N (torch.jit.save's
         * first), ARCHIVE/code/..., ARCHIVE/constants.pkl, ARCHIVE/version, ARCHIVE/byteorder,
         * ARCHIVE/.data/...: another first name (corpus/data.txt) is another program's zip. A name that
         * ends in '/' is a folder's prefix; the others are whole. */
        const char *name = (const char *)h + 30, *slash = named ? memchr(name, '/', len) : NULL;
        static const char *const torch_members[] = {"data.pkl", "data/",     "code/", "constants.pkl",
                                                    "version",  "byteorder", ".data/"};
        bool torch = false;
        for (size_t i = 0; slash && i < sizeof torch_members / sizeof torch_members[0]; i++) {
            const size_t m = strlen(torch_members[i]), rest = len - (size_t)(slash + 1 - name);
            const bool prefix = torch_members[i][m - 1] == '/';
            torch = torch || ((prefix ? rest >= m : rest == m) && !memcmp(slash + 1, torch_members[i], m));
        }
        if (named)
            return torch
                       ? (st_file_kind){ST_FILE_ZIP,
                                        "a zip archive: PyTorch's torch.save (a .pt or .bin checkpoint)",
                                        WEIGHTS_USE}
                       : (st_file_kind){ST_FILE_ARCHIVE, "a zip archive", "unpack it first (unzip FILE.zip)"};
        return (st_file_kind){ST_FILE_ZIP,
                              "a zip archive: PyTorch's torch.save (a .pt or .bin checkpoint) or "
                              "NumPy's .npz",
                              WEIGHTS_USE};
    }
    if (n >= 2 && h[0] == 0x1f && h[1] == 0x8b)
        return (st_file_kind){ST_FILE_GZIP, "a gzip file",
                              "data.type idx reads gzipped IDX files (Fashion-MNIST's) as they are"};
    if (n >= 2 && h[0] == 0x80 && h[1] >= 2 && h[1] <= 5)
        return (st_file_kind){ST_FILE_PICKLE, "a Python pickle: an older PyTorch torch.save", WEIGHTS_USE};
    if (n >= 4 && !memcmp(h, "GGUF", 4))
        return (st_file_kind){ST_FILE_GGUF, "a GGUF file (llama.cpp's format)", WEIGHTS_USE};
    if (n >= 8 && !memcmp(h, "\x89HDF\r\n\x1a\n", 8))
        return (st_file_kind){ST_FILE_HDF5, "an HDF5 file (Keras' .h5)", WEIGHTS_USE};
    static const uint8_t XZ[6] = {0xfd, '7', 'z', 'X', 'Z', 0}, ZSTD[4] = {0x28, 0xb5, 0x2f, 0xfd},
                         ELF[4] = {0x7f, 'E', 'L', 'F'};
    if ((n >= 6 && !memcmp(h, XZ, 6)) || (n >= 4 && !memcmp(h, ZSTD, 4)) ||
        (n >= 4 && !memcmp(h, "BZh", 3) && h[3] >= '1' && h[3] <= '9') ||
        (n >= 262 && !memcmp(h + 257, "ustar", 5)))
        return (st_file_kind){ST_FILE_ARCHIVE, "a compressed file or archive (xz, bzip2, zstd or tar)",
                              "unpack it first"};
    if (n >= 4 && !memcmp(h, ELF, 4))
        return (st_file_kind){ST_FILE_ELF, "an ELF file (a program or shared library)",
                              "give a data, weights or checkpoint file"};
    if ((n >= 8 && !memcmp(h, "\x89PNG\r\n\x1a\n", 8)) || (n >= 3 && !memcmp(h, "\xff\xd8\xff", 3)) ||
        (n >= 6 && (!memcmp(h, "GIF87a", 6) || !memcmp(h, "GIF89a", 6))) ||
        (n >= 12 && !memcmp(h, "RIFF", 4) && !memcmp(h + 8, "WEBP", 4)))
        return (st_file_kind){ST_FILE_IMAGE, "an image (PNG, JPEG, GIF or WebP)",
                              "images are read from arrays of them: IDX or NPY files (data.type idx or npy); "
                              "convert them to one first"};
    if (n >= 5 && !memcmp(h, "%PDF-", 5))
        return (st_file_kind){ST_FILE_PDF, "a PDF document",
                              "extract its text first (pdftotext FILE.pdf FILE.txt)"};
    if (n >= 4 && h[0] == 0 && h[1] == 0 && h[2] == 0x08 && h[3] >= 1 && h[3] <= 4)
        return (st_file_kind){ST_FILE_IDX, "an IDX file", "data.type idx reads it"};
    if (!looks_like_text(h, n)) return none;
    /* The text files a run writes into its out_dir, and a configuration:
     * the hint of text (tokenize it) is no use for them */
    if (starts_with(h, n, "{\"step\"") || starts_with(h, n, "{\"eval\"") ||
        starts_with(h, n, "{\"checkpoint\""))
        return (st_file_kind){ST_FILE_TEXT, "what looks like a run's metrics.jsonl (JSON lines)",
                              "`scaletrain report RUN_DIR` charts a run's metrics"};
    if (starts_with(h, n, "{\"displayTimeUnit\"") || starts_with(h, n, "{\"traceEvents\""))
        return (st_file_kind){ST_FILE_TEXT,
                              "what looks like a run's trace.json (a Chrome trace, --profile's)",
                              "open it in Perfetto (ui.perfetto.dev) or chrome://tracing (docs/formats.md)"};
    if (starts_with(h, n, "a run on host "))
        return (st_file_kind){ST_FILE_TEXT, "what looks like a run's run.lock (who holds its out_dir)",
                              "`scaletrain data inspect OUT_DIR` shows a run's weights and checkpoints"};
    if (starts_with(h, n, "<?xml") || starts_with(h, n, "<svg") || starts_with(h, n, "<!DOCTYPE html") ||
        starts_with(h, n, "<!doctype html") || starts_with(h, n, "<html"))
        return (st_file_kind){ST_FILE_TEXT,
                              "what looks like an SVG or HTML page (scaletrain report writes them)",
                              "open it in a browser; to train a gpt on its text, `scaletrain data tokenize "
                              "OUT.tokens FILE` makes a token file of it"};
    if (looks_like_config(h, n))
        return (st_file_kind){ST_FILE_CONFIG, "what looks like a scaletrain configuration (YAML)",
                              "give it as the command's CONFIG (scaletrain train FILE); its data.train and "
                              "data.val name the data files (docs/config.md)"};
    return (st_file_kind){ST_FILE_TEXT, "what looks like text",
                          "`scaletrain data tokenize OUT.tokens FILE` makes a token file of it (data.type "
                          "tokens, model.type gpt)"};
}

const char *st_sniff_weights_use(st_file_kind k) {
    if (k.format == ST_FILE_NPZ)
        return "weights are read from safetensors files, named tensors: in Python, "
               "safetensors.numpy.save_file(dict(numpy.load(\"FILE.npz\")), \"model.safetensors\") writes "
               "one "
               "with the arrays' names (docs/formats.md)";
    if (k.format == ST_FILE_NPY)
        return "weights are read from safetensors files, named tensors (one array is not a model's): in "
               "Python, safetensors.numpy.save_file({\"name\": array, ...}, \"model.safetensors\") writes "
               "one "
               "(docs/formats.md)";
    return k.use;
}

bool st_sniff_regular(const char *path, st_file_kind *kind) {
    struct stat sb;
    const int fd = st_open_read(path, &sb);
    if (fd < 0) return false;
    uint8_t head[ST_SNIFF_BYTES];
    const ssize_t got = S_ISREG(sb.st_mode) ? read(fd, head, sizeof head) : -1;
    close(fd);
    if (got < 0) return false;
    *kind = st_sniff(head, (size_t)got);
    return true;
}
