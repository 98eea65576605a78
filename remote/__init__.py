"""The lab attached to an engine over HTTP: ours (`python -m engine serve`) or any
OpenAI-compatible server (vLLM, SGLang, TGI). No Streamlit here.

    engines.py     which engine the app uses: embedded, a Batching Lab server, or any OpenAI-compatible
                   URL; which addresses a classroom's app may reach
    load.py        a load generator: streaming requests as one tenant, TTFT/TPOT/ITL timed on the client
    prometheus.py  running / waiting / KV usage from a /metrics page, in vLLM's, SGLang's or TGI's names
    lab_stream.py  our server's /lab/steps and /lab/requests as the Tables the charts take
"""
