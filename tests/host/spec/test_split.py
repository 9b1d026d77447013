"""The held-out split is decided per example (tt_host.spec.split): edits to the instruction or to other examples
never move an example, added examples never move the existing ones, and a recorded split is kept."""

from tt_host.spec.compiler import compile_spec
from tt_host.spec.schema import BehaviorSpec
from tt_host.spec.split import (RecordedSplit, held_out_score, normalize_prompt, prompt_digest, split_examples,
                                split_salt)

TOPICS = ["refund", "shipping", "password", "invoice", "warranty", "upgrade", "cancel", "login", "delivery",
          "discount", "exchange", "billing", "account", "coupon", "tracking", "return", "payment", "address",
          "subscription", "order", "receipt", "gift card", "price match", "damaged item", "late parcel",
          "missing part", "wrong size", "two-factor", "email change", "data export", "trial", "plan", "seat",
          "api key", "webhook"]


def support_spec(n: int, **changes) -> BehaviorSpec:
    fields = {
        "name": "support-triage",
        "system_prompt": "You route customer messages to a team.",
        "guidelines": ["Answer with the team name only", "Prefer billing when money is mentioned"],
        "constraints": ["Never invent a team"],
        "examples": [{"input": f"My question is about {topic}, can you help?", "output": f"team-{i % 4}"}
                     for i, topic in enumerate(TOPICS[:n])],
    }
    fields.update(changes)
    return BehaviorSpec(**fields)


def held_prompts(spec: BehaviorSpec) -> set[str]:
    return {row["messages"][1]["content"] for row in compile_spec(spec).eval_rows}


def test_instruction_edits_keep_the_held_out_set_and_added_examples_keep_their_side():
    base = support_spec(30)
    held = held_prompts(base)
    assert 0 < len(held) < 30
    edited = support_spec(30, system_prompt="You route customer e-mails to the right team.",
                          guidelines=["Answer with the team name only", "Prefer billing when a price is mentioned"],
                          constraints=["Never invent a team name"])
    assert held_prompts(edited) == held
    answers = support_spec(30, examples=[{**e.model_dump(), "output": e.output + "!"} for e in base.examples])
    assert held_prompts(answers) == held
    grown = support_spec(35)
    grown_held = held_prompts(grown)
    earlier = {e.input for e in base.examples}
    assert grown_held & earlier == held  # every earlier example on its side
    assert 0.10 <= len(grown_held) / 35 <= 0.35


def test_the_salt_is_the_spec_name_unless_split_salt_keeps_it():
    base = support_spec(30)
    renamed = support_spec(30, name="support-routing")
    assert split_salt(renamed) == "support-routing"
    assert held_prompts(renamed) != held_prompts(base)  # a new name draws a new split...
    kept = support_spec(30, name="support-routing", evaluation={"split_salt": "support-triage"})
    assert held_prompts(kept) == held_prompts(base)  # ...unless split_salt keeps the old one


def test_a_recorded_split_keeps_every_recorded_prompt_on_its_side():
    prompts = [f"prompt number {i}" for i in range(40)]
    flags = split_examples(prompts, "salt-a")
    recorded = RecordedSplit.of("salt-a", prompts, flags)
    assert recorded.held_out and recorded.train
    # the same prompts under another salt would move; with the recorded split none does
    assert split_examples(prompts, "salt-b") != flags
    assert split_examples(prompts, "salt-b", recorded) == flags
    more = prompts + [f"a new prompt {i}" for i in range(10)]
    again = split_examples(more, "salt-b", recorded)
    assert again[:40] == flags
    assert again[40:] == [held_out_score("salt-a", p) < 0.2 for p in more[40:]]  # new ones: the recorded salt


def test_neither_side_is_left_empty_and_normalization_is_shared():
    flags = split_examples(["a", "b"], "s")
    assert sorted(flags) == [False, True]
    assert split_examples(["only one"], "s") == [False]
    assert normalize_prompt("  Ｈello\t  World ") == "hello world"
    assert prompt_digest("Hello world") == prompt_digest("  hello   WORLD ")
    assert split_examples(["Hello world", "x", "y"], "s")[0] == split_examples(["  hello   WORLD ", "x", "y"], "s")[0]


def test_a_run_made_with_the_old_rule_gets_the_split_it_started_with():
    from tt_host.spec.split import LEGACY_RULE, legacy_split

    spec_json = {"name": "capitals", "system_prompt": "Answer with the capital city.",
                 "examples": [{"input": f"Capital of country {i}?", "output": f"City {i}"} for i in range(10)]}
    recorded = legacy_split(spec_json)
    # what the host before per-example splits held out for this spec (its compile_spec, run at main 8919d3d)
    assert recorded.rule == LEGACY_RULE
    assert set(recorded.held_out) == {prompt_digest("Capital of country 3?"), prompt_digest("Capital of country 6?")}
    assert len(recorded.train) == 8
