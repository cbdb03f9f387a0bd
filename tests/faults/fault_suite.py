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
  identity  results and checkpoint that are not one run (an older format, another seed's or
            scenario's checkpoint, a later step, another rank count): --resume refuses naming the
            field, before any step, files untouched
  writers   two runs (or two sft) started together on one output: exactly one writes it; a stale
            lock is taken over, a held one refuses; two runs training one cached base agree
  input     paths of the wrong kind (a directory, /dev/zero, a FIFO), a scenario over the size
            limit, an output that is an input, empty lists, invisible characters, numbers out of
            range, `ulimit -f` in a user's shell: one clear error naming what is wrong; values
            outside a key's range (rl.adv_eps = 0), shown as given and shortened, a --set key
            twice, a grid whose base is a grid
  signal    SIGTERM, SIGINT, SIGUSR1 while base policies train (run, sweep, task, sft; 1 and 2
            ranks) and as main starts: exit 75, a message naming what was written, nothing half
  experiment  array tasks with an edited grid or another --set, --resume and --index-only with
            another scenario: refused naming the key, the directory unchanged (1 and 2 ranks);
            --index-only of an empty or unrelated directory writes nothing; --extend is recorded
  report    an array in progress (pending is not failed), a damaged file in a sweep directory
            (skipped and listed), DIR DIR/ (each run once), --out onto a file (one line)
  round4, round4b  issue 51: --out of sft, score, audit; SIGHUP, SIGPIPE; lengths near INT_MAX;
            run files checked against their plan rows (swapped, copied in, not in the plan) by
            report, analysis, inspect, --index-only, --resume and --task; infinite values counted;
            --cache a file; --extend renaming runs; a run file without status; a symlinked --out;
            grid.ini missing or unreadable; a report of a read-only directory
  round5    issue 63: bench's empty --profiles, --gemm-seconds nan/inf, a damaged --peer-json and
            its stop signals (the GEMM ceiling included); stdout on a full device (/dev/full);
            --dry-run of what every run would fail on; empty option values; Ctrl-C in `moerl report`;
            learn-league.sh and learn-more.sh forwarding stop signals; analysis.league and probe_rule
            refusing rather than guessing, every output whole, the kept --runs file untouched

Each case ends as one of: ok (the promised result), clear error (exit 1 or 2 and one line
"moerl: error: ..." that says what is wrong, in visible characters), crash (a signal, a
traceback, MPI_Abort noise, an error without the one-line message, or one that does not say what
is wrong), hang (past its timeout), silent wrong result (exit 0 with data that differ from
the intact run's, or a refusal that was expected but did not come). The closing line counts them;
the suite fails unless crashes, hangs and silent wrong results are all zero.

Usage: fault_suite.py MOERL_BINARY [--long] [--seed N] [--keep DIR] [--only CASE,...]
Needs numpy and h5py (exit 77, ctest's "skipped", without them). MPIEXEC: the launcher (default
mpirun); the sweep and 2-rank cases are skipped when it is missing.
"""
import argparse
import csv
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
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "sweep"))
from same_runs import contents  # noqa: E402  (a run file's datasets and root attributes, times aside)
SCENARIO = os.path.join(HERE, "tiny.ini")
GRID = os.path.join(HERE, "tiny-grid.ini")
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1",
           # PMIx's shared-memory store writes files: under `ulimit -f` MPI_Init would fail first
           "PMIX_MCA_gds": "hash"}
MEMORY_KB = 8 << 20  # 8 GiB of address space per process (the tiny runs need a few hundred MiB)
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

    def run(self, args, ranks=1, timeout=120, ulimit_kb=None, cwd=None, user_env=False):
        """(outcome, rc, output): outcome ok | clear | crash | hang. user_env: without the suite's
        PMIX_MCA_gds=hash, as a user's shell runs moerl (one rank only: mpirun itself needs it)."""
        cmd = self.cmd(args, ranks)
        env = dict(os.environ, **MPI_ENV)
        if user_env:
            env.pop("PMIX_MCA_gds", None)
        # a bound on memory, so that a binary that reads without end fails instead of filling the machine
        limits = f"ulimit -v {MEMORY_KB}; " + (f"ulimit -f {ulimit_kb}; " if ulimit_kb is not None else "")
        cmd = ["bash", "-c", limits + "exec \"$@\"", "moerl"] + cmd
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd,
                               start_new_session=True, errors="replace")
        except subprocess.TimeoutExpired as e:
            return "hang", None, (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else ""
        out = p.stderr + "\n" + p.stdout  # the error line first; progress lines may lack a newline
        return classify(p.returncode, p.stderr, out), p.returncode, out


# Characters a terminal does not show: an error line holding one is not clear (the user cannot see
# what is wrong). moerl writes them escaped (\xNN, <U+FEFF>).
INVISIBLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\xa0\xad\u034f\u061c\u115f\u1160\u180e\u2000-\u200f"
                       "\u2028-\u202f\u205f-\u206f\u3000\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb\ufffd]")


def classify(rc, err, out):
    if rc < 0 or rc >= 128 or NOISE.search(out):
        return "crash"
    if rc == 0:
        return "ok"
    lines = [l for l in err.splitlines() if l.startswith("moerl: error:")]
    if rc in (1, 2) and len(lines) >= 1 and len(set(lines)) == 1 and not INVISIBLE.search(lines[0]):
        return "clear"
    return "crash"  # an error without its one clear, visible line


def error_line(out):
    for l in out.splitlines():
        if l.startswith("moerl: error:"):
            return l[len("moerl: error: "):]
    return out.strip().splitlines()[-1] if out.strip() else ""


# ---- comparing files ---------------------------------------------------------------------------

def same_files(a, b, ignore=()):
    """None when every dataset (and root attribute but those named in `ignore`) is bit-identical,
    else what differs."""
    try:
        da, db = contents(a, ignore), contents(b, ignore)
    except Exception as e:  # noqa: BLE001 — any unreadable file is a difference
        return f"unreadable: {e}"
    if set(da) != set(db):
        return f"different objects: {sorted(set(da) ^ set(db))[:4]}"
    for k in da:
        if da[k] != db[k]:
            return f"{k} differs"
    return None


def same_run(ref_dir, got_dir, name="r", ignore=()):
    for suffix in (".h5", ".ckpt.h5"):
        d = same_files(os.path.join(ref_dir, name + suffix), os.path.join(got_dir, name + suffix), ignore)
        if d:
            return f"{name}{suffix}: {d}"
    return None


def temporaries(d):
    return sorted(glob.glob(os.path.join(d, "**", "*.tmp-*"), recursive=True))


def snapshot(d):
    """The bytes of every regular file in d (not below it; a FIFO is not read)."""
    return {p: open(p, "rb").read() for p in sorted(glob.glob(os.path.join(d, "*"))) if os.path.isfile(p)}


# ---- the cases ---------------------------------------------------------------------------------

class Suite:
    def __init__(self, m, work, rng, long, tally):
        self.m, self.work, self.rng, self.long, self.t = m, work, rng, long, tally
        self.cache = os.path.join(work, "cache")

    def run_args(self, out, *extra, scen_arg=SCENARIO):
        return ["run", scen_arg, "--out", out, "--cache", self.cache, *extra]

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

    # ---- the run's files are one thing -------------------------------------------------------

    def half_on(self, name, *extra, ranks=1):
        """A run stopped half-way (4 of 8 steps) with extra arguments, in its own directory."""
        d = os.path.join(self.work, name)
        if not os.path.exists(os.path.join(d, "r.h5")):
            o, rc, out = self.m.run(self.run_args(os.path.join(d, "r.h5"), "--max-steps", "4", *extra), ranks=ranks)
            if o != "ok":
                raise SystemExit(f"fault_suite: the half run {name} failed:\n{out}")
        return d

    def refused(self, group, name, d, args, expect, ranks=1, timeout=120):
        """A case that must be refused: a clear error holding every string of `expect`, the
        directory's files byte-identical afterwards."""
        before = snapshot(d)
        o, rc, out = self.m.run(args, ranks=ranks, timeout=timeout)
        if o == "ok":
            self.t.add(group, name, "silent", "accepted")
        elif o == "clear" and snapshot(d) != before:
            self.t.add(group, name, "silent", "refused, but the files changed: " + error_line(out))
        elif o == "clear" and not all(e in error_line(out) for e in expect):
            self.t.add(group, name, "crash", f"unclear (lacks {expect}): " + error_line(out))
        else:
            self.t.add(group, name, o, error_line(out))

    def identity(self):
        """Results and checkpoint recombined from other runs, other formats, other rank counts:
        --resume refuses naming the field, files untouched."""
        # the format before results recorded their scenario: a results file without `scenario`
        # (and without the integrity header, which came with it), then --resume relabelling it
        for kv in (["--set", "rl.algorithm=r3"], []):
            d = os.path.join(self.work, f"old-format{len(kv)}")
            shutil.copytree(self.half, d)
            rewrite(os.path.join(d, "r.h5"), drop=("scenario", "scenario_hash", "ranks"), version=1)
            self.refused("identity", "results without a scenario attribute, --resume " + " ".join(kv), d,
                         self.run_args(os.path.join(d, "r.h5"), "--resume", *kv), ["scenario"])
        d = os.path.join(self.work, "version1")
        shutil.copytree(self.half, d)
        rewrite(os.path.join(d, "r.h5"), drop=("ranks",), version=1)
        self.refused("identity", "results format version 1, --resume", d,
                     self.run_args(os.path.join(d, "r.h5"), "--resume"), ["version 1"])
        d = os.path.join(self.work, "old-ckpt")
        shutil.copytree(self.half, d)
        rewrite(os.path.join(d, "r.ckpt.h5"), drop_state=("ranks", "scenario_hash"))
        self.refused("identity", "checkpoint without its run identity, --resume", d,
                     self.run_args(os.path.join(d, "r.h5"), "--resume"), ["r.ckpt.h5", "state/"])
        # another run's checkpoint beside these results
        others = [("run.seed=9", "seed"), ("optim.lr=0.5", "scenario_hash")]
        if self.long:
            others += [("run.seed=4", "seed"), ("rl.group_size=2", "scenario_hash")]
        for kv, field in others:
            other = self.half_on("other-" + kv.replace("=", "_"), "--set", kv)
            d = os.path.join(self.work, "foreign-ckpt-" + kv.replace("=", "_"))
            shutil.copytree(self.half, d)
            shutil.copy(os.path.join(other, "r.ckpt.h5"), os.path.join(d, "r.ckpt.h5"))
            self.refused("identity", f"checkpoint of the run with {kv} beside the results, --resume", d,
                         self.run_args(os.path.join(d, "r.h5"), "--resume"), [field])
        # the finished run's checkpoint (step 8) beside the half run's results (4 steps)
        d = os.path.join(self.work, "later-ckpt")
        shutil.copytree(self.half, d)
        shutil.copy(os.path.join(self.ref, "r.ckpt.h5"), os.path.join(d, "r.ckpt.h5"))
        self.refused("identity", "checkpoint of step 8 beside results of 4 steps, --resume", d,
                     self.run_args(os.path.join(d, "r.h5"), "--resume"), ["step = 8"])
        # another rank layout: found before any step, no MPI_Abort
        if shutil.which(self.m.mpiexec):
            d = os.path.join(self.work, "ranks-1to2")
            shutil.copytree(self.half, d)
            self.refused("identity", "--resume on 2 ranks of a 1-rank run", d,
                         self.run_args(os.path.join(d, "r.h5"), "--resume"), ["ranks = 1"], ranks=2)
            two = self.half_on("half2", ranks=2)
            d = os.path.join(self.work, "ranks-2to1")
            shutil.copytree(two, d)
            self.refused("identity", "--resume on 1 rank of a 2-rank run", d,
                         self.run_args(os.path.join(d, "r.h5"), "--resume"), ["ranks = 2"])

    # ---- one writer per output ---------------------------------------------------------------

    def writers(self, n):
        """Two runs started together on one --out (other seeds): exactly one writes it, the other
        is refused; a lock left by a killed process does not block; a held lock does."""
        seeds = ("3", "7")  # 3: the reference's
        refs = {"3": self.ref}
        for i in range(n):
            d = os.path.join(self.work, f"race{i}")
            out = os.path.join(d, "r.h5")
            env = dict(os.environ, **MPI_ENV)
            ps = [subprocess.Popen(self.m.cmd(self.run_args(out, "--set", f"run.seed={sd}")), stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, env=env, start_new_session=True) for sd in seeds]
            res = []
            for p in ps:
                try:
                    o, e = p.communicate(timeout=120)
                    res.append((classify(p.returncode, e, e + o), p.returncode, e))
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.communicate()
                    res.append(("hang", None, ""))
            name = f"two runs on one --out, started together ({i + 1})"
            outcomes = [r[0] for r in res]
            if "hang" in outcomes or "crash" in outcomes:
                bad = "hang" if "hang" in outcomes else "crash"
                self.t.add("writers", name, bad, error_line(next(r[2] for r in res if r[0] == bad)))
                continue
            if outcomes.count("ok") != 1:
                self.t.add("writers", name, "silent" if outcomes.count("ok") == 2 else "crash",
                           "both exited 0: one run was lost" if outcomes.count("ok") == 2 else "neither ran")
                continue
            winner = seeds[outcomes.index("ok")]
            if winner not in refs:
                refs[winner] = os.path.dirname(self.reference_file(f"ref-seed{winner}", "--set", f"run.seed={winner}"))
            diff = same_run(refs[winner], d)
            left = glob.glob(os.path.join(d, "*.lock"))
            if diff:
                self.t.add("writers", name, "silent", diff)
            elif left:
                self.t.add("writers", name, "silent", f"lock file left: {left}")
            else:
                self.t.add("writers", name, "clear", error_line(res[outcomes.index("clear")][2]))
        # a lock file left by a killed process: taken over, the run is the reference
        d = os.path.join(self.work, "stale-lock")
        os.makedirs(d)
        with open(os.path.join(d, "r.h5.lock"), "w") as f:
            f.write("pid 999999 on host elsewhere since 2000-01-01 00:00:00\n")
        o, rc, out = self.m.run(self.run_args(os.path.join(d, "r.h5")))
        diff = same_run(self.ref, d) if o == "ok" else None
        self.t.add("writers", "a lock file left by a killed writer", "silent" if diff else o, diff or error_line(out))
        # a lock held by a live process: refused, nothing written
        import fcntl
        d = os.path.join(self.work, "held-lock")
        os.makedirs(d)
        with open(os.path.join(d, "r.h5.lock"), "w") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            f.write(f"pid {os.getpid()} on host here since now\n")
            f.flush()
            self.refused("writers", "run while another process holds the output's lock", d,
                         self.run_args(os.path.join(d, "r.h5")), ["being written"])
        # sft on one --out twice at once, and runs sharing a cache that has no base yet
        d = os.path.join(self.work, "sft-race")
        os.makedirs(d)
        ps = [subprocess.Popen(self.m.cmd(["sft", SCENARIO, "--out", os.path.join(d, "base.h5"), "--set", f"run.seed={sd}"]),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               env=dict(os.environ, **MPI_ENV), start_new_session=True) for sd in seeds]
        res = [(p.communicate(timeout=120)[1], p.returncode) for p in ps]
        outs = [classify(rc, e, e) for e, rc in res]
        ok = all(x in ("ok", "clear") for x in outs) and "ok" in outs and not glob.glob(os.path.join(d, "*.lock"))
        self.t.add("writers", "two sft on one --out, started together", ("clear" if "clear" in outs else "ok") if ok else
                   ("crash" if "crash" in outs else "silent"), " / ".join(error_line(e) for e, rc in res if rc))
        d = os.path.join(self.work, "cache-race")
        cache = os.path.join(d, "cache")
        ps = [subprocess.Popen(self.m.cmd(["run", SCENARIO, "--out", os.path.join(d, f"r{i}", "r.h5"), "--cache", cache]),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               env=dict(os.environ, **MPI_ENV), start_new_session=True) for i in range(2)]
        res = [(p.communicate(timeout=120)[1], p.returncode) for p in ps]
        # the same base, so the reference run (whose base sits in another cache directory)
        diffs = [x for i in range(2) for x in [same_run(self.ref, os.path.join(d, f"r{i}"), ignore=("base_checkpoint",))] if x]
        outs = [classify(rc, e, e) for e, rc in res]
        self.t.add("writers", "two runs training one new cached base together",
                   "silent" if diffs and outs == ["ok", "ok"] else outs[0] if outs[0] != "ok" else outs[1],
                   diffs[0] if diffs else " / ".join(error_line(e) for e, rc in res if rc))

    def sweep_race(self):
        """Two sweeps started together on one directory: one runs it, the other is refused."""
        d = os.path.join(self.work, "sweep-race")
        sargs = ["sweep", GRID, "--out", d, "--cache", self.cache, "--quiet"]
        ps = [subprocess.Popen(self.m.cmd(sargs), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               env=dict(os.environ, **MPI_ENV), start_new_session=True) for _ in range(2)]
        res = [(p.communicate(timeout=300)[1], p.returncode) for p in ps]
        outs = sorted(classify(rc, e, e) for e, rc in res)
        name = "two sweeps on one directory, started together"
        if outs != ["clear", "ok"]:
            self.t.add("writers", name, "silent" if outs == ["ok", "ok"] else outs[0],
                       "both exited 0" if outs == ["ok", "ok"] else " / ".join(error_line(e) for e, rc in res if rc))
            return
        rows = json.load(open(os.path.join(d, "index.json")))["runs"]
        bad = [r["id"] for r in rows if r["status"] != "complete"]
        left = glob.glob(os.path.join(d, "*.lock"))
        self.t.add("writers", name, "silent" if bad or left else "clear",
                   f"not complete {bad}, locks left {left}" if bad or left else
                   error_line(next(e for e, rc in res if rc)))

    def reference_file(self, name, *extra):
        d = os.path.join(self.work, name)
        if not os.path.exists(os.path.join(d, "r.h5")):
            o, rc, out = self.m.run(self.run_args(os.path.join(d, "r.h5"), *extra))
            if o != "ok":
                raise SystemExit(f"fault_suite: the reference {name} failed:\n{out}")
        return os.path.join(d, "r.h5")

    # ---- hostile input -----------------------------------------------------------------------

    def hostile(self):
        """Paths of the wrong kind, inputs as outputs, empty lists, invisible characters, numbers
        out of range, a low file-size limit in a user's shell: one clear error each (or, for a
        byte-order mark, the run itself), nothing written where nothing should be."""
        d = os.path.join(self.work, "hostile")
        os.makedirs(d)
        scen = os.path.join(d, "copy.ini")
        shutil.copy(SCENARIO, scen)
        out = os.path.join(d, "out", "r.h5")
        fifo = os.path.join(d, "fifo.ini")
        os.mkfifo(fifo)
        big = os.path.join(d, "big.ini")
        with open(big, "w") as f:
            f.write(open(SCENARIO).read() + ("# padding\n" * 220_000))
        os.makedirs(os.path.join(d, "out"))
        os.makedirs(os.path.join(d, "empty"))
        cases = [
            ("run DIRECTORY", self.run_args(out, scen_arg=d), ["directory"]),
            ("run /dev/zero", self.run_args(out, scen_arg="/dev/zero"), ["character device"]),
            ("run FIFO", self.run_args(out, scen_arg=fifo), ["FIFO"]),
            ("run of a 2 MiB scenario", self.run_args(out, scen_arg=big), ["larger than"]),
            ("run --out EXISTING_DIRECTORY", self.run_args(os.path.join(d, "out")), ["directory"]),
            ("run --out /dev/null", self.run_args("/dev/null"), ["character device"]),
            ("run --base DIRECTORY", self.run_args(out, "--base", d), ["directory"]),
            ("run --base /dev/zero", self.run_args(out, "--base", "/dev/zero"), ["character device"]),
            ("run S --out S --force", self.run_args(scen, "--force", scen_arg=scen), ["scenario file"]),
            ("sft S --out S", ["sft", scen, "--out", scen], ["scenario file"]),
            ("sft --out DIRECTORY", ["sft", scen, "--out", d], ["directory"]),
            ("inspect /dev/zero", ["inspect", "/dev/zero"], ["character device"]),
            ("sweep --seeds ''", ["sweep", GRID, "--out", os.path.join(d, "sw"), "--seeds", "", "--dry-run"], ["--seeds"]),
            ("sweep --variants ''", ["sweep", GRID, "--out", os.path.join(d, "sw"), "--variants", "", "--dry-run"],
             ["--variants"]),
            ("--set optim.lr=1e39", self.run_args(out, "--set", "optim.lr=1e39"), ["optim.lr", "range"]),
            ("--set optim.lr=1e-50", self.run_args(out, "--set", "optim.lr=1e-50"), ["optim.lr", "range"]),
            ("report MISSING_DIRECTORY", ["report", os.path.join(d, "missing")], ["missing"]),
            ("report EMPTY_DIRECTORY", ["report", os.path.join(d, "empty")], ["empty"]),
        ]
        if self.long:
            cases += [
                ("--set optim.lr=1e309", self.run_args(out, "--set", "optim.lr=1e309"), ["optim.lr", "range"]),
                ("--set optim.lr=-1e39", self.run_args(out, "--set", "optim.lr=-1e39"), ["optim.lr", "range"]),
                ("--set run.seed=99999999999999999999", self.run_args(out, "--set", "run.seed=99999999999999999999"),
                 ["run.seed", "range"]),
                ("score --out CHECKPOINT", ["score", "--checkpoint", self.base_file(), "--tokens", self.base_file(),
                                            "--profile", "fp32-ref", "--out", self.base_file()], ["checkpoint"]),
                ("sweep GRID_DIRECTORY", ["sweep", d, "--out", os.path.join(d, "sw")], ["directory"]),
                ("sweep --seeds ','", ["sweep", GRID, "--out", os.path.join(d, "sw"), "--seeds", ",", "--dry-run"],
                 ["--seeds"]),
            ]
        for name, args, expect in cases:  # each from the same start: no output yet, the scenario intact
            shutil.rmtree(os.path.join(d, "out"))
            os.makedirs(os.path.join(d, "out"))
            shutil.copy(SCENARIO, scen)
            self.refused("input", name, d, args, expect, timeout=30)
        # invisible characters: shown escaped in the one error line
        text = open(SCENARIO).read()
        weird = [("a NUL byte in a value", text.replace("seed = 3", "seed = 3\0" + "1"), ["\\x00"]),
                 ("a byte-order mark before a line", text.replace("[model]", "\ufeff[model]"), ["<U+FEFF>"])]
        if self.long:
            weird += [("a zero-width space in a key", text.replace("top_k", "top\u200b_k"), ["<U+200B>"]),
                      ("an escape byte in a value", text.replace("name = sort", "name = so\x1b[2Jrt"), ["\\x1B"])]
        for name, body, expect in weird:
            p = os.path.join(d, "weird.ini")
            with open(p, "w", encoding="utf-8", newline="") as f:
                f.write(body)
            self.refused("input", name, d, self.run_args(out, scen_arg=p), expect, timeout=30)
        # a byte-order mark at the start (editors on Windows write one): the same run as without
        bom = os.path.join(self.work, "bom")
        os.makedirs(bom)
        p = os.path.join(bom, "tiny.ini")
        with open(p, "w", encoding="utf-8") as f:
            f.write("\ufeff" + text)
        o, rc, out2 = self.m.run(self.run_args(os.path.join(bom, "r.h5"), scen_arg=p))
        diff = same_files(os.path.join(self.ref, "r.h5"), os.path.join(bom, "r.h5")) if o == "ok" else None
        diff = diff if diff and "@scenario" not in diff else None  # the effective text names its source
        self.t.add("input", "a byte-order mark at the start of the scenario", "silent" if diff else o,
                   diff or error_line(out2))
        # a user's shell under a low file-size limit (no PMIX_MCA_gds=hash): the write's EFBIG, not
        # a crash inside MPI_Init
        for cmd, kb in ((["sft", SCENARIO, "--out", os.path.join(d, "lim", "b.h5")], 2000),
                        (self.run_args(os.path.join(d, "lim", "r.h5")), 2000), (self.run_args(os.path.join(d, "lim2", "r.h5")), 40)):
            os.makedirs(os.path.dirname(cmd[3]), exist_ok=True)  # cmd[3]: the --out of either command
            o, rc, out2 = self.m.run(cmd, ulimit_kb=kb, user_env=True)
            name = f"{cmd[0]} under ulimit -f {kb} in a user's shell"
            if o == "clear" and "File too large" not in out2:
                self.t.add("input", name, "crash", "error does not name the errno: " + error_line(out2))
            else:
                self.t.add("input", name, o, error_line(out2) or "fitted")

    # ---- round 3: signals in every phase, one experiment per sweep directory, reports ---------------

    def stop(self, group, name, args, ranks, sig, ready, expect, check=None, timeout=60, to_group=False):
        """A stop signal at a phase `ready` says the process has reached (polled): exit status 75
        with the strings of `expect` in the output, and check() (None, or what is wrong) holds.
        Exit 0 after a stop signal is a silent wrong result (a job script would take the work for
        done); a kill by the signal (143) or anything else a crash."""
        p = subprocess.Popen(self.m.cmd(args, ranks), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             errors="replace", env=dict(os.environ, **MPI_ENV), start_new_session=True)
        t0 = time.time()
        while p.poll() is None and not ready(p) and time.time() - t0 < 30:
            time.sleep(0.005)
        if p.poll() is None:
            try:  # to_group: as a terminal's Ctrl-C, to every process of the foreground group
                os.killpg(p.pid, sig) if to_group else os.kill(p.pid, sig)
            except ProcessLookupError:
                pass
        try:
            out = p.communicate(timeout=timeout)[0]
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            self.t.add(group, name, "hang", "did not end after the signal")
            return
        rc = p.returncode
        last = [l for l in out.splitlines() if l.strip()][-3:]
        if rc == 0:
            self.t.add(group, name, "silent", "exit 0 after " + signal.Signals(sig).name + ": " + " / ".join(last))
        elif rc != 75 or NOISE.search(out):
            self.t.add(group, name, "crash", f"exit {rc}: " + " / ".join(last))
        elif not all(e in out for e in expect):
            self.t.add(group, name, "crash", f"exit 75, but the output lacks {expect}: " + " / ".join(last))
        else:
            bad = check() if check else None
            self.t.add(group, name, "silent" if bad else "ok", bad or "")

    def signals(self):
        """SIGTERM, SIGINT and SIGUSR1 mean exit 75 in every phase: base-policy training (of a run,
        a sweep, a task, sft), the start of main, on 1 and 2 ranks; the message names only what
        was written, nothing is written half."""
        slow = ["--set", "sft.steps=40000"]  # a base policy that trains long enough to be signalled in
        locked = lambda cache: lambda p: bool(glob.glob(os.path.join(cache, "*.lock")))

        def nothing_half(cache, *files):
            def check():
                left = [f for f in files if os.path.exists(f)] + glob.glob(os.path.join(cache, "base-*.h5")) + \
                    temporaries(os.path.dirname(files[0]) if files else cache) + glob.glob(os.path.join(cache, "*.lock"))
                return f"written after the signal: {left}" if left else None
            return check

        def pending(d, n):
            def check():
                try:
                    rows = json.load(open(os.path.join(d, "index.json")))["runs"]
                except (OSError, ValueError) as e:
                    return f"no index: {e}"
                bad = [r["id"] + ":" + r["status"] for r in rows if r["status"] not in ("pending", "preempted")]
                return f"runs not pending: {bad}" if bad or len(rows) != n else None
            return check

        for ranks, sig in ((1, signal.SIGTERM), (2, signal.SIGUSR1)):
            if ranks > 1 and not shutil.which(self.m.mpiexec):
                continue
            tag = f"{ranks} rank{'s' if ranks > 1 else ''}"
            w = os.path.join(self.work, f"sig-sweep{ranks}")
            cache, d = os.path.join(w, "cache"), os.path.join(w, "sweep")
            self.stop("signal", f"sweep, {signal.Signals(sig).name} while it trains the base policies, {tag}",
                      ["sweep", GRID, "--out", d, "--cache", cache, "--seeds", "5,6", "--quiet", *slow], ranks, sig,
                      locked(cache), ["stopped by " + signal.Signals(sig).name, "before any run started"],
                      lambda: nothing_half(cache)() or pending(d, 4)())
            w = os.path.join(self.work, f"sig-run{ranks}")
            cache, out = os.path.join(w, "cache"), os.path.join(w, "r.h5")
            self.stop("signal", f"run, {signal.Signals(sig).name} while it trains its base policy, {tag}",
                      self.run_args(out, *slow)[:4] + ["--cache", cache, *slow], ranks, sig, locked(cache),
                      ["while training the base policy", "nothing written"], nothing_half(cache, out, os.path.splitext(out)[0] + ".ckpt.h5"))
        w = os.path.join(self.work, "sig-task")
        cache, d = os.path.join(w, "cache"), os.path.join(w, "sweep")
        self.stop("signal", "sweep --task, SIGINT while it trains the base policy",
                  ["sweep", GRID, "--out", d, "--cache", cache, "--task", "1", *slow], 1, signal.SIGINT,
                  locked(cache), ["nothing written"],
                  nothing_half(cache, os.path.join(d, "r3-seed0.h5"), os.path.join(d, "r3-seed0.ckpt.h5")))
        w = os.path.join(self.work, "sig-sft")
        os.makedirs(w)
        self.stop("signal", "sft, SIGTERM while it trains", ["sft", SCENARIO, "--out", os.path.join(w, "b.h5"), *slow],
                  1, signal.SIGTERM, lambda p: time.sleep(0.8) or True, ["nothing written"],
                  lambda: "b.h5 written" if os.path.exists(os.path.join(w, "b.h5")) else None)
        w = os.path.join(self.work, "sig-start")
        self.stop("signal", "run, SIGTERM as main starts (before MPI_Init)",
                  self.run_args(os.path.join(w, "r.h5"))[:4] + ["--cache", os.path.join(w, "cache")], 1, signal.SIGTERM,
                  in_main, ["preempted by SIGTERM"],
                  lambda: "r.h5 written" if os.path.exists(os.path.join(w, "r.h5")) else None)

    def experiment(self):
        """A sweep directory is one experiment: tasks of an array given an edited grid or another
        --set, --resume and --index-only with another scenario are refused naming the key, the
        directory unchanged; --index-only of a directory without a sweep writes nothing; --extend
        adds seeds and records it."""
        w = os.path.join(self.work, "experiment")
        os.makedirs(w)
        grid = os.path.join(w, "grid.ini")
        base = os.path.join(w, "tiny.ini")
        shutil.copy(SCENARIO, base)
        shutil.copy(GRID, grid)
        d = os.path.join(w, "sweep")
        sargs = lambda *x: ["sweep", grid, "--out", d, "--cache", self.cache, "--quiet", *x]
        o, rc, out = self.m.run(sargs("--task", "0"))
        if o != "ok":
            self.t.add("experiment", "task 0 of an array", o, error_line(out))
            return
        with open(grid, "w") as f:  # the grid edited between two tasks of one array
            f.write(open(GRID).read().replace("steps = 6", "steps = 4"))
        for ranks in ((1, 2) if shutil.which(self.m.mpiexec) else (1,)):
            tag = f", {ranks} ranks" if ranks > 1 else ""
            self.refused("experiment", "task 2 after the grid file was edited" + tag, d, sargs("--task", "2"),
                         ["rl.steps: 6 → 4", "not the directory's experiment"], ranks=ranks)
        shutil.copy(GRID, grid)
        for ranks in ((1, 2) if shutil.which(self.m.mpiexec) else (1,)):
            tag = f", {ranks} ranks" if ranks > 1 else ""
            self.refused("experiment", "task 2 with --set optim.lr=5e-3" + tag, d,
                         sargs("--task", "2", "--set", "optim.lr=5e-3"), ["optim.lr: 0.001 → 0.005"], ranks=ranks)
        self.refused("experiment", "--resume with --set optim.lr=5e-3", d, sargs("--resume", "--set", "optim.lr=5e-3"),
                     ["optim.lr"])
        self.refused("experiment", "--index-only with --set optim.lr=5e-3", d,
                     sargs("--index-only", "--set", "optim.lr=5e-3"), ["optim.lr"])
        for what, files in (("an empty directory", []), ("an unrelated directory", ["notes.txt"])):
            e = os.path.join(w, what.split()[1])
            os.makedirs(e)
            for f in files:
                open(os.path.join(e, f), "w").write("mine\n")
            before = sorted(os.listdir(e))
            o, rc, out = self.m.run(["sweep", grid, "--out", e, "--index-only"])
            wrote = sorted(os.listdir(e)) != before
            self.t.add("experiment", f"--index-only of {what}", "silent" if o == "ok" or wrote else
                       o if o != "clear" or "no plan.csv" in out else "crash", error_line(out))
        # a deliberate extension: two more seeds, recorded; the runs it had unchanged
        kept = snapshot(d)
        o, rc, out = self.m.run(sargs("--extend", "--seeds", "0,1,2"))
        log = os.path.join(d, "extensions.log")
        changed = [p for p in kept if p.endswith(".h5") and open(p, "rb").read() != kept[p]]
        bad = o == "ok" and (not os.path.exists(log) or "2 runs added" not in open(log).read() or changed)
        self.t.add("experiment", "--extend --seeds 0,1,2", "silent" if bad else o,
                   f"log {os.path.exists(log)}, changed {changed}" if bad else error_line(out))

    def reports(self):
        """Reports count what is there: an array in progress (pending runs are not failed), a
        damaged run file (skipped and listed), one directory given twice (each run once), --out
        onto an existing file (a one-line error, the file unchanged)."""
        w = os.path.join(self.work, "reports")
        d = os.path.join(w, "array")
        os.makedirs(w)
        for k in ("0", "1"):
            o, rc, out = self.m.run(["sweep", GRID, "--out", d, "--cache", self.cache, "--quiet", "--task", k])
            if o != "ok":
                self.t.add("report", f"array task {k}", o, error_line(out))
                return

        def summary(name, *args):
            out_dir = os.path.join(w, name)
            o, rc, out = self.m.run(["report", *args, "--quiet", "--out", out_dir], timeout=300)
            if o != "ok":
                return o, error_line(out), None
            rows = list(csv.DictReader(open(os.path.join(out_dir, "summary.csv"))))
            return o, out, (rows, open(os.path.join(out_dir, "summary.md")).read())

        o, out, got = summary("pending", d)
        if got:
            rows, md = got
            counts = {k: sum(int(r[k]) for r in rows) for k in ("runs", "complete", "pending", "failed")}
            bad = counts != {"runs": 4, "complete": 2, "pending": 2, "failed": 0}
            self.t.add("report", "an array with 2 of 4 runs done", "silent" if bad else "ok", str(counts))
        else:
            self.t.add("report", "an array with 2 of 4 runs done", o, out)
        o, out, got = summary("twice", d, d + "/")
        if got:
            rows, md = got
            n = sum(int(r["runs"]) for r in rows)
            bad = n != 4 or "Duplicate runs" not in md
            self.t.add("report", "report DIR DIR/", "silent" if bad else "ok", f"{n} runs counted")
        else:
            self.t.add("report", "report DIR DIR/", o, out)
        victim = os.path.join(d, "grpo-seed0.h5")
        data = open(victim, "rb").read()
        with open(victim, "wb") as f:
            f.write(data[: len(data) // 3])
        o, out, got = summary("damaged", d)
        if got:
            rows, md = got
            bad = "Skipped files" not in md or victim not in md or sum(int(r["unreadable"]) for r in rows) != 1
            self.t.add("report", "a damaged run file in a sweep directory", "silent" if bad else "ok",
                       "not listed under Skipped files" if bad else "")
        else:
            self.t.add("report", "a damaged run file in a sweep directory", o, out)
        for what, target in (("an existing file", os.path.join(w, "notes.txt")),
                             ("a run's results file", os.path.join(d, "r3-seed0.h5"))):
            if not os.path.exists(target):
                open(target, "w").write("mine\n")
            before = open(target, "rb").read()
            o, rc, out = self.m.run(["report", d, "--quiet", "--out", target], timeout=300)
            bad = open(target, "rb").read() != before
            self.t.add("report", f"report --out {what}", "silent" if bad or o == "ok" else
                       o if o != "clear" or "is a file" in out else "crash", error_line(out))

    def inputs3(self):
        """Values whose valid range excludes them, shown as given and shortened; a --set key twice;
        a grid whose base is a grid: one clear line each, nothing written."""
        d = os.path.join(self.work, "inputs3")
        os.makedirs(d)
        out = os.path.join(d, "out", "r.h5")
        long_value = "x" * 100_000
        cases = [
            ("--set rl.adv_eps=0", self.run_args(out, "--set", "rl.adv_eps=0"), ["rl.adv_eps = 0", "> 0"]),
            ("--set rl.adv_eps=-1e-8", self.run_args(out, "--set", "rl.adv_eps=-1e-8"), ["rl.adv_eps = -1e-8"]),
            ("--set optim.lr=1e30", self.run_args(out, "--set", "optim.lr=1e30"), ["optim.lr = 1e30", "(0, 1)"]),
            ("--set rl.clip_high=-1e30", self.run_args(out, "--set", "rl.clip_high=-1e30"), ["rl.clip_high = -1e30"]),
            ("--set rl.algorithm=<100 kB>", self.run_args(out, "--set", "rl.algorithm=" + long_value),
             ["rl.algorithm", "100000 bytes"]),
            ("--set rl.steps=4 --set rl.steps=5", self.run_args(out, "--set", "rl.steps=4", "--set", "rl.steps=5"),
             ["rl.steps", "more than once"]),
            ("sweep --set rl.steps=4 --set rl.steps=4", ["sweep", GRID, "--out", os.path.join(d, "sw"), "--dry-run",
                                                         "--set", "rl.steps=4", "--set", "rl.steps=4"],
             ["rl.steps", "more than once"]),
        ]
        with open(os.path.join(d, "self.ini"), "w") as f:
            f.write("[sweep]\nbase = self.ini\nseeds = 0, 1\n")
        with open(os.path.join(d, "a.ini"), "w") as f:
            f.write("[sweep]\nbase = b.ini\nseeds = 0, 1\n")
        with open(os.path.join(d, "b.ini"), "w") as f:
            f.write("[sweep]\nbase = a.ini\nseeds = 0, 1\n")
        with open(os.path.join(d, "bad.ini"), "w") as f:  # two problems: one line, no literal \n
            f.write(open(GRID).read().replace("rl.algorithm = grpo, r3", "rl.algorithm = grpo, r4\noptim.lr = 1e-3, 2"))
        shutil.copy(SCENARIO, os.path.join(d, "tiny.ini"))  # the grid's base, beside it
        cases += [
            ("sweep of a grid whose base is itself", ["sweep", os.path.join(d, "self.ini"), "--out",
                                                      os.path.join(d, "sw"), "--dry-run"], ["is this grid itself"]),
            ("sweep of a grid in a base cycle", ["sweep", os.path.join(d, "a.ini"), "--out", os.path.join(d, "sw"),
                                                 "--dry-run"], ["is a grid"]),
            ("sweep of a grid with two bad values", ["sweep", os.path.join(d, "bad.ini"), "--out", os.path.join(d, "sw"),
                                                     "--dry-run"], ["r4", "optim.lr = 2"]),
        ]
        for name, args, expect in cases:
            o, rc, out2 = self.m.run(args, timeout=30)
            line = error_line(out2)
            if o == "clear" and ("\\n" in line or len(line) > 700 or "use moerl sweep" in line or
                                 "000000000" in line):
                self.t.add("input", name, "crash", "unclear: " + line[:200])
            elif o == "clear" and not all(e in line for e in expect):
                self.t.add("input", name, "crash", f"unclear (lacks {expect}): " + line[:200])
            else:
                self.t.add("input", name, "silent" if o == "ok" or os.path.exists(out) else o, line[:200])

    def round4(self):
        """Round 4 (issue 51): sft, score and audit refuse an existing --out without --force (the
        file byte-identical); SIGHUP and SIGPIPE are stop signals (exit 75, a checkpoint, --resume
        finishes); a length limit near INT_MAX is refused by --dry-run and run alike."""
        w = os.path.join(self.work, "round4")
        os.makedirs(w)
        base = self.base_file()
        tokens = os.path.join(w, "tokens.h5")
        with h5py.File(tokens, "w") as f:
            f["tokens"] = np.array([[1, 2, 3, 4, 5, 6, 7, 8]] * 4, dtype=np.int32)
        audit = ["audit", "--checkpoint", base, "--scenario", SCENARIO, "--set", "audit.prompts=8",
                 "--set", "audit.prompt_len=4", "--set", "audit.response_len=8"]
        score = ["score", "--checkpoint", base, "--tokens", tokens, "--profile", "bf16-train"]
        cases = [
            ("sft --out a finished run's results", ["sft", SCENARIO, "--out", os.path.join(self.ref, "r.h5")],
             self.ref, ["results of a run", "--force"]),
            ("sft --out another base checkpoint", ["sft", SCENARIO, "--out", base], os.path.dirname(base),
             ["moerl checkpoint", "--force"]),
            ("score --out a finished run's results", score + ["--out", os.path.join(self.ref, "r.h5")], self.ref,
             ["results of a run", "--force"]),
            ("audit --out an existing JSON file", audit + ["--out", os.path.join(w, "notes.json")], w,
             ["JSON file", "--force"]),
        ]
        open(os.path.join(w, "notes.json"), "w").write('{"mine": 1}\n')
        for name, args, d, expect in cases:
            self.refused("round4", name, d, args, expect)
        for name, args in (("score --out O --force", score + ["--out", os.path.join(w, "notes.json"), "--force"]),
                           ("audit --out O --force", audit + ["--out", os.path.join(w, "notes.json"), "--force"])):
            o, rc, out = self.m.run(args)
            self.t.add("round4", name, o if o != "ok" or os.path.getsize(os.path.join(w, "notes.json")) > 20
                       else "silent", error_line(out))
        # a closed terminal mid-run: a stop like SIGTERM, the run resumable to the uninterrupted result
        d = os.path.join(w, "hup")
        long_run = ["--set", "rl.steps=3000", "--set", "rl.checkpoint_every=1000"]
        self.stop("round4", "run, SIGHUP (a closed terminal) while it trains",
                  self.run_args(os.path.join(d, "r.h5"), *long_run), 1, signal.SIGHUP,
                  lambda p: os.path.exists(os.path.join(d, "r.ckpt.h5")) or (time.sleep(0.01) and False),
                  ["preempted by SIGHUP"],
                  lambda: None if h5py.File(os.path.join(d, "r.h5"), "r").attrs["status"] in ("preempted", b"preempted")
                  else "status not preempted")
        # `moerl sweep ... | head`: the reader leaves; the sweep stops cleanly, no stale lock, resumable
        d = os.path.join(w, "pipe")
        sargs = ["sweep", GRID, "--out", d, "--cache", self.cache]
        p = subprocess.Popen(self.m.cmd(sargs), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=dict(os.environ, **MPI_ENV), start_new_session=True)
        p.stdout.readline()  # `head -1`
        p.stdout.close()
        try:
            err = p.communicate(timeout=120)[1].decode(errors="replace")
            rc = p.returncode
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            rc, err = None, ""
        locks = glob.glob(os.path.join(d, "*.lock"))
        if rc is None:
            self.t.add("round4", "sweep | head -1", "hang", "did not end after its reader left")
        elif rc not in (0, 75) or NOISE.search(err) or locks:
            self.t.add("round4", "sweep | head -1", "crash" if not locks else "silent",
                       f"exit {rc}, locks {locks}: " + error_line(err))
        else:
            o, rc2, out = self.m.run(sargs + ["--resume", "--quiet"])
            rows = json.load(open(os.path.join(d, "index.json")))["runs"] if o == "ok" else []
            done = [r for r in rows if r["status"] == "complete"]
            self.t.add("round4", f"sweep | head -1 (exit {rc}), then --resume",
                       o if o != "ok" else ("ok" if len(done) == 4 else "silent"),
                       error_line(out) if o != "ok" else f"{len(done)} of 4 complete")
        # a length limit that overflows 32 bits
        huge = ["--set", "task.name=bubble", "--set", "task.length=4", "--set", "rl.max_response_len=2147483646"]
        for name, args in (("sweep --dry-run, rl.max_response_len = 2^31 - 2", ["sweep", GRID, "--out", os.path.join(w, "dry"),
                                                                                 "--dry-run", *huge]),
                           ("run, rl.max_response_len = 2^31 - 2", self.run_args(os.path.join(w, "huge", "r.h5"), *huge))):
            o, rc, out = self.m.run(args, timeout=60)
            line = error_line(out)
            self.t.add("round4", name, "silent" if o == "ok" else o if o != "clear" or "model.max_seq_len" in line
                       else "crash", line[:200])

    def round4b(self):
        """Round 4, second part (issue 51): every reader checks each run file against the run its
        plan row expects (a swapped file, another experiment's run copied in: `mismatched`, named
        with the keys, never counted); a run file the plan does not list is indexed (`unplanned`);
        infinite values are counted, never averaged away; a --cache that is a file, an --extend that
        renames runs, a run file without a status, a symlinked --out; a directory whose grid.ini is
        missing is checked by its run files and nothing is written by a refused command; a report
        of a read-only directory keeps its plan."""
        g = "round4b"
        w = os.path.join(self.work, g)
        os.makedirs(w)
        grid = os.path.join(w, "grid.ini")
        shutil.copy(SCENARIO, os.path.join(w, "tiny.ini"))
        shutil.copy(GRID, grid)
        src = os.path.join(w, "sweep")
        sargs = lambda d, *x: ["sweep", grid, "--out", d, "--cache", self.cache, "--quiet", *x]
        o, rc, out = self.m.run(sargs(src))
        other = os.path.join(w, "other")  # the same grid with another learning rate: another experiment
        o2, rc2, out2 = self.m.run(sargs(other, "--set", "optim.lr=2e-3"))
        if o != "ok" or o2 != "ok":
            self.t.add(g, "the sweeps the cases start from", "crash", error_line(out if o != "ok" else out2))
            return
        runs_of = lambda d: {p: open(p, "rb").read() for p in glob.glob(os.path.join(d, "*.h5"))}

        def copy(name, swap=False):
            d = os.path.join(w, name)
            shutil.copytree(src, d)
            if swap:  # the grpo and r3 files of seed 0 trade places
                a, b = os.path.join(d, "grpo-seed0.h5"), os.path.join(d, "r3-seed0.h5")
                os.rename(a, a + ".x")
                os.rename(b, a)
                os.rename(a + ".x", b)
            return d

        def case(name, args, d, want, expect, check=None, whole=None):
            """want: "refused" (a clear error holding `expect`, every file of d byte-identical),
            "error" (exit 1 with that line after the work, the run files byte-identical) or "ok"
            (exit 0, the output holding `expect`, the run files byte-identical). check(out): None
            or what is wrong."""
            snap = snapshot if want == "refused" else runs_of
            before = snap(d)
            o, rc, out = self.m.run(args, timeout=300)
            line = error_line(out)
            if want in ("refused", "error"):
                if o == "ok":
                    return self.t.add(g, name, "silent", "accepted: " + " / ".join(out.strip().splitlines()[-2:]))
                if o == "clear" and want == "error" and rc != 1:
                    return self.t.add(g, name, "crash", f"exit {rc}: " + line)
                if o == "clear" and not all(e in line for e in expect):
                    return self.t.add(g, name, "crash", f"unclear (lacks {expect}): " + line)
                if o == "clear" and snap(d) != before:
                    return self.t.add(g, name, "silent", "refused, but the files changed: " + line)
                bad = check(out) if check and o == "clear" else None
                return self.t.add(g, name, "silent" if bad else o, bad or line)
            if o != "ok":
                return self.t.add(g, name, "crash", f"exit {rc}, not the promised result: " + line)
            bad = None if all(e in out for e in expect) else f"the output lacks {expect}"
            bad = bad or (check(out) if check else None) or ("a run file changed" if snap(d) != before else None)
            self.t.add(g, name, "silent" if bad else "ok", bad or "")

        def index_states(d):
            return {r["id"]: r["status"] for r in csv.DictReader(open(os.path.join(d, "index.csv")))}

        def summary(out_dir):
            rows = list(csv.DictReader(open(os.path.join(out_dir, "summary.csv"))))
            return rows, open(os.path.join(out_dir, "summary.md")).read()

        def counts(out_dir, *states):
            rows, md = summary(out_dir)
            return {s: sum(int(r.get(s) or 0) for r in rows) for s in states}, md  # a state it lacks: 0

        # 1. reports and indexes check every run file against the plan
        swap_keys = "rl.algorithm: grpo → r3"
        d = copy("swap-report", swap=True)
        rep = os.path.join(w, "swap-report.out")

        def swapped_report(out):
            c, md = counts(rep, "complete", "mismatched", "failed")
            if c != {"complete": 2, "mismatched": 2, "failed": 0}:
                return f"counted {c}"
            return None if "Skipped files" in md and swap_keys in md else "the swapped files are not listed"
        case("report of a sweep whose grpo and r3 files of a seed were swapped", ["report", d, "--quiet", "--out", rep],
             d, "ok", [swap_keys], swapped_report)
        d = copy("swap-python", swap=True)
        rep = os.path.join(w, "swap-python.out")
        p = subprocess.run([sys.executable, "-m", "analysis", d, "--quiet", "--out", rep], capture_output=True, text=True,
                           cwd=os.path.dirname(os.path.dirname(HERE)), timeout=300)
        bad = p.returncode != 0 and "exit " + str(p.returncode) or swapped_report(p.stdout)
        self.t.add(g, "python3 -m analysis of that sweep (its index written before the swap)",
                   "silent" if bad else "ok", bad or "")
        rep = os.path.join(w, "group-by.out")
        d = copy("group-by", swap=True)

        def grouped(out):
            rows, md = summary(rep)
            got = {r["group"]: (int(r.get("complete") or 0), int(r.get("mismatched") or 0)) for r in rows}
            return None if got == {"grpo": (1, 1), "r3": (1, 1)} else f"groups {got}"
        case("report --group-by rl.algorithm of that sweep", ["report", d, "--quiet", "--group-by", "rl.algorithm",
                                                             "--out", rep], d, "ok", [], grouped)
        d = copy("swap-inspect", swap=True)

        def inspected(out):
            table = out[out.find("== sweep"):]
            per_run = [l for l in table.splitlines() if l.startswith(d) or "…" in l]
            if table.count("mismatched") < 3 or not any("mismatched" in l for l in per_run):
                return "the index table and the per-run table do not both say mismatched"
            return None
        case("inspect of that sweep", ["inspect", d], d, "ok", [swap_keys, "moerl: warning:"], inspected)
        d = copy("swap-index", swap=True)
        case("--index-only of that sweep", sargs(d, "--index-only"), d, "ok", [swap_keys],
             lambda out: None if sorted(index_states(d).values()) == ["complete", "complete", "mismatched", "mismatched"]
             else f"index {index_states(d)}")
        d = copy("swap-resume", swap=True)
        case("--resume of that sweep", sargs(d, "--resume"), d, "error", ["holds another run than the plan's", swap_keys],
             lambda out: None if index_states(d)["r3-seed0"] == "mismatched" else f"index {index_states(d)}")
        case("--task 1 (r3-seed0) of that sweep", sargs(d, "--task", "1"), d, "refused",
             ["r3-seed0.h5 holds another run", "rl.algorithm: r3 → grpo"])
        d = copy("foreign")
        shutil.copy(os.path.join(other, "r3-seed1.h5"), os.path.join(d, "r3-seed1.h5"))
        rep = os.path.join(w, "foreign.out")
        case("report of a sweep with another experiment's run copied in", ["report", d, "--quiet", "--out", rep], d,
             "ok", ["optim.lr: 0.001 → 0.002"],
             lambda out: None if counts(rep, "complete", "mismatched")[0] == {"complete": 3, "mismatched": 1}
             else "counted " + str(counts(rep, "complete", "mismatched")[0]))
        # 7. a row deleted from plan.csv: the run is indexed as not in the plan, never dropped
        d = copy("plan-row")
        plan = os.path.join(d, "plan.csv")
        open(plan, "w").write("".join(l for l in open(os.path.join(src, "plan.csv")) if "grpo-seed1" not in l))
        rep = os.path.join(w, "plan-row.out")
        case("report of a sweep whose plan.csv lost a finished run's row", ["report", d, "--quiet", "--out", rep], d,
             "ok", ["grpo-seed1.h5", "plan.csv does not list"],
             lambda out: None if counts(rep, "complete", "unplanned")[0] == {"complete": 3, "unplanned": 1}
             and index_states(d).get("grpo-seed1") == "unplanned" else "counted " + str(counts(rep, "unplanned")[0]))
        # 5. infinite values are counted and shown, never averaged away
        d = os.path.join(w, "inf")
        os.makedirs(d)
        run = os.path.join(d, "r.h5")
        shutil.copy(os.path.join(src, "grpo-seed0.h5"), run)
        rewrite(run)
        with h5py.File(run, "r+") as f:
            n = f["metrics/kl_rollout_train"].shape[0]
            kl = np.zeros(n)
            kl[:3] = [1e308, np.inf, 0.0]
            del f["metrics/kl_rollout_train"]
            f["metrics/kl_rollout_train"] = kl
        case("inspect of a run whose KL is [1e308, inf, 0, ...]", ["inspect", run], d, "ok",
             [f"kl_rollout_train: inf in 1 of {n} steps"],
             lambda out: None if re.search(r"r\.h5 .* inf ", out) and "e+307" not in out else "the KL mean is not inf")
        rep = os.path.join(w, "inf.out")
        case("report of that run", ["report", run, "--quiet", "--out", rep], d, "ok", [],
             lambda out: None if "Non-finite values" in summary(rep)[1] and f"inf in 1 of {n} steps" in summary(rep)[1]
             and "| inf |" in summary(rep)[1] else "summary.md shows no inf")
        # 12. misleading outcomes
        cache_file = os.path.join(w, "cache-file")
        open(cache_file, "w").write("mine\n")
        d = os.path.join(w, "cache-is-a-file")
        case("sweep --cache FILE", ["sweep", grid, "--out", d, "--cache", cache_file, "--quiet"], w, "refused",
             ["--cache", "not a directory"], lambda out: "the sweep directory was made" if os.path.exists(d) else None)
        d = copy("extend-renames")
        lr_grid = os.path.join(w, "grid-lr.ini")
        open(lr_grid, "w").write(open(GRID).read().replace("rl.algorithm = grpo, r3", "rl.algorithm = grpo, r3\n"
                                                                                      "optim.lr = 1e-3, 2e-3"))
        case("--extend with a grid that renames every run", ["sweep", lr_grid, "--out", d, "--cache", self.cache,
                                                            "--quiet", "--extend"], d, "refused",
             ["grpo-seed0 would be renamed grpo_lr-1e-3-seed0", "optim.lr"])
        d = copy("no-status")
        rewrite(os.path.join(d, "r3-seed1.h5"), drop=("status",))
        rep = os.path.join(w, "no-status.out")
        case("report of a sweep with a run file without a status attribute", ["report", d, "--quiet", "--out", rep], d,
             "ok", ["no 'status' attribute"],
             lambda out: None if counts(rep, "unreadable", "failed")[0] == {"unreadable": 1, "failed": 0}
             else "counted " + str(counts(rep, "unreadable", "failed")[0]))
        d = os.path.join(w, "link")
        shutil.copytree(self.half, os.path.join(d, "real"))
        for f in ("r.h5", "r.ckpt.h5"):
            os.symlink(os.path.join("real", f), os.path.join(d, f))

        def links_kept(out):
            kept = all(os.path.islink(os.path.join(d, f)) for f in ("r.h5", "r.ckpt.h5"))
            return None if kept and snapshot(os.path.join(d, "real")) == real_before else "the links or their targets changed"
        real_before = snapshot(os.path.join(d, "real"))
        case("run --resume --out a symbolic link", self.run_args(os.path.join(d, "r.h5"), "--resume"), d, "refused",
             ["r.h5: is a symbolic link to real/r.h5"], links_kept)
        # 3. no directory stamped with a foreign experiment
        for what, extra in (("--resume", ["--resume"]), ("--task 2", ["--task", "2"]), ("--index-only", ["--index-only"])):
            d = copy("no-grid-" + what.strip("-").split()[0])
            os.remove(os.path.join(d, "grid.ini"))
            case(f"{what} --set optim.lr=5e-3 of a sweep without grid.ini", sargs(d, *extra, "--set", "optim.lr=5e-3"),
                 d, "refused", ["has no grid.ini", "optim.lr: 0.005 → 0.001"])
        d = copy("no-grid-rebuilt")
        os.remove(os.path.join(d, "grid.ini"))
        case("--resume of a sweep without grid.ini, with its own grid", sargs(d, "--resume"), d, "ok", [],
             lambda out: None if open(os.path.join(d, "grid.ini")).read() == open(os.path.join(src, "grid.ini")).read()
             and set(index_states(d).values()) == {"complete"} else "grid.ini not rebuilt as it was")
        d = copy("grid-unreadable")
        os.remove(os.path.join(d, "grid.ini"))
        os.makedirs(os.path.join(d, "grid.ini"))
        case("--resume of a sweep whose grid.ini is a directory", sargs(d, "--resume"), d, "refused",
             ["grid.ini: cannot be read", "a directory"])
        d = os.path.join(w, "fresh-refused")
        os.makedirs(d)
        shutil.copy(os.path.join(other, "grpo-seed0.h5"), d)
        case("a fresh sweep into a directory that holds a run file", sargs(d), d, "refused", ["already holds a sweep"])
        # 4. a report of a directory it cannot write still reads the plan
        d = os.path.join(w, "array")
        for k in ("0", "1"):
            self.m.run(sargs(d, "--task", k))
        ro = os.path.join(w, "ro")
        os.makedirs(ro)
        how = None
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", ro], capture_output=True).returncode == 0:
            shutil.copytree(d, os.path.join(ro, "array"))
            if subprocess.run(["mount", "-o", "remount,ro", ro], capture_output=True).returncode == 0:
                how = "a read-only tmpfs"
        elif shutil.which("chattr"):
            shutil.copytree(d, os.path.join(ro, "array"))
            if subprocess.run(["chattr", "+i", os.path.join(ro, "array")], capture_output=True).returncode == 0:
                how = "chattr +i"
        try:
            if how:
                rep = os.path.join(w, "ro.out")
                case(f"report of an array with 2 of 4 runs done, on {how}",
                     ["report", os.path.join(ro, "array"), "--quiet", "--out", rep], os.path.join(ro, "array"), "ok",
                     ["moerl: warning: report:", "not saved"],
                     lambda out: None if counts(rep, "complete", "pending")[0] == {"complete": 2, "pending": 2}
                     else "counted " + str(counts(rep, "complete", "pending")[0]))
            else:
                print(f"  [{g}] report of a read-only directory: not tried (no read-only mount or chattr here)")
        finally:
            subprocess.run(["umount", ro], capture_output=True)
            subprocess.run(["chattr", "-i", os.path.join(ro, "array")], capture_output=True)

    def round5(self):
        """Round 5 (issue 63): bench's empty lists, non-finite --gemm-seconds, damaged --peer-json
        and stop signals (exit 75 within a second or two, the GEMM ceiling included); a result
        that cannot be written to stdout (/dev/full) fails; --dry-run refuses what every run would
        fail on (rank counts, huge probe sets, an SFT longer than max_seq_len); empty option
        values; Ctrl-C during `moerl report`; the paper scripts forward stop signals to their
        sweep; analysis.league and probe_rule refuse rather than guess (special files, the same run
        twice, bad kept cells, non-finite values shown, the score recorded, ties, options that
        would decide the result) and write their files whole or not at all (the kept --runs file
        byte-identical after a refused join or a full disk)."""
        g = "round5"
        w = os.path.join(self.work, g)
        os.makedirs(w)
        root = os.path.dirname(os.path.dirname(HERE))
        # -- moerl: refusals of single commands (one clear line naming the option or key)
        peer = os.path.join(w, "peer.json")
        open(peer, "w").write('{"peer": "torch", "rollout_s": 1.5, "train')
        base = self.base_file()
        cut = ["--set", "task.name=bubble", "--set", "rl.max_response_len=2"]
        cases = [
            ("bench --profiles '' --recipe 0", ["bench", "--profiles", "", "--recipe", "0"], ["--profiles"]),
            ("bench --profiles , --recipe 0", ["bench", "--profiles", ",", "--recipe", "0"], ["--profiles", "no name"]),
            ("bench --gemm-seconds nan", ["bench", "--gemm-seconds", "nan"], ["--gemm-seconds", "nan", "finite"]),
            ("bench --gemm-seconds inf", ["bench", "--gemm-seconds", "inf"], ["--gemm-seconds", "inf", "finite"]),
            ("bench --peer-json with truncated JSON", ["bench", "--peer-json", peer], ["--peer-json", "not valid JSON"]),
            ("audit --backend-b ''", ["audit", "--checkpoint", base, "--backend-b", ""], ["--backend-b", "empty"]),
            ("audit --profile-a ''", ["audit", "--checkpoint", base, "--profile-a", ""], ["--profile-a", "empty"]),
            ("sweep --dry-run --ranks-per-run 2, rl.drift_probes = 1",
             ["sweep", GRID, "--out", os.path.join(w, "dry"), "--dry-run", "--ranks-per-run", "2", "--set",
              "rl.drift_probes=1"], ["rl.drift_probes = 1", "2 ranks"]),
            ("sweep --dry-run --ranks-per-run 2, rl.eval_prompts = 1",
             ["sweep", GRID, "--out", os.path.join(w, "dry"), "--dry-run", "--ranks-per-run", "2", "--set",
              "rl.eval_prompts=1"], ["rl.eval_prompts = 1", "2 ranks"]),
            ("sweep --dry-run, rl.drift_probes = 2000000000",
             ["sweep", GRID, "--out", os.path.join(w, "dry"), "--dry-run", "--set", "rl.drift_probes=2000000000"],
             ["rl.drift_probes = 2000000000", "must be in"]),
            ("run, rl.drift_probes = 2000000000", self.run_args(os.path.join(w, "probes", "r.h5"), "--set",
                                                                "rl.drift_probes=2000000000"), ["rl.drift_probes"]),
            ("sweep --dry-run, rl.prompts_per_step = 100000000",
             ["sweep", GRID, "--out", os.path.join(w, "dry"), "--dry-run", "--set", "rl.prompts_per_step=100000000"],
             ["rl.prompts_per_step", "at most"]),
            ("run, sft.batch = 1000000000", self.run_args(os.path.join(w, "sft-batch", "r.h5"), "--set",
                                                          "sft.batch=1000000000"), ["sft.batch = 1000000000"]),
            ("sweep --dry-run, bubble with rl.max_response_len below its answers",
             ["sweep", GRID, "--out", os.path.join(w, "dry"), "--dry-run", *cut], ["rl.max_response_len = 2", "sft",
                                                                                    "model.max_seq_len >= 20"]),
            ("run, bubble with rl.max_response_len below its answers",
             self.run_args(os.path.join(w, "bubble", "r.h5"), *cut), ["sft", "model.max_seq_len >= 20"]),
        ]
        for name, args, expect in cases:
            o, rc, out = self.m.run(args, timeout=60)
            line = error_line(out)
            if o == "clear" and not all(e in line for e in expect):
                o, line = "crash", f"unclear (lacks {expect}): " + line
            self.t.add(g, name, "silent" if o == "ok" else o, line[:200])
        # -- bench stops within a step, the GEMM ceiling's measurement included
        for name, extra, sig in (("bench, SIGTERM while it measures the GEMM ceiling (--gemm-seconds 20)",
                                  ["--gemm-seconds", "20"], signal.SIGTERM),
                                 ("bench, SIGINT while it times its steps", ["--gemm-seconds", "0.01", "--rounds", "100000"],
                                  signal.SIGINT)):
            started = []
            self.stop(g, name, ["bench", "--scenario", SCENARIO, "--gemm-n", "64", *extra], 1, sig,
                      lambda p: in_main(p) and (started.append(time.time()) or time.sleep(1.0) or True),
                      ["preempted by " + signal.Signals(sig).name, "nothing written"],
                      lambda: None if time.time() - started[0] < 1.0 + 4.0 else "took more than 4 s after the signal",
                      timeout=20)
        # -- a result that cannot be written: exit 1, saying so
        sw = os.path.join(w, "sweep")
        o, rc, out = self.m.run(["sweep", GRID, "--out", sw, "--cache", self.cache, "--quiet"])
        if o != "ok":
            return self.t.add(g, "the sweep the cases start from", "crash", error_line(out))
        for name, args in (("inspect SWEEP > /dev/full", ["inspect", sw]),
                           ("sweep --index-only > /dev/full", ["sweep", GRID, "--out", sw, "--index-only"]),
                           ("inspect RUN > /dev/full", ["inspect", os.path.join(sw, "grpo-seed0.h5")])):
            p = subprocess.run(["bash", "-c", 'exec "$@" > /dev/full', "x"] + self.m.cmd(args), capture_output=True,
                               text=True, env=dict(os.environ, **MPI_ENV), timeout=60, errors="replace")
            o = classify(p.returncode, p.stderr, p.stderr)
            line = error_line(p.stderr)
            self.t.add(g, name, "silent" if o == "ok" else o if o != "clear" or "could not be written" in line
                       else "crash", line[:200])
        # -- Ctrl-C during a report: exit 75 and one line, never a traceback or "no Python"
        def child_runs(p, text):
            """A child of moerl runs a command line holding `text` (the Python moerl report starts)."""
            for c in children(p.pid):
                try:
                    if text in open(f"/proc/{c}/cmdline").read().replace("\0", " "):
                        return True
                except OSError:
                    pass
            return False
        for name, text in (("report, Ctrl-C as it looks for a Python", "import numpy"),
                           ("report, Ctrl-C while the analysis runs", "-m analysis")):
            self.stop(g, name, ["report", sw, "--quiet", "--out", os.path.join(w, "rep-" + text.split()[-1])], 1,
                      signal.SIGINT, lambda p, t=text: child_runs(p, t), ["stopped by SIGINT", "run it again"],
                      lambda: None, timeout=30, to_group=True)
        # -- the paper scripts: a stop signal to the script reaches its sweep; "stopped; resume with"
        fake = os.path.join(w, "bin")
        os.makedirs(fake)
        with open(os.path.join(fake, "mpirun"), "w") as f:  # a sweep that stops at SIGUSR1 as moerl's does
            f.write('#!/usr/bin/env bash\necho $$ > "$FAKE_PID"\ntrap \'echo fake-sweep: got USR1; exit 75\' USR1\n'
                    'for i in $(seq 600); do sleep 0.1; done\necho fake-sweep: ran to the end\nexit 0\n')
        os.chmod(os.path.join(fake, "mpirun"), 0o755)
        for script, sig in (("learn-league.sh", signal.SIGTERM), ("learn-league.sh", signal.SIGINT),
                            ("learn-more.sh", signal.SIGUSR1), ("learn-more.sh", signal.SIGHUP)):
            pid_file = os.path.join(w, f"{script}.{sig.name}.pid")
            env = dict(os.environ, PATH=fake + os.pathsep + os.environ["PATH"], FAKE_PID=pid_file, MOERL=self.m.binary)
            p = subprocess.Popen(["bash", os.path.join(root, "scenarios", "paper", script), os.path.join(w, "paper")],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                 start_new_session=True)
            t0 = time.time()
            while not (os.path.exists(pid_file) and open(pid_file).read().strip()) and time.time() - t0 < 20:
                time.sleep(0.02)
            time.sleep(0.2)
            os.kill(p.pid, sig)
            name = f"{script}, {sig.name} to the script during a sweep"
            try:
                out = p.communicate(timeout=20)[0]
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
                self.t.add(g, name, "hang", "did not end after the signal")
                continue
            sweep_pid = int(open(pid_file).read().strip() or 0)
            alive = sweep_pid and os.path.exists(f"/proc/{sweep_pid}")
            if alive:
                os.kill(sweep_pid, signal.SIGKILL)
            bad = (f"exit {p.returncode}" if p.returncode != 75 else
                   "its sweep did not get the stop" if "got USR1" not in out else
                   "its sweep is left running" if alive else
                   "no 'stopped; resume with'" if "resume with" not in out or "stopped" not in out else None)
            self.t.add(g, name, "crash" if bad and p.returncode != 0 else "silent" if bad else "ok",
                       bad and f"{bad}: " + " / ".join(out.strip().splitlines()[-2:]) or "")
        self.league_cases(w, sw)

    def league_cases(self, w, sw):
        """analysis.league and analysis.probe_rule (round 5): refusals are one line naming what is
        wrong, every output whole or not at all, the kept --runs file never modified."""
        g = "round5"
        root = os.path.dirname(os.path.dirname(HERE))

        def py(module, args, ulimit_kb=None, timeout=60, full=False):
            limits = f"ulimit -v {MEMORY_KB}; trap '' XFSZ; " + (f"ulimit -f {ulimit_kb}; " if ulimit_kb else "")
            cmd = ["bash", "-c", limits + 'exec "$@"' + (" > /dev/full" if full else ""), "py", sys.executable, "-m",
                   module] + args
            try:
                p = subprocess.run(cmd, capture_output=True, text=True, cwd=root, timeout=timeout, errors="replace")
            except subprocess.TimeoutExpired:
                return "hang", None, "did not end", ""
            lines = [l for l in p.stderr.splitlines() if re.match(r"python3 -m analysis\.\w+: error: ", l)]
            if p.returncode < 0 or "Traceback" in p.stderr or "internal error" in p.stderr:
                o = "crash"
            elif p.returncode == 0:
                o = "ok"
            elif p.returncode in (1, 2) and len(lines) == 1 and not INVISIBLE.search(lines[0]):
                o = "clear"
            else:
                o = "crash"
            return o, p.returncode, (lines[0].split(": error: ", 1)[1] if lines else p.stderr.strip()[-300:]), p.stdout

        def case(name, module, args, want, expect=(), check=None, keep=(), ulimit_kb=None, full=False):
            """want "refused": a clear error holding every string of `expect`; "ok": exit 0 and check()
            (None, or what is wrong). keep: files that must stay byte-identical either way. full:
            stdout is /dev/full."""
            before = {f: open(f, "rb").read() for f in keep}
            o, rc, line, out = py(module, args, ulimit_kb, full=full)
            changed = [f for f in keep if open(f, "rb").read() != before[f]]
            if changed:
                return self.t.add(g, name, "silent", f"{changed[0]} changed ({o}: {line[:150]})")
            if want == "refused":
                if o == "ok":
                    return self.t.add(g, name, "silent", "accepted: " + " / ".join(out.strip().splitlines()[-2:])[:200])
                if o == "clear" and not all(e in line for e in expect):
                    return self.t.add(g, name, "crash", f"unclear (lacks {list(expect)}): {line[:200]}")
                return self.t.add(g, name, o, line[:200])
            if o != "ok":
                return self.t.add(g, name, "crash" if o != "hang" else o, f"exit {rc}: {line[:200]}")
            bad = check(out) if check else None
            self.t.add(g, name, "silent" if bad else "ok", bad or "")

        def league_dir(name, scores, kl=None, lr=None, algo=None):
            """A sweep directory of the league's shape from the tiny sweep's run files: scores maps
            (variant, seed) to the last eval_final (its base 0.5); kl: (variant, seed) → a value put
            in the KL series; lr: the optim.lr its scenario says (another experiment)."""
            d = os.path.join(w, name)
            os.makedirs(d)
            rows = []
            for i, ((v, seed), score) in enumerate(scores.items()):
                f = os.path.join(d, f"{v}-seed{seed}.h5")
                shutil.copy(os.path.join(sw, f"{(algo or {}).get(v, 'grpo')}-seed{seed}.h5"), f)
                rewrite(f)
                with h5py.File(f, "r+") as h:
                    ev = np.array(h["metrics/eval_final"][()], dtype=float)
                    at = np.flatnonzero(np.isfinite(ev))
                    ev[at] = 0.5
                    ev[at[-1]] = score
                    h["metrics/eval_final"][...] = ev
                    if kl and (v, seed) in kl:
                        k = np.array(h["metrics/kl_rollout_train"][()], dtype=float)
                        k[:2] = [1e308, kl[(v, seed)]]
                        h["metrics/kl_rollout_train"][...] = k
                    if lr:
                        h.attrs["scenario"] = re.sub(r"optim\.lr = \S+", f"optim.lr = {lr}", str(h.attrs["scenario"]))
                rows.append({"index": i, "id": f"{v}-seed{seed}", "file": f"{v}-seed{seed}.h5", "status": "complete",
                             "keys": {"variant": v, "run.seed": str(seed)}})
            json.dump({"grid": "g.ini", "swept_keys": ["variant", "run.seed"], "runs": rows},
                      open(os.path.join(d, "index.json"), "w"))
            return d

        L = "analysis.league"
        even = {(v, s): x for v, xs in (("control", (0.5, 0.5)), ("a", (0.6, 0.7)), ("b", (0.6, 0.7)))
                for s, x in zip((0, 1), xs)}
        ties = league_dir("ties", even)
        out = os.path.join(w, "ties.out")
        case("league of two variants tied on every seed", L, [ties, "--out", out], "ok",
             check=lambda o: None if len(re.findall(r"\| 1–2 \| (a|b) \|.*\| 1–2 \|", open(os.path.join(out, "league.md")).read())) == 2
             else "the tied variants are not both ranked 1–2")
        kept = os.path.join(out, "league-runs.csv")
        kept_bytes = open(kept, "rb").read()
        # the documented join onto its own --runs file: refused, or a full disk: the kept file is untouched
        other = league_dir("rerun", {("control", 0): 0.5, ("a", 0): 0.65, ("b", 0): 0.6})
        case("league --runs KEPT --out ITS_DIR with a re-run that disagrees", L, [other, "--runs", kept, "--out", out],
             "refused", ["a/0", "differs from its run file", "score"], keep=[kept])
        case("league --runs KEPT --out ITS_DIR on a full disk (ulimit -f 2)", L, [ties, "--runs", kept, "--out", out],
             "refused", ["cannot be written", "nothing written"], keep=[kept], ulimit_kb=2)
        left = glob.glob(os.path.join(out, ".*tmp-*"))
        self.t.add(g, "no temporary left after the full disk", "silent" if left else "ok", f"left: {left}" if left else "")
        case("league --runs KEPT --out ITS_DIR (the documented join)", L, [ties, "--runs", kept, "--out", out], "ok",
             check=lambda o: None if open(kept, "rb").read().replace(b"\r\n", b"\n").count(b"\n") == 7 else
             "the kept file lost rows")
        # the same run twice, with other numbers: refused naming both files, whatever the order
        exp2 = league_dir("experiment2", {k: v - 0.2 for k, v in even.items()}, lr="0.005")
        for a, b in ((ties, exp2), (exp2, ties)):
            case(f"league of two experiments' directories ({os.path.basename(a)} first)", L, [a, b, "--out",
                                                                                           os.path.join(w, "two.out")],
                 "refused", ["two runs of", os.path.basename(a) + "/", os.path.basename(b) + "/", "optim.lr"])
        # special files: refused unread, at once
        fifo = os.path.join(w, "runs.fifo")
        os.mkfifo(fifo)
        case("league --runs FIFO", L, ["--runs", fifo, "--out", os.path.join(w, "x")], "refused", ["FIFO"])
        zero = league_dir("zero", {("control", 0): 0.5})
        os.remove(os.path.join(zero, "index.json"))
        os.symlink("/dev/zero", os.path.join(zero, "index.json"))
        case("league of a directory whose index.json links to /dev/zero", L, [zero, "--out", os.path.join(w, "x")],
             "refused", ["index.json", "character device"])
        # kept cells and files that are not what they say
        text = kept_bytes.decode()
        head, rows = text.split("\r\n", 1)
        cols = head.split(",")

        def edited(name, new):
            p = os.path.join(w, name)
            open(p, "w", newline="").write(new)
            return p

        def cell(col, value, row=0):
            lines = text.split("\r\n")
            cells = lines[1 + row].split(",")
            cells[cols.index(col)] = value
            lines[1 + row] = ",".join(cells)
            return "\r\n".join(lines)
        x = os.path.join(w, "x")
        for name, content, expect in (
                ("a cell 'abc'", cell("kl", "abc"), ["row 2", "column kl", "'abc'", "not a number"]),
                ("an empty number cell", cell("score", ""), ["row 2", "column score", "not a number"]),
                ("a file cut inside a number", text[:text.rindex(",") + 3], ["ends inside its last row"]),
                ("a duplicated row", text + rows.split("\r\n")[0] + "\r\n", ["duplicated row"]),
                ("a missing column", "\r\n".join(",".join(c for i, c in enumerate(l.split(",")) if i != cols.index("kl"))
                                                 for l in text.split("\r\n")), ["no column kl"]),
                ("an extra column", "\r\n".join(l + ("," + ("extra" if i == 0 else "1") if l else "")
                                                for i, l in enumerate(text.split("\r\n"))), ["'extra'", "not one of"]),
                ("'#' lines (a league.csv)", "# model.n_experts = 8\r\n" + text, ["'#' line"]),
                ("made with --score eval_partial, read with eval_final", text.replace(",eval_final,", ",eval_partial,"),
                 ["made with --score eval_partial", "not eval_final"])):
            case(f"league --runs with {name}", L, ["--runs", edited("k.csv", content), "--out", x], "refused", expect)
        png = edited("image.csv", "")
        open(png, "wb").write(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
        case("league --runs a PNG", L, ["--runs", png, "--out", x], "refused", ["not a league-runs.csv", "binary"])
        case("league --runs KEPT alone", L, ["--runs", kept, "--out", os.path.join(w, "plain.out")], "ok")
        case("league --runs with a byte-order mark (read as without)", L,
             ["--runs", edited("bom.csv", "\ufeff" + text), "--out", os.path.join(w, "bom.out")], "ok",
             check=lambda o: None if open(os.path.join(w, "bom.out", "league.md")).read() ==
             open(os.path.join(w, "plain.out", "league.md")).read() else "another league than without the mark")
        case("league --runs with a nan and an inf cell", L,
             ["--runs", edited("nan.csv", cell("kl", "inf", 2).replace("\r\n", "\r\n", 1)), "--out", os.path.join(w, "nan.out")],
             "ok", check=lambda o: None if "Non-finite values" in o and "KL: inf in 1 of 2 runs" in o else
             "the infinite KL is not counted and shown")
        inf = league_dir("inf", even, kl={("a", 1): float("inf")})
        case("league of runs with an infinite KL", L, [inf, "--out", os.path.join(w, "inf.out")], "ok",
             check=lambda o: None if "e+307" not in o and "KL: inf in 1 of 2 runs (seed 1)" in o else
             "the infinite KL is averaged away (e+307) or not listed")
        # options that would quietly become the result
        for name, args, expect in (
                ("league --score with a typo", [ties, "--score", "eval_fianl", "--out", x], ["--score eval_fianl", "eval_final"]),
                ("league --by variant", [ties, "--by", "variant", "--out", x], ["--by variant"]),
                ("league --by a key the variants set (rl.algorithm: grpo, r3)",
                 [league_dir("algo2", {(v, s): 0.5 for v in ("control", "r3") for s in (0, 1)}, algo={"r3": "r3"}),
                  "--by", "rl.algorithm", "--out", x], ["--by rl.algorithm", "a key the variants set"]),
                ("league --by rl.algorithm (the same in every run)", [league_dir("algo", {("control", 0): 0.5, ("a", 0): 0.6}),
                                                                     "--by", "rl.algorithm", "--out", x], ["--by"])):
            case(name, L, args, "refused" if "same in every" not in name else "ok", expect)
        P = "analysis.probe_rule"
        for name, args, expect in (("probe_rule --min-collapsed -5", ["--min-collapsed", "-5"], ["--min-collapsed -5", ">= 1"]),
                                   ("probe_rule --min-gain nan", ["--min-gain", "nan"], ["--min-gain nan", "finite"]),
                                   ("probe_rule --score with a typo", ["--score", "eval_fianl"], ["--score eval_fianl"])):
            case(name, P, ["p1", ties, "--reference", "control", "--variant", "a", *args], "refused", expect)
        case("league > /dev/full", L, [ties, "--out", os.path.join(w, "full.out")], "refused",
             ["could not be written to standard output"], full=True)
        case("probe_rule > /dev/full", P, ["p1", ties, "--reference", "control", "--variant", "a"], "refused",
             ["could not be written to standard output"], full=True)
        case("probe_rule of two experiments' directories", P, ["p1", ties, exp2, "--reference", "control",
                                                              "--variant", "a"], "refused", ["two runs of"])

    def base_file(self):
        return glob.glob(os.path.join(self.cache, "base-*.h5"))[0]


def rewrite(path, drop=(), version=None, drop_state=()):
    """The file as an older moerl (or another tool) wrote it: copied by h5py without the integrity
    header, without the root attributes `drop` and the state attributes `drop_state`."""
    tmp = path + ".rewrite"
    with h5py.File(path, "r") as src, h5py.File(tmp, "w") as dst:
        for k in src:
            src.copy(k, dst)
        for k, v in src.attrs.items():
            if k not in drop:
                dst.attrs[k] = v
        if version is not None:
            dst.attrs["version"] = np.int64(version)
        if "state" in dst:
            for k in drop_state:
                if k in dst["state"].attrs:
                    del dst["state"].attrs[k]
    os.replace(tmp, path)


def in_main(p):
    """moerl has started main: its handler for the stop signals is installed (SigCgt in
    /proc/PID/status; SigBlk alone is not main's: libraries block every signal for a moment
    while they start threads, before main)."""
    for pid in [p.pid] + children(p.pid):
        try:
            st = open(f"/proc/{pid}/status").read()
        except OSError:
            continue
        m = (re.search(r"SigCgt:\s*([0-9a-f]+)", st),)
        if proc_name(pid) == "moerl" and any(x and int(x.group(1), 16) & (1 << (signal.SIGTERM - 1)) for x in m):
            return True
    return False


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
    ap.add_argument("--only", help="comma-separated groups: kill,sweep,disk,corrupt,scenario,base,rerun,identity,writers,input,"
                                           "signal,experiment,report,round4,round4b,round5")
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else int(time.time()) % 100000
    rng = random.Random(seed)
    work = a.keep or tempfile.mkdtemp(prefix="moerl-faults-")
    os.makedirs(work, exist_ok=True)
    m = Moerl(os.path.abspath(a.moerl), os.environ.get("MPIEXEC", "mpirun"))
    t = Tally()
    s = Suite(m, work, rng, a.long, t)
    only = set(a.only.split(",")) if a.only else None
    # free space as a share of the larger file (a rewrite needs the old and the new copy)
    disk_shares = [0.05, 0.3, 0.6, 0.9, 1.2, 1.6, 2.0, 2.5, 3.2] * 3 if a.long else [0.05, 0.6, 1.2, 2.0, 3.2]
    # each group of --only, in the order they run, with the cases it calls (--long: many more of each kind)
    groups = [
        ("kill", [lambda: s.kill(40 if a.long else 5)]),
        ("sweep", [lambda: s.sweep(12 if a.long else 2)]),
        ("disk", [lambda: s.disk(disk_shares)]),
        ("corrupt", [lambda: s.corrupt(120 if a.long else 12)]),
        ("scenario", [s.scenario]),
        ("base", [s.base]),
        ("rerun", [s.rerun]),
        ("identity", [s.identity]),
        ("writers", [lambda: s.writers(30 if a.long else 5), s.sweep_race]),
        ("input", [s.hostile, s.inputs3]),
        ("signal", [s.signals]),
        ("experiment", [s.experiment]),
        ("report", [s.reports]),
        ("round4", [s.round4]),
        ("round4b", [s.round4b]),
        ("round5", [s.round5]),
    ]
    print(f"fault suite: seed {seed} ({'long' if a.long else 'default'}), work in {work}", flush=True)
    t0 = time.time()
    try:
        s.reference()
        for group, cases in groups:
            if only is None or group in only:
                for case in cases:
                    case()
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
