"""python3 -m analysis SWEEP_DIR | RUN.h5 [RUN.h5 ...] [--group-by KEY ...] [--out DIR]

Writes SWEEP_DIR/report/ (or <run>-report/ beside a single run file): summary.md, summary.csv,
reward.png, stability.png, the figures the runs' metrics allow (diagnostics, corrections, response
length, truncation, mismatch along the response, gradient norm, entropy, ...), load-<group>.png,
ratios-<group>.png (runs with --dump-tensors) and index.html showing them together; the full
list: docs/sweeps.md.
"""
import argparse

from .report import build


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m analysis",
                                 description="Curves, heatmaps, a summary table and an HTML report of moerl runs.")
    ap.add_argument("paths", nargs="+", metavar="SWEEP_DIR_OR_RUN_FILE",
                    help="a sweep directory (moerl sweep --out), a directory of run files, or run files")
    ap.add_argument("--group-by", nargs="+", metavar="KEY",
                    help="scenario keys to compare (e.g. rl.algorithm engines.rollout, or their last part); "
                         "default: the sweep's keys except run.seed")
    ap.add_argument("--out", help="report directory (default SWEEP_DIR/report or <run>-report)")
    ap.add_argument("--title", help="report title (default: the directory or run name)")
    ap.add_argument("--smooth", type=int, help="trailing mean window of the curves in steps (default by length)")
    ap.add_argument("--quiet", action="store_true", help="do not print the summary table")
    args = ap.parse_args(argv)
    path = args.paths[0] if len(args.paths) == 1 else args.paths
    build(path, group_by=args.group_by, out=args.out, title=args.title, smooth=args.smooth, verbose=not args.quiet)


if __name__ == "__main__":
    main()
