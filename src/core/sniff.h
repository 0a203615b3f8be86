/* What a file is, by its first bytes: the formats scaletrain reads and those
 * its users' files often come in instead (PyTorch's torch.save, text where a
 * token file belongs, an IDX file given as tokens). A reader that finds the
 * wrong magic names what the file is and what reads it, rather than only the
 * bytes it expected. */
#ifndef ST_CORE_SNIFF_H
#define ST_CORE_SNIFF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum st_file_format {
    ST_FILE_UNKNOWN = 0,
    ST_FILE_SAFETENSORS,
    ST_FILE_TOKENS, /* scaletrain's token file */
    ST_FILE_LLMC_TOKENS,
    ST_FILE_IDX,
    ST_FILE_NPY,
    ST_FILE_GZIP,
    ST_FILE_ZIP, /* PyTorch's torch.save, or a zip whose first member's name is not seen */
    ST_FILE_NPZ, /* NumPy's .npz: a zip whose first member is a .npy */
    ST_FILE_PICKLE,
    ST_FILE_GGUF,
    ST_FILE_HDF5,
    ST_FILE_ELF,     /* a program or shared library */
    ST_FILE_ARCHIVE, /* xz, bzip2, zstd, tar (tar: at 257, so with n >= 262), another program's zip */
    ST_FILE_IMAGE,   /* PNG, JPEG, GIF, WebP */
    ST_FILE_PDF,
    ST_FILE_TEXT,   /* text: a corpus; also a run's metrics.jsonl, trace.json, run.lock, report */
    ST_FILE_CONFIG, /* a scaletrain configuration (YAML): text whose first key is a section's */
} st_file_format;

typedef struct st_file_kind {
    st_file_format format;
    const char *what; /* "a zip archive: PyTorch's torch.save ..." */
    const char *use;  /* how scaletrain takes such a file, or what to make of it */
} st_file_kind;

/* The kind of a file whose first n bytes are head (n >= 9 tells every kind
 * apart; fewer tell some; ST_SNIFF_BYTES tell a zip's first member's name,
 * NumPy's .npz from PyTorch's torch.save). ST_FILE_UNKNOWN with empty
 * strings when none. */
#define ST_SNIFF_BYTES 64
st_file_kind st_sniff(const uint8_t *head, size_t n);
/* The kind of the file at path by its first ST_SNIFF_BYTES, where it is a
 * regular file that opens (a FIFO is not waited on, nor a pipe's bytes
 * taken from its reader): true, *kind set; false otherwise. */
bool st_sniff_regular(const char *path, st_file_kind *kind);
/* What to make of a file of kind k given where weights go (--init): its
 * `use` where that is about weights already, else how to write weights as
 * safetensors (NumPy's arrays: from Python, with their names). */
const char *st_sniff_weights_use(st_file_kind k);

#endif
