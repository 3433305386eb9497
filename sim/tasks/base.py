"""Base class of the twin's tasks (dm_control style: the task contributes MJCF before compilation,
then reads the world; it never owns or steps physics).

Life cycle (driven by :func:`sim.backend.make_sim_backend`)::

    task = PickCubeTask()                       # no MuJoCo yet
    world = SimWorld(sim_cfg, [task.mjcf_fragment()])
    task.bind(world)                            # look up ids; registers after_arm_reset
    ...
    start_pose = task.reset(rng)                # RobotEnv.reset -> Task.reset
    robot.reset(start_pose, gripper)            # teleports the arm, then runs
                                                # world.post_arm_reset_hooks -> after_arm_reset
    status = task.evaluate()                    # every step

A subclass implements:

- ``name`` (class attribute) and :meth:`mjcf_fragment`: object bodies with ``<freejoint/>`` and
  ``class="object"`` geoms (see :mod:`sim.model` for frames and collision bits; the table top
  is ``z = 0``).
- :meth:`on_bind`: cache body / geom ids (``world.model.body(name).id`` ...).
- :meth:`reset_scene`: place objects with ``world.set_free_body_pose`` (use
  ``self.randomize_objects`` to decide between random and nominal poses) and return the arm
  start pose (7,). The base :meth:`reset` has already reset physics (arm at home, gripper open)
  and applied domain randomisation; it calls ``world.forward()`` afterwards.
- :meth:`after_arm_reset` (optional): runs after the robot teleported the arm to the start
  pose. To start with an object grasped, call
  ``self.world.place_in_gripper(body, T_tcp_obj, width_m)`` here: it sets the fingers to the
  object width, puts the object at ``T_base_tcp * T_tcp_obj`` and closes the gripper target
  (the first env command then decides the gripper; a scripted expert keeps it closed).
- ``privileged_spec`` and :meth:`evaluate` -> ``TaskStatus(reward, success, failure,
  privileged)``; privileged arrays are float32 and match ``privileged_spec``.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping

import numpy as np

from robot_rl.core.specs import ArraySpec
from robot_rl.core.types import TaskStatus
from sim.layout import FR3_LAYOUT, TaskLayout
from sim.model import MjcfFragment
from sim.randomization import DomainRandomizer
from sim.world import SimWorld

FAILURE_REWARD = -100.0
"""Reward of the step that ends an episode in failure (the object dropped or off the table).

The twin's dense rewards are costs in [-1, 0] with 0 on success (see each task), so that
finishing sooner is always better than hovering near success. A failure also ends the episode,
which would stop the cost: so it costs -100, the discounted cost of never succeeding at
gamma = 0.99 (-1 / (1 - gamma)), and failing on purpose never beats trying."""


class SimTask(abc.ABC):
    """A task in the twin; implements :class:`robot_rl.core.protocols.Task` once bound."""

    name: str = "base"

    layout: TaskLayout = FR3_LAYOUT
    """Where the task lies for the arm (:mod:`sim.layout`): a task maps its FR3-size points,
    lengths and object sizes through it. :func:`sim.backend.make_sim_backend` sets the arm's
    before :meth:`mjcf_fragment`."""

    def __init__(self) -> None:
        self._world: SimWorld | None = None
        self._randomizer: DomainRandomizer | None = None

    # -- before compilation -----------------------------------------------------------------

    @abc.abstractmethod
    def mjcf_fragment(self) -> MjcfFragment:
        """The MJCF this task adds to the scene."""

    # -- binding ----------------------------------------------------------------------------

    @property
    def world(self) -> SimWorld:
        """The bound world (raises before :meth:`bind`)."""
        if self._world is None:
            raise RuntimeError(f"task {self.name!r} is not bound to a world; call bind(world)")
        return self._world

    def bind(self, world: SimWorld) -> None:
        """Attach to the compiled world: cache ids, set up randomisation, register hooks."""
        self._world = world
        self.on_bind()
        object_geoms = [
            g for body in self.randomized_bodies() for g in world.geom_ids_of_body(body)
        ]
        self._randomizer = DomainRandomizer(world, world.sim_cfg.randomization, object_geoms)
        world.post_arm_reset_hooks.append(self.after_arm_reset)

    def on_bind(self) -> None:  # noqa: B027 (optional hook)
        """Cache model ids after compilation (optional)."""

    def randomized_bodies(self) -> tuple[str, ...]:
        """Bodies whose geoms get friction and colour randomisation (default: none)."""
        return ()

    @property
    def randomize_objects(self) -> bool:
        """Whether object start poses are random (``RandomizationConfig.object_pose``)."""
        return self.world.sim_cfg.randomization.object_pose

    # -- Task protocol ----------------------------------------------------------------------

    @property
    @abc.abstractmethod
    def privileged_spec(self) -> Mapping[str, ArraySpec]:
        """Spec of ``TaskStatus.privileged``."""

    def reset(self, rng: np.random.Generator) -> np.ndarray:
        """Reset physics, randomise the domain, set the scene; return the arm start pose (7,)."""
        world = self.world
        world.reset_physics()
        assert self._randomizer is not None
        self._randomizer.apply(rng)
        start_pose = np.asarray(self.reset_scene(rng), dtype=np.float64)
        if start_pose.shape != (7,):
            raise ValueError(f"{self.name}.reset_scene must return a (7,) pose")
        world.forward()
        return start_pose

    @abc.abstractmethod
    def reset_scene(self, rng: np.random.Generator) -> np.ndarray:
        """Place objects for a new episode; return the arm start pose (7,)."""

    def after_arm_reset(self) -> None:  # noqa: B027 (optional hook)
        """Runs after the robot teleported the arm to the start pose (optional)."""

    @abc.abstractmethod
    def evaluate(self) -> TaskStatus:
        """Reward, success, failure and privileged truth for the current state."""
