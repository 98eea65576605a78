"""Batching Lab's inference engine. Imports no Streamlit.

The CLI and bench leave OpenMP's wait policy at its default (spinning): on a quiet machine it is
30-45% faster per decode step than PASSIVE. The Streamlit app sets PASSIVE itself, because there
the engine shares two cores with page refreshes and, often, a browser.
"""
