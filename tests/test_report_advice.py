"""The first screen's advice, which method to use at the job's price and at g = 1 and g = 3: computed from the claims'
own comparisons (synthetic claims here: p* wins, nonzero wins, nothing is shown, nothing is decided), and the
prompt-stage row's verdict and the sentence under the table read from one target verdict."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from report_fixtures import LR, headline, make_runs, rollout_runs

from costaware.experiments.arms import Arm
from costaware.report import grpo, opening
from costaware.report.advice import PricedClaim, advice_sentence, choose_method, priced_claims, section_choices
from costaware.report.curves import Estimate
from costaware.report.evidence import Comparison, evaluate_section, sections
from costaware.report.rollout import TargetVerdict
from costaware.report.sweeps import PRICES, PriceRow

GRPO, NONZERO, PSTAR = (Arm("none"), LR), (Arm("nonzero"), LR), (Arm("p_star"), LR)
THIRD = 1 / 3

YES = Estimate(0.30, 0.12, 0.45, seeds=5)
YES_NONZERO = Estimate(0.20, 0.04, 0.31, seeds=5)
YES_OVER_NONZERO = Estimate(0.12, 0.02, 0.20, seeds=5)
NOT_SHOWN = Estimate(0.03, -0.05, 0.10, seeds=5)
WORSE = Estimate(-0.10, -0.20, -0.03, seeds=5)
ONE_SEED = Estimate(0.25, 0.25, 0.25, seeds=1)


def _claims(over_grpo, nonzero_over_grpo, over_nonzero, price=THIRD) -> list[PricedClaim]:
    """The three comparisons the advice reads, each with its saving at ``price``."""
    return [
        PricedClaim(GRPO, PSTAR, {price: over_grpo}),
        PricedClaim(GRPO, NONZERO, {price: nonzero_over_grpo}),
        PricedClaim(NONZERO, PSTAR, {price: over_nonzero}),
    ]


def _choose(claims, task="arith", price=THIRD):
    return choose_method(task, price, claims, GRPO, PSTAR, NONZERO)


def test_p_star_wins():
    choice = _choose(_claims(YES, YES_NONZERO, YES_OVER_NONZERO))
    assert choice.use == PSTAR and choice.saving is YES
    assert advice_sentence([choice], THIRD) == (
        "**Which method to use.** At this job's price, g = 1/3, use p\\*: it saves +30% [+12%, +45%] over GRPO "
        "on arith."
    )


def test_nonzero_wins_and_the_sentence_says_p_star_does_not_beat_it():
    """Both save over GRPO, p* is not shown to save over nonzero: use the simpler one, and say why plainly."""
    choice = _choose(_claims(YES, YES_NONZERO, NOT_SHOWN))
    assert choice.use == NONZERO and choice.saving is YES_NONZERO
    assert advice_sentence([choice], THIRD) == (
        "**Which method to use.** At this job's price, g = 1/3, use nonzero: it saves +20% [+4%, +31%] over GRPO on "
        "arith, and p\\* does not beat nonzero on arith (+3% [-5%, +10%] over nonzero: the CI includes zero)."
    )
    worse = advice_sentence([_choose(_claims(NOT_SHOWN, YES_NONZERO, WORSE))], THIRD)
    assert "use nonzero:" in worse and "p\\* is worse than nonzero on arith (-10% [-20%, -3%] over nonzero" in worse


def test_nothing_shown_keeps_grpo():
    choice = _choose(_claims(NOT_SHOWN, NOT_SHOWN, NOT_SHOWN))
    assert choice.use is None and choice.decided
    sentence = advice_sentence([choice], THIRD)
    assert "no method is shown to save over GRPO on arith: keep GRPO" in sentence
    assert "p\\* does not beat nonzero on arith" in sentence


def test_p_star_alone_shown_is_used_and_its_edge_over_nonzero_is_still_said():
    choice = _choose(_claims(YES, NOT_SHOWN, NOT_SHOWN))
    sentence = advice_sentence([choice], THIRD)
    assert choice.use == PSTAR and "use p\\*: it saves +30%" in sentence and "p\\* does not beat nonzero" in sentence


def test_too_few_seeds_decide_nothing_and_say_the_points():
    choice = _choose(_claims(ONE_SEED, ONE_SEED, ONE_SEED))
    assert choice.use is None and not choice.decided
    sentence = advice_sentence([choice], THIRD)
    assert "nothing is decided on arith (1 seed: no interval; point estimates over GRPO: p\\* +25%, nonzero +25%)" in (
        sentence
    )
    assert "does not beat" not in sentence and "keep GRPO" not in sentence


def test_one_sentence_per_job_price_first_then_g_1_and_g_3():
    claims = [
        PricedClaim(GRPO, PSTAR, {1.0: YES, 3.0: NOT_SHOWN, 0.5: YES}),
        PricedClaim(GRPO, NONZERO, {1.0: YES_NONZERO, 3.0: NOT_SHOWN, 0.5: YES_NONZERO}),
        PricedClaim(NONZERO, PSTAR, {1.0: NOT_SHOWN, 3.0: NOT_SHOWN, 0.5: YES_OVER_NONZERO}),
    ]
    choices = [_choose(claims, price=g) for g in (3.0, 1.0, 0.5)]
    sentence = advice_sentence(choices, 0.5)
    assert sentence.count("**Which method to use.**") == 1 and sentence.endswith(".")
    job, one, three = sentence.split("; ")
    assert job.endswith("At this job's price, g = 0.5, use p\\*: it saves +30% [+12%, +45%] over GRPO on arith")
    assert one.startswith("at g = 1, use nonzero: it saves +20% [+4%, +31%] over GRPO on arith, and p\\* does not")
    assert three.startswith("at g = 3, no method is shown to save over GRPO on arith: keep GRPO")


def test_several_tasks_are_named_with_their_savings():
    choices = [
        _choose(_claims(YES, YES_NONZERO, YES_OVER_NONZERO), task="arith"),
        _choose(_claims(YES_NONZERO, YES_NONZERO, YES_OVER_NONZERO), task="sort"),
        _choose(_claims(NOT_SHOWN, NOT_SHOWN, NOT_SHOWN), task="sortcheck"),
    ]
    sentence = advice_sentence(choices, THIRD)
    assert "use p\\*: it saves +30% [+12%, +45%] over GRPO on arith, +20% [+4%, +31%] over GRPO on sort" in sentence
    assert "no method is shown to save over GRPO on sortcheck: keep GRPO" in sentence


def test_the_claims_feed_the_advice_by_their_arms_not_their_words():
    """A section's claims (renamed here) and its price rows become the priced claims the advice reads."""
    comps = [
        Comparison("w1", GRPO, PSTAR, {"total_cost": YES}),
        Comparison("w2", GRPO, NONZERO, {"total_cost": YES_NONZERO}),
        Comparison("w3", NONZERO, PSTAR, {"total_cost": NOT_SHOWN}),
    ]
    ev = SimpleNamespace(claims=[("x", c, "") for c in comps] + [("y", None, "PODS was not run")], generation_cost=0.5)
    rows = [PriceRow("z", (YES, YES, NOT_SHOWN), (c.a, c.b)) for c in comps]
    priced = priced_claims(ev, rows)
    assert [(p.earlier, p.later) for p in priced] == [(c.a, c.b) for c in comps]
    assert priced[0].savings == {**dict(zip(PRICES, (YES, YES, NOT_SHOWN), strict=True)), 0.5: YES}
    assert _choose(priced, price=0.5).use == NONZERO  # at the job's price: the claims' own savings
    assert _choose(priced, price=3.0).use is None  # at g = 3: the price rows'


@pytest.fixture(scope="module")
def five(tmp_path_factory):
    runs = headline(seeds=range(5)) + rollout_runs(seeds=range(5))
    return runs, grpo.write_report(runs, tmp_path_factory.mktemp("advice"), command="c")


def test_the_report_opens_with_the_advice_from_its_own_claims(five):
    _, paths = five
    md = paths["markdown"].read_text()
    paragraphs = md.split("\n\n")
    assert paragraphs[1].startswith("**Which method to use.** At this job's price, g = 1/3, use ")
    assert paragraphs[2].startswith("| claim | total-cost saving [95% CI] | verdict |")  # then the opening table
    summary = json.loads(paths["summary"].read_text())
    advice = {a["price"]: a for a in summary["advice"]}
    assert set(advice) == {THIRD, 1.0, 3.0} and all(a["task"] == "arith" for a in advice.values())
    section = summary["sections"][0]
    claim = next(c for c in section["claims"] if c["claim"] == "p* beats GRPO")
    assert advice[THIRD]["candidate_over_baseline"] == claim["total_cost"]  # the claim's own saving
    at_3 = next(p for p in section["prices"] if p["claim"] == "p* beats GRPO")["3"]
    assert advice[3.0]["candidate_over_baseline"] == at_3  # the price table's saving at g = 3
    use = advice[THIRD]["use"]
    chosen = "candidate_over_baseline" if use == ["p_star", LR] else "nonzero_over_baseline"
    assert use is not None and advice[THIRD]["saving"] == advice[THIRD][chosen]


def test_section_choices_cover_the_jobs_price_then_g_1_and_g_3():
    runs = headline(seeds=range(3))
    ev = evaluate_section(sections(runs, "none")[0], "none", n_boot=200, generation_cost=0.5)
    choices = section_choices(ev, [], Arm("p_star"))  # no price rows: only the job's price has savings
    assert [c.price for c in choices] == [0.5, 1.0, 3.0]
    assert choices[0].candidate_over_baseline is ev.claims[0][1].savings["total_cost"]
    assert choices[1].candidate_over_baseline is None and not choices[1].decided


def test_the_prompt_stage_row_and_the_sentence_under_it_read_one_target_verdict():
    """A candidate that beats GRPO (CI above zero) but misses the target: the row says 'not met', never 'yes'."""
    sec = ("arith", "grpo-512-prompts")
    beats = Comparison("c", GRPO, PSTAR, {"total_cost": YES})
    target = TargetVerdict(PSTAR, False, ("against the best peer, …",), beats, None, None, 5)
    ev = SimpleNamespace(section=SimpleNamespace(task=sec[0], setting=sec[1], name=lambda k: "p*"), claims=[])
    rows = opening.rows([ev], {sec: [target]})
    assert [r.target for r in rows] == [target] and rows[0].verdict == "not met"
    assert opening.opening_table(rows)[2].endswith("| +30% [+12%, +45%] | not met |")
    assert ": p\\*: **not met** (its section says why)." in opening.target_sentence(rows, lambda k: "p*")
    met = TargetVerdict(PSTAR, True, (), beats, NONZERO, beats, 5)
    (row,) = opening.rows([ev], {sec: [met]})
    assert row.verdict == "met" and "**met**" in opening.target_sentence([row], lambda k: "p*")


def test_the_prompt_stage_row_in_the_report_agrees_with_its_section(five):
    _, paths = five
    md = paths["markdown"].read_text()
    row = next(line for line in md.splitlines() if "meets the prompt-stage target" in line)
    word = row.rsplit("|", 2)[1].strip()
    assert word in ("met", "not met")
    assert f"p\\* (cost-aware skip, biased): **{word}** (its section says why)" in md
    assert f"p\\* (cost-aware skip, biased): **target {word}**" in md  # the section's own list


def test_a_tuned_rate_that_is_the_default_drops_the_repeated_claim_and_says_why():
    """Validation picks GRPO's default learning rate: 'p* beats GRPO' already is the tuned comparison."""
    runs = headline(seeds=range(3)) + make_runs("none", lr=2 * LR, scale=30.0, val_shift=-0.05, seeds=range(3))
    ev = evaluate_section(sections(runs, "none")[0], "none", n_boot=200)
    assert ev.tuned == GRPO
    names = [n for n, _, _ in ev.claims]
    assert "p* beats GRPO" in names and not any("tuned" in n for n in names)
    said = opening.sentences(ev, Arm("none"), Arm("p_star"))
    assert f"Validation accuracy chose GRPO's default learning rate ({LR:g}) among those run" in said

    other = make_runs("none", lr=2 * LR, scale=8.0, val_shift=0.02, seeds=range(3))
    ev = evaluate_section(sections(headline(seeds=range(3)) + other, "none")[0], "none", n_boot=200)
    assert ev.tuned == (Arm("none"), 2 * LR)
    assert "p* beats GRPO, learning rate tuned on validation" in [n for n, _, _ in ev.claims]
    assert "Validation accuracy chose" not in opening.sentences(ev, Arm("none"), Arm("p_star"))


PODS = (Arm("pods"), LR)
PODS_BIG = Estimate(0.40, 0.30, 0.50, seeds=5)


def test_pods_is_used_when_it_beats_both_and_named_when_not_told_apart():
    """The peer is a candidate too: the rule of report.method_choice over nonzero, p* and PODS."""
    beats_both = _claims(YES, YES_NONZERO, YES_OVER_NONZERO) + [
        PricedClaim(GRPO, PODS, {THIRD: PODS_BIG}),
        PricedClaim(PODS, PSTAR, {THIRD: WORSE}),  # p* beats PODS: no, it is worse
    ]
    choice = choose_method("arith", THIRD, beats_both, GRPO, PSTAR, NONZERO, peer=PODS)
    assert choice.use == PODS and choice.saving is PODS_BIG and choice.tied == ()
    assert advice_sentence([choice], THIRD) == (
        "**Which method to use.** At this job's price, g = 1/3, use PODS: it saves +40% [+30%, +50%] over GRPO "
        "on arith."
    )
    tied = _claims(YES, YES_NONZERO, YES_OVER_NONZERO) + [PricedClaim(GRPO, PODS, {THIRD: PODS_BIG})]
    choice = choose_method("arith", THIRD, tied, GRPO, PSTAR, NONZERO, peer=PODS)
    assert choice.use == PSTAR and choice.tied == (PODS,)
    assert advice_sentence([choice], THIRD) == (
        "**Which method to use.** At this job's price, g = 1/3, use p\\*: it saves +30% [+12%, +45%] over GRPO on "
        "arith (not told apart from it: PODS +40% [+30%, +50%])."
    )
