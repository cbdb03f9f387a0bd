"""Whether two sweep directories (or two run files) hold bit-identical runs: every dataset but the
wall-clock times (time_*), and every root attribute but the base checkpoint's path, of each run's
results file and checkpoint. Used by tests/sweep_array.sh, tests/preempt.sh and tests/slurm/;
tests/faults/fault_suite.py reads files with its contents().

Usage: /usr/bin/python3 tests/sweep/same_runs.py REF GOT [--files]
  REF, GOT: sweep directories (every <id>.h5 of REF must be in GOT, with its .ckpt.h5), or with
  --files two results files (their checkpoints beside them are compared too).
Exit 0 and one line when all agree; 1 and the first difference otherwise.
"""
import glob
import os
import sys

import h5py
import numpy as np

IGNORED_ATTRS = {"base_checkpoint"}  # where the cache was, not what the run is


def contents(path, ignored_attrs=IGNORED_ATTRS):
    """{name: (dtype, shape, bytes)} of every dataset but the wall-clock times (time_*), and
    {"@attr": text} of every root attribute but ignored_attrs."""
    out = {}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset) and not name.split("/")[-1].startswith("time_"):
                a = obj[()]
                out[name] = (str(a.dtype), np.shape(a), np.asarray(a).tobytes())
        f.visititems(visit)
        for k, v in f.attrs.items():
            if k not in ignored_attrs:
                out["@" + k] = str(v)
    return out


def differ(a, b):
    if not os.path.exists(b):
        return f"{b}: missing"
    ca, cb = contents(a), contents(b)
    if set(ca) != set(cb):
        return f"{b}: other objects than {a}: {sorted(set(ca) ^ set(cb))[:4]}"
    for k in ca:
        if ca[k] != cb[k]:
            return f"{b}: {k} differs from {a}"
    return None


def pairs(ref, got, files):
    if files:
        items = [(ref, got)]
    else:
        items = [(p, os.path.join(got, os.path.basename(p)))
                 for p in sorted(glob.glob(os.path.join(ref, "*.h5"))) if not p.endswith(".ckpt.h5")]
    for a, b in items:
        yield a, b
        yield a[:-3] + ".ckpt.h5", b[:-3] + ".ckpt.h5"


def main():
    args = [a for a in sys.argv[1:] if a != "--files"]
    if len(args) != 2:
        raise SystemExit(__doc__)
    n = 0
    for a, b in pairs(args[0], args[1], "--files" in sys.argv):
        d = differ(a, b)
        if d:
            print(f"same_runs: {d}")
            sys.exit(1)
        n += 1
    if n == 0:
        print(f"same_runs: {args[0]}: no run files")
        sys.exit(1)
    print(f"same_runs: {n} files bit-identical (times and the base checkpoint's path aside)")


if __name__ == "__main__":
    main()
