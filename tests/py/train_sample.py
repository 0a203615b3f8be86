"""A training run's text sample (log.sample_every) against `scaletrain sample`.

    train_sample.py OUTPUT STEP SAMPLE_JSON

OUTPUT is the run's standard output, SAMPLE_JSON `scaletrain sample --json`
of the weights after STEP steps, started at a new line (--prompt-ids 10)
with the seed the run printed for that step. The run
prints "sample at step STEP (--seed S):" and then the sample's bytes as
text, a control character (C0 but a new line or tab, DEL, C1) and a byte of
no valid UTF-8 sequence as '?', and a new line: that text must follow the
line exactly.
"""
import json
import sys


def as_log_text(tokens):
    b = bytes(tokens)
    out, i = [], 0
    while i < len(b):
        k = next((k for k in (1, 2, 3, 4) if i + k <= len(b) and valid(b[i:i + k])), 0)
        ctl = (k == 1 and (b[i] < 0x20 or b[i] == 0x7F) and b[i] not in (9, 10)) or \
            (k == 2 and 0x80 <= ord(b[i:i + 2].decode("utf-8")) <= 0x9F)
        if k and not ctl:
            out.append(b[i:i + k].decode("utf-8"))
            i += k
        else:
            out.append("?")
            i += 1
    return "".join(out)


def valid(chunk):
    try:
        return len(chunk.decode("utf-8")) == 1
    except UnicodeDecodeError:
        return False


def main():
    text = open(sys.argv[1], "rb").read().decode("utf-8")
    step = int(sys.argv[2])
    r = json.load(open(sys.argv[3]))
    assert r["prompt"] == [10], r["prompt"]
    want = as_log_text(r["samples"][0]["tokens"])
    head = f"sample at step {step} (--seed {r['seed']}):\n"
    at = text.find(head)
    assert at >= 0, f"no '{head.strip()}' line in the run's output"
    got = text[at + len(head):at + len(head) + len(want) + 1]
    assert got == want + "\n", f"step {step}: the run printed {got!r}, the weights draw {want!r}"
    print(f"ok sample at step {step}: the run's text is the weights' ({len(want)} characters): {want[:40]!r}")


main()
