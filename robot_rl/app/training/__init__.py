"""Training and running policies: train (embedded, direct or over ROS 2: train_ros), train_config,
compose (agent, reward, demos, envs of a run), distributed (``robot-rl learner``), actor_cmd
(``robot-rl actor``), run_settings (what a run stores and resumes with), reward_env (a learned
reward around a training env), evaluate (``robot-rl eval``), rollout (``robot-rl rollout``)."""
