"""Scoring responses generated elsewhere (``costaware eval --responses``): the reader, its FILE:LINE
errors for every kind of bad line, and evaluate(responses=...) with math-verify verdicts."""

from __future__ import annotations

import json

import pytest

from costaware.evaluation import evaluate, fixture_path, load_benchmark
from costaware.evaluation.responses import read_responses

GSM = load_benchmark("gsm8k", fixture_path("gsm8k"))  # gold: gsm8k-0 → 18, gsm8k-1 → 190, gsm8k-2 → 1500


def _write(path, *lines):
    path.write_text("".join((ln if isinstance(ln, str) else json.dumps(ln)) + "\n" for ln in lines))
    return path


def test_read_with_benchmark_gold_and_score(tmp_path):
    f = _write(
        tmp_path / "gen.jsonl",
        {"id": "gsm8k-1", "responses": ["\\boxed{190}", "maybe 19"], "prompt": "P1", "num_tokens": [4, None]},
        "",  # blank lines are skipped
        {"id": "gsm8k-0", "responses": ["The answer is 18.", "\\boxed{18}"], "answer": "18", "extra": 1},
    )
    records, responses, prompts = read_responses(f, benchmark=GSM)
    assert [r.id for r in records] == ["gsm8k-1", "gsm8k-0"] and [r.answer for r in records] == ["190", "18"]
    assert prompts == ["P1", ""] and [c.num_tokens for c in responses[0]] == [4, None]
    rep = evaluate(records, k=2, responses=responses, prompts=prompts)
    assert [p.correct for p in rep.problems] == [[True, False], [True, True]]
    assert rep.mean_at_k == 0.75 and rep.summary["pass_at_k"]["2"] == 1.0
    assert rep.problems[0].extracted[0] == "190" and rep.summary["mean_response_tokens"] == 4.0
    limited, _, _ = read_responses(f, benchmark=GSM, limit=1)
    assert [r.id for r in limited] == ["gsm8k-1"]


def test_read_without_benchmark_uses_each_line_answer(tmp_path):
    f = _write(tmp_path / "g.jsonl", {"id": 7, "responses": ["\\boxed{\\frac12}"], "answer": 0.5})
    records, responses, _ = read_responses(f, name="mine")
    assert (records[0].id, records[0].answer, records[0].benchmark) == ("7", "0.5", "mine")
    assert evaluate(records, k=1, responses=responses).mean_at_k == 1.0


GOOD = {"id": "gsm8k-0", "responses": ["a", "b"]}
BAD_LINES = [
    ('{"id": "gsm8k-0", "responses": ["a"', "not valid JSON"),
    ("[1, 2]", "expected a JSON object"),
    ({"responses": ["a", "b"]}, "missing field 'id'"),
    ({"id": "gsm8k-1"}, "missing field 'responses'"),
    ({"id": True, "responses": ["a", "b"]}, "id must be"),
    ({"id": "gsm8k-1", "responses": "ab"}, "responses must be a non-empty list of strings"),
    ({"id": "gsm8k-1", "responses": []}, "responses must be a non-empty list of strings"),
    ({"id": "gsm8k-1", "responses": ["a", 2]}, "responses must be a non-empty list of strings"),
    ({"id": "gsm8k-1", "responses": ["a"]}, "1 responses, but line 1 has 2"),
    ({"id": "gsm8k-0", "responses": ["a", "b"]}, "id 'gsm8k-0' appears already on line 1"),
    ({"id": "gsm8k-9", "responses": ["a", "b"]}, "id 'gsm8k-9' is not in the benchmark"),
    (
        {"id": "gsm8k-1", "responses": ["a", "b"], "answer": "19"},
        "answer '19' differs from the benchmark's gold '190'",
    ),
    ({"id": "gsm8k-1", "responses": ["a", "b"], "answer": float("inf")}, "answer must be finite"),
    ({"id": "gsm8k-1", "responses": ["a", "b"], "num_tokens": [1]}, "num_tokens must be a list of 2"),
    ({"id": "gsm8k-1", "responses": ["a", "b"], "num_tokens": [1, -1]}, "num_tokens must be"),
    ({"id": "gsm8k-1", "responses": ["a", "b"], "prompt": 3}, "prompt must be a string"),
]


@pytest.mark.parametrize(("line", "needle"), BAD_LINES, ids=[n for _, n in BAD_LINES])
def test_every_bad_line_is_reported_with_file_and_line(tmp_path, line, needle):
    f = _write(tmp_path / "gen.jsonl", GOOD, "", line)  # the bad line is line 3
    with pytest.raises(ValueError, match="gen.jsonl:3: ") as err:
        read_responses(f, benchmark=GSM)
    assert needle in str(err.value), str(err.value)


def test_bad_responses_file_is_a_value_error_naming_file_and_line(tmp_path):
    with pytest.raises(ValueError, match="g.jsonl:1: missing field 'answer'"):
        read_responses(_write(tmp_path / "g.jsonl", {"id": "x", "responses": ["a"]}))
    with pytest.raises(ValueError, match="empty.jsonl: holds no responses"):
        read_responses(_write(tmp_path / "empty.jsonl", ""))
    with pytest.raises(ValueError, match="--responses .*nope.jsonl' does not exist"):
        read_responses(tmp_path / "nope.jsonl")


def test_evaluate_with_responses_checks_its_inputs_and_resumes(tmp_path):
    recs = GSM[:2]
    stored = [["\\boxed{18}"], ["\\boxed{1}"]]
    with pytest.raises(ValueError, match="not both"):
        evaluate(recs, lambda ps, k: [["x"]] * len(ps), k=1, responses=stored)
    with pytest.raises(ValueError, match="responses has 1 entries for 2 records"):
        evaluate(recs, k=1, responses=stored[:1])
    with pytest.raises(ValueError, match="responses holds 1 responses for problem 'gsm8k-0', expected k=2"):
        evaluate(recs, k=2, responses=stored)
    ckpt = tmp_path / "progress.jsonl"
    first = evaluate(recs, k=1, responses=stored, checkpoint=ckpt, chunk_size=1)
    again = evaluate(recs, k=1, responses=[["changed"], ["changed"]], checkpoint=ckpt, chunk_size=1)
    assert [p.correct for p in again.problems] == [p.correct for p in first.problems] == [[True], [False]]
