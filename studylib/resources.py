"""What a configuration needs, estimated from its sizes against this machine, before anything runs.

Part of the pre-flight (:mod:`studylib.preflight`): ``./study check`` refuses a configuration whose decoded
images or whose training batch cannot fit in memory, and warns (with the numbers) when it would run for an hour
or more. The estimate reads the parameters every notebook shares by name (``image_size``, ``rgb``, ``data``,
``max_classes``, ``batch_size``, episode sizes, ``epochs``, ``batches_per_epoch``/``max_steps``, evaluation
episodes, ``seeds`` and the sweep lists), so one rule serves every notebook:

* **images in memory**: ``N x C x S x S`` bytes (uint8, as every reader and generator stores them), ``N`` from the
  folder's scan or the data set's known size (:data:`DATA_IMAGES`), twice that while decoding or generating;
* **one training batch**: the network's activations for ``B`` images (measured on a ``S0 x S0`` input and scaled
  by ``(S / S0)^2``) times 1.5 (kept for the backward pass, and the gradients in flight: a Conv4 and a
  ResNet-12 measured 1.4-1.5) plus weights, gradients and
  optimiser state; it must fit in the GPU's memory on a GPU, in what the images leave of the RAM otherwise;
* **time**: forward FLOPs per image (counted by :class:`torch.utils.flop_counter.FlopCounterMode` on the real
  network, scaled the same way) x 3 for training, x the image passes of training and evaluation, divided by the
  convolution speed measured here (a small 3x3 convolution, forward and backward, on the run's device and
  threads). Within a factor of a few: enough to tell minutes from days.

Memory is refused past :data:`MEMORY_SHARE` of what is available; time is never refused, only reported when it
passes :data:`WARN_HOURS`.
"""

from __future__ import annotations

import functools
import math
import os
import time
from dataclasses import dataclass, field
from typing import Any

# Images a data set holds (decoded), by name; generated sets from their options (see images()).
DATA_IMAGES = {"mini_imagenet": 60_000, "tiered_imagenet": 779_165, "cifar_fs": 60_000, "fc100": 60_000,
               "omniglot": 32_460, "cub": 11_788}
RGB_DATA = frozenset({"mini_imagenet", "tiered_imagenet", "cifar_fs", "fc100", "cub", "synthfs", "folder"})
GLYPH_CLASSES = 2_000  # an upper bound of the embedded glyph set's classes (max_classes: None = all)
GLYPH_INSTANCES = 20
SWEEPS = ("compare", "batch_sizes", "variants", "train_models", "rows", "fractions", "episodes", "settings")
MEMORY_SHARE = 0.9  # of the available memory a configuration may plan to use
WARN_HOURS = 1.0
GIB = 1024 ** 3


@dataclass
class Machine:
    """What the configuration is weighed against: memory (bytes) and convolution speed (FLOP/s)."""

    device: str
    ram: int  # available RAM
    device_memory: int | None  # the GPU's memory (None on the CPU)
    flops: float  # measured 3x3-convolution speed, forward and backward
    threads: int
    name: str

    def where(self) -> str:
        return (f"{self.name}" if self.device == "cuda" else
                f"this CPU, {self.threads} thread{'s' if self.threads > 1 else ''}")


@dataclass
class Need:
    """The estimate: problems (cannot fit), warnings (hours) and the numbers behind them."""

    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    data_bytes: float = 0.0
    batch_bytes: float = 0.0
    seconds: float = 0.0
    flops: float = 0.0


def available_ram() -> int:
    """``MemAvailable`` of ``/proc/meminfo`` (what can be allocated without swapping), else the physical RAM."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 8 * GIB


def _conv_speed(device: str) -> float:
    """FLOP/s of a 3x3 convolution (32 -> 32 channels, 32 x 32, batch 8), forward and backward, best of 3."""
    import torch
    x = torch.randn(8, 32, 32, 32, device=device, requires_grad=True)
    conv = torch.nn.Conv2d(32, 32, 3, padding=1).to(device)
    flops = 3 * 2 * 9 * 32 * 32 * 32 * 32 * 8  # forward multiply-adds x 2, backward twice the forward
    best = math.inf
    for _ in range(4):
        t0 = time.perf_counter()
        conv(x).sum().backward()
        if device == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return flops / max(best, 1e-6)


@functools.lru_cache(maxsize=4)
def machine(device: str = "auto") -> Machine:
    """This machine as the run would use it (``device``: ``auto``, ``cpu``, ``cuda``; threads from
    ``$STUDYLIB_THREADS``, default 1, as training uses them)."""
    import torch
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    device = "cuda" if device.startswith("cuda") and torch.cuda.is_available() else "cpu"
    threads = max(1, int(os.environ.get("STUDYLIB_THREADS", "1") or 1))
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        speed = _conv_speed(device)
    finally:
        torch.set_num_threads(old)
    mem = torch.cuda.get_device_properties(0).total_memory if device == "cuda" else None
    name = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
    return Machine(device, available_ram(), mem, speed, threads, name)


def network_cost(backbone: str, channels: int, size: int, options: dict[str, Any] | None = None,
                 probe: int = 32) -> tuple[float, float, int]:
    """``(forward FLOPs per image, activation bytes per image, parameters)`` of ``backbone`` at ``size`` px.

    Counted on the real network for one ``probe x probe`` image by forward hooks on its leaf modules and scaled
    by ``(size / probe)^2``: convolutions and their maps grow with the image's area. FLOPs: ``2 x`` the
    multiply-adds of every convolution (``out.numel() x in_channels / groups x kernel area``) and linear layer
    (``out.numel() x in_features``), bias excluded, as ``torch.utils.flop_counter.FlopCounterMode`` counts them
    (a test compares the two on every registered backbone); activations: the float32 outputs of every leaf
    module. Hooks, not ``FlopCounterMode``: entering that mode imports ``torch._dynamo``, seconds of a pre-flight
    that otherwise imports little beyond torch.
    """
    import torch
    from torch import nn

    from studylib.models import build_backbone
    try:
        net = build_backbone(backbone, in_channels=channels, **(options or {}))
    except TypeError:
        net = build_backbone(backbone, in_channels=channels)
    net.eval()
    acts, flops = [0], [0]

    def count(m: Any, _i: Any, out: Any) -> None:
        if not torch.is_tensor(out):
            return
        acts[0] += out.numel()
        if isinstance(m, nn.modules.conv._ConvNd):
            flops[0] += 2 * out.numel() * (m.in_channels // m.groups) * math.prod(m.kernel_size)
        elif isinstance(m, nn.Linear):
            flops[0] += 2 * out.numel() * m.in_features

    hooks = [m.register_forward_hook(count) for m in net.modules() if not list(m.children())]
    try:
        with torch.no_grad():
            net(torch.zeros(1, channels, probe, probe))
    finally:
        for h in hooks:
            h.remove()
    scale = (size / probe) ** 2
    return flops[0] * scale, acts[0] * 4 * scale, sum(p.numel() for p in net.parameters())


def _n(v: dict[str, Any], key: str, default: float = 0) -> float:
    x = v.get(key)
    if isinstance(x, (list, tuple)):
        nums = [y for y in x if isinstance(y, (int, float)) and not isinstance(y, bool)]
        return float(max(nums)) if nums else default
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else default


def images(v: dict[str, Any], folder_images: int | None) -> tuple[int, str]:
    """``(images the run holds decoded, how that was counted)``."""
    data = v.get("data")
    if folder_images is not None:
        return folder_images, "the folder's images"
    if data == "folder":
        n = int(_n(v, "example_classes", 30) * _n(v, "example_images", 12))
        return n, "the example folder's images"
    if data == "glyphs":
        classes = int(_n(v, "max_classes", GLYPH_CLASSES) or GLYPH_CLASSES)
        return classes * GLYPH_INSTANCES, f"{classes} glyph classes x {GLYPH_INSTANCES}"
    if data == "synthfs":
        per = int(_n(v, "synthfs_instances", 600) or 600)
        return 100 * per, f"100 synthfs classes x {per}"
    if str(v.get("data_root") or "").startswith("standin:"):  # the check scale's stand-in (studylib.data.standins)
        from studylib.data import standins
        a, b, c = standins.COUNTS
        n = a * standins.PER_CLASS + (b + c) * standins.EVAL_PER_CLASS
        return n, f"the {data} stand-in's {n:,} images"
    if data in DATA_IMAGES:
        n = DATA_IMAGES[data] * (4 if data == "omniglot" and v.get("rotations") else 1)
        return n, f"{data}'s {n:,} images"
    per = sum(_n(v, k) for k in ("train_per_class", "val_per_class", "test_per_class"))
    if per:
        classes = max(1, len(v.get("hue_levels") or [0]) * len(v.get("leg_fractions") or [0]))
        return int(per * classes), f"{classes} classes x {per:g} images"
    return 10_000, "about 10,000 images (a guess: the data set's size is not known before it loads)"


def _configurations(v: dict[str, Any]) -> int:
    n = 1
    for key in SWEEPS:
        x = v.get(key)
        if isinstance(x, (list, tuple)) and x:
            n *= len(x)
    return n


def _size(nbytes: float) -> str:
    return f"{nbytes / GIB:,.1f} GiB" if nbytes >= GIB / 10 else f"{nbytes / 2**20:,.0f} MiB"


def _duration(seconds: float) -> str:
    if seconds >= 86_400:
        return f"{seconds / 86_400:,.1f} days"
    if seconds >= 3_600:
        return f"{seconds / 3_600:,.1f} h"
    return f"{seconds / 60:,.0f} min"


def estimate(v: dict[str, Any], folder_images: int | None = None, host: Machine | None = None) -> Need:
    """What the configuration ``v`` (the values the run gets) needs against ``host`` (default: this machine)."""
    need = Need()
    size = int(_n(v, "image_size", 84))
    channels = 3 if v.get("rgb") or v.get("data") in RGB_DATA else 1
    n_images, counted = images(v, folder_images)
    need.data_bytes = float(n_images) * channels * size * size
    host = host or machine(str(v.get("device") or "auto"))
    backbone = str(v.get("backbone") or "conv4")
    hidden = v.get("conv4_hidden") or v.get("hidden")
    opts = {"hidden": int(hidden)} if backbone == "conv4" and isinstance(hidden, int) else {}
    flops, act, n_params = network_cost(backbone, channels, size, opts)
    shots = _n(v, "eval_shots", 1)
    eval_batch = _n(v, "eval_ways", 5) * (shots + _n(v, "eval_queries", 15))
    batch = max(_n(v, "batch_size"), _n(v, "batch_sizes"),
                _n(v, "episode_ways") * (_n(v, "episode_shots") + _n(v, "episode_queries")),
                _n(v, "train_ways") * (_n(v, "train_shots") + _n(v, "train_queries")), 2.0)
    need.batch_bytes = batch * act * 1.5 + n_params * 4 * 4
    ram_need = 2 * need.data_bytes + (need.batch_bytes if host.device == "cpu" else 0)
    shape = f"{n_images:,} images ({counted}) x {channels} x {size} x {size} bytes"
    if 2 * need.data_bytes > MEMORY_SHARE * host.ram:
        need.problems.append(f"the images alone need about {_size(2 * need.data_bytes)} while they are decoded or "
                             f"generated ({shape}, twice), but this machine has {_size(host.ram)} available; lower "
                             f"image_size (at {size} px each image is {channels * size * size:,} bytes) or use "
                             f"fewer images (max_classes)")
    elif host.device == "cpu" and ram_need > MEMORY_SHARE * host.ram:
        need.problems.append(f"one training batch of {batch:,.0f} images at {size} px needs about "
                             f"{_size(need.batch_bytes)} on top of {_size(2 * need.data_bytes)} of images, more than "
                             f"the {_size(host.ram)} available; lower batch_size or image_size")
    elif host.device_memory is not None and need.batch_bytes + need.data_bytes > MEMORY_SHARE * host.device_memory:
        need.problems.append(f"one training batch of {batch:,.0f} images at {size} px ({backbone}) needs about "
                             f"{_size(need.batch_bytes)} of GPU memory besides {_size(need.data_bytes)} of images on "
                             f"the device, more than {host.name}'s {_size(host.device_memory)}; lower batch_size or "
                             f"image_size")
    seeds = max(1, len(v.get("seeds") or [0]))
    configs = _configurations(v)
    epochs = _n(v, "epochs", 1)
    train_images = 0.64 * n_images
    per_epoch = (_n(v, "batches_per_epoch") * batch if _n(v, "batches_per_epoch") else
                 _n(v, "images_per_epoch") or train_images)
    passes = epochs * per_epoch
    if _n(v, "max_steps"):
        passes = min(passes, _n(v, "max_steps") * batch)
    # evaluation embeds a split once and draws its episodes from the embeddings (batched evaluation); an episode
    # count smaller than the split embeds less
    n_shots = len(v["eval_shots"]) if isinstance(v.get("eval_shots"), (list, tuple)) else 1
    test = min(0.2 * n_images, _n(v, "eval_episodes") * eval_batch * n_shots)
    val = min(0.16 * n_images, _n(v, "val_episodes") * eval_batch)
    eval_passes = test + epochs * val
    need.flops = seeds * configs * (3 * flops * passes + flops * eval_passes)
    need.seconds = need.flops / host.flops
    if need.seconds >= WARN_HOURS * 3600:
        need.warnings.append(
            f"this configuration runs for about {_duration(need.seconds)} on {host.where()} (estimated: {seeds} "
            f"seed(s) x {configs} configuration(s) x ({epochs:,.0f} epoch(s) x {per_epoch:,.0f} training images x 3 "
            f"+ {eval_passes:,.0f} evaluation images) x {flops / 1e9:,.3g} GFLOP per {size}-px image ({backbone}) "
            f"at the measured {host.flops / 1e9:,.3g} GFLOP/s; within a factor of a few). Fewer epochs, seeds or "
            f"evaluation episodes, or a GPU (--scale paper is meant for one), make it shorter")
    return need


__all__ = ["DATA_IMAGES", "Machine", "Need", "available_ram", "estimate", "images", "machine", "network_cost"]
