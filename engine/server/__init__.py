"""`python -m engine serve`: one engine behind an OpenAI-compatible HTTP server.

    openai_schema.py  request bodies -> engine Requests; response and stream-chunk shapes; errors
    service.py        the one engine thread; hands each request's tokens back to its handler
    prom.py           /metrics under vLLM's names, types and bucket boundaries
    background.py     background load for a classroom, drawn by engine.arrivals
    app.py            the FastAPI routes
    cli.py            the `serve` flags and the uvicorn start
"""
