"""The static figures (`--static`, for papers) on synthetic run files: wide tables scroll instead of
running off the page, the log axes have labelled ticks inside a decade, a share's band stays in
[0, 1], every panel's y axis is labelled, the bar panel of corrections.png has a legend and an x
label, expert load is drawn per run (never a mean over seeds with different base policies), the
precursor figure has no empty lead-time panel when nothing collapsed, and columns that no run
has a value of are left out of the Markdown and HTML tables."""
import os

import h5py
import numpy as np
import pytest

from analysis import plots, precursors, report
from analysis.runs import Run, group_runs
from analysis.summary import group_rows, markdown, to_csv

from .test_response_panels import NEW, write_run


@pytest.fixture()
def figures(monkeypatch):
    """Every matplotlib figure the plots close, kept open for inspection."""
    kept = []
    real = plots.plt.close
    monkeypatch.setattr(plots.plt, "close", lambda fig=None: kept.append(fig) if hasattr(fig, "axes") else real(fig))
    yield kept
    for f in kept:
        real(f)


def _runs(tmp_path, n=3, algos=("grpo", "r3"), steps=30):
    runs = []
    for algo in algos:
        for s in range(n):
            p = tmp_path / f"{algo}-seed{s}.h5"
            write_run(p, s, algo, NEW, steps=steps)
            g = np.random.default_rng(s + 10 * len(algo))
            extra = {
                "expert_load": g.random((steps, 2, 4)) * 100 * (1 + s),
                # ESS near 1 with a spread over seeds: a plain t band would cross 1
                "rc_ess_seq": np.clip(0.97 + g.normal(0, 0.03, steps), 0, 1),
                "rc_ess_token": np.full(steps, 0.99),
                "rc_seq_mis_masked_frac": np.full(steps, 0.01),
                "rc_bucket_abs_log_ratio": np.abs(g.normal(0, 0.1, (steps, 5))),
                "is_ratio_max": 1.5 + 0.3 * g.random(steps),  # less than a decade
                "is_ratio_min": 0.7 + 0.1 * g.random(steps),
            }
            with h5py.File(p, "a") as f:
                for k, v in extra.items():
                    if f"metrics/{k}" in f:
                        del f[f"metrics/{k}"]
                    f[f"metrics/{k}"] = v
            runs.append(Run(str(p), f"{algo}-seed{s}").load())
    return group_runs(runs, ["rl.algorithm"])


def _labelled_ticks(ax):
    lo, hi = ax.get_ylim()
    return [t for t in ax.yaxis.get_major_locator()() if lo <= t <= hi]


def test_every_y_axis_is_labelled_and_log_axes_have_ticks(tmp_path, figures):
    groups = _runs(tmp_path)
    plots.plot_reward(groups, str(tmp_path / "r.png"))
    plots.plot_stability(groups, str(tmp_path / "s.png"))
    plots.plot_correction_diagnostics(groups, str(tmp_path / "c.png"))
    plots.plot_grad_norm(groups, str(tmp_path / "g.png"))
    for fig in figures:
        for ax in fig.axes:
            assert ax.get_ylabel(), f"{ax.get_title()}: no y label"
    stab = figures[1].axes
    assert stab[2].get_yscale() == "log"
    assert len(_labelled_ticks(stab[2])) >= 3, "the IS-ratio axis needs ticks inside its decade"


def test_share_bands_stay_at_or_below_one_and_the_bar_panel_is_labelled(tmp_path, figures):
    groups = _runs(tmp_path)
    plots.plot_correction_diagnostics(groups, str(tmp_path / "c.png"))
    ax_ess, _, ax_bar = figures[0].axes
    tops = [p.vertices[:, 1].max() for c in ax_ess.collections for p in c.get_paths()]
    assert tops and max(tops) <= 1.0 + 1e-12, f"ESS band above 1: {max(tops)}"
    assert ax_bar.get_legend() is not None and ax_bar.get_xlabel()
    assert [t.get_text() for t in ax_bar.get_legend().get_texts()] == ["grpo", "r3"]


def test_expert_load_is_drawn_per_run(tmp_path, figures):
    groups = _runs(tmp_path, n=2, algos=("grpo",))
    runs = groups["grpo"]
    assert plots.plot_expert_load(runs, str(tmp_path / "load.png"), vmax=5.0)
    images = [im for ax in figures[0].axes for im in ax.get_images()]
    assert len(images) == 2  # one heatmap per seed
    for im, r in zip(images, runs):
        x = r.metrics["expert_load"]
        share = x / x.sum(axis=2, keepdims=True) * x.shape[2]
        np.testing.assert_allclose(np.asarray(im.get_array()), share.transpose(1, 2, 0).reshape(8, -1))
    assert [ax.get_title() for ax in figures[0].axes if ax.get_images()] == ["grpo-seed0", "grpo-seed1"]


def test_no_empty_lead_time_panel_when_nothing_collapsed(tmp_path, figures):
    rows = [{"flag": "pre_k3_rise", "collapsed_runs": 0, "detected": 0, "lead_median": float("nan"),
             "false_alarm_rate": 0.25, "leads": []}]
    assert precursors.plot(rows, str(tmp_path / "p.png")) == 1
    texts = [t.get_text() for ax in figures[0].axes for t in ax.texts]
    assert not any("0/0" in t for t in texts)
    rows[0].update(collapsed_runs=2, detected=1, lead_median=3.0, leads=[3])
    assert precursors.plot(rows, str(tmp_path / "p2.png")) == 2


def test_empty_columns_are_left_out_of_the_tables_not_the_csv(tmp_path):
    groups = _runs(tmp_path)
    rows = group_rows(groups)
    md = markdown(rows)
    for title in ("surgery fired", "router τ (last)", "KL staleness"):  # no run has these stabilisers
        assert title not in md
    assert "final reward" in md and "KL(μ‖π_old) k3" in md
    head = to_csv(rows).splitlines()[0].split(",")
    assert "surgery_frac" in head and "kl_staleness" in head  # the CSV's columns do not depend on the runs


def test_static_tables_scroll_instead_of_running_off_the_page(tmp_path):
    groups = _runs(tmp_path)
    d = os.path.dirname(next(iter(groups.values()))[0].path)
    res = report.build(d, out=str(tmp_path / "rep"), verbose=False, static=True)
    page = open(os.path.join(res["out"], "static.html")).read()
    assert "nowrap" not in page
    assert page.count("<div class='scroll'><table>") == page.count("<table>")
    assert ".scroll{overflow-x:auto" in page
