"""Batching Lab's inference engine. Imports no Streamlit."""
import os

# Before torch loads: idle OpenMP threads sleep instead of spinning. On a 2-core machine whose
# other core is busy (a browser, a page refresh, another process), spinning threads cost the
# engine most of each step; uncontended the difference is within noise.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
