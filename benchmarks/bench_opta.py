"""Benchmark: batched OpTA + logistic regression vs a per-episode POT + scikit-learn baseline, and DyCE's cost.

Part 1 (seed 001, Sec. 4.2): 5-way 1-shot 15-query episodes drawn from cached random class-structured
features (D = 512). The batched path is :func:`studylib.evaluation.opta.opta_classifier` on all episodes at
once; the baseline does what the authors' evaluation does, one episode at a time on the CPU:
``ot.sinkhorn(..., method="sinkhorn_log")`` per OpTA pass, then ``sklearn LogisticRegression(C=1)`` on the
transported prototypes. Both run in the same process, on the same episodes; the baseline may run on fewer
episodes (``--baseline-episodes``) and its per-episode time is extrapolated to the full count (printed as
such). Prediction agreement between the two is printed as a correctness check.

Part 2 (seed 001, Sec. 4.1): time per training step with and without DyCE at B = 256, M = 8192, P = 200,
d = 512. The backbone is a stand-in: a small MLP encoder on 3x32x32 inputs (the point is DyCE's overhead,
not the backbone); "with DyCE" runs the three memories BECLR keeps (teacher z, student p, student z), each
enhancing both views and then updating.

Usage: ``python benchmarks/bench_opta.py [--episodes 2000] [--baseline-episodes 100] [--threads 2]``.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
from torch import nn

from studylib.evaluation.opta import opta_classifier, standardize
from studylib.methods.dyce import DyCE
from studylib.utils import default_cache_dir


def cached_features(classes: int = 64, per_class: int = 100, dim: int = 512, noise: float = 4.0, seed: int = 0
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """Random class-structured features (class mean + noise, ReLU like a backbone's output), cached on disk."""
    path = default_cache_dir() / "bench" / f"opta_feats_{classes}_{per_class}_{dim}_{noise}_{seed}.pt"
    if path.exists():
        blob = torch.load(path)
        return blob["x"], blob["y"]
    g = torch.Generator().manual_seed(seed)
    means = torch.randn(classes, dim, generator=g)
    x = (means[:, None] + noise * torch.randn(classes, per_class, dim, generator=g)).relu().reshape(-1, dim)
    y = torch.arange(classes).repeat_interleave(per_class)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"x": x, "y": y}, path)
    return x, y


def sample_episodes(x: torch.Tensor, classes: int, per_class: int, episodes: int, ways: int = 5, shots: int = 1,
                    queries: int = 15, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """``support [E, w, n, D]`` and ``query [E, w*q, D]`` (class-major), drawn with a fixed seed."""
    g = torch.Generator().manual_seed(seed)
    cls = torch.rand(episodes, classes, generator=g).argsort(1)[:, :ways]                     # [E, w]
    img = torch.rand(episodes, ways, per_class, generator=g).argsort(2)[:, :, : shots + queries]
    idx = cls[:, :, None] * per_class + img                                                   # [E, w, n+q]
    feats = x[idx]
    return feats[:, :, :shots], feats[:, :, shots:].reshape(episodes, ways * queries, -1)


def baseline_episode(support: np.ndarray, query: np.ndarray, passes: int) -> np.ndarray:
    """Per-episode reference: POT log-domain Sinkhorn + scikit-learn logistic regression (authors' style)."""
    import ot
    from sklearn.linear_model import LogisticRegression

    w, n, _ = support.shape
    protos0 = support.mean(1)
    protos = protos0
    a, b = np.full(w, 1.0 / w), np.full(query.shape[0], 1.0 / query.shape[0])
    for _ in range(passes):
        cost = ((protos[:, None] - query[None]) ** 2).sum(-1)
        plan = ot.sinkhorn(a, b, cost / cost.max(), 0.05, method="sinkhorn_log", numItermax=1000, stopThr=1e-4,
                           warn=False)
        protos = (plan / plan.sum(1, keepdims=True)) @ query
    if n > 1:
        protos = 0.7 * protos + 0.3 * protos0
    clf = LogisticRegression(C=1.0).fit(protos, np.arange(w))
    return clf.predict_proba(query)


def bench_opta(episodes: int, baseline_episodes: int, chunk: int, device: torch.device,
               per_class: int = 100) -> dict[str, float]:
    """Time the batched OpTA + LR against the per-episode baseline; print and return the figures."""
    classes = 64
    x, _ = cached_features(classes, per_class)
    support, query = sample_episodes(x, classes, per_class, episodes)
    labels = torch.arange(5).repeat_interleave(15)
    sup_s, qry_s = standardize(support), standardize(query)

    def run_batched() -> torch.Tensor:
        out = []
        for i in range(0, episodes, chunk):
            s, q = support[i:i + chunk].to(device), query[i:i + chunk].to(device)
            out.append(opta_classifier(s, q).argmax(-1).cpu())
        return torch.cat(out)

    run_batched() if device.type == "cuda" else None  # warm-up (CUDA kernels)
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    pred = run_batched()
    if device.type == "cuda":
        torch.cuda.synchronize()
    t_batched = time.perf_counter() - t0
    acc = (pred == labels).float().mean().item()

    nb = min(baseline_episodes, episodes)
    t0 = time.perf_counter()
    base_pred = [baseline_episode(sup_s[e].double().numpy(), qry_s[e].double().numpy(), 5).argmax(-1)
                 for e in range(nb)]
    t_base = time.perf_counter() - t0
    base_pred_t = torch.as_tensor(np.stack(base_pred))
    agree = (base_pred_t == pred[:nb]).float().mean().item()
    per_ep = t_base / nb
    t_base_full = per_ep * episodes
    print(f"[OpTA+LR, 5-way 1-shot 15q, D=512, {device}] batched: {episodes} episodes in {t_batched:.2f} s "
          f"({1e3 * t_batched / episodes:.2f} ms/episode), accuracy {100 * acc:.2f}%")
    print(f"  baseline POT+sklearn: {nb} episodes in {t_base:.2f} s ({1e3 * per_ep:.1f} ms/episode)"
          f"{'' if nb == episodes else f', extrapolated to {episodes}: {t_base_full:.1f} s'}")
    print(f"  speed-up {t_base_full / t_batched:.1f}x; prediction agreement on the {nb} shared episodes: "
          f"{100 * agree:.2f}%")
    return {"episodes": episodes, "batched_s": t_batched, "baseline_episodes": nb, "baseline_ms_per_episode":
            1e3 * per_ep, "speedup": t_base_full / t_batched, "agreement": agree, "accuracy": acc}


class _Encoder(nn.Module):
    """Stand-in backbone: MLP on flattened 3x32x32 inputs -> 512."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 512), nn.BatchNorm1d(512), nn.ReLU(),
                                 nn.Linear(512, 512))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def bench_dyce(device: torch.device, steps: int = 10, batch: int = 256, size: int = 8192, partitions: int = 200,
               dim: int = 512) -> None:
    torch.manual_seed(0)
    enc = _Encoder().to(device)
    opt = torch.optim.SGD(enc.parameters(), lr=0.01, momentum=0.9)
    mems = [DyCE(dim, size, partitions, k=3, adapt_steps=0, seed=i).to(device) for i in range(3)]
    t0 = time.perf_counter()
    with torch.no_grad():
        for mem in mems:
            while not mem.full:
                mem.update(torch.randn(2 * batch, dim, device=device))
    if device.type == "cuda":
        torch.cuda.synchronize()
    t_fill = time.perf_counter() - t0
    x = torch.randn(2 * batch, 3, 32, 32, device=device)

    def one_step(use: bool) -> None:
        z = enc(x)
        za, zb = z.split(batch)
        if use:
            outs = [mem.step([za, zb]) for mem in mems]
            za, zb = outs[0]
        loss = -(torch.nn.functional.normalize(za, dim=1) * torch.nn.functional.normalize(zb, dim=1)).sum(1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    times = {}
    for use in (False, True):
        one_step(use)
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(steps):
            one_step(use)
        if device.type == "cuda":
            torch.cuda.synchronize()
        times[use] = (time.perf_counter() - t0) / steps
    print(f"[DyCE, B={batch}, M={size}, P={partitions}, d={dim}, {device}] step without memory "
          f"{1e3 * times[False]:.1f} ms, with 3 DyCE memories {1e3 * times[True]:.1f} ms "
          f"(+{1e3 * (times[True] - times[False]) / 3:.1f} ms per memory; stand-in MLP encoder); "
          f"filling + k-means initialisation of 3 memories {t_fill:.1f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--episodes", type=int, default=2000)
    ap.add_argument("--baseline-episodes", type=int, default=100)
    ap.add_argument("--chunk", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--skip-dyce", action="store_true")
    ap.add_argument("--device", default=None, help="only this device (default: the CPU, and CUDA when present)")
    ap.add_argument("--per-class", type=int, default=100, help="features per class of the 64 classes")
    ap.add_argument("--json", default=None, help="also write the OpTA figures per device to this JSON file")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.device is not None:
        devices = [torch.device(args.device)]
        if devices[0].type == "cuda" and not torch.cuda.is_available():
            ap.error("--device cuda: torch sees no CUDA device here")
    else:
        devices = [torch.device("cpu")] + ([torch.device("cuda")] if torch.cuda.is_available() else [])
    figures = {}
    for dev in devices:
        figures[dev.type] = bench_opta(args.episodes, args.baseline_episodes, args.chunk, dev, args.per_class)
        if not args.skip_dyce:
            bench_dyce(dev)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=1)


if __name__ == "__main__":
    main()
