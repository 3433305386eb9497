"""Teleoperation devices: SpaceMouse (HID), gamepad (evdev), keyboard (terminal), replay.

- :mod:`drivers.teleop.mapping`: DeviceReading -> TeleopState (deadzone, scaling, buttons) and
  the ``teleop/joy`` layout;
- :mod:`drivers.teleop.base`: :class:`DeviceTeleop`, the one Teleop over source + parser;
- :mod:`drivers.teleop.spacemouse`, :mod:`drivers.teleop.gamepad`,
  :mod:`drivers.teleop.keyboard`: byte/event parsers (pure) and device sources;
- :mod:`drivers.teleop.recording`: recorded event files, recorder and replay;
- :mod:`drivers.teleop.node`: the ROS 2 node (the only module here that imports rclpy).

Importing this package imports no device library (hidapi, evdev) and no rclpy.
"""
