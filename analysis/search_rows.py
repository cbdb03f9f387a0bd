"""Rows of scenarios/paper/collapse-search/runs.csv for the runs of one probe's sweep directories:
one row per run, in the file's columns (docs/reproductions.md (d), "The search, lever by lever").

    /usr/bin/python3 -m analysis.search_rows PROBE SWEEP_DIR [SWEEP_DIR ...] >> runs.csv

peak_reward10 / final_reward10: the best and the last 10-step mean of reward_mean; k3 first / last
10 %: mean kl_rollout_train over the first and last tenth of the steps; grad_norm median over steps
and the largest grad_norm_max; entropy_last10: mean over the last 10 steps.
"""
from .cli import AnalysisError, Entry

entry = Entry(__name__, "analysis.search_rows")
with entry.imports():
    import numpy as np

    from .runs import base_eval, final_eval, load_pooled_runs, seed_of

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


def _number(r, key):
    v = r.value(key)
    try:
        return float(v)
    except (TypeError, ValueError):
        raise AnalysisError(f"{r.path}: {key} = {v!r} in its scenario: not a number")


def row(probe, r):
    reward10 = _mean10(r.series("reward_mean"))
    k3 = r.series("kl_rollout_train")
    n = max(1, len(k3) // 10)
    gn = r.series("grad_norm")
    profile = r.value("engines.rollout")
    return [probe, r.name, seed_of(r), r.steps, _sci(_number(r, 'optim.lr')),
            f"{_number(r, 'optim.grad_clip'):g}", r.value("rl.old_logprobs") or "recompute", profile,
            r.value(f"profile.{profile}.router_noise") or "0", r.value("model.n_experts"), r.value("model.top_k"),
            r.status, f"{base_eval(r):.3f}", f"{final_eval(r):.3f}", f"{np.max(reward10):.3f}",
            f"{np.atleast_1d(reward10)[-1]:.3f}", f"{100 * np.nanmean(r.series('flip_rate_mean')):.2f}",
            f"{np.nanmean(k3[:n]):.2e}", f"{np.nanmean(k3[-n:]):.2e}", f"{np.nanmedian(gn):.2f}",
            f"{np.nanmax(r.series('grad_norm_max')):.1f}", f"{np.nanmax(r.series('is_ratio_max')):.1f}",
            f"{np.nanmean(r.series('entropy')[-10:]):.3f}"]


def main(argv=None):
    ap = entry.parser(description=__doc__.split("\n")[0])
    ap.add_argument("probe", metavar="PROBE", help="the probe's name, the first column of every row")
    ap.add_argument("dirs", nargs="+", metavar="SWEEP_DIR")
    args = ap.parse_args(argv)
    runs = load_pooled_runs(args.dirs)
    if not runs:
        raise AnalysisError(f"{', '.join(args.dirs)}: no runs with metrics (none finished or started yet?)")
    rows = [row(args.probe, r) for r in runs]  # every row first: a refusal prints none
    for cells in rows:
        print(",".join(str(x) for x in cells))
    return 0


if __name__ == "__main__":
    entry.run(main)
