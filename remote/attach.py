"""Which engine the app talks to, chosen once per app process (for a classroom, by environment).

- embedded: an engine inside this process, one per browser session (what `make run` starts).
- server:   a Batching Lab server (`python -m engine serve`) at a URL. Its step records and
            request rows come from /lab/*, so every chart of the Playground can be drawn.
- openai:   any OpenAI-compatible server (vLLM, SGLang, TGI, llama.cpp, Ollama, or ours) at a URL, with a model
            name and optionally a Prometheus metrics URL. Only what a client can see is known:
            timings from the stream, and the gauges the metrics page publishes.

Environment variables (all optional; with none set the engine is embedded):

    BATCHING_LAB_ENGINE_URL      the server's address, e.g. http://10.0.0.5:8000 (a /v1 suffix is fine)
    BATCHING_LAB_ENGINE_KIND     server (the default when a URL is set) or openai
    BATCHING_LAB_ENGINE_MODEL    the model name to send (openai: required; server: read from /v1/models)
    BATCHING_LAB_METRICS_URL     the Prometheus page (default: the URL's /metrics)
    BATCHING_LAB_ALLOWED_ENGINES more addresses the "Any engine" page may reach when the app is
                                 attached to an engine (comma-separated, or * for any)

An app attached to an engine is a classroom's: everyone on the network uses it, so its "Any
engine" page may send requests only to that engine (its address and its metrics page), and to
the addresses the instructor lists in BATCHING_LAB_ALLOWED_ENGINES. An app on its own (`make
run`, on loopback) may reach any address: its one user is on this machine.
"""
from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlparse

from engine import settings

KINDS = ("embedded", "server", "openai")
URL_ENV, KIND_ENV, MODEL_ENV, METRICS_ENV = (settings.ENGINE_URL, settings.ENGINE_KIND, settings.ENGINE_MODEL,
                                             settings.METRICS_URL)
ALLOWED_ENV = settings.ALLOWED_ENGINES

# What each kind shows, and what it cannot (the page says so next to its charts).
HIDDEN = {
    "embedded": "",
    "server": "",
    "openai": "An external engine does not publish its steps: there is no batch-membership chart, "
              "only a per-request timeline from this app's own timestamps. Queue time and prefill "
              "cannot be told apart from the client (both are inside TTFT), and running, waiting and "
              "KV usage are only as fresh as its metrics page.",
}


@dataclass(frozen=True, slots=True)
class EngineChoice:
    kind: str = "embedded"
    url: str = ""            # the server's base address, without /v1
    model: str = ""          # the model name requests carry
    metrics_url: str = ""

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"engine kind {self.kind!r} is not allowed: choose one of {', '.join(KINDS)}")
        if self.kind == "embedded":
            return
        parsed = urlparse(self.url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"engine URL {self.url!r} is not allowed: give http://host:port or https://host:port")
        if self.kind == "openai" and not self.model:
            raise ValueError("an OpenAI-compatible engine needs a model name (the one its /v1/models lists)")

    @property
    def remote(self) -> bool:
        return self.kind != "embedded"

    @property
    def api_url(self) -> str:
        """The OpenAI base URL: the address with /v1."""
        return self.url + "/v1"

    @property
    def metrics(self) -> str:
        return self.metrics_url or (self.url + "/metrics" if self.remote else "")

    @property
    def hidden(self) -> str:
        """What this engine does not reveal, in words for the page."""
        return HIDDEN[self.kind]


def base_url(url: str) -> str:
    """`url` without a trailing slash or /v1: http://h:8000/v1/ -> http://h:8000."""
    url = url.strip().rstrip("/")
    return url.removesuffix("/v1")


def choice(kind: str = "", url: str = "", model: str = "", metrics_url: str = "") -> EngineChoice:
    """An EngineChoice from loose inputs; a URL without a kind means our server."""
    if not url:
        if kind not in ("", "embedded"):
            raise ValueError(f"engine kind {kind!r} needs a URL ({URL_ENV})")
        return EngineChoice()
    return EngineChoice(kind or "server", base_url(url), model.strip(), metrics_url.strip())


def from_env(environ=None) -> EngineChoice:
    """The engine named by the BATCHING_LAB_ENGINE_* variables; embedded when none is set."""
    try:
        return choice(*(settings.value(name, environ) for name in (KIND_ENV, URL_ENV, MODEL_ENV, METRICS_ENV)))
    except ValueError as exc:
        raise ValueError(f"{exc} (from the {URL_ENV} / {KIND_ENV} / {MODEL_ENV} environment variables)") from None


# What kind_of() can tell, in words for the page
KIND_WORDS = {
    "batching-lab": "this project's Batching Lab server (it publishes vLLM's metric names)",
    "vllm": "a vLLM server", "sglang": "an SGLang server", "tgi": "a TGI server",
    "llamacpp": "a llama.cpp server (llama-server)",
    "ollama": "an Ollama server",
}
# What an engine of that kind keeps from a client, beyond what every external engine does
KIND_HIDDEN = {
    "ollama": "Ollama publishes no metrics page, so how many requests it runs at once, how many wait "
              "and how full its KV cache is cannot be seen from outside: the charts here come from the "
              "streams alone.",
    "llamacpp": "llama-server publishes running (busy slots) and waiting (deferred requests); its "
                "recent builds publish no KV cache use.",
}


def kind_of(url: str, timeout_s: float = 3.0) -> str:
    """What kind of engine answers at `url` (a KIND_WORDS key): this project's server (it answers
    /lab/policy); vLLM, SGLang, TGI or llama.cpp by the names on its metrics page; llama.cpp
    without --metrics by its /props; Ollama by its /api/version. "" when nothing tells."""
    import httpx2 as httpx
    from remote import prometheus
    base = url.rstrip("/")

    def answers(path: str, key: str = "") -> bool:
        try:
            r = httpx.get(base + path, timeout=timeout_s)
            return r.status_code == 200 and (not key or key in r.json())
        except (httpx.HTTPError, ValueError, TypeError):     # no answer, or not a JSON object
            return False
    if answers("/lab/policy"):
        return "batching-lab"
    try:
        return prometheus.fetch(base + "/metrics", timeout_s).engine
    except Exception:                 # no metrics page, or one without known names
        pass
    if answers("/props", "default_generation_settings"):     # llama-server started without --metrics
        return "llamacpp"
    if answers("/api/version", "version"):
        return "ollama"
    return ""


def origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) of an address, the port filled in from the scheme."""
    parsed = urlparse(url.strip())
    try:
        port = parsed.port or {"http": 80, "https": 443}.get(parsed.scheme)
    except ValueError:           # a port that is not a number
        port = None
    return parsed.scheme, (parsed.hostname or "").lower(), port


def check_reachable(url: str, environ=None) -> None:
    """Refuse (ValueError) an address the "Any engine" page may not reach from this app."""
    attached = from_env(environ)
    if not attached.remote:
        return                                   # an app of its own: its user chooses freely
    allowed = [a.strip() for a in settings.value(ALLOWED_ENV, environ).split(",") if a.strip()]
    if "*" in allowed:
        return
    targets = {origin(u) for u in (attached.url, attached.metrics, *allowed)}
    if origin(url) not in targets:
        scheme, host, port = origin(url)
        raise ValueError(f"this app is attached to the engine at {attached.url}, so it reaches only that "
                         f"engine: {scheme}://{host}:{port} is not allowed (the instructor can allow more with "
                         f"{ALLOWED_ENV})")
