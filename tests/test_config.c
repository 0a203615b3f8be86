/* The run configuration: defaults, YAML files in block and flow style, --set,
 * presets, every kind of error (each naming the file, line and key), the
 * printed sources, JSON round trips, and docs/config.md against the schema.
 *
 * `test_config --markdown` prints the generated reference part of docs/config.md. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "config_string.h"
#include "core/config_schema.h"
#include "scaletrain/config.h"

/* Write `text` to a new /tmp/st_cfg_XXXXXX.yaml; path[] receives its name. */
static void write_yaml(char path[64], const char *text) {
    snprintf(path, 64, "/tmp/st_cfg_XXXXXX.yaml");
    int fd = mkstemps(path, 5);
    CHECK(fd >= 0, "mkstemps: %s", strerror(errno));
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static const char *base(const char *path) { return strrchr(path, '/') + 1; }

static int64_t list_at(const st_int_list *l, int i) { return i < l->n ? l->v[i] : -999; }

static void test_defaults(void) {
    st_config c;
    st_config_defaults(&c);
    CHECK(!strcmp(c.model.type, "cnn"), "model.type %s", c.model.type);
    CHECK(c.model.preset[0] == '\0', "model.preset '%s'", c.model.preset);
    CHECK(c.model.hidden.n == 2 && c.model.hidden.v[0] == 1024 && c.model.hidden.v[1] == 1024, "hidden");
    CHECK(c.model.channels.n == 3 && list_at(&c.model.channels, 2) == 128, "channels");
    CHECK(c.model.pool.n == 3 && list_at(&c.model.pool, 0) == 0 && list_at(&c.model.pool, 1) == 1, "pool");
    CHECK(c.model.kernel == 3 && c.model.batchnorm && c.model.dropout == 0.0, "cnn keys");
    CHECK(c.model.n_layer == 4 && c.model.n_head == 4 && c.model.n_embd == 256 && c.model.block_size == 256,
          "gpt");
    CHECK(c.model.vocab_size == ST_AUTO && c.model.num_classes == ST_AUTO, "auto model keys");
    CHECK(!strcmp(c.data.type, "idx") && c.data.shuffle, "data");
    CHECK(!strcmp(c.data.train, "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"), "%s",
          c.data.train);
    CHECK(!strcmp(c.data.val_labels, "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz"),
          "val_labels");
    CHECK(c.train.steps == ST_AUTO && c.train.epochs == 1.0 && c.train.batch_size == 128, "train");
    CHECK(c.train.micro_batch_size == ST_AUTO && c.train.eval_batch_size == ST_AUTO &&
              c.train.threads == ST_AUTO,
          "train auto keys");
    CHECK(c.train.seed == 1 && c.train.eval_every == 0 && !strcmp(c.train.out_dir, "runs/default"), "train");
    CHECK(!strcmp(c.optim.type, "adamw") && c.optim.lr == 1e-3 && c.optim.beta2 == 0.999 &&
              c.optim.eps == 1e-8,
          "optim");
    CHECK(c.optim.momentum == 0.9 && !c.optim.nesterov && !strcmp(c.optim.schedule, "cosine"), "optim");
    CHECK(!strcmp(c.precision, "auto") && !strcmp(c.dist.strategy, "auto") && c.dist.bucket_cap_mb == 25.0,
          "dist");
    CHECK(c.dist.timeout_s == 600 && c.log.every == 10 && !strcmp(c.log.progress, "auto") &&
              !c.log.tensorboard,
          "log");
    CHECK(c.path[0] == '\0', "path");
    for (int i = 0; i < st_cfg_nkeys; i++)
        CHECK(st_config_source(&c, st_cfg_keys[i].key) == ST_SRC_DEFAULT, "%s source", st_cfg_keys[i].key);
    CHECK_OK(st_config_validate(&c));
}

static const char *block_yaml = "# a full run file, block style\n"
                                "model:\n"
                                "  type: mlp\n"
                                "  hidden:\n"
                                "    - 512\n"
                                "    - 256\n"
                                "  dropout: 0.1\n"
                                "  num_classes: 10\n"
                                "data:\n"
                                "  train: data/train.gz\n"
                                "  train_labels: \"data/train labels.gz\"\n"
                                "  val: ''\n"
                                "  shuffle: no\n"
                                "train:\n"
                                "  steps: 1e3\n"
                                "  batch_size: 256\n"
                                "  micro_batch_size: 64\n"
                                "  threads: auto\n"
                                "  out_dir: runs/mlp\n"
                                "optim:\n"
                                "  type: sgd\n"
                                "  lr: 6e-4\n"
                                "  nesterov: On\n"
                                "  schedule: linear\n"
                                "  warmup_steps: 100\n"
                                "precision: bf16\n"
                                "dist:\n"
                                "  strategy: zero1\n"
                                "  deterministic: yes\n"
                                "log:\n"
                                "  every: 5\n"
                                "  progress: off\n";

static void test_block_file(void) {
    char path[64], note[96];
    st_config c;
    st_config_defaults(&c);
    write_yaml(path, block_yaml);
    CHECK_OK(st_config_load(&c, path));
    CHECK(!strcmp(c.model.type, "mlp") && c.model.hidden.n == 2 && list_at(&c.model.hidden, 1) == 256,
          "model");
    CHECK(c.model.dropout == 0.1 && c.model.num_classes == 10, "model numbers");
    CHECK(!strcmp(c.data.train_labels, "data/train labels.gz") && c.data.val[0] == '\0' && !c.data.shuffle,
          "data");
    CHECK(c.train.steps == 1000 && c.train.batch_size == 256 && c.train.micro_batch_size == 64, "train");
    CHECK(c.train.threads == ST_AUTO && !strcmp(c.train.out_dir, "runs/mlp"), "train");
    CHECK(!strcmp(c.optim.type, "sgd") && c.optim.lr == 6e-4 && c.optim.nesterov, "optim");
    CHECK(!strcmp(c.optim.schedule, "linear") && c.optim.warmup_steps == 100, "optim");
    CHECK(!strcmp(c.precision, "bf16") && !strcmp(c.dist.strategy, "zero1") && c.dist.deterministic, "dist");
    CHECK(c.log.every == 5 && !strcmp(c.log.progress, "off"), "log");
    CHECK(!strcmp(c.path, path), "path %s", c.path);
    CHECK(st_config_source(&c, "optim.lr") == ST_SRC_FILE, "lr from the file");
    CHECK(st_config_source(&c, "optim.beta1") == ST_SRC_DEFAULT, "beta1 left at its default");
    snprintf(note, sizeof note, "%s:22", base(path));
    CHECK(!strcmp(c.note_[st_cfg_find("optim.lr")], note), "lr note %s", c.note_[st_cfg_find("optim.lr")]);
    CHECK_OK(st_config_validate(&c));
    unlink(path);
}

/* The example of the house plan (DESIGN.md), flow style, with a preset. */
static const char *flow_yaml =
    "model:     { type: gpt, preset: gpt2-124m }        # or n_layer/n_head/...\n"
    "data:      { type: tokens, train: data/train-*.bin, val: data/val.bin }\n"
    "train:     { steps: 5000, batch_size: 512, micro_batch_size: auto, seed: 1, eval_every: 250, "
    "out_dir: runs/gpt }\n"
    "optim:     { type: adamw, lr: 6e-4, weight_decay: 0.1, warmup_steps: 700, schedule: cosine, grad_clip: "
    "1.0 }\n"
    "precision: auto\n"
    "dist:      { strategy: auto, bucket_cap_mb: 25, deterministic: false, timeout_s: 600 }\n"
    "log:       { every: 10, tensorboard: true }\n";

static void test_flow_file_and_presets(void) {
    char path[64];
    st_config c;
    st_config_defaults(&c);
    write_yaml(path, flow_yaml);
    CHECK_OK(st_config_load(&c, path));
    CHECK(!strcmp(c.model.type, "gpt") && !strcmp(c.model.preset, "gpt2-124m"), "model");
    CHECK(c.model.n_layer == 12 && c.model.n_head == 12 && c.model.n_embd == 768, "preset shape");
    CHECK(c.model.vocab_size == 50257 && c.model.block_size == 1024, "preset vocab and block");
    CHECK(st_config_source(&c, "model.n_layer") == ST_SRC_DEFAULT, "a preset value is not from the file");
    CHECK(!strcmp(c.data.train, "data/train-*.bin") && c.train.steps == 5000 && c.train.eval_every == 250,
          "data");
    CHECK(c.train.micro_batch_size == ST_AUTO && c.optim.grad_clip == 1.0 && c.log.tensorboard, "rest");
    CHECK_OK(st_config_validate(&c));
    unlink(path);

    /* Explicit keys win over the preset, in the file and on the command line. */
    st_config_defaults(&c);
    write_yaml(path,
               "model:\n  n_layer: 6\n  preset: gpt2-124m\ndata: { type: tokens, train: t.bin, val: '' }\n");
    CHECK_OK(st_config_load(&c, path));
    CHECK(c.model.n_layer == 6 && c.model.n_head == 12 && !strcmp(c.model.type, "gpt"), "file beats preset");
    CHECK_OK(st_config_set(&c, "model.preset=gpt-small"));
    CHECK(c.model.n_layer == 6 && c.model.n_head == 4 && c.model.n_embd == 256 && c.model.vocab_size == 256,
          "switching presets");
    CHECK_OK(st_config_set(&c, "model.preset=\"\""));
    CHECK(c.model.vocab_size == ST_AUTO && !strcmp(c.model.type, "cnn") && c.model.n_layer == 6,
          "no preset: the defaults come back");
    CHECK_OK(st_config_set(&c, "model.n_head=8"));
    CHECK_OK(st_config_set(&c, "model.preset=gpt2-124m"));
    CHECK(c.model.n_head == 8 && c.model.n_embd == 768, "--set beats preset");
    CHECK_OK(st_config_validate(&c));
    unlink(path);
}

static void test_set(void) {
    st_config c;
    char path[64];
    st_config_defaults(&c);
    write_yaml(path, "optim:\n  lr: 6e-4\n  weight_decay: 0.1\n");
    CHECK_OK(st_config_load(&c, path));
    CHECK_OK(st_config_set(&c, "optim.lr=3e-4"));
    CHECK(c.optim.lr == 3e-4 && c.optim.weight_decay == 0.1, "--set after the file wins, the rest stays");
    CHECK(st_config_source(&c, "optim.lr") == ST_SRC_SET &&
              st_config_source(&c, "optim.weight_decay") == ST_SRC_FILE,
          "sources");
    CHECK_OK(st_config_set(&c, "optim.schedule=constant"));
    CHECK_OK(st_config_set(&c, "data.shuffle=off"));
    CHECK_OK(st_config_set(&c, " model.hidden = [512,256, 128]"));
    CHECK_OK(st_config_set(&c, "model.channels=[16]"));
    CHECK_OK(st_config_set(&c, "model.pool=1"));
    CHECK_OK(st_config_set(&c, "train.steps=100"));
    CHECK_OK(st_config_set(&c, "train.steps=auto"));
    CHECK_OK(st_config_set(&c, "data.val="));
    CHECK_OK(st_config_set(&c, "train.out_dir=runs/with space"));
    /* UTF-8: libyaml's marks count characters, the check of what follows the value bytes (every non-ASCII
     * value was refused as having its last bytes after it) */
    CHECK_OK(st_config_set(&c, "data.val=donn\xc3\xa9"
                               "es/caf\xc3\xa9.tokens"));
    CHECK(!strcmp(c.data.val, "donn\xc3\xa9"
                              "es/caf\xc3\xa9.tokens"),
          "a UTF-8 value: %s", c.data.val);
    CHECK_OK(st_config_set(&c, "data.val=\"\xe6\x97\xa5\xe6\x9c\xac\""));
    CHECK_FAILS(st_config_set(&c, "data.val=\"\xc3\xa9\" b"), ST_ERR_CONFIG, "has 'b' after its value");
    CHECK_OK(st_config_set(&c, "data.val="));
    CHECK(!strcmp(c.optim.schedule, "constant") && !c.data.shuffle, "enum and bool");
    CHECK(c.model.hidden.n == 3 && list_at(&c.model.hidden, 2) == 128, "list");
    CHECK(c.model.channels.n == 1 && c.model.pool.n == 1 && list_at(&c.model.pool, 0) == 1,
          "one-entry lists");
    CHECK(c.train.steps == ST_AUTO && c.data.val[0] == '\0' && !strcmp(c.train.out_dir, "runs/with space"),
          "auto and strings");
    CHECK_OK(st_config_validate(&c));

    /* Errors name the --set argument and leave the value alone. */
    CHECK_FAILS(st_config_set(&c, "optim.lr=abc"), ST_ERR_CONFIG,
                "--set optim.lr=abc: expected a number, got 'abc'");
    CHECK(c.optim.lr == 3e-4, "a failed --set changes nothing");
    CHECK_FAILS(st_config_set(&c, "optim.lrr=1"), ST_ERR_CONFIG,
                "unknown key optim.lrr; known keys in optim: type");
    CHECK_FAILS(st_config_set(&c, "optim.lrr=1"), ST_ERR_CONFIG, "did you mean optim.lr?");
    CHECK_FAILS(st_config_set(&c, "optim.lr"), ST_ERR_CONFIG, "--set optim.lr: expected key=value");
    /* a line break in a value: refused (YAML folded it into a space, unsaid) */
    CHECK_FAILS(st_config_set(&c, "train.out_dir=/tmp/a\nb"), ST_ERR_CONFIG,
                "--set train.out_dir=/tmp/a...: the value holds a line break (after 6 bytes)");
    CHECK_FAILS(st_config_set(&c, "data.train=x\r"), ST_ERR_CONFIG, "the value holds a line break");
    CHECK_FAILS(st_config_set(&c, "optim=1"), ST_ERR_CONFIG, "optim is a section");
    /* a section mistyped: the key of that name in the section it is near (it said "did you mean optim?",
     * and nothing for trian.steps) */
    CHECK_FAILS(st_config_set(&c, "optimizer.lr=1"), ST_ERR_CONFIG, "did you mean optim.lr?");
    CHECK_FAILS(st_config_set(&c, "trian.steps=1"), ST_ERR_CONFIG, "did you mean train.steps?");
    /* other tools' names for a key, in any section */
    CHECK_FAILS(st_config_set(&c, "optim.learning_rate=1"), ST_ERR_CONFIG, "did you mean optim.lr?");
    CHECK_FAILS(st_config_set(&c, "train.max_grad_norm=1"), ST_ERR_CONFIG, "did you mean optim.grad_clip?");
    CHECK_FAILS(st_config_set(&c, "train.gradient_accumulation_steps=4"), ST_ERR_CONFIG,
                "did you mean train.micro_batch_size? (it sets the accumulation");
    /* a name with an invisible character (a zero-width space) or a look-alike letter (a Cyrillic e) */
    CHECK_FAILS(st_config_set(&c, "train.steps\xe2\x80\x8b=3"), ST_ERR_CONFIG,
                "the name holds a character that is not ASCII, at byte 6 of 'steps");
    CHECK_FAILS(st_config_set(&c, "train.st\xd0\xb5ps=3"), ST_ERR_CONFIG,
                "the name holds a character that is not ASCII, at byte 3 of 'st");
    CHECK_FAILS(st_config_set(&c, "model.hidden=[512,"), ST_ERR_CONFIG,
                "--set model.hidden=[512,: '[512,' is not");
    CHECK_FAILS(st_config_set(&c, "model.hidden=[512,x]"), ST_ERR_CONFIG,
                "entry 2: expected an integer, got 'x'");
    CHECK(c.model.hidden.n == 3, "a failed list --set changes nothing");
    CHECK_FAILS(st_config_set(&c, "optim.schedule=cosin"), ST_ERR_CONFIG, "did you mean cosine?");
    /* other tools' names for a value: the one meant (bfloat16 had no guess, fsdp and zero3 were offered
     * ddp and zero1), and what to use where none is built */
    CHECK_FAILS(st_config_set(&c, "precision=bfloat16"), ST_ERR_CONFIG, "did you mean bf16?");
    CHECK_FAILS(st_config_set(&c, "precision=16-mixed"), ST_ERR_CONFIG, "did you mean fp16?");
    CHECK_FAILS(st_config_set(&c, "dist.strategy=FSDP"), ST_ERR_CONFIG,
                "did you mean zero2 (ZeRO-3 and FSDP, which shard the weights too, are not built");
    CHECK_FAILS(st_config_set(&c, "dist.strategy=zero3"), ST_ERR_CONFIG, "did you mean zero2 (ZeRO-3");
    CHECK_FAILS(st_config_set(&c, "optim.type=adam"), ST_ERR_CONFIG,
                "did you mean adamw (with optim.weight_decay: 0");
    /* a YAML comment in a --set value would cut it short: refused; quoted, or
     * a '#' inside a word, the value is whole */
    CHECK_FAILS(st_config_set(&c, "train.out_dir=runs/a #2"), ST_ERR_CONFIG,
                "--set train.out_dir=runs/a #2: 'runs/a #2' holds a YAML comment from '#2' on");
    CHECK_FAILS(st_config_set(&c, "data.val=#held-out"), ST_ERR_CONFIG,
                "holds a YAML comment from '#held-out'");
    CHECK_FAILS(st_config_set(&c, "model.hidden=[512] # wide"), ST_ERR_CONFIG, "from '# wide' on");
    CHECK(!strcmp(c.train.out_dir, "runs/with space") && c.data.val[0] == '\0' && c.model.hidden.n == 3,
          "a refused comment changes nothing");
    CHECK_OK(st_config_set(&c, "train.out_dir=\"runs/a #2\""));
    CHECK(!strcmp(c.train.out_dir, "runs/a #2"), "quoted: '%s'", c.train.out_dir);
    CHECK_OK(st_config_set(&c, "train.out_dir=runs/a#2"));
    CHECK(!strcmp(c.train.out_dir, "runs/a#2"), "a '#' inside a word: '%s'", c.train.out_dir);
    CHECK_OK(st_config_set(&c, "train.out_dir=runs/with space"));
    /* train.device: cuda:N, a GPU by its number (0 to 999, no leading zero) */
    CHECK_OK(st_config_set(&c, "train.device=cuda:1"));
    CHECK(!strcmp(c.train.device, "cuda:1"), "train.device cuda:1 reads '%s'", c.train.device);
    CHECK_OK(st_config_set(&c, "train.device=cuda:0"));
    CHECK_OK(st_config_set(&c, "train.device=cuda:15"));
    CHECK(!strcmp(c.train.device, "cuda:15"), "train.device cuda:15 reads '%s'", c.train.device);
    const char *bad_devices[] = {"cuda:",     "cuda:x", "cuda:-1", "cuda:01",
                                 "cuda:1000", "cuda:N", "gpu:0",   "cud:1"};
    for (size_t i = 0; i < sizeof bad_devices / sizeof *bad_devices; i++) {
        char arg[64];
        snprintf(arg, sizeof arg, "train.device=%s", bad_devices[i]);
        CHECK_FAILS(st_config_set(&c, arg), ST_ERR_CONFIG, "one of auto, cpu, cuda, cuda:N");
        CHECK(!strcmp(c.train.device, "cuda:15"), "a failed train.device=%s left '%s'", bad_devices[i],
              c.train.device);
    }
    CHECK_OK(st_config_set(&c, "train.device=auto"));
    CHECK_FAILS(st_config_set(&c, "train.micro_batch_size=0"), ST_ERR_CONFIG,
                "0 is out of range; it must be >= 1");
    CHECK_FAILS(st_config_set(&c, "train.batch_size=auto"), ST_ERR_CONFIG, "auto is not accepted here");
    CHECK_FAILS(st_config_set(&c, "model.dropout=1"), ST_ERR_CONFIG, "it must be >= 0 and < 1");
    CHECK_FAILS(st_config_set(&c, "optim.lr=nan"), ST_ERR_CONFIG, "expected a number");
    CHECK_FAILS(st_config_set(&c, "optim.lr=1e999"), ST_ERR_CONFIG, "too large");
    /* 2^53 + 1 (whose double is 2^53) and a nonzero number that rounds to 0 */
    CHECK_FAILS(st_config_set(&c, "train.seed=9007199254740993"), ST_ERR_CONFIG,
                "'9007199254740993' is too large; integers are limited to 2^53");
    CHECK_OK(st_config_set(&c, "train.seed=9007199254740992"));
    CHECK_FAILS(st_config_set(&c, "optim.weight_decay=1e-400"), ST_ERR_CONFIG,
                "'1e-400' is too small: it rounds to 0");
    CHECK_FAILS(st_config_set(&c, "train.seed=1e-400"), ST_ERR_CONFIG, "'1e-400' is too small");
    CHECK_OK(st_config_set(&c, "optim.weight_decay=0.0e5"));
    CHECK_OK(st_config_set(&c, "train.seed=1"));
    CHECK_FAILS(st_config_set(&c, "data.shuffle=2"), ST_ERR_CONFIG, "expected true or false");
    CHECK_FAILS(st_config_set(&c, "optim.lr={a: 1}"), ST_ERR_CONFIG, "got a mapping");
    unlink(path);
}

/* Loading `yaml` fails with a message naming "<file>:<line>: <key>" and holding `needle`;
 * the configuration is left as it was. */
static void expect_load_error(const char *yaml, int line, const char *key, const char *needle) {
    char path[64], where[160];
    st_config c, before;
    st_config_defaults(&c);
    before = c;
    write_yaml(path, yaml);
    snprintf(where, sizeof where, "%s:%d:%s%s", path, line, key[0] ? " " : "", key);
    st_clear_error();
    st_status s = st_config_load(&c, path);
    const char *msg = st_last_error();
    CHECK(s == ST_ERR_CONFIG, "loading %s returned %s: %s", key, st_status_name(s), msg);
    CHECK(strstr(msg, where), "'%s' not in \"%s\"", where, msg);
    CHECK(strstr(msg, needle), "'%s' not in \"%s\"", needle, msg);
    CHECK(!memcmp(&c, &before, sizeof c), "a failed load changed the configuration (%s)", key);
    unlink(path);
}

static void test_file_errors(void) {
    expect_load_error("optim:\n  type: adamw\n  lrr: 3e-4\n", 3, "optim.lrr",
                      "unknown key; known keys in optim: type, lr, weight_decay");
    expect_load_error("optim:\n  type: adamw\n  lrr: 3e-4\n", 3, "optim.lrr", "did you mean optim.lr?");
    expect_load_error("train:\n  lr: 1e-3\n", 2, "train.lr", "lr is a key of section optim");
    /* a block list's bad entry names its own line (the key's alone sent the reader to line 3) */
    expect_load_error("model:\n  hidden:\n    - 16\n    - 8\n    - abc\n", 2, "model.hidden",
                      "entry 3 (line 5): expected an integer, got 'abc'");
    /* a block scalar's line end is shown as \n, the message one line */
    expect_load_error("optim:\n  lr: |\n    0.1\n", 2, "optim.lr", "expected a number, got '0.1\\n'");
    /* a Latin-1 byte: said to be no UTF-8, with its place (it was YAML's "incomplete UTF-8 octet sequence ...
     * quote it", which quoting did not mend) */
    st_config lc;
    st_config_defaults(&lc);
    CHECK_FAILS(st_config_set(&lc, "train.out_dir=/tmp/caf\xe9"), ST_ERR_CONFIG,
                "the value is not UTF-8 text: byte 9 is \\xe9 (Latin-1?)");
    /* a shell pattern starts a YAML alias: said, with the quoting (it said "fix the brackets") */
    st_config sc;
    st_config_defaults(&sc);
    CHECK_FAILS(st_config_set(&sc, "data.train=*.bin"), ST_ERR_CONFIG,
                "a value that starts with '*' is read as YAML's alias; quote it (--set 'key=\"*.bin\"')");
    /* a key of another section wins over a near name here (it said "did you mean optim.eps?") */
    expect_load_error("optim:\n  steps: 3\n", 2, "optim.steps",
                      "steps is a key of section train (train.steps)");
    expect_load_error("optim:\n  <<: { lr: 0.1 }\n", 2, "optim",
                      "'<<' is a YAML merge key, which scaletrain does not read");
    expect_load_error("model: {}\noptimizer:\n  lr: 1\n", 2, "optimizer",
                      "unknown section; the sections are "
                      "model, data, train, optim, precision, dist, log; did you mean optim?");
    expect_load_error("model: {}\ntrain:\n  batch_size: abc\n", 3, "train.batch_size",
                      "expected an integer, got 'abc'");
    expect_load_error("train: { batch_size: 1.5 }\n", 1, "train.batch_size", "expected a whole number");
    expect_load_error("train: { batch_size: auto }\n", 1, "train.batch_size", "auto is not accepted here");
    expect_load_error("train: { steps: x }\n", 1, "train.steps", "expected an integer or auto, got 'x'");
    expect_load_error("data:\n  shuffle: maybe\n", 2, "data.shuffle", "expected true or false");
    expect_load_error("\n\n\noptim: { schedule: cosin }\n", 4, "optim.schedule",
                      "'cosin' is not one of constant, cosine, linear; did you mean cosine?");
    expect_load_error("model:\n  preset: gpt3\n", 2, "model.preset",
                      "is not one of \"\", gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1558m, gpt-small");
    expect_load_error("optim:\n  lr: 12\n", 2, "optim.lr", "12 is out of range; it must be >= 1e-30 and < 10");
    expect_load_error("optim:\n  lr: .nan\n", 2, "optim.lr", "expected a number, got '.nan'");
    expect_load_error("model:\n  hidden: [512, x]\n", 2, "model.hidden",
                      "entry 2: expected an integer, got 'x'");
    expect_load_error("model:\n  hidden: [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]\n", 2, "model.hidden",
                      "too many entries; at most 16");
    expect_load_error("model:\n  channels: { a: 1 }\n", 2, "model.channels", "expected a list of integers");
    expect_load_error("model:\n  pool: [0, 2]\n", 2, "model.pool",
                      "entry 2: 2 is out of range; it must be >= 0 and <= 1");
    expect_load_error("optim: adamw\n", 1, "optim",
                      "expected a mapping of keys, e.g. optim: { type: ... }, got 'adamw'");
    expect_load_error("optim:\n  lr: 1e-3\n  lr: 2e-3\n", 3, "optim.lr",
                      "duplicate key (first set on line 2)");
    expect_load_error("optim: { lr: 1e-3 }\nlog: {}\noptim: { eps: 1e-6 }\n", 3, "optim",
                      "duplicate section (first on line 1)");
    expect_load_error("precision: [fp32]\n", 1, "precision",
                      "expected one of auto, fp32, bf16, fp16, got a list");
    expect_load_error("model: {}\noptim.lr: 1e-3\n", 2, "optim.lr", "write it inside its section");
    expect_load_error("model:\n  type: [cnn\n  kernel: 3\n", 3, "", "YAML syntax error");
    expect_load_error("model:\n  type: cnn\n kernel: 3\n", 3, "", "YAML syntax error");
    /* a tab in the indentation is named as such (libyaml says only that a
     * character cannot start a token), after a line of spaces too; a tab
     * between a key and its value is YAML's own and loads */
    expect_load_error("train:\n\tsteps: 3\n", 2, "",
                      "line 2 is indented with a tab; YAML indents with spaces");
    expect_load_error("train:\n  steps: 3\n \tbatch_size: 4\n", 3, "", "line 3 is indented with a tab");
    {
        char path[64];
        st_config c;
        st_config_defaults(&c);
        write_yaml(path, "train: {steps:\t3}\n");
        CHECK(st_config_load(&c, path) == ST_OK && c.train.steps == 3, "a tab after a key's colon: %s",
              st_last_error());
        unlink(path);
    }
    expect_load_error("model: {}\n---\ntrain: {}\n", 2, "", "a second YAML document");
    expect_load_error("- model\n- train\n", 1, "", "expected a mapping of sections");

    char big[600];
    snprintf(big, sizeof big, "data:\n  train: %0300d\n", 7);
    expect_load_error(big, 2, "data.train", "the value is 300 bytes long; at most 255 fit");

    st_config c;
    st_config_defaults(&c);
    CHECK_FAILS(st_config_load(&c, "/tmp/st_cfg_no_such_file.yaml"), ST_ERR_IO,
                "/tmp/st_cfg_no_such_file.yaml: cannot open the config file");
    CHECK_FAILS(st_config_load(&c, "/tmp"), ST_ERR_IO, "/tmp: cannot read the config file");
}

static void test_odd_but_valid_files(void) {
    char path[64];
    st_config c;
    st_config_defaults(&c);
    write_yaml(path, "");
    CHECK_OK(st_config_load(&c, path));
    unlink(path);
    write_yaml(path, "# only comments\nlog:\ndist: ~\nmodel:\n  channels: [8, 16]\n  pool: [1, 1]\n"
                     "  kernel: 5.0\n  batchnorm: FALSE\n  num_classes: 'auto'\n");
    CHECK_OK(st_config_load(&c, path));
    CHECK(c.model.channels.n == 2 && c.model.kernel == 5 && !c.model.batchnorm,
          "channels, kernel, batchnorm");
    CHECK(c.model.num_classes == ST_AUTO, "quoted auto");
    CHECK_OK(st_config_validate(&c));
    unlink(path);
}

static void expect_invalid(const char *const *sets, int n, const char *needle, const char *needle2) {
    st_config c;
    st_config_defaults(&c);
    for (int i = 0; i < n; i++)
        CHECK_OK(st_config_set(&c, sets[i]));
    CHECK_FAILS(st_config_validate(&c), ST_ERR_CONFIG, needle);
    CHECK_FAILS(st_config_validate(&c), ST_ERR_CONFIG, needle2);
}

#define INVALID(needle, needle2, ...)                                                                        \
    expect_invalid((const char *const[]){__VA_ARGS__},                                                       \
                   sizeof((const char *const[]){__VA_ARGS__}) / sizeof(char *), needle, needle2)

static void test_validate(void) {
    INVALID("model.n_embd (250, --set) is not divisible by model.n_head (4, default)", "multiple of n_head",
            "model.type=gpt", "data.type=tokens", "model.n_embd=250");
    INVALID("model.type (gpt, --set) trains on tokens but data.type (idx, default)", "set data.type: tokens",
            "model.type=gpt");
    INVALID("model.type (cnn, default) reads images", "data.type (tokens, --set)", "data.type=tokens");
    INVALID("model.pool ([1, 1], --set) has 2 entries but model.channels ([32, 64, 128], default) has 3",
            "one pool entry per conv block", "model.pool=[1,1]");
    INVALID("model.channels ([], --set) is empty", "at least one conv block", "model.channels=[]",
            "model.pool=[]");
    INVALID("train.micro_batch_size (48, --set) does not divide train.batch_size (128, default)",
            "equal micro", "train.micro_batch_size=48");
    INVALID("data.train (\"\", --set) is empty", "training images", "data.train=");
    INVALID("model.preset (gpt-small, --set) is a gpt shape but model.type (cnn, --set)", "remove the preset",
            "model.type=cnn", "model.preset=gpt-small");
    INVALID("optim.warmup_steps (700, --set) is longer than train.steps (500, --set)", "train longer",
            "train.steps=500", "optim.warmup_steps=700");
    INVALID("train.eval_every (50, --set) asks for evaluations", "data.val is empty", "train.eval_every=50",
            "data.val=");
    INVALID("data.val_labels (\"\", --set) is empty", "data.val: \"\"", "data.val_labels=");
    INVALID("optim.nesterov (true, --set)", "momentum > 0", "optim.type=sgd", "optim.nesterov=true",
            "optim.momentum=0");
    INVALID("model.matmul_tune (on, --set) chooses each matrix product's algorithm by timing it",
            "dist.deterministic (true, --set) promises the same bits", "model.matmul_tune=on",
            "dist.deterministic=true");

    /* A file's line shows in the cross-key message. */
    char path[64], needle[160];
    st_config c;
    st_config_defaults(&c);
    write_yaml(path, "model:\n  type: cnn\n  pool: [1]\n");
    CHECK_OK(st_config_load(&c, path));
    snprintf(needle, sizeof needle, "%s: model.pool ([1], %s:3) has 1 entries", path, base(path));
    CHECK_FAILS(st_config_validate(&c), ST_ERR_CONFIG, needle);
    unlink(path);
}

/* st_config_validate_data (the commands that read the data): a non-idx
 * data.type with a path left at its Fashion-MNIST default fails, naming the
 * key and the fix; the cross-key checks alone pass (plan reads no data). */
static void expect_data(const char *const *sets, int n, const char *needle, const char *needle2) {
    st_config c;
    st_config_defaults(&c);
    for (int i = 0; i < n; i++)
        CHECK_OK(st_config_set(&c, sets[i]));
    CHECK_OK(st_config_validate(&c));
    if (!needle) {
        CHECK_OK(st_config_validate_data(&c, false));
        return;
    }
    CHECK_FAILS(st_config_validate_data(&c, false), ST_ERR_CONFIG, needle);
    CHECK_FAILS(st_config_validate_data(&c, false), ST_ERR_CONFIG, needle2);
}

#define DATA(needle, needle2, ...)                                                                           \
    expect_data((const char *const[]){__VA_ARGS__},                                                          \
                sizeof((const char *const[]){__VA_ARGS__}) / sizeof(char *), needle, needle2)

static void test_validate_data(void) {
    DATA(NULL, NULL, "train.steps=3"); /* idx: the defaults are its files */
    DATA("data.train (/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz, default) is "
         "Fashion-MNIST's "
         "idx file but data.type (tokens, --set)",
         "set data.train to the token file", "model.type=gpt", "data.type=tokens");
    DATA("data.val (/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz, default)",
         "data.val: \"\" to train without evaluation", "model.type=gpt", "data.type=tokens",
         "data.train=a.tokens");
    DATA(NULL, NULL, "model.type=gpt", "data.type=tokens", "data.train=a.tokens", "data.val=");
    DATA(NULL, NULL, "model.type=gpt", "data.type=tokens", "data.train=a.tokens", "data.val=b.tokens");
    DATA("data.train_labels (/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz, default)",
         "labels .npy file", "data.type=npy", "data.train=x.npy");
    DATA("data.val (/usr/share", "validation inputs .npy file", "data.type=npy", "data.train=x.npy",
         "data.train_labels=y.npy");
    DATA("data.val_labels (/usr/share", "validation labels .npy file", "data.type=npy", "data.train=x.npy",
         "data.train_labels=y.npy", "data.val=vx.npy");
    DATA(NULL, NULL, "data.type=npy", "data.train=x.npy", "data.train_labels=y.npy", "data.val=");
    /* an evaluation of tokens reads data.val alone: data.train is not asked for (it was refused) */
    st_config c;
    st_config_defaults(&c);
    CHECK_OK(st_config_set(&c, "model.type=gpt"));
    CHECK_OK(st_config_set(&c, "data.type=tokens"));
    CHECK_OK(st_config_set(&c, "data.val=v.tokens"));
    CHECK_OK(st_config_validate_data(&c, true));
    CHECK_FAILS(st_config_validate_data(&c, false), ST_ERR_CONFIG, "set data.train to the token file");
    CHECK_OK(st_config_set(&c, "data.val_split=0.1")); /* (held out of data.train: it is read) */
    CHECK_OK(st_config_set(&c, "data.val="));
    CHECK_FAILS(st_config_validate_data(&c, true), ST_ERR_CONFIG, "set data.train to the token file");
}

static void test_print(void) {
    char path[64], want[128];
    st_config c, back;
    st_config_defaults(&c);
    /* (a value holding control characters: printed escaped, read back the same) */
    write_yaml(path, "model: { type: gpt, preset: gpt2-124m }\ndata: { type: tokens, train: 'a #b.bin', val: "
                     "'', val_labels: \"v\\x01\\r.gz\" }\n"
                     "optim:\n  lr: 6e-4\n");
    CHECK_OK(st_config_load(&c, path));
    CHECK_OK(st_config_set(&c, "train.batch_size=64"));
    CHECK_OK(st_config_set(&c, "data.train_labels=true"));
    c.train.threads = 8;
    st_config_mark_auto(&c, "train.threads", "8 cores available");
    c.model.num_classes = 10;
    st_config_mark_auto(&c, "model.num_classes", "10 classes in the training labels");
    CHECK(st_config_source(&c, "train.threads") == ST_SRC_AUTO, "marked auto");
    char *out = st_test_config_string(&c);
    CHECK(out != NULL, "print");
    if (!out) return;
    snprintf(want, sizeof want, "# %s:4", base(path));
    CHECK(strstr(out, "optim:\n") && strstr(out, "\nprecision:") && strstr(out, "  lr:"), "layout:\n%s", out);
    CHECK(strstr(out, want), "'%s' in:\n%s", want, out);
    CHECK(strstr(out, "  batch_size:") && strstr(out, "64 ") && strstr(out, "# --set"), "--set shown");
    CHECK(strstr(out, "# default\n"), "defaults shown");
    CHECK(strstr(out, "# auto: 10 classes in the training labels\n"), "auto reason shown:\n%s", out);
    CHECK(strstr(out, "# preset gpt2-124m\n"), "preset shown");
    CHECK(strstr(out, "\"a #b.bin\"") && strstr(out, "\"true\"") && strstr(out, "val:"), "strings quoted");
    CHECK(strstr(out, "\"v\\x01\\r.gz\""), "control characters escaped:\n%s", out);
    /* Every comment starts in the same column (values here are all short). */
    int col = -1;
    for (char *line = out; *line;) {
        char *end = strchr(line, '\n'), *hash = strstr(line, "  # ");
        if (hash && hash < end) {
            if (col < 0) col = (int)(hash - line);
            CHECK((int)(hash - line) == col, "comment column %d, not %d: %.*s", (int)(hash - line), col,
                  (int)(end - line), line);
        }
        line = end + 1;
    }

    /* What it prints reads back as the same configuration. */
    char printed[64];
    write_yaml(printed, out);
    st_config_defaults(&back);
    CHECK_OK(st_config_load(&back, printed));
    char *a = st_config_to_json(&c), *b = st_config_to_json(&back);
    CHECK(a && b && !strcmp(a, b), "printed config reads back differently:\n%s\n%s", a, b);
    free(a);
    free(b);
    free(out);
    unlink(printed);
    unlink(path);
}

/* Keys given at another value than their default that the run does not
 * read: warned of, naming the key that decides; a key at its default, or a
 * key the run reads, says nothing; nor does a printed configuration read
 * back (every key given, the others at their defaults). */
static void test_unused(void) {
    st_config c;
    st_config_defaults(&c);
    char buf[4096];
    const char *sets[] = {"model.type=mlp",          "model.channels=[4]", "model.hidden=[8]",
                          "optim.type=sgd",          "optim.beta1=0.8",    "optim.momentum=0.5",
                          "optim.schedule=constant", "optim.min_lr=0.1",   "optim.loss_scale=1024",
                          "model.kernel=3",          "precision=fp32"};
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++)
        CHECK_OK(st_config_set(&c, sets[i]));
    st_config_unused(&c, 2, buf, sizeof buf);
    const char *want[] = {"model.channels ([4], --set) is not used: it applies to cnn, and this run has "
                          "model.type (mlp, --set)\n",
                          "optim.beta1 (0.8, --set) is not used: it applies to adamw, and this run has "
                          "optim.type (sgd, --set)\n",
                          "optim.min_lr (0.1, --set) is not used: a decay ends there, and this run has "
                          "optim.schedule (constant, "
                          "--set), one rate\n",
                          "optim.loss_scale (1024, --set) is not used: it applies to fp16, and this run has "
                          "precision (fp32, --set)"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        CHECK(strstr(buf, want[i]), "'%s' in:\n%s", want[i], buf);
    CHECK(!strstr(buf, "model.hidden") && !strstr(buf, "momentum") && !strstr(buf, "model.kernel"),
          "a key read, or at its default, warned of:\n%s", buf);
    /* the printed configuration read back: every key from the file, no warning */
    st_config_defaults(&c);
    CHECK_OK(st_config_set(&c, "model.type=mlp"));
    CHECK_OK(st_config_set(&c, "optim.type=sgd"));
    char *out = st_test_config_string(&c), path[64];
    CHECK(out != NULL, "print");
    if (!out) return;
    write_yaml(path, out);
    st_config back;
    st_config_defaults(&back);
    CHECK_OK(st_config_load(&back, path));
    st_config_unused(&back, 1, buf, sizeof buf);
    CHECK(!buf[0], "a printed configuration warned of:\n%s", buf);
    free(out);
    unlink(path);
    /* one rank: the keys only several read, in one line; on two, nothing (they are read) */
    st_config_defaults(&c);
    CHECK_OK(st_config_set(&c, "dist.grad_dtype=bf16"));
    CHECK_OK(st_config_set(&c, "dist.bucket_cap_mb=50"));
    CHECK_OK(st_config_set(&c, "dist.deterministic=true"));
    st_config_unused(&c, 1, buf, sizeof buf);
    CHECK(!strcmp(buf,
                  "scaletrain: warning: dist.bucket_cap_mb (50, --set), dist.grad_dtype (bf16, --set) are "
                  "not used: they apply to runs of several ranks, and this run has one (scaletrain launch "
                  "-n N starts N)\n"),
          "one rank:\n%s", buf);
    st_config_unused(&c, 2, buf, sizeof buf);
    CHECK(!buf[0], "two ranks warned of:\n%s", buf);
    /* (one rank with dist.comm nccl all-reduces its buckets through NCCL: their size is read) */
    CHECK_OK(st_config_set(&c, "dist.comm=nccl"));
    st_config_unused(&c, 1, buf, sizeof buf);
    CHECK(strstr(buf, "dist.grad_dtype (bf16, --set) is not used") && !strstr(buf, "bucket_cap_mb"),
          "one rank, dist.comm nccl:\n%s", buf);
}

static void test_json(void) {
    st_config c, back;
    st_config_defaults(&c);
    CHECK_OK(st_config_set(&c, "optim.lr=3e-4"));
    CHECK_OK(st_config_set(&c, "model.hidden=[512,256]"));
    CHECK_OK(st_config_set(&c, "data.shuffle=false"));
    CHECK_OK(st_config_set(&c, "precision=fp16"));
    CHECK_OK(st_config_set(&c, "model.dropout=0.1"));
    CHECK_OK(st_config_set(&c, "data.val=\"quote \\\" and \\\\ backslash\""));
    char *text = st_config_to_json(&c);
    CHECK(text != NULL, "to_json");
    cJSON *root = cJSON_Parse(text);
    CHECK(root != NULL, "JSON parses: %s", text);
    if (!root) {
        free(text);
        return;
    }
    cJSON *optim = cJSON_GetObjectItemCaseSensitive(root, "optim"),
          *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    cJSON *lr = cJSON_GetObjectItemCaseSensitive(optim, "lr"),
          *hidden = cJSON_GetObjectItemCaseSensitive(model, "hidden");
    cJSON *steps = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "train"), "steps");
    cJSON *shuffle =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "data"), "shuffle");
    cJSON *precision = cJSON_GetObjectItemCaseSensitive(root, "precision");
    CHECK(cJSON_IsNumber(lr) && lr->valuedouble == 3e-4, "optim.lr");
    CHECK(cJSON_GetArraySize(hidden) == 2 && cJSON_GetArrayItem(hidden, 1)->valuedouble == 256,
          "model.hidden");
    CHECK(cJSON_IsString(steps) && !strcmp(steps->valuestring, "auto"), "train.steps");
    CHECK(cJSON_IsFalse(shuffle), "data.shuffle");
    CHECK(cJSON_IsString(precision) && !strcmp(precision->valuestring, "fp16"), "precision");
    int nkeys = 0;
    for (cJSON *sec = root->child; sec; sec = sec->next)
        nkeys += cJSON_IsObject(sec) ? cJSON_GetArraySize(sec) : 1;
    CHECK(nkeys == st_cfg_nkeys, "%d keys in JSON, %d in the schema", nkeys, st_cfg_nkeys);

    /* Round trip: every JSON value, given back through --set, rebuilds the same configuration. */
    st_config_defaults(&back);
    for (int i = 0; i < st_cfg_nkeys; i++) {
        const char *key = st_cfg_keys[i].key;
        size_t seclen = st_cfg_section_len(key);
        char sec[32], assignment[600];
        snprintf(sec, sizeof sec, "%.*s", (int)seclen, key);
        cJSON *v = seclen ? cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, sec),
                                                             st_cfg_leaf(key))
                          : cJSON_GetObjectItemCaseSensitive(root, key);
        char *vt = v ? cJSON_PrintUnformatted(v) : NULL;
        CHECK(vt != NULL, "%s missing from the JSON", key);
        if (!vt) continue;
        snprintf(assignment, sizeof assignment, "%s=%s", key, vt);
        CHECK_OK(st_config_set(&back, assignment));
        free(vt);
    }
    char *again = st_config_to_json(&back);
    CHECK(again && !strcmp(text, again), "JSON round trip differs:\n%s\n%s", text, again);
    CHECK(!strcmp(back.data.val, "quote \" and \\ backslash"), "escapes: %s", back.data.val);
    free(again);
    cJSON_Delete(root);
    free(text);
}

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (buf) buf[fread(buf, 1, (size_t)n, f)] = '\0';
    fclose(f);
    return buf;
}

static void test_docs(void) {
    const char *path = "docs/config.md";
    char *doc = read_text(path);
    if (!doc) doc = read_text(path = "../docs/config.md");
    CHECK(doc != NULL, "docs/config.md not found; run the test from the repository root");
    if (!doc) return;
    for (int i = 0; i < st_cfg_nkeys; i++) {
        char needle[80];
        snprintf(needle, sizeof needle, "`%s`", st_cfg_keys[i].key);
        CHECK(strstr(doc, needle), "docs/config.md does not mention %s", needle);
    }
    char *md = st_config_schema_markdown();
    CHECK(md && strstr(doc, md), "docs/config.md's reference differs from the schema; regenerate it with "
                                 "`build/tests/test_config --markdown` and paste it in");
    /* The example file in the docs is a valid run file. */
    const char *start = strstr(doc, "```yaml\n");
    const char *end = start ? strstr(start + 8, "```") : NULL;
    CHECK(start && end, "docs/config.md has no ```yaml example");
    if (start && end) {
        char example[64], *text = strndup(start + 8, (size_t)(end - start - 8));
        write_yaml(example, text);
        st_config c;
        st_config_defaults(&c);
        CHECK_OK(st_config_load(&c, example));
        CHECK_OK(st_config_validate(&c));
        unlink(example);
        free(text);
    }
    free(md);
    free(doc);
}

/* st_error_keep/st_error_restore (scaletrain/status.h): a failure's message
 * survives cleanup that records its own; a success's is left alone */
static void test_error_kept(void) {
    st_error_kept k;
    st_status s = st_fail(ST_ERR_IO, "the first failure");
    st_error_keep(&k, s);
    st_fail(ST_ERR_INTERNAL, "a free that failed after it");
    CHECK(st_error_restore(&k) == ST_ERR_IO && !strcmp(st_last_error(), "the first failure"),
          "restored: '%s'", st_last_error());
    st_clear_error();
    st_error_keep(&k, ST_OK);
    st_fail(ST_ERR_INTERNAL, "cleanup's own");
    CHECK(st_error_restore(&k) == ST_OK && !strcmp(st_last_error(), "cleanup's own"),
          "after a success the message is cleanup's: '%s'", st_last_error());
    st_clear_error();
}

/* ST_INVARIANT (scaletrain/status.h): a holding invariant costs nothing; a
 * broken one stops the process with SIGABRT and a line naming the file, the
 * line and what broke (a child process here, its stderr in a pipe) */
static void test_invariant(void) {
    ST_INVARIANT(1 + 1 == 2, "arithmetic");
    int fds[2];
    if (pipe(fds) != 0) {
        CHECK(0, "pipe: %s", strerror(errno));
        return;
    }
    const pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 2);
        volatile int broken = 1;
        ST_INVARIANT(!broken, "the test's invariant");
        _exit(0); /* (not reached) */
    }
    close(fds[1]);
    char err[512] = "";
    size_t n = 0;
    ssize_t r;
    while (n < sizeof err - 1 && (r = read(fds[0], err + n, sizeof err - 1 - n)) > 0)
        n += (size_t)r;
    err[n] = '\0';
    close(fds[0]);
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid, "fork/waitpid: %s", strerror(errno));
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "the child ended with status %#x, not SIGABRT",
          status);
    CHECK(strstr(err, "scaletrain: internal error at tests/test_config.c:") &&
              strstr(err, ": the test's invariant; please report it\n"),
          "its message: '%s'", err);
}

int main(int argc, char **argv) {
    test_error_kept();
    test_invariant();
    if (argc > 1 && !strcmp(argv[1], "--markdown")) {
        char *md = st_config_schema_markdown();
        if (!md) return 1;
        fputs(md, stdout);
        free(md);
        return 0;
    }
    CHECK_OK(st_cfg_schema_check());
    test_defaults();
    test_block_file();
    test_flow_file_and_presets();
    test_set();
    test_file_errors();
    test_odd_but_valid_files();
    test_validate();
    test_validate_data();
    test_print();
    test_unused();
    test_json();
    test_docs();
    return st_test_finish("test_config");
}
