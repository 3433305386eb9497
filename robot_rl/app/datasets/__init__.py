"""Zarr datasets: ``robot-rl dataset info|export|salvage`` (dataset)."""
