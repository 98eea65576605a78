"""tools/gpu_check on a machine without a CUDA GPU: every check runs on the CPU with the tiny
model, so the day a GPU is lent the script is known to run, and its table says what it skipped."""
import subprocess
import sys

CHECKS = ("greedy", "bench", "calibrate", "playground")


def test_the_gpu_check_runs_every_check_on_the_cpu_and_says_what_it_skipped():
    out = subprocess.run([sys.executable, "-m", "tools.gpu_check"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    table = [words for words in map(str.split, out.stdout.splitlines()) if len(words) > 2 and words[0] in CHECKS]
    rows = {words[0]: words[1] for words in table}           # check -> its status ("ok" or "FAILED")
    assert rows == dict.fromkeys(CHECKS, "ok"), out.stdout[-2000:]
    assert "GPU checks skipped (no CUDA GPU here)" in out.stdout
    assert "skipped on this machine: every check on CUDA" in out.stdout
