#!/usr/bin/env python3
"""The mismatch table of scenarios/paper/mismatch.ini: one row per variant, mean ± 95% t-interval
over seeds of the first RL step's mismatch metrics (taken before any update).

Usage: /usr/bin/python3 analysis/mismatch_table.py RESULTS_DIR   → RESULTS_DIR/report/mismatch.md

    python3 -m analysis.mismatch_table RESULTS_DIR                   (the same)
"""
import os
import sys

if not __package__:  # run as a script (python3 analysis/mismatch_table.py): make the package importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from analysis.cli import AnalysisError, Entry  # noqa: E402

entry = Entry(__name__, "analysis.mismatch_table")
with entry.imports():
    from analysis.runs import Run, load_seed_files
    from analysis.stats import fmt, mean_ci

# What a row reads of each run: the first RL step's values of these metrics, and two attributes.
METRICS = ["kl_rollout_train", "kl_rollout_train_full", "extreme_token_frac", "any_flip_frac", "is_ratio_min",
           "is_ratio_max"]
ATTRS = ["profile_rollout", "profile_train"]

ORDER = ["moe-fp8", "moe-fp8-r3", "dense-fp8", "moe-bf16", "moe-bf16-r3", "dense-bf16", "moe-bf16-splitk"]


def load(path):
    """The row of one run file; AnalysisError naming the file and what is missing."""
    r = Run(path).load()  # BadFile (a damaged, truncated or foreign file): one line with the path
    m = r.metrics
    for k in METRICS:
        if k not in m or m[k].ndim < 1 or not len(m[k]):
            raise AnalysisError(f"{path}: has no metric {k} with a first step (not a run of "
                                "scenarios/paper/mismatch.ini, or unfinished?)")
    for k in ATTRS:
        if k not in r.attrs:
            raise AnalysisError(f"{path}: has no attribute {k} (written by an older moerl?)")
    row = {k: float(m[k][0]) for k in METRICS}
    row["flip"] = m["flip_rate"][0] if "flip_rate" in m and len(m["flip_rate"]) else None
    row["rollout"] = r.attrs["profile_rollout"]
    row["train"] = r.attrs["profile_train"]
    return row


def main(argv=None):
    ap = entry.parser(description="The mismatch table of scenarios/paper/mismatch.ini (→ RESULTS_DIR/report/mismatch.md).")
    ap.add_argument("dir", metavar="RESULTS_DIR", help="the directory of <variant>-seed<k>.h5 run files")
    d = ap.parse_args(argv).dir
    runs = load_seed_files(d, load)
    L = max((len(r["flip"]) for rs in runs.values() for r in rs if r["flip"] is not None), default=0)
    head = "| variant | engines (rollout → train) | seeds | KL k3 | KL full vocab | extreme (ratio > 2) | " + \
        " | ".join(f"flip L{l} %" for l in range(L)) + " | tokens with ≥ 1 flip % |"
    lines = [head, "|" + " --- |" * (6 + L + 1)]
    for name in [n for n in ORDER if n in runs] + [n for n in runs if n not in ORDER]:
        rs = runs[name]
        cells = [name, f"{rs[0]['rollout']} → {rs[0]['train']}", str(len(rs)),
                 fmt(*mean_ci([r["kl_rollout_train"] for r in rs]), sci=True),
                 fmt(*mean_ci([r["kl_rollout_train_full"] for r in rs]), sci=True),
                 fmt(*mean_ci([r["extreme_token_frac"] for r in rs]), sci=True)]
        for l in range(L):
            vals = [100 * r["flip"][l] for r in rs if r["flip"] is not None]
            cells.append(fmt(*mean_ci(vals), 2) if vals else "–")
        vals = [100 * r["any_flip_frac"] for r in rs if r["flip"] is not None]
        cells.append(fmt(*mean_ci(vals), 2) if vals else "–")
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Flip columns compare the train engine's own top-k set with the rollout's (under R3 the "
              "train engine replays the rollout's experts, so its KL has no routing part, while its own "
              "choice still differs as shown). Mean ± 95% Student-t half-width over seeds; 2048 sequences "
              "(256 prompts × 8 samples) of 8 response tokens per seed."]
    os.makedirs(os.path.join(d, "report"), exist_ok=True)
    with open(os.path.join(d, "report", "mismatch.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    entry.run(main)
