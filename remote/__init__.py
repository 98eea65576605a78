"""The lab attached to an engine over HTTP: ours (`python -m engine serve`) or any
OpenAI-compatible server (vLLM, SGLang, TGI). No Streamlit here.

    engines.py     which engine the app uses: embedded, a Batching Lab server, or any OpenAI-compatible
                   URL; which addresses a classroom's app may reach
    load.py        the one streaming client (stream_into: TTFT/TPOT/ITL timed on the client, by
                   engine.core.metrics) and a load generator sending with it as one tenant
    prometheus.py  running / waiting / KV usage from a /metrics page, in vLLM's, SGLang's or TGI's names
    lab_stream.py  our server's /lab/steps and /lab/requests: its steps as the engine's StepRecords
"""
