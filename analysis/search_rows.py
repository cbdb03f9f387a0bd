"""Rows of scenarios/paper/collapse-search/runs.csv for the runs of one probe's sweep directories:
one row per run, in the file's columns (docs/reproductions.md (d), "The search, lever by lever").

    /usr/bin/python3 -m analysis.search_rows PROBE SWEEP_DIR [SWEEP_DIR ...] >> runs.csv

peak_reward10 / final_reward10: the best and the last 10-step mean of reward_mean; k3 first / last
10 %: mean kl_rollout_train over the first and last tenth of the steps; grad_norm median over steps
and the largest grad_norm_max; entropy_last10: mean over the last 10 steps.
"""
import sys

import numpy as np

from .collapse import base_eval, final_eval, load_runs

COLUMNS = ["probe", "run", "seed", "steps", "lr", "grad_clip", "old_logprobs", "rollout", "router_noise",
           "n_experts", "top_k", "status", "base_eval", "final_eval", "peak_reward10", "final_reward10",
           "flip_pct", "k3_first10pct", "k3_last10pct", "grad_norm_median", "grad_norm_max", "is_ratio_max",
           "entropy_last10"]


def _mean10(x):
    x = np.asarray(x, dtype=float)
    if len(x) < 10:
        return float(np.nanmean(x)) if len(x) else float("nan")
    return np.convolve(np.nan_to_num(x), np.ones(10) / 10, mode="valid")


def _sci(x):
    """x in the file's 1e-04 style, with a second digit where one is needed (2.5e-04)."""
    one = f"{x:.0e}"
    return one if float(one) == x else f"{x:.1e}"


def row(probe, r):
    reward10 = _mean10(r.series("reward_mean"))
    k3 = r.series("kl_rollout_train")
    n = max(1, len(k3) // 10)
    gn = r.series("grad_norm")
    profile = r.value("engines.rollout")
    return [probe, r.name, r.value("run.seed"), r.steps, _sci(float(r.value('optim.lr'))),
            f"{float(r.value('optim.grad_clip')):g}", r.value("rl.old_logprobs") or "recompute", profile,
            r.value(f"profile.{profile}.router_noise") or "0", r.value("model.n_experts"), r.value("model.top_k"),
            r.status, f"{base_eval(r):.3f}", f"{final_eval(r):.3f}", f"{np.max(reward10):.3f}",
            f"{np.atleast_1d(reward10)[-1]:.3f}", f"{100 * np.nanmean(r.series('flip_rate_mean')):.2f}",
            f"{np.nanmean(k3[:n]):.2e}", f"{np.nanmean(k3[-n:]):.2e}", f"{np.nanmedian(gn):.2f}",
            f"{np.nanmax(r.series('grad_norm_max')):.1f}", f"{np.nanmax(r.series('is_ratio_max')):.1f}",
            f"{np.nanmean(r.series('entropy')[-10:]):.3f}"]


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2:
        sys.exit("usage: python3 -m analysis.search_rows PROBE SWEEP_DIR [SWEEP_DIR ...]")
    probe, dirs = argv[0], argv[1:]
    for r in load_runs(dirs):
        print(",".join(str(x) for x in row(probe, r)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
