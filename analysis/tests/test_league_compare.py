"""analysis.league_compare on two hand-made leagues: a gap that grows with the flips, one that does
not move, Welch's interval against a hand computation, the files, the refusals."""
import numpy as np
import pytest

from analysis import league, league_compare
from analysis.cli import AnalysisError


def write_runs(path, gaps, flips, seeds):
    """A league-runs.csv: the control scores 0.8 (+ a per-seed wobble shared by every variant, so the
    paired gap is exact), each variant its gap below it, with its flips."""
    lines = [",".join(league.RUN_FIELDS)]
    for s in seeds:
        wobble = 0.01 * ((s * 7) % 3)
        for v, gap in [("control", 0.0)] + list(gaps.items()):
            row = dict.fromkeys(league.RUN_FIELDS, "0")
            row.update(variant=v, seed=str(s), status="complete", score_name="eval_final", collapse="",
                       score=f"{0.8 + wobble + gap(s) if callable(gap) else 0.8 + wobble + gap:.6g}",
                       score_base="0.7", flip_pct=str(flips.get(v, 0.0)), kl="0.001")
            lines.append(",".join(row[k] for k in league.RUN_FIELDS))
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_a_gap_that_grows_with_the_flips(tmp_path):
    a = write_runs(tmp_path / "a.csv", {"grpo-real": lambda s: -0.01 + 0.002 * (s % 2), "r3-real": -0.005},
                   {"grpo-real": 2.5, "r3-real": 2.3}, range(700, 720))
    b = write_runs(tmp_path / "b.csv", {"grpo-real": lambda s: -0.06 + 0.002 * (s % 2), "r3-real": -0.005},
                   {"grpo-real": 36.0, "r3-real": 33.0}, range(760, 780))
    out = tmp_path / "out"
    assert league_compare.main([a, b, "--labels", "top-2,field", "--out", str(out)]) == 0
    md = (out / "compare.md").read_text()
    grpo = next(line for line in md.splitlines() if line.startswith("| grpo-real"))
    r3 = next(line for line in md.splitlines() if line.startswith("| r3-real"))
    assert "grows with the flips" in grpo
    assert "not separated" in r3  # the same gap in both leagues
    assert (out / "compare.png").read_bytes()[:4] == b"\x89PNG"
    assert "grpo-real" in (out / "compare.csv").read_text()


def test_welch_against_hand_computation():
    a, b = [1.0, 2.0, 3.0, 4.0], [2.0, 4.0, 6.0]
    va, vb = np.var(a, ddof=1) / 4, np.var(b, ddof=1) / 3
    dof = (va + vb) ** 2 / (va ** 2 / 3 + vb ** 2 / 2)
    from scipy import stats
    d, h = league_compare.welch(a, b)
    assert d == pytest.approx(4.0 - 2.5)
    assert h == pytest.approx(stats.t.ppf(0.975, dof) * np.sqrt(va + vb))
    assert league_compare.mark((-0.05, 0.01)) == "grows"
    assert league_compare.mark((0.05, 0.01)) == "shrinks"
    assert league_compare.mark((-0.05, 0.06)) == "not separated"


def test_refusals(tmp_path):
    a = write_runs(tmp_path / "a.csv", {"grpo-real": -0.01}, {}, range(700, 703))
    with pytest.raises(AnalysisError, match="--labels"):
        league_compare.main([a, a, "--labels", "only-one"])
    with pytest.raises(AnalysisError):
        league_compare.main([a, str(tmp_path / "missing.csv")])


def test_where_takes_one_value_of_a_by_column(tmp_path):
    # one file with two leagues in it (a --by column "arm"): grpo's gap -0.01 in arm x, -0.06 in arm y
    x = write_runs(tmp_path / "x.csv", {"grpo-real": -0.01}, {"grpo-real": 2.0}, range(700, 706))
    write_runs(tmp_path / "y.csv", {"grpo-real": -0.06}, {"grpo-real": 3.0}, range(700, 706))
    head, *xs = (tmp_path / "x.csv").read_text().splitlines()
    ys = (tmp_path / "y.csv").read_text().splitlines()[1:]
    both = tmp_path / "both.csv"
    both.write_text("\n".join([head + ",arm"] + [r + ",x" for r in xs] + [r + ",y" for r in ys]) + "\n")
    out = tmp_path / "out"
    league_compare.main([str(both), str(both), "--where-a", "arm=x", "--where-b", "arm=y", "--out", str(out)])
    rows = (out / "compare.csv").read_text().splitlines()
    grpo = next(r for r in rows if r.startswith("grpo-real"))
    assert "-0.05" in grpo  # the change y - x of grpo's gap, exact (the wobble is shared)
    with pytest.raises(AnalysisError, match=r"--where-b 'arm=z': no run .* arm = z \(its values: x, y\)"):
        league_compare.main([str(both), str(both), "--where-a", "arm=x", "--where-b", "arm=z"])
    with pytest.raises(AnalysisError, match="'arm' is not one of its columns"):  # a --by file read whole
        league_compare.main([str(both), str(both), "--where-b", "arm=y"])
    with pytest.raises(AnalysisError, match="expected KEY=VALUE"):
        league_compare.main([str(both), str(both), "--where-a", "arm"])
    with pytest.raises(AnalysisError):  # a file without the column
        league_compare.main([x, str(both), "--where-a", "arm=x"])
