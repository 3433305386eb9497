"""Differential IK libraries compared on our arms (issue "Stage 12: your arm", item 3).

One IK step per control tick: the safety-clipped TCP target (at most ``max_tcp_step_m`` /
``max_tcp_step_rad`` from the previous one) becomes the next joint target. Every library gets
the same problem where it allows (``docs/ik.md`` lists where it does not)::

    min_dq  ||C (J dq - e)||^2 + (damping + mu) ||dq||^2 + w^2 ||dq - (q_home - q)||^2
    s.t.    lower <= q + dq <= upper,   |dq_i| <= max_joint_step_rad

with ``e`` the TCP pose error (position m, rotation rad), ``C = diag(position_cost,
orientation_cost)``, the Levenberg-Marquardt term ``mu = lm_damping ||C e||^2`` and the posture
weight ``w = posture_cost``. mink and placo solve it as a QP; ``mujoco_dls`` (MuJoCo kinematics
+ numpy, no IK library: the baseline) and ``pin_dls`` (pinocchio kinematics) solve it without
constraints in closed form, then clamp to the limits and scale the step down to the bound; ikpy
has no step formulation: its own bounded least-squares IK from the current q, then the same
clamp and scaling.

Scenarios per arm and library (ground truth: MuJoCo FK of the arm's standalone MJCF):
    circle:     a vertical circle (``circle_radius_m``) through the home TCP, two laps.
    waypoints:  random reachable poses (FK of random q near home) inside a box, approached at
                the per-tick limit, 10 ticks of dwell each.
    limit:      a target that needs the smallest-range joint 0.3 rad past its nearer limit.
    reach:      the target runs out of reach (1.2 x the arm's length from its first joint).
    singular:   started at the arm's singular pose, the target moves along the direction the
                Jacobian loses (UR5e: wrist_2 = 0).

Figures: solve time per tick (median / p99 us, and as a ratio to ``mujoco_dls`` timed in the
same process), tracking error after the transient (mm, deg), largest joint step per tick
(rad; must not exceed ``max_joint_step_rad``), limit violation (rad), NaNs, oscillation while
holding an unreachable target. ``--wheels`` adds which binary wheels PyPI has per Python
version and Linux architecture (``pip install --dry-run --only-binary :all: --platform ...``,
with and without the dependency tree).

    .venv/bin/python bench/ik_compare.py --out bench/results/ik_compare.jsonl
    .venv/bin/python bench/ik_compare.py --libs mujoco_dls mink_daqp --arms fr3 --no-wheels

Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _ik_libs import (  # noqa: E402
    WRAPPERS,
    Arm,
    IKParams,
    MjArm,
    load_arm,
    pose_error,
    so3_exp,
    so3_log,
)

LIBS = ("mujoco_dls", "mink_daqp", "mink_quadprog", "pin_dls", "placo", "ikpy")
ARMS = ("fr3", "ur5e", "so101")
WHEEL_PACKAGES = ("mink", "daqp", "quadprog", "qpsolvers", "pin", "placo", "ikpy")


# ---------------------------------------------------------------------------------------------
# Scenarios: (q0 (n,), targets (T, 4, 4), ticks counted as transient).


def _toward(T_from: np.ndarray, T_to: np.ndarray, p: IKParams) -> list[np.ndarray]:
    """Targets from ``T_from`` to ``T_to`` (inclusive), each within the per-tick limits."""
    dp = T_to[:3, 3] - T_from[:3, 3]
    dw = so3_log(T_to[:3, :3] @ T_from[:3, :3].T)
    k = max(
        1,
        int(np.ceil(np.linalg.norm(dp) / p.max_tcp_step_m - 1e-9)),
        int(np.ceil(np.linalg.norm(dw) / p.max_tcp_step_rad - 1e-9)),
    )
    out = []
    for i in range(1, k + 1):
        T = np.eye(4)
        T[:3, 3] = T_from[:3, 3] + dp * i / k
        T[:3, :3] = so3_exp(dw * i / k) @ T_from[:3, :3]
        out.append(T)
    return out


def scenario_circle(arm: Arm, mj: MjArm, p: IKParams) -> tuple[np.ndarray, list, int]:
    """Two laps of a vertical circle (y-z plane) through the home TCP, home orientation."""
    T0 = mj.fk(arm.q_home)
    r = arm.circle_radius_m
    center = T0[:3, 3] - np.array([0.0, r, 0.0])
    n = int(np.ceil(2 * np.pi * r / p.max_tcp_step_m))
    targets = []
    for i in range(1, 2 * n + 1):
        a = 2 * np.pi * i / n
        T = T0.copy()
        T[:3, 3] = center + r * np.array([0.0, np.cos(a), np.sin(a)])
        targets.append(T)
    return arm.q_home.copy(), targets, 10


def scenario_waypoints(
    arm: Arm, mj: MjArm, p: IKParams, rng: np.random.Generator, count: int = 8
) -> tuple[np.ndarray, list, int]:
    """Reachable random poses (FK of q near home) in a box around the home TCP."""
    T_home = mj.fk(arm.q_home)
    lo, hi = arm.lower + 0.1, arm.upper - 0.1
    targets, T_prev = [], T_home
    while count > 0:
        q = np.clip(arm.q_home + rng.uniform(-0.6, 0.6, len(arm.q_home)), lo, hi)
        T = mj.fk(q)
        if np.any(np.abs(T[:3, 3] - T_home[:3, 3]) > arm.box_half_m):
            continue
        targets += _toward(T_prev, T, p) + [T] * 10
        T_prev, count = T, count - 1
    return arm.q_home.copy(), targets, 5


def scenario_limit(arm: Arm, mj: MjArm, p: IKParams) -> tuple[np.ndarray, list, int, int]:
    """The target needs the smallest-range joint 0.3 rad past its nearer limit; 40 ticks hold."""
    j = int(np.argmin(arm.upper - arm.lower))
    q_goal = arm.q_home.copy()
    up = arm.upper[j] - arm.q_home[j] < arm.q_home[j] - arm.lower[j]
    q_goal[j] = arm.upper[j] + 0.3 if up else arm.lower[j] - 0.3
    T_goal = mj.fk(q_goal)
    return arm.q_home.copy(), _toward(mj.fk(arm.q_home), T_goal, p) + [T_goal] * 40, 0, j


def scenario_reach(arm: Arm, mj: MjArm, p: IKParams) -> tuple[np.ndarray, list, int]:
    """The target leaves the workspace horizontally (to 1.2 x the arm length), then holds."""
    T0 = mj.fk(arm.q_home)
    mj.fk(np.zeros(len(arm.q_home)))
    bodies = mj.data.xpos[mj.model.jnt_bodyid[[mj.model.joint(n).id for n in arm.joint_names]]]
    shoulder = bodies[0].copy()
    pts = np.vstack([bodies, mj.data.site_xpos[mj.site]])
    length = float(np.sum(np.linalg.norm(np.diff(pts, axis=0), axis=1)))
    d = T0[:3, 3] - shoulder
    d[2] = 0.0
    d /= np.linalg.norm(d)
    T_goal = T0.copy()
    T_goal[:3, 3] = shoulder + 1.2 * length * d
    T_goal[2, 3] = T0[2, 3]
    return arm.q_home.copy(), _toward(T0, T_goal, p) + [T_goal] * 40, 0


def scenario_singular(arm: Arm, mj: MjArm, p: IKParams) -> tuple[np.ndarray, list, int]:
    """From the singular pose, the target moves 10 ticks along the lost direction, then holds."""
    q0 = arm.singular_q
    T0, J = mj.jac(q0)
    u = np.linalg.svd(J)[0][:, min(J.shape) - 1]  # the twist the arm can't make at q0
    scale = min(
        p.max_tcp_step_m / max(np.linalg.norm(u[:3]), 1e-9),
        p.max_tcp_step_rad / max(np.linalg.norm(u[3:]), 1e-9),
    )
    targets, T = [], T0
    for _ in range(10):
        T = T.copy()
        T[:3, 3] = T[:3, 3] + scale * u[:3]
        T[:3, :3] = so3_exp(scale * u[3:]) @ T[:3, :3]
        targets.append(T)
    return q0.copy(), targets + [T] * 40, 0


# ---------------------------------------------------------------------------------------------
# Running one library on one scenario.


def run(solver, mj: MjArm, q0: np.ndarray, targets: list) -> dict:
    """Step through ``targets``; per tick: pose error after the step and the joint step."""
    q = q0.copy()
    n = len(targets)
    pos_mm, rot_deg, step_rad = (np.full(n, np.nan) for _ in range(3))
    qs = np.full((n + 1, len(q0)), np.nan)
    qs[0] = q
    error = None
    for k, T_target in enumerate(targets):
        try:
            q_next = np.asarray(solver.step(q, T_target), dtype=float)
        except Exception as exc:  # noqa: BLE001 - a library failing is a result here
            error = f"tick {k}: {type(exc).__name__}: {exc}"[:300]
            break
        qs[k + 1] = q_next
        if not np.all(np.isfinite(q_next)):
            error = f"tick {k}: non-finite q"
            break
        step_rad[k] = float(np.max(np.abs(q_next - q)))
        e = pose_error(T_target, mj.fk(q_next))
        pos_mm[k] = 1e3 * np.linalg.norm(e[:3])
        rot_deg[k] = np.degrees(np.linalg.norm(e[3:]))
        q = q_next
    return {"pos": pos_mm, "rot": rot_deg, "step": step_rad, "qs": qs, "err": error}


def _stats(x: np.ndarray, prefix: str, unit: str) -> dict:
    x = x[np.isfinite(x)]
    if x.size == 0:
        return {f"{prefix}_median_{unit}": None, f"{prefix}_max_{unit}": None}
    return {f"{prefix}_median_{unit}": float(np.median(x)), f"{prefix}_max_{unit}": float(x.max())}


def _violation(qs: np.ndarray, arm: Arm) -> float:
    qs = qs[np.all(np.isfinite(qs), axis=1)]
    return float(np.max(np.maximum(0.0, np.maximum(qs - arm.upper, arm.lower - qs))))


def _hold_figures(r: dict, hold: int = 30) -> dict:
    """Oscillation while the target holds still (the last ``hold`` ticks): RMS and largest joint
    step (rad), and the share of joint-ticks whose step reverses the previous one's sign."""
    dq = np.diff(r["qs"][-hold - 1 :], axis=0)  # (hold, n)
    if not np.all(np.isfinite(dq)):
        return {"hold_rms_step_rad": None, "hold_max_step_rad": None, "hold_reversals": None}
    moving = np.abs(dq) > 1e-6
    flips = (dq[1:] * dq[:-1] < 0) & moving[1:] & moving[:-1]
    return {
        "hold_rms_step_rad": float(np.sqrt(np.mean(dq**2))),
        "hold_max_step_rad": float(np.max(np.abs(dq))),
        "hold_reversals": float(np.mean(flips)),
    }


def time_solvers(solvers: dict, q0: np.ndarray, targets: list, rounds: int) -> dict:
    """Solve time per tick (us): the libraries take turns over ``targets``, ``rounds`` times,
    so that load from elsewhere on the machine falls on all of them alike."""
    times: dict = {k: [] for k in solvers}
    for _ in range(rounds):
        for name, solver in solvers.items():
            q = q0.copy()
            try:
                for T in targets:
                    t0 = time.perf_counter()
                    q = solver.step(q, T)
                    times[name].append(time.perf_counter() - t0)
            except Exception:  # noqa: BLE001 - the scenarios report the failure
                pass
    return {k: 1e6 * np.array(v) for k, v in times.items()}


def bench_one(arm: Arm, solver, p: IKParams, seed: int) -> dict:
    """Model agreement and every scenario for one library on one arm; returns the figures."""
    mj = MjArm(arm)
    fig: dict = {}
    if hasattr(solver, "fk"):  # the library's own FK against MuJoCo's (model agreement)
        rng = np.random.default_rng(seed + 99)
        worst = 0.0
        for _ in range(50):
            q = rng.uniform(arm.lower, arm.upper)
            e = pose_error(mj.fk(q), np.asarray(solver.fk(q)))
            worst = max(worst, 1e3 * np.linalg.norm(e[:3]))
        fig["fk_mismatch_max_mm"] = worst
    for name, (q0, targets, transient) in (
        ("circle", scenario_circle(arm, mj, p)),
        ("waypoints", scenario_waypoints(arm, mj, p, np.random.default_rng(seed))),
    ):
        r = run(solver, mj, q0, targets)
        fig[name] = {
            "ticks": len(targets),
            **_stats(r["pos"][transient:], "pos_err", "mm"),
            **_stats(r["rot"][transient:], "rot_err", "deg"),
            "max_joint_step_rad": float(np.nanmax(r["step"])),
            "limit_violation_max_rad": _violation(r["qs"], arm),
            "error": r["err"],
        }
    q0, targets, _, j = scenario_limit(arm, mj, p)
    r = run(solver, mj, q0, targets)
    fig["limit"] = {
        "joint": arm.joint_names[j],
        "limit_violation_max_rad": _violation(r["qs"], arm),
        "finite": r["err"] is None,
        "max_joint_step_rad": float(np.nanmax(r["step"])),
        "final_pos_err_mm": float(r["pos"][np.isfinite(r["pos"])][-1]),
        "final_rot_err_deg": float(r["rot"][np.isfinite(r["rot"])][-1]),
        **_hold_figures(r),
        "error": r["err"],
    }
    scen = [("reach", scenario_reach(arm, mj, p)), ("singular", scenario_singular(arm, mj, p))]
    for name, (q0, targets, _) in scen:
        r = run(solver, mj, q0, targets)
        fig[name] = {
            "finite": r["err"] is None,
            "max_joint_step_rad": float(np.nanmax(r["step"])),
            "limit_violation_max_rad": _violation(r["qs"], arm),
            "final_pos_err_mm": float(r["pos"][np.isfinite(r["pos"])][-1]),
            "final_rot_err_deg": float(r["rot"][np.isfinite(r["rot"])][-1]),
            **_hold_figures(r),
            "error": r["err"],
        }
    fig["singular"]["start_q_rad"] = arm.singular_q.tolist()
    fig["singular"]["start_sigma_min"] = float(np.linalg.svd(mj.jac(arm.singular_q)[1])[1][-1])
    steps = [fig[k]["max_joint_step_rad"] for k in ("circle", "waypoints", "limit", *dict(scen))]
    fig["joint_step_bound_ok"] = bool(max(steps) <= p.max_joint_step_rad + 1e-9)
    return fig


# ---------------------------------------------------------------------------------------------
# Wheels.


PLATFORMS = {
    "x86_64": ("manylinux2014_x86_64", "manylinux_2_28_x86_64"),
    "aarch64": ("manylinux2014_aarch64", "manylinux_2_28_aarch64"),
}


def _resolve(reqs: list[str], py: str, arch: str, deps: bool) -> dict | None:
    """What pip would install for ``reqs`` on CPython ``py`` / Linux ``arch`` from binary wheels
    only (pure-Python wheels count): name -> (version, wheel file); None if it cannot."""
    with tempfile.TemporaryDirectory() as d:
        cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "-q"]
        cmd += ["--only-binary", ":all:", "--python-version", py, "--target", d + "/t"]
        cmd += [a for t in PLATFORMS[arch] for a in ("--platform", t)]
        cmd += ["--report", d + "/r.json"] + ([] if deps else ["--no-deps"]) + reqs
        if subprocess.run(cmd, capture_output=True, text=True, timeout=600).returncode != 0:
            return None
        report = json.loads(Path(d, "r.json").read_text())
    return {
        i["metadata"]["name"].lower(): (
            i["metadata"]["version"],
            i["download_info"]["url"].rsplit("/", 1)[-1],
        )
        for i in report["install"]
    }


def wheel_table(packages: tuple[str, ...], pythons: tuple[str, ...]) -> dict:
    """Per package, CPython version and Linux arch: the version pip picks from binary wheels
    (``wheel``: its file name), whether its whole dependency tree has wheels (``tree``), the
    numpy that tree gets, and (3.11+) the version pip picks beside ``numpy>=2.4`` (ours)."""
    out: dict = {}
    for pkg in packages:
        out[pkg] = {}
        for py in pythons:
            for arch in PLATFORMS:
                top = _resolve([pkg], py, arch, deps=False)
                tree = _resolve([pkg], py, arch, deps=True)
                cell = {
                    "version": top[pkg][0] if top else None,
                    "wheel": top[pkg][1] if top else None,
                    "tree": tree is not None,
                    "tree_numpy": tree.get("numpy", (None,))[0] if tree else None,
                }
                if py != "3.10" and arch == "x86_64":  # the version pip falls back to
                    both = _resolve([pkg, "numpy>=2.4"], py, arch, deps=True)
                    cell["with_numpy_2_4"] = both[pkg][0] if both else None
                out[pkg][f"cp{py.replace('.', '')}-{arch}"] = cell
    return out


# ---------------------------------------------------------------------------------------------
# CLI.


def _versions() -> dict:
    """Installed versions of the libraries compared and what they stand on."""
    pkgs = ("mujoco", "numpy", "scipy", "mink", "daqp", "quadprog", "qpsolvers", "pin")
    return {p: _version(p) for p in (*pkgs, "cmeel-boost", "placo", "ikpy")}


def _version(pkg: str) -> str | None:
    try:
        return importlib.metadata.version(pkg)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine_info() -> dict:
    """CPU model, core count, platform, Python and the libraries' versions."""
    cpu = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {
        "cpu_model": cpu,
        "cpu_cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "versions": _versions(),
        "code": _code(),
    }


def _code() -> str:
    """The commit this bench ran on (``+dirty`` with uncommitted changes)."""
    try:
        head, dirty = (
            subprocess.run(
                ["git", "-C", str(REPO), *a], capture_output=True, text=True, check=True
            ).stdout.strip()
            for a in (["rev-parse", "--short", "HEAD"], ["status", "--porcelain", "-uno"])
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def _emit(rec: dict, out: Path | None) -> None:
    line = json.dumps(rec)
    print(line, flush=True)
    if out is not None:
        with open(out, "a") as f:
            f.write(line + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--libs", nargs="+", default=list(LIBS), choices=LIBS)
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timing-rounds", type=int, default=5, help="turns per library, timing")
    ap.add_argument("--wheels", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--out", type=Path, default=None, help="append the JSON lines here too")
    for f in dataclasses.fields(IKParams):
        ap.add_argument(f"--{f.name.replace('_', '-')}", type=float, default=f.default)
    args = ap.parse_args(argv)
    p = IKParams(**{f.name: getattr(args, f.name) for f in dataclasses.fields(IKParams)})
    machine = machine_info()
    libs = ["mujoco_dls"] + [x for x in args.libs if x != "mujoco_dls"]  # the time reference
    with tempfile.TemporaryDirectory() as tmp:
        for arm_name in args.arms:
            arm = load_arm(arm_name, Path(tmp))
            solvers, status = {}, {}
            for lib in libs:
                try:
                    solvers[lib] = WRAPPERS[lib](arm, p)
                    status[lib] = "ok"
                except Exception as exc:  # noqa: BLE001 - e.g. the library does not import
                    status[lib] = f"failed: {type(exc).__name__}: {exc}"[:400]
            mj = MjArm(arm)
            q0, circle, _ = scenario_circle(arm, mj, p)
            _, wps, _ = scenario_waypoints(arm, mj, p, np.random.default_rng(args.seed))
            time_solvers(solvers, q0, circle[:20], rounds=1)  # warm-up
            t_us = time_solvers(solvers, q0, circle + wps, rounds=args.timing_rounds)
            ref = float(np.median(t_us["mujoco_dls"]))
            for lib in args.libs:
                fig = {}
                if lib in solvers:
                    fig = {
                        "solve_us_median": float(np.median(t_us[lib])),
                        "solve_us_p99": float(np.percentile(t_us[lib], 99)),
                        "solve_ratio_to_mujoco_dls": float(np.median(t_us[lib]) / ref),
                        "timed_ticks": len(t_us[lib]),
                        **bench_one(arm, solvers[lib], p, args.seed),
                    }
                config = {
                    **dataclasses.asdict(p),
                    "orientation_cost": arm.orientation_cost,
                    "joints": list(arm.joint_names),
                    "q_home_rad": arm.q_home.tolist(),
                    "model": arm.source,
                    "seed": args.seed,
                }
                _emit(
                    {
                        "benchmark": "ik_compare",
                        "arm": arm.name,
                        "library": lib,
                        "status": status[lib],
                        "config": config,
                        "machine": machine,
                        "figures": fig,
                    },
                    args.out,
                )
    if args.wheels:
        pythons = ("3.10", "3.11", "3.12", "3.13")
        _emit(
            {
                "benchmark": "ik_wheels",
                "config": {"packages": list(WHEEL_PACKAGES), "pythons": list(pythons)},
                "machine": machine,
                "figures": wheel_table(WHEEL_PACKAGES, pythons),
            },
            args.out,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
