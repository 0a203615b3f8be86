/* CRC32 of large inputs on every OpenMP thread: the checksum of checkpoint
 * files (state.json's "crc32") and of a dataset's fingerprint. zlib's
 * crc32 runs at 1 to 2 GB/s on one core, so a checkpoint of a few GB took
 * seconds to verify at every resume. The input is cut into equal pieces,
 * each piece's CRC32 made on a thread of its own and the pieces' joined in
 * order with zlib's crc32_combine: the result is zlib's crc32 of the whole,
 * bit for bit, whatever the thread count. */
#ifndef ST_CORE_CRC_H
#define ST_CORE_CRC_H

#include <stddef.h>
#include <stdint.h>

#include "scaletrain/status.h"

/* zlib's crc32(crc, p, n), for any n (zlib's takes a 32-bit length). */
uint32_t st_crc32(uint32_t crc, const void *p, size_t n);

/* The CRC32 and size of every byte of the file at path, read to its end.
 * ST_ERR_IO naming the file when it cannot be opened or read;
 * ST_ERR_NOMEM when a thread's read buffer cannot be had. */
st_status st_crc32_file(const char *path, uint32_t *crc, int64_t *nbytes);

/* Piece i of k over n bytes: [*lo, *hi), the first n % k pieces a byte
 * longer (how an input is cut over threads here, and a file over ranks by
 * ckpt_read.c's shared verification). */
void st_crc32_piece(int64_t n, int k, int i, int64_t *lo, int64_t *hi);

/* The CRC32 of the file's bytes [lo, hi), and how many there were (fewer
 * when the file ends first): one rank's part of a file whose parts' CRC32s
 * are joined with crc32_combine (ckpt_read.c's shared verification). */
st_status st_crc32_file_part(const char *path, int64_t lo, int64_t hi, uint32_t *crc, int64_t *got);

#endif
