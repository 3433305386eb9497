"""Feetech STS serial bus servos (the SO-101 arm's six STS3215): protocol, client, calibration,
and a simulated bus for tests.

- :mod:`drivers.feetech.protocol`: packets, checksums, the STS3215 registers (pure bytes);
- :mod:`drivers.feetech.bus`: :class:`~drivers.feetech.bus.FeetechBus`, the serial client;
- :mod:`drivers.feetech.calibration`: per-joint offset, direction and limits; ticks <-> rad,
  gripper closure; JSON files;
- :mod:`drivers.feetech.sim_bus`, :mod:`drivers.feetech.servo_model`: simulated servos on a pty
  (the only fake: CI has no servo hardware).

Nothing is imported here: import the module you need.
"""
