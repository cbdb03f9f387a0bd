#!/usr/bin/env python3
"""Summarises a directory of moerl run results named <variant>-seed<k>.h5.

Writes <dir>/report/summary.md (a Markdown table: mean ± 95% t-interval over seeds) and
<dir>/report/curves.png (reward and train-inference KL over steps, mean and band per variant).

Usage: /usr/bin/python3 analysis/reproductions.py RESULTS_DIR [--title TITLE]
Needs Debian's python3-h5py, python3-numpy, python3-matplotlib.
"""
import os
import sys

# Run as a script (python3 analysis/reproductions.py): make the package importable.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from analysis.cli import AnalysisError, Entry  # noqa: E402

entry = Entry(__name__, "analysis.reproductions")
with entry.imports():
    import matplotlib  # before any output is written (pyplot is imported where the curves are drawn)
    import numpy as np

    from analysis.runs import Run, load_seed_files
    from analysis.stats import fmt, mean_ci, smooth, t95  # noqa: F401  (mean_ci, fmt: other scripts)

# The metrics the table and the curves read of every run.
METRICS = ["reward_mean", "eval_accuracy", "kl_rollout_train", "flip_rate_mean", "extreme_token_frac", "clip_frac"]


def load(path):
    r = Run(path).load()  # BadFile (a damaged, truncated or foreign file): one line with the path
    for k in METRICS:
        if k not in r.metrics or r.metrics[k].ndim != 1:
            raise AnalysisError(f"{path}: has no metric {k} (one value per step; needed: {', '.join(METRICS)})")
    if not len(r.metrics["reward_mean"]):
        raise AnalysisError(f"{path}: has no steps (an unfinished run?)")
    return r.metrics, r.attrs


def main(argv=None):
    ap = entry.parser(description="Summarises a directory of moerl run results named <variant>-seed<k>.h5.")
    ap.add_argument("dir", metavar="RESULTS_DIR")
    ap.add_argument("--title", default="")
    args = ap.parse_args(argv)
    runs = load_seed_files(args.dir, load)
    out = os.path.join(args.dir, "report")
    os.makedirs(out, exist_ok=True)

    rows = []
    for name, rs in runs.items():
        def per_run(fn):
            return [fn(m, a) for m, a in rs]
        evals = per_run(lambda m, a: m["eval_accuracy"][np.isfinite(m["eval_accuracy"])])
        row = {
            "variant": name,
            "seeds": len(rs),
            "steps": int(np.median(per_run(lambda m, a: len(m["reward_mean"])))),
            "base_eval": mean_ci([e[0] if len(e) else np.nan for e in evals]),
            "final_eval": mean_ci([e[-1] if len(e) else np.nan for e in evals]),
            "peak_eval": mean_ci([e.max() if len(e) else np.nan for e in evals]),
            "reward_last20": mean_ci(per_run(lambda m, a: np.nanmean(m["reward_mean"][-20:]))),
            "kl": mean_ci(per_run(lambda m, a: np.nanmean(m["kl_rollout_train"]))),
            "flip": mean_ci(per_run(lambda m, a: 100 * np.nanmean(m["flip_rate_mean"]))),
            "extreme": mean_ci(per_run(lambda m, a: np.nanmean(m["extreme_token_frac"]))),
            "clip": mean_ci(per_run(lambda m, a: np.nanmean(m["clip_frac"]))),
            "collapsed": sum(1 for m, a in rs if a.get("status") == "collapsed"),
        }
        rows.append(row)

    lines = []
    if args.title:
        lines += [f"### {args.title}", ""]
    lines += ["| variant | seeds | steps | first eval | final eval | peak eval | reward (last 20) | KL(μ‖π_old) k3 | flip % | extreme | clip frac | collapsed |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['variant']} | {r['seeds']} | {r['steps']} | {fmt(*r['base_eval'])} | {fmt(*r['final_eval'])} | "
                     f"{fmt(*r['peak_eval'])} | {fmt(*r['reward_last20'])} | {fmt(*r['kl'], sci=True)} | {fmt(*r['flip'], 2)} | "
                     f"{fmt(*r['extreme'], sci=True)} | {fmt(*r['clip'], sci=True)} | {r['collapsed']}/{r['seeds']} |")
    lines += ["", "Mean ± 95% Student-t half-width over seeds. first eval = the first greedy evaluation "
              "(after `rl.eval_every` steps); KL, flip, extreme and clip are means over all steps."]
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for name, rs in sorted(runs.items()):
        n = min(len(m["reward_mean"]) for m, a in rs)
        for ax, key, sm in ((axes[0], "reward_mean", 10), (axes[1], "kl_rollout_train", 10)):
            ys = np.array([smooth(m[key][:n], sm) for m, a in rs])
            mu = np.nanmean(ys, axis=0)
            x = np.arange(n)
            line, = ax.plot(x, mu, label=name)
            if len(rs) > 1:
                ci = t95(len(rs) - 1) * np.nanstd(ys, axis=0, ddof=1) / np.sqrt(len(rs))
                ax.fill_between(x, mu - ci, mu + ci, alpha=0.15, color=line.get_color())
        evals = []
        for m, a in rs:
            e = m["eval_accuracy"]
            idx = np.where(np.isfinite(e))[0]
            evals.append((idx, e[idx]))
        idx = evals[0][0]
        ys = np.array([e for i, e in evals if len(e) == len(idx)])
        mu = ys.mean(axis=0)
        line, = axes[2].plot(idx + 1, mu, marker="o", label=name)
        if len(ys) > 1:
            ci = t95(len(ys) - 1) * ys.std(axis=0, ddof=1) / np.sqrt(len(ys))
            axes[2].fill_between(idx + 1, mu - ci, mu + ci, alpha=0.15, color=line.get_color())
    axes[0].set_title("sampled reward (10-step mean)")
    axes[1].set_title("train–inference KL k3 (10-step mean)")
    axes[1].set_yscale("log")
    axes[2].set_title("greedy held-out accuracy")
    for ax in axes:
        ax.set_xlabel("RL step")
        ax.grid(alpha=0.3)
    axes[2].legend(fontsize=8)
    if args.title:
        fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "curves.png"), dpi=110)
    print(f"wrote {out}/summary.md and {out}/curves.png")


if __name__ == "__main__":
    entry.run(main)
