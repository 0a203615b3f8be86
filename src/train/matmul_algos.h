/* The matrix-product algorithms model.matmul_tune kept (src/cuda/matmul.cu,
 * docs/cuda.md "Choosing cuBLASLt's algorithm"), kept in train.out_dir so
 * that a resumed run multiplies with the algorithms the run before it timed
 * and chose, and so repeats its bits: one file a rank,
 * out_dir/matmul-algos-rank<R>.bin, the export's bytes then their CRC-32
 * (4 bytes, little-endian). Nothing in a build without CUDA, or on a rank
 * without a GPU. */
#ifndef ST_TRAIN_MATMUL_ALGOS_H
#define ST_TRAIN_MATMUL_ALGOS_H

#include "core/device.h"

/* Read rank's file of out_dir into dev's plans, if there is one; a file
 * that is damaged, or of another GPU kind or cuBLASLt, is said
 * (note_rank: this rank says notes) and passed over: the products are
 * timed again. An error only for host memory. */
st_status st_matmul_algos_read(st_device *dev, const char *out_dir, int rank, bool note_rank);

/* Whether the device timed plans since the last write (cheap: a flag). */
bool st_matmul_algos_due(const st_device *dev);
/* Write rank's file when the device timed plans since the last write
 * (atomic: the old file or the new). A failure is said once and passed
 * over: only a resumed run's choice of algorithms depends on it. */
void st_matmul_algos_write(st_device *dev, const char *out_dir, int rank);

#endif
