"""Franka FR3 over libfranka (pylibfranka): the arm bridge backend, its 1 kHz torque loop, the
Franka Hand, and franka-sim (the FCI simulator) with our own FR3 model for tests.

- :mod:`drivers.franka.backend`: :class:`FrankaBackend` (ArmBackend) and :class:`FrankaConfig`;
- :mod:`drivers.franka.loop`: the torque loop in its own process;
- :mod:`drivers.franka.control`: the control law (pure numpy);
- :mod:`drivers.franka.gripper`: the Franka Hand;
- :mod:`drivers.franka.node`: ``python -m drivers.franka.node --robot-ip ... --ns arm``;
- :mod:`drivers.franka.sim_mjcf`, :mod:`drivers.franka.simulator`,
  ``drivers/franka/sim_server.py``: franka-sim with our FR3 MJCF on 127.0.0.1.
"""
