"""Containers every reader and generator returns.

A split is decoded once into one uint8 tensor ``images`` of shape ``[N, C, H, W]`` and one int64 tensor
``labels`` of shape ``[N]`` holding contiguous class ids ``0..K-1`` local to the split. Nothing downstream
decodes an image file again: samplers hand out index tensors into these arrays, and augmentation runs
batched on whatever device the arrays were moved to.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import torch

from studylib.paths import project_root


class DataError(ValueError):
    """A data set is missing, corrupt, or cannot serve a request; the message names the fix."""


ROOT_RULE = ("a relative data_root is taken relative to the project root (the checkout holding params/ and "
             "notebooks/, found from the working directory), whatever the working directory inside it")


def resolve_root(root: str | os.PathLike) -> Path:
    """The absolute path of a data folder: ``~`` expanded, a relative path taken relative to the repository root.

    One rule for every way a notebook runs (``papermill --cwd notebooks``, JupyterLab started anywhere, the
    README's papermill line from the repository root, ``./study run``): ``data_root: data/mini-imagenet``
    always means ``<repo>/data/mini-imagenet``. See :data:`ROOT_RULE`.
    """
    path = Path(root).expanduser()
    if not path.is_absolute():
        path = project_root() / path
    return Path(os.path.abspath(path))


@dataclass
class ImageSplit:
    """One split of a few-shot data set.

    Attributes:
        images: ``[N, C, H, W]`` uint8, C is 1 (grayscale) or 3 (RGB).
        labels: ``[N]`` int64, class ids ``0..K-1`` local to this split.
        class_names: ``K`` human-readable names, ``class_names[k]`` names label ``k``.
        superclass: optional ``[K]`` int64, the superclass (alphabet, ImageNet super-category) of each class.
        superclass_names: names of the superclasses indexed by ``superclass``.
        name: ``"<dataset>/<split>"`` for messages.
    """

    images: torch.Tensor
    labels: torch.Tensor
    class_names: list[str]
    superclass: torch.Tensor | None = None
    superclass_names: list[str] | None = None
    name: str = "split"

    def __post_init__(self) -> None:
        if self.images.dtype != torch.uint8 or self.images.dim() != 4:
            raise DataError(f"{self.name}: images must be a uint8 [N, C, H, W] tensor, got "
                            f"{self.images.dtype} {tuple(self.images.shape)}")
        if self.labels.shape != (self.images.shape[0],):
            raise DataError(f"{self.name}: {self.images.shape[0]} images but labels of shape {tuple(self.labels.shape)}")
        self.labels = self.labels.long()
        if len(self.labels) and (int(self.labels.min()) < 0 or int(self.labels.max()) >= len(self.class_names)):
            raise DataError(f"{self.name}: labels must lie in 0..{len(self.class_names) - 1}")

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    def __len__(self) -> int:
        return int(self.images.shape[0])

    def class_counts(self) -> torch.Tensor:
        """``[K]`` int64: images per class."""
        return torch.bincount(self.labels, minlength=self.num_classes)

    def to(self, device: torch.device | str) -> "ImageSplit":
        """The same split with images and labels on ``device`` (for batched GPU augmentation)."""
        return ImageSplit(self.images.to(device), self.labels.to(device), self.class_names,
                          self.superclass, self.superclass_names, self.name)

    def subset(self, classes: torch.Tensor | list[int]) -> "ImageSplit":
        """The images of ``classes`` only, relabelled ``0..len(classes)-1`` in the given order."""
        classes = torch.as_tensor(classes, dtype=torch.long)
        remap = torch.full((self.num_classes,), -1, dtype=torch.long)
        remap[classes] = torch.arange(len(classes))
        keep = remap[self.labels.cpu()] >= 0
        keep_dev = keep.to(self.images.device)
        sup = self.superclass[classes] if self.superclass is not None else None
        return ImageSplit(self.images[keep_dev], remap[self.labels.cpu()[keep]].to(self.labels.device),
                          [self.class_names[int(c)] for c in classes], sup, self.superclass_names, self.name)

    def stats(self) -> dict[str, int | float]:
        counts = self.class_counts()
        out: dict[str, int | float] = {
            "classes": self.num_classes, "images": len(self),
            "min_per_class": int(counts.min()) if len(counts) else 0,
            "max_per_class": int(counts.max()) if len(counts) else 0,
            "channels": int(self.images.shape[1]), "size": int(self.images.shape[-1]),
        }
        if self.superclass is not None:
            out["superclasses"] = int(torch.unique(self.superclass).numel())
        return out


@dataclass
class FewShotDataset:
    """Class-disjoint ``train``/``val``/``test`` splits of one data set."""

    name: str
    splits: dict[str, ImageSplit] = field(default_factory=dict)
    info: dict[str, object] = field(default_factory=dict)

    def __getitem__(self, split: str) -> ImageSplit:
        if split not in self.splits:
            raise DataError(f"{self.name} has no split {split!r}; it has {sorted(self.splits)}")
        return self.splits[split]

    def stats(self) -> dict[str, dict[str, int | float]]:
        return {name: s.stats() for name, s in self.splits.items()}

    def content_hash(self) -> str:
        """SHA-256 (hex) of what a run sees: every split's name, images, labels, class and superclass names.

        The data set's ``name`` and ``info`` are left out, so the same arrays give the same hash wherever they
        came from (a folder, tensors built in a notebook); any changed pixel, label, class name or split
        assignment gives another. Images are hashed as ``uint8`` ``[N, C, H, W]`` bytes in storage order.
        """
        h = hashlib.sha256(b"studylib-fewshot-content-v1\0")
        for name in sorted(self.splits):
            sp = self.splits[name]
            images = sp.images.detach().cpu().contiguous()
            labels = sp.labels.detach().cpu().to(torch.int64).contiguous()
            meta = {"split": name, "shape": list(images.shape), "classes": list(map(str, sp.class_names)),
                    "superclass": None if sp.superclass is None else sp.superclass.cpu().tolist(),
                    "superclass_names": None if sp.superclass_names is None else list(map(str, sp.superclass_names))}
            h.update(json.dumps(meta, sort_keys=True).encode() + b"\0")
            h.update(images.numpy().data)  # the contiguous buffer itself, no copy
            h.update(labels.numpy().data)
        return h.hexdigest()
