"""``advise`` on every corpus model (guardjit/bench/corpus.py), quick
factories and the fewest rounds: every side measures, every report field is
there, guardjit's own verdict is safe and each verdict is judged against
plain torch. The numbers themselves are not checked (docs/advise.md has a
full run)."""

from __future__ import annotations

import pytest

import guardjit.advise
from guardjit.advise import REPORT_FIELDS, Settings
from guardjit.advise_measure import SIDES
from guardjit.bench.corpus import CORPUS

FEWEST = Settings(rounds=1, profile_calls=2, target_ms=0.05, depth=2, groups=1, changes=2)


@pytest.mark.parametrize("name", list(CORPUS))
def test_advise_runs_on_every_corpus_model(name):
    case = CORPUS[name](True)
    args, kwargs = case.inputs()
    r = guardjit.advise(case.model, args, example_kwargs=kwargs, name=case.name,
                        layers=case.layers, settings=FEWEST)
    assert set(REPORT_FIELDS) <= set(r)
    assert list(r["sides"]) == list(SIDES)
    for side, s in r["sides"].items():
        assert s["status"] == "ok", (side, s)
        assert s["call_us"] > 0, side
    assert r["sides"]["guardjit"]["lookup_us"] > 0
    assert r["guards"]["units"] and all(u["groups"] for u in r["guards"]["units"])
    assert r["unsafe"]["options"]["guardjit"]["safe"], r["unsafe"]["options"]["guardjit"]
    assert r["unsafe"]["changes"]
