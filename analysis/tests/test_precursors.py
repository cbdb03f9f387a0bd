"""The precursor lead-time table on synthetic runs whose collapse steps and flag firings are known:
small run files written here (the layout of docs/hdf5-schema.md, only what the analysis reads)."""
import os

import h5py
import numpy as np
import pytest

from analysis import precursors, report
from analysis.runs import load_sweep

STEPS = 40


def write_run(path, seed, collapse, fires, flags=True):
    """A run file: `collapse` = collapse step (-1: none), `fires` = {flag: [steps at which it is 1]}."""
    with h5py.File(path, "w") as f:
        f.attrs["scenario"] = f"rl.algorithm = grpo\nrun.seed = {seed}\n"
        f.attrs["status"] = "collapsed" if collapse >= 0 else "complete"
        f.attrs["collapse_step"] = np.int64(collapse)
        n = collapse + 1 if collapse >= 0 else STEPS  # a collapsed run stops at its collapse step
        if fires and collapse >= 0:
            n = max([n] + [s + 1 for v in fires.values() for s in v])  # continue_after_collapse
        m = f.create_group("metrics")
        m["reward_mean"] = np.linspace(0.5, 0.1 if collapse >= 0 else 0.9, n)
        m["finite"] = np.ones(n)
        m["rc_ess_seq"] = np.full(n, 0.9)
        m["rc_bucket_abs_log_ratio"] = np.tile([np.nan, 0.1, 0.2, 0.05, 0.01], (n, 1))
        if flags:
            for flag in precursors.FLAGS:
                x = np.zeros(n)
                x[fires.get(flag, [])] = 1.0
                m[flag] = x


@pytest.fixture()
def synthetic_dir(tmp_path):
    d = tmp_path / "runs"
    d.mkdir()
    write_run(d / "a.h5", 0, 20, {"pre_k3_rise": [12, 18], "pre_grad_norm_drop": [25], "pre_ess_drop": [20]})
    write_run(d / "b.h5", 1, 30, {"pre_k3_rise": [26], "pre_grad_norm_drop": [10]})
    write_run(d / "c.h5", 2, -1, {"pre_k3_rise": [5]})
    write_run(d / "d.h5", 3, -1, {"pre_grad_norm_drop": [3, 4]})
    write_run(d / "e.h5", 4, 15, {}, flags=False)  # an older file without flags: left out
    return str(d)


def test_lead_times_and_false_alarms_match_the_known_firings(synthetic_dir):
    runs, _ = load_sweep(synthetic_dir)
    assert [precursors.collapse_step(r) for r in runs] == [20, 30, None, None, 15]
    rows = {r["flag"]: r for r in precursors.lead_time_table(runs)}
    assert list(rows) == precursors.FLAGS
    k3 = rows["pre_k3_rise"]
    assert (k3["collapsed_runs"], k3["detected"]) == (2, 2)
    assert sorted(k3["leads"]) == [4, 8]  # 30 − 26, 20 − 12 (the first firing counts)
    assert k3["lead_median"] == 6 and k3["lead_min"] == 4 and k3["lead_max"] == 8
    assert (k3["clean_runs"], k3["false_alarm_runs"], k3["false_alarm_rate"]) == (2, 1, 0.5)
    assert k3["firing_rate"] == pytest.approx(1 / (2 * STEPS))
    drop = rows["pre_grad_norm_drop"]
    assert drop["detected"] == 1 and drop["leads"] == [20]  # run a's firing came after its collapse
    assert drop["false_alarm_rate"] == 0.5 and drop["firing_rate"] == pytest.approx(2 / (2 * STEPS))
    ess = rows["pre_ess_drop"]
    assert ess["leads"] == [0] and ess["false_alarm_rate"] == 0.0  # firing at the collapse step: lead 0
    spike = rows["pre_entropy_spike"]
    assert spike["detected"] == 0 and np.isnan(spike["lead_median"]) and spike["false_alarm_rate"] == 0.0


def test_report_has_the_table_and_the_figure(synthetic_dir, tmp_path):
    out = tmp_path / "report"
    res = report.build(synthetic_dir, out=str(out), verbose=False, static=True)
    for f in ("precursors.md", "precursors.csv", "precursors.png", "corrections.png"):
        assert f in res["files"] and os.path.getsize(out / f) > 0
    md = (out / "precursors.md").read_text()
    assert "| pre_k3_rise | 2 | 2 | 6.0 |" in md
    page = (out / "static.html").read_text()
    assert "Collapse precursors" in page and "precursors.png" in page and "pre_grad_norm_drop" in page
    page = (out / "data" / "index.js").read_text()  # the dashboard's table
    assert '"id":"precursors"' in page and "pre_grad_norm_drop" in page
    csv = (out / "precursors.csv").read_text().splitlines()
    assert csv[0].startswith("flag,collapsed_runs,detected,lead_median")
    assert len(csv) == 1 + len(precursors.FLAGS)


def test_runs_without_flags_give_no_precursor_section(tmp_path):
    d = tmp_path / "old"
    d.mkdir()
    write_run(d / "x.h5", 0, -1, {}, flags=False)
    write_run(d / "y.h5", 1, 5, {}, flags=False)
    res = report.build(str(d), out=str(tmp_path / "r"), verbose=False)
    assert "precursors.png" not in res["files"]
