"""Bind addresses of the services (reward server, learner): loopback unless asked otherwise.

Pure Python (no gRPC) so that every service checks its bind the same way.
"""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    """Whether a bind host (``127.0.0.1``, ``[::1]``, ``localhost``, ...) is loopback-only."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(bind: str, allow_non_loopback: bool, example_port: int, who: str) -> str:
    """Check a ``host:port`` bind address; returns the host.

    Args:
        bind: ``host:port``.
        allow_non_loopback: A LAN address is allowed.
        example_port: Port shown in the error's example.
        who: Who would connect from elsewhere (in the error, e.g. "actors on other machines").

    Raises:
        ValueError: Not ``host:port``, or a non-loopback host without ``allow_non_loopback``.
    """
    host, sep, port = bind.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"bind={bind!r}: use host:port, e.g. 127.0.0.1:{example_port}")
    if not allow_non_loopback and not is_loopback(host):
        raise ValueError(
            f"bind={bind!r} is not a loopback address; pass allow_non_loopback=True "
            f"(and a token, ideally TLS) to serve {who}"
        )
    return host
