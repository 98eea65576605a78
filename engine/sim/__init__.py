"""The simulator: step-time models of this machine (calibration) and of GPUs (roofline), and its check."""
