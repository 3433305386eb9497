"""Write the arm models as standalone MJCF and URDF files.

Usage (this regenerates the committed copies, which a test compares with this output)::

    python -m sim.arms.export sim/arms/models

writes ``fr3.xml``, ``fr3.urdf``, ``ur5e.xml``, ``ur5e.urdf``, ``so101.xml`` and ``so101.urdf``
into the given directory (created if missing).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path

from sim.arms.chain import ArmChain, to_mjcf_model, to_urdf
from sim.arms.fr3 import fr3_chain
from sim.arms.so101 import so101_chain
from sim.arms.ur5e import ur5e_chain

ARM_CHAINS: dict[str, Callable[[], ArmChain]] = {
    "fr3": fr3_chain,
    "ur5e": ur5e_chain,
    "so101": so101_chain,
}
"""Arm kind -> chain constructor (the file stem is the kind)."""
MODELS_DIR = Path(__file__).resolve().parent / "models"
"""Where the committed model files live."""


def model_texts() -> dict[str, str]:
    """File name -> contents of every model file (``<kind>.xml`` and ``<kind>.urdf``)."""
    out: dict[str, str] = {}
    for kind, make in ARM_CHAINS.items():
        chain = make()
        out[f"{kind}.xml"] = to_mjcf_model(chain)
        out[f"{kind}.urdf"] = to_urdf(chain)
    return out


def export(outdir: Path) -> list[Path]:
    """Write every model file into ``outdir`` (created if missing); returns the paths."""
    outdir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in model_texts().items():
        path = outdir / name
        path.write_text(text, encoding="utf-8")
        paths.append(path)
    return paths


def main(argv: Sequence[str] | None = None) -> None:
    """CLI: ``python -m sim.arms.export OUTDIR``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path, help="directory for the .xml and .urdf files")
    args = parser.parse_args(argv)
    for path in export(args.outdir):
        print(path)


if __name__ == "__main__":
    main()
