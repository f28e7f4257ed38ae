"""kvzip.search and kvzip.ask (a folder of caches as a library) against `kvzip search` and
`kvzip ask`: the same ranking, the same sources, the same answer."""
import json

import pytest

import kvzip
from conftest import ROOT

pytestmark = pytest.mark.realmodel


@pytest.fixture(scope="module")
def library(tmp_path_factory, model_path):
    d = json.loads((ROOT / "examples" / "normans.json").read_text())
    ps = d["data"][0]["paragraphs"][:3]
    folder = tmp_path_factory.mktemp("library")
    for i, p in enumerate(ps):
        kvzip.compress(p["context"], folder / f"p{i}.kvz", model=model_path, ratio=0.5)
    q = ps[1]["qas"][0]["question"]
    return folder, q


def test_search_and_ask_agree_with_the_cli(library, cli, model_path):
    folder, q = library
    hits = kvzip.search(folder, q, top_k=3, model=model_path)
    assert hits and hits[0]["id"] == "p1"
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)
    ranked = json.loads(cli("search", folder, q, "-k", "3", "--json").stdout)
    assert [s["id"] for s in ranked["sources"]] == [h["id"] for h in hits]

    a = kvzip.ask(folder, q, top_k=2, model=model_path, max_tokens=16)
    ref = json.loads(cli("ask", folder, q, "-k", "2", "-m", model_path, "-n", "16", "--json", "-q").stdout)
    assert [s["id"] for s in a.sources] == [s["id"] for s in ref["sources"]]
    assert a.text == ref["answer"]


def test_hostile_questions_and_a_missing_folder(library, model_path, tmp_path):
    folder, _ = library
    for q in ['"', "NEAR(a b", "Normans AND", "*", "((("]:
        kvzip.search(folder, q, model=model_path)  # never an index error
    with pytest.raises(kvzip.NotFoundError):
        kvzip.search(tmp_path / "nope", "Normans")
