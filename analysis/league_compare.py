"""Two leagues side by side: which gaps to the control grow with the flips?

    python3 -m analysis.league_compare A_RUNS_CSV B_RUNS_CSV [--labels A,B] [--out DIR]
        [--where-a KEY=VALUE] [--where-b KEY=VALUE]

Each input is a league's per-run file (league-runs.csv, as `analysis.league` writes it), for example
the top-2 league (docs/league) and the league at the field's MoE (docs/field/league). For each
league, over its own complete seeds (those analysis.league counts): every variant's held-out
score − control, paired by seed, its flips and its KL. For each variant both leagues hold, the change of
its gap from A to B (B − A: the two leagues' seeds are different, so the interval is Welch's, 95 %)
beside the change of its flips. A league made with `analysis.league --by KEY` holds one league per
value of KEY: --where-a / --where-b KEY=VALUE take one of them (for example the two balancing forms'
grids, docs/field/balance-aux and balance-bias, each at one setting).

The mark (fixed on 2026-12-07, before the first run of the league at the field's MoE): a variant's
gap **grows** from A to B when its gap's change B − A lies below 0 with its 95 % Welch interval,
**shrinks** when above 0, else **not separated**; a gap "grows with the flips" when it grows and
the variant's flips are higher in B (their own Welch interval above 0). The control has no gap.

Writes DIR/compare.md (also printed), DIR/compare.csv and DIR/compare.png (each variant's gap
against its flips, an arrow from A to B).
"""
import csv
import io
import os
import sys
from collections import OrderedDict

from .cli import AnalysisError, Entry, write_outputs

entry = Entry(__name__, "analysis.league_compare")
with entry.imports():
    import numpy as np
    from .league import complete_seeds, read_runs_csv
    from .stats import fmt, mean_ci, t95

REFERENCE = "control"


def welch(a, b):
    """(mean(b) − mean(a), 95 % half-width by Welch's t with the Welch–Satterthwaite degrees of freedom)
    of two independent samples (NaN half-width when either has fewer than two finite values)."""
    a = np.asarray([x for x in a if np.isfinite(x)], dtype=float)
    b = np.asarray([x for x in b if np.isfinite(x)], dtype=float)
    if len(a) == 0 or len(b) == 0:
        return float("nan"), float("nan")
    d = float(b.mean() - a.mean())
    if len(a) < 2 or len(b) < 2:
        return d, float("nan")
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    se2 = va + vb
    if se2 == 0:
        return d, 0.0
    dof = se2 * se2 / (va * va / (len(a) - 1) + vb * vb / (len(b) - 1))
    return d, t95(dof) * float(np.sqrt(se2))


def per_variant(per_run):
    """{variant: {"gap": [score − control per complete seed], "flip": [...], "kl": [...]}} over the
    league's complete seeds (analysis.league's complete_seeds), and those seeds."""
    by, seeds = complete_seeds(per_run)
    ref = by[REFERENCE]
    out = OrderedDict()
    for v, runs in by.items():
        xs = [runs[s] for s in seeds]
        out[v] = {"gap": [x["score"] - ref[x["seed"]]["score"] for x in xs], "flip": [x["flip_pct"] for x in xs],
                  "kl": [x["kl"] for x in xs], "n": len(xs)}
    return out, seeds


def mark(change):
    m, h = change
    if not (np.isfinite(m) and np.isfinite(h)):
        return "not separated"
    return "grows" if m + h < 0 else "shrinks" if m - h > 0 else "not separated"


def compare(a_runs, b_runs):
    """One OrderedDict per variant both leagues hold (the control first)."""
    a, a_seeds = per_variant(a_runs)
    b, b_seeds = per_variant(b_runs)
    if not a_seeds or not b_seeds:
        raise AnalysisError("a league without a seed complete for every variant: nothing to compare")
    out = []
    for v in [REFERENCE] + [v for v in a if v in b and v != REFERENCE]:
        x, y = a[v], b[v]
        row = OrderedDict([("variant", v), ("n_a", x["n"]), ("n_b", y["n"])])
        for key in ("gap", "flip", "kl"):
            row[key + "_a"] = mean_ci(x[key])
            row[key + "_b"] = mean_ci(y[key])
            row[key + "_change"] = welch(x[key], y[key])
        row["mark"] = "–" if v == REFERENCE else mark(row["gap_change"])
        flips_up = row["flip_change"][0] - row["flip_change"][1] > 0
        row["with_flips"] = v != REFERENCE and row["mark"] == "grows" and bool(flips_up)
        out.append(row)
    return out


def table_md(rows, labels):
    la, lb = labels
    head = (f"| variant | n ({la} / {lb}) | − control, {la} | − control, {lb} | change ({lb} − {la}, Welch) | "
            f"gap | flip %, {la} | flip %, {lb} | KL, {la} | KL, {lb} |\n"
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
    body = ""
    for r in rows:
        ref = r["variant"] == REFERENCE
        body += (f"| {r['variant']} | {r['n_a']} / {r['n_b']} |"
                 + (" – | – | – | – |" if ref else
                    f" {fmt(*r['gap_a'])} | {fmt(*r['gap_b'])} | {fmt(*r['gap_change'])} | "
                    f"{r['mark']}{' with the flips' if r['with_flips'] else ''} |")
                 + f" {fmt(*r['flip_a'], 2)} | {fmt(*r['flip_b'], 2)} | {fmt(*r['kl_a'], 2, True)} | "
                   f"{fmt(*r['kl_b'], 2, True)} |\n")
    return head + body


def table_csv(rows):
    buf = io.StringIO()
    w = csv.writer(buf)
    keys = [k for k in rows[0] if k not in ("variant", "n_a", "n_b", "mark", "with_flips")]
    w.writerow(["variant", "n_a", "n_b"] + [k + s for k in keys for s in ("", "_ci95")] + ["mark", "with_flips"])
    for r in rows:
        w.writerow([r["variant"], r["n_a"], r["n_b"]] + [f"{v:.6g}" for k in keys for v in r[k]] +
                   [r["mark"], int(r["with_flips"])])
    return buf.getvalue()


def figure(rows, labels, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in rows:
        if r["variant"] == REFERENCE:
            continue
        x0, x1 = r["flip_a"][0], r["flip_b"][0]
        y0, y1 = r["gap_a"][0], r["gap_b"][0]
        ax.annotate("", xy=(x1, y1), xytext=(x0, y0), arrowprops=dict(arrowstyle="->", lw=0.8, color="0.5"))
        ax.plot([x0], [y0], "o", ms=4, color="C0")
        ax.plot([x1], [y1], "s", ms=4, color="C1")
        ax.annotate(r["variant"], (x1, y1), fontsize=7, xytext=(3, 2), textcoords="offset points")
    ax.axhline(0, color="k", lw=0.6)
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xlabel("routes flipped, % (per (token, layer), on the variant's own rollouts)")
    ax.set_ylabel("held-out final answer − control (paired)")
    ax.plot([], [], "o", color="C0", label=labels[0])
    ax.plot([], [], "s", color="C1", label=labels[1])
    ax.legend(fontsize=8)
    ax.set_title("each variant's gap to the control against its flips, one league to the other", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def select(path, where, option):
    """The rows of league-runs.csv `path` whose column KEY holds VALUE (where = "KEY=VALUE"), or every
    row (where None). Refuses a malformed selector, a file without the column, or a value no row has."""
    if where is None:
        return read_runs_csv(path)
    key, sep, value = where.partition("=")
    key, value = key.strip(), value.strip()
    if not sep or not key or not value:
        raise AnalysisError(f"{option} {where!r}: expected KEY=VALUE (a --by column of the file and one of its values)")
    rows = read_runs_csv(path, key)
    values = sorted({x[key] for x in rows})
    chosen = [x for x in rows if x[key] == value]
    if not chosen:
        raise AnalysisError(f"{option} {where!r}: no run of {path} has {key} = {value} "
                            f"(its values: {', '.join(values)})")
    return chosen


def main(argv=None):
    p = entry.parser(description=__doc__.split("\n\n")[0])
    p.add_argument("a", metavar="A_RUNS_CSV")
    p.add_argument("b", metavar="B_RUNS_CSV")
    p.add_argument("--labels", default="A,B", help="the two leagues' names in the table (default A,B)")
    p.add_argument("--out", help="write compare.md, compare.csv and compare.png here")
    p.add_argument("--where-a", metavar="KEY=VALUE", help="only A's runs with this value of a --by column")
    p.add_argument("--where-b", metavar="KEY=VALUE", help="only B's runs with this value of a --by column")
    args = p.parse_args(argv)
    labels = [x.strip() for x in args.labels.split(",")]
    if len(labels) != 2 or not all(labels):
        raise AnalysisError(f"--labels {args.labels!r}: expected two names separated by a comma")
    a_runs = select(args.a, args.where_a, "--where-a")
    b_runs = select(args.b, args.where_b, "--where-b")
    for path, runs in ((args.a, a_runs), (args.b, b_runs)):
        if not any(x["variant"] == REFERENCE for x in runs):
            raise AnalysisError(f"{path}: no runs of the control ('{REFERENCE}')")
    rows = compare(a_runs, b_runs)
    md = table_md(rows, labels)
    sys.stdout.write(md)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        write_outputs(OrderedDict([(os.path.join(args.out, "compare.md"), md),
                                   (os.path.join(args.out, "compare.csv"), table_csv(rows)),
                                   (os.path.join(args.out, "compare.png"), lambda path: figure(rows, labels, path))]))
    return 0


if __name__ == "__main__":
    entry.run(main)
