"""Batching Lab's inference engine. Imports no Streamlit.

The CLI and bench leave OpenMP's wait policy at its default (spinning): on a quiet machine it is
20-45% faster per decode step than PASSIVE. The Streamlit app and `python -m engine serve` set
PASSIVE, because there the engine shares the cores with page refreshes, HTTP and often a
browser: with one other busy process on two cores, spinning made small parallel loops 2.4 times
slower than sleeping (engine/threads.py has the other half of the story).
"""
