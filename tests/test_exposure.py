"""Least exposure by default: the app listens on this machine unless the classroom asks for the
network (and says so), and a classroom's "Any engine" page reaches only the engine it is
attached to, unless the instructor allows more."""
import os
import subprocess
import tomllib
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from remote import attach

ROOT = Path(__file__).resolve().parent.parent
EXTERNAL = str(ROOT / "app_pages" / "external.py")


def make_dry_run(target: str) -> str:
    out = subprocess.run(["make", "-n", "-W", "requirements.txt", target], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_make_run_and_streamlit_listen_on_loopback():
    run = make_dry_run("run")
    assert "--server.address 127.0.0.1" in run and "0.0.0.0" not in run
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["server"]["address"] == "127.0.0.1"      # `streamlit run app.py` by hand too


def test_the_classroom_opts_in_to_the_network_and_says_so():
    classroom = make_dry_run("classroom")
    assert "--server.address 0.0.0.0" in classroom and "--host 0.0.0.0" in classroom
    assert "listen on every interface" in classroom
    assert "--trusted-client 127.0.0.1" in classroom


ATTACHED = {attach.URL_ENV: "http://10.1.2.3:8000"}


@pytest.mark.parametrize("url, env, allowed", [
    ("http://10.1.2.3:8000", ATTACHED, True),
    ("http://10.1.2.3:8000/metrics", ATTACHED, True),
    ("http://10.1.2.3:8001", ATTACHED, False),                   # another port of the same host
    ("http://169.254.169.254", ATTACHED, False),                 # a cloud's metadata service
    ("http://127.0.0.1:22", ATTACHED, False),
    ("https://10.1.2.3:8000", ATTACHED, False),
    ("http://10.1.2.3:notaport", ATTACHED, False),
    ("http://gpu:9000", {**ATTACHED, attach.ALLOWED_ENV: "http://gpu:9000, http://other:1"}, True),
    ("http://169.254.169.254", {**ATTACHED, attach.ALLOWED_ENV: "*"}, True),
    ("http://169.254.169.254", {}, True),                        # an app of its own: its user's choice
])
def test_a_classroom_app_reaches_only_its_engine(url, env, allowed):
    if allowed:
        attach.check_reachable(url, env)
    else:
        with pytest.raises(ValueError, match=f"reaches only that engine.*{attach.ALLOWED_ENV}"):
            attach.check_reachable(url, env)


def test_the_any_engine_page_refuses_other_addresses_in_a_classroom(monkeypatch):
    monkeypatch.setenv(attach.URL_ENV, "http://127.0.0.1:9")        # attached (nothing needs to listen)
    monkeypatch.delenv(attach.ALLOWED_ENV, raising=False)
    at = AppTest.from_file(EXTERNAL, default_timeout=30).run()
    at.text_input(key="ext_url").set_value("http://127.0.0.1:22")
    at.button[0].click().run()
    assert at.error and "is not allowed" in at.error[0].value and not at.exception
    assert "ext_choice" not in at.session_state
    at.text_input(key="ext_url").set_value("http://127.0.0.1:9")
    at.text_input(key="ext_metrics").set_value("http://169.254.169.254/latest")
    at.button[0].click().run()
    assert at.error and "not allowed" in at.error[0].value and "169" in at.error[0].value
    monkeypatch.setenv(attach.ALLOWED_ENV, "http://127.0.0.1:22")
    at.text_input(key="ext_url").set_value("http://127.0.0.1:22")
    at.text_input(key="ext_metrics").set_value("")
    at.button[0].click().run()
    assert at.error and "is not allowed" not in at.error[0].value     # allowed: it fails to connect instead
    assert "Could not connect" in at.error[0].value
