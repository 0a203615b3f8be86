/* The run configuration: one YAML file with the sections model, data, train,
 * optim, precision, dist and log, plus --set overrides.
 *
 * Every key has a documented default (docs/config.md). Numeric keys marked
 * "auto" hold ST_AUTO (or a negative value for floats) until the planner fills
 * them; the effective configuration, with where each value came from, is
 * printed at start. Unknown keys and bad values are errors that name the file,
 * the line, the key and the accepted values. */
#ifndef SCALETRAIN_CONFIG_H
#define SCALETRAIN_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "scaletrain/status.h"

#define ST_AUTO (-1)        /* integer keys set to `auto` */
#define ST_CFG_STR 256      /* bytes of a string value */
#define ST_CFG_LIST 16      /* entries of a list value */
#define ST_CFG_KEYS_MAX 96  /* keys in the schema (src/core/config_schema.c checks it) */
#define ST_CFG_NOTE 96      /* bytes of a source note */
#define ST_NUM_CLASSES_MAX (1 << 24) /* model.num_classes' largest, auto's (the largest label + 1) too */

/* Where a value came from, for the printed effective configuration. */
typedef enum st_cfg_source {
    ST_SRC_DEFAULT = 0,
    ST_SRC_FILE,
    ST_SRC_SET,  /* --set on the command line */
    ST_SRC_AUTO, /* chosen by the planner */
} st_cfg_source;

typedef struct st_int_list {
    int n;
    int64_t v[ST_CFG_LIST];
} st_int_list;

typedef struct st_config {
    struct {
        char type[ST_CFG_STR];   /* mlp | cnn | gpt                       default cnn */
        char preset[ST_CFG_STR]; /* "" | gpt2-124m ... (config_schema.c) default "" */
        st_int_list hidden;      /* mlp hidden sizes                      default [1024, 1024] */
        st_int_list channels;    /* cnn conv channels per block           default [32, 64, 128] */
        st_int_list pool;        /* cnn: 1 = max-pool 2x2 after block i   default [0, 1, 1] */
        int64_t kernel;          /* cnn conv kernel                       default 3 */
        bool batchnorm;          /* cnn: batch-norm after each conv       default true */
        double dropout;          /* dropout probability                   default 0.0 */
        int64_t n_layer;         /* gpt                                   default 4 */
        int64_t n_head;          /*                                       default 4 */
        int64_t n_embd;          /*                                       default 256 */
        int64_t vocab_size;      /* auto: from the data                   default auto */
        int64_t block_size;      /*                                       default 256 */
        int64_t num_classes;     /* mlp/cnn; auto: from the data          default auto */
        char fused_head[ST_CFG_STR]; /* gpt: auto | on | off               default auto */
        char fused_gelu[ST_CFG_STR]; /* gpt on a GPU: auto | on | off      default auto */
        char fused_residual[ST_CFG_STR];   /* on a GPU: auto | on | off      default auto */
        char fused_bias_grad[ST_CFG_STR];  /* on a GPU: auto | on | off      default auto */
        char attention_kernel[ST_CFG_STR]; /* gpt on a GPU: auto | flash | cudnn  default auto */
        char kernel_variants[ST_CFG_STR];  /* on a GPU: auto | none | all        default auto */
        char matmul_tune[ST_CFG_STR];      /* on a GPU: auto | on | off          default auto */
    } model;
    struct {
        char type[ST_CFG_STR];         /* idx | npy | tokens              default idx */
        char train[ST_CFG_STR];        /* images (idx) or token file      default Fashion-MNIST train images */
        char train_labels[ST_CFG_STR]; /* idx labels                      default Fashion-MNIST train labels */
        char val[ST_CFG_STR];          /* "" = no evaluation              default Fashion-MNIST test images */
        char val_labels[ST_CFG_STR];   /*                                 default Fashion-MNIST test labels */
        double val_split;              /* held-out fraction of train; 0 = none  default 0 */
        int64_t val_split_seed;        /* which subset val_split holds out      default 0 */
        bool shuffle;                  /*                                 default true */
        bool drop_last;                /* drop the last partial batch     default true */
        int64_t num_workers;           /* loader threads; auto = 1        default auto */
        double timeout_s;              /* loader wait that ends the run   default 300 */
        int64_t augment_crop_pad;      /* random crop padding; 0 = off    default 0 */
        bool augment_flip;             /* random horizontal flip          default false */
    } data;
    struct {
        int64_t steps;            /* optimizer steps; auto = epochs over the data  default auto */
        double epochs;            /* used when steps is auto                        default 1 */
        int64_t batch_size;       /* global batch, samples per optimizer step       default 128 */
        int64_t micro_batch_size; /* auto = batch_size / ranks                      default auto */
        int64_t seed;             /*                                                default 1 */
        int64_t eval_every;       /* steps; 0 = only at the end                     default 0 */
        int64_t eval_batch_size;  /* auto = micro_batch_size                        default auto */
        int64_t eval_steps;       /* batches per evaluation; 0 = the whole set      default 0 */
        int64_t threads;          /* auto = the cores available                     default auto */
        char out_dir[ST_CFG_STR]; /*                                                default runs/default */
        int64_t checkpoint_every; /* steps; 0 = only at the end                     default 0 */
        double checkpoint_every_s; /* also when this many seconds passed; 0 = not  default 1800 */
        int64_t keep_checkpoints; /* newest checkpoints kept; 0 = all               default 3 */
        int64_t checkpoint_timeout_s; /* ranks' wait for a checkpoint's writes; 0 = auto  default 0 */
        bool checkpoint_async;        /* periodic checkpoints written while training goes on  default false */
        char activation_checkpointing[ST_CFG_STR]; /* off | selective | blocks | auto  default auto */
        char device[ST_CFG_STR];  /* auto | cpu | cuda: where the model trains     default auto */
        int64_t device_timeout_s; /* a wait for the GPU that ends the run; 0 = none default 600 */
    } train;
    struct {
        char type[ST_CFG_STR];     /* adamw | sgd                         default adamw */
        double lr;                 /*                                     default 1e-3 */
        char lr_scaling[ST_CFG_STR]; /* none | linear | sqrt: lr x ranks   default none */
        double lr_run; /* not a key: the rate this run trains at, optim.lr with lr_scaling applied over its
                          ranks (set when the ranks are known; 0: optim.lr) */
        double weight_decay;       /* decoupled (AdamW), or L2 (SGD)      default 0.0 */
        double beta1, beta2, eps;  /* AdamW                               default 0.9, 0.999, 1e-8 */
        double momentum;           /* SGD                                 default 0.9 */
        bool nesterov;             /* SGD                                 default false */
        bool offload;              /* GPU: state and update on the host   default false */
        char schedule[ST_CFG_STR]; /* constant | cosine | linear          default cosine */
        int64_t warmup_steps;      /*                                     default 0 */
        double min_lr;             /* fraction of lr at the end of decay  default 0.0 */
        double grad_clip;          /* global-norm clip; 0 = off           default 0.0 */
        double loss_scale;         /* fp16: initial dynamic loss scale    default 65536 */
        int64_t loss_scale_window; /* fp16: clean steps that double it    default 2000 */
    } optim;
    char precision[ST_CFG_STR]; /* auto | fp32 | bf16 | fp16          default auto */
    struct {
        char strategy[ST_CFG_STR]; /* auto | ddp | zero1 | zero2      default auto */
        double bucket_cap_mb;      /*                                  default 25 */
        char grad_dtype[ST_CFG_STR]; /* fp32 | bf16 | fp16 (all-reduce)  default fp32 */
        char comm[ST_CFG_STR];     /* auto | nccl (gradients' communicator) default auto */
        bool deterministic;        /*                                  default false */
        bool sync_batchnorm;       /* batch-norm statistics over all ranks default false */
        int64_t timeout_s;         /*                                  default 600 */
        bool shm_allreduce;        /* one node: all-reduce through shared memory default true */
    } dist;
    struct {
        int64_t every;             /* steps between log lines          default 10 */
        char progress[ST_CFG_STR]; /* auto | on | off (auto: on a terminal) default auto */
        bool tensorboard;          /*                                  default false */
        double peak_gflops;        /* per rank, for mfu; < 0 = auto (measured) default auto */
        int64_t gpu_interval;      /* steps between GPU samples; 0 = none default 10 */
        int64_t sample_every;      /* steps between text samples (gpt); 0 = none default 0 */
        int64_t sample_tokens;     /* tokens a text sample draws      default 64 */
        bool trace;                /* write out_dir/trace.json         default false */
        st_int_list trace_steps;   /* [first, last] traced steps       default [2, 6] */
    } log;

    char
        path[4096]; /* the file it was read from, "" for defaults only (a path as long as the system takes) */

    /* Private to src/core/config*.c; read them with st_config_source. By schema
     * row: where each value came from (an st_cfg_source), and a note: the file
     * and line ("run.yaml:7"), the planner's reason, or the preset that set it. */
    uint8_t src_[ST_CFG_KEYS_MAX];
    char note_[ST_CFG_KEYS_MAX][ST_CFG_NOTE];
} st_config;

/* Fill every key with its default. */
void st_config_defaults(st_config *c);

/* Read a YAML file over the current values. Errors name the file and line. */
st_status st_config_load(st_config *c, const char *path);

/* Apply one override "section.key=value" (value parsed as YAML scalar or flow
 * list, e.g. model.hidden=[512,256]). Errors name the --set argument. */
st_status st_config_set(st_config *c, const char *assignment);

/* Cross-key checks after loading and overrides (e.g. n_embd divisible by n_head). */
st_status st_config_validate(const st_config *c);
/* The data paths against data.type (a non-idx type with a path left at its
 * Fashion-MNIST default): for the commands that read the data. eval_only:
 * an evaluation, which reads no training tokens (data.val given, no
 * data.val_split): data.train is not asked for. */
st_status st_config_validate_data(const st_config *c, bool eval_only);
/* An evaluation's data is there to ask for: data.val, or data.val_split's
 * share of data.train (before st_config_validate, whose training rules
 * would name train.eval_every). */
st_status st_config_validate_eval(const st_config *c);

/* Can train.batch_size be split over `world` ranks: a multiple of world
 * and, where train.micro_batch_size is given (not auto), of
 * micro_batch_size x world. The error says what to set. (A run checks it
 * at start; `scaletrain slurm` before the job queues.) */
st_status st_config_validate_world(const st_config *c, int world);

/* "model.n_embd (250, run.yaml:4)": the key, its value and where the value
 * came from, for error messages (which start with "<c->path>: " when a file
 * was read). Returns buf. */
const char *st_config_describe(const st_config *c, const char *key, char *buf, size_t n);

/* Record that the planner chose `key`'s value (for st_config_print). */
void st_config_mark_auto(st_config *c, const char *key, const char *why);
/* Add what a value given in a file or by --set led to ("the run's lr is
 * 0.002 = optim.lr x 2 ranks") to where it came from, for st_config_print
 * ("--set; the run's lr is ..."); a value of other origin is left as it is. */
void st_config_annotate(st_config *c, const char *key, const char *what);

/* Print the effective configuration as YAML, each value annotated with where it
 * came from (default, file, --set, auto: why). */
void st_config_print(const st_config *c, FILE *out);

/* Keys given (in the file or by --set), at another value than their
 * default, that this configuration does not read: one warning line each
 * into buf ("" when none), naming the key that makes it unread (an mlp's
 * key in a cnn run, sgd's in an adamw one, fp16's in another precision,
 * optim.min_lr with optim.schedule constant; with world 1, the keys only
 * several ranks read, in one line). A configuration written out whole (a
 * run's config.yaml: its other keys at their defaults) says nothing.
 * Called once precision is resolved. */
void st_config_unused(const st_config *c, int world, char *buf, size_t n);

/* The configuration as one JSON object (for state files and --json). Caller frees. */
char *st_config_to_json(const st_config *c);

/* Fill the keys that model.preset sets (model.type and the gpt shape) wherever
 * they still hold their default, and restore the defaults a previous preset had
 * filled. st_config_load and st_config_set call it; call it yourself only after
 * writing model.preset directly. */
st_status st_config_apply_preset(st_config *c);

/* Where `key`'s value came from (ST_SRC_DEFAULT for a key that does not exist). */
st_cfg_source st_config_source(const st_config *c, const char *key);

/* The reference part of docs/config.md (one table per section, and the presets),
 * generated from the schema; NULL when out of memory. Caller frees. */
char *st_config_schema_markdown(void);

#endif
