#!/usr/bin/env python3
"""The mismatch table of scenarios/paper/mismatch.ini: one row per variant, mean ± 95% t-interval
over seeds of the first RL step's mismatch metrics (taken before any update).

Usage: /usr/bin/python3 analysis/mismatch_table.py RESULTS_DIR   → RESULTS_DIR/report/mismatch.md
"""
import glob
import os
import re
import sys
from collections import defaultdict

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from reproductions import mean_ci, fmt  # noqa: E402

ORDER = ["moe-fp8", "moe-fp8-r3", "dense-fp8", "moe-bf16", "moe-bf16-r3", "dense-bf16", "moe-bf16-splitk"]


def main():
    d = sys.argv[1]
    runs = defaultdict(list)
    for path in sorted(glob.glob(os.path.join(d, "*-seed*.h5"))):
        if path.endswith(".ckpt.h5"):
            continue
        name = re.sub(r"-seed\d+\.h5$", "", os.path.basename(path))
        with h5py.File(path, "r") as f:
            m = f["metrics"]
            row = {k: float(m[k][0]) for k in ("kl_rollout_train", "kl_rollout_train_full", "extreme_token_frac",
                                                "any_flip_frac", "is_ratio_min", "is_ratio_max")}
            row["flip"] = m["flip_rate"][0] if "flip_rate" in m else None
            row["rollout"] = f.attrs["profile_rollout"]
            row["train"] = f.attrs["profile_train"]
            runs[name].append(row)
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
    main()
