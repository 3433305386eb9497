"""Geometry the hard tasks share: a ring of four boxes around a rectangular opening (a socket, a
nest, a bracket's hole) and a prism with bevelled bottom edges (a plug, a pin), both with the
stiff contacts of :mod:`sim.tasks.peg_insert` (no sinking into walls, no creep in the grasp)."""

from __future__ import annotations

import numpy as np

from sim.tasks.peg_insert import CONTACT_SOLIMP, CONTACT_SOLMIX, CONTACT_SOLREF

FRICTION = 0.5
"""Sliding friction of the hard tasks' parts and fixtures."""


STIFF_CONTACT = (
    f'friction="{FRICTION} 0.01 0.0001" solref="{CONTACT_SOLREF}" solimp="{CONTACT_SOLIMP}" '
    f'solmix="{CONTACT_SOLMIX}"'
)
"""A geom's friction and stiff-contact attributes."""


def ring_geoms(
    name: str,
    opening: tuple[float, float],
    outer: float,
    height: float,
    rgba: str,
    z0: float = 0.0,
) -> str:
    """Four boxes ``{name}_px``, ``_nx``, ``_py``, ``_ny`` around an ``opening`` (x, y) wide
    opening centred on the body origin, the outer side ``outer``, from ``z0`` to
    ``z0 + height`` in the body frame."""
    ox, oy = opening[0] / 2, opening[1] / 2
    big, hz = outer / 2, height / 2
    wx, wy = (big - ox) / 2, (big - oy) / 2  # half thicknesses of the walls
    walls = (
        ("px", (ox + wx, 0.0), (wx, big)),
        ("nx", (-ox - wx, 0.0), (wx, big)),
        ("py", (0.0, oy + wy), (ox, wy)),
        ("ny", (0.0, -oy - wy), (ox, wy)),
    )
    return "\n".join(
        f'<geom name="{name}_{n}" class="object" type="box" pos="{x} {y} {z0 + hz}" '
        f'size="{sx} {sy} {hz}" {STIFF_CONTACT} rgba="{rgba}"/>'
        for n, (x, y), (sx, sy) in walls
    )


def bevelled_prism(width: float, thickness: float, height: float, chamfer: float) -> np.ndarray:
    """(12, 3) vertices of a ``width`` x ``thickness`` x ``height`` box centred on its origin
    whose bottom edges are bevelled by ``chamfer`` (MuJoCo collides a mesh's convex hull, so
    the bevel is a real lead-in)."""
    w, t, h = width / 2, thickness / 2, height / 2
    out = []
    for z, d in ((h, 0.0), (-h + chamfer, 0.0), (-h, chamfer)):
        for sx, sy in ((1, 1), (-1, 1), (-1, -1), (1, -1)):
            out.append((sx * (w - d), sy * (t - d), z))
    return np.asarray(out)


def wrap_symmetric(angle: float, period: float) -> float:
    """``angle`` mod ``period`` into [-period/2, period/2): the yaw error of a part that looks
    the same every ``period`` (pi for a rectangle, pi/2 for a square)."""
    return float((angle + period / 2) % period - period / 2)


def mesh_vertex_attr(vertices: np.ndarray) -> str:
    """A ``<mesh vertex="...">`` attribute value."""
    return " ".join(f"{v:.9g}" for v in np.asarray(vertices).ravel())
