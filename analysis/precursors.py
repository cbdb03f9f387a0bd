"""Collapse precursors: how early each precursor flag (metrics pre_*, docs/metrics.md "Collapse
precursors") fired before a run collapsed, and how often it fired in runs that did not collapse.

- The collapse step is the root attribute `collapse_step` of a run file: the first step at which
  the collapse rule of RlTrainer::check_collapse fired (-1 or absent: never). A run is collapsed
  when it has one (status `collapsed`, or a run that went on with rl.continue_after_collapse).
- Lead time of a flag in a collapsed run = collapse step − the first step ≤ the collapse step at
  which the flag is 1. A flag that did not fire by the collapse step misses that collapse.
- False-alarm rate of a flag = the share of non-collapsed runs in which it fired at least once;
  its firing rate = the share of their steps at which it is 1.
Runs without the flag's metric (files written before the flags existed) are left out of its row.
"""
import numpy as np

FLAGS = ["pre_k3_rise", "pre_grad_norm_spike", "pre_grad_norm_drop", "pre_entropy_spike", "pre_clip_burst",
         "pre_ess_drop", "pre_length_surge"]

COLUMNS = [("flag", "flag"), ("collapsed_runs", "collapsed runs"), ("detected", "fired before collapse"),
           ("lead_median", "median lead (steps)"), ("lead_mean", "mean lead"), ("lead_min", "min lead"),
           ("lead_max", "max lead"), ("clean_runs", "non-collapsed runs"), ("false_alarm_runs", "with a false alarm"),
           ("false_alarm_rate", "false-alarm rate"), ("firing_rate", "firing rate per step")]


def collapse_step(run):
    """The stored collapse step of a run (an int ≥ 0), or None when it did not collapse."""
    c = run.attrs.get("collapse_step", -1)
    try:
        c = int(c)
    except (TypeError, ValueError):
        return None
    return c if c >= 0 else None


def first_firing(flag_series, until=None):
    """The first step (0-based) at which the flag is 1, at or before `until`; None if none."""
    x = np.asarray(flag_series, dtype=float)
    if until is not None:
        x = x[: until + 1]
    hits = np.flatnonzero(x > 0.5)
    return int(hits[0]) if hits.size else None


def lead_time_table(runs):
    """One row (dict, keys of COLUMNS) per flag that some run carries, in FLAGS order."""
    rows = []
    have = [r for r in runs if r.metrics]
    for flag in FLAGS:
        with_flag = [r for r in have if flag in r.metrics]
        if not with_flag:
            continue
        leads, clean, alarms, fired_steps, clean_steps = [], 0, 0, 0.0, 0
        collapsed = 0
        for r in with_flag:
            x = np.asarray(r.metrics[flag], dtype=float)
            c = collapse_step(r)
            if c is not None:
                collapsed += 1
                f = first_firing(x, c)
                if f is not None:
                    leads.append(c - f)
            else:
                clean += 1
                alarms += int(first_firing(x) is not None)
                fired_steps += float(np.nansum(x > 0.5))
                clean_steps += len(x)
        lead = np.asarray(leads, dtype=float)
        rows.append({
            "flag": flag, "collapsed_runs": collapsed, "detected": len(leads),
            "lead_median": float(np.median(lead)) if lead.size else float("nan"),
            "lead_mean": float(lead.mean()) if lead.size else float("nan"),
            "lead_min": float(lead.min()) if lead.size else float("nan"),
            "lead_max": float(lead.max()) if lead.size else float("nan"),
            "clean_runs": clean, "false_alarm_runs": alarms,
            "false_alarm_rate": alarms / clean if clean else float("nan"),
            "firing_rate": fired_steps / clean_steps if clean_steps else float("nan"),
            "leads": leads,
        })
    return rows


def _fmt(v, key):
    if isinstance(v, (int, np.integer)) or key in ("collapsed_runs", "detected", "clean_runs", "false_alarm_runs"):
        return str(int(v))
    if isinstance(v, str):
        return v
    if not np.isfinite(v):
        return "–"
    return f"{v:.3f}" if key in ("false_alarm_rate", "firing_rate") else f"{v:.1f}"


def cells(rows):
    """(head, body) of the table as strings (the dashboard's table)."""
    return [t for _, t in COLUMNS], [[_fmt(r[k], k) for k, _ in COLUMNS] for r in rows]


def markdown(rows):
    head = "| " + " | ".join(t for _, t in COLUMNS) + " |\n|" + "---|" * len(COLUMNS) + "\n"
    return head + "".join("| " + " | ".join(_fmt(r[k], k) for k, _ in COLUMNS) + " |\n" for r in rows)


def to_csv(rows):
    out = ",".join(k for k, _ in COLUMNS) + "\n"
    for r in rows:
        out += ",".join("" if isinstance(r[k], float) and not np.isfinite(r[k]) else str(r[k]) for k, _ in COLUMNS) + "\n"
    return out


def html_table(rows):
    import html
    e = html.escape
    parts = ["<table><tr>" + "".join(f"<th>{e(t)}</th>" for _, t in COLUMNS) + "</tr>"]
    for r in rows:
        parts.append("<tr>" + "".join(f"<td>{e(_fmt(r[k], k))}</td>" for k, _ in COLUMNS) + "</tr>")
    parts.append("</table>")
    return "".join(parts)


def plot(rows, path):
    """Left: each collapsed run's lead time per flag (dots) and the median (bar), drawn only when
    some run collapsed (else there is no lead time to show); right: each flag's false-alarm rate
    over the non-collapsed runs. Returns the number of panels drawn."""
    from .plots import plt, save_figure
    any_collapse = any(r["collapsed_runs"] for r in rows)
    if any_collapse:
        fig, (a, b) = plt.subplots(1, 2, figsize=(11, 3.8))
    else:
        fig, b = plt.subplots(1, 1, figsize=(6.5, 3.8))
        a = None
    names = [r["flag"].removeprefix("pre_") for r in rows]
    y = np.arange(len(rows))
    for i, r in enumerate(rows if any_collapse else []):
        if r["leads"]:
            a.barh(i, r["lead_median"], color="#9ecae1")
            a.scatter(r["leads"], np.full(len(r["leads"]), i) + np.linspace(-0.2, 0.2, len(r["leads"])), s=12,
                      color="#08519c", zorder=3)
        a.text(0, i, f"  {r['detected']}/{r['collapsed_runs']}", va="center", fontsize=7, color="#555")
    if a is not None:
        a.set_yticks(y, names)
        a.set_xlabel("lead time: collapse step − first firing (steps)")
        a.set_ylabel("precursor flag")
        a.set_title("lead time in collapsed runs (fired/collapsed)", fontsize=10)
    rates = [r["false_alarm_rate"] if np.isfinite(r["false_alarm_rate"]) else 0.0 for r in rows]
    b.barh(y, rates, color="#fc9272")
    b.set_yticks(y, names)
    b.set_xlim(0, 1)
    b.set_xlabel("share of non-collapsed runs in which the flag fired")
    b.set_ylabel("precursor flag")
    b.set_title("false-alarm rate" + ("" if any_collapse else " (no run collapsed: no lead times)"), fontsize=10)
    for ax in [x for x in (a, b) if x is not None]:
        ax.invert_yaxis()
        ax.grid(alpha=0.3, axis="x")
    save_figure(fig, path)
    return 2 if any_collapse else 1
