#!/usr/bin/env python3
"""The fault suite (ctest: faults; faults_long with the label `long`): what moerl promises about
data (docs/reliability.md), tried the way a reliability engineer would.

  kill      kill -9 at random points of a run, then --resume: every dataset equals the
            uninterrupted run's, bit for bit (wall-clock times aside)
  sweep     kill -9 of one rank at a random point of a 2-rank sweep, then --resume: every run
            equals the 1-rank sweep's, bit for bit
  disk      a full disk (a small tmpfs where mounting is allowed, else `ulimit -f`, EFBIG) at
            several fill levels, for run (1 and 2 ranks) and sft: one clear error, no signal, no
            temporary left, what was written before still readable and resumable to the same result
  corrupt   bit flips and truncations at random offsets of a checkpoint, a results file and a
            base checkpoint, then --resume (or a run from that base): refused with a clear error,
            or (a flip in bytes nobody reads) the same result as the intact run
  scenario  --resume with a changed scenario key: refused naming the key, files untouched
  base      a base checkpoint of another architecture: refused naming the field, nothing written
  rerun     run over finished results without --force: refused, file untouched

Each case ends as one of: ok (the promised result), clear error (exit 1 or 2 and one line
"moerl: error: ..."), crash (a signal, a traceback, MPI_Abort noise, or an error without the
one-line message), hang (past its timeout), silent wrong result (exit 0 with data that differ from
the intact run's, or a refusal that was expected but did not come). The closing line counts them;
the suite fails unless crashes, hangs and silent wrong results are all zero.

Usage: fault_suite.py MOERL_BINARY [--long] [--seed N] [--keep DIR] [--only CASE,...]
Needs numpy and h5py (exit 77, ctest's "skipped", without them). MPIEXEC: the launcher (default
mpirun); the sweep and 2-rank cases are skipped when it is missing.
"""
import argparse
import glob
import json
import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

try:
    import h5py
    import numpy as np
except ImportError:
    print("fault_suite: SKIPPED: needs numpy and h5py (scripts/install-deps.sh installs them)")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
SCENARIO = os.path.join(HERE, "tiny.ini")
GRID = os.path.join(HERE, "tiny-grid.ini")
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1",
           # PMIx's shared-memory store writes files: under `ulimit -f` MPI_Init would fail first
           "PMIX_MCA_gds": "hash"}
NOISE = re.compile(r"Segmentation fault|core dumped|Traceback|MPI_ABORT|ORTE_ERROR_LOG|Aborted|"
                   r"terminate called|PMIX ERROR|H5F__close_cb")


class Tally:
    def __init__(self):
        self.cases = []  # (group, name, outcome, detail)

    def add(self, group, name, outcome, detail=""):
        self.cases.append((group, name, outcome, detail))
        mark = {"ok": "ok", "clear": "clear error"}.get(outcome, outcome.upper())
        print(f"  [{group}] {name}: {mark}" + (f" — {detail}" if detail and outcome not in ("ok",) else ""),
              flush=True)

    def count(self, outcome):
        return sum(1 for c in self.cases if c[2] == outcome)


class Moerl:
    def __init__(self, binary, mpiexec):
        self.binary = binary
        self.mpiexec = mpiexec

    def cmd(self, args, ranks=1):
        if ranks == 1:
            return [self.binary] + args
        return [self.mpiexec, "--oversubscribe", "-np", str(ranks), self.binary] + args

    def run(self, args, ranks=1, timeout=120, ulimit_kb=None, cwd=None):
        """(outcome, rc, output): outcome ok | clear | crash | hang."""
        cmd = self.cmd(args, ranks)
        env = dict(os.environ, **MPI_ENV)
        if ulimit_kb is not None:
            cmd = ["bash", "-c", f"ulimit -f {ulimit_kb}; exec \"$@\"", "moerl"] + cmd
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd,
                               start_new_session=True)
        except subprocess.TimeoutExpired as e:
            return "hang", None, (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else ""
        out = p.stderr + "\n" + p.stdout  # the error line first; progress lines may lack a newline
        return classify(p.returncode, p.stderr, out), p.returncode, out


def classify(rc, err, out):
    if rc < 0 or rc >= 128 or NOISE.search(out):
        return "crash"
    if rc == 0:
        return "ok"
    lines = [l for l in err.splitlines() if l.startswith("moerl: error:")]
    if rc in (1, 2) and len(lines) >= 1 and len(set(lines)) == 1:
        return "clear"
    return "crash"  # an error without its one clear line


def error_line(out):
    for l in out.splitlines():
        if l.startswith("moerl: error:"):
            return l[len("moerl: error: "):]
    return out.strip().splitlines()[-1] if out.strip() else ""


# ---- comparing files ---------------------------------------------------------------------------

def datasets(path):
    """{name: bytes} of every dataset except wall-clock times, plus the root attributes."""
    out = {}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset) and not name.split("/")[-1].startswith("time_"):
                a = obj[()]
                out[name] = (str(a.dtype), a.shape, np.asarray(a).tobytes())
        f.visititems(visit)
        for k, v in f.attrs.items():
            out["@" + k] = str(v)
    return out


def same_files(a, b):
    """None when every dataset (and root attribute) is bit-identical, else what differs."""
    try:
        da, db = datasets(a), datasets(b)
    except Exception as e:  # noqa: BLE001 — any unreadable file is a difference
        return f"unreadable: {e}"
    if set(da) != set(db):
        return f"different objects: {sorted(set(da) ^ set(db))[:4]}"
    for k in da:
        if da[k] != db[k]:
            return f"{k} differs"
    return None


def same_run(ref_dir, got_dir, name="r"):
    for suffix in (".h5", ".ckpt.h5"):
        d = same_files(os.path.join(ref_dir, name + suffix), os.path.join(got_dir, name + suffix))
        if d:
            return f"{name}{suffix}: {d}"
    return None


def temporaries(d):
    return sorted(glob.glob(os.path.join(d, "**", "*.tmp-*"), recursive=True))


def snapshot(d):
    return {p: open(p, "rb").read() for p in sorted(glob.glob(os.path.join(d, "*.h5")))}


# ---- the cases ---------------------------------------------------------------------------------

class Suite:
    def __init__(self, m, work, rng, long, tally):
        self.m, self.work, self.rng, self.long, self.t = m, work, rng, long, tally
        self.cache = os.path.join(work, "cache")

    def run_args(self, out, *extra):
        return ["run", SCENARIO, "--out", out, "--cache", self.cache, *extra]

    def reference(self):
        ref = os.path.join(self.work, "ref")
        t0 = time.time()
        o, rc, out = self.m.run(self.run_args(os.path.join(ref, "r.h5")))
        if o != "ok":
            raise SystemExit(f"fault_suite: the reference run failed:\n{out}")
        self.ref, self.ref_seconds = ref, time.time() - t0
        # a run stopped half-way (resume point for the corruption cases)
        half = os.path.join(self.work, "half")
        o, rc, out = self.m.run(self.run_args(os.path.join(half, "r.h5"), "--max-steps", "4"))
        if o != "ok":
            raise SystemExit(f"fault_suite: the half run failed:\n{out}")
        self.half = half

    def reference_on(self, ranks):
        """The intact run on this many ranks (the communication volume a2a_bytes depends on it)."""
        if ranks == 1:
            return self.ref
        d = os.path.join(self.work, f"ref{ranks}")
        if not os.path.exists(os.path.join(d, "r.h5")):
            o, rc, out = self.m.run(self.run_args(os.path.join(d, "r.h5")), ranks=ranks)
            if o != "ok":
                raise SystemExit(f"fault_suite: the {ranks}-rank reference run failed:\n{out}")
        return d

    def resume_to_end(self, d, group, name, allow_force=True, ranks=1):
        """--resume until complete (with --force when the checkpoint is missing). Returns an
        outcome for the case, or None when the run completed."""
        for _ in range(3):
            o, rc, out = self.m.run(self.run_args(os.path.join(d, "r.h5"), "--resume"), ranks=ranks)
            if o == "ok":
                return None
            if o == "clear" and allow_force and "is missing" in out:
                o2, rc2, out2 = self.m.run(self.run_args(os.path.join(d, "r.h5"), "--resume", "--force"), ranks=ranks)
                if o2 == "ok":
                    return None
                return o2, error_line(out2)
            return o, error_line(out)
        return "crash", "resume did not finish"

    def kill(self, n):
        for i in range(n):
            d = os.path.join(self.work, f"kill{i}")
            at = self.rng.uniform(0.02, max(0.1, self.ref_seconds * 1.2))
            p = subprocess.Popen(self.m.cmd(self.run_args(os.path.join(d, "r.h5"))), stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, env=dict(os.environ, **MPI_ENV), start_new_session=True)
            time.sleep(at)
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
            name = f"kill -9 at {at:.2f} s"
            bad = self.resume_to_end(d, "kill", name)
            if bad:
                self.t.add("kill", name, *bad)
                continue
            diff = same_run(self.ref, d)
            left = temporaries(d)
            if diff:
                self.t.add("kill", name, "silent", diff)
            elif left:
                self.t.add("kill", name, "silent", f"temporaries left: {left}")
            else:
                self.t.add("kill", name, "ok")

    def sweep(self, n):
        if not shutil.which(self.m.mpiexec):
            print("  [sweep] skipped: no MPI launcher")
            return
        sargs = lambda out, *x: ["sweep", GRID, "--out", out, "--cache", self.cache, "--quiet", *x]
        ref = os.path.join(self.work, "sweep-ref")
        o, rc, out = self.m.run(sargs(ref))
        if o != "ok":
            raise SystemExit(f"fault_suite: the reference sweep failed:\n{out}")
        # the same sweep on 2 ranks, uninterrupted: its length sets the kill points
        plain = os.path.join(self.work, "sweep-2ranks")
        t0 = time.time()
        o, rc, out = self.m.run(sargs(plain), ranks=2)
        seconds = time.time() - t0
        diffs = [x for f in sorted(glob.glob(os.path.join(ref, "*.h5")))
                 for x in [same_files(f, os.path.join(plain, os.path.basename(f)))] if x]
        self.t.add("sweep", "2 ranks, uninterrupted", "silent" if o == "ok" and diffs else o,
                   diffs[0] if diffs else error_line(out))
        for i in range(n):
            d = os.path.join(self.work, f"sweep{i}")
            env = dict(os.environ, **MPI_ENV)
            t0 = time.time()
            p = subprocess.Popen(self.m.cmd(sargs(d), ranks=2), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 env=env, start_new_session=True)
            ranks = []
            while len(ranks) < 2 and p.poll() is None and time.time() - t0 < 20:
                ranks = [pid for pid in children(p.pid) if proc_name(pid) == "moerl"]
                time.sleep(0.01)
            started = time.time() - t0
            at = self.rng.uniform(0.0, max(0.1, (seconds - started) * 0.9))
            time.sleep(at)
            victims = [pid for pid in children(p.pid) if proc_name(pid) == "moerl"]
            victim = self.rng.choice(victims) if victims else None
            if victim:
                try:
                    os.kill(victim, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
                self.t.add("sweep", f"kill -9 of a rank at {at:.2f} s", "hang", "the job did not end")
                continue
            name = f"kill -9 of {'a rank' if victim else 'nothing (finished)'} at {at:.2f} s"
            o, rc, out = self.m.run(sargs(d, "--resume"), ranks=2)
            if o != "ok":
                self.t.add("sweep", name, o, error_line(out))
                continue
            diffs = [f"{os.path.basename(f)}: {x}" for f in sorted(glob.glob(os.path.join(ref, "*.h5")))
                     for x in [same_files(f, os.path.join(d, os.path.basename(f)))] if x]
            rows = json.load(open(os.path.join(d, "index.json")))["runs"]
            unfinished = [r["id"] for r in rows if r["status"] != "complete"]
            no_time = [r["id"] for r in rows
                       if not (isinstance(r.get("seconds"), (int, float)) and math.isfinite(r["seconds"]))]
            if diffs:
                self.t.add("sweep", name, "silent", diffs[0])
            elif unfinished or no_time:
                self.t.add("sweep", name, "silent", f"index: not complete {unfinished}, no seconds {no_time}")
            elif temporaries(d):
                self.t.add("sweep", name, "silent", f"temporaries left: {temporaries(d)}")
            else:
                self.t.add("sweep", name, "ok")

    def disk(self, levels):
        full = os.path.join(self.work, "full")
        os.makedirs(full)
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", full],
                                 capture_output=True).returncode == 0 if os.geteuid() == 0 else False
        how = "tmpfs" if mounted else "ulimit -f"
        try:
            sizes = [os.path.getsize(os.path.join(self.ref, f)) for f in ("r.h5", "r.ckpt.h5")]
            for i, frac in enumerate(levels):
                for ranks in ((1, 2) if i % 3 == 0 and shutil.which(self.m.mpiexec) else (1,)):
                    self.one_disk(full, mounted, int(frac * max(sizes)), ranks, how)
            if mounted:  # the file-size limit too (EFBIG), on an ordinary directory
                limited = os.path.join(self.work, "limited")
                os.makedirs(limited)
                for frac in (0.3, 1.2):
                    self.one_disk(limited, False, int(frac * max(sizes)), 1, "ulimit -f")
            # sft into a full disk
            self.fill(full, mounted, 20_000)
            kb = None if mounted else 20
            o, rc, out = self.m.run(["sft", SCENARIO, "--out", os.path.join(full, "base.h5")], ulimit_kb=kb)
            ok = o == "clear" and ("No space" in out or "too large" in out) and not temporaries(full)
            self.t.add("disk", f"sft, {how} with 20 KB left", o if o != "clear" or ok else "silent",
                       error_line(out))
        finally:
            if mounted:
                subprocess.run(["umount", full])

    def fill(self, full, mounted, free):
        for f in glob.glob(os.path.join(full, "*")):
            os.remove(f)
        if not mounted:
            return
        st = os.statvfs(full)
        avail = st.f_bavail * st.f_frsize
        with open(os.path.join(full, "filler"), "wb") as f:
            f.write(b"\0" * max(0, avail - free))

    def one_disk(self, full, mounted, free, ranks, how):
        self.fill(full, mounted, free)
        out_h5 = os.path.join(full, "r.h5")
        kb = None if mounted else max(1, free // 1024)
        name = f"run on {ranks} rank{'s' if ranks > 1 else ''}, {how} with {free // 1024} KB left"
        o, rc, out = self.m.run(self.run_args(out_h5), ranks=ranks, ulimit_kb=kb)
        if o in ("crash", "hang"):
            self.t.add("disk", name, o, error_line(out))
            return
        if o == "clear" and not ("No space left" in out or "File too large" in out):
            self.t.add("disk", name, "crash", "error does not name the errno: " + error_line(out))
            return
        if temporaries(full):
            self.t.add("disk", name, "silent", f"temporaries left: {temporaries(full)}")
            return
        # what is on disk is readable, and a failed run is not marked complete
        for f in ("r.h5", "r.ckpt.h5"):
            p = os.path.join(full, f)
            if os.path.exists(p):
                try:
                    with h5py.File(p, "r") as h:
                        if f == "r.h5" and o != "ok" and h.attrs.get("status") in ("complete", b"complete"):
                            self.t.add("disk", name, "silent", "a failed run is marked complete")
                            return
                except Exception as e:  # noqa: BLE001
                    self.t.add("disk", name, "silent", f"{f} unreadable after the failure: {e}")
                    return
        # space again: resume to the end, same numbers as the intact run
        d = os.path.join(self.work, f"disk-{len(self.t.cases)}")
        os.makedirs(d)
        for f in ("r.h5", "r.ckpt.h5"):
            if os.path.exists(os.path.join(full, f)):
                shutil.copy(os.path.join(full, f), d)
        ref = self.reference_on(ranks)
        if o == "ok":
            diff = same_run(ref, d)
            self.t.add("disk", name, "silent" if diff else "ok", diff or "fitted")
            return
        bad = self.resume_to_end(d, "disk", name, ranks=ranks) if os.path.exists(os.path.join(d, "r.h5")) else None
        if not os.path.exists(os.path.join(d, "r.h5")):
            o2, rc2, out2 = self.m.run(self.run_args(os.path.join(d, "r.h5")), ranks=ranks)
            bad = None if o2 == "ok" else (o2, error_line(out2))
        if bad:
            self.t.add("disk", name, bad[0], "resume afterwards: " + bad[1])
            return
        diff = same_run(ref, d)
        self.t.add("disk", name, "silent" if diff else "clear", diff or error_line(out))

    def damage(self, path, kind):
        data = bytearray(open(path, "rb").read())
        if kind == "flip":
            off = self.rng.randrange(min(len(data), 4096)) if self.rng.random() < 0.4 else self.rng.randrange(len(data))
            bit = self.rng.randrange(8)
            data[off] ^= 1 << bit
            what = f"bit {bit} of byte {off}"
        else:
            off = self.rng.randrange(len(data))
            what = f"cut at {off} of {len(data)}"
            del data[off:]
        open(path, "wb").write(bytes(data))
        return what

    def corrupt(self, n):
        for target in ("r.ckpt.h5", "r.h5"):
            for kind in ("flip", "cut"):
                count = n if kind == "flip" else max(2, n // 2)
                if target == "r.h5":
                    count = max(2, count // 2)
                for i in range(count):
                    d = os.path.join(self.work, f"corrupt-{target}-{kind}{i}")
                    shutil.copytree(self.half, d)
                    what = self.damage(os.path.join(d, target), kind)
                    name = f"{target}: {what}"
                    o, rc, out = self.m.run(self.run_args(os.path.join(d, "r.h5"), "--resume"))
                    if o == "ok":
                        diff = same_run(self.ref, d)
                        self.t.add("corrupt", name, "silent" if diff else "ok", diff or "harmless bytes")
                    elif o == "clear" and target.rstrip(".h5") and os.path.join(d, target) not in out:
                        self.t.add("corrupt", name, "crash", "error does not name the file: " + error_line(out))
                    else:
                        self.t.add("corrupt", name, o, error_line(out))
        # a damaged base checkpoint
        bases = glob.glob(os.path.join(self.cache, "base-*.h5"))
        for i in range(max(2, n // 3)):
            d = os.path.join(self.work, f"corrupt-base{i}")
            os.makedirs(d)
            base = os.path.join(d, "base.h5")
            shutil.copy(bases[0], base)
            kind = "flip" if i % 3 else "cut"
            what = self.damage(base, kind)
            o, rc, out = self.m.run(self.run_args(os.path.join(d, "r.h5"), "--base", base))
            name = f"base: {what}"
            if o == "ok":
                # the intact base gives the reference run
                diff = same_files(os.path.join(self.ref, "r.h5"), os.path.join(d, "r.h5"))
                diff = diff if diff and "base_checkpoint" not in diff else None
                self.t.add("corrupt", name, "silent" if diff else "ok", diff or "harmless bytes")
            else:
                self.t.add("corrupt", name, o, error_line(out))

    def scenario(self):
        for kv in ("rl.algorithm=r3", "run.seed=9", "optim.lr=0.5", "model.top_k=1", "rl.group_size=2",
                   "task.length=3"):
            d = os.path.join(self.work, "scen-" + kv.replace("=", "_"))
            shutil.copytree(self.half, d)
            before = snapshot(d)
            o, rc, out = self.m.run(self.run_args(os.path.join(d, "r.h5"), "--resume", "--set", kv))
            key = kv.split("=")[0]
            name = f"--resume --set {kv}"
            if o == "ok":
                self.t.add("scenario", name, "silent", "a changed scenario was resumed")
            elif o == "clear" and (key not in error_line(out) or snapshot(d) != before):
                self.t.add("scenario", name, "silent", "refused, but " + (
                    "without naming the key" if key not in error_line(out) else "the files changed"))
            else:
                self.t.add("scenario", name, o, error_line(out))

    def base(self):
        for kv in ("model.d_ff=8", "model.top_k=1", "model.n_heads=4", "model.vocab_size=16",
                   "model.expert_bias=true", "model.n_experts=0"):
            d = os.path.join(self.work, "base-" + kv.replace("=", "_").replace(".", "_"))
            os.makedirs(d)
            foreign = os.path.join(d, "foreign.h5")
            o, rc, out = self.m.run(["sft", SCENARIO, "--steps", "0", "--out", foreign, "--set", kv])
            if o != "ok":
                raise SystemExit(f"fault_suite: cannot make the foreign base ({kv}):\n{out}")
            o, rc, out = self.m.run(self.run_args(os.path.join(d, "r.h5"), "--base", foreign))
            key = kv.split("=")[0]
            name = f"base made with {kv}"
            if o == "ok":
                self.t.add("base", name, "silent", "trained the wrong model")
            elif o == "clear" and (key not in error_line(out) or os.path.exists(os.path.join(d, "r.h5"))):
                self.t.add("base", name, "silent", "refused, but " + (
                    "without naming the field" if key not in error_line(out) else "a results file was written"))
            else:
                self.t.add("base", name, o, error_line(out))

    def rerun(self):
        d = os.path.join(self.work, "rerun")
        shutil.copytree(self.ref, d)
        before = snapshot(d)
        for extra in ([], ["--max-steps", "1"]):
            o, rc, out = self.m.run(self.run_args(os.path.join(d, "r.h5"), *extra))
            name = "run over finished results " + " ".join(extra)
            if o == "ok" or snapshot(d) != before:
                self.t.add("rerun", name.strip(), "silent", "the finished run was overwritten")
            else:
                self.t.add("rerun", name.strip(), o, error_line(out))


def children(pid):
    out = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            fields = open(stat).read().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                out.append(int(stat.split("/")[2]))
        except (OSError, ValueError, IndexError):
            pass
    return out


def proc_name(pid):
    """The program's file name (moerl re-executes itself through /proc/self/exe, so comm says "exe")."""
    try:
        return os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        return ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("moerl")
    ap.add_argument("--long", action="store_true", help="many more cases of each kind (ctest label long)")
    ap.add_argument("--seed", type=int, default=None, help="seed of the random fault points (default: time)")
    ap.add_argument("--keep", help="work in this directory and keep it")
    ap.add_argument("--only", help="comma-separated groups: kill,sweep,disk,corrupt,scenario,base,rerun")
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else int(time.time()) % 100000
    rng = random.Random(seed)
    work = a.keep or tempfile.mkdtemp(prefix="moerl-faults-")
    os.makedirs(work, exist_ok=True)
    m = Moerl(os.path.abspath(a.moerl), os.environ.get("MPIEXEC", "mpirun"))
    t = Tally()
    s = Suite(m, work, rng, a.long, t)
    only = set(a.only.split(",")) if a.only else None
    want = lambda g: only is None or g in only
    print(f"fault suite: seed {seed} ({'long' if a.long else 'default'}), work in {work}", flush=True)
    t0 = time.time()
    try:
        s.reference()
        if want("kill"):
            s.kill(40 if a.long else 5)
        if want("sweep"):
            s.sweep(12 if a.long else 2)
        if want("disk"):
            # free space as a share of the larger file (a rewrite needs the old and the new copy)
            s.disk([0.05, 0.3, 0.6, 0.9, 1.2, 1.6, 2.0, 2.5, 3.2] * 3 if a.long else [0.05, 0.6, 1.2, 2.0, 3.2])
        if want("corrupt"):
            s.corrupt(120 if a.long else 12)
        if want("scenario"):
            s.scenario()
        if want("base"):
            s.base()
        if want("rerun"):
            s.rerun()
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    bad = t.count("crash") + t.count("hang") + t.count("silent")
    print(f"fault suite: {len(t.cases)} cases tried, {t.count('clear')} clear errors, {t.count('crash')} crashes, "
          f"{t.count('hang')} hangs, {t.count('silent')} silent wrong results ({t.count('ok')} ok; seed {seed}, "
          f"{time.time() - t0:.0f} s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
