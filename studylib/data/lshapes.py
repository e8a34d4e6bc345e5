"""The synthetic colour/orientation L-shape data set of seed 002 (Sec. 3.1, Fig. 1-3, Appendix A.2).

Generative model (Appendix A.2; choices the paper leaves open are marked *project*):

* 64x64 RGB images of one L shape on a black background (*project*: background colour).
* Four classes: two orientation centres (90 and 180 degrees) x two hue centres (90 and 180 degrees); class
  ``2 * i + j`` has orientation centre ``i`` and hue centre ``j``. Orientation and hue are drawn from
  Gaussians around the centres and wrapped to ``[0, 360)``: both are circular quantities.
* Standard deviation: Appendix A.2 says 30 degrees, the Fig. 1 caption says 22.5. The default follows the
  appendix (``std=30``), which is also the value that reproduces the paper's Bayes-optimal accuracy of about
  87%: ``bayes_optimal_accuracy()`` gives 0.8708 with 30 and 0.9550 with 22.5.
* Hue is the H of HSV with saturation and value fixed (1 and 1, *project*).
* 15% of the images are "noisy": Gaussian noise on the hue of every pixel inside the shape, its standard
  deviation uniform in [18, 54] degrees, and their legs shortened to a length uniform in [10%, 98%] of the
  original. *project*: the appendix lists leg-length noise right after the 15% hue-noise minority; we read it
  as part of that minority (``leg_noise="noisy"``). ``leg_noise="all"`` draws the length for every image,
  ``"none"`` never. One length factor serves both legs unless ``independent_legs=True``.
* Orientation ``theta`` (degrees, counter-clockwise, image y axis pointing up) is the direction of the first
  leg; the second leg points at ``theta - 90``, so ``theta = 90`` draws an upright "L" (legs up and right of
  the corner). The full-length L's bounding box is centred in the image and shortened legs shrink towards
  the corner (*project*: leg length 36 px and thickness 8 px at 64 px, so every rotation fits the image).

Rendering is batched in torch (pixel grids, rotation, signed-distance masks with one pixel of anti-aliasing,
HSV->RGB), runs on any device and is deterministic in the seed: every random number (latents and pixel
noise) is drawn from a CPU ``torch.Generator``. Written by hand because no library renders parametric shapes
batched on a GPU; :func:`hsv_to_rgb` is tested against Python's ``colorsys``.

The classes are the same in every split (the task of Sec. 3.1 is classification of held-out samples of the
four classes with 2-shot prototypes), unlike the class-disjoint splits of the real few-shot data sets.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Literal, Sequence

import torch

from studylib.data.base import DataError, FewShotDataset, ImageSplit


# ----------------------------------------------------------------------------------------------------------
# Specification and latent factors
# ----------------------------------------------------------------------------------------------------------

@dataclass
class LShapeSpec:
    """Parameters of the generative model (defaults: Appendix A.2 and the project choices above).

    Attributes:
        image_size: side of the square images in pixels.
        orientation_centres, hue_centres: class centres in degrees.
        orientation_std, hue_std: class-conditional standard deviations in degrees (appendix: 30; Fig. 1: 22.5).
        noisy_fraction: fraction of images with hue noise (and, with ``leg_noise="noisy"``, shortened legs).
        noise_std_range: range of the per-image hue-noise standard deviation (degrees), drawn uniformly.
        leg_range: range of the leg-length factor (fraction of the full leg), drawn uniformly.
        leg_noise: which images get a random leg length: ``"noisy"``, ``"all"`` or ``"none"``.
        independent_legs: draw a separate factor for each leg.
        leg_frac, thickness_frac: full leg length and thickness as fractions of ``image_size``.
        saturation, value: the fixed S and V of the shape's colour.
    """

    image_size: int = 64
    orientation_centres: tuple[float, float] = (90.0, 180.0)
    hue_centres: tuple[float, float] = (90.0, 180.0)
    orientation_std: float = 30.0
    hue_std: float = 30.0
    noisy_fraction: float = 0.15
    noise_std_range: tuple[float, float] = (18.0, 54.0)
    leg_range: tuple[float, float] = (0.10, 0.98)
    leg_noise: Literal["noisy", "all", "none"] = "noisy"
    independent_legs: bool = False
    leg_frac: float = 36.0 / 64.0
    thickness_frac: float = 8.0 / 64.0
    saturation: float = 1.0
    value: float = 1.0

    def check(self) -> None:
        if self.image_size < 8:
            raise DataError(f"image_size must be >= 8 pixels, got {self.image_size}")
        if self.orientation_std <= 0 or self.hue_std <= 0:
            raise DataError(f"orientation_std and hue_std must be > 0, got {self.orientation_std}, {self.hue_std}")
        if not 0.0 <= self.noisy_fraction <= 1.0:
            raise DataError(f"noisy_fraction must lie in [0, 1], got {self.noisy_fraction}")
        lo, hi = self.leg_range
        if not 0.0 < lo <= hi <= 1.0:
            raise DataError(f"leg_range must satisfy 0 < lo <= hi <= 1, got {self.leg_range}")
        if not 0.0 <= self.noise_std_range[0] <= self.noise_std_range[1]:
            raise DataError(f"noise_std_range must satisfy 0 <= lo <= hi, got {self.noise_std_range}")
        if self.leg_noise not in ("noisy", "all", "none"):
            raise DataError(f"leg_noise must be 'noisy', 'all' or 'none', got {self.leg_noise!r}")
        reach = math.sqrt(2.0) * (self.leg_frac + self.thickness_frac / 2) / 2 * self.image_size
        if reach > self.image_size / 2:
            raise DataError(f"an L of leg_frac={self.leg_frac} and thickness_frac={self.thickness_frac} leaves the "
                            f"image when rotated; keep sqrt(2) * (leg_frac + thickness_frac / 2) <= 1")

    @property
    def num_classes(self) -> int:
        return len(self.orientation_centres) * len(self.hue_centres)

    def class_centres(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(orientation [K], hue [K])`` of each class ``k = i * len(hue_centres) + j`` (degrees)."""
        o = torch.tensor(self.orientation_centres, dtype=torch.float64)
        h = torch.tensor(self.hue_centres, dtype=torch.float64)
        return o.repeat_interleave(len(h)), h.repeat(len(o))

    def class_names(self) -> list[str]:
        o, h = self.class_centres()
        return [f"ori{float(a):g}_hue{float(b):g}" for a, b in zip(o, h)]


@dataclass
class LShapeFactors:
    """Latent factors of a set of images (all ``[N]`` except ``leg``).

    Attributes:
        labels: int64 class ids.
        orientation, hue: degrees in ``[0, 360)`` (float32).
        noise_std: per-image hue-noise standard deviation in degrees, 0 for clean images.
        leg: ``[N, 2]`` length factors of the two legs (1 = full length).
        noisy: bool, the image belongs to the noisy minority.
    """

    labels: torch.Tensor
    orientation: torch.Tensor
    hue: torch.Tensor
    noise_std: torch.Tensor
    leg: torch.Tensor
    noisy: torch.Tensor

    def __len__(self) -> int:
        return int(self.labels.numel())

    def subset(self, idx: torch.Tensor) -> "LShapeFactors":
        return LShapeFactors(self.labels[idx], self.orientation[idx], self.hue[idx], self.noise_std[idx],
                             self.leg[idx], self.noisy[idx])

    @staticmethod
    def cat(parts: Sequence["LShapeFactors"]) -> "LShapeFactors":
        return LShapeFactors(*(torch.cat([getattr(p, f) for p in parts]) for f in
                               ("labels", "orientation", "hue", "noise_std", "leg", "noisy")))


def _uniform(n: int, lo: float, hi: float, gen: torch.Generator) -> torch.Tensor:
    return lo + (hi - lo) * torch.rand(n, generator=gen, dtype=torch.float64)


def sample_latents(n_per_class: int, spec: LShapeSpec | None = None,
                   generator: torch.Generator | None = None, seed: int = 0) -> LShapeFactors:
    """Draw the latent factors of ``n_per_class`` images of every class (class-major order).

    Orientation and hue ~ N(class centre, std) wrapped to [0, 360); a Bernoulli(``noisy_fraction``) marks the
    noisy images, whose hue-noise std is U(noise_std_range); leg factors ~ U(leg_range) where
    ``spec.leg_noise`` says so, else 1.
    """
    spec = spec or LShapeSpec()
    spec.check()
    if n_per_class < 0:
        raise DataError(f"n_per_class must be >= 0, got {n_per_class}")
    gen = generator if generator is not None else torch.Generator().manual_seed(seed)
    k = spec.num_classes
    n = k * n_per_class
    labels = torch.arange(k).repeat_interleave(n_per_class)
    oc, hc = spec.class_centres()
    orientation = torch.remainder(oc[labels] + spec.orientation_std * torch.randn(n, generator=gen,
                                                                                  dtype=torch.float64), 360.0)
    hue = torch.remainder(hc[labels] + spec.hue_std * torch.randn(n, generator=gen, dtype=torch.float64), 360.0)
    noisy = torch.rand(n, generator=gen, dtype=torch.float64) < spec.noisy_fraction
    noise_std = torch.where(noisy, _uniform(n, *spec.noise_std_range, gen), torch.zeros(n, dtype=torch.float64))
    legs = _uniform(n, *spec.leg_range, gen)
    leg = torch.stack([legs, _uniform(n, *spec.leg_range, gen) if spec.independent_legs else legs], 1)
    if spec.leg_noise == "noisy":
        leg = torch.where(noisy[:, None], leg, torch.ones_like(leg))
    elif spec.leg_noise == "none":
        leg = torch.ones_like(leg)
    return LShapeFactors(labels, orientation.float(), hue.float(), noise_std.float(), leg.float(), noisy)


# ----------------------------------------------------------------------------------------------------------
# Rendering
# ----------------------------------------------------------------------------------------------------------

def hsv_to_rgb(h_deg: torch.Tensor, s: torch.Tensor | float, v: torch.Tensor | float) -> torch.Tensor:
    """HSV -> RGB, batched: ``[...]`` hue in degrees (any value, wrapped), S and V in [0, 1] ->
    ``[..., 3]`` in [0, 1]. ``f(n) = V - V S max(0, min(k, 4 - k, 1))``, ``k = (n + H / 60) mod 6``,
    ``n = 5, 3, 1`` for R, G, B (the standard formula; agrees with ``colorsys.hsv_to_rgb``)."""
    n = torch.tensor([5.0, 3.0, 1.0], device=h_deg.device, dtype=h_deg.dtype)
    k = torch.remainder(n + h_deg.unsqueeze(-1) / 60.0, 6.0)
    s = torch.as_tensor(s, device=h_deg.device, dtype=h_deg.dtype)
    v = torch.as_tensor(v, device=h_deg.device, dtype=h_deg.dtype)
    w = torch.clamp(torch.minimum(k, 4.0 - k), 0.0, 1.0)
    return v.unsqueeze(-1) - (v * s).unsqueeze(-1) * w


def _box_sdf(a: torch.Tensor, b: torch.Tensor, ca: torch.Tensor, cb: torch.Tensor, ha: torch.Tensor,
             hb: torch.Tensor) -> torch.Tensor:
    """Signed distance (pixels, negative inside) of points ``(a, b)`` to axis-aligned boxes (broadcast)."""
    qa = (a - ca).abs() - ha
    qb = (b - cb).abs() - hb
    outside = torch.sqrt(qa.clamp_min(0) ** 2 + qb.clamp_min(0) ** 2)
    return outside + torch.maximum(qa, qb).clamp_max(0)


def shape_coverage(orientation: torch.Tensor, leg: torch.Tensor, spec: LShapeSpec | None = None) -> torch.Tensor:
    """Anti-aliased masks of the L shapes: ``[N]`` degrees and ``[N, 2]`` leg factors -> ``[N, H, W]`` in [0, 1].

    Each pixel centre ``p`` (y up, origin at the image centre) is mapped into the L's frame,
    ``a = p . u1 + c``, ``b = p . u2 + c`` with ``u1 = (cos t, sin t)``, ``u2 = (sin t, -cos t)`` and ``c`` the
    centre of the full-length L's bounding box; the L is the union of the two leg boxes and the coverage is
    ``clamp(0.5 - sdf, 0, 1)``.
    """
    spec = spec or LShapeSpec()
    size, dev = spec.image_size, orientation.device
    full, t = spec.leg_frac * size, spec.thickness_frac * size
    coords = torch.arange(size, device=dev, dtype=torch.float32) + 0.5 - size / 2
    x = coords.view(1, 1, size)
    y = -coords.view(1, size, 1)
    th = torch.deg2rad(orientation.float()).view(-1, 1, 1)
    cos, sin = torch.cos(th), torch.sin(th)
    c = (full - t / 2) / 2
    a = x * cos + y * sin + c
    b = x * sin - y * cos + c
    l1 = (leg[:, 0].float() * full).view(-1, 1, 1)
    l2 = (leg[:, 1].float() * full).view(-1, 1, 1)
    half_t = torch.tensor(t / 2, device=dev)
    zero = torch.zeros((), device=dev)
    sdf = torch.minimum(_box_sdf(a, b, (l1 - t / 2) / 2, zero, (l1 + t / 2) / 2, half_t),
                        _box_sdf(a, b, zero, (l2 - t / 2) / 2, half_t, (l2 + t / 2) / 2))
    return torch.clamp(0.5 - sdf, 0.0, 1.0)


def render_lshapes(factors: LShapeFactors, spec: LShapeSpec | None = None, generator: torch.Generator | None = None,
                   seed: int = 0, device: torch.device | str = "cpu", chunk: int = 1024) -> torch.Tensor:
    """Render the images of ``factors``: ``[N, 3, H, W]`` uint8 on ``device``.

    The per-pixel hue noise of images with ``noise_std > 0`` (``hue + noise_std * N(0, 1)`` per pixel,
    wrapped) is drawn in one call from ``generator`` (CPU) before rendering, so the result does not depend on
    ``device`` or ``chunk``.
    """
    spec = spec or LShapeSpec()
    spec.check()
    gen = generator if generator is not None else torch.Generator().manual_seed(seed)
    n, size = len(factors), spec.image_size
    noisy_idx = torch.nonzero(factors.noise_std > 0).squeeze(1)
    pix_noise = torch.randn(len(noisy_idx), size, size, generator=gen)
    slot = torch.full((n,), -1, dtype=torch.long)
    slot[noisy_idx] = torch.arange(len(noisy_idx))
    out = torch.empty(n, 3, size, size, dtype=torch.uint8, device=device)
    for start in range(0, n, chunk):  # chunks only bound memory; every op inside is batched
        sl = slice(start, min(start + chunk, n))
        ori = factors.orientation[sl].to(device)
        cover = shape_coverage(ori, factors.leg[sl].to(device), spec)  # [b, H, W]
        hue = factors.hue[sl].to(device).float().view(-1, 1, 1).expand_as(cover).clone()
        s = slot[sl]
        has = s >= 0
        if bool(has.any()):
            std = factors.noise_std[sl][has].to(device).float().view(-1, 1, 1)
            hue[has.to(device)] += std * pix_noise[s[has]].to(device)
        rgb = hsv_to_rgb(hue, spec.saturation, spec.value).permute(0, 3, 1, 2)  # [b, 3, H, W]
        img = rgb * cover.unsqueeze(1)  # black background
        out[sl] = (img * 255.0).round().clamp(0, 255).to(torch.uint8)
    return out


# ----------------------------------------------------------------------------------------------------------
# Data sets
# ----------------------------------------------------------------------------------------------------------

def make_lshapes(n_per_class: int, seed: int = 0, spec: LShapeSpec | None = None, device: torch.device | str = "cpu",
                 name: str = "lshapes/split") -> tuple[ImageSplit, LShapeFactors]:
    """``n_per_class`` images of each class: an :class:`ImageSplit` (uint8, images on ``device``) and its
    factors (CPU). Deterministic in ``seed``: latents first, then pixel noise, from one CPU generator."""
    spec = spec or LShapeSpec()
    gen = torch.Generator().manual_seed(seed)
    factors = sample_latents(n_per_class, spec, gen)
    images = render_lshapes(factors, spec, gen, device=device)
    return ImageSplit(images, factors.labels.to(images.device), spec.class_names(), name=name), factors


def make_lshapes_dataset(train: int = 1500, val: int = 250, test: int = 250, seed: int = 0,
                         spec: LShapeSpec | None = None, eval_noisy_fraction: float | None = None,
                         device: torch.device | str = "cpu") -> tuple[FewShotDataset, dict[str, LShapeFactors]]:
    """The synthetic data set: ``train``/``val``/``test`` images *per class* (*project* sizes; the paper gives
    none), the same four classes in every split, and the latent factors of every split.

    Args:
        eval_noisy_fraction: noisy fraction of val/test (None: the same as training, ``spec.noisy_fraction``).
        seed: split ``i`` (train, val, test) uses seed ``seed * 1000 + i``.

    Returns:
        ``(dataset, factors)``; ``dataset.info`` also holds the factors (``"factors"``) and the spec.
    """
    spec = spec or LShapeSpec()
    spec.check()
    splits: dict[str, ImageSplit] = {}
    factors: dict[str, LShapeFactors] = {}
    for i, (split, n) in enumerate((("train", train), ("val", val), ("test", test))):
        if n <= 0:
            continue
        s = spec
        if split != "train" and eval_noisy_fraction is not None:
            s = LShapeSpec(**{**asdict(spec), "noisy_fraction": eval_noisy_fraction})
        splits[split], factors[split] = make_lshapes(n, seed * 1000 + i, s, device, name=f"lshapes/{split}")
    info: dict[str, object] = {"spec": asdict(spec), "factors": factors, "shared_classes": True,
                               "bayes_optimal_accuracy": bayes_optimal_accuracy(spec)}
    return FewShotDataset("lshapes", splits, info), factors


def load_lshapes(root: object = None, **options: object) -> FewShotDataset:
    """Registry-style loader (``root`` is unused: the data are generated). Options: those of
    :func:`make_lshapes_dataset`; any :class:`LShapeSpec` field may be given directly."""
    fields = set(LShapeSpec.__dataclass_fields__)
    spec_kw = {k: v for k, v in options.items() if k in fields}
    rest = {k: v for k, v in options.items() if k not in fields}
    for key in ("orientation_centres", "hue_centres", "noise_std_range", "leg_range"):
        if key in spec_kw:
            spec_kw[key] = tuple(spec_kw[key])  # type: ignore[arg-type]
    return make_lshapes_dataset(spec=LShapeSpec(**spec_kw), **rest)[0]  # type: ignore[arg-type]


# ----------------------------------------------------------------------------------------------------------
# Bayes-optimal classifier
# ----------------------------------------------------------------------------------------------------------

def wrapped_normal_logpdf(x_deg: torch.Tensor, mu_deg: torch.Tensor | float, std_deg: float,
                          wraps: int = 4) -> torch.Tensor:
    """Log-density (per degree) of the wrapped normal on ``[0, 360)``:
    ``log sum_{k=-wraps..wraps} N(x + 360 k; mu, std^2)``."""
    k = torch.arange(-wraps, wraps + 1, device=x_deg.device, dtype=torch.float64) * 360.0
    diff = (x_deg.double().unsqueeze(-1) - torch.as_tensor(mu_deg, dtype=torch.float64,
                                                           device=x_deg.device).unsqueeze(-1) + k)
    logn = -0.5 * (diff / std_deg) ** 2 - math.log(std_deg * math.sqrt(2.0 * math.pi))
    return torch.logsumexp(logn, -1)


def bayes_log_posterior(orientation: torch.Tensor, hue: torch.Tensor, spec: LShapeSpec | None = None) -> torch.Tensor:
    """``[N]`` latent orientation and hue (degrees) -> ``[N, K]`` log p(class | orientation, hue) of the
    generative model (equal priors, wrapped normal densities)."""
    spec = spec or LShapeSpec()
    oc, hc = spec.class_centres()
    oc, hc = oc.to(orientation.device), hc.to(orientation.device)
    logp = (wrapped_normal_logpdf(orientation.unsqueeze(-1), oc, spec.orientation_std)
            + wrapped_normal_logpdf(hue.unsqueeze(-1), hc, spec.hue_std))
    return logp - torch.logsumexp(logp, -1, keepdim=True)


def bayes_classify(orientation: torch.Tensor, hue: torch.Tensor, spec: LShapeSpec | None = None) -> torch.Tensor:
    """``[N]`` int64 Bayes-optimal predictions from the latent factors."""
    return bayes_log_posterior(orientation, hue, spec).argmax(-1)


def bayes_optimal_accuracy(spec: LShapeSpec | None = None, method: Literal["quadrature", "monte_carlo"] = "quadrature",
                           grid: int = 720, samples: int = 200_000, seed: int = 0) -> float:
    """Accuracy of the Bayes-optimal classifier of the generative model (Sec. 3.1 quotes about 87%).

    ``acc = int int max_k p(k) p(theta | k) p(h | k) dtheta dh`` over the torus ``[0, 360)^2`` with the wrapped
    normal class densities. ``"quadrature"``: midpoint rule on a ``grid x grid`` periodic grid (error about
    1e-5 at the default 0.5-degree grid; the integrand is smooth apart from the decision boundaries).
    ``"monte_carlo"``: classify ``samples`` latents in all (``samples / K`` per class) drawn by
    :func:`sample_latents` with :func:`bayes_classify`.

    This bounds any classifier of the *images*: it reads orientation and hue exactly, while leg shortening
    and hue noise carry no class information and can only make them harder to read.
    With the defaults (std 30) it is 0.8708 (= Phi(1.5)^2: the decision factorises into orientation and hue,
    each boundary 45 degrees = 1.5 std from the centres); with the Fig. 1 caption's 22.5 degrees, 0.9550.
    """
    spec = spec or LShapeSpec()
    spec.check()
    if method == "monte_carlo":
        f = sample_latents(max(1, samples // spec.num_classes), spec, seed=seed)
        return float((bayes_classify(f.orientation.double(), f.hue.double(), spec) == f.labels).double().mean())
    if method != "quadrature":
        raise ValueError(f"method must be 'quadrature' or 'monte_carlo', got {method!r}")
    step = 360.0 / grid
    pts = (torch.arange(grid, dtype=torch.float64) + 0.5) * step
    oc, hc = spec.class_centres()
    lo = wrapped_normal_logpdf(pts.unsqueeze(-1), oc, spec.orientation_std)  # [G, K]
    lh = wrapped_normal_logpdf(pts.unsqueeze(-1), hc, spec.hue_std)  # [G, K]
    joint = lo.unsqueeze(1) + lh.unsqueeze(0) - math.log(spec.num_classes)  # [G, G, K]
    return float(joint.max(-1).values.exp().sum() * step * step)


# ----------------------------------------------------------------------------------------------------------
# Probes of Fig. 2 and Fig. 3
# ----------------------------------------------------------------------------------------------------------

@dataclass
class LShapeProbe:
    """Probe images with their factors.

    Attributes:
        images: ``[N, 3, H, W]`` uint8.
        factors: the latent factors (``labels`` = Bayes-optimal class of the latents, or the centre's class).
        value: ``[N]`` the swept quantity (interpolation: index ``row * steps + col``; noise: std in degrees;
            legs: length factor).
        centre: ``[N]`` int64 class whose centre the probe starts from (-1 for the interpolation grid).
    """

    images: torch.Tensor
    factors: LShapeFactors
    value: torch.Tensor
    centre: torch.Tensor = field(default_factory=lambda: torch.empty(0, dtype=torch.long))


def interpolation_probe(steps: int = 5, spec: LShapeSpec | None = None,
                        device: torch.device | str = "cpu") -> LShapeProbe:
    """Fig. 2: ``steps x steps`` clean, full-length images interpolating linearly between the class centres.

    Image ``r * steps + c`` has hue ``lerp(hue_centres, r / (steps - 1))`` and orientation
    ``lerp(orientation_centres, c / (steps - 1))``, so the four corners are the class centres.
    """
    spec = spec or LShapeSpec()
    if steps < 2:
        raise ValueError(f"the interpolation needs steps >= 2, got {steps}")
    t = torch.linspace(0, 1, steps)
    o0, o1 = spec.orientation_centres
    h0, h1 = spec.hue_centres
    ori = (o0 + (o1 - o0) * t).repeat(steps)
    hue = (h0 + (h1 - h0) * t).repeat_interleave(steps)
    n = steps * steps
    f = LShapeFactors(bayes_classify(ori.double(), hue.double(), spec), ori, hue, torch.zeros(n), torch.ones(n, 2),
                      torch.zeros(n, dtype=torch.bool))
    return LShapeProbe(render_lshapes(f, spec, device=device), f, torch.arange(n, dtype=torch.float32),
                       torch.full((n,), -1, dtype=torch.long))


def _centre_factors(spec: LShapeSpec, per_centre: int) -> LShapeFactors:
    oc, hc = spec.class_centres()
    k = spec.num_classes
    labels = torch.arange(k).repeat_interleave(per_centre)
    n = len(labels)
    return LShapeFactors(labels, oc[labels].float(), hc[labels].float(), torch.zeros(n), torch.ones(n, 2),
                         torch.zeros(n, dtype=torch.bool))


def hue_noise_probe(levels: Sequence[float] = (0, 9, 18, 27, 36, 45, 54, 63, 72), per_level: int = 16,
                    spec: LShapeSpec | None = None, seed: int = 0, device: torch.device | str = "cpu") -> LShapeProbe:
    """Fig. 3 (left): at each class centre, ``per_level`` images per hue-noise level (std in degrees); only the
    per-pixel hue noise changes (orientation, hue and legs stay at the centre / full length). Order:
    centre-major, then level, then sample."""
    spec = spec or LShapeSpec()
    lv = torch.as_tensor(list(levels), dtype=torch.float32)
    if (lv < 0).any() or per_level < 1:
        raise ValueError(f"levels must be >= 0 and per_level >= 1, got {list(levels)}, {per_level}")
    f = _centre_factors(spec, len(lv) * per_level)
    f.noise_std = lv.repeat_interleave(per_level).repeat(spec.num_classes)
    f.noisy = f.noise_std > 0
    return LShapeProbe(render_lshapes(f, spec, seed=seed, device=device), f, f.noise_std.clone(), f.labels.clone())


def leg_length_probe(fractions: Sequence[float] | None = None, spec: LShapeSpec | None = None,
                     device: torch.device | str = "cpu") -> LShapeProbe:
    """Fig. 3 (right): at each class centre one clean image per leg-length factor (both legs; default
    ten factors from 1.0 down to 0.1); nothing else changes. Order: centre-major, then factor."""
    spec = spec or LShapeSpec()
    fr = torch.as_tensor(list(fractions) if fractions is not None else torch.linspace(1.0, 0.1, 10).tolist(),
                         dtype=torch.float32)
    if (fr <= 0).any() or (fr > 1).any():
        raise ValueError(f"leg-length factors must lie in (0, 1], got {fr.tolist()}")
    f = _centre_factors(spec, len(fr))
    f.leg = fr.repeat(spec.num_classes).unsqueeze(1).expand(-1, 2).contiguous()
    return LShapeProbe(render_lshapes(f, spec, device=device), f, f.leg[:, 0].clone(), f.labels.clone())
