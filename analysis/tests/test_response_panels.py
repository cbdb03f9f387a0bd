"""The report's panels of variable-length responses (response length, truncation and dynamic-sampling
filtering, mismatch and entropy along the response, gradient norm, per-sequence log-ratio) on
small synthetic run files written here with h5py in the layout of docs/hdf5-schema.md ("Run
results"): each panel's PNG is written exactly when some run has its metrics, index.html shows
it, and files written before the metrics existed still report, without those panels."""
import os

import h5py
import numpy as np
import pytest

from analysis import report
from analysis.plots import position_profile
from analysis.runs import Run

PNG = b"\x89PNG\r\n\x1a\n"
NB = 8  # position buckets along the response
STEPS = 30

PANELS = {  # the report's file → the metrics that make it appear
    "response-length.png": ["response_length_min", "response_length_max", "response_length_p90"],
    "truncated-filtered.png": ["truncated_frac", "filtered_group_frac"],
    "mismatch-by-position.png": ["k3_by_position"],
    "seq-log-ratio.png": ["rc_seq_log_ratio_abs_mean", "seq_log_ratio_abs_p90", "seq_log_ratio_abs_max",
                          "seq_log_ratio_mean"],
    "grad-norm.png": ["grad_norm", "grad_norm_max"],
    "entropy.png": ["entropy", "entropy_by_position"],
}
NEW = sorted({m for ms in PANELS.values() for m in ms} | {"response_length_mean", "tokens_by_position", "lr"})


def metrics_of(seed, algorithm="grpo", steps=STEPS):
    """Every metric of the panels, plausible values: responses that lengthen, truncation that
    follows, a mismatch that grows along the response and over steps, gradient bursts."""
    g = np.random.default_rng(seed + (17 if algorithm != "grpo" else 0))
    t = np.arange(steps) / max(steps - 1, 1)
    grow = 3.0 if algorithm == "grpo" else 1.2
    mean_len = 20 + (30 if algorithm == "grpo" else 15) * t + g.normal(0, 1, steps)
    k3 = 1e-3 * (1 + grow * t[:, None]) * (1 + 0.4 * np.arange(NB))[None, :] * np.exp(g.normal(0, 0.1, (steps, NB)))
    tokens = np.maximum(0.0, 512 * (1 - np.arange(NB) / NB)[None, :] * (0.6 + 0.4 * t[:, None]))
    tokens[:, -1] = 0.0
    k3[:, -1] = np.nan  # no token reached the last bucket
    ent_pos = (1.2 - 0.5 * t[:, None]) * (1 + 0.05 * np.arange(NB))[None, :]
    ent_pos[:, -1] = np.nan
    grad = 0.05 * np.exp(g.normal(0, 0.2, steps))
    grad[steps // 2] *= 8  # a burst
    seq_abs = 0.02 * (1 + grow * t) * np.exp(g.normal(0, 0.1, steps))
    filtered = np.clip(0.1 + 0.5 * t + g.normal(0, 0.03, steps), 0, 1)
    filtered[:3] = np.nan  # steps that did not set it
    return {
        "response_length_mean": mean_len,
        "response_length_min": np.maximum(1.0, mean_len - 15),
        "response_length_max": np.minimum(64.0, mean_len + 25),
        "response_length_p90": np.minimum(64.0, mean_len + 12),
        "truncated_frac": np.clip(0.02 + 0.3 * t ** 2, 0, 1),
        "filtered_group_frac": filtered,
        "seq_log_ratio_mean": 0.3 * seq_abs * (1 if algorithm == "grpo" else -1),
        "rc_seq_log_ratio_abs_mean": seq_abs,
        "seq_log_ratio_abs_p90": 2.2 * seq_abs,
        "seq_log_ratio_abs_max": 6.0 * seq_abs,
        "grad_norm": grad,
        "grad_norm_max": grad * (1.5 + g.random(steps)),
        "entropy": 1.2 - 0.5 * t,
        "lr": np.minimum(1.0, (np.arange(steps) + 1) / 5) * 1e-5,
        "k3_by_position": k3,
        "entropy_by_position": ent_pos,
        "tokens_by_position": tokens,
    }


def write_run(path, seed, algorithm="grpo", metrics=(), steps=STEPS, bucket_width=8, nan=()):
    """A run file with the root attributes of a real one and the metrics the other report parts
    read; `metrics`: names of metrics_of() to add (`nan`: those of them to write all-NaN)."""
    extra = metrics_of(seed, algorithm, steps)
    with h5py.File(path, "w") as f:
        f.attrs["version"] = np.int64(1)
        f.attrs["steps"] = np.int64(steps)
        f.attrs["status"] = "complete"
        f.attrs["collapse_step"] = np.int64(-1)
        f.attrs["scenario"] = (f"# effective scenario\nrl.algorithm = {algorithm}\nrl.max_response_len = 64\n"
                               f"optim.grad_clip = 1\nrun.seed = {seed}\n")
        f.attrs["scenario_hash"] = "0123456789abcdef"
        f.attrs["algorithm"] = algorithm
        f.attrs["routing_replay"] = "none"
        f.attrs["old_logprobs"] = "recompute"
        f.attrs["profile_rollout"] = "fp8-rollout"
        f.attrs["profile_train"] = "bf16-train"
        f.attrs["base_checkpoint"] = "cache/base.h5"
        f.attrs["seed"] = np.int64(seed)
        if bucket_width is not None:
            f.attrs["position_bucket_width"] = np.int64(bucket_width)
        m = f.create_group("metrics")
        t = np.arange(steps) / steps
        m["reward_mean"] = 0.3 + 0.4 * t
        m["eval_accuracy"] = np.where(np.arange(steps) % 10 == 9, 0.3 + 0.4 * t, np.nan)
        m["kl_rollout_train"] = np.full(steps, 2e-3)
        m["flip_rate_mean"] = np.full(steps, 0.05)
        m["is_ratio_max"] = np.full(steps, 3.0)
        m["is_ratio_min"] = np.full(steps, 0.4)
        m["clip_frac"] = np.full(steps, 0.01)
        for name in metrics:
            m[name] = np.full_like(extra[name], np.nan) if name in nan else extra[name]


def build(d, tmp_path):
    res = report.build(str(d), out=str(tmp_path / "report"), verbose=False, static=True)
    with open(os.path.join(res["out"], "static.html")) as f:
        return res, f.read()


def panel_files(res):
    return sorted(f for f in res["files"] if f in PANELS)


def assert_panels(res, html, expected):
    assert panel_files(res) == sorted(expected)
    for name in PANELS:
        path = os.path.join(res["out"], name)
        if name in expected:
            with open(path, "rb") as f:
                assert f.read(8) == PNG, name
            assert f"src='{name}'" in html, name
        else:
            assert not os.path.exists(path), name
            assert name not in html, name


@pytest.fixture()
def new_runs(tmp_path):
    d = tmp_path / "new"
    d.mkdir()
    for algo in ("grpo", "r3"):
        for seed in (0, 1, 2):
            write_run(d / f"{algo}-seed{seed}.h5", seed, algo, NEW)
    return d


def test_every_panel_appears_when_the_runs_have_the_new_metrics(new_runs, tmp_path):
    res, html = build(new_runs, tmp_path)
    assert list(res["groups"]) == ["grpo", "r3"]
    assert_panels(res, html, PANELS)
    for section in ("Response length", "Mismatch along the response", "Gradient norm", "Entropy"):
        assert f"<h2>{section}</h2>" in html
    # the older panels are still there, and the summary table did not grow
    assert "src='reward.png'" in html and "src='stability.png'" in html
    with open(os.path.join(res["out"], "summary.md")) as f:
        assert "response length" not in f.read()


def test_a_file_without_the_new_metrics_still_reports_without_their_panels(tmp_path):
    d = tmp_path / "old"
    d.mkdir()
    write_run(d / "grpo-seed0.h5", 0, bucket_width=None)
    res, html = build(d / "grpo-seed0.h5", tmp_path)
    assert_panels(res, html, [])
    assert "src='reward.png'" in html and "<td>grpo-seed0</td>" in html
    assert os.path.getsize(os.path.join(res["out"], "summary.md")) > 0


def test_each_panel_appears_exactly_with_its_own_metrics(tmp_path):
    for i, (name, needs) in enumerate(PANELS.items()):
        d = tmp_path / f"only-{i}"
        d.mkdir()
        write_run(d / "grpo-seed0.h5", 0, metrics=needs[-1:])  # one of the panel's metrics suffices
        write_run(d / "grpo-seed1.h5", 1)
        res, html = build(d, tmp_path / f"rep-{i}")
        assert_panels(res, html, [name])


def test_metrics_that_no_step_set_do_not_make_a_panel(tmp_path):
    d = tmp_path / "nan"
    d.mkdir()
    write_run(d / "grpo-seed0.h5", 0, metrics=NEW, nan=NEW)
    res, html = build(d, tmp_path)
    assert_panels(res, html, [])


def test_a_constant_mean_length_alone_is_no_length_panel(tmp_path):
    """Files of fixed-length tasks carry response_length_mean = R at every step (docs/metrics.md)
    and the current gradient, entropy and sequence log-ratio metrics."""
    d = tmp_path / "fixed"
    d.mkdir()
    write_run(d / "grpo-seed0.h5", 0, metrics=["grad_norm", "grad_norm_max", "entropy", "rc_seq_log_ratio_abs_mean",
                                               "lr"])
    with h5py.File(d / "grpo-seed0.h5", "a") as f:
        f["metrics/response_length_mean"] = np.full(STEPS, 8.0)
    res, html = build(d, tmp_path)
    assert_panels(res, html, ["grad-norm.png", "entropy.png", "seq-log-ratio.png"])


def test_old_and_new_runs_in_one_report(new_runs, tmp_path):
    write_run(new_runs / "control-seed0.h5", 0, "control")
    res, html = build(new_runs, tmp_path)
    assert list(res["groups"]) == ["control", "grpo", "r3"]
    assert_panels(res, html, PANELS)


def test_position_profile_uses_the_bucket_width_and_the_token_weights(tmp_path):
    write_run(tmp_path / "a.h5", 0, metrics=["k3_by_position", "tokens_by_position"], steps=10, bucket_width=4)
    write_run(tmp_path / "b.h5", 0, metrics=["k3_by_position"], steps=10, bucket_width=None)
    a, b = Run(str(tmp_path / "a.h5")).load(), Run(str(tmp_path / "b.h5")).load()
    x, late = position_profile(a, "k3_by_position", "last")
    np.testing.assert_allclose(x, 4 * np.arange(NB) + 1.5)  # centres of [4b, 4b + 4)
    k3, tok = a.metrics["k3_by_position"], a.metrics["tokens_by_position"]
    want = (k3[-2:, :-1] * tok[-2:, :-1]).sum(axis=0) / tok[-2:, :-1].sum(axis=0)  # last 20% of 10 steps
    np.testing.assert_allclose(late[:-1], want)
    assert np.isnan(late[-1])  # no token in the last bucket
    _, early = position_profile(a, "k3_by_position", "first")
    np.testing.assert_allclose(early[0], (k3[:2, 0] * tok[:2, 0]).sum() / tok[:2, 0].sum())
    assert (late[:-1] > early[:-1]).all()  # the mismatch grew
    x, prof = position_profile(b, "k3_by_position", "last")  # no width attribute, no token counts
    np.testing.assert_allclose(x, np.arange(NB))
    np.testing.assert_allclose(prof[:-1], b.metrics["k3_by_position"][-2:, :-1].mean(axis=0))
    assert position_profile(b, "entropy_by_position", "last") is None


def test_docs_list_every_file_the_report_writes(new_runs, tmp_path):
    res, _ = build(new_runs, tmp_path)
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "sweeps.md")) as f:
        doc = f.read()
    for name in res["files"]:  # the dashboard's data files by their pattern
        name = ("data/m/<k>-<metric>.js" if name.startswith("data/m/") else
                "data/load/<run>.js" if name.startswith("data/load/") else name)
        assert f"`{name}`" in doc, f"docs/sweeps.md does not list the report's {name}"
