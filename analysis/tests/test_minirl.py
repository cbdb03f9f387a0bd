"""analysis.minirl on synthetic grids whose scores, collapses, KL and entropy are known: each claim's
mark under its rule (agrees, disagrees, not separated, not run), runs placed by their mini-batch
count, only seeds complete for every arm of an N, the files it writes."""
import json
import os

import h5py
import numpy as np
import pytest

from analysis import minirl
from analysis.cli import AnalysisError

STEPS = 30
SEEDS = tuple(range(780, 790))


def write_grid(d, runs):
    """runs: dicts with variant, seed, n (rl.minibatches), final (eval_final; base 0.5), collapse_step,
    kl, entropy (first, last)."""
    os.makedirs(d, exist_ok=True)
    rows = []
    for i, r in enumerate(runs):
        name = f"{r['variant']}_{r['n']}-seed{r['seed']}"
        collapsed = r.get("collapse_step", -1) >= 0
        with h5py.File(os.path.join(d, name + ".h5"), "w") as f:
            f.attrs["status"] = "collapsed" if collapsed else "complete"
            f.attrs["collapse_step"] = r.get("collapse_step", -1)
            f.attrs["scenario"] = f"run.seed = {r['seed']}\nrl.minibatches = {r['n']}\nrl.collapse_frac = 0.5\n"
            m = f.create_group("metrics")
            ev, b = np.full(STEPS, np.nan), np.full(STEPS, np.nan)
            ev[-1], b[0] = r["final"], 0.5
            m["eval_final"], m["eval_final_base"] = ev, b
            reward = np.full(STEPS, 0.6)
            if collapsed:  # falls and stays: a terminal collapse
                reward[r["collapse_step"]:] = 0.05
            m["reward_mean"] = reward
            m["entropy"] = np.linspace(*r.get("entropy", (0.3, 0.3)), STEPS)
            m["kl_rollout_train"] = np.full(STEPS, r.get("kl", 1e-3))
            m["staleness_kl"] = np.full(STEPS, 0.0 if r["n"] == 1 else 1e-3 * r["n"])
            m["clip_frac"] = np.full(STEPS, 0.01)
            m["flip_rate_mean"] = np.full(STEPS, 0.35)
        rows.append({"index": i, "id": name, "file": name + ".h5", "status": "collapsed" if collapsed else "complete",
                     "keys": {"variant": r["variant"], "rl.minibatches": str(r["n"]), "run.seed": str(r["seed"])}})
    with open(os.path.join(d, "index.json"), "w") as f:
        json.dump({"grid": "g.ini", "swept_keys": ["variant", "run.seed"], "runs": rows}, f)


def jitter(seed):
    return 0.002 * ((seed * 7) % 5 - 2)


def on_policy(scores, collapse=(), kl=None, seeds=SEEDS):
    """Every on-policy arm on seeds; scores: arm -> final score (jittered by seed, the same for every
    arm, so paired differences are exact); collapse: arms that collapse on every seed at step 12."""
    runs = []
    for s in seeds:
        for arm in minirl.ON_ARMS:
            runs.append(dict(variant=arm, seed=s, n=1, final=scores.get(arm, 0.6) + jitter(s) + 0.001 * (s % 2),
                             collapse_step=12 if arm in collapse else -1, kl=(kl or {}).get(arm, 1e-3),
                             entropy=(0.3, 0.05) if arm in collapse else (0.3, 0.28)))
    return runs


def off_policy(scores, collapse=(), seeds=SEEDS, ns=(2, 4, 8)):
    runs = []
    for n in ns:
        for s in seeds:
            for arm in minirl.OFF_ARMS:
                runs.append(dict(variant=arm, seed=s, n=n, final=scores.get((n, arm), 0.6) + jitter(s),
                                 collapse_step=8 if (n, arm) in collapse else -1))
    return runs


def marks(tmp_path, runs):
    write_grid(tmp_path / "g", runs)
    out = tmp_path / "out"
    assert minirl.main([str(tmp_path / "g"), "--out", str(out)]) == 0
    text = (out / "claims.md").read_text()
    got = {}
    for line in text.splitlines():
        if line.startswith("| ") and ". " in line and "**" in line:
            cells = [c.strip() for c in line.strip("|").split("|")]
            got[(cells[0].split(".")[0], int(cells[1]))] = cells[3].strip("*")
    return got, out


def test_paper_world_agrees_with_every_claim(tmp_path):
    on = on_policy({"minirl": 0.70, "minirl-lennorm": 0.65, "minirl-r3": 0.70, "minirl-lennorm-r3": 0.62,
                    "grpo-real": 0.64, "cispo-real": 0.66, "control": 0.7},
                   collapse=("minirl-nois", "minirl-nois-r3"),
                   kl={"minirl-r3": 2e-4, "minirl-lennorm-r3": 2e-4})
    # minirl must score above every other arm: minirl-r3 ties it, so claim 1 is not separated there
    off = off_policy({(2, "minirl-r2"): 0.70, (2, "minirl-r3"): 0.65, (4, "minirl-r3"): 0.70, (4, "minirl-r2"): 0.6,
                      (8, "minirl-r3"): 0.70, (8, "minirl-r2"): 0.6},
                     collapse={(n, a) for n in (2, 4, 8) for a in ("minirl", "minirl-noclip")} |
                              {(4, "minirl-r2"), (8, "minirl-r2")})
    got, out = marks(tmp_path, on + off)
    assert got[("1", 1)] == "not separated"  # minirl-r3 scores as minirl
    assert got[("2", 1)] == "agrees"
    assert got[("3", 1)] == "agrees"
    assert got[("4a", 1)] == "agrees"
    assert got[("4b", 1)] == "agrees"
    assert got[("4c", 1)] == "agrees"
    for n in (2, 4, 8):
        assert got[("5", n)] == "agrees"
        assert got[("6", n)] == "agrees"
    for name in ("claims.md", "arms.csv", "runs.csv"):
        assert (out / name).stat().st_size > 0
    assert (out / "minirl.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    runs_csv = (out / "runs.csv").read_text().splitlines()
    assert len(runs_csv) == 1 + len(on) + len(off)
    # the arms table: the collapsed arm's entropy falls, its collapses are counted with Wilson bounds
    arms = (out / "arms.csv").read_text()
    assert "1,minirl-nois,10," in arms and ",10,0.7225,1.0000,10," in arms


def test_a_world_against_the_paper_disagrees(tmp_path):
    on = on_policy({"minirl": 0.60, "minirl-lennorm": 0.70, "grpo-real": 0.70, "minirl-r3": 0.70,
                    "minirl-lennorm-r3": 0.75},
                   collapse=(), kl={"minirl-r3": 5e-3})
    off = off_policy({(2, "minirl-r2"): 0.60, (2, "minirl-r3"): 0.70, (4, "minirl-r2"): 0.70, (4, "minirl-r3"): 0.6,
                      (8, "minirl-r2"): 0.60, (8, "minirl-r3"): 0.6})
    got, _ = marks(tmp_path, on + off)
    assert got[("1", 1)] == "disagrees"  # others score above minirl
    assert got[("2", 1)] == "disagrees"  # length normalisation scores higher
    assert got[("3", 1)] == "disagrees"  # no collapse without the IS weight
    assert got[("4a", 1)] == "disagrees"  # R3 raised the KL
    assert got[("4b", 1)] == "disagrees"  # R3 raised the score
    assert got[("4c", 1)] == "disagrees"
    assert got[("5", 2)] == "disagrees"  # nothing collapses
    assert got[("6", 2)] == "disagrees"  # R3 beat R2 at N = 2
    assert got[("6", 4)] == "disagrees"  # R2 beat R3 at N = 4
    assert got[("6", 8)] == "disagrees"  # not separated and R2 stable


def test_noise_is_not_separated_and_missing_grids_are_not_run(tmp_path):
    rng = np.random.default_rng(0)
    runs = on_policy({})
    for r in runs:  # every arm the same up to noise far larger than any difference
        r["final"] = 0.6 + rng.normal(0, 0.1)
    runs[1]["collapse_step"] = 12  # one minirl run collapses: 1/10 against 0/10 is not separated
    got, _ = marks(tmp_path, runs)
    assert got[("1", 1)] == "not separated"
    assert got[("2", 1)] == "not separated"
    assert got[("4c", 1)] == "not separated"
    for n in (2, 4, 8):
        assert got[("5", n)] == "not run" and got[("6", n)] == "not run"


def test_only_seeds_complete_for_every_arm_count(tmp_path):
    runs = on_policy({"minirl": 0.7})
    # seed 789's minirl-r3 run is missing: 9 seeds complete for every arm of N = 1
    runs = [r for r in runs if not (r["seed"] == 789 and r["variant"] == "minirl-r3")]
    write_grid(tmp_path / "g", runs)
    assert minirl.main([str(tmp_path / "g"), "--out", str(tmp_path / "o")]) == 0
    text = (tmp_path / "o" / "claims.md").read_text()
    assert "Seeds complete for every arm: 9 (780, 781, 782, 783, 784, 785, 786, 787, 788)" in text


def test_refusals(tmp_path):
    with pytest.raises(AnalysisError):
        minirl.main([str(tmp_path / "nothing")])
    runs = on_policy({}, seeds=(780,))
    write_grid(tmp_path / "a", runs)
    write_grid(tmp_path / "b", runs)  # the same runs twice: refused, naming one
    with pytest.raises(AnalysisError, match="two runs of N=1"):
        minirl.main([str(tmp_path / "a"), str(tmp_path / "b")])


def test_an_arm_not_started_leaves_no_seed_complete(tmp_path):
    runs = [r for r in on_policy({}) if r["variant"] != "minirl-nois"]  # the grid's arm not run yet
    write_grid(tmp_path / "g", runs)
    assert minirl.main([str(tmp_path / "g"), "--out", str(tmp_path / "o")]) == 0
    text = (tmp_path / "o" / "claims.md").read_text()
    assert "Seeds complete for every arm: 0 (none)" in text
    assert all("**not run**" in line for line in text.splitlines() if line.startswith("| 2. ") or line.startswith("| 3. "))
