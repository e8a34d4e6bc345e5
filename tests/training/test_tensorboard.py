"""TensorBoard (issue 28 item 6): the validation accuracy of every validated epoch under ``val/`` and the run's
hyperparameters in the HParams tab, read back with TensorBoard's own event reader and plugin protos."""

from __future__ import annotations

import os
import sys

import pytest

from studylib.training.loop import config_dict, train
from studylib.training.runstore import RunStore

sys.path.insert(0, os.path.dirname(__file__))
from test_resume import _cfg, _split, make  # noqa: E402

pytest.importorskip("tensorboard")


def _validate(method, epoch):
    """A stand-in for the few-shot validation: a value per epoch the test knows."""
    return {"val_acc": 0.5 + 0.1 * epoch, "val_ci95": 0.01 * (epoch + 1)}


def _events(run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(run.path / "tb"))
    acc.Reload()
    return acc


def test_validation_accuracy_is_in_tensorboard(tmp_path):
    run = RunStore(tmp_path).run("r", {"method": "tiny"})
    train(make(), _split(), _cfg(), run, validate=_validate)
    acc = _events(run)
    rows = [m for m in run.metrics if "val_acc" in m]
    assert len(rows) == 3
    assert [(e.step, round(e.value, 6)) for e in acc.Scalars("val/acc")] == [(m["step"], m["val_acc"]) for m in rows]
    assert [round(e.value, 6) for e in acc.Scalars("val/ci95")] == [m["val_ci95"] for m in rows]
    assert [e.step for e in acc.Scalars("epoch/train_loss")] == [6, 12, 18]
    assert not [t for t in acc.Tags()["scalars"] if t.startswith("epoch/val")]  # not twice


def test_hyperparameters_are_in_the_hparams_tab(tmp_path):
    from tensorboard.plugins.hparams import metadata
    config = {"method": "nca", "backbone": "conv4", "backbone_options": {"hidden": 16},
              "method_options": {"temperature": 0.9}, "data": {"content_sha256": "ab" * 32}}
    cfg = _cfg()
    run = RunStore(tmp_path).run("r", config)
    train(make(), _split(), cfg, run, validate=_validate)
    acc = _events(run)
    content = acc.PluginTagToContent(metadata.PLUGIN_NAME)
    experiment = metadata.parse_experiment_plugin_data(content[metadata.EXPERIMENT_TAG])
    session = metadata.parse_session_start_info_plugin_data(content[metadata.SESSION_START_INFO_TAG])
    assert {m.name.tag for m in experiment.metric_infos} == {"val/acc", "epoch/train_loss"}
    hp = {k: (v.string_value or v.number_value or v.bool_value) for k, v in session.hparams.items()}
    assert hp["method"] == "nca" and hp["backbone"] == "conv4" and hp["backbone_options.hidden"] == 16
    assert hp["method_options.temperature"] == pytest.approx(0.9) and hp["data.content_sha256"] == "ab" * 32
    for key, value in config_dict(cfg).items():  # every training setting; lists and booleans as text
        got = session.hparams[f"train.{key}"]
        if isinstance(value, bool):
            assert got.string_value == str(value), key
        elif isinstance(value, (int, float)):
            assert got.number_value == pytest.approx(value), key
        elif value is not None and not isinstance(value, str):
            assert got.string_value.startswith("["), key


def test_a_run_without_validation_lists_only_the_training_loss(tmp_path):
    from tensorboard.plugins.hparams import metadata
    run = RunStore(tmp_path).run("r", {})
    train(make(), _split(), _cfg(epochs=1), run)
    content = _events(run).PluginTagToContent(metadata.PLUGIN_NAME)
    experiment = metadata.parse_experiment_plugin_data(content[metadata.EXPERIMENT_TAG])
    assert [m.name.tag for m in experiment.metric_infos] == ["epoch/train_loss"]
