"""Seed 004, InfoPatch (Liu et al., AAAI 2021): patch-level contrastive few-shot learning with PatchMix.

Everything works on a batch of ``E`` episodes at once (``N`` ways, ``K`` shots, ``Q`` queries per class,
``M = N Q`` queries per episode, ``G x G`` spatial map of ``D`` channels), on the device of its inputs.

Losses (PAPER-NOTES 004, the authors' ``full_model.py``):

* **Global loss** (:func:`global_loss`): a 1x1-conv classifier over the ``C`` base classes applied at every
  spatial position of every support and query map; cross-entropy with a label per position (the image's base
  class; for PatchMixed queries the base class of the image whose pixels fill that cell), averaged over all
  ``E (N K + M) G^2`` positions (the code concatenates support and query positions into one cross-entropy).
* **Local loss** (:func:`local_loss`, Eq. 3 as the code computes it): each query position ``f^q_{iwh}``
  (L2-normalised over channels) against the ``N`` class prototypes (support maps averaged over shots, then
  average-pooled over space, then L2-normalised); logits ``scale * cos`` with ``scale = 7``; cross-entropy
  with the episode label of the cell, averaged over all ``E M G^2`` query positions. The paper's Eq. 3 sums
  ``exp`` over the support images of a class; the code uses the prototype, which is the same for 1-shot.
  ``patches=False`` (ablation "+ episodic InfoNCE" without "+ patches") pools the query map first.
* Total: ``global + 0.5 * local`` (``local_weight``).

Hard samples:

* **PatchMix** (:func:`sample_patchmix`, :func:`apply_patchmix`): CutMix inside an episode's queries. A box
  is drawn as in CutMix (``lambda ~ Beta(1, 1)``, side ``floor(H sqrt(1 - lambda))``, uniform centre, clipped)
  and the box's pixels of query ``i`` are replaced by those of query ``perm[i]``. The pixel box ``[y1, y2) x
  [x1, x2)`` maps to the grid cells ``[round(y1 G / H), round(y2 G / H)) x [round(x1 G / W), round(x2 G / W))``
  (84 px, 11 cells: ``round(y * 11 / 84)``; rounding half to even, as NumPy and Python's ``round`` do); those
  cells take the labels (episode label and base class) of query ``perm[i]``, the others keep query ``i``'s.
  ``box="episode"`` (default, **the authors' code**): one lambda, one box and one permutation per episode,
  shared by all its queries (a query may be permuted onto itself: then nothing changes). ``box="query"``:
  every query draws its own lambda and box (the paper's text, "each x_i^q randomly selects a box"); the
  permutation is still one per episode. Only queries are mixed; support images never are.
* **Random block** (:func:`block_prototype_cell`, :func:`block_support_pixels`): ``block="code"`` (default,
  the authors' code): one random cell of the ``G x G`` class-prototype feature map is zeroed, the same cell for
  every class and episode of the batch, before the prototype is average-pooled (a weak perturbation: it only
  removes ``1/G^2`` of the pooled sum). ``block="paper"`` (the paper's Fig. 1): a random square of side
  ``round(block_frac * H)`` pixels is zeroed in every support image (independently per image) before the
  backbone; the paper gives no size, ``block_frac = 0.5`` is this library's choice. ``block="none"``: off.

Random draws use the global RNG of the input's device (which the training loop checkpoints). Losses are
computed in float32 (float64 stays float64) with autocast disabled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from studylib.data.samplers import Batch
from studylib.methods.base import Method
from studylib.methods.registry import register_method

BOXES = ("episode", "query")
BLOCKS = ("code", "paper", "none")


def _float(x: Tensor) -> Tensor:
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


# ----------------------------------------------------------------------------------------------------------
# PatchMix
# ----------------------------------------------------------------------------------------------------------

@dataclass
class PatchMix:
    """One draw of PatchMix for ``E`` episodes of ``M`` queries.

    Attributes:
        boxes: ``[E, M, 4]`` int64 pixel boxes ``(y1, y2, x1, x2)``, half-open (rows ``y1..y2-1``).
        perm: ``[E, M]`` int64, query ``i`` of episode ``e`` receives the box of query ``perm[e, i]``.
        lam: ``[E, M]`` the lambdas drawn (equal along ``M`` for ``box="episode"``).
    """

    boxes: Tensor
    perm: Tensor
    lam: Tensor


def cutmix_boxes(lam: Tensor, height: int, width: int) -> Tensor:
    """CutMix's ``rand_bbox`` for a tensor of lambdas: ``[...]`` -> ``[..., 4]`` boxes ``(y1, y2, x1, x2)``.

    Cut side ``floor(H sqrt(1 - lambda))``, centre uniform over the pixels, corners ``centre -/+ cut // 2``
    clipped to the image (as Yun et al.'s code, which InfoPatch's code reuses).
    """
    dev = lam.device
    rat = torch.sqrt((1.0 - lam.double()).clamp_min(0.0))
    cut_h = torch.floor(height * rat).long()
    cut_w = torch.floor(width * rat).long()
    cy = torch.randint(height, lam.shape, device=dev)
    cx = torch.randint(width, lam.shape, device=dev)
    y1 = (cy - cut_h // 2).clamp(0, height)
    y2 = (cy + cut_h // 2).clamp(0, height)
    x1 = (cx - cut_w // 2).clamp(0, width)
    x2 = (cx + cut_w // 2).clamp(0, width)
    return torch.stack([y1, y2, x1, x2], dim=-1)


def sample_patchmix(episodes: int, queries: int, height: int, width: int, box: str = "episode",
                    alpha: float = 1.0, device: torch.device | str = "cpu") -> PatchMix:
    """Draw PatchMix's lambdas, boxes and permutations for ``episodes`` x ``queries`` (module docstring)."""
    if box not in BOXES:
        raise ValueError(f"PatchMix box must be one of {BOXES}, got {box!r}")
    if not alpha > 0:
        raise ValueError(f"PatchMix alpha (Beta(alpha, alpha)) must be > 0, got {alpha}")
    dev = torch.device(device)
    shape = (episodes, 1) if box == "episode" else (episodes, queries)
    if alpha == 1.0:
        lam = torch.rand(shape, device=dev)  # Beta(1, 1)
    else:
        a = torch.full(shape, float(alpha), device=dev)
        lam = torch.distributions.Beta(a, a).sample()
    boxes = cutmix_boxes(lam, height, width).expand(episodes, queries, 4).contiguous()
    perm = torch.argsort(torch.rand(episodes, queries, device=dev), dim=1)
    return PatchMix(boxes, perm, lam.expand(episodes, queries))


def grid_boxes(boxes: Tensor, height: int, width: int, grid: int | tuple[int, int]) -> Tensor:
    """Pixel boxes ``[..., 4]`` -> grid-cell boxes ``[..., 4]``: each coordinate ``round(v * G / H)``.

    Computed exactly (``v * G / H`` in float64, rounded half to even like NumPy's / Python's ``round``).
    """
    gh, gw = (grid, grid) if isinstance(grid, int) else grid
    scale = torch.tensor([gh / height, gh / height, gw / width, gw / width], dtype=torch.float64,
                         device=boxes.device)
    return torch.round(boxes.double() * scale).long()


def _box_mask(boxes: Tensor, height: int, width: int) -> Tensor:
    """``[..., 4]`` half-open boxes -> ``[..., height, width]`` bool masks."""
    r = torch.arange(height, device=boxes.device)
    c = torch.arange(width, device=boxes.device)
    rows = (r >= boxes[..., 0:1]) & (r < boxes[..., 1:2])  # [..., H]
    cols = (c >= boxes[..., 2:3]) & (c < boxes[..., 3:4])  # [..., W]
    return rows[..., :, None] & cols[..., None, :]


def mix_images(x: Tensor, mix: PatchMix) -> Tensor:
    """Eq. 4: ``x[e, i][box of i] = x[e, perm[e, i]][box of i]`` for ``[E, M, C, H, W]`` query images."""
    e, m, _, h, w = x.shape
    if mix.boxes.shape != (e, m, 4) or mix.perm.shape != (e, m):
        raise ValueError(f"PatchMix boxes/perm must be [{e}, {m}, 4] / [{e}, {m}], got {tuple(mix.boxes.shape)} / "
                         f"{tuple(mix.perm.shape)}")
    donor = torch.gather(x, 1, mix.perm.view(e, m, 1, 1, 1).expand_as(x))
    return torch.where(_box_mask(mix.boxes, h, w)[:, :, None], donor, x)


def mix_labels(labels: Tensor, mix: PatchMix, size: tuple[int, int], grid: int | tuple[int, int]) -> Tensor:
    """Per-cell labels ``[E, M, Gh, Gw]`` of mixed queries from per-image labels ``[E, M]``: the cells of
    :func:`grid_boxes` take the label of query ``perm[e, i]``, the others keep query ``i``'s."""
    gh, gw = (grid, grid) if isinstance(grid, int) else grid
    if labels.shape != mix.perm.shape:
        raise ValueError(f"PatchMix labels must be {tuple(mix.perm.shape)}, got {tuple(labels.shape)}")
    cells = _box_mask(grid_boxes(mix.boxes, size[0], size[1], (gh, gw)), gh, gw)  # [E, M, Gh, Gw]
    other = torch.gather(labels, 1, mix.perm)
    return torch.where(cells, other[:, :, None, None], labels[:, :, None, None])


def apply_patchmix(x: Tensor, labels: list[Tensor], mix: PatchMix, grid: int | tuple[int, int]
                   ) -> tuple[Tensor, list[Tensor]]:
    """Mix queries (:func:`mix_images`) and label the grid cells (:func:`mix_labels`).

    Args:
        x: ``[E, M, C, H, W]`` query images.
        labels: per-image labels, each ``[E, M]`` (e.g. episode labels and base classes).
        mix: boxes and permutation from :func:`sample_patchmix` (or made by hand).
        grid: the feature map's side ``G`` (or ``(Gh, Gw)``).

    Returns:
        The mixed images ``[E, M, C, H, W]`` and, for each label tensor, ``[E, M, Gh, Gw]`` per-cell labels.
    """
    size = (int(x.shape[-2]), int(x.shape[-1]))
    return mix_images(x, mix), [mix_labels(lab, mix, size, grid) for lab in labels]


# ----------------------------------------------------------------------------------------------------------
# Random block
# ----------------------------------------------------------------------------------------------------------

def block_prototype_cell(protos: Tensor, cell: tuple[int, int] | Tensor | None = None) -> Tensor:
    """The code's random block: zero one cell ``(r, c)`` of every prototype map ``[..., D, Gh, Gw]``.

    ``cell=None`` draws one uniformly (one mask shared by everything in ``protos``).
    """
    gh, gw = protos.shape[-2:]
    if cell is None:
        flat = torch.randint(gh * gw, (), device=protos.device)  # stays on the device (no host sync)
    else:
        flat = torch.as_tensor(int(cell[0]) * gw + int(cell[1]), device=protos.device)
    mask = (torch.arange(gh * gw, device=protos.device) != flat).reshape(gh, gw)
    return protos * mask.to(protos.dtype)


def block_support_pixels(x: Tensor, block_frac: float = 0.5, boxes: Tensor | None = None) -> Tensor:
    """The paper's random block: zero a random square of side ``round(block_frac * H)`` in each image.

    ``x``: ``[..., C, H, W]``; ``boxes``: optional ``[..., 4]`` pixel boxes ``(y1, y2, x1, x2)`` (else drawn
    uniformly among the positions where the square fits, independently per image).
    """
    h, w = x.shape[-2:]
    lead = x.shape[:-3]
    if boxes is None:
        sh = max(1, min(h, int(round(block_frac * h))))
        sw = max(1, min(w, int(round(block_frac * w))))
        y1 = torch.randint(h - sh + 1, lead, device=x.device)
        x1 = torch.randint(w - sw + 1, lead, device=x.device)
        boxes = torch.stack([y1, y1 + sh, x1, x1 + sw], dim=-1)
    keep = ~_box_mask(boxes, h, w)[..., None, :, :]
    return x * keep.to(x.dtype)


# ----------------------------------------------------------------------------------------------------------
# Losses
# ----------------------------------------------------------------------------------------------------------

def global_loss(logits_support: Tensor, labels_support: Tensor, logits_query: Tensor, labels_query: Tensor
                ) -> Tensor:
    """Cross-entropy of the 1x1-conv classifier at every position, mean over all support and query positions.

    Args:
        logits_support: ``[Ns, C, G, G]`` class scores of the support maps; ``labels_support``: ``[Ns]`` base
            classes (every position of an image has its image's label) or ``[Ns, G, G]``.
        logits_query: ``[Nq, C, G, G]``; ``labels_query``: ``[Nq, G, G]`` per-cell base classes (PatchMix).
    """
    with torch.autocast(device_type=logits_support.device.type, enabled=False):
        ls, lq = _float(logits_support), _float(logits_query)
        g = ls.shape[-2:]
        ys = labels_support if labels_support.ndim == 3 else labels_support[:, None, None].expand(-1, *g)
        yq = labels_query if labels_query.ndim == 3 else labels_query[:, None, None].expand(-1, *lq.shape[-2:])
        nll = torch.cat([F.cross_entropy(ls, ys, reduction="none").flatten(),
                         F.cross_entropy(lq, yq, reduction="none").flatten()])
        return nll.mean()


def prototypes(support_maps: Tensor, block: str = "code", cell: tuple[int, int] | None = None) -> Tensor:
    """``[E, N, K, D, G, G]`` support maps -> ``[E, N, D]`` pooled, L2-normalised prototypes.

    Average over shots, then (``block="code"`` in training) zero one cell of the prototype map, then
    average-pool over space, then L2-normalise over channels.
    """
    with torch.autocast(device_type=support_maps.device.type, enabled=False):
        p = _float(support_maps).mean(dim=2)  # [E, N, D, G, G]
        if block == "code":
            p = block_prototype_cell(p, cell)
        return F.normalize(p.mean(dim=(-2, -1)), dim=-1, eps=1e-12)


def local_logits(query_maps: Tensor, protos: Tensor, scale: float = 7.0, patches: bool = True) -> Tensor:
    """``[E, M, D, G, G]`` query maps, ``[E, N, D]`` normalised prototypes -> ``[E, M, N, G, G]`` logits
    ``scale * cos(f^q_{iwh}, p_n)`` (``patches=False``: the pooled query, ``[E, M, N]``)."""
    with torch.autocast(device_type=query_maps.device.type, enabled=False):
        q = _float(query_maps)
        p = protos.to(q.dtype)
        if not patches:
            q = F.normalize(q.mean(dim=(-2, -1)), dim=-1, eps=1e-12)
            return scale * torch.einsum("emd,end->emn", q, p)
        q = F.normalize(q, dim=2, eps=1e-12)
        return scale * torch.einsum("emdhw,end->emnhw", q, p)


def local_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """Eq. 3 as cross-entropy over prototypes: ``[E, M, N, G, G]`` logits and ``[E, M, G, G]`` episode labels
    (or ``[E, M, N]`` / ``[E, M]`` for pooled queries), mean over all query positions."""
    with torch.autocast(device_type=logits.device.type, enabled=False):
        lg = _float(logits)
        e, m, n = lg.shape[:3]
        return F.cross_entropy(lg.reshape(e * m, n, *lg.shape[3:]), labels.reshape(e * m, *labels.shape[2:]))


# ----------------------------------------------------------------------------------------------------------
# Method
# ----------------------------------------------------------------------------------------------------------

def _map_channels(backbone: nn.Module) -> int:
    d = getattr(backbone, "map_channels", None)
    if not isinstance(d, int) or d < 1 or not hasattr(backbone, "feature_map"):
        raise ValueError(f"InfoPatch needs a spatial-map backbone (feature_map and an integer map_channels), e.g. "
                         f"'resnet12_infopatch'; {type(backbone).__name__} has map_channels={d!r}")
    return d


class InfoPatchMethod(Method):
    """InfoPatch training on episodic batches (module docstring); evaluation features are the pooled map.

    A batch is ``E >= 1`` episodes of the same shape concatenated, each class-major (for each of the ``N``
    classes, ``K`` support then ``Q`` query images), as :class:`studylib.data.samplers.EpisodicSampler` draws
    one. The global loss needs the base class of every image: ``train_labels`` (the training split's labels,
    ``[num images]``, indexed by ``batch.indices``; the runner passes them) and ``num_classes``.

    Args:
        backbone: a spatial-map backbone (``feature_map``, ``map_channels``), e.g. ``"resnet12_infopatch"``.
        augment: uint8 ``[B, C, H, W]`` -> normalised float (the training augmentation).
        num_classes: base classes of the global classifier.
        train_labels: ``[num images]`` base class of every training image.
        global_weight, local_weight: loss weights (1 and 0.5; ``local_weight=0``: the CE baseline).
        scale: the cosine scale of the local loss (7).
        patches: per-position local loss (Eq. 3); ``False``: pooled queries (Eq. 1, "+ episodic InfoNCE").
        patchmix: PatchMix on the queries in training; ``box``: ``"episode"`` (the code) or ``"query"``.
        patchmix_alpha: Beta parameter of lambda (1).
        block: random block ``"code"`` / ``"paper"`` / ``"none"``; ``block_frac``: the paper reading's side.
    """

    multi_episode = True

    def __init__(self, backbone: nn.Module, augment: Callable[[Tensor], Tensor], num_classes: int | None = None,
                 train_labels: Tensor | None = None, global_weight: float = 1.0, local_weight: float = 0.5,
                 scale: float = 7.0, patches: bool = True, patchmix: bool = True,
                 box: Literal["episode", "query"] = "episode", patchmix_alpha: float = 1.0,
                 block: Literal["code", "paper", "none"] = "code", block_frac: float = 0.5) -> None:
        super().__init__()
        if not isinstance(num_classes, int) or num_classes < 2:
            raise ValueError(f"method 'infopatch' needs num_classes = the number of base classes (>= 2), "
                             f"got {num_classes!r}")
        if box not in BOXES:
            raise ValueError(f"box must be one of {BOXES}, got {box!r}")
        if block not in BLOCKS:
            raise ValueError(f"block must be one of {BLOCKS}, got {block!r}")
        if global_weight < 0 or local_weight < 0 or global_weight + local_weight <= 0:
            raise ValueError(f"loss weights must be >= 0 and not both 0, got global_weight={global_weight}, "
                             f"local_weight={local_weight}")
        if not 0.0 < block_frac <= 1.0:
            raise ValueError(f"block_frac must lie in (0, 1], got {block_frac}")
        self.backbone = backbone
        self.augment = augment
        self.classifier = nn.Conv2d(_map_channels(backbone), num_classes, kernel_size=1)
        # None: a model rebuilt for inference only (studylib.api); training refuses it in loss()
        labels = torch.zeros(0, dtype=torch.long) if train_labels is None else torch.as_tensor(train_labels).long()
        self.register_buffer("train_labels", labels.clone(), persistent=False)
        self.num_classes = num_classes
        self.global_weight, self.local_weight, self.scale = float(global_weight), float(local_weight), float(scale)
        self.patches, self.patchmix, self.box, self.patchmix_alpha = patches, patchmix, box, float(patchmix_alpha)
        self.block, self.block_frac = block, float(block_frac)

    def loss(self, images: Tensor, batch: Batch) -> tuple[Tensor, dict[str, float]]:
        if batch.support is None or batch.ways is None or batch.shots is None or batch.queries is None:
            raise ValueError("method 'infopatch' needs episodic batches with support/query roles; use the "
                             "'episodic' sampler")
        n, k, q = batch.ways, batch.shots, batch.queries
        per = n * (k + q)
        if len(batch) % per:
            raise ValueError(f"a batch of {len(batch)} images is not a whole number of {n}-way {k}-shot {q}-query "
                             f"episodes ({per} images each)")
        e, m = len(batch) // per, n * q
        x = self.augment(images)
        c, h, w = x.shape[1:]
        x = x.reshape(e, n, k + q, c, h, w)
        if self.train_labels.numel() == 0:
            raise ValueError("method 'infopatch' needs train_labels (the base class of every training image) for "
                             "its global loss; the runner passes them (this model was built for inference only)")
        base = self.train_labels[batch.indices.to(self.train_labels.device)].view(e, n, k + q)
        xs, xq = x[:, :, :k].reshape(e, n * k, c, h, w), x[:, :, k:].reshape(e, m, c, h, w)
        ys_base = base[:, :, :k].reshape(e, n * k)
        yq_base = base[:, :, k:].reshape(e, m)
        yq = torch.arange(n, device=x.device).repeat_interleave(q).expand(e, m)
        mix = None
        if self.training and self.patchmix:
            mix = sample_patchmix(e, m, h, w, self.box, self.patchmix_alpha, x.device)
            xq = mix_images(xq, mix)
        if self.training and self.block == "paper":
            xs = block_support_pixels(xs, self.block_frac)
        f = self.backbone.feature_map(torch.cat([xs.reshape(-1, c, h, w), xq.reshape(-1, c, h, w)]))
        d, gh, gw = f.shape[1:]
        if mix is not None:
            yq_cells = mix_labels(yq, mix, (h, w), (gh, gw))
            yq_base_cells = mix_labels(yq_base, mix, (h, w), (gh, gw))
        else:
            yq_cells = yq[:, :, None, None].expand(e, m, gh, gw)
            yq_base_cells = yq_base[:, :, None, None].expand(e, m, gh, gw)
        logs: dict[str, float] = {}
        total = f.new_zeros((), dtype=torch.float32)
        if self.global_weight > 0:
            logits = self.classifier(f)
            lg = global_loss(logits[: e * n * k], ys_base.reshape(-1), logits[e * n * k:],
                             yq_base_cells.reshape(-1, gh, gw))
            total = total + self.global_weight * lg
            logs["global"] = float(lg.detach())
        if self.local_weight > 0:
            fs = f[: e * n * k].reshape(e, n, k, d, gh, gw)
            fq = f[e * n * k:].reshape(e, m, d, gh, gw)
            protos = prototypes(fs, self.block if self.training else "none")
            logits_l = local_logits(fq, protos, self.scale, self.patches)
            if self.patches:
                target = yq_cells
            else:  # pooled queries: the label of the image (PatchMix: of the majority of its cells)
                target = torch.mode(yq_cells.reshape(e, m, -1), dim=-1).values
            ll = local_loss(logits_l, target)
            total = total + self.local_weight * ll
            logs["local"] = float(ll.detach())
            logs["acc"] = float((logits_l.detach().argmax(2) == target).float().mean())
        return total, logs


@register_method("infopatch")
def build_infopatch(backbone: nn.Module, augment: Callable[[Tensor], Tensor], num_classes: int | None = None,
                    train_labels: Tensor | None = None, **params: Any) -> InfoPatchMethod:
    """InfoPatch (seed 004); ``num_classes`` and ``train_labels`` come from the runner's context."""
    return InfoPatchMethod(backbone, augment, num_classes=num_classes, train_labels=train_labels, **params)
