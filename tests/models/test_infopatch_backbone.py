"""InfoPatch's ResNet-12 (seed 004): map shape, dropout layout, and the DropBlock keep-rate schedule kept in the
model's state (saved, resumed, not advanced by evaluation forwards)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from studylib.models import BACKBONES, build_backbone
from studylib.models.backbones import DropBlock, ResNet12

TINY = {"widths": (4, 4, 6, 8)}


@pytest.fixture(autouse=True)
def _threads():
    torch.set_num_threads(1)
    torch.manual_seed(0)


def test_registered_and_84px_gives_11x11x512_map() -> None:
    assert "resnet12_infopatch" in BACKBONES
    m = build_backbone("resnet12_infopatch").eval()
    assert m.out_dim == 512 and m.map_channels == 512
    x = torch.randn(1, 3, 84, 84)
    with torch.no_grad():
        fm = m.feature_map(x)
        pooled = m(x)
    assert fm.shape == (1, 512, 11, 11)
    torch.testing.assert_close(pooled, fm.mean(dim=(2, 3)))  # the evaluation pools the map
    assert int(m.drop_step) == 0  # evaluation forwards do not advance the schedule


def test_infopatch_layout_is_the_codes() -> None:
    m = build_backbone("resnet12_infopatch", **TINY)
    assert isinstance(m, ResNet12)  # an extension of the MetaOptNet ResNet-12, not a third one
    dropouts = [x for x in m.blocks if isinstance(x, nn.Dropout)]
    assert len(dropouts) == 2 and all(d.p == 0.1 for d in dropouts)  # after blocks 1-2
    blocks = [b for b in m.blocks if not isinstance(b, nn.Dropout)]
    assert [isinstance(b.pool, nn.MaxPool2d) for b in blocks] == [True, True, True, False]
    assert [isinstance(b.drop_block, DropBlock) for b in blocks] == [False, False, True, True]
    for b in blocks[2:]:
        assert b.drop_block.block_size == 5 and b.drop_block.per_channel
    assert m.drop_ramp_steps == 40000
    # the switch: no early dropout
    off = build_backbone("resnet12_infopatch", early_dropout=False, **TINY)
    assert not any(isinstance(x, nn.Dropout) for x in off.blocks)
    # 32 px (FC100) gives a 4x4 map
    with torch.no_grad():
        assert off.eval().feature_map(torch.randn(1, 3, 32, 32)).shape == (1, 8, 4, 4)


def test_constant_rate_resnet12_state_dict_unchanged() -> None:
    assert "drop_step" not in ResNet12(widths=(4, 4, 4, 4)).state_dict()


def _rates(m: ResNet12) -> list[float]:
    return [d.drop_rate for d in m.modules() if isinstance(d, DropBlock)]


def test_keep_rate_ramp_eval_does_not_advance_and_resume() -> None:
    ramp = 4
    m = ResNet12(widths=(4, 4, 6, 8), pool_last=False, drop_rate=0.1, drop_ramp_steps=ramp)
    x = torch.randn(2, 3, 24, 24)
    assert m.keep_rate(0) == 1.0
    expected = [max(1 - 0.1 * t / ramp, 0.9) for t in range(1, 7)]
    assert [m.keep_rate(t) for t in range(1, 7)] == pytest.approx(expected)
    m.train()
    for t in range(1, 4):
        m(x)
        assert int(m.drop_step) == t
        assert _rates(m) == pytest.approx([1 - expected[t - 1]] * 2)
    # evaluation forwards leave the clock alone
    m.eval()
    with torch.no_grad():
        m(x)
        m.feature_map(x)
    assert int(m.drop_step) == 3
    # saved and resumed with the weights
    state = m.state_dict()
    assert int(state["drop_step"]) == 3
    fresh = ResNet12(widths=(4, 4, 6, 8), pool_last=False, drop_rate=0.1, drop_ramp_steps=ramp)
    fresh.load_state_dict(state)
    assert int(fresh.drop_step) == 3 and fresh.keep_rate() == pytest.approx(expected[2])
    # the resumed model's next training forward equals the uninterrupted one's (same RNG draws)
    m.train()
    fresh.train()
    torch.manual_seed(5)
    a = m(x)
    torch.manual_seed(5)
    b = fresh(x)
    torch.testing.assert_close(a, b)
    assert int(m.drop_step) == int(fresh.drop_step) == 4
    assert _rates(fresh) == pytest.approx([0.1, 0.1])  # ramp finished: keep rate 1 - 0.1
    for _ in range(3):
        fresh(x)
    assert fresh.keep_rate() == pytest.approx(0.9)  # stays at 1 - drop_rate after the ramp


def test_per_channel_dropblock_masks_differ_across_channels() -> None:
    torch.manual_seed(1)
    x = torch.ones(2, 16, 11, 11)
    shared = DropBlock(5, 0.3).train()(x)
    per = DropBlock(5, 0.3, per_channel=True).train()(x)
    # shared: every channel has the same zero pattern; per-channel: they differ
    assert torch.equal(shared[:, :1].expand_as(shared) == 0, shared == 0)
    assert not torch.equal(per[:, :1].expand_as(per) == 0, per == 0)
    # kept activations are rescaled so the mean is preserved
    assert float(per.mean()) == pytest.approx(1.0, rel=1e-5)
    assert float(shared.mean()) == pytest.approx(1.0, rel=1e-5)
