"""Actor <-> learner transport of the distributed mode: gRPC service (``transport.proto``,
generated ``transport_pb2*``) and its wire codec (:mod:`robot_rl.transport.codec`).

Import the submodules directly; this package imports nothing at import time.
"""
