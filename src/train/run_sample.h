/* log.sample_every: a text sample of the model as it trains, drawn from the
 * run's weights on its GPU (a sampler made for the sample alone) or on the
 * host, printed by rank 0. A look at the model, not part of training: not
 * `scaletrain sample` (tools/sample.c), which draws from saved weights. */
#ifndef ST_TRAIN_RUN_SAMPLE_H
#define ST_TRAIN_RUN_SAMPLE_H

#include <stdint.h>

#include "progress.h"
#include "session.h"

/* Every rank, after `step` steps (run_sample.c says what fails how): a
 * sample that cannot be drawn is a warning; a GPU lost by then is rank 0's
 * own error, *fault; the return is a collective's failure. */
st_status st_run_sample(st_session *ses, const st_run_opts *opts, st_progress *prog, int64_t step,
                        st_status *fault);

#endif
