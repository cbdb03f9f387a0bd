#!/usr/bin/env python3
"""Independent PyTorch implementation of the moerl model, for golden gradient tests.

Written from the math in docs/hdf5-schema.md only (it shares no code with the C++): it makes a
seeded random checkpoint in moerl's HDF5 layout, runs the model in float64, and stores beside the
parameters the tokens, the per-token loss weights w, the log-probs, the top-k ids, the aux loss and
the gradient of  L = sum(w * logprobs) + aux_loss  for every parameter.

Regenerate with:  /usr/bin/python3 tests/golden/torch_reference.py   (from the project root;
needs Debian's python3-torch and python3-h5py). The files it writes are committed.
"""
import sys

import h5py
import numpy as np
import torch

MAGIC_FORMAT = "moerl-checkpoint"
VERSION = 1
GOLDEN_VERSION = 1


def rmsnorm(x, w, eps):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w


def rope(x, theta):
    # x [B, T, H, Dh], rotate-half, positions 0..T-1
    T, Dh = x.shape[1], x.shape[3]
    half = Dh // 2
    j = torch.arange(half, dtype=torch.float64)
    inv = theta ** (-2.0 * j / Dh)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    c, s = torch.cos(ang)[None, :, None, :], torch.sin(ang)[None, :, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def swiglu(h, wg, wu, wd):
    return (torch.nn.functional.silu(h @ wg.T) * (h @ wu.T)) @ wd.T


def model_loss(cfg, P, tokens, w):
    B, T = tokens.shape
    D, H = cfg["d_model"], cfg["n_heads"]
    Dh = D // H
    x = P["embed"][tokens]  # [B, T, D]
    aux = torch.zeros((), dtype=torch.float64)
    topk_all = []
    for i in range(cfg["n_layers"]):
        p = f"layers.{i}."
        h = rmsnorm(x, P[p + "attn_norm"], cfg["norm_eps"])
        q = (h @ P[p + "attn.wq"].T).view(B, T, H, Dh)
        k = (h @ P[p + "attn.wk"].T).view(B, T, H, Dh)
        v = (h @ P[p + "attn.wv"].T).view(B, T, H, Dh)
        q, k = rope(q, cfg["rope_theta"]), rope(k, cfg["rope_theta"])
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, H, T, Dh]
        s = q @ k.transpose(-1, -2) / np.sqrt(Dh)
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
        s = s.masked_fill(mask, float("-inf"))
        a = torch.softmax(s, -1) @ v
        a = a.transpose(1, 2).reshape(B, T, D)
        x = x + a @ P[p + "attn.wo"].T
        h = rmsnorm(x, P[p + "mlp_norm"], cfg["norm_eps"]).reshape(B * T, D)
        if cfg["n_experts"] == 0:
            y = swiglu(h, P[p + "mlp.w_gate"], P[p + "mlp.w_up"], P[p + "mlp.w_down"])
        else:
            E, K = cfg["n_experts"], cfg["top_k"]
            z = h @ P[p + "moe.router"].T  # [N, E]
            prob = torch.softmax(z, -1)
            ids = torch.topk(z.detach(), K, dim=-1).indices  # descending
            topk_all.append(ids)
            zsel = torch.gather(z, 1, ids)
            gate = torch.softmax(zsel, -1) if cfg["norm_topk_prob"] else torch.gather(prob, 1, ids)
            y = torch.zeros_like(h)
            for e in range(E):
                out_e = swiglu(h, P[p + "moe.w_gate"][e], P[p + "moe.w_up"][e], P[p + "moe.w_down"][e])
                g_e = (gate * (ids == e)).sum(-1, keepdim=True)
                y = y + g_e * out_e
            if cfg["shared_expert_ff"] > 0:
                y = y + swiglu(h, P[p + "moe.shared.w_gate"], P[p + "moe.shared.w_up"], P[p + "moe.shared.w_down"])
            N = h.shape[0]
            if cfg["load_balance"] == "aux_loss":
                own = torch.topk(prob.detach(), K, dim=-1).indices
                f = torch.zeros(E, dtype=torch.float64).scatter_add_(0, own.reshape(-1), torch.ones(N * K, dtype=torch.float64)) / (K * N)
                aux = aux + cfg["aux_loss_coef"] * E * (f * prob.mean(0)).sum()
            if cfg["z_loss_coef"] > 0:
                aux = aux + cfg["z_loss_coef"] * (torch.logsumexp(z, -1) ** 2).mean()
        x = x + y.reshape(B, T, D)
    logits = rmsnorm(x, P["final_norm"], cfg["norm_eps"]) @ P["lm_head"].T
    logp_all = torch.log_softmax(logits, -1)
    logp = torch.gather(logp_all[:, :-1], 2, tokens[:, 1:, None])[..., 0]  # [B, T-1]
    loss = (w * logp).sum() + aux
    return loss, logp, topk_all, aux


def param_shapes(cfg):
    V, D, E, K = cfg["vocab_size"], cfg["d_model"], cfg["n_experts"], cfg["top_k"]
    F = cfg["d_ff"] if E > 0 else K * cfg["d_ff"]
    S = cfg["shared_expert_ff"]
    shapes = [("embed", (V, D))]
    for i in range(cfg["n_layers"]):
        p = f"layers.{i}."
        shapes += [(p + "attn_norm", (D,))] + [(p + "attn." + n, (D, D)) for n in ("wq", "wk", "wv", "wo")]
        shapes += [(p + "mlp_norm", (D,))]
        if E > 0:
            shapes += [(p + "moe.router", (E, D)), (p + "moe.w_gate", (E, F, D)), (p + "moe.w_up", (E, F, D)),
                       (p + "moe.w_down", (E, D, F))]
            if S > 0:
                shapes += [(p + "moe.shared.w_gate", (S, D)), (p + "moe.shared.w_up", (S, D)), (p + "moe.shared.w_down", (D, S))]
        else:
            shapes += [(p + "mlp.w_gate", (F, D)), (p + "mlp.w_up", (F, D)), (p + "mlp.w_down", (D, F))]
    return shapes + [("final_norm", (D,)), ("lm_head", (V, D))]


def make(path, cfg, seed, B=3, T=9):
    rng = np.random.default_rng(seed)
    params = {}
    for name, shape in param_shapes(cfg):
        if name.endswith("norm"):
            params[name] = (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
        else:
            params[name] = (cfg["init_std"] * rng.standard_normal(shape)).astype(np.float32)
    tokens = rng.integers(0, cfg["vocab_size"], size=(B, T)).astype(np.int32)
    w = rng.standard_normal((B, T - 1)).astype(np.float32)
    P = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in params.items()}
    loss, logp, topk, aux = model_loss(cfg, P, torch.tensor(tokens, dtype=torch.long), torch.tensor(w, dtype=torch.float64))
    loss.backward()
    with h5py.File(path, "w") as f:
        f.attrs["format"] = MAGIC_FORMAT
        f.attrs["version"] = VERSION
        for k, v in cfg.items():
            f.attrs[k] = v
        for name, arr in params.items():
            f.create_dataset("params/" + name, data=arr)
        g = f.create_group("golden")
        g.attrs["golden_version"] = GOLDEN_VERSION
        g.attrs["generator"] = "tests/golden/torch_reference.py (torch %s, float64)" % torch.__version__
        g.create_dataset("tokens", data=tokens)
        g.create_dataset("weights", data=w)
        g.create_dataset("logprobs", data=logp.detach().numpy())
        g.attrs["loss"] = float(loss)
        g.attrs["aux_loss"] = float(aux)
        if topk:
            g.create_dataset("topk_ids", data=torch.stack(topk).numpy().astype(np.int32))  # [L, N, K]
        for name, t in P.items():
            g.create_dataset("grads/" + name, data=t.grad.numpy())
    print(f"{path}: loss {float(loss):.6f} aux {float(aux):.6f}")


BASE = dict(vocab_size=23, d_model=24, n_layers=2, n_heads=3, n_experts=6, top_k=2, d_ff=20,
            shared_expert_ff=0, max_seq_len=16, rope_theta=10000.0, norm_eps=1e-5, norm_topk_prob=1,
            scoring="softmax", expert_bias=0, bias_update_rate=1e-3, load_balance="none",
            aux_loss_coef=0.0, z_loss_coef=0.0, init_std=0.2)

if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/golden"
    moe = dict(BASE, shared_expert_ff=12, load_balance="aux_loss", aux_loss_coef=0.1, z_loss_coef=0.01)
    make(f"{out}/moe_tiny.h5", moe, seed=1)
    make(f"{out}/moe_tiny_topk_weights.h5", dict(BASE, norm_topk_prob=0), seed=2)
    make(f"{out}/dense_tiny.h5", dict(BASE, n_experts=0), seed=3)
