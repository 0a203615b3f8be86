/* Evaluation (st_session_evaluate) with the model on a CUDA device, and the
 * count both paths share. Internal to src/train.
 *
 * On a device the batches go up as training's do (feed.h): assembled on the
 * host into one of two pinned buffers while the GPU runs the batch before,
 * copied on the copy stream, the compute stream waiting for the copy's
 * event; the loss of every batch times its valid targets is summed on the
 * device (src/cuda/loss.cu) and read once at the end; an image model's
 * logits come back asynchronously into the batch's pinned buffer and are
 * counted on the host a batch later, while the next one computes. Nothing
 * waits for the device but that count (the event of the batch two back,
 * whose buffer is about to be filled again) and the final read. The buffers,
 * events and the loss sum are made by the session's first evaluation and
 * kept until it closes (s->eval_dev). */
#ifndef ST_TRAIN_EVAL_DEVICE_H
#define ST_TRAIN_EVAL_DEVICE_H

#include <stdint.h>

#include "session.h"

/* Evaluate s->eval_graph, on s->dev, over the validation samples [lo, hi)
 * (whole batches but the set's last): the same sums as the host's path. */
st_status st_eval_device(st_session *s, int64_t lo, int64_t hi, st_eval_sums *sums);
/* What st_eval_device kept in the session (NULL is fine); before the device goes. */
void st_eval_device_free(st_eval_dev *e);

/* The targets of y[0, rows) that are not ST_IGNORE_INDEX, added to *valid;
 * with logits (rows, classes), those the row's first largest logit names
 * added to *correct. */
void st_eval_count(const int32_t *y, const float *logits, int64_t rows, int64_t classes, int64_t *valid,
                   int64_t *correct);

#endif
