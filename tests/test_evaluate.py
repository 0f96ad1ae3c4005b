"""``wikiground eval`` (retriever/evaluate/): gold files as FEVER, HoVer, HotpotQA and KILT write them (made here
from the fixture claims), runs in every output format, figures checked by hand and against ir_measures itself."""

from __future__ import annotations

import json
import random

import pytest

from retriever.evaluate import evaluate
from retriever.evaluate import main as eval_main
from retriever.evaluate.gold import Gold, read_gold, title_key
from retriever.evaluate.measures import score
from retriever.evaluate.runs import Ranking, read_run
from retriever.formats import fever_title, render_all
from retriever.query import main as query_main
from wikiground.errors import InputError

CLAIMS = "claims/fever_dev_fixture_dumps.jsonl"


def _claims(data_dir, name: str) -> list[dict]:
    return [json.loads(x) for x in (data_dir / "claims" / name).read_text().splitlines() if x.strip()]


@pytest.fixture(scope="module")
def json_run(gensim_tfidf, data_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("eval") / "run.jsonl"
    args = ["--index", str(gensim_tfidf), "--indexes", "tfidf,title", "--queries", str(data_dir / CLAIMS)]
    assert query_main([*args, "--out", str(out), "--quiet", "--k", "20"]) == 0
    return out


def test_figures_by_hand():
    gold = {"q": Gold("q", (("A", "B"), ("C",))), "r": Gold("r", (("D",),))}
    run = {"q": Ranking(("X", "A", "C", "B"))}  # r is missing from the run: it counts 0
    f = score(gold, run, (1, 3, 5))["figures"]
    assert f["MRR"] == pytest.approx(0.25)  # (1/2 + 0) / 2
    assert f["R-Precision"] == pytest.approx(0.25)  # q: best set {A, B}: one of its first 2 -> 0.5
    assert f["evidence_set_recall@1"] == 0 and f["evidence_set_recall@3"] == 0.5  # {C} whole at rank 3
    assert f["any_gold_recall@1"] == 0 and f["any_gold_recall@3"] == 0.5
    assert f["all_gold_recall@3"] == 0 and f["all_gold_recall@5"] == 0.5
    assert f["page_recall@3"] == pytest.approx((2 / 3) / 2)


def test_fever_rule_counts_a_whole_group_in_the_first_five():
    gold = {
        "a": Gold("a", (("P",),), ((("P", 1), ("P", 2)),)),
        "b": Gold("b", (("P",),), ((("P", 9),),)),
        "n": Gold("n", (), (), verifiable=False),  # NOT ENOUGH INFO: left out, as FEVER's scorer leaves it
    }
    early = (("P", 0), ("P", 2), ("P", 3), ("P", 4), ("P", 1), ("P", 9))
    run = {"a": Ranking(("P",), early), "b": Ranking(("P",), early), "n": Ranking(("P",), ())}
    result = score(gold, run, (5,))
    assert result["figures"]["fever_evidence_recall@5"] == 0.5 and result["sentence_claims"] == 2


def test_gold_files_as_they_come(data_dir, tmp_path):
    vital = _claims(data_dir, "fever_dev_vital.jsonl")[:30]
    fever = tmp_path / "fever.jsonl"
    fever.write_text(
        "".join(
            json.dumps(
                {
                    "id": c["id"],
                    "label": c["label"],
                    "claim": c["claim"],
                    "evidence": [[[0, 0, fever_title(t), n] for t, n in g] for g in c["evidence_sets_fever2017"]],
                }
            )
            + "\n"
            for c in vital
        )
        + json.dumps({"id": 1, "label": "NOT ENOUGH INFO", "claim": "x", "evidence": [[[5, None, None, None]]]})
        + "\n"
    )
    hotpot = _claims(data_dir, "hotpotqa_dev_multihop.jsonl")[:20]
    hp = tmp_path / "hotpot.json"
    hp.write_text(
        json.dumps([{"_id": c["id"], "supporting_facts": [[t, 0] for t in c["gold_titles"]]} for c in hotpot])
    )
    hover = tmp_path / "hover.json"
    hover.write_text(
        json.dumps([{"uid": c["id"], "supporting_facts": [[t, 1] for t in c["gold_titles"]]} for c in hotpot])
    )
    kilt = tmp_path / "kilt.jsonl"
    kilt.write_text(
        "".join(
            json.dumps(
                {
                    "id": c["id"],
                    "output": [
                        {"answer": "x"},
                        {"provenance": [{"wikipedia_id": "1", "title": t} for t in c["gold_titles"]]},
                    ],
                }
            )
            + "\n"
            for c in hotpot
        )
    )
    got = read_gold(fever)
    assert len(got) == 31 and not got["1"].verifiable
    first = vital[0]
    assert got[str(first["id"])].sentence_sets[0] == tuple((t, n) for t, n in first["evidence_sets_fever2017"][0])
    for path in (hp, hover, kilt):
        g = read_gold(path)
        assert [g[str(c["id"])].pages for c in hotpot] == [tuple(c["gold_titles"]) for c in hotpot]
    assert read_gold(data_dir / "claims" / "hotpotqa_dev_multihop.jsonl")[hotpot[0]["id"]].sets == (
        tuple(hotpot[0]["gold_titles"]),
    )
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": 1, "gold_titles": ["A"]}) + "\n" + json.dumps({"id": 2, "text": "?"}) + "\n")
    with pytest.raises(InputError, match=r"bad.jsonl:2: not a FEVER"):
        read_gold(bad)


def test_title_forms_meet():
    assert title_key("Alexander_-LRB-film-RRB-") == title_key("Alexander (film)") == "Alexander (film)"
    assert title_key("aristotle") == "Aristotle"


def test_every_format_scores_alike_and_trec_matches_ir_measures(json_run, data_dir, tmp_path):
    import ir_measures
    from ir_measures import RR, R, Success, nDCG

    lines = [json.loads(x) for x in json_run.read_text().splitlines()]
    gold = data_dir / CLAIMS
    base = evaluate(gold, json_run)
    assert base["claims"] == 48 and base["missing"] == 0
    assert 0 < base["figures"]["any_gold_recall@5"] < 1  # some gold pages are in other dumps: a real figure
    for fmt in ("trec", "kilt", "fever", "hotpot"):
        path = tmp_path / f"run.{fmt}"
        path.write_text(render_all(lines, fmt))
        got = evaluate(gold, path)["figures"]
        assert got["any_gold_recall@5"] == base["figures"]["any_gold_recall@5"], fmt
        if fmt != "hotpot":  # its pages come in the order of their best sentence, not the page ranking
            assert got["MRR"] == base["figures"]["MRR"], fmt
    trec = tmp_path / "run.trec"
    figures = evaluate(gold, trec)["figures"]
    qrels = [
        ir_measures.Qrel(str(c["id"]), t.replace(" ", "_"), 1)
        for c in _claims(data_dir, "fever_dev_fixture_dumps.jsonl")
        for t in c["gold_titles"]
    ]
    direct = ir_measures.calc_aggregate(
        [Success @ 5, R @ 10, RR, nDCG @ 10], qrels, ir_measures.read_trec_run(str(trec))
    )
    assert figures["any_gold_recall@5"] == pytest.approx(direct[Success @ 5], abs=1e-6)
    assert figures["page_recall@10"] == pytest.approx(direct[R @ 10], abs=1e-6)
    assert figures["MRR"] == pytest.approx(direct[RR], abs=1e-6)
    assert figures["nDCG@10"] == pytest.approx(direct[nDCG @ 10], abs=1e-6)


def test_a_thousand_claims_score_within_two_seconds(data_dir, tmp_path):
    claims = _claims(data_dir, "fever_dev_vital.jsonl") + _claims(data_dir, "hotpotqa_dev_multihop.jsonl")
    rng = random.Random(7)
    titles = [t for c in claims for t in c["gold_titles"]]
    rows = []
    for c in claims[:1000]:
        ranked = rng.sample(titles, 19) + c["gold_titles"][:1]
        rng.shuffle(ranked)
        rows += [f"{c['id']} Q0 {t.replace(' ', '_')} {n} {20 - n} r\n" for n, t in enumerate(ranked, 1)]
    gold = tmp_path / "gold.jsonl"
    gold.write_text("".join(json.dumps({"id": c["id"], "gold_titles": c["gold_titles"]}) + "\n" for c in claims[:1000]))
    run = tmp_path / "run.trec"
    run.write_text("".join(rows))
    result = evaluate(gold, run)
    assert result["claims"] == 1000 and result["figures"]["any_gold_recall@20"] == 1.0
    assert result["seconds"] <= 2.0


def test_eval_command(json_run, data_dir, capsys, tmp_path):
    assert eval_main(["--gold", str(data_dir / CLAIMS), "--run", str(json_run), "--k", "1,5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["figures"]) >= {"any_gold_recall@1", "all_gold_recall@5", "R-Precision", "evidence_set_recall@5"}
    bad = tmp_path / "bad.trec"
    bad.write_text("q1 Q0 A 1 0.5\n")
    assert eval_main(["--gold", str(data_dir / CLAIMS), "--run", str(bad)]) == 2
    assert "bad.trec:1: a TREC run row has 6 columns" in capsys.readouterr().err
    assert read_run(json_run)
