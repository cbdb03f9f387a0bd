"""Every command-line entry point of the analysis refuses bad input with one line on stderr,
"<prog>: error: <what is wrong>" — the path, the key, what is allowed — and exit status 1 (2 for a
bad command line, after argparse's usage), never a Python traceback; the input is left as it was
(analysis/cli.py; docs/reliability.md, "Analysis"). A missing numpy, h5py, matplotlib or scipy is
one line naming the module and the Debian package that installs it: simulated by a module of that
name first on PYTHONPATH that raises ModuleNotFoundError as a missing one does, and for real by
`python3 -S` (no site-packages, so no Debian packages at all). No moerl binary needed."""
import ast
import glob
import hashlib
import json
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest

from .conftest import ROOT

# Every entry point: as its users call it ({d}: a directory argument, {f}: a file argument), and the
# third-party modules it imports before it reads its input.
SCI = ["numpy", "h5py", "scipy"]
ENTRIES = [
    ("analysis", ["-m", "analysis", "{d}"], SCI),
    ("analysis.audits", ["-m", "analysis.audits", "{f}"], ["numpy", "h5py", "matplotlib"]),
    ("analysis.collapse", ["-m", "analysis.collapse", "{d}"], SCI),
    ("analysis.growth", ["-m", "analysis.growth", "{d}"], SCI),
    ("analysis.league", ["-m", "analysis.league", "{d}"], SCI),
    ("analysis.league_add", ["-m", "analysis.league_add", "guard", "--kept", "{f}", "--dir", "{d}", "--seed", "700"], SCI),
    ("analysis.mismatch_table", ["-m", "analysis.mismatch_table", "{d}"], SCI),
    ("analysis/mismatch_table.py", ["analysis/mismatch_table.py", "{d}"], SCI),
    ("analysis.reproductions", ["-m", "analysis.reproductions", "{d}"], SCI + ["matplotlib"]),
    ("analysis/reproductions.py", ["analysis/reproductions.py", "{d}"], SCI + ["matplotlib"]),
    ("analysis.search_rows", ["-m", "analysis.search_rows", "probe", "{d}"], ["numpy", "h5py"]),  # runs.py only
    ("analysis.probe_rule", ["-m", "analysis.probe_rule", "probe", "{d}"], SCI),
    ("analysis/bench/runs_per_hour.py", ["analysis/bench/runs_per_hour.py", "--baseline", "{f}", "--candidate", "{f}"],
     ["h5py"]),
    ("analysis/bench/torch_peer.py", ["analysis/bench/torch_peer.py", "--repeat", "1"], ["torch"]),
]
ENTRY_POINTS = {name: args for name, args, _ in ENTRIES}
NEEDS = {name: needs for name, _, needs in ENTRIES}
DEBIAN = {"numpy": "python3-numpy", "h5py": "python3-h5py", "matplotlib": "python3-matplotlib",
          "scipy": "python3-scipy", "torch": "python3-torch"}
# Entry points not (yet) on analysis/cli.py.
PENDING = set()


def prog_of(args):
    return f"python3 -m {args[1]}" if args[0] == "-m" else os.path.basename(args[0])


def run(args, env_extra=None, flags=()):
    """Runs an entry point from the checkout with a clean environment; (status, stdout, stderr)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "MOERL_ERROR_PREFIX", "MOERL_PROG", "MOERL_TRACEBACK")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(env_extra or {})
    p = subprocess.run([sys.executable, *flags, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=120)
    return p.returncode, p.stdout, p.stderr


def snapshot(*paths):
    """Every file and directory under paths with the hash of its bytes: what "unchanged" compares."""
    out = {}
    for top in paths:
        top = str(top)
        if os.path.isfile(top):
            out[top] = hashlib.sha256(open(top, "rb").read()).hexdigest()
            continue
        for d, dirs, files in os.walk(top):
            out[d] = "dir"
            for f in files:
                p = os.path.join(d, f)
                out[p] = hashlib.sha256(open(p, "rb").read()).hexdigest()
    return out


def refused(args, status, must, env_extra=None, flags=(), prefix=None):
    """Asserts one refusal: the exit status, no traceback, the error line last on stderr (with
    argparse's usage before it for status 2, alone for status 1) with the entry point's prefix,
    holding every string of must. Returns the line."""
    code, out, err = run(args, env_extra, flags)
    assert "Traceback" not in err + out, err
    lines = err.splitlines()
    assert code == status and lines, (code, out, err)
    line = lines[-1]
    prefix = prefix or f"{prog_of(args)}: error: "
    assert line.startswith(prefix), err
    if status == 1:
        assert len(lines) == 1, err
    else:
        assert lines[0].startswith("usage:"), err
    for m in must:
        assert m in line, (m, line)
    return line


def write_run(path, metrics=None, attrs=None, scenario="run.seed = 0\noptim.lr = 1e-4\noptim.grad_clip = 1\n"):
    """A small run file as h5py writes one (no integrity header: other writers pass)."""
    with h5py.File(path, "w") as f:
        f.attrs["status"] = "complete"
        f.attrs["scenario"] = scenario
        for k, v in (attrs or {}).items():
            f.attrs[k] = v
        g = f.create_group("metrics")
        for k, v in (metrics or {"reward_mean": np.linspace(0, 1, 5)}).items():
            g[k] = v


# --- the known triggers of issue 51 ---------------------------------------------------------

def test_a_truncated_sweep_index_is_one_line(tmp_path):
    d = tmp_path / "sweep"
    d.mkdir()
    write_run(d / "grpo-seed0.h5")
    text = json.dumps({"swept_keys": ["run.seed"], "runs": [{"id": "grpo-seed0", "file": "grpo-seed0.h5"}]})
    (d / "index.json").write_text(text[: len(text) // 2])  # a disk that filled while it was written
    before = snapshot(d)
    for name in ("analysis", "analysis.collapse", "analysis.growth", "analysis.search_rows"):
        args = [a.replace("{d}", str(d)) for a in ENTRY_POINTS[name]]
        refused(args, 1, [str(d / "index.json"), "not a valid sweep index", "--index-only"])
    # moerl report's prefix (it sets MOERL_ERROR_PREFIX and MOERL_PROG)
    refused(["-m", "analysis", str(d)], 1, [str(d / "index.json")], prefix="moerl: error: report: ",
            env_extra={"MOERL_ERROR_PREFIX": "moerl: error: report: ", "MOERL_PROG": "moerl report"})
    assert snapshot(d) == before  # no report directory, the index as it was


@pytest.mark.parametrize("index, must", [
    ({"swept_keys": []}, ['no "runs" list']),
    ([1, 2], ['no "runs" list']),
    ({"runs": [{"id": "a"}]}, ['runs[0] has no "file"']),
    ({"runs": [{"file": "a.h5", "id": 3}]}, ['runs[0] has no "id"']),
    ({"runs": ["a.h5"]}, ["runs[0] is not an object"]),
])
def test_a_sweep_index_without_what_is_read_names_the_key(tmp_path, index, must):
    d = tmp_path / "sweep"
    d.mkdir()
    (d / "index.json").write_text(json.dumps(index))
    before = snapshot(d)
    refused(["-m", "analysis", str(d)], 1, [str(d / "index.json")] + must)
    assert snapshot(d) == before


def test_audits_of_bad_json_and_of_a_foreign_file(tmp_path):
    good = {"format": "moerl-audit", "profile_a": "fp8", "profile_b": "bf16", "flip_rate": [0.01, 0.02],
            "any_flip_share": 0.03, "kl": 1e-4, "k3": 1e-4, "extreme_share": 0.0, "max_abs_dlogp": 0.1}
    cases = [
        ("bad.json", json.dumps(good)[:40], ["not valid JSON"]),
        ("other.json", json.dumps({"format": "moerl-run"}), ["not a moerl audit output", "'moerl-run'", "'moerl-audit'"]),
        ("list.json", "[1, 2]", ["not a moerl audit output"]),
        ("nokl.json", json.dumps({k: v for k, v in good.items() if k != "kl"}), ['has no "kl"']),
        ("textkl.json", json.dumps(dict(good, kl="small")), ['"kl" = \'small\': must be a number']),
        ("flips.json", json.dumps(dict(good, flip_rate="high")), ['"flip_rate" must be a list of numbers']),
        ("notes.h5", "not HDF5 at all", ["not a readable moerl audit output"]),
    ]
    for name, text, must in cases:
        p = tmp_path / name
        p.write_text(text)
        before = snapshot(tmp_path)
        refused(["-m", "analysis.audits", str(p)], 1, [str(p)] + must)
        assert snapshot(tmp_path) == before  # no report/ beside it
    refused(["-m", "analysis.audits", str(tmp_path / "absent.json")], 1, [str(tmp_path / "absent.json"), "cannot read"])
    refused(["-m", "analysis.audits", str(tmp_path / "absent.h5")], 1, [str(tmp_path / "absent.h5"), "no such audit file"])
    # the good one still makes its table and picture
    (tmp_path / "good.json").write_text(json.dumps(good))
    code, out, err = run(["-m", "analysis.audits", str(tmp_path / "good.json"), "--out", str(tmp_path / "rep")])
    assert code == 0 and (tmp_path / "rep" / "audits.md").exists(), err


def test_growth_collapse_and_search_rows_of_an_empty_or_missing_directory(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    for name in ("analysis", "analysis.growth", "analysis.collapse", "analysis.search_rows"):
        args = [a.replace("{d}", str(empty)) for a in ENTRY_POINTS[name]]
        refused(args, 1, [str(empty), "is an empty directory"])
        args = [a.replace("{d}", str(tmp_path / "absent")) for a in ENTRY_POINTS[name]]
        refused(args, 1, [str(tmp_path / "absent"), "no such run file or sweep directory"])
    assert os.listdir(empty) == [] and not (tmp_path / "absent").exists()
    # a sweep whose runs have no metrics yet (all pending): said, not an empty table
    d = tmp_path / "pending"
    d.mkdir()
    (d / "index.json").write_text(json.dumps({"runs": [{"id": "a-seed0", "file": "a-seed0.h5", "status": "pending"}]}))
    before = snapshot(d)
    for name in ("analysis.growth", "analysis.search_rows", "analysis.collapse"):
        args = [a.replace("{d}", str(d)) for a in ENTRY_POINTS[name]]
        refused(args, 1, [str(d), "no runs with metrics"])
    assert snapshot(d) == before


def test_usage_errors_exit_2_after_the_usage(tmp_path):
    refused(["-m", "analysis.mismatch_table"], 2, ["the following arguments are required: RESULTS_DIR"])
    refused(["analysis/mismatch_table.py"], 2, ["the following arguments are required: RESULTS_DIR"])
    refused(["analysis/reproductions.py"], 2, ["the following arguments are required: RESULTS_DIR"])
    refused(["-m", "analysis.search_rows"], 2, ["required: PROBE, SWEEP_DIR"])
    refused(["-m", "analysis.search_rows", "probe"], 2, ["required: SWEEP_DIR"])
    refused(["-m", "analysis.growth"], 2, ["required: SWEEP_DIR"])
    refused(["-m", "analysis.audits"], 2, ["required: audits"])
    refused(["-m", "analysis.collapse", str(tmp_path), "--outcome", "x"], 2, ["--outcome", "invalid choice: 'x'"])
    refused(["-m", "analysis", str(tmp_path), "--smooth", "many"], 2, ["--smooth", "invalid int value: 'many'"])
    refused(["analysis/bench/scaling.py", "--sweeps", "experts,bogus"], 2, ["--sweeps", "'bogus'", "experts, seq"])
    refused(["analysis/bench/runs_per_hour.py", "--baseline", "x", "--candidate", "x", "--pairs", "0"], 2,
            ["--pairs = 0: must be >= 1"])


def test_mismatch_table_and_reproductions_of_bad_directories_and_files(tmp_path):
    for name in ("analysis.mismatch_table", "analysis/mismatch_table.py", "analysis.reproductions",
                 "analysis/reproductions.py"):
        args = ENTRY_POINTS[name]
        refused([a.replace("{d}", str(tmp_path / "absent")) for a in args], 1, [str(tmp_path / "absent"), "no such directory"])
        empty = tmp_path / "empty"
        empty.mkdir(exist_ok=True)
        refused([a.replace("{d}", str(empty)) for a in args], 1, [str(empty), "no <variant>-seed<k>.h5 run files"])
        assert os.listdir(empty) == []  # no report/ made for nothing
    # a damaged run file, and one without the metrics each script reads
    d = tmp_path / "bad"
    d.mkdir()
    (d / "grpo-seed0.h5").write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 40)
    before = snapshot(d)
    for name in ("analysis.mismatch_table", "analysis.reproductions"):
        refused([a.replace("{d}", str(d)) for a in ENTRY_POINTS[name]], 1, [str(d / "grpo-seed0.h5"), "unreadable"])
    assert snapshot(d) == before
    d = tmp_path / "old"
    d.mkdir()
    write_run(d / "grpo-seed0.h5")
    before = snapshot(d)
    refused(["-m", "analysis.mismatch_table", str(d)], 1, [str(d / "grpo-seed0.h5"), "has no metric kl_rollout_train"])
    refused(["analysis/reproductions.py", str(d)], 1, [str(d / "grpo-seed0.h5"), "has no metric eval_accuracy"])
    assert snapshot(d) == before


def test_search_rows_names_a_scenario_key_that_is_not_a_number(tmp_path):
    d = tmp_path / "runs"
    d.mkdir()
    write_run(d / "a-seed0.h5", scenario="run.seed = 0\noptim.grad_clip = 1\n")  # no optim.lr
    before = snapshot(d)
    refused(["-m", "analysis.search_rows", "probe", str(d)], 1, [str(d / "a-seed0.h5"), "optim.lr = ''", "not a number"])
    assert snapshot(d) == before


def test_bench_scripts(tmp_path):
    refused(["analysis/bench/compare.py", "--moerl", str(tmp_path / "absent")], 1,
            [str(tmp_path / "absent"), "is not an executable"])
    refused(["analysis/bench/scaling.py", "--moerl", str(tmp_path / "absent"), "--data", str(tmp_path / "data"),
             "--images", str(tmp_path / "img")], 1, [str(tmp_path / "absent"), "is not an executable"])
    assert not (tmp_path / "data").exists() and not (tmp_path / "img").exists()


# --- missing Python modules -----------------------------------------------------------------

def shim(tmp_path, module):
    """A directory whose module raises what importing a missing one raises."""
    d = tmp_path / f"without-{module}"
    d.mkdir(exist_ok=True)
    (d / f"{module}.py").write_text(f"raise ModuleNotFoundError(\"No module named '{module}'\", name={module!r})\n")
    return str(d)


def inputs(tmp_path):
    d = tmp_path / "in"
    d.mkdir(exist_ok=True)
    f = tmp_path / "in.json"
    f.write_text("{}")
    return d, f


@pytest.mark.parametrize("name, module", [(n, m) for n, ms in NEEDS.items() for m in ms])
def test_a_missing_module_is_one_line_naming_its_debian_package(tmp_path, name, module):
    d, f = inputs(tmp_path)
    args = [a.replace("{d}", str(d)).replace("{f}", str(f)) for a in ENTRY_POINTS[name]]
    before = snapshot(d, f)
    line = refused(args, 1, [f"the Python module {module} cannot be imported", DEBIAN[module],
                             f"apt install {DEBIAN[module]}"], env_extra={"PYTHONPATH": shim(tmp_path, module)})
    assert sys.executable in line
    assert snapshot(d, f) == before


@pytest.mark.parametrize("args, module", [
    (["-m", "analysis", "{d}", "--static"], "matplotlib"),
    (["-m", "analysis.collapse", "{d}", "--dial", "x"], "matplotlib"),
])
def test_matplotlib_is_needed_only_for_figures_and_checked_first(tmp_path, args, module):
    d, f = inputs(tmp_path)
    args = [a.replace("{d}", str(d)) for a in args]
    before = snapshot(d)
    refused(args, 1, [f"the Python module {module} cannot be imported", DEBIAN[module]],
            env_extra={"PYTHONPATH": shim(tmp_path, module)})
    assert snapshot(d) == before


def test_without_any_site_packages(tmp_path):
    """python3 -S: no site-packages, so none of the Debian packages (numpy, h5py, ...)."""
    if subprocess.run([sys.executable, "-S", "-c", "import numpy"], capture_output=True).returncode == 0:
        pytest.skip(f"{sys.executable} -S still imports numpy (not a Debian layout)")
    d, f = inputs(tmp_path)
    before = snapshot(d, f)
    for name, args in ENTRY_POINTS.items():
        args = [a.replace("{d}", str(d)).replace("{f}", str(f)) for a in args]
        line = refused(args, 1, ["cannot be imported", "No module named", "apt install python3-"], flags=("-S",))
        assert any(f"the Python module {m} " in line for m in NEEDS[name]), line
    assert snapshot(d, f) == before


# --- the helper itself, and that every entry point uses it ----------------------------------

def test_an_unexpected_exception_is_one_line_with_where_and_traceback_on_request():
    code = ("from analysis.cli import Entry\n"
            "def main():\n"
            "    return {}['missing_key']\n"
            "Entry('__main__', 'x', prog='demo').run(main)\n")
    status, out, err = run(["-c", code])
    assert status == 1 and "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith("demo: error: internal error: KeyError: 'missing_key' at <string>:3"), err
    assert "MOERL_TRACEBACK=1" in err
    status, out, err = run(["-c", code], env_extra={"MOERL_TRACEBACK": "1"})
    assert status == 1 and "Traceback" in err and "KeyError" in err
    # a main's return value is the exit status; sys.exit("reason") gets the prefix
    assert run(["-c", "from analysis.cli import Entry\nEntry('__main__', 'x', prog='demo').run(lambda: 3)"])[0] == 3
    status, out, err = run(["-c", "import sys\nfrom analysis.cli import Entry\n"
                                  "Entry('__main__', 'x', prog='demo').run(lambda: sys.exit('no good'))"])
    assert (status, err) == (1, "demo: error: no good\n")


def test_imported_as_a_library_nothing_is_caught():
    """A notebook sees ordinary exceptions: AnalysisError (the same class from analysis.runs and
    analysis.cli), SystemExit from main(), an ImportError from the imports."""
    from analysis import cli, runs
    assert runs.AnalysisError is cli.AnalysisError
    e = cli.Entry("analysis.something", "analysis.something")
    with pytest.raises(ModuleNotFoundError):
        with e.imports():
            import analysis_no_such_module  # noqa: F401


def test_every_entry_point_uses_the_helper():
    """Each module of analysis/ with a __main__ block (and analysis/__main__.py) calls entry.run,
    and is in ENTRY_POINTS here or tested above."""
    files = sorted(glob.glob(os.path.join(ROOT, "analysis", "*.py")) + glob.glob(os.path.join(ROOT, "analysis", "bench", "*.py")))
    mains = []
    for path in files:
        src = open(path).read()
        tree = ast.parse(src)
        has_main = os.path.basename(path) == "__main__.py" or any(
            isinstance(n, ast.If) and "__main__" in ast.unparse(n.test) for n in tree.body)
        if not has_main or os.path.basename(path) in PENDING:
            continue
        mains.append(os.path.relpath(path, ROOT))
        assert "entry.run(main)" in src and "Entry(__name__" in src, path
    assert len(mains) >= 11, mains
