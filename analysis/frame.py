"""Sweeps as pandas DataFrames, for notebooks:

    from analysis import load_runs, run_summary
    df = load_runs("results/r3-vs-grpo")            # one row per (run, step)
    df.groupby(["rl.algorithm", "step"]).reward_mean.mean().unstack(0).plot()

load_runs(path) takes what `moerl report` takes: a sweep directory, a directory of run files, a run
file, or a list of them (several sweeps: the `source` column tells them apart).

Columns of load_runs (tidy: one row per run and RL step):
  source        the sweep's label (analysis.runs.source_labels: the directory's name)
  run           the run id (a sweep's <id>, else the file's name without .h5)
  status        complete, collapsed, running, ... (the run file's status attribute)
  <swept key>   one column per key of the sweep's grid (`variant`, `rl.algorithm`, `run.seed`, ...;
                for a directory without an index, the keys whose values differ), as strings
  step          the RL step, from 1
  <metric>      every [steps] metric of the run files (docs/metrics.md), float, NaN where a run
                did not record it at that step; [steps, K] metrics are left out (read them with
                analysis.runs.Run.metrics)
Runs without a results file (failed, pending) have no rows in load_runs, but a row in run_summary.
"""
from collections import OrderedDict

import numpy as np

from .runs import load_sources, warn
from .summary import COLUMNS, per_run_values

SUMMARY_DOC = OrderedDict([  # column → its one definition (docs/sweeps.md, "Notebooks")
    ("source", "the sweep's label"),
    ("run", "the run id"),
    ("status", "complete, collapsed, failed, preempted, running, pending, unreadable, mismatched (the file holds "
               "another run than the plan's) or unplanned (a run file the plan does not list)"),
    ("steps", "RL steps recorded in the run file"),
    ("collapse_step", "the step (counted from 1, as `step` is) at which the collapse rule fired; -1: never"),
    ("final_reward", "mean of reward_mean over the last 10 steps that set it: moerl's one 'final reward'"),
    ("peak_reward", "the largest 10-step trailing mean of reward_mean (of the raw series when shorter)"),
    ("final_eval", "the last finite eval_accuracy (greedy held-out accuracy)"),
    ("peak_eval", "the largest eval_accuracy"),
    ("kl", "mean over steps of kl_rollout_train (k3 of KL(μ‖π_old))"),
    ("flip_pct", "mean over steps of 100 · flip_rate_mean"),
    ("extreme", "mean over steps of extreme_token_frac"),
    ("clip", "mean over steps of clip_frac"),
    ("load_cv", "mean over steps of load_cv"),
    ("load_max_over_mean", "load_max_over_mean at the last step"),
    ("dead_experts", "dead_experts at the last step"),
    ("surgery_frac", "mean over steps of surgery_frac (NaN: no surgery)"),
    ("router_temperature", "router_temperature_mean at the last step (NaN: none)"),
    ("kl_staleness", "mean over steps of kl_staleness (NaN: no stale rollouts)"),
    ("error", "why a failed run failed"),
])
assert [c for c, *_ in COLUMNS] == list(SUMMARY_DOC)[5:-1], "SUMMARY_DOC must define every column of COLUMNS"


def _key_columns(runs, info):
    return [k for k in info.get("swept_keys", []) if k != "source"]


def load_runs(path):
    """A tidy DataFrame of the runs under `path`: one row per (run, step); columns in the module doc."""
    import pandas as pd
    runs, info = load_sources(path)
    keys = _key_columns(runs, info)
    frames, without = [], []
    for r in runs:
        if not r.metrics:
            # a run without numbers (pending, failed, unreadable) is a status row, step NaN: never
            # dropped in silence, and left out of groupby over step by pandas' default
            row = OrderedDict([("source", [r.source]), ("run", [r.name]), ("status", [r.status])])
            for k in keys:
                row[k] = [r.value(k)]
            row["step"] = [np.nan]
            frames.append(pd.DataFrame(row))
            without.append(f"{r.name} ({r.status})")
            continue
        n = r.steps
        cols = OrderedDict([("source", [r.source] * n), ("run", [r.name] * n), ("status", [r.status] * n)])
        for k in keys:
            cols[k] = [r.value(k)] * n
        cols["step"] = np.arange(1, n + 1)
        for name, v in sorted(r.metrics.items()):
            if v.ndim == 1 and len(v) == n:
                cols[name] = v
        frames.append(pd.DataFrame(cols))
    if without:
        warn(f"{len(without)} run{'s' if len(without) > 1 else ''} without metrics, kept as status rows (step NaN): "
             + ", ".join(without[:8]) + (", ..." if len(without) > 8 else ""))
    if not frames:
        return pd.DataFrame(columns=["source", "run", "status"] + keys + ["step"])
    return pd.concat(frames, ignore_index=True, sort=False)


def run_summary(path):
    """A DataFrame with one row per run (failed ones too): source, run, status, the swept keys,
    steps, collapse_step and the per-run numbers of the summary table; each column's definition
    is SUMMARY_DOC (the same functions as analysis/summary.py, which averages them per group)."""
    import pandas as pd
    runs, info = load_sources(path)
    keys = _key_columns(runs, info)
    rows = []
    for r in runs:
        row = OrderedDict([("source", r.source), ("run", r.name), ("status", r.status)])
        for k in keys:
            row[k] = r.value(k)
        row["steps"] = r.steps
        c = int(r.attrs.get("collapse_step", -1)) if r.metrics else -1
        row["collapse_step"] = c + 1 if c >= 0 else -1  # counted from 1, as steps are
        vals = per_run_values(r) if r.metrics else {c: float("nan") for c, *_ in COLUMNS}
        row.update(vals)
        row["error"] = r.error
        rows.append(row)
    return pd.DataFrame(rows)
