"""The generic ROS 2 arm backend: an arm that comes with a vendor ROS 2 driver (UR, xArm, Kinova,
a Franka under ros2_control), driven through our arm bridge (the safety core in front).

Two modes, chosen by the setup (:class:`drivers.ros2_arm.config.Ros2ArmConfig`):

- ``cartesian``: the safe TCP target goes to the driver as ``geometry_msgs/PoseStamped`` (the
  shape of a ros2_control Cartesian impedance / compliance controller's target topic);
- ``joint``: we solve differential IK (:class:`drivers.ik.DiffIK`, one step per backend tick)
  and command joints through ros2_control's ``joint_trajectory_controller``
  (``trajectory_msgs/JointTrajectory``) or a forward position controller
  (``std_msgs/Float64MultiArray``).

State comes from the driver's ``sensor_msgs/JointState`` (and a TCP ``PoseStamped`` or our FK).
The gripper is a ``std_msgs/Float64`` command topic and an optional ``JointState``; there is no
``control_msgs`` wheel on PyPI, so the ``GripperCommand`` action of most gripper drivers cannot
be used (put a forward command controller, or a small relay node, in front of the gripper).

- :mod:`drivers.ros2_arm.config`: :class:`Ros2ArmConfig`;
- :mod:`drivers.ros2_arm.state`: what the driver reports (joint states, TCP pose, errors; no ROS);
- :mod:`drivers.ros2_arm.core`: the plain-Python core (targets, IK ticks, moves; no ROS);
- :mod:`drivers.ros2_arm.backend`: :class:`Ros2ArmBackend`, the rclpy glue (an ``ArmBackend``);
- :mod:`drivers.ros2_arm.node`: ``python -m drivers.ros2_arm.node --mode joint --arm ur5e``.

The twin presented as such a driver: ``python -m sim.ros2_control_node`` (``sim/``).
"""
