"""A Batching Lab server's controls over HTTP: the live policy, background load and reset.

Reading is open to anyone; a change needs the instructor token, and the server's refusal
(401 without it, 403 with a wrong one, 400 naming a bad knob) comes back as LabRefused
carrying the server's own message.
"""
from __future__ import annotations

import httpx2 as httpx


class LabRefused(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(f"{status}: {message}")
        self.status, self.message = status, message


class LabControl:
    def __init__(self, url: str, token: str = "", timeout_s: float = 10.0):
        self.url = url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s

    def policy(self) -> dict:
        return self._call("GET", "/lab/policy")

    def set_policy(self, **changes) -> dict:
        """Change some knobs from the server's next step; returns the whole new policy."""
        return self._call("PUT", "/lab/policy", changes)

    def load(self) -> dict:
        return self._call("GET", "/lab/load")

    def start_load(self, **workload) -> dict:
        """Background load from WorkloadSpec knobs (rate, num_requests, output_lo, ...)."""
        return self._call("PUT", "/lab/load", {"running": True, **workload})

    def stop_load(self) -> dict:
        return self._call("PUT", "/lab/load", {"running": False})

    def check_token(self) -> dict:
        """Whether this token is the instructor's: LabRefused (401 or 403) if not."""
        return self._call("GET", "/lab/instructor")

    def reset(self) -> dict:
        return self._call("POST", "/lab/reset")

    def _call(self, method: str, path: str, body: dict | None = None) -> dict:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        r = httpx.request(method, self.url + path, json=body, headers=headers, timeout=self.timeout_s)
        if r.status_code >= 400:
            try:
                message = r.json()["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = r.text[:200]
            raise LabRefused(r.status_code, message)
        return r.json()
