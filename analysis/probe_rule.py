"""The rule of a collapse probe inside a learning regime (docs/notebook/collapse-search.md §8),
applied to the probe's sweep directories, so that a probe's verdict is its written rule's and not a
reading of curves:

    /usr/bin/python3 -m analysis.probe_rule PROBE SWEEP_DIR [SWEEP_DIR ...] [--reference control]
        [--variant grpo-real] [--score eval_final] [--min-gain 0.05] [--min-collapsed 2]

Over the seeds on which every variant of the grid has finished (analysis.league's complete seeds),
the probe succeeds when both hold:
  (1) the reference learns: its held-out score at the last evaluation minus its base (--score,
      default eval_final: the final answer right), averaged over the seeds, is at least --min-gain;
  (2) the variant collapses: its collapse rule fired (terminal or transient, analysis.league's
      collapse_kind) on at least --min-collapsed seeds, and on each of those seeds its score
      ended below its base.
Prints the verdict with the numbers it rests on, one row per seed, and one markdown row for the
notebook's table of probes. Exit status 0 whatever the verdict (a failed probe is a result).
"""
from .cli import AnalysisError, Entry

entry = Entry(__name__, "analysis.probe_rule")
with entry.imports():
    import numpy as np

    from .league import check_score, complete_seeds, read_dirs, rows_of_runs, run_row  # noqa: F401 (run_row: the tests)
    from .runs import load_sweep, variant_of


def verdict(per_run, reference="control", variant="grpo-real", min_gain=0.05, min_collapsed=2, planned=()):
    """The rule's parts over the complete seeds: a dict with seeds, gains (reference score − base per
    seed), collapses (the variant's collapse kind per seed), below (the variant's score < base per
    seed), learns, collapses_below (seeds where it collapsed and ended below its base), success."""
    variants, seeds = complete_seeds(per_run, planned)
    for v in (reference, variant):
        if v not in variants:
            raise AnalysisError(f"no runs of the variant '{v}' (variants: {', '.join(variants) or 'none'})")
    if not seeds:
        raise AnalysisError("no seed has a finished run of every variant yet")
    ref, var = variants[reference], variants[variant]
    for v, by_seed in ((reference, ref), (variant, var)):
        for s in seeds:
            bad = [k for k in ("score", "score_base") if not np.isfinite(by_seed[s][k])]
            if bad:
                raise AnalysisError(f"{v} on seed {s}: its {' and '.join(bad)} is {by_seed[s][bad[0]]} (not finite): "
                                    f"the rule cannot be judged on it ({getattr(by_seed[s], 'where', '')})")
    gains = [ref[s]["score"] - ref[s]["score_base"] for s in seeds]
    kinds = [var[s]["collapse"] for s in seeds]
    below = [var[s]["score"] < var[s]["score_base"] for s in seeds]
    collapses_below = [s for s, k, b in zip(seeds, kinds, below) if k and b]
    mean_gain = float(np.mean(gains))
    learns = mean_gain >= min_gain
    return dict(seeds=seeds, gains=gains, mean_gain=mean_gain, kinds=kinds, below=below,
                scores=[var[s]["score"] for s in seeds], bases=[var[s]["score_base"] for s in seeds],
                learns=learns, collapses_below=collapses_below,
                success=learns and len(collapses_below) >= min_collapsed)


def report(probe, v, reference, variant, min_gain, min_collapsed):
    n = len(v["seeds"])
    lines = [f"{probe}: {'SUCCESS' if v['success'] else 'no success'} on {n} seeds "
             f"({', '.join(str(s) for s in v['seeds'])})",
             f"  (1) {reference} learns: mean score − base {v['mean_gain']:+.3f} "
             f"({'≥' if v['learns'] else '<'} {min_gain:+.3f})",
             f"  (2) {variant} collapses and ends below its base on {len(v['collapses_below'])} of {n} seeds "
             f"({'≥' if len(v['collapses_below']) >= min_collapsed else '<'} {min_collapsed})",
             "  seed  ref gain  var score  var base  collapse"]
    for s, g, sc, b, k in zip(v["seeds"], v["gains"], v["scores"], v["bases"], v["kinds"]):
        lines.append(f"  {s!s:>4}  {g:+.3f}    {sc:.3f}      {b:.3f}     {k or '-'}")
    kinds = [k for k in v["kinds"] if k]
    lines.append(f"| {probe} | {reference} {v['mean_gain']:+.3f}; {variant} collapsed {len(kinds)}/{n} "
                 f"({sum(1 for k in kinds if k == 'terminal')} terminal), below its base after a collapse "
                 f"{len(v['collapses_below'])}/{n} | {'success' if v['success'] else 'no success'} |")
    return "\n".join(lines)


def main(argv=None):
    ap = entry.parser(description=__doc__.split("\n")[0])
    ap.add_argument("probe", help="the probe's name, as in the notebook's table (e.g. probe27)")
    ap.add_argument("dirs", nargs="+", metavar="SWEEP_DIR")
    ap.add_argument("--reference", default="control", help="the variant that must learn (default control)")
    ap.add_argument("--variant", default="grpo-real", help="the variant that must collapse (default grpo-real)")
    ap.add_argument("--score", default="eval_final", help="the held-out series (default eval_final)")
    ap.add_argument("--min-gain", type=float, default=0.05, help="(1)'s least mean gain (default 0.05)")
    ap.add_argument("--min-collapsed", type=int, default=2, help="(2)'s least number of seeds (default 2)")
    args = ap.parse_args(argv)
    # a value that would decide the verdict by itself is refused, not applied
    if not np.isfinite(args.min_gain):
        raise AnalysisError(f"--min-gain {args.min_gain}: must be a finite number (a score difference, e.g. 0.05)")
    if args.min_collapsed < 1:
        raise AnalysisError(f"--min-collapsed {args.min_collapsed}: must be >= 1 (seeds on which {args.variant} "
                            f"collapses; with fewer, a variant that never collapsed would pass)")
    if args.reference == args.variant:
        raise AnalysisError(f"--reference and --variant are both {args.reference}: the rule compares two variants")
    planned_runs = read_dirs(args.dirs)
    planned = list(dict.fromkeys(variant_of(r) for r in planned_runs))
    runs = [r for r in planned_runs if r.metrics]
    check_score(runs, args.score)
    per_run, _ = rows_of_runs(runs, args.score)
    v = verdict(per_run, args.reference, args.variant, args.min_gain, args.min_collapsed, planned)
    print(report(args.probe, v, args.reference, args.variant, args.min_gain, args.min_collapsed))


if __name__ == "__main__":
    entry.run(main)
