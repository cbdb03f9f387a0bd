#!/usr/bin/env python3
"""Runs per hour of a real grid, two moerl binaries side by side, with their numbers compared bit for bit.

Builds nothing. For each of --pairs alternations it runs the reference grid once with the baseline
binary and once with the candidate, each into a fresh directory with a fresh, empty base-policy
cache (so the supervised warm-up that makes the base policies is part of the time):

  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \\
  mpirun -np 2 BIN sweep scenarios/paper/collapse.ini --variants grpo,control,r3 --seeds 0-1 \\
      --ranks-per-run 1 --out DIR --cache DIR/cache --quiet [--set rl.steps=N] [--set KEY=VALUE]...

(6 runs of 400 steps by default). Each sweep is timed by its wall clock; the table gives the wall
seconds, the runs per hour, the candidate's speed-up over the baseline of its pair and the load
average (1 min) before and after each sweep, since the machine may be shared. Then it checks that
the two sweeps agree: the index (index.csv and index.json, without the columns that are timings or
scheduling: seconds, rank) and every run's per-step metric series (the HDF5 datasets under
metrics/, without the time_* series) must be bit-identical; the first difference is named (pair,
run, metric, step and both values), the index and the series each with their own verdict. A
series that only the candidate writes is listed, not a difference; one that only the baseline
writes is. --index-ignore COLUMN leaves an index column out (said in the report), for a column
whose definition changed on purpose while the series stayed the same.

  /usr/bin/python3 analysis/bench/runs_per_hour.py --baseline OLD/build/sim/moerl \\
      --candidate build/sim/moerl [--pairs 1] [--steps N] [--set KEY=VALUE]... [--index-ignore COL]
      [--keep DIR]

Only flags that moerl sweep has had since before the throughput work are used (checked against
each binary's `sweep --help`). Exit status 0 when every pair is identical, 1 when a pair differs,
2 when a sweep fails (non-zero exit, a failed run, or a flag the binary lacks).
"""
import csv
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, ROOT)  # analysis.cli: the one-line errors of every analysis entry point
from analysis.cli import Entry  # noqa: E402

entry = Entry(__name__, "analysis.bench.runs_per_hour")
with entry.imports():
    import h5py

GRID = "scenarios/paper/collapse.ini"
SWEEP_ARGS = ["--variants", "grpo,control,r3", "--seeds", "0-1", "--ranks-per-run", "1"]
FLAGS_USED = ["--out", "--cache", "--variants", "--seeds", "--ranks-per-run", "--quiet", "--set"]
INDEX_VOLATILE = ("seconds", "rank")  # wall time and which rank ran it: not a result


class SweepFailed(Exception):
    pass


# --- running ---------------------------------------------------------------------------------

def sweep_check_flags(binary):
    """The flags this script passes, each present in the binary's `sweep --help`."""
    try:
        p = subprocess.run([binary, "sweep", "--help"], capture_output=True, text=True)
    except OSError as e:
        raise SweepFailed(f"{binary}: cannot run it: {e}")
    missing = [f for f in FLAGS_USED if f not in p.stdout + p.stderr]
    if missing:
        raise SweepFailed(f"{binary}: moerl sweep lacks {', '.join(missing)} (needed: {' '.join(FLAGS_USED)})")


def sweep_command(mpirun, np_, binary, out, overrides):
    sets = [a for kv in overrides for a in ("--set", kv)]
    return (shlex.split(mpirun) + ["-np", str(np_), binary, "sweep", GRID] + SWEEP_ARGS
            + ["--out", out, "--cache", os.path.join(out, "cache"), "--quiet"] + sets)


def sweep_timed(cmd, out, log):
    """Runs one sweep into the fresh directory out; returns wall seconds and the load averages."""
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    load_before = os.getloadavg()[0]
    t0 = time.monotonic()
    try:
        with open(log, "w") as f:
            p = subprocess.run(cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT)
    except OSError as e:
        raise SweepFailed(f"cannot run {' '.join(cmd)}: {e}")
    wall = time.monotonic() - t0
    load_after = os.getloadavg()[0]
    if p.returncode != 0:
        raise SweepFailed(f"exit status {p.returncode}: {' '.join(cmd)}\n  log: {log}\n" + tail(log))
    return wall, load_before, load_after


def tail(path, n=15):
    with open(path, errors="replace") as f:
        return "".join(f.readlines()[-n:])


# --- comparing -------------------------------------------------------------------------------

def index_rows(out):
    with open(os.path.join(out, "index.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    failed = [r["id"] for r in rows if r["status"] == "failed"]
    if failed:
        raise SweepFailed(f"{out}: runs failed: {', '.join(failed)} (see their error column in index.csv)")
    return rows


def index_json(out, skip):
    with open(os.path.join(out, "index.json")) as f:
        j = json.load(f)
    for r in j.get("runs", []):
        for k in skip:
            r.pop(k, None)
    return j


def index_diff(base, cand, ignore=()):
    """The first difference of the two sweeps' indexes, or None; columns in ignore are not compared."""
    skip = set(INDEX_VOLATILE) | set(ignore)
    rb, rc = index_rows(base), index_rows(cand)
    if len(rb) != len(rc):
        return f"index.csv: {len(rb)} runs in the baseline, {len(rc)} in the candidate"
    for a, b in zip(rb, rc):
        for k in sorted(set(a) | set(b)):
            if k not in skip and a.get(k) != b.get(k):
                return f"index.csv: run {a.get('id')}, column {k}: baseline {a.get(k)!r}, candidate {b.get(k)!r}"
    jb, jc = index_json(base, skip), index_json(cand, skip)
    if jb != jc:
        for a, b in zip(jb.get("runs", []), jc.get("runs", [])):
            if a != b:
                keys = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
                return f"index.json: run {a.get('id')}, {keys[0]}: baseline {a.get(keys[0])!r}, candidate {b.get(keys[0])!r}"
        keys = [k for k in sorted(set(jb) | set(jc)) if jb.get(k) != jc.get(k)]
        return f"index.json: {keys[0]}: baseline {jb.get(keys[0])!r}, candidate {jc.get(keys[0])!r}"
    return None


def metric_series(path):
    with h5py.File(path, "r") as f:
        g = f["metrics"]
        return {k: g[k][()] for k in sorted(g) if isinstance(g[k], h5py.Dataset) and not k.startswith("time_")}


def series_diff(run, name, a, b):
    if a.shape != b.shape or a.dtype != b.dtype:
        return f"run {run}, metric {name}: shape/dtype baseline {a.shape} {a.dtype}, candidate {b.shape} {b.dtype}"
    if a.tobytes() == b.tobytes():  # bytes, so that NaN equals NaN and -0 differs from +0
        return None
    if a.ndim == 0:
        return f"run {run}, metric {name}: baseline {a!r}, candidate {b!r}"
    step = next(i for i in range(a.shape[0]) if a[i].tobytes() != b[i].tobytes())
    return (f"run {run}, metric {name}, step {step}: baseline {a[step].tolist()!r}, "
            f"candidate {b[step].tolist()!r}")


def runs_diff(base, cand, notes):
    """The first run/metric whose series differ bit for bit, or None; extra candidate series to notes."""
    for r in index_rows(base):
        a, b = metric_series(os.path.join(base, r["file"])), metric_series(os.path.join(cand, r["file"]))
        lost = sorted(set(a) - set(b))
        if lost:
            return f"run {r['id']}: the candidate does not write {', '.join(lost)}"
        extra = sorted(set(b) - set(a))
        if extra:
            notes.add(f"series only the candidate writes (not compared): {', '.join(extra)}")
        for name in sorted(a):
            d = series_diff(r["id"], name, a[name], b[name])
            if d:
                return d
    return None


# --- the report ------------------------------------------------------------------------------

def runs_per_hour(n_runs, wall):
    return n_runs / wall * 3600.0


def print_table(rows):
    print(f"{'pair':>4}  {'binary':<9}  {'wall s':>8}  {'runs/h':>8}  {'speed-up':>8}  {'load before':>11}  {'load after':>10}")
    for r in rows:
        sp = f"{r['speedup']:.2f}x" if r["speedup"] else ""
        print(f"{r['pair']:>4}  {r['binary']:<9}  {r['wall']:8.1f}  {r['rph']:8.1f}  {sp:>8}  "
              f"{r['load_before']:11.2f}  {r['load_after']:10.2f}")


def print_summary(rows, n_runs):
    walls = {b: sorted(r["wall"] for r in rows if r["binary"] == b) for b in ("baseline", "candidate")}
    med = {b: w[len(w) // 2] for b, w in walls.items()}
    print(f"median over {len(walls['baseline'])} pair(s), {n_runs} runs each: baseline {med['baseline']:.1f} s "
          f"({runs_per_hour(n_runs, med['baseline']):.1f} runs/h), candidate {med['candidate']:.1f} s "
          f"({runs_per_hour(n_runs, med['candidate']):.1f} runs/h): ratio {med['baseline'] / med['candidate']:.2f}x")


# --- the phases ------------------------------------------------------------------------------

def parse_args(argv):
    ap = entry.parser(description=__doc__.split("\n")[0])
    ap.add_argument("--baseline", required=True, help="the moerl binary to compare against")
    ap.add_argument("--candidate", required=True, help="the moerl binary under test")
    ap.add_argument("--pairs", type=int, default=1, help="alternations baseline, candidate (default 1)")
    ap.add_argument("--steps", type=int, default=0, help="RL steps per run (--set rl.steps=N; default the grid's 400)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="an extra scenario override for both binaries (repeatable), e.g. sft.steps=5")
    ap.add_argument("--np", type=int, default=2, help="MPI ranks (default 2)")
    ap.add_argument("--mpirun", default="mpirun", help="the MPI launcher, with any flags (default mpirun)")
    ap.add_argument("--index-ignore", action="append", default=[], metavar="COLUMN",
                    help="an index column not to compare (repeatable), e.g. final_reward where its definition "
                         "changed on purpose; the report names it")
    ap.add_argument("--keep", default="", help="keep the sweeps in this directory (default: a temporary one, removed)")
    a = ap.parse_args(argv)
    if a.pairs < 1:
        ap.error(f"--pairs = {a.pairs}: must be >= 1")
    a.overrides = ([f"rl.steps={a.steps}"] if a.steps > 0 else []) + a.set
    return a


def run_pair(a, work, pair, rows):
    outs = {}
    for binary, path in (("baseline", a.baseline), ("candidate", a.candidate)):
        out = os.path.join(work, f"pair{pair}-{binary}")
        cmd = sweep_command(a.mpirun, a.np, os.path.abspath(path), out, a.overrides)
        wall, lb, la = sweep_timed(cmd, out, out + ".log")
        n_runs = len(index_rows(out))
        rows.append(dict(pair=pair, binary=binary, wall=wall, rph=runs_per_hour(n_runs, wall),
                         load_before=lb, load_after=la, speedup=None))
        outs[binary] = out
    rows[-1]["speedup"] = rows[-2]["wall"] / rows[-1]["wall"]
    return outs, n_runs


def compare_pair(a, outs, pair, notes):
    """The pair's verdicts: (what, first difference or None) for the index and for the metric series."""
    b, c = outs["baseline"], outs["candidate"]
    return [(f"pair {pair} index", index_diff(b, c, a.index_ignore)), (f"pair {pair} metric series", runs_diff(b, c, notes))]


def main(argv=None):
    a = parse_args(argv)
    work = a.keep or tempfile.mkdtemp(prefix="runs-per-hour-")
    os.makedirs(work, exist_ok=True)
    rows, diffs, notes = [], [], set()
    try:
        for b in (a.baseline, a.candidate):
            sweep_check_flags(b)
        print(f"runs_per_hour: {GRID} {' '.join(SWEEP_ARGS)} -np {a.np}"
              + (f" --set {' --set '.join(a.overrides)}" if a.overrides else "") + f"; {a.pairs} pair(s)", flush=True)
        for pair in range(1, a.pairs + 1):
            outs, n_runs = run_pair(a, work, pair, rows)
            diffs += compare_pair(a, outs, pair, notes)
    except SweepFailed as e:
        print_table(rows)
        print(f"runs_per_hour: a sweep failed: {e}", file=sys.stderr)
        return 2
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    print_table(rows)
    print_summary(rows, n_runs)
    for n in sorted(notes):
        print(f"note: {n}")
    if a.index_ignore:
        print(f"note: index columns not compared (--index-ignore): {', '.join(a.index_ignore)}")
    for what, d in diffs:
        print(f"{what}: " + (f"DIFFERENT: {d}" if d else "bit-identical"))
    bad = [d for _, d in diffs if d]
    print("identical: index and every run's metric series are bit-identical in every pair" if not bad
          else f"DIFFERENT: {len(bad)} of {len(diffs)} comparisons differ (above)")
    return 1 if bad else 0


if __name__ == "__main__":
    entry.run(main)
