#!/usr/bin/python3
"""TensorBoard event files read back with the `tensorboard` package's own
reader (PyPI; scripts/deps.sh installs it), checked against metrics.jsonl of
the same run.

  1. A 7-step mlp run with log.tensorboard=true, log.every=2 and evaluation
     every 4 steps: every record of the event file passes TensorBoard's record
     reader (length and data CRC-32C) and parses as an Event; the first holds
     file_version "brain.Event:2"; EventAccumulator finds exactly the tags
     train/<field> for every number of a step line of metrics.jsonl but step
     and time, checkpoint/<field> for a checkpoint line's, and eval/loss,
     eval/accuracy, each with the same steps and the
     same values (as float32, exactly).
  2. Resume: 4 steps with checkpoints, then --resume auto to 8 writes a second
     file; the accumulator over the directory gives steps 2, 4, 6, 8.
  3. A run that logged step 6 past its last good checkpoint (4) and is
     resumed: the new file's SessionLog START at step 5 makes TensorBoard drop
     the old step 6, so the values at 6 are the resumed run's, as in
     metrics.jsonl.
  4. log.tensorboard=false (the default) writes no event file.
  5. A run resumed from another folder's checkpoint (step 4) into a
     finished run's directory: metrics.jsonl starts over, and the new
     file's START at step 1 makes TensorBoard drop the finished run's
     events, so it shows steps 6 and 8 only, as metrics.jsonl.

Usage: /usr/bin/python3 tests/py/test_tensorboard.py BUILD_DIR
Exit status: 0 ok, 1 failure, 77 skipped (no tensorboard package, no data).
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import numpy as np
    from tensorboard.backend.event_processing import event_accumulator
    from tensorboard.compat.proto import event_pb2
    from tensorboard.compat.tensorflow_stub import errors
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import PyRecordReader_New
except ImportError as e:
    print(f"test_tensorboard: skipped: the tensorboard package is not installed ({e}); "
          "scripts/deps.sh installs it with pip (needs PyPI)")
    sys.exit(77)

FMNIST = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"
if not os.path.exists(FMNIST):
    print("test_tensorboard: skipped: Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)")
    sys.exit(77)

build = sys.argv[1] if len(sys.argv) > 1 else "build"
binary = os.path.join(build, "scaletrain")
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


BASE = ["--set", "model.type=mlp", "--set", "model.hidden=[64,32]", "--set", "train.batch_size=16",
        "--set", "train.threads=1", "--set", "log.every=2", "--set", "log.progress=off",
        "--set", "train.eval_steps=4", "--quiet"]


def train(out_dir, *args, tb=True):
    cmd = [binary, "train", *BASE, "--set", f"train.out_dir={out_dir}",
           "--set", f"log.tensorboard={'true' if tb else 'false'}", *args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, OMP_WAIT_POLICY="PASSIVE"))
    check(r.returncode == 0, f"{' '.join(cmd)} exited {r.returncode}: {r.stdout}{r.stderr}")


def records(path):
    """Every Event of one file through TensorBoard's record reader, which
    raises DataLossError on a bad CRC."""
    reader = PyRecordReader_New(path, 0, None, errors.raise_exception_on_not_ok_status())
    events = []
    while True:
        try:
            reader.GetNext()
        except errors.OutOfRangeError:
            return events
        events.append(event_pb2.Event.FromString(reader.record()))


def expected(out_dir):
    """{tag: [(step, float32 value)]} from metrics.jsonl."""
    want = {}
    for line in open(os.path.join(out_dir, "metrics.jsonl")):
        o = json.loads(line)
        prefix = "eval" if o.get("eval") else "checkpoint" if o.get("checkpoint") else "train"
        for k, v in o.items():
            if k in ("step", "time", "resumed_from") or isinstance(v, bool):  # (resumed_from: not a series)
                continue
            want.setdefault(f"{prefix}/{k}", []).append((o["step"], float(np.float32(v))))
    return want


def against_metrics(out_dir, what):
    acc = event_accumulator.EventAccumulator(out_dir, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    got = {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}
    want = expected(out_dir)
    check(sorted(got) == sorted(want), f"{what}: tags {sorted(got)}, metrics.jsonl has {sorted(want)}")
    for tag in sorted(want):
        check(got.get(tag) == want[tag], f"{what}: {tag}: TensorBoard {got.get(tag)}, metrics.jsonl {want[tag]}")
    return got


def event_files(out_dir):
    return sorted(glob.glob(os.path.join(out_dir, "events.out.tfevents.*")))


tmp = tempfile.mkdtemp()
try:
    # 1. one run
    a = os.path.join(tmp, "a")
    train(a, "--set", "train.steps=7", "--set", "train.eval_every=4")
    files = event_files(a)
    check(len(files) == 1, f"one event file, found {files}")
    for f in files:
        ev = records(f)
        check(len(ev) >= 3 and ev[0].file_version == "brain.Event:2", f"{f}: first event holds the file version")
        check(ev[1].session_log.status == event_pb2.SessionLog.START and ev[1].step == 1,
              f"{f}: a SessionLog START at step 1")
        times = [e.wall_time for e in ev]
        check(times == sorted(times) and times[0] > 1.6e9, f"{f}: wall times increase from now")
    got = against_metrics(a, "7-step run")
    check([s for s, _ in got.get("train/loss", [])] == [2, 4, 6, 7], "train/loss at steps 2, 4, 6, 7")
    check([s for s, _ in got.get("eval/accuracy", [])] == [4, 7], "eval/accuracy at steps 4, 7")
    for tag in ("train/loss", "train/lr", "train/grad_norm", "train/samples_per_s", "train/mfu",
                "train/data_wait_ms", "train/step_ms", "eval/loss", "eval/accuracy"):
        check(tag in got, f"tag {tag} written")

    # 2. resumed run: a second file, the steps continue
    r = os.path.join(tmp, "r")
    train(r, "--set", "train.steps=4", "--set", "data.val=", "--set", "train.checkpoint_every=2")
    train(r, "--set", "train.steps=8", "--set", "data.val=", "--set", "train.checkpoint_every=2",
          "--resume", "auto")
    check(len(event_files(r)) == 2, f"the resumed run appends a new file: {event_files(r)}")
    got = against_metrics(r, "resumed run")
    check([s for s, _ in got.get("train/loss", [])] == [2, 4, 6, 8], "resumed: train/loss at 2, 4, 6, 8")

    # 3. steps logged past the last good checkpoint are dropped by TensorBoard too
    d = os.path.join(tmp, "d")
    train(d, "--set", "train.steps=6", "--set", "data.val=", "--set", "train.checkpoint_every=4")
    old = dict(against_metrics(d, "before the damaged checkpoint"))
    with open(os.path.join(d, "ckpt", "step-6", "model.safetensors"), "w"):
        pass
    train(d, "--set", "train.steps=8", "--set", "data.val=", "--set", "train.checkpoint_every=4",
          "--resume", "auto")
    got = against_metrics(d, "resumed from the checkpoint before")
    check([s for s, _ in got.get("train/loss", [])] == [2, 4, 6, 8], "purged: train/loss at 2, 4, 6, 8")
    check(got.get("train/time") is None, "no train/time tag")
    old6 = [v for s, v in old.get("train/step_ms", []) if s == 6]
    new6 = [v for s, v in got.get("train/step_ms", []) if s == 6]
    check(len(new6) == 1 and new6 != old6, f"step 6 is the resumed run's ({new6} vs the old {old6})")

    # 4. off by default
    n = os.path.join(tmp, "n")
    train(n, "--set", "train.steps=2", "--set", "data.val=", tb=False)
    check(event_files(n) == [], "log.tensorboard=false writes no event file")

    # 5. resumed from elsewhere into a finished run's directory
    e, src = os.path.join(tmp, "e"), os.path.join(tmp, "src")
    train(e, "--set", "train.steps=8", "--set", "data.val=")
    train(src, "--set", "train.steps=4", "--set", "data.val=", "--set", "train.checkpoint_every=4")
    train(e, "--set", "train.steps=8", "--set", "data.val=", "--resume", os.path.join(src, "ckpt", "step-4"))
    got = against_metrics(e, "resumed from elsewhere")
    check([s for s, _ in got.get("train/loss", [])] == [6, 8], "from elsewhere: train/loss at 6, 8 only")
finally:
    shutil.rmtree(tmp, ignore_errors=True)

if failures:
    print(f"test_tensorboard: {len(failures)} failure(s)")
    sys.exit(1)
print("test_tensorboard: ok")
