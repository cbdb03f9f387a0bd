"""The notebook loader and the package's installation: `from analysis import load_runs` gives one
row per (run, step) with the grid's keys as columns, run_summary one row per run with a documented
definition of every column; `pip install -e .` works offline from the checkout (pyproject.toml);
`moerl report` finds the package beside its binary or installed, never through a build-time
path, and says which."""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from analysis import SUMMARY_DOC, load_runs, run_summary
from analysis.runs import load_sweep
from analysis.summary import COLUMNS

from .conftest import ROOT, another_experiment, moerl_binary


def test_load_runs_is_tidy_with_the_grid_keys(sweep_dir):
    df = load_runs(sweep_dir)
    runs, _ = load_sweep(sweep_dir)
    assert len(df) == sum(r.steps for r in runs)
    assert list(df.columns[:6]) == ["source", "run", "status", "rl.algorithm", "run.seed", "step"]
    r = runs[1]
    rows = df[df.run == r.name].sort_values("step")
    assert list(rows.step) == list(range(1, r.steps + 1))
    assert set(rows["rl.algorithm"]) == {r.keys["rl.algorithm"]}
    np.testing.assert_array_equal(rows.kl_rollout_train.to_numpy(), r.metrics["kl_rollout_train"])
    assert "expert_load" not in df.columns  # [steps, L, E]: not a column


def test_run_summary_defines_every_column(sweep_dir, failing_sweep_dir):
    s = run_summary(failing_sweep_dir)
    assert list(s.columns) == ["source", "run", "status", "model.n_experts", "rl.algorithm", "run.seed"] + \
        list(SUMMARY_DOC)[3:]
    for col in SUMMARY_DOC:
        assert col in s.columns, col
    assert set(c for c, *_ in COLUMNS) <= set(SUMMARY_DOC)
    failed = s[s.status == "failed"]
    assert len(failed) == 2 and all("MoE" in e for e in failed.error) and failed.final_reward.isna().all()
    ok = run_summary(sweep_dir)
    runs, _ = load_sweep(sweep_dir)
    for r in runs:  # final reward: the mean of the last 10 steps, as index.csv has it
        row = ok[ok.run == r.name].iloc[0]
        assert row.final_reward == pytest.approx(np.mean(r.metrics["reward_mean"][-10:]))


def test_several_sources_in_one_frame(sweep_dir, tmp_path):
    a, b = tmp_path / "grid", tmp_path / "more-seeds"
    shutil.copytree(sweep_dir, a, ignore=shutil.ignore_patterns("report", "cache"))
    shutil.copytree(sweep_dir, b, ignore=shutil.ignore_patterns("report", "cache"))
    another_experiment(b)  # (unchanged copies are the same runs, counted once)
    df = load_runs([str(a), str(b)])
    assert set(df.source) == {"grid", "more-seeds"} and len(df) == 2 * len(load_runs(str(a)))


def test_docs_show_the_loader_in_three_lines():
    doc = open(os.path.join(ROOT, "docs", "sweeps.md")).read()
    block = doc.split("## Notebooks", 1)[1].split("```python", 1)[1].split("```", 1)[0].strip().splitlines()
    assert len(block) == 3 and block[0] == "from analysis import load_runs"


def test_pip_install_editable_offline(tmp_path, sweep_dir):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=120)
    p = subprocess.run([str(venv / "bin" / "pip"), "install", "--no-index", "--no-build-isolation", "-e", ROOT],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    code = ("import analysis, sys; from analysis import load_runs; df = load_runs(sys.argv[1]); "
            "print(analysis.__file__, len(df))")
    p = subprocess.run([str(venv / "bin" / "python"), "-c", code, sweep_dir], cwd=str(tmp_path), capture_output=True,
                       text=True, timeout=120, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(os.path.join(ROOT, "analysis", "__init__.py"))
    assert not os.path.exists(os.path.join(ROOT, "moerl_analysis.egg-info"))  # the checkout stays as it was


def _report(binary, sweep_dir, out, **env):
    e = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MOERL_ANALYSIS_DIR")}
    e.update(env)
    return subprocess.run([binary, "report", sweep_dir, "--quiet", "--out", str(out)], cwd="/", env=e,
                          capture_output=True, text=True, timeout=300)


def test_moerl_report_finds_its_package_and_says_which(sweep_dir, tmp_path):
    b = moerl_binary()
    if b is None:
        pytest.skip("the moerl binary is not built")
    p = _report(b, sweep_dir, tmp_path / "a")
    assert p.returncode == 0, p.stderr
    assert f"analysis package: {ROOT}/analysis (beside the binary" in p.stderr
    # an install prefix: bin/moerl and share/moerl/analysis (cmake --install)
    prefix = tmp_path / "prefix"
    (prefix / "bin").mkdir(parents=True)
    shutil.copy(b, prefix / "bin" / "moerl")
    shutil.copytree(os.path.join(ROOT, "analysis"), prefix / "share" / "moerl" / "analysis",
                    ignore=shutil.ignore_patterns("tests", "__pycache__"))
    p = _report(str(prefix / "bin" / "moerl"), sweep_dir, tmp_path / "b")
    assert p.returncode == 0, p.stderr
    assert f"{prefix}/share/moerl/analysis (installed with the binary" in p.stderr
    # a moved binary with no package near it: the installed one (here made importable), never the
    # source tree it was built from
    lone = tmp_path / "lone"
    lone.mkdir()
    shutil.copy(b, lone / "moerl")
    p = _report(str(lone / "moerl"), sweep_dir, tmp_path / "c", MOERL_PYTHON=sys.executable)
    installed = subprocess.run([sys.executable, "-c", "import analysis.report"], cwd="/", capture_output=True,
                               env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"}).returncode == 0
    if installed:
        assert p.returncode == 0 and "the one installed for" in p.stderr
    else:
        assert p.returncode != 0 and "no analysis package" in p.stderr and ROOT not in p.stderr
    p = _report(str(lone / "moerl"), sweep_dir, tmp_path / "d", MOERL_PYTHON=sys.executable, PYTHONPATH=ROOT)
    assert p.returncode == 0, p.stderr
    assert "analysis package: the one installed for" in p.stderr
