"""Notebook 08_opta_before_after: OpTA (seed 001, Sec. 4.2, Eq. 4) — Fig. 8, Table 5 and Table 4.

* Fig. 8: UMAP of one 3-way 1-shot episode: query embeddings with per-class density contours (seaborn
  ``kdeplot``), the original support prototypes (left) and the OpTA-transported ones (right), the episode's
  accuracy in each title; the claim rests on many such episodes per seed (paired gain, interval over seeds).
* Table 5: component ablation (masking, EMA teacher, DyCE, OpTA), one pretraining per row and seed; the full
  row is notebook 06's run (reused through the run store).
* Table 4: OpTA on top of other pretrainings (seed 000's NCA / PN runs of notebook 05, read from the run store
  or trained through the runner). Off at smoke scale (``table4_methods: []``), since notebook 05's runs alone
  exceed the smoke budget; the paper scale turns it on.

Verdicts come from :func:`claims` by the rules of :mod:`studylib.evaluation.verdicts`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch

from studylib.claims.table import ClaimsTable
from studylib.config import load_params, param
from studylib.evaluation import stats
from studylib.evaluation.episodes import sample_episodes
from studylib.evaluation.opta import opta, standardize
from studylib.evaluation.projection import umap_2d
from studylib.evaluation.verdicts import Claim, Expectation, beats
from studylib.experiments import regimes
from studylib.experiments.beclr_common import (EVAL_SEED, BeclrParams, evaluate_features, final_eval,
                                               final_features, learned_check, load_data, logreg_standardized,
                                               opta_for, per_seed, run_seeds)
from studylib.runs.runner import Outcome, features_of, load_trained, run_spec
from studylib.utils import get_device

NOTEBOOK = "08_opta_before_after"


@dataclass
class Params(BeclrParams):
    """Parameters of ``notebooks/08_opta_before_after.ipynb`` (``params/08_opta_before_after/*.yaml``); the
    defaults are the smoke scale: notebook 06's pretraining, three seeds per Table 5 row (twelve runs)."""

    seeds: list[int] = param([0, 1, 2], help="training seeds, one pretraining per Table 5 row and seed (the full "
                                          "row's runs are notebook 06's)", cut=True)
    episode_ways: int = param(3, ge=2, help="ways of the Fig. 8 episodes")
    episode_shots: int = param(1, ge=1, help="shots of the Fig. 8 episodes")
    episode_index: int = param(0, ge=0, help="which of the seeded episodes Fig. 8 shows")
    umap_neighbors: int = param(10, ge=2, help="UMAP n_neighbors for the episode plot")
    table4_notebook: str = param("05_comparison", choices=("05_comparison",),
                                 help="whose NCA / PN runs Table 4 adds OpTA to")
    table4_methods: list[str] = param([], choices=("nca", "pn", "mn"), cut=True,
                                      help="notebook 05's pretrainings to add OpTA to (empty: no Table 4; at smoke "
                                           "scale their training exceeds the budget)")


def beclr_runs(p: Params, progress: bool = True) -> list[Outcome]:
    """Notebook 06's BECLR (DyCE) runs, one per seed (the same specs, so the same run folders)."""
    return run_seeds(p, "dyce", progress=progress)


def data_stats(p: Params) -> dict[str, Any]:
    """The data set's split statistics (deterministic)."""
    return load_data(p).stats()


# --------------------------------------------------------------------------------------------------- Fig. 8


def episode_before_after(p: Params, feats: torch.Tensor, labels: torch.Tensor) -> dict[str, Any]:
    """One ``episode_ways``-way ``episode_shots``-shot episode: standardised query features, original and
    transported prototypes (Eq. 4), and the episode's accuracy without / with OpTA."""
    eps = sample_episodes(labels, p.episode_ways, p.episode_shots, p.eval_queries, p.episode_index + 1, EVAL_SEED)
    e = p.episode_index
    sup = standardize(feats[eps.support[e:e + 1]].float())                     # [1, w, n, D]
    qry = standardize(feats[eps.query[e:e + 1]].float().flatten(1, 2))         # [1, w*Q, D]
    qlab = torch.arange(p.episode_ways).repeat_interleave(p.eval_queries)
    passes = p.opta_passes_1shot if p.episode_shots == 1 else p.opta_passes_kshot
    moved = opta(sup, qry, passes=passes, epsilon=p.opta_epsilon)[0]
    before = logreg_standardized(sup, qry)[0].argmax(-1)
    after = opta_for(p)(sup, qry)[0].argmax(-1)
    return {"query": qry[0], "query_labels": qlab, "prototypes": sup[0].mean(1), "transported": moved,
            "acc_before": float((before == qlab).double().mean()), "acc_after": float((after == qlab).double().mean())}


def episode_figure(ep: dict[str, Any], neighbors: int = 10, seed: int = 0, title: str = "") -> plt.Figure:
    """Fig. 8: one joint UMAP of queries and both prototype sets; left original, right transported prototypes."""
    import seaborn as sns
    w = ep["prototypes"].shape[0]
    x = torch.cat([ep["query"], ep["prototypes"], ep["transported"]]).double().numpy()
    xy = umap_2d(x, neighbors=neighbors, seed=seed)
    nq = ep["query"].shape[0]
    q, po, pt = xy[:nq], xy[nq:nq + w], xy[nq + w:]
    lab = ep["query_labels"].numpy()
    fig, ax = plt.subplots(1, 2, figsize=(9.5, 4.2), sharex=True, sharey=True)
    for a, protos, name, acc in ((ax[0], po, "before OpTA", ep["acc_before"]),
                                 (ax[1], pt, "after OpTA", ep["acc_after"])):
        for c in range(w):
            color = f"C{c}"
            sns.kdeplot(x=q[lab == c, 0], y=q[lab == c, 1], ax=a, color=color, levels=4, alpha=0.6, warn_singular=False)
            a.scatter(q[lab == c, 0], q[lab == c, 1], s=10, color=color, alpha=0.7)
            a.scatter(protos[c, 0], protos[c, 1], s=260, marker="*", color=color, edgecolor="k", lw=1.2, zorder=5)
        a.set(title=f"{name}: accuracy {100 * acc:.1f}%", xticks=[], yticks=[], xlabel="", ylabel="")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def fig8_results(p: Params, outcomes: list[Outcome]) -> list[dict]:
    """Per seed: accuracy without / with OpTA over ``eval_episodes`` episodes of Fig. 8's shape (each training
    seed its own episodes)."""
    out = []
    for o in outcomes:
        feats, labels, _ = final_features(o, p.eval_split)
        out.append(evaluate_features(p, feats, labels, o.spec.train.seed, ways=p.episode_ways,
                                     shots=[p.episode_shots]))
    return out


def fig8_gain(p: Params, res: list[dict]) -> stats.Estimate:
    """OpTA's paired gain on Fig. 8's episodes, over seeds."""
    s = p.episode_shots
    return stats.paired_difference(per_seed(res, "opta", s), per_seed(res, "logreg", s))


def fig8_table(p: Params, res: list[dict]) -> list[dict[str, Any]]:
    s = p.episode_shots
    return [{"episodes": f"{p.eval_episodes} x {p.episode_ways}-way {s}-shot", "seeds": len(res),
             "without OpTA (%)": stats.accuracy(per_seed(res, "logreg", s)).fmt(),
             "with OpTA (%)": stats.accuracy(per_seed(res, "opta", s)).fmt(),
             "gain (points)": fig8_gain(p, res).fmt(signed=True)}]


# --------------------------------------------------------------------------------------------------- Table 5

ABLATION = {"masking": {"ema": False, "use_dyce": False},
            "EMA": {"mask_ratio": 0.0, "use_dyce": False},
            "masking + EMA": {"use_dyce": False},
            "masking + EMA + DyCE": {}}
ABLATION_LABELS = {"masking": "noema-nodyce", "EMA": "nomask-nodyce", "masking + EMA": "nodyce",
                   "masking + EMA + DyCE": "dyce"}


def ablation_runs(p: Params, progress: bool = True) -> dict[str, list[Outcome]]:
    """The Table 5 rows that need pretraining, one run per seed (the last row is notebook 06's runs)."""
    return {row: run_seeds(p, ABLATION_LABELS[row], progress=progress, **opts) for row, opts in ABLATION.items()}


def run(p: Params, progress: bool = True) -> dict[str, list[Outcome]]:
    """Every pretraining this notebook needs: the Table 5 rows (the full one is notebook 06's DyCE runs)."""
    return ablation_runs(p, progress)


def results(p: Params, outcomes: dict[str, list[Outcome]]) -> dict[str, list[dict]]:
    """Final accuracy with and without OpTA of every row's seeds (cached in the run folders)."""
    return {row: [final_eval(p, o) for o in os] for row, os in outcomes.items()}


def table5(p: Params, outcomes: dict[str, list[Outcome]]) -> list[dict[str, Any]]:
    """Rows of Table 5: each pretraining without OpTA, and the full model with OpTA (mean ± 95% interval over
    seeds, %), beside the paper's numbers."""
    res = results(p, outcomes)
    rows = []
    for row in outcomes:
        rows.append({"components": row, "seeds": len(res[row]),
                     **{f"{s}-shot": stats.accuracy(per_seed(res[row], "logreg", s)).fmt() for s in p.eval_shots}})
    full = res["masking + EMA + DyCE"]
    rows.append({"components": "masking + EMA + DyCE + OpTA", "seeds": len(full),
                 **{f"{s}-shot": stats.accuracy(per_seed(full, "opta", s)).fmt() for s in p.eval_shots}})
    for r in rows:
        paper = PAPER_TABLE5.get(r["components"])
        r["paper 1-shot / 5-shot"] = f"{paper[0]:.2f} / {paper[1]:.2f}" if paper else "-"
    return rows


# --------------------------------------------------------------------------------------------------- Table 4


def table4_runs(p: Params, progress: bool = True) -> dict[str, list[Outcome]]:
    """Notebook 05's runs of ``p.table4_methods`` at ``p.scale``, one per seed of notebook 05 (loaded from the
    run store, or trained through the runner)."""
    if not p.table4_methods:
        return {}
    from studylib.experiments import comparison
    from studylib.experiments.episodes_common import episodic, make_spec, nca, train_size
    cp = load_params(comparison.Params, p.table4_notebook, p.scale)
    n = train_size(cp)
    variants = {"nca": nca(cp.batch_size), "pn": episodic("pn", cp.batch_size, *cp.ours),
                "mn": episodic("mn", cp.batch_size, *cp.ours)}
    seeds = list(getattr(cp, "seeds", [0]))
    return {m: [run_spec(make_spec(cp, variants[m], s, n), progress=progress) for s in seeds]
            for m in p.table4_methods}


def table4_results(p: Params, runs: dict[str, list[Outcome]]) -> dict[str, list[dict]]:
    """Each run's test features with and without OpTA (BECLR's inference protocol, the same episodes)."""
    out: dict[str, list[dict]] = {}
    for name, os in runs.items():
        out[name] = []
        for o in os:
            method, transform, dataset = load_trained(o)
            device = get_device(o.spec.train.device)
            split = dataset[p.eval_split]
            feats = features_of(method, split, transform, device).cpu()  # load_trained: on the run's device
            out[name].append(evaluate_features(p, feats, split.labels, o.spec.train.seed))
    return out


def table4(p: Params, res: dict[str, list[dict]]) -> list[dict[str, Any]]:
    rows = []
    for name, r in res.items():
        row: dict[str, Any] = {"pretraining": name.upper(), "seeds": len(r)}
        for s in p.eval_shots:
            row[f"{s}-shot"] = stats.accuracy(per_seed(r, "logreg", s)).fmt()
            row[f"{s}-shot + OpTA"] = stats.accuracy(per_seed(r, "opta", s)).fmt()
        rows.append(row)
    return rows


# ------------------------------------------------------------------------------------------------- claims

# Seed 001 Table 4 (+OpTA) and Table 1 (without), miniImageNet 5-way, %: 1-shot, 5-shot.
PAPER_TABLE4 = {"CPNWCP": ((53.14, 67.36), (60.45, 75.84)), "HMS": ((58.20, 75.77), (69.85, 80.77)),
                "PsCo": ((47.24, 65.48), (52.89, 67.42)), "UniSiam": ((64.10, 82.26), (72.54, 82.46))}

# Seed 001 Table 5 (miniImageNet, ResNet-50, %) as far as the seed text is legible; the DyCE row is derived
# from the text (+OpTA gives 12.8 / 2.3 points on top of it).
PAPER_TABLE5 = {"masking": (54.53, 68.35), "EMA": (65.02, 82.33), "masking + EMA": (65.33, 82.69),
                "masking + EMA + DyCE": (67.77, 85.52), "masking + EMA + DyCE + OpTA": (80.57, 87.82)}

T5_CLAIMS = {  # id: (claim, row a, row b, shots): effect = row a - row b, without OpTA
    "t5-ema-teacher-helps": ("Adding the EMA teacher to masking raises accuracy", "masking + EMA", "masking", 1),
    "t5-masking-helps-with-ema": ("Masking on top of the EMA teacher gives a slight boost", "masking + EMA", "EMA",
                                  1),
    "t5-dyce-helps-1shot": ("DyCE raises 1-shot accuracy", "masking + EMA + DyCE", "masking + EMA", 1),
    "t5-dyce-helps-5shot": ("DyCE raises 5-shot accuracy", "masking + EMA + DyCE", "masking + EMA", 5),
}


def claims(p: Params, outcomes: dict[str, list[Outcome]] | None = None,
           fig8: list[dict] | None = None, t4: dict[str, list[dict]] | None = None) -> ClaimsTable:
    """The claims of seed 001 this notebook tests (from ``p`` alone), measured when ``outcomes`` (Table 5
    runs) are given; ``fig8`` / ``t4`` are the per-seed results of :func:`fig8_results` and
    :func:`table4_results` (computed here when missing).

    Regime checks: every pretraining a claim is about beats its random encoder
    (:func:`~studylib.experiments.beclr_common.learned_check`): a Table 5 comparison is gated by both rows; OpTA's
    gain on the full model (Fig. 8, Table 5's last row) by the full model's check (OpTA is a claim about good
    features: Fig. 7); Table 4's gains by the notebook-05 pretraining they use."""
    t5 = PAPER_TABLE5
    rows = [Claim("fig8-opta-gain", f"OpTA moves the prototypes onto the query distribution and raises accuracy "
                  f"({p.episode_ways}-way {p.episode_shots}-shot)", "Fig. 8, Sec. 5.1 [A3-a]",
                  "68.58 -> 97.77 (one 3-way 1-shot episode)",
                  f"OpTA - no OpTA over {p.eval_episodes} such episodes, paired", Expectation("greater"))]
    for cid, (text, a, b, s) in T5_CLAIMS.items():
        i = 0 if s == 1 else 1
        rows.append(Claim(cid, text, "Table 5 (miniImageNet, ResNet-50), Sec. 5.2",
                          f"{t5[a][i]:.2f} vs {t5[b][i]:.2f}", f"'{a}' - '{b}', {s}-shot, no OpTA, paired episodes",
                          beats("greater", (t5[a][i] - t5[b][i]) / 100), applies=s in p.eval_shots,
                          why_not=f"eval_shots lacks {s}"))
    rows.append(Claim("t5-opta-helps-1shot", "OpTA on top of masking + EMA + DyCE raises 1-shot accuracy",
                      "Table 5 (miniImageNet, ResNet-50), Sec. 5.2", f"{t5['masking + EMA + DyCE + OpTA'][0]:.2f} vs "
                      f"{t5['masking + EMA + DyCE'][0]:.2f}", "OpTA - no OpTA, full model, 1-shot, paired episodes",
                      beats("greater", (t5['masking + EMA + DyCE + OpTA'][0] - t5['masking + EMA + DyCE'][0]) / 100), applies=1 in p.eval_shots, why_not="eval_shots lacks 1"))
    uni = PAPER_TABLE4["UniSiam"]
    for m in ("nca", "pn", "mn"):
        rows.append(Claim(f"t4-opta-helps-{m}", f"OpTA raises the 1-shot accuracy of another pretraining "
                          f"({m.upper()}: notebook 05's supervised ResNet-12, not Table 4's unsupervised RN18 "
                          "ones)", "Table 1 and Table 4 (miniImageNet, RN18)",
                          f"e.g. UniSiam {uni[0][0]:.2f} -> {uni[1][0]:.2f}", "OpTA - no OpTA, 1-shot, paired episodes",
                          Expectation("greater"), applies=m in p.table4_methods and 1 in p.eval_shots,
                          why_not="table4_methods does not include it (off at smoke scale: notebook 05's runs "
                                  "exceed the budget)"))
    table = ClaimsTable(NOTEBOOK, p.scale, rows)
    if outcomes is None:
        return table
    fig8 = fig8 if fig8 is not None else fig8_results(p, outcomes["masking + EMA + DyCE"])
    table.measure("fig8-opta-gain", fig8_gain(p, fig8))
    res = results(p, outcomes)
    for cid, (_, a, b, s) in T5_CLAIMS.items():
        if table[cid].applies:
            table.measure(cid, stats.paired_difference(per_seed(res[a], "logreg", s), per_seed(res[b], "logreg", s)))
    full = res["masking + EMA + DyCE"]
    if 1 in p.eval_shots:
        table.measure("t5-opta-helps-1shot", stats.paired_difference(per_seed(full, "opta", 1),
                                                                     per_seed(full, "logreg", 1)))
    gates: dict[str, list[str]] = {cid: [a, b] for cid, (_, a, b, _) in T5_CLAIMS.items()}
    gates.update({"fig8-opta-gain": ["masking + EMA + DyCE"], "t5-opta-helps-1shot": ["masking + EMA + DyCE"]})
    gates = {cid: rows for cid, rows in gates.items() if table[cid].applies}
    for row, ids in regimes.claims_of(gates).items():
        table.regime(learned_check(p, f"Table 5 row '{row}'", outcomes[row], res[row], ids))
    if p.table4_methods and 1 in p.eval_shots:
        runs = table4_runs(p)
        t4 = t4 if t4 is not None else table4_results(p, runs)
        for m in p.table4_methods:
            table.measure(f"t4-opta-helps-{m}", stats.paired_difference(per_seed(t4[m], "opta", 1),
                                                                        per_seed(t4[m], "logreg", 1)))
            table.regime(learned_check(p, f"notebook 05's {m.upper()}", runs[m], t4[m], [f"t4-opta-helps-{m}"]))
    return table


def reference_values(p: Params, outcomes: dict[str, list[Outcome]],
                     fig8: list[dict] | None = None) -> dict[str, stats.Estimate | float | int]:
    """The trained numbers the notebook asserts against its stored reference (all over >= 2 seeds)."""
    fig8 = fig8 if fig8 is not None else fig8_results(p, outcomes["masking + EMA + DyCE"])
    res = results(p, outcomes)
    out: dict[str, stats.Estimate | float | int] = {"runs": sum(len(os) for os in outcomes.values()),
                                                    "fig8/gain": fig8_gain(p, fig8)}
    for row, r in res.items():
        for s in p.eval_shots:
            out[f"{row}/logreg/{s}"] = stats.accuracy(per_seed(r, "logreg", s))
    for s in p.eval_shots:
        out[f"full/opta/{s}"] = stats.accuracy(per_seed(res["masking + EMA + DyCE"], "opta", s))
    return out


__all__ = ["NOTEBOOK", "Params", "beclr_runs", "data_stats", "episode_before_after", "episode_figure",
           "fig8_results", "fig8_gain", "fig8_table", "ABLATION", "ablation_runs", "run", "results", "table5",
           "table4_runs", "table4_results", "table4", "claims", "reference_values", "PAPER_TABLE4", "PAPER_TABLE5",
           "final_features", "np", "plt"]
