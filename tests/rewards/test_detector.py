"""Success detector: calibration, k-of-n confirmation, gates, cascade, human override, and the
on-disk trigger log (real files and real PNGs under tmp_path; no mocks)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rewards.detector import (
    DetectorConfig,
    StateGate,
    SuccessDetector,
    gate_mask,
    parse_gates,
    pr_auc,
    precision_recall_curve,
    threshold_for_precision,
)
from rewards.trigger_log import TriggerLog, hard_negatives, load_frames, read_triggers
from robot_rl.core import keys

GRIP = StateGate(keys.GRIPPER_POS, ">=", 0.5)


def run(det: SuccessDetector, probs, episode: int = 0, **per_step):
    """Feed ``probs`` until the detector terminates; returns the decisions made."""
    out = []
    for step, p in enumerate(probs):
        kwargs = {name: f(step) for name, f in per_step.items()}
        d = det.update(float(p), step=step, episode=episode, **kwargs)
        out.append(d)
        if d.terminated:
            break
    return out


# --- calibration -------------------------------------------------------------------------------


def test_pr_curve_matches_hand_computed_case():
    # scikit-learn's documented example: AP = 0.8333.
    probs, labels = np.array([0.1, 0.4, 0.35, 0.8]), np.array([0, 0, 1, 1])
    precision, recall, thresholds = precision_recall_curve(probs, labels)
    np.testing.assert_allclose(thresholds, [0.1, 0.35, 0.4, 0.8])
    np.testing.assert_allclose(precision, [0.5, 2 / 3, 0.5, 1.0])
    np.testing.assert_allclose(recall, [1.0, 1.0, 0.5, 0.5])
    assert pr_auc(probs, labels) == pytest.approx(0.5 * 1.0 + 0.5 * 2 / 3)


def test_pr_curve_groups_tied_scores():
    precision, recall, thresholds = precision_recall_curve([0.9, 0.5, 0.9, 0.5], [1, 1, 0, 0])
    np.testing.assert_allclose(thresholds, [0.5, 0.9])
    np.testing.assert_allclose(precision, [0.5, 0.5])
    np.testing.assert_allclose(recall, [1.0, 0.5])
    assert pr_auc([0.9, 0.5, 0.9, 0.5], [1, 1, 0, 0]) == pytest.approx(0.5)
    assert pr_auc([0.2, 0.7, 0.9], [False, True, True]) == pytest.approx(1.0)


def test_threshold_for_precision_hits_target_with_most_recall():
    rng = np.random.default_rng(0)
    labels = rng.random(3000) < 0.3
    probs = np.where(labels, rng.beta(5, 2, labels.size), rng.beta(2, 5, labels.size))
    choice = threshold_for_precision(probs, labels, 0.9)
    flagged = probs >= choice.threshold
    precision = labels[flagged].mean()
    assert precision >= 0.9
    assert choice.precision == pytest.approx(precision)
    assert choice.recall == pytest.approx(labels[flagged].sum() / labels.sum())
    assert choice.support == labels.sum() and choice.num_flagged == flagged.sum()
    # Every lower threshold misses the target, so no threshold has more recall.
    for t in np.unique(probs[probs < choice.threshold]):
        assert labels[probs >= t].mean() < 0.9
    assert 0.0 < choice.recall < 1.0


def test_threshold_for_precision_refuses_impossible_target():
    probs = np.array([0.9, 0.9, 0.8, 0.2])  # the top score is shared by a success and a failure
    labels = np.array([1, 0, 1, 0])
    with pytest.raises(ValueError, match=r"best reachable .* is 0\.6667"):
        threshold_for_precision(probs, labels, 0.95)
    assert threshold_for_precision(probs, labels, 0.6).threshold == pytest.approx(0.8)


@pytest.mark.parametrize(
    ("probs", "labels", "target", "match"),
    [
        ([0.2, float("nan")], [1, 0], 0.9, "NaN"),
        ([0.2, 0.3], [1, 0, 1], 0.9, "equal length"),
        ([0.2, 0.3], [0, 0], 0.9, "no positives"),
        ([0.2, 0.3], [1, 2], 0.9, "0/1"),
        ([0.2, 1.3], [1, 0], 0.9, r"\[0, 1\]"),
        ([], [], 0.9, "at least one"),
        ([0.2, 0.3], [1, 0], 0.0, "target_precision"),
    ],
)
def test_threshold_for_precision_rejects_bad_input(probs, labels, target, match):
    with pytest.raises(ValueError, match=match):
        threshold_for_precision(np.array(probs), np.array(labels), target)


# --- detector ----------------------------------------------------------------------------------


def test_single_spikes_never_confirm_but_a_sustained_run_does():
    rng = np.random.default_rng(1)
    probs = rng.uniform(0.0, 0.6, 60)  # noise below the 0.7 threshold
    probs[0:40:3] = rng.uniform(0.8, 1.0, 14)  # spikes every third step: <= 2 in any 5
    probs[45:] = 0.95  # sustained from step 45
    det = SuccessDetector(DetectorConfig(threshold=0.7, k=3, n=5))
    decisions = run(det, probs)
    assert [d.terminated for d in decisions].index(True) == 47  # third fire of the run
    last = decisions[-1]
    assert last.success and last.reason == "confirmed" and last.num_fired == 3
    assert all(d.num_fired <= 2 for d in decisions[:45])
    assert {d.reason for d in decisions[:45]} == {"pending", "below_threshold"}


def test_gate_blocks_confirmation_until_gripper_closes():
    det = SuccessDetector(DetectorConfig(threshold=0.5, k=3, n=5, gates=(GRIP,)))
    gripper = lambda step: {keys.GRIPPER_POS: np.array([0.1 if step < 10 else 0.9])}  # noqa: E731
    decisions = run(det, [0.99] * 30, state=gripper)
    assert len(decisions) == 13 and decisions[-1].terminated and decisions[-1].success
    assert all(
        d.reason == "gate_blocked" and d.blocked_gates == (GRIP.name,) for d in decisions[:10]
    )
    with pytest.raises(ValueError, match="gripper_pos"):
        SuccessDetector(DetectorConfig(gates=(GRIP,))).update(0.9, step=0, episode=0, state={})


def test_cascade_calls_judge_only_on_confirmation_and_rejection_prevents_termination():
    calls: list[int] = []

    def judge_at(value: float):
        return lambda step: lambda: calls.append(step) or value

    cfg = DetectorConfig(threshold=0.5, k=3, n=5, judge_threshold=0.8)
    decisions = run(SuccessDetector(cfg), [0.9] * 20, judge=judge_at(0.3))
    assert not any(d.terminated for d in decisions)
    # Window cleared after each rejection: confirmations at steps 2, 5, 8, ... only.
    assert calls == list(range(2, 20, 3))
    rejected = [d for d in decisions if d.reason == "cascade_rejected"]
    assert len(rejected) == len(calls) and all(d.judge_prob == 0.3 for d in rejected)
    assert decisions[3].window_fired == (True,)  # fresh window after the rejection

    calls.clear()
    decisions = run(SuccessDetector(cfg), [0.1] * 5 + [0.9] * 10, judge=judge_at(0.85))
    assert calls == [7] and decisions[-1].terminated and decisions[-1].judge_prob == 0.85
    with pytest.raises(ValueError, match="pass judge="):
        SuccessDetector(cfg).update(0.9, step=0, episode=0)
    with pytest.raises(ValueError, match="judge_threshold is None"):
        SuccessDetector(DetectorConfig()).update(0.9, step=0, episode=0, judge=lambda: 1.0)


def test_human_override_wins_at_once():
    det = SuccessDetector(DetectorConfig(threshold=0.5, k=3, n=5, judge_threshold=0.9))
    d = det.update(0.0, step=0, episode=0, human="success")
    assert (d.terminated, d.success, d.reason) == (True, True, "human")
    with pytest.raises(RuntimeError, match="reset"):
        det.update(0.0, step=1, episode=0, judge=lambda: 1.0)
    det.reset()
    judge = lambda: pytest.fail("judge must not run on a human override")  # noqa: E731
    for step in range(2):
        assert not det.update(0.9, step=step, episode=1, judge=judge).terminated
    d = det.update(0.9, step=2, episode=1, judge=judge, human="failure")  # would confirm
    assert (d.terminated, d.success, d.reason) == (True, False, "human")


@pytest.mark.parametrize("bad", [float("nan"), -0.1, 1.5])
def test_bad_probability_raises(bad):
    det = SuccessDetector(DetectorConfig(k=1, n=1))
    with pytest.raises(ValueError, match="probability"):
        det.update(bad, step=0, episode=0)
    cascade = SuccessDetector(DetectorConfig(k=1, n=1, judge_threshold=0.5))
    with pytest.raises(ValueError, match="judge"):
        cascade.update(0.9, step=0, episode=0, judge=lambda: bad)


def test_order_and_config_errors():
    det = SuccessDetector(DetectorConfig())
    det.update(0.1, step=3, episode=0)
    with pytest.raises(ValueError, match="not after"):
        det.update(0.1, step=3, episode=0)
    with pytest.raises(ValueError, match="reset"):
        det.update(0.1, step=4, episode=1)
    for kwargs, match in [
        ({"k": 4, "n": 3}, "k <= n"),
        ({"k": 0}, "k <= n"),
        ({"threshold": 1.0}, "threshold"),
        ({"judge_threshold": 0.0}, "judge_threshold"),
        ({"gates": (GRIP, GRIP)}, "duplicate"),
    ]:
        with pytest.raises(ValueError, match=match):
            DetectorConfig(**kwargs)
    with pytest.raises(ValueError, match="op"):
        StateGate(keys.GRIPPER_POS, ">", 0.5)  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(
    p=st.floats(0.0, 1.0),
    grip=st.floats(0.0, 1.0),
    thr=st.floats(0.01, 0.99),
)
def test_k1_n1_equals_thresholded_gate(p, grip, thr):
    det = SuccessDetector(DetectorConfig(threshold=thr, k=1, n=1, gates=(GRIP,)))
    d = det.update(p, step=0, episode=0, state={keys.GRIPPER_POS: grip})
    assert d.terminated == d.success == (p >= thr and grip >= 0.5)


@settings(max_examples=200, deadline=None)
@given(
    fires=st.lists(st.booleans(), min_size=1, max_size=40),
    n=st.integers(1, 6),
    data=st.data(),
)
def test_confirms_exactly_when_k_of_last_n_fired(fires, n, data):
    k = data.draw(st.integers(1, n))
    expected = next(
        (i for i in range(len(fires)) if sum(fires[max(0, i - n + 1) : i + 1]) >= k), None
    )
    decisions = run(SuccessDetector(DetectorConfig(k=k, n=n)), [0.9 if f else 0.1 for f in fires])
    got = len(decisions) - 1 if decisions[-1].terminated else None
    assert got == expected


# --- trigger log -------------------------------------------------------------------------------


def test_trigger_log_round_trip_and_hard_negatives(tmp_path):
    rng = np.random.default_rng(2)
    images = {
        cam: rng.integers(0, 256, (8, 6, 4, 3), dtype=np.uint8)
        for cam in (keys.CAM_FRONT, keys.CAM_WRIST)
    }
    buffer = {cam: np.zeros((6, 4, 3), np.uint8) for cam in images}  # reused like a camera's

    def frames(step):
        for cam, buf in buffer.items():
            buf[:] = images[cam][step]
        return buffer

    cfg = DetectorConfig(threshold=0.5, k=2, n=3, judge_threshold=0.5)
    with TriggerLog(tmp_path / "log", wall_clock=lambda: 123.5) as log:
        det = SuccessDetector(cfg, log=log)
        probs = [0.1, 0.8, 0.9, 0.2, 0.7, 0.9, 0.95, 0.99]
        judge = iter([0.2, 0.9])  # reject the first confirmation, accept the second
        decisions = run(det, probs, episode=7, frames=frames, judge=lambda s: lambda: next(judge))
    assert [d.reason for d in decisions if d.trigger_id] == ["cascade_rejected", "confirmed"]

    records = read_triggers(tmp_path / "log")
    assert [r.trigger_id for r in records] == [d.trigger_id for d in decisions if d.trigger_id]
    rejected, confirmed = records
    assert (rejected.step, rejected.accepted, rejected.judge_prob) == (2, False, 0.2)
    assert rejected.steps == (0, 1, 2) and rejected.probs == (0.1, 0.8, 0.9)
    assert rejected.fired == (False, True, True) and rejected.wall_time_s == 123.5
    assert (confirmed.step, confirmed.accepted, confirmed.reason) == (5, True, "confirmed")
    assert confirmed.steps == (3, 4, 5) and confirmed.episode == 7
    assert confirmed.meta["k"] == 2 and confirmed.meta["judge_threshold"] == 0.5
    for record in records:
        for step, step_frames in zip(
            record.steps, load_frames(tmp_path / "log", record), strict=True
        ):
            assert set(step_frames) == set(images)
            for cam, img in step_frames.items():
                np.testing.assert_array_equal(img, images[cam][step])

    negatives = hard_negatives(tmp_path / "log", [rejected.trigger_id])
    assert [n.step for n in negatives] == [1, 2]  # fired frames only
    np.testing.assert_array_equal(negatives[1].images[keys.CAM_WRIST], images[keys.CAM_WRIST][2])
    assert len(hard_negatives(tmp_path / "log", [rejected.trigger_id], fired_only=False)) == 3
    with pytest.raises(KeyError, match="nope"):
        hard_negatives(tmp_path / "log", ["nope"])


def test_trigger_log_survives_a_torn_last_line(tmp_path):
    def append(log, step):
        kw = dict(steps=[step], probs=[0.9], fired=[True], judge_prob=None, frames=[None])
        return log.append(episode=0, step=step, reason="confirmed", accepted=True, **kw)

    with TriggerLog(tmp_path) as log:
        first = append(log, 1)
    with (tmp_path / "triggers.jsonl").open("a") as f:
        f.write('{"trigger_id": "t000001_e0_s2", "epis')  # a writer crashed mid-line
    assert [r.trigger_id for r in read_triggers(tmp_path)] == [first]
    with TriggerLog(tmp_path) as log:
        second = append(log, 3)
    assert [r.trigger_id for r in read_triggers(tmp_path)] == [first, second]
    assert second != "t000001_e0_s2"
    with pytest.raises(ValueError, match="uint8"):
        TriggerLog(tmp_path).append(
            episode=0, step=4, reason="human", accepted=True, steps=[4], probs=[0.5],
            fired=[False], judge_prob=None, frames=[{"cam": np.zeros((4, 4, 3), np.float32)}],
        )  # fmt: skip


def test_gates_parse_from_text_and_read_a_flat_state_by_name():
    gates = parse_gates(["gripper_pos>=0.45", "gripper_pos <= 0.7"])
    assert gates == (StateGate("gripper_pos", ">=", 0.45), StateGate("gripper_pos", "<=", 0.7))
    assert [str(g) for g in gates] == ["gripper_pos>=0.45", "gripper_pos<=0.7"]
    assert parse_gates([str(g) for g in gates]) == gates  # the card's form reads back
    for bad in ("gripper_pos=0.5", "gripper_pos>=open", ">=0.5", "gripper_pos>=nan"):
        with pytest.raises(ValueError, match="NAME>=VALUE|name a state entry|finite"):
            parse_gates([bad])
    with pytest.raises(ValueError, match="duplicate"):
        DetectorConfig(gates=parse_gates(["gripper_pos>=0.4", "gripper_pos>=0.5"]))
    # Flat states (tcp_pose 7, gripper_pos 1): open, holding, empty-closed.
    slices = {"tcp_pose": [0, 7], "gripper_pos": [7, 8]}
    state = np.zeros((3, 8), np.float32)
    state[:, 7] = [0.0, 0.6, 1.0]
    np.testing.assert_array_equal(gate_mask(gates, state, slices), [False, True, False])
    with pytest.raises(ValueError, match="state has"):
        gate_mask(parse_gates(["joint_pos>=0"]), state, slices)
    with pytest.raises(ValueError, match=r"'tcp_pose' has 7 numbers; name one, e.g. tcp_pose\[0\]"):
        gate_mask(parse_gates(["tcp_pose>=0"]), state, slices)
    # One number of a longer entry: tcp_pose[2] is the TCP's height.
    high = (*gates, *parse_gates(["tcp_pose[2]>=0.04"]))
    assert high[2] == StateGate("tcp_pose", ">=", 0.04, index=2)
    assert str(high[2]) == "tcp_pose[2]>=0.04" and parse_gates([str(high[2])]) == high[2:]
    state[:, 2] = [0.1, 0.03, 0.1]  # the holding frame low: blocked by the height gate
    np.testing.assert_array_equal(gate_mask(high, state, slices), [False, False, False])
    state[1, 2] = 0.05
    np.testing.assert_array_equal(gate_mask(high, state, slices), [False, True, False])
    with pytest.raises(ValueError, match=r"has 7 numbers \(index 0..6\)"):
        gate_mask(parse_gates(["tcp_pose[7]>=0"]), state, slices)
    for bad in ("tcp_pose[x]>=0", "tcp_pose[-1]>=0", "tcp_pose[]>=0"):
        with pytest.raises(ValueError, match="NAME\\[I\\]>=VALUE|NAME>=VALUE"):
            parse_gates([bad])
    # Two gates on two numbers of one entry are not duplicates.
    DetectorConfig(gates=parse_gates(["tcp_pose[2]>=0.04", "tcp_pose[0]>=0.1"]))


def test_a_height_gate_reads_one_number_of_the_tcp_pose_on_the_live_path():
    """``tcp_pose[2]>=0.04`` on a live detector: a confident frame with the hand low is blocked
    (by that gate, named so), the same frame with the hand high fires."""
    gates = parse_gates(["gripper_pos>=0.5", "tcp_pose[2]>=0.04"])
    det = SuccessDetector(DetectorConfig(threshold=0.5, k=1, n=1, gates=gates))
    pose = np.array([0.2, 0.0, 0.03, 1.0, 0.0, 0.0, 0.0])
    low = det.update(0.99, step=0, episode=0, state={keys.GRIPPER_POS: 0.7, "tcp_pose": pose})
    assert not low.success and low.reason == "gate_blocked"
    assert low.blocked_gates == ("tcp_pose[2]",)
    pose[2] = 0.05
    high = det.update(0.99, step=1, episode=0, state={keys.GRIPPER_POS: 0.7, "tcp_pose": pose})
    assert high.success
