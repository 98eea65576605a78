"""Settings: every BATCHING_LAB_* variable is read in engine/settings.py alone, and each reads as documented."""
import pathlib
import re
from pathlib import Path

import pytest

from engine import settings

ROOT = pathlib.Path(__file__).resolve().parents[1]
CODE = ["app.py", *(p for d in ("engine", "ui", "lessons", "labs", "playground", "remote", "records", "classroom",
                                 "app_pages", "replicas", "cluster", "course", "analysis")
                    for p in (ROOT / d).rglob("*.py") if (ROOT / d).is_dir())]
READ = re.compile(r"(environ(\.get)?\s*[\[(]|getenv\s*\()\s*['\"]BATCHING_LAB_")


def reads_outside_settings(files) -> list[str]:
    found = []
    for path in files:
        path = ROOT / path if not Path(path).is_absolute() else Path(path)
        if path.name == "settings.py" and path.parent.name == "engine":
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if READ.search(line):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    return found


def test_no_module_but_settings_reads_a_batching_lab_variable():
    assert reads_outside_settings(CODE) == []


def test_the_check_finds_a_read_elsewhere(tmp_path):
    stray = ROOT / "tests" / f"_stray_{tmp_path.name}.py"
    stray.write_text('import os\nroot = os.environ.get("BATCHING_LAB_CACHE")\n')
    try:
        assert len(reads_outside_settings([stray])) == 1
    finally:
        stray.unlink()


@pytest.mark.parametrize("given", [None, "", "   "])
def test_an_unset_or_empty_cache_means_the_default(monkeypatch, given):
    if given is None:
        monkeypatch.delenv(settings.CACHE, raising=False)
    else:
        monkeypatch.setenv(settings.CACHE, given)
    assert settings.cache_root() == Path.home() / ".cache" / "batching-lab"


def test_every_cache_user_shares_the_one_root(monkeypatch, tmp_path):
    from engine.runs import results
    from records import database
    monkeypatch.setenv(settings.CACHE, str(tmp_path))
    monkeypatch.delenv(settings.DB, raising=False)
    assert Path(results.cache_dir()) == tmp_path / "results"
    assert database.db_path() == tmp_path / database.FILE_NAME


def test_max_engines_says_what_is_allowed(monkeypatch):
    monkeypatch.setenv(settings.MAX_ENGINES, "zero")
    with pytest.raises(ValueError, match="BATCHING_LAB_MAX_ENGINES is 'zero': it must be a whole number, 1 or more"):
        settings.max_engines()
    monkeypatch.setenv(settings.MAX_ENGINES, "2")
    assert settings.max_engines() == 2
