"""`engine serve` against careless and hostile clients: any text in any field, error shapes,
exposure, per-client cost, connections that send nothing, many /lab readers, and a stop with
streams open. Each server is the one `engine serve` runs (its connection guard and its stop),
in a thread of the test process, on the tiny model.
"""
import json
import socket
import threading
import time

import httpx2 as httpx
import pytest

from engine.core.config import SchedulerPolicy
from engine.model.model import load_model
from engine.server.limits import ServerLimits
from test_server import TOKEN, serving
from conftest import wait_until

SURROGATE = b'"a\\ud800b"'          # JSON for a string holding a lone surrogate
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny", "cpu", "fp32")


@pytest.fixture(scope="module")
def server(tiny):
    with serving(tiny) as (url, service):
        yield url, service


def post(url, path, raw: bytes, ctype="application/json", **kw):
    return httpx.post(url + path, content=raw, headers={"content-type": ctype, **kw.pop("headers", {})},
                      timeout=30, **kw)


def openai_error(r, status, *words):
    """`r` is OpenAI's error shape with `status`, and its message holds every word."""
    assert r.status_code == status, (r.status_code, r.text[:300])
    assert r.headers["content-type"].startswith("application/json")
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == status
    assert all(w in error["message"] for w in words), error["message"]
    assert "Traceback" not in r.text and 'File "' not in r.text
    return error


# ----------------------------------------------------------------------------- any text, any field


TEXT_FIELDS = [
    ("/v1/completions", b'{"prompt": ' + SURROGATE + b'}', "prompt"),
    ("/v1/completions", b'{"prompt": "hi", "user": ' + SURROGATE + b'}', "user"),
    ("/v1/completions", b'{"prompt": "hi", "stop": ' + SURROGATE + b'}', "stop"),
    ("/v1/completions", b'{"prompt": "hi", "stop": ["x", ' + SURROGATE + b']}', "stop[1]"),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": ' + SURROGATE + b'}]}', "messages"),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": [{"type": "text", "text": '
     + SURROGATE + b'}]}]}', "messages"),
]


@pytest.mark.parametrize("path, raw, field", TEXT_FIELDS, ids=[f[2] + f[0][-5:] for f in TEXT_FIELDS])
def test_text_that_is_not_unicode_is_refused_naming_its_field(server, path, raw, field):
    url, _ = server
    openai_error(post(url, path, raw), 400, f"{field} is not valid Unicode", "U+D800", "character 1")
    r = httpx.get(url + "/lab/requests", timeout=10)          # the board still reads
    assert r.status_code == 200 and isinstance(r.json()["requests"], list)


@pytest.mark.parametrize("user, words", [("\x1b[2Jhi", ["control character U+001B"]), ("a\nb", ["U+000A"]),
                                         ("x" * 65, ["1–64 characters", "65 characters"]), ("", ["non-empty"])])
def test_a_tenant_is_a_name_without_control_characters(server, user, words):
    url, _ = server
    openai_error(post(url, "/v1/completions", json.dumps({"prompt": "hi", "user": user}).encode()), 400, "user", *words)


def test_any_valid_text_is_taken_and_shown_back(server):
    """Emoji, right-to-left text, a NUL and combining marks are text: they run, and the board
    and the answer carry them unchanged."""
    url, _ = server
    user = "Zoë 👩🏽‍🔬 שלום"
    r = post(url, "/v1/completions", json.dumps({"prompt": "a\x00b\u0301 🙂", "max_tokens": 2, "user": user,
                                                 "stop": ["\u200b"]}).encode())
    assert r.status_code == 200, r.text
    rows = httpx.get(url + "/lab/requests?limit=5", timeout=10).json()["requests"]
    assert any(row["tenant"] == user for row in rows)


def test_a_model_name_that_is_not_unicode_gets_a_404_not_a_500(server):
    url, _ = server
    openai_error(post(url, "/v1/completions", b'{"prompt": "hi", "model": ' + SURROGATE + b'}'), 404, "\\ud800")


# ----------------------------------------------------------------------------- error shapes


@pytest.mark.parametrize("method, path, status, words", [
    ("GET", "/nope", 404, ["Not Found"]),
    ("DELETE", "/v1/completions", 405, ["Method Not Allowed"]),
    ("GET", "/lab/requests?limit=abc", 400, ["limit", "'abc'"]),
    ("GET", "/lab/requests?limit=-1", 400, ["limit must be 0 to 5,000", "-1"]),
    ("GET", "/lab/requests?limit=99999", 400, ["limit must be 0 to 5,000"]),
    ("GET", "/lab/steps?since=x&stream=false", 400, ["since", "'x'"]),
    ("GET", "/lab/steps?since=-4&stream=false", 400, ["since", "-4"]),
    ("GET", "/lab/steps?stream=perhaps", 400, ["stream"]),
])
def test_every_error_has_openai_shape(server, method, path, status, words):
    url, _ = server
    openai_error(httpx.request(method, url + path, timeout=10), status, *words)


@pytest.mark.parametrize("raw, status, words", [
    (b"[" * 100_000 + b"]" * 100_000, 400, ["nested too deeply"]),
    (b'{"prompt": "\xff\xfe"}', 400, ["not valid utf-8", "0xff"]),
    (b'{"prompt": "a", "prompt": "b"}', 400, ["'prompt' appears twice"]),
    (b"x" * ((1 << 20) + 1), 413, ["1,048,577 bytes", "1,048,576"]),
])
def test_bodies_that_break_a_parser_get_their_status(server, raw, status, words):
    url, _ = server
    openai_error(post(url, "/v1/completions", raw), status, *words)


def test_a_body_without_a_length_is_read_no_further_than_the_limit(server):
    url, _ = server
    chunks = iter([b'{"prompt": "', b"x" * (1 << 20), b'"}'])
    openai_error(post(url, "/v1/completions", chunks), 413, "over 1,048,576 bytes")


def test_a_server_failure_is_a_500_in_openai_shape_without_a_traceback(tiny):
    with serving(tiny) as (url, service):
        def broken(*_):
            raise RuntimeError("secret internals at /home/x/engine.py")
        service.background.state = broken                 # GET /lab/load now fails inside the server
        error = openai_error(httpx.get(url + "/lab/load", timeout=10), 500, "server's log")
        assert "secret" not in json.dumps(error)


def test_limit_zero_means_no_rows(server):
    url, _ = server
    post(url, "/v1/completions", b'{"prompt": "hi", "max_tokens": 1}')
    assert httpx.get(url + "/lab/requests?limit=0").json() == {"requests": []}
    assert len(httpx.get(url + "/lab/requests?limit=1").json()["requests"]) == 1


# ----------------------------------------------------------------------------- exposure


@pytest.mark.parametrize("ctype", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data", ""])
def test_bodies_must_be_sent_as_json(server, ctype):
    """A web page can make a browser post these to any address without asking first; JSON it cannot."""
    url, service = server
    before = service.engine.step_count
    r = post(url, "/v1/completions", b'{"prompt": "hi", "max_tokens": 1}', ctype)
    openai_error(r, 415, "application/json")
    r = httpx.put(url + "/lab/policy", content=b'{"max_num_seqs": 4}', headers={"content-type": ctype, **AUTH})
    openai_error(r, 415, "application/json")
    assert httpx.post(url + "/v1/completions", json={"prompt": "hi", "max_tokens": 1}).status_code == 200
    assert service.engine.step_count > before


def test_docs_are_off_unless_asked_for(server, tiny):
    url, _ = server
    for path in ("/docs", "/openapi.json", "/redoc"):
        openai_error(httpx.get(url + path), 404)
    with serving(tiny, docs=True) as (url, _):
        assert httpx.get(url + "/openapi.json").status_code == 200 and httpx.get(url + "/docs").status_code == 200


# ----------------------------------------------------------------------------- bounded cost per client


class SpyTokenizer:
    """The engine's tokenizer, noting which thread encodes what."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __len__(self):
        return len(self.inner)

    def encode(self, text, *a, **kw):
        self.calls.append((threading.current_thread().name, len(text)))
        return self.inner.encode(text, *a, **kw)


def test_prompts_are_measured_by_characters_first_and_tokenized_off_the_event_loop(tiny):
    spy = SpyTokenizer(tiny.tokenizer)
    with serving(tiny, tokenizer=spy) as (url, _):
        r = httpx.post(url + "/v1/completions", json={"prompt": "hello world " * 83_000, "max_tokens": 1}, timeout=30)
        openai_error(r, 400, "996,000 characters", "165,888")
        assert spy.calls == []                           # refused before any tokenizing
        r = httpx.post(url + "/v1/completions", json={"prompt": "hello world", "max_tokens": 1}, timeout=30)
        assert r.status_code == 200, r.text
        r = httpx.post(url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}],
                                                           "max_tokens": 1}, timeout=30)
        assert r.status_code == 200, r.text
    assert [name.startswith("batching-lab-tokenizer") for name, _ in spy.calls] == [True, True], spy.calls


def test_a_new_user_string_does_not_reset_the_per_client_limit(tiny):
    """Per client address: the third request in flight from one address is refused whatever its
    `user`; the instructor and a trusted address are not held by it."""
    long = {"model": "tiny", "prompt": "x", "max_tokens": 1800, "stream": True, "ignore_eos": True}
    with serving(tiny, max_inflight_per_client=2) as (url, service):
        with httpx.stream("POST", url + "/v1/completions", json={**long, "user": "u1"}, timeout=30) as a, \
                httpx.stream("POST", url + "/v1/completions", json={**long, "user": "u2"}, timeout=30) as b:
            lines = a.iter_lines(), b.iter_lines()
            next(lines[0]), next(lines[1])
            # the engine holds still while the test asks, so that the two stay in flight however
            # fast the tiny model generates on this machine (on a fast one both ran out once)
            go, step = threading.Event(), service.engine.step
            service.engine.step = lambda: go.wait(30) and step()
            assert service.in_flight() == 2
            for user in ("u3", "u4", "fresh-name"):
                r = httpx.post(url + "/v1/completions", json={**long, "stream": False, "user": user}, timeout=30)
                openai_error(r, 429, "client (127.0.0.1) has 2 requests in flight", "per client address")
                assert r.headers["retry-after"] == "1"
            go.set()
            r = httpx.post(url + "/v1/completions", json={"prompt": "hi", "max_tokens": 1}, headers=AUTH, timeout=30)
            assert r.status_code == 200, "the instructor is exempt"
        wait_until(lambda: service.in_flight() == 0)
    with serving(tiny, max_inflight_per_client=0, limits=ServerLimits(trusted_clients=frozenset({"127.0.0.1"}))) as (url, _):
        assert httpx.post(url + "/v1/completions", json={"prompt": "hi", "max_tokens": 1}).status_code == 200


def test_a_byte_budget_per_client_lets_a_burst_through_then_meters_the_rest():
    from engine.server.limits import ByteBudget
    b = ByteBudget(rate=1000, burst=3000, max_wait_s=2)
    assert b.reserve("a", 3000, now=0) == 0                  # a full burst at once
    assert b.reserve("a", 500, now=0) == 0.5                 # then half a second for 500 bytes more
    assert b.reserve("a", 2000, now=0.5) == 2.0              # the line of reservations goes on: 1.5 s + 0.5 s
    assert b.reserve("a", 1000, now=0.5) == float("inf")     # over max_wait_s: refused, nothing reserved
    assert b.reserve("a", 0, now=0.5) == 2.0
    assert b.reserve("b", 3000, now=0.5) == 0                # another address has its own bucket
    assert b.reserve("a", 3000, now=10) == 0                 # refilled, no further than the burst
    assert b.reserve("a", 1, now=10) == 0.001


def test_refusals_are_paced_by_how_many_of_a_clients_are_held_at_once():
    from engine.server.limits import RefusalPacing
    pacing = RefusalPacing(ServerLimits(refusal_delay_s=1, max_refusal_delay_s=10, refusals_per_s=20))
    assert [pacing.hold("a") for _ in range(3)] == [1, 1, 1]          # now and then: the least
    for _ in range(97):
        pacing.hold("a")
    assert pacing.delay("a") == 101 / 20 and pacing.delay("b") == 1   # 100 held: about 20 answers a second
    for _ in range(500):
        pacing.hold("a")
    assert pacing.delay("a") == 10 and pacing.total == 600            # capped
    for _ in range(600):
        pacing.release("a")
    assert pacing.held == {} and pacing.total == 0


def test_a_client_sending_big_bodies_in_a_loop_is_metered_and_the_instructor_is_not(tiny):
    """At 100 kB a second with a 200 kB burst, five bodies of 100 kB from one address take
    about three seconds (two at once, then one each 1 s); over max_budget_wait_s it is a 429."""
    limits = ServerLimits(max_body_bytes=100_000, bytes_per_s_per_client=100_000, max_budget_wait_s=1.5,
                          refusal_delay_s=0.2)
    body = json.dumps({"prompt": "hi", "max_tokens": 1, "user": "x" * 50, "stop": ["a" * 20] * 4}).encode()
    body = body[:-1] + b", \"pad\": \"" + b"x" * (100_000 - len(body) - 12) + b'"}'
    assert len(body) <= 100_000
    with serving(tiny, limits=limits) as (url, _):
        start = time.monotonic()
        codes = [post(url, "/v1/completions", body).status_code for _ in range(3)]
        assert codes == [200] * 3 and time.monotonic() - start >= 0.9, (codes, time.monotonic() - start)
        results = []
        threads = [threading.Thread(target=lambda: results.append(post(url, "/v1/completions", body)))
                   for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        refused = [r for r in results if r.status_code == 429]
        assert refused, [r.status_code for r in results]
        openai_error(refused[0], 429, "bytes a second of request bodies", "per client address")
        # Four at once from the instructor: metered, the fourth would wait 2 s for its bytes, past
        # max_budget_wait_s, and be refused; not metered, all four are answered.
        answers = []
        threads = [threading.Thread(target=lambda: answers.append(post(url, "/v1/completions", body, headers=AUTH)))
                   for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert [r.status_code for r in answers] == [200] * 4, "the instructor is not metered"


def test_a_refusal_for_a_clients_own_limit_is_answered_after_its_retry_after(tiny):
    long = {"prompt": "x", "max_tokens": 1800, "stream": True, "ignore_eos": True}
    with serving(tiny, max_inflight_per_client=1, limits=ServerLimits(refusal_delay_s=0.6)) as (url, service):
        with httpx.stream("POST", url + "/v1/completions", json=long, timeout=30) as a:
            lines = a.iter_lines()
            next(lines)
            start = time.monotonic()
            r = httpx.post(url + "/v1/completions", json={"prompt": "hi", "max_tokens": 1}, timeout=30)
            openai_error(r, 429, "client (127.0.0.1)")
            assert time.monotonic() - start >= 0.6
            start = time.monotonic()                  # the instructor is not held by it
            assert httpx.post(url + "/v1/completions", json={"prompt": "hi", "max_tokens": 1}, headers=AUTH,
                              timeout=30).status_code == 200
            assert time.monotonic() - start < 0.6
        wait_until(lambda: service.in_flight() == 0)


def test_a_connection_over_the_limit_is_held_a_while_then_closed(tiny):
    limits = ServerLimits(max_connections_per_client=2, refusal_delay_s=0.8, max_held_connections=1)
    with serving(tiny, limits=limits) as (url, _):
        held = [raw_connection(url, "127.0.0.2") for _ in range(2)]
        start = time.monotonic()
        extra = raw_connection(url, "127.0.0.2")
        time.sleep(0.1)
        beyond = raw_connection(url, "127.0.0.2")           # past max_held_connections: closed at once
        assert closed_within(beyond, 0.5)
        assert closed_within(extra, 3) and time.monotonic() - start >= 0.7
        for s in held + [extra, beyond]:
            s.close()


def test_the_server_caps_its_waiting_line_by_default():
    import argparse
    from engine.cli.serve import SERVE_MAX_WAITING, add_serve_parser
    p = argparse.ArgumentParser()
    add_serve_parser(p.add_subparsers(dest="cmd"))
    assert p.parse_args(["serve"]).max_waiting == SERVE_MAX_WAITING > 0
    assert p.parse_args(["serve", "--max-waiting", "0"]).max_waiting == 0


# ----------------------------------------------------------------------------- connections


def raw_connection(url, source="127.0.0.1"):
    host, port = url.removeprefix("http://").split(":")
    s = socket.create_connection((host, int(port)), source_address=(source, 0))
    s.settimeout(10)
    return s


def closed_within(s, seconds) -> bool:
    """Whether the server closes `s` within `seconds` (reading whatever it sends first)."""
    s.settimeout(seconds)
    try:
        while s.recv(4096):
            pass
        return True
    except (socket.timeout, TimeoutError):
        return False
    except ConnectionResetError:
        return True


def test_idle_and_slow_connections_are_closed_after_the_header_timeout(tiny):
    limits = ServerLimits(header_timeout_s=0.5, keep_alive_s=1)
    with serving(tiny, limits=limits) as (url, _):
        idle = raw_connection(url)
        assert closed_within(idle, 3)
        slow = raw_connection(url)
        start = time.monotonic()
        closed = False
        for byte in b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaa":
            try:
                slow.send(bytes([byte]))
            except OSError:
                closed = True
                break
            if closed_within(slow, 0.1):
                closed = True
                break
        assert closed and time.monotonic() - start < 3
        kept = raw_connection(url)                       # a good request is answered, then kept alive a while
        kept.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert kept.recv(4096).startswith(b"HTTP/1.1 200")
        assert closed_within(kept, 4)


def test_connections_per_client_are_capped_and_a_trusted_address_is_not(tiny):
    limits = ServerLimits(max_connections_per_client=5, trusted_clients=frozenset({"127.0.0.3"}))
    with serving(tiny, limits=limits) as (url, _):
        held = [raw_connection(url, "127.0.0.2") for _ in range(5)]
        extra = raw_connection(url, "127.0.0.2")
        assert closed_within(extra, 3)
        trusted = [raw_connection(url, "127.0.0.3") for _ in range(8)]
        assert not any(closed_within(s, 0.05) for s in trusted[-2:])
        assert httpx.get(url + "/health").status_code == 200        # another address is not held up
        for s in held + trusted + [extra]:
            s.close()
        time.sleep(0.3)
        again = raw_connection(url, "127.0.0.2")                     # places come back when closed
        again.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert again.recv(4096).startswith(b"HTTP/1.1 200")
        again.close()


def test_oversized_headers_get_431(server):
    url, _ = server
    s = raw_connection(url)
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"X-Big: " + b"a" * 100_000 + b"\r\n\r\n")
    reply = s.recv(4096)
    assert reply.startswith(b"HTTP/1.1 431") and b'"code": 431' in reply
    s.close()


@pytest.mark.parametrize("garbage", [b"BLAH\r\n\r\n", b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
                                     b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"])   # the last: a TLS hello
def test_requests_the_parser_cannot_read_get_openai_shaped_400s(server, garbage):
    url, _ = server
    s = raw_connection(url)
    s.sendall(garbage)
    reply = s.recv(4096)
    head, body = reply.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 400") and json.loads(body)["error"]["code"] == 400, reply
    s.close()


def test_a_forwarded_for_header_does_not_make_a_client_someone_else(tiny):
    long = {"prompt": "x", "max_tokens": 1800, "stream": True, "ignore_eos": True}
    with serving(tiny, max_inflight_per_client=1) as (url, _):
        with httpx.stream("POST", url + "/v1/completions", json=long, timeout=30) as a:
            lines = a.iter_lines()            # kept: a dropped iterator closes the stream
            next(lines)
            r = httpx.post(url + "/v1/completions", json={"prompt": "hi", "max_tokens": 1}, timeout=30,
                           headers={"X-Forwarded-For": "10.9.9.9"})
            openai_error(r, 429, "client (127.0.0.1)")


def test_a_body_that_never_arrives_gets_408(tiny):
    with serving(tiny, limits=ServerLimits(body_timeout_s=0.5)) as (url, _):
        s = raw_connection(url)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 100\r\n\r\n{\"prompt\":")
        reply = s.recv(4096)
        assert reply.startswith(b"HTTP/1.1 408") and b"did not arrive within 0.5 s" in reply
        s.close()


# ----------------------------------------------------------------------------- /lab readers


def test_lab_readers_share_one_reading_of_the_engine(tiny):
    """Twenty followers of /lab/steps get the same records, and the engine is read as often as
    with one: the feed reads it, the readers only copy its bytes."""
    with serving(tiny) as (url, service):
        reads = []
        real = service.steps_since
        service.steps_since = lambda first: (reads.append(time.monotonic()), real(first))[1]
        got = [[] for _ in range(20)]

        def follow(i):
            with httpx.stream("GET", url + "/lab/steps", timeout=30) as s:
                for line in s.iter_lines():
                    if line.startswith("data:"):
                        got[i].append(json.loads(line[5:])["step"])
                    if len(got[i]) >= 6:
                        return
        readers = [threading.Thread(target=follow, args=(i,)) for i in range(20)]
        for t in readers:
            t.start()
        time.sleep(0.5)
        reads.clear()
        start = time.monotonic()
        httpx.post(url + "/v1/completions", json={"prompt": "hi", "max_tokens": 8, "ignore_eos": True}, timeout=30)
        for t in readers:
            t.join(30)
        elapsed = time.monotonic() - start
        assert all(g == got[0] and len(g) >= 6 for g in got), got
        assert len(reads) <= elapsed / 0.05 + 3, (len(reads), elapsed)     # one read a poll, not one per reader


# ----------------------------------------------------------------------------- a stop


def test_a_stop_ends_open_streams_with_a_finish_reason_and_done(tiny):
    lines, follower = [], []
    with serving(tiny) as (url, service):
        def stream():
            body = {"prompt": "x", "max_tokens": 1800, "ignore_eos": True, "stream": True}
            with httpx.stream("POST", url + "/v1/completions", json=body, timeout=30) as r:
                lines.extend(line for line in r.iter_lines() if line)

        def lab():
            with httpx.stream("GET", url + "/lab/steps", timeout=30) as r:
                follower.extend(line for line in r.iter_lines() if line)
        threads = [threading.Thread(target=stream), threading.Thread(target=lab)]
        for t in threads:
            t.start()
        wait_until(lambda: len(lines) >= 3 and follower)
    for t in threads:
        t.join(15)
    assert lines[-1] == "data: [DONE]"
    last = json.loads(lines[-2][5:])
    assert last["choices"][0]["finish_reason"] == "abort", last
    assert not any(t.is_alive() for t in threads)


def test_a_reply_holding_text_utf8_cannot_carry_is_still_valid_json():
    """Whatever reaches a reply (a row built in code, not through the checks), it is JSON, not a 500."""
    from engine.server.openai_schema import json_bytes
    assert json.loads(json_bytes({"tenant": "a\ud800", "name": "Zoë"})) == {"tenant": "a\ud800", "name": "Zoë"}
    assert json_bytes({"name": "Zoë"}) == '{"name":"Zoë"}'.encode()
