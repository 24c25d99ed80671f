"""Sequential seeds (harness.stats.sequential, harness.claims.sequential, harness.service.rounds):
sequence's formula, its error rates under the null by simulation, the verdicts and the choice of
the methods that get more seeds."""

from __future__ import annotations

import math
import runpy
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from benchmarks.sequential import family_size, findings_suites, null_row
from harness.claims import findings
from harness.claims.sequential import (
    CheckInput,
    SequentialCheck,
    decide,
    describe,
    verdict_note,
)
from harness.core import Direction, TrialOutcome
from harness.ranking.suite import RankPlan, claim_findings
from harness.records import PlannedTrial
from harness.service.rounds import (
    Round,
    SequentialSeeds,
    look,
    most_trials,
    unneeded_trials,
    wanted_trials,
)
from harness.spec.rank import Claim, RankSpec, SeedSchedule
from harness.spec.schema import Suite
from harness.stats.design import Schedule
from harness.stats.design import directional as simulate_directional
from harness.stats.design import tie as simulate_tie
from harness.stats.outcomes import select_tuned
from harness.stats.planned import robust_p, spending_weights
from harness.stats.sequential import (
    Looks,
    detectable_effect,
    half_width_factor,
    log_mixture,
    look_sizes,
    rounds_begun,
    running_bounds,
)
from harness.store.db import open_database
from harness.store.queries import stored_outcomes
from tests import factories

SCHEDULE = SeedSchedule(initial=3, max=12, step=3)
EARLY = SeedSchedule(initial=10, max=20, step=5)
"""A first look that can decide: no distribution-free test decides with 3 seeds, and the first
look's O'Brien-Fleming share of alpha needs 10 seeds of one sign (docs/sequential.md)."""


def test_one_c_gives_lais_closed_form_and_the_mixture_reaches_1_over_alpha_at_the_bound() -> None:
    n, alpha, c = np.arange(2, 40), 0.05, 1.0
    b = (alpha**2 * c / (n + c)) ** (1 / n)
    k = (1 - b) * (n + c)
    with np.errstate(invalid="ignore"):
        closed = np.where(n > k, np.sqrt(k * (n - 1) / (n * (n - k))), np.inf)
    assert np.allclose(half_width_factor(n, alpha, (c,)), closed, rtol=1e-8)
    h = half_width_factor(n, alpha)
    finite = np.isfinite(h)
    assert finite[1:].all() and not finite[0]  # n = 2 cannot reach 1/alpha
    at_boundary = log_mixture(n[finite], h[finite], 1.0)
    assert np.allclose(at_boundary, math.log(1 / alpha))


def test_looks_are_initial_plus_steps_and_the_last_n() -> None:
    assert look_sizes(12, 3, 3) == [3, 6, 9, 12]
    assert look_sizes(8, 3, 3) == [3, 6, 8]
    assert look_sizes(2, 3, 3) == []


def test_family_wise_false_decisions_stay_at_most_alpha_at_every_findings_schedule() -> None:
    """docs/sequential.md's table 1 with fewer families: every findings suite's own schedule
    and Holm family, every null family (median-centred), both rules, within 2 MC se."""
    reps, rng = 2000, np.random.default_rng(1)
    suites = findings_suites()
    assert len(suites) >= 9 and any(family_size(s) == 0 for s in suites)
    for suite in suites:
        alpha = suite.rank.alpha
        for rule in ("planned", "anytime"):
            for null, (rate, _) in null_row(suite, rule, reps, rng).items():
                bound = alpha + 2 * math.sqrt(alpha * (1 - alpha) / reps)
                assert rate <= bound, (suite.suite, rule, null, rate)


def test_the_simulation_decides_as_the_harness_does() -> None:
    """The vectorised simulation (`harness.stats.design`) and `decide` (what `rank` uses)
    agree claim by claim, directional and tie."""
    schedule = Schedule(3, 12, 3)
    rng = np.random.default_rng(2)
    x = 1.2 + rng.standard_normal((60, 1, schedule.max))
    simulated = simulate_directional(x, schedule, "planned")
    for rep in range(60):
        used = int(simulated["used"][rep, 0])
        (decision,) = decide([CheckInput("directional", x[rep, 0, :used])], 0.05, 3, 3, 12)
        expected = {1: "positive", -1: "negative", 0: None}[int(simulated["sign"][rep, 0])]
        assert decision.outcome == expected
    ties = 0.3 * rng.standard_normal((60, schedule.max))
    found = simulate_tie(ties, 1.0, schedule, "planned")
    for rep in range(60):
        (decision,) = decide([CheckInput("tie", ties[rep], 1.0)], 0.05, 3, 3, 12)
        assert decision.outcome == {1: "inside", -1: "outside", 0: None}[int(found[rep])]


def test_a_huge_difference_is_decided_at_the_first_look_and_an_open_one_is_not() -> None:
    rng = np.random.default_rng(3)
    clear = CheckInput("directional", -1.0 + 0.01 * rng.standard_normal(10))
    noisy = CheckInput("directional", 0.01 + rng.standard_normal(10))
    first, second = decide([clear, noisy], 0.05, 10, 5, 20)
    assert first.outcome == "negative" and first.record.stopped == "decided"
    assert first.record.n == 10 and first.record.looks == 1
    low, high = first.record.interval
    assert low is not None and high is not None and high < 0
    assert second.outcome is None and second.record.stopped is None  # no futility at look 1


def test_a_decision_keeps_the_side_of_the_look_that_decided_it() -> None:
    """Decided at look 2 (16 seeds all clearly positive), a check stays "positive" when 8 more
    seeds (run for another claim's sake) pull the mean below 0: a later look does not turn the
    evidence for the claim into a contradiction."""
    diffs = np.r_[np.linspace(1.0, 1.1, 16), np.full(8, -5.0)]
    (check,) = decide([CheckInput("directional", diffs)], 0.05, 8, 8, 24)
    assert check.outcome == "positive"
    (first_16,) = decide([CheckInput("directional", diffs[:16])], 0.05, 8, 8, 24)
    assert first_16.outcome == "positive"


def test_futility_stops_a_null_difference_after_the_second_look_and_says_what_max_detects() -> None:
    diffs = np.array([0.3, -0.2, 0.1, -0.25, 0.2, -0.1])
    (decision,) = decide([CheckInput("directional", diffs)], 0.05, 3, 3, 24)
    assert decision.outcome is None and decision.record.stopped == "futile"
    assert decision.record.conditional_power is not None
    assert decision.record.conditional_power < 0.1
    detectable = decision.record.detectable
    assert detectable is not None and detectable > abs(diffs.mean())


def test_an_undecided_check_says_what_its_seeds_could_detect_when_futile_or_at_max() -> None:
    record = SequentialCheck(6, 2, 0.05, (-0.1, 0.2), 0.4, "max", None, 0.123)
    assert (
        verdict_note(record) == "at max (n = 6); the smallest effect max seeds could detect: 0.123"
    )
    futile = replace(record, stopped="futile")
    assert verdict_note(futile).startswith("futile at n = 6; the smallest effect")
    assert verdict_note(replace(record, stopped=None)) == ""


def test_running_interval_is_the_intersection_over_looks() -> None:
    diffs = np.array([1.0, 1.1, 0.9, 5.0, -3.0, 1.0])
    looks = Looks.of(diffs, [3, 6])
    low, high = looks.interval(0.05)
    h = half_width_factor(np.array([3, 6]), 0.05)
    lows = looks.means - h * looks.sds
    highs = looks.means + h * looks.sds
    assert (low, high) == (pytest.approx(lows.max()), pytest.approx(highs.min()))


def test_a_missing_pair_leaves_each_look_at_its_planned_round_and_share() -> None:
    """Seeds 0-14 run (rounds n = 10, 15 of 10, 15, 20, 24); the method crashed on seed 3. The
    first look is round 1's: its 9 pairs (seeds below 10), at round 1's share, where 9 seeds of
    one sign do not decide (10 would: alpha w_1 = 0.0024, 2^-9 = 0.002); seed 10, of round 2,
    does not count at round 1's share (by pair count it did, and decided)."""
    schedule = SeedSchedule(initial=10, max=24, step=5)
    rng = np.random.default_rng(9)
    gains = {s: 1.0 + 0.01 * rng.standard_normal() for s in range(11)}
    gains |= {s: -1.0 + 0.01 * rng.standard_normal() for s in range(11, 15)}
    outcomes = [outcome("base", s, 3.0) for s in range(15)]
    outcomes += [outcome("new", s, 3.0 - gains[s]) for s in range(15) if s != 3]
    outcomes.append(TrialOutcome("new", "m", "t", 3, "failed", {}, key="new3"))
    claim = Claim(method="new", than="base", direction="better", source="test")
    (finding,) = findings(outcomes, [claim], baseline=None, metric="val_loss", schedule=schedule)
    (check,) = finding.checks
    record = check.sequential
    assert record is not None and check.verdict == "inconclusive"
    assert (record.n, record.looks) == (14, 2)
    seeds = np.array([s for s in range(15) if s != 3])
    diffs = np.array([-gains[s] for s in seeds])
    looks = Looks.of(diffs, rounds_begun(15, 10, 5, 24), seeds)
    assert (looks.sizes, looks.rounds) == ([9, 14], [10, 15])
    weights = spending_weights([10, 15, 20, 24], 24, 0.05)[:2]
    per_look = robust_p(np.array(looks.sizes), looks.means, looks.sds, looks.wins, looks.losses)
    assert record.p_raw == pytest.approx(float(np.min(per_look / weights)))
    by_pair_count = CheckInput("directional", diffs)  # the first 10 pairs at round 1's share
    (shifted,) = decide([by_pair_count], 0.05, 10, 5, 24)
    assert shifted.outcome == "negative" and shifted.record.looks == 2
    complete = CheckInput("directional", diffs, seeds=seeds, ran=15)
    (kept,) = decide([complete], 0.05, 10, 5, 24)
    assert kept.outcome is None and kept.record.p_raw == record.p_raw


def test_without_a_missing_pair_the_looks_are_the_pair_counts() -> None:
    rng = np.random.default_rng(10)
    diffs = 0.3 + rng.standard_normal(8)
    plain = decide([CheckInput("directional", diffs)], 0.05, 3, 3, 12)
    seeded = decide([CheckInput("directional", diffs, seeds=np.arange(8), ran=8)], 0.05, 3, 3, 12)
    assert plain == seeded
    assert Looks.of(diffs, rounds_begun(8, 3, 3, 12)).sizes == look_sizes(8, 3, 3) == [3, 6, 8]
    assert rounds_begun(2, 3, 3, 12) == [] and rounds_begun(14, 3, 3, 12) == [3, 6, 9, 12, 14]


def test_a_check_whose_schedule_is_run_is_at_max_however_many_pairs_it_lacks() -> None:
    """Seeds 0-8 of a max-9 schedule run, the method's seed 4 timed out: 8 pairs, at max (a
    missing pair is infrastructure), saying so; no more seeds are asked for. With seed 8 not
    yet run (or seed 4 not yet stored) the check is not at max."""
    schedule = SeedSchedule(initial=3, max=9, step=3)
    gains = [0.3, -0.2, 0.25, 0.1, 0.0, -0.3, 0.2, -0.1, 0.15]
    outcomes = [outcome("base", s, 3.0) for s in range(9)]
    outcomes += [outcome("new", s, 3.0 - gains[s]) for s in range(9) if s != 4]
    outcomes.append(TrialOutcome("new", "m", "t", 4, "timeout", {}, key="new4"))
    claim = Claim(method="new", than="base", direction="better", source="test")
    (finding,) = findings(outcomes, [claim], baseline=None, metric="val_loss", schedule=schedule)
    record = finding.checks[0].sequential
    assert record is not None and finding.checks[0].verdict == "inconclusive"
    assert (record.n, record.looks, record.stopped, record.missing) == (8, 3, "max", 1)
    assert record.conditional_power == 0.0
    assert describe(record) == "n = 8, 3 looks, at max (1 pair missing), 34 CPU-s"
    assert verdict_note(record).startswith("at max (n = 8, 1 pair missing); the smallest")
    plan = RankPlan("suite", [], None, RankSpec(), claims=(claim,), models=("m",))
    assert look(plan, schedule, outcomes).wanted == {}
    diffs = -np.array([g for s, g in enumerate(gains) if s != 4])
    seeds = np.array([s for s in range(9) if s != 4])
    (short,) = decide([CheckInput("directional", diffs[:-1], seeds=seeds[:-1])], 0.05, 3, 3, 9)
    (gap,) = decide([CheckInput("directional", diffs, seeds=seeds, ran=4)], 0.05, 3, 3, 9)
    assert short.record.stopped != "max" and gap.record.stopped != "max"
    assert (short.record.missing, gap.record.missing) == (1, 1)


def test_one_exact_sign_test_serves_the_tables_and_the_rule() -> None:
    """`sign_test` (the tables' secondary statistic) and the robust rule's per-look sign test
    are one function, the exact two-sided binomial test: scipy's binomtest to the last bit."""
    from scipy import stats

    from harness.stats import planned
    from harness.stats.paired import sign_p, sign_test

    assert planned.sign_p is sign_p
    for n in range(1, 40):
        wins = np.arange(n + 1)
        expected = [stats.binomtest(int(k), n, 0.5).pvalue for k in wins]
        assert sign_p(wins, n - wins).tolist() == expected
    assert sign_test(np.array([0.1, 0.2, -0.3, 0.0, 0.4])) == (0.625, (3, 1))
    assert sign_test(np.zeros(3)) == (None, (0, 0))


def test_the_running_interval_is_one_intersection_for_the_rule_and_the_simulation() -> None:
    low, high = running_bounds(
        np.array([1.0, 2.0, 0.5]), np.array([np.nan, 1.0, 1.0]), np.array([np.inf, 1.0, 0.2])
    )
    assert low.tolist() == [-np.inf, 1.0, 1.0] and high.tolist() == [np.inf, 3.0, 0.7]
    rows = running_bounds(np.array([[0.0, 1.0], [2.0, 0.0]]), np.ones((2, 2)), 0.5)
    assert rows[0].tolist() == [[-0.5, 0.5], [1.5, 1.5]]
    assert rows[1].tolist() == [[0.5, 0.5], [2.5, 0.5]]


def test_the_tie_checks_of_one_claim_over_its_recipes_are_one_family() -> None:
    """A tie claim checked in 2 recipes tests each at alpha / 2, its intervals and its sign
    tests (the simulator at alpha / 2 decides rep by rep as the pair does) and its detectable
    margin; ties of two claims, and the directional checks beside them, keep their levels."""
    rng = np.random.default_rng(3)
    d = 0.6 * rng.standard_normal(12)
    (alone,) = decide([CheckInput("tie", d, 1.0, claim=0)], 0.05, 3, 3, 12)
    pair = decide([CheckInput("tie", d, 1.0, claim=0)] * 2, 0.05, 3, 3, 12)
    apart = decide(
        [CheckInput("tie", d, 1.0, claim=0), CheckInput("tie", d, 1.0, claim=1)], 0.05, 3, 3, 12
    )
    assert alone.outcome == "inside" and alone.record.level == 0.05
    assert [c.outcome for c in pair] == [None, None] and pair[0].record.level == 0.025
    assert apart[0] == apart[1] == alone
    (low, high), (low_2, high_2) = alone.record.interval, pair[0].record.interval
    assert low_2 is not None and high_2 is not None and low is not None and high is not None
    assert low_2 < low and high < high_2
    assert (pair[0].record.detectable or 0) > (alone.record.detectable or 0) > 0
    mixed = decide(
        [*[CheckInput("tie", d, 1.0, claim=0)] * 2, CheckInput("directional", d)], 0.05, 3, 3, 12
    )
    assert [c.record.level for c in mixed] == [0.025, 0.025, 0.05]
    ties = 0.6 * rng.standard_normal((80, 12))
    found = simulate_tie(ties, 1.0, Schedule(3, 12, 3, alpha=0.025), "planned")
    at_alpha = simulate_tie(ties, 1.0, Schedule(3, 12, 3), "planned")
    assert (found != at_alpha).any()
    for rep in range(80):
        first, _ = decide([CheckInput("tie", ties[rep], 1.0, claim=7)] * 2, 0.05, 3, 3, 12)
        assert first.outcome == {1: "inside", -1: "outside", 0: None}[int(found[rep])]
    outcomes = [
        TrialOutcome(m, model, "t", s, "done", {"val_loss": 3.0 + gap}, key=f"{m}{model}{s}")
        for model in ("m1", "m2")
        for s, diff in enumerate(d)
        for m, gap in (("a", diff), ("b", 0.0))
    ]
    claim = Claim(method="a", than="b", direction="tie", margin=1.0, source="test")
    (finding,) = findings(outcomes, [claim], baseline=None, metric="val_loss", schedule=SCHEDULE)
    assert [c.sequential.level for c in finding.checks if c.sequential] == [0.025, 0.025]
    # each side at alpha / 2 spent over the looks: a 1 - 2 (alpha / 2) interval
    assert [c.ci_level for c in finding.checks] == pytest.approx([0.95, 0.95])


def outcome(method: str, seed: int, loss: float, wall: float = 2.0) -> TrialOutcome:
    return TrialOutcome(
        method, "m", "t", seed, "done", {"val_loss": loss}, key=f"{method}{seed}", wall_time_s=wall
    )


def planned(methods: list[str], seeds: int = 12) -> list[PlannedTrial]:
    return [
        PlannedTrial(f"{m}{s}", "suite", m, "m", "t", s, {}, {})
        for m in methods
        for s in range(seeds)
    ]


def test_findings_under_a_schedule_record_n_looks_stopping_and_cpu_seconds() -> None:
    rng = np.random.default_rng(4)
    outcomes = [outcome("good", s, 2.0 + 0.01 * rng.standard_normal()) for s in range(10)]
    outcomes += [outcome("bad", s, 4.0 + 0.01 * rng.standard_normal()) for s in range(10)]
    claim = Claim(method="good", than="bad", direction="better", source="test")
    (finding,) = findings(outcomes, [claim], baseline=None, metric="val_loss", schedule=EARLY)
    (check,) = finding.checks
    assert finding.verdict == "reproduced" and check.decided_by == "sequential"
    record = check.sequential
    assert record is not None
    assert (record.n, record.looks, record.stopped, record.cpu_s) == (10, 1, "decided", 40.0)
    assert check.ci_level == pytest.approx(1 - record.level)  # the interval's own level
    assert check.p_value is not None and check.p_value < 0.05
    recorded = finding.to_dict()["checks"][0]["sequential"]
    assert recorded["stopped"] == "decided" and "p_anytime" not in recorded
    assert recorded["p_adjusted"] == record.p_adjusted == check.p_value  # Holm over a family of 1


def test_only_the_two_methods_of_an_open_claim_get_more_seeds() -> None:
    rng = np.random.default_rng(5)
    outcomes = []
    for method, mean, sd in [("a", 2.0, 0.01), ("b", 4.0, 0.01), ("c", 3.0, 0.2), ("d", 3.0, 0.2)]:
        outcomes += [outcome(method, s, mean + sd * rng.standard_normal()) for s in range(10)]
    claims = (
        Claim(method="a", than="b", direction="better", source="clear"),
        Claim(method="c", than="d", direction="better", source="open"),
    )
    plan = RankPlan("suite", [], None, RankSpec(), claims=claims, models=("m",), schedule=EARLY)
    found = look(plan, EARLY, outcomes)
    assert found.wanted == {("c", "m", "t"): 15, ("d", "m", "t"): 15}
    wanted = wanted_trials(found, planned(["a", "b", "c", "d"], 20))
    assert {(t.method, t.seed) for t in wanted} == {(m, s) for m in "cd" for s in range(15)}
    assert any("more seeds: c/m/t to 15" in line for line in found.lines(1))


def test_a_futile_comparison_gets_no_more_seeds_unless_futility_is_not_applied() -> None:
    """Futility is non-binding (docs/sequential.md, table 1 has no futility stops): with
    `stop_futile: false` a futile comparison runs on to `max`, with the same verdict rules."""
    rng = np.random.default_rng(6)
    outcomes = [
        outcome(m, s, 3.0 + 0.2 * rng.standard_normal()) for m in ("c", "d") for s in range(6)
    ]
    claim = Claim(method="c", than="d", direction="better", source="null")
    schedule = SeedSchedule(initial=3, max=12, step=3)
    plan = RankPlan("s", [], None, RankSpec(), claims=(claim,), models=("m",), schedule=schedule)
    stopped = look(plan, schedule, outcomes)
    assert stopped.findings[0].checks[0].sequential.stopped == "futile"
    assert stopped.wanted == {}
    to_max = schedule.model_copy(update={"stop_futile": False})
    assert look(plan, to_max, outcomes).wanted == {("c", "m", "t"): 9, ("d", "m", "t"): 9}


def test_a_tuned_method_is_tuned_on_the_initial_seeds_and_only_its_point_gets_more() -> None:
    rng = np.random.default_rng(8)
    points = {"c": [({"lr": 1}, 3.0), ({"lr": 2}, 3.4)], "d": [({}, 3.0)]}
    outcomes = [
        replace(
            outcome(m, s, mean + 0.2 * rng.standard_normal()),
            sweep=sweep,
            key=f"{m}{sweep}{s}",
        )
        for m, by_point in points.items()
        for sweep, mean in by_point
        for s in range(3)
    ]
    # a later seed where the other point shines does not change the choice
    outcomes.append(replace(outcome("c", 3, 0.0), sweep={"lr": 2}, key="c-lr2-3"))
    tuned = select_tuned(outcomes, "val_loss", Direction.MIN, tuned_on=3)
    assert {o.sweep.get("lr") for o in tuned if o.method == "c"} == {1}
    assert select_tuned(outcomes, "val_loss", Direction.MIN)[-1].key == "c-lr2-3"  # all seeds
    claim = Claim(method="c", than="d", direction="better", source="open")
    plan = RankPlan("s", [], None, RankSpec(), claims=(claim,), models=("m",), schedule=SCHEDULE)
    found = look(plan, SCHEDULE, outcomes[:-1])
    assert found.wanted == {("c", "m", "t"): 6, ("d", "m", "t"): 6}
    trials = [
        PlannedTrial(f"{m}{sweep}{s}", "s", m, "m", "t", s, sweep, {})
        for m, by_point in points.items()
        for sweep, _ in by_point
        for s in range(12)
    ]
    wanted = wanted_trials(found, trials)
    assert {(t.method, t.sweep.get("lr"), t.seed) for t in wanted} == {
        (m, lr, s) for m, lr in [("c", 1), ("d", None)] for s in range(6)
    }
    assert any("more seeds: c[lr=1]/m/t to 6" in line for line in found.lines(1))
    suite = Suite.model_validate(
        {
            "suite": "s",
            "seeds": {"initial": 3, "max": 12, "step": 3},
            "models": {"m": {"type": "gpt"}},
            "tasks": {"t": {"type": "lm"}},
            "methods": {"c": {"sweep": {"optimizer.lr": [1, 2]}}, "d": {}},
        }
    )
    assert most_trials(suite, trials) == 9 + 9 * 2  # 3 trials a seed, then 2
    # `plan` marks the later seeds of the point not chosen "not needed", once the look is possible
    unneeded = unneeded_trials(suite, trials, outcomes[:-1])
    assert unneeded == {t.key for t in trials if t.sweep.get("lr") == 2 and t.seed >= 3}
    assert unneeded_trials(suite, trials, outcomes[:5]) == set()  # initial seeds still missing


def test_without_claims_each_method_is_compared_with_the_baseline() -> None:
    rng = np.random.default_rng(6)
    outcomes = []
    for method, mean, sd in [("base", 2.0, 0.01), ("far", 4.0, 0.01), ("near", 2.0, 0.3)]:
        outcomes += [outcome(method, s, mean + sd * rng.standard_normal()) for s in range(10)]
    plan = RankPlan("suite", [], "base", RankSpec(), models=("m",), schedule=EARLY)
    found = look(plan, EARLY, outcomes)
    assert set(found.wanted) == {("base", "m", "t"), ("near", "m", "t")}
    # and `rank` shows these comparisons' anytime-valid verdicts as findings
    shown = {f.method: f for f in claim_findings(plan, outcomes)}
    assert {m: f.verdict for m, f in shown.items()} == {
        "far": "contradicted",
        "near": "inconclusive",
    }
    # no claim says "better": the comparison reads as one, and its verdicts as better / worse
    far = shown["far"]
    assert far.claim == "far against base on val_loss"
    assert far.verdict_text == far.checks[0].verdict_text == "worse"
    assert any(
        "far against base on val_loss [m/t]" in line and "worse" in line for line in found.lines(1)
    )


def test_the_round_policy_runs_the_initial_seeds_then_what_each_look_asks(tmp_path: Path) -> None:
    suite = Suite.model_validate(
        {
            "suite": "s",
            "seeds": {"initial": 10, "max": 20, "step": 5},
            "models": {"m": {"type": "gpt"}},
            "tasks": {"t": {"type": "lm"}},
            "methods": {m: {} for m in "abcd"},
            "expect": [
                {"method": "a", "than": "b", "direction": "better", "source": "clear"},
                {"method": "c", "than": "d", "direction": "better", "source": "open"},
            ],
        }
    )
    trials = factories.planned("s", {m: {} for m in "abcd"}, ["m"], ["t"], range(20))
    engine = open_database(f"sqlite:///{tmp_path / 'policy.db'}")
    shown: list[str] = []
    policy = SequentialSeeds(suite, shown.append)
    keys = [t.key for t in trials]

    def stored() -> list[TrialOutcome]:  # what the run path reads for the policy
        return stored_outcomes(engine, keys, suite="s", metrics=policy.reads)

    first = policy.trials(Round(0, trials, stored(), {}))
    assert {(t.method, t.seed) for t in first} == {(m, s) for m in "abcd" for s in range(10)}
    rng = np.random.default_rng(7)
    means, sds = (
        {"a": 2.0, "b": 4.0, "c": 3.0, "d": 3.0},
        {"a": 0.01, "b": 0.01, "c": 0.2, "d": 0.2},
    )
    factories.store(
        engine,
        [
            (
                t,
                factories.fake_result("done", means[t.method] + sds[t.method] * rng.normal(), rng),
            )
            for t in first
        ],
    )
    ran = {t.key: None for t in first}
    second = policy.trials(Round(1, trials, stored(), ran))
    assert {(t.method, t.seed) for t in second} == {(m, s) for m in "cd" for s in range(10, 15)}
    assert shown and shown[0].startswith("look 1:")


@pytest.mark.parametrize(
    "path",
    [
        *sorted((Path(__file__).parents[1] / "suites" / "findings").glob("*.yaml")),
        Path(__file__).parents[1] / "suites" / "norms.yaml",
    ],
    ids=lambda p: p.stem,
)
def test_plan_design_reports_every_claim_of_every_findings_suite_and_a_suite_without_claims(
    path: Path,
) -> None:
    from harness.cli.design import design_lines
    from harness.spec.check import load_suite

    suite = load_suite(path)
    lines = design_lines(suite, [], reps=200, pilot_s=60.0)
    assert lines[0].startswith(f"design of {suite.suite}: looks at n =")
    claims = [line for line in lines if "false" in line and "at most" in line]
    assert len(claims) == len(suite.expect) or (not suite.expect and claims)
    assert all(any(f"{e:>12g}" in line for line in lines) for e in (0.5, 1, 1.5, 2, 3))


def test_a_paper_effect_outside_the_interval_reads_not_reproduced_at_this_scale() -> None:
    from harness.claims.verdicts import RecipeCheck

    check = RecipeCheck("m", "t", 9, 0.01, -0.02, 0.04, 0.3, None, "inconclusive")
    assert check.verdict_text == "inconclusive: rules out differences outside [-0.02, +0.04]"
    far = replace(check, paper_effect=-0.1)
    assert far.verdict_text == (
        "not reproduced at this scale: the interval [-0.02, +0.04] excludes the paper's effect "
        "(-0.1)"
    )
    inside = replace(check, paper_effect=-0.01)
    assert inside.verdict_text.endswith("(it contains 0 and the paper's effect, -0.01)")
    beyond = replace(check, ci_low=-0.5, ci_high=-0.2, paper_effect=-0.1, signs=(0, 9))
    assert beyond.verdict_text == (
        "inconclusive: the interval [-0.5, -0.2] lies beyond the paper's effect (-0.1), the sign "
        "test (0/9) does not decide yet: more seeds of one sign"
    )
    stuck = replace(
        check, verdict="reproduced", names=("a", "b"), at_trivial=(0, 5), finished=(6, 6)
    )
    assert stuck.verdict_text == "reproduced (an arm does not train)"


def test_the_detectable_effect_counts_the_sign_test_and_a_schedule_that_cannot_decide() -> None:
    """At max 9 and a two-sided level of 0.0125, only 9 of 9 seeds of one sign pass the sign
    test: 80% power needs P(win)^9 = 0.8, an effect of Phi^-1(0.8^(1/9)) sd, far beyond the
    t-test's; at dyt-derf's max 6 with its family of 3, not even 6 of 6 pass (2^-5 > its last
    share of alpha / 3): no effect is detectable, and the label says why."""
    from scipy import stats

    from harness.claims.verdicts import RecipeCheck
    from harness.stats.planned import final_sign_test, sign_detectable, t_half_factor

    nine = sign_detectable(9, final_sign_test(0.0125, tie=False, planned=True), 0.8)
    assert nine == pytest.approx(stats.norm.ppf(0.8 ** (1 / 9)), abs=1e-6)
    t_only = detectable_effect(1.0, 9, 0.0125, float(t_half_factor(9, 0.0125)))
    both = detectable_effect(
        1.0, 9, 0.0125, float(t_half_factor(9, 0.0125)), passes=final_sign_test(0.0125, False, True)
    )
    assert t_only is not None and t_only < nine and both == pytest.approx(nine, abs=1e-6)
    last = 0.05 / 3 * float(spending_weights([3, 6], 6, 0.05)[-1])
    assert sign_detectable(6, final_sign_test(last, tie=False, planned=True), 0.8) == math.inf
    assert math.isinf(detectable_effect(1.0, 6, last, passes=final_sign_test(last, False, True)))
    [decision] = decide(
        [CheckInput("directional", np.array([0.3, -0.2, 0.1, 0.4, -0.1, 0.2]))], 0.05, 3, 3, 6
    )
    assert decision.record.decidable and decision.record.detectable is not None
    record = SequentialCheck(
        6, 2, 0.0167, (-0.5, 0.2), 1.0, "max", None, None, max_n=6, sd=0.27, decidable=False
    )
    check = RecipeCheck("m", "t", 6, -0.1, -0.5, 0.2, 1.0, None, "inconclusive", sequential=record)
    assert check.verdict_text == (
        "untestable at this scale: even 6 of max 6 seeds of one sign cannot pass the sign test at "
        "the last look's share of alpha (docs/sequential.md); the interval rules out differences "
        "outside [-0.5, +0.2]"
    )


def test_a_stopped_undecided_check_says_why_its_seeds_could_not_decide() -> None:
    """Futile or at max, an undecided check is untestable at this scale with the reason (what
    max seeds detect at its paired sd, against the paper's effect or none), or keeps the
    interval's words where the paper's effect is detectable and still inside; open checks keep
    theirs; a tie compares the narrowest margin max seeds confirm with its own."""
    from harness.claims.verdicts import Finding, RecipeCheck

    record = SequentialCheck(6, 2, 0.025, (-0.1, 0.06), 0.4, "futile", 0.05, 0.08, max_n=9, sd=0.05)
    check = RecipeCheck(
        "m", "t", 6, -0.02, -0.1, 0.06, 0.4, None, "inconclusive", sequential=record
    )
    assert check.verdict_text == (
        "untestable at this scale: max 9 seeds detect effects of 0.08 or more (paired sd 0.05) "
        "and the paper states no effect size; the interval rules out differences outside "
        "[-0.1, +0.06]"
    )
    small = replace(check, paper_effect=-0.03)
    assert small.verdict_text == (
        "untestable at this scale: max 9 seeds detect effects of 0.08 or more (paired sd 0.05), "
        "the paper's effect is -0.03"
    )
    large = replace(check, paper_effect=-0.09, sequential=replace(record, stopped="max"))
    assert large.verdict_text == (
        "undecided (at max): the interval [-0.1, +0.06] contains the paper's effect -0.09"
    )
    far = replace(check, paper_effect=-0.3)
    assert far.verdict_text.startswith("not reproduced at this scale: the interval")
    signs = replace(check, ci_low=-0.1, ci_high=-0.01, signs=(1, 5), paper_effect=-0.03)
    assert signs.verdict_text == (
        "untestable at this scale: max 9 seeds detect effects of 0.08 or more (paired sd 0.05); "
        "the mean's interval [-0.1, -0.01] excludes 0, the sign test (1/5) does not decide"
    )
    larger = replace(signs, delta=-0.09, ci_low=-0.15)  # beyond what max seeds detect
    assert larger.verdict_text == (
        "undecided (futile): the mean's interval [-0.15, -0.01] excludes 0, the sign test (1/5) "
        "does not decide"
    )
    open_ = replace(small, sequential=replace(record, stopped=None))
    assert open_.verdict_text == (
        "inconclusive: rules out differences outside [-0.1, +0.06] (it contains 0 and the "
        "paper's effect, -0.03)"
    )
    tie = replace(record, kind="tie", margin=0.03, detectable=0.065, max_n=16)
    wide = replace(check, sequential=tie, ci_low=-0.125, ci_high=0.041)
    assert wide.verdict_text == (
        "untestable at this scale: max 16 seeds confirm margins of 0.065 or wider, the claim's "
        "margin is 0.03"
    )
    narrow = replace(wide, sequential=replace(tie, detectable=0.02))
    assert narrow.verdict_text == (
        "undecided (futile): the interval [-0.125, +0.041] crosses the margin +-0.03"
    )
    assert check.sequential_note == "futile at n = 6"  # the verdict says what max detects
    assert (
        large.sequential_note == "at max (n = 6); the smallest effect max seeds could detect: 0.08"
    )
    decided = replace(check, model="m1", verdict="reproduced", ci_high=-0.01)
    kinds = [c.undecided_kind for c in (check, far, large)]
    assert kinds == ["untestable at this scale", "not reproduced at this scale", "undecided"]
    finding = Finding(
        0, "a", "b", "val_loss", "better", None, "x", "", [decided, check], "compatible"
    )
    assert finding.verdict_text == (
        "reproduced in m1, untestable at this scale in m (compatible: the intervals overlap)"
    )
    tables = runpy.run_path(str(Path(__file__).parents[1] / "docs" / "results" / "tables.py"))
    found = {"verdict_text": check.verdict_text, "verdict": "inconclusive"}
    assert tables["_kind"]({}, found, {"stopped": "futile"}) == (
        "untestable at this scale (max seeds could not decide it)"
    )
    found["verdict_text"] = large.verdict_text
    assert tables["_kind"]({}, found, {"stopped": "max"}) == "undecided, at max"


def test_a_claim_registered_after_trials_it_uses_is_exploratory_from_its_field_or_git(
    tmp_path: Path,
) -> None:
    import subprocess
    from datetime import UTC, datetime

    import yaml

    from harness.claims.exploratory import exploratory_note
    from harness.core import Status, TrialOutcome
    from harness.spec.history import registrations
    from harness.spec.rank import Claim

    suite = tmp_path / "s.yaml"
    first = {"baseline": "a", "expect": [{"method": "b", "direction": "better", "source": "x"}]}
    later = {
        "baseline": "a",
        "expect": [*first["expect"], {"method": "c", "direction": "better", "source": "x"}],
    }
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
        "PATH": "/usr/bin:/bin",
    }

    def commit(data: dict[str, object], when: str) -> None:
        suite.write_text(yaml.safe_dump(data))
        dated = env | {"GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when}
        subprocess.run(["git", "add", "s.yaml"], cwd=tmp_path, check=True, env=dated)
        subprocess.run(["git", "commit", "-qm", "c"], cwd=tmp_path, check=True, env=dated)

    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True, env=env)
    commit(first, "2026-01-01T00:00:00+00:00")
    commit(later, "2026-01-03T00:00:00+00:00")
    claims = [Claim.model_validate(c) for c in later["expect"]]
    explicit = Claim.model_validate({**later["expect"][0], "registered": "2026-01-05"})
    when = registrations(suite, [*claims, explicit], "a")
    assert when == (
        datetime(2026, 1, 1, tzinfo=UTC),
        datetime(2026, 1, 3, tzinfo=UTC),
        datetime(2026, 1, 5, tzinfo=UTC),
    )
    ended = {"k0": datetime(2026, 1, 2), "k1": datetime(2026, 1, 4)}
    outcomes = [
        TrialOutcome(m, "g", "t", s, Status.DONE, {}, key=f"k{s}") for m in "ac" for s in (0, 1)
    ]
    assert exploratory_note(claims[0], "a", when[0], outcomes, ended) == ""
    assert exploratory_note(claims[1], "a", when[1], outcomes, ended) == (
        "registered 2026-01-03 00:00 UTC, after 2 of the 4 trials it uses were stored"
    )


def test_a_recorded_sequential_plan_counts_later_seeds_apart_from_missing_initial_ones() -> None:
    from harness.core import Status, TrialOutcome
    from harness.ranking.suite import RankPlan, unstored_count_note
    from harness.spec.rank import RankSpec, SeedSchedule

    schedule = SeedSchedule(initial=3, max=9, step=2)
    plan = RankPlan("s", [f"k{i}" for i in range(18)], "a", RankSpec(), schedule=schedule)
    stored = [
        TrialOutcome(m, "g", "t", seed, Status.DONE, {}, key=f"{m}{seed}")
        for m, seeds in (("a", range(5)), ("b", range(2)))
        for seed in seeds
    ]
    assert unstored_count_note(plan, stored) == [
        "11 of 18 planned trials have no stored result: 1 of the 6 initial-seed trials (not run, "
        "running, or interrupted): `layerbench rank` of the suite file says why; 10 are later "
        "seeds the sequential rule has not asked for (its comparisons need no more, or its next "
        "look has not run)"
    ]
    full = [*stored, TrialOutcome("b", "g", "t", 2, Status.DONE, {}, key="b2")]
    assert unstored_count_note(plan, full)[0].endswith("; every initial seed is stored")


def test_one_holm_family_over_a_page_says_which_decisions_survive() -> None:
    from harness.claims.page import page_holm, survives

    adjusted = page_holm([0.001, None, 0.02, 0.4])
    assert adjusted == pytest.approx([0.003, None, 0.04, 0.4])  # Holm over the three p-values
    assert survives("reproduced", adjusted[0], 0.05) == "survives"
    assert survives("contradicted", 0.06, 0.05) == "does not survive"
    assert survives("inconclusive", 0.01, 0.05) == "" and survives("reproduced", None, 0.05) == ""
