"""What every notebook's parameters share: the data set and how to load it, and the shared choice lists."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from studylib.config import param
from studylib.data import DATASETS, load_dataset
from studylib.data.base import FewShotDataset
from studylib.experiments.runner import DataSpec

BACKBONES = ("conv4", "resnet12_basic", "resnet12", "resnet18", "resnet50")
CLASSIFIERS = ("nearest_centroid", "soft_assignment", "knn")
# Data sets with many classes for few-shot splits (the 4-class synthetic L-shapes of seed 002 are not one).
FEW_SHOT_DATASETS = tuple(d for d in DATASETS if d != "lshapes")


@dataclass
class DataParams:
    """The data fields of a notebook's parameters; notebook schemas extend it (and may change defaults)."""

    scale: str = param("smoke", choices=("smoke", "paper"), help="label of the parameter set, shown in titles")
    data: str = param("glyphs", choices=FEW_SHOT_DATASETS, help="data set; 'glyphs' is generated, others need data_root")
    data_root: str | None = param(None, help="folder of a real data set")
    image_size: int = param(28, help="side of the square images fed to the network")
    rgb: bool = param(False, help="glyphs only: RGB variant with random colours")
    split: str = param("random", help="class split: glyphs 'random'|'alphabet'; omniglot 'vinyals'|...; "
                                      "ignored by the other data sets, whose splits are fixed")
    max_classes: int | None = param(None, help="glyphs only: keep this many classes (None: all)")

    def check(self) -> None:
        """Cross-field rules; subclasses extend it (``super().check()`` first)."""
        if self.data != "glyphs" and not self.data_root:
            raise ValueError(f"data={self.data!r} is read from a folder: pass data_root (papermill -p data_root "
                             f"/path/to/{self.data}), or use data='glyphs'")


def data_spec(p: DataParams) -> DataSpec:
    """The data part of a run from a notebook's data parameters."""
    opts: dict[str, Any] = {"size": p.image_size}
    if p.data in ("glyphs", "omniglot"):
        opts["split"] = p.split
    if p.data == "glyphs":
        opts.update(rgb=p.rgb, max_classes=p.max_classes, seed=0)
    return DataSpec(p.data, p.data_root, opts)


def load_data(p: DataParams) -> FewShotDataset:
    """The data set the parameters name (generated or read once, then kept in memory)."""
    d = data_spec(p)
    return load_dataset(d.name, d.root, **d.options)
