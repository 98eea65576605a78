"""Fixtures several test files share."""
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
