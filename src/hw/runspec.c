/* The planner's view of a run from its configuration (see runspec.h). */
#include "runspec.h"

#include <string.h>

#include "data/dataset.h"
#include "data/tokens.h"

/* The bytes of a token file or of its shards, as mapped, and (count not
 * NULL) its tokens; 0 when it cannot be opened (planning without the data). */
static int64_t tokens_bytes(const char *spec, int64_t *count) {
    st_tokens *t;
    if (count) *count = 0;
    if (!spec[0] || st_tokens_open(spec, &t) != ST_OK) {
        st_clear_error();
        return 0;
    }
    const int64_t b = st_tokens_bytes(t);
    if (count) *count = st_tokens_count(t);
    st_tokens_close(t);
    return b;
}

st_status st_runspec_open(st_config *cfg, st_plan_input *in) {
    memset(in, 0, sizeof *in);
    in->cfg = cfg;
    st_model_input mi;
    memset(&mi, 0, sizeof mi);
    const bool split = cfg->data.val_split > 0; /* (held out of data.train: no other file to read) */
    in->has_eval = cfg->data.val[0] != '\0' || split;
    if (strcmp(cfg->model.type, "gpt") == 0) {
        if (cfg->model.vocab_size == ST_AUTO && !cfg->data.train[0]) /* (an evaluation's config may have none) */
            return st_fail(ST_ERR_CONFIG,
                           "model.vocab_size is auto, so the planner reads it from data.train, and data.train is "
                           "empty; set model.vocab_size, or data.train to the training token file");
        if (cfg->model.vocab_size == ST_AUTO) {
            st_tokens *t;
            st_status s = st_tokens_open(cfg->data.train, &t);
            if (s != ST_OK)
                return st_fail_context(s, "model.vocab_size is auto, so the planner reads it from data.train; set "
                                          "model.vocab_size to plan without the data: ");
            cfg->model.vocab_size = (int64_t)st_tokens_vocab_size(t);
            st_tokens_close(t);
            st_config_mark_auto(cfg, "model.vocab_size", "the vocabulary of data.train");
        }
        mi.vocab_size = cfg->model.vocab_size;
        mi.seq_len = cfg->model.block_size;
        in->seq_len = mi.seq_len;
        in->sample_in_bytes = in->sample_out_bytes = 4 * mi.seq_len;
        /* Token files are mapped read-only and shared (src/data/tokens.c): page
         * cache, which the node's ranks share and the kernel takes back under
         * pressure, not memory a rank holds; a starting run counts none either
         * (session.c), so that plan and check agree with it. */
        in->data_bytes = 0;
        int64_t train_tokens, val_tokens = 0;
        in->mapped_bytes = tokens_bytes(cfg->data.train, &train_tokens) +
                           (in->has_eval && !split ? tokens_bytes(cfg->data.val, &val_tokens) : 0);
        /* the validation samples, a bound on the evaluation's batch (as a run caps it: session.c) */
        if (split)
            in->eval_samples = st_dataset_split_count(st_dataset_token_windows(train_tokens, mi.seq_len),
                                                      cfg->data.val_split);
        else if (in->has_eval)
            in->eval_samples = st_dataset_token_windows(val_tokens, mi.seq_len);
    } else {
        st_dataset d;
        ST_TRY(st_dataset_open_pair(cfg->data.type, cfg->data.train, cfg->data.train_labels,
                                    cfg->model.num_classes, "data.train", &d));
        mi.height = d.h;
        mi.width = d.w;
        mi.channels = d.c;
        const int64_t n = d.n, px = d.h * d.w * d.c, el = d.values ? 4 : 1; /* bytes an input value takes */
        int64_t classes = d.num_classes;
        const char *classes_key = "data.train_labels", *classes_file = cfg->data.train_labels;
        st_dataset_free(&d);
        in->sample_in_bytes = 4 * px;
        in->sample_out_bytes = 4;
        in->data_bytes = n * (el * px + 4); /* the inputs as held (bytes or floats) and int32 labels */
        /* the validation samples, a bound on the evaluation's batch (as a run caps it: session.c) */
        if (split) in->eval_samples = st_dataset_split_count(n, cfg->data.val_split);
        if (in->has_eval && !split) {       /* (auto counts its labels too, as a run does) */
            ST_TRY(st_dataset_open_pair(cfg->data.type, cfg->data.val, cfg->data.val_labels,
                                        cfg->model.num_classes, "data.val", &d));
            in->data_bytes += d.n * ((d.values ? 4 : 1) * px + 4);
            in->eval_samples = d.n;
            if (d.num_classes > classes)
                classes = d.num_classes, classes_key = "data.val_labels", classes_file = cfg->data.val_labels;
            st_dataset_free(&d);
        }
        if (cfg->model.num_classes == ST_AUTO && classes < 2) /* (as a run refuses it: session.c) */
            return st_fail(ST_ERR_CONFIG,
                           "%s (%s) holds only label 0: a classifier needs at least 2 classes (check the "
                           "label file, or set model.num_classes)",
                           classes_key, classes_file);
        if (cfg->model.num_classes == ST_AUTO) {
            cfg->model.num_classes = classes;
            st_config_mark_auto(cfg, "model.num_classes", "the labels in the data");
        }
        mi.num_classes = cfg->model.num_classes;
    }
    return st_model_create_layout(cfg, &mi, &in->model);
}

void st_runspec_close(st_plan_input *in) {
    st_model_free(in->model);
    in->model = NULL;
}
