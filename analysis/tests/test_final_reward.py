"""One meaning of "final reward" — the mean of reward_mean over the last 10 steps that set it
(sim/io/results.h final_reward_of, analysis/runs.py final_reward_of) — in index.csv, the sweep's
table and `moerl inspect DIR`, `moerl inspect RUN.h5`, the end-of-run line of `moerl run`
(also when --resume finds the run finished), summary.csv and the dashboard; and the index shows
a running sweep's progress."""
import csv
import json
import os
import re
import shutil
import subprocess
import time

import h5py
import numpy as np
import pytest

from analysis import report, run_summary
from analysis.runs import final_reward_of

from .conftest import ROOT, TINY_GRID, moerl_binary


def _binary():
    b = moerl_binary()
    if b is None:
        pytest.skip("the moerl binary is not built")
    return b


def test_final_reward_is_the_mean_of_the_last_ten_steps():
    x = np.arange(1.0, 16.0)
    assert final_reward_of(x) == np.mean(x[-10:])
    x[-1] = np.nan  # a step that did not set it is skipped, not counted
    assert final_reward_of(x) == np.mean(np.arange(5.0, 15.0))
    assert final_reward_of([0.5, 0.7]) == 0.6 and np.isnan(final_reward_of([np.nan]))


@pytest.fixture(scope="module")
def long_sweep(tmp_path_factory):
    """The tiny grid with 14 steps (more than 10), one seed."""
    d = tmp_path_factory.mktemp("final")
    grid = d / "grid.ini"
    grid.write_text(open(TINY_GRID).read().replace("steps = 2\n", "steps = 14\n", 1).replace("seeds = 0, 1", "seeds = 0"))
    out = d / "sweep"
    p = subprocess.run([_binary(), "sweep", str(grid), "--out", str(out)], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return out, grid, p.stdout


def test_every_place_says_the_same_final_reward(long_sweep, tmp_path):
    out, grid, sweep_stdout = long_sweep
    b = _binary()
    rows = list(csv.DictReader(open(out / "index.csv")))
    summary = run_summary(str(out)).set_index("run")
    res = report.build(str(out), out=str(tmp_path / "rep"), verbose=False)
    page = json.loads(open(os.path.join(res["out"], "data", "index.js")).read()[len("window.MOERL = "):].rstrip()
                      .rstrip(";"))
    page_runs = {r["id"]: r for r in page["runs"]}
    inspect_dir = subprocess.run([b, "inspect", str(out)], capture_output=True, text=True, timeout=60).stdout
    for row in rows:
        with h5py.File(out / row["file"], "r") as f:
            r = f["metrics/reward_mean"][()]
        assert len(r) == 14
        want = float(np.mean(r[-10:]))
        assert float(row["final_reward"]) == pytest.approx(want, abs=1e-8), "index.csv"
        assert summary.loc[row["id"], "final_reward"] == pytest.approx(want), "run_summary"
        assert page_runs[row["id"]]["final_reward"] == pytest.approx(want, abs=1e-4), "the dashboard"
        three = f"{want:.3f}"
        assert re.search(rf"^{re.escape(row['id'])}\s.*\s{three}\s", inspect_dir, re.M), "inspect DIR"
        one = subprocess.run([b, "inspect", str(out / row["file"])], capture_output=True, text=True, timeout=60).stdout
        assert f" {three} " in one.splitlines()[1], "inspect RUN.h5"
        assert f"reward {three}" in sweep_stdout, "the sweep's table"
    # summary.csv: the group's mean over its (one) run
    srows = {r["group"]: r for r in csv.DictReader(open(os.path.join(res["out"], "summary.csv")))}
    for row in rows:
        assert float(srows[row["rl.algorithm"]]["final_reward"]) == pytest.approx(float(row["final_reward"]), rel=1e-5)
    # the end-of-run line, and the same line when --resume finds the run finished
    scen = tmp_path / "one.ini"
    text = open(grid).read()
    scen.write_text(text[: text.index("[sweep]")])
    run = tmp_path / "one.h5"
    lines = []
    for extra in ([], ["--resume"]):
        p = subprocess.run([b, "run", str(scen), "--out", str(run), "--cache", str(tmp_path / "cache"), *extra],
                           capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
        assert p.returncode == 0, p.stdout + p.stderr
        lines.append(re.search(r"final reward (\S+) \(last 10 steps\)", p.stdout).group(1))
    with h5py.File(run, "r") as f:
        assert lines == [f"{np.mean(f['metrics/reward_mean'][()][-10:]):.3f}"] * 2


def test_the_index_shows_a_running_sweeps_progress(tmp_path):
    b = _binary()
    grid = tmp_path / "grid.ini"
    # long enough to be seen running across two of its results file's writes (every 2 s)
    grid.write_text(open(TINY_GRID).read().replace("steps = 2\n", "steps = 4000\n", 1).replace("seeds = 0, 1", "seeds = 0")
                    .replace("rl.algorithm = grpo, r3", "rl.algorithm = grpo"))
    out = tmp_path / "sweep"
    proc = subprocess.Popen([b, "sweep", str(grid), "--out", str(out), "--quiet"], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    seen = []
    try:
        t0 = time.time()
        while time.time() - t0 < 120 and proc.poll() is None:
            try:
                rows = list(csv.DictReader(open(out / "index.csv")))
            except (OSError, csv.Error):
                rows = []
            seen += [(r["status"], int(r["steps"])) for r in rows if r["status"] == "running" and int(r["steps"]) > 0]
            if len({s for _, s in seen}) >= 2:  # two different step counts while it ran
                break
            time.sleep(0.2)
        inspect = subprocess.run([b, "inspect", str(out)], capture_output=True, text=True, timeout=60).stdout
    finally:
        proc.kill()
        proc.wait()
    assert len({s for _, s in seen}) >= 2, f"index.csv never showed the running run's steps grow: {seen}"
    assert re.search(r"running\s+[1-9]\d*\s", inspect), inspect
