#!/usr/bin/env python3
"""moerl vs its PyTorch peer vs the machine's FP32 GEMM ceiling, on the reference workload's RL step.

Runs, in one invocation, the peer (analysis/bench/torch_peer.py, PyTorch eager in its best
configuration) and `moerl bench` (which measures the ceiling in the same run), alternating them
--pairs times and keeping each side's best, then prints one table of ratios and the performance
targets of docs/performance.md. Every time is the best over repeated steps (the machine is shared);
the load average is printed beside the numbers.

  /usr/bin/python3 analysis/bench/compare.py [--moerl build/sim/moerl] [--rounds 5] [--pairs 1]
                                             [--json out.json]
Exit status 0 whether or not a target is missed (the table says which); 2 when a run fails.
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, ROOT)  # analysis.cli: the one-line errors of every analysis entry point
from analysis.cli import Entry  # noqa: E402

entry = Entry(__name__, "analysis.bench.compare")


def run_peer(threads, repeat, out):
    cmd = [sys.executable, os.path.join(HERE, "torch_peer.py"), "--threads", str(threads),
           "--repeat", str(repeat), "--json", out]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        return json.load(f)


def run_moerl(moerl, scenario, rounds, threads, peer_json, out, extra):
    cmd = [moerl, "bench", "--scenario", scenario, "--rounds", str(rounds), "--json", out,
           "--peer-json", peer_json] + (["--threads", str(threads)] if threads else []) + extra
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        return json.load(f)


def step(report, rollout, train):
    for s in report["steps"]:
        if s["rollout_profile"] == rollout and s["train_profile"] == train:
            return s
    return None


def load(v):
    return " ".join(f"{x:.2f}" for x in v)


def main():
    ap = entry.parser(description=__doc__.split("\n")[0])
    ap.add_argument("--moerl", default=os.path.join(ROOT, "build", "sim", "moerl"))
    ap.add_argument("--scenario", default=os.path.join(ROOT, "scenarios", "bench.ini"))
    ap.add_argument("--rounds", type=int, default=5, help="moerl rounds and peer steps per pair")
    ap.add_argument("--pairs", type=int, default=1, help="alternations peer/moerl (best kept)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", default="", help="write both reports and the table's numbers here")
    ap.add_argument("--bench-arg", action="append", default=[], help="extra argument for moerl bench")
    args = ap.parse_args()
    if not os.access(args.moerl, os.X_OK):
        sys.exit(f"{args.moerl} is not an executable (build it, or pass --moerl)")

    peer, moerl = None, None
    with tempfile.TemporaryDirectory() as tmp:
        pj, mj = os.path.join(tmp, "peer.json"), os.path.join(tmp, "moerl.json")
        try:
            for _ in range(args.pairs):
                p = run_peer(args.threads, args.rounds, pj)
                if peer is None or p["rollout_s"] + p["train_s"] < peer["rollout_s"] + peer["train_s"]:
                    peer = p
                with open(pj, "w") as f:
                    json.dump(peer, f)
                m = run_moerl(args.moerl, args.scenario, args.rounds, args.threads, pj, mj, args.bench_arg)
                if moerl is None or step(m, "fp32-ref", "fp32-ref")["total_s"] < step(moerl, "fp32-ref", "fp32-ref")["total_s"]:
                    moerl = m
        except subprocess.CalledProcessError as e:
            print(f"compare.py: {' '.join(e.cmd)} failed with status {e.returncode}", file=sys.stderr)
            return 2

    base = step(moerl, "fp32-ref", "fp32-ref")
    ceil = moerl["ceiling_gflops"] * 1e9
    fr, ft = moerl["flops_rollout"], moerl["flops_train"]
    # the peer's train time includes AdamW; compare with moerl's fwd+bwd+AdamW
    rows = [
        ("rollout (fp32)", base["rollout_s"], peer["rollout_s"], fr),
        ("train fwd+bwd+AdamW (fp32)", base["train_s"] + base["optimizer_s"], peer["train_s"], ft),
        ("RL step (fp32)", base["total_s"], peer["rollout_s"] + peer["train_s"], fr + ft),
    ]
    print(f"moerl bench vs PyTorch peer vs FP32 GEMM ceiling — {moerl['model']}")
    print(f"machine: {moerl['threads']} threads; {moerl['blas']}; ceiling {moerl['ceiling_gflops']:.1f} GFLOP/s "
          f"(moerl kernel {moerl['ceiling_own_gflops']:.1f}, BLAS {moerl['ceiling_blas_gflops']:.1f}), measured in the same run")
    print(f"load average: peer {load(peer['load_begin'])} -> {load(peer['load_end'])}; "
          f"moerl {load(moerl['load_begin'])} -> {load(moerl['load_end'])}")
    print(f"peer: torch {peer['torch']}, {peer['blas']}, OMP_WAIT_POLICY={peer.get('omp_wait_policy', '')}, "
          f"{peer['threads']} threads; best of {args.rounds} steps x {args.pairs} pair(s)\n")
    hdr = f"{'phase':<28} {'moerl s':>8} {'peer s':>8} {'peer/moerl':>11} {'floor s':>8} {'moerl/floor':>12} {'% ceiling':>10}"
    print(hdr)
    print("-" * len(hdr))
    table = []
    for name, ms, ps, fl in rows:
        floor = fl / ceil
        print(f"{name:<28} {ms:8.3f} {ps:8.3f} {ps / ms:10.2f}x {floor:8.3f} {ms / floor:11.2f}x {100 * floor / ms:9.1f}%")
        table.append({"phase": name, "moerl_s": ms, "peer_s": ps, "speedup": ps / ms, "floor_s": floor})
    step_floor = (fr + ft) / ceil
    print(f"upper bound of the speed-up: even at the FLOP floor (every FLOP at the ceiling) moerl would be "
          f"{(peer['rollout_s'] + peer['train_s']) / step_floor:.2f}x faster than the peer")
    print()
    print(f"{'profile cost (x fp32-ref)':<28} {'rollout':>8} {'fwd+bwd':>8}")
    for s in moerl["steps"]:
        if s["rollout_profile"] != s["train_profile"] or s is base:
            continue
        print(f"{s['rollout_profile']:<28} {s['rollout_s'] / base['rollout_s']:7.2f}x {s['train_s'] / base['train_s']:7.2f}x")
    recipe = [s for s in moerl["steps"] if s["rollout_profile"] != s["train_profile"]]
    for s in recipe:
        print(f"recipe step {s['rollout_profile']} + {s['train_profile']}: {s['total_s']:.3f} s "
              f"({s['total_s'] / base['total_s']:.2f}x the fp32 step)")
    if moerl.get("routing_bits"):
        print(f"R3 routing record: {moerl['routing_bits']} bits per (layer, token), {moerl['routing_bytes']} bytes "
              f"per step vs {moerl['routing_bytes_int32']} as int32")
    print(f"peak memory (moerl, maxrss): {moerl['peak_rss_mib']:.0f} MiB\n")
    print("targets:")
    for t in moerl["targets"]:
        print(f"  [{'PASS' if t['pass'] else 'MISS'}] {t['name']:<50} {t['value']:8.2f}{t['unit']} "
              f"({'>=' if t['at_least'] else '<='} {t['limit']:.2f}{t['unit']})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"moerl": moerl, "peer": peer, "table": table}, f, indent=1)
    return 0


if __name__ == "__main__":
    entry.run(main)
