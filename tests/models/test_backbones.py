"""Backbones, DropBlock, heads and the registry."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import torchvision
from torch import nn

from studylib.models import BACKBONES, MLP, build_backbone
from studylib.models.backbones import Conv4, DropBlock, MaxPool2x2, ResNet12, ResNet12Basic


@pytest.fixture(autouse=True)
def _threads():
    torch.set_num_threads(1)
    torch.manual_seed(0)


def _x(size: int, c: int = 3, b: int = 2) -> torch.Tensor:
    return torch.randn(b, c, size, size)


SMALL_R12 = {"widths": (8, 12, 16, 20)}

CASES = [
    # name, kwargs, input size, expected map side
    ("conv4", {}, 28, 1), ("conv4", {}, 32, 2), ("conv4", {}, 84, 5),
    ("resnet12_basic", {"widths": (8, 12, 16, 20)}, 28, 4),
    ("resnet12_basic", {"widths": (8, 12, 16, 20)}, 32, 4),
    ("resnet12_basic", {"widths": (8, 12, 16, 20)}, 84, 11),
    ("resnet12", SMALL_R12, 28, 1), ("resnet12", SMALL_R12, 32, 2), ("resnet12", SMALL_R12, 84, 5),
    ("resnet12", {**SMALL_R12, "pool_last": False}, 84, 11),
    ("resnet18", {}, 32, 1), ("resnet18", {}, 84, 3),
    ("resnet18", {"small_input": True}, 28, 4), ("resnet18", {"small_input": True}, 32, 4),
]


@pytest.mark.parametrize("name,kwargs,size,side", CASES)
def test_shapes_and_pooling_consistency(name: str, kwargs: dict, size: int, side: int) -> None:
    m = build_backbone(name, in_channels=3, **kwargs).eval()
    x = _x(size)
    with torch.no_grad():
        fm = m.feature_map(x)
        f = m(x)
    assert fm.shape == (2, m.map_channels, side, side)
    assert f.shape == (2, m.out_dim) and f.dtype == torch.float32
    torch.testing.assert_close(f, fm.mean(dim=(2, 3)))


def test_default_widths_and_out_dims() -> None:
    assert build_backbone("conv4").out_dim == 64
    assert build_backbone("resnet12_basic").out_dim == 640
    assert build_backbone("resnet12").out_dim == 640
    info = build_backbone("resnet12", widths=(64, 128, 256, 512), pool_last=False)
    assert info.out_dim == 512
    with torch.no_grad():
        assert info.eval().feature_map(_x(84, b=1)).shape == (1, 512, 11, 11)  # InfoPatch's 11x11 map
    assert build_backbone("resnet18").out_dim == 512
    r50 = build_backbone("resnet50", small_input=True)
    assert r50.out_dim == 2048
    with torch.no_grad():
        assert r50.eval()(_x(16, b=1)).shape == (1, 2048)


def test_conv4_flatten_and_plain_last_block() -> None:
    m = Conv4(in_channels=1, pool="flatten", input_size=28).eval()
    assert m.out_dim == 64
    x = _x(28, c=1)
    with torch.no_grad():
        torch.testing.assert_close(m(x), m.feature_map(x).flatten(1))
    m84 = Conv4(pool="flatten", input_size=84).eval()
    assert m84.out_dim == 1600  # 64 x 5 x 5, Snell et al. on miniImageNet
    with torch.no_grad():
        assert m84(_x(84)).shape == (2, 1600)
        with pytest.raises(ValueError, match="input_size"):
            m84(_x(32))
    with pytest.raises(ValueError, match="input_size"):
        Conv4(pool="flatten")
    spe = Conv4(in_channels=1, out_channels=2 * 16, last_block_plain=True)
    last = list(spe.blocks[-1])
    assert [type(l) for l in last] == [nn.Conv2d, MaxPool2x2] and last[0].out_channels == 32
    with torch.no_grad():
        out = spe.eval()(_x(28, c=1, b=8))
    assert out.shape == (8, 32) and (out < 0).any()  # no ReLU at the end: real-valued means/variances
    assert sum(isinstance(l, nn.BatchNorm2d) for l in spe.modules()) == 3


def test_conv4_gradients_match_finite_differences() -> None:
    m = Conv4(in_channels=1, hidden=3, out_channels=2).double().eval()
    x = torch.randn(2, 1, 16, 16, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: m(t), (x,), eps=1e-6, atol=1e-5)


@pytest.mark.parametrize("name,kwargs,size", [("conv4", {}, 28), ("resnet12_basic", {"widths": (4, 6, 8, 10)}, 32),
                                              ("resnet12", {"widths": (4, 6, 8, 10)}, 32),
                                              ("resnet18", {"small_input": True}, 16)])
def test_gradient_reaches_every_parameter(name: str, kwargs: dict, size: int) -> None:
    m = build_backbone(name, in_channels=1, **kwargs).train()
    x = _x(size, c=1, b=4).requires_grad_(True)
    (m(x) ** 2).sum().backward()
    for pname, p in m.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), pname
    assert x.grad is not None and x.grad.abs().sum() > 0
    first_conv = next(mod for mod in m.modules() if isinstance(mod, nn.Conv2d))
    assert first_conv.weight.grad.abs().sum() > 0


def test_resnet12_basic_is_the_authors_resnet11() -> None:
    m = ResNet12Basic()
    convs = [mod for mod in m.modules() if isinstance(mod, nn.Conv2d)]
    assert sum(c.kernel_size == (3, 3) for c in convs) == 11  # stem + 5 blocks x 2
    assert sum(c.kernel_size == (1, 1) for c in convs) == 3  # shortcuts of stages 2-4
    assert convs[0].stride == (1, 1) and not any(isinstance(mod, nn.MaxPool2d) for mod in m.modules())
    assert [len(s) for s in m.stages] == [1, 1, 2, 1]
    r12 = ResNet12()
    assert sum(isinstance(mod, nn.Conv2d) and mod.kernel_size == (3, 3) for mod in r12.modules()) == 12
    assert sum(isinstance(mod, nn.LeakyReLU) for mod in r12.modules()) == 0  # functional leaky_relu(0.1)


def test_dropblock_statistics_and_eval_identity() -> None:
    db = DropBlock(block_size=5, drop_rate=0.1)
    x = torch.ones(200, 3, 40, 40)
    db.eval()
    assert torch.equal(db(x), x)
    db.train()
    y = db(x)
    dropped = y == 0
    assert torch.equal(dropped, dropped[:, :1].expand_as(dropped))  # one mask shared by the channels
    frac = dropped.float().mean()
    assert 0.06 < frac < 0.14, frac  # gamma of Ghiasi et al. Eq. 1 targets ~drop_rate (blocks overlap)
    torch.testing.assert_close(y.mean(), torch.tensor(1.0))  # rescaled by numel / kept
    # Dropped pixels come in whole 5x5 blocks: every dropped pixel lies in some fully dropped 5x5 window.
    d = dropped[:, :1].float()
    windows = nn.functional.avg_pool2d(d, 5, stride=1).eq(1).float()  # [B, 1, 36, 36] fully dropped windows
    full = nn.functional.max_pool2d(nn.functional.pad(windows, (4, 4, 4, 4)), 5, stride=1)  # back to 40x40
    assert torch.equal(full.bool() | ~dropped[:, :1], torch.ones_like(full, dtype=torch.bool))


def test_resnet12_dropblock_only_in_training() -> None:
    m = ResNet12(widths=(4, 6, 8, 10), drop_rate=0.3, block_size=2)
    x = _x(32, b=4)
    m.eval()
    with torch.no_grad():
        assert torch.equal(m(x), m(x))
        m.train()
        a, b = m(x), m(x)
    assert not torch.equal(a, b)
    m.set_drop_rate(0.0)
    with torch.no_grad():
        assert torch.equal(m(x), m(x))
    assert sum(isinstance(mod, DropBlock) for mod in ResNet12().modules()) == 2  # blocks 3 and 4


def test_torchvision_resnet_matches_torchvision() -> None:
    m = build_backbone("resnet18").eval()
    ref = torchvision.models.resnet18(weights=None)
    ref.fc = nn.Identity()
    ref.load_state_dict(m.net.state_dict())
    x = _x(64)
    with torch.no_grad():
        torch.testing.assert_close(m(x), ref.eval()(x))
    small = build_backbone("resnet18", in_channels=1, small_input=True)
    assert small.net.conv1.kernel_size == (3, 3) and small.net.conv1.stride == (1, 1)
    assert small.net.conv1.in_channels == 1 and isinstance(small.net.maxpool, nn.Identity)
    assert isinstance(small.net.fc, nn.Identity)


def test_registry() -> None:
    assert set(BACKBONES) == {"conv4", "resnet12_basic", "resnet12", "resnet12_infopatch", "resnet18", "resnet50"}
    with pytest.raises(ValueError, match="resnet12_basic"):
        build_backbone("wide_resnet")
    m = build_backbone("conv4", in_channels=1)
    assert m.blocks[0][0].in_channels == 1


def test_mlp_heads() -> None:
    proj = MLP(32, [16, 16], 12, last_bn=True)
    kinds = [type(l) for l in proj.net]
    assert kinds == [nn.Linear, nn.BatchNorm1d, nn.ReLU, nn.Linear, nn.BatchNorm1d, nn.ReLU, nn.Linear,
                     nn.BatchNorm1d]
    z = proj.train()(torch.randn(64, 32))
    assert z.shape == (64, 12)
    torch.testing.assert_close(z.mean(0), torch.zeros(12), atol=1e-5, rtol=0)  # last BN, train mode
    pred = MLP(12, [4], 12)
    assert [type(l) for l in pred.net] == [nn.Linear, nn.BatchNorm1d, nn.ReLU, nn.Linear]
    assert pred.net[-1].bias is not None and proj.net[0].bias is None
    lin = MLP(10, [], 3, bn=False)
    x = torch.randn(5, 10)
    torch.testing.assert_close(lin(x), x @ lin.net[0].weight.T + lin.net[0].bias)


def test_conv4_depth_six_for_64px_and_default_unchanged():
    """Seed 002 App. A.2: two extra blocks for 64-px inputs give a 1x1 map; depth=4 builds the same network."""
    six = build_backbone("conv4", in_channels=3, hidden=8, out_channels=4, last_block_plain=True, depth=6)
    x = torch.randn(2, 3, 64, 64)
    assert six.feature_map(x).shape == (2, 4, 1, 1) and six(x).shape == (2, 4)
    assert len(six.blocks) == 6 and not any(isinstance(m, torch.nn.BatchNorm2d) for m in six.blocks[-1])
    torch.manual_seed(0)
    a = build_backbone("conv4", in_channels=1, hidden=8)
    torch.manual_seed(0)
    b = build_backbone("conv4", in_channels=1, hidden=8, depth=4)
    assert all(torch.equal(p, q) for p, q in zip(a.state_dict().values(), b.state_dict().values()))
    with pytest.raises(ValueError, match="too small for 6 2x2 max-pools"):
        build_backbone("conv4", in_channels=1, pool="flatten", input_size=32, depth=6)


@pytest.mark.parametrize("ceil_mode", [False, True])
@pytest.mark.parametrize("hw", [(8, 8), (7, 9), (21, 21), (5, 4), (1, 3)])
def test_maxpool2x2_equals_pytorchs_kernel_bit_for_bit(ceil_mode: bool, hw: tuple[int, int]) -> None:
    """The fast no-gradient forward against F.max_pool2d: ReLU ties at 0, NaN, -inf, odd sides, floor and ceil
    mode, contiguous, channels-last and strided inputs, compared bit for bit (NaNs by position). (A window
    holding both +0 and -0 may give either zero; ReLU outputs hold no -0, and no later number can tell them
    apart but a division by zero.)"""
    g = torch.Generator().manual_seed(hash(hw) % 1000 + ceil_mode)
    x = torch.randn(3, 5, hw[0], hw[1] + 2, generator=g).relu()  # about half zeros: tied windows
    x[1, 1].view(-1)[0] = float("nan")
    x[2, 2] = float("-inf")
    pool = MaxPool2x2(ceil_mode)
    for inp in (x[..., 1:-1].contiguous(), x[..., 1:-1].contiguous(memory_format=torch.channels_last), x[..., 1:-1]):
        try:
            ref = F.max_pool2d(inp, 2, ceil_mode=ceil_mode)
        except RuntimeError:  # a map too small for the pool: the same error
            with torch.no_grad(), pytest.raises(RuntimeError, match="too small"):
                pool(inp)
            continue
        with torch.no_grad():
            out = pool(inp)
        assert out.shape == ref.shape
        assert torch.equal(out.isnan(), ref.isnan())
        bits = lambda t: torch.nan_to_num(t, nan=7.0).contiguous().view(torch.int32)
        assert torch.equal(bits(out), bits(ref))


def test_maxpool2x2_takes_pytorchs_kernel_where_a_gradient_is_taken() -> None:
    """Training: the same kernel, so the same gradients (first maximum of a tied window) as nn.MaxPool2d."""
    x = torch.randn(2, 3, 6, 6).relu().requires_grad_(True)
    MaxPool2x2()(x).sum().backward()
    g_new = x.grad.clone()
    x.grad = None
    nn.MaxPool2d(2)(x).sum().backward()
    assert torch.equal(g_new, x.grad)


@pytest.mark.parametrize("name, kwargs, size", [("conv4", {"in_channels": 1, "hidden": 16}, 28),
                                                 ("resnet12_infopatch", {}, 84)])
def test_backbone_evaluation_unchanged_by_the_fast_pool(name: str, kwargs: dict, size: int) -> None:
    """A backbone's evaluation features with MaxPool2x2 equal those with nn.MaxPool2d, bit for bit."""
    torch.manual_seed(0)
    net = build_backbone(name, **kwargs).eval()
    x = torch.randn(4, kwargs.get("in_channels", 3), size, size)
    with torch.no_grad():
        fast = net(x)
        for mod in list(net.modules()):
            for child_name, child in list(mod.named_children()):
                if isinstance(child, MaxPool2x2):
                    setattr(mod, child_name, nn.MaxPool2d(2, ceil_mode=child.ceil_mode))
        ref = net(x)
    assert any(type(m) is nn.MaxPool2d for m in net.modules())
    assert torch.equal(fast.view(torch.int32), ref.view(torch.int32))  # bit for bit
