#!/usr/bin/env python3
"""The expected numbers of a teaching scenario (scenarios/teach/NN-*.expected.csv), written from a
run of its tutorial page and checked against a later one.

    teach_expected.py write EXPECTED.csv DIR RESULT...   # RESULT: paths relative to DIR
    teach_expected.py check EXPECTED.csv DIR

A row names a result file (relative to the directory the page's commands ran in), a number in it
and the tolerance it is checked with: |got - expected| <= abs_tol + rel_tol * |expected|.
  - a run's results (.h5): the last row of metrics/<name>;
  - an audit (.json): the key <name>; a list (per-layer flip rates) counts by its mean.
check prints one line per number out of tolerance (and per missing file or number) and exits 1 if
there is any; it needs only numpy and h5py.
"""
import csv
import json
import math
import os
import sys

RUN_METRICS = ["reward_mean", "kl_rollout_train", "flip_rate_mean", "is_ratio_max", "grad_norm",
               "loss", "entropy", "response_length_mean", "truncated_frac", "rc_seq_log_ratio_abs_mean"]
AUDIT_KEYS = ["any_flip_share", "flip_rate", "kl", "k3", "max_abs_dlogp"]
# Same scenario + seed gives the same numbers bit for bit on one machine and under every SIMD
# target (tests/rl/test_rl_simd.cpp); the tolerance leaves room for another compiler or libm.
REL_TOL = 1e-4
ABS_TOL = 1e-7
HEADER = ["file", "metric", "expected", "rel_tol", "abs_tol"]


def read_number(path, metric):
    if path.endswith(".json"):
        with open(path) as f:
            v = json.load(f)[metric]
        return sum(v) / len(v) if isinstance(v, list) else float(v)
    import h5py
    with h5py.File(path, "r") as f:
        return float(f["metrics/" + metric][-1])


def write(expected, root, results):
    rows = []
    for rel in results:
        if rel.endswith(".json"):
            with open(os.path.join(root, rel)) as f:
                if json.load(f).get("format") != "moerl-audit":
                    continue  # a report's own files
        metrics = AUDIT_KEYS if rel.endswith(".json") else RUN_METRICS
        for m in metrics:
            rows.append([rel, m, repr(read_number(os.path.join(root, rel), m)), REL_TOL, ABS_TOL])
    with open(expected, "w", newline="") as f:
        if expected.endswith("expected-full.csv"):
            f.write("# Expected numbers of this teaching scenario's tutorial page, its commands as written\n"
                    "# (ctest -L long: teach_full); checked by tests/teach_expected.py. Rewrite:\n"
                    "# tests/teach_smoke.sh BIN --write-expected --full DIR PAGE (after a change that moves them).\n")
        else:
            f.write("# Expected numbers of this teaching scenario's tutorial page, as tests/teach_smoke.sh\n"
                    "# runs it (RL steps 2, SFT steps 5, audit prompts 8); checked by tests/teach_expected.py.\n"
                    "# Rewrite: tests/teach_smoke.sh BIN --write-expected PAGE (after a change that moves them).\n")
        w = csv.writer(f)
        w.writerow(HEADER)
        w.writerows(rows)
    print(f"teach_expected: wrote {len(rows)} numbers to {expected}")


def check(expected, root):
    with open(expected) as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    if not rows:
        print(f"teach_expected: {expected}: no numbers")
        return 1
    bad = 0
    for r in rows:
        path = os.path.join(root, r["file"])
        want, rel, ab = float(r["expected"]), float(r["rel_tol"]), float(r["abs_tol"])
        try:
            got = read_number(path, r["metric"])
        except (OSError, KeyError) as e:
            print(f"teach_expected: {r['file']}: {r['metric']}: cannot read ({e})")
            bad += 1
            continue
        if not (abs(got - want) <= ab + rel * abs(want)) and not (math.isnan(got) and math.isnan(want)):
            print(f"teach_expected: {r['file']}: {r['metric']} = {got!r}, expected {want!r} "
                  f"(tolerance {ab} + {rel}·|expected|)")
            bad += 1
    print(f"teach_expected: {os.path.basename(expected)}: {len(rows) - bad} of {len(rows)} numbers "
          "within tolerance")
    return 1 if bad else 0


def main(argv):
    if len(argv) >= 3 and argv[0] == "check":
        return check(argv[1], argv[2])
    if len(argv) >= 4 and argv[0] == "write":
        write(argv[1], argv[2], argv[3:])
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
