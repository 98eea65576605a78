"""The learners' store (records/): schema and migrations, every fact back as written, values as
parameters, faults as StoreError, and 30 learners writing at once."""
import multiprocessing
import sqlite3
import threading

import pytest

from records import database
from records.class_table import LessonInfo, class_table, to_csv
from records.store import Store, StoreError

KNEE = {"question": "knee", "settings_key": "k1", "settings": (("requests", "200"),), "lab": "knee",
        "text": "At which max_num_seqs will the knee be?", "guess": "8", "guess_shown": "8"}


def test_a_new_file_gets_the_schema_in_wal_mode(tmp_path):
    store = Store(tmp_path / "a" / "learners.sqlite3")
    store.check()
    conn = sqlite3.connect(tmp_path / "a" / "learners.sqlite3")
    assert conn.execute("PRAGMA user_version").fetchone()[0] == database.VERSION
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"learners", "lessons_read", "quiz_tries", "predictions", "lab_runs"} <= tables


def test_an_older_file_is_migrated_and_a_newer_one_refused(tmp_path):
    old = tmp_path / "old.sqlite3"
    sqlite3.connect(old).execute("CREATE TABLE notes (x)")        # version 0: no tables of ours yet
    Store(old).touch("a" * 32)
    assert sqlite3.connect(old).execute("PRAGMA user_version").fetchone()[0] == database.VERSION
    new = tmp_path / "new.sqlite3"
    c = sqlite3.connect(new)
    c.execute(f"PRAGMA user_version = {database.VERSION + 1}")
    c.close()
    with pytest.raises(StoreError, match="newer|version"):
        Store(new).touch("a" * 32)


def test_the_path_comes_from_the_env_var_or_the_cache_folder(monkeypatch, tmp_path):
    monkeypatch.setenv(database.DB_ENV, str(tmp_path / "x.db"))
    assert database.db_path() == tmp_path / "x.db"
    monkeypatch.delenv(database.DB_ENV)
    monkeypatch.setenv("BATCHING_LAB_CACHE", str(tmp_path / "cache"))
    assert database.db_path() == tmp_path / "cache" / database.FILE_NAME


def test_everything_a_learner_did_comes_back(tmp_path):
    store, me = Store(tmp_path / "l.sqlite3"), "b" * 32
    store.touch(me)
    store.mark_read(me, "why-batch")
    store.add_try(me, "why-batch", 0, 2, 1)
    store.add_try(me, "why-batch", 0, 1, 1)
    store.commit_prediction(me, KNEE)
    store.reveal_prediction(me, "knee", "k1", "8", ("8", "16"), "8 and 16 (a tie)", "measured", "right: a tie", True)
    store.record_lab(me, "knee", (("requests", "200"),), {"knee": "8"})
    store.record_lab(me, "knee", (("requests", "200"),), {"tpot": "40 ms"})
    r = Store(tmp_path / "l.sqlite3").load(me)                     # a new process's store: the same file
    assert r.read == {"why-batch"} and r.tries == {("why-batch", 0): (1, [2, 1])}
    [p] = r.predictions
    assert (p["guess"], p["measured"], p["shown"], p["locked"], p["close"]) == ("8", ("8", "16"), "8 and 16 (a tie)",
                                                                                True, True)
    assert p["settings"] == [("requests", "200")]
    assert r.labs == {"knee": {"knee": "8", "tpot": "40 ms"}}


def test_names_and_values_are_parameters_never_sql(tmp_path):
    store, me = Store(tmp_path / "l.sqlite3"), "c" * 32
    evil = "Robert'); DROP TABLE learners; --"
    store.set_name(me, evil)
    store.commit_prediction(me, {**KNEE, "guess": evil, "guess_shown": evil, "settings": (("x'", "\"; --"),)})
    r = store.load(me)
    assert r.name == evil and r.predictions[0]["guess"] == evil and r.predictions[0]["settings"] == [("x'", "\"; --")]
    assert [row["name"] for row in store.class_rows()] == [evil]


def test_a_stale_tab_never_replaces_a_revealed_guess(tmp_path):
    """Two tabs of one learner: tab A committed and saw the answer; tab B, opened before, commits
    another guess for the same question and settings. A's locked guess and reveal stay."""
    store, me = Store(tmp_path / "l.sqlite3"), "d" * 32
    store.commit_prediction(me, KNEE)
    store.reveal_prediction(me, "knee", "k1", "8", "8", "8", "measured", "right", True)
    store.commit_prediction(me, {**KNEE, "guess": "64", "guess_shown": "64"})        # tab B, stale
    store.reveal_prediction(me, "knee", "k1", "64", "8", "8", "measured", "not what happened", False)
    [p] = store.load(me).predictions
    assert (p["guess"], p["verdict"], p["close"]) == ("8", "right", True)
    store.reveal_prediction(me, "knee", "k1", "8", "16", "16", "simulated", "no", False)   # never over a measurement
    assert store.load(me).predictions[0]["verdict"] == "right"


def test_set_aside_opens_a_new_guess_and_start_over_forgets(tmp_path):
    store, me = Store(tmp_path / "l.sqlite3"), "e" * 32
    store.commit_prediction(me, KNEE)
    store.set_aside(me, "knee")
    assert store.load(me).predictions == []
    store.commit_prediction(me, {**KNEE, "guess": "16"})
    assert [p["guess"] for p in store.load(me).predictions] == ["16"]
    store.mark_read(me, "why-batch")
    store.forget(me)
    r = store.load(me)
    assert (r.read, r.predictions, r.name) == (set(), [], None)
    n = sqlite3.connect(tmp_path / "l.sqlite3").execute("SELECT COUNT(*) FROM predictions").fetchone()[0]
    assert n == 0, "start over leaves none of the learner's rows"


# ----------------------------------------------------------------------------- faults


def test_a_locked_database_is_a_store_error_not_a_hang(tmp_path):
    path = tmp_path / "l.sqlite3"
    Store(path).check()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StoreError, match="busy|locked"):
            Store(path, timeout_s=0.2).mark_read("f" * 32, "why-batch")
    finally:
        holder.execute("ROLLBACK")
    Store(path, timeout_s=0.2).mark_read("f" * 32, "why-batch")       # free again: it works


def test_a_corrupt_file_is_a_store_error(tmp_path):
    path = tmp_path / "l.sqlite3"
    path.write_bytes(b"this is not a database, only some bytes " * 200)
    with pytest.raises(StoreError, match="damaged"):
        Store(path).load("a" * 32)


def test_a_read_only_database_is_a_store_error(tmp_path, monkeypatch):
    path = tmp_path / "l.sqlite3"
    Store(path).touch("a" * 32)
    real = database.connect
    monkeypatch.setattr(database, "connect", lambda p, t=5.0: _read_only(real, p))
    store = Store(path)
    assert store.load("a" * 32).read == set(), "reading still works"
    with pytest.raises(StoreError, match="read-only"):
        store.mark_read("a" * 32, "why-batch")


def _read_only(real, path):
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    conn.execute("PRAGMA busy_timeout = 1000")
    return conn


def test_a_full_database_is_a_store_error(tmp_path, monkeypatch):
    path = tmp_path / "l.sqlite3"
    Store(path).touch("a" * 32)
    real = database.connect

    def full(p, t=5.0):
        conn = real(p, t)
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages}")       # no room for one more page
        return conn
    monkeypatch.setattr(database, "connect", full)
    with pytest.raises(StoreError, match="full"):
        Store(path).commit_prediction("a" * 32, {**KNEE, "text": "x" * 200_000})


def test_a_place_that_cannot_hold_a_file_is_a_store_error():
    with pytest.raises(StoreError):
        Store("/proc/batching-lab/learners.sqlite3").touch("a" * 32)


# ----------------------------------------------------------------------------- many at once

N_LEARNERS, EACH = 30, 8


def _learner_work(path: str, i: int, timeout_s: float) -> list[str]:
    """What one learner does in a few minutes of a lesson and its lab, as fast as it can."""
    store, me, errors = Store(path, timeout_s=timeout_s), f"{i:032x}", []
    try:
        store.touch(me)
        store.set_name(me, f"student {i}")
        for k in range(EACH):
            q = {**KNEE, "question": f"q{k}", "settings_key": f"s{k}", "guess": str(k), "guess_shown": str(k)}
            store.commit_prediction(me, q)
            store.reveal_prediction(me, f"q{k}", f"s{k}", str(k), str(k), str(k), "measured", "right", True)
            store.add_try(me, "why-batch", k, k % 3, 1)
            store.record_lab(me, f"lab{k}", (("run", str(k)),), {"value": f"{k} s"})
            store.load(me)
        store.mark_read(me, "why-batch")
    except StoreError as exc:
        errors.append(str(exc))
    return errors


def _check_everyone(path) -> None:
    store = Store(path)
    for i in range(N_LEARNERS):
        r = store.load(f"{i:032x}")
        assert r.name == f"student {i}" and r.read == {"why-batch"}
        assert sorted(p["guess"] for p in r.predictions) == [str(k) for k in range(EACH)]
        assert all(p["locked"] for p in r.predictions)
        assert sorted(r.tries) == [("why-batch", k) for k in range(EACH)] and len(r.labs) == EACH
    assert len(store.class_rows()) == N_LEARNERS


def test_thirty_learners_in_threads_lose_nothing_and_never_see_locked(tmp_path):
    """One app process: every session's thread shares the process's store, as the pages do."""
    path, errors = str(tmp_path / "l.sqlite3"), []
    Store(path).check()
    threads = [threading.Thread(target=lambda i=i: errors.extend(_learner_work(path, i, database.TIMEOUT_S)))
               for i in range(N_LEARNERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    _check_everyone(path)


def test_thirty_learners_in_processes_lose_nothing_and_never_see_locked(tmp_path):
    """Several app processes on one file (each its own store)."""
    path = str(tmp_path / "l.sqlite3")
    with multiprocessing.get_context("fork").Pool(N_LEARNERS) as pool:
        errors = pool.starmap(_learner_work, [(path, i, database.TIMEOUT_S) for i in range(N_LEARNERS)])
    assert errors == [[]] * N_LEARNERS
    _check_everyone(path)


def test_the_teacher_table_and_its_csv():
    rows = [{"learner": "1", "name": "Ada", "read": {"why-batch"}, "first_tries": {("why-batch", 0): True,
                                                                                   ("why-batch", 1): False},
             "predictions": [("why_batch", "why_batch", True, True), ("why_batch", "why_batch_knee", True, False),
                             ("knee", "knee", False, False)]},
            {"learner": "2", "name": "=cmd()", "read": set(), "first_tries": {}, "predictions": []}]
    lessons = [LessonInfo("why-batch", "1 · Why batch", 3), LessonInfo("batch-policy", "6 · Batch policy", 3)]
    table = class_table(rows, lessons, {"why_batch": "why-batch", "why_batch_knee": "why-batch", "knee": "batch-policy"})
    assert table[0] == {"student": "Ada", "lesson": "1 · Why batch", "read": "yes", "predictions made": 2,
                        "revealed": 2, "close": 1, "quiz answered": "2 of 3", "quiz right first try": 1}
    assert (table[1]["lesson"], table[1]["predictions made"], table[1]["revealed"]) == ("6 · Batch policy", 1, 0)
    assert table[2]["student"] == "=cmd()" and table[2]["lesson"] == "—"
    text = to_csv(table)
    assert text.splitlines()[0].startswith("student,lesson,read,predictions made")
    assert "'=cmd()" in text, "a name a spreadsheet would run as a formula is quoted"
