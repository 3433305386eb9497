"""The robot day on the twin played as a real robot: rehearse (``robot-rl rehearse``),
rehearse_setup (the setup it writes), rehearsal_report (its figures, PNGs and summary)."""
