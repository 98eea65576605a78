"""The command line: its policy and workload flags are generated from the knobs, and keep
the spellings they always had."""
import json

import pytest

from engine.cli import main, parser
from engine.cli.flags import RANGE_FLAGS, policy_from, spec_from
from engine.core.config import SchedulerPolicy
from engine.core.knobs import knobs_of
from engine.runs.workload import WorkloadSpec

RUN = ["run", "--out", "unused", "--cost-model"]


def other_value(k):
    """A valid value for knob `k` that is not its default, and its spelling on the command line."""
    if k.kind == "choice":
        value = next(c for c in k.choices if c != k.default)
        return value, [value]
    if k.kind == "int":
        value = k.default + 1 if k.default + 1 <= k.hi else k.default - 1
    else:
        value = k.default + k.step if k.default + k.step <= k.hi else k.default - k.step
    return value, [str(value)]


@pytest.mark.parametrize("cls", [SchedulerPolicy, WorkloadSpec])
def test_every_knob_has_a_flag_that_sets_it(cls):
    in_a_range = {name: flag for flag, pair in RANGE_FLAGS.items() for name in pair}
    for name, k in knobs_of(cls).items():
        if k.kind == "bool":
            value = not k.default
            argv = [k.cli_flag if value else "--no-" + k.cli_flag[2:]]
        elif name in in_a_range:
            flag = in_a_range[name]
            lo, hi = (knobs_of(cls)[n] for n in RANGE_FLAGS[flag])
            value = lo.default + 1 if name == lo.name else hi.default + 1
            pair = [lo.default + 1, hi.default] if name == lo.name else [lo.default, hi.default + 1]
            argv = [flag, *map(str, pair)]
        else:
            value, spelled = other_value(k)
            argv = [k.cli_flag, *spelled]
        args = parser().parse_args(RUN + argv)
        built = policy_from(args) if cls is SchedulerPolicy else spec_from(args)
        assert getattr(built, name) == value, (name, argv)


def test_defaults_are_the_knobs_defaults():
    args = parser().parse_args(RUN)
    assert policy_from(args) == SchedulerPolicy()
    assert spec_from(args) == WorkloadSpec()


def test_the_old_spellings_still_parse():
    args = parser().parse_args(RUN + [
        "--mode", "static", "--max-num-seqs", "3", "--max-wait-ms", "20", "--max-num-batched-tokens", "64",
        "--no-enable-chunked-prefill", "--long-prefill-token-threshold", "32", "--order", "sjf",
        "--kv-capacity-tokens", "1024", "--max-waiting", "5", "--ttft-slo-s", "1.5", "--tpot-slo-s", "0.2",
        "--num-requests", "7", "--rate", "2.5", "--burstiness", "3", "--prompt-dist", "longtail",
        "--prompt-len", "10", "20", "--output-dist", "fixed", "--output-len", "4", "5", "--tenants", "2",
        "--seed", "9", "--workload", "w.jsonl", "--allowed-tenants", "a,b", "--kv-pool-tokens", "2048",
        "--model", "tiny", "--device", "cpu", "--dtype", "fp32"])
    assert policy_from(args) == SchedulerPolicy(
        mode="static", max_num_seqs=3, max_wait_ms=20.0, max_num_batched_tokens=64, enable_chunked_prefill=False,
        long_prefill_token_threshold=32, order="sjf", kv_capacity_tokens=1024, max_waiting=5, ttft_slo_s=1.5,
        tpot_slo_s=0.2)
    assert spec_from(args) == WorkloadSpec(
        num_requests=7, rate=2.5, burstiness=3.0, prompt_kind="longtail", prompt_lo=10, prompt_hi=20,
        output_kind="fixed", output_lo=4, output_hi=5, tenants=2, seed=9)
    assert (args.workload, args.allowed_tenants, args.kv_pool_tokens, args.model, args.device, args.dtype) == \
        ("w.jsonl", "a,b", 2048, "tiny", "cpu", "fp32")


def test_step_priority_reaches_the_run(tmp_path):
    out = tmp_path / "run"
    assert main(["run", "--cost-model", "--out", str(out), "--num-requests", "6", "--rate", "0",
                 "--step-priority", "prefill_first"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["policy"]["step_priority"] == "prefill_first"
    assert summary["finished"] == 6


def read_csv(path):
    import csv
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_simulate_writes_the_run_files_and_says_they_are_simulated(tmp_path, capsys):
    from engine.core.metrics import REQUEST_COLUMNS, STEP_COLUMNS
    out = tmp_path / "sim"
    assert main(["run", "--simulate", "--profile", "h100-sxm:llama-3.1-8b", "--out", str(out),
                 "--num-requests", "20", "--rate", "5"]) == 0
    requests, steps = read_csv(out / "requests.csv"), read_csv(out / "steps.csv")
    assert list(requests[0]) == REQUEST_COLUMNS and list(steps[0]) == STEP_COLUMNS
    assert len(requests) == 20 and all(r["status"] == "finished" and r["output_token_ids"] for r in requests)
    assert all(r["output_text"] == "" for r in requests)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["simulated"] is True and summary["profile_name"] == "h100-sxm:llama-3.1-8b"
    assert summary["profile"].startswith("roofline model:") and "H100 SXM" in summary["device"]
    assert "stand-ins" in summary["token_ids"]
    assert "simulated with the roofline model" in capsys.readouterr().out


def test_the_hand_set_cost_model_is_labelled_as_such(tmp_path):
    out = tmp_path / "cost"
    assert main(["run", "--cost-model", "--out", str(out), "--num-requests", "3", "--rate", "0"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["simulated"] is True and summary["profile_name"] == "hand-set"
    assert "uncalibrated" in summary["profile"]


def test_simulate_without_a_calibrated_profile_says_how_to_get_one(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("BATCHING_LAB_CACHE", str(tmp_path / "empty-cache"))
    assert main(["run", "--simulate", "--out", str(tmp_path / "x"), "--num-requests", "2"]) == 2
    err = capsys.readouterr().err
    assert "python -m engine calibrate" in err and "--profile" in err and not (tmp_path / "x").exists()
    assert main(["validate-sim"]) == 2
    assert "python -m engine calibrate" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--profile", "hand-set"], "add --simulate"),
    (["--simulate", "--cost-model"], "give one or the other"),
    (["--simulate", "--profile", "h200:llama-3.1-8b"], "neither a profile file nor a roofline model"),
    (["--simulate", "--profile", "l4:llama-3.1-8b", "--kv-capacity-tokens", "60000"], r"allowed 1 to \d+"),
])
def test_simulate_flags_are_checked(tmp_path, capsys, argv, message):
    import re
    assert main(["run", "--out", str(tmp_path / "x"), "--num-requests", "2", *argv]) == 2
    assert re.search(message, capsys.readouterr().err)


def test_the_cli_route_checks_the_policy_once(tmp_path, monkeypatch):
    """Flags -> policy -> engine -> scheduler: the scheduler, the live policy's one owner, checks it;
    nothing on the way checks it again. A bad value is still refused, naming the knob."""
    from engine.core.config import SchedulerPolicy
    calls = []
    check = SchedulerPolicy.validate
    monkeypatch.setattr(SchedulerPolicy, "validate", lambda self: calls.append(1) or check(self))
    assert main(["run", "--cost-model", "--out", str(tmp_path / "once"), "--num-requests", "3", "--rate", "0"]) == 0
    assert len(calls) == 1
    assert main(["run", "--cost-model", "--out", str(tmp_path / "bad"), "--num-requests", "3",
                 "--prompt-lookup-min", "5", "--prompt-lookup-max", "3"]) == 2
    assert not (tmp_path / "bad").exists()
