"""analysis.field_flips on hand-made audits: the table's means and intervals over seeds, the CSV
row per audit, the record's row, and refusals (a file that is not an audit, an unknown shape)."""
import json

import pytest

from analysis import field_flips
from analysis.cli import AnalysisError


def audit(path, flips, any_share, kl, fifths, cv=0.1, dead=0):
    path.write_text(json.dumps({
        "format": "moerl-audit", "version": 1, "flip_rate": flips, "layer_flips": [1] * len(flips),
        "any_flip_share": any_share, "kl": kl, "router_margin_p50": 0.2, "flip_rate_by_margin": fifths,
        "load_cv": cv, "load_max_over_mean": 1.5, "dead_experts": dead}))


def test_the_table_averages_over_seeds_and_writes_every_audit(tmp_path):
    d = tmp_path / "audits"
    d.mkdir()
    audit(d / "k8-740.json", [0.10, 0.20], 0.9, 1e-2, [0.5, 0.2, 0.1, 0.05, 0.0])
    audit(d / "k8-741.json", [0.20, 0.30], 0.8, 2e-2, [0.7, 0.2, 0.1, 0.05, 0.02], dead=2)
    audit(d / "learn-740.json", [0.02, 0.04], 0.25, 1e-2, [0.1, 0.0, 0.0, 0.0, 0.0])
    out = tmp_path / "out"
    assert field_flips.main([str(d), "--out", str(out)]) == 0
    md = (out / "flips.md").read_text()
    # k8: flips 15 % and 25 % → mean 20 %; t(1) = 12.706, s = 7.071 → ± 63.53
    row = next(l for l in md.splitlines() if l.startswith("| 64 experts top-8, width 16, aux loss (field.ini)"))
    assert "| 2 | 20.000 ± 63.531 |" in row
    assert "60.000 ± 127.062 / 1.000 ± 12.706" in row  # smallest / largest fifth
    assert "| 1.0 ± 12.7 |" in row  # dead pairs 0 and 2
    # one seed: no interval
    learn = next(l for l in md.splitlines() if l.startswith("| 8 experts top-2"))
    assert "| 1 | 3.000 |" in learn
    assert md.splitlines()[2].startswith("| R3 paper")
    # paired by seed: only the seeds both shapes have (740); k8 15 % − learn 3 % = 12 points
    assert "| k8 − learn: field.ini against learn.ini | 740 | 12.00 | 1 of 1 |" in md
    rows = (out / "flips.csv").read_text().splitlines()
    assert rows[0].startswith("shape,seed,flip_rate")
    assert [r.split(",")[:2] for r in rows[1:]] == [["learn", "740"], ["k8", "740"], ["k8", "741"]]
    assert (out / "flips.png").stat().st_size > 0


def test_refuses_what_is_not_an_audit(tmp_path):
    (tmp_path / "k8-740.json").write_text("{ cut")
    with pytest.raises(AnalysisError, match="k8-740.json: not a readable audit JSON"):
        field_flips.main([str(tmp_path)])
    (tmp_path / "k8-740.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(AnalysisError, match="not a moerl audit"):
        field_flips.main([str(tmp_path)])
    (tmp_path / "k8-740.json").unlink()
    audit(tmp_path / "k9-740.json", [0.1], 0.5, 1e-3, [0.0] * 5)
    with pytest.raises(AnalysisError, match="unknown shapes k9"):
        field_flips.main([str(tmp_path)])
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(AnalysisError, match="no audit"):
        field_flips.main([str(empty)])
