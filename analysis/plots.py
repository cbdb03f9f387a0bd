"""The report's pictures (matplotlib, Agg backend, PNG). Each function takes groups (label → runs,
analysis/runs.py) or one run and writes one file; curves are the mean over a group's runs with a
95% Student-t band over seeds (analysis/stats.py).
"""
import warnings

import numpy as np

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from .runs import expert_shares  # noqa: E402
from .stats import band, smooth  # noqa: E402

DPI = 100


def _stack(runs, name, w=1):
    """[runs, steps] of a scalar metric, each smoothed over w steps, NaN-padded to the longest run."""
    ys = [smooth(r.series(name), w) for r in runs if r.metrics]
    n = max((len(y) for y in ys), default=0)
    out = np.full((len(ys), n), np.nan)
    for i, y in enumerate(ys):
        out[i, : len(y)] = y
    return out


def _mean_band(ys, log):
    """(mean, low, high) per column of a [runs, points] array: the mean ± its 95% half-width (band),
    or with log the same over log10 of the positive values (a geometric mean with a multiplicative
    band; values ≤ 0 left out)."""
    if log:
        with np.errstate(divide="ignore", invalid="ignore"):
            lm, lci = band(np.where(ys > 0, np.log10(np.where(ys > 0, ys, 1.0)), np.nan))
        return 10 ** lm, 10 ** (lm - lci), 10 ** (lm + lci)
    mu, ci = band(ys)
    return mu, mu - ci, mu + ci


def _curve(ax, runs, name, label, w=1, scale=1.0, log=False, show_band=True, upper=None, **kw):
    """Mean over runs with its 95% band. log: for positive, skewed quantities (KL, ratios) the mean
    and band are taken over log10 values (a geometric mean with a multiplicative band); otherwise
    a band of a non-negative quantity is cut at 0, and at `upper` when given (a share's 1)."""
    ys = _stack(runs, name, w) * scale
    if ys.size == 0 or not np.isfinite(ys).any():
        return None
    mu, lo, hi = _mean_band(ys, log)
    if not log:
        if np.nanmin(ys) >= 0:
            lo = np.maximum(lo, 0.0)
        if upper is not None:
            hi = np.minimum(hi, upper)
    x = np.arange(1, ys.shape[1] + 1)
    keep = np.isfinite(mu)
    line, = ax.plot(x[keep], mu[keep], label=label, **kw)
    if show_band and np.isfinite(hi[keep]).any():
        ax.fill_between(x[keep], lo[keep], hi[keep], alpha=0.18, color=line.get_color(), linewidth=0)
    return line


def _finish(fig, axes, path, title, step_axes=None):
    """Labels the axes over RL steps (step_axes, default all), legend, title, and saves."""
    for ax in axes if step_axes is None else step_axes:
        ax.set_xlabel("RL step")
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:
        axes[0].legend(fontsize=8)
    save_figure(fig, path, title)


def save_figure(fig, path, title="", dpi=DPI):
    """Titles the figure (when a title is given), lays it out, saves it (PNG at dpi) and closes it:
    the last lines of every figure of analysis/."""
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)


def plot_reward(groups, path, w=1, title=""):
    """Sampled reward (w-step trailing mean) and greedy held-out accuracy per group, mean ± 95% band."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for label, runs in groups.items():
        line = _curve(axes[0], runs, "reward_mean", label, w)
        ys = _stack(runs, "eval_accuracy")
        if ys.size and np.isfinite(ys).any():
            mu, ci = band(ys)
            idx = np.where(np.isfinite(mu))[0]
            kw = {"color": line.get_color()} if line is not None else {}
            l2, = axes[1].plot(idx + 1, mu[idx], marker="o", ms=3, label=label, **kw)
            if np.isfinite(ci[idx]).any():
                axes[1].fill_between(idx + 1, (mu - ci)[idx], (mu + ci)[idx], alpha=0.18, color=l2.get_color(),
                                     linewidth=0)
    axes[0].set_title("sampled reward" + (f" ({w}-step mean)" if w > 1 else ""))
    axes[0].set_ylabel("reward_mean (mean over the step's responses)")
    axes[1].set_title("greedy held-out accuracy")
    axes[1].set_ylabel("eval_accuracy (share of held-out prompts)")
    for ax in axes:
        lo, hi = ax.get_ylim()
        ax.set_ylim(max(lo, 0.0), min(hi, 1.0))  # both are shares in [0, 1]
    _finish(fig, axes, path, title)


def plot_stability(groups, path, w=1, title=""):
    """Train–inference KL, routing flip rate, IS-ratio range and clip fraction over steps."""
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    axes = axes.ravel()
    for label, runs in groups.items():
        positive = all(np.nanmin(np.concatenate([r.series("kl_rollout_train"), [1.0]])) > 0 for r in runs)
        line = _curve(axes[0], runs, "kl_rollout_train", label, w, log=positive)
        color = {"color": line.get_color()} if line is not None else {}
        _curve(axes[1], runs, "flip_rate_mean", label, w, scale=100.0, upper=100.0, **color)
        hi = _curve(axes[2], runs, "is_ratio_max", label, w, log=True, show_band=False, **color)
        if hi is not None:
            _curve(axes[2], runs, "is_ratio_min", None, w, log=True, show_band=False, linestyle="--",
                   color=hi.get_color())
        _curve(axes[3], runs, "clip_frac", label, w, upper=1.0, **color)
    axes[0].set_title("train–inference KL, k3 of KL(μ‖π_old) (geometric mean)")
    axes[0].set_ylabel("k3 per token (nats)")
    axes[1].set_title("routing flip rate")
    axes[1].set_ylabel("% of (token, layer) pairs")
    axes[1].axhline(2.0, color="0.5", linestyle=":", linewidth=1)
    axes[1].annotate("2% alarm", (0.01, 2.0), xycoords=("axes fraction", "data"), fontsize=7, color="0.4",
                     va="bottom")
    axes[2].set_title("IS ratio ρ = π_old/μ over a step's tokens: max (solid), min (dashed)")
    axes[2].set_ylabel("ρ (log scale)")
    axes[3].set_title("clip fraction")
    axes[3].set_ylabel("share of tokens clipped")
    for ax in (axes[0], axes[2]):
        if any(np.nanmin(ln.get_ydata()) > 0 for ln in ax.get_lines() if len(ln.get_ydata())):
            _log_y(ax)  # labelled ticks inside a decade, not one tick at 10⁰
    _finish(fig, axes, path, title)


def has_diagnostics(groups):
    """True when some run masks tokens (IcePop, MIS) or rescales them (RSPO's γ < 1)."""
    for runs in groups.values():
        for r in runs:
            if np.nanmax(np.concatenate([r.series("masked_frac"), [0.0]])) > 0:
                return True
            if np.nanmin(np.concatenate([r.series("rspo_gamma_min"), [1.0]])) < 1:
                return True
    return False


def plot_diagnostics(groups, path, w=1, title=""):
    """The algorithms' own knobs over steps: clip fraction, masked-token fraction (IcePop's band,
    MIS) and RSPO's router-shift weight γ (mean and min)."""
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for label, runs in groups.items():
        line = _curve(axes[0], runs, "clip_frac", label, w)
        color = {"color": line.get_color()} if line is not None else {}
        _curve(axes[1], runs, "masked_frac", label, w, upper=1.0, **color)
        g = _curve(axes[2], runs, "rspo_gamma_mean", label, w, **color)
        if g is not None:
            _curve(axes[2], runs, "rspo_gamma_min", None, w, linestyle="--", color=g.get_color())
    axes[0].set_title("clip fraction")
    axes[0].set_ylabel("share of tokens clipped")
    axes[1].set_title("masked tokens (IcePop band, MIS)")
    axes[1].set_ylabel("share of tokens masked")
    axes[2].set_title("RSPO γ: mean (solid), min (dashed); 1 = unscaled")
    axes[2].set_ylabel("γ (router-shift weight)")
    _finish(fig, axes, path, title)


LOAD_RUNS = 4  # heatmaps per group in the static figure (the dashboard shows every run)


def load_vmax(groups):
    """A common colour-scale top for every heatmap: the 99th percentile of every run's shares, at
    least 2 (twice the even share)."""
    vals = [expert_shares(r) for runs in groups.values() for r in runs]
    vals = [v[np.isfinite(v)] for v in vals if v is not None]
    vals = np.concatenate(vals) if vals else np.array([])
    return max(2.0, float(np.percentile(vals, 99))) if vals.size else 2.0


def plot_expert_load(runs, path, title="", vmax=None):
    """Heatmaps of expert load over steps, one per run (the first LOAD_RUNS runs with expert_load),
    side by side: rows layer × expert, columns RL steps; vmax: the top of the colour scale
    (default: this plot's own, see load_vmax). Returns False when there is nothing to draw (dense)."""
    have = [(r, expert_shares(r)) for r in runs]
    have = [(r, s) for r, s in have if s is not None][:LOAD_RUNS]
    if not have:
        return False
    vmax = vmax if vmax is not None else load_vmax({"": runs})
    S = max(s.shape[0] for _, s in have)
    L, E = have[0][1].shape[1:]
    n = len(have)
    fig, axes = plt.subplots(1, n, figsize=(min(5.5 * n, 22), min(9, 1.8 + 0.18 * L * E)), squeeze=False)
    axes = list(axes[0])
    for ax, (r, share) in zip(axes, have):
        s_r, L, E = share.shape
        img = share.transpose(1, 2, 0).reshape(L * E, s_r)  # row l·E + e
        im = ax.imshow(img, aspect="auto", interpolation="nearest", cmap="magma", vmin=0, vmax=vmax,
                       extent=(0.5, s_r + 0.5, L * E - 0.5, -0.5))
        for l in range(1, L):
            ax.axhline(l * E - 0.5, color="white", linewidth=1.2)
        ax.set_yticks([l * E + (E - 1) / 2 for l in range(L)])
        ax.set_yticklabels([f"layer {l}" for l in range(L)])
        ax.set_xlabel("RL step")
        ax.set_title(r.name, fontsize=9)
    axes[0].set_ylabel(f"expert (0..{E - 1} within each layer)")
    cb = fig.colorbar(im, ax=axes)
    cb.set_label("load / balanced share (1 = even, 0 = dead)")
    fig.suptitle(title or "expert load", fontsize=11)
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return True


def _clip_band(run):
    """(1 − ε_low, 1 + ε_high) of a run: the resolved clip_low / clip_high the results file records
    (docs/hdf5-schema.md); files from before those attributes fall back to the scenario's keys and
    the defaults of the algorithms of that time (negative keys = the algorithm's default)."""
    if "clip_low" in run.attrs and "clip_high" in run.attrs:
        return 1 - float(run.attrs["clip_low"]), 1 + float(run.attrs["clip_high"])
    algo = run.scenario.get("rl.algorithm", "grpo")
    d_lo, d_hi = (3e-4, 4e-4) if algo == "gspo" else (0.2, 0.2)
    lo = float(run.scenario.get("rl.clip_low", -1))
    hi = float(run.scenario.get("rl.clip_high", -1))
    return 1 - (lo if lo >= 0 else d_lo), 1 + (hi if hi >= 0 else d_hi)


def dump_steps(path):
    import h5py
    with h5py.File(path, "r") as f:
        if "dump" not in f:
            return []
        return sorted(int(k.split("_")[1]) for k in f["dump"])


def plot_ratios(run, path, title=""):
    """From a run with --dump-tensors: histograms of the train–inference ratio ρ = π_old/μ and of the
    ratio the algorithm clips (with its clip band), for up to three dumped steps, beside the clip
    fraction over steps. Returns False when the run has no dumps."""
    import h5py
    steps = dump_steps(run.path)
    if not steps:
        return False
    pick = sorted({steps[0], steps[len(steps) // 2], steps[-1]})
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    lo, hi = _clip_band(run)
    flat_rho = flat_ratio = True  # every dumped ρ, ratio exactly 1 (bypass mode; first mini-batch)
    with h5py.File(run.path, "r") as f:
        for s in pick:
            g = f[f"dump/step_{s}"]
            m = g["mask"][()] > 0
            log_rho = (g["logp_old"][()] - g["logp_rollout"][()])[m]
            r = g["ratio"][()][m]
            clipped = np.mean((r < lo) | (r > hi)) if r.size else float("nan")
            flat_rho = flat_rho and bool(np.all(log_rho == 0))
            flat_ratio = flat_ratio and bool(np.all(r == 1))
            axes[0].hist(log_rho, bins=80, histtype="step", log=True, label=f"step {s + 1}")
            axes[1].hist(np.log(np.maximum(r, 1e-30)), bins=80, histtype="step", log=True,
                         label=f"step {s + 1}: {100 * clipped:.1f}% outside")
    for x in (np.log(0.5), np.log(2.0)):
        axes[0].axvline(x, color="0.4", linestyle=":", linewidth=1)
    axes[0].set_title("log ρ = log π_old − log μ per token (dotted: ρ = ½, 2)")
    axes[0].set_xlabel("log ρ")
    for x in (np.log(lo), np.log(hi)):
        axes[1].axvline(x, color="C3", linestyle="--", linewidth=1)
    note = dict(xycoords="axes fraction", fontsize=9, ha="center", va="center",
                bbox=dict(boxstyle="round", fc="lightyellow", ec="0.6"))
    if flat_rho:
        axes[0].annotate("π_old is the rollout's μ here (bypass mode):\nρ ≡ 1, the mismatch moved into the ratio →",
                         (0.5, 0.6), **note)
    if flat_ratio:
        axes[1].annotate("π_old recomputed by the train engine:\non the first mini-batch π_θ = π_old, ratio ≡ 1;\n"
                         "clipping acts on later mini-batches", (0.5, 0.6), **note)
    axes[1].set_title(f"log of the clipped ratio (dashed: clip band [{lo:g}, {hi:g}])")
    axes[1].set_xlabel("log ratio")
    for ax in axes[:2]:
        ax.set_ylabel("tokens")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    x = np.arange(1, run.steps + 1)
    axes[2].plot(x, run.series("clip_frac"), label="clip fraction")
    axes[2].plot(x, run.series("extreme_token_frac"), label="extreme tokens (ρ > 2 or < ½)")
    axes[2].plot(x, run.series("any_flip_frac"), label="tokens with ≥ 1 routing flip")
    axes[2].set_xlabel("RL step")
    axes[2].set_title("per step")
    axes[2].legend(fontsize=8)
    axes[2].grid(alpha=0.3)
    save_figure(fig, path, title)
    return True


def has_correction_diagnostics(groups):
    """True when some run carries the rollout-correction diagnostics (rc_* metrics)."""
    return any("rc_ess_seq" in r.metrics for runs in groups.values() for r in runs)


def plot_correction_diagnostics(groups, path, w=1, title=""):
    """Rollout-correction diagnostics over steps (docs/metrics.md): effective sample size of the
    token and sequence weights, the share of sequences seq-mis / seq-max-k3 would drop, and the
    mismatch per probability bucket of the sampled token (mean over steps and runs)."""
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    edges = ["<1e-3", "1e-3–1e-2", "1e-2–0.1", "0.1–0.5", ">0.5"]
    nb = len(groups)
    for gi, (label, runs) in enumerate(groups.items()):
        line = _curve(axes[0], runs, "rc_ess_seq", label, w, upper=1.0)  # ESS / N is at most 1
        color = {"color": line.get_color()} if line is not None else {}
        _curve(axes[0], runs, "rc_ess_token", None, w, linestyle="--", show_band=False, **color)
        _curve(axes[1], runs, "rc_seq_mis_masked_frac", label, w, upper=1.0, **color)
        _curve(axes[1], runs, "rc_seq_max_k3_masked_frac", None, w, linestyle="--", show_band=False, **color)
        rows = [r.metrics["rc_bucket_abs_log_ratio"] for r in runs if "rc_bucket_abs_log_ratio" in r.metrics]
        if rows:
            v = np.concatenate(rows, axis=0)  # [steps over runs, 5]; NaN = empty bucket
            n = np.isfinite(v).sum(axis=0)
            m = np.where(n > 0, np.nansum(v, axis=0) / np.maximum(n, 1), 0.0)
            x = np.arange(5) + (gi - (nb - 1) / 2) * 0.8 / max(nb, 1)
            axes[2].bar(x, m, width=0.8 / max(nb, 1), label=label, **color)
    axes[0].set_title("ESS of the IS weights: sequence (solid), token (dashed)", fontsize=10)
    axes[1].set_title("sequences dropped by seq-mis (solid) / seq-max-k3 (dashed)", fontsize=10)
    axes[2].set_title("mean |log μ − log π_old| by π_old(token)", fontsize=10)
    axes[2].set_xticks(range(5), edges, fontsize=8)
    axes[2].set_xlabel("π_old of the sampled token (bucket)")
    axes[2].set_ylabel("mean |log μ − log π_old| (nats)")
    axes[2].grid(alpha=0.3, axis="y")
    axes[0].set_ylabel("ESS / N (1 = uniform weights)")
    axes[0].set_ylim(top=1.02)
    axes[1].set_ylabel("share of sequences")
    if axes[2].get_legend_handles_labels()[0]:
        axes[2].legend(fontsize=8, title="group", title_fontsize=8)
    _finish(fig, axes, path, title, step_axes=axes[:2])


# ---- variable-length responses: length, truncation, mismatch and entropy along the response ----
# Each panel is drawn when some run has a finite value of one of its metrics (run files written
# before the metrics existed have none, so the report leaves the panel out); an axis of a panel
# whose metrics no run has is left out of the figure.

def _has(groups, *names):
    """True when some run has a finite value of one of the metrics."""
    return any(n in r.metrics and np.isfinite(r.metrics[n]).any()
               for runs in groups.values() for r in runs for n in names)


def _scenario_number(groups, key):
    """The value of a numeric scenario key when every run with metrics has the same one, else None."""
    vals = {r.scenario.get(key, "") for runs in groups.values() for r in runs if r.metrics}
    if len(vals) != 1:
        return None
    try:
        v = float(vals.pop())
    except ValueError:
        return None
    return v if np.isfinite(v) else None


def _log_y(ax):
    """A log y axis with labelled ticks: at every integer × 10^k when the curves span less than a
    decade, at 1, 2, 3, 5 × 10^k up to two, at 1, 2, 5 × 10^k up to three (matplotlib's default
    labels only the powers of ten, often one or two of them)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    if not any(len(ln.get_ydata()) and np.nanmax(ln.get_ydata()) > 0 for ln in ax.get_lines()):
        return  # nothing positive: stay linear
    ax.set_yscale("log")
    ax.relim()
    ax.autoscale_view()
    lo, hi = ax.get_ylim()
    decades = np.log10(hi / lo) if lo > 0 and hi > lo else np.inf
    if decades <= 3:
        subs = np.arange(1.0, 10.0) if decades < 1 else (1.0, 2.0, 3.0, 5.0) if decades < 2 else (1.0, 2.0, 5.0)
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=subs))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
    ax.grid(alpha=0.3, which="major")
    ax.grid(alpha=0.12, which="minor")


def has_response_length(groups):
    """The length panel: the spread metrics exist, or the mean length varies (older files carry a
    constant response_length_mean: every task had a fixed answer length)."""
    if _has(groups, "response_length_min", "response_length_max", "response_length_p90"):
        return True
    for runs in groups.values():
        for r in runs:
            x = r.series("response_length_mean")
            x = x[np.isfinite(x)]
            if x.size and x.max() > x.min():
                return True
    return False


def plot_response_length(groups, path, w=1, title=""):
    """Response length over steps (tokens, EOS included): the mean with its 95% band over seeds
    (solid), the p90 (dashed) and the range from the shortest to the longest response (shaded,
    dotted edges; each the mean over the group's runs), and rl.max_response_len when the runs share it."""
    fig, ax = plt.subplots(figsize=(11, 4.5))
    for label, runs in groups.items():
        line = _curve(ax, runs, "response_length_mean", label, w)
        color = {"color": line.get_color()} if line is not None else {}
        p90 = _curve(ax, runs, "response_length_p90", None if line is not None else label, w, linestyle="--",
                     show_band=False, **color)
        color = color or ({"color": p90.get_color()} if p90 is not None else {})
        lo, hi = _stack(runs, "response_length_min", w), _stack(runs, "response_length_max", w)
        if lo.size and hi.size and np.isfinite(lo).any() and np.isfinite(hi).any():
            with np.errstate(invalid="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN steps
                lo, hi = np.nanmean(lo, axis=0), np.nanmean(hi, axis=0)
            x = np.arange(1, len(lo) + 1)
            keep = np.isfinite(lo) & np.isfinite(hi)
            c = color.get("color")
            ax.fill_between(x[keep], lo[keep], hi[keep], alpha=0.08, color=c, linewidth=0)
            ax.plot(x[keep], lo[keep], linestyle=":", linewidth=0.9, color=c)
            ax.plot(x[keep], hi[keep], linestyle=":", linewidth=0.9, color=c)
    cap = _scenario_number(groups, "rl.max_response_len")
    if cap is not None and cap > 0:
        ax.axhline(cap, color="0.4", linestyle="-.", linewidth=1)
        ax.annotate(f"rl.max_response_len = {cap:g}", (0.01, cap), xycoords=("axes fraction", "data"), fontsize=7,
                    color="0.3", va="bottom")
    ax.set_ylim(bottom=0)
    ax.set_ylabel("response length (tokens, EOS included)")
    ax.set_title("response length: mean (solid, 95% band over seeds), p90 (dashed), shortest–longest (shaded)",
                 fontsize=10)
    _finish(fig, [ax], path, title)


def has_truncation(groups):
    return _has(groups, "truncated_frac", "filtered_group_frac")


def plot_truncation(groups, path, w=1, title=""):
    """Share of responses cut at rl.max_response_len without EOS, and share of prompt groups DAPO's
    dynamic sampling dropped (all rewards equal), in %, each mean ± 95% band over seeds."""
    specs = [(n, t, y) for n, t, y in [
        ("truncated_frac", "truncated: hit rl.max_response_len without EOS", "% of the step's responses"),
        ("filtered_group_frac", "filtered: prompt groups rl.filter_groups dropped (equal rewards)",
         "% of the step's prompt groups"),
    ] if _has(groups, n)]
    fig, axes = plt.subplots(1, len(specs), figsize=(5.5 * len(specs) + 0.5, 4), squeeze=False)
    axes = list(axes[0])
    for ax, (name, t, ylabel) in zip(axes, specs):
        for label, runs in groups.items():
            _curve(ax, runs, name, label, w, scale=100.0)
        ax.set_title(t, fontsize=10)
        ax.set_ylabel(ylabel)
        ax.set_ylim(bottom=0)
    _finish(fig, axes, path, title)


def bucket_width(run):
    """Response tokens per position bucket: the root attribute position_bucket_width (1 when absent)."""
    try:
        v = int(run.attrs.get("position_bucket_width", 1))
    except (TypeError, ValueError):
        return 1
    return v if v >= 1 else 1


def position_profile(run, name, which, frac=0.2):
    """(x, y) of a [steps, NB] per-position metric: y[b] = the mean over the run's first (which =
    "first") or last ("last") max(1, round(frac · steps)) steps of bucket b, weighted by
    tokens_by_position where the run has it (NaN where no step had a token there); x[b] = the
    centre of bucket b in response positions (0-based), b·W + (W − 1)/2. None without the metric."""
    v = run.metrics.get(name)
    if v is None or v.ndim != 2 or not v.shape[0] or not np.isfinite(v).any():
        return None
    n = max(1, int(round(frac * v.shape[0])))
    rows = slice(0, n) if which == "first" else slice(v.shape[0] - n, v.shape[0])
    y = v[rows]
    tok = run.metrics.get("tokens_by_position")
    if tok is not None and tok.shape == v.shape:
        wt = np.where(np.isfinite(tok[rows]) & np.isfinite(y), tok[rows], 0.0)
    else:
        wt = np.isfinite(y).astype(float)
    s = wt.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        prof = np.where(s > 0, np.nansum(np.where(wt > 0, y, 0.0) * wt, axis=0) / s, np.nan)
    W = bucket_width(run)
    return np.arange(v.shape[1]) * W + (W - 1) / 2, prof


def _profile_curve(ax, runs, name, label, which, log=False, **kw):
    """One group's position profile: mean over its runs with a 95% band (over log10 values when
    log, a geometric mean). Returns the line, or None when no run has the metric."""
    profs = [p for p in (position_profile(r, name, which) for r in runs if r.metrics) if p is not None]
    if not profs:
        return None
    nb = max(len(p[1]) for p in profs)
    x = next(p[0] for p in profs if len(p[1]) == nb)
    ys = np.full((len(profs), nb), np.nan)
    for i, (_, y) in enumerate(profs):
        ys[i, : len(y)] = y
    mu, lo, hi = _mean_band(ys, log)
    keep = np.isfinite(mu)
    if not keep.any():
        return None
    line, = ax.plot(x[keep], mu[keep], marker="o", ms=3, label=label, **kw)
    if np.isfinite(hi[keep]).any():
        ax.fill_between(x[keep], lo[keep], hi[keep], alpha=0.15, color=line.get_color(), linewidth=0)
    return line


def _profiles(ax, groups, name, log):
    """Every group's profile over its last fifth of steps (solid) and its first fifth (dashed)."""
    for label, runs in groups.items():
        late = _profile_curve(ax, runs, name, label, "last", log)
        if late is None and log and any(position_profile(r, name, "last") is not None for r in runs if r.metrics):
            ax.plot([], [], " ", label=f"{label}: no value above 0, not on the log axis")  # e.g. no mismatch at all
            continue
        kw = {"color": late.get_color()} if late is not None else {}
        long_enough = any(r.metrics.get(name) is not None and r.metrics[name].shape[0] > 1 for r in runs)
        if long_enough:
            _profile_curve(ax, runs, name, None if late is not None else label, "first", log, linestyle="--", **kw)
    ax.set_xlabel(_position_label(groups))
    ax.set_xlim(left=0)
    ax.grid(alpha=0.3)


def _position_label(groups):
    ws = sorted({bucket_width(r) for runs in groups.values() for r in runs if r.metrics})
    return ("position in the response (tokens from its start; centres of buckets of "
            + "/".join(str(x) for x in ws) + " tokens)")


def has_mismatch_by_position(groups):
    return _has(groups, "k3_by_position")


def plot_mismatch_by_position(groups, path, title=""):
    """Left: mean k3 = ρ − 1 − log ρ (ρ = π_old/μ) of the response tokens by position bucket, over
    each run's last fifth of steps (solid) and its first fifth (dashed), geometric mean over the
    group's runs with a 95% band, log y. Right (runs with tokens_by_position): response tokens per
    step in each bucket, mean over all steps and runs — how much the late buckets rest on."""
    tokens = _has(groups, "tokens_by_position")
    fig, axes = plt.subplots(1, 2 if tokens else 1, figsize=(15 if tokens else 10, 4.5), squeeze=False,
                             gridspec_kw={"width_ratios": [2, 1]} if tokens else None)
    axes = list(axes[0])
    _profiles(axes[0], groups, "k3_by_position", log=True)
    _log_y(axes[0])
    axes[0].set_ylabel("mean k3 per token (ρ − 1 − log ρ)")
    axes[0].set_title("train–inference mismatch along the response: last 20% of steps (solid), first 20% (dashed)",
                      fontsize=10)
    if tokens:
        ax = axes[1]
        for label, runs in groups.items():
            rows = [r.metrics["tokens_by_position"] for r in runs if r.metrics.get("tokens_by_position") is not None
                    and r.metrics["tokens_by_position"].ndim == 2]
            if not rows:
                continue
            nb = max(x.shape[1] for x in rows)
            v = np.concatenate([np.pad(x, ((0, 0), (0, nb - x.shape[1])), constant_values=np.nan) for x in rows])
            n = np.isfinite(v).sum(axis=0)
            m = np.where(n > 0, np.nansum(v, axis=0) / np.maximum(n, 1), 0.0)
            W = bucket_width(runs[0])
            ax.plot(np.arange(nb) * W + (W - 1) / 2, m, marker="o", ms=3, label=label)
        ax.set_ylim(bottom=0)
        ax.set_ylabel("response tokens per step in the bucket")
        ax.set_title("tokens per bucket (mean over steps)", fontsize=10)
        ax.set_xlabel("position in the response (tokens)")
        ax.set_xlim(left=0)
        ax.grid(alpha=0.3)
    _finish(fig, axes, path, title, step_axes=[])


def has_grad_norm(groups):
    return _has(groups, "grad_norm", "grad_norm_max")


def plot_grad_norm(groups, path, w=1, title=""):
    """Left: global gradient L2 norm before clipping, mean over a step's mini-batches (solid,
    geometric mean with a 95% band over seeds) and the largest mini-batch's (dashed, geometric mean
    over seeds, not smoothed: a burst is one step), log y, with
    optim.grad_clip when the runs share one. Right (runs with lr): the learning rate."""
    lr = _has(groups, "lr")
    fig, axes = plt.subplots(1, 2 if lr else 1, figsize=(15 if lr else 10, 4.5), squeeze=False,
                             gridspec_kw={"width_ratios": [2, 1]} if lr else None)
    axes = list(axes[0])
    ax = axes[0]
    for label, runs in groups.items():
        line = _curve(ax, runs, "grad_norm", label, w, log=True)
        kw = {"color": line.get_color()} if line is not None else {}
        m = _curve(ax, runs, "grad_norm_max", None if line is not None else label, 1, log=True, show_band=False,
                   linestyle="--", linewidth=0.9, **kw)  # per step: the bursts are what it is for
        if lr:
            kw = kw or ({"color": m.get_color()} if m is not None else {})
            _curve(axes[1], runs, "lr", label, 1, show_band=False, **kw)
    clip = _scenario_number(groups, "optim.grad_clip")
    if clip is not None and clip > 0:
        ax.axhline(clip, color="0.4", linestyle=":", linewidth=1)
        ax.annotate(f"optim.grad_clip = {clip:g}", (0.01, clip), xycoords=("axes fraction", "data"), fontsize=7,
                    color="0.3", va="bottom")
    _log_y(ax)
    ax.set_ylabel("gradient L2 norm before clipping")
    ax.set_title("gradient norm: mean over mini-batches (solid, band: 95% over seeds), largest mini-batch "
                 "(dashed, per step)", fontsize=10)
    if lr:
        axes[1].set_ylabel("learning rate")
        axes[1].set_title("learning rate", fontsize=10)
        axes[1].ticklabel_format(axis="y", style="sci", scilimits=(-2, 3))
    _finish(fig, axes, path, title)


def has_entropy(groups):
    return _has(groups, "entropy", "entropy_by_position")


def plot_entropy(groups, path, w=1, title=""):
    """Rollout entropy of the response tokens (nats per token): over steps (mean ± 95% band over
    seeds) and, for runs with entropy_by_position, along the response over the last fifth of
    steps (solid) and the first fifth (dashed)."""
    specs = [s for s in ("entropy", "entropy_by_position") if _has(groups, s)]
    fig, axes = plt.subplots(1, len(specs), figsize=(15 if len(specs) > 1 else 10, 4.5), squeeze=False)
    axes = list(axes[0])
    step_axes = []
    for ax, name in zip(axes, specs):
        if name == "entropy":
            for label, runs in groups.items():
                _curve(ax, runs, "entropy", label, w)
            ax.set_title("entropy over steps (mean over response tokens)", fontsize=10)
            step_axes.append(ax)
        else:
            _profiles(ax, groups, name, log=False)
            ax.set_title("entropy along the response: last 20% of steps (solid), first 20% (dashed)", fontsize=10)
        ax.set_ylabel("entropy of μ (nats per token)")
        ax.set_ylim(bottom=0)
    _finish(fig, axes, path, title, step_axes=step_axes)


def has_seq_log_ratio(groups):
    return _has(groups, "rc_seq_log_ratio_abs_mean", "seq_log_ratio_abs_p90", "seq_log_ratio_abs_max",
                "seq_log_ratio_mean")


def plot_seq_log_ratio(groups, path, w=1, title=""):
    """The per-sequence log-ratio Σ_t log ρ_t = Σ_t (log π_old − log μ) over a response. Left: its
    magnitude over the step's sequences: mean (solid, geometric mean with a 95% band over seeds),
    p90 (dashed), max (dotted), log y. Right (runs with seq_log_ratio_mean): its signed mean."""
    specs = [s for s, names in (("abs", ("rc_seq_log_ratio_abs_mean", "seq_log_ratio_abs_p90", "seq_log_ratio_abs_max")),
                                ("signed", ("seq_log_ratio_mean",))) if _has(groups, *names)]
    fig, axes = plt.subplots(1, len(specs), figsize=(15 if len(specs) > 1 else 10, 4.5), squeeze=False,
                             gridspec_kw={"width_ratios": [2, 1]} if len(specs) > 1 else None)
    axes = list(axes[0])
    for ax, spec in zip(axes, specs):
        for label, runs in groups.items():
            if spec == "abs":
                first = None
                for name, style in (("rc_seq_log_ratio_abs_mean", "-"), ("seq_log_ratio_abs_p90", "--"),
                                    ("seq_log_ratio_abs_max", ":")):
                    kw = {"color": first.get_color()} if first is not None else {}
                    ln = _curve(ax, runs, name, label if first is None else None, w, log=True,
                                show_band=name == "rc_seq_log_ratio_abs_mean", linestyle=style, **kw)
                    first = first or ln
            else:
                _curve(ax, runs, "seq_log_ratio_mean", label, w)
        if spec == "abs":
            _log_y(ax)
            ax.set_ylabel("|Σ_t log ρ_t| per sequence (nats)")
            ax.set_title("sequence log-ratio magnitude: mean (solid, band: 95% over seeds), p90 (dashed), max (dotted)",
                         fontsize=10)
        else:
            ax.axhline(0.0, color="0.5", linewidth=0.8)
            ax.set_ylabel("Σ_t log ρ_t, mean over sequences (nats)")
            ax.set_title("signed mean (> 0: π_old above μ)", fontsize=10)
    _finish(fig, axes, path, title)
