"""Side-by-side `moerl audit` outputs (.json or .h5, docs/hdf5-schema.md "Audit output"): a table
and a picture of routing flips per layer, tokens with any flip and the train–inference KL, one row
per audit — e.g. one nondeterminism source switched on at a time (docs/tutorials/01-routing-flips.md).

    python3 -m analysis.audits AUDIT.json [AUDIT.json ...] [--out DIR]   → DIR/audits.md, audits.png

Rows keep the order of the arguments; a row is named by its file's stem.
"""
import os
import sys

if not __package__:  # run as a script (python3 analysis/audits.py): make the package importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from analysis.cli import AnalysisError, Entry, read_json  # noqa: E402

entry = Entry(__name__, "analysis.audits")
with entry.imports():
    import h5py
    import numpy as np

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: E402

# What markdown() and plot() read of an audit, with the type each must have.
NUMBERS = ["any_flip_share", "kl", "k3", "extreme_share", "max_abs_dlogp"]
NAMES = ["profile_a", "profile_b"]

ALARM = 0.02  # flip rate above which `moerl audit` raises its alarm (sim/jobs/audit.h)


def load_audit(path):
    """An audit as a dict with the JSON names (flip_rate as a list). Raises AnalysisError naming the
    file and what is wrong: unreadable, not JSON or HDF5, not an audit, a field missing or mistyped."""
    if path.endswith(".json"):
        a = read_json(path, "a moerl audit output")
    else:
        if not os.path.isfile(path):
            raise AnalysisError(f"{path}: no such audit file (moerl audit --out writes .json or .h5)")
        try:
            with h5py.File(path, "r") as f:
                a = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
                a["flip_rate"] = list(f["flip_rate"][()]) if "flip_rate" in f else []
        except Exception as e:  # h5py: OSError (not HDF5, truncated), KeyError, ValueError
            raise AnalysisError(f"{path}: not a readable moerl audit output (.json or .h5): {e}")
    if not isinstance(a, dict) or a.get("format") != "moerl-audit":
        got = a.get("format") if isinstance(a, dict) else type(a).__name__
        raise AnalysisError(f"{path}: not a moerl audit output (format {got!r}, expected 'moerl-audit')")
    for k in NUMBERS:
        if k not in a:
            raise AnalysisError(f"{path}: the audit has no \"{k}\" (written by another moerl version?)")
        if isinstance(a[k], bool) or not isinstance(a[k], (int, float, np.number)):
            raise AnalysisError(f"{path}: \"{k}\" = {a[k]!r}: must be a number")
    for k in NAMES:
        if k not in a:
            raise AnalysisError(f"{path}: the audit has no \"{k}\" (written by another moerl version?)")
    fr = a.get("flip_rate", [])
    if not isinstance(fr, (list, np.ndarray)) or any(isinstance(x, bool) or not isinstance(x, (int, float, np.number))
                                                     for x in fr):
        raise AnalysisError(f"{path}: \"flip_rate\" must be a list of numbers (one per layer)")
    a["flip_rate"] = list(fr)
    a["name"] = os.path.splitext(os.path.basename(path))[0]
    return a


def markdown(audits):
    L = max((len(a["flip_rate"]) for a in audits), default=0)
    head = ["audit", "A → B"] + [f"flip L{l} %" for l in range(L)] + ["tokens with ≥ 1 flip %", "KL(A‖B)", "k3",
                                                                      "extreme tokens", "max |Δ log p|"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for a in audits:
        cells = [a["name"], f"{a['profile_a']} → {a['profile_b']}"]
        cells += [f"{100 * a['flip_rate'][l]:.2f}" if l < len(a["flip_rate"]) else "–" for l in range(L)]
        cells += [f"{100 * a['any_flip_share']:.2f}", f"{a['kl']:.2e}", f"{a['k3']:.2e}",
                  f"{a['extreme_share']:.2e}", f"{a['max_abs_dlogp']:.3f}"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", f"Flip: share of audited (token, layer) pairs whose top-k expert set differs between A and B "
              f"(alarm above {100 * ALARM:.0f}% in any layer); KL on the full vocabulary, k3 at the sampled token; "
              "extreme: share of tokens with p_B/p_A > 2 or < ½."]
    return "\n".join(lines) + "\n"


def plot(audits, path, title=""):
    L = max((len(a["flip_rate"]) for a in audits), default=0)
    n = len(audits)
    fig, axes = plt.subplots(1, 2, figsize=(13, 1.2 + 0.55 * n * max(1, (L + 1) / 3)),
                             gridspec_kw={"width_ratios": [2, 1]})
    y = np.arange(n)[::-1]
    h = 0.8 / (L + 1)
    for l in range(L):
        vals = [100 * a["flip_rate"][l] if l < len(a["flip_rate"]) else np.nan for a in audits]
        axes[0].barh(y + (L - l) * h - 0.4 + h / 2, vals, height=h, label=f"layer {l}")
    axes[0].barh(y - 0.4 + h / 2, [100 * a["any_flip_share"] for a in audits], height=h, color="0.3",
                 label="tokens with ≥ 1 flip")
    axes[0].axvline(100 * ALARM, color="C3", linestyle=":", linewidth=1)
    axes[0].set_xlabel("% of audited tokens")
    axes[0].set_title(f"routing flips (dotted: the {100 * ALARM:.0f}% alarm)")
    axes[0].legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.07 * 8 / max(n, 4)), ncol=L + 1)
    kl = np.array([a["kl"] for a in audits], dtype=float)
    axes[1].barh(y, np.where(kl > 0, kl, np.nan), color="C4")
    axes[1].set_xscale("log")
    lo = np.nanmin(np.where(kl > 0, kl, np.nan)) if (kl > 0).any() else 1e-8
    axes[1].set_xlim(lo / 10, max(kl.max(), lo) * 10)
    for yi, v in zip(y, kl):
        axes[1].annotate(f" {v:.1e}" if v > 0 else " 0 (identical)", (lo / 10 if v <= 0 else v, yi),
                         va="center", fontsize=8)
    axes[1].set_xlabel("KL(A‖B), nats per token")
    axes[1].set_title("train–inference KL")
    for ax in axes:
        ax.set_yticks(y)
        ax.set_yticklabels([f"{a['name']}\n{a['profile_a']} → {a['profile_b']}" for a in audits], fontsize=8)
        ax.grid(alpha=0.3, axis="x")
    axes[1].set_yticklabels([])
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None):
    ap = entry.parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("audits", nargs="+", help="moerl audit outputs (.json, .h5)")
    ap.add_argument("--out", help="output directory (default: report/ beside the first audit)")
    ap.add_argument("--title", default="")
    args = ap.parse_args(argv)
    audits = [load_audit(p) for p in args.audits]
    out = args.out or os.path.join(os.path.dirname(os.path.abspath(args.audits[0])), "report")
    os.makedirs(out, exist_ok=True)
    md = markdown(audits)
    with open(os.path.join(out, "audits.md"), "w") as f:
        f.write(md)
    plot(audits, os.path.join(out, "audits.png"), args.title)
    print(md)
    print(f"wrote {out}/audits.md and {out}/audits.png")


if __name__ == "__main__":
    entry.run(main)
