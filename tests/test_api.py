"""The inference API (issue 13): a finished run as an embedding model; embeddings and classifications agree with
slow per-image / per-query references and with the study's own evaluation of the same episode."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from studylib import api
from studylib.evaluation import sample_episodes
from studylib.runs.runner import load_trained, run_spec
from studylib.training.runstore import RunStore

sys.path.insert(0, str(Path(__file__).parent / "runs"))
from test_runner_guards import tiny_dataset, tiny_spec  # noqa: E402


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    spec = tiny_spec()
    spec = dataclasses.replace(spec, eval=dataclasses.replace(spec.eval, classifiers=["nearest_centroid",
                                                                                      "soft_assignment", "opta"]))
    store = RunStore(tmp_path_factory.mktemp("store"))
    return run_spec(spec, store, progress=False), store


def test_embeddings_equal_a_per_image_reference(trained, tmp_path):
    outcome, store = trained
    model = api.load_run(outcome.run.path.name[:12], store)  # a unique prefix of the run's name
    method, transform, dataset = load_trained(outcome)
    images = dataset["test"].images[:7]
    with torch.no_grad():
        slow = torch.cat([method.features(transform(img[None])) for img in images])
    assert torch.allclose(model.embed(images), slow, atol=1e-5)
    assert torch.allclose(model.embed(images.float() / 255), slow, atol=1e-5)  # float in [0, 1]
    for i, img in enumerate(images):  # a folder of PNGs reads the same pixels
        Image.fromarray(img[0].numpy()).save(tmp_path / f"img{i}.png")
    assert torch.allclose(model.embed(tmp_path), slow, atol=1e-5)
    assert [p.name for p in model.files(tmp_path)] == [f"img{i}.png" for i in range(7)]


def _episode(outcome, dataset, e=0):
    ev = outcome.spec.eval
    test = dataset[ev.split]
    eps = sample_episodes(test.labels, ev.ways, max(ev.shots), ev.queries, ev.episodes, ev.seed)
    sup, qry = eps.support[e], eps.query[e]  # [w, n], [w, m]
    w, n = sup.shape
    return (test.images[sup.reshape(-1)], [c for c in range(w) for _ in range(n)], test.images[qry.reshape(-1)],
            torch.arange(w).repeat_interleave(qry.shape[1]))


@pytest.mark.parametrize("classifier", ["nearest_centroid", "soft_assignment", "opta"])
def test_classify_reproduces_the_evaluation_of_the_same_episodes(trained, classifier):
    outcome, store = trained
    model = api.load_run(outcome, store)
    dataset = outcome.spec.data.load()
    shots = max(outcome.spec.eval.shots)
    stored = outcome.accuracies(classifier, shots)
    for e in range(3):
        s, y, q, truth = _episode(outcome, dataset, e)
        pred = model.classify(s, y, q, classifier=classifier)
        acc = (torch.tensor(pred.labels) == truth).double().mean().item()
        assert acc == pytest.approx(stored[e].item(), abs=1e-6)  # (stored in float32)
        assert pred.probabilities.shape == (len(q), 5) and torch.allclose(pred.probabilities.sum(-1),
                                                                          torch.ones(len(q)))


def test_nearest_centroid_equals_a_numpy_loop_with_named_labels(trained):
    outcome, store = trained
    model = api.load_run(outcome.run.path, store)
    dataset = outcome.spec.data.load()
    s, y, q, _ = _episode(outcome, dataset, 5)
    names = [f"class {c}" for c in y]
    pred = model.classify(s, names, q)
    mean = model.cl2n_mean.numpy()
    fs, fq = model.embed(s).numpy() - mean, model.embed(q).numpy() - mean
    fs /= np.linalg.norm(fs, axis=1, keepdims=True)
    fq /= np.linalg.norm(fq, axis=1, keepdims=True)
    classes = sorted(set(names))
    want = []
    for x in fq:  # the slow reference: one query at a time
        dists = [np.sum((x - fs[[i for i, n in enumerate(names) if n == c]].mean(0)) ** 2) for c in classes]
        want.append(classes[int(np.argmin(dists))])
    assert pred.labels == want and pred.classes == classes


def test_runs_without_inference_record_rebuild_from_the_data(trained):
    outcome, store = trained
    model = api.load_run(outcome, store)
    from studylib.training.runstore import _sidecar
    rec = outcome.run.path / "inference.json"
    saved = rec.read_bytes(), _sidecar(rec).read_bytes()
    rec.unlink()
    _sidecar(rec).unlink()
    try:
        with pytest.raises(ValueError, match="pass the data set"):
            api.load_run(outcome, store)
        again = api.load_run(outcome, store, data=tiny_dataset())
    finally:
        rec.write_bytes(saved[0])
        _sidecar(rec).write_bytes(saved[1])
    x = outcome.spec.data.load()["test"].images[:5]
    assert torch.allclose(again.embed(x), model.embed(x), atol=1e-6)
    assert torch.allclose(again.cl2n_mean, model.cl2n_mean, atol=1e-5)
    weights = api.load_weights(outcome.run.path / "weights.pt", outcome.spec)
    assert torch.allclose(weights.embed(x), model.embed(x), atol=1e-6)


def test_clear_errors(trained):
    outcome, store = trained
    model = api.load_run(outcome, store)
    x = outcome.spec.data.load()["test"].images
    with pytest.raises(ValueError, match="same number of support images"):
        model.classify(x[:3], [0, 0, 1], x[3:5])
    with pytest.raises(ValueError, match="needs an SPE model"):
        model.classify(x[:2], [0, 1], x[3:5], classifier="spe")
    with pytest.raises(ValueError, match="unknown classifier"):
        model.classify(x[:2], [0, 1], x[3:5], classifier="nearest")
    with pytest.raises(FileNotFoundError, match="./study results lists the runs"):
        api.load_run("no-such-run", store)


def test_spe_runs_classify_with_their_own_posterior(tmp_path):
    base = tiny_spec()
    spec = dataclasses.replace(base, name="spe", method="spe",
                               method_options={"dim": 2, "sampler": "naive", "samples": 8, "eval_samples": 16},
                               backbone_options={"hidden": 8, "last_block_plain": True, "out_channels": 4},
                               train=dataclasses.replace(base.train, sampler="episodic", ways=4, shots=2, queries=3,
                                                         batches_per_epoch=3, lr=0.01),
                               eval=dataclasses.replace(base.eval, classifiers=["nearest_centroid"], cl2n=False))
    outcome = run_spec(spec, RunStore(tmp_path), progress=False)
    model = api.load_run(outcome)
    method, transform, dataset = load_trained(outcome)
    s, y, q, _ = _episode(outcome, dataset, 0)
    pred = model.classify(s, y, q, classifier="spe")
    with torch.no_grad():  # the reference: the method's own classifier on [1, w, n, 2d] mu || var
        gs = torch.cat([method.gaussian_features(transform(img[None])) for img in s])
        gq = torch.cat([method.gaussian_features(transform(img[None])) for img in q])
        w = len(set(y))
        ref = method.classifier()(gs.view(w, -1, gs.shape[-1])[None], gq[None])[0]
    assert torch.allclose(pred.scores, ref, atol=1e-4) and pred.labels == ref.argmax(-1).tolist()
    assert model.embed(s).shape[1] == 2  # embeddings are the means mu


def test_every_documented_classifier_is_registered_after_importing_the_api_alone():
    """A fresh interpreter that imports only studylib.api can name every classifier the API documents (the
    "opta" family used to be registered only when another module happened to import studylib.evaluation.opta)."""
    import subprocess
    import sys

    code = ("import studylib.api\nfrom studylib.evaluation import CLASSIFIERS\n"
            "print(' '.join(sorted(CLASSIFIERS)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert {"nearest_centroid", "soft_assignment", "knn", "logreg", "opta", "opta_nearest"} <= set(out)


def test_non_finite_images_are_refused(trained):
    """Before: NaN passed the [0, 1] check (comparisons with NaN are false) and became 0: every query class 0."""
    outcome, store = trained
    model = api.load_run(outcome, store)
    x = outcome.spec.data.load()["test"].images[:4].float() / 255
    x[1, 0, 2, 2] = float("nan")
    with pytest.raises(ValueError, match=r"images hold 1 non-finite value\(s\) \(NaN or inf\)"):
        model.embed(x)
    x[1, 0, 2, 2] = float("inf")
    with pytest.raises(ValueError, match="non-finite"):
        model.classify(x[:2], [0, 1], x[2:])


def test_load_run_searches_the_given_store_takes_a_file_and_a_seed(trained, tmp_path):
    import json
    import shutil
    outcome, store = trained
    name = outcome.run.path.name
    assert api.load_run(name[:6], store=Path(store.root)).path == outcome.run.path  # before: searched "/"
    assert api.load_run(name[:6], store=str(store.root)).path == outcome.run.path
    assert api.load_run(outcome.run.path / "weights.pt").path == outcome.run.path  # before: NotImplementedError
    (tmp_path / "w.pt").write_bytes(b"x")
    with pytest.raises(FileNotFoundError, match=r"w.pt is a file, not a run: .*api.load_weights"):
        api.load_run(tmp_path / "w.pt")
    other = store.root / f"{name.rsplit('-', 1)[0]}-ffffffffffff"  # the same name trained with another seed and lr
    shutil.copytree(outcome.run.path, other)
    try:
        cfg = json.loads((other / "config.json").read_text())
        cfg["train"].update(seed=7, lr=0.1)
        (other / "config.json").write_text(json.dumps(cfg))
        with pytest.raises(LookupError, match=rf"'t-' names 2 runs in {store.root}; they differ in seed:\n"
                                              rf"  seed 0: api\.load_run\('t-', seed=0, store='{store.root}'\)\n"
                                              rf"  seed 7: api\.load_run\('t-', seed=7, store='{store.root}'\)$"):
            api.load_run("t-", store)
        assert api.load_run("t-", store, seed=0).path == outcome.run.path
        with pytest.raises(FileNotFoundError, match=r"no run 't-' with seed=3 .*; the runs of 't-' have method nca; data tiny #[0-9a-f]{8}; seed 0, 7;"):
            api.load_run("t-", store, seed=3)
    finally:
        shutil.rmtree(other)
