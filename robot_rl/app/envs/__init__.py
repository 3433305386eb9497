"""The twin as an env: build (task name + configs -> env and wrappers), listing (``robot-rl envs``),
collect (scripted demonstrations), policies (scripted / random / zero), video (episode videos)."""
