"""Runs named by what they are (issue 28 item 1): a run's display name carries notebook, method, data (a folder's
name, not only its hash) and seed; ./study results shows the data column; api.load_run picks a run by method=,
data= and seed= or by its display name, and an ambiguous call lists the candidates by what differs with the exact
call for each, in at most 10 lines."""

from __future__ import annotations

import dataclasses
import re

import pytest

from studylib import api, config, results
from studylib.data.standins import write_folder
from studylib.runs.runner import DataSpec, EvalSpec, RunSpec, run_spec
from studylib.training.loop import TrainConfig
from studylib.training.runstore import RunStore


def _spec(root, method: str, seed: int) -> RunSpec:
    episodic = dict(sampler="episodic", ways=3, shots=1, queries=2) if method == "pn" else dict(sampler="shuffled")
    return RunSpec(name=f"98_names-{method}",
                   data=DataSpec("folder", str(root), {"size": 16, "split": "random", "seed": 0,
                                                       "fractions": [0.5, 0.2, 0.3], "mode": "L"}),
                   backbone="conv4", backbone_options={"hidden": 4}, method=method, augment="none",
                   train=TrainConfig(epochs=1, batch_size=16, lr=0.05, device="cpu", seed=seed, max_steps=2,
                                     **episodic),
                   eval=EvalSpec(ways=3, shots=[1], queries=2, episodes=5, val_episodes=0,
                                 classifiers=["nearest_centroid"]))


@pytest.fixture(scope="module")
def two_folders(tmp_path_factory):
    """Runs of one notebook on two folders: nca seeds 0 and 1 and pn seed 0 on 'leaves', nca seed 0 on 'bark'."""
    base = tmp_path_factory.mktemp("names")
    leaves = write_folder(base / "leaves", classes=10, per_class=6, size=16)
    bark = write_folder(base / "bark", classes=11, per_class=6, size=16)
    store = RunStore(base / "store")
    old = config._CURRENT["notebook"]
    config._CURRENT["notebook"] = "98_names"
    try:
        outs = {key: run_spec(_spec(root, m, s), store, progress=False)
                for key, (root, m, s) in {"leaves-nca-0": (leaves, "nca", 0), "leaves-nca-1": (leaves, "nca", 1),
                                          "leaves-pn-0": (leaves, "pn", 0), "bark-nca-0": (bark, "nca", 0)}.items()}
    finally:
        config._CURRENT["notebook"] = old
    return store, outs


def test_display_names_carry_notebook_method_data_folder_and_seed(two_folders):
    store, outs = two_folders
    ident = results.identity(outs["leaves-pn-0"].run.path)
    digest = outs["leaves-pn-0"].run.config["data"]["content_sha256"]
    assert (ident.notebook, ident.method, ident.seed) == ("98_names", "pn", 0)
    assert ident.data == f"leaves #{digest[:8]}"
    assert ident.text == f"98_names · pn · leaves #{digest[:8]} · seed 0"
    table = results.rows(store)
    assert sorted(r.data.split()[0] for r in table) == ["bark", "leaves", "leaves", "leaves"]
    assert {r.name for r in table} == {results.identity(o.run.path).text for o in outs.values()}
    assert [r.method for r in results.rows(store, data="bark")] == ["nca"]
    text = results.text_table(table)
    assert "bark #" in text and "leaves #" in text


def test_load_run_by_method_data_and_seed(two_folders):
    store, outs = two_folders
    for key, out in outs.items():
        folder, method, seed = key.split("-")
        assert api.load_run("98_names", store, method=method, data=folder, seed=int(seed)).path == out.run.path
    digest = outs["bark-nca-0"].run.config["data"]["content_sha256"]
    assert api.load_run("98", store, data=digest[:8]).path == outs["bark-nca-0"].run.path  # the hash, a number
    assert api.load_run("98_names", store, data=f"#{digest[:6]}").path == outs["bark-nca-0"].run.path
    name = results.identity(outs["leaves-nca-1"].run.path).text  # as ./study results shows it
    assert api.load_run(name, store).path == outs["leaves-nca-1"].run.path
    with pytest.raises(FileNotFoundError, match=r"no run '98_names' with method='pn', data='bark'"):
        api.load_run("98_names", store, method="pn", data="bark")


def test_an_ambiguous_call_lists_candidates_by_what_differs_with_the_exact_call(two_folders):
    store, outs = two_folders
    with pytest.raises(LookupError) as err:
        api.load_run("98_names", store, method="nca", seed=0)
    text = str(err.value)
    lines = text.splitlines()
    assert len(lines) <= 10 and lines[0].endswith("they differ in data:"), text
    calls = re.findall(r"(api\.load_run\(.*\))$", text, flags=re.M)
    assert len(calls) == 2
    for call in calls:  # each listed call, run as written, loads a different one of the two candidates
        found = eval(call, {"api": api})  # noqa: S307 (the message's own text)
        assert found.path in (outs["leaves-nca-0"].run.path, outs["bark-nca-0"].run.path)
    assert "data='bark'" in text and "data='leaves'" in text
    with pytest.raises(LookupError) as err:
        api.load_run("98_names", store)
    lines = str(err.value).splitlines()
    assert len(lines) == 5 and "differ in method, data, seed" in lines[0]  # 4 candidates
    for line in lines[1:]:
        found = eval(line.split(": ", 1)[1], {"api": api})  # noqa: S307
        assert found.path in {o.run.path for o in outs.values()}


def test_an_error_stays_within_ten_lines_however_many_candidates(two_folders, tmp_path):
    import shutil
    store, outs = two_folders
    copy = RunStore(tmp_path / "store")
    src = outs["leaves-nca-0"].run.path
    for i in range(12):  # twelve configurations that differ only in a parameter
        dst = copy.root / f"98_names-nca-{i:012x}"
        shutil.copytree(src, dst)
        import json
        cfg = json.loads((dst / "config.json").read_text())
        cfg["train"]["lr"] = 0.01 * (i + 1)
        (dst / "config.json").write_text(json.dumps(cfg))
    before = sorted((p, p.stat().st_mtime_ns) for p in copy.root.rglob("*"))
    with pytest.raises(LookupError) as err:
        api.load_run("98_names-nca", copy)
    assert sorted((p, p.stat().st_mtime_ns) for p in copy.root.rglob("*")) == before  # a lookup writes nothing
    lines = str(err.value).splitlines()
    assert len(lines) == 10 and "parameters (train.lr)" in lines[0] and lines[-1].startswith("  ... and 4 more")
    assert all("api.load_run('98_names-nca-0000000000" in line for line in lines[1:-1])


def test_beclr_seeds_are_grouped_and_the_latex_export_is_a_methods_by_shots_table():
    """The grouping key leaves out BECLR's method-option seed (its memory's clustering, equal to the training
    seed), so its seeds group like every other method's; --latex is one methods x shots table per data set and
    protocol, with mean ± CI cells and a caption of the shared setting."""
    import json
    base = {"method": "beclr", "backbone": "conv4", "data": {"content_sha256": "ab" * 32},
            "train": {"epochs": 4, "lr": 0.1}}
    cfgs = [{**base, "method_options": {"lam": 0.1, "seed": s}, "train": {**base["train"], "seed": s}}
            for s in range(3)]
    assert len({results.config_key(c) for c in cfgs}) == 1
    other = {**cfgs[0], "method_options": {"lam": 0.1, "seed": 5}}  # a seed option unlike the training seed
    assert results.config_key(other) != results.config_key(cfgs[0])
    rows = []
    for method, shift in (("nca", 0.0), ("beclr", -0.1)):
        for s, m in enumerate((0.60, 0.62, 0.64)):
            params = f"conv4 shuffled ep4 lr0.1 seed{s}" + (f" lam=0.1 seed={s}" if method == "beclr" else "")
            rows.append(results.Row(run=f"{method}{s}", notebook="90_use_your_data", method=method,
                                    data="leaves #abababab", params=params, status="finished", created="",
                                    commit="", device="cpu", protocol="5-way 5q 300 ep",
                                    accuracies={"nearest_centroid/1": (m + shift, 0.01),
                                                "nearest_centroid/5": (m + shift + 0.1, 0.01)},
                                    seed=s, config_key=json.dumps([method]), episodes=300))
    groups = results.group_rows(rows)
    assert [(g.method, g.n, g.params) for g in groups] == [("nca", 3, "conv4 shuffled ep4 lr0.1"),
                                                           ("beclr", 3, "conv4 shuffled ep4 lr0.1 lam=0.1")]
    tex = results.groups_latex(groups)
    body = tex.split(r"\midrule")[1].split(r"\bottomrule")[0].strip().splitlines()
    est = groups[1].accuracies["nearest_centroid/5"]
    assert body[0].startswith("NCA & ") and body[1] == (
        f"BECLR & ${100 * groups[1].accuracies['nearest_centroid/1'].value:.1f} \\pm "
        f"{100 * groups[1].accuracies['nearest_centroid/1'].ci95:.1f}$ & ${100 * est.value:.1f} \\pm "
        f"{100 * est.ci95:.1f}$ \\\\")
    assert "Method & 1-shot & 5-shot \\\\" in tex and tex.count(r"\begin{table}") == 1
    caption = re.search(r"\\caption\{(.*)\}", tex).group(1)
    assert "leaves" in caption and "5-way" in caption and "3 training seeds" in caption and "conv4" in caption
    assert len(caption) < 300 and "lam" not in caption  # the shared setting only, not every parameter


def test_per_seed_lines_fit_120_columns(two_folders):
    store, _ = two_folders
    table = results.rows(store)
    long = dataclasses.replace(table[0], params=table[0].params + " " + " ".join(f"opt{i}=value{i}" for i in range(60)),
                               device="cuda:0 (NVIDIA H200 with a very long device name indeed)")
    text = results.text_table([*table, long])
    assert max(map(len, text.splitlines())) <= 120
    assert "opt59=value59" in text  # wrapped, not cut
