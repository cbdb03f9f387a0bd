"""Fixtures of the analysis tests: the moerl binary (MOERL_BIN, as ctest sets it, else the newest
build*/sim/moerl of the tree) and small real sweeps made with it."""
import glob
import json
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY_GRID = os.path.join(ROOT, "tests", "sweep", "tiny-grid.ini")


def moerl_binary():
    b = os.environ.get("MOERL_BIN")
    if b and os.access(b, os.X_OK):
        return b
    found = [p for p in glob.glob(os.path.join(ROOT, "build*", "sim", "moerl")) if os.access(p, os.X_OK)]
    return max(found, key=os.path.getmtime) if found else None


def run_sweep(grid, out, *extra):
    b = moerl_binary()
    if b is None:
        pytest.skip("the moerl binary is not built (cmake --build build): no sweep to analyse")
    p = subprocess.run([b, "sweep", grid, "--out", str(out), "--quiet", *extra], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    return p


@pytest.fixture(scope="session")
def sweep_dir(tmp_path_factory):
    """The tiny grid (GRPO vs R3 × 2 seeds, 2 steps) with per-token dumps."""
    out = tmp_path_factory.mktemp("sweeps") / "tiny"
    p = run_sweep(TINY_GRID, out, "--dump-tensors")
    assert p.returncode == 0, p.stdout + p.stderr
    return str(out)


@pytest.fixture(scope="session")
def failing_sweep_dir(tmp_path_factory):
    """The tiny grid crossed with MoE/dense: r3 on the dense twin fails at run time."""
    d = tmp_path_factory.mktemp("grids")
    grid = d / "moe-dense.ini"
    with open(TINY_GRID) as f:
        text = f.read()
    grid.write_text(text.replace("seeds = 0, 1", "seeds = 0, 1\nmodel.n_experts = 4, 0"))
    out = d / "moe-dense"
    p = run_sweep(str(grid), out)
    assert p.returncode == 1, p.stdout + p.stderr  # some runs failed
    return str(out)


def another_experiment(d):
    """A copy of a sweep's runs made into another experiment's (one more key in their scenario, as
    another grid or --set would make them): rewritten by h5py, without moerl's integrity header.
    Unchanged, a copy holds the same runs as the original, which a report counts once."""
    import h5py
    for p in glob.glob(os.path.join(str(d), "*.h5")):
        if p.endswith(".ckpt.h5"):
            continue
        with h5py.File(p, "r") as src, h5py.File(p + ".tmp", "w") as dst:
            for k in src:
                src.copy(k, dst)
            for k, v in src.attrs.items():
                dst.attrs[k] = v
            text = src.attrs["scenario"]
            text = text.decode() if isinstance(text, bytes) else str(text)
            dst.attrs["scenario"] = text.replace("audit.prompts = 256", "audit.prompts = 255")
            dst.attrs["scenario_hash"] = "another-" + str(src.attrs["scenario_hash"])
        os.replace(p + ".tmp", p)
    # that experiment's index plans these runs (else its runs are another's files under planned names)
    index = os.path.join(str(d), "index.json")
    if os.path.exists(index):
        with open(index) as f:
            idx = json.load(f)
        for row in idx["runs"]:
            if row.get("scenario_hash"):
                row["scenario_hash"] = "another-" + row["scenario_hash"]
        with open(index, "w") as f:
            json.dump(idx, f)
