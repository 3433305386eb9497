"""How the learner's gRPC server (:mod:`robot_rl.transport.server`) serves its actors: address,
security, limits, and what it tells them at Hello. Kept apart from the server so that the CLI
and the learner can build it without the gRPC servicer (``robot_rl.transport.server``
re-exports it)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from robot_rl.core.netaddr import check_bind


@dataclass(frozen=True)
class LearnerServerConfig:
    """How the learner serves its actors."""

    bind: str = "127.0.0.1:0"
    """host:port to listen on (port 0: any free port). Loopback unless allow_non_loopback."""
    token: str | None = None
    """Shared secret; actors send ``authorization: Bearer <token>``. None: no auth."""
    allow_non_loopback: bool = False
    """Allow a bind address other than 127.0.0.1 / ::1 / localhost (a LAN)."""
    tls_cert_path: Path | None = None
    """PEM server certificate (with tls_key_path: serve TLS). None: plaintext."""
    tls_key_path: Path | None = None
    """PEM private key of tls_cert_path."""
    max_message_bytes: int = 32 * 1024 * 1024
    """Largest transition payload (as sent and decompressed) and weights blob, bytes."""
    max_actors: int = 8
    """Actors served at once: each holds a transition stream and a subscription, and a stream
    beyond max_actors of its kind gets RESOURCE_EXHAUSTED."""
    run_id: str = ""
    """Id of the learner's run (its run directory name), told to actors in Hello."""
    policy_json: str = ""
    """The learner's policy settings (JSON), told to actors in Hello so that they build the same
    acting networks; "" for none."""
    run_settings_json: str = ""
    """The run's env settings (JSON), told to actors in Hello so that they build the same env
    (``robot_rl.app.training.run_settings``); "" for none."""

    def __post_init__(self) -> None:
        check_bind(self.bind, self.allow_non_loopback, 50061, "actors on other machines")
        if self.token is not None and not self.token:
            raise ValueError("token='': give a non-empty token or None for no authentication")
        if (self.tls_cert_path is None) != (self.tls_key_path is None):
            raise ValueError("TLS needs both tls_cert_path and tls_key_path (or neither)")
        if self.max_message_bytes < 1024:
            raise ValueError(f"max_message_bytes={self.max_message_bytes}: use >= 1024")
        if self.max_actors < 1:
            raise ValueError(f"max_actors={self.max_actors}: use >= 1")
