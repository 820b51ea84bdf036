from typing import Any

import pytest

from relay.chat.access import Access, power_level

POWER = {"users": {"@lead:t": 100, "@dev:t": 50}, "users_default": 0}
ALICE, BOB, LEAD, DEV = "@alice:t", "@bob:t", "@lead:t", "@dev:t"


@pytest.mark.parametrize(
    ("access", "user", "power", "approve", "prompt"),
    [
        (Access(frozenset({ALICE})), ALICE, None, True, True),
        (Access(frozenset({ALICE})), BOB, None, False, False),
        (Access(frozenset({ALICE}), prompters=frozenset({BOB})), BOB, None, False, True),
        (Access(frozenset({ALICE}), prompters=frozenset({BOB})), ALICE, None, True, False),
        (Access(approver_level=50), DEV, POWER, True, True),
        (Access(approver_level=50), LEAD, POWER, True, True),
        (Access(approver_level=51), DEV, POWER, False, False),
        (Access(approver_level=50), BOB, POWER, False, False),
        (Access(approver_level=50), DEV, None, False, False),
        (Access(frozenset({ALICE}), prompter_level=50), DEV, POWER, False, True),
        (Access(), ALICE, POWER, False, False),
    ],
)  # fmt: skip
def test_who_may_approve_and_prompt(
    access: Access, user: str, power: dict[str, Any] | None, approve: bool, prompt: bool
) -> None:
    """Approvers by id or level; prompters by their own rules, else the approvers."""
    assert access.may_approve(user, power) is approve
    assert access.may_prompt(user, power) is prompt


@pytest.mark.parametrize(
    ("power", "expected"),
    [
        ({"users": {ALICE: 30}}, 30),
        ({"users": {}, "users_default": 10}, 10),
        ({"users": {ALICE: "100"}}, 0),
        ({"users": {ALICE: True}}, 0),
        ({"users": "nonsense"}, 0),
        (None, 0),
    ],
)
def test_power_level_reads_only_integers(power: dict[str, Any] | None, expected: int) -> None:
    """A level that is not an integer counts as 0: a display name or a string grants nothing."""
    assert power_level(ALICE, power) == expected


def test_the_approvers_are_named_in_words() -> None:
    """The request's message names who may answer."""
    assert Access(frozenset({BOB, ALICE}), approver_level=50).approvers_text() == (
        "@alice:t, @bob:t, power level 50 or more"
    )
    assert Access().approvers_text() == "nobody"


def test_only_approvers_share_unless_widened_to_prompters() -> None:
    """By default a prompter who is not an approver may not share; --share-by prompters
    lets her; someone who may not prompt never may."""
    narrow = Access(frozenset({ALICE}), prompters=frozenset({ALICE, BOB}))
    wide = Access(frozenset({ALICE}), prompters=frozenset({ALICE, BOB}), share_by="prompters")
    assert [narrow.may_share(u, None) for u in (ALICE, BOB, DEV)] == [True, False, False]
    assert [wide.may_share(u, None) for u in (ALICE, BOB, DEV)] == [True, True, False]
