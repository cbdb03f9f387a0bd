"""analysis/bench/runs_per_hour.py on one binary against itself, in its quick form (2 RL steps, a
5-step warm-up, 16 evaluation prompts): the two sweeps must be reported identical, and a changed
value in one run's series must be named (run, metric, step). Speed is never asserted."""
import os
import shutil
import subprocess
import sys

import h5py
import pytest

from .conftest import ROOT, moerl_binary

sys.path.insert(0, os.path.join(ROOT, "analysis", "bench"))
import runs_per_hour  # noqa: E402

QUICK = ["--steps", "2", "--set", "sft.steps=5", "--set", "rl.eval_prompts=16",
         "--mpirun", "mpirun --oversubscribe"]


@pytest.fixture(scope="module")
def kept(tmp_path_factory):
    b = moerl_binary()
    if b is None:
        pytest.skip("the moerl binary is not built (cmake --build build)")
    if shutil.which("mpirun") is None:
        pytest.skip("no mpirun on PATH")
    out = tmp_path_factory.mktemp("rph")
    p = subprocess.run([sys.executable, os.path.join(ROOT, "analysis", "bench", "runs_per_hour.py"),
                        "--baseline", b, "--candidate", b, "--keep", str(out)] + QUICK,
                       cwd=ROOT, capture_output=True, text=True, timeout=240)
    return p, out


def test_same_binary_is_identical(kept):
    p, _ = kept
    assert p.returncode == 0, p.stdout + p.stderr
    assert "identical: index and every run's metric series are bit-identical" in p.stdout
    assert "runs/h" in p.stdout and "load before" in p.stdout
    for binary in ("baseline", "candidate"):
        assert f"   1  {binary}" in p.stdout, p.stdout


def test_a_changed_value_is_named(kept):
    p, out = kept
    assert p.returncode == 0, p.stdout + p.stderr
    base, cand = str(out / "pair1-baseline"), str(out / "pair1-candidate")
    assert runs_per_hour.index_diff(base, cand) is None
    assert runs_per_hour.runs_diff(base, cand, set()) is None
    with h5py.File(os.path.join(cand, "r3-seed1.h5"), "r+") as f:
        d = f["metrics/reward_mean"]
        v = d[()]
        v[1] = v[1] + 1e-12 if v[1] != 0 else 1e-300
        d[...] = v
    d = runs_per_hour.runs_diff(base, cand, set())
    assert d is not None and "run r3-seed1, metric reward_mean, step 1" in d, d
    # an index column: named, unless --index-ignore leaves it out
    path = os.path.join(cand, "index.csv")
    with open(path) as f:
        rows = f.read().splitlines()
    head = rows[0].split(",")
    cells = rows[2].split(",")  # the second run
    cells[head.index("final_eval")] = "0.123"
    rows[2] = ",".join(cells)
    with open(path, "w") as f:
        f.write("\n".join(rows) + "\n")
    d = runs_per_hour.index_diff(base, cand)
    assert d is not None and f"index.csv: run {cells[head.index('id')]}, column final_eval" in d, d
    assert runs_per_hour.index_diff(base, cand, ["final_eval"]) is None


def test_a_failing_sweep_exits_2(tmp_path):
    p = subprocess.run([sys.executable, os.path.join(ROOT, "analysis", "bench", "runs_per_hour.py"),
                        "--baseline", "/bin/false", "--candidate", "/bin/false"],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "lacks --out" in p.stderr
