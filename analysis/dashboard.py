"""The interactive report: report/index.html, a page that opens from file:// with no server and no
network, drawn in the browser with uPlot (analysis/web/vendor/uplot, copied into the report).

What the page loads (docs/sweeps.md, "The dashboard"):
  data/index.js        the runs (id, source, status, swept keys, headline numbers, scenario diff
                       against the sweep's base), the list of metrics, the tables and the
                       Student-t quantiles; loaded with the page
  data/m/<k>-<metric>.js  one per-step metric of every run, loaded when a panel shows it
  data/load/<k>.js     one run's expert load, loaded when its heatmap is shown
Scripts, not JSON, because a page from file:// may not fetch() files beside it; each data file
calls a loader function of the page.

Decimation: a run of S steps is stored at most `points` values per metric. When the longest run
has more steps than that, every run's steps are cut into the same bins of b = ceil(S_max /
points) consecutive steps, and each bin holds the mean of its finite values — the max for the
metrics that are maxima or flags (names ending in _max, and pre_*), the min for minima (_min),
so a one-step burst stays visible. Bins are shared by all runs, so bands over seeds are taken
bin by bin, after the page's smoothing (a trailing mean over the slider's steps).
"""
import json
import os
import re
import shutil
from collections import Counter, OrderedDict

import numpy as np

from .runs import expert_shares
from .stats import t95_table

WEB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "web")
VENDOR = [("vendor/uplot/uPlot.iife.min.js", "uPlot.iife.min.js"), ("vendor/uplot/uPlot.min.css", "uPlot.min.css"),
          ("vendor/uplot/LICENSE", "uPlot.LICENSE")]
PAGE = [("dashboard.js", "dashboard.js"), ("dashboard.css", "dashboard.css")]
POINTS = 500  # values per run and metric at most (docs/sweeps.md: --points)

# The panels the page opens with, when some run has the metric: (metric, log y). The order of the
# README's collapse story: reward and held-out accuracy, the gradient bursts, entropy, the lengths,
# the rollout-correction diagnostics, then the mismatch itself.
DEFAULT_PANELS = [
    ("reward_mean", False), ("eval_accuracy", False),
    ("grad_norm", True), ("grad_norm_max", True), ("entropy", False),
    ("response_length_mean", False), ("truncated_frac", False),
    ("rc_ess_seq", False), ("rc_ess_token", False), ("rc_seq_mis_masked_frac", False),
    ("rc_seq_log_ratio_abs_mean", True),
    ("kl_rollout_train", True), ("flip_rate_mean", False), ("is_ratio_max", True), ("clip_frac", False),
]
# Shares in [0, 1]: their bands are cut to [0, 1] (the ESS of normalised weights is at most 1).
_SHARE = re.compile(r"(frac|_ess_|accuracy|rate_mean|_rate$)")


def _how(name):
    """How a bin of steps is summarised: "max" for maxima and flags, "min" for minima, else "mean"."""
    base = name.split("[")[0]
    if base.endswith("_max") or base.startswith("pre_") or base.endswith("max"):
        return "max"
    if base.endswith("_min"):
        return "min"
    return "mean"


def bin_width(steps, points=POINTS):
    """Steps per bin: 1 when the longest run fits in `points` values, else ceil(steps / points)."""
    return 1 if steps <= points else -(-steps // points)


def bin_series(y, b, how="mean"):
    """A [steps] series cut into bins of b steps: each bin's mean (or max, min) of its finite values;
    NaN for a bin without any."""
    y = np.asarray(y, dtype=float)
    if b <= 1:
        return y
    n = -(-len(y) // b)
    pad = np.full(n * b, np.nan)
    pad[: len(y)] = y
    v = pad.reshape(n, b)
    fin = np.isfinite(v)
    cnt = fin.sum(axis=1)
    with np.errstate(invalid="ignore"):
        if how == "max":
            out = np.where(fin, v, -np.inf).max(axis=1)
        elif how == "min":
            out = np.where(fin, v, np.inf).min(axis=1)
        else:
            out = np.where(fin, v, 0.0).sum(axis=1) / np.maximum(cnt, 1)
    return np.where(cnt > 0, out, np.nan)


def step_metrics(runs):
    """OrderedDict name → (metric, column or None) of every per-step metric of the runs: the [steps]
    ones, and each column of a [steps, K] one with K ≤ 16 as "name[k]" (per-position buckets, the
    probability buckets). expert_load has its own heatmap."""
    out = OrderedDict()
    for r in runs:
        for name, v in sorted(r.metrics.items()):
            if v.ndim == 1 and len(v) == r.steps:
                out.setdefault(name, (name, None))
            elif v.ndim == 2 and v.shape[0] == r.steps and v.shape[1] <= 16 and name != "expert_load":
                for k in range(v.shape[1]):
                    out.setdefault(f"{name}[{k}]", (name, k))
    return OrderedDict(sorted(out.items(), key=lambda kv: kv[0]))


def _values(run, metric, col):
    v = run.metrics.get(metric)
    if v is None:
        return None
    return v if col is None else v[:, col]


def _num(x):
    return "null" if not np.isfinite(x) else format(float(x), ".5g")  # 5 digits: ~9 bytes a value


def _array(y):
    return "[" + ",".join(_num(x) for x in y) + "]"


def base_scenario(runs):
    """The grid's base as the page diffs against: for each scenario key, the value most of the
    source's runs share (the first run's on a tie). In a grid the swept keys and the variants'
    keys differ between runs, every other key is the base's own value."""
    counts = OrderedDict()
    for r in runs:
        for k, v in r.scenario.items():
            counts.setdefault(k, Counter())[v] += 1
    out = OrderedDict()
    for k, c in counts.items():
        best = max(c.values())
        first = next(r.scenario[k] for r in runs if k in r.scenario and c[r.scenario[k]] == best)
        out[k] = first
    return out


def scenario_diff(run, base):
    """[(key, base value, run value)] of the keys where the run's effective scenario differs from
    the base ("" where one of them lacks the key)."""
    keys = list(base) + [k for k in run.scenario if k not in base]
    return [(k, base.get(k, ""), run.scenario.get(k, "")) for k in keys
            if base.get(k, "") != run.scenario.get(k, "")]


def write(out, runs, info, keys, tables, title, smooth, points=POINTS, summary=None):
    """Writes the page into `out` (index.html, its scripts, data/); returns the files written,
    relative to `out`. keys: the grouping the page opens with; tables: [(id, title, head, rows,
    note)] shown as sortable tables; summary: the same for the summary table."""
    data_dir = os.path.join(out, "data")
    if os.path.isdir(data_dir):  # data of an earlier report must not be mixed in
        shutil.rmtree(data_dir)
    os.makedirs(os.path.join(data_dir, "m"))
    os.makedirs(os.path.join(data_dir, "load"))
    files = []
    for src, dst in VENDOR + PAGE:
        shutil.copyfile(os.path.join(WEB, src), os.path.join(out, dst))
        files.append(dst)

    ok = [r for r in runs if r.metrics]
    s_max = max((r.steps for r in ok), default=0)
    b = bin_width(s_max, points)
    nb = -(-s_max // b) if s_max else 0
    x = [(j * b + (b + 1) / 2) if b > 1 else j + 1 for j in range(nb)]  # bin centres, steps from 1

    metrics = step_metrics(ok)
    index_of = {id(r): i for i, r in enumerate(runs)}
    mlist = []
    for k, (name, (metric, col)) in enumerate(metrics.items()):
        fname = f"{k:03d}-{re.sub(r'[^A-Za-z0-9_]+', '_', name)}.js"
        how = _how(name)
        per_run = ["null"] * len(runs)
        lo, hi, n_runs = np.inf, -np.inf, 0
        for r in ok:
            v = _values(r, metric, col)
            if v is None or not np.isfinite(v).any():
                continue
            fin = v[np.isfinite(v)]
            lo, hi, n_runs = min(lo, fin.min()), max(hi, fin.max()), n_runs + 1
            per_run[index_of[id(r)]] = _array(bin_series(v, b, how))
        if not n_runs:
            continue  # no step of any run set it
        with open(os.path.join(data_dir, "m", fname), "w") as f:
            f.write(f"MOERL_METRIC({json.dumps(name)},[" + ",".join(per_run) + "]);\n")
        files.append(f"data/m/{fname}")
        bounds = [0.0 if lo >= 0 else None, 1.0 if (lo >= 0 and hi <= 1 and _SHARE.search(name)) else None]
        mlist.append({"name": name, "file": fname, "runs": n_runs, "bin": how, "lo": bounds[0], "hi": bounds[1],
                      "positive": bool(lo > 0)})

    shares = [(r, expert_shares(r)) for r in ok]
    allv = [s[np.isfinite(s)] for _, s in shares if s is not None]
    allv = np.concatenate(allv) if allv else np.array([])
    vmax = max(2.0, float(np.percentile(allv, 99))) if allv.size else 2.0
    load_file = {}
    for r, s in shares:
        if s is None:
            continue
        i = index_of[id(r)]
        S, L, E = s.shape
        rows = [bin_series(s[:, l, e], b) for l in range(L) for e in range(E)]
        with open(os.path.join(data_dir, "load", f"{i}.js"), "w") as f:
            f.write(f"MOERL_LOAD({i},{{\"L\":{L},\"E\":{E},\"v\":[" + ",".join(_array(y) for y in rows) + "]});\n")
        load_file[i] = f"{i}.js"
        files.append(f"data/load/{i}.js")

    bases = {}
    for src in {r.source for r in runs}:
        bases[src] = base_scenario([r for r in runs if r.source == src and r.scenario])
    from .summary import per_run_values
    key_names = [k for k in info.get("swept_keys", [])]
    page_runs = []
    for i, r in enumerate(runs):
        vals = per_run_values(r) if r.metrics else {}
        page_runs.append({
            "id": r.name, "source": r.source, "status": r.status, "steps": r.steps, "error": r.error,
            "seed": r.value("run.seed"), "keys": {k: r.value(k) for k in key_names},
            "has_metrics": bool(r.metrics), "load": load_file.get(i),
            "final_reward": vals.get("final_reward"), "final_eval": vals.get("final_eval"),
            # counted from 1 as steps are (the file's attribute is the 0-based index)
            "collapse_step": int(r.attrs.get("collapse_step", -1)) + 1 if r.metrics and
            int(r.attrs.get("collapse_step", -1)) >= 0 else -1,
            "diff": scenario_diff(r, bases.get(r.source, {})) if r.scenario else [],
            "swept": [[k, r.keys[k]] for k in r.keys],
        })
        for k in ("final_reward", "final_eval"):
            v = page_runs[-1][k]
            page_runs[-1][k] = v if v is not None and np.isfinite(v) else None
    max_group = max(len(runs), 2)
    defaults = [{"metric": m, "log": lg} for m, lg in DEFAULT_PANELS if any(x["name"] == m for x in mlist)]
    data = {
        "title": title, "sources": info.get("sources", []), "group_keys": list(keys), "key_names": key_names,
        "runs": page_runs, "metrics": mlist, "x": x, "bin": b, "steps": s_max, "smooth": int(smooth),
        "t95": [None] + t95_table(max_group)[1:], "defaults": defaults, "load_vmax": vmax,
        "tables": ([summary] if summary else []) + [
            {"id": tid, "title": tt, "head": head, "rows": body, "note": note} for tid, tt, head, body, note in tables],
        "skipped": [[p, why] for p, why in info.get("skipped", [])],
    }
    with open(os.path.join(data_dir, "index.js"), "w") as f:
        f.write("window.MOERL = " + json.dumps(data, allow_nan=False, separators=(",", ":")) + ";\n")
    files.append("data/index.js")
    with open(os.path.join(out, "index.html"), "w") as f:
        f.write(_page(title))
    files.append("index.html")
    return files


def _page(title):
    import html
    e = html.escape(title)
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>moerl — {e}</title>
<link rel="stylesheet" href="uPlot.min.css"><link rel="stylesheet" href="dashboard.css">
</head><body>
<header><h1>moerl — {e}</h1><p id="meta" class="note"></p></header>
<section id="controls">
  <label>smoothing <input id="smooth" type="range" min="1" max="100" step="1"> <span id="smooth-val"></span> steps</label>
  <label><input id="show-runs" type="checkbox"> individual runs</label>
  <label><input id="show-bands" type="checkbox" checked> 95% bands</label>
  <span id="group-by">group by: </span>
  <span id="seeds">seeds: </span>
  <span id="groups">groups: </span>
  <label>add panel <select id="add-metric"></select></label>
  <button id="reset-zoom" type="button">reset zoom</button>
</section>
<p class="note">Curves: mean over each group's runs, band = 95% Student-t interval over them (geometric mean and
band on a log axis). Drag across a chart to zoom (every chart follows), double-click to zoom out; hover for values.
<span id="bin-note"></span></p>
<section id="panels"></section>
<section id="load-section"><h2>Expert load per run</h2>
<p class="note">Each expert's share of its layer's routed (token, slot) pairs relative to an even split
(1 = balanced, 0 = dead); one run at a time, since each seed has its own base policy and expert k is not the same
expert in two of them.</p>
<label>run <select id="load-run"></select></label><div id="load-view"></div></section>
<section id="runs-section"><h2>Runs</h2>
<label>filter <input id="run-filter" type="search" placeholder="text or key=value"></label> <span id="run-count" class="note"></span>
<div class="scroll"><table id="run-table"></table></div><div id="diff"></div></section>
<section id="tables"></section>
<section id="skipped"></section>
<script src="uPlot.iife.min.js"></script>
<script src="data/index.js"></script>
<script src="dashboard.js"></script>
</body></html>
"""
