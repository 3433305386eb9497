"""Success classifiers: reward (``robot-rl reward frames|train|eval|serve``), reward_frames (the
twin renders labelled frames)."""
