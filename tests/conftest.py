"""Fixtures several test files share, and the `browser` mark `make test` splits its run by."""
import os

import pytest

from engine.model.model import cache_root


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
