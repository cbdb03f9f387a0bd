"""scripts/league.sh's plan (analysis/league_add.py): the grid it writes and its refusals of bad
input, against the kept league (docs/league). The guard and the runs are tests/tutorial_algorithm.sh's."""
import configparser
import os

import pytest

from analysis import league_add
from analysis.cli import AnalysisError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GRID = os.path.join(ROOT, "scenarios", "paper", "learn-league.ini")
KEPT = os.path.join(ROOT, "docs", "league", "league-runs.csv")


def plan(tmp_path, *args):
    return league_add.main(["plan", "--grid", GRID, "--kept", KEPT, "--out", str(tmp_path / "w"), *args])


def test_plan_writes_the_league_grid_with_one_variant(tmp_path, capsys):
    plan(tmp_path, "--variant", "capped-reinforce", "--set", "rl.algorithm=capped_reinforce",
         "--set", "rl.capped_reinforce_cap=1.5")
    cp = configparser.ConfigParser(interpolation=None)
    cp.optionxform = str
    cp.read(tmp_path / "w" / "grid.ini")
    assert cp["sweep"]["base"] == os.path.join(ROOT, "scenarios", "paper", "learn.ini")
    assert cp["sweep"]["variants"] == "control, capped-reinforce"
    assert cp["sweep"]["seeds"] == ", ".join(str(s) for s in range(700, 720))
    assert dict(cp["variant.control"]) == {"engines.rollout": "bf16-train"}  # the kept control, as the league sets it
    assert dict(cp["variant.capped-reinforce"]) == {"rl.algorithm": "capped_reinforce", "rl.capped_reinforce_cap": "1.5"}
    env = (tmp_path / "w" / "plan.sh").read_text()
    assert "guard_seed=700" in env and "n_todo=20" in env and "seeds=700-719" in env
    out = capsys.readouterr().out
    assert "20 runs of capped-reinforce to start, after 1 guard run (control on seed 700" in out


def test_plan_takes_some_of_the_league_seeds(tmp_path):
    plan(tmp_path, "--variant", "x", "--set", "rl.algorithm=gspo", "--seeds", "700-702,710")
    env = (tmp_path / "w" / "plan.sh").read_text()
    assert "seeds=700,701,702,710" in env and "n_todo=4" in env and "guard_seed=700" in env


@pytest.mark.parametrize("args, message", [
    (["--variant", "grpo-real", "--set", "rl.algorithm=gspo"], "--variant grpo-real: the kept league"),
    (["--variant", "control", "--set", "rl.algorithm=gspo"], "--variant control: the reference's name"),
    (["--variant", "a/b", "--set", "rl.algorithm=gspo"], "--variant 'a/b': not a variant name"),
    (["--variant", "x", "--set", "rl.algorithm=gspo", "--seeds", "718-721"],
     "--seeds 718-721: seed 720 is not in the kept league (allowed: its seeds, 700-719)"),
    (["--variant", "x", "--set", "rl.algorithm=gspo", "--seeds", "9-1"], "--seeds 9-1: '9-1' is not a seed or a range"),
    (["--variant", "x", "--set", "algorithm=gspo"], "--set algorithm=gspo: expected section.key=value"),
    (["--variant", "x", "--set", "rl.algorithm=gspo", "--set", "rl.algorithm=sapo"], "--set rl.algorithm: given twice"),
    (["--variant", "x"], "--set: none given"),
])
def test_plan_refuses_bad_input(tmp_path, args, message):
    with pytest.raises(AnalysisError, match=None) as e:
        plan(tmp_path, *args)
    assert message in str(e.value)
    assert not (tmp_path / "w" / "grid.ini").exists()


def test_rerun_of_a_kept_variant_is_allowed_on_request(tmp_path):
    plan(tmp_path, "--variant", "r3-real", "--set", "rl.algorithm=r3", "--rerun")
    assert (tmp_path / "w" / "grid.ini").exists()


def test_a_grid_that_sweeps_a_key_is_refused(tmp_path):
    g = tmp_path / "g.ini"
    g.write_text("[sweep]\nbase = learn.ini\nseeds = 700\nvariants = control\nrl.lr = 1, 2\n[variant.control]\n")
    with pytest.raises(AnalysisError) as e:
        league_add.main(["plan", "--grid", str(g), "--kept", KEPT, "--out", str(tmp_path / "w"),
                         "--variant", "x", "--set", "rl.algorithm=gspo"])
    assert "it sweeps rl.lr; the league's only axis is its variants" in str(e.value)
