"""analysis.collapse on synthetic sweep directories whose statuses, evaluations and mismatch are
known: Wilson intervals, pairing by seed against the reference, grouping by variant and dial,
pooling two directories (search seeds + fresh seeds), and the phase diagram file."""
import json
import os

import h5py
import numpy as np
import pytest

from analysis import collapse
from analysis.runs import final_reward, group_by_variant, load_pooled_runs, variant_of
from analysis.stats import wilson

PNG = b"\x89PNG\r\n\x1a\n"


def write_sweep(d, runs, dial="profile.x.router_noise"):
    """runs: dicts with variant, seed, dial, status, base, final, flip, k3 (first, last)."""
    os.makedirs(d, exist_ok=True)
    rows = []
    for i, r in enumerate(runs):
        name = f"{r['variant']}_{r['dial']}-seed{r['seed']}"
        steps = 20
        with h5py.File(os.path.join(d, name + ".h5"), "w") as f:
            f.attrs["status"] = r["status"]
            # the variant's own key, as a variant section sets one (runs of one scenario are one run)
            f.attrs["scenario"] = (f"run.seed = {r['seed']}\n{dial} = {r['dial']}\nrl.algorithm = grpo\n"
                                   f"engines.rollout = {r['variant']}-rollout\n")
            m = f.create_group("metrics")
            ev = np.full(steps, np.nan)
            ev[9], ev[19] = (r["base"] + r["final"]) / 2, r["final"]
            base = np.full(steps, np.nan)
            base[0] = r["base"]
            m["eval_accuracy"] = ev
            m["eval_accuracy_base"] = base
            m["reward_mean"] = np.linspace(0.1, r.get("reward", 0.5), steps)
            m["flip_rate_mean"] = np.full(steps, r["flip"] / 100)
            m["kl_rollout_train"] = np.linspace(r["k3"][0], r["k3"][1], steps)
        rows.append({"index": i, "id": name, "file": name + ".h5", "status": r["status"],
                     "keys": {"variant": r["variant"], dial: str(r["dial"]), "run.seed": str(r["seed"])}})
    with open(os.path.join(d, "index.json"), "w") as f:
        json.dump({"grid": "g.ini", "swept_keys": ["variant", dial, "run.seed"], "runs": rows}, f)


def run(variant, seed, dial, status="complete", base=0.5, final=0.6, flip=5.0, k3=(1e-3, 1e-3), reward=0.5):
    return dict(variant=variant, seed=seed, dial=dial, status=status, base=base, final=final, flip=flip, k3=k3,
                reward=reward)


def test_wilson_interval_matches_the_formula_and_its_edges():
    p, lo, hi = wilson(3, 10)
    assert p == 0.3
    assert lo == pytest.approx(0.1078, abs=1e-3) and hi == pytest.approx(0.6032, abs=1e-3)
    assert wilson(0, 10)[1] == 0.0 and wilson(0, 10)[2] == pytest.approx(0.2775, abs=1e-3)
    assert wilson(10, 10)[2] == 1.0
    assert np.isnan(wilson(0, 0)[0])


def test_rates_pairing_and_pooling(tmp_path):
    a, b = tmp_path / "search", tmp_path / "fresh"
    # grpo collapses on 3 of 4 seeds and ends 0.2 below the control of its seed; r3 0.01 above
    write_sweep(a, [run("control", s, 0.1, final=0.6 + 0.01 * s) for s in (0, 1)] +
                   [run("grpo", s, 0.1, status="collapsed" if s else "complete", final=0.4 + 0.01 * s, flip=20,
                        k3=(1e-3, 4e-3)) for s in (0, 1)] +
                   [run("r3", s, 0.1, final=0.61 + 0.01 * s, flip=19) for s in (0, 1)])
    write_sweep(b, [run("control", s, 0.1, final=0.6 + 0.01 * s) for s in (100, 101)] +
                   [run("grpo", s, 0.1, status="collapsed", final=0.4 + 0.01 * s, flip=20, k3=(1e-3, 4e-3))
                    for s in (100, 101)])
    runs = load_pooled_runs([str(a), str(b)])
    rows = {(x["variant"], x["dial"]): x for x in collapse.rows(group_by_variant(runs, "profile.x.router_noise"))}
    g = rows[("grpo", "0.1")]
    assert (g["runs"], g["collapsed"]) == (4, 3)
    assert (g["rate_lo"], g["rate_hi"]) == pytest.approx(wilson(3, 4)[1:])
    assert g["pairs"] == 4 and g["vs_ref"][0] == pytest.approx(-0.2)
    assert g["gain"][0] == pytest.approx(np.mean([0.4 + 0.01 * s - 0.5 for s in (0, 1, 100, 101)]))
    assert g["flip"][0] == pytest.approx(20) and g["k3_growth"][0] == pytest.approx(4.0, rel=0.2)
    r3 = rows[("r3", "0.1")]
    assert r3["pairs"] == 2 and r3["vs_ref"][0] == pytest.approx(0.01)
    c = rows[("control", "0.1")]
    assert c["pairs"] == 0 and c["rate"] == 0.0


def test_cli_writes_table_csv_and_phase_diagram(tmp_path):
    d = tmp_path / "phase"
    write_sweep(d, [run(v, s, x, status="collapsed" if (v == "grpo" and x == 1.0) else "complete",
                        flip=5 + 40 * x) for v in ("control", "grpo", "r3") for x in (0.0, 1.0) for s in (0, 1, 2)])
    collapse.main([str(d), "--dial", "profile.x.router_noise"])
    out = d / "report"
    md = (out / "collapse.md").read_text()
    assert "| grpo | 1.0 | 3 | 3/3 = 1.00" in md and "| r3 | 1.0 | 3 | 0/3 = 0.00" in md
    lines = (out / "collapse.csv").read_text().splitlines()
    assert lines[0].startswith("variant,dial,runs,collapsed") and len(lines) == 7
    assert (out / "phase.png").read_bytes()[:8] == PNG
    with pytest.raises(SystemExit):
        collapse.main([str(tmp_path / "empty")])


def test_report_has_the_collapse_table_for_a_grid_with_a_control(tmp_path):
    from analysis import report
    d = tmp_path / "grid"
    write_sweep(d, [run(v, s, 0.0, final=0.6 if v == "control" else 0.5) for v in ("control", "grpo") for s in (0, 1)])
    res = report.build(str(d), verbose=False, static=True)
    assert "collapse.md" in res["files"] and "collapse.csv" in res["files"]
    for page in ("static.html", "data/index.js"):  # the static page and the dashboard's table
        text = (d / "report" / page).read_text()
        assert "Collapse and accuracy against the control" in text and "-0.100" in text, page


def test_curves_draw_every_run_and_refuse_unknown_variants(tmp_path):
    d = tmp_path / "grid"
    write_sweep(d, [run(v, s, 0.0, status="collapsed" if (v == "grpo" and s == 0) else "complete")
                    for v in ("control", "grpo") for s in (0, 1)])
    with h5py.File(d / "grpo_0.0-seed0.h5", "a") as f:
        f.attrs["collapse_step"] = 12
        f["metrics"]["truncated_frac"] = np.linspace(0, 1, 20)
    collapse.main([str(d), "--curves", "grpo,control"])
    assert (d / "report" / "curves.png").read_bytes()[:8] == PNG
    # the trailing mean the collapse rule reads: shorter windows at the start, then 10 steps
    y = collapse._trailing10(np.arange(12, dtype=float))
    assert y[0] == 0 and y[3] == pytest.approx(1.5) and y[11] == pytest.approx(np.mean(np.arange(2, 12)))
    with pytest.raises(SystemExit, match="none of these variants"):
        collapse.main([str(d), "--curves", "dense"])


def test_outcome_reward_pairs_the_final_10_step_reward(tmp_path):
    d = tmp_path / "grid"
    # every run's held-out accuracy ends at 0, so only the reward tells grpo from the control
    write_sweep(d, [run(v, s, 0.0, final=0.0, reward=0.6 if v == "control" else 0.2)
                    for v in ("control", "grpo") for s in (0, 1)])
    runs = load_pooled_runs([str(d)])
    eval_rows = {x["variant"]: x for x in collapse.rows(group_by_variant(runs))}
    rew_rows = {x["variant"]: x for x in collapse.rows(group_by_variant(runs), outcome="reward")}
    assert eval_rows["grpo"]["vs_ref"][0] == pytest.approx(0.0)
    want = np.mean([final_reward(r) for r in runs if variant_of(r) == "grpo"]) - \
        np.mean([final_reward(r) for r in runs if variant_of(r) == "control"])
    assert want < -0.2 and rew_rows["grpo"]["vs_ref"][0] == pytest.approx(want)
    collapse.main([str(d), "--outcome", "reward"])
    md = (d / "report" / "collapse.md").read_text()
    assert "final reward − control (paired)" in md
    assert (d / "report" / "collapse.csv").read_text().splitlines()[1].endswith(",reward")
