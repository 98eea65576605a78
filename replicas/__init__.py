"""Beyond one replica: a router that picks a replica for each request, and an autoscaler that
adds and removes replicas, around the engine's own Engine and Scheduler. Simulated (every
replica on the simulator's virtual clock) or real (engine servers, or any OpenAI-compatible
endpoints). No Streamlit here; the engine knows nothing of this package.
"""
