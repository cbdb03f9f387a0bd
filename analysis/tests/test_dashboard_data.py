"""The dashboard's data without a browser (the browser test: tests/dashboard/): binning of long
runs (shared bins, max for maxima and flags so a burst stays), every per-step metric listed, the
scenario diff against the sweep's base, and several sweeps in one report labelled by source."""
import json
import os
import shutil

import numpy as np

from analysis import dashboard, report
from analysis.runs import load_sources

from .conftest import another_experiment


def _data(out):
    text = open(os.path.join(out, "data", "index.js")).read()
    return json.loads(text[len("window.MOERL = "):].rstrip().rstrip(";"))


def test_binning_keeps_bursts_and_shares_bins():
    assert dashboard.bin_width(500) == 1 and dashboard.bin_width(501) == 2 and dashboard.bin_width(3000) == 6
    y = np.zeros(3000)
    y[1234] = 50.0  # a one-step burst
    assert dashboard.bin_series(y, 6, "max").max() == 50.0
    assert dashboard.bin_series(y, 6, "mean").max() == np.float64(50.0 / 6)
    short = dashboard.bin_series(np.arange(10.0), 6)
    np.testing.assert_allclose(short, [2.5, 7.5])  # the last bin holds the steps there are
    assert dashboard._how("grad_norm_max") == "max" and dashboard._how("pre_k3_rise") == "max"
    assert dashboard._how("response_length_min") == "min" and dashboard._how("entropy") == "mean"


def test_the_same_runs_twice_are_counted_once(sweep_dir, tmp_path, capsys):
    a, b = tmp_path / "grid", tmp_path / "copy"
    for d in (a, b):
        shutil.copytree(sweep_dir, d, ignore=shutil.ignore_patterns("report", "cache"))
    for paths in ([str(a), str(a) + "/"], [str(a), str(b)]):
        runs, info = load_sources(paths)
        assert len(runs) == 4 and len(info["duplicates"]) == 4
        assert "counted once" in capsys.readouterr().err
    res = report.build([str(a), str(b)], out=str(tmp_path / "rep"), verbose=False)
    md = open(os.path.join(res["out"], "summary.md")).read()
    assert "## Duplicate runs (counted once)" in md and str(b / "grpo-seed0.h5") in md


def test_metrics_diff_and_sources(sweep_dir, tmp_path):
    a, b = tmp_path / "grid", tmp_path / "more"
    for d in (a, b):
        shutil.copytree(sweep_dir, d, ignore=shutil.ignore_patterns("report", "cache"))
    another_experiment(b)
    res = report.build([str(a), str(b)], out=str(tmp_path / "rep"), verbose=False, static=True)
    d = _data(res["out"])
    assert [s["label"] for s in d["sources"]] == ["grid", "more"]
    assert d["group_keys"] == ["source", "rl.algorithm"]
    assert list(res["groups"]) == ["source=grid, algorithm=grpo", "source=grid, algorithm=r3",
                                   "source=more, algorithm=grpo", "source=more, algorithm=r3"]
    assert {r["source"] for r in d["runs"]} == {"grid", "more"} and len(d["runs"]) == 8
    runs, _ = load_sources([str(a)])
    scalar = {k for r in runs for k, v in r.metrics.items() if v.ndim == 1}
    assert scalar <= {m["name"] for m in d["metrics"]} | {k for k in scalar if not any(
        np.isfinite(r.metrics[k]).any() for r in runs if k in r.metrics)}
    r3 = next(r for r in d["runs"] if r["id"] == "r3-seed1")
    assert ["rl.algorithm", "grpo", "r3"] in r3["diff"] and ["run.seed", "0", "1"] in r3["diff"]
    assert next(r for r in d["runs"] if r["id"] == "grpo-seed0")["diff"] == []
    assert all(r["load"] for r in d["runs"])  # MoE: a heatmap per run
    page = open(os.path.join(res["out"], "static.html")).read()
    assert "<th>source</th>" in page and str(a) in page and str(b) in page
