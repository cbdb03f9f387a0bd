"""Collapse study: collapse rates with intervals, accuracy against the base and against a reference
variant paired by seed, the mismatch's growth, and the phase diagram over a mismatch dial.

    /usr/bin/python3 -m analysis.collapse SWEEP_DIR [SWEEP_DIR ...] [--reference control]
                                          [--dial profile.fp8n.router_noise] [--out DIR]
                                          [--outcome eval|reward]

Runs are grouped by their `variant` key (moerl sweep's [variant.NAME] sections; else by
rl.algorithm) and, with --dial, by the dial's value. Several sweep directories pool their runs
(e.g. the search seeds and the fresh seeds of the same grid). Writes, into --out (default
SWEEP_DIR/report): collapse.md, collapse.csv, with --dial phase.png, and with --curves V1,V2,…
curves.png: per variant, every run's reward and truncated share (10-step means) against the step,
its collapse step marked.

Per group:
  collapse rate   share of runs whose status is "collapsed" (the documented rule: reward's
                  trailing mean below rl.collapse_frac of its running peak for rl.collapse_patience
                  steps, or a non-finite value; docs/metrics.md), with the 95% Wilson interval
  base, final     eval_accuracy_base (step 0, before any update) and the last eval_accuracy
  final − base    per run, mean ± 95% t-interval
  vs reference    the outcome minus the reference variant's on the same seed (the runs share
                  their base policy), mean ± 95% t-interval over the pairs, and n pairs; the
                  outcome is the final eval (--outcome eval, the default) or the final reward
                  (--outcome reward: reward_mean over the last 10 steps, the index's
                  final_reward), for settings where the held-out accuracy sits at 0 for every
                  variant and cannot tell them apart
  flip %          mean over steps of 100·flip_rate_mean (the measured routing mismatch)
  k3 growth       mean k3 of the last tenth of the steps over the first tenth (kl_rollout_train)
"""
import csv
import html
import io
import os
from collections import OrderedDict

from .cli import AnalysisError, Entry

entry = Entry(__name__, "analysis.collapse")
with entry.imports():
    import numpy as np

    from .runs import (base_eval, final_eval, final_reward, finite_values, group_by_variant, load_pooled_runs,
                       seed_of)
    from .stats import fmt, mean_ci, wilson


OUTCOMES = {"eval": final_eval, "reward": final_reward}  # what vs reference pairs
# each outcome's names in the table's column and in the phase plot
OUTCOME_NAMES = {"eval": ("final", "final held-out accuracy"),
                 "reward": ("final reward", "final reward (last 10 steps)")}


def k3_growth(r):
    k = r.series("kl_rollout_train")
    n = max(1, len(k) // 10)
    a, b = finite_values(k[:n]), finite_values(k[-n:])
    if not len(a) or not len(b) or a.mean() <= 0:
        return float("nan")
    return float(b.mean() / a.mean())


def flip_pct(r):
    x = finite_values(r.series("flip_rate_mean"))
    return 100 * float(x.mean()) if len(x) else float("nan")


def rows(groups, reference="control", outcome="eval"):
    final = OUTCOMES[outcome]
    ref = {}  # (seed, dial) and seed → the reference run's outcome
    for (v, dv), rs in groups.items():
        if v == reference:
            for r in rs:
                ref[(seed_of(r), dv)] = final(r)
                ref.setdefault((seed_of(r), None), final(r))
    out = []
    for (v, dv), rs in groups.items():
        k = sum(r.status == "collapsed" for r in rs)
        rate, lo, hi = wilson(k, len(rs))
        diffs = []
        for r in rs:
            key = (seed_of(r), dv) if (seed_of(r), dv) in ref else (seed_of(r), None)
            if key in ref and np.isfinite(ref[key]) and np.isfinite(final(r)):
                diffs.append(final(r) - ref[key])
        out.append(OrderedDict(
            variant=v, dial=dv, runs=len(rs), collapsed=k, rate=rate, rate_lo=lo, rate_hi=hi,
            base=mean_ci([base_eval(r) for r in rs]), final=mean_ci([final_eval(r) for r in rs]),
            gain=mean_ci([final_eval(r) - base_eval(r) for r in rs]),
            vs_ref=mean_ci(diffs) if v != reference else (float("nan"), float("nan")), pairs=len(diffs) if v != reference else 0,
            outcome=outcome,
            flip=mean_ci([flip_pct(r) for r in rs]), k3_growth=mean_ci([k3_growth(r) for r in rs])))
    return out


def _outcome_names(rs):
    return OUTCOME_NAMES[rs[0]["outcome"] if rs else "eval"]


def _cells(rs, dial=None, reference="control"):
    """The table's head and rows as strings, shared by the Markdown and HTML forms."""
    head = ["variant"] + ([dial] if dial else []) + ["runs", "collapsed (95% CI)", "base eval", "final eval",
                                                      "final − base", f"{_outcome_names(rs)[0]} − {reference} (paired)", "flip %",
                                                      "k3 last/first"]
    body = []
    for x in rs:
        body.append([x["variant"]] + ([x["dial"]] if dial else []) + [
            str(x["runs"]), f"{x['collapsed']}/{x['runs']} = {x['rate']:.2f} [{x['rate_lo']:.2f}, {x['rate_hi']:.2f}]",
            fmt(*x["base"]), fmt(*x["final"]), fmt(*x["gain"]),
            (fmt(*x["vs_ref"]) + f" (n={x['pairs']})") if x["pairs"] else "–",
            fmt(*x["flip"], digits=2), fmt(*x["k3_growth"], digits=2)])
    return head, body


def table_md(rs, dial=None, reference="control"):
    head, body = _cells(rs, dial, reference)
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    lines += ["| " + " | ".join(cells) + " |" for cells in body]
    return "\n".join(lines) + "\n"


def table_html(rs, dial=None, reference="control"):
    e = html.escape
    head, body = _cells(rs, dial, reference)
    out = ["<table><tr>" + "".join(f"<th>{e(h)}</th>" for h in head) + "</tr>"]
    out += ["<tr>" + "".join(f"<td>{e(c)}</td>" for c in cells) + "</tr>" for cells in body]
    return "".join(out) + "</table>"


def has_variants(runs, reference="control"):
    """True when the runs come from a grid with [variant.NAME] sections that include the reference."""
    return any(r.keys.get("variant") == reference for r in runs)


def table_csv(rs):
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["variant", "dial", "runs", "collapsed", "collapse_rate", "collapse_rate_lo", "collapse_rate_hi",
                "base_eval", "base_eval_ci95", "final_eval", "final_eval_ci95", "gain", "gain_ci95",
                "vs_reference", "vs_reference_ci95", "pairs", "flip_pct", "flip_pct_ci95", "k3_growth", "k3_growth_ci95",
                "vs_reference_outcome"])
    for x in rs:
        w.writerow([x["variant"], x["dial"], x["runs"], x["collapsed"], x["rate"], x["rate_lo"], x["rate_hi"],
                    *x["base"], *x["final"], *x["gain"], *x["vs_ref"], x["pairs"], *x["flip"], *x["k3_growth"],
                    x["outcome"]])
    return buf.getvalue()


def phase_plot(rs, path, dial, reference="control"):
    """Collapse probability and final accuracy against the reference, over the measured flip rate."""
    from .plots import plt, save_figure  # the Agg backend
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    by_v = OrderedDict()
    for x in rs:
        if x["variant"] != reference:
            by_v.setdefault(x["variant"], []).append(x)
    for v, xs in by_v.items():
        if len(xs) < 2:  # a variant outside the dial (one point) has no curve to draw
            continue
        xs = sorted(xs, key=lambda x: x["flip"][0])
        fx = [x["flip"][0] for x in xs]
        rate = np.array([x["rate"] for x in xs])
        err = np.array([[x["rate"] - x["rate_lo"] for x in xs], [x["rate_hi"] - x["rate"] for x in xs]])
        a.errorbar(fx, rate, yerr=err, marker="o", capsize=3, label=v)
        d = np.array([x["vs_ref"][0] for x in xs])
        e = np.array([x["vs_ref"][1] for x in xs])
        b.errorbar(fx, d, yerr=np.where(np.isfinite(e), e, 0), marker="o", capsize=3, label=v)
    ref = [x for x in rs if x["variant"] == reference]
    if ref:
        p = np.mean([x["rate"] for x in ref])
        a.axhline(p, color="k", ls=":", lw=1, label=f"{reference} (no mismatch)")
    b.axhline(0, color="k", ls=":", lw=1)
    a.set_xlabel("measured routing flips per (token, layer), %")
    a.set_ylabel("collapse probability (95% Wilson)")
    a.set_ylim(-0.05, 1.05)
    b.set_xlabel("measured routing flips per (token, layer), %")
    what = _outcome_names(rs)[1]
    b.set_ylabel(f"{what} − {reference} (paired by seed)", fontsize=9)
    n = sorted({x["runs"] for x in rs if x["variant"] != reference})
    seeds = f"{n[0]}" if len(n) == 1 else f"{n[0]}–{n[-1]}"
    a.set_title(f"collapse over the mismatch dial ({dial}; {seeds} seeds per point)", fontsize=9)
    b.set_title(f"{what} against the no-mismatch control", fontsize=9)
    for ax in (a, b):
        ax.grid(alpha=0.3)
    a.legend(fontsize=8)
    save_figure(fig, path, dpi=110)


def _trailing10(x):
    """The trailing 10-step mean (shorter at the start), NaN read as 0 — as the report's curves."""
    x = np.nan_to_num(np.asarray(x, dtype=float))
    c = np.cumsum(np.concatenate([[0.0], x]))
    i = np.arange(1, len(x) + 1)
    return (c[i] - c[np.maximum(i - 10, 0)]) / np.minimum(i, 10)


def curves_plot(runs, variants, path):
    """One column per variant: every run's reward (top) and, when recorded, truncated share
    (bottom), as trailing 10-step means against the step; a dot at each run's collapse step."""
    from .plots import plt, save_figure  # the Agg backend
    by_v = group_by_variant(runs)
    cols = [v for v in variants if (v, "") in by_v]
    if not cols:
        raise SystemExit(f"--curves {','.join(variants)}: none of these variants is in the runs "
                         f"(there: {', '.join(v for v, _ in by_v)})")
    trunc = any("truncated_frac" in r.metrics for v in cols for r in by_v[(v, "")])
    nrow = 2 if trunc else 1
    fig, axes = plt.subplots(nrow, len(cols), figsize=(2.9 * len(cols), 2.5 * nrow + 0.4), sharex=True,
                             sharey="row", squeeze=False)
    for j, v in enumerate(cols):
        rs = sorted(by_v[(v, "")], key=lambda r: str(seed_of(r)))
        k = sum(r.status == "collapsed" for r in rs)
        for r in rs:
            c = r.attrs.get("collapse_step", -1)
            c = int(c) if c is not None and int(c) >= 0 else None
            color = "tab:red" if c is not None else "tab:blue"
            for i, name in enumerate(["reward_mean", "truncated_frac"][:nrow]):
                y = _trailing10(r.series(name))
                axes[i][j].plot(np.arange(len(y)), y, color=color, lw=0.9, alpha=0.75)
                if c is not None and c < len(y):
                    axes[i][j].plot([c], [y[c]], "o", color="k", ms=3)
        axes[0][j].set_title(f"{v}: {k}/{len(rs)} collapsed", fontsize=9)
        axes[-1][j].set_xlabel("step")
    axes[0][0].set_ylabel("reward (10-step mean)")
    if trunc:
        axes[1][0].set_ylabel("truncated share (10-step)")
    for ax in axes.flat:
        ax.grid(alpha=0.3)
    fig.suptitle("each line a seed (red: collapsed by the rule, dot at its collapse step)", fontsize=9)
    save_figure(fig, path, dpi=110)


def main(argv=None):
    ap = entry.parser(description=__doc__.split("\n")[0])
    ap.add_argument("dirs", nargs="+", metavar="SWEEP_DIR")
    ap.add_argument("--reference", default="control", help="the variant every other is paired with (default control)")
    ap.add_argument("--dial", help="scenario key of the mismatch dial (e.g. profile.fp8n.router_noise): phase.png")
    ap.add_argument("--out", help="output directory (default FIRST_DIR/report)")
    ap.add_argument("--curves", help="variants to draw run by run in curves.png: grpo,control,dense,r3")
    ap.add_argument("--outcome", choices=sorted(OUTCOMES), default="eval",
                    help="what 'vs reference' pairs: the final held-out accuracy (eval, default) or the "
                         "final 10-step reward (reward)")
    args = ap.parse_args(argv)
    if args.dial or args.curves:
        import matplotlib  # noqa: F401  (a missing one: the one-line error before anything is written)
    try:
        runs = load_pooled_runs(args.dirs)
    except AnalysisError as e:
        raise SystemExit(str(e))
    if not runs:
        raise SystemExit(f"{', '.join(args.dirs)}: no runs with metrics")
    rs = rows(group_by_variant(runs, args.dial), args.reference, args.outcome)
    out = args.out or os.path.join(args.dirs[0], "report")
    os.makedirs(out, exist_ok=True)
    md = table_md(rs, args.dial, args.reference)
    with open(os.path.join(out, "collapse.md"), "w") as f:
        f.write(md)
    with open(os.path.join(out, "collapse.csv"), "w") as f:
        f.write(table_csv(rs))
    if args.dial:
        phase_plot(rs, os.path.join(out, "phase.png"), args.dial, args.reference)
    if args.curves:
        curves_plot(runs, [v for v in args.curves.split(",") if v], os.path.join(out, "curves.png"))
    print(md, end="")
    print(f"→ {out}/collapse.md, collapse.csv" + (", phase.png" if args.dial else "")
          + (", curves.png" if args.curves else ""))


if __name__ == "__main__":
    entry.run(main)
