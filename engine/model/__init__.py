"""The model that runs a step's plan: weights, the packed forward, CPU kernels, threads."""
