#!/usr/bin/env python3
"""The PyTorch peer of `moerl bench`: the reference workload's RL step in PyTorch eager on the CPU.

Same model as scenarios/bench.ini (V 64, D 128, 4 layers, 4 heads, 16 experts top-2 with
renormalised softmax gates, SwiGLU experts d_ff 256, RMSNorm, RoPE, untied head) and the same step:
rollout = prefill of 16 prompt tokens + 32 sampled tokens for 256 sequences with a KV cache;
train = forward + backward + AdamW over the same 256 sequences of 48 tokens (log-prob loss).
Experts run the usual eager way (tokens sorted by expert, one matmul per expert, index_add back).

Usage: /usr/bin/python3 analysis/bench/torch_peer.py [--scenario scenarios/bench.ini] [--device cpu|cuda]
                                                      [--threads 2] [--repeat 5] [--json out.json]

--scenario takes the shapes from a bench scenario's [model] and [bench] sections (vocab_size,
d_model, n_layers, n_heads, n_experts, top_k, d_ff; sequences, prompt_len, decode_steps), so the
peer of scenarios/bench-large.ini is the same code. --device cuda runs the same eager step on the
GPU (tensors, sampling and AdamW there; times taken after torch.cuda.synchronize()): the peer
docs/gpu.md and tests/gpu/device_checks.sh compare moerl's CUDA backend with.

The peer runs in its best configuration, set up here before torch is imported (measured on the
2-core AVX-512 reference machine, torch 1.13 from Debian, docs/performance.md):
  * OMP_WAIT_POLICY=PASSIVE. Debian's torch runs its element-wise ops on OpenMP threads and its
    matmuls on OpenBLAS's own pthreads; with OpenMP's default spin-waiting the idle OpenMP threads
    hold the cores the BLAS threads need, and the step took 2.7x longer (6.2 s instead of 2.3 s).
  * OpenBLAS with AVX-512 kernels. 0.3.21 picks "Cooperlake" on Zen 4 by itself; where it picks
    a non-AVX-512 family on an AVX-512 CPU, the script re-runs itself with
    OPENBLAS_CORETYPE=SkylakeX (the variable is read when the library loads).
  * The rollout under torch.inference_mode() (no autograd bookkeeping), the same thread count
    as moerl (--threads, default 2); torch 1.13 has no fused attention (SDPA), so attention is the
    eager softmax(q·kᵀ)·v.
Times are the best (minimum) over --repeat steps after one warm-up step, as `moerl bench` takes
the best of its rounds; medians are reported too.
"""
import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import ctypes
import json
import math
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from analysis.cli import Entry  # noqa: E402  (the one-line errors of every analysis entry point)

entry = Entry(__name__, "analysis.bench.torch_peer")
with entry.imports():
    import torch
    import torch.nn.functional as F

# The shapes (scenarios/bench.ini's by default; configure() sets them from --scenario) and the device.
V, D, L, H, E, K, FF = 64, 128, 4, 4, 16, 2, 256
B, P, R = 256, 16, 32
T = P + R
DH = D // H
DEV = "cpu"


def rmsnorm(x, w, eps=1e-5):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope_tables(T):
    j = torch.arange(DH // 2, dtype=torch.float32)
    inv = 10000.0 ** (-2.0 * j / DH)
    ang = torch.arange(T, dtype=torch.float32)[:, None] * inv[None, :]
    return torch.cos(ang), torch.sin(ang)


COS, SIN = rope_tables(T)


def read_scenario(path):
    """{"section.key": value} of an INI scenario (comments after '#' dropped)."""
    out, section = {}, ""
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line.startswith("[") and line.endswith("]"):
                section = line[1:-1].strip()
            elif "=" in line:
                k, v = line.split("=", 1)
                out[f"{section}.{k.strip()}"] = v.strip()
    return out


def configure(path, device):
    """The module's shapes from a bench scenario, and the device every tensor goes to."""
    global V, D, L, H, E, K, FF, B, P, R, T, DH, COS, SIN, DEV
    sc = read_scenario(path)
    need = ["model.vocab_size", "model.d_model", "model.n_layers", "model.n_heads", "model.n_experts",
            "model.top_k", "model.d_ff", "bench.sequences", "bench.prompt_len", "bench.decode_steps"]
    missing = [k for k in need if k not in sc]
    if missing:
        raise SystemExit(f"{path}: lacks {', '.join(missing)} (a bench scenario has [model] and [bench] sections)")
    V, D, L, H, E, K, FF = (int(sc[k]) for k in need[:7])
    B, P, R = (int(sc[k]) for k in need[7:])
    if E < 1:
        raise SystemExit(f"{path}: model.n_experts = {E}: the peer is the MoE step (n_experts >= 1)")
    T, DH, DEV = P + R, D // H, device
    COS, SIN = (t.to(DEV) for t in rope_tables(T))


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


def rope(x, pos0):
    # x [B, H, n, DH] at positions pos0..pos0+n-1
    n = x.shape[2]
    c, s = COS[pos0:pos0 + n][None, None], SIN[pos0:pos0 + n][None, None]
    x1, x2 = x[..., :DH // 2], x[..., DH // 2:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1)


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        p = lambda *s: torch.nn.Parameter(0.02 * torch.randn(*s, generator=g))
        self.embed = p(V, D)
        self.layers = torch.nn.ModuleList()
        for _ in range(L):
            m = torch.nn.Module()
            m.attn_norm = torch.nn.Parameter(torch.ones(D))
            m.wqkv = p(3 * D, D)
            m.wo = p(D, D)
            m.mlp_norm = torch.nn.Parameter(torch.ones(D))
            m.router = p(E, D)
            m.w_gate, m.w_up, m.w_down = p(E, FF, D), p(E, FF, D), p(E, D, FF)
            self.layers.append(m)
        self.final_norm = torch.nn.Parameter(torch.ones(D))
        self.lm_head = p(V, D)

    def moe(self, m, h):
        # h [N, D]
        z = h @ m.router.T
        top, ids = torch.topk(z, K, dim=-1)
        gate = torch.softmax(top, -1)
        flat = ids.reshape(-1)
        order = torch.argsort(flat, stable=True)
        tok = order // K
        counts = torch.bincount(flat, minlength=E).tolist()
        xs = h[tok]
        out = torch.empty(xs.shape[0], D, device=h.device)
        start = 0
        for e, c in enumerate(counts):
            if c == 0:
                continue
            x = xs[start:start + c]
            out[start:start + c] = (F.silu(x @ m.w_gate[e].T) * (x @ m.w_up[e].T)) @ m.w_down[e].T
            start += c
        w = gate.reshape(-1)[order][:, None]
        y = torch.zeros_like(h).index_add_(0, tok, out * w)
        return y

    def layer(self, m, x, pos0, cache=None):
        Bn, n, _ = x.shape
        h = rmsnorm(x, m.attn_norm)
        q, k, v = (h @ m.wqkv.T).split(D, -1)
        q, k, v = (t.view(Bn, n, H, DH).transpose(1, 2) for t in (q, k, v))
        q, k = rope(q, pos0), rope(k, pos0)
        if cache is not None:
            if "k" in cache:
                k = torch.cat([cache["k"], k], 2)
                v = torch.cat([cache["v"], v], 2)
            cache["k"], cache["v"] = k, v
        s = (q @ k.transpose(-1, -2)) / math.sqrt(DH)  # torch 1.13 has no fused SDPA
        if n > 1:
            s = s.masked_fill(torch.triu(torch.ones(n, k.shape[2], dtype=torch.bool, device=s.device), 1),
                              float("-inf"))
        a = torch.softmax(s, -1) @ v
        x = x + a.transpose(1, 2).reshape(Bn, n, D) @ m.wo.T
        h = rmsnorm(x, m.mlp_norm).reshape(Bn * n, D)
        return x + self.moe(m, h).view(Bn, n, D)

    def forward(self, tokens, pos0=0, caches=None):
        x = self.embed[tokens]
        for i, m in enumerate(self.layers):
            x = self.layer(m, x, pos0, None if caches is None else caches[i])
        return rmsnorm(x, self.final_norm) @ self.lm_head.T


def rollout(model, gen):
    prompts = torch.randint(0, V, (B, P), generator=gen, device=DEV)
    caches = [dict() for _ in range(L)]
    with torch.inference_mode():
        logits = model(prompts, 0, caches)[:, -1]
        toks = [prompts]
        for r in range(R):
            nxt = torch.multinomial(torch.softmax(logits, -1), 1, generator=gen)
            toks.append(nxt)
            if r + 1 < R:
                logits = model(nxt, P + r, caches)[:, -1]
    return torch.cat(toks, 1)


def train_step(model, opt, seqs):
    logits = model(seqs)
    logp = torch.log_softmax(logits[:, :-1], -1).gather(2, seqs[:, 1:, None])[..., 0]
    loss = -logp[:, P - 1:].mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return float(loss)


def flops_train():
    # forward GEMM FLOPs per token (2·m·n·k), ×3 for forward + backward
    per_tok = L * (2 * D * 3 * D + 2 * D * D + 2 * D * E + K * 3 * 2 * D * FF) + 2 * D * V
    attn = L * 2 * 2 * D * (T + 1) / 2  # QKᵀ and PV over the causal half
    return 3 * B * T * (per_tok + attn)


def openblas_core():
    """The kernel family of the OpenBLAS that torch loaded ('' when it is not OpenBLAS)."""
    with open("/proc/self/maps") as maps:
        paths = sorted({l.split()[-1] for l in maps if "openblas" in l and ".so" in l})
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
            lib.openblas_get_corename.restype = ctypes.c_char_p
            return lib.openblas_get_corename().decode()
        except (OSError, AttributeError):
            continue
    return ""


def ensure_avx512_blas():
    core = openblas_core()
    avx512_cpu = "avx512f" in open("/proc/cpuinfo").read()
    avx512_core = any(c in core for c in ("SkylakeX", "Cooperlake", "SapphireRapids"))
    if core and avx512_cpu and not avx512_core and "OPENBLAS_CORETYPE" not in os.environ:
        os.environ["OPENBLAS_CORETYPE"] = "SkylakeX"
        os.execv(sys.executable, [sys.executable] + sys.argv)
    return core


def main():
    ap = entry.parser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenario", default=os.path.join(ROOT, "scenarios", "bench.ini"),
                    help="bench scenario whose [model] and [bench] shapes the peer takes (default scenarios/bench.ini)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"--device cuda: this torch ({torch.__version__}) sees no CUDA device")
    configure(args.scenario, args.device)
    core = ensure_avx512_blas()
    torch.set_num_threads(args.threads)
    load_begin = os.getloadavg()
    model = Model().to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator(device=DEV).manual_seed(1)
    seqs = rollout(model, gen)  # warm-up
    train_step(model, opt, seqs)
    sync()
    ro, tr = [], []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        seqs = rollout(model, gen)
        sync()
        t1 = time.perf_counter()
        train_step(model, opt, seqs)
        sync()
        t2 = time.perf_counter()
        ro.append(t1 - t0)
        tr.append(t2 - t1)
    med = lambda v: sorted(v)[len(v) // 2]
    res = {"peer": "pytorch-eager", "torch": torch.__version__, "threads": args.threads, "device": DEV,
           "scenario": os.path.relpath(os.path.abspath(args.scenario), ROOT),
           "rollout_s": min(ro), "train_s": min(tr),
           "rollout_median_s": med(ro), "train_median_s": med(tr),
           "train_gflops": flops_train() / min(tr) / 1e9,
           "blas": "OpenBLAS " + core if core else "?",
           "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
           "load_begin": list(load_begin), "load_end": list(os.getloadavg())}
    print(json.dumps(res, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    entry.run(main)
