"""`command:` in the compact spec: a string, or a list of arguments as Kubernetes writes it."""

from __future__ import annotations

import json
import shlex

import pytest
from hypothesis import given
from hypothesis import strategies as st

from voda.spec import SpecError, parse_submission


def spec_with(command: object) -> bytes:
    return json.dumps({"name": "train", "command": command, "min": 1, "max": 2}).encode()


def test_a_list_is_kept_as_the_string_the_local_backend_splits_back() -> None:
    yaml_body = b"name: train\ncommand: [python, train.py, --note, 'two words', '']\n"
    command = parse_submission(yaml_body).command
    assert shlex.split(command) == ["python", "train.py", "--note", "two words", ""]


def test_a_string_is_kept_as_it_is() -> None:
    assert parse_submission(b"name: t\ncommand: python train.py --lr 0.1").command == (
        "python train.py --lr 0.1")


@given(st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",),
                                               blacklist_characters="\x00"), max_size=20),
                min_size=1, max_size=8).filter(lambda parts: parts[0].strip() != ""))
def test_any_list_of_strings_round_trips(parts: list[str]) -> None:
    assert shlex.split(parse_submission(spec_with(parts), "application/json").command) == parts


@pytest.mark.parametrize(("command", "field", "reason"), [
    ([], "command", "non-empty list"),
    (["python", 3], "command[1]", "must be a string"),
    (["", "x"], "command[0]", "must not be empty"),
    ({"run": "x"}, "command", "non-empty string or a non-empty list"),
    (["x"] * 1001, "command", "at most 1000 arguments"),
    (["x" * 70_000], "command", "at most 65536 characters"),
], ids=["an empty list", "a number in the list", "an empty program", "a mapping",
        "too many arguments", "too long"])
def test_bad_commands_are_refused_naming_the_field(command: object, field: str,
                                                   reason: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_submission(spec_with(command), "application/json")
    assert any(e.field == field and reason in e.reason for e in caught.value.errors)
