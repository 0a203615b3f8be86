/* What the planner needs to know about a run before it starts: the model's
 * layout (no memory allocated) and the data's shape, read from the run's
 * configuration and the headers of its data files. `scaletrain plan` uses
 * it; a starting run builds the same from the datasets it has open
 * (src/train/session.c).
 *
 * Token data: the vocabulary comes from model.vocab_size, or from the token
 * file's header when it is auto (the file is mapped, not read). Images: the
 * shape and classes come from the image files (opened). */
#ifndef ST_HW_RUNSPEC_H
#define ST_HW_RUNSPEC_H

#include "planner.h"

/* Fill in (everything but efficiency and cores_per_rank) and cfg's
 * vocab_size / num_classes when auto; in->model is a layout model to free
 * with st_runspec_close. Errors name the data file or key. */
st_status st_runspec_open(st_config *cfg, st_plan_input *in);
void st_runspec_close(st_plan_input *in);

#endif
