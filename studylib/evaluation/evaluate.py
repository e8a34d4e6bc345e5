"""Batched few-shot evaluation: features once per checkpoint, CL2N, thousands of episodes per tensor op.

Protocol of seed 000 (Sec. 3.1, PAPER-NOTES 000): extract the features of a split once, centre them with the
*training-set* mean and L2-normalise them (CL2N), then classify 10,000 5-way episodes with 15 queries per
class, 1 and 5 shots, and report the mean accuracy with ``CI95 = 1.96 std / sqrt(E)`` over the episodes
(pooled over the seeds of a configuration with :func:`pool_results`).

The authors' loop samples and classifies one episode at a time in NumPy (~0.85 ms per episode on two CPU
cores). :func:`evaluate` instead draws all episodes at once (:func:`sample_episodes`), then walks over chunks
of episodes: gather ``[C, w, n, D]`` support and ``[C, Q, D]`` query features, call a batched classifier
(:mod:`studylib.evaluation.classifiers`), compare the argmax with the labels. Memory is bounded by the chunk
size (never ``[E, Q, S, D]``), and the same code runs on a GPU. ``benchmarks/bench_evaluator.py`` measures
the speed-up against the per-episode NumPy loop.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from studylib import precision
from studylib.data.base import DataError
from studylib.evaluation.classifiers import Classifier, get_classifier
from studylib.evaluation.episodes import Episodes, sample_episodes
from studylib.utils import mean_ci95

# Budget for the gathered support + query features of one chunk of episodes (classifier temporaries are
# smaller: [C, Q, w*n] distances). Measured on 2 shared CPU cores, 10,000 5-way 5-shot 15-query 640-d
# episodes: with 1 torch thread a cache-sized chunk is fastest (32 episodes 2.6 s, 256 episodes 6.1 s: the
# gathered features are re-read by the norms and the batched matmul while still in cache); with 2 threads
# every op is a parallel region whose barrier costs dearly on a busy machine, so larger chunks win
# (32 episodes 14 s, 256 episodes 4.3 s). On CUDA large chunks amortise the kernel launches.
_CHUNK_BYTES = {"cpu1": 8 * 2**20, "cpu": 64 * 2**20, "cuda": 2 * 2**30}


def _module_of(fn: Callable[..., Any]) -> nn.Module | None:
    if isinstance(fn, nn.Module):
        return fn
    owner = getattr(fn, "__self__", None)  # a bound method such as ``method.features``
    return owner if isinstance(owner, nn.Module) else None


def extract_features(fn: Callable[[torch.Tensor], torch.Tensor], images: torch.Tensor,
                     transform: Callable[[torch.Tensor], torch.Tensor] | None = None, batch_size: int = 256,
                     device: torch.device | str | None = None, amp: bool = True,
                     progress: bool | None = None) -> torch.Tensor:
    """Features of every image, computed once per checkpoint (seed 000 Sec. 3.1).

    Runs under ``torch.inference_mode``; on CUDA the inputs are made ``channels_last``. When ``amp``, the
    forward runs under bf16 autocast where :func:`studylib.precision.autocast_enabled` says so (CUDA; the CPU at
    the check scale); features are returned in float32. If ``fn`` is an ``nn.Module``
    or a bound method of one (``method.features``), the module is put in eval mode for the extraction and
    restored afterwards.

    Args:
        fn: ``[B, C', H', W']`` float -> ``[B, D]`` features.
        images: ``[N, C, H, W]`` uint8 (any device; batches are moved to ``device``).
        transform: applied to each uint8 batch on ``device``, returns the float input of ``fn`` (e.g. resize,
            centre crop, normalise). None: ``x.float() / 255``.
        batch_size: images per forward pass.
        device: where to run; None = the device of ``fn``'s parameters, else of ``images``.
        amp: bf16 autocast where :mod:`studylib.precision` enables it (CUDA; the CPU at the check scale).
        progress: tqdm bar; None = only when stderr is a terminal.

    Returns:
        ``[N, D]`` float32 on ``device`` (``.cpu()`` it to cache).
    """
    from tqdm.std import tqdm  # text, never a notebook widget (studylib.progress)

    if images.dim() != 4 or images.dtype != torch.uint8:
        raise DataError(f"extract_features needs uint8 [N, C, H, W] images, got {images.dtype} {tuple(images.shape)}")
    if images.shape[0] == 0:
        raise DataError("extract_features got no images; check the split")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    module = _module_of(fn)
    if device is None:
        param = next(iter(module.parameters()), None) if module is not None else None
        device = param.device if param is not None else images.device
    device = torch.device(device)
    held = {t.device for t in module.parameters()} if module is not None else set()
    if held and {d.type for d in held} != {device.type}:
        raise ValueError(f"extract_features: the model's weights are on {', '.join(sorted(map(str, held)))} but "
                         f"the images go to {device}; move the model first (method.to(device)), or load it with "
                         f"studylib.runs.runner.load_trained, which puts it on its run's device")
    cuda = device.type == "cuda"
    if transform is None:
        def transform(x: torch.Tensor) -> torch.Tensor:
            return x.float().div_(255.0)
    if progress is None:
        progress = sys.stderr.isatty()
    was_training = module.training if module is not None else False
    if module is not None:
        module.eval()
    outs: list[torch.Tensor] = []
    try:
        with torch.inference_mode(), precision.autocast(device, enabled=amp):
            for start in tqdm(range(0, images.shape[0], batch_size), desc="features", disable=not progress,
                              unit="batch", leave=False):
                x = transform(images[start:start + batch_size].to(device, non_blocking=True))
                if cuda:
                    x = x.contiguous(memory_format=torch.channels_last)
                f = fn(x)
                if f.dim() != 2 or f.shape[0] != x.shape[0]:
                    raise ValueError(f"the feature function must return [B, D], got {tuple(f.shape)} for a batch "
                                     f"of {x.shape[0]}; flatten or pool inside fn")
                outs.append(f.float())
    finally:
        if module is not None:
            module.train(was_training)
    return torch.cat(outs)  # outside inference mode: an ordinary tensor that later code may modify in place


def cl2n(features: torch.Tensor, mean: torch.Tensor) -> torch.Tensor:
    """CL2N (seed 000 Sec. 3.1, after SimpleShot): ``x <- (x - mean) / ||x - mean||``.

    Args:
        features: ``[N, D]``.
        mean: ``[D]``, the mean feature of the *training* split (``train_features.mean(0)``).

    Returns:
        ``[N, D]`` with unit L2 rows (a row equal to the mean stays 0).
    """
    if features.dim() != 2 or mean.shape != (features.shape[1],):
        raise ValueError(f"cl2n needs features [N, D] and mean [D], got {tuple(features.shape)} and "
                         f"{tuple(mean.shape)}; pass train_features.mean(0)")
    return F.normalize(features - mean.to(features.device, features.dtype), dim=1)


@dataclass
class EvalResult:
    """Accuracy of one classifier at one shot count.

    Attributes:
        accuracies: ``[E]`` float64 per-episode accuracies in ``[0, 1]`` (CPU).
        mean: mean accuracy in ``[0, 1]``.
        ci95: ``1.96 * std / sqrt(E)``, same unit as ``mean``.
        classifier, ways, shots, queries: what was evaluated.
        extra: more JSON-friendly facts (episode seed, number of pooled runs).
    """

    accuracies: torch.Tensor
    mean: float
    ci95: float
    classifier: str = ""
    ways: int = 0
    shots: int = 0
    queries: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_accuracies(cls, accuracies: torch.Tensor, **meta: Any) -> "EvalResult":
        acc = accuracies.detach().to("cpu", torch.float64)
        mean, ci = mean_ci95(acc)
        return cls(acc, mean, ci, **meta)

    @property
    def episodes(self) -> int:
        return int(self.accuracies.numel())

    def as_dict(self, with_accuracies: bool = False) -> dict[str, Any]:
        """JSON-friendly summary; ``with_accuracies`` adds the per-episode list."""
        out: dict[str, Any] = {"classifier": self.classifier, "ways": self.ways, "shots": self.shots,
                               "queries": self.queries, "episodes": self.episodes, "mean": self.mean,
                               "ci95": self.ci95, **self.extra}
        if with_accuracies:
            out["accuracies"] = [float(a) for a in self.accuracies.tolist()]
        return out

    def __str__(self) -> str:
        return (f"{self.classifier} {self.ways}-way {self.shots}-shot: {100 * self.mean:.2f} +- "
                f"{100 * self.ci95:.2f} % ({self.episodes} episodes)")


def pool_results(results: Sequence[EvalResult]) -> EvalResult:
    """Pool the episodes of several runs (seed 000: 3 seeds x 10,000 episodes) into one mean and CI95."""
    if not results:
        raise ValueError("pool_results needs at least one result")
    first = results[0]
    for r in results[1:]:
        if (r.classifier, r.ways, r.shots, r.queries) != (first.classifier, first.ways, first.shots, first.queries):
            raise ValueError(f"cannot pool {r} with {first}: different settings")
    return EvalResult.from_accuracies(torch.cat([r.accuracies for r in results]), classifier=first.classifier,
                                      ways=first.ways, shots=first.shots, queries=first.queries,
                                      extra={"runs": len(results), "seeds": [r.extra.get("seed") for r in results]})


def results_as_dict(results: Mapping[tuple[str, int], EvalResult], with_accuracies: bool = False) -> dict[str, Any]:
    """``{"<classifier>/<shots>shot": EvalResult.as_dict()}``: JSON keys for the tuple-keyed output of evaluate."""
    return {f"{name}/{shots}shot": r.as_dict(with_accuracies) for (name, shots), r in results.items()}


def _classifiers(spec: Any) -> list[tuple[str, Classifier]]:
    if isinstance(spec, Mapping):
        return [(str(k), v) for k, v in spec.items()]
    if isinstance(spec, str) or callable(spec):
        return [get_classifier(spec)]
    out = [get_classifier(s) for s in spec]
    names = [n for n, _ in out]
    if len(set(names)) != len(names):
        raise ValueError(f"two classifiers share a name in {names}; pass a dict {{name: classifier}}")
    return out


def default_chunk(ways: int, shots: int, queries: int, dim: int, device: torch.device) -> int:
    """Episodes per chunk so that the gathered float32 features stay within a fixed budget: 8 MiB on the CPU
    with one torch thread, 64 MiB with more, 2 GiB on CUDA; for 5-way 5-shot 15-query 640-d features that is
    32, ~260 or ~8,400 episodes (see ``_CHUNK_BYTES`` for the measurements)."""
    per_episode = 4 * ways * (shots + queries) * dim
    if device.type == "cuda":
        budget = _CHUNK_BYTES["cuda"]
    else:
        budget = _CHUNK_BYTES["cpu1" if torch.get_num_threads() == 1 else "cpu"]
    return max(1, budget // per_episode)


def evaluate(features: torch.Tensor, labels: torch.Tensor, ways: int = 5, shots: int | Sequence[int] = (1, 5),
             queries: int = 15, episodes: int | Episodes = 10000,
             classifier: str | Classifier | Sequence[str | Classifier] | Mapping[str, Classifier] = "nearest_centroid",
             seed: int = 0, train_mean: torch.Tensor | None = None, chunk: int | None = None,
             device: torch.device | str | None = None, progress: bool = False) -> dict[tuple[str, int], EvalResult]:
    """Few-shot accuracy of cached features over many episodes (seed 000 Sec. 3.1).

    All shot counts use the same episodes: they are sampled once with ``max(shots)`` support images per class
    and the ``n``-shot problem keeps the first ``n`` (:meth:`Episodes.with_shots`); queries are shared.

    Args:
        features: ``[N, D]`` features of the evaluated split (any float dtype; computed in float32).
        labels: ``[N]`` int labels of the split.
        ways, shots, queries: episode shape; ``shots`` an int or a sequence such as ``(1, 5)``.
        episodes: number of episodes ``E`` to sample with ``seed``, or ready :class:`Episodes` (then ``ways``
            and ``queries`` are taken from them and they must hold at least ``max(shots)`` shots).
        classifier: a registry name (:data:`~studylib.evaluation.classifiers.CLASSIFIERS`), a
            :class:`~studylib.evaluation.classifiers.Classifier`, a list of them, or a ``{name: classifier}``
            dict.
        seed: episode seed.
        train_mean: ``[D]`` training-split mean feature; when given, features go through :func:`cl2n` first.
        chunk: episodes per batched classifier call; None = :func:`default_chunk` (bounded memory).
        device: where to classify; None = ``features.device``.
        progress: tqdm bar over chunks.

    Returns:
        ``{(classifier_name, shots): EvalResult}`` (see :func:`results_as_dict` for JSON).
    """
    from tqdm.std import tqdm  # text, never a notebook widget (studylib.progress)

    if features.dim() != 2 or labels.shape != (features.shape[0],):
        raise DataError(f"evaluate needs features [N, D] and labels [N], got {tuple(features.shape)} and "
                        f"{tuple(labels.shape)}")
    shot_list = sorted({int(shots)} if isinstance(shots, int) else {int(s) for s in shots})
    if not shot_list or shot_list[0] < 1:
        raise DataError(f"shots must be positive integers, got {shots}")
    classifiers = _classifiers(classifier)
    device = torch.device(device) if device is not None else features.device
    feats = features.detach().to(device, torch.float32)
    if train_mean is not None:
        feats = cl2n(feats, train_mean.detach().to(device, torch.float32))
    if isinstance(episodes, Episodes):
        eps = episodes
        if eps.shots < shot_list[-1]:
            raise DataError(f"the given episodes hold {eps.shots} shots but {shot_list[-1]}-shot was requested; "
                            f"sample them with shots={shot_list[-1]}")
        ways, queries = eps.ways, eps.queries
        top = max(int(eps.support.max()), int(eps.query.max()))
        if top >= features.shape[0]:
            raise DataError(f"the given episodes index image {top} but there are {features.shape[0]} features; "
                            f"sample the episodes from this split's labels")
    else:
        eps = sample_episodes(labels, ways, shot_list[-1], queries, int(episodes), seed)
    n_max, e_total = shot_list[-1], eps.num_episodes
    if chunk is None:
        chunk = default_chunk(ways, n_max, queries, feats.shape[1], device)
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    qlabels = eps.query_labels().to(device)  # [w*m], class-major like query.reshape(E, -1)
    eps = eps.to(device)  # index tensors moved once (a few MB)
    acc = {(name, n): torch.empty(e_total, dtype=torch.float64, device=device)
           for name, _ in classifiers for n in shot_list}
    # Gather buffers allocated once: a fresh multi-MB tensor per chunk costs page faults that made the gather
    # ~4x slower than the copy itself on the CPU (measured: 85 ms vs 23 ms per 256 episodes of 640-d).
    dim = feats.shape[1]
    chunk = min(chunk, e_total)
    sbuf = torch.empty(chunk * ways * n_max, dim, device=device)
    qbuf = torch.empty(chunk * ways * queries, dim, device=device)
    for start in tqdm(range(0, e_total, chunk), desc="episodes", disable=not progress, unit="chunk", leave=False):
        part = eps[start:start + chunk]
        c = len(part)
        sup = torch.index_select(feats, 0, part.support[:, :, :n_max].reshape(-1),
                                 out=sbuf[: c * ways * n_max]).view(c, ways, n_max, dim)  # [C, w, n, D]
        qry = torch.index_select(feats, 0, part.query.reshape(-1),
                                 out=qbuf[: c * ways * queries]).view(c, ways * queries, dim)  # [C, w*m, D]
        for n in shot_list:
            s = sup[:, :, :n]
            for name, fn in classifiers:
                scores = fn(s, qry)
                if scores.shape != (c, qry.shape[1], ways):
                    raise ValueError(f"classifier {name!r} returned {tuple(scores.shape)}, expected "
                                     f"{(c, qry.shape[1], ways)} = [E, Q, ways]")
                acc[(name, n)][start:start + c] = (scores.argmax(-1) == qlabels).sum(1) / qlabels.numel()
    return {(name, n): EvalResult.from_accuracies(a, classifier=name, ways=ways, shots=n, queries=queries,
                                                  extra={"seed": eps.seed})
            for (name, n), a in acc.items()}
