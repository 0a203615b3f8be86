"""Random configurations through `scaletrain train`: each run sets a few keys
of docs/config.md (the reference's own keys, kinds and accepted values) to
values drawn from their kind, on a small mlp, cnn or gpt, one process or
`launch -n 2`. A run may train or refuse; what it may not do is crash (a
signal, an exit code other than 0, 1 or 2), hang past its limit, refuse
without a message, or train to a NaN it does not stop on. A refusal that
names a --set key drops that key and runs again, so that most runs train
with several keys changed.

    config_fuzz.py BIN TOKENS OUT_DIR RUNS SEED [MPI]
"""
import json
import os
import random
import re
import subprocess
import sys

binary, tokens, out, runs, seed = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
mpi = len(sys.argv) > 6 and sys.argv[6] == "1"
rng = random.Random(seed)
here = os.path.dirname(os.path.abspath(__file__))
rows = []
for line in open(os.path.join(here, "..", "..", "docs", "config.md")):
    m = re.match(r"^\| `([a-z_]+\.[a-z_0-9]+|precision)` \| ([^|]+) \| ([^|]+) \| ([^|]+) \|", line)
    if m:
        rows.append((m.group(1), m.group(2).strip(), m.group(4).strip()))
assert len(rows) > 60, "docs/config.md: %d keys read" % len(rows)
# paths, devices, limits in seconds and sizes that make a run long or large are the base's to set
skip = re.compile(r"^(train\.(out_dir|steps|epochs|device|threads|seconds|checkpoint_every_s|checkpoint_timeout_s|"
                  r"device_timeout_s)|data\.(type|train|train_labels|val|val_labels|timeout_s|num_workers)|"
                  r"model\.(type|preset)|dist\.timeout_s|log\.(peak_gflops))$")
small = {"model.n_layer": [1, 2], "model.n_embd": [8, 16, 32], "model.n_head": [1, 2, 4], "model.block_size": [4, 16, 32],
         "model.hidden": ["[8]", "[16,8]", "[]"], "model.channels": ["[4]", "[4,8]"], "model.pool": ["[0]", "[1]", "[1,1]", "[0,1]"],
         "model.kernel": [1, 3, 5], "train.batch_size": [1, 2, 6, 8, 16], "train.micro_batch_size": ["auto", 1, 2, 3, 4, 8],
         "train.eval_batch_size": ["auto", 1, 5, 16], "log.sample_tokens": [1, 8], "data.augment_crop_pad": [0, 1, 2, 4]}


def value(key, kind, accepted):
    if key in small:
        return str(rng.choice(small[key]))
    named = re.findall(r"`([^`]*)`", accepted)
    if kind in ("enum", "bool"):
        return rng.choice(named) if named else "auto"
    extra = ["auto"] if "auto" in named else []
    if kind.startswith("int list"):
        return "[" + ",".join(str(rng.choice([0, 1, 2, 3, 8])) for _ in range(rng.randint(0, 3))) + "]"
    if kind.startswith("int"):
        return str(rng.choice([0, 1, 2, 3, 8, 16, -1] + extra))
    if kind.startswith("float"):
        return rng.choice(["0", "1e-4", "0.01", "0.5", "0.9", "1", "3", "-1", "nan", "1e30"] + extra)
    return rng.choice(['""', "x"] + named)


def run(args):
    try:
        p = subprocess.run(args, capture_output=True, text=True, errors="replace", timeout=180,
                           env=dict(os.environ, OMP_WAIT_POLICY="PASSIVE"))
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        return None, "", ""


bases = [["--set", "model.type=mlp", "--set", "model.hidden=[16]"],
         ["--set", "model.type=cnn", "--set", "model.channels=[4,8]", "--set", "model.pool=[1,1]"],
         ["--set", "model.type=gpt", "--set", "data.type=tokens", "--set", "data.train=" + tokens,
          "--set", "model.n_layer=1", "--set", "model.n_embd=16", "--set", "model.n_head=2",
          "--set", "model.block_size=16"]]
fails, trained, refused = 0, 0, 0
for i in range(runs):
    launch = mpi and rng.random() < 0.2
    base = rng.choice(bases)
    args = ([binary, "launch", "-n", "2"] if launch else [binary]) + ["train", "--json", "--set", "log.progress=off"] + base
    args += ["--set", "train.steps=%d" % rng.randint(1, 4), "--set", "train.out_dir=%s/run%d" % (out, i),
             "--set", "train.threads=1", "--set", "data.num_workers=%d" % rng.randint(0, 2)]
    if "gpt" in base[1] or rng.random() < 0.7:
        args += ["--set", "data.val="]
    else:
        args += ["--set", "train.eval_steps=2"]
    for key, kind, accepted in rng.sample(rows, rng.randint(3, 8)):
        if not skip.match(key):
            args += ["--set", "%s=%s" % (key, value(key, kind, accepted))]
    for attempt in range(8):
        rc, so, se = run(args)
        said = (so + se).strip().splitlines()
        m = re.search(r"(?:error[^:]*|aborting every rank): (?:--set )?([a-z_]+\.[a-z_0-9]+|precision)(?:=| \([^)]*--set)", so + se) if rc == 1 else None
        where = [j for j in range(len(args)) if m and args[j].startswith(m.group(1) + "=") and j > 0 and args[j - 1] == "--set"]
        if not where:
            break
        del args[where[-1] - 1:where[-1] + 1]
    shown = " ".join(args[1:])
    bad = None
    if rc is None:
        bad = "no end within 180 s"
    elif rc not in (0, 1, 2):
        bad = "exit %d" % rc
    elif re.search(r"runtime error|Sanitizer|Segmentation|core dumped|Assertion", so + se):
        bad = "a crash's report"
    elif rc != 0 and not re.search(r"error|usage|aborting every rank: ", so + se):
        bad = "exit %d without a message" % rc
    elif rc == 0:
        try:
            res = json.loads(so.strip().splitlines()[-1])
            if not (isinstance(res.get("loss"), (int, float)) and res["loss"] == res["loss"] and abs(res["loss"]) < 1e30):
                bad = "trained to the loss %r" % res.get("loss")
        except (ValueError, IndexError) as e:
            bad = "no JSON result on its last line (%s)" % e
    if bad:
        fails += 1
        print("FAIL run %d (seed %d): %s: %s\n    %s" % (i, seed, bad, shown, "\n    ".join(said[-8:])))
    elif rc == 0:
        trained += 1
    else:
        refused += 1
print("config fuzz (seed %d): %d runs, %d trained, %d refused with a message, %d failed" % (seed, runs, trained, refused, fails))
sys.exit(1 if fails else 0)
