"""The actor side of training: acting policy, weights snapshots, and the distributed actor loop.

:mod:`robot_rl.actor.policy` (what an actor acts with and what a learner sends it) and
:mod:`robot_rl.actor.loop` (``robot-rl actor``: act, log, stream, load weights). Import the
submodules directly.
"""
