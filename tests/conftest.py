"""Test-wide settings: headless MuJoCo rendering (set before any mujoco import); a
self-signed certificate for the TLS tests."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

os.environ.setdefault("MUJOCO_GL", "osmesa")


@pytest.fixture
def self_signed_cert(tmp_path: Path) -> tuple[Path, Path]:
    """(cert, key): a self-signed PEM certificate for 127.0.0.1 / localhost (TLS tests)."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl CLI for a certificate")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key
