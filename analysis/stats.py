"""Statistics over seeds: means with 95% Student-t intervals, rates with 95% Wilson intervals,
moving averages, number formatting.

Every band and ± in moerl's reports is a two-sided 95% Student-t interval of the mean over the
runs (seeds) of a group: half-width t_{0.975, n-1} · s / sqrt(n), s the unbiased std. One run has
no interval (NaN); non-finite values are left out. A rate (runs collapsed out of a group's runs)
has the 95% Wilson score interval (wilson).
"""
import numpy as np
from scipy import stats as _scipy_stats


def t95(dof):
    """The two-sided 95% Student-t quantile t_{0.975, dof} (SciPy); NaN below one degree of freedom."""
    if dof < 1:
        return float("nan")
    return float(_scipy_stats.t.ppf(0.975, dof))


def t95_table(n):
    """[t95(0), t95(1), ..., t95(n)] (t95(0) = NaN): the quantiles a page computes its bands with."""
    return [float("nan")] + [float(x) for x in _scipy_stats.t.ppf(0.975, np.arange(1, n + 1))]


def mean_ci(values):
    """(mean, 95% half-width) of the finite values; the half-width is NaN for fewer than two."""
    v = np.asarray([x for x in values if np.isfinite(x)], dtype=float)
    if len(v) == 0:
        return float("nan"), float("nan")
    if len(v) == 1:
        return float(v[0]), float("nan")
    return float(v.mean()), t95(len(v) - 1) * float(v.std(ddof=1)) / np.sqrt(len(v))


def wilson(k, n, z=None):
    """(rate, low, high): the 95% Wilson score interval of k successes in n trials (z: the normal
    quantile, default SciPy's Φ⁻¹(0.975))."""
    if z is None:
        z = float(_scipy_stats.norm.ppf(0.975))
    if n == 0:
        return float("nan"), float("nan"), float("nan")
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    # at k = 0 and k = n the bound is exactly 0 (1); rounding must not move it inside
    return p, 0.0 if k == 0 else max(0.0, c - h), 1.0 if k == n else min(1.0, c + h)


def band(ys):
    """Per-column mean and 95% half-width of a [runs, steps] array with NaN for missing values."""
    ys = np.asarray(ys, dtype=float)
    if ys.ndim == 1:
        ys = ys[None, :]
    n = np.sum(np.isfinite(ys), axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mu = np.nansum(ys, axis=0) / np.where(n > 0, n, np.nan)
        dev = np.where(np.isfinite(ys), ys - mu, 0.0)
        sd = np.sqrt(np.sum(dev * dev, axis=0) / np.where(n > 1, n - 1, np.nan))
        t = np.where(n > 1, _scipy_stats.t.ppf(0.975, np.maximum(n - 1, 1)), np.nan)
        ci = t * sd / np.sqrt(np.where(n > 0, n, np.nan))
    return mu, ci


def smooth(x, w=10):
    """Trailing moving average over w steps; the first w-1 steps are NaN (x unchanged if shorter)."""
    x = np.asarray(x, dtype=float)
    if len(x) < w or w <= 1:
        return x
    k = np.ones(w) / w
    y = np.convolve(x, k, mode="valid")
    return np.concatenate([np.full(w - 1, np.nan), y])


def fmt(m, ci, digits=3, sci=False):
    """'m ± ci' (or 'm' without an interval, 'inf' / '-inf' for an infinite m, '–' when m is NaN)."""
    if np.isinf(m):
        return "inf" if m > 0 else "-inf"
    if not np.isfinite(m):
        return "–"
    f = (lambda x: f"{x:.2e}") if sci else (lambda x: f"{x:.{digits}f}")
    return f(m) if not np.isfinite(ci) else f"{f(m)} ± {f(ci)}"
