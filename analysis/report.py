"""The report of one or several sweeps, directories of runs, or run files: summary table (Markdown,
CSV), the collapse and precursor tables, and report/index.html, the interactive dashboard
(analysis/dashboard.py); with static=True (`--static`) also the figures for papers — curves, the
panels of variable-length responses, gradient norm and entropy (each only when some run has its
metrics), expert-load heatmaps, IS-ratio histograms (runs with dumps) — on report/static.html.
The files: docs/sweeps.md. `python3 -m analysis --help` for the command line.
"""
import html
import os
import re

from . import collapse
from . import dashboard
from . import precursors
from .runs import AnalysisError, default_group_keys, group_by_variant, group_runs, load_sources, resolve_keys, warn
from .summary import NOTE, cells, group_rows, markdown, nonfinite, to_csv


def default_out(path, info):
    """SWEEP_DIR/report, DIR/report, or <stem>-report beside a single run file; for several
    sources, report/ in the directory that holds them all."""
    if info["kind"] in ("sweep", "directory", "sources"):
        return os.path.join(info["dir"], "report")
    if isinstance(path, (list, tuple)) and len(path) > 1:
        return os.path.join(info["dir"], "report")
    p = path[0] if isinstance(path, (list, tuple)) else path
    return os.path.splitext(p)[0] + "-report"


def _safe(label):
    return re.sub(r"[^A-Za-z0-9._+-]+", "-", label).strip("-") or "group"


def _smooth_window(groups):
    n = max((r.steps for runs in groups.values() for r in runs), default=0)
    return 10 if n >= 50 else (5 if n >= 20 else 1)


def _write_table(out, name, md, csv):
    """Writes one table as out/NAME.md and out/NAME.csv; returns their names (for the report's list)."""
    for ext, text in (("md", md), ("csv", csv)):
        with open(os.path.join(out, f"{name}.{ext}"), "w") as f:
            f.write(text)
    return [f"{name}.md", f"{name}.csv"]


def build(path, group_by=None, out=None, title=None, smooth=None, verbose=True, static=False, points=None):
    """Writes the report; returns {"out": dir, "files": [...], "groups": OrderedDict, "rows": [...],
    "info": {...}}. path: a sweep directory, run file, or a list of them (several sweeps side by side)."""
    runs, info = load_sources(path)
    keys = resolve_keys(group_by, runs) if group_by else default_group_keys(info)
    groups = group_runs(runs, keys, info)
    out = out or default_out(path, info)
    if os.path.exists(out) and not os.path.isdir(out):
        raise AnalysisError(f"--out {out}: is a file, not a directory (the report is a directory of files); "
                            "choose another --out")
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        raise AnalysisError(f"--out {out}: cannot make the report directory: {e.strerror or e}")
    w = smooth if smooth is not None else _smooth_window(groups)
    if title is None:
        if info["kind"] == "sources":
            title = " + ".join(s["label"] for s in info["sources"])
        else:
            title = os.path.basename(os.path.normpath(info["dir"] if info["kind"] != "files"
                                                      else os.path.splitext(runs[0].path)[0]))
    ok_groups = {k: [r for r in v if r.metrics] for k, v in groups.items()}
    ok_groups = {k: v for k, v in ok_groups.items() if v}
    files = []

    rows = group_rows(groups)
    group_title = ", ".join(keys) if keys else "run"
    md = markdown(rows, group_title)
    skipped = info.get("skipped", [])
    if skipped:  # left out, with the reason: the report says what it did not read
        md += "\n## Skipped files\n\n" + "".join(f"- `{p}`: {why}\n" for p, why in skipped)
    infinite = [(r.path, n) for r in runs if r.metrics for n in nonfinite(r)]
    if infinite:  # counted in the means (which show inf), never averaged away
        md += "\n## Non-finite values\n\n" + "".join(f"- `{p}`: {n}\n" for p, n in infinite)
        for p, n in infinite:
            warn(f"{p}: {n}")
    duplicates = info.get("duplicates", [])
    if duplicates:  # counted once: the same file twice, or one run's copies in two directories
        md += "\n## Duplicate runs (counted once)\n\n" + "".join(f"- `{b}`: the same run as `{a}`\n"
                                                                 for a, b in duplicates)
    files += _write_table(out, "summary", md, to_csv(rows))

    tables = []  # (id, section, head, body, note): the dashboard's tables and the static page's
    lead_rows = precursors.lead_time_table(runs)
    if lead_rows:
        files += _write_table(out, "precursors", precursors.markdown(lead_rows), precursors.to_csv(lead_rows))
        head, body = precursors.cells(lead_rows)
        tables.append(("precursors", "Collapse precursors", head, body, PRECURSOR_NOTE))

    with_metrics = [r for r in runs if r.metrics]
    if collapse.has_variants(with_metrics):
        crs = collapse.rows(group_by_variant(with_metrics))
        files += _write_table(out, "collapse", collapse.table_md(crs), collapse.table_csv(crs))
        head, body = collapse._cells(crs)
        tables.insert(0, ("collapse", "Collapse and accuracy against the control", head, body, COLLAPSE_NOTE))

    if static:
        files += _static(out, title, info, keys, rows, groups, ok_groups, runs, tables, lead_rows, w)

    head, body = cells(rows, group_title)
    summary = {"id": "summary", "title": "Summary", "head": head, "rows": body, "note": NOTE}
    files += dashboard.write(out, runs, info, keys, tables, title, w, points or dashboard.POINTS, summary)
    if verbose:
        print(md)
        shown = [f for f in files if not f.startswith("data/")]
        n_data = len(files) - len(shown)
        print(f"wrote {out}/: " + ", ".join(shown) + f" and {n_data} data files (data/)")
        print(f"open {os.path.join(out, 'index.html')} in a browser (works offline, from file://)")
    return {"out": out, "files": files, "groups": groups, "rows": rows, "info": info}


PRECURSOR_NOTE = ("Lead time = collapse step (the run's collapse_step) − the flag's first firing at or before it; "
                  "false-alarm rate = share of non-collapsed runs in which the flag fired. Flags and thresholds: "
                  "docs/metrics.md, \"Collapse precursors\".")
COLLAPSE_NOTE = ("Collapse rate with its 95% Wilson interval; final − base per run and final − control "
                 "paired by seed (runs of one seed share their base policy), mean ± 95% Student-t "
                 "interval; k3 growth = mean k3 of the last tenth of the steps over the first tenth. "
                 "More (several sweep directories pooled, a mismatch dial's phase diagram): "
                 "python3 -m analysis.collapse.")


def _static(out, title, info, keys, rows, groups, ok_groups, runs, tables, lead_rows, w):
    """The figures for papers (PNG) and static.html showing them with the tables; returns the files."""
    from . import plots
    figures = []  # (section, file, caption)
    if ok_groups:
        plots.plot_reward(ok_groups, os.path.join(out, "reward.png"), w)
        figures.append(("Reward", "reward.png", "Sampled reward and greedy held-out accuracy: mean over each group's "
                        "runs, band = 95% Student-t interval over seeds."))
        plots.plot_stability(ok_groups, os.path.join(out, "stability.png"), w)
        figures.append(("Stability", "stability.png", "Train–inference KL, routing flips between the engines "
                        "(dotted: the 2% alarm), the range of the IS ratio π_old/μ, and the clip fraction."))
        if plots.has_diagnostics(ok_groups):
            plots.plot_diagnostics(ok_groups, os.path.join(out, "diagnostics.png"), w)
            figures.append(("Algorithm diagnostics", "diagnostics.png", "What each algorithm does to the tokens: "
                            "clipped (PPO clip band), masked (IcePop's ρ band, MIS) or rescaled (RSPO's γ)."))
        if plots.has_correction_diagnostics(ok_groups):
            plots.plot_correction_diagnostics(ok_groups, os.path.join(out, "corrections.png"), w)
            figures.append(("Rollout-correction diagnostics", "corrections.png", "How far μ is from π_old as the "
                            "corrections see it (docs/metrics.md): effective sample size of the IS weights, the share "
                            "of sequences the sequence masks would drop (active or not), and where by token "
                            "probability the mismatch lives."))
        figures += _response_figures(ok_groups, out, w)
        vmax = plots.load_vmax(ok_groups)  # one colour scale for every heatmap
        for label, grp in ok_groups.items():
            name = f"load-{_safe(label)}.png"
            if plots.plot_expert_load(grp, os.path.join(out, name), f"expert load — {label}", vmax):
                n = min(len([r for r in grp if "expert_load" in r.metrics]), plots.LOAD_RUNS)
                figures.append(("Expert load", name, f"{label}: each expert's share of its layer's routed "
                                "(token, slot) pairs relative to an even split, over steps, for each of the group's "
                                f"first {n} runs on its own (each seed has its own base policy, so expert k of one "
                                "run is not expert k of another); every run: the dashboard."))
            dumped = [r for r in grp if r.has_dumps]
            if dumped:
                name = f"ratios-{_safe(label)}.png"
                if plots.plot_ratios(dumped[0], os.path.join(out, name), f"IS ratios — {dumped[0].name}"):
                    figures.append(("IS ratios and clipping", name, f"{dumped[0].name} (--dump-tensors): "
                                    "per-token ratios of the first mini-batch of the dumped steps."))
    if lead_rows:
        precursors.plot(lead_rows, os.path.join(out, "precursors.png"))
        figures.append(("Collapse precursors", "precursors.png", "Lead time of each precursor flag over the collapsed "
                        "runs (dots: runs, bar: median; drawn only when some run collapsed) and its false-alarm rate "
                        "over the others."))
    html_tables = [(sec, _table_html(head, body), note) for _, sec, head, body, note in tables]
    with open(os.path.join(out, "static.html"), "w") as f:
        f.write(_html(title, info, keys, rows, figures, runs, html_tables))
    return [f for _, f, _ in figures] + ["static.html"]


def _table_html(head, body):
    e = html.escape
    return ("<div class='scroll'><table><tr>" + "".join(f"<th>{e(h)}</th>" for h in head) + "</tr>"
            + "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in body) + "</table></div>")


def _response_figures(groups, out, w):
    """The panels of variable-length responses, gradient norm and entropy (analysis/plots.py), each
    written only when some run has its metrics: [(section, file, caption)]."""
    from . import plots
    L, M, G, H = ("Response length", "Mismatch along the response", "Gradient norm", "Entropy")
    panels = [
        (L, "response-length.png", plots.has_response_length, plots.plot_response_length,
         "Tokens per response, EOS included: mean (solid) with its 95% band over seeds, p90 (dashed), and the "
         "range from the shortest to the longest response of the step (shaded between dotted lines, mean over "
         "the group's runs); dash-dot: rl.max_response_len."),
        (L, "truncated-filtered.png", plots.has_truncation, plots.plot_truncation,
         "Share of responses that reached rl.max_response_len without EOS (truncated_frac) and share of prompt "
         "groups that DAPO dynamic sampling (rl.filter_groups) dropped because all their rewards were equal "
         "(filtered_group_frac)."),
        (M, "mismatch-by-position.png", plots.has_mismatch_by_position,
         lambda g, path, w: plots.plot_mismatch_by_position(g, path),  # not over steps: no smoothing
         "Mean k3 = ρ − 1 − log ρ (ρ = π_old/μ) of the response tokens in each position bucket (k3_by_position, "
         "token-weighted over steps), over each run's last 20% of steps (solid) and its first 20% (dashed); "
         "geometric mean over the group's runs with a 95% band. Right, for runs with tokens_by_position: response "
         "tokens per step in each bucket (a bucket with few tokens is a noisy one)."),
        (M, "seq-log-ratio.png", plots.has_seq_log_ratio, plots.plot_seq_log_ratio,
         "Per-sequence log-ratio Σ_t log ρ_t = Σ_t (log π_old − log μ) over each response, what sequence-level "
         "corrections weight by: mean (rc_seq_log_ratio_abs_mean), p90 and max of its magnitude over the step's "
         "sequences; right, for runs with seq_log_ratio_mean: its signed mean."),
        (G, "grad-norm.png", plots.has_grad_norm, plots.plot_grad_norm,
         "Global gradient L2 norm before clipping: mean over the step's mini-batches (grad_norm, solid, geometric "
         "mean with a 95% band over seeds) and its largest mini-batch (grad_norm_max, dashed: a burst the mean "
         "dilutes); dotted: optim.grad_clip. Right, for runs with lr: the learning rate."),
        (H, "entropy.png", plots.has_entropy, plots.plot_entropy,
         "Entropy of the rollout policy μ over the response tokens (nats per token): over steps (entropy), and "
         "along the response (entropy_by_position) over each run's last 20% of steps (solid) and its first 20% (dashed)."),
    ]
    figures = []
    for section, name, has, plot, caption in panels:
        if has(groups):
            plot(groups, os.path.join(out, name), w)
            figures.append((section, name, caption))
    return figures


def _html(title, info, keys, rows, figures, runs, tables=()):
    e = html.escape
    head, body = cells(rows, ", ".join(keys) or "run")
    parts = ["<!DOCTYPE html>", "<html><head><meta charset='utf-8'>", f"<title>moerl report — {e(title)}</title>",
             "<style>body{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}"
             ".scroll{overflow-x:auto;max-width:100%}"
             "table{border-collapse:collapse;font-size:13px;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 7px;"
             "text-align:right}td:first-child,th:first-child{text-align:left}th{background:#f3f3f3}"
             "img{max-width:100%;border:1px solid #eee}.failed{color:#b00}.note{color:#555;font-size:13px}</style>",
             "</head><body>", f"<h1>moerl report — {e(title)}</h1>",
             f"<p class='note'>{len(runs)} run(s) from "
             + ", ".join(f"<code>{e(s['dir'])}</code>" for s in info.get("sources", [{"dir": info["dir"]}]))
             + (f", grouped by <code>{e(', '.join(keys))}</code>" if keys else "")
             + ". Files: <a href='summary.md'>summary.md</a>, <a href='summary.csv'>summary.csv</a>; "
               "the interactive dashboard: <a href='index.html'>index.html</a>.</p>",
             "<h2>Summary</h2>", _table_html(head, [[c for c in row] for row in body]),
             f"<p class='note'>{e(NOTE)} Definitions in <code>analysis/summary.py</code> and "
             "<code>docs/metrics.md</code>.</p>"]
    table_of = {sec: (t, note) for sec, t, note in tables}
    figure_sections = {sec for sec, _, _ in figures}
    for sec, t, note in tables:  # a table without a figure of its own follows the summary
        if sec not in figure_sections:
            parts.append(f"<h2>{e(sec)}</h2>" + t + f"<p class='note'>{e(note)}</p>")
    section = None
    for sec, name, caption in figures:
        if sec != section:
            parts.append(f"<h2>{e(sec)}</h2>")
            section = sec
            if sec in table_of:
                parts.append(table_of[sec][0] + f"<p class='note'>{e(table_of[sec][1])}</p>")
        parts.append(f"<figure><img src='{e(name)}' alt='{e(name)}'><figcaption class='note'>{e(caption)}"
                     "</figcaption></figure>")
    if info.get("skipped"):
        parts.append("<h2>Skipped files</h2><ul>" + "".join(
            f"<li><code>{e(p)}</code>: <span class='failed'>{e(why)}</span></li>" for p, why in info["skipped"]) + "</ul>")
    multi = len(info.get("sources", [])) > 1
    parts.append("<h2>Runs</h2><div class='scroll'><table><tr><th>run</th>" + ("<th>source</th>" if multi else "")
                 + "<th>status</th><th>steps</th><th>keys / error</th></tr>")
    for r in runs:
        kv = " ".join(f"{k}={v}" for k, v in r.keys.items())
        err = f"<span class='failed'>{e(r.error)}</span>" if r.error else ""
        parts.append(f"<tr><td>{e(r.name)}</td>" + (f"<td>{e(r.source)}</td>" if multi else "")
                     + f"<td>{e(r.status)}</td><td>{r.steps}</td><td style='text-align:left'>{e(kv)} {err}</td></tr>")
    parts.append("</table></div></body></html>")
    return "\n".join(parts) + "\n"
