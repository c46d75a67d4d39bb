"""Auto's switch (runtime/decoding/adaptive/switch.py): auto's rounds or plain target steps, whichever measures faster.

The first part drives the switch with a made-up clock: rounds of each mode cost a set time per token, and the
switch must settle on the faster mode with a bounded share of rounds spent measuring the slower one, follow a
change, and survive noise. The second part decodes with switches that flip every round (so auto's sources start in
the middle of a request, after plain steps) or never leave plain steps: greedy output equals target-only decoding,
and plain rounds are exactly target-only rounds. The distribution of the mixture is checked in
test_distribution.py (test_switching_between_plain_steps_and_draft_rounds_keeps_the_target_distribution).
"""

import random

import torch
from transformers import T5ForConditionalGeneration

from test_distribution import Alternate
from tinymodels import random_prompts as prompts

from specdec.runtime import Params
from specdec.runtime.decoding.adaptive import switch as sw
from specdec.runtime.decoding.adaptive.switch import Switch


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def drive(switch, clock, cost, rounds, per_request=10):
    """`rounds` one-token rounds in requests of `per_request` tokens; cost(auto, i) is round i's seconds in that mode.
    Returns the modes, True for an auto round."""
    modes, produced = [], 0
    switch.start()
    for i in range(rounds):
        if produced == per_request:
            switch.start()
            clock.t += 5.0                   # a request's set-up (encoder run): not a round's time
            produced = 0
        auto = not switch.plain(produced)
        modes.append(auto)
        clock.t += cost(auto, i)
        produced += 1
    return modes


def share_after(modes, auto: bool, skip: int) -> float:
    later = modes[skip:]
    return sum(1 for m in later if m == auto) / len(later)


def test_plain_steps_that_are_faster_take_almost_every_round():
    clock = Clock()
    modes = drive(Switch(clock), clock, lambda auto, i: 1.05e-3 if auto else 1.00e-3, 20_000)
    assert sum(modes) / len(modes) < 0.06
    assert share_after(modes, True, 16_000) <= sw.MIN_SHARE + 0.005      # the floor: measuring auto still


def test_auto_rounds_that_are_faster_take_almost_every_round():
    clock = Clock()
    modes = drive(Switch(clock), clock, lambda auto, i: 0.90e-3 if auto else 1.00e-3, 20_000)
    assert share_after(modes, False, 0) < 0.06
    assert share_after(modes, False, 16_000) <= sw.MIN_SHARE + 0.005


def test_the_first_rounds_are_measured_half_and_half_then_a_clear_difference_leaves_the_slower_the_floor():
    """Auto's rounds 1.5x faster per token (as measured at t5-large size): FIRST rounds half and half, then plain
    steps keep only MIN_SHARE (a made-up clock has no spread: the chance is certain at the first update)."""
    clock = Clock()
    modes = drive(Switch(clock), clock, lambda auto, i: 0.65e-3 if auto else 1.00e-3, 1000)
    assert abs(share_after(modes[:sw.FIRST], False, 0) - 0.5) < 0.1          # both measured first
    assert share_after(modes, False, sw.FIRST + sw.DECIDE) <= sw.MIN_SHARE + 0.01
    assert share_after(modes, False, 0) < 0.1


def test_the_slower_mode_runs_in_proportion_to_the_chance_that_it_is_the_faster():
    """Probability matching: rounds whose times spread +-50 % (seeded), the modes 2 % apart. While the measurements
    cannot tell them apart both run a large share; the share of the slower falls as the chance does, and the rounds
    spent on it are far fewer than half."""
    rng, clock = random.Random(3), Clock()
    switch = Switch(clock)
    modes = drive(switch, clock, lambda auto, i: (0.98e-3 if auto else 1.0e-3) * rng.uniform(0.5, 1.5), 20_000)
    early, late = share_after(modes[:500], False, 0), share_after(modes, False, 15_000)
    assert early > 0.15, early                    # uncertain: plain steps still run often
    assert late < early and late < 0.1, (early, late)
    assert switch.lead is True and switch.explored > 0


def test_a_change_is_followed():
    """Auto's rounds pay for 10,000 rounds, then cost 20 % more: plain steps take over within a half-life or so."""
    clock = Clock()
    modes = drive(Switch(clock), clock, lambda auto, i: (0.9e-3 if i < 10_000 else 1.2e-3) if auto else 1e-3, 30_000)
    assert share_after(modes[:10_000], True, 0) > 0.9
    assert share_after(modes, True, 10_000 + 2 * sw.HALF_LIFE) < 0.05


def test_noisy_rounds_still_settle_on_the_faster_mode():
    """Each round's time varies by +-30 % (uniform, seeded); the faster mode is 6 % faster."""
    for faster_auto in (True, False):
        rng, clock = random.Random(7), Clock()
        base = {faster_auto: 0.94e-3, not faster_auto: 1.0e-3}
        modes = drive(Switch(clock), clock, lambda auto, i: base[auto] * rng.uniform(0.7, 1.3), 40_000)
        assert share_after(modes, faster_auto, 0) > 0.9, faster_auto


def test_work_that_changes_cost_between_requests_does_not_mislead_it():
    """Blocks of 500 rounds alternate between work that costs 1x and 1.6x (short and long prompts, two tasks);
    auto's rounds are 5 % faster on both. Rounds are interleaved, so both modes see both kinds of work."""
    for faster_auto in (True, False):
        clock = Clock()
        base = {faster_auto: 0.95e-3, not faster_auto: 1.0e-3}
        modes = drive(Switch(clock), clock, lambda auto, i: base[auto] * (1.6 if (i // 500) % 2 else 1.0), 20_000)
        assert share_after(modes, faster_auto, 0) > 0.85, faster_auto
        assert share_after(modes, faster_auto, 10_000) > 0.95, faster_auto


def test_idle_time_between_rounds_is_left_out():
    """A batch's joining requests run their encoders between rounds (runtime/decoding/strategies/batch.py). Here every
    3rd round is followed by 4 ms of such work, and auto's rounds are 5 % faster; rounds are interleaved with a
    golden-ratio sequence, so without `idle` the joins would land on the modes unevenly. Passed as `idle`, they are
    no round's time and auto wins; the control charges them to the round before and is misled (or at best noisier)."""

    def drive_idle(pass_idle: bool):
        clock, switch = Clock(), Switch()
        switch.clock = clock
        modes, produced, idle = [], 0, 0.0
        for i in range(20_000):
            auto = not switch.plain(produced, idle if pass_idle else 0.0)
            modes.append(auto)
            clock.t += 0.95e-3 if auto else 1.0e-3
            produced += 1
            idle = 4e-3 if (i % 3 == 2 and auto) else 0.0      # joins after auto rounds only: the worst case
            clock.t += idle
        return modes

    assert share_after(drive_idle(True), True, 10_000) > 0.95
    assert share_after(drive_idle(False), True, 10_000) < 0.5


def test_rounds_held_while_auto_is_young_are_auto_s_and_do_not_mislead_the_switch():
    """Auto's first rounds run each source in turn (auto.py's SETTLE) and cost 3x a plain step per token; from then on
    its rounds are 1.2x faster. Held (auto's estimates young), those rounds are all auto's and unmeasured: the switch
    then measures FIRST rounds half and half and leaves plain steps the floor. The control measures the same young
    rounds: on the decayed sums they outweigh hundreds of good rounds, and plain steps lead the 1,000 rounds after."""
    young = 150

    def run(hold: bool) -> list:
        clock, modes = Clock(), []
        switch = Switch(clock)
        switch.start()
        for i in range(young + 1000):
            auto = not switch.plain(i, hold=hold and i < young)
            modes.append(auto)
            clock.t += (3e-3 if i < young else 0.83e-3) if auto else 1e-3
        return modes

    held = run(hold=True)
    assert all(held[:young])
    assert share_after(held, False, young + sw.FIRST + sw.DECIDE) <= sw.MIN_SHARE + 0.01
    control = run(hold=False)
    assert share_after(control, True, young + sw.FIRST + sw.DECIDE) < 0.5


def test_the_switch_catches_a_slower_auto_that_a_blind_one_would_keep():
    """The control: the same run with the switch's comparison reversed keeps the slower mode."""

    class Reversed(Switch):
        def auto_faster_chance(self):
            chance = super().auto_faster_chance()
            return None if chance is None else 1 - chance

    clock = Clock()
    modes = drive(Reversed(clock), clock, lambda auto, i: 1.05e-3 if auto else 1.00e-3, 20_000)
    assert sum(modes) / len(modes) > 0.5


# -- decoding ----------------------------------------------------------------------------------------------------

class Plain(Alternate):
    def plain(self, produced, hold=False):
        self.rounds[True] += 1
        return True


def test_greedy_output_is_unchanged_when_rounds_switch(related_pair, related_decoder):
    decoder = related_decoder
    model = T5ForConditionalGeneration.from_pretrained(str(related_pair[0])).eval()
    proposed = 0
    for draft, gamma in (("auto", "auto"), ("lookup", "auto"), ("draft", "auto")):
        source = decoder.scheduler.source(Params(draft=draft, gamma=gamma))
        source.switch = Alternate()
        for ids in prompts(48, 12, seed=5):
            with torch.no_grad():
                ref = model.generate(torch.tensor([ids]), max_new_tokens=20, do_sample=False)[0, 1:].tolist()
            while ref and ref[-1] == 0:
                ref.pop()
            res = decoder.generate(input_ids=ids, max_new_tokens=20, draft=draft, gamma=gamma)
            assert res.token_ids == ref, (draft, ids)
            proposed += res.stats.proposed
        assert source.switch.rounds[True] > 20 and source.switch.rounds[False] > 20
    assert proposed > 0, "no auto round proposed anything: the sources' late start was not exercised"
    decoder.reset_estimates()


def test_plain_rounds_are_target_only_rounds(related_decoder):
    decoder = related_decoder
    source = decoder.scheduler.source(Params(draft="auto"))
    source.switch = Plain()
    for ids in prompts(48, 6, seed=9):
        res = decoder.generate(input_ids=ids, max_new_tokens=16, draft="auto")
        baseline = decoder.generate(input_ids=ids, max_new_tokens=16, gamma=0)
        assert res.token_ids == baseline.token_ids
        s = res.stats
        assert s.proposed == 0 and s.draft_calls == 0 and s.target_calls == s.new_tokens
        assert set(s.sources) == {"none"}
    decoder.reset_estimates()


def test_a_source_object_keeps_its_switch_and_a_new_object_takes_its_slot(related_decoder):
    """draft=<DraftSource> at gamma="auto": the same object gets the same AutoDraft (its switch and estimates go on
    learning); a new object replaces it, so a new object per request does not pile AutoDrafts up."""
    from specdec.runtime.decoding.sources.lookup import LookupDraft

    source, a, b = related_decoder.scheduler.source, LookupDraft(), LookupDraft()
    first = source(Params(draft=a))
    assert source(Params(draft=a)) is first
    assert source(Params(draft=b)) is not first
    assert source(Params(draft=a)) is not first
    assert not [k for k in related_decoder.learned._made if any(isinstance(part, LookupDraft) for part in k)]
