"""analysis.league on synthetic sweep directories whose scores, collapses, bursts and expert load are
known: pairing by seed against the control, only seeds complete for every variant, terminal vs
transient collapses, the ranking, the files it writes."""
import csv
import io
import json
import os

import h5py
import numpy as np
import pytest

from analysis import league

PNG = b"\x89PNG\r\n\x1a\n"
STEPS = 40


def write_sweep(d, runs):
    """runs: dicts with variant, seed, status, base, final (eval_final), reward (a [STEPS] series),
    collapse_step, burst (a grad_norm_max spike), load (load_cv first, last), drift."""
    os.makedirs(d, exist_ok=True)
    rows = []
    for i, r in enumerate(runs):
        name = f"{r['variant']}_{r.get('experts', 8)}-seed{r['seed']}"
        with h5py.File(os.path.join(d, name + ".h5"), "w") as f:
            f.attrs["status"] = r["status"]
            f.attrs["collapse_step"] = r.get("collapse_step", -1)
            f.attrs["scenario"] = (f"run.seed = {r['seed']}\nrl.collapse_frac = 0.5\nengines.rollout = {r['variant']}\n"
                                   f"model.n_experts = {r.get('experts', 8)}\n")
            m = f.create_group("metrics")
            for key, base, final in (("eval_final", r["base"], r["final"]), ("eval_accuracy", 0.2, 0.1)):
                ev, b = np.full(STEPS, np.nan), np.full(STEPS, np.nan)
                ev[19], ev[39], b[0] = (base + final) / 2, final, base
                m[key], m[key + "_base"] = ev, b
            m["reward_mean"] = r["reward"]
            g = np.full(STEPS, 2.0)
            gm = np.full(STEPS, 3.0)
            if r.get("burst"):
                gm[5] = 50.0
            m["grad_norm"], m["grad_norm_max"] = g, gm
            m["load_cv"] = np.linspace(*r.get("load", (0.5, 0.5)), STEPS)
            m["load_max_over_mean"] = np.full(STEPS, 2.0)
            m["dead_experts"] = np.zeros(STEPS)
            dr = np.full(STEPS, np.nan)
            dr[19], dr[39] = r.get("drift", 0.1) / 2, r.get("drift", 0.1)
            m["router_drift"] = dr
            m["flip_rate_mean"] = np.full(STEPS, 0.03)
            m["kl_rollout_train"] = np.full(STEPS, 1e-3)
        rows.append({"index": i, "id": name, "file": name + ".h5", "status": r["status"],
                     "keys": {"variant": r["variant"], "model.n_experts": str(r.get("experts", 8)),
                              "run.seed": str(r["seed"])}})
    with open(os.path.join(d, "index.json"), "w") as f:
        json.dump({"grid": "g.ini", "swept_keys": ["variant", "run.seed"], "runs": rows}, f)


def flat(v=0.5):
    return np.full(STEPS, v)


def fall_and_stay():
    return np.concatenate([np.full(15, 0.6), np.full(STEPS - 15, 0.1)])


def fall_and_recover():
    return np.concatenate([np.full(15, 0.6), np.full(12, 0.1), np.full(STEPS - 27, 0.6)])


def run(variant, seed, final, status="complete", reward=None, **kw):
    return dict(variant=variant, seed=seed, status=status, base=0.7, final=final,
                reward=flat() if reward is None else reward, **kw)


def test_pairs_by_seed_counts_collapses_and_ranks(tmp_path):
    d = tmp_path / "league"
    runs = []
    for s in (700, 701, 702):
        runs.append(run("control", s, 0.80 + 0.01 * s % 3, drift=0.2))
        # grpo: 0.05 below the control on every seed; collapses on 700 for good, on 701 and comes back
        kind = {700: dict(status="collapsed", collapse_step=20, reward=fall_and_stay()),
                701: dict(status="collapsed", collapse_step=20, reward=fall_and_recover())}.get(s, {})
        runs.append(run("grpo", s, 0.75 + 0.01 * s % 3, burst=(s == 702), load=(0.5, 0.8), **kind))
        runs.append(run("r3", s, 0.80 + 0.01 * s % 3 + 0.01))
    # seed 703: the control is still running, so no variant counts it
    runs.append(run("control", 703, 0.9, status="running"))
    runs.append(run("grpo", 703, 0.1))
    runs.append(run("r3", 703, 0.1))
    write_sweep(d, runs)
    per_run = [league.run_row(r, "eval_final") for r in league.load_sweep(str(d))[0] if r.metrics]
    assert tuple(per_run[0]) == league.RUN_FIELDS  # what --runs reads back
    rows, seeds = league.league(per_run, "control")
    assert [str(s) for s in seeds] == ["700", "701", "702"]
    by = {r["variant"]: r for r in rows}
    assert [r["variant"] for r in rows] == ["control", "r3", "grpo"]  # the reference, then by score − control
    g = by["grpo"]
    assert g["n"] == 3 and g["score_minus_ref"][0] == pytest.approx(-0.05) and g["lower_than_ref"] == 3
    assert g["score_minus_base"][0] == pytest.approx(np.mean([0.75 + 0.01 * s % 3 - 0.7 for s in (700, 701, 702)]))
    assert g["collapsed"][:2] == (2, 3) and (g["terminal"], g["transient"]) == (1, 1)
    assert g["bursts"] == (pytest.approx(1 / 3), 1)
    assert g["load_cv_change"][0] == pytest.approx(30 * 0.3 / 39)  # last 10 steps − first 10 of linspace(0.5, 0.8, 40)
    assert g["exact_minus_base"][0] == pytest.approx(-0.1)
    assert by["r3"]["score_minus_ref"][0] == pytest.approx(0.01) and by["r3"]["collapsed"][:2] == (0, 3)
    assert by["control"]["router_drift"][0] == pytest.approx(0.2)


def test_writes_its_files_and_refuses_without_the_reference(tmp_path, capsys):
    d = tmp_path / "league"
    write_sweep(d, [run("control", s, 0.8) for s in (1, 2)] + [run("grpo", s, 0.7) for s in (1, 2)])
    out = tmp_path / "out"
    league.main([str(d), "--out", str(out)])
    for f in ("league.md", "league.csv", "league-runs.csv"):
        assert (out / f).stat().st_size > 0
    assert (out / "league.png").read_bytes()[:8] == PNG
    md = (out / "league.md").read_text()
    assert "Seeds complete for every variant: 2" in md and "| 1 | grpo | 2 |" in md
    with pytest.raises(league.AnalysisError, match="reference variant 'dense'"):
        league.main([str(d), "--reference", "dense", "--out", str(out)])


def test_by_a_key_pairs_inside_each_value(tmp_path):
    d = tmp_path / "experts"
    # grpo 0.02 below the control at 8 experts, 0.10 below at 32: paired inside each count
    write_sweep(d, [run("control", s, 0.8, experts=n) for n in (8, 32) for s in (1, 2)] +
                   [run("grpo", s, 0.78 if n == 8 else 0.70, experts=n) for n in (8, 32) for s in (1, 2)])
    out = tmp_path / "out"
    league.main([str(d), "--by", "model.n_experts", "--out", str(out)])
    md = (out / "league.md").read_text()
    assert md.index("model.n_experts = 8") < md.index("model.n_experts = 32")
    assert "| 1 | grpo | 2 | 0.080 ± 0.000 | -0.020 ± 0.000 |" in md.replace("−", "-")
    assert "| 1 | grpo | 2 | 0.000 ± 0.000 | -0.100 ± 0.000 |" in md.replace("−", "-")
    assert (out / "by.png").read_bytes()[:8] == PNG
    with pytest.raises(league.AnalysisError, match="--by model.nope"):
        league.main([str(d), "--by", "model.nope", "--out", str(out)])


def test_by_changes_pair_each_seed_across_the_values(tmp_path):
    d = tmp_path / "experts"
    # grpo's gap to the control: -0.02, -0.04 at 8 experts; -0.10, -0.06 at 32 (change -0.08, -0.02);
    # seed 3 finishes only at 32 experts, so it pairs nothing
    finals = {(8, "control"): (0.80, 0.81), (8, "grpo"): (0.78, 0.77),
              (32, "control"): (0.80, 0.79, 0.9), (32, "grpo"): (0.70, 0.73, 0.5)}
    write_sweep(d, [run(v, s, f[i], experts=n) for (n, v), f in finals.items() for i, s in enumerate((1, 2, 3)[:len(f)])])
    out = tmp_path / "out"
    league.main([str(d), "--by", "model.n_experts", "--pair", "grpo:control", "--out", str(out)])
    rows = list(csv.DictReader(io.StringIO((out / "by-changes.csv").read_text())))
    got = {r["what"]: r for r in rows}
    assert [r["what"] for r in rows] == ["control", "grpo", "grpo − control"]
    assert {(r["model.n_experts from"], r["model.n_experts to"], r["n"]) for r in rows} == {("8", "32", "2")}
    assert float(got["grpo − control"]["change"]) == pytest.approx(-0.05)
    assert float(got["grpo − control"]["change_ci95"]) == pytest.approx(league.mean_ci([-0.08, -0.02])[1], rel=1e-5)
    assert float(got["control"]["change"]) == pytest.approx(-0.01) and got["control"]["rose"] == "0"
    assert float(got["grpo"]["change"]) == pytest.approx(-0.06)
    md = (out / "league.md").read_text()
    assert "## Between the values of model.n_experts, paired by seed" in md
    assert "| grpo − control: model.n_experts 8 → 32 | " in md


def test_by_values_have_one_order_whatever_the_set_order():
    # (nan, "true") and (nan, "false") never compare, so a key of (number or nan, text) left the order
    # of true/false to the set's iteration order, which Python's string hashing changes per process
    for values in (["true", "false"], ["false", "true"], ["b", "32", "a", "8", "1e-3"]):
        for seq in (values, values[::-1]):
            got = sorted(seq, key=league.by_order)  # any input order: the key alone decides
            assert got == (["false", "true"] if len(values) == 2 else ["1e-3", "8", "32", "a", "b"])


def test_pairs_are_paired_by_seed_and_refuse_unknown_variants(tmp_path):
    d = tmp_path / "league"
    # r3 above grpo by 0.04, 0.02 and -0.01 on the three seeds: mean +0.0167, higher on 2 of 3
    finals = {"control": (0.80, 0.82, 0.84), "grpo": (0.70, 0.75, 0.80), "r3": (0.74, 0.77, 0.79)}
    write_sweep(d, [run(v, s, f[i]) for v, f in finals.items() for i, s in enumerate((1, 2, 3))])
    per_run = [league.run_row(r, "eval_final") for r in league.load_sweep(str(d))[0] if r.metrics]
    prs = league.pairs(per_run, ["r3:grpo", "grpo:*"])
    assert [(r["a"], r["b"]) for r in prs] == [("r3", "grpo"), ("grpo", "control"), ("grpo", "r3")]
    diffs = [0.04, 0.02, -0.01]
    assert prs[0]["score"][0] == pytest.approx(np.mean(diffs)) and prs[0]["score_higher"] == 2
    assert prs[0]["score"][1] == pytest.approx(league.mean_ci(diffs)[1])
    assert prs[2]["score"][0] == pytest.approx(-np.mean(diffs)) and prs[2]["score_higher"] == 1
    assert prs[1]["kl"][0] == pytest.approx(0.0) and prs[1]["kl_higher"] == 0
    out = tmp_path / "out"
    league.main([str(d), "--pair", "r3:grpo", "--out", str(out)])
    md = (out / "league.md").read_text()
    assert "## Paired differences" in md and "| r3 − grpo | 3 | 0.017 ± " in md.replace("+", "")
    assert (out / "pairs.csv").read_text().splitlines()[1].startswith("r3,grpo,3,0.0166667,")
    for bad in ("r3:gspo", "r3", "r3:"):
        with pytest.raises(league.AnalysisError, match="--pair"):
            league.main([str(d), "--pair", bad, "--out", str(out)])


def test_a_seed_counts_only_when_every_planned_variant_finished(tmp_path):
    d = tmp_path / "partial"
    write_sweep(d, [run("control", 1, 0.8), run("grpo", 1, 0.7), run("control", 2, 0.8), run("grpo", 2, 0.7)])
    idx = json.load(open(d / "index.json"))
    for s in (1, 2):  # r3 planned: pending on seed 1 (no file), complete on seed 2
        idx["runs"].append({"index": len(idx["runs"]), "id": f"r3-seed{s}", "file": f"r3_8-seed{s}.h5",
                            "status": "pending", "keys": {"variant": "r3", "run.seed": str(s)}})
    json.dump(idx, open(d / "index.json", "w"))
    write_sweep(tmp_path / "r3", [run("r3", 2, 0.75)])
    os.replace(tmp_path / "r3" / "r3_8-seed2.h5", d / "r3_8-seed2.h5")
    idx["runs"][-1]["status"] = "complete"
    json.dump(idx, open(d / "index.json", "w"))
    out = tmp_path / "out"
    league.main([str(d), "--out", str(out)])
    md = (out / "league.md").read_text()
    assert "Seeds complete for every variant: 1 (2)" in md


def test_runs_kept_in_a_csv_join_the_sweep_as_if_their_files_were_there(tmp_path):
    # seeds 1-4 at 8 and 32 experts; the league of all four from one directory is the league of
    # seeds 3-4's kept league-runs.csv (their files gone) joined with seeds 1-2's directory. Every
    # number here has at most 6 significant digits, and no mean sits on a rounding boundary, so
    # the two leagues' files are identical to the character
    finals = {1: 0.801, 2: 0.833, 3: 0.779, 4: 0.862}
    def runs_of(seeds):
        return ([run("control", s, finals[s], experts=n) for n in (8, 32) for s in seeds] +
                [run("grpo", s, finals[s] - 0.013 * s - (0.05 if n == 32 else 0), experts=n,
                     collapse_step=(20 if s == 3 else -1), status=("collapsed" if s == 3 else "complete"),
                     reward=(fall_and_stay() if s == 3 else None)) for n in (8, 32) for s in seeds])
    args = ["--by", "model.n_experts", "--pair", "grpo:control"]
    write_sweep(tmp_path / "all", runs_of((1, 2, 3, 4)))
    league.main([str(tmp_path / "all"), "--out", str(tmp_path / "whole")] + args)
    write_sweep(tmp_path / "late", runs_of((3, 4)))
    league.main([str(tmp_path / "late"), "--out", str(tmp_path / "kept")] + args)
    kept = str(tmp_path / "kept" / "league-runs.csv")
    write_sweep(tmp_path / "early", runs_of((1, 2)))
    league.main([str(tmp_path / "early"), "--runs", kept, "--out", str(tmp_path / "joined")] + args)
    for f in ("league.md", "league.csv", "pairs.csv"):
        assert (tmp_path / "joined" / f).read_text() == (tmp_path / "whole" / f).read_text(), f
    assert "Seeds complete for every variant: 4 (1, 2, 3, 4)" in (tmp_path / "joined" / "league.md").read_text()
    assert len((tmp_path / "joined" / "league-runs.csv").read_text().splitlines()) == 1 + 16
    # the kept file alone (--out required), and a re-run of seeds 3-4 that reproduces it joins once
    league.main(["--runs", kept, "--out", str(tmp_path / "alone")] + args)
    assert "Seeds complete for every variant: 2 (3, 4)" in (tmp_path / "alone" / "league.md").read_text()
    with pytest.raises(league.AnalysisError, match="--out"):
        league.main(["--runs", kept] + args)
    league.main([str(tmp_path / "late"), "--runs", kept, "--out", str(tmp_path / "again")] + args)
    assert (tmp_path / "again" / "league.md").read_text() == (tmp_path / "kept" / "league.md").read_text()
    # a summary kept while a run was still running: the run's finished file takes its place unchecked
    partial = runs_of((3, 4))
    partial[[i for i, r in enumerate(partial) if r["variant"] == "control" and r["seed"] == 4 and r["experts"] == 8][0]] \
        = run("control", 4, 0.5, status="running", experts=8)
    write_sweep(tmp_path / "partial", partial)
    league.main([str(tmp_path / "partial"), "--out", str(tmp_path / "kept-partial")] + args)
    write_sweep(tmp_path / "resumed", runs_of((1, 2)) + [run("control", 4, finals[4], experts=8)])
    league.main([str(tmp_path / "resumed"), "--runs", str(tmp_path / "kept-partial" / "league-runs.csv"),
                 "--out", str(tmp_path / "joined-partial")] + args)
    assert (tmp_path / "joined-partial" / "league.md").read_text() == (tmp_path / "whole" / "league.md").read_text()
    # a re-run that does not reproduce the kept summary is refused, naming the run and the number
    write_sweep(tmp_path / "rerun", [run("control", 3, 0.78, experts=8)])
    with pytest.raises(league.AnalysisError, match=r"control/3/8 differs from its run file: score 0\.779 in the file, 0\.78 in the run"):
        league.main([str(tmp_path / "rerun"), "--runs", kept, "--out", str(tmp_path / "x")] + args)
    # a file that is not a league's per-run table, or lacks the --by column
    bad = tmp_path / "bad.csv"
    bad.write_text("variant,seed\ncontrol,1\n")
    with pytest.raises(league.AnalysisError, match="not a league-runs.csv"):
        league.main(["--runs", str(bad), "--out", str(tmp_path / "x")])
    with pytest.raises(league.AnalysisError, match="model.nope"):
        league.main(["--runs", kept, "--by", "model.nope", "--out", str(tmp_path / "x")])
    with pytest.raises(league.AnalysisError, match="made with --by model.n_experts"):
        league.main(["--runs", kept, "--out", str(tmp_path / "x")])
    # without --by: the md counts the runs that came from the file
    write_sweep(tmp_path / "flat", [run(v, s, 0.8) for v in ("control", "grpo") for s in (1, 2)])
    league.main([str(tmp_path / "flat"), "--out", str(tmp_path / "flat-kept")])
    write_sweep(tmp_path / "flat2", [run(v, 3, 0.8) for v in ("control", "grpo")] + [run("control", 1, 0.8)])
    league.main([str(tmp_path / "flat2"), "--runs", str(tmp_path / "flat-kept" / "league-runs.csv"),
                 "--out", str(tmp_path / "flat-joined")])
    md = (tmp_path / "flat-joined" / "league.md").read_text()
    assert "Seeds complete for every variant: 3 (1, 2, 3); runs with metrics: 3 of 3 planned, and 3 from --runs." in md
    # the file records its score: read back with another --score, it is refused, not relabelled
    with pytest.raises(league.AnalysisError, match="made with --score eval_final, not eval_accuracy"):
        league.main(["--runs", kept, "--score", "eval_accuracy", "--out", str(tmp_path / "x")] + args)


def test_rank_intervals_from_a_bootstrap_of_the_seeds():
    # a variant above the others on every seed by a wide margin ranks 1 in every resample; two that
    # trade places from seed to seed share ranks 2–3; one seed: no interval
    d = {"best": [0.30, 0.31, 0.29, 0.30, 0.32], "a": [0.01, -0.02, 0.03, -0.01, 0.02],
         "b": [-0.01, 0.02, -0.03, 0.01, -0.02]}
    ci = league.rank_intervals(d)
    assert ci["best"] == (1.0, 1.0)
    assert ci["a"] == (2.0, 3.0) and ci["b"] == (2.0, 3.0)
    assert league.rank_intervals(d) == ci  # a fixed generator: the same table every time
    assert all(np.isnan(x) for x in league.rank_intervals({"a": [0.1], "b": [0.2]})["a"])


def test_exact_ties_share_their_ranks():
    # two variants tied on every seed: both rank 1–2 in every resample, never 1–1 and 2–2
    d = {"a": [0.1, 0.2, 0.3], "b": [0.1, 0.2, 0.3], "c": [-0.5, -0.4, -0.6]}
    ci = league.rank_intervals(d)
    assert ci["a"] == (1.0, 2.0) and ci["b"] == (1.0, 2.0) and ci["c"] == (3.0, 3.0)


def test_ties_and_nonfinite_values_in_the_table(tmp_path):
    d = tmp_path / "sweep"
    write_sweep(d, [run("control", s, 0.5) for s in (1, 2)] + [run("a", s, 0.6 + 0.1 * s) for s in (1, 2)] +
                   [run("b", s, 0.6 + 0.1 * s) for s in (1, 2)])
    with h5py.File(d / "a_8-seed2.h5", "r+") as f:  # one infinite KL step: the run's mean KL is inf
        kl = f["metrics/kl_rollout_train"][()]
        kl[:2] = [1e308, np.inf]
        f["metrics/kl_rollout_train"][...] = kl
    out = tmp_path / "out"
    league.main([str(d), "--out", str(out)])
    md = (out / "league.md").read_text()
    assert md.count("| 1–2 |") == 4  # a and b: the rank and its interval
    assert "e+307" not in md and "- a, KL: inf in 1 of 2 runs (seed 2)" in md
    assert "| inf |" in md


def test_a_run_twice_is_refused_naming_both_files(tmp_path):
    write_sweep(tmp_path / "one", [run(v, s, 0.8) for v in ("control", "grpo") for s in (1, 2)])
    write_sweep(tmp_path / "two", [run(v, s, 0.7) for v in ("control", "grpo") for s in (1, 2)])
    for a, b in (("one", "two"), ("two", "one")):
        with pytest.raises(league.AnalysisError, match=f"two runs of control/1: .*{a}/control_8-seed1.h5 and "
                                                       f".*{b}/control_8-seed1.h5"):
            league.main([str(tmp_path / a), str(tmp_path / b), "--out", str(tmp_path / "x")])
    # the same numbers (a copy): one run, counted once
    write_sweep(tmp_path / "copy", [run(v, s, 0.8) for v in ("control", "grpo") for s in (1, 2)])
    league.main([str(tmp_path / "one"), str(tmp_path / "copy"), "--out", str(tmp_path / "y")])
    assert "| 1 | grpo | 2 |" in (tmp_path / "y" / "league.md").read_text()


def test_the_kept_file_is_never_modified_by_a_refused_join(tmp_path):
    write_sweep(tmp_path / "all", [run(v, s, 0.8) for v in ("control", "grpo") for s in (1, 2)])
    out = tmp_path / "kept"
    league.main([str(tmp_path / "all"), "--out", str(out)])
    kept = out / "league-runs.csv"
    before = kept.read_bytes()
    write_sweep(tmp_path / "rerun", [run("control", 1, 0.79)])
    with pytest.raises(league.AnalysisError, match="differs from its run file"):
        league.main([str(tmp_path / "rerun"), "--runs", str(kept), "--out", str(out)])
    assert kept.read_bytes() == before
    # a kept cell that is not a number: refused with its row and column
    bad = tmp_path / "bad.csv"
    bad.write_bytes(before.replace(b",0.8,", b",abc,", 1))
    with pytest.raises(league.AnalysisError, match=r"row 2, column score: 'abc' is not a number"):
        league.main(["--runs", str(bad), "--out", str(tmp_path / "z")])
    assert not [p for p in os.listdir(out) if ".tmp-" in p]
