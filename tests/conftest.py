"""Test-wide settings: headless MuJoCo rendering (set before any mujoco import); the same
floating-point kernels on every x86-64 machine (set before torch loads; inherited by every
process a test starts); a self-signed certificate for the TLS tests."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

os.environ.setdefault("MUJOCO_GL", "osmesa")
# A learning test follows one seed, and RL amplifies the last bit of a float: torch, MKL and
# oneDNN pick their kernels by the CPU's instruction set, so the same seed learns a different
# policy on another machine (the learned-reward RL test scored 0.4 at 2k steps with an AMX /
# AVX-512 machine's kernels, and passed, >= 0.5, there with AVX2 kernels forced, as on earlier CI
# machines). Pinned to AVX2 kernels (every x86-64 CI machine has them), a test's run is the same
# run on every machine; benchmarks and users keep the fastest kernels.
for _name, _isa in (("ATEN_CPU_CAPABILITY", "avx2"), ("MKL_CBWR", "AVX2"),
                    ("ONEDNN_MAX_CPU_ISA", "AVX2")):  # fmt: skip
    os.environ.setdefault(_name, _isa)


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
