"""Notebook 07_dyce_memory_umap: the DyCE memory space (seed 001, Fig. 6, Fig. 9, Table 6's memory rows).

* Fig. 6: 2-D UMAP of ``partitions x per_partition`` memory embeddings at the first and the last snapshot, with
  the Davies-Bouldin index (scikit-learn) of the partitions in the embedding space (lower = tighter, better
  separated clusters).
* Table 6 (memory rows): DyCE against DyCE-FIFO (no partitions, global top-k) and DyCE-kMeans (nearest-prototype
  assignment instead of optimal transport), same pretraining otherwise.
* Fig. 9 / App. C.1 (pseudo-class cognizance): how often the support images of one test class land on the same
  memory prototype, against the rate expected if prototypes were assigned independently of the class.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import comb
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F

from studylib.config import param
from studylib.experiments.beclr_common import (BeclrParams, beclr_spec, evaluate_features, final_features,
                                               load_snapshot, pct, snapshot_epochs, train_images,
                                               train_with_snapshots)
from studylib.experiments.runner import Outcome, load_trained
from studylib.methods.dyce import VARIANTS, kmeans
from studylib.utils import get_device, mean_ci95

NOTEBOOK = "07_dyce_memory_umap"
LABELS = {"dyce": "DyCE", "fifo": "DyCE-FIFO", "kmeans": "DyCE-kMeans"}


@dataclass
class Params(BeclrParams):
    """Parameters of ``notebooks/07_dyce_memory_umap.ipynb`` (``params/07_dyce_memory_umap/*.yaml``)."""

    variants: list[str] = param(["dyce", "fifo", "kmeans"], choices=VARIANTS, help="memory configurations")
    umap_partitions: int = param(25, help="partitions shown in Fig. 6 (the largest ones)")
    umap_per_partition: int = param(40, help="memory embeddings per shown partition")
    umap_neighbors: int = param(15, help="UMAP n_neighbors")
    cognizance_shots: int = param(3, help="support images per class in the cognizance statistic (Fig. 9: 3)")

    def check(self) -> None:
        super().check()
        if "dyce" not in self.variants:
            raise ValueError("variants must include 'dyce' (the reference of Table 6)")


def run_variants(p: Params, progress: bool = False) -> dict[str, Outcome]:
    """Train (or load) one run per memory variant; the ``dyce`` run is notebook 06's."""
    n = train_images(p)
    return {v: train_with_snapshots(beclr_spec(p, n, "dyce" if v == "dyce" else f"dyce-{v}",
                                               **({} if v == "dyce" else {"variant": v})), progress=progress)
            for v in p.variants}


def partition_labels(snapshot: dict[str, Any], partitions: int, seed: int = 0) -> torch.Tensor:
    """The memory's partition of every stored row; a FIFO memory has none, so k-means with ``partitions``
    clusters (the library's seeded Lloyd) supplies them, for a like-for-like Davies-Bouldin index."""
    labels = snapshot["labels"]
    if bool((labels >= 0).all()):
        return labels
    _, km = kmeans(snapshot["embeddings"].float(), partitions, 30, torch.Generator().manual_seed(seed))
    return km


def memory_sample(embeddings: torch.Tensor, labels: torch.Tensor, partitions: int, per_partition: int,
                  seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Fig. 6's sample: the ``partitions`` largest partitions, ``per_partition`` random members of each (all
    members of a smaller one).

    Args:
        embeddings: ``[M, d]`` memory rows; labels: ``[M]`` partition of each row.

    Returns:
        ``x [n, d]`` and ``labels [n]`` (ordered by partition size, then by draw).
    """
    gen = torch.Generator().manual_seed(seed)
    ids, counts = labels.unique(return_counts=True)
    order = ids[torch.argsort(counts, descending=True, stable=True)][:partitions]
    pick = []
    for k in order.tolist():
        members = (labels == k).nonzero()[:, 0]
        pick.append(members[torch.randperm(len(members), generator=gen)[:per_partition]])
    idx = torch.cat(pick)
    return embeddings[idx], labels[idx]


def davies_bouldin(x: torch.Tensor, labels: torch.Tensor) -> float:
    """scikit-learn's Davies-Bouldin index of ``labels`` on ``x [n, d]`` (needs at least 2 clusters)."""
    from sklearn.metrics import davies_bouldin_score
    return float(davies_bouldin_score(x.double().numpy(), labels.numpy()))


def umap_2d(x: torch.Tensor, neighbors: int = 15, seed: int = 0) -> np.ndarray:
    """``[n, d] -> [n, 2]`` UMAP (umap-learn, cosine metric as the memory's similarities, fixed seed)."""
    import umap
    return umap.UMAP(n_neighbors=min(neighbors, len(x) - 1), metric="cosine", random_state=seed,
                     n_jobs=1).fit_transform(x.double().numpy())


def memory_views(p: Params, outcome: Outcome) -> list[dict[str, Any]]:
    """First and last snapshot: sampled embeddings, their partitions, the 2-D UMAP and the Davies-Bouldin index
    (of the sample, as in the figure, and of the whole memory)."""
    epochs = snapshot_epochs(outcome)
    out = []
    for e in (epochs[0], epochs[-1]):
        snap = load_snapshot(outcome, e)["memory"]
        labels = partition_labels(snap, p.partitions, p.seed)
        x, lab = memory_sample(snap["embeddings"], labels, p.umap_partitions, p.umap_per_partition, p.seed)
        out.append({"epoch": e, "x": x, "labels": lab, "xy": umap_2d(x, p.umap_neighbors, p.seed),
                    "dbi_sample": davies_bouldin(x, lab), "dbi_memory": davies_bouldin(snap["embeddings"], labels)})
    return out


def memory_figure(views: list[dict[str, Any]], title: str = "") -> plt.Figure:
    """Fig. 6: UMAP of the memory at the first (left) and the last (right) snapshot, DBI in the titles."""
    markers = "os^vD<>Pp*hX"
    fig, ax = plt.subplots(1, len(views), figsize=(4.6 * len(views), 4.2), squeeze=False)
    for a, v in zip(ax[0], views):
        parts = list(dict.fromkeys(v["labels"].tolist()))
        cmap = plt.get_cmap("tab20", max(len(parts), 2))
        for i, k in enumerate(parts):
            m = (v["labels"] == k).numpy()
            a.scatter(v["xy"][m, 0], v["xy"][m, 1], s=9, color=cmap(i), marker=markers[i % len(markers)], lw=0)
        a.set(title=f"after epoch {v['epoch']}: DBI {v['dbi_sample']:.2f}", xticks=[], yticks=[])
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def variant_table(p: Params, outcomes: dict[str, Outcome]) -> list[dict[str, Any]]:
    """Table 6 (memory rows): final accuracy without / with OpTA, and the last memory's Davies-Bouldin index."""
    rows = []
    for v, o in outcomes.items():
        feats, labels, _ = final_features(o, p.eval_split)
        res = evaluate_features(p, feats, labels)
        snap = load_snapshot(o, snapshot_epochs(o)[-1])["memory"]
        labs = partition_labels(snap, p.partitions, p.seed)
        row: dict[str, Any] = {"memory": LABELS[v]}
        for s in p.eval_shots:
            row[f"{s}-shot"] = pct(res[("logreg", s)].mean, res[("logreg", s)].ci95)
            row[f"{s}-shot + OpTA"] = pct(res[("opta", s)].mean, res[("opta", s)].ci95)
        row["DBI (last memory)"] = round(davies_bouldin(snap["embeddings"], labs), 2)
        row["_res"] = res
        rows.append(row)
    return rows


def same_group_probability(counts: list[int], n: int) -> float:
    """Probability that ``n`` items drawn without replacement from groups of sizes ``counts`` all come from one
    group: ``sum_k C(c_k, n) / C(sum c, n)`` (hypergeometric)."""
    total = sum(counts)
    if total < n:
        raise ValueError(f"cannot draw {n} items from {total}")
    return sum(comb(k, n) for k in counts) / comb(total, n)


def cognizance(p: Params, outcome: Outcome) -> dict[str, tuple[float, float]]:
    """App. C.1 / Fig. 9 as a number: the probability that ``n`` random support images of one test class are
    assigned (cosine-nearest, teacher projection, as DyCE does) to the same memory prototype.

    Exact per class (hypergeometric): ``sum_k C(n_ck, n) / C(n_c, n)`` from the counts ``n_ck`` of class ``c``
    on prototype ``k``; mean and CI95 over the test classes. The reference is the same quantity with the class
    ignored (``sum_k C(N_k, n) / C(N, n)`` over the whole split): what a class-blind assignment would give.
    """
    method, transform, dataset = load_trained(outcome)
    device = get_device(outcome.spec.train.device)
    method.to(device).eval()
    split = dataset[p.eval_split]
    with torch.no_grad():
        z = torch.cat([method.teacher_projector(method.teacher_backbone(transform(split.images[i:i + 256].to(device))))
                       for i in range(0, len(split), 256)])
        assign = method.memory_teacher.nearest_prototype(F.normalize(z, dim=1)).cpu()
    n = p.cognizance_shots
    per_class = [same_group_probability(torch.bincount(assign[split.labels == c]).tolist(), n)
                 for c in split.labels.unique().tolist()]
    all_counts = torch.bincount(assign).tolist()
    blind = same_group_probability(all_counts, n)
    return {"same_prototype": mean_ci95(per_class), "class_blind": (blind, 0.0),
            "prototypes_used": (float(len([k for k in all_counts if k])), 0.0)}


# Seed 001, Table 6 (miniImageNet 5-way 5-shot, %): the memory configurations.
PAPER_TABLE6 = {"fifo": (84.05, 0.39), "kmeans": (85.37, 0.33), "dyce": (87.82, 0.29)}

__all__ = ["NOTEBOOK", "Params", "run_variants", "partition_labels", "memory_sample", "davies_bouldin", "umap_2d",
           "memory_views", "memory_figure", "variant_table", "same_group_probability", "cognizance", "PAPER_TABLE6", "LABELS"]
