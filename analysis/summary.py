"""The summary table of a set of runs: one row per group, each number the mean ± 95% interval over
the group's runs (seeds). Written as Markdown and CSV; the same rows feed the HTML report.

Per run (formulas of the metrics: docs/metrics.md); per_run_values() gives these numbers of one run,
analysis.frame.run_summary() a table of them:
  final reward   mean of reward_mean over the last min(10, steps) steps that set it — the one
                 meaning of "final reward" in moerl (runs.final_reward; sim/io/results.h
                 final_reward_of: index.csv, `moerl sweep`'s table, `moerl inspect`, the end-of-run
                 line of `moerl run`; here, summary.csv and the dashboard)
  peak reward    max over steps of reward_mean's trailing 10-step mean (of the raw series if shorter)
  final / peak eval   last / largest finite eval_accuracy
  collapse       status "collapsed" (rate over the group's runs; step = root attribute collapse_step + 1,
                 counted from 1 as steps are)
Runs are counted by state (runs.STATES: complete, collapsed, preempted, running, pending, failed,
unreadable, mismatched, unplanned), each by its name; the numbers are over the runs with metrics ("ok").
  KL             mean over steps of kl_rollout_train (k3 of KL(μ‖π_old))
  flip %         mean over steps of 100·flip_rate_mean
  extreme        mean over steps of extreme_token_frac
  clip           mean over steps of clip_frac
  load CV        mean over steps of load_cv; max/mean load and dead experts at the last step
  surgery fired  mean over steps of surgery_frac; router τ: last router_temperature_mean;
  KL staleness   mean over steps of kl_staleness (stale rollouts)
"""
import csv
import io

import numpy as np

from .runs import STATES, final_eval, final_reward
from .stats import fmt, mean_ci, smooth


def _nanmean(x):
    """Mean over the steps that set a value (NaN: not set). An infinite value is a value: the mean
    is then ±inf (NaN when both signs occur), never the finite steps' mean (nonfinite() says where).
    Summed in long double, so that finite values near the float maximum do not overflow."""
    x = np.asarray(x, dtype=float)
    x = x[~np.isnan(x)]
    if not len(x):
        return float("nan")
    with np.errstate(invalid="ignore", over="ignore"):
        return float(np.mean(x, dtype=np.longdouble))


def nonfinite(run):
    """["kl_rollout_train: inf in 1 of 3 steps", ...]: every per-step metric of the run with +inf
    or -inf in some step (a step of a [steps, ...] metric counts when any of its values is), out
    of the steps that set it. NaN (a step that did not set the metric) is not counted."""
    out = []
    for name in sorted(run.metrics or {}):
        v = np.asarray(run.metrics[name], dtype=float)
        if v.ndim == 0 or not np.isinf(v).any():
            continue
        flat = v.reshape(len(v), -1)
        pos = int(np.any(flat == np.inf, axis=1).sum())
        neg = int(np.any(flat == -np.inf, axis=1).sum())
        n = int((~np.all(np.isnan(flat), axis=1)).sum())
        parts = ([f"inf in {pos}"] if pos else []) + ([f"-inf in {neg}"] if neg else [])
        out.append(f"{name}: {', '.join(parts)} of {n} steps")
    return out


def _last_finite(x):
    x = np.asarray(x, dtype=float)
    x = x[np.isfinite(x)]
    return float(x[-1]) if len(x) else float("nan")


def _max_finite(x):
    x = np.asarray(x, dtype=float)
    x = x[np.isfinite(x)]
    return float(np.max(x)) if len(x) else float("nan")


def _peak_reward(r):
    x = r.series("reward_mean")
    w = 10 if len(x) >= 10 else 1
    return _max_finite(smooth(x, w))


# (column, title, per-run function, digits or "sci")
COLUMNS = [
    ("final_reward", "final reward", final_reward, 3),
    ("peak_reward", "peak reward", _peak_reward, 3),
    ("final_eval", "final eval", final_eval, 3),
    ("peak_eval", "peak eval", lambda r: _max_finite(r.series("eval_accuracy")), 3),
    ("kl", "KL(μ‖π_old) k3", lambda r: _nanmean(r.series("kl_rollout_train")), "sci"),
    ("flip_pct", "flip %", lambda r: 100 * _nanmean(r.series("flip_rate_mean")), 2),
    ("extreme", "extreme tokens", lambda r: _nanmean(r.series("extreme_token_frac")), "sci"),
    ("clip", "clip frac", lambda r: _nanmean(r.series("clip_frac")), "sci"),
    ("load_cv", "load CV", lambda r: _nanmean(r.series("load_cv")), 3),
    ("load_max_over_mean", "max/mean load", lambda r: _last_finite(r.series("load_max_over_mean")), 2),
    ("dead_experts", "dead experts", lambda r: _last_finite(r.series("dead_experts")), 1),
    # stabilisers (docs/stabilisers.md); "–" for runs that do not use them
    ("surgery_frac", "surgery fired", lambda r: _nanmean(r.series("surgery_frac")), 3),
    ("router_temperature", "router τ (last)", lambda r: _last_finite(r.series("router_temperature_mean")), 3),
    ("kl_staleness", "KL staleness", lambda r: _nanmean(r.series("kl_staleness")), "sci"),
]


def per_run_values(run):
    """OrderedDict column → the run's own value of every column of COLUMNS (NaN where it has none)."""
    from collections import OrderedDict
    return OrderedDict((col, float(fn(run))) for col, _, fn, _ in COLUMNS)


def shown_columns(rows):
    """The COLUMNS that some row has a mean of (finite or infinite): the Markdown and HTML tables leave out a
    column that is empty in every row (a stabiliser no run used); the CSV keeps them all."""
    return [c for c in COLUMNS if any(not np.isnan(row[c[0]][0]) for row in rows)] if rows else list(COLUMNS)


def group_rows(groups):
    """One dict per group: label, runs, ok (runs with metrics), one count per state of
    runs.STATES (a run in no known state counts as failed), collapse_step (counted from 1), steps,
    and (mean, ci) for every column of COLUMNS."""
    rows = []
    for label, runs in groups.items():
        ok = [r for r in runs if r.metrics]
        collapsed = [r for r in ok if r.status == "collapsed"]
        steps = [int(r.attrs.get("collapse_step", -1)) + 1 for r in collapsed]
        row = {
            "group": label,
            "runs": len(runs),
            "ok": len(ok),
            "collapse_step": mean_ci([s for s in steps if s >= 1]),
            "steps": int(np.median([r.steps for r in ok])) if ok else 0,
        }
        for state in STATES:
            row[state] = 0
        for r in runs:
            row[r.status if r.status in STATES else "failed"] += 1
        for col, _, fn, _ in COLUMNS:
            vals = [fn(r) for r in ok]
            inf = [v for v in vals if np.isinf(v)]
            # a run whose mean is infinite makes the group's so (nan: both signs), not left out
            with np.errstate(invalid="ignore"):
                row[col] = (float(np.sum(inf)), float("nan")) if inf else mean_ci(vals)
        rows.append(row)
    return rows


def _cell(row, col, digits):
    m, ci = row[col]
    return fmt(m, ci, sci=True) if digits == "sci" else fmt(m, ci, digits)


NOTE = ("Mean ± 95% Student-t half-width over the runs (seeds) of each group. final reward: mean of the last "
        "10 steps; peak reward: best 10-step mean; eval: greedy held-out accuracy (last, best); "
        "KL, flip %, extreme, clip, load CV: means over all steps (inf where a step holds inf: "
        "\"Non-finite values\" lists them); max/mean load and dead experts: last step. "
        "Columns that no run has a value of are left out.")


def runs_cell(row):
    """"3" when every run of the group finished; else the runs with numbers and every other state
    by name: "1 (1 running; +2 pending, +1 unreadable)"."""
    unfinished = [f"{row[s]} {s}" for s in ("preempted", "running") if row[s]]
    without = [f"+{row[s]} {s}" for s in ("pending", "failed", "unreadable", "mismatched", "unplanned") if row[s]]
    # runs with numbers but a state the loop counts elsewhere (a failed run's partial file) stay in ok
    inner = "; ".join(x for x in (", ".join(unfinished), ", ".join(without)) if x)
    return f"{row['ok']}" + (f" ({inner})" if inner else "")


def cells(rows, group_title="group"):
    """(head, body) of the table as strings, without the columns empty in every row; shared by the
    Markdown, the static HTML and the dashboard."""
    cols = shown_columns(rows)
    head = [group_title, "runs", "steps"] + [t for _, t, _, _ in cols] + ["collapsed (step)"]
    body = []
    for row in rows:
        c = [row["group"], runs_cell(row), str(row["steps"])]
        c += [_cell(row, col, d) for col, _, _, d in cols]
        last = f"{row['collapsed']}/{row['ok']}"
        if row["collapsed"]:
            last += f" ({fmt(*row['collapse_step'], 0)})"
        c.append(last)
        body.append(c)
    return head, body


def markdown(rows, group_title="group"):
    head, body = cells(rows, group_title)
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    lines += ["| " + " | ".join(c) + " |" for c in body]
    lines += ["", NOTE]
    return "\n".join(lines) + "\n"


def to_csv(rows, group_keys=()):
    """CSV with one mean and one ci95 column per quantity (empty cells for NaN)."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    head = ["group", "runs", "ok", "failed", "steps", "collapsed", "collapse_rate", "collapse_step"]
    head += [s for s in STATES if s not in ("failed", "collapsed")]  # every state counted by name
    for col, _, _, _ in COLUMNS:
        head += [col, col + "_ci95"]
    w.writerow(head)

    def num(x):
        return "" if np.isnan(x) else f"{x:.6g}"  # inf and -inf as such

    for row in rows:
        rate = row["collapsed"] / row["ok"] if row["ok"] else float("nan")
        cells = [row["group"], row["runs"], row["ok"], row["failed"], row["steps"], row["collapsed"], num(rate),
                 num(row["collapse_step"][0])]
        cells += [row[s] for s in STATES if s not in ("failed", "collapsed")]
        for col, _, _, _ in COLUMNS:
            cells += [num(row[col][0]), num(row[col][1])]
        w.writerow(cells)
    return out.getvalue()
