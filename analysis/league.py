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
                    its finished row. The file keeps the score it was made with (its score_name
                    column; read with another --score, it is refused). A --runs file that is also
                    an output (--out its directory) is read whole first and replaced only when
                    every output is written: a refused join or a full disk leaves it as it was.
                    Refused, naming the row and column: a cell that is not a number, a file cut
                    inside its last row, a duplicated row, a missing or unknown column, '#' lines,
                    binary data; nan and inf are values, counted and shown
  one run per key   two run files of one (variant, seed[, --by value]) are refused, naming both,
                    unless their numbers agree (two experiments' directories, another swept key
                    without --by): the order the directories are read in never chooses
  non-finite        a value inf or nan stays in its column's mean (inf or nan, no interval) and is
                    listed under the table ("KL: inf in 1 of 20 runs (seed 703)"); never averaged
                    over the finite runs while n counts them all
  outputs           written whole or not at all (temporaries, then renamed together)
  rank [95 %]       the rank's uncertainty: the variants (the reference aside) ranked by mean
                    score − reference over a bootstrap of the complete seeds (RANK_RESAMPLES
                    resamples with replacement, a fixed generator seed: the same table every
                    time), the 2.5 and 97.5 percentiles of each variant's rank (1 = highest);
                    equal means share their ranks (two variants tied on every seed: 1–2)
"""
import csv
import io
import os
import warnings
from collections import OrderedDict

from .cli import AnalysisError, Entry, read_input_bytes, write_outputs

entry = Entry(__name__, "analysis.league")
with entry.imports():
    import numpy as np

    from .runs import final_reward, load_sweep, seed_of, variant_of
    from .stats import fmt, mean_ci, wilson

FINISHED = ("complete", "collapsed")
BURST_FACTOR = 10.0  # a burst: grad_norm_max above this many times the run's median grad_norm
RANK_RESAMPLES = 2000  # bootstrap resamples of the seeds for the ranks' intervals


def _rank_ranges(means):
    """[variants, ...] means → (low, high) ranks, 1 = the highest mean: a variant's rank is the range
    its ties share (two variants with equal means both rank 1–2), never an order the sort chose."""
    above = (means[None, :] > means[:, None]).sum(axis=1)       # [variants, ...] strictly higher
    at_least = (means[None, :] >= means[:, None]).sum(axis=1)   # higher or equal, itself included
    return above + 1, at_least


def rank_intervals(d_by_variant, resamples=RANK_RESAMPLES, seed=0):
    """{variant: (low, high)}: the 95 % interval of each variant's rank (1 = the highest mean) when
    the seeds are resampled with replacement; d_by_variant maps each ranked variant to its paired
    differences over the same seeds, in the same order. Exact ties share their ranks (in every
    resample, equal means both span the ranks they take together), so two variants tied on every
    seed rank 1–2, not 1–1 and 2–2. Fewer than 2 seeds, or a non-finite difference: (nan, nan)."""
    names = list(d_by_variant)
    if not names:
        return {}
    D = np.array([d_by_variant[v] for v in names], dtype=float)  # [variants, seeds]
    if D.shape[1] < 2 or not np.isfinite(D).all():
        return {v: (float("nan"), float("nan")) for v in names}
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, D.shape[1], size=(resamples, D.shape[1]))
    means = D[:, idx].mean(axis=2)  # [variants, resamples]
    low, high = _rank_ranges(means)
    lo, hi = np.percentile(low, 2.5, axis=1), np.percentile(high, 97.5, axis=1)
    return {v: (float(lo[i]), float(hi[i])) for i, v in enumerate(names)}


def _present(x):
    """The values of a series that are there: NaN (a step without the value: no evaluation, no
    probe) left out, infinities kept (a run whose KL diverged has an infinite mean KL, not the mean
    of its finite steps)."""
    x = np.asarray(x, dtype=float)
    return x[~np.isnan(x)]


def _last(r, name):
    x = _present(r.series(name))
    return float(x[-1]) if len(x) else float("nan")


def _mean(x):
    x = _present(x)
    if not len(x):
        return float("nan")
    with np.errstate(over="ignore", invalid="ignore"):
        return float(x.mean())  # inf with an infinite value (or an overflow), nan with +inf and -inf


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
    fin = m[np.isfinite(m)]
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
        ("variant", variant_of(r)), ("seed", str(seed_of(r))), ("status", r.status), ("score_name", score),
        ("score", _last(r, score)), ("score_base", _last(r, score + "_base")),
        ("exact", _last(r, "eval_accuracy")), ("exact_base", _last(r, "eval_accuracy_base")),
        ("stop_late", _last(r, "eval_stop_late")), ("stop_late_base", _last(r, "eval_stop_late_base")),
        ("final_reward", final_reward(r)),
        ("collapse", collapse_kind(r)), ("bursts", bursts(r)),
        ("kl", _mean(r.series("kl_rollout_train"))), ("flip_pct", 100 * _mean(r.series("flip_rate_mean"))),
        ("load_cv_first10", _mean(load[:10])), ("load_cv_last10", _mean(load[-10:])),
        ("load_max_over_mean_last10", _mean(r.series("load_max_over_mean")[-10:])),
        ("dead_experts_last", _last(r, "dead_experts")),
        ("router_drift", _last(r, "router_drift")), ("router_drift_layer_max", _last(r, "router_drift_layer_max")),
        ("response_length_last10", _mean(r.series("response_length_mean")[-10:])),
        ("flip_pct_last10", 100 * _mean(r.series("flip_rate_mean")[-10:])),
    ])


RUN_FIELDS = ("variant", "seed", "status", "score_name", "score", "score_base", "exact", "exact_base", "stop_late",
              "stop_late_base", "final_reward", "collapse", "bursts", "kl", "flip_pct", "load_cv_first10",
              "load_cv_last10", "load_max_over_mean_last10", "dead_experts_last", "router_drift",
              "router_drift_layer_max", "response_length_last10", "flip_pct_last10")  # run_row's, in order
TEXT_FIELDS = ("variant", "seed", "status", "score_name", "collapse")  # league-runs.csv's columns that are not numbers
RUN_STATES = ("complete", "collapsed", "preempted", "running", "pending", "failed")  # a run's status in the file
COLLAPSE_KINDS = ("", "terminal", "transient")


class RunRow(OrderedDict):
    """One run's numbers (run_row's fields) and where they came from (`where`: the run file, or
    "--runs FILE, row N"), so that a refusal names both sides."""
    where = ""


def _key(x, by=None):
    return (x["variant"], str(x["seed"])) + ((str(x[by]),) if by else ())


def _differences(x, y, left="the first", right="the second"):
    """The columns on which two rows of one run disagree (numbers to the file's 6 significant digits)."""
    return [f"{c} {x[c]} in {left}, {y.get(c)} in {right}" for c in x if c in y and not _same(x[c], y[c])]


def _shown(text, limit=40, plain=False):
    """A cell or column name as an error quotes it: invisible characters (a byte-order mark, control
    bytes) escaped, long text cut."""
    out = "".join(c if c.isprintable() and c not in "\u200b\u200c\u200d\u2060\ufeff" else
                  f"<U+{ord(c):04X}>" for c in str(text))
    out = out if len(out) <= limit else out[:limit] + f"… ({len(out)} characters)"
    return out if plain and out == str(text) and out and " " not in out else repr(out)


def _cell_number(text):
    """A number cell as league-runs.csv writes it (%.6g, or nan / inf / -inf), else None."""
    t = text.strip()
    if not t or t != text or t.lower().lstrip("+-") in ("infinity",):
        return None
    try:
        return float(t)
    except ValueError:
        return None


def read_runs_csv(path, by=None, score=None):
    """The per-run rows of an earlier league (its league-runs.csv), as run_row gives them: for runs
    whose files are gone (a results directory lost between sessions) but whose summary was kept.
    Numbers come back to the 6 significant digits the file holds. by: the --by key, which the file
    must have as a column; score: the --score the league scores, which the file must have been made
    with (its score_name column).

    Refuses (AnalysisError naming the file, and the row and column where it applies) rather than
    guesses: what is not a regular file (a FIFO is never opened), binary data, text that is not
    UTF-8, '#' lines (a league.csv), a header without a column the league reads or with one it does
    not know (another --by key's), a row cut short or with extra cells, a file that ends inside a
    row, a cell that is not a number (abc, empty, a number cut), an unknown status or collapse kind,
    a run given twice (a duplicated row, or two rows of one run that differ). nan, inf and -inf
    are numbers: kept, counted and shown by the league. A leading UTF-8 byte-order mark is dropped."""
    where = f"--runs {path}"
    data = read_input_bytes(path, "a league-runs.csv")
    if b"\0" in data or data.startswith(b"\x89PNG"):
        raise AnalysisError(f"{where}: not a league-runs.csv: binary data (an image? the league writes "
                            f"league-runs.csv beside league.md)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise AnalysisError(f"{where}: not a league-runs.csv: not UTF-8 text (byte {e.start})")
    if text.startswith("\ufeff"):  # a byte-order mark (an editor on Windows): not part of the header
        text = text[1:]
    if not text.strip():
        raise AnalysisError(f"{where}: not a league-runs.csv: the file is empty")
    if not text.endswith("\n"):
        raise AnalysisError(f"{where}: the file ends inside its last row (line {text.count(chr(10)) + 1}, no "
                            f"newline after it): cut short (a full disk?); the league writes whole rows")
    lines = text.splitlines()
    for i, line in enumerate(lines, 1):
        if line.lstrip().startswith("#"):
            raise AnalysisError(f"{where}: not a league-runs.csv: line {i} is a '#' line ({_shown(line)}); "
                                f"league.csv has them, league-runs.csv none (pass the league's league-runs.csv)")
    rows = list(csv.reader(io.StringIO(text, newline="")))
    header = rows[0]
    if len(set(header)) != len(header):
        twice = sorted({h for h in header if header.count(h) > 1})
        raise AnalysisError(f"{where}: not a league-runs.csv: the column {_shown(twice[0])} is in its header twice")
    known = set(RUN_FIELDS) | ({by} if by else set())
    unknown = [h for h in header if h not in known]
    if unknown:
        hint = (f"; a file made with --by {unknown[0]} is read with --by {unknown[0]}" if not by and "." in unknown[0]
                else f"; this league's --by is {by}" if by else "")
        raise AnalysisError(f"{where}: not a league-runs.csv: the column {_shown(unknown[0])} is not one of "
                            f"its columns ({', '.join(RUN_FIELDS)}{' and the --by key' if by else ''}){hint}")
    missing = [k for k in RUN_FIELDS + ((by,) if by else ()) if k not in header]
    if missing:
        extra = ""
        if missing == ["score_name"]:
            extra = (" (a league-runs.csv of an earlier moerl, which did not record its score: add the column "
                     "score_name with the --score it was made with, eval_final unless its league.md says otherwise)")
        elif by and missing == [by]:
            extra = f" (it was not made with --by {by})"
        raise AnalysisError(f"{where}: not a league-runs.csv: no column {', '.join(missing)}{extra}")
    out, first = [], {}
    for n, cells in enumerate(rows[1:], 2):
        if not cells:
            raise AnalysisError(f"{where}: row {n} is empty (a league-runs.csv has no blank lines)")
        if len(cells) != len(header):
            raise AnalysisError(f"{where}: row {n} has {len(cells)} cells, its header {len(header)} columns "
                                f"(a row cut short, or a cell with a comma)")
        x = RunRow()
        x.where = f"{where}, row {n}"
        for k, v in zip(header, cells):
            if k in TEXT_FIELDS or k == by:
                x[k] = v
                continue
            num = _cell_number(v)
            if num is None:
                raise AnalysisError(f"{where}: row {n}, column {k}: {_shown(v)} is not a number "
                                    f"(a number as the league writes it, or nan / inf / -inf)")
            x[k] = num
        for k, allowed in (("status", RUN_STATES), ("collapse", COLLAPSE_KINDS)):
            if x[k] not in allowed:
                raise AnalysisError(f"{where}: row {n}, column {k}: {_shown(x[k])} is not one of "
                                    f"{', '.join(repr(a) for a in allowed)}")
        for k in ("variant", "seed"):
            if not x[k].strip() or x[k] != x[k].strip():
                raise AnalysisError(f"{where}: row {n}, column {k}: {_shown(x[k])} is not a {k} name")
        if score is not None and x["score_name"] != score:
            raise AnalysisError(f"{where}: row {n}: made with --score {_shown(x['score_name'], plain=True)}, not {score}: its "
                                f"score column is that series; pass --score {x['score_name']} (its runs are never "
                                f"scored as {score})")
        k = _key(x, by)
        if k in first:
            m, y = first[k]
            if all(_same(x[c], y[c]) for c in x):
                raise AnalysisError(f"{where}: row {n} is a duplicated row: the same run {'/'.join(k)} as row {m}, "
                                    f"cell for cell (a run is counted once: remove one)")
            raise AnalysisError(f"{where}: rows {m} and {n} are both run {'/'.join(k)}, with different numbers: " +
                                "; ".join(_differences(y, x, f"row {m}", f"row {n}")[:3]))
        first[k] = (n, x)
        out.append(x)
    if not out:
        raise AnalysisError(f"{where}: no rows (a header only)")
    return out


def _same(a, b):
    if isinstance(a, str) or isinstance(b, str):
        return str(a) == str(b)
    return bool(np.isclose(a, b, rtol=1e-5, atol=1e-12, equal_nan=True))  # the file's 6 significant digits


def rows_of_runs(runs, score, by=None):
    """(per_run, runs): run_row of each run with metrics (and its --by value), each (variant, seed
    [, --by value]) once. Two run files of one key — two sweep directories of different
    experiments, a grid with another swept key read without --by, a folder of copies — are refused,
    naming both files, unless their numbers agree (then they are one run, counted once): the league
    pairs one run per variant and seed, and the order the directories are read in must not choose
    which."""
    from .runs import differing_keys
    out, kept, seen = [], [], {}
    for r in runs:
        x = RunRow(run_row(r, score))
        x.where = r.path
        if by:
            x[by] = r.value(by)
        k = _key(x, by)
        if k in seen:
            y, ry = seen[k]
            bad = _differences(y, x, ry.path, r.path)
            if bad:
                keys = [key for key in differing_keys([ry, r]) if key not in ("run.seed", by)]
                hint = (f"; they differ in {', '.join(keys[:3])}: pass --by {keys[0]} to pair inside each value, "
                        f"or give the directories of one experiment" if keys else
                        "; give the directories of one experiment")
                raise AnalysisError(f"two runs of {'/'.join(k)}: {ry.path} and {r.path}, with different numbers "
                                    f"({'; '.join(bad[:2])}){hint}")
            continue
        seen[k] = (x, r)
        out.append(x)
        kept.append(r)
    return out, kept


def join_runs(per_run, kept, by=None, source="--runs"):
    """per_run (from run files) and kept (from a league-runs.csv) as one list. A run in both (the same
    variant, seed and --by value) that finished in both must agree on every number the file holds,
    to its 6 significant digits, or the league refuses: a re-run that reproduces a kept summary
    joins it, one that does not is never mixed in silently, and the run file's row is kept. A run
    unfinished in one of the two (the kept summary written while it ran, or a re-run still
    running) counts as its finished row. Two --runs files that hold one run are held to the same."""
    out = OrderedDict((_key(x, by), x) for x in per_run)
    for x in kept:
        k = _key(x, by)
        y = out.get(k)
        if y is None or (y["status"] not in FINISHED and x["status"] in FINISHED):
            out[k] = x
        elif y["status"] in FINISHED and x["status"] in FINISHED:
            from_file = not getattr(y, "where", "").startswith("--runs ")
            bad = [f"{c} {x[c]} in the file, {y.get(c)} in the {'run' if from_file else 'other file'}"
                   for c in x if c in y and not _same(x[c], y[c])]
            if bad:
                other = (f"; the run file: {y.where}" if from_file and getattr(y, "where", "") else
                         f"; the other: {y.where}" if getattr(y, "where", "") else "")
                what = "its run file" if from_file else "another --runs file's row"
                raise AnalysisError(f"{getattr(x, 'where', source)}: run {'/'.join(k)} differs from {what}: " +
                                    "; ".join(bad[:3]) + other)
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


# league()'s columns: (key in the row, what the note calls it, the per-run value)
COLUMNS = (
    ("score_minus_base", "score − base", lambda x, r: x["score"] - x["score_base"]),
    ("score_minus_ref", "score − reference", lambda x, r: x["score"] - r["score"]),
    ("exact_minus_base", "exact − base", lambda x, r: x["exact"] - x["exact_base"]),
    ("reward_minus_ref", "reward − reference", lambda x, r: x["final_reward"] - r["final_reward"]),
    ("kl", "KL", lambda x, r: x["kl"]),
    ("flip_pct", "flip %", lambda x, r: x["flip_pct"]),
    ("load_cv_last10", "load CV", lambda x, r: x["load_cv_last10"]),
    ("load_cv_change", "Δ load CV", lambda x, r: x["load_cv_last10"] - x["load_cv_first10"]),
    ("load_max_over_mean_last10", "max/mean", lambda x, r: x["load_max_over_mean_last10"]),
    ("dead_experts_last", "dead", lambda x, r: x["dead_experts_last"]),
    ("router_drift", "router drift", lambda x, r: x["router_drift"]),
)


def mean_counted(values):
    """(mean, 95 % half-width) over every value: mean_ci when all are finite; with a non-finite one,
    the mean of them all (inf, -inf, or nan) and no interval — never the finite values' mean while
    n counts them all. All NaN (a metric the runs do not have, e.g. router drift without probes):
    (nan, nan), shown as "–"."""
    v = np.asarray(values, dtype=float)
    if not len(v) or np.isfinite(v).all():
        return mean_ci(v)
    if np.isnan(v).all():
        return float("nan"), float("nan")
    with np.errstate(over="ignore", invalid="ignore"):
        return float(np.mean(v)), float("nan")


def _nonfinite(values, seeds):
    """"inf in 1 of 20 runs (seed 703)" for a column's per-run values, or "" when all are finite (or
    all NaN: absent, not a value)."""
    v = np.asarray(values, dtype=float)
    bad = ~np.isfinite(v)
    if not bad.any() or np.isnan(v).all():
        return ""
    kinds = OrderedDict()
    for x, s in zip(v, seeds):
        if not np.isfinite(x):
            kinds.setdefault("nan" if np.isnan(x) else "inf" if x > 0 else "-inf", []).append(str(s))
    return "; ".join(f"{k} in {len(ss)} of {len(v)} runs (seed{'s' if len(ss) > 1 else ''} {', '.join(ss[:5])}"
                     f"{', …' if len(ss) > 5 else ''})" for k, ss in kinds.items())


def league(per_run, reference="control", planned=()):
    """One OrderedDict per variant over the complete seeds, ranked by score − reference (the
    reference first). planned: every variant of the grid, run or not (a seed counts only when each
    has finished on it). A non-finite value is in its column's mean (which is then inf or nan, with
    no interval) and in the row's "nonfinite" list ("KL: inf in 1 of 20 runs (seed 703)")."""
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
        row["nonfinite"] = []
        for key, name, value in COLUMNS:
            vals = [value(x, ref[x["seed"]]) for x in xs]
            row[key] = mean_counted(vals)
            note = _nonfinite(vals, [x["seed"] for x in xs])
            if note:
                row["nonfinite"].append(f"{name}: {note}")
        row["lower_than_ref"] = sum(1 for d in d_ref if d < 0)
        row["collapsed"] = (k, n, lo, hi)
        row["terminal"] = sum(1 for c in kinds if c == "terminal")
        row["transient"] = sum(1 for c in kinds if c == "transient")
        row["bursts"] = (mean_counted(b)[0], sum(1 for y in b if np.isfinite(y) and y > 0))
        note = _nonfinite(b, [x["seed"] for x in xs])
        if note:  # a run whose grad norms are not finite: not a burst count, and not left out
            row["nonfinite"].append(f"bursts: {note}")
        out.append(row)
    rest = sorted((r for r in out if r["variant"] != reference),
                  key=lambda r: -r["score_minus_ref"][0] if np.isfinite(r["score_minus_ref"][0]) else np.inf)
    ci = rank_intervals(OrderedDict(
        (r["variant"], [variants[r["variant"]][s]["score"] - ref[s]["score"] for s in seeds]) for r in rest))
    means = np.array([r["score_minus_ref"][0] for r in rest], dtype=float)
    if len(rest) and np.isfinite(means).all():
        low, high = _rank_ranges(means)
        points = {r["variant"]: (int(low[i]), int(high[i])) for i, r in enumerate(rest)}
    else:  # a non-finite mean: the order is the sort's, each its own place
        points = {r["variant"]: (i + 1, i + 1) for i, r in enumerate(rest)}
    for r in out:
        r["rank_ci"] = ci.get(r["variant"], (float("nan"), float("nan")))
        r["rank"] = points.get(r["variant"])
    return [r for r in out if r["variant"] == reference] + rest, seeds


def nonfinite_md(rows):
    """The note under a table: every non-finite value its means hold, by variant and column."""
    lines = [f"- {r['variant']}, {what}" for r in rows for what in r["nonfinite"]]
    if not lines:
        return ""
    return ("\nNon-finite values (in the means above, which are then inf or nan with no interval; never left "
            "out of a mean):\n\n" + "\n".join(lines) + "\n")


PAIR_KEYS = (("score", "score", 3, False), ("final reward", "final_reward", 3, False), ("KL", "kl", 2, True))


def pair_list(specs, variants):
    """The (A, B) pairs of --pair specs over `variants` ("A:B", or "A:*": A against every other
    variant), in order; refuses a malformed spec or an unknown variant."""
    todo = []
    for spec in specs:
        a, sep, b = spec.partition(":")
        if not sep or not a or not b:
            raise AnalysisError(f"--pair {spec!r}: expected A:B (two variant names, or A:* for every other)")
        for v in (a,) + (() if b == "*" else (b,)):
            if v not in variants:
                raise AnalysisError(f"--pair {spec!r}: no variant '{v}' (variants: {', '.join(variants)})")
        todo += [(a, v) for v in variants if v != a] if b == "*" else [(a, b)]
    return todo


def pairs(per_run, specs, planned=()):
    """A − B paired by seed over the complete seeds, for each "A:B" of specs ("A:*": A against every
    other variant): one OrderedDict per pair with, per PAIR_KEYS entry, (mean, half-width) and the
    count of seeds where A is higher."""
    variants, seeds = complete_seeds(per_run, planned)
    out = []
    for a, b in pair_list(specs, variants):
        row = OrderedDict([("a", a), ("b", b), ("n", len(seeds))])
        for _, key, _, _ in PAIR_KEYS:
            d = [variants[a][s][key] - variants[b][s][key] for s in seeds]
            row[key] = mean_ci(d)
            row[key + "_higher"] = sum(1 for x in d if x > 0)
        out.append(row)
    return out


def by_changes(tables, specs, planned=()):
    """How each variant's held-out score and each A − B gap of specs change between the values of
    --by, paired by seed: every later value against the first, over the seeds complete in both (the
    arms of a seed share its base, so a seed pairs across them). One OrderedDict per row: what
    ("A" or "A − B"), the two values, n, (mean, half-width) and the count of seeds where it rose."""
    values = list(tables)
    out = []
    v0 = values[0]
    va, sa = complete_seeds(tables[v0][2], planned)
    todo = [(x, None) for x in va if va[x]] + pair_list(specs, list(va))

    def gap(vs, s, a, b):
        return vs[a][s]["score"] - (vs[b][s]["score"] if b else 0.0)

    for v in values[1:]:
        vb, sb = complete_seeds(tables[v][2], planned)
        in_b = set(sb)
        seeds = [s for s in sa if s in in_b]
        for a, b in todo:
            d = [gap(vb, s, a, b) - gap(va, s, a, b) for s in seeds]
            out.append(OrderedDict([("what", a if b is None else f"{a} − {b}"), ("from", v0), ("to", v),
                                    ("n", len(seeds)), ("change", mean_ci(d)),
                                    ("rose", sum(1 for x in d if x > 0))]))
    return out


def by_changes_md(rows, by, score):
    if not rows:
        return ""
    head = (f"\n## Between the values of {by}, paired by seed\n\nThe change of each variant's {score} (the arms of "
            "a seed share its base) and of each pair's gap, from the first value to each other, over the seeds "
            "complete in both.\n\n| what | change | n | rose |\n| --- | --- | --- | --- |\n")
    return head + "".join(f"| {r['what']}: {by} {r['from']} → {r['to']} | {_pm(r['change'])} | {r['n']} | "
                          f"{r['rose']}/{r['n']} |\n" for r in rows)


def by_changes_csv(rows, by):
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["what", by + " from", by + " to", "n", "change", "change_ci95", "rose"])
    for r in rows:
        w.writerow([r["what"], r["from"], r["to"], r["n"], f"{r['change'][0]:.6g}", f"{r['change'][1]:.6g}", r["rose"]])
    return buf.getvalue()


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


def _rank_text(lo, hi):
    return f"{lo:.0f}" if lo == hi else f"{lo:.0f}–{hi:.0f}"


def table_md(rows, reference, score):
    head = ["rank", "variant", "n", f"{score} − base", f"− {reference}, paired", "lower", "exact − base",
            f"reward − {reference}", "collapsed [95 %]", "terminal / transient", "bursts / run (runs)",
            "KL", "flip %", "load CV (last 10)", "Δ load CV", "max/mean", "dead", "router drift",
            "rank [95 %]"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    names = {key: name for key, name, _ in COLUMNS}

    def cell(r, key, digits=3, sci=False):
        m, c = r[key]
        if np.isnan(m) and any(w.startswith(names[key] + ":") for w in r["nonfinite"]):
            return "nan"  # a NaN among its values (the note under the table says which), not an absent metric
        return fmt(m, c, digits, sci)

    for r in rows:
        k, n, lo, hi = r["collapsed"]
        ref = r["variant"] == reference
        b = r["bursts"]
        lines.append("| " + " | ".join([
            "–" if ref else _rank_text(*r["rank"]), r["variant"], str(r["n"]), cell(r, "score_minus_base"),
            "–" if ref else cell(r, "score_minus_ref"), "–" if ref else f"{r['lower_than_ref']}/{r['n']}",
            cell(r, "exact_minus_base"), "–" if ref else cell(r, "reward_minus_ref"),
            f"{k}/{n} [{lo:.2f}, {hi:.2f}]" if n else "–", f"{r['terminal']} / {r['transient']}",
            f"{b[0]:.1f} ({b[1]})" if np.isfinite(b[0]) else
            "nan" if any(w.startswith("bursts:") for w in r["nonfinite"]) else "–",
            cell(r, "kl", 2, sci=True), cell(r, "flip_pct", 2), cell(r, "load_cv_last10"),
            cell(r, "load_cv_change"), cell(r, "load_max_over_mean_last10", 2), cell(r, "dead_experts_last", 1),
            cell(r, "router_drift"),
            "–" if ref or not np.isfinite(r["rank_ci"][0]) else f"{r['rank_ci'][0]:.0f}–{r['rank_ci'][1]:.0f}",
        ]) + " |")
    return "\n".join(lines) + "\n" + nonfinite_md(rows)


def table_csv(rows):
    buf = io.StringIO()
    w = csv.writer(buf)
    cols = ["score_minus_base", "score_minus_ref", "exact_minus_base", "reward_minus_ref", "kl", "flip_pct",
            "load_cv_last10", "load_cv_change", "load_max_over_mean_last10", "dead_experts_last", "router_drift"]
    w.writerow(["variant", "n", "seeds"] + [c + s for c in cols for s in ("", "_ci95")] +
               ["lower_than_ref", "collapsed", "collapse_low", "collapse_high", "terminal", "transient",
                "bursts_per_run", "runs_with_bursts", "rank_low", "rank_high", "rank", "nonfinite"])
    for r in rows:
        k, n, lo, hi = r["collapsed"]
        w.writerow([r["variant"], r["n"], r["seeds"]] + [f"{v:.6g}" for c in cols for v in r[c]] +
                   [r["lower_than_ref"], k, f"{lo:.4f}", f"{hi:.4f}", r["terminal"], r["transient"],
                    f"{r['bursts'][0]:.3g}", r["bursts"][1], f"{r['rank_ci'][0]:.3g}", f"{r['rank_ci'][1]:.3g}",
                    _rank_text(*r["rank"]) if r["rank"] else "", "; ".join(r["nonfinite"])])
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
    from .plots import plt, save_figure  # the Agg backend
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
    # the curves need run files: variants joined from a kept league-runs.csv (--runs) have none
    with_files = [r["variant"] for r in rows if any(variant_of(x) == r["variant"] for x in runs)]
    note = "" if len(with_files) == len(rows) else \
        f"\n(series of the runs read from files only: {', '.join(with_files) or 'none'})"
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
        ax.set_title(label + note, fontsize=10 if note else None)
    axes[1].legend(fontsize=7, ncol=2)
    save_figure(fig, path, dpi=110)


def _num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return float("nan")


def by_order(v):
    """The sort key of a --by value: numbers first, in numeric order, then every other value (true,
    false, names) in text order. A total order, so the tables' order (and by_changes' first value)
    does not depend on the order a set of strings happens to iterate in."""
    x = _num(v)
    return (1, 0.0, v) if np.isnan(x) else (0, x, v)


def by_plot(tables, path, reference, score, key):
    """Per variant, score − reference and the last-10-step flip % against the key's value."""
    from .plots import plt, save_figure  # the Agg backend
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
    save_figure(fig, path, dpi=110)


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
    for option, value in (("--score", args.score), ("--by", args.by), ("--out", args.out), ("--reference", args.reference)):
        if value is not None and not value.strip():  # never read as "no --by", "the default directory"
            raise AnalysisError(f"{option} {value!r}: an empty value (give one, or leave the option out)")
    planned_runs = read_dirs(args.dirs)  # every run of the grids, pending ones too: the variants a seed must have
    planned = list(OrderedDict.fromkeys(variant_of(r) for r in planned_runs))
    runs = [r for r in planned_runs if r.metrics]
    check_score(runs, args.score)
    check_by(planned_runs, args.by)
    per_run, runs = rows_of_runs(runs, args.score, args.by)
    run_rows = list(per_run)
    kept_rows = []
    for path in args.runs:
        kept = read_runs_csv(path, args.by, args.score)
        kept_rows += kept
        per_run = join_runs(per_run, kept, args.by, f"--runs {path}")
        planned += [v for v in OrderedDict.fromkeys(x["variant"] for x in kept) if v not in planned]
    if not per_run:
        raise AnalysisError(f"{', '.join(args.dirs)}: no runs with metrics")
    if not args.out and not args.dirs:
        raise AnalysisError("--runs without a sweep directory: say where the league goes with --out")
    if args.by:
        check_by_tables(per_run, planned_runs, kept_rows, args.by)
    out = args.out or os.path.join(args.dirs[0], "report")
    files = OrderedDict()  # written together, whole or not at all, after every number is known
    if args.by:
        values = sorted({x[args.by] for x in per_run}, key=by_order)
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
            files["pairs.csv"] = pairs_text
        if len(tables) > 1:
            changes = by_changes(tables, args.pair, planned)
            md += by_changes_md(changes, args.by, args.score)
            files["by-changes.csv"] = by_changes_csv(changes, args.by)
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
            files["pairs.csv"] = pairs_csv(prs)
    files["league.md"] = md
    files["league.csv"] = csv_text
    files["league-runs.csv"] = runs_csv(per_run)
    if args.by:
        if any(t[1] for t in tables.values()):
            files["by.png"] = lambda path: by_plot(tables, path, args.reference, args.score, args.by)
    elif seeds:
        files["league.png"] = lambda path: league_plot(rows, runs, seeds, path, args.reference, args.score)
    os.makedirs(out, exist_ok=True)
    write_outputs(OrderedDict((os.path.join(out, k), v) for k, v in files.items()))
    print(md, end="")
    print(f"→ {out}/league.md, league.csv, league-runs.csv" +
          "".join(", " + f for f in files if f not in ("league.md", "league.csv", "league-runs.csv")))


def read_dirs(dirs):
    """Every run of the sweep directories (or run files), each directory read once (DIR and DIR/
    are one)."""
    runs, seen = [], set()
    for d in dirs:
        real = os.path.realpath(d)
        if real in seen:
            continue
        seen.add(real)
        runs += load_sweep(d)[0]
    return runs


def known_scores(runs):
    """The held-out series a run can be scored on: each metric NAME with its NAME_base (step 0)."""
    names = set()
    for r in runs:
        names |= {k for k in r.metrics if k + "_base" in r.metrics}
    return sorted(names)


def check_score(runs, score):
    """--score names a held-out series the runs have (else every score would be NaN: a table of "–")."""
    if not runs:
        return
    have = [r for r in runs if score in r.metrics]
    if not have:
        known = known_scores(runs)
        raise AnalysisError(f"--score {score}: no run has this series (the held-out scores these runs have: "
                            f"{', '.join(known) if known else 'none'})")


def check_by(planned_runs, by):
    """--by names a key some run has, and not the variant's name itself."""
    if not by:
        return
    if by in ("variant", "run.seed"):
        raise AnalysisError(f"--by {by}: the league pairs variants by seed inside each value; --by takes a key "
                            f"swept across every variant (e.g. model.n_experts)")
    if planned_runs and all(r.value(by) == "" for r in planned_runs):
        raise AnalysisError(f"--by {by}: no run has this key (swept keys are e.g. model.n_experts)")


def check_by_tables(per_run, planned_runs, kept_rows, by):
    """Every value of the --by key holds every variant (planned runs, pending ones included, and kept
    rows): else the key is one the variants set (each variant its own value) or a value misses a
    variant, and the tables would pair nothing. Refused, naming the value and the variants."""
    have = OrderedDict()
    variants = OrderedDict()
    for v, val in [(variant_of(r), r.value(by)) for r in planned_runs] + \
                  [(x["variant"], x[by]) for x in per_run] + [(x["variant"], x[by]) for x in kept_rows]:
        variants[v] = True
        have.setdefault(val, OrderedDict())[v] = True
    if list(have) == [""]:
        return  # no run has the key: main says so
    for val, vs in have.items():
        missing = [v for v in variants if v not in vs]
        if missing:
            per_variant = OrderedDict()
            for v, x in [(variant_of(r), r.value(by)) for r in planned_runs] + [(x["variant"], x[by]) for x in per_run]:
                per_variant.setdefault(v, set()).add(x)
            if all(len(x) == 1 for x in per_variant.values()):
                sets = ", ".join(f"{v}: {next(iter(x))}" for v, x in list(per_variant.items())[:4])
                raise AnalysisError(f"--by {by}: a key the variants set ({sets}), not one swept across them: "
                                    f"each table would hold one variant and pair nothing; leave --by out, or "
                                    f"give a key every variant runs at each value (e.g. model.n_experts)")
            raise AnalysisError(f"--by {by}: the value {_shown(val)} has no run of {', '.join(missing[:4])} "
                                f"(planned or kept): its table could not pair them")


if __name__ == "__main__":
    entry.run(main)
