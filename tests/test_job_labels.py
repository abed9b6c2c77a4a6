"""Jobs said by name at the edge (voda.api.job_labels): uids of known jobs become names,
"name (uid)" where two jobs of one name meet in a text, anything else stays as it is."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from voda.api.job_labels import labels, named

A1, A2 = "train-20261128120000-0a0b0c", "train-20261128130000-ffffff"
B = "eval.v2-20261128120000-123456"
NAME_OF = {A1: "train", A2: "train", B: "eval.v2"}


def test_known_uids_are_said_by_name() -> None:
    assert named(f"ahead of it {B} (2 GPUs), {A1} (1 GPU) hold 3 GPUs", NAME_OF) == (
        "ahead of it eval.v2 (2 GPUs), train (1 GPU) hold 3 GPUs")
    assert named(f"preempted {A1}, preempted {A1}", NAME_OF) == (
        "preempted train, preempted train")  # one job said twice is still one job


def test_two_jobs_of_one_name_are_said_with_their_uids() -> None:
    assert named(f"went to {A1} and {A2}; {B} waits", NAME_OF) == (
        f"went to train ({A1}) and train ({A2}); eval.v2 waits")
    assert labels([A1, A2, B], NAME_OF) == {A1: f"train ({A1})", A2: f"train ({A2})",
                                           B: "eval.v2"}


def test_unknown_uids_and_other_words_stay_as_they_are() -> None:
    unknown = "gone-20261128120000-abcdef"
    text = f"job-submitted, node-lost: {unknown} and 20261128120000-abcdef, {A1}x"
    assert named(text, NAME_OF) == text
    assert labels([unknown], NAME_OF) == {unknown: unknown}


@given(st.text(alphabet=st.sampled_from("ab -,()0123456789"), max_size=60))
def test_a_text_without_known_uids_is_unchanged(text: str) -> None:
    assert named(text, NAME_OF) == text
