"""The league table: every variant of a grid against a reference variant (the no-mismatch
control), paired by seed, on the held-out score, stability, the engines' mismatch and expert load.

    /usr/bin/python3 -m analysis.league SWEEP_DIR [SWEEP_DIR ...] [--reference control]
                                        [--score eval_final] [--by KEY] [--pair A:B ...] [--out DIR]
                                        [--runs league-runs.csv ...]

Writes into --out (default FIRST_DIR/report): league.md (the table, ranked), league.csv (one row
per variant, every number), league-runs.csv (one row per run), league.png (the paired scores with
their intervals; expert load and router drift over training). With --by KEY (a swept scenario
key, e.g. model.n_experts): one table per value of the key, the pairing inside each value, and
by.png (each variant's score − reference and its flip % against the key's value).

Only complete seeds count: a seed enters when every variant of the grid has a finished run on it
(status complete or collapsed), so every row is paired over the same seeds and a sweep stopped
between sessions gives an honest partial table. Per variant:

  score − base      the held-out score at the last evaluation (--score, default eval_final: the
                    final answer right) minus the same run's base (its _base series, step 0),
                    mean ± 95 % t-interval over seeds
  − reference       the score minus the reference run's on the same seed (they share their base
                    policy), mean ± 95 % t-interval, and on how many seeds it is lower
  exact − base      eval_accuracy (exact match) at the last evaluation minus its base
  reward − ref      final reward (the mean reward_mean of the last 10 steps) minus the reference's
  collapsed         runs whose collapse rule fired (collapse_step ≥ 0), 95 % Wilson interval;
                    terminal: the final 10-step reward still below rl.collapse_frac of its running
                    peak; transient: it came back
  bursts            steps whose largest mini-batch gradient norm (grad_norm_max) exceeds 10× the
                    run's median grad_norm, mean per run (and runs with any)
  KL, flip %        mean over steps of kl_rollout_train and of 100·flip_rate_mean
  load CV, max/mean the π_old forward's expert load: load_cv averaged over the last 10 steps (and
                    its change from the first 10), load_max_over_mean over the last 10 steps,
                    dead_experts at the last step
  drift             router_drift at the last evaluation: the share of (position, layer) routes on
                    the fixed probe set whose top-k set differs from the base policy's
  --pair A:B        (repeatable; A:* pairs A with every other variant) a section "Paired
                    differences" in league.md and pairs.csv: A − B over the complete seeds for
                    the score, the final reward and the KL, mean ± 95 % t-interval, and on how
                    many seeds A is higher
  --runs CSV        (repeatable) the per-run rows of an earlier league, its league-runs.csv, for
                    runs whose files are gone (a results directory lost between sessions): they
                    join the sweep directories' runs as if read from their files (league.png's
                    load and drift curves come from run files only). A run finished in both must
                    agree on every number to the file's 6 significant digits, or the league
                    refuses, so a re-run checks the kept summary; a run unfinished in one counts as
                    its finished row. The file keeps the score it was made with
  rank [95 %]       the rank's uncertainty: the variants (the reference aside) ranked by mean
                    score − reference over a bootstrap of the complete seeds (RANK_RESAMPLES
                    resamples with replacement, a fixed generator seed: the same table every
                    time), the 2.5 and 97.5 percentiles of each variant's rank (1 = highest)
"""
import csv
import io
import os
import warnings
from collections import OrderedDict

from .cli import AnalysisError, Entry

entry = Entry(__name__, "analysis.league")
with entry.imports():
    import numpy as np

    from .collapse import seed_of, variant_of, wilson
    from .runs import load_sweep
    from .stats import fmt, mean_ci
    from . import summary

FINISHED = ("complete", "collapsed")
BURST_FACTOR = 10.0  # a burst: grad_norm_max above this many times the run's median grad_norm
RANK_RESAMPLES = 2000  # bootstrap resamples of the seeds for the ranks' intervals


def rank_intervals(d_by_variant, resamples=RANK_RESAMPLES, seed=0):
    """{variant: (low, high)}: the 95 % interval of each variant's rank (1 = the highest mean) when
    the seeds are resampled with replacement; d_by_variant maps each ranked variant to its paired
    differences over the same seeds, in the same order. Fewer than 2 seeds: (nan, nan)."""
    names = list(d_by_variant)
    if not names:
        return {}
    D = np.array([d_by_variant[v] for v in names], dtype=float)  # [variants, seeds]
    if D.shape[1] < 2 or not np.isfinite(D).all():
        return {v: (float("nan"), float("nan")) for v in names}
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, D.shape[1], size=(resamples, D.shape[1]))
    means = D[:, idx].mean(axis=2)  # [variants, resamples]
    ranks = np.argsort(np.argsort(-means, axis=0, kind="stable"), axis=0, kind="stable") + 1
    lo, hi = np.percentile(ranks, 2.5, axis=1), np.percentile(ranks, 97.5, axis=1)
    return {v: (float(lo[i]), float(hi[i])) for i, v in enumerate(names)}


def _finite(x):
    x = np.asarray(x, dtype=float)
    return x[np.isfinite(x)]


def _last(r, name):
    x = _finite(r.series(name))
    return float(x[-1]) if len(x) else float("nan")


def _mean(x):
    x = _finite(x)
    return float(x.mean()) if len(x) else float("nan")


def trailing10(x):
    """The 10-step trailing mean of a series (NaN before the 10th step)."""
    x = np.asarray(x, dtype=float)
    out = np.full(len(x), np.nan)
    for i in range(9, len(x)):
        w = x[i - 9:i + 1]
        out[i] = np.mean(w) if np.all(np.isfinite(w)) else np.nan
    return out


def collapse_kind(r):
    """"" (no collapse), "terminal" or "transient" (docs: the rule fired; terminal when the final
    10-step reward is still below rl.collapse_frac of the running peak of the 10-step reward)."""
    cs = r.attrs.get("collapse_step", -1)
    try:
        cs = int(cs)
    except (TypeError, ValueError):
        cs = -1
    if cs < 0:
        return ""
    frac = float(r.value("rl.collapse_frac") or 0.5)
    m = trailing10(r.series("reward_mean"))
    fin = _finite(m)
    if not len(fin):
        return "terminal"
    return "terminal" if fin[-1] < frac * float(np.max(fin)) else "transient"


def bursts(r):
    g, gm = r.series("grad_norm"), r.series("grad_norm_max")
    med = np.nanmedian(g) if np.any(np.isfinite(g)) else float("nan")
    if not np.isfinite(med) or med <= 0:
        return float("nan")
    return int(np.sum(np.where(np.isfinite(gm), gm, 0.0) > BURST_FACTOR * med))


def run_row(r, score):
    """The per-run numbers of the league (league-runs.csv)."""
    load = r.series("load_cv")
    return OrderedDict([
        ("variant", variant_of(r)), ("seed", str(seed_of(r))), ("status", r.status),
        ("score", _last(r, score)), ("score_base", _last(r, score + "_base")),
        ("exact", _last(r, "eval_accuracy")), ("exact_base", _last(r, "eval_accuracy_base")),
        ("stop_late", _last(r, "eval_stop_late")), ("stop_late_base", _last(r, "eval_stop_late_base")),
        ("final_reward", summary.final_reward(r.series("reward_mean"))),
        ("collapse", collapse_kind(r)), ("bursts", bursts(r)),
        ("kl", _mean(r.series("kl_rollout_train"))), ("flip_pct", 100 * _mean(r.series("flip_rate_mean"))),
        ("load_cv_first10", _mean(load[:10])), ("load_cv_last10", _mean(load[-10:])),
        ("load_max_over_mean_last10", _mean(r.series("load_max_over_mean")[-10:])),
        ("dead_experts_last", _last(r, "dead_experts")),
        ("router_drift", _last(r, "router_drift")), ("router_drift_layer_max", _last(r, "router_drift_layer_max")),
        ("response_length_last10", _mean(r.series("response_length_mean")[-10:])),
        ("flip_pct_last10", 100 * _mean(r.series("flip_rate_mean")[-10:])),
    ])


RUN_FIELDS = ("variant", "seed", "status", "score", "score_base", "exact", "exact_base", "stop_late",
              "stop_late_base", "final_reward", "collapse", "bursts", "kl", "flip_pct", "load_cv_first10",
              "load_cv_last10", "load_max_over_mean_last10", "dead_experts_last", "router_drift",
              "router_drift_layer_max", "response_length_last10", "flip_pct_last10")  # run_row's, in order
TEXT_FIELDS = ("variant", "seed", "status", "collapse")  # league-runs.csv's columns that are not numbers


def read_runs_csv(path, by=None):
    """The per-run rows of an earlier league (its league-runs.csv), as run_row gives them: for runs
    whose files are gone (a results directory lost between sessions) but whose summary was kept.
    Numbers come back to the 6 significant digits the file holds. by: the --by key, which the file
    must have as a column."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        raise AnalysisError(f"--runs {path}: {e.strerror}")
    need = ["variant", "seed", "status", "score", "score_base"] + ([by] if by else [])
    if not rows or any(k not in rows[0] for k in need):
        raise AnalysisError(f"--runs {path}: not a league-runs.csv (needs the columns {', '.join(need)}; "
                            f"has {', '.join(rows[0]) if rows else 'no rows'})")
    made_by = [k for k in rows[0] if k not in RUN_FIELDS]  # the --by key the file was made with, if any
    if made_by and made_by != [by]:
        raise AnalysisError(f"--runs {path}: made with --by {made_by[0]} (a column of its own); "
                            f"pass --by {made_by[0]}, so its runs pair inside each value")
    out = []
    for x in rows:
        out.append(OrderedDict((k, v if k in TEXT_FIELDS or k == by else _num(v)) for k, v in x.items()))
    return out


def _same(a, b):
    if isinstance(a, str) or isinstance(b, str):
        return str(a) == str(b)
    return bool(np.isclose(a, b, rtol=1e-5, atol=1e-12, equal_nan=True))  # the file's 6 significant digits


def join_runs(per_run, kept, by=None, source="--runs"):
    """per_run (from run files) and kept (from a league-runs.csv) as one list. A run in both (the same
    variant, seed and --by value) that finished in both must agree on every number the file holds,
    to its 6 significant digits, or the league refuses: a re-run that reproduces a kept summary
    joins it, one that does not is never mixed in silently, and the run file's row is kept. A run
    unfinished in one of the two (the kept summary written while it ran, or a re-run still
    running) counts as its finished row."""
    def key(x):
        return (x["variant"], str(x["seed"])) + ((str(x[by]),) if by else ())
    out = OrderedDict((key(x), x) for x in per_run)
    for x in kept:
        k = key(x)
        y = out.get(k)
        if y is None or (y["status"] not in FINISHED and x["status"] in FINISHED):
            out[k] = x
        elif y["status"] in FINISHED and x["status"] in FINISHED:
            bad = [f"{c} {x[c]} in the file, {y.get(c)} in the run" for c in x if c in y and not _same(x[c], y[c])]
            if bad:
                raise AnalysisError(f"{source}: run {'/'.join(k)} differs from its run file: " + "; ".join(bad[:3]))
    return list(out.values())


def complete_seeds(per_run, planned=()):
    """The seeds on which every variant (those of `planned`, the grid's, and those with runs) has a
    finished run, in order."""
    variants = OrderedDict((v, {}) for v in planned)
    for x in per_run:
        variants.setdefault(x["variant"], {})
        if x["status"] in FINISHED:
            variants[x["variant"]][x["seed"]] = x
    seeds = None
    for v in variants.values():
        seeds = set(v) if seeds is None else seeds & set(v)
    return variants, sorted(seeds or [], key=lambda s: (len(str(s)), str(s)))


def league(per_run, reference="control", planned=()):
    """One OrderedDict per variant over the complete seeds, ranked by score − reference (the
    reference first). planned: every variant of the grid, run or not (a seed counts only when each
    has finished on it)."""
    variants, seeds = complete_seeds(per_run, planned)
    if reference not in variants:
        raise AnalysisError(f"no runs of the reference variant '{reference}' (variants: {', '.join(variants)})")
    ref = variants[reference]
    out = []
    for v, by_seed in variants.items():
        xs = [by_seed[s] for s in seeds]
        n = len(xs)
        d_ref = [x["score"] - ref[x["seed"]]["score"] for x in xs]
        kinds = [x["collapse"] for x in xs]
        k = sum(1 for c in kinds if c)
        rate, lo, hi = wilson(k, n) if n else (float("nan"),) * 3
        b = [x["bursts"] for x in xs]
        row = OrderedDict([("variant", v), ("n", n), ("seeds", f"{seeds[0]}–{seeds[-1]}" if seeds else "")])
        row["score_minus_base"] = mean_ci([x["score"] - x["score_base"] for x in xs])
        row["score_minus_ref"] = mean_ci(d_ref)
        row["lower_than_ref"] = sum(1 for d in d_ref if d < 0)
        row["exact_minus_base"] = mean_ci([x["exact"] - x["exact_base"] for x in xs])
        row["reward_minus_ref"] = mean_ci([x["final_reward"] - ref[x["seed"]]["final_reward"] for x in xs])
        row["collapsed"] = (k, n, lo, hi)
        row["terminal"] = sum(1 for c in kinds if c == "terminal")
        row["transient"] = sum(1 for c in kinds if c == "transient")
        row["bursts"] = (_mean(b), sum(1 for y in b if np.isfinite(y) and y > 0))
        row["kl"] = mean_ci([x["kl"] for x in xs])
        row["flip_pct"] = mean_ci([x["flip_pct"] for x in xs])
        row["load_cv_last10"] = mean_ci([x["load_cv_last10"] for x in xs])
        row["load_cv_change"] = mean_ci([x["load_cv_last10"] - x["load_cv_first10"] for x in xs])
        row["load_max_over_mean_last10"] = mean_ci([x["load_max_over_mean_last10"] for x in xs])
        row["dead_experts_last"] = mean_ci([x["dead_experts_last"] for x in xs])
        row["router_drift"] = mean_ci([x["router_drift"] for x in xs])
        out.append(row)
    rest = sorted((r for r in out if r["variant"] != reference),
                  key=lambda r: -r["score_minus_ref"][0] if np.isfinite(r["score_minus_ref"][0]) else np.inf)
    ci = rank_intervals(OrderedDict(
        (r["variant"], [variants[r["variant"]][s]["score"] - ref[s]["score"] for s in seeds]) for r in rest))
    for r in out:
        r["rank_ci"] = ci.get(r["variant"], (float("nan"), float("nan")))
    return [r for r in out if r["variant"] == reference] + rest, seeds


PAIR_KEYS = (("score", "score", 3, False), ("final reward", "final_reward", 3, False), ("KL", "kl", 2, True))


def pairs(per_run, specs, planned=()):
    """A − B paired by seed over the complete seeds, for each "A:B" of specs ("A:*": A against every
    other variant): one OrderedDict per pair with, per PAIR_KEYS entry, (mean, half-width) and the
    count of seeds where A is higher."""
    variants, seeds = complete_seeds(per_run, planned)
    todo = []
    for spec in specs:
        a, sep, b = spec.partition(":")
        if not sep or not a or not b:
            raise AnalysisError(f"--pair {spec!r}: expected A:B (two variant names, or A:* for every other)")
        for v in (a,) + (() if b == "*" else (b,)):
            if v not in variants:
                raise AnalysisError(f"--pair {spec!r}: no variant '{v}' (variants: {', '.join(variants)})")
        todo += [(a, v) for v in variants if v != a] if b == "*" else [(a, b)]
    out = []
    for a, b in todo:
        row = OrderedDict([("a", a), ("b", b), ("n", len(seeds))])
        for _, key, _, _ in PAIR_KEYS:
            d = [variants[a][s][key] - variants[b][s][key] for s in seeds]
            row[key] = mean_ci(d)
            row[key + "_higher"] = sum(1 for x in d if x > 0)
        out.append(row)
    return out


def pairs_md(rows):
    head = "| A − B | n | " + " | ".join(f"{t} | higher" for t, _, _, _ in PAIR_KEYS) + " |\n"
    head += "| --- | --- | " + " | ".join("--- | ---" for _ in PAIR_KEYS) + " |\n"
    body = "".join(f"| {r['a']} − {r['b']} | {r['n']} | " +
                   " | ".join(f"{_pm(r[k], d, sci)} | {r[k + '_higher']}/{r['n']}" for _, k, d, sci in PAIR_KEYS) +
                   " |\n" for r in rows)
    return "\n## Paired differences\n\n" + head + body


def pairs_csv(rows):
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["a", "b", "n"] + [k + s for _, k, _, _ in PAIR_KEYS for s in ("", "_ci95", "_higher")])
    for r in rows:
        w.writerow([r["a"], r["b"], r["n"]] +
                   [x for _, k, _, _ in PAIR_KEYS for x in (f"{r[k][0]:.6g}", f"{r[k][1]:.6g}", r[k + "_higher"])])
    return buf.getvalue()


def _pm(mc, digits=3, sci=False):
    return fmt(mc[0], mc[1], digits, sci)


def table_md(rows, reference, score):
    head = ["rank", "variant", "n", f"{score} − base", f"− {reference}, paired", "lower", "exact − base",
            f"reward − {reference}", "collapsed [95 %]", "terminal / transient", "bursts / run (runs)",
            "KL", "flip %", "load CV (last 10)", "Δ load CV", "max/mean", "dead", "router drift",
            "rank [95 %]"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for i, r in enumerate(rows):
        k, n, lo, hi = r["collapsed"]
        ref = r["variant"] == reference
        b = r["bursts"]
        lines.append("| " + " | ".join([
            "–" if ref else str(i), r["variant"], str(r["n"]), _pm(r["score_minus_base"]),
            "–" if ref else _pm(r["score_minus_ref"]), "–" if ref else f"{r['lower_than_ref']}/{r['n']}",
            _pm(r["exact_minus_base"]), "–" if ref else _pm(r["reward_minus_ref"]),
            f"{k}/{n} [{lo:.2f}, {hi:.2f}]" if n else "–", f"{r['terminal']} / {r['transient']}",
            f"{b[0]:.1f} ({b[1]})" if np.isfinite(b[0]) else "–",
            _pm(r["kl"], 2, sci=True), _pm(r["flip_pct"], 2), _pm(r["load_cv_last10"]),
            _pm(r["load_cv_change"]), _pm(r["load_max_over_mean_last10"], 2), _pm(r["dead_experts_last"], 1),
            _pm(r["router_drift"]),
            "–" if ref or not np.isfinite(r["rank_ci"][0]) else f"{r['rank_ci'][0]:.0f}–{r['rank_ci'][1]:.0f}",
        ]) + " |")
    return "\n".join(lines) + "\n"


def table_csv(rows):
    buf = io.StringIO()
    w = csv.writer(buf)
    cols = ["score_minus_base", "score_minus_ref", "exact_minus_base", "reward_minus_ref", "kl", "flip_pct",
            "load_cv_last10", "load_cv_change", "load_max_over_mean_last10", "dead_experts_last", "router_drift"]
    w.writerow(["variant", "n", "seeds"] + [c + s for c in cols for s in ("", "_ci95")] +
               ["lower_than_ref", "collapsed", "collapse_low", "collapse_high", "terminal", "transient",
                "bursts_per_run", "runs_with_bursts", "rank_low", "rank_high"])
    for r in rows:
        k, n, lo, hi = r["collapsed"]
        w.writerow([r["variant"], r["n"], r["seeds"]] + [f"{v:.6g}" for c in cols for v in r[c]] +
                   [r["lower_than_ref"], k, f"{lo:.4f}", f"{hi:.4f}", r["terminal"], r["transient"],
                    f"{r['bursts'][0]:.3g}", r["bursts"][1], f"{r['rank_ci'][0]:.3g}", f"{r['rank_ci'][1]:.3g}"])
    return buf.getvalue()


def runs_csv(per_run):
    buf = io.StringIO()
    if not per_run:
        return ""
    fields = list(OrderedDict.fromkeys(k for x in per_run for k in x))  # rows from --runs may add a column
    w = csv.DictWriter(buf, fieldnames=fields, restval="")
    w.writeheader()
    for x in per_run:
        w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in x.items()})
    return buf.getvalue()


def league_plot(rows, runs, seeds, path, reference, score):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6))
    ax = axes[0]
    names = [r["variant"] for r in rows if r["variant"] != reference]
    m = [next(r for r in rows if r["variant"] == v)["score_minus_ref"] for v in names]
    y = np.arange(len(names))[::-1]
    ax.errorbar([a for a, _ in m], y, xerr=[0 if not np.isfinite(c) else c for _, c in m], fmt="o", capsize=3)
    ax.axvline(0, color="gray", linewidth=0.8)
    ax.set_yticks(y)
    ax.set_yticklabels(names)
    ax.set_xlabel(f"held-out {score} − {reference}, paired (95 %)")
    ax.set_title(f"the league, n = {len(seeds)} seeds")
    keep = {s for s in seeds}
    for ax, name, label in ((axes[1], "load_cv", "expert load CV (π_old forward)"),
                            (axes[2], "router_drift", "router drift vs the base (probe set)")):
        for v in [r["variant"] for r in rows]:
            rs = [r for r in runs if variant_of(r) == v and seed_of(r) in keep]
            if not rs:
                continue
            ys = [r.series(name) for r in rs]
            L = max(len(s) for s in ys)
            arr = np.full((len(ys), L), np.nan)
            for i, s in enumerate(ys):
                arr[i, :len(s)] = s
            with warnings.catch_warnings():  # steps without an evaluation: all NaN, NaN mean
                warnings.simplefilter("ignore", RuntimeWarning)
                mu = np.nanmean(arr, axis=0)
            steps = np.arange(1, L + 1)
            ok = np.isfinite(mu)
            if ok.sum() == 0:
                continue
            style = "o-" if ok.sum() < 20 else "-"
            ax.plot(steps[ok], mu[ok], style, label=v, linewidth=1.2 if v != reference else 2.2,
                    color="black" if v == reference else None, markersize=3)
        ax.set_xlabel("step")
        ax.set_title(label)
    axes[1].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return float("nan")


def by_plot(tables, path, reference, score, key):
    """Per variant, score − reference and the last-10-step flip % against the key's value."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    values = list(tables)
    xs = np.arange(len(values))
    variants = []
    for rows, _, _ in tables.values():
        for r in rows:
            if r["variant"] not in variants:
                variants.append(r["variant"])
    for j, v in enumerate(variants):
        off = (j - (len(variants) - 1) / 2) * 0.08
        m, c, f = [], [], []
        for val in values:
            rows, seeds, per_run = tables[val]
            row = next((r for r in rows if r["variant"] == v), None)
            m.append(row["score_minus_ref"][0] if row else np.nan)
            c.append(row["score_minus_ref"][1] if row else np.nan)
            keep = {str(s) for s in seeds}
            f.append(_mean([x["flip_pct_last10"] for x in per_run if x["variant"] == v and str(x["seed"]) in keep]))
        if v != reference:
            axes[0].errorbar(xs + off, m, yerr=[0 if not np.isfinite(e) else e for e in c], fmt="o-", capsize=3, label=v)
        axes[1].plot(xs + off, f, "o-", label=v, color="black" if v == reference else None)
    axes[0].axhline(0, color="gray", linewidth=0.8)
    for ax in axes:
        ax.set_xticks(xs)
        ax.set_xticklabels(values)
        ax.set_xlabel(key)
    axes[0].set_ylabel(f"held-out {score} − {reference}, paired (95 %)")
    axes[1].set_ylabel("routes flipped between the engines, % (last 10 steps)")
    axes[0].legend(fontsize=8)
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    ap = entry.parser(description=__doc__.split("\n")[0])
    ap.add_argument("dirs", nargs="*", metavar="SWEEP_DIR")
    ap.add_argument("--runs", action="append", default=[], metavar="CSV",
                    help="per-run rows of an earlier league (its league-runs.csv) whose run files are gone, "
                         "joined with the sweep directories' runs; a run in both must agree (repeatable)")
    ap.add_argument("--reference", default="control", help="the variant every other is paired with (default control)")
    ap.add_argument("--score", default="eval_final",
                    help="the held-out series scored at the last evaluation (default eval_final; eval_accuracy: exact)")
    ap.add_argument("--by", metavar="KEY", help="one table per value of this swept key (e.g. model.n_experts)")
    ap.add_argument("--pair", action="append", default=[], metavar="A:B",
                    help="A − B paired by seed (repeatable; A:* against every other variant)")
    ap.add_argument("--out", help="output directory (default FIRST_DIR/report)")
    args = ap.parse_args(argv)
    if not args.dirs and not args.runs:
        raise AnalysisError("nothing to read: give a sweep directory, --runs CSV, or both")
    if args.runs and args.score != "eval_final":
        raise AnalysisError(f"--runs with --score {args.score}: a league-runs.csv holds the score it was made "
                            f"with, not {args.score}; leave --score out")
    planned_runs = []  # every run of the grids, pending ones too: the variants a seed must have
    for d in args.dirs:
        planned_runs += load_sweep(d)[0]
    planned = list(OrderedDict.fromkeys(variant_of(r) for r in planned_runs))
    runs = [r for r in planned_runs if r.metrics]
    per_run = run_rows = [run_row(r, args.score) for r in runs]
    if args.by:
        for x, r in zip(per_run, runs):
            x[args.by] = r.value(args.by)
    for path in args.runs:
        kept = read_runs_csv(path, args.by)
        per_run = join_runs(per_run, kept, args.by, f"--runs {path}")
        planned += [v for v in OrderedDict.fromkeys(x["variant"] for x in kept) if v not in planned]
    if not per_run:
        raise AnalysisError(f"{', '.join(args.dirs)}: no runs with metrics")
    if not args.out and not args.dirs:
        raise AnalysisError("--runs without a sweep directory: say where the league goes with --out")
    out = args.out or os.path.join(args.dirs[0], "report")
    os.makedirs(out, exist_ok=True)
    if args.by:
        values = sorted({x[args.by] for x in per_run}, key=lambda v: (_num(v), v))
        if values == [""]:
            raise AnalysisError(f"--by {args.by}: no run has this key (swept keys are e.g. model.n_experts)")
        tables = OrderedDict()
        md, pairs_text = "", ""
        for v in values:
            sub = [x for x in per_run if x[args.by] == v]
            rows, seeds = league(sub, args.reference, planned)
            tables[v] = (rows, seeds, sub)
            md += (f"## {args.by} = {v}\n\nSeeds complete for every variant: {len(seeds)} "
                   f"({', '.join(str(s) for s in seeds)}).\n\n" + table_md(rows, args.reference, args.score) + "\n")
            if args.pair:
                prs = pairs(sub, args.pair, planned)
                md += pairs_md(prs).replace("## Paired differences", f"### Paired differences, {args.by} = {v}") + "\n"
                pairs_text += f"# {args.by} = {v}\n" + pairs_csv(prs)
        csv_text = "".join(f"# {args.by} = {v}\n" + table_csv(t[0]) for v, t in tables.items())
        if args.pair:
            with open(os.path.join(out, "pairs.csv"), "w") as f:
                f.write(pairs_text)
    else:
        rows, seeds = league(per_run, args.reference, planned)
        from_files = {id(x) for x in run_rows}
        kept = sum(1 for x in per_run if id(x) not in from_files)
        md = (f"Seeds complete for every variant: {len(seeds)} ({', '.join(str(s) for s in seeds)}); "
              f"runs with metrics: {len(runs)} of {len(planned_runs)} planned"
              + (f", and {kept} from --runs" if kept else "") + ".\n\n" + table_md(rows, args.reference, args.score))
        csv_text = table_csv(rows)
        if args.pair:
            prs = pairs(per_run, args.pair, planned)
            md += pairs_md(prs)
            with open(os.path.join(out, "pairs.csv"), "w") as f:
                f.write(pairs_csv(prs))
    with open(os.path.join(out, "league.md"), "w") as f:
        f.write(md)
    with open(os.path.join(out, "league.csv"), "w") as f:
        f.write(csv_text)
    with open(os.path.join(out, "league-runs.csv"), "w") as f:
        f.write(runs_csv(per_run))
    figures = []
    if args.by:
        if any(t[1] for t in tables.values()):
            by_plot(tables, os.path.join(out, "by.png"), args.reference, args.score, args.by)
            figures.append("by.png")
    elif seeds:
        league_plot(rows, runs, seeds, os.path.join(out, "league.png"), args.reference, args.score)
        figures.append("league.png")
    print(md, end="")
    print(f"→ {out}/league.md, league.csv, league-runs.csv" + "".join(", " + f for f in figures))


if __name__ == "__main__":
    entry.run(main)
