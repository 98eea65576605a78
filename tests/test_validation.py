"""Nothing bad gets in: a table of bad requests and bad settings, each refused with a reason that
names the field, the value and what is allowed.

The request table becomes one workload file, run once through the CLI per model (cost model,
tiny, SmolLM2): every bad line is a rejected row with its reason, the good lines beside them
still finish, and requests in = rows out. The settings table runs the CLI in-process: each bad
flag or path is one "error: ..." line, status 2, no traceback, and no output folder.
"""
import csv
import json
import math
import os
import subprocess
import sys

import pytest

from engine.cli import main
from engine.core.validation import Limits, request_from_dict
from engine.core.validation import unique_keys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (row id, the line as written, what the reason must say). Row id None: the line has no usable id,
# so its row is filed as "line<N>". A line given as a str is written as is (NaN, Infinity, bad JSON).
GOOD = [
    ("good1", {"id": "good1", "prompt_token_ids": [5, 6, 7], "max_new_tokens": 3}, None),
    ("good-sampled", {"id": "good-sampled", "prompt_token_ids": [5, 6], "max_new_tokens": 3,
                      "temperature": 0.8, "top_p": 0.9, "seed": 7}, None),
    ("good-top-id", {"id": "good-top-id", "prompt_token_ids": [0, 49151], "max_new_tokens": 2,
                     "ignore_eos": True, "arrival_s": 0.01, "priority": -3, "tenant": "t1"}, None),
    ("good-greedy-float", {"id": "good-greedy-float", "prompt_token_ids": [9], "max_new_tokens": 2,
                           "temperature": 0.0, "top_p": 1, "seed": None}, None),
]
BAD = [
    # One bad request used to fail its whole batch: token ids outside the vocabulary, sampling out of range
    ("id-1e9", {"id": "id-1e9", "prompt_token_ids": [5, 10**9]}, ["prompt_token_ids[1]", "1000000000", "0–49,151"]),
    ("id-vocab", {"id": "id-vocab", "prompt_token_ids": [49152]}, ["prompt_token_ids[0]", "49152", "0–49,151"]),
    ("id-bool", {"id": "id-bool", "prompt_token_ids": [True, 5]}, ["prompt_token_ids[0]", "True", "0–49,151"]),
    ("id-negative", {"id": "id-negative", "prompt_token_ids": [-1]}, ["prompt_token_ids[0]", "-1", "0–49,151"]),
    ("id-float", {"id": "id-float", "prompt_token_ids": [5.0]}, ["prompt_token_ids[0]", "5.0", "whole number"]),
    ("ids-empty", {"id": "ids-empty", "prompt_token_ids": []}, ["prompt_token_ids", "[]", "non-empty list"]),
    ("ids-text", {"id": "ids-text", "prompt_token_ids": "5 6"}, ["prompt_token_ids", "'5 6'", "list"]),
    ("top-p-0", {"id": "top-p-0", "prompt_token_ids": [5], "top_p": 0}, ["top_p", "got 0", "above 0 up to 1"]),
    ("top-p-neg", {"id": "top-p-neg", "prompt_token_ids": [5], "top_p": -2}, ["top_p", "-2", "0–1"]),
    ("top-p-big", {"id": "top-p-big", "prompt_token_ids": [5], "top_p": 1.5}, ["top_p", "1.5", "0–1"]),
    ("seed-abc", {"id": "seed-abc", "prompt_token_ids": [5], "seed": "abc"}, ["seed", "'abc'", "0–9,223"]),
    ("seed-float", {"id": "seed-float", "prompt_token_ids": [5], "seed": 1.5}, ["seed", "1.5", "whole number"]),
    ("seed-bool", {"id": "seed-bool", "prompt_token_ids": [5], "seed": True}, ["seed", "True", "0–9,223"]),
    ("seed-neg", {"id": "seed-neg", "prompt_token_ids": [5], "seed": -1}, ["seed", "-1", "0–9,223"]),
    ("temp-tiny", {"id": "temp-tiny", "prompt_token_ids": [5], "temperature": 1e-300},
     ["temperature", "1e-300", "0 for greedy, or 0.01–100"]),
    ("temp-neg", {"id": "temp-neg", "prompt_token_ids": [5], "temperature": -1}, ["temperature", "-1", "0–100"]),
    ("temp-text", {"id": "temp-text", "prompt_token_ids": [5], "temperature": "0.5"}, ["temperature", "'0.5'", "0–100"]),
    # NaN and Infinity: json.loads reads them, so they reach the validator
    ("temp-nan", '{"id": "temp-nan", "prompt_token_ids": [5], "temperature": NaN}', ["temperature", "nan", "0–100"]),
    ("top-p-nan", '{"id": "top-p-nan", "prompt_token_ids": [5], "top_p": NaN}', ["top_p", "nan", "0–1"]),
    ("max-new-inf", '{"id": "max-new-inf", "prompt_token_ids": [5], "max_new_tokens": Infinity}',
     ["max_new_tokens", "inf", "1–2,048 tokens"]),
    # hangs: arrivals beyond the horizon
    ("arrival-inf", '{"id": "arrival-inf", "prompt_token_ids": [5], "arrival_s": Infinity}', ["arrival_s", "inf", "0–86400 s"]),
    ("arrival-1e18", {"id": "arrival-1e18", "prompt_token_ids": [5], "arrival_s": 1e18}, ["arrival_s", "1e+18", "0–86400 s"]),
    ("arrival-neg", {"id": "arrival-neg", "prompt_token_ids": [5], "arrival_s": -1}, ["arrival_s", "-1", "0–86400 s"]),
    ("arrival-text", {"id": "arrival-text", "prompt_token_ids": [5], "arrival_s": "0"}, ["arrival_s", "'0'", "0–86400 s"]),
    # silent coercions
    ("max-new-str", {"id": "max-new-str", "prompt_token_ids": [5], "max_new_tokens": "4"}, ["max_new_tokens", "'4'", "1–2,048"]),
    ("max-new-float", {"id": "max-new-float", "prompt_token_ids": [5], "max_new_tokens": 4.7}, ["max_new_tokens", "4.7", "whole number"]),
    ("max-new-true", {"id": "max-new-true", "prompt_token_ids": [5], "max_new_tokens": True}, ["max_new_tokens", "True", "1–2,048"]),
    ("max-new-0", {"id": "max-new-0", "prompt_token_ids": [5], "max_new_tokens": 0}, ["max_new_tokens", "got 0", "1–2,048"]),
    ("max-new-huge", {"id": "max-new-huge", "prompt_token_ids": [5], "max_new_tokens": 10**9}, ["max_new_tokens", "1000000000", "1–2,048"]),
    ("eos-str", {"id": "eos-str", "prompt_token_ids": [5], "ignore_eos": "false"}, ["ignore_eos", "'false'", "true or false"]),
    ("eos-int", {"id": "eos-int", "prompt_token_ids": [5], "ignore_eos": 0}, ["ignore_eos", "got 0", "true or false"]),
    ("prompt-null", {"id": "prompt-null", "prompt": None}, ["prompt", "None", "string"]),
    ("prompt-number", {"id": "prompt-number", "prompt": 5}, ["prompt", "got 5", "string"]),
    ("priority-float", {"id": "priority-float", "prompt_token_ids": [5], "priority": 1.5}, ["priority", "1.5", "whole number"]),
    ("tenant-number", {"id": "tenant-number", "prompt_token_ids": [5], "tenant": 3}, ["tenant", "got 3", "string"]),
    # shape of the line itself
    ("both-prompts", {"id": "both-prompts", "prompt": "hi", "prompt_token_ids": [5]}, ["exactly one of", "prompt_token_ids"]),
    ("no-prompt", {"id": "no-prompt", "max_new_tokens": 3}, ["exactly one of", "prompt_token_ids"]),
    ("typo-field", {"id": "typo-field", "prompt_token_ids": [5], "max_tokens": 3}, ["unknown field", "'max_tokens'", "max_new_tokens"]),
    (None, {"id": 7, "prompt_token_ids": [5]}, ["id", "got 7", "string"]),
    (None, {"id": "has space", "prompt_token_ids": [5]}, ["id", "'has space'", "without spaces"]),
    (None, '{"id": "dup-key", "prompt_token_ids": [5], "max_new_tokens": 3, "max_new_tokens": 4}', ["max_new_tokens", "appears twice"]),
    (None, "[1, 2]", ["JSON object", "[1, 2]"]),
    (None, "{not json", ["line", "Expecting property name"]),
    (None, b'{"id": "\xff\xfe", "prompt_token_ids": [5]}', ["utf-8"]),
    # text that is not Unicode (JSON's \\ud800 escape: a lone surrogate), and tenants that are not names
    ("tenant-surrogate", '{"id": "tenant-surrogate", "prompt_token_ids": [5], "tenant": "a\\ud800"}',
     ["tenant", "not valid Unicode", "U+D800", "character 1"]),
    ("prompt-surrogate", '{"id": "prompt-surrogate", "prompt": "x\\udcff"}', ["prompt", "not valid Unicode", "U+DCFF"]),
    (None, '{"id": "\\ud800", "prompt_token_ids": [5]}', ["id", "not valid Unicode"]),
    ("tenant-escape", {"id": "tenant-escape", "prompt_token_ids": [5], "tenant": "a\x1b[2J"},
     ["tenant", "control character U+001B"]),
    ("tenant-long", {"id": "tenant-long", "prompt_token_ids": [5], "tenant": "t" * 65}, ["tenant", "1–64", "65 characters"]),
    # lines that made the parser raise what it does not usually raise, or take the memory of their size
    (None, "[" * 100_000 + "]" * 100_000, ["nested too deeply"]),
    (None, '{"id": "deep", "prompt_token_ids": ' + "[" * 50_000 + "]" * 50_000 + "}", ["nested too deeply"]),
    (None, '{"id": "huge", "prompt": "' + "x" * (1 << 20) + '"}', ["over 1,048,576 bytes"]),
    # duplicate ids: rejected rows of their own
    ("good1", {"id": "good1", "prompt_token_ids": [5, 6, 7], "max_new_tokens": 3}, ["duplicate id 'good1'", "first seen on line 1"]),
]
TABLE = GOOD + BAD


def workload_lines():
    """(row id, line bytes, expected reason) for every table row, the row id resolved to line<N>."""
    out = []
    for no, (rid, line, expect) in enumerate(TABLE, 1):
        raw = line if isinstance(line, bytes) else (line if isinstance(line, str) else json.dumps(line)).encode()
        out.append((rid or f"line{no}", raw, expect))
    return out


def run_table(tmp_path_factory, *model_flags):
    folder = tmp_path_factory.mktemp("table")
    w = folder / "w.jsonl"
    w.write_bytes(b"\n".join(raw for _, raw, _ in workload_lines()) + b"\n")
    out = folder / "out"
    proc = subprocess.run([sys.executable, "-m", "engine", "run", "--workload", str(w), "--out", str(out),
                           "--max-num-seqs", "4", *model_flags],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    rows = list(csv.DictReader(open(out / "requests.csv")))
    return rows, json.load(open(out / "summary.json"))


@pytest.fixture(scope="module", params=[["--cost-model"], ["--model", "tiny", "--device", "cpu"],
                                        ["--model", "smollm2", "--device", "cpu"]],
                ids=["cost-model", "tiny", "smollm2"])
def table_run(request, tmp_path_factory):
    return run_table(tmp_path_factory, *request.param)


def rows_for(rows, rid):
    return [r for r in rows if r["id"] == rid]


def test_requests_in_equal_rows_out_and_good_ones_finish(table_run):
    rows, summary = table_run
    assert len(rows) == len(TABLE) == summary["requests"]
    finished = [r["id"] for r in rows if r["status"] == "finished"]
    assert sorted(finished) == sorted(rid for rid, _, _ in GOOD)
    assert summary["finished"] == len(GOOD) and summary["rejected"] == len(BAD)
    for r in rows:
        if r["status"] == "finished":
            assert r["output_tokens"] in ("2", "3") and not r["error"], r


@pytest.mark.parametrize("index", range(len(GOOD), len(TABLE)), ids=lambda i: TABLE[i][0] or f"line{i + 1}")
def test_bad_line_is_a_rejected_row_with_its_reason(table_run, index):
    rows, _ = table_run
    rid, _, expect = workload_lines()[index]
    errors = [r["error"] for r in rows_for(rows, rid) if r["status"] == "rejected"]
    assert any(e.startswith(f"line {index + 1}:") and all(x in e for x in expect) for e in errors), (errors, expect)


# ----------------------------------------------------------------------------- the validator itself


@pytest.mark.parametrize("index", range(len(GOOD), len(TABLE)), ids=lambda i: TABLE[i][0] or f"line{i + 1}")
def test_validator_refuses_every_bad_dict(index):
    _, line, _ = TABLE[index]
    if isinstance(line, (str, bytes)):
        try:
            line = json.loads(line, object_pairs_hook=unique_keys)
        except (ValueError, RecursionError):
            return                                   # not a JSON object the reader accepts: its business
    if isinstance(line, dict) and line.get("id") == "good1":
        return                                       # a duplicate is valid on its own
    with pytest.raises(ValueError):
        request_from_dict(line, Limits(vocab_size=49152, max_model_len=2048))


def test_validator_keeps_types_and_defaults():
    r = request_from_dict({"id": "a", "prompt_token_ids": [1, 2], "arrival_s": 3, "temperature": 1})
    assert (r.max_new_tokens, r.arrival_s, r.ignore_eos, r.temperature, r.top_p, r.seed) == (32, 3.0, True, 1.0, 1.0, None)
    assert isinstance(r.arrival_s, float) and isinstance(r.temperature, float)
    with pytest.raises(ValueError, match=r"prompt_token_ids\[0\].*0–99"):
        request_from_dict({"prompt_token_ids": [100]}, Limits(vocab_size=100))
    with pytest.raises(ValueError, match="max_new_tokens must be at most 64"):
        request_from_dict({"prompt_token_ids": [1], "max_new_tokens": 65}, Limits(max_model_len=64))
    assert math.isfinite(request_from_dict({"prompt_token_ids": [1], "arrival_s": 86400}).arrival_s)


def test_a_prompt_too_long_to_fit_is_refused_by_its_characters_before_tokenizing():
    class NeverCalled:
        def apply_chat_template(self, *a, **kw):
            raise AssertionError("tokenized")
    limits = Limits(max_model_len=64, max_prompt_chars=640)
    with pytest.raises(ValueError, match="prompt is 641 characters: more than the 640"):
        request_from_dict({"prompt": "x" * 641}, limits, NeverCalled())


def test_the_prompt_character_bound_holds_for_the_real_tokenizer():
    """No text of max_prompt_chars characters or fewer that fits is refused: the bound is the
    longest token's spelling times the context, and real text takes far fewer characters a token."""
    from engine.model.model import load_model
    from engine.core.validation import max_prompt_chars
    tok = load_model("tiny", "cpu", "fp32").tokenizer
    bound = max_prompt_chars(tok, 2048)
    longest = max(len(tok.decode([i])) for i in range(len(tok)))
    assert bound >= 2048 * longest
    worst = tok.decode([max(range(len(tok)), key=lambda i: len(tok.decode([i])))]) * 2048
    assert len(tok.encode(worst)) >= 2048 * 0.5 and len(worst) <= bound


# ----------------------------------------------------------------------------- settings


def settings_table(tmp_path):
    not_a_model = tmp_path / "not-a-model"
    not_a_model.mkdir()
    (tmp_path / "a-file").write_text("keep me")
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "blank.jsonl").write_text("\n\n  \n")
    (tmp_path / "someone").mkdir()
    (tmp_path / "someone" / "notes.txt").write_text("mine")
    return [
        # hangs and NaN metrics from policy and workload values
        (["--mode", "static", "--max-wait-ms", "nan"], ["max_wait_ms", "nan", "0–60000 ms"]),
        (["--mode", "static", "--max-wait-ms", "inf"], ["max_wait_ms", "inf", "0–60000 ms"]),
        (["--rate", "nan"], ["rate", "nan", "0–10000 req/s"]),
        (["--rate", "1e-9"], ["rate", "1e-09", "one request a day"]),
        (["--burstiness", "nan"], ["burstiness", "nan", "0.01–10"]),
        (["--ttft-slo-s", "nan"], ["ttft_slo_s", "nan", "0.01–3600 s"]),
        (["--tpot-slo-s", "inf"], ["tpot_slo_s", "inf", "0.001–60 s"]),
        (["--max-num-seqs", "0"], ["max_num_seqs must be at least 1", "1–4,096"]),
        # KV pools
        (["--kv-pool-tokens", "1"], ["kv_pool_tokens", "got 1", "16–1,048,576 tokens"]),
        (["--kv-pool-tokens", "-5"], ["kv_pool_tokens", "-5", "16–1,048,576 tokens"]),
        (["--kv-capacity-tokens", "2000000"], ["kv_capacity_tokens", "2000000", "1–1,048,576 tokens"]),
        # devices and models
        (["--device", "tpu"], ["device", "'tpu'", "auto, cpu, cuda"]),
        (["--model", str(not_a_model)], ["not-a-model", "not a model", "config.json"]),
        (["--model", str(tmp_path / "nowhere")], ["nowhere", "no such directory"]),
        # workload paths
        (["--workload", str(tmp_path)], ["workload", "is a directory", "JSONL file"]),
        (["--workload", str(tmp_path / "missing.jsonl")], ["workload", "missing.jsonl", "does not exist"]),
        (["--workload", str(tmp_path / "empty.jsonl")], ["workload", "empty"]),
        (["--workload", str(tmp_path / "blank.jsonl")], ["workload", "empty"]),
        # --out, refused before the run
        (["--out", str(tmp_path / "a-file")], ["--out", "a-file", "is a file"]),
        (["--out", str(tmp_path / "a-file" / "sub")], ["--out", "a-file is a file"]),
        (["--out", str(tmp_path / "someone")], ["--out", "notes.txt", "previous run"]),
        (["--out", "/sys/batching-lab-out"], ["--out", "cannot be written"]),
    ]


SETTINGS_IDS = ["max-wait-nan", "max-wait-inf", "rate-nan", "rate-tiny", "burstiness-nan", "ttft-slo-nan",
                "tpot-slo-inf", "max-num-seqs-0", "pool-1", "pool-negative", "capacity-over-knob", "device-tpu",
                "model-dir-not-model", "model-dir-missing", "workload-dir", "workload-missing", "workload-empty",
                "workload-blank", "out-file", "out-under-file", "out-someone-elses", "out-unwritable"]


@pytest.mark.parametrize("index", range(len(SETTINGS_IDS)), ids=SETTINGS_IDS)
def test_bad_setting_is_one_clear_line_before_the_run(index, tmp_path, capsys):
    flags, expect = settings_table(tmp_path)[index]
    out = tmp_path / "out"
    argv = ["run", "--out", str(out), "--num-requests", "3", *flags]
    argv += [] if "--model" in flags else ["--cost-model"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]         # "loading MODEL ..." may come first
    assert "Traceback" not in err and last.startswith("error: ") and all(x in last for x in expect), err
    assert not out.exists()
    assert (tmp_path / "a-file").read_text() == "keep me"
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]      # no temporary folder left


def test_offline_hub_id_is_one_clear_line(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}        # read when the hub library is imported: a fresh process
    proc = subprocess.run([sys.executable, "-m", "engine", "run", "--out", str(tmp_path / "o"),
                           "--model", "nobody/no-such-model", "--device", "cpu"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert last.startswith("error: cannot load model 'nobody/no-such-model'") and "hub" in last, last
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("model_flags", [["--cost-model"], ["--model", "tiny", "--device", "cpu", "--dtype", "fp32"]],
                         ids=["cost-model", "tiny"])
def test_kv_pool_beyond_memory_says_how_many_tokens_fit(model_flags, tmp_path, capsys, monkeypatch):
    import engine.runs.build
    import engine.model.model
    one_gb = 10**9
    monkeypatch.setattr(engine.runs.build, "available_memory_bytes", lambda: one_gb)
    monkeypatch.setattr(engine.model.model, "free_memory_bytes", lambda device: one_gb // 1000)
    assert main(["run", "--out", str(tmp_path / "o"), "--kv-capacity-tokens", "1048576", *model_flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "kv_capacity_tokens 1,048,576 needs" in err and "tokens fit" in err, err
    per_token = 46080 if "--cost-model" in model_flags else 2 * 2 * 2 * 16 * 4     # SmolLM2 fp32; tiny fp32
    fit = int((one_gb if "--cost-model" in model_flags else one_gb // 1000) * 0.8) // per_token
    assert f"at most {fit:,} tokens fit" in err, err
