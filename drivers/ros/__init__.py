"""Shared ROS 2 plumbing for every node and client in ``drivers`` (and ``sim.ros_node``).

- :mod:`drivers.ros.qos`: the four QoS profiles of the contract (SENSOR, IMAGE, COMMAND, STATUS).
- :mod:`drivers.ros.convert`: the only place that converts between robot_rl values (7-vector
  poses ``[x, y, z, qw, qx, qy, qz]``, :class:`robot_rl.core.types.RobotState`, uint8 images,
  float seconds) and ROS messages.
- :mod:`drivers.ros.env`: environment variables for a ROS 2 process (tests, ``robot-rl up``).
- ``fastdds_profile.xml``: Fast DDS profile with a shared-memory segment large enough for
  640x480 rgb8 images (:data:`drivers.ros.env.FASTDDS_PROFILE`).

See ``drivers/CONTRACT.md``. Importing this package does not import rclpy; the submodules
``qos`` and ``convert`` do.
"""
