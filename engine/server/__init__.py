"""`python -m engine serve`: one engine behind an OpenAI-compatible HTTP server.

    openai_schema.py  request bodies -> prompts and sampling; response and stream-chunk shapes; errors
    service.py        the one engine thread; hands each request's tokens back to its handler
    prom.py           /metrics under vLLM's names, types and bucket boundaries
    background.py     background load for a classroom, drawn by engine.arrivals
    app.py            the FastAPI routes, and OpenAI's error shape for every error
    limits.py         what one client may cost (per address), who is exempt, tokenizing off the event loop
    bodies.py         a request body read within the limits (415, 413, 408)
    connections.py    uvicorn's protocol with per-address connection caps and header timeouts; a stop
                      that ends every stream first
    lab_feed.py       the engine read once for every /lab reader
    cli.py            the `serve` flags and the uvicorn start
"""
