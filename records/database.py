"""The learners' database: where its file lives, how a connection is opened, and its schema's migrations.

One SQLite file (WAL: readers never wait for the one writer, and a writer waits up to `timeout_s`
for another instead of failing at once). It lives in the project's cache folder as
`learners.sqlite3`, or wherever BATCHING_LAB_DB names. The schema's version is SQLite's own
`user_version`; `migrate` brings an older file up to date at start, in one transaction, and
refuses a file a newer version of the app made rather than guess at its tables.
"""
from __future__ import annotations

import sqlite3
from pathlib import Path

from engine import settings

DB_ENV = settings.DB
FILE_NAME = "learners.sqlite3"
TIMEOUT_S = 5.0          # how long a write waits for another writer before it gives up


def db_path() -> Path:
    """BATCHING_LAB_DB, or learners.sqlite3 in the cache folder (BATCHING_LAB_CACHE, ~/.cache/batching-lab)."""
    return settings.db_file() or settings.cache_root() / FILE_NAME


# Each entry turns version i into version i + 1. Never edit one that has shipped: add the next.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE learners (
        id        TEXT PRIMARY KEY,            -- random, kept in the learner's browser
        name      TEXT,                        -- the name typed in a classroom, else NULL
        created_s REAL NOT NULL,
        seen_s    REAL NOT NULL
    );
    CREATE TABLE lessons_read (
        learner TEXT NOT NULL REFERENCES learners(id) ON DELETE CASCADE,
        lesson  TEXT NOT NULL,
        at_s    REAL NOT NULL,
        PRIMARY KEY (learner, lesson)
    );
    CREATE TABLE quiz_tries (
        id       INTEGER PRIMARY KEY,
        learner  TEXT NOT NULL REFERENCES learners(id) ON DELETE CASCADE,
        lesson   TEXT NOT NULL,
        question INTEGER NOT NULL,             -- its place in the lesson's quiz, from 0
        choice   INTEGER NOT NULL,             -- the choice checked
        answer   INTEGER NOT NULL,             -- the right choice, as the learner saw the question
        at_s     REAL NOT NULL
    );
    CREATE INDEX quiz_tries_by_learner ON quiz_tries (learner, lesson, question, id);
    CREATE TABLE predictions (
        id           INTEGER PRIMARY KEY,
        learner      TEXT NOT NULL REFERENCES learners(id) ON DELETE CASCADE,
        question     TEXT NOT NULL,            -- course/predictions.py's id
        settings_key TEXT NOT NULL,            -- the question as asked: text, choices and settings
        settings     TEXT NOT NULL,            -- JSON: [[label, value], ...] it is scored on
        lab          TEXT NOT NULL,
        text         TEXT NOT NULL,
        guess        TEXT NOT NULL,            -- JSON
        guess_shown  TEXT NOT NULL,
        made_s       REAL NOT NULL,
        answer       TEXT,                     -- JSON; NULL until revealed
        answer_shown TEXT,
        source       TEXT,                     -- 'measured' or 'simulated'
        verdict      TEXT,
        close        INTEGER,                  -- 1 right or close, 0 not
        revealed_s   REAL,
        set_aside    INTEGER NOT NULL DEFAULT 0  -- 1 once a re-measure asked for a new guess
    );
    CREATE UNIQUE INDEX one_open_prediction ON predictions (learner, question, settings_key) WHERE set_aside = 0;
    CREATE TABLE lab_runs (
        id           INTEGER PRIMARY KEY,
        learner      TEXT NOT NULL REFERENCES learners(id) ON DELETE CASCADE,
        lab          TEXT NOT NULL,
        settings_key TEXT NOT NULL,
        settings     TEXT NOT NULL,            -- JSON: [[label, value], ...]
        headline     TEXT NOT NULL,            -- JSON: {name: "1.23 s"}, the numbers the lab showed
        at_s         REAL NOT NULL,
        UNIQUE (learner, lab, settings_key)
    );
    """,
)
VERSION = len(MIGRATIONS)


class NewerDatabase(sqlite3.DatabaseError):
    """The file's schema is newer than this code knows."""


def connect(path: Path | str, timeout_s: float = TIMEOUT_S) -> sqlite3.Connection:
    """A connection with the settings every use needs. The caller closes it."""
    conn = sqlite3.connect(str(path), timeout=timeout_s, isolation_level=None)   # transactions by hand
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute(f"PRAGMA busy_timeout = {int(timeout_s * 1000)}")
    return conn


def migrate(conn: sqlite3.Connection) -> int:
    """Bring the schema up to VERSION (WAL on); returns the version found before."""
    if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
        conn.execute("PRAGMA journal_mode = WAL")        # kept in the file: set once
    found = conn.execute("PRAGMA user_version").fetchone()[0]
    if found > VERSION:
        raise NewerDatabase(f"the learners' database is schema version {found}; this app knows up to {VERSION}")
    if found == VERSION:
        return found
    conn.execute("BEGIN IMMEDIATE")
    try:
        now = conn.execute("PRAGMA user_version").fetchone()[0]      # another process may have migrated it
        for script in MIGRATIONS[now:]:
            for statement in _statements(script):
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {VERSION}")      # a pragma takes no parameters; VERSION is ours
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return found


def _statements(script: str):
    """A script's statements one by one (executescript would commit the transaction first)."""
    buf = ""
    for piece in script.split(";"):
        buf += piece + ";"
        if sqlite3.complete_statement(buf):      # a ';' inside a comment or a string does not end it
            if buf.strip(" \n;"):
                yield buf
            buf = ""
