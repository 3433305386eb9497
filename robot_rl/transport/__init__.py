"""Actor <-> learner transport of the distributed mode: gRPC service (``transport.proto``,
generated ``transport_pb2*``), its wire codec (:mod:`robot_rl.transport.codec`,
:mod:`robot_rl.transport.weights`), the learner's server (:mod:`robot_rl.transport.server`,
``LearnerServer`` writing into a :class:`robot_rl.transport.sink.TransitionSink`) and the actor's
client (:mod:`robot_rl.transport.client`, ``LearnerClient``).

Import the submodules directly; this package imports nothing at import time (the codec must not
pull in gRPC).
"""
