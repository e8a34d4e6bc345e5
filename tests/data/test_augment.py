"""Batched augmentation vs torchvision.transforms.v2.functional applied image by image."""

from __future__ import annotations

import math

import pytest
import torch
import torchvision.transforms.v2.functional as TF

from studylib.data import augment as A


@pytest.fixture(autouse=True)
def _threads():
    torch.set_num_threads(1)


def _images(b: int = 4, c: int = 3, h: int = 20, w: int = 24, seed: int = 0) -> torch.Tensor:
    """Smooth-ish random float images in [0, 1] (a few saturated pixels included)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(b, c, h, w, generator=g)
    x[:, :, 0, 0] = 1.0
    x[:, :, 0, 1] = 0.0
    return x


def _uint8(b: int = 4, c: int = 3, h: int = 20, w: int = 24, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (b, c, h, w), generator=g, dtype=torch.uint8)


# ------------------------------------------------------------------------------- colour ops vs torchvision


@pytest.mark.parametrize("name,factors", [
    ("brightness", [0.6, 1.0, 1.3, 1.4]),
    ("contrast", [0.6, 1.0, 1.3, 0.0]),
    ("saturation", [0.8, 1.0, 1.2, 0.0]),
    ("hue", [-0.1, 0.0, 0.05, 0.5]),
    ("sharpness", [0.1, 1.0, 1.9, 0.5]),
])
def test_colour_ops_match_torchvision(name: str, factors: list[float]) -> None:
    x = _images()
    f = torch.tensor(factors)
    ours = {"brightness": A.adjust_brightness, "contrast": A.adjust_contrast, "saturation": A.adjust_saturation,
            "hue": A.adjust_hue, "sharpness": A.adjust_sharpness}[name](x, f)
    ref_fn = {"brightness": TF.adjust_brightness, "contrast": TF.adjust_contrast,
              "saturation": TF.adjust_saturation, "hue": TF.adjust_hue, "sharpness": TF.adjust_sharpness}[name]
    for i in range(x.shape[0]):
        ref = ref_fn(x[i], float(f[i]))
        torch.testing.assert_close(ours[i], ref, atol=2e-5, rtol=0)


def test_grayscale_solarize_invert_autocontrast_match_torchvision() -> None:
    x = _images()
    torch.testing.assert_close(A.rgb_to_grayscale(x)[0], TF.rgb_to_grayscale(x[0]), atol=1e-6, rtol=0)
    thr = torch.tensor([0.2, 0.5, 0.9, 1.0])
    ours = A.solarize(x, thr)
    for i in range(4):
        torch.testing.assert_close(ours[i], TF.solarize(x[i], float(thr[i])))
    torch.testing.assert_close(A.invert(x), TF.invert(x))
    y = x * 0.5 + 0.2  # not spanning [0, 1], so autocontrast has work to do
    y[1, 2] = 0.3  # a constant channel must stay unchanged
    torch.testing.assert_close(A.autocontrast(y), TF.autocontrast(y), atol=1e-6, rtol=0)


def test_posterize_and_equalize_match_torchvision_uint8() -> None:
    q = _uint8(b=3, h=16, w=16)
    q[2] = (q[2] // 64) * 64  # few grey levels
    x = q.float() / 255.0
    bits = torch.tensor([1, 4, 7])
    ours = A.posterize(x, bits)
    for i in range(3):
        torch.testing.assert_close((ours[i] * 255).round().to(torch.uint8), TF.posterize(q[i], int(bits[i])))
    ours = (A.equalize(x) * 255).round().to(torch.uint8)
    torch.testing.assert_close(ours, TF.equalize(q))


def test_hsv_round_trip_and_identity_jitter() -> None:
    x = _images()
    torch.testing.assert_close(A.hsv_to_rgb(A.rgb_to_hsv(x)), x, atol=1e-6, rtol=0)
    one = torch.ones(4)
    torch.testing.assert_close(A.adjust_brightness(x, one), x)
    torch.testing.assert_close(A.adjust_contrast(x, one), x)
    torch.testing.assert_close(A.adjust_saturation(x, one), x)
    torch.testing.assert_close(A.adjust_hue(x, torch.zeros(4)), x, atol=1e-6, rtol=0)
    torch.testing.assert_close(A.adjust_sharpness(x, one), x)
    gray = x[:, :1]
    assert torch.equal(A.adjust_saturation(gray, 0.3 * one), gray)  # no-op on 1 channel, as torchvision
    assert torch.equal(A.adjust_hue(gray, 0.2 * one), gray)


# ------------------------------------------------------------------------------ spatial ops vs torchvision


def test_gaussian_blur_per_sample_sigma_matches_torchvision() -> None:
    x = _images(h=18, w=22)
    sigma = torch.tensor([0.1, 0.7, 1.3, 2.0])
    k = 9
    ours = A.gaussian_blur(x, sigma, k)
    for i in range(4):
        ref = TF.gaussian_blur(x[i], [k, k], [float(sigma[i])] * 2)
        torch.testing.assert_close(ours[i], ref, atol=1e-5, rtol=0)
    # sigma -> 0 is the identity.
    torch.testing.assert_close(A.gaussian_blur(x, torch.full((4,), 1e-3), 5), x)


def test_resized_crop_matches_torchvision() -> None:
    x = _images(b=3, h=32, w=30)
    boxes = torch.tensor([[2.0, 3.0, 12.0, 10.0], [0.0, 0.0, 32.0, 30.0], [5.0, 1.0, 20.0, 25.0]])
    # Upsampling (every crop smaller than the output): bilinear with align_corners=False. Exact away from
    # the crop's edge; within half an input pixel of it torchvision clamps to the crop while roi_align reads
    # the real neighbouring pixels (equal again at the image border, box 1).
    ours = A.resized_crop(x, boxes, 40)
    for i in range(3):
        t, l, h, w = (int(v) for v in boxes[i])
        ref = TF.resized_crop(x[i], t, l, h, w, [40, 40], antialias=True)
        my, mx = math.ceil(20 / h), math.ceil(20 / w)
        torch.testing.assert_close(ours[i, :, my:-my, mx:-mx], ref[:, my:-my, mx:-mx], atol=1e-5, rtol=0)
        assert (ours[i] - ref).abs().mean() < 0.02
    torch.testing.assert_close(ours[1], TF.resize(x[1], [40, 40], antialias=True), atol=1e-5, rtol=0)
    # Downsampling: area-style anti-aliasing vs torchvision's triangle filter, close but not equal.
    ours = A.resized_crop(x, boxes, 6)
    for i in range(3):
        t, l, h, w = (int(v) for v in boxes[i])
        ref = TF.resized_crop(x[i], t, l, h, w, [6, 6], antialias=True)
        assert (ours[i] - ref).abs().mean() < 0.05
        assert abs(float(ours[i].mean() - ref.mean())) < 0.01


def test_random_resized_crop_boxes_follow_the_distribution() -> None:
    g = torch.Generator().manual_seed(1)
    n, h, w = 2000, 40, 60
    boxes = A.random_resized_crop_boxes(n, h, w, (0.2, 0.9), (0.75, 4 / 3), g, torch.device("cpu"))
    top, left, bh, bw = boxes.unbind(1)
    assert (top >= 0).all() and (left >= 0).all() and (top + bh <= h).all() and (left + bw <= w).all()
    area = bh * bw / (h * w)
    assert area.min() > 0.2 - 0.03 and area.max() < 0.9 + 0.03  # rounding of the sides
    ratio = bw / bh
    assert ratio.min() > 0.75 * 0.9 and ratio.max() < 4 / 3 * 1.1
    assert torch.equal(boxes, boxes.round())
    # Impossible requests fall back to the central crop clamped to the ratio range.
    fb = A.random_resized_crop_boxes(5, 10, 100, (0.99, 1.0), (1.0, 1.0), g, torch.device("cpu"))
    assert torch.equal(fb, torch.tensor([[0.0, 45.0, 10.0, 10.0]]).expand(5, 4))


def test_pad_random_crop_matches_torchvision() -> None:
    x = _images(b=3, h=16, w=16)
    offs = torch.tensor([[0, 0], [8, 3], [4, 7]])
    ours = A.pad_random_crop(x, offs, padding=4, size=16)
    for i in range(3):
        ref = TF.crop(TF.pad(x[i], [4]), int(offs[i, 0]), int(offs[i, 1]), 16, 16)
        torch.testing.assert_close(ours[i], ref)
    assert torch.equal(A.pad_random_crop(x, torch.full((3, 2), 4), 4, 16), x)  # centre offset = identity


def test_affine_rotation_and_translation() -> None:
    x = _images(b=2, h=12, w=12)
    c, s = 0.0, 1.0  # 90 degrees
    rot = torch.tensor([[c, -s, 0.0], [s, c, 0.0]]).expand(2, 2, 3)
    ours = A.affine(x, rot)
    ref = torch.rot90(x, k=1, dims=(2, 3))
    if not torch.allclose(ours, ref, atol=1e-5):
        ref = torch.rot90(x, k=-1, dims=(2, 3))
    torch.testing.assert_close(ours, ref, atol=1e-5, rtol=0)
    # Sampling the input 3 px to the left shifts the image 3 px right, filling the gap.
    shift = torch.tensor([[1.0, 0.0, -3.0], [0.0, 1.0, 0.0]]).expand(2, 2, 3)
    ours = A.affine(x, shift, fill=0.25)
    torch.testing.assert_close(ours[..., 3:], x[..., :-3], atol=1e-5, rtol=0)
    torch.testing.assert_close(ours[..., :3], torch.full_like(ours[..., :3], 0.25), atol=1e-5, rtol=0)
    ident = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]).expand(2, 2, 3)
    torch.testing.assert_close(A.affine(x, ident), x, atol=1e-5, rtol=0)


def test_eval_transform_matches_torchvision() -> None:
    q = _uint8(b=2, h=30, w=40)
    ours = A.eval_transform(q, 20, mean=(0.5, 0.4, 0.3), std=(0.2, 0.25, 0.3), resize=24)
    x = q.float() / 255.0
    for i in range(2):
        ref = TF.center_crop(TF.resize(x[i], [24], antialias=True), [20])
        ref = TF.normalize(ref, [0.5, 0.4, 0.3], [0.2, 0.25, 0.3])
        torch.testing.assert_close(ours[i], ref, atol=1e-4, rtol=0)
    assert ours.dtype == torch.float32 and ours.shape == (2, 3, 20, 20)
    gray = A.eval_transform(q[:, :1], 20, (0.5,), (0.5,), out_channels=3)
    assert gray.shape == (2, 3, 20, 20) and torch.equal(gray[:, 0], gray[:, 2])
    with pytest.raises(ValueError, match="uint8"):
        A.eval_transform(x, 20, (0.5,), (0.5,))


# ----------------------------------------------------------------------------------------- the pipeline


def test_identity_parameters_give_identity() -> None:
    q = _uint8(h=16, w=16)
    x = q.float() / 255.0
    # "none" at the input size: exactly x / 255.
    out = A.build_augment("none", 16, (0.0,), (1.0,))(q)
    assert torch.equal(out, x)
    # Every random transform on, but with probability 0 / identity ranges.
    aug = A.build_augment("beclr_strong", 16, (0.0,), (1.0,), scale=(1.0, 1.0), ratio=(1.0, 1.0),
                          color_jitter_p=0.0, grayscale=0.0, blur=0.0, ra_prob=0.0, hflip=0.0, vflip=0.0)
    torch.testing.assert_close(aug(q, torch.Generator().manual_seed(0)), x, atol=1e-6, rtol=0)
    aug = A.Augment(size=16, color_jitter=(0.0, 0.0, 0.0, 0.0), color_jitter_p=1.0, mean=(0.0,), std=(1.0,))
    torch.testing.assert_close(aug(q), x)


def test_flips_match_torchvision() -> None:
    q = _uint8(h=10, w=12)
    x = q.float() / 255.0
    out = A.Augment(size=10, resize=10, hflip=1.0, mean=(0.0,), std=(1.0,))(q[:, :, :, :10])
    torch.testing.assert_close(out, TF.horizontal_flip(x[:, :, :, :10]))
    out = A.Augment(size=10, vflip=1.0, mean=(0.0,), std=(1.0,))(q[:, :, :, :10])
    torch.testing.assert_close(out, TF.vertical_flip(x[:, :, :, :10]))
    # p = 0.5 flips about half of a large batch, each image either flipped or untouched.
    big = _uint8(b=400, c=1, h=6, w=6, seed=3)
    out = A.Augment(size=6, hflip=0.5, mean=(0.0,), std=(1.0,))(big, torch.Generator().manual_seed(0))
    xb = big.float() / 255.0
    flipped = (out == xb.flip(-1)).flatten(1).all(1)
    kept = (out == xb).flatten(1).all(1)
    assert (flipped | kept).all()
    assert 150 < int(flipped.sum()) < 250


def test_jitter_brightness_range_and_random_order_pipeline() -> None:
    q = (_uint8(b=64, h=8, w=8) // 2)  # <= 127: brightness up to 1.4 never clips
    aug = A.Augment(size=8, color_jitter=(0.4, 0.0, 0.0, 0.0), color_jitter_p=1.0, mean=(0.0,), std=(1.0,))
    out = aug(q, torch.Generator().manual_seed(0))
    x = q.float() / 255.0
    ratio = out.sum(dim=(1, 2, 3)) / x.sum(dim=(1, 2, 3))
    assert ratio.min() >= 0.6 - 1e-5 and ratio.max() <= 1.4 + 1e-5 and ratio.std() > 0.1
    torch.testing.assert_close(out, x * ratio.view(-1, 1, 1, 1), atol=1e-5, rtol=0)


def test_determinism_shapes_and_dtypes() -> None:
    q = _uint8(b=6, h=28, w=28)
    for profile in A.PROFILES:
        aug = A.build_augment(profile, 24, (0.5, 0.5, 0.5), (0.2, 0.2, 0.2))
        a = aug(q, torch.Generator().manual_seed(7))
        b = aug(q, torch.Generator().manual_seed(7))
        assert a.shape == (6, 3, 24, 24) and a.dtype == torch.float32
        assert torch.equal(a, b), profile
        assert torch.isfinite(a).all()
        raw = a * 0.2 + 0.5
        assert raw.min() >= -1e-5 and raw.max() <= 1 + 1e-5
        if profile != "none":
            g = torch.Generator().manual_seed(7)
            first, second = aug(q, g), aug(q, g)  # the generator advances: a fresh draw
            assert not torch.equal(first, second), profile
    gray = _uint8(b=2, c=1, h=28, w=28)
    out = A.build_augment("beclr_strong", 20, (0.5,), (0.5,), out_channels=3)(gray, torch.Generator().manual_seed(0))
    assert out.shape == (2, 3, 20, 20) and torch.equal(out[:, 0], out[:, 1])
    with pytest.raises(ValueError, match="uint8"):
        A.build_augment("standard", 20, (0.5,), (0.5,))(gray.float())


def test_pad_crop_profile_and_randaugment_off_is_identity() -> None:
    q = _uint8(b=8, h=16, w=16)
    out = A.build_augment("pad_crop", 16, (0.0,), (1.0,), hflip=0.0)(q, torch.Generator().manual_seed(0))
    x = q.float() / 255.0
    # Each output is a 16x16 window of the zero-padded image.
    padded = torch.nn.functional.pad(x, (8, 8, 8, 8))
    windows = padded.unfold(2, 16, 1).unfold(3, 16, 1)  # [B, C, 17, 17, 16, 16]
    for i in range(8):
        d = (windows[i] - out[i][:, None, None]).abs().amax(dim=(0, 3, 4))
        assert float(d.min()) == 0.0
    y = torch.rand(4, 3, 12, 12)
    torch.testing.assert_close(A.randaugment(y, 2, 10.0, 0.5, 0.0, None), y)
    z = A.randaugment(y, 3, 10.0, 0.5, 1.0, torch.Generator().manual_seed(0))
    assert z.shape == y.shape and z.min() >= 0 and z.max() <= 1 and not torch.equal(z, y)


def test_randaugment_applies_one_table_op_per_sample() -> None:
    """n = 1, prob = 1, mstd = 0, m = 10: each image must equal one op of the table at level 1."""
    y = torch.rand(40, 3, 12, 12, generator=torch.Generator().manual_seed(2))
    z = A.randaugment(y, 1, 10.0, 0.0, 1.0, torch.Generator().manual_seed(3))
    one = torch.ones(40)
    fill = 128.0 / 255.0

    def aff(a, b, tx, c, d, ty):
        return A.affine(y, torch.tensor([[a, b, tx], [c, d, ty]]).expand(40, 2, 3), fill=fill)

    cands = [A.autocontrast(y), A.equalize(y), A.invert(y), A.posterize(y, 4), A.solarize(y, 256 / 255),
             torch.where(y < 128 / 255, (y + 110 / 255).clamp_max(1.0), y), A.adjust_saturation(y, 1.9 * one),
             A.adjust_contrast(y, 1.9 * one), A.adjust_brightness(y, 1.9 * one), A.adjust_sharpness(y, 1.9 * one)]
    c30, s30 = math.cos(math.pi / 6), math.sin(math.pi / 6)
    for sg in (-1.0, 1.0):
        cands += [aff(c30, -sg * s30, 0, sg * s30, c30, 0), aff(1, 0.3 * sg, 0, 0, 1, 0),
                  aff(1, 0, 0, 0.3 * sg, 1, 0), aff(1, 0, -0.45 * 12 * sg, 0, 1, 0),
                  aff(1, 0, 0, 0, 1, -0.45 * 12 * sg)]
    err = torch.stack([(z - c).abs().flatten(1).amax(1) for c in cands], dim=1)  # [40, candidates]
    best = err.min(dim=1)
    assert (best.values < 1e-5).all()
    assert len(set(best.indices.tolist())) >= 8  # many different ops were drawn


def test_patch_mask_zeroes_the_right_fraction() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 3, 32, 48) + 10.0  # no natural zeros
    out, mask = A.patch_mask(x, 0.3, 8, g, return_mask=True)
    n = (32 // 8) * (48 // 8)
    k = round(0.3 * n)
    cells = mask[:, 0, ::8, ::8]
    assert torch.equal(cells.flatten(1).sum(1), torch.full((5,), k))
    assert torch.equal(mask, cells.repeat_interleave(8, 1).repeat_interleave(8, 2).unsqueeze(1))
    assert torch.equal(out == 0, mask.expand_as(out))
    assert torch.equal(out[~mask.expand_as(out)], x[~mask.expand_as(x)])
    assert len({tuple(c.flatten().tolist()) for c in cells}) > 1  # different cells per image
    # Partial cells at the border (30 is not a multiple of 8) and the limits 0 and 1.
    y = torch.ones(2, 1, 30, 30)
    assert torch.equal(A.patch_mask(y, 0.0, 8, g), y)
    assert (A.patch_mask(y, 1.0, 8, g) == 0).all()


def test_profile_errors() -> None:
    with pytest.raises(ValueError, match="beclr_strong"):
        A.build_augment("autoaugment", 32, (0.5,), (0.5,))
    with pytest.raises(ValueError, match="unknown augmentation option"):
        A.build_augment("standard", 32, (0.5,), (0.5,), colour_jitter=(0.4, 0.4, 0.4, 0.1))
    with pytest.raises(ValueError, match="probability"):
        A.build_augment("standard", 32, (0.5,), (0.5,), hflip=1.5)
    with pytest.raises(ValueError, match="mean and std"):
        A.Augment(size=8, mean=(0.5, 0.5), std=(0.5,))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu_geometry_and_runs() -> None:
    q = _uint8(b=8, h=40, w=40).cuda()
    for profile in A.PROFILES:
        aug = A.build_augment(profile, 32, (0.5, 0.5, 0.5), (0.2, 0.2, 0.2))
        out = aug(q, torch.Generator(device="cuda").manual_seed(0))
        assert out.device.type == "cuda" and out.shape == (8, 3, 32, 32)
    with pytest.raises(ValueError, match="generator"):
        A.build_augment("standard", 32, (0.5,), (0.5,))(q, torch.Generator())  # CPU generator, CUDA batch
    x = q.float() / 255
    sig = torch.tensor([0.5, 1.0, 1.5, 2.0] * 2, device="cuda")
    torch.testing.assert_close(A.gaussian_blur(x, sig, 9).cpu(), A.gaussian_blur(x.cpu(), sig.cpu(), 9),
                               atol=1e-5, rtol=0)
    torch.testing.assert_close(A.adjust_hue(x, sig / 10).cpu(), A.adjust_hue(x.cpu(), sig.cpu() / 10),
                               atol=1e-5, rtol=0)
