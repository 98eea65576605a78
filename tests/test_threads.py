"""engine/model/threads.py: set-up on a passing thread, and the engine's threads named and deprioritised for the OS."""
import os
import sys
import threading

import pytest

from engine.model.threads import OS_THREAD_NAME, in_passing_thread, lower_os_priority, name_os_thread


def comm(tid: int) -> str:
    with open(f"/proc/self/task/{tid}/comm") as f:
        return f.read().strip()


def on_a_thread_and_its_child(set_up, read) -> dict:
    """On a new thread ("engine"): set_up(), then start a thread of its own ("child"). What
    read(native thread id) gives on each."""
    seen = {}

    def child():
        seen["child"] = read(threading.get_native_id())

    def engine_thread():
        set_up()
        seen["engine"] = read(threading.get_native_id())
        t = threading.Thread(target=child)
        t.start()
        t.join()

    t = threading.Thread(target=engine_thread)
    t.start()
    t.join()
    return seen


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="thread names in /proc are Linux's")
def test_a_named_thread_and_the_threads_it_starts_carry_the_engine_name():
    seen = on_a_thread_and_its_child(name_os_thread, comm)
    assert seen == {"engine": OS_THREAD_NAME, "child": OS_THREAD_NAME}
    assert comm(threading.get_native_id()) != OS_THREAD_NAME       # the caller's own name is untouched


def test_set_up_on_a_passing_thread_returns_its_value_or_raises_its_error():
    assert in_passing_thread(lambda a, b=0: a + b, 2, b=3) == 5
    with pytest.raises(ZeroDivisionError):
        in_passing_thread(lambda: 1 / 0)
    assert in_passing_thread(threading.get_native_id) != threading.get_native_id()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux's")
def test_a_thread_that_lowers_its_priority_passes_it_to_its_threads_and_not_to_its_caller():
    nice = lambda tid: os.getpriority(os.PRIO_PROCESS, tid)
    base = nice(threading.get_native_id())
    seen = on_a_thread_and_its_child(lambda: lower_os_priority(5), nice)
    assert seen == {"engine": min(19, base + 5), "child": min(19, base + 5)}
    assert nice(threading.get_native_id()) == base


def test_importing_the_engine_sets_a_bounded_spin_before_torch_loads_and_keeps_a_hand_set_policy():
    import subprocess
    code = ("import os, engine, torch; torch.ones(4096, 4096).sum(); "
            "print(os.environ.get('GOMP_SPINCOUNT'), os.environ.get('OMP_WAIT_POLICY'))")
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    run = lambda **extra: subprocess.run([sys.executable, "-c", code], env={**env, **extra}, text=True,
                                         capture_output=True, check=True).stdout.split()
    from engine import SPIN_COUNT
    assert run() == [SPIN_COUNT, "None"]
    assert run(OMP_WAIT_POLICY="PASSIVE") == ["None", "PASSIVE"]
    assert run(GOMP_SPINCOUNT="7") == ["7", "None"]
