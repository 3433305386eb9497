"""The arm bridge: safety between the env's commands and an arm backend.

- :mod:`drivers.arm_bridge.backend`: the :class:`ArmBackend` Protocol (twin, Franka).
- :mod:`drivers.arm_bridge.core`: :class:`ArmBridge`, plain Python, no ROS: validation, the
  shared safety layer, watchdog, e-stop, status.
- :mod:`drivers.arm_bridge.node`: the rclpy lifecycle node around it (imports rclpy).
"""
