"""Declarative robot setups (``launch/*.yaml``): which nodes run, and what the env connects to.

One YAML file describes one setup and is read by three consumers:

- ``robot-rl up <setup.yaml>`` starts and supervises every node as a plain process;
- ``launch/sim.launch.py`` does the same with ROS 2 launch (for users with a full ROS 2);
- the env composition (``robot_rl.app.nodes.ros_env``) builds a RobotEnv over the ROS 2 topics of
  ``namespace`` with the listed ``cameras``.

Schema, checked at load by :mod:`drivers.setup_schema`: a wrong type, an empty value, an
out-of-range number, an unknown key (with the closest known one) or a key written twice is an
error that names the file, the key path (``cameras[1].height``), what was found and what is
expected::

    name: sim                      # free text, shown by `up`
    namespace: arm                 # ROS 2 namespace of the arm (no slashes)
    robot: twin                    # twin (task/status + sim/step exist) or hardware
    arm: fr3                       # optional: a built-in arm kind, or a description (below)
    task: pick_cube                # task name (the twin's task; free text on hardware)
    clock: realtime                # realtime | lockstep (lockstep needs robot: twin)
    control_hz: 10.0               # env control rate
    max_state_age_s: 0.2           # optional: env staleness limits
    max_image_age_s: 0.2
    cameras:                       # cameras in the observation, in this order
      - {name: front, height: 128, width: 128}
      - {name: wrist, height: 480, width: 640, crop: [0, 80, 480, 480]}  # optional crop box
    safety: {...}                  # optional SafetyConfig fields: the env's local copy of the
                                   # bridge's limits (reporting only; the bridge enforces)
    time_base: monotonic           # optional: time base of the stamps (see Setup.time_base)
    reset_pose: [0.5, 0.0, 0.2, 0.0, 1.0, 0.0, 0.0]   # hardware: episode start pose
    reset_jitter_m: [0.02, 0.02, 0.0]                 # hardware: optional start jitter
    privileged: false              # twin: the env never reads task/status (see Setup.privileged)
    bridge_node: arm_bridge        # optional: the arm bridge's node name (see Setup.bridge_node)
    nodes:
      - name: twin                 # unique; log file <name>.log
        module: sim.ros_node       # run as `python -m <module>`
        args: [--ns, "${namespace}", --mode, "${clock}"]
        parameters: {robot_ip: 127.0.0.1}   # appended as `--ros-args -p k:=v`
        env: {FR3_MJCF: /path}     # extra environment variables
        restart: {policy: on-failure, max_restarts: 3, backoff_s: 1.0}   # or never
        required: true             # the setup is down if this node is down for good
        terminal: false            # reads the supervisor's terminal (keyboard teleop); one node

``${namespace}``, ``${task}``, ``${clock}`` and ``${control_hz}`` in ``args`` and
``parameters`` are replaced by the top-level values (one source of truth).

``arm`` (default ``fr3``) is a built-in kind (a file in ``robot_rl/arms``) or a
mapping of :class:`robot_rl.core.arm.ArmDescription` fields; with ``kind: <built-in>`` the
mapping overrides that built-in's fields, without it the mapping is a whole description::

    arm:
      kind: fr3
      home_q_rad: [0.0, -0.6, 0.0, -2.2, 0.0, 1.6, 0.785]

    arm:
      name: my_arm
      joint_names: [j1, j2, j3, j4, j5, j6]
      joint_low_rad: [...]            # one value per joint, rad
      joint_high_rad: [...]
      joint_vel_max_rad_s: [...]
      home_q_rad: [...]
      kinematics: my_arm.urdf         # relative to this file
      tool_frame: tool0
      gripper: parallel               # parallel | jaw | none
      backend: ros2_joint
"""

from __future__ import annotations

import difflib
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from drivers.ros_hw_task import check_reset_pose
from drivers.setup_arm import parse_arm
from drivers.setup_schema import SetupError, Where, is_number, read_yaml
from robot_rl.core.arm import ArmDescription, builtin_arm
from robot_rl.core.safety import SafetyConfig

FR3 = builtin_arm("fr3")

__all__ = [
    "CameraSpec",
    "NodeSpec",
    "RestartPolicy",
    "Setup",
    "SetupError",
    "load_setup",
    "parse_setup",
    "read_yaml",
]

RESTART_POLICIES = ("never", "on-failure")
CLOCKS = ("realtime", "lockstep")
ROBOTS = ("twin", "hardware")
TIME_BASES = ("monotonic", "stream")
_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_MODULE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_VAR_RE = re.compile(r"\$\{([^}]*)\}")
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
Scalar = bool | int | float | str


@dataclass(frozen=True)
class RestartPolicy:
    """What the supervisor does when a node exits.

    Attributes:
        policy: ``never`` (an exit is final) or ``on-failure`` (restart after a non-zero exit
            or a death by signal, up to ``max_restarts`` times).
        max_restarts: Restarts allowed over the node's life (``on-failure`` only).
        backoff_s: Wait before each restart, seconds.
    """

    policy: str = "never"
    max_restarts: int = 3
    backoff_s: float = 1.0

    def __post_init__(self) -> None:
        if self.policy not in RESTART_POLICIES:
            raise ValueError(f"policy {self.policy!r} must be one of {', '.join(RESTART_POLICIES)}")
        if self.max_restarts < 0:
            raise ValueError(f"max_restarts must be >= 0, got {self.max_restarts}")
        if self.backoff_s < 0:
            raise ValueError(f"backoff_s must be >= 0, got {self.backoff_s}")


@dataclass(frozen=True)
class NodeSpec:
    """One process of a setup.

    Attributes:
        name: Unique node name in the setup (letters, digits, underscores); names its log file.
        module: Python module run as ``python -m <module>``.
        args: Command-line arguments (after substitution of ``${...}`` variables).
        parameters: ROS 2 parameters, passed as ``--ros-args -p name:=value``.
        env: Extra environment variables for this process.
        restart: Restart policy.
        required: If True the whole setup shuts down when this node is down for good.
        terminal: The node reads keys from the supervisor's terminal (stdin is inherited);
            at most one node per setup. Other nodes get no stdin.
    """

    name: str
    module: str
    args: tuple[str, ...] = ()
    parameters: tuple[tuple[str, Scalar | tuple[Scalar, ...]], ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    restart: RestartPolicy = field(default_factory=RestartPolicy)
    required: bool = True
    terminal: bool = False

    def command(self, python: str = sys.executable) -> list[str]:
        """The argv that starts this node."""
        argv = [python, "-m", self.module, *self.args]
        if self.parameters:
            argv.append("--ros-args")
            for key, value in self.parameters:
                argv += ["-p", f"{key}:={_param_text(value)}"]
        return argv


@dataclass(frozen=True)
class CameraSpec:
    """A camera in the env's observation.

    Attributes:
        name: Camera name; topics ``<namespace>/<name>/image_raw``.
        height: Image height, pixels (frames of another size are an error).
        width: Image width, pixels.
        crop: ``(top, left, height, width)`` box of the sensor's frame that every command of
            the setup sees (record, label, the actor, the classifier, rollout), before any
            resize to the learner's image size; None: the whole frame. Set it where the camera
            sees more than the workspace, so the policy's pixels go to the task.
    """

    name: str
    height: int
    width: int
    crop: tuple[int, int, int, int] | None = None

    @property
    def frame_hw(self) -> tuple[int, int]:
        """``(height, width)`` of the frames the env sees: the crop box's, else the sensor's."""
        if self.crop is None:
            return (self.height, self.width)
        return (self.crop[2], self.crop[3])


@dataclass(frozen=True)
class Setup:
    """A parsed, validated setup file (see the module docstring).

    Attributes:
        name: Display name.
        namespace: ROS 2 namespace of the arm, without slashes.
        robot: ``twin`` (the MuJoCo twin behind ROS 2) or ``hardware``.
        task: Task name.
        clock: ``realtime`` or ``lockstep``.
        control_hz: Env control rate.
        max_state_age_s: Env staleness limit for the robot state.
        max_image_age_s: Env staleness limit for camera frames.
        cameras: Cameras in the observation.
        safety: The env's local copy of the bridge's limits (None: the task's default).
        nodes: Processes to run.
        source: File the setup came from (for messages).
        time_base: Time base of the robot-side stamps, which the env clock's ``now_s()`` must
            share (staleness checks, command stamps): ``monotonic`` (``time.monotonic()``, the
            contract for hardware drivers; the default on hardware) or ``stream`` (any other
            base: the env estimates now as the newest stamp plus the time since it arrived;
            the twin's sim time, the only choice on a twin, or drivers that stamp with another
            clock, such as a twin standing in for the arm of a hardware setup).
        reset_pose: Hardware: the episode start pose [x, y, z, qw, qx, qy, qz] (metres, base
            frame, inside the safety limits); None on a twin (its task chooses).
        reset_jitter_m: Hardware: per-axis (x, y, z) half-width of a uniform start position
            offset drawn with the env's seed, metres (clipped into the safety box).
        privileged: Twin: whether the env reads the twin's truth (``task/status``: reward,
            success, failure, object poses). False plays a real robot on the twin: the env
            subscribes to no truth (its task resets the scene through ``task/reset`` and knows
            nothing else, like :class:`drivers.ros_hw_task.HardwareTask`), so reward and success
            must come from a learned reward or a person's buttons, and a state observation holds
            the robot's state only. Only the simulated human (``sim.human_node``) and the twin's
            own episode scoring (``sim.ros_node --score-log``) still see the truth. Always False
            on hardware.
        arm: The arm's description (joint names and count, limits, home, tool frame, gripper,
            backend; ``kinematics`` resolved against the setup file's folder).
        bridge_node: The node serving the contract's ``status`` and services under the
            namespace: ``twin`` (default on a twin: the twin node is its own bridge) or
            ``arm_bridge`` (default on hardware; on a twin, a twin that stands in for a vendor
            driver with our bridge in front of it, ``sim.ros2_control_node``, whose robot-side
            stamps are then monotonic: ``time_base: monotonic`` is allowed).
    """

    name: str
    namespace: str
    robot: str
    task: str
    clock: str
    control_hz: float
    max_state_age_s: float
    max_image_age_s: float
    cameras: tuple[CameraSpec, ...]
    safety: SafetyConfig | None
    nodes: tuple[NodeSpec, ...]
    source: str = "<setup>"
    time_base: str = "stream"
    reset_pose: tuple[float, ...] | None = None
    reset_jitter_m: tuple[float, float, float] = (0.0, 0.0, 0.0)
    privileged: bool = True
    arm: ArmDescription = FR3
    bridge_node: str = "twin"

    def camera_crops(self, cameras: Sequence[str] | None = None) -> dict[str, list[int] | None]:
        """Camera -> its crop box ``[top, left, height, width]`` (None: the whole frame), for
        ``cameras`` (default all): what a dataset, a frame store or a classifier records so
        that a later command can tell whether it sees the same pixels."""
        names = [c.name for c in self.cameras] if cameras is None else list(cameras)
        crops = {c.name: (list(c.crop) if c.crop is not None else None) for c in self.cameras}
        return {n: crops[n] for n in names if n in crops}

    def crop_mismatch(self, recorded: Mapping[str, Any] | None) -> str | None:
        """How ``recorded`` (camera -> crop box, as :meth:`camera_crops` wrote it) differs from
        this setup's crops (``"front: [0, 80, 480, 480] there, whole frame here"``), or None
        (also when nothing was recorded: data written before crops were stored)."""
        if not recorded:
            return None
        now = self.camera_crops([c for c in recorded if c in {s.name for s in self.cameras}])
        diff = {c: (recorded[c], box) for c, box in now.items() if recorded[c] != box}
        if not diff:
            return None
        return "; ".join(
            f"{c}: {old or 'whole frame'} there, {new or 'whole frame'} in {self.source}"
            for c, (old, new) in diff.items()
        )

    def node(self, name: str) -> NodeSpec:
        """The node called ``name``."""
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(f"{self.source}: no node {name!r}; nodes: {[n.name for n in self.nodes]}")


def load_setup(path: str | Path) -> Setup:
    """Read and validate a setup YAML file.

    Raises:
        SetupError: The file is missing, not YAML, repeats a key, or breaks the schema.
    """
    return parse_setup(read_yaml(path), source=str(path))


TOP_KEYS = (
    "name",
    "namespace",
    "robot",
    "task",
    "clock",
    "control_hz",
    "max_state_age_s",
    "max_image_age_s",
    "cameras",
    "safety",
    "nodes",
    "time_base",
    "reset_pose",
    "reset_jitter_m",
    "privileged",
    "arm",
    "bridge_node",
)
BRIDGE_NODES = ("twin", "arm_bridge")
"""Node names of an arm bridge: the twin node itself, or a bridge process in front of a driver."""
CAMERA_KEYS = ("name", "height", "width", "crop")
NODE_KEYS = ("name", "module", "args", "parameters", "env", "restart", "required", "terminal")
RESTART_KEYS = ("policy", "max_restarts", "backoff_s")
IMAGE_SIDE_PX = (16, 4096)


def parse_setup(raw: Any, source: str = "<setup>") -> Setup:
    """Validate a setup given as plain data (the parsed YAML). See :func:`load_setup`."""
    where = Where(source)
    top = where.mapping(raw, "", "a mapping of setup keys (name:, robot:, nodes: ...)")
    where.no_unknown(top, TOP_KEYS, "")
    name = where.get(top, "name", str, "", default=Path(source).stem)
    namespace = where.get(top, "namespace", str, "", default="arm")
    if not _NAME_RE.match(namespace):
        where.expected(
            "namespace", "a plain name like 'arm' (letters, digits, _; no slashes)", namespace
        )
    robot = where.choice(top, "robot", ROBOTS, "", default="twin")
    clock = where.choice(top, "clock", CLOCKS, "", default="realtime")
    if clock == "lockstep" and robot != "twin":
        where.fail("clock", "lockstep needs robot: twin (hardware runs in real time)")
    task = where.get(top, "task", str, "")
    if not task.strip():
        where.expected("task", "a task name", task)
    control_hz = where.number(top, "control_hz", "", default=10.0, unit="Hz")
    ages = {
        key: where.number(top, key, "", default=0.2, unit="seconds")
        for key in ("max_state_age_s", "max_image_age_s")
    }
    variables = {
        "namespace": namespace,
        "task": task,
        "clock": clock,
        "control_hz": f"{control_hz:g}",
    }
    raw_cams = where.get(top, "cameras", list, "", default=[])
    cameras = tuple(_parse_camera(where, c, f"cameras[{i}]") for i, c in enumerate(raw_cams))
    cam_names = [c.name for c in cameras]
    if len(set(cam_names)) != len(cam_names):
        where.fail("cameras", f"camera names must be unique, got {cam_names}")
    safety = _parse_safety(where, top)
    time_base = where.choice(
        top, "time_base", TIME_BASES, "", default="stream" if robot == "twin" else "monotonic"
    )
    bridge_node = where.choice(
        top, "bridge_node", BRIDGE_NODES, "", default="twin" if robot == "twin" else "arm_bridge"
    )
    if robot != "twin" and bridge_node != "arm_bridge":
        where.fail("bridge_node", "hardware is bridged by arm_bridge (or leave it out)")
    if robot == "twin" and bridge_node == "twin" and time_base != "stream":
        where.fail("time_base", "the twin stamps with sim time: use stream (or leave it out)")
    reset_pose, reset_jitter_m = _parse_reset(where, top, robot, safety)
    privileged = where.get(top, "privileged", bool, "", default=robot == "twin")
    if privileged and robot != "twin":
        where.fail("privileged", "a real robot has no sim truth: use false (or leave it out)")
    arm = parse_arm(where, top, source)
    raw_nodes = where.get(top, "nodes", list, "")
    if not raw_nodes:
        where.fail("nodes", "list at least one node")
    nodes = tuple(_parse_node(where, n, f"nodes[{i}]", variables) for i, n in enumerate(raw_nodes))
    terminals = [n.name for n in nodes if n.terminal]
    if len(terminals) > 1:
        where.fail("nodes", f"only one node may read the terminal; terminal: true on {terminals}")
    names = [n.name for n in nodes]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        where.fail("nodes", f"node names must be unique; repeated: {dupes}")
    return Setup(
        name=name,
        namespace=namespace,
        robot=robot,
        task=task,
        clock=clock,
        control_hz=control_hz,
        max_state_age_s=ages["max_state_age_s"],
        max_image_age_s=ages["max_image_age_s"],
        cameras=cameras,
        safety=safety,
        nodes=nodes,
        source=source,
        time_base=time_base,
        reset_pose=reset_pose,
        reset_jitter_m=reset_jitter_m,
        privileged=privileged,
        arm=arm,
        bridge_node=bridge_node,
    )


# -- internals --------------------------------------------------------------------------------


def _parse_camera(where: Where, raw: Any, key: str) -> CameraSpec:
    m = where.mapping(raw, key, "a mapping {name: ..., height: ..., width: ...}")
    where.no_unknown(m, CAMERA_KEYS, key)
    name = where.get(m, "name", str, key)
    if not _NAME_RE.match(name):
        where.expected(f"{key}.name", "a name of letters, digits and underscores", name)
    h = where.integer(m, "height", key, *IMAGE_SIDE_PX, unit="pixels")
    w = where.integer(m, "width", key, *IMAGE_SIDE_PX, unit="pixels")
    crop = None
    if "crop" in m:
        path = f"{key}.crop"
        box = where.get(m, "crop", list, key)
        what = f"[top, left, height, width] in pixels of the {h}x{w} frame"
        if len(box) != 4 or not all(isinstance(v, int) and not isinstance(v, bool) for v in box):
            where.expected(path, f"a list of 4 integers {what}", box)
        top, left, ch, cw = box
        if top < 0 or left < 0 or min(ch, cw) < IMAGE_SIDE_PX[0]:
            where.expected(
                path, f"top, left >= 0 and height, width >= {IMAGE_SIDE_PX[0]} ({what})", box
            )
        if top + ch > h or left + cw > w:
            where.fail(
                path,
                f"the box {box} reaches outside the {h}x{w} frame (top + height <= {h}, "
                f"left + width <= {w}); shrink it or move it inside",
            )
        crop = (top, left, ch, cw)
    return CameraSpec(name=name, height=h, width=w, crop=crop)


def _parse_safety(where: Where, top: Mapping) -> SafetyConfig | None:
    if "safety" not in top:
        return None
    m = where.get(top, "safety", dict, "")
    where.no_unknown(m, [f.name for f in fields(SafetyConfig)], "safety")
    kwargs: dict[str, Any] = {}
    for f in fields(SafetyConfig):
        if f.name not in m:
            continue
        path = f"safety.{f.name}"
        default = getattr(SafetyConfig, f.name)
        if isinstance(default, tuple):
            what = "(w, x, y, z)" if len(default) == 4 else "(x, y, z)"
            kwargs[f.name] = where.numbers(m[f.name], path, len(default), what)
        else:
            kwargs[f.name] = where.check_number(m[f.name], path)
    try:
        return SafetyConfig(**kwargs)
    except (TypeError, ValueError) as e:
        named = [f.name for f in fields(SafetyConfig) if f.name in str(e)]
        where.fail(f"safety.{named[0]}" if named else "safety", str(e))


def _parse_reset(
    where: Where, top: Mapping, robot: str, safety: SafetyConfig | None
) -> tuple[tuple[float, ...] | None, tuple[float, float, float]]:
    given = [k for k in ("reset_pose", "reset_jitter_m") if k in top]
    if robot == "twin" and given:
        where.fail(given[0], "is for robot: hardware (the twin's task chooses its start pose)")
    if "reset_jitter_m" in given and "reset_pose" not in given:
        where.fail("reset_jitter_m", "needs reset_pose (the pose it jitters)")
    if "reset_pose" not in given:
        return None, (0.0, 0.0, 0.0)
    pose_in = where.numbers(top["reset_pose"], "reset_pose", 7, "[x, y, z, qw, qx, qy, qz]")
    jitter_in = (0.0, 0.0, 0.0)
    if "reset_jitter_m" in given:
        jitter_in = where.numbers(top["reset_jitter_m"], "reset_jitter_m", 3, "(x, y, z)")
    try:
        pose = check_reset_pose(pose_in, jitter_in, safety or SafetyConfig())
    except ValueError as e:
        key = "reset_jitter_m" if "reset_jitter_m" in str(e) else "reset_pose"
        where.fail(key, f"{e}" + ("" if safety else " (no safety: the default SafetyConfig)"))
    x, y, z = jitter_in
    return tuple(float(v) for v in pose), (x, y, z)


def _substitute(where: Where, value: Any, key: str, variables: Mapping[str, str]) -> Any:
    if not isinstance(value, str):
        return value

    def repl(m: re.Match) -> str:
        name = m.group(1)
        if name not in variables:
            close = difflib.get_close_matches(name, sorted(variables), n=1, cutoff=0.6)
            hint = f"did you mean ${{{close[0]}}}? " if close else ""
            where.fail(key, f"unknown variable ${{{name}}}; {hint}known: {sorted(variables)}")
        return variables[name]

    return _VAR_RE.sub(repl, value)


def _scalar(value: Any) -> bool:
    return isinstance(value, (bool, int, float, str))


def _parse_node(where: Where, raw: Any, key: str, variables: Mapping[str, str]) -> NodeSpec:
    m = where.mapping(raw, key, "a mapping {name: ..., module: ...}")
    name = where.get(m, "name", str, key)
    if not _NAME_RE.match(name):
        where.expected(f"{key}.name", "a name of letters, digits and underscores", name)
    key = f"{key} ({name})"
    where.no_unknown(m, NODE_KEYS, key)
    module = where.get(m, "module", str, key)
    if not _MODULE_RE.match(module):
        where.expected(f"{key}.module", "a dotted Python module name like sim.ros_node", module)
    args = []
    for i, a in enumerate(where.get(m, "args", list, key, default=[])):
        if not _scalar(a) or isinstance(a, bool):
            where.expected(f"{key}.args[{i}]", "a string or a number", a)
        args.append(str(_substitute(where, a, f"{key}.args[{i}]", variables)))
    params = []
    for pname, pval in where.get(m, "parameters", dict, key, default={}).items():
        pkey = f"{key}.parameters.{pname}"
        if not isinstance(pname, str) or not re.match(r"^[A-Za-z_][A-Za-z0-9_.]*$", pname):
            where.expected(pkey, "a parameter name of letters, digits, '_' and '.'", pname)
        if isinstance(pval, list):
            kinds = {type(v) for v in pval if not is_number(v)} | (
                {float} if any(is_number(v) for v in pval) else set()
            )
            if not pval or not all(_scalar(v) for v in pval) or len(kinds) > 1:
                where.expected(
                    pkey,
                    "a non-empty list of one kind of scalar (numbers, strings or booleans: "
                    "ROS 2 arrays are homogeneous)",
                    pval,
                )
            pval = tuple(_substitute(where, v, pkey, variables) for v in pval)
        elif _scalar(pval):
            pval = _substitute(where, pval, pkey, variables)
        else:
            where.expected(pkey, "a scalar or a list of scalars", pval)
        params.append((pname, pval))
    env = []
    for ename, evalue in where.get(m, "env", dict, key, default={}).items():
        ekey = f"{key}.env.{ename}"
        if not isinstance(ename, str) or not _ENV_RE.match(ename):
            where.expected(ekey, "an environment variable name (letters, digits, _)", ename)
        if not _scalar(evalue) or isinstance(evalue, bool):
            where.expected(ekey, "a string or a number (quote 'true' for a text value)", evalue)
        env.append((ename, str(evalue)))
    restart = RestartPolicy()
    if "restart" in m:
        rkey = f"{key}.restart"
        r = where.get(m, "restart", dict, key)
        where.no_unknown(r, RESTART_KEYS, rkey)
        restart = RestartPolicy(
            policy=where.choice(r, "policy", RESTART_POLICIES, rkey, default="never"),
            max_restarts=where.integer(r, "max_restarts", rkey, 0, 1_000_000, default=3),
            backoff_s=where.number(r, "backoff_s", rkey, default=1.0, strict=False, unit="s"),
        )
    required = where.get(m, "required", bool, key, default=True)
    terminal = where.get(m, "terminal", bool, key, default=False)
    return NodeSpec(
        name=name,
        module=module,
        args=tuple(args),
        parameters=tuple(params),
        env=tuple(env),
        restart=restart,
        required=required,
        terminal=terminal,
    )


def _param_text(value: Scalar | tuple[Scalar, ...]) -> str:
    """A parameter value in ROS 2's ``-p name:=value`` YAML syntax."""
    if isinstance(value, tuple):
        # ROS 2 parameter arrays are homogeneous: [0, 0.2] would be refused, so a list that
        # mixes ints and floats is written as floats ([0.0, 0.2]).
        numbers = [v for v in value if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if len(numbers) == len(value) and any(isinstance(v, float) for v in numbers):
            value = tuple(float(v) for v in numbers)
        return "[" + ", ".join(_param_text(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return (
            value
            if re.match(r"^[A-Za-z0-9_./:-]+$", value) and not _looks_typed(value)
            else ("'" + value.replace("'", "''") + "'")
        )
    return repr(value)


def _looks_typed(text: str) -> bool:
    """Whether YAML would read ``text`` as something other than a string (number, bool)."""
    return not isinstance(yaml.safe_load(text), str)
