"""GET /metrics: the engine's gauges, counters and histograms in Prometheus's text format, under
vLLM's names (engine/server/prom.py)."""
from __future__ import annotations

from fastapi import APIRouter, Request as HttpRequest
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST

from .shared import shared

router = APIRouter()


@router.get("/metrics")
async def metrics(http: HttpRequest):
    return Response(shared(http).service.metrics.text(), media_type=CONTENT_TYPE_LATEST)
