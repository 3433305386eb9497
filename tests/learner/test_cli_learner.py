"""`robot-rl collect / train / eval` through the real command line (in process)."""

from __future__ import annotations

import json

import pytest

from robot_rl.cli.main import main


def _last_json(capsys) -> dict:
    out = capsys.readouterr().out.strip().splitlines()
    return json.loads(out[-1])


def test_collect_train_eval(tmp_path, capsys):
    demos = tmp_path / "demos.zarr"
    base = ["--task", "reach", "--obs", "state"]
    assert main(["collect", *base, "--episodes", "2", "--out", str(demos), "--json"]) == 0
    got = _last_json(capsys)
    assert got["episodes_written"] == 2 and got["dataset_episodes"] == 2

    # Refuses to overwrite; --append adds.
    assert main(["collect", *base, "--episodes", "1", "--out", str(demos)]) == 2
    assert "--append" in capsys.readouterr().err
    assert (
        main(["collect", *base, "--episodes", "1", "--out", str(demos), "--append", "--json"]) == 0
    )
    assert _last_json(capsys)["dataset_episodes"] == 3

    # Demos recorded with other settings are refused by train.
    run = tmp_path / "run"
    args = [
        "train",
        *base,
        "--demos",
        str(demos),
        "--run",
        str(run),
        "--steps",
        "40",
        "--eval-every-steps",
        "40",
        "--eval-episodes",
        "2",
        "--batch-size",
        "16",
        "--no-progress",
        "--json",
    ]
    assert main([*args[:-1], "--control-rotation"]) == 2
    err = capsys.readouterr().err
    assert "collected with other env settings" in err
    assert "control_rotation: False in the data, True here" in err  # says what differs
    assert not run.exists() or not (run / "config.json").exists()

    assert main(args) == 0
    res = _last_json(capsys)
    assert res["env_steps"] == 40 and res["task"] == "reach"
    assert res["learning_curve"].endswith("learning_curve.png")

    assert main(args) == 2  # existing run without --resume
    assert "--resume" in capsys.readouterr().err

    assert main(["eval", "--run", str(run), "--episodes", "3", "--json"]) == 0
    ev = _last_json(capsys)
    assert {"task", "episodes", "success_rate", "mean_return", "mean_length"} <= set(ev)
    assert ev["task"] == "reach" and ev["episodes"] == 3

    video = tmp_path / "eval.mp4"
    assert (
        main(
            [
                "eval",
                "--run",
                str(run),
                "--episodes",
                "1",
                "--video",
                str(video),
                "--video-cameras",
                "front",
                "--video-size",
                "96",
            ]
        )
        == 0
    )
    import imageio.v3 as iio

    frame = iio.imread(video, index=0)  # 96 px camera under a text banner, not the obs size
    assert frame.shape[1] == 96 and frame.shape[0] > 96 and frame.std() > 5
    assert "success rate" in capsys.readouterr().out


def test_eval_of_a_missing_run_is_a_clear_error(tmp_path, capsys):
    assert main(["eval", "--run", str(tmp_path / "nope")]) == 2
    assert "not a run directory" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--setup", "s.yaml", "--video", "v.mp4"], "--video renders the direct twin's cameras"),
        (["--reward", "rm"], "--reward needs --setup"),
        (["--setup", "s.yaml", "--action-delay-ms", "50"], "the latency is the real one"),
    ],
)
def test_eval_on_a_setup_refuses_what_it_cannot_do(tmp_path, capsys, extra, message):
    with pytest.raises(SystemExit) as e:  # tyro refuses the options before main runs
        main(["eval", "--run", str(tmp_path), *extra])
    assert e.value.code == 2
    err = " ".join(capsys.readouterr().err.replace("│", " ").split())  # tyro wraps it in a box
    assert message in err


def test_train_over_ros_refuses_a_simulated_action_delay(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(
            ["train", "--run", str(tmp_path / "r"), "--setup", "s.yaml", "--action-delay-ms", "50"]
        )
    assert e.value.code == 2
    err = " ".join(capsys.readouterr().err.replace("│", " ").split())
    assert "the latency is the real one" in err
