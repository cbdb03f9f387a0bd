"""The field's MoE against the record: the audits of scenarios/paper/field-flips.sh as one table.

    python3 -m analysis.field_flips DIR [--out OUTDIR]

DIR holds the script's audits, NAME-SEED.json (moerl audit's JSON, one per shape and seed). For each
shape: routes flipped per (token, layer), tokens with a flipped layer, KL (full vocabulary), the
router's median margin and the flip rate in the smallest and largest fifth of the margins, and the
base's expert load on the audited tokens — the mean over its seeds with a 95 % t-interval, and the
R3 paper's Qwen3-30B-A3B numbers beside them. Writes OUTDIR/flips.csv (one row per audit),
OUTDIR/flips.md (the table) and OUTDIR/flips.png (flip rate by margin fifth, one line per shape).
A shape with fewer seeds than the others is shown with its n; an audit that is not valid JSON, or
lacks a field, is refused with its path.
"""
import json
import math
import os
import re
import sys

from .cli import AnalysisError, Entry

entry = Entry(__name__, "analysis.field_flips")
with entry.imports():
    from .stats import fmt, mean_ci

# The order of the table and what each shape is (scenarios/paper/field-flips.sh).
SHAPES = [
    ("learn", "8 experts top-2, width 64, no balancing (learn.ini)"),
    ("k2", "64 experts top-2, width 64, aux loss"),
    ("k4", "64 experts top-4, width 32, aux loss"),
    ("k8", "64 experts top-8, width 16, aux loss (field.ini)"),
    ("e16", "16 experts top-8, width 16, aux loss"),
    ("e128", "128 experts top-8, width 16, aux loss"),
    ("none", "64 experts top-8, width 16, no balancing"),
    ("deepseek", "64 experts top-8, width 16, DeepSeek-V3 form (sigmoid, bias, shared, seq loss)"),
]
# The record: R3 paper (arXiv 2510.11370), Qwen3-30B-A3B, BF16 SGLang against BF16 Megatron.
RECORD = {"flip": 0.10, "any": 0.94, "kl": 1.535e-3}
FIELDS = ["shape", "seed", "flip_rate", "any_flip_share", "kl", "router_margin_p50", "flip_low_fifth",
          "flip_high_fifth", "load_cv", "load_max_over_mean", "dead_experts"]
NAME = re.compile(r"^(?P<shape>[a-z0-9]+)-(?P<seed>\d+)\.json$")


def read_audit(path):
    """One audit's row (FIELDS); refuses a file that is not an audit, naming it and the problem."""
    try:
        with open(path, encoding="utf-8") as f:
            a = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise AnalysisError(f"{path}: not a readable audit JSON ({e})")
    if not isinstance(a, dict) or a.get("format") != "moerl-audit":
        raise AnalysisError(f"{path}: not a moerl audit (format is not 'moerl-audit')")
    need = ["flip_rate", "any_flip_share", "kl", "layer_flips"]
    missing = [k for k in need if k not in a]
    if missing:
        raise AnalysisError(f"{path}: missing {', '.join(missing)}")
    m = NAME.match(os.path.basename(path))
    flips = a["flip_rate"]
    fifths = a.get("flip_rate_by_margin", [math.nan] * 5)
    return {
        "shape": m.group("shape"), "seed": int(m.group("seed")),
        "flip_rate": sum(flips) / len(flips) if flips else math.nan,
        "any_flip_share": a["any_flip_share"], "kl": a["kl"],
        "router_margin_p50": a.get("router_margin_p50", math.nan),
        "flip_low_fifth": fifths[0], "flip_high_fifth": fifths[-1],
        "load_cv": a.get("load_cv", math.nan), "load_max_over_mean": a.get("load_max_over_mean", math.nan),
        "dead_experts": a.get("dead_experts", math.nan),
        "_fifths": fifths, "_pair": f"{a.get('profile_a', '?')} against {a.get('profile_b', '?')}",
    }


def collect(directory):
    if not os.path.isdir(directory):
        raise AnalysisError(f"{directory}: not a directory")
    rows = [read_audit(os.path.join(directory, n)) for n in sorted(os.listdir(directory)) if NAME.match(n)]
    known = {s for s, _ in SHAPES}
    unknown = sorted({r["shape"] for r in rows} - known)
    if unknown:
        raise AnalysisError(f"{directory}: audits of unknown shapes {', '.join(unknown)} "
                         f"(known: {', '.join(s for s, _ in SHAPES)})")
    if not rows:
        raise AnalysisError(f"{directory}: no audit (NAME-SEED.json) found")
    return rows


def pct(values):
    m, ci = mean_ci([100.0 * v for v in values])
    return fmt(m, ci, digits=3)


def table(rows):
    head = ("| shape | n | routes flipped, % | tokens with a flipped layer, % | KL | median router margin | "
            "flips in the smallest / largest fifth of margins, % | load CV | dead (layer, expert) pairs |")
    out = [head, "| " + " | ".join(["---"] * 9) + " |"]
    out.append(f"| R3 paper: Qwen3-30B-A3B, BF16 (48 layers, 128 experts top-8) | – | ≈ {100 * RECORD['flip']:.0f} | "
               f"{100 * RECORD['any']:.0f} | {RECORD['kl']:.3e} | – | – | – | – |")
    for shape, what in SHAPES:
        rs = [r for r in rows if r["shape"] == shape]
        if not rs:
            continue
        col = lambda k: [r[k] for r in rs]  # noqa: E731
        kl_m, kl_ci = mean_ci(col("kl"))
        mg_m, mg_ci = mean_ci(col("router_margin_p50"))
        cv_m, cv_ci = mean_ci(col("load_cv"))
        dead_m, dead_ci = mean_ci(col("dead_experts"))
        out.append(f"| {what} | {len(rs)} | {pct(col('flip_rate'))} | {pct(col('any_flip_share'))} | "
                   f"{fmt(kl_m, kl_ci, sci=True)} | {fmt(mg_m, mg_ci, digits=4)} | "
                   f"{pct(col('flip_low_fifth'))} / {pct(col('flip_high_fifth'))} | {fmt(cv_m, cv_ci)} | "
                   f"{fmt(dead_m, dead_ci, digits=1)} |")
    return "\n".join(out) + "\n"


# The hypotheses of field-flips.sh's plan as paired differences (A − B, same seed: the same
# initialisation and warm-up data, another shape).
PAIRS = [("k8", "k2", "top-8 against top-2 at one activated width"),
         ("k4", "k2", "top-4 against top-2"),
         ("e128", "e16", "128 against 16 experts at top-8"),
         ("k8", "none", "the aux loss against no balancing at 64 experts top-8"),
         ("deepseek", "none", "DeepSeek-V3's form against no balancing"),
         ("k8", "learn", "field.ini against learn.ini")]


def paired(rows):
    """Markdown lines: each PAIRS row's difference in routes flipped (percentage points), paired by seed."""
    by = {(r["shape"], r["seed"]): r for r in rows}
    out = ["| A − B | seeds | routes flipped, points | A higher on |", "| --- | --- | --- | --- |"]
    for a, b, what in PAIRS:
        seeds = sorted(s for (sh, s) in by if sh == a and (b, s) in by)
        if not seeds:
            continue
        d = [100.0 * (by[(a, s)]["flip_rate"] - by[(b, s)]["flip_rate"]) for s in seeds]
        m, ci = mean_ci(d)
        out.append(f"| {a} − {b}: {what} | {', '.join(map(str, seeds))} | {fmt(m, ci, digits=2)} | "
                   f"{sum(x > 0 for x in d)} of {len(d)} |")
    return "\n".join(out) + "\n"


def figure(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for shape, what in SHAPES:
        rs = [r for r in rows if r["shape"] == shape]
        if not rs:
            continue
        per = [[100.0 * r["_fifths"][q] for r in rs] for q in range(5)]
        m = [mean_ci(p)[0] for p in per]
        ax.plot(range(1, 6), m, marker="o", label=f"{shape}: {what.split(',')[0]}, {what.split(',')[1].strip()}")
    ax.set_xticks(range(1, 6))
    ax.set_xticklabels(["smallest", "2nd", "3rd", "4th", "largest"])
    ax.set_xlabel("fifth of the train engine's router margins (K-th − (K+1)-th selection score)")
    ax.set_ylabel("routes flipped, %")
    seeds = sorted({r["seed"] for r in rows})
    ax.set_title(f"Where the flips are: {rows[0]['_pair']}, seeds {', '.join(map(str, seeds))}", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    tmp = path + ".tmp.png"
    fig.savefig(tmp, dpi=110)
    os.replace(tmp, path)


def write_whole(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def main(argv=None):
    p = entry.parser(description=__doc__.split("\n\n")[0])
    p.add_argument("dir", help="the audits' directory (scenarios/paper/field-flips.sh's OUT)")
    p.add_argument("--out", help="write flips.csv, flips.md and flips.png here")
    a = p.parse_args(argv)
    rows = collect(a.dir)
    md = table(rows) + "\nPaired by seed (A − B):\n\n" + paired(rows)
    sys.stdout.write(md)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        lines = [",".join(FIELDS)]
        for r in sorted(rows, key=lambda r: ([s for s, _ in SHAPES].index(r["shape"]), r["seed"])):
            lines.append(",".join(str(r[k]) if isinstance(r[k], (int, str)) else f"{r[k]:.6g}" for k in FIELDS))
        write_whole(os.path.join(a.out, "flips.csv"), "\n".join(lines) + "\n")
        write_whole(os.path.join(a.out, "flips.md"), md)
        figure(rows, os.path.join(a.out, "flips.png"))
    return 0


if __name__ == "__main__":
    entry.run(main)
