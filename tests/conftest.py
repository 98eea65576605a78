"""Fixtures several test files share, and the `browser` mark `make test` splits its run by."""
import os
import time

import pytest

from engine.settings import cache_root


@pytest.fixture
def lab_env(tmp_path, monkeypatch):
    """Tiny model, empty results cache. The converted SmolLM2 copy (the tiny model borrows its
    tokenizer) is linked in from the usual cache so it is not converted again."""
    real = cache_root()
    for d in real.glob("SmolLM2-*") if real.is_dir() else []:
        (tmp_path / d.name).symlink_to(d)
    monkeypatch.setenv("BATCHING_LAB_MODEL", "tiny")
    monkeypatch.setenv("BATCHING_LAB_CACHE", str(tmp_path))
    return tmp_path


def wait_until(fn, timeout=90, what="condition", explain=None, interval=0.1):
    """Poll `fn` until it returns something true, and return that. A call that raises counts as not
    yet (an element being redrawn, a server still starting). On a timeout, AssertionError says what
    was awaited, the last error if any, and `explain()` (if given) what the test could see then, so a
    failure on a machine we cannot watch tells where it stuck."""
    deadline = time.monotonic() + timeout
    error = None
    while True:
        try:
            value = fn()
        except Exception as exc:
            value, error = None, exc
        if value:
            return value
        if time.monotonic() >= deadline:
            seen = f"; last error: {type(error).__name__}: {error}" if error is not None else ""
            if explain is not None:
                try:
                    seen += f"; seen then: {explain()}"
                except Exception as exc:
                    seen += f"; seen then: nothing ({type(exc).__name__}: {exc})"
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}{seen}")
        time.sleep(interval)


def commit_predictions(at):
    """Press an AppTest page's "Commit my prediction" buttons, one question after another (each guess
    stays at its default), until the page asks nothing more: a lab shows its results only then."""
    for _ in range(4):
        button = next((b for b in at.button if b.key.endswith("__commit")), None)
        if button is None:
            break
        button.click().run()
    return at


def send_any_engine_load(at, requests: int, output_lo: int, output_hi: int, timeout: float, rerun: bool = False):
    """On an AppTest of the Any engine page, already connected: send `requests` requests and wait until all
    came back (rerunning the page meanwhile if `rerun`, as a live page would). Returns the load generator."""
    at.number_input(key="ext_num_requests").set_value(requests)
    at.number_input(key="ext_output_lo").set_value(output_lo)
    at.number_input(key="ext_output_hi").set_value(output_hi)
    at.button(key="ext_start").click().run()
    gen = at.session_state["ext_generator"]

    def answered() -> bool:
        if rerun:
            at.run()
        return len(gen.records) >= requests and not gen.in_flight
    wait_until(answered, timeout=timeout, what=f"{requests} answers", interval=0.5 if rerun else 0.2)
    at.run()
    return gen


BROWSER_PREFIX = "test_browser"      # test_browser*.py: the tests that drive a real Chromium


def pytest_collection_modifyitems(config, items):
    """The real-browser tests are marked `browser`: `make test` runs them after the rest, one at a time."""
    for item in items:
        if item.path.name.startswith(BROWSER_PREFIX):
            item.add_marker(pytest.mark.browser)


def pytest_configure(config):
    """The learners' database of every test run is a file of its own, never the user's
    (BATCHING_LAB_DB; apps a test starts inherit it unless the test names another).
    A pytest-xdist worker multiplies on one torch thread: two workers on two cores then share
    the machine without each spinning a second thread on the other's core."""
    import tempfile
    os.environ["BATCHING_LAB_DB"] = os.path.join(tempfile.mkdtemp(prefix="batching-lab-test-db-"), "learners.sqlite3")
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch
        torch.set_num_threads(1)
