"""Batched few-shot evaluator vs the authors' per-episode NumPy loop, on the same cached features.

Seed 000's evaluation (10,000 5-way episodes, 15 queries, 1 and 5 shots, nearest centroid) is, in the
authors' code, a Python loop that samples one episode at a time with ``np.random`` and classifies it in NumPy
(PAPER-NOTES 000: ~0.85 ms per episode on two CPU cores). This script times, in one process and on the same
random 640-d features (default 100 classes x 600 images, cached under ``<cache>/bench``):

* ``numpy loop``: per episode, ``np.random.choice`` of classes and images, centroids and squared distances in
  NumPy, both shot counts on the same episode (the loop gets the same 1/5-shot sharing as the batched code);
* ``batched``: :func:`studylib.evaluation.evaluate` (episode sampling included), on the CPU and, when
  available, on CUDA (timed with ``torch.cuda.synchronize``).

It prints both times, their ratio (goal: >= 10x on 2 CPU cores), the peak resident memory
(``resource.getrusage``) and the load average. Run: ``python benchmarks/bench_evaluator.py [--episodes 10000]
[--threads 1]``.

On a busy machine (other processes on the same cores) torch's OpenMP threads spin at every barrier and the
batched code slows down several-fold with 2 threads while the Python loop barely notices; compare with
``--threads 1`` or ``OMP_WAIT_POLICY=PASSIVE`` (measured on 2 shared cores at load ~6: sampling 6.4 s with
2 spinning threads, 0.3 s passive or with 1 thread).
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from studylib.evaluation import evaluate, sample_episodes  # noqa: E402
from studylib.utils import atomic_torch_save, default_cache_dir  # noqa: E402


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def cached_features(classes: int, per_class: int, dim: int, seed: int, cache: Path | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Random class-structured features (class mean + unit noise), generated once and cached on disk."""
    path = cache / f"features_{classes}x{per_class}x{dim}_s{seed}.pt" if cache is not None else None
    if path is not None and path.exists():
        blob = torch.load(path)
        return blob["features"], blob["labels"]
    gen = torch.Generator().manual_seed(seed)
    centres = 0.35 * torch.randn(classes, dim, generator=gen)
    labels = torch.arange(classes).repeat_interleave(per_class)
    features = centres[labels] + torch.randn(classes * per_class, dim, generator=gen)
    if path is not None:
        atomic_torch_save({"features": features, "labels": labels}, path)
    return features, labels


def numpy_loop(x: np.ndarray, y: np.ndarray, ways: int, shots: tuple[int, ...], queries: int, episodes: int,
               seed: int) -> dict[int, np.ndarray]:
    """The authors' style: one episode at a time, sampled with ``np.random``, classified in NumPy."""
    rng = np.random.RandomState(seed)
    classes = np.unique(y)
    by_class = {int(c): np.flatnonzero(y == c) for c in classes}
    n_max = max(shots)
    qlabels = np.repeat(np.arange(ways), queries)
    acc = {n: np.empty(episodes) for n in shots}
    for e in range(episodes):
        picked = rng.choice(classes, ways, replace=False)
        idx = np.stack([rng.choice(by_class[int(c)], n_max + queries, replace=False) for c in picked])
        query = x[idx[:, n_max:].reshape(-1)]  # [w*m, D]
        for n in shots:
            centroids = x[idx[:, :n]].mean(axis=1)  # [w, D]
            dist = ((query[:, None, :] - centroids[None, :, :]) ** 2).sum(-1)  # [w*m, w]
            acc[n][e] = (dist.argmin(1) == qlabels).mean()
    return acc


def time_batched(features: torch.Tensor, labels: torch.Tensor, args: argparse.Namespace,
                 device: torch.device) -> tuple[float, float, dict]:
    """Seconds for sampling all episodes and for classifying them (what ``evaluate(..., episodes=E)`` does in
    one call, split in two to show where the time goes), and the results."""
    feats = features.to(device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    if device.type == "cuda":  # warm-up: CUDA context, kernels, cuBLAS handles
        evaluate(feats, labels, args.ways, tuple(args.shots), args.queries, 100, seed=args.seed + 1)
    sync()
    t0 = time.perf_counter()
    eps = sample_episodes(labels, args.ways, max(args.shots), args.queries, args.episodes, args.seed)
    t1 = time.perf_counter()
    res = evaluate(feats, labels, shots=tuple(args.shots), episodes=eps, chunk=args.chunk)
    sync()
    return t1 - t0, time.perf_counter() - t1, res


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--classes", type=int, default=100)
    p.add_argument("--per-class", type=int, default=600)
    p.add_argument("--dim", type=int, default=640)
    p.add_argument("--ways", type=int, default=5)
    p.add_argument("--shots", type=int, nargs="+", default=[1, 5])
    p.add_argument("--queries", type=int, default=15)
    p.add_argument("--episodes", type=int, default=10000)
    p.add_argument("--loop-episodes", type=int, default=None,
                   help="episodes for the NumPy loop (default: --episodes); its time is scaled to --episodes")
    p.add_argument("--chunk", type=int, default=None, help="episodes per batched call (default: automatic)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-cache", action="store_true", help="do not read/write the cached features")
    p.add_argument("--no-cuda", action="store_true")
    p.add_argument("--json", default=None, help="also write the times and speed-ups to this JSON file")
    args = p.parse_args()
    figures: dict[str, float] = {"episodes": args.episodes}
    if args.threads:
        torch.set_num_threads(args.threads)

    cache = None if args.no_cache else default_cache_dir() / "bench"
    features, labels = cached_features(args.classes, args.per_class, args.dim, args.seed, cache)
    print(f"features {tuple(features.shape)} float32, {args.episodes} episodes of {args.ways}-way "
          f"{args.shots}-shot {args.queries}-query, torch threads {torch.get_num_threads()}")
    print(f"peak RSS after features: {peak_rss_mib():.0f} MiB; load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} cpus")

    t_sample, t_classify, res = time_batched(features, labels, args, torch.device("cpu"))
    t_cpu = t_sample + t_classify
    rss_batched = peak_rss_mib()
    print(f"batched (cpu):   {t_cpu:8.3f} s  ({1e3 * t_cpu / args.episodes:.3f} ms/episode; sampling "
          f"{t_sample:.3f} s + classifying {t_classify:.3f} s)  peak RSS {rss_batched:.0f} MiB")
    for (name, n), r in res.items():
        print(f"    {r}")

    loop_eps = args.loop_episodes or args.episodes
    x, y = features.numpy(), labels.numpy()
    t0 = time.perf_counter()
    acc = numpy_loop(x, y, args.ways, tuple(args.shots), args.queries, loop_eps, args.seed)
    t_loop = (time.perf_counter() - t0) * args.episodes / loop_eps
    scaled = "" if loop_eps == args.episodes else f" (scaled from {loop_eps} episodes)"
    print(f"numpy loop:      {t_loop:8.3f} s  ({1e3 * t_loop / args.episodes:.3f} ms/episode){scaled}")
    for n in args.shots:
        print(f"    nearest_centroid {args.ways}-way {n}-shot: {100 * acc[n].mean():.2f} % "
              f"(batched {100 * res[('nearest_centroid', n)].mean:.2f} +- {100 * res[('nearest_centroid', n)].ci95:.2f})")
    print(f"speed-up (numpy loop / batched cpu): {t_loop / t_cpu:.1f}x  (goal >= 10x)")
    figures.update(numpy_loop_s=t_loop, batched_cpu_s=t_cpu, speedup_cpu=t_loop / t_cpu)

    if torch.cuda.is_available() and not args.no_cuda:
        t_sample, t_classify, res_gpu = time_batched(features, labels, args, torch.device("cuda"))
        t_gpu = t_sample + t_classify
        print(f"batched (cuda, {torch.cuda.get_device_name()}): {t_gpu:8.3f} s  "
              f"(sampling on the cpu {t_sample:.3f} s + classifying {t_classify:.3f} s), "
              f"speed-up vs numpy loop {t_loop / t_gpu:.0f}x, "
              f"peak GPU memory {torch.cuda.max_memory_allocated() / 2**20:.0f} MiB")
        figures.update(batched_cuda_s=t_gpu, speedup_cuda=t_loop / t_gpu)
        for (name, n), r in res_gpu.items():
            print(f"    {r}")
    else:
        print("cuda: not available, skipped")
    print(f"peak RSS of the whole run: {peak_rss_mib():.0f} MiB; load average {os.getloadavg()[0]:.1f}")
    if args.json:
        import json
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=1)


if __name__ == "__main__":
    main()
