"""`python -m engine serve` as a child process: started on a free port, waited for, stopped.

    with launched(["--model", "tiny"]) as server:
        httpx.get(server.url + "/v1/models")

(`start` and `Launched.wait_until_up` are its two halves, for several servers started at once.)
The one way the project's tools, tests and real replicas start a server. The child's output
(stdout and stderr, where the start-up lines go) is written to `log`, or to a temporary file
removed at the end; a server that exits while starting, or is not up within `timeout_s`, raises
ServerNotStarted with the last lines of that output: a bad flag reads as the server's own error,
never a hang.
On the way out the server gets SIGTERM (it ends its streams, then stops), and SIGKILL only if it
has not stopped within `stop_timeout_s`; either way it is reaped.
"""
from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]       # the project's root: `-m engine` is found from here
TAIL_CHARS = 3000                                # how much of the server's output an error carries


class ServerNotStarted(RuntimeError):
    """`engine serve` exited while starting, or did not answer /health in time (it is stopped)."""

    def __init__(self, message: str, process: subprocess.Popen):
        super().__init__(message)
        self.process = process


@dataclass(frozen=True)
class Launched:
    """A started `engine serve` process."""
    url: str                    # http://ADDRESS:PORT, an address this machine reaches it on
    port: int
    process: subprocess.Popen
    log: Path                   # the server's stdout and stderr
    own_log: bool = False       # a temporary file of ours, removed when the server stops

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_until_up(self, timeout_s: float = 300) -> None:
        """Until /health answers 200; ServerNotStarted (the server stopped) if it exits or times out."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self.process.poll() is not None:
                self._give_up(f"exited with status {self.process.returncode} while starting ({self.url})")
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return
            if time.monotonic() > deadline:
                self._give_up(f"did not answer {self.url}/health within {timeout_s:g} s")
            time.sleep(0.3)

    def stop(self, timeout_s: float = 30, keep_log: bool = False) -> None:
        """SIGTERM, then SIGKILL if it has not stopped within timeout_s; reaped either way. A log of
        our own making goes with it."""
        stop_process(self.process, timeout_s)
        if self.own_log and not keep_log:
            self.log.unlink(missing_ok=True)

    def _give_up(self, what: str):
        self.stop(keep_log=True)          # its last words are in the log by then
        try:
            tail = self.output()[-TAIL_CHARS:] or "(nothing)"
        except OSError as exc:
            tail = f"(its log {self.log} could not be read: {exc})"
        if self.own_log:
            self.log.unlink(missing_ok=True)
        raise ServerNotStarted(f"`engine serve` {what}; its output ends:\n{tail}", self.process)


def stop_process(process: subprocess.Popen, timeout_s: float = 30) -> None:
    """SIGTERM, then SIGKILL if it has not stopped within timeout_s; reaped either way."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
    process.wait()


def free_port() -> int:
    """A port of 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(flags=(), host: str = "127.0.0.1", port: int | None = None, env: dict | None = None,
          log: str | Path | None = None, python: str = sys.executable) -> Launched:
    """`engine serve --host HOST --port PORT FLAGS` started (a free port unless `port` is given), not
    waited for; `env` is added to this process's environment. Several started at once start together."""
    port = free_port() if port is None else port
    own_log = log is None
    if own_log:
        fd, log = tempfile.mkstemp(prefix="engine-serve-", suffix=".log")
        os.close(fd)
    log = Path(log)
    reach = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host     # a wildcard address is reached on loopback
    url = f"http://{'[' + reach + ']' if ':' in reach else reach}:{port}"
    cmd = [python, "-m", "engine", "serve", "--host", host, "--port", str(port), *map(str, flags)]
    with open(log, "w") as out:
        process = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, **(env or {})}, stdout=out,
                                   stderr=subprocess.STDOUT)
    return Launched(url, port, process, log, own_log)


@contextlib.contextmanager
def launched(flags=(), host: str = "127.0.0.1", port: int | None = None, env: dict | None = None,
             log: str | Path | None = None, timeout_s: float = 300, stop_timeout_s: float = 30):
    """A server started and up (start, then wait_until_up), stopped and reaped on the way out."""
    server = start(flags, host, port, env, log)
    try:
        server.wait_until_up(timeout_s)
        yield server
    finally:
        server.stop(stop_timeout_s)
