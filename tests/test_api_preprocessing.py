"""One preprocessing record (issue 20, item 2): a run stores how its images were decoded, and ``studylib.api``
decodes image files exactly so. An Omniglot run (the reader stores white ink on black, inverting the PNGs) must
embed the PNG files as it embeds the reader's tensors; the old, uninverted decoding must not."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
import torch

from studylib import api
from studylib.data.readers import decode_images
from studylib.data.standins import standin_root
from studylib.runs.runner import INFERENCE, DataSpec, EvalSpec, RunSpec, run_spec
from studylib.training.loop import TrainConfig
from studylib.training.runstore import RunStore


@pytest.fixture(scope="module")
def omniglot_run(tmp_path_factory):
    """A few NCA steps on the Omniglot stand-in (the authors' zips: 1-bit 105 px PNGs, black ink on white; the
    check scale's copy, written once in the cache)."""
    root = standin_root("omniglot")
    spec = RunSpec(name="omni", data=DataSpec("omniglot", "standin:omniglot", {"size": 28, "split": "vinyals"}),
                   backbone="conv4", backbone_options={"hidden": 8}, method="nca", augment="none",
                   train=TrainConfig(epochs=1, sampler="shuffled", batch_size=32, lr=0.05, max_steps=4,
                                     device="cpu"),
                   eval=EvalSpec(ways=3, shots=[1], queries=2, episodes=5, val_episodes=0))
    store = RunStore(tmp_path_factory.mktemp("store"))
    return run_spec(spec, store, progress=False), store, root


def _files_of_class(root: Path, class_name: str, out: Path) -> list[Path]:
    """The PNGs of one character (``"<alphabet>/<character>"``) extracted from the stand-in's zips, in the
    reader's order (sorted by name)."""
    alphabet, character = class_name.split("/")
    out.mkdir(parents=True, exist_ok=True)
    for z in sorted(root.glob("*.zip")):
        with zipfile.ZipFile(z) as zf:
            names = sorted(n for n in zf.namelist() if n.endswith(".png")
                           and n.split("/")[1:3] == [alphabet, character])
            for n in names:
                (out / Path(n).name).write_bytes(zf.read(n))
    return sorted(out.glob("*.png"))


def test_the_run_records_its_decoding(omniglot_run):
    outcome, _, _ = omniglot_run
    record = json.loads((outcome.run.path / INFERENCE).read_bytes())["preprocessing"]
    dataset = outcome.spec.data.load()
    x = dataset["train"].images[:2000].float() / 255
    assert record["mode"] == "L" and record["channels"] == 1 and record["invert"] is True
    assert record["size"] == 28
    assert record["mean"] == pytest.approx([x.mean().item()], abs=1e-5)
    assert record["std"] == pytest.approx([x.std().item()], abs=1e-5)


def test_png_files_embed_as_the_readers_tensors(omniglot_run, tmp_path):
    outcome, store, root = omniglot_run
    test = outcome.spec.data.load()["test"]
    c = 3
    files = _files_of_class(root, test.class_names[c], tmp_path / "files")
    tensors = test.images[test.labels == c]
    assert len(files) == len(tensors) == 20
    model = api.load_run(outcome, store)
    from_tensors = model.embed(tensors)
    assert torch.allclose(model.embed(files), from_tensors, atol=1e-5)
    assert torch.allclose(model.embed(tmp_path / "files"), from_tensors, atol=1e-5)
    # The old decoding (the PNGs as they are: black ink on white) is not what the model was trained on.
    uninverted = model.embed(decode_images(files, 28, "L"))
    assert not torch.allclose(uninverted, from_tensors, atol=1e-2)
    # ... and classification follows: files classify as the reader's tensors do.
    support = [files[0], *_files_of_class(root, test.class_names[c + 1], tmp_path / "b")[:1]]
    query = files[1:6]
    pred = model.classify(support, ["a", "b"], query)
    ref = model.classify(torch.stack([tensors[0], test.images[test.labels == c + 1][0]]), ["a", "b"], tensors[1:6])
    assert pred.labels == ref.labels and torch.allclose(pred.scores, ref.scores, atol=1e-5)


def test_runs_stored_before_the_record_still_load_with_a_warning(omniglot_run, tmp_path):
    outcome, store, root = omniglot_run
    run = outcome.run
    saved = run.read_bytes(INFERENCE)
    record = json.loads(saved)
    del record["preprocessing"]
    run.write_bytes(INFERENCE, json.dumps(record).encode())
    try:
        with pytest.warns(UserWarning, match="no preprocessing record.*decoded as L, uninverted") as caught:
            model = api.load_run(outcome, store)
    finally:
        run.write_bytes(INFERENCE, saved)
    assert len(caught) == 1 and "\n" not in str(caught[0].message)
    test = outcome.spec.data.load()["test"]
    files = _files_of_class(root, test.class_names[0], tmp_path / "files")
    # Today's behaviour before the record: files decoded in the channels' mode, uninverted.
    assert torch.allclose(model.embed(files), model.embed(decode_images(files, 28, "L")), atol=1e-5)
