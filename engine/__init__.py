"""Batching Lab's inference engine. Imports no Streamlit.

How the engine's OpenMP threads wait between parallel loops is set here, once, for every way the
engine runs (the CLI, `engine serve`, the Streamlit app, the benchmarks): it must be in the
environment before torch loads libgomp, and importing `engine` comes first in each of them.

A step runs a few hundred parallel loops with a few to a few tens of microseconds of Python
between them. libgomp's default lets an idle worker spin for about 3 ms before it sleeps, which
on a quiet machine keeps the workers awake for a whole step; but where the engine shares its
cores (a browser, the page's own work, the HTTP side, or other programs), a spinning worker burns
the time slice the thread it waits for needs: on a machine with few cores, decode steps run many
times slower than with workers that sleep at once (OMP_WAIT_POLICY=PASSIVE). Sleeping at once
costs a share of every step on a quiet machine instead, as every loop pays to wake a worker.
A bounded spin (GOMP_SPINCOUNT, about 30 microseconds) gets both: it outlasts the gaps inside a
step, so a quiet machine runs as fast as with the default, and gives the cores up soon after.
OMP_WAIT_POLICY or GOMP_SPINCOUNT set by hand are left as they are.
"""
import os

SPIN_COUNT = "3000"     # libgomp's own estimate: about 100,000 spins a millisecond

if "OMP_WAIT_POLICY" not in os.environ:
    os.environ.setdefault("GOMP_SPINCOUNT", SPIN_COUNT)
