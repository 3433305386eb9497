"""The actor side of training, shared by the embedded trainer and ``robot-rl actor``.

:mod:`robot_rl.actor.loop` (the actor loop: act, take over for a human, hold steps whose learned
reward is late, log, obey run control, count ticks; the link to the learner is the only part the
two modes do not share), :mod:`robot_rl.actor.links` (``RemoteLink``: the log as the outbox,
streamed over gRPC) and :mod:`robot_rl.actor.policy` (what a distributed actor acts with and
what a learner sends it). Import the submodules directly.
"""
