"""Feature extractors shared by the five methods.

Every backbone is an ``nn.Module`` with

* ``out_dim: int`` -- the size of the pooled feature vector;
* ``feature_map(x: [B, C, H, W]) -> [B, map_channels, h, w]`` -- the last spatial map (used by InfoPatch's
  per-position losses and by anything that needs patches);
* ``forward(x: [B, C, H, W]) -> [B, out_dim]`` -- global average pool of ``feature_map`` (or, for
  :class:`Conv4` with ``pool="flatten"``, the flattened map as in Snell et al. 2017).

``map_channels == out_dim`` for every backbone except a flattening :class:`Conv4` (there
``out_dim = map_channels * h * w``).

Architectures (facts from the authors' code, see ``shared/PAPER-NOTES.md``):

* :class:`Conv4` -- Snell et al. 2017 / Vinyals et al. 2016: four blocks conv3x3-BN-ReLU-maxpool2.
  Stochastic Prototype Embeddings (seed 002, App. B) needs a last block with ``2d`` filters and no BN/ReLU:
  ``last_block_plain=True``.
* :class:`ResNet12Basic` -- the "ResNet-12" of seed 000's code (really a ResNet-11): BasicBlocks of two convs,
  layers [1, 1, 2, 1], widths 64-160-320-640, 3x3 stride-1 stem, no max-pool, stage strides 1-2-2-2
  (as in their code), so an 84x84 input gives an 11x11 map and a 32x32 input a 4x4 map.
* :class:`ResNet12` -- the MetaOptNet / FEAT / InfoPatch ResNet-12: 3 convs per block with BN and
  LeakyReLU(0.1), 1x1 conv-BN shortcut, a 2x2 max-pool after each block and DropBlock in blocks 3-4.
  :func:`resnet12_infopatch` (registry name ``"resnet12_infopatch"``) is its InfoPatch configuration:
  64-128-256-512, no pool after block 4 (84 px -> 11x11x512 map), dropout in blocks 1-2, a DropBlock keep
  rate ramped by a counter kept in the model's state.
* :class:`TorchvisionResNet` -- torchvision's ResNet-18/50 with the classifier removed (BECLR).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn


def _spatial_after_pools(size: int, n_pools: int, ceil_mode: bool = False) -> int:
    """Side length after ``n_pools`` 2x2 stride-2 max-pools (floor or ceil mode)."""
    for _ in range(n_pools):
        size = math.ceil(size / 2) if ceil_mode else size // 2
    return size


class MaxPool2x2(nn.MaxPool2d):
    """``nn.MaxPool2d(2)`` (stride 2, floor or ceil mode) with a faster CPU forward where no gradient is taken.

    ``[B, C, H, W] -> [B, C, H', W']``, ``H' = floor(H/2)`` (``ceil(H/2)`` in ceil mode). PyTorch's CPU
    max-pool kernel without indices costs as much as the 3x3 convolution before it on the study's 2-core CPU
    (4-14x what the elementwise maximum of the window's four strided views costs, measured op by op; whole
    evaluation forwards 1.1-2.2x: ``benchmarks/bench_maxpool.py``).
    A maximum involves no rounding, so the two give the same tensor bit for bit (the tests compare their bits,
    NaNs, ties and odd sizes included), and evaluation numbers do not change. Where a gradient
    is taken (training), or on another device, PyTorch's kernel runs as before, so training is untouched.
    It is an ``nn.MaxPool2d(2)`` (no parameters or buffers; ``state_dict`` keys unchanged).
    """

    def __init__(self, ceil_mode: bool = False) -> None:
        super().__init__(2, ceil_mode=ceil_mode)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2:]
        if (x.device.type != "cpu" or (torch.is_grad_enabled() and x.requires_grad) or x.dim() != 4
                or min(h, w) < 2):  # (a side under 2: PyTorch's kernel names the error)
            return F.max_pool2d(x, 2, ceil_mode=self.ceil_mode)
        if self.ceil_mode and (h % 2 or w % 2):  # the partial last window: pad with -inf, which never wins
            x = F.pad(x, (0, w % 2, 0, h % 2), value=float("-inf"))
            h, w = x.shape[-2:]
        x = x[..., : h - h % 2, : w - w % 2]
        top = torch.maximum(x[..., 0::2, 0::2], x[..., 0::2, 1::2])
        return torch.maximum(top, torch.maximum(x[..., 1::2, 0::2], x[..., 1::2, 1::2]))


# ----------------------------------------------------------------------------------------------------- Conv4


class Conv4(nn.Module):
    """Four-block ConvNet of Snell et al. 2017 (Sec. 3.2): ``[conv3x3(hidden) - BN - ReLU - maxpool2] x 4``.

    Spatial sizes: 28 -> 1x1 (Omniglot), 32 -> 2x2, 84 -> 5x5 (miniImageNet), 64 -> 4x4.

    Args:
        in_channels: input channels (1 for Omniglot, 3 for RGB).
        hidden: filters of the first three blocks (64 in Snell et al.).
        out_channels: filters of the last block (default ``hidden``). SPE (seed 002, App. B) uses ``2 d``:
            the first ``d`` channels are the mean, the last ``d`` the variance pre-activation.
        pool: ``"avg"`` -- ``forward`` global-average-pools the map (``out_dim = out_channels``);
            ``"flatten"`` -- ``forward`` flattens it as Snell et al. do (28 px: 64x1x1 = 64; 84 px:
            64x5x5 = 1600); then ``input_size`` is required to know ``out_dim``. On 28x28 inputs both agree.
        input_size: input side length, required for ``pool="flatten"`` (the map size is checked at run time).
        last_block_plain: the last block is conv3x3 + maxpool2 only (no BN, no ReLU), so its outputs are
            unconstrained real numbers (SPE's mean and variance pre-activation). The max-pool is kept so the
            spatial size matches the ordinary Conv4.
        depth: number of blocks (4; SPE's synthetic 64-px network, seed 002 App. A.2, adds two: 6).
    """

    def __init__(
        self,
        in_channels: int = 3,
        hidden: int = 64,
        out_channels: int | None = None,
        pool: Literal["avg", "flatten"] = "avg",
        input_size: int | None = None,
        last_block_plain: bool = False,
        depth: int = 4,
    ) -> None:
        super().__init__()
        if depth < 1:
            raise ValueError(f"Conv4: depth must be >= 1 block, got {depth}")
        if pool not in ("avg", "flatten"):
            raise ValueError(f"Conv4: pool must be 'avg' or 'flatten', got {pool!r}")
        if pool == "flatten" and input_size is None:
            raise ValueError("Conv4(pool='flatten') needs input_size (e.g. 28 or 84) to know out_dim; "
                             "pass input_size=... or use pool='avg'")
        out_channels = hidden if out_channels is None else out_channels
        chans = [in_channels] + [hidden] * (depth - 1) + [out_channels]
        blocks: list[nn.Module] = []
        for k in range(depth):
            plain = last_block_plain and k == depth - 1
            layers: list[nn.Module] = [nn.Conv2d(chans[k], chans[k + 1], 3, padding=1)]
            if not plain:
                layers += [nn.BatchNorm2d(chans[k + 1]), nn.ReLU(inplace=True)]
            layers.append(MaxPool2x2())
            blocks.append(nn.Sequential(*layers))
        self.blocks = nn.Sequential(*blocks)
        self.pool = pool
        self.input_size = input_size
        self.map_channels = out_channels
        if pool == "flatten":
            s = _spatial_after_pools(int(input_size), depth)  # type: ignore[arg-type]
            if s < 1:
                raise ValueError(f"Conv4: input_size {input_size} is too small for {depth} 2x2 max-pools "
                                 f"(>= {2 ** depth})")
            self.map_size = s
            self.out_dim = out_channels * s * s
        else:
            self.map_size = None
            self.out_dim = out_channels

    def feature_map(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, C, H, W] -> [B, out_channels, H/2^depth, W/2^depth]`` (floor at each pool)."""
        return self.blocks(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, C, H, W] -> [B, out_dim]``."""
        m = self.feature_map(x)
        if self.pool == "avg":
            return m.mean(dim=(2, 3))
        if m.shape[-2:] != (self.map_size, self.map_size):
            raise ValueError(f"Conv4(pool='flatten') was built for {self.input_size}x{self.input_size} inputs "
                             f"({self.map_size}x{self.map_size} map) but got a {tuple(m.shape[-2:])} map from a "
                             f"{tuple(x.shape[-2:])} input; resize the input or rebuild with input_size")
        return m.flatten(1)


# --------------------------------------------------------------------------------------- ResNet-12 (seed 000)


class BasicBlock(nn.Module):
    """He et al. 2016 basic block: conv3x3-BN-ReLU-conv3x3-BN (+ 1x1 conv-BN shortcut when shapes change)."""

    def __init__(self, in_planes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False),
                                          nn.BatchNorm2d(planes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)), inplace=True)
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x), inplace=True)


class ResNet12Basic(nn.Module):
    """The "ResNet-12" of seed 000's code (a ResNet-11: 1 stem conv + 5 blocks x 2 convs, no final linear).

    Stem conv3x3(64) stride 1 - BN - ReLU, no max-pool; stages of BasicBlocks ``layers = [1, 1, 2, 1]``
    with widths 64-160-320-640 and strides 1-2-2-2 (the stride is in each stage's first block, as in the
    authors' code); global average pool to 640-d. Maps: 84 -> 11x11, 32 -> 4x4, 28 -> 4x4.
    Kaiming-normal (fan_out) convolution init, BN weight 1 / bias 0, as in their code.

    Args:
        in_channels: input channels.
        widths: the four stage widths.
        layers: blocks per stage.
        zero_init_residual: zero the last BN of each block (off in the authors' runs).
    """

    def __init__(
        self,
        in_channels: int = 3,
        widths: tuple[int, int, int, int] | list[int] = (64, 160, 320, 640),
        layers: tuple[int, int, int, int] | list[int] = (1, 1, 2, 1),
        zero_init_residual: bool = False,
    ) -> None:
        super().__init__()
        if len(widths) != 4 or len(layers) != 4:
            raise ValueError(f"ResNet12Basic: widths and layers need 4 entries, got {widths} and {layers}")
        self.stem = nn.Sequential(nn.Conv2d(in_channels, 64, 3, stride=1, padding=1, bias=False),
                                  nn.BatchNorm2d(64), nn.ReLU(inplace=True))
        stages: list[nn.Module] = []
        in_planes = 64
        for i, (w, n) in enumerate(zip(widths, layers)):
            blocks: list[nn.Module] = []
            for j in range(n):
                blocks.append(BasicBlock(in_planes, w, stride=2 if (i > 0 and j == 0) else 1))
                in_planes = w
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        self.out_dim = int(widths[-1])
        self.map_channels = self.out_dim
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        if zero_init_residual:
            for m in self.modules():
                if isinstance(m, BasicBlock):
                    nn.init.zeros_(m.bn2.weight)

    def feature_map(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, C, H, W] -> [B, 640, ceil(H/8), ceil(W/8)]``."""
        return self.stages(self.stem(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, C, H, W] -> [B, out_dim]`` by global average pooling."""
        return self.feature_map(x).mean(dim=(2, 3))


# ------------------------------------------------------------------------------- ResNet-12 (MetaOptNet/FEAT)


class DropBlock(nn.Module):
    """DropBlock (Ghiasi et al. 2018, Alg. 1) for ``[B, C, H, W]`` maps, active only in training.

    Block centres are drawn Bernoulli(gamma) over the positions where a whole ``block_size`` block fits,
    with ``gamma = drop_rate / block_size^2 * (H W) / ((H - bs + 1)(W - bs + 1))`` (their Eq. 1), expanded to
    blocks by a stride-1 max-pool, and the kept activations are rescaled by ``numel / kept``. The mask is
    shared across channels (as in MetaOptNet / FEAT). Written here because torchvision's ``drop_block2d``
    draws the mask per channel and has no per-run schedule hook; ``drop_rate`` is a plain attribute that a
    training loop may ramp (MetaOptNet ramps it linearly over the first epochs; :class:`ResNet12` with
    ``drop_ramp_steps`` does it itself, from a counter in its state). ``per_channel=True`` draws one mask per
    channel instead, as InfoPatch's code (seed 004, ``resnet.py``) does.
    """

    def __init__(self, block_size: int = 5, drop_rate: float = 0.1, per_channel: bool = False) -> None:
        super().__init__()
        if block_size < 1:
            raise ValueError(f"DropBlock: block_size must be >= 1, got {block_size}")
        if not 0.0 <= drop_rate < 1.0:
            raise ValueError(f"DropBlock: drop_rate must lie in [0, 1), got {drop_rate}")
        self.block_size = block_size
        self.drop_rate = drop_rate
        self.per_channel = per_channel

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.drop_rate <= 0.0:
            return x
        b, c, h, w = x.shape
        bs = min(self.block_size, h, w)
        vh, vw = h - bs + 1, w - bs + 1
        gamma = self.drop_rate / (bs * bs) * (h * w) / (vh * vw)
        centres = (torch.rand(b, c if self.per_channel else 1, vh, vw, device=x.device) < gamma).to(x.dtype)
        # Pad so that a centre at (i, j) of the valid grid covers rows i..i+bs-1, then dilate by max-pool.
        centres = F.pad(centres, (bs - 1, bs - 1, bs - 1, bs - 1))
        block = F.max_pool2d(centres, kernel_size=bs, stride=1)  # [B, 1 or C, h, w]
        keep = 1.0 - block
        scale = keep.numel() / keep.sum().clamp_min(1.0)
        return x * keep * scale


class ResNet12Block(nn.Module):
    """MetaOptNet block: 3 x (conv3x3-BN) with LeakyReLU(0.1) between, 1x1 conv-BN shortcut, LeakyReLU,
    optional 2x2 max-pool, then optional DropBlock."""

    def __init__(self, in_planes: int, planes: int, pool: bool, ceil_mode: bool,
                 drop_block: DropBlock | None) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes)
        self.shortcut = nn.Sequential(nn.Conv2d(in_planes, planes, 1, bias=False), nn.BatchNorm2d(planes))
        self.pool: nn.Module = MaxPool2x2(ceil_mode) if pool else nn.Identity()
        self.drop_block: nn.Module = drop_block if drop_block is not None else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.leaky_relu(self.bn1(self.conv1(x)), 0.1)
        out = F.leaky_relu(self.bn2(self.conv2(out)), 0.1)
        out = self.bn3(self.conv3(out))
        out = F.leaky_relu(out + self.shortcut(x), 0.1)
        return self.drop_block(self.pool(out))


class ResNet12(nn.Module):
    """ResNet-12 of MetaOptNet (Lee et al. 2019) / FEAT / InfoPatch (seed 004).

    Four :class:`ResNet12Block` s; DropBlock on blocks 3-4 (MetaOptNet: block size 5, rate 0.1).

    Args:
        in_channels: input channels.
        widths: block widths (64-160-320-640 MetaOptNet/FEAT; InfoPatch uses 64-128-256-512).
        pool_last: max-pool after the fourth block too (84 px -> 5x5 map). InfoPatch: ``False``.
        ceil_mode: max-pool rounding. ``None`` (default) picks ceil when ``pool_last=False`` so that
            84 px -> 42 -> 21 -> 11, InfoPatch's 11x11 map, and floor otherwise (MetaOptNet's 5x5).
        drop_rate: DropBlock rate (0 disables it); with ``drop_ramp_steps`` the final rate of the ramp.
        block_size: DropBlock block size.
        early_dropout: MetaOptNet/FEAT/InfoPatch code also apply plain dropout of ``drop_rate`` after blocks 1-2;
            off by default (the seeds' papers name only DropBlock).
        drop_ramp_steps: ``None``: the DropBlock rate is the constant ``drop_rate`` (or whatever
            :meth:`set_drop_rate` set). An integer ``R``: the keep rate is ramped linearly,
            ``keep(t) = max(1 - drop_rate * t / R, 1 - drop_rate)`` at the ``t``-th training forward (``t``
            starts at 1, as the code's counter is incremented before use; InfoPatch / FEAT code: ``R = 20*2000``).
            The counter ``t`` is the buffer ``drop_step``: it is in the ``state_dict`` (saved and resumed with the
            weights) and only forwards in training mode advance it. (The authors' counter is a Python int that
            also advances on evaluation forwards and is lost on a restart.)
        drop_block_per_channel: one DropBlock mask per channel (InfoPatch's code) instead of one per image.
    """

    def __init__(
        self,
        in_channels: int = 3,
        widths: tuple[int, int, int, int] | list[int] = (64, 160, 320, 640),
        pool_last: bool = True,
        ceil_mode: bool | None = None,
        drop_rate: float = 0.1,
        block_size: int = 5,
        early_dropout: bool = False,
        drop_ramp_steps: int | None = None,
        drop_block_per_channel: bool = False,
    ) -> None:
        super().__init__()
        if len(widths) != 4:
            raise ValueError(f"ResNet12: widths needs 4 entries, got {widths}")
        if drop_ramp_steps is not None and drop_ramp_steps < 1:
            raise ValueError(f"ResNet12: drop_ramp_steps must be >= 1 forwards (or None: no ramp), got {drop_ramp_steps}")
        ceil = (not pool_last) if ceil_mode is None else ceil_mode
        blocks: list[nn.Module] = []
        prev = in_channels
        for i, w in enumerate(widths):
            db = DropBlock(block_size, drop_rate, per_channel=drop_block_per_channel) if (i >= 2 and drop_rate > 0) else None
            blocks.append(ResNet12Block(prev, w, pool=(i < 3 or pool_last), ceil_mode=ceil, drop_block=db))
            if i < 2 and early_dropout and drop_rate > 0:
                blocks.append(nn.Dropout(drop_rate))
            prev = w
        self.blocks = nn.Sequential(*blocks)
        self.out_dim = int(widths[-1])
        self.map_channels = self.out_dim
        self.drop_rate = float(drop_rate)
        self.drop_ramp_steps = drop_ramp_steps
        if drop_ramp_steps is not None:
            # Training forwards seen so far (the DropBlock schedule's clock; saved with the weights). Only models
            # with a ramp have it, so the state dicts of existing constant-rate ResNet-12 runs are unchanged.
            self.register_buffer("drop_step", torch.zeros((), dtype=torch.long))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="leaky_relu", a=0.1)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def set_drop_rate(self, rate: float) -> None:
        """Set the DropBlock rate of blocks 3-4 (for a schedule run by the training loop; with
        ``drop_ramp_steps`` the model's own ramp overrides it at the next training forward)."""
        for m in self.modules():
            if isinstance(m, DropBlock):
                m.drop_rate = float(rate)

    def keep_rate(self, step: int | None = None) -> float:
        """DropBlock keep rate at training forward ``step`` (default: the current ``drop_step``)."""
        if self.drop_ramp_steps is None:
            return 1.0 - self.drop_rate
        t = int(self.drop_step) if step is None else int(step)
        return max(1.0 - self.drop_rate * t / self.drop_ramp_steps, 1.0 - self.drop_rate)

    def feature_map(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, C, 84, 84] -> [B, widths[-1], 5, 5]`` (``pool_last``) or ``[..., 11, 11]`` (InfoPatch)."""
        if self.training and self.drop_ramp_steps is not None:
            self.drop_step += 1
            self.set_drop_rate(1.0 - self.keep_rate())
        return self.blocks(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, C, H, W] -> [B, out_dim]`` by global average pooling."""
        return self.feature_map(x).mean(dim=(2, 3))


def resnet12_infopatch(in_channels: int = 3, **kwargs) -> ResNet12:
    """InfoPatch's ResNet-12 (seed 004, the authors' ``resnet.py``) as a spatial-map backbone.

    64-128-256-512, 3 convs per block, LeakyReLU(0.1), max-pool (ceil mode) after blocks 1-3 only, so 84 px
    gives an 11x11x512 map (32 px: 4x4); DropBlock (block 5, rate 0.1, one mask per channel) in blocks 3-4 with
    the keep rate ramped linearly over ``20 * 2000`` training forwards; plain dropout 0.1 after blocks 1-2
    (``early_dropout``, the code's, on by default). ``forward`` pools the map (what the evaluation uses);
    ``feature_map`` is what the InfoPatch losses use. Any :class:`ResNet12` argument can be overridden.
    """
    opts: dict = {"widths": (64, 128, 256, 512), "pool_last": False, "drop_rate": 0.1, "block_size": 5,
                  "early_dropout": True, "drop_ramp_steps": 20 * 2000, "drop_block_per_channel": True}
    opts.update(kwargs)
    return ResNet12(in_channels=in_channels, **opts)


# ---------------------------------------------------------------------------------------- torchvision ResNets


class TorchvisionResNet(nn.Module):
    """torchvision ResNet-18/50 (random init, ``weights=None``: nothing is downloaded) without its ``fc``.

    Args:
        arch: ``"resnet18"`` (out_dim 512) or ``"resnet50"`` (out_dim 2048).
        in_channels: input channels; the stem conv is rebuilt when it is not 3.
        small_input: for inputs of <= 64 px (CIFAR-FS, FC100, 84-px miniImageNet in some SSL codebases):
            the 7x7 stride-2 stem becomes conv3x3 stride 1 and the stem max-pool is dropped
            (32 px -> 4x4 map instead of 1x1).
        zero_init_residual: torchvision's option of that name.
    """

    def __init__(self, arch: Literal["resnet18", "resnet50"] = "resnet18", in_channels: int = 3,
                 small_input: bool = False, zero_init_residual: bool = False) -> None:
        super().__init__()
        import torchvision

        builders = {"resnet18": torchvision.models.resnet18, "resnet50": torchvision.models.resnet50}
        if arch not in builders:
            raise ValueError(f"TorchvisionResNet: arch must be one of {sorted(builders)}, got {arch!r}")
        net = builders[arch](weights=None, zero_init_residual=zero_init_residual)
        if small_input:
            net.conv1 = nn.Conv2d(in_channels, 64, 3, stride=1, padding=1, bias=False)
            net.maxpool = nn.Identity()
        elif in_channels != 3:
            net.conv1 = nn.Conv2d(in_channels, 64, 7, stride=2, padding=3, bias=False)
        if small_input or in_channels != 3:
            nn.init.kaiming_normal_(net.conv1.weight, mode="fan_out", nonlinearity="relu")
        self.out_dim = int(net.fc.in_features)
        self.map_channels = self.out_dim
        net.fc = nn.Identity()
        self.net = net

    def feature_map(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, C, H, W] -> [B, out_dim, H/32, W/32]`` (``H/8`` with ``small_input``)."""
        n = self.net
        x = n.maxpool(n.relu(n.bn1(n.conv1(x))))
        return n.layer4(n.layer3(n.layer2(n.layer1(x))))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, C, H, W] -> [B, out_dim]`` by global average pooling."""
        return self.feature_map(x).mean(dim=(2, 3))


def resnet18(in_channels: int = 3, small_input: bool = False, **kwargs) -> TorchvisionResNet:
    """torchvision ResNet-18 trunk, ``out_dim = 512``."""
    return TorchvisionResNet("resnet18", in_channels=in_channels, small_input=small_input, **kwargs)


def resnet50(in_channels: int = 3, small_input: bool = False, **kwargs) -> TorchvisionResNet:
    """torchvision ResNet-50 trunk, ``out_dim = 2048``."""
    return TorchvisionResNet("resnet50", in_channels=in_channels, small_input=small_input, **kwargs)
