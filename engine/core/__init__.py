"""The engine itself: requests, the scheduler and its policy, the KV cache, one step. Imports no torch."""
