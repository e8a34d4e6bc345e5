"""Issue 42's rules on how claims are stated and counted: one band rule for every directional claim, the size of
an effect beside its sign, extrapolations kept out of the paper-claim counts, and one finding counted once."""

from __future__ import annotations

import pytest

from studylib.claims import page as P
from studylib.claims.registry import EXTRAPOLATION, PAPER, REGISTRY, Meta, meta, paper_effect
from studylib.claims.store import static_claims
from studylib.evaluation.stats import over_seeds
from studylib.evaluation.verdicts import DEFAULT_DELTA, Judgement
from studylib.paths import notebook_names, params_dir


def _listings(scales=("smoke", "evidence")):
    for nb in notebook_names():
        for scale in scales:
            if (params_dir() / nb / f"{scale}.yaml").exists():
                yield nb, scale, static_claims(nb, scale)


def test_every_measured_directional_claim_has_a_band_or_says_why_not():
    """A directional claim without a no-effect band can never read "no effect": allowed only where the registry
    states why (an effect in a unit the paper gives no size in)."""
    missing = []
    for nb, scale, table in _listings():
        for c in table:
            if c.applies and c.expect.kind in ("greater", "less") and c.expect.band(c.unit) is None \
                    and not meta(nb, c.id, c.expect.kind).no_band:
                missing.append(f"{nb}:{c.id} ({scale})")
    assert not missing, f"directional claims with no band and no reason: {missing}"


def test_each_band_is_half_the_papers_effect_at_most_one_point():
    """The band rule against the paper's numbers: where the registry knows the paper's effect (the two numbers
    the citations quote, or a stated difference), the claim's band is half of it, at most 1 pt. The experiment
    modules compute their bands themselves (``beats``); this holds them to the citations."""
    checked = wrong = 0
    bad = []
    for nb, scale, table in _listings():
        for c in table:
            m = meta(nb, c.id, c.expect.kind)
            pe = paper_effect(m)
            if not c.applies or c.expect.kind not in ("greater", "less") or pe is None or c.unit != 100:
                continue
            checked += 1
            want = min(abs(pe) / 200, DEFAULT_DELTA)
            if c.expect.band(c.unit) != pytest.approx(want, abs=1e-9):
                wrong += 1
                bad.append(f"{nb}:{c.id} ({scale}) band {c.expect.band(c.unit)} != half of {pe} pts")
    assert checked >= 20 and not bad, bad


def test_the_papers_effect_comes_from_two_quoted_numbers_or_is_stated():
    """paper_effect by hand: 05's 'ours beat Snell' 1-shot PN row quotes 61.32 and 59.78; 11's Omniglot column
    quotes mAP (0.740 - 0.145 = 59.5 pts); 08's Fig. 8 gain is stated (97.77 - 68.58); a claim quoting several
    columns has none unless stated; proxies have none (their numbers are another setting's)."""
    assert paper_effect(meta("05_comparison", "t2-ours-beat-snell-pn-1shot")) == pytest.approx(1.54)
    assert paper_effect(meta("11_set2model", "t1-gauss-beats-nn-ft")) == pytest.approx(59.5)
    assert paper_effect(meta("08_opta_before_after", "fig8-opta-gain")) == pytest.approx(29.19)
    assert paper_effect(meta("11_set2model", "t1-gauss-beats-avg-ft")) == pytest.approx(0.740 * 100 - 66.1)
    assert paper_effect(meta("07_dyce_memory_umap", "t6-dyce-beats-fifo")) is None  # a proxy


def test_the_size_is_the_measured_effect_over_the_papers_with_its_interval():
    """Row.size by hand: a 1-shot OpTA gain of +8.0 +- 1.0 pts (4 seeds) against the paper's 75.74 - 66.14 =
    9.60 pts: 0.83x (0.73x to 0.94x)."""
    e = over_seeds([0.07, 0.08, 0.09, 0.08])
    row = P.Row("06_beclr_pretraining", "t1-opta-gain-1shot", "greater", "judged", "evidence",
                Judgement("reproduced", "", "reproduced"), e, "+8.0", unit=100.0)
    lo, hi = (e.value - e.ci95) * 100 / 9.6, (e.value + e.ci95) * 100 / 9.6
    assert row.size() == f"0.83x the paper's +9.60 pts ({lo:.2g}x to {hi:.2g}x)"
    assert "(size: 0.83x the paper's +9.60 pts" in row.cell()
    assert P.Row("06_beclr_pretraining", "fig7-gain-grows", "greater", "judged", "evidence",
                 Judgement("inconclusive", ""), e).size() == ""  # the paper gives no number


def test_extrapolations_are_shown_and_never_counted_as_paper_claims():
    """02's batch-64 claims lie below Fig. 2's batch sizes (128, 256, 512): extrapolations, out of the
    paper-claim counts and the decided table; its batch-128 claims are paper claims."""
    listing = {"02_batch_size_sweep": list((c.id, c) for c in static_claims("02_batch_size_sweep", "evidence"))}
    b64 = [cid for cid, _ in listing["02_batch_size_sweep"] if cid.endswith("-b64")]
    assert len(b64) == 4 and all(meta("02_batch_size_sweep", cid).evidence == EXTRAPOLATION for cid in b64)
    assert all(meta("02_batch_size_sweep", cid.replace("-b64", "-b128")).evidence == PAPER for cid in b64)
    decided = Judgement("not reproduced", "", "not reproduced (reversed)", "difference", 0.001, 0.001, 8)
    rows = {("02_batch_size_sweep", cid): P.Row("02_batch_size_sweep", cid, c.expect.kind, "judged", "evidence",
                                                decided, over_seeds([-0.1, -0.12, -0.11]))
            for cid, c in listing["02_batch_size_sweep"]}
    counted = {cid: ev for _, cid, _, _, ev in P._canonical(listing, rows)}
    assert {counted[c] for c in b64 if c in counted} == {EXTRAPOLATION}
    decided = [line.split(" | ")[2] for line in P._decided(listing, rows)[2:]]  # the claim column
    assert any("batch 128" in c for c in decided) and not any("batch 64" in c for c in decided)
    paper_row = next(line for line in P._by_paper(listing, rows) if line.startswith("| 000"))
    assert paper_row.split("|")[3].strip() == str(sum(1 for c, ev in counted.items() if ev == PAPER))


def test_one_finding_is_counted_once():
    """09's "colour, not orientation" follows the hue-noise colour claim: shown with "follows", not counted."""
    m = meta("09_spe_synthetic", "fig3-hue-noise-colour-not-orientation")
    assert m.follows == "09_spe_synthetic:fig3-hue-noise-raises-colour-variance" and m.counted_once_with
    listing = {"09_spe_synthetic": list((c.id, c) for c in static_claims("09_spe_synthetic", "evidence"))}
    rows = {("09_spe_synthetic", cid): P.Row("09_spe_synthetic", cid, c.expect.kind, "judged", "evidence")
            for cid, c in listing["09_spe_synthetic"]}
    ids = {cid for _, cid, _, _, _ in P._canonical(listing, rows)}
    assert "fig3-hue-noise-raises-colour-variance" in ids and "fig3-hue-noise-colour-not-orientation" not in ids
    with pytest.raises(ValueError, match="not both"):
        Meta(alias_of="a:b", follows="a:c")


def test_every_follows_and_alias_names_a_registered_claim_of_a_notebook():
    listed = {(nb, c.id) for nb, _, t in _listings(("smoke", "evidence", "paper")) for c in t}
    for (nb, cid), m in REGISTRY.items():
        target = m.counted_once_with
        if target:
            tnb, tid = target.split(":", 1)
            assert (tnb, tid) in listed, f"{nb}:{cid} is counted with {target}, which no notebook lists"


def test_the_notebooks_table_shows_the_size_beside_the_sign():
    """The notebook's own table (ClaimsTable.frame and its conclusion) carries the same size as the page."""
    from studylib.claims.table import effect_size
    table = static_claims("06_beclr_pretraining", "evidence")
    e = over_seeds([0.07, 0.08, 0.09, 0.08])
    table.measure("t1-opta-gain-1shot", e)
    frame = table.frame().set_index("id")
    want = effect_size("06_beclr_pretraining", "t1-opta-gain-1shot", "greater", e)
    assert want.startswith("0.83x the paper's +9.60 pts") and frame.loc["t1-opta-gain-1shot", "size"] == want
    assert frame.loc["fig7-gain-grows", "size"] == "-"
    assert f"({want})" in table.conclusion()
