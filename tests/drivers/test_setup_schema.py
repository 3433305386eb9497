"""Setup files (``launch/*.yaml``): every key is checked at load, and a bad one is refused with
a message that names the file, the key path, what was found and what is expected (and, for an
unknown key, the closest known one). No ROS graph: parsing only.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from drivers.setup import SetupError, load_setup, parse_setup

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted((REPO / "launch").glob("*.yaml"))
_DELETE = object()

BASE = {
    "name": "t",
    "namespace": "arm",
    "robot": "twin",
    "task": "pick_cube",
    "clock": "lockstep",
    "control_hz": 10.0,
    "cameras": [
        {"name": "front", "height": 64, "width": 64},
        {"name": "wrist", "height": 64, "width": 64},
    ],
    "safety": {"workspace_low_m": [0.3, -0.3, 0.0], "workspace_high_m": [0.7, 0.3, 0.4]},
    "nodes": [
        {"name": "twin", "module": "sim.ros_node", "args": ["--ns", "${namespace}"]},
        {
            "name": "cam",
            "module": "drivers.cameras.node",
            "restart": {"policy": "on-failure", "max_restarts": 2},
            "required": False,
        },
    ],
}
TWIN = "nodes[0] (twin)"


def _edit(path: tuple, value: object) -> dict:
    raw = copy.deepcopy(BASE)
    d = raw
    for k in path[:-1]:
        d = d[k]
    if value is _DELETE:
        del d[path[-1]]
    else:
        d[path[-1]] = value
    return raw


# (path to edit, new value, the message after "bad.yaml: "; a trailing "..." matches a prefix)
BAD = [
    # top-level numbers: wrong type, empty, negative, not finite
    (("control_hz",), "10", "control_hz: expected a positive number (Hz), found the string '10'"),
    (("control_hz",), -5, "control_hz: expected a positive number (Hz), found the number -5"),
    (("control_hz",), True, "control_hz: expected a positive number (Hz), found the boolean true"),
    (
        ("control_hz",),
        float("nan"),
        "control_hz: expected a positive number (Hz), found the number nan",
    ),
    (
        ("control_hz",),
        None,
        "control_hz: has no value; write a number, or delete the line to use the default 10.0",
    ),
    (
        ("max_image_age_s",),
        0,
        "max_image_age_s: expected a positive number (seconds), found the number 0",
    ),
    # top-level strings and choices
    (("task",), 5, "task: expected a string, found the number 5"),
    (("task",), _DELETE, "task: missing: this key is required (a string)"),
    (("name",), ["a"], "name: expected a string, found a list ['a']"),
    (
        ("namespace",),
        "/arm",
        "namespace: expected a plain name like 'arm' (letters, digits, _; "
        "no slashes), found the string '/arm'",
    ),
    (
        ("clock",),
        "Lockstep",
        "clock: expected one of realtime, lockstep (did you mean "
        "'lockstep'?), found the string 'Lockstep'",
    ),
    (("robot",), "hardware", "clock: lockstep needs robot: twin (hardware runs in real time)"),
    (
        ("time_base",),
        "ros",
        "time_base: expected one of monotonic, stream, found the string 'ros'",
    ),
    # unknown keys, with the closest known one
    (
        ("camers",),
        [],
        "camers: unknown key 'camers'; did you mean 'cameras'? (allowed at the "
        "top level: arm, bridge_node, cameras, clock, ...",
    ),
    (("control_hs",), 10, "control_hs: unknown key 'control_hs'; did you mean 'control_hz'? ..."),
    (
        ("colour",),
        "red",
        "colour: unknown key 'colour' (allowed at the top level: arm, bridge_node, ...",
    ),
    # cameras
    (("cameras",), "front", "cameras: expected a list, found the string 'front'"),
    (
        ("cameras", 0),
        "front",
        "cameras[0]: expected a mapping {name: ..., height: ..., "
        "width: ...}, found the string 'front'",
    ),
    (
        ("cameras", 1, "height"),
        "128",
        "cameras[1].height: expected an integer, found the string '128'",
    ),
    (
        ("cameras", 1, "width"),
        64.0,
        "cameras[1].width: expected an integer, found the number 64.0",
    ),
    (
        ("cameras", 0, "height"),
        8,
        "cameras[0].height: expected an integer in [16, 4096] (pixels), found the number 8",
    ),
    (
        ("cameras", 0, "width"),
        _DELETE,
        "cameras[0].width: missing: this key is required (an integer)",
    ),
    (
        ("cameras", 1, "fps"),
        30,
        "cameras[1].fps: unknown key 'fps' (allowed in cameras[1]: crop, height, name, width)",
    ),
    (
        ("cameras", 0, "hieght"),
        64,
        "cameras[0].hieght: unknown key 'hieght'; did you mean 'height'? ...",
    ),
    (
        ("cameras", 0, "name"),
        "front cam",
        "cameras[0].name: expected a name of letters, digits "
        "and underscores, found the string 'front cam'",
    ),
    (
        ("cameras", 1, "name"),
        "front",
        "cameras: camera names must be unique, got ['front', 'front']",
    ),
    # safety: types, shapes, then the limits' own checks
    (
        ("safety",),
        "default",
        "safety: expected a mapping (key: value), found the string 'default'",
    ),
    (
        ("safety", "workspace_low_m"),
        0.3,
        "safety.workspace_low_m: expected a list of 3 numbers (x, y, z), found the number 0.3",
    ),
    (
        ("safety", "workspace_low_m"),
        [0.3, 0.0],
        "safety.workspace_low_m: expected a list of 3 numbers (x, y, z), found a list [0.3, 0.0]",
    ),
    (
        ("safety", "workspace_low_m"),
        [0.3, "a", 0.0],
        "safety.workspace_low_m[1]: expected a finite number, found the string 'a'",
    ),
    (
        ("safety", "workspace_low_m"),
        [0.8, -0.3, 0.0],
        "safety.workspace_low_m: "
        "workspace_low_m (0.8, -0.3, 0.0) must be below workspace_high_m (0.7, 0.3, 0.4) on every "
        "axis (not on x)",
    ),
    (("safety", "max_step_m"), -1.0, "safety.max_step_m: max_step_m must be positive, got -1.0"),
    (
        ("safety", "watchdog_timeout_s"),
        "0.5",
        "safety.watchdog_timeout_s: expected a finite number, found the string '0.5'",
    ),
    (
        ("safety", "max_stepm"),
        0.1,
        "safety.max_stepm: unknown key 'max_stepm'; did you mean 'max_step_m'? ...",
    ),
    # nodes
    (("nodes",), {"name": "twin"}, "nodes: expected a list, found a mapping {'name': 'twin'}"),
    (("nodes",), [], "nodes: list at least one node"),
    (
        ("nodes", 0),
        "twin",
        "nodes[0]: expected a mapping {name: ..., module: ...}, found the string 'twin'",
    ),
    (
        ("nodes", 0, "module"),
        _DELETE,
        f"{TWIN}.module: missing: this key is required (a string)",
    ),
    (
        ("nodes", 0, "module"),
        "sim/ros_node.py",
        f"{TWIN}.module: expected a dotted Python "
        "module name like sim.ros_node, found the string 'sim/ros_node.py'",
    ),
    (
        ("nodes", 0, "args"),
        "--ns arm",
        f"{TWIN}.args: expected a list, found the string '--ns arm'",
    ),
    (
        ("nodes", 0, "args"),
        [["--ns"]],
        f"{TWIN}.args[0]: expected a string or a number, found a list ['--ns']",
    ),
    (
        ("nodes", 0, "args"),
        ["--ns", "${nmspace}"],
        f"{TWIN}.args[1]: unknown variable "
        "${nmspace}; did you mean ${namespace}? known: ['clock', 'control_hz', 'namespace', "
        "'task']",
    ),
    (
        ("nodes", 0, "requird"),
        False,
        f"{TWIN}.requird: unknown key 'requird'; did you mean 'required'? ...",
    ),
    (
        ("nodes", 0, "required"),
        "yes",
        f"{TWIN}.required: expected true or false, found the string 'yes'",
    ),
    (
        ("nodes", 0, "parameters"),
        ["ip"],
        f"{TWIN}.parameters: expected a mapping (key: value), found a list ['ip']",
    ),
    (
        ("nodes", 0, "parameters"),
        {"ip": {"a": 1}},
        f"{TWIN}.parameters.ip: expected a scalar or a list of scalars, found a mapping {{'a': 1}}",
    ),
    (
        ("nodes", 0, "parameters"),
        {"v": [1, "a"]},
        f"{TWIN}.parameters.v: expected a non-empty "
        "list of one kind of scalar (numbers, strings or booleans: ROS 2 arrays are homogeneous), "
        "found a list [1, 'a']",
    ),
    (
        ("nodes", 0, "env"),
        {"A B": "1"},
        f"{TWIN}.env.A B: expected an environment variable "
        "name (letters, digits, _), found the string 'A B'",
    ),
    (
        ("nodes", 0, "env"),
        {"DEBUG": True},
        f"{TWIN}.env.DEBUG: expected a string or a number "
        "(quote 'true' for a text value), found the boolean true",
    ),
    (
        ("nodes", 0, "restart"),
        "always",
        f"{TWIN}.restart: expected a mapping (key: value), found the string 'always'",
    ),
    (
        ("nodes", 1, "restart", "policy"),
        "always",
        "nodes[1] (cam).restart.policy: expected one "
        "of never, on-failure, found the string 'always'",
    ),
    (
        ("nodes", 1, "restart", "max_restarts"),
        -1,
        "nodes[1] (cam).restart.max_restarts: "
        "expected an integer in [0, 1000000], found the number -1",
    ),
    (
        ("nodes", 1, "restart", "backoff_s"),
        -1.0,
        "nodes[1] (cam).restart.backoff_s: expected a "
        "non-negative number (s), found the number -1.0",
    ),
    (
        ("nodes", 1, "restart", "retries"),
        3,
        "nodes[1] (cam).restart.retries: unknown key "
        "'retries' (allowed in nodes[1] (cam).restart: backoff_s, max_restarts, policy)",
    ),
    (("nodes", 1, "name"), "twin", "nodes: node names must be unique; repeated: ['twin']"),
    # a camera's crop box: four integers, inside the frame
    (("cameras", 1, "crop"), [0, 0, 32], "cameras[1].crop: expected a list of 4 integers ..."),
    (("cameras", 1, "crop"), [0, 0, 32.0, 32], "cameras[1].crop: expected a list of 4 ..."),
    (("cameras", 1, "crop"), [-1, 0, 32, 32], "cameras[1].crop: expected top, left >= 0 ..."),
    (("cameras", 1, "crop"), [0, 0, 8, 32], "cameras[1].crop: expected top, left >= 0 ..."),
    (
        ("cameras", 1, "crop"),
        [40, 0, 32, 32],
        "cameras[1].crop: the box [40, 0, 32, 32] reaches outside the 64x64 frame (top + height "
        "<= 64, left + width <= 64); shrink it or move it inside",
    ),
]


@pytest.mark.parametrize(("path", "value", "message"), BAD, ids=[c[2][:40] for c in BAD])
def test_a_bad_key_is_refused_with_where_what_and_expected(path, value, message) -> None:
    assert parse_setup(copy.deepcopy(BASE), source="bad.yaml").nodes  # the baseline is valid
    with pytest.raises(SetupError) as e:
        parse_setup(_edit(path, value), source="bad.yaml")
    got = str(e.value)
    if message.endswith("..."):
        assert got.startswith("bad.yaml: " + message[:-3]), got
    else:
        assert got == "bad.yaml: " + message


def test_several_unknown_keys_are_listed_together() -> None:
    raw = _edit(("camers",), [])
    raw["contol_hz"] = 5
    with pytest.raises(SetupError) as e:
        parse_setup(raw, source="bad.yaml")
    assert str(e.value).startswith(
        "bad.yaml: top level: unknown keys 'camers'; did you mean 'cameras'?, 'contol_hz'; did "
        "you mean 'control_hz'? (allowed at the top level: arm, bridge_node, cameras, "
    ), e.value


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_every_shipped_setup_loads(path: Path) -> None:
    setup = load_setup(path)
    assert setup.nodes and setup.source == str(path)
    for node in setup.nodes:
        assert not any("${" in a for a in node.command("python")), node


def test_files_missing_malformed_or_with_repeated_keys(tmp_path: Path) -> None:
    with pytest.raises(SetupError, match=r"missing\.yaml does not exist; see launch/README"):
        load_setup(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    for text, message in (
        ("nodes: [unclosed\n", f"{bad}: not valid YAML: "),
        (
            "- just\n- a list\n",
            f"{bad}: top level: expected a mapping of setup keys (name:, "
            "robot:, nodes: ...), found a list ['just', 'a list']",
        ),
        (
            "task: a\ncontrol_hz: 10\ncontrol_hz: 20\n",
            f"{bad}: line 3: key 'control_hz' is "
            "written twice in the same mapping (lines 2 and 3); YAML would keep only the last "
            "one: delete one of them",
        ),
        (
            "task: a\ncameras:\n  - {name: front, height: 64, width: 64, height: 32}\n",
            f"{bad}: line 3: key 'height' is written twice",
        ),
        (
            "task: a\ncontrol_hz: 10 Hz\nnodes: [{name: n, module: m}]\n",
            f"{bad}: control_hz: expected a positive number (Hz), found the string '10 Hz'",
        ),
        (
            "task: a\ncontrol_hz:\nnodes: [{name: n, module: m}]\n",
            f"{bad}: control_hz: has no "
            "value; write a number, or delete the line to use the default 10.0",
        ),
    ):
        bad.write_text(text)
        with pytest.raises(SetupError) as e:
            load_setup(bad)
        assert str(e.value).startswith(message), (text, str(e.value))


def test_a_merged_key_may_be_overridden(tmp_path: Path) -> None:
    """``<<: *anchor`` then the same key explicitly is YAML's override, not a repeated key."""
    path = tmp_path / "ok.yaml"
    path.write_text(
        "task: a\n"
        "safety: &lim {max_step_m: 0.05}\n"
        "nodes:\n"
        "  - name: n\n"
        "    module: m\n"
        "    parameters: {<<: *lim, max_step_m: 0.02, robot_ip: 10.0.0.2}\n"
    )
    setup = load_setup(path)
    assert setup.safety is not None and setup.safety.max_step_m == 0.05
    assert dict(setup.node("n").parameters) == {"max_step_m": 0.02, "robot_ip": "10.0.0.2"}


def test_a_camera_crop_box_sets_the_frames_the_env_sees() -> None:
    raw = _edit(("cameras", 1, "crop"), [8, 16, 32, 40])
    front, wrist = parse_setup(raw, source="crop.yaml").cameras
    assert front.crop is None and front.frame_hw == (64, 64)
    assert wrist.crop == (8, 16, 32, 40) and wrist.frame_hw == (32, 40)


def test_recorded_crops_are_compared_with_the_setups() -> None:
    setup = parse_setup(_edit(("cameras", 1, "crop"), [8, 16, 32, 40]), source="crop.yaml")
    assert setup.camera_crops() == {"front": None, "wrist": [8, 16, 32, 40]}
    assert setup.camera_crops(["wrist"]) == {"wrist": [8, 16, 32, 40]}
    assert setup.crop_mismatch(setup.camera_crops()) is None
    assert setup.crop_mismatch(None) is None  # recorded before crops were stored
    assert setup.crop_mismatch({"elsewhere": [0, 0, 8, 8]}) is None  # not a camera here
    assert setup.crop_mismatch({"front": [0, 0, 32, 32], "wrist": None}) == (
        "front: [0, 0, 32, 32] there, whole frame in crop.yaml; "
        "wrist: whole frame there, [8, 16, 32, 40] in crop.yaml"
    )


def test_arm_defaults_to_the_fr3_and_names_a_built_in_or_overrides_one(tmp_path: Path) -> None:
    from robot_rl.core.arm import builtin_arm

    FR3 = builtin_arm("fr3")

    assert parse_setup(copy.deepcopy(BASE)).arm is FR3
    assert parse_setup({**copy.deepcopy(BASE), "arm": "fr3"}).arm is FR3
    home = [0.0, -0.6, 0.0, -2.2, 0.0, 1.6, 0.785]
    arm = parse_setup({**copy.deepcopy(BASE), "arm": {"kind": "fr3", "home_q_rad": home}}).arm
    assert arm.home_q_rad == tuple(home) and arm.joint_names == FR3.joint_names


def test_a_new_arm_in_the_setup_and_its_kinematics_file(tmp_path: Path) -> None:
    """A whole description (any joint count); ``kinematics`` resolves against the setup file's
    folder and must exist."""
    (tmp_path / "six.urdf").write_text("<robot name='six'/>")
    arm = {
        "name": "six",
        "joint_names": [f"j{i}" for i in range(6)],
        "joint_low_rad": [-3.0] * 6,
        "joint_high_rad": [3.0] * 6,
        "joint_vel_max_rad_s": [3.0] * 6,
        "home_q_rad": [0.0] * 6,
        "kinematics": "six.urdf",
        "backend": "ros2_joint",
    }
    path = tmp_path / "s.yaml"
    import yaml

    path.write_text(yaml.safe_dump({**copy.deepcopy(BASE), "arm": arm}))
    got = load_setup(path).arm
    assert got.num_joints == 6 and got.kinematics == str(tmp_path / "six.urdf")
    path.write_text(yaml.safe_dump({**copy.deepcopy(BASE), "arm": {**arm, "kinematics": "x.urdf"}}))
    with pytest.raises(SetupError, match=r"arm.kinematics: file .*x.urdf does not exist"):
        load_setup(path)


@pytest.mark.parametrize(
    ("arm", "message"),
    [
        ("ur10", r"arm: no built-in arm kind 'ur10'; choose from"),
        (3, "arm: expected a string or a mapping"),
        ({"kind": "fr3", "home_q": [0] * 7}, r"arm.home_q: unknown key 'home_q'; did you mean"),
        ({"kind": "fr3", "home_q_rad": [0.0] * 6}, r"arm.home_q_rad: arm 'fr3': home_q_rad has 6"),
        ({"kind": "fr3", "home_q_rad": ["a"] * 7}, r"arm.home_q_rad\[0\]: expected a finite"),
        ({"name": "x", "joint_names": ["a"]}, r"arm: a new arm needs \['joint_low_rad'"),
        ({"kind": "fr3", "joint_names": ["a", ""]}, r"arm.joint_names\[1\]: expected a joint"),
        ({"kind": "fr3", "gripper": "magnet"}, r"arm.gripper: arm 'fr3': gripper 'magnet'"),
    ],
)
def test_a_bad_arm_key_names_the_key_and_what_to_change(arm, message) -> None:
    with pytest.raises(SetupError, match=message):
        parse_setup({**copy.deepcopy(BASE), "arm": arm})
