"""python3 -m analysis SWEEP_DIR [SWEEP_DIR ...] | RUN.h5 [RUN.h5 ...] [--group-by KEY ...] [--out DIR] [--static]

Writes SWEEP_DIR/report/ (or <run>-report/ beside a single run file): index.html, the interactive
dashboard (opens offline from file://), summary.md, summary.csv, the collapse and precursor tables;
with --static also the figures for papers (reward.png, stability.png, the panels the runs' metrics
allow, load-<group>.png, ratios-<group>.png) on static.html. Several sweep directories are put
side by side, each run labelled by its source. The full list: docs/sweeps.md.
"""
import os

from .cli import Entry

# `moerl report` runs this module and sets MOERL_ERROR_PREFIX to "moerl: error: report: " (and
# MOERL_PROG to "moerl report"), so a refusal reads like every other moerl error: one line with
# that prefix, exit status 1 (2 for a bad option), never a traceback (analysis/cli.py).
entry = Entry(__name__, "analysis", prog=os.environ.get("MOERL_PROG") or None,
              prefix=os.environ.get("MOERL_ERROR_PREFIX", "python3 -m analysis: error: "))
PREFIX = entry.prefix
with entry.imports():
    from .report import build


def main(argv=None):
    ap = entry.parser(description="Curves, heatmaps, a summary table and an HTML report of moerl runs.")
    ap.add_argument("paths", nargs="+", metavar="SWEEP_DIR_OR_RUN_FILE",
                    help="a sweep directory (moerl sweep --out), a directory of run files, or run files; "
                         "several directories: side by side, labelled by source")
    ap.add_argument("--group-by", nargs="+", metavar="KEY",
                    help="scenario keys to compare (e.g. rl.algorithm engines.rollout, or their last part); "
                         "default: the sweep's keys except run.seed")
    ap.add_argument("--out", help="report directory (default SWEEP_DIR/report or <run>-report)")
    ap.add_argument("--title", help="report title (default: the directory or run name)")
    ap.add_argument("--smooth", type=int, help="trailing mean window of the curves in steps (default by length)")
    ap.add_argument("--static", action="store_true",
                    help="also write the static figures (PNG) and static.html, for papers")
    ap.add_argument("--points", type=int, help="values per run and metric the dashboard stores at most "
                    "(default 500; longer runs are binned)")
    ap.add_argument("--quiet", action="store_true", help="do not print the summary table")
    args = ap.parse_args(argv)
    if args.static:
        import matplotlib  # noqa: F401  (a missing one: the one-line error before anything is written)
    path = args.paths[0] if len(args.paths) == 1 else args.paths
    build(path, group_by=args.group_by, out=args.out, title=args.title, smooth=args.smooth, verbose=not args.quiet,
          static=args.static, points=args.points)


if __name__ == "__main__":
    entry.run(main)
