"""Readers for real few-shot data sets, read from a folder the user names.

Every reader returns a :class:`~studylib.data.base.FewShotDataset` with class-disjoint ``"train"``,
``"val"`` and ``"test"`` :class:`~studylib.data.base.ImageSplit` objects: uint8 ``[N, C, H, W]`` images
decoded once, int64 labels ``0..K-1`` local to each split, and ``class_names``.

Formats (one reader each, see :data:`READERS`):

* Omniglot (:func:`load_omniglot`): the authors' ``images_background*.zip`` / ``images_evaluation*.zip``, their
  unzipped folders, or any folder laid out as ``<alphabet>/<character>/*.png``; optional 90-degree rotation
  classes; several documented character splits.
* miniImageNet (:func:`load_mini_imagenet`): ``mini-imagenet-cache-{train,val,test}.pkl`` (dict with
  ``"image_data"`` uint8 ``[N, 84, 84, 3]`` and ``"class_dict"`` ``{wnid: [indices]}``), or Ravi &
  Larochelle's ``images/`` folder with ``{train,val,test}.csv`` (columns ``filename,label``).
* tieredImageNet (:func:`load_tiered_imagenet`): ``{split}_images_png.pkl`` (PNG-encoded byte arrays) and
  ``{split}_labels.pkl`` (``label_specific``, ``label_general`` and, when present, their ``*_str`` names);
  the superclass of a class is its ``label_general``.
* CIFAR-FS / FC100 (:func:`load_cifar_fs`, :func:`load_fc100`): ``CIFAR_FS_{split}.pickle`` /
  ``FC100_{split}.pickle`` with ``"data"`` uint8 ``[N, 32, 32, 3]`` and ``"labels"`` (CIFAR-100 fine-label
  ids); Python-2 pickles are read with ``encoding="latin1"``. Class names and superclasses (CIFAR-100's 20
  coarse classes, the basis of FC100's split) come from the CIFAR-100 label lists below.
* CUB-200-2011 (:func:`load_cub`): the ``CUB_200_2011`` layout, split 100/50/50 by class id order, or a
  generic folder layout.
* Any folder of images (:func:`load_image_folder`): ``root/{train,val,test}/<class>/<image>``, or
  ``root/<class>/<image>`` / ``root/<superclass>/<class>/<image>`` split by a seeded class- or superclass-disjoint
  rule.

Pickles are read by a restricted unpickler (:func:`load_pickle`) that resolves only NumPy arrays, dtypes and
scalars and plain containers, strings, bytes and numbers, so a crafted pickle in a data folder is refused
instead of running code.

Paths: a relative ``root`` is taken relative to the repository root (the folder holding ``params/`` and
``notebooks/``), whatever the working directory (:func:`~studylib.data.base.resolve_root`); every "not found"
message prints the absolute path it looked at.

One module per format (:mod:`.omniglot`, :mod:`.mini_imagenet`, :mod:`.tiered_imagenet`, :mod:`.cifar`, :mod:`.cub`,
:mod:`.folder`) over the shared :mod:`.images` (decoding, checking files), :mod:`.pickles` (the safe unpickler)
and :mod:`.common` (paths, the decode cache, the dataset step); everything stays importable from
``studylib.data.readers``.

Decoding uses PIL in a thread pool (PIL releases the GIL while decoding and resizing), with JPEG ``draft``
mode so large JPEGs are decoded at the smallest DCT scale that still covers ``size``. Every image is
converted to one fixed mode (RGB, 3 channels, for the natural-image sets; L, 1 channel, for Omniglot) and
resized straight to ``size x size`` (no crop) with PIL's bilinear filter, which is antialiased when
shrinking. Arrays that arrive already decoded (pickles) are resized with ``torch`` bilinear interpolation
with ``antialias=True``, the same filter. Decoded arrays are cached under
``studylib.utils.default_cache_dir() / "decoded"``, keyed by the reader, the resolved root, ``size``, the
reader's options and a fingerprint (names, sizes, mtimes) of the source files, and written atomically, so a
second load only reads one ``.pt`` file.
"""

from __future__ import annotations

from typing import Callable

from studylib.data.base import FewShotDataset
from studylib.data.readers.cifar import (_COARSE_OF, CIFAR100_COARSE, CIFAR100_FINE_NAMES, _load_cifar_like,
                                         load_cifar_fs, load_fc100)
from studylib.data.readers.common import (CACHE_VERSION, IMAGE_EXTENSIONS, SPLITS, _image_files, _rule_note,
                                          _scaled_class_counts, cache_path, cached, check_size, fingerprint,
                                          require_folder, split_payload, to_dataset)
from studylib.data.readers.cub import _CUB_HINT, CUB_FRACTIONS, _read_id_table, load_cub
from studylib.data.readers.folder import (_FOLDER_HINT, _alphabet_assignment, _FOLDER_LAYOUTS, _RUN_PARTS, _SPLIT_NAMES, FOLDER_FRACTIONS,
                                          FOLDER_SPLITS, _check_fractions, _flat_assignment, _load_flat_folder,
                                          _one_shot_runs, _one_shot_runs_error, _refuse_one_image_classes,
                                          _refuse_split_named, _scan_flat_classes, _scan_image_folder, _split_named,
                                          _subfolders, load_image_folder)
from studylib.data.readers.images import _default_workers, decode_images, hwc_to_tensor, resize_images, to_8bit
from studylib.data.readers.mini_imagenet import (_MINI_HINT, _mini_from_csv, _mini_from_pickles, _read_csv,
                                                 load_mini_imagenet)
from studylib.data.readers.omniglot import (_OMNI_FRACTIONS, _OMNI_HINT, _OMNI_KINDS, _OMNI_LAYOUT, OMNIGLOT_SPLITS,
                                            OMNIGLOT_VINYALS_COUNTS, _find_omniglot_sources,
                                            _list_omniglot_source, _omniglot_assignment, _omniglot_split, _OmniSource,
                                            _refuse_omniglot_lookalikes, load_omniglot)
from studylib.data.readers.pickles import (_PICKLE_GLOBALS, _DataUnpickler, _Refused, _RefusedGlobal,
                                           check_hwc_uint8, int_labels, load_pickle)
from studylib.data.readers.tiered_imagenet import _TIERED_HINT, load_tiered_imagenet

READERS: dict[str, Callable[..., FewShotDataset]] = {
    "omniglot": load_omniglot,
    "mini_imagenet": load_mini_imagenet,
    "tiered_imagenet": load_tiered_imagenet,
    "cifar_fs": load_cifar_fs,
    "fc100": load_fc100,
    "cub": load_cub,
    "folder": load_image_folder,
}

__all__ = ["READERS", "load_omniglot", "load_mini_imagenet", "load_tiered_imagenet", "load_cifar_fs",
           "load_fc100", "load_cub", "load_image_folder", "decode_images", "resize_images",
           "CIFAR100_FINE_NAMES", "CIFAR100_COARSE"]
