"""A bad or foreign file never kills the report (docs/reliability.md): it is skipped with a warning
naming it, the report is still written and lists what it skipped; moerl's integrity header is
checked, so a flipped byte is caught even where HDF5 would read it; `moerl report` runs the
report from any directory."""
import os
import shutil
import subprocess

from analysis.report import build
from analysis.runs import BadFile, check_integrity, load_sweep

from .conftest import moerl_binary


def _copy(sweep_dir, tmp_path):
    d = tmp_path / "sweep"
    shutil.copytree(sweep_dir, d, ignore=shutil.ignore_patterns("report", "cache"))
    return d


def test_truncated_and_foreign_files_are_skipped_and_listed(sweep_dir, tmp_path, capsys):
    d = _copy(sweep_dir, tmp_path)
    victim = d / "grpo-seed0.h5"
    with open(victim, "r+b") as f:
        f.truncate(os.path.getsize(victim) // 3)
    res = build(str(d), out=str(tmp_path / "rep"), verbose=False)
    err = capsys.readouterr().err
    assert f"skipping {victim}" in err and "truncated" in err
    md = open(os.path.join(res["out"], "summary.md")).read()
    assert "Skipped files" in md and str(victim) in md
    page = open(os.path.join(res["out"], "data", "index.js")).read()  # the dashboard lists them
    assert '"skipped":[["' + str(victim) in page and "truncated" in page
    runs, _ = load_sweep(str(d))
    assert [r.status for r in runs if r.path == str(victim)] == ["unreadable"]
    # a directory of run files with a foreign HDF5 file (a checkpoint) among them
    d2 = tmp_path / "files"
    d2.mkdir()
    shutil.copy(d / "r3-seed0.h5", d2 / "r3-seed0.h5")
    shutil.copy(d / "r3-seed0.ckpt.h5", d2 / "foreign.h5")
    runs, info = load_sweep(str(d2))
    assert [r.name for r in runs] == ["r3-seed0"]
    assert [os.path.basename(p) for p, _ in info["skipped"]] == ["foreign.h5"]


def test_a_flipped_byte_is_caught_by_the_integrity_header(sweep_dir, tmp_path):
    src = os.path.join(sweep_dir, "r3-seed1.h5")
    check_integrity(src)  # intact
    bad = tmp_path / "flip.h5"
    data = bytearray(open(src, "rb").read())
    for off in (0, 100, 600, len(data) // 2, len(data) - 1):
        flipped = bytearray(data)
        flipped[off] ^= 0x04
        bad.write_bytes(bytes(flipped))
        try:
            check_integrity(str(bad))
        except BadFile as e:
            assert str(bad) in str(e)
        else:
            raise AssertionError(f"flip at byte {off} not caught")


def test_moerl_report_runs_from_any_directory(sweep_dir, tmp_path):
    b = moerl_binary()
    d = _copy(sweep_dir, tmp_path)
    p = subprocess.run([b, "report", str(d), "--quiet", "--out", str(tmp_path / "r")], cwd="/",
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert os.path.exists(tmp_path / "r" / "index.html")


def test_a_sweep_is_counted_as_it_is(sweep_dir, tmp_path, capsys):
    """Every run under its own state (docs/sweeps.md): a damaged file is listed as skipped and is a
    status row of load_runs, a run not started yet is pending (not failed), the same directory
    given twice counts each run once, and an --out that is a file is a one-line error."""
    from analysis import load_runs
    from analysis.runs import AnalysisError
    from analysis.summary import group_rows
    b = moerl_binary()
    d = _copy(sweep_dir, tmp_path)
    victim = d / "grpo-seed0.h5"
    with open(victim, "r+b") as f:
        f.truncate(os.path.getsize(victim) // 3)
    for f in ("r3-seed1.h5", "r3-seed1.ckpt.h5"):  # a run of an array still to come
        os.remove(d / f)
    os.remove(d / "index.json")
    os.remove(d / "index.csv")
    # the index as moerl assembles it from the plan and the files (the truncated one: "failed")
    p = subprocess.run([b, "inspect", str(d)], capture_output=True, text=True, timeout=120)
    assert os.path.exists(d / "index.json") and "unreadable" in p.stdout, p.stdout + p.stderr
    res = build([str(d), str(d) + "/"], out=str(tmp_path / "rep"), verbose=False)
    md = open(os.path.join(res["out"], "summary.md")).read()
    assert "Skipped files" in md and str(victim) in md
    assert "Duplicate runs" not in md or "counted once" in md
    states = {k: sum(row[k] for row in res["rows"]) for k in ("complete", "pending", "unreadable", "failed")}
    assert states == {"complete": 2, "pending": 1, "unreadable": 1, "failed": 0}, states
    assert "+1 pending" in md and "+1 unreadable" in md and "failed" not in md.split("## Skipped")[0]
    df = load_runs(str(d))
    status = df.groupby("run").status.first().to_dict()
    assert status == {"grpo-seed0": "unreadable", "grpo-seed1": "complete", "r3-seed0": "complete",
                      "r3-seed1": "pending"}, status
    assert "status rows" in capsys.readouterr().err
    # errors a notebook can catch, and a report that never ends in a traceback
    for bad in (tmp_path / "missing", tmp_path / "empty"):
        if bad.name == "empty":
            bad.mkdir()
        try:
            load_runs(str(bad))
        except AnalysisError as e:
            assert bad.name in str(e)
        else:
            raise AssertionError(f"load_runs({bad}) raised nothing")
    p = subprocess.run([b, "report", str(d), "--out", str(d / "r3-seed0.h5")], capture_output=True, text=True,
                       timeout=300)
    lines = [l for l in p.stderr.splitlines() if l.startswith("moerl: error:")]
    assert p.returncode == 1 and len(lines) == 1 and "is a file" in lines[0] and "Traceback" not in p.stderr, p.stderr
