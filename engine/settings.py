"""Every setting the project reads from the environment, in one place.

Each BATCHING_LAB_* variable is named once here, with its default and what it does, and read by one
function at the moment it is needed (so a test, or a shell, that sets it later is heard). Nothing
else reads these variables. The engine imports no Streamlit and nothing above it, so every part of
the project (the app, the server, the tools, the tests) may import this module.

    BATCHING_LAB_CACHE             the cache folder: converted weights, profiles, cached runs, the
                                   learners' database (default ~/.cache/batching-lab; empty = default)
    BATCHING_LAB_DB                the learners' database file (default: learners.sqlite3 in the cache)
    BATCHING_LAB_MODEL             the app's model: smollm2 (default), tiny, or a Llama-family folder
    BATCHING_LAB_LESSONS_DIR       where the lesson texts are read from (default: lessons/)
    BATCHING_LAB_MAX_ENGINES       how many Playground runs may hold an engine at once (default 4)
    BATCHING_LAB_KERNELS           the CPU kernels' path: 1 (default: the widest this CPU runs), a
                                   path's name to force it, or 0 for none (engine/model/kernel_paths.py)
    BATCHING_LAB_CUDA_GRAPHS       0 turns CUDA graphs off for decode steps on a GPU (default 1)
    BATCHING_LAB_DEBUG             1 shows a CLI failure's traceback
    BATCHING_LAB_INSTRUCTOR_TOKEN  `engine serve`'s instructor token (default: a random one, printed)
    BATCHING_LAB_ENGINE_URL, _KIND, _MODEL, BATCHING_LAB_METRICS_URL, BATCHING_LAB_ALLOWED_ENGINES
                                   the engine the app attaches to (remote/attach.py says how)
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

CACHE = "BATCHING_LAB_CACHE"
DB = "BATCHING_LAB_DB"
MODEL = "BATCHING_LAB_MODEL"
LESSONS_DIR = "BATCHING_LAB_LESSONS_DIR"
MAX_ENGINES = "BATCHING_LAB_MAX_ENGINES"
KERNELS = "BATCHING_LAB_KERNELS"
CUDA_GRAPHS = "BATCHING_LAB_CUDA_GRAPHS"
DEBUG = "BATCHING_LAB_DEBUG"
INSTRUCTOR_TOKEN = "BATCHING_LAB_INSTRUCTOR_TOKEN"
ENGINE_URL = "BATCHING_LAB_ENGINE_URL"
ENGINE_KIND = "BATCHING_LAB_ENGINE_KIND"
ENGINE_MODEL = "BATCHING_LAB_ENGINE_MODEL"
METRICS_URL = "BATCHING_LAB_METRICS_URL"
ALLOWED_ENGINES = "BATCHING_LAB_ALLOWED_ENGINES"

DEFAULT_MODEL = "smollm2"
DEFAULT_MAX_ENGINES = 4


def value(name: str, environ: Mapping[str, str] | None = None) -> str:
    """The variable's value with surrounding blanks taken off; "" when it is unset."""
    return (os.environ if environ is None else environ).get(name, "").strip()


def cache_root() -> Path:
    """The project's one cache folder; an unset or empty BATCHING_LAB_CACHE means the default."""
    return Path(value(CACHE) or Path.home() / ".cache" / "batching-lab").expanduser()


def db_file() -> Path | None:
    """The learners' database BATCHING_LAB_DB names, or None for the cache folder's."""
    named = value(DB)
    return Path(named).expanduser() if named else None


def model_name() -> str:
    return value(MODEL) or DEFAULT_MODEL


def lessons_dir() -> Path | None:
    named = value(LESSONS_DIR)
    return Path(named) if named else None


def max_engines() -> int:
    named = value(MAX_ENGINES) or str(DEFAULT_MAX_ENGINES)
    if not (named.isdigit() and int(named) >= 1):
        raise ValueError(f"{MAX_ENGINES} is {named!r}: it must be a whole number, 1 or more")
    return int(named)


def kernels() -> str:
    """BATCHING_LAB_KERNELS in lower case; "1" (the widest path) when unset."""
    return value(KERNELS).lower() or "1"


def cuda_graphs() -> bool:
    return value(CUDA_GRAPHS) != "0"


def debug() -> bool:
    return value(DEBUG) == "1"


def instructor_token() -> str:
    """The token set for `engine serve`, or "" when none is (the server then makes one)."""
    return value(INSTRUCTOR_TOKEN)
