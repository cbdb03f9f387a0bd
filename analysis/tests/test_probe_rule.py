"""analysis.probe_rule on synthetic probes whose outcome is known: the rule's two parts (the
reference learns by the mean gain; the variant collapses and ends below its base on enough seeds),
each able to fail alone, and only seeds complete for both variants counted."""
import pytest

from analysis import probe_rule
from analysis.tests.test_league import fall_and_recover, fall_and_stay, run, write_sweep


def verdict_of(d, **kw):
    per_run = [probe_rule.run_row(r, "eval_final") for r in probe_rule.load_sweep(str(d))[0] if r.metrics]
    return probe_rule.verdict(per_run, "control", "grpo-real", **kw)


def collapsed(seed, final, recover=False):
    return run("grpo-real", seed, final, status="collapsed", collapse_step=20,
               reward=fall_and_recover() if recover else fall_and_stay())


def test_success_needs_both_parts(tmp_path):
    # the control gains +0.08 (base 0.7); grpo collapses on 600 (terminal) and 601 (transient), both
    # ending below the base 0.7, and not on 602, 603
    d = tmp_path / "ok"
    write_sweep(d, [run("control", s, 0.78) for s in (600, 601, 602, 603)] +
                   [collapsed(600, 0.5), collapsed(601, 0.6, recover=True),
                    run("grpo-real", 602, 0.75), run("grpo-real", 603, 0.74)])
    v = verdict_of(d)
    assert v["mean_gain"] == pytest.approx(0.08) and v["learns"]
    assert v["collapses_below"] == ["600", "601"]
    assert v["success"]
    assert v["kinds"] == ["terminal", "transient", "", ""]
    # a stricter rule on the same runs fails on either part alone
    assert not verdict_of(d, min_collapsed=3)["success"]
    assert not verdict_of(d, min_gain=0.1)["success"]


def test_a_collapse_that_ends_above_the_base_does_not_count(tmp_path):
    d = tmp_path / "above"
    write_sweep(d, [run("control", s, 0.78) for s in (600, 601)] + [collapsed(600, 0.5), collapsed(601, 0.72)])
    v = verdict_of(d)
    assert v["collapses_below"] == ["600"] and not v["success"]


def test_a_control_that_does_not_learn_fails_the_probe(tmp_path):
    d = tmp_path / "flat"
    write_sweep(d, [run("control", s, 0.72) for s in (600, 601)] + [collapsed(600, 0.5), collapsed(601, 0.4)])
    v = verdict_of(d)
    assert v["mean_gain"] == pytest.approx(0.02) and not v["learns"] and not v["success"]


def test_report_and_refusals(tmp_path, capsys):
    d = tmp_path / "p"
    write_sweep(d, [run("control", 600, 0.78), collapsed(600, 0.5), run("control", 601, 0.9, status="running"),
                    run("grpo-real", 601, 0.1)])
    probe_rule.main(["probe27", str(d)])
    out = capsys.readouterr().out
    assert "probe27: no success on 1 seeds (600)" in out  # 601's control has not finished
    assert "| probe27 | control +0.080; grpo-real collapsed 1/1 (1 terminal)" in out
    with pytest.raises(probe_rule.AnalysisError, match="variant 'r3-real'"):
        probe_rule.main(["probe27", str(d), "--variant", "r3-real"])
