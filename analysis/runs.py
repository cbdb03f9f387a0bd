"""Loading moerl results: one run file, a sweep directory (index.json), or any directory of run
files; the effective scenario of each run as a dict; grouping runs by scenario keys; a run's
identity (variant_of, seed_of) and the outcomes every table compares runs on (final_reward,
final_eval, base_eval).

Files and attributes are those of docs/hdf5-schema.md ("Run results", "Sweep directory").
"""
import glob
import os
import re
import sys
import zlib
from collections import OrderedDict

import h5py
import numpy as np

# AnalysisError: input the analysis cannot use (a missing or empty directory, no readable run, an
# unknown --group-by key, an --out that is a file, a damaged index.json). Defined beside the entry
# points' helper, which needs no numpy; an ordinary exception, so a notebook can catch it.
from .cli import AnalysisError, read_json  # noqa: F401


# The states a run can be in, in the order reports count them (docs/sweeps.md): the index's six,
# `unreadable` for a run whose file exists but cannot be read (damaged, truncated, foreign),
# `mismatched` for a planned run whose file holds another run (a swapped or copied-in file: its
# stored scenario is not the plan's), `unplanned` for a run file the plan does not list. The last
# three have no numbers and are listed under "Skipped files" with the reason.
STATES = ["complete", "collapsed", "preempted", "running", "pending", "failed", "unreadable", "mismatched",
          "unplanned"]


class BadFile(Exception):
    """A file that cannot be used as a run: unreadable, corrupted, truncated or not a run's results."""

    def __init__(self, path, reason):
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


_HEADER_MAGIC = b"moerl-integrity 1\n"
_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def check_integrity(path):
    """Checks the 512-byte integrity header moerl writes before the HDF5 data (store/h5io.h): the
    file's size and the CRC-32 of everything after the header. Raises BadFile; files without the
    header (other writers) pass. A FIFO or a device is refused by its kind, never opened (a FIFO
    would block the report)."""
    import stat
    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        raise BadFile(path, f"cannot read: {e.strerror or e}")
    if not stat.S_ISREG(mode):
        from .cli import _kind
        raise BadFile(path, f"is {_kind(mode)}, not a run's results file")
    try:
        with open(path, "rb") as f:
            head = f.read(512)
            if head[:8] == _HDF5_SIGNATURE:
                return
            if not head.startswith(_HEADER_MAGIC):
                f.seek(512)
                if f.read(8) == _HDF5_SIGNATURE:
                    raise BadFile(path, "corrupted: the header before the HDF5 data is not a moerl integrity header")
                return  # not HDF5 at all: h5py says so
            if len(head) < 512:
                raise BadFile(path, f"truncated file: {len(head)} bytes, shorter than its integrity header")
            try:
                lines = head.rstrip(b"\0").decode("ascii").split("\n")
                size = int(lines[1].split(" ")[1])
                crc = int(lines[2].split(" ")[1], 16)
                expected = _HEADER_MAGIC + f"size {size}\ncrc32 {crc:08x}\n".encode()
            except (UnicodeDecodeError, IndexError, ValueError):
                raise BadFile(path, "corrupted: damaged integrity header")
            if head != expected.ljust(512, b"\0"):
                raise BadFile(path, "corrupted: damaged integrity header")
            actual = os.fstat(f.fileno()).st_size
            if actual != size:
                raise BadFile(path, f"{'truncated' if actual < size else 'corrupted'} file: {actual} bytes, "
                                    f"written with {size}")
            c = 0
            while True:
                block = f.read(1 << 20)
                if not block:
                    break
                c = zlib.crc32(block, c)
            if c != crc:
                raise BadFile(path, f"corrupted: CRC-32 of the content is {c:08x}, written as {crc:08x}")
    except OSError as e:
        raise BadFile(path, f"cannot read: {e.strerror or e}")


def warn(msg):
    print(f"analysis: warning: {msg}", file=sys.stderr)


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
        self.source = ""  # the sweep directory (or file list) it came from, as labelled in a report

    def load(self):
        """Reads the file; raises BadFile when it is damaged or not a run's results."""
        check_integrity(self.path)
        try:
            with h5py.File(self.path, "r") as f:
                if "metrics" not in f or "scenario" not in f.attrs:
                    kind = f.attrs.get("format", "")
                    kind = kind.decode() if isinstance(kind, bytes) else kind
                    raise BadFile(self.path, f"not a run's results ({kind or 'no metrics/ or scenario attribute'})")
                if "status" not in f.attrs:  # moerl writes it first ("running"): not a run's results
                    raise BadFile(self.path, "no 'status' attribute: not a run's results file")
                self.attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
                self.metrics = {k: np.asarray(f["metrics"][k][()], dtype=float) for k in f["metrics"]}
                self.has_dumps = "dump" in f
        except BadFile:
            raise
        except Exception as e:  # h5py raises OSError, KeyError, ValueError, RuntimeError on damaged files
            raise BadFile(self.path, f"unreadable: {e}")
        self.scenario = parse_scenario(self.attrs.get("scenario", ""))
        self.status = self.attrs["status"]
        return self

    @property
    def steps(self):
        return len(self.metrics.get("reward_mean", []))

    def series(self, name):
        """A [steps] metric (NaN-filled array of the run's length when absent)."""
        v = self.metrics.get(name)
        return np.asarray(v, dtype=float) if v is not None else np.full(self.steps, np.nan)

    def value(self, key):
        """A scenario key's value ("rl.algorithm") as the run's file stores it (its effective
        scenario), spelled as the sweep's grid spells it (1e-4, not 0.0001) where the two agree;
        a key the file does not store (the variant's name, a run without a file) from the sweep's
        index; "source" is the label of the sweep the run came from."""
        if key == "source":
            return self.source
        if key in self.scenario:
            stored = self.scenario[key]
            return self.keys[key] if key in self.keys and same_value(self.keys[key], stored) else stored
        return self.keys.get(key, "")


def expert_shares(run):
    """[steps, L, E] one run's share of each expert in its layer's routed (token, slot) pairs × E
    (1 = a perfectly balanced layer), or None without expert_load (dense). Per run, never a mean
    over runs: each seed has its own base policy, so expert k of one run is not expert k of another."""
    x = run.metrics.get("expert_load") if run.metrics else None
    if x is None or x.ndim != 3:
        return None
    with np.errstate(invalid="ignore", divide="ignore"):
        return x / x.sum(axis=2, keepdims=True) * x.shape[2]


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


def same_value(a, b):
    """Two spellings of one scenario value: the same text, or numbers equal as floats (a grid's
    1e-4 and the effective scenario's 0.0001)."""
    a, b = str(a), str(b)
    if a == b:
        return True
    try:
        return float(a) == float(b)
    except ValueError:
        return False


def plan_mismatch(run, row):
    """Why a loaded run file is not the run its index row plans ("" when it is): the row's
    scenario_hash (the planned run's, written by moerl) against the file's, and the row's swept
    keys against the values the file stores, the plan's value first ("rl.algorithm: r3 → grpo").
    A file without a stored scenario (an older format) cannot be checked: ""."""
    if not run.attrs.get("scenario"):
        return ""
    diff = []
    for k, v in (row.get("keys") or {}).items():
        if k == "variant":  # a name, not a scenario key
            continue
        got = run.scenario.get(k)
        if got is None or not same_value(v, got):
            diff.append(f"{k}: {v} → {got if got is not None else '(unset)'}")
    planned, stored = row.get("scenario_hash") or "", str(run.attrs.get("scenario_hash", ""))
    if not diff and planned and stored and planned != stored:
        diff.append(f"scenario_hash: {planned} → {stored} (a key the sweep does not vary differs)")
    return "; ".join(diff)


def _index_overrides():
    """{real directory: index.json} that `moerl report` assembled in memory for directories it
    cannot write (MOERL_SWEEP_INDEX_FOR: one "<directory>\t<index>" line each)."""
    out = {}
    for line in os.environ.get("MOERL_SWEEP_INDEX_FOR", "").splitlines():
        d, sep, idx = line.partition("\t")
        if sep:
            out[os.path.realpath(d)] = idx
    return out


def _is_run_file(path):
    """False for an HDF5 file that says it is something else (a checkpoint, a score file: a
    "format" attribute, or no "steps"); True for a run's results and for a file that cannot be
    opened (it may be a damaged run's) and for a FIFO or a device (never opened: named as it is)."""
    if not os.path.isfile(path):
        return True
    try:
        with h5py.File(path, "r") as f:
            return "format" not in f.attrs and "steps" in f.attrs
    except Exception:  # noqa: BLE001 — damaged: named as it is
        return True


def load_sweep(path):
    """(runs, info) for a sweep directory, a directory of run files, or one or more run files.

    info: {"kind": "sweep" | "directory" | "files", "swept_keys": [...], "dir": ...}.
    """
    paths = [path] if isinstance(path, str) else list(path)
    skipped = []  # (path, reason): files left out of the report, with a warning each

    def try_load(r):
        try:
            return r.load()
        except BadFile as e:
            warn(f"skipping {e}")
            skipped.append((e.path, e.reason))
            return None

    if len(paths) == 1 and os.path.isdir(paths[0]):
        d = paths[0]
        index = _index_overrides().get(os.path.realpath(d), os.path.join(d, "index.json"))
        if os.path.exists(index):
            idx = read_index(index)
            runs = []
            for row in idx["runs"]:
                r = Run(os.path.join(d, row["file"]), row["id"])
                r.keys = OrderedDict(row.get("keys", {}))
                bad = False
                if row.get("status") in ("mismatched", "unplanned"):
                    # another run's file under a planned name, or a file the plan does not list (as
                    # moerl assembled the index): named, never counted as the planned run
                    why = row.get("error") or row["status"]
                    warn(f"skipping {r.path}: {why}")
                    skipped.append((r.path, why))
                    r.status, r.error = row["status"], why
                    runs.append(r)
                    continue
                if os.path.exists(r.path) and row.get("status") != "failed":
                    bad = try_load(r) is None
                    why = "" if bad else plan_mismatch(r, row)
                    if why:  # an index older than the file: the file is checked against the plan here
                        why = (f"holds another run than the plan's {row['id']} (the plan's → the file's: {why}); "
                               f"not counted as {row['id']}")
                        warn(f"skipping {r.path}: {why}")
                        skipped.append((r.path, why))
                        r.attrs, r.metrics, r.scenario = {}, {}, {}
                        r.status, r.error = "mismatched", why
                        runs.append(r)
                        continue
                elif os.path.exists(r.path):
                    # a failed run's file is not read for numbers, but a damaged one is named as
                    # such (the index assembled by moerl says "unreadable results file")
                    try:
                        check_integrity(r.path)
                        if str(row.get("error", "")).startswith("unreadable results file"):
                            raise BadFile(r.path, row["error"])
                    except BadFile as e:
                        warn(f"skipping {e}")
                        skipped.append((e.path, e.reason))
                        bad = True
                r.status = "unreadable" if bad else row.get("status", r.status)
                r.error = skipped[-1][1] if bad else row.get("error", "")
                runs.append(r)
            # run files the index does not list (an index older than the directory): named, not counted
            listed = {os.path.normpath(row["file"]) for row in idx["runs"]}
            for p in sorted(glob.glob(os.path.join(d, "*.h5"))):
                if p.endswith(".ckpt.h5") or os.path.basename(p) in listed or not _is_run_file(p):
                    continue
                why = "a run file the sweep index does not list; not counted"
                warn(f"skipping {p}: {why}")
                skipped.append((p, why))
                r = Run(p)
                r.status, r.error = "unplanned", why
                runs.append(r)
            return runs, {"kind": "sweep", "swept_keys": list(idx.get("swept_keys", [])), "dir": d,
                          "skipped": skipped, "base": idx.get("base", "")}
        files = sorted(p for p in glob.glob(os.path.join(d, "*.h5")) if not p.endswith(".ckpt.h5"))
        runs = [r for r in (try_load(Run(p)) for p in files) if r is not None]
        if not runs:
            if not os.listdir(d):
                raise AnalysisError(f"{d}: is an empty directory (no sweep index, no run files)")
            raise AnalysisError(f"{d}: no sweep index and no readable run files (*.h5)")
        return runs, {"kind": "directory", "swept_keys": differing_keys(runs), "dir": d, "skipped": skipped}
    for p in paths:
        if os.path.exists(p) and not os.path.isfile(p) and not os.path.isdir(p):
            from .cli import _kind
            raise AnalysisError(f"{p}: is {_kind(os.stat(p).st_mode)}, not a run file or sweep directory")
        if not os.path.isfile(p):
            raise AnalysisError(f"{p}: no such run file or sweep directory")
    runs = [r for r in (try_load(Run(p)) for p in paths) if r is not None]
    if not runs:
        raise AnalysisError("no readable run files: " + "; ".join(f"{p}: {why}" for p, why in skipped))
    return runs, {"kind": "files", "swept_keys": differing_keys(runs) if len(runs) > 1 else [],
                  "dir": os.path.dirname(os.path.abspath(paths[0])), "skipped": skipped}


def read_index(path):
    """A sweep's index.json (docs/hdf5-schema.md "Sweep directory"), checked for what load_sweep
    reads: a "runs" list whose rows each name their "id" and "file". Raises AnalysisError naming
    the file and what is wrong (not JSON — e.g. truncated by a full disk —, a missing key)."""
    idx = read_json(path, "a valid sweep index",
                    " (damaged or truncated?); `moerl sweep GRID --out DIR --index-only` assembles it again from the run files")
    if not isinstance(idx, dict) or not isinstance(idx.get("runs"), list):
        raise AnalysisError(f"{path}: not a sweep index: no \"runs\" list")
    for i, row in enumerate(idx["runs"]):
        if not isinstance(row, dict):
            raise AnalysisError(f"{path}: runs[{i}] is not an object")
        for key in ("id", "file"):
            if not isinstance(row.get(key), str) or not row[key]:
                raise AnalysisError(f"{path}: runs[{i}] has no \"{key}\" (a string: every run names its id and file)")
        if not isinstance(row.get("keys", {}), dict):
            raise AnalysisError(f"{path}: runs[{i}] (\"{row['id']}\"): \"keys\" is not an object")
    return idx


def source_labels(paths):
    """Short distinct labels of several sources: each path's last part, or its last two when two
    share the last part, or the last part with its position when even those collide."""
    parts = [os.path.normpath(os.path.abspath(p)).split(os.sep) for p in paths]
    for n in (1, 2):
        labels = ["/".join(x[-n:]) for x in parts]
        if len(set(labels)) == len(labels):
            return [os.path.splitext(lab)[0] if lab.endswith(".h5") else lab for lab in labels]
    return [f"{x[-1]}#{i + 1}" for i, x in enumerate(parts)]


def load_sources(paths):
    """(runs, info) for one source (load_sweep) or several sweep directories or run files side by
    side (`moerl report DIR1 DIR2 ...`): every run's `source` is its source's label
    (source_labels), info["sources"] lists them ({label, dir, kind, swept_keys, base}), and
    info["swept_keys"] is the union of the sources' swept keys (the key "source" leads it when
    there are several). Run files only (no directory) are one source, as load_sweep reads them."""
    paths = [paths] if isinstance(paths, str) else list(paths)
    if len(paths) == 1 or not any(os.path.isdir(p) for p in paths):
        runs, info = load_sweep(paths[0] if len(paths) == 1 else paths)
        label = source_labels([info["dir"] if info["kind"] != "files" or len(paths) > 1 else paths[0]])[0]
        for r in runs:
            r.source = label
        info["sources"] = [{"label": label, "dir": info["dir"], "kind": info["kind"],
                            "swept_keys": info["swept_keys"], "base": info.get("base", "")}]
        runs, info["duplicates"] = drop_duplicates(runs)
        return runs, info
    runs, skipped, sources, keys = [], [], [], OrderedDict()
    for p, label in zip(paths, source_labels(paths)):
        rs, inf = load_sweep(p)
        for r in rs:
            r.source = label
        runs += rs
        skipped += inf.get("skipped", [])
        sources.append({"label": label, "dir": inf["dir"], "kind": inf["kind"], "swept_keys": inf["swept_keys"],
                        "base": inf.get("base", "")})
        for k in inf["swept_keys"]:
            keys[k] = True
    runs, duplicates = drop_duplicates(runs)
    if len({r.source for r in runs}) == 1:  # the same directory twice (DIR DIR/): one source
        sources = [s for s in sources if s["label"] == runs[0].source] if runs else sources[:1]
        keys = OrderedDict((k, True) for k in sources[0]["swept_keys"])
    swept = ([] if len(sources) == 1 else ["source"]) + [k for k in keys if k != "run.seed" and k != "source"] + \
        (["run.seed"] if "run.seed" in keys else [])
    common = os.path.commonpath([os.path.abspath(s["dir"]) for s in sources])
    return runs, {"kind": "sources", "swept_keys": swept, "dir": common, "skipped": skipped, "sources": sources,
                  "duplicates": duplicates}


def run_identity(run):
    """What makes two run files one run: the resolved scenario (the root attribute `scenario`
    without its comment lines, which is what the attribute scenario_hash hashes; run.seed is one
    of its keys) and the seed; None for a run without a readable file."""
    if not run.attrs or not run.attrs.get("scenario"):
        return None
    body = "\n".join(l for l in str(run.attrs["scenario"]).splitlines() if l and not l.startswith("#"))
    return body, str(run.attrs.get("seed", run.scenario.get("run.seed", "")))


def drop_duplicates(runs):
    """(runs, duplicates): each run counted once. A run is a duplicate of an earlier one when it is
    the same file (a directory given twice, DIR and DIR/) or the same run (run_identity: copies of
    a run in two sweep directories): pooling it would count one seed twice and shrink the interval.
    duplicates: [(kept path, dropped path)], each with a warning naming both files."""
    kept, seen_file, seen_run, dups = [], {}, {}, []
    for r in runs:
        real = os.path.realpath(r.path)
        ident = run_identity(r)
        first = seen_file.get(real) or (seen_run.get(ident) if ident else None)
        if first is not None:
            dups.append((first.path, r.path))
            same_file = real == os.path.realpath(first.path)
            warn(f"{r.path}: the same run as {first.path}" +
                 ("" if same_file else f" (scenario hash {r.attrs.get('scenario_hash', '?')}, seed {ident[1]})") +
                 "; counted once")
            continue
        seen_file[real] = r
        if ident:
            seen_run[ident] = r
        kept.append(r)
    return kept, dups


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
    if len({r.source for r in runs}) > 1:
        known["source"] = True
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
            raise AnalysisError(f"--group-by {w}: " + ("ambiguous: " + ", ".join(hits) if hits else
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


# A run's identity and its outcomes: what the collapse table, the league, the probes and the search
# rows pair and compare runs on, defined once with the run.

FINAL_REWARD_STEPS = 10  # sim/io/results.h kFinalRewardSteps


def variant_of(run):
    """The run's variant: its [variant.NAME] in the sweep's grid, else its rl.algorithm ("?": neither)."""
    return run.keys.get("variant") or run.value("rl.algorithm") or "?"


def seed_of(run):
    """The run's seed (run.seed), as its scenario spells it."""
    return run.value("run.seed")


def final_reward_of(reward_mean):
    """moerl's final reward of a reward_mean series, as sim/io/results.h final_reward_of: the mean of
    its last FINAL_REWARD_STEPS finite values (NaN: none)."""
    x = np.asarray(reward_mean, dtype=float)
    x = x[np.isfinite(x)]
    return float(np.mean(x[-FINAL_REWARD_STEPS:])) if len(x) else float("nan")


def final_reward(run):
    """The run's final reward: final_reward_of its reward_mean — the one meaning of "final reward" in
    moerl (index.csv, `moerl inspect`, summary.csv, the league, the collapse table)."""
    return final_reward_of(run.series("reward_mean"))


def finite_values(x):
    """The finite values of a series (NaN and ±inf left out), as a float array."""
    x = np.asarray(x, dtype=float)
    return x[np.isfinite(x)]


def final_eval(run):
    """The run's last finite eval_accuracy (NaN: none)."""
    x = finite_values(run.series("eval_accuracy"))
    return float(x[-1]) if len(x) else float("nan")


def base_eval(run):
    """The run's eval_accuracy_base at step 0, before any update (NaN: none)."""
    x = finite_values(run.series("eval_accuracy_base"))
    return float(x[0]) if len(x) else float("nan")


def load_seed_files(d, load):
    """{variant: [load(path), ...]} of a directory of <variant>-seed<k>.h5 run files (no sweep index;
    checkpoints left out), in file-name order. Raises AnalysisError for a missing directory, a file
    in its place, or a directory without such files."""
    if not os.path.isdir(d):
        raise AnalysisError(f"{d}: no such directory" if not os.path.exists(d) else f"{d}: not a directory")
    runs = OrderedDict()
    for path in sorted(glob.glob(os.path.join(d, "*-seed*.h5"))):
        if path.endswith(".ckpt.h5"):
            continue
        name = re.sub(r"-seed\d+\.h5$", "", os.path.basename(path))
        runs.setdefault(name, []).append(load(path))
    if not runs:
        raise AnalysisError(f"{d}: no <variant>-seed<k>.h5 run files")
    return runs


def load_pooled_runs(dirs):
    """The runs with metrics of one or more sweep directories (or run files), pooled in order, as Run
    objects (analysis.load_runs, in frame.py, is the notebook's DataFrame of every step)."""
    runs = []
    for d in dirs:
        rs, _ = load_sweep(d)
        runs += [r for r in rs if r.metrics]
    return runs


def group_by_variant(runs, dial=None):
    """OrderedDict (variant, dial value or "") → runs, in first-appearance order."""
    out = OrderedDict()
    for r in runs:
        out.setdefault((variant_of(r), r.value(dial) if dial else ""), []).append(r)
    return out
