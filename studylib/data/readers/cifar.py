"""CIFAR-FS and FC100: CIFAR-100 images in pickles (as released with MetaOptNet), with CIFAR-100's label names."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from studylib.data.base import DataError, FewShotDataset
from studylib.data.readers.common import SPLITS, cache_path, cached, check_size, require_folder, split_payload, to_dataset
from studylib.data.readers.images import hwc_to_tensor
from studylib.data.readers.pickles import check_hwc_uint8, int_labels, load_pickle

# CIFAR-100 fine labels in the order of their ids (the data set's ``fine_label_names``).
CIFAR100_FINE_NAMES = (
    "apple", "aquarium_fish", "baby", "bear", "beaver", "bed", "bee", "beetle", "bicycle", "bottle",
    "bowl", "boy", "bridge", "bus", "butterfly", "camel", "can", "castle", "caterpillar", "cattle",
    "chair", "chimpanzee", "clock", "cloud", "cockroach", "couch", "crab", "crocodile", "cup", "dinosaur",
    "dolphin", "elephant", "flatfish", "forest", "fox", "girl", "hamster", "house", "kangaroo", "keyboard",
    "lamp", "lawn_mower", "leopard", "lion", "lizard", "lobster", "man", "maple_tree", "motorcycle", "mountain",
    "mouse", "mushroom", "oak_tree", "orange", "orchid", "otter", "palm_tree", "pear", "pickup_truck", "pine_tree",
    "plain", "plate", "poppy", "porcupine", "possum", "rabbit", "raccoon", "ray", "road", "rocket",
    "rose", "sea", "seal", "shark", "shrew", "skunk", "skyscraper", "snail", "snake", "spider",
    "squirrel", "streetcar", "sunflower", "sweet_pepper", "table", "tank", "telephone", "television", "tiger",
    "tractor", "train", "trout", "tulip", "turtle", "wardrobe", "whale", "willow_tree", "wolf", "woman", "worm",
)
# CIFAR-100's 20 coarse classes and their five fine classes each (FC100 splits whole coarse classes).
CIFAR100_COARSE: dict[str, tuple[str, ...]] = {
    "aquatic_mammals": ("beaver", "dolphin", "otter", "seal", "whale"),
    "fish": ("aquarium_fish", "flatfish", "ray", "shark", "trout"),
    "flowers": ("orchid", "poppy", "rose", "sunflower", "tulip"),
    "food_containers": ("bottle", "bowl", "can", "cup", "plate"),
    "fruit_and_vegetables": ("apple", "mushroom", "orange", "pear", "sweet_pepper"),
    "household_electrical_devices": ("clock", "keyboard", "lamp", "telephone", "television"),
    "household_furniture": ("bed", "chair", "couch", "table", "wardrobe"),
    "insects": ("bee", "beetle", "butterfly", "caterpillar", "cockroach"),
    "large_carnivores": ("bear", "leopard", "lion", "tiger", "wolf"),
    "large_man-made_outdoor_things": ("bridge", "castle", "house", "road", "skyscraper"),
    "large_natural_outdoor_scenes": ("cloud", "forest", "mountain", "plain", "sea"),
    "large_omnivores_and_herbivores": ("camel", "cattle", "chimpanzee", "elephant", "kangaroo"),
    "medium_mammals": ("fox", "porcupine", "possum", "raccoon", "skunk"),
    "non-insect_invertebrates": ("crab", "lobster", "snail", "spider", "worm"),
    "people": ("baby", "boy", "girl", "man", "woman"),
    "reptiles": ("crocodile", "dinosaur", "lizard", "snake", "turtle"),
    "small_mammals": ("hamster", "mouse", "rabbit", "shrew", "squirrel"),
    "trees": ("maple_tree", "oak_tree", "palm_tree", "pine_tree", "willow_tree"),
    "vehicles_1": ("bicycle", "bus", "motorcycle", "pickup_truck", "train"),
    "vehicles_2": ("lawn_mower", "rocket", "streetcar", "tank", "tractor"),
}


_COARSE_OF = {fine: coarse for coarse, fines in CIFAR100_COARSE.items() for fine in fines}


def _load_cifar_like(root: str | os.PathLike, size: int, cache: bool, prefix: str, dataset: str,
                     hint: str) -> FewShotDataset:
    size = check_size(size)
    root = require_folder(root, dataset, hint)
    pkls = [root / f"{prefix}_{s}.pickle" for s in SPLITS]
    for p in pkls:
        if not p.is_file():
            raise DataError(f"{dataset}: missing {p.name} under {root}; {hint}")
    path = cache_path(dataset, root, size, {}, pkls) if cache else None

    def build() -> dict[str, Any]:
        splits, global_ids = {}, {}
        for s, p in zip(SPLITS, pkls):
            obj = load_pickle(p, dataset, hint)
            if isinstance(obj, dict):  # Python-2 pickles may carry bytes keys
                obj = {(k.decode("latin1") if isinstance(k, bytes) else k): v for k, v in obj.items()}
            if not isinstance(obj, dict) or "data" not in obj or "labels" not in obj:
                raise DataError(f"{dataset}: {p} should hold a dict with 'data' and 'labels'; download it again")
            data = check_hwc_uint8(obj["data"], p, dataset, "'data'")
            labels = int_labels(obj["labels"], p, dataset, "'labels'")
            if data.ndim != 4 or data.shape[0] != labels.shape[0]:
                raise DataError(f"{dataset}: {p} holds {data.shape[0] if data.ndim else 0} images but {labels.shape[0]} labels "
                                f"(label/data length mismatch); download it again")
            images = hwc_to_tensor(data, size, f"{dataset}: {p}")
            cifar_ids = bool(labels.size) and 0 <= labels.min() and labels.max() < len(CIFAR100_FINE_NAMES)
            cname = (lambda k: CIFAR100_FINE_NAMES[k]) if cifar_ids else (lambda k: f"class{k:03d}")
            sname = (lambda k: _COARSE_OF[CIFAR100_FINE_NAMES[k]]) if cifar_ids else None
            splits[s] = split_payload(images, labels, cname, sname)
            global_ids[s] = np.unique(labels).tolist()
        return {"splits": splits, "info": {"root": str(root), "size": size, "global_label_ids": global_ids,
                                           "label_names": "CIFAR-100 fine labels; superclass = CIFAR-100 coarse"}}

    return to_dataset(dataset, cached(path, build), path)


def load_cifar_fs(root: str | os.PathLike, size: int = 32, cache: bool = True) -> FewShotDataset:
    """Read CIFAR-FS (Bertinetto et al.; 64/16/20 CIFAR-100 classes) from ``CIFAR_FS_{split}.pickle``.

    Each pickle holds ``"data"`` uint8 ``[N, 32, 32, 3]`` and ``"labels"`` (CIFAR-100 fine-label ids, relabelled
    ``0..K-1`` per split in id order). Class names are CIFAR-100's fine names, superclasses its coarse classes.
    ``size != 32`` resizes with antialiased bilinear interpolation (e.g. 84 for the seed-000 protocol).
    """
    return _load_cifar_like(root, size, cache, "CIFAR_FS", "cifar_fs",
                            "download CIFAR-FS as CIFAR_FS_train.pickle, CIFAR_FS_val.pickle and CIFAR_FS_test.pickle "
                            "and point data_root at the folder that holds them")


def load_fc100(root: str | os.PathLike, size: int = 32, cache: bool = True) -> FewShotDataset:
    """Read FC100 (Oreshkin et al.; CIFAR-100 split by its 12/4/4 coarse classes) from ``FC100_{split}.pickle``.

    Same pickle format as :func:`load_cifar_fs`; superclass = CIFAR-100 coarse class.
    """
    return _load_cifar_like(root, size, cache, "FC100", "fc100",
                            "download FC100 as FC100_train.pickle, FC100_val.pickle and FC100_test.pickle and point "
                            "data_root at the folder that holds them")
