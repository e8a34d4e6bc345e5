"""InfoPatch (seed 004): PatchMix labels on hand-made boxes, both losses against independent per-position loops,
finite-difference gradients, random block readings, batching over episodes, bf16 autocast."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from studylib.data.samplers import Batch
from studylib.methods import METHODS, build_method
from studylib.methods.infopatch import (PatchMix, apply_patchmix, block_prototype_cell, block_support_pixels,
                                        global_loss, grid_boxes, local_logits, local_loss, prototypes,
                                        sample_patchmix)
from studylib.models import build_backbone


@pytest.fixture(autouse=True)
def _threads():
    torch.set_num_threads(1)
    torch.manual_seed(0)


# ------------------------------------------------------------------------------------------------ PatchMix


def _mix(boxes: list[list[int]], perm: list[int]) -> PatchMix:
    b = torch.tensor([boxes], dtype=torch.long)
    return PatchMix(b, torch.tensor([perm]), torch.zeros(1, len(perm)))


def _reference_cells(box: list[int], h: int, g: int, own: int, other: int) -> torch.Tensor:
    """Per-cell labels by hand with Python's round (half to even), the code's ``round(x * 11 / 84)``."""
    y1, y2, x1, x2 = (round(v * g / h) for v in box)
    out = torch.full((g, g), own)
    for r in range(g):
        for c in range(g):
            if y1 <= r < y2 and x1 <= c < x2:
                out[r, c] = other
    return out


def test_grid_rounding_boundaries() -> None:
    # 84 px -> 11 cells: 3 -> 0.39 -> 0, 4 -> 0.52 -> 1, 38 -> 4.98 -> 5, 42 -> 5.5 -> 6, 46 -> 6.02 -> 6, 84 -> 11
    b = torch.tensor([[3, 4, 38, 42], [46, 84, 0, 8]])
    assert grid_boxes(b, 84, 84, 11).tolist() == [[0, 1, 5, 6], [6, 11, 0, 1]]
    # exact halves round to even, like Python/NumPy round: 32 px -> 4 cells, x / 8
    b = torch.tensor([[4, 12, 20, 28]])
    assert grid_boxes(b, 32, 32, 4).tolist() == [[round(0.5), round(1.5), round(2.5), round(3.5)]] == [[0, 2, 2, 4]]


def test_patchmix_labels_on_hand_made_boxes() -> None:
    h, g, m = 84, 11, 3
    boxes = [[0, 42, 42, 84], [4, 38, 3, 84], [10, 10, 0, 84]]  # the third box is empty
    perm = [1, 2, 0]
    x = torch.arange(m, dtype=torch.float32).view(1, m, 1, 1, 1).expand(1, m, 2, h, h).clone()
    labels = torch.tensor([[0, 1, 2]])
    base = torch.tensor([[17, 5, 9]])
    mixed, (cells, base_cells) = apply_patchmix(x, [labels, base], _mix(boxes, perm), g)
    assert cells.shape == (1, m, g, g)
    for i in range(m):
        ref = _reference_cells(boxes[i], h, g, int(labels[0, i]), int(labels[0, perm[i]]))
        assert torch.equal(cells[0, i], ref), i
        ref_b = _reference_cells(boxes[i], h, g, int(base[0, i]), int(base[0, perm[i]]))
        assert torch.equal(base_cells[0, i], ref_b), i
        # pixels: the donor's inside the box, the query's own outside
        y1, y2, x1, x2 = boxes[i]
        inside = torch.zeros(h, h, dtype=torch.bool)
        inside[y1:y2, x1:x2] = True
        assert torch.all(mixed[0, i][:, inside] == perm[i])
        assert torch.all(mixed[0, i][:, ~inside] == i)
    # box 0: rows 0..5 and columns 6..10 (42 -> 5.5 -> 6) are the donor's
    assert cells[0, 0, :6, 6:].eq(1).all() and cells[0, 0, 6:].eq(0).all() and cells[0, 0, :, :6].eq(0).all()
    # box 1: rows 1..4 (4 -> 1, 38 -> 5), all columns (3 -> 0, 84 -> 11)
    assert cells[0, 1, 1:5].eq(2).all() and cells[0, 1, 0].eq(1).all() and cells[0, 1, 5:].eq(1).all()
    # the empty box changes nothing
    assert cells[0, 2].eq(2).all() and base_cells[0, 2].eq(9).all()


def test_patchmix_query_mixed_with_itself_is_unchanged() -> None:
    h, g = 32, 4
    x = torch.randn(2, 3, 3, h, h)
    boxes = torch.tensor([[0, 20, 4, 30]] * 3 * 2).view(2, 3, 4)
    mix = PatchMix(boxes, torch.arange(3).expand(2, 3).clone(), torch.zeros(2, 3))
    labels = torch.tensor([[0, 1, 2], [2, 0, 1]])
    mixed, (cells,) = apply_patchmix(x, [labels], mix, g)
    assert torch.equal(mixed, x)
    assert torch.equal(cells, labels[:, :, None, None].expand(2, 3, g, g))
    # a permutation that maps one query onto itself: that query is unchanged, the others are mixed
    mix = PatchMix(boxes, torch.tensor([[0, 2, 1], [1, 0, 2]]), torch.zeros(2, 3))
    mixed, (cells,) = apply_patchmix(x, [labels], mix, g)
    assert torch.equal(mixed[0, 0], x[0, 0]) and torch.equal(mixed[1, 2], x[1, 2])
    assert not torch.equal(mixed[0, 1], x[0, 1])
    assert cells[0, 0].eq(0).all() and cells[1, 2].eq(1).all()


def test_sample_patchmix_episode_vs_query_boxes() -> None:
    torch.manual_seed(3)
    e, m, h = 4, 6, 84
    ep = sample_patchmix(e, m, h, h, box="episode")
    assert ep.boxes.shape == (e, m, 4) and ep.perm.shape == (e, m)
    assert torch.equal(ep.boxes, ep.boxes[:, :1].expand(e, m, 4))  # one box per episode
    assert torch.equal(ep.lam, ep.lam[:, :1].expand(e, m))
    assert torch.equal(ep.perm.sort(1).values, torch.arange(m).expand(e, m))  # a permutation per episode
    q = sample_patchmix(e, m, h, h, box="query")
    assert not torch.equal(q.boxes, q.boxes[:, :1].expand(e, m, 4))  # boxes differ within an episode
    for mix in (ep, q):
        y1, y2, x1, x2 = mix.boxes.unbind(-1)
        assert bool((0 <= y1).all() and (y1 <= y2).all() and (y2 <= h).all())
        assert bool((0 <= x1).all() and (x1 <= x2).all() and (x2 <= h).all())
        # CutMix's side: floor(H sqrt(1 - lambda)), halved on each side of the centre before clipping
        cut = torch.floor(h * torch.sqrt(1 - mix.lam.double())).long()
        assert bool(((y2 - y1) <= 2 * (cut // 2)).all())
    with pytest.raises(ValueError, match="box"):
        sample_patchmix(1, 2, 8, 8, box="image")


# ------------------------------------------------------------------------------------------------ losses


def _maps(e=2, n=3, k=2, m=4, d=5, g=3, dtype=torch.float64):
    fs = torch.randn(e, n, k, d, g, g, dtype=dtype)
    fq = torch.randn(e, m, d, g, g, dtype=dtype)
    labels = torch.randint(n, (e, m, g, g))
    return fs, fq, labels


def _local_loop(fs, fq, labels, scale=7.0, cell=None):
    """Independent per-position InfoNCE (Eq. 3 with prototypes): plain Python sums, one position at a time."""
    e, n, k, d, g, _ = fs.shape
    m = fq.shape[1]
    total, count = 0.0, 0
    for ei in range(e):
        protos = []
        for c in range(n):
            mean_map = sum(fs[ei, c, s] for s in range(k)) / k  # [D, G, G]
            if cell is not None:
                mean_map = mean_map.clone()
                mean_map[:, cell[0], cell[1]] = 0
            p = mean_map.sum(dim=(1, 2)) / (g * g)
            protos.append(p / math.sqrt(float((p * p).sum())))
        for i in range(m):
            for r in range(g):
                for col in range(g):
                    v = fq[ei, i, :, r, col]
                    v = v / math.sqrt(float((v * v).sum()))
                    logits = [scale * float((v * p).sum()) for p in protos]
                    y = int(labels[ei, i, r, col])
                    lse = math.log(sum(math.exp(z) for z in logits))
                    total += lse - logits[y]
                    count += 1
    return total / count


@pytest.mark.parametrize("cell", [None, (1, 2)])
def test_local_loss_equals_per_position_loop(cell) -> None:
    fs, fq, labels = _maps()
    protos = prototypes(fs, block="code" if cell is not None else "none", cell=cell)
    loss = local_loss(local_logits(fq, protos, 7.0), labels)
    assert float(loss) == pytest.approx(_local_loop(fs, fq, labels, 7.0, cell), rel=1e-10)


def test_local_loss_pooled_queries() -> None:
    fs, fq, _ = _maps()
    y = torch.randint(3, (2, 4))
    protos = prototypes(fs, block="none")
    loss = local_loss(local_logits(fq, protos, 7.0, patches=False), y)
    q = F.normalize(fq.mean(dim=(-2, -1)), dim=-1)
    ref = sum(F.cross_entropy(7.0 * protos[e] @ q[e, i], y[e, i]) for e in range(2) for i in range(4)) / 8
    assert float(loss) == pytest.approx(float(ref), rel=1e-10)


def test_global_loss_equals_per_position_cross_entropy_loop() -> None:
    ns, nq, c, g = 4, 5, 7, 3
    ls = torch.randn(ns, c, g, g, dtype=torch.float64)
    lq = torch.randn(nq, c, g, g, dtype=torch.float64)
    ys = torch.randint(c, (ns,))
    yq = torch.randint(c, (nq, g, g))
    loss = global_loss(ls, ys, lq, yq)
    terms = []
    for i in range(ns):
        for r in range(g):
            for col in range(g):
                terms.append(F.cross_entropy(ls[i, :, r, col][None], ys[i][None]))
    for i in range(nq):
        for r in range(g):
            for col in range(g):
                terms.append(F.cross_entropy(lq[i, :, r, col][None], yq[i, r, col][None]))
    assert float(loss) == pytest.approx(float(torch.stack(terms).mean()), rel=1e-12)


def test_gradcheck_global_loss() -> None:
    ls = torch.randn(2, 3, 2, 2, dtype=torch.float64, requires_grad=True)
    lq = torch.randn(3, 3, 2, 2, dtype=torch.float64, requires_grad=True)
    ys = torch.randint(3, (2,))
    yq = torch.randint(3, (3, 2, 2))
    assert torch.autograd.gradcheck(lambda a, b: global_loss(a, ys, b, yq), (ls, lq))


@pytest.mark.parametrize("patches", [True, False])
def test_gradcheck_local_loss(patches: bool) -> None:
    fs, fq, labels = _maps(e=1, n=2, k=2, m=2, d=3, g=2)
    fs.requires_grad_(True)
    fq.requires_grad_(True)
    target = labels if patches else labels[:, :, 0, 0]

    def f(a, b):
        return local_loss(local_logits(b, prototypes(a, block="code", cell=(0, 1)), 7.0, patches), target)

    assert torch.autograd.gradcheck(f, (fs, fq))


# ------------------------------------------------------------------------------------------------ random block


def test_block_prototype_cell_zeroes_one_shared_cell() -> None:
    p = torch.ones(2, 3, 4, 5, 5)
    out = block_prototype_cell(p, (2, 3))
    assert out[..., 2, 3].eq(0).all() and float(out.sum()) == p.numel() - 2 * 3 * 4
    torch.manual_seed(1)
    out = block_prototype_cell(p)  # drawn: the same cell for every class and episode
    zero = (out == 0).all(dim=(0, 1, 2))
    assert int(zero.sum()) == 1 and int((out == 0).sum()) == 2 * 3 * 4


def test_block_support_pixels_paper_reading() -> None:
    x = torch.ones(2, 3, 2, 8, 8)
    boxes = torch.tensor([[1, 5, 2, 6]]).expand(2, 3, 4)
    out = block_support_pixels(x, boxes=boxes)
    assert out[..., 1:5, 2:6].eq(0).all() and float(out.sum()) == x.numel() - 2 * 3 * 2 * 16
    torch.manual_seed(2)
    out = block_support_pixels(x, block_frac=0.5)  # a 4x4 square per image, both channels
    assert ((out == 0).sum(dim=(-1, -2)) == 16).all()


# ------------------------------------------------------------------------------------------------ method


def _method(**kw):
    bb = build_backbone("resnet12_infopatch", widths=(4, 4, 6, 8))
    labels = torch.arange(40) % 6
    return build_method("infopatch", bb, lambda x: x.float() / 255 - 0.5, num_classes=6, train_labels=labels, **kw)


def _batch(e=2, n=3, k=1, q=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    per = n * (k + q)
    idx = torch.randperm(40, generator=g)[: e * per]
    lab = torch.arange(n).repeat_interleave(k + q).repeat(e)
    sup = (torch.arange(k + q) < k).repeat(n).repeat(e)
    images = torch.randint(0, 256, (e * per, 3, 24, 24), dtype=torch.uint8, generator=g)
    return images, Batch(idx, lab, sup, n, k, q)


def test_registered_and_method_loss_is_global_plus_half_local() -> None:
    assert "infopatch" in METHODS
    m = _method().eval()  # eval: no PatchMix, no block, no dropout -> deterministic
    images, batch = _batch()
    loss, logs = m.loss(images, batch)
    assert float(loss.detach()) == pytest.approx(logs["global"] + 0.5 * logs["local"], rel=1e-5)
    # recompute from the map with the library's pieces
    with torch.no_grad():
        x = m.augment(images).reshape(2, 3, 3, 3, 24, 24)
        xs, xq = x[:, :, :1].reshape(-1, 3, 24, 24), x[:, :, 1:].reshape(-1, 3, 24, 24)
        f = m.backbone.feature_map(torch.cat([xs, xq]))
        g = f.shape[-1]
        base = m.train_labels[batch.indices].reshape(2, 3, 3)
        lg = global_loss(m.classifier(f[:6]), base[:, :, 0].reshape(-1), m.classifier(f[6:]),
                         base[:, :, 1:].reshape(-1, 1, 1).expand(-1, g, g))
        protos = prototypes(f[:6].reshape(2, 3, 1, 8, g, g), block="none")
        y = torch.arange(3).repeat_interleave(2).expand(2, 6)[:, :, None, None].expand(2, 6, g, g)
        ll = local_loss(local_logits(f[6:].reshape(2, 6, 8, g, g), protos), y)
    assert logs["global"] == pytest.approx(float(lg), rel=1e-5)
    assert logs["local"] == pytest.approx(float(ll), rel=1e-5)


def test_batched_episodes_equal_the_mean_of_single_episodes() -> None:
    m = _method().eval()
    images, batch = _batch(e=2)
    both, _ = m.loss(images, batch)
    per = len(batch) // 2
    singles = []
    for i in range(2):
        sl = slice(i * per, (i + 1) * per)
        b = Batch(batch.indices[sl], batch.labels[sl], batch.support[sl], 3, 1, 2)
        singles.append(float(m.loss(images[sl], b)[0]))
    assert float(both) == pytest.approx(sum(singles) / 2, rel=1e-5)


@pytest.mark.parametrize("kw", [{}, {"box": "query"}, {"block": "paper"}, {"block": "none", "patchmix": False},
                                {"local_weight": 0.0}, {"patches": False}])
def test_training_step_runs_and_backpropagates(kw) -> None:
    m = _method(**kw).train()
    images, batch = _batch()
    loss, logs = m.loss(images, batch)
    assert torch.isfinite(loss)
    loss.backward()
    assert m.classifier.weight.grad is not None and torch.isfinite(m.classifier.weight.grad).all()
    assert int(m.backbone.drop_step) == 1
    if kw.get("local_weight", 0.5) > 0:
        assert 0.0 <= logs["acc"] <= 1.0


def test_bf16_autocast_on_cpu_matches_fp32() -> None:
    m = _method().eval()
    images, batch = _batch()
    ref, _ = m.loss(images, batch)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low, logs = m.loss(images, batch)
    assert low.dtype == torch.float32
    assert float(low) == pytest.approx(float(ref), rel=3e-2)


def test_input_errors() -> None:
    bb = build_backbone("resnet12_infopatch", widths=(4, 4, 6, 8))
    inference_only = build_method("infopatch", bb, lambda x: x, num_classes=6)  # no train_labels: no training
    with pytest.raises(ValueError, match="train_labels"):
        inference_only.loss(*_batch())
    with pytest.raises(ValueError, match="num_classes"):
        build_method("infopatch", bb, lambda x: x, train_labels=torch.zeros(3))
    with pytest.raises(ValueError, match="block"):
        _method(block="pixels")
    m = _method()
    images, batch = _batch()
    with pytest.raises(ValueError, match="episodic"):
        m.loss(images, Batch(batch.indices, batch.labels))
    with pytest.raises(ValueError, match="whole number"):
        m.loss(images[:-1], Batch(batch.indices[:-1], batch.labels[:-1], batch.support[:-1], 3, 1, 2))


# ------------------------------------------------------------------------------------------------ batches of episodes


def test_sampler_concatenates_episodes_per_batch() -> None:
    from studylib.data.samplers import EpisodicSampler
    labels = torch.arange(60) % 10
    one = EpisodicSampler(labels, 3, 1, 2, 6, seed=4)
    two = EpisodicSampler(labels, 3, 1, 2, 3, seed=4, episodes_per_batch=2)
    a, b = one.epoch(0), two.epoch(0)
    assert len(b) == len(two) == 3 and two.batch_size == 18
    for i, batch in enumerate(b):
        assert batch.episodes == 2 and len(batch) == 18
        assert torch.equal(batch.indices, torch.cat([a[2 * i].indices, a[2 * i + 1].indices]))
        assert torch.equal(batch.labels, a[0].labels.repeat(2)) and torch.equal(batch.support, a[0].support.repeat(2))
    # without replacement: only whole batches
    nr = EpisodicSampler(labels, 3, 1, 2, 100, replacement=False, seed=0, episodes_per_batch=2)
    assert all(x.episodes == 2 and len(x) == 18 for x in nr.epoch(0))


def _run_spec(**train):
    from studylib.runs.runner import DataSpec, EvalSpec, RunSpec
    from studylib.training.loop import TrainConfig
    cfg = dict(epochs=1, sampler="episodic", ways=3, shots=1, queries=2, episodes_per_batch=2, batches_per_epoch=4,
               lr=0.05, nesterov=True, device="cpu", checkpoint_every=2, progress=False)
    cfg.update(train)
    return RunSpec(name="ip", data=DataSpec("glyphs", None, {"size": 28, "split": "random", "max_classes": 30,
                                                             "seed": 0}),
                   backbone="resnet12_infopatch", backbone_options={"widths": [4, 4, 6, 8], "drop_ramp_steps": 3},
                   method="infopatch", augment="none", train=TrainConfig(**cfg),
                   eval=EvalSpec(shots=[1], episodes=10, val_episodes=5))


def test_runner_trains_infopatch_on_batches_of_episodes_and_resumes_exactly(tmp_path) -> None:
    from studylib.runs.runner import run_spec
    from studylib.training.loop import Interrupted, config_dict, TrainConfig
    from studylib.training.runstore import RunStore
    assert "episodes_per_batch" not in config_dict(TrainConfig())  # earlier runs keep their hashes
    clean = run_spec(_run_spec(), RunStore(tmp_path / "clean"), progress=False)
    weights = clean.run.load_tensor("weights.pt")
    assert int(weights["backbone.drop_step"]) == 4  # 4 training steps; validation forwards did not count
    store = RunStore(tmp_path / "killed")
    with pytest.raises(Interrupted):
        run_spec(_run_spec(), store, stop_after=2, progress=False)
    resumed = run_spec(_run_spec(), store, progress=False)
    again = resumed.run.load_tensor("weights.pt")
    assert all(torch.equal(weights[k], again[k]) for k in weights)
    assert resumed.result["test"] == clean.result["test"]
    # a one-episode method refuses batches of several episodes
    bad = _run_spec()
    bad.method, bad.method_options = "pn", {}
    with pytest.raises(ValueError, match="episodes_per_batch"):
        run_spec(bad, RunStore(tmp_path / "bad"), progress=False)


def test_per_milestone_lr_factors_give_the_codes_table() -> None:
    from studylib.training.loop import TrainConfig, config_dict, lr_factor
    cfg = TrainConfig(epochs=90, milestones=[60 / 90, 70 / 90, 80 / 90], gammas=[0.06, 0.2, 0.2])
    total = 90 * 1200
    lrs = [0.1 * lr_factor(cfg, e * 1200, total) for e in (0, 59, 60, 69, 70, 79, 80, 89)]
    assert lrs == pytest.approx([0.1, 0.1, 0.006, 0.006, 0.0012, 0.0012, 0.00024, 0.00024])
    assert "gammas" not in config_dict(TrainConfig())  # earlier runs keep their hashes
    with pytest.raises(ValueError, match="gammas"):
        TrainConfig(milestones=[0.5], gammas=[0.1, 0.1]).check()


def test_cosine_prototype_classifier() -> None:
    from studylib.evaluation import get_classifier
    _, clf = get_classifier("cosine_prototype")
    s = torch.randn(2, 3, 4, 5, dtype=torch.float64)
    q = torch.randn(2, 6, 5, dtype=torch.float64)
    scores = clf(s, q)
    for e in range(2):
        for i in range(6):
            for c in range(3):
                ref = F.cosine_similarity(q[e, i], s[e, c].mean(0), dim=0)
                assert float(scores[e, i, c]) == pytest.approx(float(ref), rel=1e-12)


def test_cosine_nearest_sample_is_eq2() -> None:
    """Eq. 2 of seed 004 against a slow loop: the predicted class is that of the support sample of highest
    cosine; at one shot it equals the code's cosine-to-mean, at five it differs on some queries."""
    from studylib.evaluation import get_classifier
    _, clf = get_classifier("cosine_nearest_sample")
    _, proto = get_classifier("cosine_prototype")
    g = torch.Generator().manual_seed(0)
    s = torch.randn(3, 5, 4, 6, dtype=torch.float64, generator=g)
    q = torch.randn(3, 7, 6, dtype=torch.float64, generator=g)
    scores = clf(s, q)
    assert scores.shape == (3, 7, 5)
    for e in range(3):
        for i in range(7):
            best, label = -2.0, -1
            for c in range(5):
                for j in range(4):
                    cos = float(F.cosine_similarity(q[e, i], s[e, c, j], dim=0))
                    if cos > best:
                        best, label = cos, c
                assert float(scores[e, i, c]) == pytest.approx(max(
                    float(F.cosine_similarity(q[e, i], s[e, c, j], dim=0)) for j in range(4)), rel=1e-12)
            assert int(scores[e, i].argmax()) == label
    assert torch.allclose(clf(s[:, :, :1], q), proto(s[:, :, :1], q))
    assert not torch.equal(clf(s, q).argmax(-1), proto(s, q).argmax(-1))
    with pytest.raises(ValueError, match="support"):
        clf(s[0], q)
