"""Batched image augmentation on the batch's own device.

Splits are held as one uint8 ``[N, C, H, W]`` tensor (see :mod:`studylib.data.base`), so a training batch
arrives as a uint8 ``[B, C, H, W]`` tensor, possibly already on the GPU. Everything here transforms the whole
batch at once with per-sample random parameters -- one tensor op per transform (``roi_align`` for
random-resized crops, ``grid_sample`` for affine ops, ``torch.where`` for flips and random application, a
grouped convolution for per-sample Gaussian blur) -- instead of running torchvision's per-image transforms
in a PIL/DataLoader pipeline. That is why this is written here rather than taken from torchvision: its
``v2`` transforms draw one parameter set per call, i.e. per image, and would need a Python loop over the
batch. The colour functions follow torchvision's definitions exactly (the tests compare with
``torchvision.transforms.v2.functional`` image by image).

Random numbers come from an explicit ``torch.Generator`` on the batch's device, so an augmentation stream
can be reproduced and resumed from the generator's state.

Conventions: the functional ops take float ``[B, C, H, W]`` images in ``[0, 1]`` and per-sample parameter
tensors of shape ``[B]``; :class:`Augment` takes uint8 and returns normalised float32.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Sequence

import torch
import torch.nn.functional as F
from torch import nn

_GRAY_WEIGHTS = (0.2989, 0.587, 0.114)  # ITU-R 601-2 luma, torchvision's rgb_to_grayscale


# --------------------------------------------------------------------------------------------- random helpers


def _check_generator(generator: torch.Generator | None, device: torch.device) -> None:
    if generator is not None and generator.device.type != device.type:
        raise ValueError(f"the generator lives on {generator.device} but the batch on {device}; "
                         f"create it with torch.Generator(device=batch.device)")


def _rand(n: int, generator: torch.Generator | None, device: torch.device, *shape: int) -> torch.Tensor:
    """``U[0, 1)`` float32 of shape ``[n, *shape]``."""
    return torch.rand((n, *shape), generator=generator, device=device)


def _uniform(lo: float, hi: float, n: int, generator: torch.Generator | None, device: torch.device,
             *shape: int) -> torch.Tensor:
    return lo + (hi - lo) * _rand(n, generator, device, *shape)


def _coin(p: float, n: int, generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
    """``[n]`` bool, True with probability ``p`` (a random number is drawn even for p in {0, 1})."""
    return _rand(n, generator, device) < p


def _bcast(v: torch.Tensor | float, x: torch.Tensor) -> torch.Tensor:
    """A per-sample ``[B]`` parameter as ``[B, 1, 1, 1]`` (or a scalar tensor) in ``x``'s dtype/device."""
    v = torch.as_tensor(v, dtype=x.dtype, device=x.device)
    return v.reshape(-1, 1, 1, 1) if v.dim() == 1 else v


def _select(mask: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per-sample ``where``: ``a[i]`` where ``mask[i]`` else ``b[i]``; mask ``[B]`` bool."""
    return torch.where(mask.reshape(-1, *([1] * (a.dim() - 1))), a, b)


# ------------------------------------------------------------------------------------------- colour functions


def rgb_to_grayscale(x: torch.Tensor) -> torch.Tensor:
    """``[B, 3, H, W] -> [B, 1, H, W]`` luma ``0.2989 R + 0.587 G + 0.114 B``; 1-channel input is returned."""
    if x.shape[1] == 1:
        return x
    r, g, b = x.unbind(1)
    return (_GRAY_WEIGHTS[0] * r + _GRAY_WEIGHTS[1] * g + _GRAY_WEIGHTS[2] * b).unsqueeze(1)


def _blend(a: torch.Tensor, b: torch.Tensor | float, factor: torch.Tensor | float) -> torch.Tensor:
    """``clamp(factor * a + (1 - factor) * b, 0, 1)``, torchvision's ``_blend`` for float images."""
    f = _bcast(factor, a)
    return (f * a + (1.0 - f) * b).clamp(0.0, 1.0)


def adjust_brightness(x: torch.Tensor, factor: torch.Tensor | float) -> torch.Tensor:
    """Blend with black: ``clamp(factor * x)``; ``factor`` ``[B]`` or scalar, 1 = identity."""
    return _blend(x, 0.0, factor)


def adjust_contrast(x: torch.Tensor, factor: torch.Tensor | float) -> torch.Tensor:
    """Blend with the image's mean grey level (one scalar per image, torchvision's definition)."""
    mean = rgb_to_grayscale(x).mean(dim=(1, 2, 3), keepdim=True)
    return _blend(x, mean, factor)


def adjust_saturation(x: torch.Tensor, factor: torch.Tensor | float) -> torch.Tensor:
    """Blend with the per-pixel grey image; identity on 1-channel images (as torchvision)."""
    if x.shape[1] == 1:
        return x
    return _blend(x, rgb_to_grayscale(x), factor)


def rgb_to_hsv(x: torch.Tensor) -> torch.Tensor:
    """``[B, 3, H, W]`` RGB in [0, 1] -> HSV with hue in [0, 1)."""
    r, g, b = x.unbind(1)
    maxc, _ = x.max(dim=1)
    minc, _ = x.min(dim=1)
    delta = maxc - minc
    flat = delta == 0
    s = torch.where(maxc > 0, delta / torch.where(maxc > 0, maxc, torch.ones_like(maxc)), torch.zeros_like(maxc))
    d = torch.where(flat, torch.ones_like(delta), delta)
    h = torch.where(maxc == r, (g - b) / d,
                    torch.where(maxc == g, 2.0 + (b - r) / d, 4.0 + (r - g) / d))
    h = torch.where(flat, torch.zeros_like(h), h)
    h = torch.remainder(h / 6.0, 1.0)
    return torch.stack([h, s, maxc], dim=1)


def hsv_to_rgb(x: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`rgb_to_hsv`: channel ``n`` in (R, G, B) = ``v - v s clamp(min(k, 4 - k), 0, 1)``
    with ``k = (n_c + 6 h) mod 6`` and ``n_c`` = 5, 3, 1 (the closed form of the sextant table)."""
    h, s, v = x.unbind(1)
    offs = torch.tensor([5.0, 3.0, 1.0], dtype=x.dtype, device=x.device).view(1, 3, 1, 1)
    k = torch.remainder(offs + 6.0 * h.unsqueeze(1), 6.0)
    w = torch.minimum(k, 4.0 - k).clamp(0.0, 1.0)
    return v.unsqueeze(1) * (1.0 - s.unsqueeze(1) * w)


def adjust_hue(x: torch.Tensor, shift: torch.Tensor | float) -> torch.Tensor:
    """Rotate the HSV hue by ``shift`` (in turns, ``[-0.5, 0.5]``); identity on 1-channel images.

    Same result as ``hsv_to_rgb`` of the shifted ``rgb_to_hsv`` (torchvision's definition) without forming
    S and V: with ``v s = max - min``, channel ``n`` is ``max - (max - min) w((n_c + 6 h) mod 6)``.
    """
    if x.shape[1] == 1:
        return x
    r, g, b = x.unbind(1)
    maxc = torch.maximum(torch.maximum(r, g), b)
    minc = torch.minimum(torch.minimum(r, g), b)
    delta = maxc - minc
    d = torch.where(delta > 0, delta, torch.ones_like(delta))
    h6 = torch.where(maxc == r, (g - b) / d, torch.where(maxc == g, 2.0 + (b - r) / d, 4.0 + (r - g) / d))
    s = torch.as_tensor(shift, dtype=x.dtype, device=x.device)
    s = s.reshape(-1, 1, 1) if s.dim() == 1 else s
    h6 = (h6 + 6.0 * s).unsqueeze(1)
    offs = torch.tensor([5.0, 3.0, 1.0], dtype=x.dtype, device=x.device).view(1, 3, 1, 1)
    k = torch.remainder(offs + h6, 6.0)
    w = torch.minimum(k, 4.0 - k).clamp(0.0, 1.0)
    return maxc.unsqueeze(1) - delta.unsqueeze(1) * w


def solarize(x: torch.Tensor, threshold: torch.Tensor | float) -> torch.Tensor:
    """Invert the pixels ``>= threshold`` (torchvision's definition)."""
    return torch.where(x >= _bcast(threshold, x), 1.0 - x, x)


def invert(x: torch.Tensor) -> torch.Tensor:
    return 1.0 - x


def posterize(x: torch.Tensor, bits: torch.Tensor | int) -> torch.Tensor:
    """Keep the ``bits`` most significant bits of the 8-bit value (PIL / torchvision uint8 definition)."""
    q = (x * 255.0).round().to(torch.int32)
    b = torch.as_tensor(bits, device=x.device).to(torch.int32)
    b = b.reshape(-1, 1, 1, 1) if b.dim() == 1 else b
    mask = -(torch.ones_like(b) << (8 - b))  # two's complement mask of the top `bits` bits
    return (q & mask).to(x.dtype) / 255.0


def autocontrast(x: torch.Tensor) -> torch.Tensor:
    """Stretch each channel of each image to span [0, 1]; constant channels are left unchanged."""
    lo = x.amin(dim=(2, 3), keepdim=True)
    hi = x.amax(dim=(2, 3), keepdim=True)
    flat = hi == lo
    scale = torch.where(flat, torch.ones_like(hi), 1.0 / torch.where(flat, torch.ones_like(hi), hi - lo))
    lo = torch.where(flat, torch.zeros_like(lo), lo)
    return ((x - lo) * scale).clamp(0.0, 1.0)


def equalize(x: torch.Tensor) -> torch.Tensor:
    """Histogram equalisation of each channel on its 256 grey levels (PIL / torchvision definition:
    ``step = (N - count of the top occupied level) // 255``, ``lut = (cumsum + step // 2) // step`` shifted by
    one level; a channel with ``step == 0`` is unchanged)."""
    b, c, h, w = x.shape
    q = (x * 255.0).round().to(torch.int64).reshape(b * c, h * w)
    hist = torch.zeros(b * c, 256, dtype=torch.int64, device=x.device)
    hist.scatter_add_(1, q, torch.ones_like(q))
    top = q.amax(dim=1, keepdim=True)
    step = (h * w - hist.gather(1, top)) // 255  # [BC, 1]
    safe = step.clamp_min(1)
    lut = (hist.cumsum(1) + safe // 2) // safe
    lut = torch.cat([torch.zeros_like(lut[:, :1]), lut[:, :-1]], dim=1).clamp(0, 255)
    out = torch.where(step == 0, q, lut.gather(1, q))
    return out.reshape(b, c, h, w).to(x.dtype) / 255.0


def adjust_sharpness(x: torch.Tensor, factor: torch.Tensor | float) -> torch.Tensor:
    """Blend with the image smoothed by ``[[1,1,1],[1,5,1],[1,1,1]] / 13`` on interior pixels (PIL's SMOOTH,
    torchvision's definition; border pixels of the smoothed image are the original ones)."""
    b, c, h, w = x.shape
    if h <= 2 or w <= 2:
        return x
    k = torch.ones(3, 3, dtype=x.dtype, device=x.device)
    k[1, 1] = 5.0
    k = (k / 13.0).expand(c, 1, 3, 3)
    blurred = F.conv2d(x, k, groups=c)
    degenerate = torch.cat([x[:, :, :1], torch.cat([x[:, :, 1:-1, :1], blurred, x[:, :, 1:-1, -1:]], dim=3),
                            x[:, :, -1:]], dim=2)
    return _blend(x, degenerate, factor)


# ------------------------------------------------------------------------------------------ spatial functions


def gaussian_kernel1d(sigma: torch.Tensor, kernel_size: int) -> torch.Tensor:
    """``[B]`` sigmas -> ``[B, kernel_size]`` normalised Gaussian taps at offsets ``-(K-1)/2 .. (K-1)/2``."""
    half = (kernel_size - 1) / 2.0
    t = torch.linspace(-half, half, kernel_size, dtype=sigma.dtype, device=sigma.device)
    return torch.softmax(-0.5 * (t[None, :] / sigma[:, None]) ** 2, dim=1)


def gaussian_blur(x: torch.Tensor, sigma: torch.Tensor, kernel_size: int) -> torch.Tensor:
    """Separable Gaussian blur with a per-sample ``sigma`` ``[B]``, reflect padding (torchvision's
    ``gaussian_blur``), as one grouped convolution over the ``B * C`` planes per direction."""
    if kernel_size % 2 != 1 or kernel_size < 1:
        raise ValueError(f"gaussian_blur: kernel_size must be a positive odd number, got {kernel_size}")
    b, c, h, w = x.shape
    half = kernel_size // 2
    if half >= min(h, w):
        raise ValueError(f"gaussian_blur: kernel {kernel_size} too large for {h}x{w} images; use a smaller kernel")
    k = gaussian_kernel1d(sigma.to(x.dtype), kernel_size).repeat_interleave(c, dim=0)  # [B*C, K]
    y = F.pad(x, (half, half, half, half), mode="reflect").reshape(1, b * c, h + 2 * half, w + 2 * half)
    y = F.conv2d(y, k.view(b * c, 1, kernel_size, 1), groups=b * c)
    y = F.conv2d(y, k.view(b * c, 1, 1, kernel_size), groups=b * c)
    return y.reshape(b, c, h, w)


def resized_crop(x: torch.Tensor, boxes: torch.Tensor, size: int | tuple[int, int]) -> torch.Tensor:
    """Crop ``boxes`` ``[B, 4]`` = (top, left, height, width) in pixels and resize each to ``size``.

    One ``torchvision.ops.roi_align`` call (``aligned=True``: pixel ``k`` covers ``[k, k+1)``). When the crop is
    upsampled it samples each output pixel once at its centre, which is exactly bilinear resizing with
    ``align_corners=False``; when it is downsampled it averages ``ceil(crop / size)^2`` bilinear samples per
    output pixel, an area-style anti-aliasing close to torchvision's ``antialias=True``. Unlike torchvision,
    which crops first, output pixels within half an input pixel of the crop's edge interpolate with the real
    neighbouring pixels outside the crop instead of repeating the edge (a difference of interpolation only).
    """
    from torchvision.ops import roi_align

    sh, sw = (size, size) if isinstance(size, int) else size
    bx = boxes.to(x.dtype)
    rois = torch.stack([torch.arange(x.shape[0], device=x.device, dtype=x.dtype),
                        bx[:, 1], bx[:, 0], bx[:, 1] + bx[:, 3], bx[:, 0] + bx[:, 2]], dim=1)
    return roi_align(x, rois, output_size=(sh, sw), spatial_scale=1.0, sampling_ratio=-1, aligned=True)


def random_resized_crop_boxes(n: int, height: int, width: int, scale: tuple[float, float],
                              ratio: tuple[float, float], generator: torch.Generator | None,
                              device: torch.device, attempts: int = 10) -> torch.Tensor:
    """``[n, 4]`` (top, left, height, width) boxes drawn as torchvision's ``RandomResizedCrop.get_params``:
    area fraction ``U(scale)``, log-uniform aspect ratio, up to ``attempts`` tries per sample (all drawn at
    once; the first that fits is kept), else the central crop clamped to ``ratio``."""
    area = float(height * width)
    target = area * _uniform(scale[0], scale[1], n, generator, device, attempts)
    logr = _uniform(math.log(ratio[0]), math.log(ratio[1]), n, generator, device, attempts)
    ar = torch.exp(logr)
    w = torch.round(torch.sqrt(target * ar))
    h = torch.round(torch.sqrt(target / ar))
    ok = (w > 0) & (w <= width) & (h > 0) & (h <= height)
    first = ok.to(torch.int8).argmax(dim=1, keepdim=True)
    found = ok.any(dim=1)
    w = w.gather(1, first).squeeze(1)
    h = h.gather(1, first).squeeze(1)
    u = _rand(n, generator, device, 2)
    top = torch.floor(u[:, 0] * (height - h + 1)).clamp_max(height - h)
    left = torch.floor(u[:, 1] * (width - w + 1)).clamp_max(width - w)
    # Fallback: central crop of the whole image, clamped to the allowed aspect ratios.
    in_ratio = width / height
    if in_ratio < min(ratio):
        fw, fh = width, int(round(width / min(ratio)))
    elif in_ratio > max(ratio):
        fw, fh = int(round(height * max(ratio))), height
    else:
        fw, fh = width, height
    fb = torch.tensor([(height - fh) // 2, (width - fw) // 2, fh, fw], dtype=torch.float32, device=device)
    boxes = torch.stack([top, left, h, w], dim=1)
    return torch.where(found[:, None], boxes, fb[None, :])


def pad_random_crop(x: torch.Tensor, offsets: torch.Tensor, padding: int, size: int) -> torch.Tensor:
    """Zero-pad by ``padding`` then crop ``size x size`` at ``offsets`` ``[B, 2]`` (top, left) in the padded
    image (torchvision ``RandomCrop(size, padding)``), by one gather."""
    b, c = x.shape[:2]
    xp = F.pad(x, (padding, padding, padding, padding)) if padding > 0 else x
    ar = torch.arange(size, device=x.device)
    rows = offsets[:, 0:1].long() + ar  # [B, S]
    cols = offsets[:, 1:2].long() + ar
    out = xp[torch.arange(b, device=x.device)[:, None, None], :, rows[:, :, None], cols[:, None, :]]
    return out.permute(0, 3, 1, 2)  # advanced indices first: [B, S, S, C] -> [B, C, S, S]


def resize_shorter(x: torch.Tensor, size: int) -> torch.Tensor:
    """Resize so the shorter side is ``size`` (torchvision ``Resize(int)``: long side ``int(size*long/short)``),
    bilinear with anti-aliasing."""
    h, w = x.shape[-2:]
    if h <= w:
        nh, nw = size, int(size * w / h)
    else:
        nh, nw = int(size * h / w), size
    if (nh, nw) == (h, w):
        return x
    return F.interpolate(x, size=(nh, nw), mode="bilinear", align_corners=False, antialias=True)


def center_crop(x: torch.Tensor, size: int) -> torch.Tensor:
    """Central ``size x size`` crop (torchvision's rounding: ``top = round((H - size) / 2)``)."""
    h, w = x.shape[-2:]
    if h < size or w < size:
        raise ValueError(f"center_crop: image {h}x{w} is smaller than the crop {size}; resize it first")
    top, left = int(round((h - size) / 2.0)), int(round((w - size) / 2.0))
    return x[..., top:top + size, left:left + size]


def affine(x: torch.Tensor, matrix: torch.Tensor, fill: float = 0.0) -> torch.Tensor:
    """Warp with per-sample inverse maps ``matrix`` ``[B, 2, 3]`` in *pixel* units about the image centre
    (output point ``p`` samples the input at ``A p + t``, both relative to the centre), bilinear, areas from
    outside the image filled with ``fill``. One ``affine_grid`` + ``grid_sample`` for the batch."""
    b, c, h, w = x.shape
    d = torch.tensor([w / 2.0, h / 2.0], dtype=x.dtype, device=x.device)
    theta = torch.empty(b, 2, 3, dtype=x.dtype, device=x.device)
    # Normalised coordinates (align_corners=False) are pixel coordinates divided by (W/2, H/2).
    theta[:, :, :2] = matrix[:, :, :2].to(x.dtype) * d[None, None, :] / d[None, :, None]
    theta[:, :, 2] = matrix[:, :, 2].to(x.dtype) / d[None, :]
    grid = F.affine_grid(theta, [b, c + 1, h, w], align_corners=False)
    xo = torch.cat([x, torch.ones_like(x[:, :1])], dim=1)
    y = F.grid_sample(xo, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    inside = y[:, -1:]
    return y[:, :-1] + (1.0 - inside) * fill


def normalize(x: torch.Tensor, mean: Sequence[float], std: Sequence[float]) -> torch.Tensor:
    m = torch.tensor(list(mean), dtype=x.dtype, device=x.device).view(1, -1, 1, 1)
    s = torch.tensor(list(std), dtype=x.dtype, device=x.device).view(1, -1, 1, 1)
    return (x - m) / s


def _to_channels(x: torch.Tensor, out_channels: int | None) -> torch.Tensor:
    c = x.shape[1]
    if out_channels is None or out_channels == c:
        return x
    if c == 1 and out_channels == 3:
        return x.expand(-1, 3, -1, -1)
    if c == 3 and out_channels == 1:
        return rgb_to_grayscale(x)
    raise ValueError(f"cannot turn {c}-channel images into {out_channels} channels (only 1 <-> 3)")


def _check_uint8(x: torch.Tensor, who: str) -> None:
    if x.dtype != torch.uint8 or x.dim() != 4:
        raise ValueError(f"{who} expects a uint8 [B, C, H, W] batch (the split's raw images), got {x.dtype} "
                         f"{tuple(x.shape)}; pass split.images[idx] before any conversion")


def eval_transform(x: torch.Tensor, size: int, mean: Sequence[float], std: Sequence[float],
                   resize: int | None = None, out_channels: int | None = None) -> torch.Tensor:
    """Deterministic evaluation transform: ``Resize(resize or size)`` (shorter side) + ``CenterCrop(size)`` +
    normalise (seed 000: Resize + CenterCrop(84)).

    Args:
        x: ``[B, C, H, W]`` uint8.
        out_channels: repeat grey to 3 (or convert RGB to grey) if the model wants it.

    Returns:
        ``[B, out_channels or C, size, size]`` float32.
    """
    _check_uint8(x, "eval_transform")
    r = size if resize is None else resize
    if r < size:
        raise ValueError(f"eval_transform: resize {r} is smaller than the crop {size}; use resize >= size")
    y = center_crop(resize_shorter(x.float() / 255.0, r), size)
    y = _to_channels(y, out_channels)
    return normalize(y, mean, std).contiguous()


# ----------------------------------------------------------------------------------------------- RandAugment

#: The 15 RandAugment ops (Cubuk et al. 2020) of timm's default ``rand`` table, which BECLR's
#: ``rand-m10-n2-mstd0.5`` selects; all are implemented batched. Level ``l = m / 10`` in [0, 1]:
#: Rotate +-30 l deg, ShearX/Y +-0.3 l, TranslateX/Y +-0.45 l of the side, Posterize keep ``int(4 l)`` bits,
#: Solarize threshold ``l`` (256 l in 8-bit), SolarizeAdd +110 l / 255 below 128 / 255, Color / Contrast /
#: Brightness / Sharpness factor ``0.1 + 1.8 l``, AutoContrast, Equalize, Invert (no magnitude).
#: As in that table, Posterize and Solarize get *milder* as m grows (at m = 10 Solarize touches almost
#: nothing and Posterize keeps 4 bits), and the enhance factors are unsigned (1.9 at m = 10).
#: Not reproduced: timm's PIL resampling filters for the geometric ops (bilinear here).
RANDAUGMENT_OPS: tuple[str, ...] = ("AutoContrast", "Equalize", "Invert", "Rotate", "Posterize", "Solarize",
                                    "SolarizeAdd", "Color", "Contrast", "Brightness", "Sharpness", "ShearX",
                                    "ShearY", "TranslateX", "TranslateY")
_GEOMETRIC = ("Rotate", "ShearX", "ShearY", "TranslateX", "TranslateY")


def randaugment(x: torch.Tensor, layers: int, magnitude: float, mstd: float, prob: float,
                generator: torch.Generator | None, fill: float = 128.0 / 255.0) -> torch.Tensor:
    """RandAugment (Cubuk et al. 2020) as timm runs it: ``layers`` rounds; in each, every sample picks one of
    :data:`RANDAUGMENT_OPS` uniformly, applies it with probability ``prob`` at level
    ``clip(N(magnitude, mstd), 0, 10) / 10`` with a random sign for the signed ops.

    Batched: per round, the geometric ops become one per-sample affine matrix and one ``grid_sample``; each
    colour op is computed for the batch and kept where selected (``torch.where``), so nothing synchronises
    with the host. Geometric fill is timm's grey 128. ``x``: float ``[B, C, H, W]`` in [0, 1].
    """
    b, c, h, w = x.shape
    dev = x.device
    names = RANDAUGMENT_OPS
    idx = {n: i for i, n in enumerate(names)}
    for _ in range(layers):
        op = torch.randint(0, len(names), (b,), generator=generator, device=dev)
        on = _coin(prob, b, generator, dev)
        noise = torch.randn(b, generator=generator, device=dev) if mstd > 0 else torch.zeros(b, device=dev)
        lvl = (magnitude + mstd * noise).clamp(0.0, 10.0) / 10.0
        sign = torch.where(_coin(0.5, b, generator, dev), -1.0, 1.0)
        sl = (sign * lvl).to(x.dtype)

        # Geometric ops: inverse pixel-space map A p + t per sample.
        ang = sl * (30.0 * math.pi / 180.0)
        cos, sin = torch.cos(ang), torch.sin(ang)
        zero, one = torch.zeros_like(sl), torch.ones_like(sl)
        cands = {
            "Rotate": (cos, -sin, zero, sin, cos, zero),
            "ShearX": (one, 0.3 * sl, zero, zero, one, zero),
            "ShearY": (one, zero, zero, 0.3 * sl, one, zero),
            "TranslateX": (one, zero, -0.45 * sl * w, zero, one, zero),
            "TranslateY": (one, zero, zero, zero, one, -0.45 * sl * h),
        }
        mat = torch.stack([one, zero, zero, zero, one, zero], dim=1)
        for name, entries in cands.items():
            mat = _select(op == idx[name], torch.stack(entries, dim=1), mat)
        geo = on & torch.isin(op, torch.tensor([idx[n] for n in _GEOMETRIC], device=dev))
        x = _select(geo, affine(x, mat.view(b, 2, 3), fill=fill), x)

        enhance = 0.1 + 1.8 * lvl.to(x.dtype)
        colour = {
            "AutoContrast": lambda t: autocontrast(t),
            "Equalize": lambda t: equalize(t),
            "Invert": lambda t: invert(t),
            "Posterize": lambda t: posterize(t, (4.0 * lvl).floor().to(torch.int32)),
            "Solarize": lambda t: solarize(t, lvl.to(t.dtype) * (256.0 / 255.0)),
            "SolarizeAdd": lambda t: torch.where(t < 128.0 / 255.0,
                                                 (t + _bcast(torch.floor(110.0 * lvl) / 255.0, t)).clamp_max(1.0),
                                                 t),
            "Color": lambda t: adjust_saturation(t, enhance),
            "Contrast": lambda t: adjust_contrast(t, enhance),
            "Brightness": lambda t: adjust_brightness(t, enhance),
            "Sharpness": lambda t: adjust_sharpness(t, enhance),
        }
        for name, fn in colour.items():
            x = _select(on & (op == idx[name]), fn(x), x)
    return x


# ------------------------------------------------------------------------------------------------- pipeline


@dataclass
class AugmentConfig:
    """Parameters of :class:`Augment` (probabilities are per sample).

    Attributes:
        size: output side length ``S``.
        scale: RandomResizedCrop area range, or ``None`` for no random-resized crop.
        ratio: RandomResizedCrop aspect-ratio range.
        pad_crop: RandomCrop(size, padding=pad_crop) after resizing to ``size`` (0 = off; ignored with scale).
        resize: shorter side before the central crop when neither crop is on (default ``size``).
        hflip, vflip: flip probabilities.
        color_jitter: (brightness, contrast, saturation, hue) ranges as torchvision's ColorJitter, or None.
        color_jitter_p: probability of applying the jitter (its four ops in random per-sample order).
        grayscale: RandomGrayscale probability.
        blur: Gaussian blur probability; ``blur_sigma`` range; ``blur_kernel`` odd size, default
            ``2 ceil(3 sigma_max) + 1`` capped to the image.
        solarize, solarize_threshold: RandomSolarize probability and threshold in [0, 1].
        ra_layers, ra_magnitude, ra_mstd, ra_prob: RandAugment rounds (0 = off), magnitude on the 0-10 scale,
            its per-sample std, per-op application probability (timm: 0.5).
        mean, std: normalisation, one value or ``out_channels`` values.
        out_channels: output channels (grey repeated to 3, or RGB to grey), default: the input's.
    """

    size: int
    scale: tuple[float, float] | None = None
    ratio: tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0)
    pad_crop: int = 0
    resize: int | None = None
    hflip: float = 0.0
    vflip: float = 0.0
    color_jitter: tuple[float, float, float, float] | None = None
    color_jitter_p: float = 0.8
    grayscale: float = 0.0
    blur: float = 0.0
    blur_sigma: tuple[float, float] = (0.1, 2.0)
    blur_kernel: int | None = None
    solarize: float = 0.0
    solarize_threshold: float = 0.5
    ra_layers: int = 0
    ra_magnitude: float = 10.0
    ra_mstd: float = 0.5
    ra_prob: float = 0.5
    mean: tuple[float, ...] = (0.5,)
    std: tuple[float, ...] = (0.5,)
    out_channels: int | None = None

    def validate(self) -> None:
        if self.size < 1:
            raise ValueError(f"augment: size must be >= 1, got {self.size}")
        for name in ("hflip", "vflip", "color_jitter_p", "grayscale", "blur", "solarize", "ra_prob"):
            p = getattr(self, name)
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"augment: {name} is a probability in [0, 1], got {p}")
        if self.scale is not None and not 0.0 < self.scale[0] <= self.scale[1] <= 1.0:
            raise ValueError(f"augment: scale must satisfy 0 < lo <= hi <= 1, got {self.scale}")
        if not 0.0 < self.ratio[0] <= self.ratio[1]:
            raise ValueError(f"augment: ratio must satisfy 0 < lo <= hi, got {self.ratio}")
        if self.pad_crop < 0:
            raise ValueError(f"augment: pad_crop must be >= 0, got {self.pad_crop}")
        if self.color_jitter is not None:
            if len(self.color_jitter) != 4 or min(self.color_jitter) < 0 or self.color_jitter[3] > 0.5:
                raise ValueError("augment: color_jitter is (brightness, contrast, saturation, hue) >= 0 "
                                 f"with hue <= 0.5, got {self.color_jitter}")
        if not 0.0 < self.blur_sigma[0] <= self.blur_sigma[1]:
            raise ValueError(f"augment: blur_sigma must satisfy 0 < lo <= hi, got {self.blur_sigma}")
        if self.blur_kernel is not None and (self.blur_kernel < 1 or self.blur_kernel % 2 == 0):
            raise ValueError(f"augment: blur_kernel must be a positive odd number, got {self.blur_kernel}")
        if len(self.mean) != len(self.std) or min(self.std) <= 0:
            raise ValueError(f"augment: mean and std need the same length and std > 0, got {self.mean}, {self.std}")
        if self.out_channels not in (None, 1, 3):
            raise ValueError(f"augment: out_channels must be None, 1 or 3, got {self.out_channels}")
        if self.out_channels is not None and len(self.mean) not in (1, self.out_channels):
            raise ValueError(f"augment: mean/std need 1 or {self.out_channels} values, got {len(self.mean)}")
        if self.ra_layers < 0 or not 0.0 <= self.ra_magnitude <= 10.0 or self.ra_mstd < 0:
            raise ValueError("augment: ra_layers >= 0, ra_magnitude in [0, 10] and ra_mstd >= 0 are required")


class Augment(nn.Module):
    """Batched training augmentation: uint8 ``[B, C, H, W]`` -> normalised float32 ``[B, C', S, S]``.

    Order (as the torchvision pipelines of the seeds): geometric crop (random-resized crop, or resize +
    padded random crop, or resize + central crop) -> colour jitter (random order per sample) -> random
    grayscale -> Gaussian blur -> RandAugment -> solarize -> flips -> channel conversion -> normalise.
    One tensor op per transform for the whole batch; randomness from ``generator`` (on the batch's device;
    ``None`` uses torch's default generator of that device).

    Build from an :class:`AugmentConfig`, a dict of its fields, or keyword arguments.
    """

    def __init__(self, config: AugmentConfig | dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__()
        if config is None:
            config = AugmentConfig(**kwargs)
        elif isinstance(config, dict):
            config = AugmentConfig(**{**config, **kwargs})
        elif kwargs:
            config = replace(config, **kwargs)
        config.mean, config.std = tuple(config.mean), tuple(config.std)
        config.validate()
        self.config = config

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in asdict(self.config).items())

    def _geometry(self, x: torch.Tensor, g: torch.Generator | None) -> torch.Tensor:
        cfg, b, dev = self.config, x.shape[0], x.device
        s = cfg.size
        if cfg.scale is not None:
            boxes = random_resized_crop_boxes(b, x.shape[2], x.shape[3], cfg.scale, cfg.ratio, g, dev)
            return resized_crop(x, boxes, s)
        if cfg.pad_crop > 0:
            if x.shape[-2:] != (s, s):
                x = center_crop(resize_shorter(x, s), s)
            offs = torch.floor(_rand(b, g, dev, 2) * (2 * cfg.pad_crop + 1)).clamp_max(2 * cfg.pad_crop)
            return pad_random_crop(x, offs, cfg.pad_crop, s)
        r = s if cfg.resize is None else cfg.resize
        if r < s:
            raise ValueError(f"augment: resize {r} is smaller than size {s}; use resize >= size")
        return center_crop(resize_shorter(x, r), s)

    def _jitter(self, x: torch.Tensor, g: torch.Generator | None) -> torch.Tensor:
        cfg, b, dev = self.config, x.shape[0], x.device
        bri, con, sat, hue = cfg.color_jitter  # type: ignore[misc]
        on = _coin(cfg.color_jitter_p, b, g, dev)
        fb = _uniform(max(0.0, 1 - bri), 1 + bri, b, g, dev)
        fc = _uniform(max(0.0, 1 - con), 1 + con, b, g, dev)
        fs = _uniform(max(0.0, 1 - sat), 1 + sat, b, g, dev)
        fh = _uniform(-hue, hue, b, g, dev)
        if x.shape[1] == 1:
            fs = torch.ones_like(fs)  # saturation is the identity on grey images (as torchvision)
        order = torch.argsort(_rand(b, g, dev, 4), dim=1)  # per-sample random order of the four ops
        # Brightness, contrast and saturation are all blends ``factor * x + (1 - factor) * target`` with
        # target black / mean grey / grey image, so each slot runs one blend with a per-sample target and
        # factor; hue (the expensive one) runs once per slot for the samples that put it there.
        factors = torch.stack([fb, fc, fs], dim=1)
        do_hue = hue > 0 and x.shape[1] == 3
        for slot in range(4):
            k = order[:, slot]
            gray = rgb_to_grayscale(x)
            mean = gray.mean(dim=(1, 2, 3), keepdim=True)
            kk = k.view(-1, 1, 1, 1)
            target = torch.where(kk == 0, torch.zeros_like(mean), torch.where(kk == 1, mean, gray))
            f = factors.gather(1, k.clamp_max(2)[:, None]).squeeze(1)
            x = _select(on & (k < 3), _blend(x, target, f), x)
            if do_hue:
                x = _select(on & (k == 3), adjust_hue(x, fh), x)
        return x

    def forward(self, x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """``[B, C, H, W]`` uint8 -> ``[B, out_channels or C, size, size]`` float32, normalised."""
        _check_uint8(x, "Augment")
        _check_generator(generator, x.device)
        cfg, g, b, dev = self.config, generator, x.shape[0], x.device
        y = self._geometry(x.float() / 255.0, g)
        if cfg.color_jitter is not None and cfg.color_jitter_p > 0:
            y = self._jitter(y, g)
        if cfg.grayscale > 0 and y.shape[1] == 3:
            y = _select(_coin(cfg.grayscale, b, g, dev), rgb_to_grayscale(y).expand(-1, 3, -1, -1), y)
        if cfg.blur > 0:
            on = _coin(cfg.blur, b, g, dev)
            sigma = _uniform(cfg.blur_sigma[0], cfg.blur_sigma[1], b, g, dev)
            k = cfg.blur_kernel or 2 * math.ceil(3 * cfg.blur_sigma[1]) + 1
            k = min(k, 2 * (min(y.shape[-2:]) - 1) - 1) | 1
            y = _select(on, gaussian_blur(y, sigma, k), y)
        if cfg.ra_layers > 0:
            y = randaugment(y, cfg.ra_layers, cfg.ra_magnitude, cfg.ra_mstd, cfg.ra_prob, g)
        if cfg.solarize > 0:
            y = _select(_coin(cfg.solarize, b, g, dev), solarize(y, cfg.solarize_threshold), y)
        if cfg.hflip > 0:
            y = _select(_coin(cfg.hflip, b, g, dev), y.flip(-1), y)
        if cfg.vflip > 0:
            y = _select(_coin(cfg.vflip, b, g, dev), y.flip(-2), y)
        y = _to_channels(y, cfg.out_channels)
        if len(cfg.mean) not in (1, y.shape[1]):
            raise ValueError(f"augment: {len(cfg.mean)} mean/std values for {y.shape[1]}-channel output")
        return normalize(y, cfg.mean, cfg.std).contiguous()


# ------------------------------------------------------------------------------------------------- profiles

#: Named augmentation profiles (size, mean and std are given to :func:`build_augment`).
#:
#: * ``none``: resize (shorter side) + central crop + normalise.
#: * ``standard``: seed 000 -- RandomResizedCrop(scale 0.08-1) + horizontal flip.
#: * ``pad_crop``: InfoPatch (seed 004) -- RandomCrop(pad 8) + horizontal flip.
#: * ``beclr_default`` / ``beclr_strong``: BECLR Table 7 (seed 001, App. A.3). ColorJitter is applied with
#:   p = 0.8 as in the authors' code (the paper's table says 0.1; PAPER-NOTES 001); saturation 0.4 in the
#:   default and 0.2 in the strong profile, as in Table 7. Strong adds RandAugment(n=2, m=10, mstd=0.5)
#:   (all 15 ops of timm's table, see :data:`RANDAUGMENT_OPS`) and a vertical flip. The blur sigma range
#:   (0.1, 2.0) is the 224-px one of the paper; scale it with ``blur_sigma=...`` for small images.
#: * ``glyph_mild``: BECLR's views adapted to 20-28 px strokes (issue 41): RandomResizedCrop of 60-100 % of the
#:   area, aspect 0.9-1.1, no flips, no colour operations. RandAugment at magnitude 10 (translations up to 45 %
#:   of the side, invert, solarize) and both flips stopped BECLR's objective from aligning its views on glyphs
#:   (benchmarks/results/beclr-diagnosis-*.md); SimCLR's views in the same diagnosis.
PROFILES: dict[str, dict[str, Any]] = {
    "none": {},
    "standard": {"scale": (0.08, 1.0), "hflip": 0.5},
    "pad_crop": {"pad_crop": 8, "hflip": 0.5},
    "beclr_default": {"scale": (0.2, 1.0), "color_jitter": (0.4, 0.4, 0.4, 0.1), "color_jitter_p": 0.8,
                      "grayscale": 0.2, "blur": 0.5, "blur_sigma": (0.1, 2.0), "hflip": 0.5},
    "beclr_strong": {"scale": (0.2, 1.0), "color_jitter": (0.4, 0.4, 0.2, 0.1), "color_jitter_p": 0.8,
                     "grayscale": 0.2, "blur": 0.5, "blur_sigma": (0.1, 2.0), "ra_layers": 2,
                     "ra_magnitude": 10.0, "ra_mstd": 0.5, "ra_prob": 0.5, "hflip": 0.5, "vflip": 0.5},
    "glyph_mild": {"scale": (0.6, 1.0), "ratio": (0.9, 1.1), "hflip": 0.0, "vflip": 0.0},
}


def build_augment(profile: str, size: int, mean: Sequence[float], std: Sequence[float],
                  **overrides: Any) -> Augment:
    """The :class:`Augment` of a named profile in :data:`PROFILES`, with ``overrides`` of any
    :class:`AugmentConfig` field (e.g. ``out_channels=3``, ``pad_crop=4``)."""
    if profile not in PROFILES:
        raise ValueError(f"unknown augmentation profile {profile!r}; choose one of {sorted(PROFILES)}")
    known = {f.name for f in fields(AugmentConfig)}
    bad = sorted(set(overrides) - known)
    if bad:
        raise ValueError(f"unknown augmentation option(s) {bad}; valid ones are {sorted(known)}")
    cfg = {**PROFILES[profile], **overrides, "size": size, "mean": tuple(mean), "std": tuple(std)}
    return Augment(AugmentConfig(**cfg))


# ----------------------------------------------------------------------------------------------- masking


def patch_mask(x: torch.Tensor, ratio: float, patch: int, generator: torch.Generator | None = None,
               return_mask: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Zero ``round(ratio * n)`` of the ``n = ceil(H/patch) * ceil(W/patch)`` cells of each image, chosen
    uniformly without replacement per image (BECLR's student masking, seed 001 Sec. 3: 16-px patches, 30%,
    applied in normalised pixel space, so a zeroed cell reads as the data-set mean).

    Args:
        x: ``[B, C, H, W]`` float (normalised).
        ratio: fraction of cells to zero, in [0, 1].
        patch: cell side in pixels.
        return_mask: also return the ``[B, 1, H, W]`` bool mask (True = zeroed).
    """
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"patch_mask: ratio must lie in [0, 1], got {ratio}")
    if patch < 1:
        raise ValueError(f"patch_mask: patch must be >= 1 pixel, got {patch}")
    _check_generator(generator, x.device)
    b, _, h, w = x.shape
    gh, gw = math.ceil(h / patch), math.ceil(w / patch)
    n = gh * gw
    k = int(round(ratio * n))
    rank = torch.argsort(_rand(b, generator, x.device, n), dim=1).argsort(dim=1)  # random rank of each cell
    cells = (rank < k).view(b, 1, gh, gw)
    mask = cells.repeat_interleave(patch, dim=2).repeat_interleave(patch, dim=3)[:, :, :h, :w]
    out = x.masked_fill(mask, 0.0)
    return (out, mask) if return_mask else out
