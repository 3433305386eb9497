"""Tasks of the twin. The registry lives in :data:`sim.backend.TASKS` (explicit, lazy imports)."""
