"""Results that survive: Ctrl-C and SIGTERM mid-run leave a complete output folder marked partial,
a re-used --out folder is replaced whole (never half old, half new, even when the run is killed),
and a bad --out is refused before the run starts."""
import csv
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILES = ("requests.csv", "steps.csv", "summary.json")
# A run on the real (tiny) model that lasts far longer than the test: arrivals over 20 s.
LONG_TINY = ["--model", "tiny", "--device", "cpu", "--num-requests", "400", "--rate", "20",
             "--prompt-len", "16", "64", "--output-len", "30", "60"]
FIRST_STEP = re.compile(rb"\| *[1-9][0-9]*/[0-9]+ \[")     # tqdm after a step: "| 12/17000 ["
# The CLI, killed (os._exit: no cleanup, like SIGKILL) once requests.csv is written and the rest is not.
KILLED_MID_WRITE = """
import os, sys
import engine.cli.run as run
from engine.core.metrics import REQUEST_COLUMNS, request_row
from engine.runs.run_files import write_csv
def write_one_file_then_die(out_dir, requests, steps, summary):
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "requests.csv"), "w", newline="") as f:
        write_csv(f, (request_row(r) for r in requests), REQUEST_COLUMNS)
    os._exit(137)
run.write_run = write_one_file_then_die
from engine.cli import main
sys.exit(main(sys.argv[1:]))
"""


class Run:
    """`python -m engine run` in a subprocess, its stderr collected as it comes."""

    def __init__(self, out, *flags):
        self.proc = subprocess.Popen([sys.executable, "-m", "engine", "run", "--out", str(out), *flags],
                                     cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.err = b""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        while chunk := os.read(self.proc.stderr.fileno(), 4096):
            self.err += chunk

    def wait_for(self, pattern, timeout=120):
        end = time.monotonic() + timeout
        while not pattern.search(self.err):
            assert self.proc.poll() is None, self.err.decode(errors="replace")
            assert time.monotonic() < end, self.err.decode(errors="replace")
            time.sleep(0.02)

    def finish(self, timeout=60):
        rc = self.proc.wait(timeout)
        self._reader.join(5)
        self.proc.stdout.close()
        self.proc.stderr.close()
        return rc


def consistent_folder(out):
    """The folder holds one whole run: every file present, and the rows agree with summary.json."""
    assert sorted(p for p in os.listdir(out) if p in FILES) == sorted(FILES)
    summary = json.load(open(out / "summary.json"))
    rows = list(csv.DictReader(open(out / "requests.csv")))
    steps = list(csv.DictReader(open(out / "steps.csv")))
    assert len(rows) == summary["requests"]
    for status in ("finished", "rejected", "failed", "aborted"):
        assert sum(r["status"] == status for r in rows) == summary[status], status
    assert len(rows) == sum(summary[s] for s in ("finished", "rejected", "failed", "aborted"))
    assert len(steps) == summary["steps"]
    assert sum(int(r["output_tokens"]) for r in rows) == summary["output_tokens"]
    return summary, rows


def no_temporary_folders(parent):
    return not [p for p in os.listdir(parent) if ".tmp-" in p]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_mid_run_writes_a_complete_partial_folder(sig, tmp_path):
    out = tmp_path / "out"
    run = Run(out, *LONG_TINY)
    run.wait_for(FIRST_STEP)
    time.sleep(0.5)
    run.proc.send_signal(sig)
    sent = time.monotonic()
    rc = run.finish()
    assert time.monotonic() - sent < 15, "the run took too long to stop"  # its arrivals go on for 20 s
    assert rc == 128 + sig, run.err.decode(errors="replace")
    assert b"Traceback" not in run.err
    summary, rows = consistent_folder(out)
    assert summary["partial"] is True and summary["requests"] == 400
    assert summary["steps"] > 0 and summary["aborted"] > 0
    aborted = [r for r in rows if r["status"] == "aborted"]
    assert all(signal.Signals(sig).name in r["error"] for r in aborted)
    assert len((out / "workload.jsonl").read_text().splitlines()) == 400       # requests in = rows out
    assert no_temporary_folders(tmp_path)


def test_a_complete_run_is_not_partial_and_replaces_the_previous_one(tmp_path):
    out = tmp_path / "out"
    first = Run(out, "--cost-model", "--num-requests", "40", "--rate", "0")
    assert first.finish() == 0
    assert consistent_folder(out)[0]["partial"] is False
    second = Run(out, "--cost-model", "--num-requests", "7", "--rate", "0")
    assert second.finish() == 0
    summary, _ = consistent_folder(out)
    assert summary["requests"] == 7 and summary["partial"] is False
    assert no_temporary_folders(tmp_path)


def test_reused_out_folder_is_never_a_mix_of_two_runs(tmp_path):
    out = tmp_path / "out"
    assert Run(out, "--cost-model", "--num-requests", "30", "--rate", "0").finish() == 0
    before = (out / "summary.json").read_bytes()

    # killed outright between writing its first file and the others: the previous run stays, whole
    dying = subprocess.run([sys.executable, "-c", KILLED_MID_WRITE, "run", "--out", str(out), "--cost-model",
                            "--num-requests", "7", "--rate", "0"], cwd=ROOT, capture_output=True, timeout=60)
    assert dying.returncode == 137, dying.stderr
    consistent_folder(out)
    assert (out / "summary.json").read_bytes() == before

    # stopped mid-run by SIGTERM: the partial run replaces the previous one whole
    tiny = Run(out, *LONG_TINY)
    tiny.wait_for(FIRST_STEP)
    tiny.proc.send_signal(signal.SIGTERM)
    assert tiny.finish() == 143
    summary, _ = consistent_folder(out)
    assert summary["partial"] is True and summary["config"]["model"] == "tiny" and summary["requests"] == 400

    # killed outright mid-run: the partial run stays, whole
    after = (out / "summary.json").read_bytes()
    killed = Run(out, *LONG_TINY)
    killed.wait_for(FIRST_STEP)
    killed.proc.kill()
    killed.finish()
    consistent_folder(out)
    assert (out / "summary.json").read_bytes() == after


def test_second_ctrl_c_quits_without_writing_and_leaves_nothing_half_made(tmp_path):
    out = tmp_path / "out"
    run = Run(out, *LONG_TINY)
    run.wait_for(FIRST_STEP)
    run.proc.send_signal(signal.SIGINT)
    run.proc.send_signal(signal.SIGINT)
    assert run.finish() == 130
    assert b"Traceback" not in run.err
    if out.exists():                   # the first signal may have been served before the second came
        assert consistent_folder(out)[0]["partial"] is True
    assert no_temporary_folders(tmp_path)


@pytest.mark.parametrize("kind", ["file", "under-a-file", "someone-elses-folder"])
def test_bad_out_is_refused_before_the_model_loads(kind, tmp_path):
    (tmp_path / "results.txt").write_text("keep me")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me too")
    out = {"file": tmp_path / "results.txt", "under-a-file": tmp_path / "results.txt" / "run",
           "someone-elses-folder": tmp_path / "mine"}[kind]
    t0 = time.monotonic()
    run = Run(out, "--model", "smollm2", "--device", "cpu", "--num-requests", "2")
    rc = run.finish()
    err = run.err.decode()
    assert rc == 2 and err.strip().splitlines()[-1].startswith("error: --out"), err
    assert "loading" not in err and "Traceback" not in err
    assert time.monotonic() - t0 < 10
    assert (tmp_path / "results.txt").read_text() == "keep me"
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me too"
    assert no_temporary_folders(tmp_path)


# ----------------------------------------------------------------------------- a finished run is never lost


def cost_model_run(out, *flags):
    """An in-process run on the cost model (no model to load): its exit status and stderr."""
    import contextlib
    import io
    from engine.cli import main
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main(["run", "--out", str(out), "--cost-model", "--rate", "0", *flags])
    return rc, err.getvalue()


@pytest.fixture
def mount_point(tmp_path):
    """A real mount point (a small tmpfs), as a container's volume is; skipped where mounting is not allowed."""
    where = tmp_path / "volume"
    where.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(where)],
                                           capture_output=True).returncode != 0:
        pytest.skip("mounting needs root")
    yield where
    subprocess.run(["umount", str(where)])


def test_out_on_a_mount_point_gets_its_files_in_place(mount_point):
    for n in (9, 4):                        # a first run, then one that replaces it
        rc, err = cost_model_run(mount_point, "--num-requests", str(n))
        assert rc == 0, err
        summary, _ = consistent_folder(mount_point)
        assert summary["requests"] == n
        assert "mount point" in err
        assert sorted(os.listdir(mount_point)) == ["requests.csv", "steps.csv", "summary.json", "workload.jsonl"]


def test_when_renames_fail_the_files_are_moved_in_one_by_one_and_the_marker_last(tmp_path, monkeypatch):
    """The swap of two folders fails (EBUSY, as for a mount point found late): the run's files
    go into --out one at a time, the old summary.json first out and the new one last in."""
    import errno
    from engine.cli import out_dir
    out = tmp_path / "out"
    assert cost_model_run(out, "--num-requests", "5")[0] == 0
    real_rename, real_replace, order = os.rename, os.replace, []

    def busy(src, dst):
        if os.path.isdir(src):
            raise OSError(errno.EBUSY, "Device or resource busy")
        real_rename(src, dst)

    def noted(src, dst):
        order.append(os.path.basename(dst))
        real_replace(src, dst)
    monkeypatch.setattr(out_dir.os, "rename", busy)
    monkeypatch.setattr(out_dir.os, "replace", noted)
    rc, err = cost_model_run(out, "--num-requests", "3")
    assert rc == 0 and "could not be renamed into place (Device or resource busy)" in err, err
    assert consistent_folder(out)[0]["requests"] == 3
    assert order[-1] == "summary.json" and len(order) == 4
    assert no_temporary_folders(tmp_path)


def test_when_nothing_can_be_placed_the_run_is_kept_and_the_error_says_where(tmp_path, monkeypatch):
    from engine.cli import out_dir
    out = tmp_path / "out"

    def refused(*_):
        raise OSError(13, "Permission denied")
    monkeypatch.setattr(out_dir.os, "rename", refused)
    monkeypatch.setattr(out_dir.os, "replace", refused)
    monkeypatch.setattr(out_dir.shutil, "copyfile", refused)
    rc, err = cost_model_run(out, "--num-requests", "3")
    assert rc == 2 and "the run finished, but its files could not be put into --out" in err, err
    kept = err.split("they are kept in ")[1].split()[0]
    assert os.path.isdir(kept) and sorted(os.listdir(kept)) == ["requests.csv", "steps.csv", "summary.json",
                                                                 "workload.jsonl"]


def test_leftovers_of_killed_runs_are_tidied_and_said(tmp_path):
    out = tmp_path / "out"
    assert cost_model_run(out, "--num-requests", "3")[0] == 0
    dead = tmp_path / ".out.tmp-999999999-abc"                 # a run killed mid-way: its process is gone
    dead.mkdir()
    (dead / "requests.csv").write_text("half")
    live = tmp_path / f".out.tmp-{os.getppid()}-xyz"            # a run of a live process: not ours to touch
    live.mkdir()
    (out / ".tmp-999999999-q").write_text("a file half moved in")
    rc, err = cost_model_run(out, "--num-requests", "4")
    assert rc == 0, err
    assert not dead.exists() and live.exists() and not (out / ".tmp-999999999-q").exists()
    assert err.count("left by an interrupted run") == 2
    # killed between the two renames: --out is gone and the previous run waits aside; it is put back
    os.rename(out, tmp_path / ".out.tmp-999999999-def-old")
    rc, err = cost_model_run(tmp_path / "other", "--num-requests", "2")      # another --out: not touched
    assert not out.exists()
    rc, err = cost_model_run(out, "--num-requests", "2")
    assert rc == 0 and "put back the previous run" in err and consistent_folder(out)[0]["requests"] == 2
    assert no_temporary_folders(tmp_path) is False and sorted(p.name for p in tmp_path.iterdir()
                                                               if ".tmp-" in p.name) == [live.name]


def test_nothing_served_exits_3_and_summary_is_strict_json(tmp_path):
    w = tmp_path / "w.jsonl"
    w.write_text('{"id": "a", "prompt_token_ids": []}\n{"id": "b", "prompt_token_ids": [5], "tenant": "x\\ud800"}\n')
    out = tmp_path / "out"
    rc, err = cost_model_run(out, "--workload", str(w))
    assert rc == 3 and "nothing was served: none of the 2 requests finished (2 rejected" in err, err

    def no_constants(name):
        raise ValueError(f"{name} is not JSON")
    summary = json.loads((out / "summary.json").read_text(), parse_constant=no_constants)
    assert summary["ttft_s"]["p50"] is None and summary["finished"] == 0


def test_text_the_files_cannot_encode_is_escaped_not_fatal(tmp_path):
    """Whatever reaches the writers (a Request built in code, not through validation), the run is written."""
    from engine.core.metrics import summarize
    from engine.runs.run_files import write_run
    from engine.core.request import Request
    r = Request("r\ud800", [5], 2, tenant="t\udfff")
    write_run(str(tmp_path), [r], [], summarize([r], []))
    text = (tmp_path / "requests.csv").read_text()
    assert "r\\ud800" in text and "t\\udfff" in text
    json.loads((tmp_path / "summary.json").read_text())
