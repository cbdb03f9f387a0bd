"""analysis.search_rows: one row per run of a real tiny sweep, in runs.csv's columns."""
import csv
import io
import os

from analysis import search_rows

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_rows_have_the_columns_of_runs_csv(sweep_dir, capsys):
    with open(os.path.join(ROOT, "scenarios", "paper", "collapse-search", "runs.csv")) as f:
        header = next(csv.reader(f))
    assert header == search_rows.COLUMNS
    assert search_rows.main(["px", sweep_dir]) == 0
    rows = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert len(rows) == 4  # the tiny grid: grpo and r3 × 2 seeds
    for r in rows:
        assert len(r) == len(header)
        assert r[0] == "px"
        assert r[11] in ("complete", "collapsed")
        float(r[14])  # peak_reward10 is a number


def test_learning_rates_keep_their_second_digit():
    # 2.5e-4 once printed as "3e-04" (one significant digit), a learning rate the run never had
    assert search_rows._sci(1e-4) == "1e-04"
    assert search_rows._sci(3e-4) == "3e-04"
    assert search_rows._sci(2.5e-4) == "2.5e-04"
    assert float(search_rows._sci(2.5e-4)) == 2.5e-4
