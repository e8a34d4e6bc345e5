"""The registry of claims (``studylib/claims/registry.py``) against the experiment modules and the
committed claims tables: an alias is one measurement with its canonical claim (the same rule, the same per-seed
values wherever both are committed), a replication the same claim on runs of its own, every alias names an
existing canonical claim, the kinds of evidence issue 27 corrected hold, and no registry text overrides a
module's own (the notebooks print the module's texts, the page shows them)."""

from __future__ import annotations

import json

import pytest

from studylib.claims import registry as R
from studylib.claims.store import committed_claims_path, static_claims


def _listing(notebook: str) -> dict[str, dict]:
    """``{scale: {claim id: Claim}}`` of a notebook at the smoke and paper scales."""
    return {scale: {c.id: c for c in static_claims(notebook, scale)} for scale in ("smoke", "paper")}


def _seeds(notebook: str, scale: str) -> dict[str, list[float]]:
    """Per-seed values of the measured claims of a committed claims table (``params/<nb>/<scale>.claims.json``)."""
    path = committed_claims_path(notebook, scale)
    if not path.is_file():
        return {}
    out = {}
    for c in json.loads(path.read_text())["claims"]:
        m = c.get("measured")
        if isinstance(m, dict) and m.get("seeds"):
            out[c["id"]] = m["seeds"]
    return out


ALIASES = {key: m for key, m in R.REGISTRY.items() if m.alias_of}


def test_every_alias_names_an_existing_canonical_claim():
    assert ALIASES
    for (nb, cid), m in ALIASES.items():
        anb, aid = m.alias_of.split(":")
        own, target = _listing(nb), _listing(anb)
        assert any(cid in ids for ids in own.values()), f"{nb}:{cid} is in no listing of {nb}"
        assert any(aid in ids for ids in target.values()), f"{nb}:{cid} aliases {m.alias_of}, which does not exist"
        assert R.REGISTRY.get((anb, aid), R.Meta()).alias_of is None, f"{m.alias_of} is itself an alias"
        assert (anb, aid) != (nb, cid)


@pytest.mark.parametrize("key", sorted(ALIASES), ids=lambda k: f"{k[0][:2]}:{k[1]}")
def test_an_alias_has_its_canonicals_rule(key):
    """At every scale where both are listed: the same kind of rule (and margin)."""
    (nb, cid), m = key, ALIASES[key]
    anb, aid = m.alias_of.split(":")
    own, target = _listing(nb), _listing(anb)
    both = [s for s in own if cid in own[s] and aid in target[s]]
    assert both, f"{nb}:{cid} and {m.alias_of} share no scale"
    for s in both:
        a, b = own[s][cid].expect, target[s][aid].expect
        assert (a.kind, a.margin) == (b.kind, b.margin), (s, a, b)


def test_an_alias_is_the_same_measurement_and_a_replication_is_not():
    """Where both claims are in committed tables of one scale: a plain alias has its canonical's per-seed values,
    a replication (its own runs) other values."""
    compared = 0
    for (nb, cid), m in ALIASES.items():
        anb, aid = m.alias_of.split(":")
        for scale in ("smoke", "paper"):
            a, b = _seeds(nb, scale).get(cid), _seeds(anb, scale).get(aid)
            if a is None or b is None:
                continue
            compared += 1
            same = len(a) == len(b) and all(x == pytest.approx(y, abs=1e-12) for x, y in zip(a, b))
            if m.replication:
                assert not same, f"{nb}:{cid} has {m.alias_of}'s values: a plain alias, not a replication"
            else:
                assert same, f"{nb}:{cid} {a} is not {m.alias_of} {b}: another measurement, not an alias"
    assert compared >= 5  # 00's replication, 02's two MN 1-shot rows, 04's App. H row, 08's Table 5 OpTA row


def test_the_registry_overrides_no_module_text():
    """The notebooks print the experiment modules' ``source`` and ``paper`` texts and the page shows them: a
    registry text that differed would make the page cite what the notebook does not."""
    for (nb, cid), m in R.REGISTRY.items():
        for scale, claims in _listing(nb).items():
            c = claims.get(cid)
            if c is None:
                continue
            assert m.paper is None or m.paper == c.paper, (nb, cid, scale, m.paper, c.paper)
            assert m.source is None or m.source == c.source, (nb, cid, scale, m.source, c.source)


def test_proxies_and_own_claims_say_why():
    for key, m in R.REGISTRY.items():
        if m.evidence in (R.PROXY, R.OWN):
            assert m.note, f"{key}: a {m.evidence} says why in its note"


def test_issue27_kinds():
    """The kinds issue 27 found wrong: 11's -PL rows and its simulated noise / polysemy sets, 08's Table 4 rows
    (OpTA on 05's supervised ResNet-12), 11's levels on another network are proxies; the histogram loss check is
    an implementation check; 13's 5-shot model comparison is the study's own."""
    proxies = [("11_set2model", c) for c in ("t1-ft-beats-pl-gauss", "t1-ft-beats-pl-gmm", "t1-ft-beats-pl-avg",
                                             "sec31-gauss-pl-beats-svm-pl", "t1-avg-pl-beats-nn-pl",
                                             "t1-ft-beats-pl-nn", "fig3-gmm-beats-gauss-polysemous",
                                             "sec44-gmm-beats-gauss-noisy", "t1-gmm-beats-avg-ft-polysemous",
                                             "t1-omniglot-gauss-level", "t1-omniglot-avg-level")]
    proxies += [("08_opta_before_after", f"t4-opta-helps-{m}") for m in ("nca", "pn", "mn")]
    for nb, cid in proxies:
        assert R.meta(nb, cid).evidence == R.PROXY, (nb, cid)
    assert R.meta("11_set2model", "sec32-hist-approximates-eq5", "within").evidence == R.IMPLEMENTATION
    assert R.meta("13_infopatch", "5shot-model-beats-1shot-model").evidence == R.OWN
    aliases = {(nb, cid): m.alias_of for (nb, cid), m in ALIASES.items()}
    assert aliases[("07_dyce_memory_umap", "level-t6-dyce")] == "06_beclr_pretraining:level-opta-5shot"
    for b in (256, 512):
        assert aliases[("04_ablations", f"appH-all-ablations-1shot-b{b}")] == \
            f"04_ablations:fig4-all-ablations-1shot-b{b}"
        assert aliases[("02_batch_size_sweep", f"fig2-nca-beats-mn-1shot-b{b}")] == \
            f"02_batch_size_sweep:fig2-nca-beats-pn-1shot-b{b}"
    # row 3 - row 6 with soft assignment is not Fig. 4's row 3 - row 5 with the nearest centroid
    assert ("04_ablations", "appH-all-ablations-5shot-b128") not in aliases
    # min(gain1 - gain5, gain1) is the 1-shot gain only where OpTA does not help 5-shot (test_beclr_experiments)
    assert ("06_beclr_pretraining", "t1-gain-1shot-exceeds-5shot") not in aliases


def test_a_replication_must_name_its_claim():
    with pytest.raises(ValueError, match="alias_of"):
        R.Meta(replication=True)
