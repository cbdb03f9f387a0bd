"""Issue 51, round 4: a run file is checked against the run its index row plans (its stored
scenario, not the plan's keys, is what a run is), and infinite values are counted, never averaged
away. Unit tests of the helpers; the fault suite (group round4b) tries them on real sweeps."""
from collections import OrderedDict

import numpy as np

from analysis.runs import Run, plan_mismatch, same_value
from analysis.summary import _nanmean, group_rows, nonfinite
from analysis.stats import fmt


def _run(scenario, keys=None, hash_="h1", metrics=None):
    r = Run("/x/r.h5")
    r.attrs = {"scenario": "\n".join(f"{k} = {v}" for k, v in scenario.items()), "scenario_hash": hash_,
               "status": "complete"}
    r.scenario = OrderedDict(scenario)
    r.keys = OrderedDict(keys or {})
    r.metrics = metrics or {}
    r.status = "complete"
    return r


def test_a_file_of_another_run_is_named_with_the_keys():
    r = _run({"rl.algorithm": "r3", "optim.lr": "0.0001", "run.seed": "0"})
    row = {"id": "grpo-seed0", "keys": {"rl.algorithm": "grpo", "optim.lr": "1e-4", "run.seed": "0"},
           "scenario_hash": "h1"}
    assert plan_mismatch(r, row) == "rl.algorithm: grpo → r3"  # 1e-4 is 0.0001: not a difference
    # a key the sweep does not vary: only the planned hash can tell
    row = {"id": "r3-seed0", "keys": {"rl.algorithm": "r3"}, "scenario_hash": "h0"}
    assert plan_mismatch(r, row).startswith("scenario_hash: h0 → h1")
    assert plan_mismatch(r, dict(row, scenario_hash="h1")) == ""
    assert plan_mismatch(_run({}), row) == ""  # an older file without its scenario cannot be checked
    assert same_value("1e-4", "0.0001") and not same_value("grpo", "r3")


def test_values_are_read_from_the_stored_scenario():
    # the stored scenario decides; the grid's spelling is kept where the two agree
    r = _run({"rl.algorithm": "r3", "optim.lr": "0.0001"}, keys={"rl.algorithm": "grpo", "optim.lr": "1e-4",
                                                                 "variant": "ctl"})
    assert r.value("rl.algorithm") == "r3"
    assert r.value("optim.lr") == "1e-4"
    assert r.value("variant") == "ctl"  # not a scenario key: the index's


def test_infinite_values_are_counted_not_averaged_away():
    kl = np.array([1e308, np.inf, 0.0, np.nan])
    assert _nanmean(kl) == np.inf
    assert _nanmean(np.array([1e308, 1e308])) == 1e308  # no overflow into a false inf
    assert np.isnan(_nanmean(np.array([np.inf, -np.inf])))
    r = _run({"rl.algorithm": "grpo"}, metrics={"kl_rollout_train": kl, "reward_mean": np.zeros(4)})
    assert nonfinite(r) == ["kl_rollout_train: inf in 1 of 3 steps"]
    ok = _run({"rl.algorithm": "grpo"}, metrics={"kl_rollout_train": np.zeros(4), "reward_mean": np.zeros(4)})
    row = group_rows({"grpo": [r, ok]})[0]
    assert row["kl"][0] == np.inf  # the group's mean too, not the finite run's
    assert fmt(*row["kl"]) == "inf" and fmt(-np.inf, np.nan) == "-inf" and fmt(np.nan, np.nan) == "–"
