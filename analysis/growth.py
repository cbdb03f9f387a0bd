"""Does the engines' mismatch grow as the policy trains, and with what? Per variant of one or more
sweep directories: each quantity's mean over the last tenth of a run's steps over its mean over the
first tenth (mean ± 95 % t-interval over the runs), and the correlation over steps of k3 with the
train engine's decision margins.

    /usr/bin/python3 -m analysis.growth SWEEP_DIR [SWEEP_DIR ...] [--out FILE.md]

Quantities (docs/metrics.md): k3 = kl_rollout_train (per token), the seq log-ratio = rc_seq_log_ratio_abs_mean
(per sequence, summed over its response), flip % = flip_rate_mean, the router margin p10 (the
near-ties that flip), the LM-head logit std (the logits' scale), the top-1 − top-2 logit margin,
the response length and the entropy. corr(k3, ·) is Pearson's r over a run's steps, averaged
over the runs: a mismatch that grows as the margins shrink shows r < 0 with the router margin.
Runs without a quantity (older files) leave its cell "–".
"""
import sys
from collections import OrderedDict

from .cli import AnalysisError, Entry

entry = Entry(__name__, "analysis.growth")
with entry.imports():
    import numpy as np

    from .runs import group_by_variant, load_pooled_runs
    from .stats import fmt, mean_ci

QUANTITIES = OrderedDict([
    ("k3", "kl_rollout_train"),
    ("seq log-ratio (abs)", "rc_seq_log_ratio_abs_mean"),
    ("flip %", "flip_rate_mean"),
    ("router margin p10", "router_margin_p10"),
    ("logit std", "logit_std_mean"),
    ("logit margin", "logit_margin_mean"),
    ("length", "response_length_mean"),
    ("entropy", "entropy"),
])
CORRELATED = ["router_margin_p10", "logit_std_mean", "logit_margin_mean", "response_length_mean"]


def _series(r, name):
    x = r.series(name)
    return None if x is None else np.asarray(x, dtype=float)


def growth(r, name):
    """Mean of the last tenth of the steps over the mean of the first tenth (NaN if absent)."""
    x = _series(r, name)
    if x is None or len(x) < 2:
        return float("nan")
    n = max(1, len(x) // 10)
    a, b = x[:n][np.isfinite(x[:n])], x[-n:][np.isfinite(x[-n:])]
    if not len(a) or not len(b) or a.mean() == 0:
        return float("nan")
    return float(b.mean() / a.mean())


def correlation(r, a, b):
    """Pearson's r of two series over the steps where both are finite (NaN if under 3 or flat)."""
    x, y = _series(r, a), _series(r, b)
    if x is None or y is None:
        return float("nan")
    ok = np.isfinite(x) & np.isfinite(y)
    if ok.sum() < 3 or np.std(x[ok]) == 0 or np.std(y[ok]) == 0:
        return float("nan")
    return float(np.corrcoef(x[ok], y[ok])[0, 1])


def rows(runs):
    out = []
    for (variant, _), rs in group_by_variant(runs).items():
        row = OrderedDict(variant=variant, runs=len(rs))
        for label, name in QUANTITIES.items():
            row[label] = mean_ci([growth(r, name) for r in rs])
        for name in CORRELATED:
            row["corr(k3, " + name + ")"] = mean_ci([correlation(r, "kl_rollout_train", name) for r in rs])
        out.append(row)
    return out


def table_md(rs):
    if not rs:
        return "no runs\n"
    head = list(rs[0].keys())
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in head) + " |"]
    for x in rs:
        cells = [x["variant"], str(x["runs"])]
        for k in head[2:]:
            m, h = x[k]
            cells.append(fmt(m, h, digits=2) if np.isfinite(m) else "–")
        lines.append("| " + " | ".join(cells) + " |")
    return ("Growth over a run: the last tenth of the steps over the first tenth (mean ± 95 % over runs); "
            "corr: Pearson's r over the steps, averaged over runs.\n\n" + "\n".join(lines) + "\n")


def main(argv=None):
    ap = entry.parser(description=__doc__.split("\n")[0])
    ap.add_argument("dirs", nargs="+", metavar="SWEEP_DIR")
    ap.add_argument("--out", help="write the Markdown table here too")
    args = ap.parse_args(argv)
    runs = load_pooled_runs(args.dirs)
    if not runs:
        raise AnalysisError(f"{', '.join(args.dirs)}: no runs with metrics (none finished or started yet?)")
    md = table_md(rows(runs))
    sys.stdout.write(md)
    if args.out:
        with open(args.out, "w") as f:
            f.write(md)
    return 0


if __name__ == "__main__":
    entry.run(main)
