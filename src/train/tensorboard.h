/* TensorBoard event files: rank 0 writes out_dir/events.out.tfevents.<time>.<host>
 * in TensorFlow's format, which TensorBoard reads as it is.
 *
 * A file is a sequence of TFRecords (uint64 length, masked CRC32C of the
 * length, the data, masked CRC32C of the data; all little-endian), each
 * holding one Event protobuf encoded here by hand: wall_time (field 1,
 * double), step (2, int64), file_version (3, "brain.Event:2", the first
 * record), summary (5: repeated Summary.Value {tag 1, simple_value 2}) and
 * session_log (7: {status 1 = START}). Every file begins with the version and
 * a SessionLog START at the first step it will write, so that TensorBoard
 * drops what an earlier run into the same directory (or the part of a
 * resumed run past its checkpoint) logged from that step on. Each record is
 * flushed as it is written. Not here: histograms, images, a reader. */
#ifndef ST_TRAIN_TENSORBOARD_H
#define ST_TRAIN_TENSORBOARD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "scaletrain/status.h"

typedef struct st_tb {
    FILE *f; /* NULL: not open */
    char path[4096];
} st_tb;

typedef struct st_tb_scalar {
    const char *tag; /* e.g. "train/loss" */
    double value;    /* stored as a float (simple_value) */
} st_tb_scalar;

/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of nbytes at data,
 * continuing from crc (0 to start): crc32c("123456789") = 0xE3069283. */
uint32_t st_crc32c(uint32_t crc, const void *data, size_t nbytes);

/* The TFRecord mask: ((crc >> 15) | (crc << 17)) + 0xa282ead8. */
uint32_t st_tb_mask_crc(uint32_t crc);

/* Create a new event file in out_dir (which must exist), named by the
 * current time and host name (".1", ".2", ... appended if that name is
 * taken), and write the file_version and the SessionLog START at first_step. */
st_status st_tb_open(st_tb *w, const char *out_dir, int64_t first_step);

/* One Event at `step` with n scalar values in its summary; flushed. */
st_status st_tb_write_scalars(st_tb *w, int64_t step, const st_tb_scalar *v, int n);

/* Close; accepts a zeroed or already closed writer. */
st_status st_tb_close(st_tb *w); /* (an error: the close failed, its last events maybe lost) */

#endif
