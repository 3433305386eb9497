"""The MuJoCo twin: arm model, controller, tasks, cameras, scripted experts."""
