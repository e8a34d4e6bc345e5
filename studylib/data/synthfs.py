"""``synthfs``: an embedded data set in the CIFAR-FS regime (100 classes x 600 images, 32 px, RGB).

Why it exists. Seed 000's claims concern data with 600 images per class and 64 training classes
(miniImageNet, CIFAR-FS): a random batch of 128 then holds about two images of each class, so NCA sees
many positive pairs. The embedded glyph set has 20 images per class and 192 training classes, a different
regime (a random batch of 64 glyphs holds about 11 positive pairs). ``synthfs`` reproduces the regime's
counts with generated images, so smoke runs can test those claims without a download:

* 100 classes in 20 superclasses of 5 (CIFAR-100's structure), 600 images each, 32x32 RGB;
* ``split="random"``: 64 / 16 / 20 classes, a seeded shuffle (CIFAR-FS's counts);
  ``split="superclass"``: 12 / 4 / 4 whole superclasses = 60 / 20 / 20 classes (FC100's rule).

What an image is. A class is a small *object* drawn from 3-5 coloured parts (disc, square, ring, bar,
triangle, cross, diamond, crescent), each with a position, size, angle, colour and a striped texture.
The 5 classes of a superclass share a prototype object and differ by moved, resized, recoloured and
sometimes re-shaped parts, so within-superclass classes are fine-grained neighbours (like CIFAR-100's
"maple" and "oak"). An instance is the class object with per-part jitter (position, size, angle, colour),
a global similarity transform (rotation, zoom, shift, horizontal flip), drawn over a smooth random
colour background with two distractor parts behind it and, with probability 0.3, one occluding part in
front, plus pixel noise. Ranges are the ``_*`` constants below.

Difficulty was set once, before any experiment used the data, so that a Conv4 trained briefly lands in
CIFAR-FS's band for 5-way 1-shot (roughly 40-60 %, where seed 000's Conv4/ResNet numbers lie); no
experiment's verdict was looked at to set it.

Determinism. Each class draws every random number from its own CPU generator seeded by ``(seed, class)``
(so a class looks the same whatever else is generated), and all rendering runs in float64 on the CPU
before rounding to uint8, so the arrays do not depend on the machine or thread count. Generated once and
cached as ``.npz`` under ``default_cache_dir() / "synthfs"``, keyed by :data:`GENERATOR_VERSION` and the
options; a damaged cache file is regenerated.

Written here rather than with a library: no library draws such a set; rendering is closed-form per pixel
(signed-distance-like shape functions with a 1-pixel soft edge, alpha compositing), vectorised over chunks
of images (``_CHUNK`` at a time, so each layer's float64 temporaries stay in the CPU's cache; painting all 600
instances of a class in one pass was about 1.4x slower on one core of the study's CPU, measured on 10 classes).
"""

from __future__ import annotations

import functools
import io
import math
import time
import zipfile
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from studylib.data.base import FewShotDataset, ImageSplit
from studylib.utils import atomic_write_bytes, config_hash, default_cache_dir

GENERATOR_VERSION = "1"
NUM_SUPERCLASSES = 20
PER_SUPERCLASS = 5
NUM_CLASSES = NUM_SUPERCLASSES * PER_SUPERCLASS
INSTANCES = 600
SIZE = 32
SPLITS = ("random", "superclass")
RANDOM_COUNTS = (64, 16, 20)          # CIFAR-FS (Bertinetto et al. 2019)
SUPERCLASS_COUNTS = (12, 4, 4)        # FC100 (Oreshkin et al. 2018), in superclasses
SHAPES = ("disc", "square", "ring", "bar", "triangle", "cross", "diamond", "crescent")
MAX_PARTS = 5

# Class structure: deviations of a class from its superclass prototype.
_CLASS_SHIFT = 0.16        # part centre, std in image half-widths
_CLASS_LOGSIZE = 0.22      # part size, std of log factor
_CLASS_ANGLE = 0.6         # part angle, std in radians
_CLASS_HUE = 0.07          # part hue, std in turns
_CLASS_RESHAPE = 0.35      # probability that a part changes shape
# Instance variation.
_INST_SHIFT = 0.05
_INST_LOGSIZE = 0.08
_INST_ANGLE = 0.15
_INST_HUE = 0.025
_INST_SATVAL = 0.08
_ROTATION = math.radians(25.0)
_ZOOM = 0.18
_TRANSLATE = 0.14
_NOISE = 0.035
_OCCLUDE_P = 0.3
#: instances painted at a time (speed only: the images are the same for any value)
_CHUNK = 40


def _hsv_to_rgb(h: torch.Tensor, s: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``[...]`` hue (turns), saturation, value in [0, 1] -> ``[..., 3]`` RGB in [0, 1] (the standard formula)."""
    h6 = torch.remainder(h, 1.0) * 6.0
    k = torch.stack((torch.remainder(5.0 + h6, 6.0), torch.remainder(3.0 + h6, 6.0), torch.remainder(1.0 + h6, 6.0)), -1)
    return v[..., None] - v[..., None] * s[..., None] * torch.clamp(torch.minimum(k, 4.0 - k), 0.0, 1.0)


def _shape_radius(shape: torch.Tensor, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Normalised "radius" of each pixel in each part's frame: inside the shape where it is < 1.

    ``shape`` ``[M]`` ids into :data:`SHAPES`; ``u, v`` ``[M, G, G]`` part-frame coordinates.
    """
    rho = torch.sqrt(u * u + v * v)
    r = torch.empty_like(u)
    for i in range(len(SHAPES)):
        sel = shape == i
        if not bool(sel.any()):
            continue
        uu, vv, rr = u[sel], v[sel], rho[sel]
        if i == 0:
            out = rr
        elif i == 1:
            out = torch.maximum(uu.abs(), vv.abs())
        elif i == 2:
            out = (rr - 0.7).abs() / 0.3
        elif i == 3:
            out = torch.maximum(uu.abs(), vv.abs() / 0.35)
        elif i == 4:
            s3 = math.sqrt(3.0)
            out = torch.maximum(torch.maximum(-vv, (s3 * uu + vv) / 2), (-s3 * uu + vv) / 2) / 0.5
        elif i == 5:
            out = torch.minimum(torch.maximum(uu.abs(), vv.abs() / 0.3), torch.maximum(uu.abs() / 0.3, vv.abs()))
        elif i == 6:
            out = uu.abs() + vv.abs()
        else:
            out = torch.maximum(rr, 0.8 / (torch.sqrt((uu - 0.45) ** 2 + vv * vv) + 1e-6))
        r[sel] = out
    return r


@functools.lru_cache(maxsize=4)
def _cubic_matrix(s: int, g: int) -> torch.Tensor:
    """``[s, g]`` float64 bicubic interpolation weights (align_corners) from ``g`` control values to ``s``."""
    eye = torch.eye(g, dtype=torch.float64).view(g, 1, g, 1)
    return F.interpolate(eye, size=(s, 1), mode="bicubic", align_corners=True)[:, 0, :, 0].T.contiguous()


def _class_spec(seed: int, klass: int) -> dict[str, torch.Tensor]:
    """The parts of class ``klass``: its superclass prototype plus class-level deviations."""
    sup = klass // PER_SUPERCLASS
    gs = torch.Generator().manual_seed(10_000 * seed + sup)        # shared by the superclass's 5 classes
    n = 3 + int(torch.randint(0, 3, (1,), generator=gs))
    proto = {
        "shape": torch.randint(0, len(SHAPES), (n,), generator=gs),
        "centre": (torch.rand(n, 2, generator=gs, dtype=torch.float64) * 2 - 1) * 0.5,
        "logsize": torch.log(0.2 + 0.22 * torch.rand(n, 2, generator=gs, dtype=torch.float64)),
        "angle": torch.rand(n, generator=gs, dtype=torch.float64) * math.pi,
        "hue": torch.rand(n, generator=gs, dtype=torch.float64),
        "sat": 0.55 + 0.45 * torch.rand(n, generator=gs, dtype=torch.float64),
        "val": 0.55 + 0.45 * torch.rand(n, generator=gs, dtype=torch.float64),
    }
    gc = torch.Generator().manual_seed(10_000 * seed + 1_000 + klass)
    reshape = torch.rand(n, generator=gc, dtype=torch.float64) < _CLASS_RESHAPE
    new_shape = torch.randint(0, len(SHAPES), (n,), generator=gc)
    return {
        "shape": torch.where(reshape, new_shape, proto["shape"]),
        "centre": proto["centre"] + _CLASS_SHIFT * torch.randn(n, 2, generator=gc, dtype=torch.float64),
        "logsize": proto["logsize"] + _CLASS_LOGSIZE * torch.randn(n, 2, generator=gc, dtype=torch.float64),
        "angle": proto["angle"] + _CLASS_ANGLE * torch.randn(n, generator=gc, dtype=torch.float64),
        "hue": proto["hue"] + _CLASS_HUE * torch.randn(n, generator=gc, dtype=torch.float64),
        "sat": proto["sat"], "val": proto["val"],
        # striped texture of each part: amplitude, frequency (cycles per part width), direction
        "stripe": torch.stack((0.45 * torch.rand(n, generator=gc, dtype=torch.float64),
                               2.0 + 4.0 * torch.rand(n, generator=gc, dtype=torch.float64),
                               torch.rand(n, generator=gc, dtype=torch.float64) * math.pi), 1),
    }


def _render_class(seed: int, klass: int, instances: int, size: int) -> torch.Tensor:
    """``[instances, 3, size, size]`` float64 in [0, 1]: every instance of one class."""
    spec = _class_spec(seed, klass)
    g = torch.Generator().manual_seed(10_000 * seed + 5_000 + klass)
    n, p = instances, int(spec["shape"].numel())
    f64 = torch.float64
    # object parts with instance jitter: [n, p]
    centre = spec["centre"] + _INST_SHIFT * torch.randn(n, p, 2, generator=g, dtype=f64)
    size_xy = torch.exp(spec["logsize"] + _INST_LOGSIZE * torch.randn(n, p, 2, generator=g, dtype=f64))
    angle = spec["angle"] + _INST_ANGLE * torch.randn(n, p, generator=g, dtype=f64)
    hue = spec["hue"] + _INST_HUE * torch.randn(n, p, generator=g, dtype=f64)
    sat = (spec["sat"] + _INST_SATVAL * torch.randn(n, p, generator=g, dtype=f64)).clamp(0.2, 1.0)
    val = (spec["val"] + _INST_SATVAL * torch.randn(n, p, generator=g, dtype=f64)).clamp(0.3, 1.0)
    shape = spec["shape"].expand(n, p)
    stripe = spec["stripe"].expand(n, p, 3)
    # distractors: 2 behind the object, 1 in front with probability _OCCLUDE_P (alpha 0 otherwise)
    d = 3
    d_shape = torch.randint(0, len(SHAPES), (n, d), generator=g)
    d_centre = (torch.rand(n, d, 2, generator=g, dtype=f64) * 2 - 1) * 0.85
    d_size = torch.exp(torch.log(torch.tensor(0.12, dtype=f64)) + 0.3 * torch.randn(n, d, 2, generator=g, dtype=f64))
    d_angle = torch.rand(n, d, generator=g, dtype=f64) * math.pi
    d_hue = torch.rand(n, d, generator=g, dtype=f64)
    d_sat = 0.2 + 0.8 * torch.rand(n, d, generator=g, dtype=f64)
    d_val = 0.3 + 0.7 * torch.rand(n, d, generator=g, dtype=f64)
    d_on = torch.ones(n, d, dtype=f64)
    d_on[:, 2] = (torch.rand(n, generator=g, dtype=f64) < _OCCLUDE_P).to(f64)
    # global similarity transform and background
    rot = (torch.rand(n, generator=g, dtype=f64) * 2 - 1) * _ROTATION
    zoom = 1.0 + (torch.rand(n, generator=g, dtype=f64) * 2 - 1) * _ZOOM
    shift = (torch.rand(n, 2, generator=g, dtype=f64) * 2 - 1) * _TRANSLATE
    flip = torch.where(torch.rand(n, generator=g, dtype=f64) < 0.5, -1.0, 1.0).to(f64)
    bg_ctrl = torch.rand(n, 3, 4, 4, generator=g, dtype=f64)
    bg_level = 0.15 + 0.5 * torch.rand(n, 1, 1, 1, generator=g, dtype=f64)
    noise = torch.randn(n, 3, size, size, generator=g, dtype=f64) * _NOISE

    b = _cubic_matrix(size, 4)
    img = (bg_level + 0.35 * (b @ bg_ctrl @ b.T - 0.5)).clamp(0.0, 1.0)              # [n, 3, s, s]
    pos = (torch.arange(size, dtype=f64) * 2 + 1) / size - 1
    gx, gy = pos.view(1, size).expand(size, size), pos.view(size, 1).expand(size, size)
    # pixel -> object frame: undo shift, rotation, zoom, flip
    cr, sr = torch.cos(rot).view(n, 1, 1), torch.sin(rot).view(n, 1, 1)
    x0, y0 = gx - shift[:, 0].view(n, 1, 1), gy - shift[:, 1].view(n, 1, 1)
    ox = (cr * x0 + sr * y0) / zoom.view(n, 1, 1) * flip.view(n, 1, 1)
    oy = (-sr * x0 + cr * y0) / zoom.view(n, 1, 1)

    def layer(shp, cen, siz, ang, h, s, v, on, tex=None) -> dict[str, torch.Tensor]:
        """Per-instance, per-part quantities of one painted layer (``[n, m, ...]``, computed on all ``n``)."""
        out = {"shp": shp, "cen": cen, "siz": siz, "ca": torch.cos(ang)[..., None, None],
               "sa": torch.sin(ang)[..., None, None], "on": on[..., None, None],
               "sharp": (siz.min(-1).values * zoom.view(n, 1) * size / 2).clamp(2.0, 60.0)[..., None, None],
               "rgb": _hsv_to_rgb(h, s, v)[..., None, None]}                          # [n, m, 3, 1, 1]
        if tex is not None:
            out.update(amp=tex[..., 0, None, None], freq=math.pi * tex[..., 1, None, None],
                       cd=torch.cos(tex[..., 2])[..., None, None], sd=torch.sin(tex[..., 2])[..., None, None])
        return out

    def paint(img: torch.Tensor, sl: slice, ly: dict[str, torch.Tensor]) -> torch.Tensor:
        """Composite one layer over ``img`` (``[c, 3, s, s]``, the instances ``sl``)."""
        q = {k: t[sl] for k, t in ly.items()}
        c, m = q["shp"].shape
        cen, siz = q["cen"], q["siz"]
        dx, dy = ox[sl, None] - cen[..., 0, None, None], oy[sl, None] - cen[..., 1, None, None]
        u = (q["ca"] * dx + q["sa"] * dy) / siz[..., 0, None, None]
        w = (-q["sa"] * dx + q["ca"] * dy) / siz[..., 1, None, None]
        r = _shape_radius(q["shp"].reshape(-1), u.reshape(-1, size, size), w.reshape(-1, size, size)).view(c, m, size, size)
        alpha = torch.sigmoid((1.0 - r) * q["sharp"]) * q["on"]
        rgb = q["rgb"]
        if "amp" in q:
            t = q["cd"] * u + q["sd"] * w
            shade = 1.0 - q["amp"] * (0.5 + 0.5 * torch.sin(q["freq"] * t))
            rgb = rgb * shade[:, :, None]
        for j in range(m):
            a = alpha[:, j, None]
            img = img * (1.0 - a) + rgb[:, j] * a
        return img

    layers = (layer(d_shape[:, :2], d_centre[:, :2], d_size[:, :2], d_angle[:, :2], d_hue[:, :2], d_sat[:, :2],
                    d_val[:, :2], d_on[:, :2]),
              layer(shape, centre, size_xy, angle, hue, sat, val, torch.ones(n, p, dtype=f64), stripe),
              layer(d_shape[:, 2:], d_centre[:, 2:], d_size[:, 2:], d_angle[:, 2:], d_hue[:, 2:], d_sat[:, 2:],
                    d_val[:, 2:], d_on[:, 2:]))
    # Painted _CHUNK instances at a time, so each layer's per-pixel temporaries stay in the CPU's cache; every
    # per-pixel step is elementwise, so the chunking does not change a value (tests/data/test_synthfs.py).
    for i in range(0, n, _CHUNK):
        sl = slice(i, min(i + _CHUNK, n))
        part = img[sl]
        for ly in layers:
            part = paint(part, sl, ly)
        img[sl] = part
    return (img + noise).clamp_(0.0, 1.0)


def generate(seed: int = 0, instances: int = INSTANCES, size: int = SIZE,
             classes: int = NUM_CLASSES) -> np.ndarray:
    """``[classes * instances, 3, size, size]`` uint8, class-major (class ``k`` at ``k*I:(k+1)*I``)."""
    out = np.empty((classes * instances, 3, size, size), dtype=np.uint8)
    for k in range(classes):  # one class at a time: its own generator draws all its instances
        x = _render_class(seed, k, instances, size)
        out[k * instances:(k + 1) * instances] = x.mul_(255.0).round_().to(torch.uint8).numpy()
    return out


def _cache_key(seed: int, instances: int, size: int) -> dict:
    return {"generator": "synthfs", "version": GENERATOR_VERSION, "torch": torch.__version__.split("+")[0],
            "seed": seed, "instances": instances, "size": size, "classes": NUM_CLASSES}


def _load_or_generate(seed: int, instances: int, size: int, cache_dir: Path) -> tuple[np.ndarray, bool, Path, float]:
    key = config_hash(_cache_key(seed, instances, size))
    path = cache_dir / f"synthfs-{size}px-{instances}-seed{seed}-{key}.npz"
    if path.is_file():
        try:
            with np.load(path, allow_pickle=False) as z:
                if str(z["key"]) == key:
                    return z["images"], True, path, float(z["seconds"])
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
            pass  # damaged or foreign file: regenerate it
    t0 = time.perf_counter()
    images = generate(seed, instances, size)
    seconds = time.perf_counter() - t0
    buf = io.BytesIO()
    np.savez(buf, images=images, key=np.array(key), seconds=np.array(seconds))
    atomic_write_bytes(path, buf.getvalue())
    return images, False, path, seconds


def _assignment(split: str, seed: int) -> torch.Tensor:
    """``[NUM_CLASSES]`` split id (0 train, 1 val, 2 test) of each class."""
    g = torch.Generator().manual_seed(seed + 1)
    if split == "random":
        perm = torch.randperm(NUM_CLASSES, generator=g)
        ids = torch.repeat_interleave(torch.arange(3), torch.tensor(RANDOM_COUNTS))
        out = torch.empty(NUM_CLASSES, dtype=torch.long)
        out[perm] = ids
        return out
    perm = torch.randperm(NUM_SUPERCLASSES, generator=g)
    sup_ids = torch.empty(NUM_SUPERCLASSES, dtype=torch.long)
    sup_ids[perm] = torch.repeat_interleave(torch.arange(3), torch.tensor(SUPERCLASS_COUNTS))
    return sup_ids.repeat_interleave(PER_SUPERCLASS)


def load_synthfs(size: int = SIZE, split: str = "random", seed: int = 0, instances: int = INSTANCES,
                 cache_dir: str | Path | None = None) -> FewShotDataset:
    """The ``synthfs`` set as class-disjoint ``train``/``val``/``test`` splits (see the module docstring).

    Args:
        size: output side; images are drawn at 32 px and resized (bilinear, antialiased) when ``size`` differs.
        split: ``"random"`` (64/16/20 classes) or ``"superclass"`` (12/4/4 superclasses).
        seed: the drawing of every class and instance, and the split.
        instances: images per class (600, as in CIFAR-FS; fewer for quick tests).
        cache_dir: folder of the generated ``.npz`` (default ``default_cache_dir() / "synthfs"``).
    """
    if split not in SPLITS:
        raise ValueError(f"unknown synthfs split {split!r}; allowed: {', '.join(SPLITS)}")
    if instances < 2:
        raise ValueError(f"instances={instances}; a few-shot episode needs at least 2 images per class (default 600)")
    if size < 8:
        raise ValueError(f"size={size} is too small; use size >= 8 (default 32)")
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir() / "synthfs"
    images_np, hit, path, seconds = _load_or_generate(seed, instances, SIZE, cache)
    images = torch.from_numpy(np.ascontiguousarray(images_np))
    if size != SIZE:
        from studylib.data.readers import resize_images
        images = resize_images(images, size)
    labels_all = torch.arange(NUM_CLASSES).repeat_interleave(instances)
    assign = _assignment(split, seed)
    sup_all = torch.arange(NUM_CLASSES) // PER_SUPERCLASS
    names = [f"class{k:03d}" for k in range(NUM_CLASSES)]
    sup_names = [f"super{s:02d}" for s in range(NUM_SUPERCLASSES)]
    splits: dict[str, ImageSplit] = {}
    for s, split_name in enumerate(("train", "val", "test")):
        cls = torch.nonzero(assign == s).flatten()
        local = torch.full((NUM_CLASSES,), -1, dtype=torch.long)
        local[cls] = torch.arange(len(cls))
        keep = local[labels_all] >= 0
        splits[split_name] = ImageSplit(images=images[keep].clone(), labels=local[labels_all[keep]],
                                        class_names=[names[i] for i in cls.tolist()], superclass=sup_all[cls].clone(),
                                        superclass_names=sup_names, name=f"synthfs/{split_name}")
    info: dict[str, object] = {
        "split": split, "seed": seed, "instances": instances, "size": size, "drawn_at": SIZE,
        "counts": {k: v.num_classes for k, v in splits.items()},
        "generator_version": GENERATOR_VERSION, "cache_file": str(path), "cache_hit": hit,
        "generation_seconds": seconds,
    }
    return FewShotDataset(name="synthfs", splits=splits, info=info)


if __name__ == "__main__":
    t = time.perf_counter()
    ds = load_synthfs()
    print(f"load_synthfs: {time.perf_counter() - t:.1f} s", ds.info)
