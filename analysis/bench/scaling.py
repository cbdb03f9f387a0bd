#!/usr/bin/env python3
"""Cost of the RL step as the work grows: `moerl bench` (fp32-ref) swept over experts, sequence
length, batch and ranks, and the plots of docs/performance.md.

  /usr/bin/python3 analysis/bench/scaling.py [--moerl build/sim/moerl] [--rounds 3]
                                             [--sweeps experts,seq,batch,ranks] [--plot-only]
Each point is one `moerl bench --json` run (best of --rounds steps; the machine's load is in every
JSON), kept under --data (default results/bench/scaling/<sweep>-<value>.json); the figures go to
--images (default docs/images/perf-<sweep>.png). --plot-only redraws from the kept JSON files.

Sweeps, around scenarios/bench.ini (16 experts top-2, 256 sequences of 16 + 32 tokens):
  experts  n_experts 8, 16, 32, 64 at top-2 (the active FLOPs stay the same, the weights grow)
  seq      seq_len 32..256 with the prompt fixed at 16 (max_seq_len grows with it)
  batch    sequences 64..1024
  ranks    1 rank x 2 threads, 1 rank x 1 thread, 2 ranks x 1 thread (mpirun, expert- and
           data-parallel over the ranks; the machine has 2 cores)
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, ROOT)  # analysis.cli: the one-line errors of every analysis entry point
from analysis.cli import Entry  # noqa: E402

entry = Entry(__name__, "analysis.bench.scaling")

SWEEPS = {
    "experts": ("experts (top-2)", [8, 16, 32, 64], lambda v: [f"model.n_experts={v}"]),
    "seq": ("sequence length (prompt 16)", [32, 48, 64, 128, 256],
            lambda v: [f"model.max_seq_len={v}", f"bench.seq_len={v}", "bench.prompt_len=16",
                       f"bench.decode_steps={v - 16}"]),
    "batch": ("sequences per step", [64, 128, 256, 512, 1024], lambda v: [f"bench.sequences={v}"]),
    "ranks": ("ranks x threads", ["1x2", "1x1", "2x1"], lambda v: []),
}


def run_point(args, sweep, value, out):
    sets = []
    for s in SWEEPS[sweep][2](value):
        sets += ["--set", s]
    cmd = [args.moerl, "bench", "--scenario", args.scenario, "--profiles", "fp32-ref", "--recipe", "false",
           "--rounds", str(args.rounds), "--json", out] + sets
    env = dict(os.environ)
    if sweep == "ranks":
        ranks, threads = (int(x) for x in value.split("x"))
        cmd += ["--threads", str(threads)]
        if ranks > 1:
            env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
            cmd = [args.mpirun, "--oversubscribe", "-np", str(ranks)] + cmd
    print(" ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)


def load(path):
    with open(path) as f:
        return json.load(f)


def plot(args, sweep, points):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    title, values, _ = SWEEPS[sweep]
    xs = list(range(len(points)))
    st = [p["steps"][0] for p in points]
    floor = [(p["flops_rollout"] + p["flops_train"]) / (p["ceiling_gflops"] * 1e9) for p in points]
    fig, ax = plt.subplots(figsize=(7.6, 4.0))
    ax.plot(xs, [s["total_s"] for s in st], "o-", label="RL step", color="black")
    ax.plot(xs, [s["rollout_s"] for s in st], "s-", label="rollout")
    ax.plot(xs, [s["train_s"] for s in st], "^-", label="train fwd+bwd")
    ax.plot(xs, [s["optimizer_s"] for s in st], "v-", label="AdamW")
    ax.plot(xs, floor, "k--", label="FLOP floor of the step (FLOPs / ceiling)")
    ax.plot(xs, [p["flops_rollout"] / (p["ceiling_gflops"] * 1e9) for p in points], ":", color="tab:blue",
            label="FLOP floor of the rollout")
    ax.set_xticks(xs)
    ax.set_xticklabels([str(v) for v in values[:len(points)]])
    ax.set_xlabel(title)
    ax.set_ylabel("seconds (best of rounds)")
    if sweep in ("seq", "batch"):
        ax.set_yscale("log")
    loads = ", ".join(f"{p['load_begin'][0]:.1f}" for p in points)
    ax.set_title(f"moerl bench, fp32-ref: step time vs {title}\n(load average at start of each point: {loads})",
                 fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    path = os.path.join(args.images, f"perf-{sweep}.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(path)


def main():
    ap = entry.parser(description=__doc__.split("\n")[0])
    ap.add_argument("--moerl", default=os.path.join(ROOT, "build", "sim", "moerl"))
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--scenario", default=os.path.join(ROOT, "scenarios", "bench.ini"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sweeps", default="experts,seq,batch,ranks")
    ap.add_argument("--data", default=os.path.join(ROOT, "results", "bench", "scaling"))
    ap.add_argument("--images", default=os.path.join(ROOT, "docs", "images"))
    ap.add_argument("--plot-only", action="store_true")
    args = ap.parse_args()
    unknown = [s for s in args.sweeps.split(",") if s not in SWEEPS]
    if unknown:
        ap.error(f"--sweeps: unknown sweep '{unknown[0]}' (one of {', '.join(SWEEPS)})")
    if not args.plot_only and not os.access(args.moerl, os.X_OK):
        sys.exit(f"{args.moerl} is not an executable (build it, or pass --moerl; --plot-only redraws the kept JSON)")
    os.makedirs(args.data, exist_ok=True)
    os.makedirs(args.images, exist_ok=True)
    for sweep in args.sweeps.split(","):
        points = []
        for v in SWEEPS[sweep][1]:
            out = os.path.join(args.data, f"{sweep}-{v}.json")
            if not args.plot_only:
                run_point(args, sweep, v, out)
            if os.path.exists(out):
                points.append(load(out))
        if points:
            plot(args, sweep, points)
            for v, p in zip(SWEEPS[sweep][1], points):
                s = p["steps"][0]
                fl = p["flops_rollout"] + p["flops_train"]
                print(f"{sweep}={v}: step {s['total_s']:.3f} s (rollout {s['rollout_s']:.3f}, fwd+bwd {s['train_s']:.3f}, "
                      f"AdamW {s['optimizer_s']:.4f}); {fl / s['total_s'] * 1e-9:.0f} GFLOP/s = "
                      f"{100 * fl / s['total_s'] * 1e-9 / p['ceiling_gflops']:.0f}% of {p['ceiling_gflops']:.0f}; "
                      f"peak {p['peak_rss_mib']:.0f} MiB; load {p['load_begin'][0]:.2f}")
    return 0


if __name__ == "__main__":
    entry.run(main)
