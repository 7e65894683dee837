"""Tests for costaware.evaluation: loaders on the shipped fixtures, math-verify known answers,
mean@k / pass@k against brute force, evaluate() with oracle and tiny-model generators, and the CLI."""

from __future__ import annotations

import itertools
import json
import math
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from costaware.evaluation import (
    BENCHMARKS,
    QWEN_MATH_INSTRUCTION,
    Completion,
    DatasetUnavailableError,
    EvalRecord,
    SamplingConfig,
    TransformersGenerator,
    build_messages,
    build_prompt,
    evaluate,
    fixture_path,
    gsm8k_gold,
    is_char_tokenizer,
    load_benchmark,
    load_tokenizer,
    markdown_table,
    mean_at_k,
    pass_at_k,
    per_problem_accuracy,
    read_rows,
    standard_error,
    summarize_correctness,
)
from costaware.evaluation.verify import MathVerifier

# ------------------------------------------------------------------------------------------- loaders

EXPECTED = {
    "gsm8k": [("gsm8k-0", "18"), ("gsm8k-1", "190"), ("gsm8k-2", "1500")],
    "math500": [
        ("test/counting_and_probability/9001.json", "15"),
        ("test/prealgebra/9002.json", "\\frac{5}{6}"),
        ("test/algebra/9003.json", "6\\sqrt{2}"),
        ("test/algebra/9004.json", "(-3,3)"),
    ],
    "aime": [("1990-3", "24"), ("2005-I-2", "91"), ("2024-II-5", "257")],
    "amc": [("amc-0", "27"), ("amc-1", "6"), ("amc-2", "44")],
    "verl": [("verl-a1b2c3d4-0001", "55"), ("verl-a1b2c3d4-0002", "5"), ("verl-a1b2c3d4-0003", "13")],
}


@pytest.mark.parametrize("benchmark", sorted(BENCHMARKS))
def test_fixture_loads_to_expected_ids_and_gold(benchmark):
    records = load_benchmark(benchmark, fixture_path(benchmark))
    assert [(r.id, r.answer) for r in records] == EXPECTED[benchmark]
    assert all(r.benchmark == benchmark and r.problem.strip() for r in records)


def test_each_format_keeps_its_own_fields_in_meta():
    gsm = load_benchmark("gsm8k", fixture_path("gsm8k"))
    assert gsm[0].problem.startswith("A baker puts 12 muffins")
    assert gsm[2].meta["solution"].endswith("#### 1,500")  # commas dropped from the gold only
    math500 = load_benchmark("math500", fixture_path("math500"))
    assert math500[1].meta == {"subject": "Prealgebra", "level": 1}
    aime = load_benchmark("aime", fixture_path("aime"))
    assert [r.meta["part"] for r in aime] == ["", "I", "II"]
    assert '"eighth"' in aime[2].problem  # csv quoting survives
    amc = load_benchmark("amc", fixture_path("amc"))
    assert amc[0].meta["url"].startswith("https://artofproblemsolving.com")
    verl = load_benchmark("verl", fixture_path("verl"))
    assert verl[0].messages is not None and verl[0].messages[0]["role"] == "user"
    assert "What is the sum of the first $10$" in verl[0].problem
    assert verl[0].meta["data_source"] == "math_dapo"


def test_verl_rows_recognised_under_any_benchmark_and_limit():
    recs = load_benchmark("math500", fixture_path("verl"), limit=2)
    assert [r.answer for r in recs] == ["55", "5"]
    assert recs[0].id == "math500-a1b2c3d4-0001"
    assert len(load_benchmark("gsm8k", fixture_path("gsm8k"), limit=1)) == 1


def test_json_list_parquet_and_folder_give_same_rows(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = read_rows(fixture_path("math500"))
    (tmp_path / "a.json").write_text(json.dumps(rows))
    (tmp_path / "b.json").write_text(json.dumps({"data": rows}))
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "c.parquet")
    for name in ("a.json", "b.json", "c.parquet"):
        assert read_rows(tmp_path / name) == rows
    folder = tmp_path / "snapshot" / "data"
    folder.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows[:2]), folder / "test-00000.parquet")
    pq.write_table(pa.Table.from_pylist(rows[2:]), folder / "test-00001.parquet")
    assert [r.id for r in load_benchmark("math500", tmp_path / "snapshot")] == [i for i, _ in EXPECTED["math500"]]


def test_gsm8k_gold_is_the_text_after_the_marker_without_commas():
    assert gsm8k_gold("3 + 4 = <<3+4=7>>7\n#### 7") == "7"
    assert gsm8k_gold("#### 12,345 ") == "12345"
    with pytest.raises(ValueError, match="####"):
        gsm8k_gold("no marker 7")


def test_loader_errors_name_the_problem(tmp_path):
    good = json.dumps({"question": "q", "answer": "#### 1"})
    bad = tmp_path / "bad.jsonl"
    bad.write_text(f"{good}\n\n" + json.dumps({"question": "q", "solution": "s"}) + "\n")
    # the file and its 1-based line (the blank line 2 counts), whatever the kind of problem
    with pytest.raises(ValueError, match=r"bad.jsonl:3: none of the fields \['answer'\]"):
        load_benchmark("gsm8k", bad)
    bad.write_text(good + "\n" + json.dumps({"question": "q", "answer": "no marker"}) + "\n")
    with pytest.raises(ValueError, match="bad.jsonl:2: .*####"):
        load_benchmark("gsm8k", bad)
    bad.write_text(good + '\n{"question": "q"\n')
    with pytest.raises(ValueError, match="bad.jsonl:2: not valid JSON"):
        read_rows(bad)
    bad.write_text(good + "\n[1, 2]\n")
    with pytest.raises(ValueError, match="bad.jsonl:2: expected a JSON object"):
        read_rows(bad)
    csv_file = tmp_path / "aime.csv"
    csv_file.write_text('ID,Question,Answer\n1990-3,"two\nlines",24\n1990-4,q,\n')
    with pytest.raises(ValueError, match="aime.csv:4: answer is empty"):  # after a 2-line row
        load_benchmark("aime", csv_file)
    (tmp_path / "rows.json").write_text(json.dumps([{"problem": "p", "answer": 1}, {"problem": "p"}]))
    with pytest.raises(ValueError, match=r"rows.json: row 2: none of the fields \['answer'\]"):
        load_benchmark("amc", tmp_path / "rows.json")
    verl = tmp_path / "verl.jsonl"
    verl.write_text(json.dumps({"prompt": [{"role": "user"}], "reward_model": {"ground_truth": "1"}}) + "\n")
    with pytest.raises(ValueError, match="verl.jsonl:1: missing field 'content'"):
        load_benchmark("verl", verl)
    dup = tmp_path / "dup.jsonl"
    dup.write_text("\n".join(json.dumps({"id": 1, "problem": "p", "answer": 3.0}) for _ in range(2)))
    with pytest.raises(ValueError, match="dup.jsonl:2: record id 'amc-1' appears already at .*dup.jsonl:1.*unique"):
        load_benchmark("amc", dup)
    nan = tmp_path / "nan.jsonl"
    nan.write_text(json.dumps({"id": 1, "problem": "p", "answer": float("nan")}))
    with pytest.raises(ValueError, match="finite"):
        load_benchmark("amc", nan)
    (tmp_path / "x.txt").write_text("")
    with pytest.raises(ValueError, match="must end in one of"):
        read_rows(tmp_path / "x.txt")
    with pytest.raises(ValueError, match="does not exist"):
        read_rows(tmp_path / "missing.jsonl")
    with pytest.raises(ValueError, match="benchmark must be one of"):
        load_benchmark("mmlu", bad)
    with pytest.raises(ValueError, match="limit"):
        load_benchmark("gsm8k", fixture_path("gsm8k"), limit=0)


def test_hub_unreachable_fails_with_a_local_path_hint(monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DatasetUnavailableError, match=r"HuggingFaceH4/MATH-500.*--data math500\.jsonl"):
        load_benchmark("math500")
    with pytest.raises(ValueError, match="no hub copy"):
        load_benchmark("verl")


# ------------------------------------------------------------------------------------------- prompts


def test_plain_prompt_and_instruction_roles():
    rec = EvalRecord("1", "What is 2+3?", "5", "demo")
    assert build_prompt(rec) == f"What is 2+3?\n{QWEN_MATH_INSTRUCTION}\n"
    assert QWEN_MATH_INSTRUCTION == "Please reason step by step, and put your final answer within \\boxed{}."
    assert build_messages(rec, instruction_role="system") == [
        {"role": "system", "content": QWEN_MATH_INSTRUCTION},
        {"role": "user", "content": "What is 2+3?"},
    ]
    with pytest.raises(ValueError, match="instruction_role"):
        build_messages(rec, instruction_role="assistant")


def test_chat_template_used_when_tokenizer_has_one(char_tok):
    rec = EvalRecord("1", "What is 2+3?", "5", "demo")
    template = (
        "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )
    char_tok.chat_template = template
    try:
        text = build_prompt(rec, char_tok, instruction_role="system")
        assert text == f"<|system|>{QWEN_MATH_INSTRUCTION}\n<|user|>What is 2+3?\n<|assistant|>"
        assert build_prompt(rec, char_tok, use_chat_template=False) == build_prompt(rec)
        verl = load_benchmark("verl", fixture_path("verl"))[0]  # its own chat, no instruction added
        assert build_prompt(verl, char_tok) == f"<|user|>{verl.messages[0]['content']}\n<|assistant|>"
    finally:
        char_tok.chat_template = None


# ------------------------------------------------------------------------------------------ verifier


@pytest.fixture(scope="module")
def verifier():
    return MathVerifier()


# (response, gold, expected verdict) as math-verify 0.9 decides them
KNOWN = [
    ("The answer is \\boxed{0.5}.", "\\frac{1}{2}", True),
    ("so $x = 1/2$, i.e. \\boxed{1/2}", "\\frac{1}{2}", True),
    ("\\boxed{\\frac12}", "0.5", True),
    ("\\boxed{\\frac{1}{2}}", "\\dfrac{1}{2}", True),
    ("\\boxed{\\sqrt{8}}", "2\\sqrt{2}", True),
    ("\\boxed{2\\sqrt{2}}", "\\sqrt{8}", True),
    ("\\boxed{27}", "27", True),
    ("\\boxed{80}", "080", True),  # AIME-style leading zeros
    ("\\boxed{1000}", "1,000", True),
    ("\\boxed{(-3, 3)}", "(-3,3)", True),
    ("\\boxed{\\frac{10}{12}}", "\\frac{5}{6}", True),
    ("\\boxed{x(x+2)}", "x^2+2x", True),
    ("\\boxed{\\text{(C)}}", "C", True),
    ("She has 18 muffins left.\n#### 18", "18", True),
    ("The final answer is $42$.", "42", True),
    ("Answer: 42", "42", True),
    ("I first got 3, but then \\boxed{5}", "5", True),  # boxed beats an earlier number
    ("I first got 3, but then \\boxed{5}", "3", False),
    ("\\boxed{5}. The final answer is $3$.", "5", True),  # \boxed{} outranks a "final answer" phrase
    ("\\boxed{43}", "42", False),
    ("\\boxed{0.6}", "\\frac{1}{2}", False),
    ("\\boxed{2\\sqrt{3}}", "2\\sqrt{2}", False),
    ("\\boxed{[-3, 3]}", "(-3,3)", False),  # closed vs open interval
    ("I do not know.", "42", False),  # no answer at all
    ("", "42", False),
    ("\\boxed{}", "42", False),
    # percentages, as math-verify 0.9 treats them: a plain "10%" equals both 0.1 and 10 ...
    ("The answer is 10%", "0.1", True),
    ("The answer is 10%", "10", True),
    # ... but "\\%" inside \boxed{} does not parse to a number, so only the same text matches
    ("\\boxed{10\\%}", "10\\%", True),
    ("\\boxed{10}", "10\\%", True),
    ("\\boxed{0.1}", "10\\%", False),
    ("\\boxed{10\\%}", "0.1", False),
]


@pytest.mark.parametrize(("response", "gold", "expected"), KNOWN)
def test_verifier_gives_the_known_verdict_for_each_answer(verifier, response, gold, expected):
    assert verifier(response, gold) is expected


def test_verdict_extracted_text_and_no_answer(verifier):
    assert verifier.check("so \\boxed{\\sqrt{8}}", "2\\sqrt{2}").extracted == "\\sqrt{8}"
    assert verifier.check("nothing to see", "1").extracted is None
    with pytest.raises(ValueError, match="gold"):
        verifier("\\boxed{1}", "  ")
    with pytest.raises(ValueError, match="timeout_seconds"):
        MathVerifier(timeout_seconds=0)


def test_require_boxed_ignores_stray_numbers():
    strict = MathVerifier(require_boxed=True)
    assert strict("I think it is 42", "42") is False
    assert MathVerifier()("I think it is 42", "42") is True
    assert strict("so \\boxed{42}", "42") is True
    assert strict("The final answer is 42", "42") is True


def test_verifier_works_off_the_main_thread(verifier):
    from math_verify import parse

    out: dict[str, object] = {}

    def worker():
        out["verdicts"] = [verifier("\\boxed{1/2}", "0.5"), verifier("\\boxed{3}", "0.5")]
        try:  # math-verify itself refuses: its timeouts use signal.alarm
            parse("$1$", parsing_timeout=5)
            out["raw"] = "ok"
        except ValueError as err:
            out["raw"] = str(err)

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert out["verdicts"] == [True, False]
    assert "threaded environment" in str(out["raw"])


# ------------------------------------------------------------------------------------------- metrics


def brute_pass_at_k(n: int, c: int, k: int) -> float:
    """Fraction of k-subsets of n samples (c correct) that hold at least one correct sample."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


def test_pass_at_k_matches_subset_enumeration():
    for n in range(1, 9):
        for c in range(n + 1):
            for k in range(1, n + 1):
                got = pass_at_k(np.array([n]), np.array([c]), k)[0]
                assert got == pytest.approx(brute_pass_at_k(n, c, k), abs=1e-12), (n, c, k)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 64), st.floats(0, 1)), min_size=1, max_size=20), st.integers(1, 64))
def test_pass_at_k_vectorised_equals_exact_comb(problems, k):
    n = np.array([p[0] for p in problems])
    c = np.array([round(p[0] * p[1]) for p in problems])
    k = min(k, int(n.min()))
    exact = [1 - math.comb(ni - ci, k) / math.comb(ni, k) for ni, ci in zip(n.tolist(), c.tolist(), strict=True)]
    np.testing.assert_allclose(pass_at_k(n, c, k), exact, rtol=0, atol=1e-10)


def test_pass_at_k_exact_at_the_ends():
    for k in range(1, 33):  # no 1e-15 residue: all-wrong is exactly 0, all-right exactly 1
        assert pass_at_k(np.array([32]), np.array([0]), k)[0] == 0.0
        assert pass_at_k(np.array([32]), np.array([32]), k)[0] == 1.0


def test_pass_at_1_is_mean_at_k_and_mean_at_k_by_loops():
    rng = np.random.default_rng(0)
    correct = rng.random((50, 32)) < rng.random((50, 1))
    loops = sum(sum(row) / len(row) for row in correct.tolist()) / len(correct)
    assert mean_at_k(correct) == pytest.approx(loops, abs=1e-12)
    c = correct.sum(1)
    assert pass_at_k(np.full(50, 32), c, 1).mean() == pytest.approx(loops, abs=1e-12)
    np.testing.assert_allclose(per_problem_accuracy(correct), c / 32)


def test_standard_error_and_summary_match_hand_computed_values():
    acc = np.array([0.0, 0.25, 1.0, 0.5])
    m = acc.mean()
    expected = math.sqrt(sum((a - m) ** 2 for a in acc) / 3) / 2
    assert standard_error(acc) == pytest.approx(expected, abs=1e-15)
    correct = np.array([[0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 1, 1], [1, 1, 0, 0]])
    s = summarize_correctness(correct, pass_ks=(1, 2, 4))
    assert s["mean_at_k"] == pytest.approx(0.4375)
    assert s["mean_at_k_stderr"] == pytest.approx(standard_error(correct.mean(1)))
    assert s["pass_at_k"] == pytest.approx({"1": 0.4375, "2": (0 + 0.5 + 1 + 5 / 6) / 4, "4": 0.75})
    assert s["solved_any"] == 0.75
    assert summarize_correctness([[1, 0]], pass_ks=(1,))["mean_at_k_stderr"] is None


def test_metrics_reject_bad_shapes_values_and_k():
    with pytest.raises(ValueError, match="2-D"):
        mean_at_k(np.zeros(3))
    with pytest.raises(ValueError, match="0/1"):
        mean_at_k([[0.5, 1]])
    with pytest.raises(ValueError, match="num_correct"):
        pass_at_k(np.array([4]), np.array([5]), 1)
    with pytest.raises(ValueError, match="exceeds"):
        pass_at_k(np.array([4]), np.array([1]), 5)
    with pytest.raises(ValueError, match="k must"):
        pass_at_k(np.array([4]), np.array([1]), 0)
    with pytest.raises(ValueError, match="integers"):
        pass_at_k(np.array([4.0]), np.array([np.nan]), 1)
    with pytest.raises(ValueError, match="at least 2"):
        standard_error([1.0])
    with pytest.raises(ValueError, match="finite"):
        standard_error([1.0, np.inf])
    with pytest.raises(ValueError, match="exceed"):
        summarize_correctness([[1, 0]], pass_ks=(4,))


# ---------------------------------------------------------------------------------------- evaluate()


def _gold_by_prompt(records, prompts=None):
    prompts = prompts or [build_prompt(r) for r in records]
    return {p: r.answer for p, r in zip(prompts, records, strict=True)}


@pytest.mark.parametrize("benchmark", sorted(BENCHMARKS))
def test_oracle_scores_one_and_wrong_scores_zero(benchmark):
    records = load_benchmark(benchmark, fixture_path(benchmark))
    gold = _gold_by_prompt(records)

    def oracle(prompts, k):
        return [[f"Reasoning...\nSo the answer is \\boxed{{{gold[p]}}}."] * k for p in prompts]

    def wrong(prompts, k):
        return [[f"\\boxed{{{gold[p]}+1}}"] * k for p in prompts]

    good = evaluate(records, oracle, k=4)
    bad = evaluate(records, wrong, k=4)
    assert good.mean_at_k == 1.0 and good.summary["pass_at_k"] == {"1": 1.0, "2": 1.0, "4": 1.0}
    assert bad.mean_at_k == 0.0 and bad.summary["pass_at_k"]["4"] == 0.0
    assert good.summary["n_problems"] == len(records) and good.summary["answer_extracted"] == 1.0
    assert [p.id for p in good.problems] == [r.id for r in records]


def test_partial_oracle_gives_exact_mean_and_pass_at_k():
    records = load_benchmark("math500", fixture_path("math500"))
    gold = _gold_by_prompt(records)
    order = {p: i for i, p in enumerate(gold)}
    n_right = [0, 1, 3, 4]  # problem i gets its first n_right[i] of 4 samples right

    def partial(prompts, k):
        return [
            [Completion(f"\\boxed{{{gold[p]}}}" if j < n_right[order[p]] else "no idea", 7) for j in range(k)]
            for p in prompts
        ]

    rep = evaluate(records, partial, k=4, chunk_size=3)
    assert rep.mean_at_k == pytest.approx(np.mean([0, 0.25, 0.75, 1.0]))
    exact2 = np.mean([1 - math.comb(4 - c, 2) / math.comb(4, 2) for c in n_right])
    assert rep.summary["pass_at_k"]["2"] == pytest.approx(exact2)
    assert rep.summary["mean_at_k_stderr"] == pytest.approx(standard_error([0, 0.25, 0.75, 1.0]))
    assert rep.summary["answer_extracted"] == pytest.approx(8 / 16)
    assert rep.summary["mean_response_tokens"] == 7.0
    assert rep.correct.shape == (4, 4)
    table = markdown_table(rep.summary, title="demo")
    assert "| math500 | 4 | 4 | 50.0 |" in table and "mean@4 (%)" in table


def test_checkpoint_resumes_without_regenerating(tmp_path):
    records = load_benchmark("gsm8k", fixture_path("gsm8k"))
    gold = _gold_by_prompt(records)
    calls: list[int] = []

    def oracle(prompts, k):
        calls.append(len(prompts))
        return [[f"\\boxed{{{gold[p]}}}"] * k for p in prompts]

    ckpt = tmp_path / "progress.jsonl"
    first = evaluate(records[:2], oracle, k=2, chunk_size=1, checkpoint=ckpt, run_config={"m": 1})
    assert calls == [1, 1]
    # a killed run leaves a torn last line: that problem is redone, the others are kept
    ckpt.write_text(ckpt.read_text() + '{"id": "gsm8k-')
    calls.clear()
    # same ids needed for the header to match: rerun the same two records
    again = evaluate(records[:2], oracle, k=2, chunk_size=1, checkpoint=ckpt, run_config={"m": 1})
    assert calls == [] and again.to_dict()["problems"] == first.to_dict()["problems"]
    with pytest.raises(ValueError, match="different run"):
        evaluate(records[:2], oracle, k=2, chunk_size=1, checkpoint=ckpt, run_config={"m": 2})


def test_evaluate_rejects_no_generator_wrong_counts_and_no_records():
    records = load_benchmark("amc", fixture_path("amc"))
    with pytest.raises(ValueError, match="generate_fn or both"):
        evaluate(records, k=2)
    with pytest.raises(ValueError, match="expected k=2"):
        evaluate(records, lambda ps, k: [["\\boxed{1}"] for _ in ps], k=2)
    with pytest.raises(ValueError, match="returned 1 lists"):
        evaluate(records, lambda ps, k: [["a"] * k], k=2, chunk_size=3)
    with pytest.raises(ValueError, match="k must"):
        evaluate(records, lambda ps, k: [], k=0)
    with pytest.raises(ValueError, match="records must not be empty"):
        evaluate([], lambda ps, k: [], k=1)


# ------------------------------------------------------------------------------ tiny model end to end


@pytest.fixture(scope="module")
def char_tok():
    from costaware.tiny import char_tokenizer

    return char_tokenizer()


@pytest.fixture(scope="module")
def tiny_ckpt(tmp_path_factory, char_tok):
    from costaware.tiny import tiny_qwen2

    model = tiny_qwen2(char_tok, hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, seed=0)
    path = tmp_path_factory.mktemp("tiny")
    model.save_pretrained(path)
    char_tok.save_pretrained(path)
    return path, model


def test_char_tokenizer_checkpoint_detected(tiny_ckpt, tmp_path):
    path, _ = tiny_ckpt
    assert is_char_tokenizer(path)
    assert not is_char_tokenizer(tmp_path)
    tok = load_tokenizer(path)
    assert tok.decode(tok("a b\nc")["input_ids"]) == "a b\nc"  # AutoTokenizer would drop space and newline


def test_tiny_model_generation_structure_and_seed(tiny_ckpt, char_tok):
    _, model = tiny_ckpt
    records = load_benchmark("gsm8k", fixture_path("gsm8k"))[:2]
    sampling = SamplingConfig(temperature=1.0, top_p=1.0, max_new_tokens=6, seed=3)
    gen = TransformersGenerator(model, char_tok, sampling, batch_size=4)
    rep = evaluate(records, gen, k=3)  # k=3 with batch 4: one prompt per call
    assert rep.correct.shape == (2, 3)
    for p in rep.problems:
        assert len(p.responses) == len(p.extracted) == len(p.num_tokens) == 3
        assert all(1 <= t <= 6 for t in p.num_tokens)
        assert p.prompt == build_prompt(load_benchmark("gsm8k", fixture_path("gsm8k"))[int(p.id[-1])])
    assert 0.0 <= rep.mean_at_k <= 1.0
    # same seed -> same samples; the model/tokenizer path builds the same generator
    rep2 = evaluate(records, model=model, tokenizer=char_tok, sampling=sampling, batch_size=4, k=3)
    assert [p.responses for p in rep2.problems] == [p.responses for p in rep.problems]
    other = evaluate(
        records,
        TransformersGenerator(
            model,
            char_tok,
            SamplingConfig(temperature=1.0, top_p=1.0, max_new_tokens=6, seed=4),
            batch_size=4,
        ),
        k=3,
    )
    assert [p.responses for p in other.problems] != [p.responses for p in rep.problems]
    # greedy: k identical copies; k > batch_size is split over calls and still returns k samples
    greedy = TransformersGenerator(model, char_tok, SamplingConfig(temperature=0.0, max_new_tokens=4), batch_size=2)
    out = greedy([build_prompt(records[0])], 5)
    assert len(out[0]) == 5 and len({c.text for c in out[0]}) == 1


def test_interrupted_run_resumes_to_the_uninterrupted_result(tiny_ckpt, char_tok, tmp_path):
    _, model = tiny_ckpt
    records = load_benchmark("amc", fixture_path("amc"))
    sampling = SamplingConfig(temperature=1.0, top_p=1.0, max_new_tokens=5, seed=11)
    gen = TransformersGenerator(model, char_tok, sampling, batch_size=4)
    whole = evaluate(records, gen, k=2, chunk_size=1)

    def dies_after_one_call(prompts, k, calls=[]):  # noqa: B006 - counts calls across invocations
        if calls:
            raise KeyboardInterrupt
        calls.append(1)
        return gen(prompts, k)

    ckpt = tmp_path / "progress.jsonl"
    with pytest.raises(KeyboardInterrupt):
        evaluate(records, dies_after_one_call, k=2, chunk_size=1, checkpoint=ckpt)
    assert len(ckpt.read_text().splitlines()) == 2  # header + the one finished problem
    resumed = evaluate(records, gen, k=2, chunk_size=1, checkpoint=ckpt)
    assert [p.to_dict() for p in resumed.problems] == [p.to_dict() for p in whole.problems]


def test_cli_end_to_end_and_resume(tiny_ckpt, tmp_path, capsys):
    from costaware.cli import main

    path, _ = tiny_ckpt
    out = tmp_path / "run"
    argv = [
        "eval",
        "--model",
        str(path),
        "--benchmark",
        "aime",
        "--data",
        str(fixture_path("aime")),
        "--k",
        "2",
        "--limit",
        "2",
        "--max-new-tokens",
        "4",
        "--temperature",
        "0.6",
        "--out",
        str(out),
        "--no-progress",
        "--engine",
        "transformers",
        "--device",
        "cpu",
    ]
    assert main(argv) == 0
    result = json.loads((out / "results.json").read_text())
    assert result["summary"]["n_problems"] == 2 and result["summary"]["k"] == 2
    assert set(result["summary"]["pass_at_k"]) == {"1", "2"}
    assert result["config"]["engine"] == "transformers" and result["config"]["sampling"]["temperature"] == 0.6
    assert [p["id"] for p in result["problems"]] == ["1990-3", "2005-I-2"]
    assert all(len(p["responses"]) == 2 for p in result["problems"])
    assert "| aime | 2 | 2 |" in (out / "summary.md").read_text()
    assert "mean@2 (%)" in capsys.readouterr().out
    lines = (out / "progress.jsonl").read_text().splitlines()
    assert len(lines) == 3 and "header" in json.loads(lines[0])
    # rerun: everything comes from progress.jsonl, identical results
    assert main(argv) == 0
    assert json.loads((out / "results.json").read_text())["problems"] == result["problems"]
    capsys.readouterr()
    # another run's settings on the same --out: one line on stderr, exit status 2 (the CLI's error rule)
    assert main([*argv[:-4], "--seed", "1", *argv[-4:]]) == 2
    err = capsys.readouterr().err
    last = err.rstrip("\n").split("\n")[-1]  # after transformers' weight-loading progress bar
    assert last.startswith("costaware eval: error:") and "different run" in last and "Traceback" not in err


def test_char_tokenizer_default_covers_printable_ascii_and_keeps_the_old_ids():
    import string

    from costaware.tiny import char_tokenizer

    tok = char_tokenizer()
    text = "".join(ch for ch in string.printable if ch not in "\r\x0b\x0c")  # 0x20-0x7e, tab, newline
    ids = tok(text)["input_ids"]
    assert tok.unk_token_id not in ids and tok.decode(ids) == text
    assert tok.decode(tok("x = a[1] + b['#']")["input_ids"]) == "x = a[1] + b['#']"
    old = ["<pad>", "<bos>", "<eos>", "<unk>", *(string.digits + string.ascii_letters + " +-*/=().,:;?!\n")]
    assert [tok.convert_tokens_to_ids(t) for t in old] == list(range(len(old)))  # earlier ids unchanged


def test_main_job_vocabulary_is_its_task_alphabet_not_the_default():
    """The main job's tokenizer (and so its recorded runs) does not move with DEFAULT_ALPHABET."""
    from costaware.experiments import policy, tasks

    for name, family in tasks.TASKS.items():
        tok, _ = policy.build_policy(family.alphabet, hidden_size=8, num_layers=1, num_heads=2, num_kv_heads=1)
        expected = {t: i for i, t in enumerate(["<pad>", "<bos>", "<eos>", "<unk>", *dict.fromkeys(family.alphabet)])}
        assert tok.get_vocab() == expected, name
    assert policy.build_policy(hidden_size=8, num_layers=1, num_heads=2, num_kv_heads=1)[0].get_vocab() == {
        t: i for i, t in enumerate(["<pad>", "<bos>", "<eos>", "<unk>", *"0123456789+=,"])
    }
