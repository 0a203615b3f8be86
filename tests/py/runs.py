"""What a run wrote, for the tests' checks (not a test itself: its name
does not start with test_). The e2e scripts run from the repository's root
and import it with sys.path.insert(0, "tests/py").

last(path): the last JSON object line of a run's output (`--json` prints
the result last, after any log lines).
records(path): every JSON line of a metrics.jsonl.
"""
import json


def last(path):
    with open(path) as f:
        lines = [line for line in f.read().splitlines() if line.startswith("{")]
    if not lines:
        raise SystemExit(f"{path}: no JSON result line")
    return json.loads(lines[-1])


def records(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
