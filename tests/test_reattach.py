"""A run survives a page reload: the new session takes it over by the token in the address;
a run nobody takes over is closed after the grace period, and its KV pool freed."""
import gc
import time
import weakref
from functools import partial

import pytest
from streamlit.testing.v1 import AppTest

from engine.model.model import load_model
from playground.reattach import RunRegistry
from playground.run import PlaygroundRun
from playground.setup import Setup
from conftest import wait_until


class FakeRun:
    closed = False


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def owner(flag: dict):
    return lambda: flag["connected"]


def test_a_run_is_kept_while_its_page_is_gone_less_than_the_grace_period():
    clock, page = Clock(), {"connected": True}
    runs = RunRegistry(grace_s=60, clock=clock)
    runs.add("tok", FakeRun(), owner(page))
    assert runs.keeps("tok")
    page["connected"] = False                      # reloaded or closed
    clock.t = 10
    assert runs.keeps("tok")
    clock.t = 69.9
    assert runs.keeps("tok")
    clock.t = 70.0
    assert not runs.keeps("tok") and "tok" not in runs and not runs.keeps("tok")


def test_a_new_session_takes_the_run_over_and_the_grace_period_starts_again():
    clock, old, new = Clock(), {"connected": True}, {"connected": True}
    runs, run = RunRegistry(grace_s=60, clock=clock), FakeRun()
    runs.add("tok", run, owner(old))
    assert runs.take_over("tok", owner(new)) is None        # a shared link: its owner is still there
    old["connected"] = False
    clock.t = 50
    assert runs.keeps("tok")
    assert runs.take_over("tok", owner(new)) is run         # the reload's new session
    assert runs.take_over("nope", owner(new)) is None
    clock.t = 500
    assert runs.keeps("tok")                                # the new owner is connected
    new["connected"] = False
    assert runs.keeps("tok")
    clock.t = 561
    assert not runs.keeps("tok")


def test_closed_and_forgotten_runs_are_not_taken_over():
    runs, gone = RunRegistry(), {"connected": False}
    closed = FakeRun()
    closed.closed = True
    runs.add("a", closed, owner(gone))
    assert runs.take_over("a", owner({"connected": True})) is None
    runs.add("b", FakeRun(), owner(gone))                  # adding drops closed runs
    assert "a" not in runs and len(runs) == 1
    runs.forget("b")
    assert runs.take_over("b", owner({"connected": True})) is None and len(runs) == 0




def test_a_run_whose_page_never_comes_back_is_closed_after_the_grace_period():
    page = {"connected": True}
    runs = RunRegistry(grace_s=3.0)
    lab = PlaygroundRun(Setup(output_lo=4, output_hi=8), load_model("tiny"),
                        is_alive=partial(runs.keeps, "tok"))
    runs.add("tok", lab, owner(page))
    runner = weakref.ref(lab.live.engine.executor.runner)
    lab.start()
    assert wait_until(lambda: lab.steps_taken > 3)
    page["connected"] = False
    time.sleep(0.5)
    assert lab.live.thread_alive and lab.state == "running"     # still within the grace period
    assert wait_until(lambda: lab.closed and not lab.live.thread_alive, 20)
    gc.collect()
    assert runner() is None and lab.state == "stopped"


PAGE = """
import streamlit as st
from playground import controls, slot
from playground.setup import Setup

lab = slot.run()
if lab is None:
    lab = slot.new_run(Setup(output_lo=4, output_hi=8))
    lab.start()
controls.write_link(lab.setup, slot.token())
st.session_state["seen"] = id(lab)
"""


@pytest.fixture
def sessions(monkeypatch):
    """Browser sessions whose connection the test controls (AppTest has no server)."""
    monkeypatch.setenv("BATCHING_LAB_MODEL", "tiny")
    connected = {}

    def session_connected():
        key = len(connected)
        connected[key] = True
        return lambda: connected[key]

    monkeypatch.setattr("ui.session.session_connected", session_connected)
    return connected


def test_a_reloaded_page_continues_the_same_run(sessions):
    first = AppTest.from_string(PAGE, default_timeout=120)
    first.run()
    assert not first.exception, [e.value for e in first.exception]
    token = first.query_params["run"]
    token = token[0] if isinstance(token, list) else token
    lab = first.session_state["lab_run"]
    assert wait_until(lambda: lab.steps_taken > 2)

    shared = AppTest.from_string(PAGE, default_timeout=120)   # the link opened elsewhere meanwhile
    shared.query_params["run"] = token
    shared.run()
    other = shared.session_state["lab_run"]
    assert other is not lab                                    # its owner is still there
    other.close()

    sessions[0] = False                                        # the first page is reloaded
    steps = lab.steps_taken
    reloaded = AppTest.from_string(PAGE, default_timeout=120)
    reloaded.query_params["run"] = token
    reloaded.run()
    assert not reloaded.exception
    assert reloaded.session_state["lab_run"] is lab and reloaded.session_state["seen"] == id(lab)
    assert reloaded.query_params["run"] in (token, [token])
    assert lab.state == "running" and wait_until(lambda: lab.steps_taken > steps + 2)
    lab.close()
