"""Arm kinematic models (FR3, UR5e, SO-101) from one generic serial-chain description.

:mod:`sim.arms.chain` holds the description and its MJCF / URDF writers; :mod:`sim.arms.fr3`,
:mod:`sim.arms.ur5e` and :mod:`sim.arms.so101` build one chain each; :mod:`sim.arms.export`
writes the standalone files in ``sim/arms/models/``. Importing this package imports nothing.
"""
