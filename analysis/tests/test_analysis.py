"""The analysis package on real sweeps made by the moerl binary (tests/sweep/tiny-grid.ini): the
report's files, the numbers of its table against the HDF5 files read directly, grouping, failed
runs, single run files, the command line, and the statistics helpers."""
import csv
import os
import re
import shutil
import subprocess
import sys

import h5py
import numpy as np
import pytest

from analysis import report
from analysis.runs import AnalysisError, expert_shares, group_runs, load_sweep, parse_scenario, resolve_keys
from analysis.stats import band, mean_ci, smooth, t95

from .conftest import ROOT

PNG = b"\x89PNG\r\n\x1a\n"


def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def test_mean_ci_is_the_student_t_interval():
    m, ci = mean_ci([1.0, 2.0, 3.0, float("nan")])  # NaN left out: n = 3, s = 1
    assert m == 2.0
    assert ci == pytest.approx(4.302653 / np.sqrt(3), rel=1e-6)
    assert np.isnan(mean_ci([5.0])[1])
    # SciPy's quantiles at every dof, not the nearest of a table: t_{0.975, 11} and t_{0.975, 100}
    assert t95(11) == pytest.approx(2.200985, rel=1e-6) and t95(100) == pytest.approx(1.983972, rel=1e-6)
    assert np.isnan(t95(0))


def test_no_hand_written_quantile_tables_are_left():
    import analysis.stats as st
    assert not hasattr(st, "T95")
    src = open(st.__file__).read() + open(os.path.join(ROOT, "analysis", "reproductions.py")).read()
    assert "12.706" not in src and "2.228" not in src


def test_band_is_mean_ci_per_step_with_missing_values():
    ys = np.array([[1.0, 2.0, 4.0], [3.0, np.nan, 6.0], [5.0, 4.0, np.nan]])
    mu, ci = band(ys)
    for j in range(3):
        m, c = mean_ci(ys[:, j])
        assert mu[j] == pytest.approx(m)
        assert ci[j] == pytest.approx(c)
    assert np.isnan(band(ys[:1])[1]).all()  # one run: no band
    assert np.isnan(smooth(np.arange(12.0), 10)[:9]).all()
    assert smooth(np.arange(12.0), 10)[9:] == pytest.approx([4.5, 5.5, 6.5])


def test_parse_scenario_reads_effective_text():
    s = parse_scenario("# effective scenario (source: x)\nmodel.d_model = 32\nrl.algorithm = r3\n\nprofile.a.base = fp32-ref\n")
    assert s == {"model.d_model": "32", "rl.algorithm": "r3", "profile.a.base": "fp32-ref"}


@pytest.fixture(scope="module")
def sweep_report(sweep_dir):
    return report.build(sweep_dir, verbose=False, static=True)


def test_sweep_report_has_every_part(sweep_dir, sweep_report):
    res = sweep_report
    out = os.path.join(sweep_dir, "report")
    assert res["out"] == out
    assert list(res["groups"]) == ["grpo", "r3"]  # grouped by the swept key, seeds pooled
    for name in ["summary.md", "summary.csv", "index.html", "static.html", "data/index.js", "uPlot.iife.min.js",
                 "reward.png", "stability.png", "load-grpo.png", "load-r3.png", "ratios-grpo.png", "ratios-r3.png"]:
        assert os.path.getsize(os.path.join(out, name)) > 0, name
        if name.endswith(".png"):
            with open(os.path.join(out, name), "rb") as f:
                assert f.read(8) == PNG, name
    html = open(os.path.join(out, "static.html")).read()
    for name in res["files"]:
        if name.endswith(".png"):
            assert f"src='{name}'" in html
    assert "<td>grpo</td>" in html and "<td>r3</td>" in html
    page = open(os.path.join(out, "index.html")).read()  # the dashboard: no network, everything beside it
    assert "http://" not in page and "https://" not in page
    for src in re.findall(r'(?:src|href)="([^"]+)"', page):
        assert os.path.exists(os.path.join(out, src)), src
    md = open(os.path.join(out, "summary.md")).read()
    assert md.count("\n| grpo |") == 1 and md.count("\n| r3 |") == 1


def test_summary_numbers_match_the_run_files(sweep_dir, sweep_report):
    rows = {r["group"]: r for r in read_csv(os.path.join(sweep_dir, "report", "summary.csv"))}
    assert set(rows) == {"grpo", "r3"}
    for algo in ("grpo", "r3"):
        kl, flips, rewards = [], [], []
        for seed in (0, 1):
            with h5py.File(os.path.join(sweep_dir, f"{algo}-seed{seed}.h5"), "r") as f:
                assert f.attrs["status"] == "complete"
                kl.append(np.mean(f["metrics/kl_rollout_train"][()]))
                flips.append(100 * np.mean(f["metrics/flip_rate_mean"][()]))
                rewards.append(np.mean(f["metrics/reward_mean"][()][-10:]))
        row = rows[algo]
        assert int(row["runs"]) == 2 and int(row["ok"]) == 2 and int(row["failed"]) == 0
        assert int(row["steps"]) == 2
        m, ci = mean_ci(kl)
        assert float(row["kl"]) == pytest.approx(m, rel=1e-5)
        assert float(row["kl_ci95"]) == pytest.approx(ci, rel=1e-5)
        assert float(row["flip_pct"]) == pytest.approx(mean_ci(flips)[0], rel=1e-5)
        assert float(row["final_reward"] or "nan") == pytest.approx(mean_ci(rewards)[0], rel=1e-5, nan_ok=True)


def test_expert_load_shares_are_relative_to_an_even_split(sweep_dir):
    runs, info = load_sweep(sweep_dir)
    share = expert_shares(runs[0])
    assert share.shape == (2, 2, 4)  # [steps, L, E] of the tiny MoE
    np.testing.assert_allclose(share.mean(axis=2), 1.0, rtol=1e-12)  # each layer's shares average to 1
    with h5py.File(runs[0].path, "r") as f:
        load = f["metrics/expert_load"][()]
    assert load.sum(axis=2).min() > 0


def test_group_by_any_scenario_key(sweep_dir):
    runs, info = load_sweep(sweep_dir)
    assert list(group_runs(runs, ["run.seed"])) == ["seed=0", "seed=1"]  # numbers keep their key
    assert resolve_keys(["algorithm"], runs) == ["rl.algorithm"]
    assert list(group_runs(runs, resolve_keys(["algorithm", "seed"], runs))) == [
        "algorithm=grpo, seed=0", "algorithm=r3, seed=0", "algorithm=grpo, seed=1", "algorithm=r3, seed=1"]
    with pytest.raises(AnalysisError):
        resolve_keys(["no_such_key"], runs)
    res = report.build(sweep_dir, group_by=["engines.rollout"], out=os.path.join(sweep_dir, "by-engine"),
                       verbose=False)
    assert list(res["groups"]) == ["fp8-rollout"] and len(res["groups"]["fp8-rollout"]) == 4


def test_failed_runs_are_listed_and_do_not_break_the_report(failing_sweep_dir):
    res = report.build(failing_sweep_dir, verbose=False)
    assert len(res["groups"]) == 4  # n_experts × algorithm, in the grid's key order
    rows = {r["group"]: r for r in read_csv(os.path.join(res["out"], "summary.csv"))}
    assert rows["n_experts=0, algorithm=r3"]["failed"] == "2"
    assert rows["n_experts=0, algorithm=r3"]["ok"] == "0"
    assert rows["n_experts=0, algorithm=grpo"]["ok"] == "2"
    html = open(os.path.join(res["out"], "data", "index.js")).read()
    assert "needs an MoE model" in html
    # the dense twin has no experts: no heatmap for its groups
    assert not [f for f in res["files"] if f.startswith("load-") and "n_experts-0" in f]


def test_a_single_run_file_gets_a_report_beside_it(sweep_dir, tmp_path):
    src = os.path.join(sweep_dir, "r3-seed1.h5")
    run = tmp_path / "r3-seed1.h5"
    shutil.copy(src, run)
    res = report.build(str(run), verbose=False)
    assert res["out"] == str(tmp_path / "r3-seed1-report")
    assert list(res["groups"]) == ["r3-seed1"]
    assert os.path.exists(tmp_path / "r3-seed1-report" / "index.html")
    assert not os.path.exists(tmp_path / "r3-seed1-report" / "ratios-r3-seed1.png")  # figures: --static
    report.build(str(run), verbose=False, static=True)
    assert os.path.exists(tmp_path / "r3-seed1-report" / "ratios-r3-seed1.png")


def test_command_line_from_the_project_root(sweep_dir, tmp_path):
    out = tmp_path / "cli-report"
    p = subprocess.run([sys.executable, "-m", "analysis", sweep_dir, "--group-by", "algorithm", "--out", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "| grpo |" in p.stdout and os.path.exists(out / "index.html")
    # the older script keeps its command line, on the sweep's <variant>-seed<k>.h5 files
    d = tmp_path / "repro"
    d.mkdir()
    for name in os.listdir(sweep_dir):
        if name.endswith(".h5") and not name.endswith(".ckpt.h5"):
            shutil.copy(os.path.join(sweep_dir, name), d / name)
    p = subprocess.run([sys.executable, os.path.join(ROOT, "analysis", "reproductions.py"), str(d)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert os.path.exists(d / "report" / "summary.md") and os.path.exists(d / "report" / "curves.png")
