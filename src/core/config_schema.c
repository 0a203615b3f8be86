/* The configuration schema (one row per key) and the conversion of a YAML value
 * into a field of st_config: type, range and accepted-value checks with errors
 * that say what was expected. It knows nothing about files, --set or where a
 * value came from; that is config.c. */
#include "core/config_schema.h"
#include "core/text.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define FIELD(f) offsetof(st_config, f), sizeof(((st_config *)0)->f)
#define VALUES(...) ((const char *const[]){__VA_ARGS__, NULL})
#define NOMAX INFINITY
/* A batch (samples) no machine holds, and below what a layout's int64 byte counts and the
 * planner's divisor search handle */
#define BATCH_MAX 1073741824.0
#define LO ST_CFG_OPEN_LO
#define HI ST_CFG_OPEN_HI

#define K_INT(k, f, def, lo, hi, doc)                                                                        \
    { k, ST_CFG_INT, FIELD(f), def, lo, hi, 0, NULL, false, doc, 0 }
#define K_AUTO(k, f, lo, hi, doc)                                                                            \
    { k, ST_CFG_INT, FIELD(f), "auto", lo, hi, 0, NULL, true, doc, 0 }
#define K_FLOAT(k, f, def, lo, hi, open, doc)                                                                \
    { k, ST_CFG_FLOAT, FIELD(f), def, lo, hi, open, NULL, false, doc, 0 }
#define K_FAUTO(k, f, lo, hi, open, doc)                                                                     \
    { k, ST_CFG_FLOAT, FIELD(f), "auto", lo, hi, open, NULL, true, doc, 0 }
#define K_BOOL(k, f, def, doc)                                                                               \
    { k, ST_CFG_BOOL, FIELD(f), def, 0, 0, 0, NULL, false, doc, 0 }
#define K_STR(k, f, def, doc)                                                                                \
    { k, ST_CFG_STRING, FIELD(f), def, 0, 0, 0, NULL, false, doc, 0 }
#define K_ENUM(k, f, def, vals, doc)                                                                         \
    { k, ST_CFG_ENUM, FIELD(f), def, 0, 0, 0, vals, false, doc, 0 }
#define K_LIST(k, f, def, lo, hi, doc)                                                                       \
    { k, ST_CFG_INT_LIST, FIELD(f), def, lo, hi, 0, NULL, false, doc, 0 }
#define K_LIST_N(k, f, def, n, lo, hi, doc)                                                                  \
    { k, ST_CFG_INT_LIST, FIELD(f), def, lo, hi, 0, NULL, false, doc, n }

#define FMNIST "/usr/share/datasets/fashion-mnist/"

const st_cfg_key st_cfg_keys[] = {
    K_ENUM("model.type", model.type, "cnn", VALUES("mlp", "cnn", "gpt"),
           "network: mlp (fully connected), cnn (conv blocks) or gpt (decoder-only transformer)"),
    K_ENUM("model.preset", model.preset, "\"\"",
           VALUES("", "gpt2-124m", "gpt2-350m", "gpt2-774m", "gpt2-1558m", "gpt-small"),
           "gpt shape preset (GPT-2's four sizes: 124m, 350m medium, 774m large, 1558m xl; gpt-small for a "
           "CPU); fills model.type and the gpt shape keys not set explicitly (\"\" = none)"),
    K_LIST("model.hidden", model.hidden, "[1024, 1024]", 1, 1 << 20, "mlp: hidden layer widths"),
    K_LIST("model.channels", model.channels, "[32, 64, 128]", 1, 1 << 16,
           "cnn: output channels of each conv block"),
    K_LIST("model.pool", model.pool, "[0, 1, 1]", 0, 1,
           "cnn: 1 = 2x2 max-pool after block i; one entry per model.channels entry"),
    K_INT("model.kernel", model.kernel, "3", 1, 63, "cnn: square conv kernel size"),
    K_BOOL("model.batchnorm", model.batchnorm, "true", "cnn: batch-norm after each conv"),
    K_FLOAT("model.dropout", model.dropout, "0.0", 0, 1, HI,
            "dropout probability; 0 = off. Where: an mlp after each hidden layer (none without one), a cnn "
            "before its head, a gpt after the embeddings and after each block's attention and MLP "
            "projections (GPT-2's resid_pdrop; not on the attention's probabilities, its attn_pdrop)"),
    K_INT("model.n_layer", model.n_layer, "4", 1, 1024, "gpt: transformer blocks"),
    K_INT("model.n_head", model.n_head, "4", 1, 1024, "gpt: attention heads; must divide model.n_embd"),
    K_INT("model.n_embd", model.n_embd, "256", 1, 1 << 16, "gpt: embedding width"),
    K_AUTO("model.vocab_size", model.vocab_size, 2, INT32_MAX, "gpt: vocabulary size; auto = from the data"),
    K_INT("model.block_size", model.block_size, "256", 1, 1 << 20, "gpt: context length in tokens"),
    K_ENUM("model.fused_gelu", model.fused_gelu, "auto", VALUES("auto", "on", "off"),
           "gpt on a CUDA device: GELU inside the MLP's matrix products (cuBLASLt's GELU_AUX_BIAS epilogue "
           "forward, DGELU backward) instead of a layer of its own; auto = on from compute capability 9.0; "
           "the CPU always runs GELU as its own layer"),
    K_ENUM(
        "model.fused_residual", model.fused_residual, "auto", VALUES("auto", "on", "off"),
        "on a CUDA device: a residual add whose branch ends in a linear layer (a gpt's attention and MLP "
        "projections) inside that layer's matrix product (cuBLASLt adds the residual as its C, beta 1), so "
        "the branch's output is never written; auto = on; the CPU always adds as a layer of its own"),
    K_ENUM(
        "model.fused_bias_grad", model.fused_bias_grad, "auto", VALUES("auto", "on", "off"),
        "on a CUDA device: a linear layer's bias gradient summed inside its weight-gradient matrix product "
        "(cuBLASLt's BGRADB or BGRADA epilogue, from the output gradient the product reads anyway) instead "
        "of a column-sum kernel of its own; a product cuBLASLt offers no such algorithm for keeps the "
        "kernel; auto = off (the kernel: the choice measured on a GPU so far); the CPU always sums with "
        "its own kernel"),
    K_ENUM(
        "model.attention_kernel", model.attention_kernel, "auto", VALUES("auto", "flash", "cudnn"),
        "gpt on a CUDA device: causal attention on scaletrain's flash kernels, or on cuDNN's fused attention "
        "(bf16 runs, builds with cuDNN and cudnn-frontend; head sizes that are multiples of 16 up to 128, "
        "others keep scaletrain's kernels); auto = cudnn in a bf16 run on compute capability 9.0 or later "
        "where the build and node have cuDNN (1.14x the GPT-2 124M step on an H200: bench/RESULTS.md), else "
        "flash, the effective config saying why; the CPU always runs its own"),
    K_ENUM("model.kernel_variants", model.kernel_variants, "auto", VALUES("auto", "none", "all"),
           "on a CUDA device: the kernels that compute their layer's default values bit for bit another "
           "way, waiting on a GPU's timing against the defaults (bench/bench_cuda_kernels; docs/cuda.md, "
           "\"Kernel variants\"): layernorm's backward keeping 16-bit rows as loaded, the fused head's rows "
           "kernel loading a group ahead; all = every one; auto = none until one is measured faster; the "
           "results are the same bits either way"),
    K_ENUM("model.matmul_tune", model.matmul_tune, "auto", VALUES("auto", "on", "off"),
           "on a CUDA device: each matrix product's shape, at its first run, times up to 8 of cuBLASLt's "
           "algorithms on its own operands and keeps the fastest (the heuristic's first unless another is 3% "
           "faster; docs/cuda.md, \"Choosing cuBLASLt's algorithm\"); off = the heuristic's first, untimed; "
           "a timing may choose another algorithm in another run, whose sums round differently; auto = off "
           "until a GPU's benchmark measures it; the CPU has no such choice"),
    K_ENUM(
        "model.fused_head", model.fused_head, "auto", VALUES("auto", "on", "off"),
        "gpt: the output layer and the cross-entropy as one layer that makes the logits a chunk of rows at a "
        "time and turns each into its gradients at once, never holding all (batch, seq, vocab) logits; off = "
        "keep the logits; auto = on when that holds less memory (a large vocabulary)"),
    K_AUTO("model.num_classes", model.num_classes, 2, ST_NUM_CLASSES_MAX,
           "mlp/cnn: output classes; auto = the largest label + 1, of data.train_labels and data.val_labels "
           "(a warning when the validation labels go higher)"),

    K_ENUM("data.type", data.type, "idx", VALUES("idx", "npy", "tokens"),
           "dataset format: idx (MNIST family, gzip or raw), npy (a pair of NumPy .npy files: inputs (n, h, "
           "w[, c]) "
           "or (n, d) as uint8, float32 or float64, and labels (n,) as uint8, int32 or int64) or tokens "
           "(token shards)"),
    K_STR("data.train", data.train, FMNIST "train-images-idx3-ubyte.gz",
          "training images (idx), inputs (npy) or tokens: a token file, a pattern (data/train-*.tokens) or a "
          "folder of .tokens files, its files read in name order as one stream"),
    K_STR("data.train_labels", data.train_labels, FMNIST "train-labels-idx1-ubyte.gz",
          "idx, npy: training labels"),
    K_STR("data.val", data.val, FMNIST "t10k-images-idx3-ubyte.gz",
          "validation images (idx), inputs (npy) or tokens (a file, a pattern or a folder); \"\" = no "
          "evaluation"),
    K_STR("data.val_labels", data.val_labels, FMNIST "t10k-labels-idx1-ubyte.gz",
          "idx, npy: validation labels"),
    K_FLOAT("data.val_split", data.val_split, "0", 0, 1, HI,
            "the fraction of data.train held out as the validation data (data.val and data.val_labels then "
            "unset, or left at their defaults): images and features a fixed random subset, the same on every "
            "run and rank; tokens the stream's end; 0 = none"),
    K_INT("data.val_split_seed", data.val_split_seed, "0", 0, NOMAX,
          "images and features: which random subset data.val_split holds out (another seed, another subset: "
          "folds of a cross-validation); the same on every run, rank and train.seed"),
    K_BOOL("data.shuffle", data.shuffle, "true", "reshuffle the training set every epoch"),
    K_BOOL("data.drop_last", data.drop_last, "true",
           "drop the epoch's last partial global batch; false = fill it by wrapping to the epoch's start "
           "(data smaller than one batch: each batch repeats its samples)"),
    K_AUTO(
        "data.num_workers", data.num_workers, 0, 256,
        "loader threads assembling batches ahead of the step; 0 = in the step loop (a read that hangs there "
        "ends the process after data.timeout_s, where a loader thread's is an error after which the run "
        "saves, "
        "and a stop ends its wait); auto = a quarter of the rank's cores, 1 to 8"),
    K_FLOAT("data.timeout_s", data.timeout_s, "300", 0, 7 * 86400, 0,
            "seconds the step loop waits for a loader thread's batch before the run fails naming it (storage "
            "that stopped answering: a hung network file system) and saves what it finished; a read in the "
            "step loop's own thread (data.num_workers 0, evaluations) that long ends the process, naming it; "
            "0 = for ever"),
    K_INT("data.augment_crop_pad", data.augment_crop_pad, "0", 0, 1024,
          "images, training only: random crop to the same size after zero padding of this many pixels on "
          "each side "
          "(torchvision RandomCrop(padding)); drawn from (train.seed, epoch, sample) in the loader threads; "
          "0 = off"),
    K_BOOL("data.augment_flip", data.augment_flip, "false",
           "images, training only: random horizontal flip with probability 1/2, drawn like the crop"),

    K_AUTO("train.steps", train.steps, 1, NOMAX,
           "optimizer steps; auto = train.epochs over the training set: ceil(epochs x batches per epoch) (a "
           "product within 1e-9 of a whole number is that number: 1.08 x 1875 is 2025), an epoch being "
           "floor(samples / batch_size) batches with data.drop_last, else the ceiling"),
    K_FLOAT("train.epochs", train.epochs, "1", 0, 1e6, LO, "passes over the training set when steps is auto"),
    K_INT("train.batch_size", train.batch_size, "128", 1, BATCH_MAX,
          "global batch: samples per optimizer step over all ranks"),
    K_AUTO("train.micro_batch_size", train.micro_batch_size, 1, BATCH_MAX,
           "samples per rank per forward/backward; ranks x micro_batch_size must divide batch_size; auto = "
           "the largest divisor of batch_size / ranks that fits memory (docs/planner.md)"),
    K_INT("train.seed", train.seed, "1", 0, NOMAX, "seed for initialization, shuffling and dropout"),
    K_INT("train.eval_every", train.eval_every, "0", 0, NOMAX,
          "steps between evaluations; 0 = only at the end"),
    K_AUTO(
        "train.eval_batch_size", train.eval_batch_size, 1, BATCH_MAX,
        "evaluation batch per rank; auto = micro_batch_size (scaletrain eval: the largest that fits beside "
        "the weights, up to batch_size and the validation samples over the ranks, or with eval_steps a "
        "training run's micro-batch); the loss's last bits depend on it (each batch's mean is a float32 "
        "sum), the accuracy not"),
    K_INT(
        "train.eval_steps", train.eval_steps, "0", 0, NOMAX,
        "batches of eval_batch_size per evaluation; with eval_batch_size auto, batches of train.batch_size "
        "(evaluated a micro-batch at a time), so the same samples on any number of ranks and micro-batches, "
        "the effective configuration giving the total of eval batches; 0 = the whole set"),
    K_AUTO("train.threads", train.threads, 1, 4096,
           "CPU threads per rank; auto = the cores of this rank's affinity mask over the node's ranks with "
           "the same mask (bound a core each: all of them; unbound, or a socket or cpuset shared: a share), "
           "and no more than a cgroup's CPU quota (a container's --cpus) over the node's ranks; the results' "
           "last bits depend on it (a run repeats exactly with the same threads)"),
    K_STR("train.out_dir", train.out_dir, "runs/default", "directory for checkpoints, metrics and logs"),
    K_INT("train.checkpoint_every", train.checkpoint_every, "0", 0, NOMAX,
          "save a checkpoint in out_dir/ckpt every this many steps; 0 = only at the end (and on "
          "SIGTERM/SIGINT, and by train.checkpoint_every_s)"),
    K_FLOAT("train.checkpoint_every_s", train.checkpoint_every_s, "1800", 0, NOMAX, 0,
            "also save a checkpoint after the first step that ends this many seconds after the last "
            "checkpoint (or the run's start), so that a crash loses at most about this much training; the "
            "ranks agree on the step; 0 = only by step count"),
    K_INT("train.keep_checkpoints", train.keep_checkpoints, "3", 0, NOMAX,
          "checkpoints kept in out_dir/ckpt, newest first; 0 = keep all"),
    K_BOOL(
        "train.checkpoint_async", train.checkpoint_async, "false",
        "write periodic checkpoints (train.checkpoint_every, train.checkpoint_every_s) from a copy of the "
        "weights and optimizer state in host memory on a thread of their own while training goes on; "
        "committed once every rank's files are written; the last and a stop's checkpoint stay synchronous"),
    K_INT(
        "train.checkpoint_timeout_s", train.checkpoint_timeout_s, "0", 0, 30 * 86400,
        "seconds ranks wait for one another while a checkpoint is written or read before every rank fails "
        "with a message (the watchdog), and a rank for its own checkpoint writes, or its other reads and "
        "writes of train.out_dir and weights (metrics lines, the final weights, --resume, --init), before it "
        "ends naming the storage (one that stopped answering), and at the run's end for standard output's "
        "last write (then given up, saying what was not written); 0 = auto: dist.timeout_s plus 1 s per 10 "
        "MB "
        "of checkpoint (for standard output dist.timeout_s)"),
    K_ENUM(
        "train.activation_checkpointing", train.activation_checkpointing, "auto",
        VALUES("auto", "off", "selective", "blocks"),
        "recompute activations in backward instead of keeping them (same gradients, less memory): blocks = "
        "every activation inside each transformer/conv block; selective = only the outputs of norms and "
        "GELUs (a GPT keeps 10 of its 16 activations per token and layer, for a few element-wise passes); "
        "auto = the cheapest of off, selective, blocks that lets the micro-batch fit"),
    K_ENUM(
        "train.device", train.device, "auto", VALUES("auto", "cpu", "cuda", "cuda:N"),
        "where the model trains: cuda = this rank's GPU (its local rank's, modulo the GPUs it sees: one each "
        "under srun --gpus-per-task=1; two ranks on one GPU are refused), with every layer and the "
        "optimizer there; cuda:N = GPU N (one rank on the node); one rank on a node of several GPUs "
        "uses one and says so (`scaletrain launch -n G` runs a rank per GPU); auto = cuda when this "
        "build has CUDA and a GPU is present, else cpu (docs/cuda.md)"),
    K_INT("train.device_timeout_s", train.device_timeout_s, "600", 0, 7 * 86400,
          "on a GPU: seconds a wait for the device's work (a step, a read-back, opening it, or the GPU "
          "monitor's "
          "readings of it) may last before "
          "the process ends with a message naming the device, the wait and the step (a kernel that does not "
          "end, a GPU that stopped answering); 0 = wait forever"),

    K_ENUM("optim.type", optim.type, "adamw", VALUES("adamw", "sgd"), "optimizer"),
    /* (from 1e-30: a rate below float's smallest normal, 1e-320 say, rounded to 0 in the update, and nothing
     * trained) */
    K_FLOAT("optim.lr", optim.lr, "1e-3", 1e-30, 10, HI, "peak learning rate, reached after warmup"),
    K_FLOAT("optim.weight_decay", optim.weight_decay, "0.0", 0, 10, HI,
            "decoupled weight decay (adamw) or L2 penalty (sgd, added after clipping), on the matrices: "
            "linear and convolution weights and a gpt's embeddings (wte, wpe); never on biases nor layer- "
            "or batch-norm weights"),
    K_FLOAT("optim.beta1", optim.beta1, "0.9", 0, 1, HI, "adamw: first-moment decay"),
    K_FLOAT("optim.beta2", optim.beta2, "0.999", 0, 1, HI, "adamw: second-moment decay"),
    K_FLOAT("optim.eps", optim.eps, "1e-8", 0, 1, LO | HI, "adamw: epsilon added to the denominator"),
    K_FLOAT("optim.momentum", optim.momentum, "0.9", 0, 1, HI, "sgd: momentum; 0 = plain SGD"),
    K_BOOL("optim.nesterov", optim.nesterov, "false", "sgd: Nesterov momentum"),
    K_BOOL(
        "optim.offload", optim.offload, "false",
        "on a GPU: the optimizer state and its update on the host (ZeRO-Offload; with ZeRO each rank's "
        "shard), "
        "the gradients copied down and the weights up in overlapped chunks; saves the state's device memory "
        "(docs/distributed.md); no effect on the CPU"),
    K_ENUM("optim.schedule", optim.schedule, "cosine", VALUES("constant", "cosine", "linear"),
           "learning-rate decay after warmup"),
    K_INT("optim.warmup_steps", optim.warmup_steps, "0", 0, NOMAX,
          "steps of linear warmup to lr: step s (from 1) takes lr x s / warmup_steps, and the decay starts "
          "after, from lr"),
    K_FLOAT("optim.min_lr", optim.min_lr, "0.0", 0, 1, 0,
            "learning rate the decay ends at, as a fraction of lr: reached one step past the last (the "
            "last step's is just above it, as with PyTorch's CosineAnnealingLR)"),
    K_FLOAT("optim.grad_clip", optim.grad_clip, "0.0", 0, NOMAX, 0,
            "clip the global gradient norm to this; 0 = off"),
    K_ENUM("optim.lr_scaling", optim.lr_scaling, "none", VALUES("none", "linear", "sqrt"),
           "scale optim.lr with the number of ranks: linear (lr x ranks) or sqrt (lr x sqrt(ranks)), for a "
           "global batch that grows with the ranks; none = lr as given; a resume on another number of ranks "
           "(train.batch_size unchanged) says the rate changed"),

    K_FLOAT("optim.loss_scale", optim.loss_scale, "65536", 0x1p-24, 3.4e38, 0,
            "fp16: initial dynamic loss scale (halved on an overflow, which skips the step, down to 2^-24 = "
            "6e-8, "
            "where an overflow stops the run); unused in fp32 and bf16"),
    K_INT("optim.loss_scale_window", optim.loss_scale_window, "2000", 1, NOMAX,
          "fp16: clean steps in a row that double the loss scale"),

    K_ENUM("precision", precision, "auto", VALUES("auto", "fp32", "bf16", "fp16"),
           "compute precision: fp32 master weights always; bf16/fp16 round weights, activations and their "
           "gradients to 16 bits (docs/precision.md); auto = fp32 on the CPU, bf16 on a CUDA device"),

    K_ENUM("dist.strategy", dist.strategy, "auto", VALUES("auto", "ddp", "zero1", "zero2"),
           "data parallelism: ddp, zero1 (shard optimizer state, and in bf16/fp16 the fp32 masters), zero2 "
           "(and gradients); auto = ddp when the model states and a sample fit in memory, else zero2 on "
           "several ranks (zero1 on CUDA devices; docs/distributed.md)"),
    K_FLOAT(
        "dist.bucket_cap_mb", dist.bucket_cap_mb, "25", 0, 4096, LO,
        "gradient bucket size in MiB (the first bucket at most 1 MiB, and every bucket at most an eighth of "
        "the model's gradients, 64 KiB at least, so that the last one, which starts only when backward ends, "
        "is small): each bucket's all-reduce starts during backward as soon as its gradients are final"),
    K_ENUM("dist.grad_dtype", dist.grad_dtype, "fp32", VALUES("fp32", "bf16", "fp16"),
           "type gradients travel in during the all-reduce (each add in fp32; docs/precision.md)"),
    K_ENUM("dist.comm", dist.comm, "auto", VALUES("auto", "nccl"),
           "communicator for gradients and parameters: auto = NCCL between CUDA devices when there are "
           "several ranks, MPI on the CPU (the checks before training always use MPI); nccl = NCCL also for "
           "one rank on a GPU (docs/distributed.md)"),
    K_BOOL("dist.deterministic", dist.deterministic, "false",
           "fold micro-batch gradients in a fixed global order: the same bits on any number of ranks "
           "(docs/distributed.md)"),
    K_BOOL(
        "dist.sync_batchnorm", dist.sync_batchnorm, "false",
        "batch-norm normalises with the statistics of the global micro-batch, reduced over every rank "
        "(PyTorch's SyncBatchNorm); off: each rank's own (docs/distributed.md); on GPUs through NCCL, in the "
        "compute stream's order"),
    K_INT("dist.timeout_s", dist.timeout_s, "600", 1, 7 * 86400,
          "seconds a collective may wait before every rank fails with a message"),
    K_BOOL("dist.shm_allreduce", dist.shm_allreduce, "true",
           "when every rank is on one node, float32 gradient all-reduces of 16 KiB or more go through a "
           "shared-memory segment (the same bits on every rank); false: through MPI, as "
           "SCALETRAIN_SHM_MIN_BYTES=0 (docs/distributed.md)"),

    K_INT("log.every", log.every, "10", 1, NOMAX, "steps between log lines"),
    K_ENUM(
        "log.progress", log.progress, "auto", VALUES("auto", "on", "off"),
        "progress bar, and an evaluation's batches as it goes (train and eval); auto = on a terminal (under "
        "scaletrain launch: when the launcher's output is one)"),
    K_FAUTO(
        "log.peak_gflops", log.peak_gflops, 0, NOMAX, LO,
        "peak GFLOP/s of a rank's device, for mfu in metrics.jsonl; auto = a CUDA device's dense peak "
        "for the precision (datasheet, or SMs x clock x rate), on the CPU measured once at start (sgemm); "
        "when set, also the CPU rate `scaletrain plan` assumes instead of measuring it"),
    K_INT("log.gpu_interval", log.gpu_interval, "10", 0, NOMAX,
          "on a CUDA device, rank 0 samples its GPU on the first logged line (log.every) at least this many "
          "steps "
          "after the last sample: memory (this run's allocated and peak, the device's used and total) and, "
          "when "
          "the driver's NVML is present, utilisation, memory utilisation, power, temperature and clock "
          "slowdowns, into metrics.jsonl, TensorBoard and the progress line; every rank reads its own GPU's "
          "clocks then and says when heat or the power supply slows them; 0 = never; absent on the CPU"),
    K_INT("log.sample_every", log.sample_every, "0", 0, NOMAX,
          "a gpt: rank 0 prints a text sample every this many steps and after the last, as llm.c does: "
          "log.sample_tokens tokens drawn at temperature 1 by the weights then, after a first token that "
          "is not printed: a new line, 10 (the byte-level vocabulary of 256), GPT-2's end-of-text token "
          "50256 (a vocabulary of 50257 or more) or else token 0; on the run's GPU (a copy of the weights in "
          "fp32 for the sample's time), or on "
          "rank 0's CPU where the GPU has no room for it or the run has none; 0 = never"),
    K_INT("log.sample_tokens", log.sample_tokens, "64", 1, 65536,
          "tokens each text sample draws (log.sample_every)"),
    K_BOOL("log.tensorboard", log.tensorboard, "false",
           "rank 0 also writes the numbers of metrics.jsonl to a TensorBoard event file, "
           "out_dir/events.out.tfevents.*"),
    K_BOOL("log.trace", log.trace, "false",
           "profiler trace: rank 0 writes out_dir/trace.json (Chrome trace format, opens in Perfetto) for "
           "the steps of "
           "log.trace_steps, one track per rank: step, data wait, forward and backward of each layer, bucket "
           "all-reduces, optimizer, checkpoint"),
    K_LIST_N(
        "log.trace_steps", log.trace_steps, "[2, 6]", 2, 1, NOMAX,
        "[first, last]: the steps (1-based, inclusive) that log.trace records; --profile FIRST-LAST sets "
        "both keys"),
};
const int st_cfg_nkeys = (int)(sizeof st_cfg_keys / sizeof st_cfg_keys[0]);
_Static_assert(sizeof st_cfg_keys / sizeof st_cfg_keys[0] <= ST_CFG_KEYS_MAX, "raise ST_CFG_KEYS_MAX");

const st_cfg_preset st_cfg_presets[] = {
    {"gpt2-124m", "model.type", "gpt"},          {"gpt2-124m", "model.n_layer", "12"},
    {"gpt2-124m", "model.n_head", "12"},         {"gpt2-124m", "model.n_embd", "768"},
    {"gpt2-124m", "model.vocab_size", "50257"},  {"gpt2-124m", "model.block_size", "1024"},
    {"gpt2-350m", "model.type", "gpt"},          {"gpt2-350m", "model.n_layer", "24"},
    {"gpt2-350m", "model.n_head", "16"},         {"gpt2-350m", "model.n_embd", "1024"},
    {"gpt2-350m", "model.vocab_size", "50257"},  {"gpt2-350m", "model.block_size", "1024"},
    {"gpt2-774m", "model.type", "gpt"},          {"gpt2-774m", "model.n_layer", "36"},
    {"gpt2-774m", "model.n_head", "20"},         {"gpt2-774m", "model.n_embd", "1280"},
    {"gpt2-774m", "model.vocab_size", "50257"},  {"gpt2-774m", "model.block_size", "1024"},
    {"gpt2-1558m", "model.type", "gpt"},         {"gpt2-1558m", "model.n_layer", "48"},
    {"gpt2-1558m", "model.n_head", "25"},        {"gpt2-1558m", "model.n_embd", "1600"},
    {"gpt2-1558m", "model.vocab_size", "50257"}, {"gpt2-1558m", "model.block_size", "1024"},
    {"gpt-small", "model.type", "gpt"},          {"gpt-small", "model.n_layer", "4"},
    {"gpt-small", "model.n_head", "4"},          {"gpt-small", "model.n_embd", "256"},
    {"gpt-small", "model.vocab_size", "256"},    {"gpt-small", "model.block_size", "256"},
};
const int st_cfg_npresets = (int)(sizeof st_cfg_presets / sizeof st_cfg_presets[0]);

int st_cfg_find(const char *key) {
    for (int i = 0; i < st_cfg_nkeys; i++)
        if (!strcmp(st_cfg_keys[i].key, key)) return i;
    return -1;
}

size_t st_cfg_section_len(const char *key) {
    const char *dot = strchr(key, '.');
    return dot ? (size_t)(dot - key) : 0;
}

const char *st_cfg_leaf(const char *key) {
    return key + st_cfg_section_len(key) + (strchr(key, '.') != NULL);
}

int st_cfg_section_first(const char *name, size_t n) {
    for (int i = 0; i < st_cfg_nkeys; i++)
        if (st_cfg_section_len(st_cfg_keys[i].key) == n && n && !strncmp(st_cfg_keys[i].key, name, n))
            return i;
    return -1;
}

/* ---- converting a value ---- */

typedef struct scalar {
    const char *s;
    size_t len;
    bool plain; /* unquoted: may be null */
} scalar;

static bool as_scalar(const yaml_node_t *node, scalar *out) {
    if (!node) {
        *out = (scalar){"", 0, true};
        return true;
    }
    if (node->type != YAML_SCALAR_NODE) return false;
    *out = (scalar){(const char *)node->data.scalar.value, node->data.scalar.length,
                    node->data.scalar.style == YAML_PLAIN_SCALAR_STYLE};
    return true;
}

static bool is_null(scalar v) {
    return v.plain && (v.len == 0 || !strcmp(v.s, "~") || !strcmp(v.s, "null") || !strcmp(v.s, "Null") ||
                       !strcmp(v.s, "NULL"));
}

bool st_cfg_is_null(const yaml_node_t *node) {
    scalar v;
    return !node || (as_scalar(node, &v) && is_null(v));
}

static const char *node_kind(const yaml_node_t *node) {
    return node->type == YAML_SEQUENCE_NODE ? "a list" : "a mapping";
}

static st_status bad(const char *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static st_status bad(const char *ctx, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* one line: a value's line ends (a block scalar's '0.1\n') shown as \n */
    char line[2 * sizeof msg];
    size_t o = 0;
    for (const char *p = msg; *p && o + 3 < sizeof line; p++)
        if (*p == '\n' || *p == '\r') {
            line[o++] = '\\';
            line[o++] = *p == '\n' ? 'n' : 'r';
        } else {
            line[o++] = *p;
        }
    line[o] = '\0';
    return st_fail(ST_ERR_CONFIG, "%s: %s", ctx, line);
}

/* [+-]? (digits [. digits*] | . digits) ([eE] [+-]? digits)?  -- no hex, inf or nan. */
static bool number_syntax(const char *s, bool *integral) {
    static const char digits[] = "0123456789";
    const char *p = s + (*s == '+' || *s == '-');
    size_t nd = strspn(p, digits);
    p += nd;
    *integral = true;
    if (*p == '.') {
        size_t nf = strspn(++p, digits);
        p += nf, nd += nf, *integral = false;
    }
    if (nd == 0) return false;
    if (*p == 'e' || *p == 'E') {
        p += 1 + (p[1] == '+' || p[1] == '-');
        size_t ne = strspn(p, digits);
        if (ne == 0) return false;
        p += ne, *integral = false;
    }
    return *p == '\0';
}

#define INT_LIMIT 9007199254740992.0 /* 2^53: every integer survives JSON's doubles */

typedef enum { NUM_OK, NUM_SYNTAX, NUM_FRACTION, NUM_HUGE, NUM_TINY } num_result;

static num_result parse_float(const char *s, double *out) {
    bool integral;
    if (!number_syntax(s, &integral)) return NUM_SYNTAX;
    *out = strtod(s, NULL);
    if (!isfinite(*out)) return NUM_HUGE;
    /* 1e-400 is not 0: a nonzero digit before the exponent that came out 0 */
    if (*out == 0 && strcspn(s, "123456789") < strcspn(s, "eE")) return NUM_TINY;
    return NUM_OK;
}

/* Integers may be written with an exponent when they are whole (1e3 = 1000). */
static num_result parse_int(const char *s, int64_t *out) {
    double d;
    num_result r = parse_float(s, &d);
    if (r != NUM_OK) return r;
    if (d != floor(d)) return NUM_FRACTION;
    if (fabs(d) > INT_LIMIT) return NUM_HUGE;
    bool integral;
    number_syntax(s, &integral);
    *out = integral ? (int64_t)strtoll(s, NULL, 10) : (int64_t)d;
    /* (2^53 + 1 reads as the double 2^53) */
    if (*out > (int64_t)INT_LIMIT || *out < -(int64_t)INT_LIMIT) return NUM_HUGE;
    return NUM_OK;
}

static bool in_range(const st_cfg_key *k, double v) {
    bool lo_ok = (k->open & ST_CFG_OPEN_LO) ? v > k->lo : v >= k->lo;
    bool hi_ok = (k->open & ST_CFG_OPEN_HI) ? v < k->hi : v <= k->hi;
    return lo_ok && hi_ok;
}

/* The value as quoted text for a message, cut short if long. */
#define SHOW(v) (int)((v).len > 60 ? 60 : (v).len), (v).s, (v).len > 60 ? "..." : ""

static st_status convert_int(const st_cfg_key *k, scalar v, const char *what, const char *ctx, int64_t *out) {
    if (k->auto_ok && !strcmp(v.s, "auto")) {
        *out = ST_AUTO;
        return ST_OK;
    }
    const char *alt = k->auto_ok ? " or auto" : "";
    switch (parse_int(v.s, out)) {
    case NUM_OK:
        break;
    case NUM_SYNTAX:
        if (!strcmp(v.s, "auto")) return bad(ctx, "%sauto is not accepted here; give an integer", what);
        return bad(ctx, "%sexpected an integer%s, got '%.*s%s'", what, alt, SHOW(v));
    case NUM_FRACTION:
        return bad(ctx, "%sexpected a whole number%s, got '%.*s%s'", what, alt, SHOW(v));
    case NUM_HUGE:
        return bad(ctx, "%s'%.*s%s' is too large; integers are limited to 2^53", what, SHOW(v));
    case NUM_TINY:
        return bad(ctx, "%s'%.*s%s' is too small: it rounds to 0; write 0 if that is meant", what, SHOW(v));
    }
    if (!in_range(k, (double)*out)) {
        char range[128];
        st_cfg_range_text(k, range, sizeof range);
        return bad(ctx, "%s%lld is out of range; it must be %s%s", what, (long long)*out, range, alt);
    }
    return ST_OK;
}

static st_status convert_list(const st_cfg_key *k, yaml_node_t *node, yaml_document_t *doc, const char *ctx,
                              st_int_list *out) {
    scalar v;
    memset(out, 0, sizeof *out);
    if (node && node->type == YAML_SCALAR_NODE && as_scalar(node, &v) && !is_null(v))
        return convert_int(k, v, "", ctx, &out->v[out->n++]); /* one entry: 512 = [512] */
    if (!node || node->type != YAML_SEQUENCE_NODE)
        return bad(ctx, "expected a list of integers like [512, 256], got %s",
                   node && node->type == YAML_MAPPING_NODE ? "a mapping" : "nothing");
    for (yaml_node_item_t *it = node->data.sequence.items.start; it < node->data.sequence.items.top; it++) {
        char what[48];
        yaml_node_t *e = yaml_document_get_node(doc, *it);
        /* (a block list's entry on a line of its own: that line, the key's being in ctx) */
        if (e && e->start_mark.line != node->start_mark.line)
            snprintf(what, sizeof what, "entry %d (line %zu): ", out->n + 1, e->start_mark.line + 1);
        else
            snprintf(what, sizeof what, "entry %d: ", out->n + 1);
        if (out->n == ST_CFG_LIST) return bad(ctx, "too many entries; at most %d", ST_CFG_LIST);
        if (!as_scalar(e, &v)) return bad(ctx, "%sexpected an integer, got %s", what, node_kind(e));
        ST_TRY(convert_int(k, v, what, ctx, &out->v[out->n++]));
    }
    return ST_OK;
}

/* Levenshtein distance ignoring case when the two names are near enough to
 * suggest one for the other (or one starts the other), else -1. */
int st_cfg_near(const char *a, size_t na, const char *b, size_t nb) {
    enum { MAXN = 64 };
    if (!na || !nb || na >= MAXN || nb >= MAXN) return -1;
    int prev[MAXN + 1], cur[MAXN + 1];
    for (size_t j = 0; j <= nb; j++)
        prev[j] = (int)j;
    for (size_t i = 1; i <= na; i++) {
        cur[0] = (int)i;
        for (size_t j = 1; j <= nb; j++) {
            int sub = prev[j - 1] + (tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]));
            int del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
        memcpy(prev, cur, sizeof prev);
    }
    int d = prev[nb];
    size_t shorter = na < nb ? na : nb;
    if (d <= 2 && (size_t)d < shorter) return d;
    if (shorter >= 3 && !strncasecmp(a, b, shorter)) return d;
    return -1;
}

#define ZERO3                                                                                                \
    "zero2 (ZeRO-3 and FSDP, which shard the weights too, are not built: zero2 shards the gradients "        \
    "and the optimizer state, and in bf16 or fp16 the fp32 master weights)"
/* The names other tools give an enum's values (PyTorch Lightning's
 * precision, DeepSpeed's and PyTorch's strategies), case aside: the value
 * that is meant, or what to use where there is none. */
static const char *alias_of(const char *key, const char *typed) {
    static const struct {
        const char *key, *typed, *say;
    } alias[] = {
        {"precision", "bfloat16", "bf16"},
        {"precision", "bf16-mixed", "bf16"},
        {"precision", "bf16-true", "bf16"},
        {"precision", "float16", "fp16"},
        {"precision", "half", "fp16"},
        {"precision", "16", "fp16"},
        {"precision", "16-mixed", "fp16"},
        {"precision", "float32", "fp32"},
        {"precision", "float", "fp32"},
        {"precision", "32", "fp32"},
        {"precision", "32-true", "fp32"},
        {"dist.strategy", "zero-1", "zero1"},
        {"dist.strategy", "zero-2", "zero2"},
        {"dist.strategy", "zero3", ZERO3},
        {"dist.strategy", "zero-3", ZERO3},
        {"dist.strategy", "fsdp", ZERO3},
        {"dist.strategy", "deepspeed", "zero1 or zero2 (DeepSpeed's ZeRO stages 1 and 2)"},
        {"optim.type", "adam", "adamw (with optim.weight_decay: 0 it is Adam)"},
        {"train.device", "gpu", "cuda"},
    };
    for (size_t i = 0; i < sizeof alias / sizeof alias[0]; i++)
        if (!strcmp(key, alias[i].key) && !strcasecmp(typed, alias[i].typed)) return alias[i].say;
    return NULL;
}

static const char *closest(const char *typed, const char *const *cands) {
    const char *best = NULL;
    int best_d = INT32_MAX;
    for (; *cands; cands++) {
        int d = st_cfg_near(typed, strlen(typed), *cands, strlen(*cands));
        if (d >= 0 && d < best_d) best = *cands, best_d = d;
    }
    return best;
}

/* Whether s is the enum value e. A value written "name:N" stands for name:
 * followed by a number, 0 to 999 (train.device's cuda:N). */
static bool enum_match(const char *e, const char *s) {
    const size_t n = strlen(e);
    if (n < 2 || strcmp(e + n - 2, ":N") != 0) return strcmp(e, s) == 0;
    if (strncmp(e, s, n - 1) != 0) return false; /* "name:" */
    const char *d = s + n - 1;
    const size_t digits = strspn(d, "0123456789");
    return digits >= 1 && digits <= 3 && d[digits] == '\0' && (digits == 1 || d[0] != '0');
}

static bool parse_bool(const char *s, bool *out) {
    static const char *const yes[] = {"true", "yes", "on"}, *const no[] = {"false", "no", "off"};
    for (int i = 0; i < 3; i++) {
        if (!strcasecmp(s, yes[i])) return *out = true, true;
        if (!strcasecmp(s, no[i])) return *out = false, true;
    }
    return false;
}

st_status st_cfg_assign(st_config *c, int row, yaml_node_t *node, yaml_document_t *doc, const char *ctx) {
    const st_cfg_key *k = &st_cfg_keys[row];
    void *field = (char *)c + k->off;
    if (k->type == ST_CFG_INT_LIST) {
        st_int_list list;
        ST_TRY(convert_list(k, node, doc, ctx, &list));
        memcpy(field, &list, sizeof list);
        return ST_OK;
    }
    scalar v;
    char values[512];
    if (!as_scalar(node, &v)) {
        static const char *const expect[] = {"an integer", "a number", "true or false", "a string"};
        if (k->type == ST_CFG_ENUM) st_cfg_values_text(k, values, sizeof values);
        return bad(ctx, "expected %s%s%s, got %s", k->type == ST_CFG_ENUM ? "one of " : expect[k->type],
                   k->type == ST_CFG_ENUM ? values : "", k->auto_ok ? " or auto" : "", node_kind(node));
    }
    if (strlen(v.s) != v.len) return bad(ctx, "the value contains a NUL character");
    switch (k->type) {
    case ST_CFG_INT: {
        int64_t x;
        ST_TRY(convert_int(k, v, "", ctx, &x));
        memcpy(field, &x, sizeof x);
        return ST_OK;
    }
    case ST_CFG_FLOAT: {
        double x = -1;
        if (!(k->auto_ok && !strcmp(v.s, "auto"))) {
            num_result r = parse_float(v.s, &x);
            if (r == NUM_HUGE) return bad(ctx, "'%.*s%s' is too large", SHOW(v));
            if (r == NUM_TINY)
                return bad(ctx, "'%.*s%s' is too small: it rounds to 0; write 0 if that is meant", SHOW(v));
            if (r != NUM_OK)
                return bad(ctx, "expected a number%s, got '%.*s%s'", k->auto_ok ? " or auto" : "", SHOW(v));
            if (!in_range(k, x)) {
                char range[128], num[40];
                st_cfg_range_text(k, range, sizeof range);
                st_cfg_format_double(x, num, sizeof num);
                return bad(ctx, "%s is out of range; it must be %s", num, range);
            }
        }
        memcpy(field, &x, sizeof x);
        return ST_OK;
    }
    case ST_CFG_BOOL: {
        bool x;
        if (!parse_bool(v.s, &x))
            return bad(ctx, "expected true or false (or yes/no, on/off), got '%.*s%s'", SHOW(v));
        memcpy(field, &x, sizeof x);
        return ST_OK;
    }
    case ST_CFG_STRING:
    case ST_CFG_ENUM: {
        const char *s = is_null(v) ? "" : v.s;
        if (strlen(s) > k->size - 1)
            return bad(ctx, "the value is %zu bytes long; at most %zu fit", strlen(s), k->size - 1);
        if (k->type == ST_CFG_ENUM) {
            bool found = false;
            for (const char *const *e = k->values; *e && !found; e++)
                found = enum_match(*e, s);
            if (!found) {
                const char *guess = alias_of(k->key, s);
                if (!guess) guess = closest(s, k->values);
                st_cfg_values_text(k, values, sizeof values);
                return bad(ctx, "'%.*s%s' is not one of %s%s%s%s", SHOW(v), values,
                           guess ? "; did you mean " : "", guess ? guess : "", guess ? "?" : "");
            }
        }
        memcpy(field, s, strlen(s) + 1);
        return ST_OK;
    }
    case ST_CFG_INT_LIST:
        break;
    }
    return st_fail(ST_ERR_INTERNAL, "%s: bad schema type", ctx);
}

/* The byte at which the `chars`-th character of UTF-8 text (valid: checked
 * first) starts (libyaml's marks count characters: 'café' ends at 4, its
 * bytes at 5). */
static size_t utf8_byte_at(const char *text, size_t chars) {
    const size_t len = strlen(text);
    size_t b = 0;
    for (size_t n = 0; b < len && n < chars; n++)
        b += st_utf8_len((const unsigned char *)text + b, len - b);
    return b;
}

st_status st_cfg_assign_text(st_config *c, int row, const char *text, const char *ctx) {
    /* (YAML reads UTF-8 alone: a Latin-1 byte was "an incomplete UTF-8 octet sequence ... quote it") */
    const size_t len = strlen(text);
    for (size_t i = 0; i < len;) {
        const size_t k = st_utf8_len((const unsigned char *)text + i, len - i);
        if (!k)
            return bad(ctx,
                       "the value is not UTF-8 text: byte %zu is \\x%02x (Latin-1?); give it in UTF-8 "
                       "(iconv -f latin1 -t utf8 converts a file's)",
                       i + 1, (unsigned)(unsigned char)text[i]);
        i += k;
    }
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser)) return st_fail(ST_ERR_NOMEM, "%s: out of memory", ctx);
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, strlen(text));
    st_status s;
    if (!yaml_parser_load(&parser, &doc)) {
        if (parser.error == YAML_MEMORY_ERROR)
            s = st_fail(ST_ERR_NOMEM, "%s: out of memory", ctx);
        else if (text[0] && strchr("*&!|>%@`", text[0])) /* (a shell pattern such as *.bin starts an alias) */
            s = bad(ctx,
                    "'%.60s' is not a valid YAML value: a value that starts with '%c' is read as YAML's %s; "
                    "quote it (--set 'key=\"%.60s\"')",
                    text, text[0],
                    text[0] == '*'   ? "alias"
                    : text[0] == '&' ? "anchor"
                    : text[0] == '!' ? "tag"
                                     : "reserved indicator",
                    text);
        else
            s = bad(ctx, "'%.60s' is not a valid YAML value: %s (column %zu); quote it or fix the brackets",
                    text, parser.problem ? parser.problem : "syntax error", parser.problem_mark.column + 1);
    } else {
        /* A YAML comment after the value (' #' or a leading '#') would be
         * dropped, and with it what the value held from there on: a path
         * with ' #' in it cut short, or set to nothing. Refused, saying so. */
        yaml_node_t *root = yaml_document_get_root_node(&doc);
        size_t end = root ? utf8_byte_at(text, root->end_mark.index) : 0;
        while (text[end] == ' ' || text[end] == '\t' || text[end] == '\n' || text[end] == '\r')
            end++;
        if (text[end] == '#')
            s = bad(ctx,
                    "'%.60s' holds a YAML comment from '%.40s' on, which would be dropped; quote the value "
                    "(--set 'key=\"...\"') to keep the '#'",
                    text, text + end);
        /* (the parser stops at the end of the first value: '[16], 32' or '"a" b' was [16] or a) */
        else if (root && text[end])
            s = bad(ctx,
                    "'%.60s' has '%.40s' after its value, which would be dropped; quote the whole value, or "
                    "write a list as [a, b]",
                    text, text + end);
        else
            s = st_cfg_assign(c, row, root, &doc, ctx);
        yaml_document_delete(&doc);
    }
    yaml_parser_delete(&parser);
    return s;
}

/* ---- showing a value ---- */

void st_cfg_format_double(double v, char *buf, size_t n) {
    snprintf(buf, n, "%.15g", v);
    if (strtod(buf, NULL) != v) snprintf(buf, n, "%.17g", v);
}

/* Quote where a YAML reader would otherwise see null, a bool, a number, or syntax. */
static bool needs_quotes(const char *s) {
    bool b, integral;
    size_t n = strlen(s);
    if (n == 0 || strchr("-?:,[]{}#&*!|>'\"%@` \t", s[0]) || s[n - 1] == ' ' || s[n - 1] == ':') return true;
    if (strstr(s, ": ") || strstr(s, " #") || strpbrk(s, "\"\\")) return true;
    for (const unsigned char *c = (const unsigned char *)s; *c; c++)
        if (*c < 0x20 || *c == 0x7f) return true; /* (escaped: a YAML reader drops or refuses them raw) */
    return parse_bool(s, &b) || is_null((scalar){s, n, true}) || number_syntax(s, &integral);
}

void st_cfg_quote(const char *s, char *buf, size_t n) {
    if (!needs_quotes(s)) {
        snprintf(buf, n, "%s", s);
        return;
    }
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    if (n < 3) return;
    buf[o++] = '"';
    for (const unsigned char *c = (const unsigned char *)s; *c && o + 6 < n; c++) {
        if (*c == '"' || *c == '\\')
            buf[o++] = '\\', buf[o++] = (char)*c;
        else if (*c == '\n')
            buf[o++] = '\\', buf[o++] = 'n';
        else if (*c == '\t')
            buf[o++] = '\\', buf[o++] = 't';
        else if (*c == '\r')
            buf[o++] = '\\', buf[o++] = 'r';
        else if (*c < 0x20 || *c == 0x7f)
            buf[o++] = '\\', buf[o++] = 'x', buf[o++] = hex[*c >> 4], buf[o++] = hex[*c & 15];
        else
            buf[o++] = (char)*c;
    }
    buf[o++] = '"';
    buf[o] = '\0';
}

void st_cfg_format(const st_config *c, int row, char *buf, size_t n) {
    const st_cfg_key *k = &st_cfg_keys[row];
    const void *field = (const char *)c + k->off;
    switch (k->type) {
    case ST_CFG_INT: {
        int64_t x;
        memcpy(&x, field, sizeof x);
        if (k->auto_ok && x == ST_AUTO)
            snprintf(buf, n, "auto");
        else
            snprintf(buf, n, "%lld", (long long)x);
        return;
    }
    case ST_CFG_FLOAT: {
        double x;
        memcpy(&x, field, sizeof x);
        if (k->auto_ok && x < 0)
            snprintf(buf, n, "auto");
        else
            st_cfg_format_double(x, buf, n);
        return;
    }
    case ST_CFG_BOOL:
        snprintf(buf, n, "%s", *(const bool *)field ? "true" : "false");
        return;
    case ST_CFG_STRING:
        st_cfg_quote((const char *)field, buf, n);
        return;
    case ST_CFG_ENUM:
        snprintf(buf, n, "%s", *(const char *)field ? (const char *)field : "\"\"");
        return;
    case ST_CFG_INT_LIST: {
        const st_int_list *l = field;
        size_t o = (size_t)snprintf(buf, n, "[");
        for (int i = 0; i < l->n && o < n; i++)
            o += (size_t)snprintf(buf + o, n - o, "%s%lld", i ? ", " : "", (long long)l->v[i]);
        if (o < n) snprintf(buf + o, n - o, "]");
        return;
    }
    }
}

void st_cfg_range_text(const st_cfg_key *k, char *buf, size_t n) {
    char lo[40], hi[40];
    st_cfg_format_double(k->lo, lo, sizeof lo);
    st_cfg_format_double(k->hi, hi, sizeof hi);
    const char *lo_op = (k->open & ST_CFG_OPEN_LO) ? ">" : ">=",
               *hi_op = (k->open & ST_CFG_OPEN_HI) ? "<" : "<=";
    if (isfinite(k->lo) && isfinite(k->hi))
        snprintf(buf, n, "%s %s and %s %s", lo_op, lo, hi_op, hi);
    else if (isfinite(k->lo))
        snprintf(buf, n, "%s %s", lo_op, lo);
    else if (isfinite(k->hi))
        snprintf(buf, n, "%s %s", hi_op, hi);
    else
        snprintf(buf, n, "any");
}

void st_cfg_values_text(const st_cfg_key *k, char *buf, size_t n) {
    size_t o = 0;
    buf[0] = '\0';
    for (int i = 0; k->values && k->values[i] && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%s", i ? ", " : "", k->values[i][0] ? k->values[i] : "\"\"");
}

/* ---- the table checks itself ---- */

st_status st_cfg_schema_check(void) {
    static const size_t sizes[] = {sizeof(int64_t), sizeof(double), sizeof(bool), 0, 0, sizeof(st_int_list)};
    st_config *c = calloc(1, sizeof *c);
    if (!c) return st_fail(ST_ERR_NOMEM, "schema check: out of memory");
    st_status s = ST_OK;
    char ctx[128];
    for (int i = 0; i < st_cfg_nkeys && s == ST_OK; i++) {
        const st_cfg_key *k = &st_cfg_keys[i];
        size_t len = st_cfg_section_len(k->key);
        bool text = k->type == ST_CFG_STRING || k->type == ST_CFG_ENUM;
        snprintf(ctx, sizeof ctx, "schema: default of %s", k->key);
        if (text ? k->size < 2 : k->size != sizes[k->type])
            s = st_fail(ST_ERR_INTERNAL, "schema: %s: a field of %zu bytes does not fit its type", k->key,
                        k->size);
        else if (st_cfg_find(k->key) != i)
            s = st_fail(ST_ERR_INTERNAL, "schema: %s appears twice", k->key);
        else if (len && i > 0 && st_cfg_section_first(k->key, len) != i &&
                 (st_cfg_section_len(st_cfg_keys[i - 1].key) != len ||
                  strncmp(st_cfg_keys[i - 1].key, k->key, len)))
            s = st_fail(ST_ERR_INTERNAL, "schema: %s is apart from the rest of its section", k->key);
        else if ((k->type == ST_CFG_ENUM) != (k->values != NULL) || !k->doc || !k->doc[0] ||
                 !(k->lo <= k->hi))
            s = st_fail(ST_ERR_INTERNAL, "schema: %s: values, doc or range are wrong for its type", k->key);
        else if (k->count && (k->type != ST_CFG_INT_LIST || k->count > ST_CFG_LIST))
            s = st_fail(ST_ERR_INTERNAL, "schema: %s: a count for what is not a list of up to %d", k->key,
                        ST_CFG_LIST);
        else if ((s = st_cfg_assign_text(c, i, k->def, ctx)) == ST_OK && k->count &&
                 ((const st_int_list *)((const char *)c + k->off))->n != k->count)
            s = st_fail(ST_ERR_INTERNAL, "schema: %s: a default of other than %d entries", k->key, k->count);
    }
    int prow = st_cfg_find(ST_CFG_PRESET_KEY);
    for (int i = 0; i < st_cfg_npresets && s == ST_OK; i++) {
        const st_cfg_preset *p = &st_cfg_presets[i];
        int row = st_cfg_find(p->key);
        snprintf(ctx, sizeof ctx, "schema: preset %s", p->name);
        if (row < 0 || row == prow)
            s = st_fail(ST_ERR_INTERNAL, "%s: bad key %s", ctx, p->key);
        else if ((s = st_cfg_assign_text(c, prow, p->name, ctx)) == ST_OK)
            s = st_cfg_assign_text(c, row, p->value, ctx);
    }
    free(c);
    return s;
}
