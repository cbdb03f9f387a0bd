"""The report's pictures (matplotlib, Agg backend, PNG). Each function takes groups (label → runs,
analysis/runs.py) or one run and writes one file; curves are the mean over a group's runs with a
95% Student-t band over seeds (analysis/stats.py).
"""
import numpy as np

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

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


def _curve(ax, runs, name, label, w=1, scale=1.0, log=False, show_band=True, **kw):
    """Mean over runs with its 95% band. log: for positive, skewed quantities (KL, ratios) the mean
    and band are taken over log10 values (a geometric mean with a multiplicative band); otherwise
    a band of a non-negative quantity is cut at 0."""
    ys = _stack(runs, name, w) * scale
    if ys.size == 0 or not np.isfinite(ys).any():
        return None
    if log:
        with np.errstate(divide="ignore", invalid="ignore"):
            lm, lci = band(np.where(ys > 0, np.log10(np.where(ys > 0, ys, 1.0)), np.nan))
        mu, lo, hi = 10 ** lm, 10 ** (lm - lci), 10 ** (lm + lci)
    else:
        mu, ci = band(ys)
        lo, hi = mu - ci, mu + ci
        if np.nanmin(ys) >= 0:
            lo = np.maximum(lo, 0.0)
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
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
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
    axes[1].set_title("greedy held-out accuracy")
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
        _curve(axes[1], runs, "flip_rate_mean", label, w, scale=100.0, **color)
        hi = _curve(axes[2], runs, "is_ratio_max", label, w, log=True, show_band=False, **color)
        if hi is not None:
            _curve(axes[2], runs, "is_ratio_min", None, w, log=True, show_band=False, linestyle="--",
                   color=hi.get_color())
        _curve(axes[3], runs, "clip_frac", label, w, **color)
    axes[0].set_title("train–inference KL, k3 of KL(μ‖π_old) (geometric mean)")
    axes[1].set_title("routing flip rate, % of (token, layer)")
    axes[1].axhline(2.0, color="0.5", linestyle=":", linewidth=1)
    axes[1].annotate("2% alarm", (0.01, 2.0), xycoords=("axes fraction", "data"), fontsize=7, color="0.4",
                     va="bottom")
    axes[2].set_title("IS ratio ρ = π_old/μ over a step's tokens: max (solid), min (dashed)")
    axes[3].set_title("clip fraction")
    for ax in (axes[0], axes[2]):
        if any(np.nanmin(ln.get_ydata()) > 0 for ln in ax.get_lines() if len(ln.get_ydata())):
            ax.set_yscale("log")
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
        _curve(axes[1], runs, "masked_frac", label, w, **color)
        g = _curve(axes[2], runs, "rspo_gamma_mean", label, w, **color)
        if g is not None:
            _curve(axes[2], runs, "rspo_gamma_min", None, w, linestyle="--", color=g.get_color())
    axes[0].set_title("clip fraction")
    axes[1].set_title("masked tokens (IcePop band, MIS)")
    axes[2].set_title("RSPO γ: mean (solid), min (dashed); 1 = unscaled")
    _finish(fig, axes, path, title)


def load_shares(runs):
    """[steps, L, E] mean over runs of each expert's share of its layer's (token, slot) pairs × E
    (1 = a perfectly balanced layer); None when the runs have no expert_load (dense) or differ."""
    loads = [r.metrics["expert_load"] for r in runs if r.metrics and "expert_load" in r.metrics]
    if not loads or any(x.shape[1:] != loads[0].shape[1:] for x in loads):
        return None
    n = min(x.shape[0] for x in loads)
    stack = np.stack([x[:n] for x in loads])  # [runs, S, L, E]
    with np.errstate(invalid="ignore", divide="ignore"):
        share = stack / stack.sum(axis=3, keepdims=True) * stack.shape[3]
    return np.nanmean(share, axis=0)


def load_vmax(groups):
    """A common colour-scale top for the heatmaps of several groups: the 99th percentile of every
    share, at least 2 (twice the even share)."""
    vals = [load_shares(runs) for runs in groups.values()]
    vals = [v[np.isfinite(v)] for v in vals if v is not None]
    vals = np.concatenate(vals) if vals else np.array([])
    return max(2.0, float(np.percentile(vals, 99))) if vals.size else 2.0


def plot_expert_load(runs, path, title="", vmax=None):
    """Heatmap of expert load over steps: rows layer × expert, columns RL steps; vmax: the top of
    the colour scale (default: this plot's own, see load_vmax). Returns False when there is
    nothing to draw (dense twin)."""
    share = load_shares(runs)
    if share is None:
        return False
    S, L, E = share.shape
    img = share.transpose(1, 2, 0).reshape(L * E, S)  # row l·E + e
    fig, ax = plt.subplots(figsize=(min(12, 4 + 0.05 * S), min(9, 1.5 + 0.18 * L * E)))
    vmax = vmax if vmax is not None else load_vmax({"": runs})
    im = ax.imshow(img, aspect="auto", interpolation="nearest", cmap="magma", vmin=0, vmax=vmax,
                   extent=(0.5, S + 0.5, L * E - 0.5, -0.5))
    for l in range(1, L):
        ax.axhline(l * E - 0.5, color="white", linewidth=1.2)
    ax.set_yticks([l * E + (E - 1) / 2 for l in range(L)])
    ax.set_yticklabels([f"layer {l}" for l in range(L)])
    ax.set_xlabel("RL step")
    ax.set_ylabel(f"expert (0..{E - 1} within each layer)")
    cb = fig.colorbar(im, ax=ax)
    cb.set_label("load / balanced share (1 = even, 0 = dead)")
    ax.set_title(title or "expert load")
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return True


def _clip_band(run):
    """(1 − ε_low, 1 + ε_high) of a run's algorithm (negative keys = the algorithm's defaults)."""
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
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
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
        line = _curve(axes[0], runs, "rc_ess_seq", label, w)
        color = {"color": line.get_color()} if line is not None else {}
        _curve(axes[0], runs, "rc_ess_token", None, w, linestyle="--", show_band=False, **color)
        _curve(axes[1], runs, "rc_seq_mis_masked_frac", label, w, **color)
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
    axes[2].grid(alpha=0.3, axis="y")
    _finish(fig, axes, path, title, step_axes=axes[:2])
