"""Where networks run under bf16 autocast (:mod:`studylib.precision`): CUDA always, the CPU only at the check scale
and only on a CPU with native bf16; what runs under it is exactly ``torch.autocast``'s computation, and with it
off the float32 computation, bit for bit."""

from __future__ import annotations

import os
import sys

import pytest
import torch

from studylib import precision
from studylib.evaluation import extract_features
from studylib.models.backbones import Conv4
from studylib.training.loop import train
from studylib.training.runstore import RunStore, provenance

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "training"))
from test_resume import TinyMethod, _cfg, _split  # noqa: E402


@pytest.fixture(autouse=True)
def _off_afterwards():
    yield
    precision._CPU_AUTOCAST["on"] = False


@pytest.fixture
def native(monkeypatch):
    """Pretend the CPU has native bf16, so the autocast path runs on any CPU (emulated bf16 computes the same)."""
    monkeypatch.setattr(precision, "cpu_bf16_native", lambda: True)


@pytest.mark.parametrize("has_bf16", [True, False])
@pytest.mark.parametrize("scale", ["smoke", "evidence", "paper", "check", None])
def test_only_the_check_scale_on_a_native_bf16_cpu_turns_it_on(monkeypatch, scale, has_bf16):
    monkeypatch.setattr(precision, "cpu_bf16_native", lambda: has_bf16)
    on = precision.set_cpu_autocast(scale)
    assert on == (scale == "check" and has_bf16) == precision.cpu_autocast_on()
    assert precision.autocast_enabled("cpu") == on
    assert precision.autocast_enabled("cuda")  # the GPU's path at every scale
    assert precision.autocast_enabled("meta") is False


def test_a_notebooks_parameters_switch_it_for_the_process(native):
    from studylib.config import notebook_params
    from studylib.experiments import quickstart
    notebook_params(quickstart.Params, {"scale": "check"}, set(), quickstart.NOTEBOOK)
    assert precision.cpu_autocast_on()
    notebook_params(quickstart.Params, {"scale": "smoke"}, set(), quickstart.NOTEBOOK)  # re-run at smoke: off
    assert not precision.cpu_autocast_on()


def _net_and_images():
    torch.manual_seed(0)
    net = Conv4(1, 16)
    images = torch.randint(0, 256, (40, 1, 28, 28), dtype=torch.uint8)
    return net, images


def test_features_at_the_check_scale_are_torch_autocasts_and_elsewhere_float32_bit_for_bit(native):
    net, images = _net_and_images()
    net.eval()
    with torch.inference_mode():
        fp32 = net(images.float() / 255)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            bf16 = net(images.float() / 255).float()
    precision.set_cpu_autocast("smoke")
    assert torch.equal(extract_features(net, images), fp32)
    precision.set_cpu_autocast("check")
    got = extract_features(net, images)
    assert got.dtype == torch.float32 and torch.equal(got, bf16)
    assert not torch.equal(got, fp32)  # it really ran in bf16 ...
    assert torch.allclose(got, fp32, rtol=0.05, atol=0.05 * float(fp32.abs().max()))  # ... to bf16's precision
    assert torch.equal(extract_features(net, images, amp=False), fp32)  # amp=False: float32 at any scale


class Recording(TinyMethod):
    """TinyMethod that records the dtype its head computes in."""

    def __init__(self) -> None:
        torch.manual_seed(123)
        super().__init__()
        self.dtypes: set[torch.dtype] = set()

    def loss(self, images, batch):
        self.dtypes.add(self.head(torch.zeros(1, 16, device=images.device)).dtype)
        return super().loss(images, batch)


@pytest.mark.parametrize("scale", ["smoke", "check"])
def test_training_runs_under_cpu_autocast_at_the_check_scale_only(tmp_path, native, scale):
    precision.set_cpu_autocast(scale)
    method = Recording()
    train(method, _split(), _cfg(epochs=1), RunStore(tmp_path).run("r", {}))
    want = torch.bfloat16 if scale == "check" else torch.float32
    assert method.dtypes == {want}
    assert all(p.dtype == torch.float32 for p in method.parameters())  # the weights stay float32
    assert ("cpu_autocast" in provenance("cpu")) == (scale == "check")  # results say how they were computed


def test_amp_off_in_the_config_keeps_float32_even_at_the_check_scale(tmp_path, native):
    precision.set_cpu_autocast("check")
    method = Recording()
    train(method, _split(), _cfg(epochs=1, amp=False), RunStore(tmp_path).run("r", {}))
    assert method.dtypes == {torch.float32}


def test_the_autocast_context_follows_the_switch(native):
    x = torch.ones(2, 2)
    with precision.autocast("cpu"):
        assert (x @ x).dtype == torch.float32
    precision.set_cpu_autocast("check")
    with precision.autocast("cpu"):
        assert (x @ x).dtype == torch.bfloat16
    with precision.autocast("cpu", enabled=False):
        assert (x @ x).dtype == torch.float32
