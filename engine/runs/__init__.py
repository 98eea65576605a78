"""Runs of the engine: workloads, arrivals, a live run, results and the files a run writes."""
