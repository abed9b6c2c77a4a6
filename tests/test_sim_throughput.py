"""The throughput and progress model reads the measured profiles as SIMULATION.md §2-3 says."""

from __future__ import annotations

import math

import pytest

from voda.sim import speed
from voda.sim.profiles import load_profile
from voda.sim.progress import gain, grad_stats
from voda.sim.throughput import canonical, split_batch, step_sync_time, throughput


@pytest.mark.parametrize(
    ("placement", "expected"),
    [
        ((2, 1, 3), (1, 3, 2)),
        ((4, 2), (2, 4)),
        ((0, 3, 0, 1), (1, 3)),
        ((1, 2, 3), (1, 2, 3)),
        ((4,), (4,)),
    ],
    ids=["a rotation, not a sort", "two nodes", "zeros dropped", "already smallest", "one node"],
)
def test_placements_take_their_smallest_rotation(placement, expected) -> None:
    assert canonical(placement) == expected


def test_bert_split_over_two_nodes_is_as_slow_as_the_profile_says() -> None:
    bert = load_profile("bert")
    one = throughput(bert, (1,), 12)
    assert throughput(bert, (4,), 48) / one == pytest.approx(3.85, abs=0.01)
    assert throughput(bert, (2, 2), 48) / one == pytest.approx(1.74, abs=0.01)


@pytest.mark.parametrize(
    ("app", "replicas", "batch", "effective", "accum"),
    [
        ("bert", 6, 384, 360, 5),
        ("bert", 12, 384, 360, 2),
        ("cifar10", 6, 2048, 2052, 0),
        ("cifar10", 12, 4096, 4092, 0),
        ("imagenet", 24, 3200, 3216, 0),
        ("imagenet", 48, 6400, 6432, 0),
        ("deepspeech2", 6, 320, 324, 0),
        ("deepspeech2", 12, 640, 636, 0),
        ("ncf", 1, 32768, 32768, 1),
        ("yolov3", 4, 64, 64, 1),
    ],
)
def test_the_fixed_batch_split_matches_the_published_examples(
    app, replicas, batch, effective, accum
) -> None:
    split = split_batch(load_profile(app), batch, replicas)
    assert split.effective_batch == effective
    assert split.accum_steps == accum


@pytest.mark.parametrize(
    ("app", "epochs", "m0", "max_batch", "p1", "pe"),
    [
        ("bert", 2, 12, 384, 7387.00, 14774.00),
        ("cifar10", 100, 128, 4096, 390.71, 39062.91),
        ("ncf", 10, 256, 32768, 19417.59, 194174.00),
        ("imagenet", 90, 200, 12800, 6405.93, 576525.59),
        ("deepspeech2", 80, 20, 640, 356.73, 28536.00),
        ("yolov3", 50, 8, 512, 2068.97, 103443.98),
    ],
)
def test_profile_constants_match_the_artifact(app, epochs, m0, max_batch, p1, pe) -> None:
    p = load_profile(app)
    assert (p.epochs, p.init_batch_size, p.max_batch_size) == (epochs, m0, max_batch)
    assert p.boundaries[1] == pytest.approx(p1, abs=0.01)
    assert p.boundaries[-1] == pytest.approx(pe, abs=0.01)
    assert len(p.boundaries) == epochs + 1


def test_yolov3_local_batch_is_capped_at_eight() -> None:
    assert load_profile("yolov3").max_local_bsz == 8


def test_larger_batches_gain_more_but_less_than_linearly() -> None:
    cifar = load_profile("cifar10")
    g = gain(cifar, 2048, 10)
    assert 1.0 < g < 2048 / 128
    assert gain(cifar, 128, 10) == pytest.approx(1.0)


def test_gradient_statistics_interpolate_between_validated_batches() -> None:
    lo_sqr, lo_var = grad_stats("cifar10", 1024, 3)
    hi_sqr, hi_var = grad_stats("cifar10", 2048, 3)
    mid_sqr, mid_var = grad_stats("cifar10", 1536, 3)
    assert mid_sqr == pytest.approx((lo_sqr + hi_sqr) / 2)
    assert mid_var == pytest.approx((lo_var + hi_var) / 2)
    with pytest.raises(ValueError, match="outside the validated range"):
        grad_stats("cifar10", 64, 0)


def test_placements_beyond_four_nodes_are_interpolated() -> None:
    step, sync = step_sync_time("cifar10", (4, 4, 4, 4, 4, 4), 64)
    assert math.isfinite(step) and 0 < sync < step
    # A node with more GPUs than any measured one falls back to 4-GPU nodes.
    assert step_sync_time("cifar10", (8,), 64) == step_sync_time("cifar10", (4, 4), 64)


def test_epoch_seconds_follow_the_profile() -> None:
    assert "bert" in speed.profile_names() and len(speed.profile_names()) >= 6
    one = speed.epoch_seconds("cifar10", (1,))
    four = speed.epoch_seconds("cifar10", (4,))
    assert 0 < four < one
    assert speed.epoch_seconds("bert", (2, 2)) > speed.epoch_seconds("bert", (4,))


@pytest.mark.parametrize(
    ("profile", "placement", "message"),
    [("resnet9000", (1,), "resnet9000"), ("bert", (), "at least one GPU")],
    ids=["unknown profile", "no GPU"],
)
def test_epoch_seconds_refuses_bad_input(profile, placement, message) -> None:
    with pytest.raises(ValueError, match=message):
        speed.epoch_seconds(profile, placement)
