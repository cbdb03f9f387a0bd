"""Loading moerl results: one run file, a sweep directory (index.json), or any directory of run
files; the effective scenario of each run as a dict; grouping runs by scenario keys.

Files and attributes are those of docs/hdf5-schema.md ("Run results", "Sweep directory").
"""
import glob
import json
import os
from collections import OrderedDict

import h5py
import numpy as np


class Run:
    """One run: its file, root attributes, metrics (name → array, first axis = steps) and scenario.

    A run listed in a sweep index whose file is missing or failed keeps its status and error there
    and has no metrics.
    """

    def __init__(self, path, name=None):
        self.path = path
        self.name = name or os.path.splitext(os.path.basename(path))[0]
        self.attrs = {}
        self.metrics = {}
        self.scenario = {}
        self.keys = OrderedDict()  # swept key → value (from a sweep index)
        self.status = "missing"
        self.error = ""
        self.has_dumps = False

    def load(self):
        with h5py.File(self.path, "r") as f:
            self.attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
            if "metrics" in f:
                self.metrics = {k: np.asarray(f["metrics"][k][()], dtype=float) for k in f["metrics"]}
            self.has_dumps = "dump" in f
        self.scenario = parse_scenario(self.attrs.get("scenario", ""))
        self.status = self.attrs.get("status", "?")
        return self

    @property
    def steps(self):
        return len(self.metrics.get("reward_mean", []))

    def series(self, name):
        """A [steps] metric (NaN-filled array of the run's length when absent)."""
        v = self.metrics.get(name)
        return np.asarray(v, dtype=float) if v is not None else np.full(self.steps, np.nan)

    def value(self, key):
        """A scenario key's value ("rl.algorithm"); sweep keys first, then the effective scenario."""
        if key in self.keys:
            return self.keys[key]
        return self.scenario.get(key, "")


def parse_scenario(text):
    """The effective scenario text ("section.key = value" lines, '#' comments) as an ordered dict."""
    out = OrderedDict()
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        k, v = line.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def load_sweep(path):
    """(runs, info) for a sweep directory, a directory of run files, or one or more run files.

    info: {"kind": "sweep" | "directory" | "files", "swept_keys": [...], "dir": ...}.
    """
    paths = [path] if isinstance(path, str) else list(path)
    if len(paths) == 1 and os.path.isdir(paths[0]):
        d = paths[0]
        index = os.path.join(d, "index.json")
        if os.path.exists(index):
            with open(index) as f:
                idx = json.load(f)
            runs = []
            for row in idx["runs"]:
                r = Run(os.path.join(d, row["file"]), row["id"])
                r.keys = OrderedDict(row.get("keys", {}))
                if os.path.exists(r.path) and row.get("status") != "failed":
                    r.load()
                r.status = row.get("status", r.status)
                r.error = row.get("error", "")
                runs.append(r)
            return runs, {"kind": "sweep", "swept_keys": list(idx.get("swept_keys", [])), "dir": d}
        files = sorted(p for p in glob.glob(os.path.join(d, "*.h5")) if not p.endswith(".ckpt.h5"))
        runs = [Run(p).load() for p in files if _is_run_file(p)]
        if not runs:
            raise SystemExit(f"{d}: no sweep index and no run files (*.h5)")
        return runs, {"kind": "directory", "swept_keys": differing_keys(runs), "dir": d}
    for p in paths:
        if not os.path.isfile(p):
            raise SystemExit(f"{p}: no such run file or sweep directory")
    runs = [Run(p).load() for p in paths]
    return runs, {"kind": "files", "swept_keys": differing_keys(runs) if len(runs) > 1 else [],
                  "dir": os.path.dirname(os.path.abspath(paths[0]))}


def _is_run_file(p):
    try:
        with h5py.File(p, "r") as f:
            return "metrics" in f and "scenario" in f.attrs
    except OSError:
        return False


def differing_keys(runs):
    """Scenario keys whose values differ between runs, in scenario order, without the keys that the
    earlier ones already determine (rl.clip_low follows from rl.algorithm when it is a default)."""
    keys = OrderedDict()
    for r in runs:
        for k in r.scenario:
            keys[k] = True
    have = [r for r in runs if r.scenario]
    out = []
    for k in keys:
        if k != "run.seed" and len({r.scenario.get(k, "") for r in have}) > 1:
            by_kept = {}
            for r in have:
                by_kept.setdefault(tuple(r.scenario.get(j, "") for j in out), set()).add(r.scenario.get(k, ""))
            if any(len(v) > 1 for v in by_kept.values()):
                out.append(k)
    if len({r.scenario.get("run.seed", "") for r in have}) > 1:
        out.append("run.seed")
    return out


def resolve_keys(wanted, runs):
    """Group-by keys as given ("rl.algorithm") or by their last part ("algorithm") when unique."""
    known = OrderedDict()
    for r in runs:
        for k in list(r.keys) + list(r.scenario):
            known[k] = True
    out = []
    for w in wanted:
        if w in known:
            out.append(w)
            continue
        hits = [k for k in known if k.split(".")[-1] == w or k.endswith("." + w)]
        if len(hits) != 1:
            raise SystemExit(f"--group-by {w}: " + ("ambiguous: " + ", ".join(hits) if hits else
                                                    "no such scenario key (e.g. rl.algorithm, engines.rollout)"))
        out.append(hits[0])
    return out


def group_runs(runs, keys, info=None):
    """OrderedDict label → runs, in first-appearance order. The label is the value when grouping
    by one key whose value reads as a name ("r3"), else "short=value, ..." ("n_experts=8");
    the run name for no keys and one run."""
    groups = OrderedDict()
    for r in runs:
        if keys:
            vals = [r.value(k) for k in keys]
            if len(keys) == 1 and not _is_number_or_bool(vals[0]):
                label = vals[0]
            else:
                label = ", ".join(f"{k.split('.')[-1]}={v}" for k, v in zip(keys, vals))
        else:
            label = r.name if len(runs) == 1 else "all runs"
        groups.setdefault(label, []).append(r)
    return groups


def _is_number_or_bool(v):
    if v in ("true", "false", "on", "off", "yes", "no"):
        return True
    try:
        float(v)
        return True
    except ValueError:
        return False


def default_group_keys(info):
    """The swept (or differing) keys except the seed: runs that differ only in seed form a group."""
    return [k for k in info.get("swept_keys", []) if k != "run.seed"]
