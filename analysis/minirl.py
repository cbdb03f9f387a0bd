"""The newest anchor, claim by claim: arXiv 2512.01374's six claims on the grids of issue 62.

    python3 -m analysis.minirl ON_DIR [OFF_DIR] [--out OUTDIR] [--score eval_final]

ON_DIR is the on-policy grid (scenarios/paper/field-minirl.ini: rl.minibatches = 1), OFF_DIR the
off-policy one (field-minirl-off.ini: rl.minibatches = 2, 4, 8, the global batch fixed). Each run is
placed by its variant and its mini-batch count N. Per (N, arm), over the seeds complete for every
arm of that N (every arm its grid plans, so a partial summary counts whole seeds only): the held-out score − base and − control (paired by seed, 95 % t-intervals),
collapse (terminal, transient) with its Wilson interval and the steps to collapse, entropy over
training (first and last 10 steps, and the paired change), the train–inference KL, the policy
staleness (staleness_kl: KL(π_old ‖ π_θ) by k3 at each step's last mini-batch), the clip fraction
and the flips. Then the claims, each marked by the rule below, and the figure in the paper's layout
(one column per N: training reward, held-out score, entropy, KL over steps).

Writes OUTDIR/claims.md (the claims and the arm tables, also printed), OUTDIR/arms.csv (one row per
(N, arm)), OUTDIR/runs.csv (one row per run) and OUTDIR/minirl.png.

The marks (fixed on 2026-12-07, before the first run of either grid). "A > B" is a paired difference
on the score (held-out final answer − base) over the complete seeds whose 95 % t-interval lies above
0; "separated" means the interval excludes 0. "A collapses more than B": A's and B's collapse counts
(terminal or transient) have disjoint 95 % Wilson intervals, A's above. Every claim is one of
**agrees**, **disagrees** or **not separated**, with its intervals and n:
  1. (N = 1) MiniRL is the most stable and scores best. Agrees: no realistic-pair arm collapses less
     than minirl by the Wilson rule, and minirl > X for every other realistic-pair arm X. Disagrees:
     some X collapses less than minirl, or X > minirl for some X. Else not separated.
  2. (N = 1) With length normalisation it stays stable but scores lower. Agrees: minirl-lennorm does
     not collapse more than minirl, and minirl > minirl-lennorm. Disagrees: it collapses more, or
     minirl-lennorm > minirl. Else not separated.
  3. (N = 1) Without the train–inference IS weight it collapses fast, with a sharp entropy drop; with
     R3 too. Agrees: minirl-nois collapses more than minirl and minirl-nois-r3 more than minirl-r3.
     Disagrees: one of them collapses in none of its runs. Else not separated. The entropy change
     (last 10 − first 10 steps, paired against the partner) and the steps to collapse are shown.
  4. (N = 1) R3 lowers the train–inference KL but does not raise the score; with length
     normalisation it lowers it. Three parts, each marked: (a) KL(minirl-r3) < KL(minirl), paired,
     separated: agrees; the reverse separated: disagrees. (b) minirl-r3 > minirl: disagrees; else
     agrees (no rise was detected: a weak agreement when the interval is wide, said with it).
     (c) minirl-lennorm > minirl-lennorm-r3: agrees; the reverse: disagrees.
  5. (each N > 1) Both clipping and routing replay are needed: MiniRL without clipping
     (minirl-noclip) and without replay (minirl) collapse early. Agrees: both collapse more than
     minirl-r3. Disagrees: one of them collapses in none of its runs. Else not separated.
  6. (N = 2) R2 beats R3: minirl-r2 > minirl-r3 agrees, the reverse disagrees. (N = 4, 8) R3 beats
     R2 and R2 does not stay stable: agrees when minirl-r3 > minirl-r2 and minirl-r2 collapses in at
     least one run; disagrees when minirl-r2 > minirl-r3, or minirl-r2 collapses in none of its runs
     while the two are not separated. Else not separated.
A claim whose arms are missing or have no complete seed (a grid not run yet) is "not run"; one
whose arms have fewer than two complete seeds is "not separated" with its n.
"""
import csv
import io
import os
import sys
from collections import OrderedDict

from .cli import AnalysisError, Entry, write_outputs

entry = Entry(__name__, "analysis.minirl")
with entry.imports():
    import numpy as np
    from .league import FINISHED, _last, _mean, collapse_kind, complete_seeds, read_dirs
    from .runs import final_reward, seed_of, variant_of
    from .stats import band, fmt, mean_ci, smooth, wilson

# The arms of each grid (scenarios/paper/field-minirl.ini, field-minirl-off.ini), in table order.
ON_ARMS = ("control", "minirl", "minirl-lennorm", "minirl-nois", "minirl-r3", "minirl-lennorm-r3", "minirl-nois-r3",
           "grpo-real", "cispo-real")
OFF_ARMS = ("control", "minirl", "minirl-noclip", "minirl-r2", "minirl-r2-noclip", "minirl-r3")
REFERENCE = "control"  # both engines bf16-train: no mismatch
# The paper's layout: one column per N, these series over steps (trailing 10-step means).
PANELS = (("reward_mean", "training reward"), ("score", "held-out score"), ("entropy", "entropy (nats/token)"),
          ("kl_rollout_train", "train–inference KL"))
RUN_FIELDS = ("n_minibatches", "variant", "seed", "status", "score", "score_base", "final_reward", "collapse",
              "collapse_step", "entropy_first10", "entropy_last10", "kl", "staleness", "clip_frac", "flip_pct")


def run_row(r, score="eval_final"):
    """The per-run numbers (runs.csv) of a loaded run."""
    n = r.value("rl.minibatches")
    try:
        n = int(float(n))
    except (TypeError, ValueError):
        raise AnalysisError(f"{r.path}: no rl.minibatches in its scenario")
    ent = r.series("entropy")
    cs = r.attrs.get("collapse_step", -1)
    try:
        cs = int(cs)
    except (TypeError, ValueError):
        cs = -1
    return OrderedDict([
        ("n_minibatches", n), ("variant", variant_of(r)), ("seed", str(seed_of(r))), ("status", r.status),
        ("score", _last(r, score)), ("score_base", _last(r, score + "_base")),
        ("final_reward", final_reward(r)), ("collapse", collapse_kind(r)), ("collapse_step", cs),
        ("entropy_first10", _mean(ent[:10])), ("entropy_last10", _mean(ent[-10:])),
        ("kl", _mean(r.series("kl_rollout_train"))), ("staleness", _mean(r.series("staleness_kl"))),
        ("clip_frac", _mean(r.series("clip_frac"))), ("flip_pct", 100 * _mean(r.series("flip_rate_mean"))),
    ])


def by_cell(rows):
    """{N: [row, ...]} of the runs, by mini-batch count; a second finished run of one (N, arm, seed)
    is refused naming it."""
    out, seen = OrderedDict(), set()
    for x in rows:
        key = (x["n_minibatches"], x["variant"], x["seed"])
        if x["status"] in FINISHED:
            if key in seen:
                raise AnalysisError(f"two runs of N={key[0]} {key[1]} seed {key[2]}")
            seen.add(key)
        out.setdefault(x["n_minibatches"], []).append(x)
    return out


def _gain(x):
    return x["score"] - x["score_base"]


class Cell:
    """One N: its arms' rows on its complete seeds (analysis.league's complete_seeds: every arm the
    grid plans and every arm with runs has finished on them)."""

    def __init__(self, n, rows):
        self.n = n
        arms, self.seeds = complete_seeds(rows, ON_ARMS if n == 1 else OFF_ARMS)
        self.arms = OrderedDict((a, [by_seed[s] for s in self.seeds]) for a, by_seed in arms.items() if by_seed)

    def has(self, *names):
        """Every named arm has runs on at least one complete seed (else its claim is "not run")."""
        return bool(self.seeds) and all(a in self.arms for a in names)

    def paired(self, a, b, value=_gain):
        """(mean, half-width) of value(a) − value(b) over the complete seeds."""
        return mean_ci([value(x) - value(y) for x, y in zip(self.arms[a], self.arms[b])])

    def collapses(self, a):
        """(k, n, low, high): runs of arm a that collapsed (terminal or transient), Wilson 95 %."""
        rs = self.arms[a]
        k = sum(1 for x in rs if x["collapse"])
        _, lo, hi = wilson(k, len(rs))
        return k, len(rs), lo, hi


def above(mc):
    """A paired difference separated above 0."""
    m, h = mc
    return bool(np.isfinite(m) and np.isfinite(h) and m - h > 0)


def collapses_more(cell, a, b):
    """a's collapse count's Wilson interval lies wholly above b's."""
    _, n_a, lo_a, _ = cell.collapses(a)
    _, n_b, _, hi_b = cell.collapses(b)
    return bool(n_a and n_b and lo_a > hi_b)


def _d(mc, digits=3, sci=False):
    return fmt(mc[0], mc[1], digits, sci)


def _c(cell, a):
    k, n, lo, hi = cell.collapses(a)
    return f"{k}/{n} [{lo:.2f}, {hi:.2f}]" if n else "–"


def claims(cells):
    """[(claim, N, mark, evidence)] for the six claims, by the rules of this module's docstring."""
    out = []
    on = cells.get(1)

    def add(num, n, mark, text):
        out.append((num, n, mark, text))

    def too_few(cell):
        return len(cell.seeds) < 2

    real = [a for a in ON_ARMS if a != REFERENCE]
    # 1
    if on is None or not on.has(*real):
        add("1", 1, "not run", "")
    else:
        others = [a for a in real if a != "minirl"]
        d = {x: on.paired("minirl", x) for x in others}
        less = [x for x in others if collapses_more(on, "minirl", x)]
        better = [x for x in others if above((-d[x][0], d[x][1]))]
        text = "minirl − X: " + "; ".join(f"{x} {_d(d[x])}" for x in others) + \
               f". Collapsed: minirl {_c(on, 'minirl')}" + "".join(f", {x} {_c(on, x)}" for x in others)
        if too_few(on):
            mark = "not separated"
        elif less or better:
            mark = "disagrees"
            text += (f". Collapses less than minirl: {', '.join(less)}" if less else "") + \
                    (f". Above minirl: {', '.join(better)}" if better else "")
        elif all(above(d[x]) for x in others):
            mark = "agrees"
        else:
            mark = "not separated"
            text += f". minirl above {sum(above(d[x]) for x in others)} of {len(others)}"
        add("1", 1, mark, text)
    # 2
    if on is None or not on.has("minirl", "minirl-lennorm"):
        add("2", 1, "not run", "")
    else:
        d = on.paired("minirl", "minirl-lennorm")
        more = collapses_more(on, "minirl-lennorm", "minirl")
        text = (f"minirl − minirl-lennorm {_d(d)}; collapsed: minirl-lennorm {_c(on, 'minirl-lennorm')}, "
                f"minirl {_c(on, 'minirl')}")
        mark = ("not separated" if too_few(on) else "disagrees" if more or above((-d[0], d[1]))
                else "agrees" if above(d) else "not separated")
        add("2", 1, mark, text)
    # 3
    if on is None or not on.has("minirl", "minirl-nois", "minirl-r3", "minirl-nois-r3"):
        add("3", 1, "not run", "")
    else:
        parts, marks = [], []
        for arm, partner in (("minirl-nois", "minirl"), ("minirl-nois-r3", "minirl-r3")):
            k, n, _, _ = on.collapses(arm)
            steps = [x["collapse_step"] for x in on.arms[arm] if x["collapse"] and x["collapse_step"] >= 0]
            dent = on.paired(arm, partner, lambda x: x["entropy_last10"] - x["entropy_first10"])
            parts.append(f"{arm} collapsed {_c(on, arm)} against {partner} {_c(on, partner)}"
                         + (f", at steps {', '.join(str(s) for s in sorted(steps))}" if steps else "")
                         + f"; entropy change − {partner}'s {_d(dent, 4)}")
            marks.append("agrees" if collapses_more(on, arm, partner) else "disagrees" if k == 0 else "open")
        mark = ("not separated" if too_few(on) else "disagrees" if "disagrees" in marks
                else "agrees" if all(m == "agrees" for m in marks) else "not separated")
        add("3", 1, mark, ". ".join(parts))
    # 4
    if on is None or not on.has("minirl", "minirl-r3", "minirl-lennorm", "minirl-lennorm-r3"):
        for part in ("4a", "4b", "4c"):
            add(part, 1, "not run", "")
    else:
        kl = on.paired("minirl", "minirl-r3", lambda x: x["kl"])
        sc = on.paired("minirl-r3", "minirl")
        ln = on.paired("minirl-lennorm", "minirl-lennorm-r3")
        few = too_few(on)
        a = "not separated" if few else "agrees" if above(kl) else "disagrees" if above((-kl[0], kl[1])) \
            else "not separated"
        b = "not separated" if few else "disagrees" if above(sc) else "agrees"
        c = "not separated" if few else "agrees" if above(ln) else "disagrees" if above((-ln[0], ln[1])) \
            else "not separated"
        add("4a", 1, a, f"KL(minirl) − KL(minirl-r3) {_d(kl, 2, True)}")
        add("4b", 1, b, f"minirl-r3 − minirl {_d(sc)}" + (" (no rise detected; the interval is the evidence)"
                                                           if b == "agrees" else ""))
        add("4c", 1, c, f"minirl-lennorm − minirl-lennorm-r3 {_d(ln)}")
    # 5, 6
    for n in (2, 4, 8):
        cell = cells.get(n)
        if cell is None or not cell.has("minirl", "minirl-noclip", "minirl-r3"):
            add("5", n, "not run", "")
        else:
            marks, parts = [], []
            for arm in ("minirl-noclip", "minirl"):
                k, _, _, _ = cell.collapses(arm)
                steps = [x["collapse_step"] for x in cell.arms[arm] if x["collapse"] and x["collapse_step"] >= 0]
                parts.append(f"{arm} collapsed {_c(cell, arm)}" + (f" at steps {', '.join(map(str, sorted(steps)))}"
                                                                    if steps else "")
                             + f", score − minirl-r3 {_d(cell.paired(arm, 'minirl-r3'))}")
                marks.append("agrees" if collapses_more(cell, arm, "minirl-r3") else "disagrees" if k == 0 else "open")
            parts.append(f"minirl-r3 collapsed {_c(cell, 'minirl-r3')}")
            mark = ("not separated" if too_few(cell) else "disagrees" if "disagrees" in marks
                    else "agrees" if all(m == "agrees" for m in marks) else "not separated")
            add("5", n, mark, "; ".join(parts))
        if cell is None or not cell.has("minirl-r2", "minirl-r3"):
            add("6", n, "not run", "")
            continue
        d = cell.paired("minirl-r2", "minirl-r3")
        k2, _, _, _ = cell.collapses("minirl-r2")
        text = f"minirl-r2 − minirl-r3 {_d(d)}; collapsed: minirl-r2 {_c(cell, 'minirl-r2')}, " \
               f"minirl-r3 {_c(cell, 'minirl-r3')}"
        if too_few(cell):
            mark = "not separated"
        elif n == 2:
            mark = "agrees" if above(d) else "disagrees" if above((-d[0], d[1])) else "not separated"
        else:
            r3_better = above((-d[0], d[1]))
            mark = ("agrees" if r3_better and k2 > 0 else "disagrees" if above(d) or (k2 == 0 and not r3_better
                                                                                    and not above(d))
                    else "not separated")
        add("6", n, mark, text)
    return out


CLAIM_TEXT = OrderedDict([
    ("1", "MiniRL is the most stable and scores best"),
    ("2", "length normalisation stays stable but scores lower"),
    ("3", "without the train–inference IS weight it collapses fast (with R3 too)"),
    ("4a", "R3 lowers the train–inference KL"),
    ("4b", "R3 does not raise the score"),
    ("4c", "with length normalisation, R3 lowers the score"),
    ("5", "without clipping, and without routing replay, MiniRL collapses early"),
    ("6", "R2 beats R3 at N = 2; R3 beats R2 at N = 4 and 8, where R2 is unstable"),
])


def claims_md(rows, cells):
    head = "| claim | N | n | mark | evidence (paired 95 % t-intervals; collapse: runs [Wilson 95 %]) |\n" \
           "| --- | --- | --- | --- | --- |\n"
    body = ""
    for num, n, mark, text in rows:
        cell = cells.get(n)
        body += (f"| {num}. {CLAIM_TEXT[num]} | {n} | {len(cell.seeds) if cell else 0} | **{mark}** | "
                 f"{text or '–'} |\n")
    return head + body


ARM_COLUMNS = (("score − base", lambda x, r: _gain(x), 3, False),
               ("− control, paired", lambda x, r: _gain(x) - _gain(r) if r else float("nan"), 3, False),
               ("entropy first 10", lambda x, r: x["entropy_first10"], 4, False),
               ("entropy last 10", lambda x, r: x["entropy_last10"], 4, False),
               ("KL", lambda x, r: x["kl"], 2, True),
               ("staleness", lambda x, r: x["staleness"], 2, True),
               ("clip", lambda x, r: x["clip_frac"], 4, False),
               ("flip %", lambda x, r: x["flip_pct"], 2, False))


def arm_rows(cell):
    """One OrderedDict per arm of a cell: n, each ARM_COLUMNS (mean, half-width), collapses."""
    ref = cell.arms.get(REFERENCE)
    out = []
    for arm, rs in cell.arms.items():
        row = OrderedDict([("n_minibatches", cell.n), ("arm", arm), ("n", len(rs))])
        for name, f, _, _ in ARM_COLUMNS:
            refs = ref if ref is not None else [None] * len(rs)
            row[name] = mean_ci([f(x, y) for x, y in zip(rs, refs)]) if arm != REFERENCE or "control" not in name \
                else (float("nan"), float("nan"))
        k, n, lo, hi = cell.collapses(arm)
        row["collapsed"] = (k, n, lo, hi)
        row["terminal"] = sum(1 for x in rs if x["collapse"] == "terminal")
        steps = [x["collapse_step"] for x in rs if x["collapse"] and x["collapse_step"] >= 0]
        row["steps to collapse"] = float(np.median(steps)) if steps else float("nan")
        out.append(row)
    return out


def arms_md(cells):
    text = ""
    for n, cell in cells.items():
        text += (f"\n### N = {n} ({'on-policy' if n == 1 else f'{n} mini-batches, the global batch fixed'})\n\n"
                 f"Seeds complete for every arm: {len(cell.seeds)} ({', '.join(cell.seeds) or 'none'}).\n\n")
        names = [c[0] for c in ARM_COLUMNS]
        text += "| arm | n | " + " | ".join(names) + " | collapsed [95 %] | terminal | steps to collapse (median) |\n"
        text += "| --- | --- | " + " | ".join("---" for _ in names) + " | --- | --- | --- |\n"
        for row in arm_rows(cell):
            k, m, lo, hi = row["collapsed"]
            cells_ = [_d(row[name], digits, sci) for name, _, digits, sci in ARM_COLUMNS]
            steps = row["steps to collapse"]
            text += (f"| {row['arm']} | {row['n']} | " + " | ".join(cells_) +
                     f" | {k}/{m} [{lo:.2f}, {hi:.2f}] | {row['terminal']} | "
                     f"{'–' if not np.isfinite(steps) else f'{steps:.0f}'} |\n")
    return text


def arms_csv(cells):
    buf = io.StringIO()
    w = csv.writer(buf)
    names = [c[0] for c in ARM_COLUMNS]
    w.writerow(["n_minibatches", "arm", "n"] + [x for name in names for x in (name, name + " ci95")] +
               ["collapsed", "collapsed_low", "collapsed_high", "terminal", "steps_to_collapse_median"])
    for cell in cells.values():
        for row in arm_rows(cell):
            k, m, lo, hi = row["collapsed"]
            w.writerow([row["n_minibatches"], row["arm"], row["n"]] +
                       [f"{v:.6g}" for name in names for v in row[name]] +
                       [k, f"{lo:.4f}", f"{hi:.4f}", row["terminal"], f"{row['steps to collapse']:.6g}"])
    return buf.getvalue()


def runs_csv(rows):
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(RUN_FIELDS)
    for x in rows:
        w.writerow([f"{x[k]:.6g}" if isinstance(x[k], float) else x[k] for k in RUN_FIELDS])
    return buf.getvalue()


def figure(runs_by_cell, path, score):
    """The paper's layout: a column per N, a row per PANELS series, a line per arm (mean over its seeds,
    trailing 10-step mean; the held-out score at its evaluation steps)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ns = sorted(runs_by_cell)
    fig, axes = plt.subplots(len(PANELS), len(ns), figsize=(4.2 * len(ns), 2.6 * len(PANELS)), squeeze=False,
                             sharex=True)
    for j, n in enumerate(ns):
        arms = runs_by_cell[n]
        for i, (name, label) in enumerate(PANELS):
            ax = axes[i][j]
            for arm, rs in arms.items():
                series = [r.series(score) if name == "score" else r.series(name) for r in rs]
                if not series:
                    continue
                length = max(len(s) for s in series)
                ys = np.full((len(series), length), np.nan)
                for k, s in enumerate(series):
                    ys[k, :len(s)] = s
                mu, _ = band(ys)  # NaN where no run has the value (a step without an evaluation)
                steps = np.arange(1, length + 1)
                if name == "score":
                    base = _mean([_last(r, score + "_base") for r in rs])
                    ok = np.isfinite(mu)
                    ax.plot(np.concatenate([[0], steps[ok]]), np.concatenate([[base], mu[ok]]), marker="o", ms=3,
                            label=arm, lw=1.2, color=None if arm != REFERENCE else "k")
                else:
                    ax.plot(steps, smooth(mu), label=arm, lw=1.2,
                            color=None if arm != REFERENCE else "k")
            if name == "kl_rollout_train":
                ax.set_yscale("symlog", linthresh=1e-5)
            if i == 0:
                ax.set_title("on-policy (N = 1)" if n == 1 else f"off-policy, N = {n}", fontsize=10)
            if j == 0:
                ax.set_ylabel(label, fontsize=9)
            if i == len(PANELS) - 1:
                ax.set_xlabel("step")
            ax.tick_params(labelsize=8)
        axes[0][j].legend(fontsize=6, ncol=2, loc="lower right")
    fig.suptitle("arXiv 2512.01374's arms at the field's MoE\n(fp8-rollout against bf16-train); mean over seeds",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    p = entry.parser(description=__doc__.split("\n\n")[0])
    p.add_argument("dirs", nargs="+", metavar="SWEEP_DIR", help="the on-policy grid, then the off-policy one")
    p.add_argument("--score", default="eval_final", help="the held-out series (default eval_final)")
    p.add_argument("--out", help="write claims.md, arms.csv, runs.csv and minirl.png here")
    a = p.parse_args(argv)
    loaded = [r for r in read_dirs(a.dirs) if r.metrics]
    if not loaded:
        raise AnalysisError(f"{', '.join(a.dirs)}: no runs with metrics")
    rows = [run_row(r, a.score) for r in loaded]
    grouped = by_cell(rows)
    cells = OrderedDict((n, Cell(n, grouped[n])) for n in sorted(grouped))
    runs_by_cell = OrderedDict()
    for r, x in zip(loaded, rows):
        if x["status"] in FINISHED and x["seed"] in cells[x["n_minibatches"]].seeds:
            runs_by_cell.setdefault(x["n_minibatches"], OrderedDict()).setdefault(x["variant"], []).append(r)
    md = ("## The claims\n\n" + claims_md(claims(cells), cells) + "\n## The arms\n" + arms_md(cells))
    sys.stdout.write(md)
    if a.out:
        files = OrderedDict([(os.path.join(a.out, "claims.md"), md), (os.path.join(a.out, "arms.csv"), arms_csv(cells)),
                             (os.path.join(a.out, "runs.csv"), runs_csv(rows))])
        if runs_by_cell:
            files[os.path.join(a.out, "minirl.png")] = lambda path: figure(runs_by_cell, path, a.score)
        os.makedirs(a.out, exist_ok=True)
        write_outputs(files)
    return 0


if __name__ == "__main__":
    entry.run(main)
