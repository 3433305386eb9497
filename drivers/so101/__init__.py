"""The SO-101 arm (LeRobot / TheRobotStudio SO-ARM101): six Feetech STS3215 servos on one serial
bus, behind the arm bridge.

- :mod:`drivers.so101.config`: :class:`~drivers.so101.config.So101Config`, the SO-101's default
  safety limits, the kinematics file;
- :mod:`drivers.so101.backend`: :class:`~drivers.so101.backend.So101Backend` (ArmBackend):
  calibration, differential IK per tick, bounded joint goals, bus errors;
- :mod:`drivers.so101.node`: ``python -m drivers.so101.node --port /dev/ttyACM0
  --calibration so101.json --ns arm`` (the arm bridge node with this backend).

The calibration file comes from ``robot-rl arm calibrate`` (:mod:`robot_rl.app.arms.arm_calibrate`);
a second SO-101 as a leader arm is a teleop device (:mod:`drivers.teleop.so101_leader`).
Nothing is imported here: import the module you need.
"""
