"""OpenAIAgent against a fake OpenAI-compatible server: real HTTP over loopback, no network."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from fake_http import JSONHandler

from birdrl.agents.base import Agent, GenerationConfig, render_tool_call
from birdrl.agents.openai_api import (
    AgentError,
    EndpointError,
    EndpointUnreachable,
    OpenAIAgent,
    OpenAIConfig,
)
from birdrl.env.parse import parse_turn
from birdrl.env.types import ToolCall

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "execute_sql",
            "description": "Run SQL.",
            "parameters": {"type": "object", "properties": {"sql": {"type": "string"}}},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "submit_solution",
            "description": "Submit.",
            "parameters": {"type": "object", "properties": {"sql": {"type": "string"}}},
        },
    },
]


@dataclass
class Reply:
    """One scripted answer of the fake server."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


def completion(
    content: str | None = "ok", tool_calls: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14},
    }


def echo(body: dict[str, Any]) -> Reply:
    """Default behaviour: answer with the last message's content."""
    return Reply(body=completion("echo: " + str(body["messages"][-1]["content"])))


class FakeServer:
    """Scripted replies (consumed in order, then `default`); records every request."""

    def __init__(self) -> None:
        self.script: list[Reply] = []
        self.default: Callable[[dict[str, Any]], Reply] = echo
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(JSONHandler):
            def do_POST(self) -> None:
                body = self.read_json()
                with server.lock:
                    server.requests.append(body)
                    server.headers.append(dict(self.headers.items()))
                    reply = server.script.pop(0) if server.script else None
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    if self.path != "/v1/chat/completions":
                        reply = Reply(404, {"error": {"message": f"no route {self.path}"}})
                    elif reply is None:
                        reply = server.default(body)
                    time.sleep(reply.delay)
                finally:
                    with server.lock:
                        server.in_flight -= 1
                raw = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body)
                data = raw if isinstance(raw, bytes) else raw.encode()
                try:
                    self.send_response(reply.status)
                    for key, value in reply.headers.items():
                        self.send_header(key, value)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the client gave up (timeout test)

        return Handler


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


@pytest.fixture
def server() -> Iterator[FakeServer]:
    fake = FakeServer()
    thread = threading.Thread(target=fake.httpd.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        fake.httpd.shutdown()
        fake.httpd.server_close()
        thread.join(timeout=5)


def make_agent(base_url: str, **overrides: Any) -> OpenAIAgent:
    settings: dict[str, Any] = {
        "model": "test-model",
        "base_url": base_url,
        "timeout_s": 5.0,
        "max_retries": 3,
        "backoff_base_s": 0.01,
        "backoff_cap_s": 0.05,
    }
    settings.update(overrides)
    return OpenAIAgent(OpenAIConfig(**settings))


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "system", "content": "be brief"}, {"role": "user", "content": text}]


def tool_call(name: str, arguments: str, call_id: str = "c1") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def test_plain_text_response(server: FakeServer) -> None:
    gen = GenerationConfig(max_new_tokens=77, temperature=0.5, top_p=0.9, seed=3)
    agent = make_agent(server.base_url, generation=gen)
    assert isinstance(agent, Agent)
    assert agent.name == "openai:test-model"
    server.script.append(Reply(body=completion("SELECT 1;")))
    assert agent.generate([user("hi")]) == ["SELECT 1;"]
    (body,) = server.requests
    assert body["model"] == "test-model"
    assert body["messages"] == user("hi")
    assert (body["max_tokens"], body["temperature"], body["top_p"], body["seed"]) == (
        77,
        0.5,
        0.9,
        3,
    )
    assert "tools" not in body
    assert agent.usage == {"prompt_tokens": 11, "completion_tokens": 3, "requests": 1, "retries": 0}


def test_empty_batch_sends_nothing(server: FakeServer) -> None:
    assert make_agent(server.base_url).generate([]) == []
    assert server.requests == []


def test_native_tool_calls_are_rendered_as_text(server: FakeServer) -> None:
    calls = [
        tool_call("execute_sql", json.dumps({"sql": "SELECT count(*) FROM t"}), "a"),
        tool_call("submit_solution", json.dumps({"sql": ["DELETE FROM t", "SELECT 1"]}), "b"),
    ]
    server.script.append(Reply(body=completion("Let me look.", calls)))
    (text,) = make_agent(server.base_url).generate([user("fix it")], tools=TOOLS)
    assert text.startswith("Let me look.\n<tool_call>")
    assert parse_turn(text).calls == (
        ToolCall("execute_sql", {"sql": "SELECT count(*) FROM t"}),
        ToolCall("submit_solution", {"sql": ["DELETE FROM t", "SELECT 1"]}),
    )
    assert server.requests[0]["tools"] == TOOLS


def test_native_tool_call_without_content(server: FakeServer) -> None:
    server.script.append(Reply(body=completion(None, [tool_call("execute_sql", '{"sql": "S"}')])))
    (text,) = make_agent(server.base_url).generate([user("go")], tools=TOOLS)
    assert text == render_tool_call("execute_sql", {"sql": "S"})


def test_tool_call_with_broken_arguments_is_data_not_a_crash(server: FakeServer) -> None:
    server.script.append(Reply(body=completion("", [tool_call("execute_sql", '{"sql": ')])))
    (text,) = make_agent(server.base_url).generate([user("go")], tools=TOOLS)
    parsed = parse_turn(text)
    assert parsed.calls == ()
    assert parsed.error is not None and "not valid JSON" in parsed.error


def test_native_request_conversion(server: FakeServer) -> None:
    conversation = [
        *user("fix it"),
        {
            "role": "assistant",
            "content": "First a look.\n"
            + render_tool_call("execute_sql", {"sql": "SELECT 1"})
            + "\n"
            + render_tool_call("execute_sql", {"sql": "SELECT 2"}),
            "reward": 0.0,
        },
        {"role": "tool", "name": "execute_sql", "content": "1", "elapsed": 0.1},
        {"role": "tool", "name": "execute_sql", "content": "2"},
        {"role": "tool", "name": "execute_sql", "content": "stray"},
        {"role": "assistant", "content": render_tool_call("submit_solution", {"sql": "S"})},
        {"role": "tool", "name": "submit_solution", "content": "Error: nope"},
        {"role": "assistant", "content": "no tools here"},
        {"role": "user", "content": "please call a tool"},
    ]
    make_agent(server.base_url).generate([conversation], tools=TOOLS)
    sent = server.requests[0]["messages"]
    assert sent[:2] == user("fix it")
    assert sent[2] == {
        "role": "assistant",
        "content": "First a look.",
        "tool_calls": [
            {
                "id": "call_0_0",
                "type": "function",
                "function": {"name": "execute_sql", "arguments": '{"sql": "SELECT 1"}'},
            },
            {
                "id": "call_0_1",
                "type": "function",
                "function": {"name": "execute_sql", "arguments": '{"sql": "SELECT 2"}'},
            },
        ],
    }
    assert sent[3] == {
        "role": "tool",
        "tool_call_id": "call_0_0",
        "name": "execute_sql",
        "content": "1",
    }
    assert sent[4]["tool_call_id"] == "call_0_1" and sent[4]["content"] == "2"
    assert sent[5] == {"role": "user", "content": "Tool result:\nstray"}
    assert sent[6]["content"] is None
    assert [c["id"] for c in sent[6]["tool_calls"]] == ["call_1_0"]
    assert json.loads(sent[6]["tool_calls"][0]["function"]["arguments"]) == {"sql": "S"}
    assert sent[7]["tool_call_id"] == "call_1_0"
    assert sent[8] == {"role": "assistant", "content": "no tools here"}
    assert sent[9] == {"role": "user", "content": "please call a tool"}
    assert len(sent) == 10


def test_unanswered_and_unreadable_calls(server: FakeServer) -> None:
    broken = "<tool_call>{not json at all</tool_call>"
    conversation = [
        *user("go"),
        {
            "role": "assistant",
            "content": render_tool_call("execute_sql", {"sql": "A"})
            + render_tool_call("execute_sql", {"sql": "B"}),
        },
        {"role": "tool", "name": "execute_sql", "content": "a"},  # only the first is answered
        {"role": "user", "content": "one call per turn"},
        {"role": "assistant", "content": broken},
        {"role": "user", "content": "that was not JSON"},
    ]
    make_agent(server.base_url).generate([conversation], tools=TOOLS)
    sent = server.requests[0]["messages"]
    assert [c["id"] for c in sent[2]["tool_calls"]] == ["call_0_0"]
    assert sent[3]["tool_call_id"] == "call_0_0"
    assert sent[5] == {"role": "assistant", "content": broken}


def test_text_mode_sends_no_tools_and_wraps_tool_results(server: FakeServer) -> None:
    call = render_tool_call("execute_sql", {"sql": "SELECT 1"})
    conversation = [
        *user("go"),
        {"role": "assistant", "content": call},
        {"role": "tool", "name": "execute_sql", "content": "1 row"},
    ]
    server.script.append(Reply(body=completion("plain", [tool_call("execute_sql", "{}")])))
    agent = make_agent(server.base_url, native_tools=False)
    assert agent.generate([conversation], tools=TOOLS) == ["plain"]
    body = server.requests[0]
    assert "tools" not in body
    assert body["messages"][2] == {"role": "assistant", "content": call}
    assert body["messages"][3] == {
        "role": "user",
        "content": "<tool_response>\n1 row\n</tool_response>",
    }


def test_retries_5xx_then_succeeds(server: FakeServer) -> None:
    server.script += [Reply(503, {"error": {"message": "overloaded"}})] * 2
    agent = make_agent(server.base_url)
    assert agent.generate([user("hi")]) == ["echo: hi"]
    assert len(server.requests) == 3
    assert agent.usage["retries"] == 2 and agent.usage["requests"] == 3
    assert agent.usage["completion_tokens"] == 3  # only the successful answer reports usage


def test_429_honours_retry_after(server: FakeServer) -> None:
    server.script.append(Reply(429, {"error": {"message": "slow down"}}, {"Retry-After": "0"}))
    agent = make_agent(server.base_url, backoff_base_s=30.0, backoff_cap_s=30.0)
    start = time.monotonic()
    assert agent.generate([user("hi")]) == ["echo: hi"]
    assert time.monotonic() - start < 5  # the 30 s backoff was replaced by Retry-After: 0
    assert agent.usage["retries"] == 1


def test_5xx_until_retries_run_out(server: FakeServer) -> None:
    server.default = lambda body: Reply(502, {"error": {"message": "bad gateway"}})
    agent = make_agent(server.base_url, max_retries=2)
    with pytest.raises(EndpointError, match="bad gateway") as info:
        agent.generate([user("hi")])
    assert info.value.status == 502
    assert len(server.requests) == 3


def test_400_raises_immediately_with_the_server_message(server: FakeServer) -> None:
    message = "This model's maximum context length is 4096 tokens."
    server.script.append(Reply(400, {"error": {"message": message, "type": "invalid_request"}}))
    with pytest.raises(EndpointError) as info:
        make_agent(server.base_url).generate([user("hi")])
    assert info.value.status == 400
    assert message in str(info.value) and "400" in str(info.value)
    assert len(server.requests) == 1


def test_one_failure_fails_the_batch(server: FakeServer) -> None:
    def reply(body: dict[str, Any]) -> Reply:
        if body["messages"][-1]["content"] == "bad":
            return Reply(422, {"detail": "unprocessable"})
        return echo(body)

    server.default = reply
    with pytest.raises(EndpointError, match="unprocessable") as info:
        make_agent(server.base_url).generate([user("a"), user("bad"), user("c")])
    assert any("conversation 1" in note for note in info.value.__notes__)


def test_unreachable_port(server: FakeServer) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    base_url = f"http://127.0.0.1:{port}/v1"
    agent = make_agent(base_url, max_retries=2)
    start = time.monotonic()
    with pytest.raises(EndpointUnreachable) as info:
        agent.generate([user("hi")])
    assert time.monotonic() - start < 3
    assert f"{base_url}/chat/completions" in str(info.value)
    assert "curl" in str(info.value) and info.value.attempts == 3
    assert isinstance(info.value, AgentError)
    assert agent.usage["retries"] == 2


def test_timeout_raises_unreachable(server: FakeServer) -> None:
    server.default = lambda body: Reply(body=completion("late"), delay=1.5)
    agent = make_agent(server.base_url, timeout_s=0.2, max_retries=1)
    start = time.monotonic()
    with pytest.raises(EndpointUnreachable, match="timeout_s=0.2"):
        agent.generate([user("hi")])
    assert time.monotonic() - start < 1.4
    assert len(server.requests) == 2


def test_api_key_is_sent_as_bearer(server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_KEY", "sk-test-123")
    agent = make_agent(server.base_url, api_key_env="MY_KEY")
    agent.generate([user("hi")])
    assert server.headers[0]["Authorization"] == "Bearer sk-test-123"
    server.script.append(Reply(401, {"error": {"message": "bad key"}}))
    with pytest.raises(EndpointError) as info:
        agent.generate([user("hi")])
    assert "sk-test-123" not in str(info.value) and "sk-test-123" not in repr(agent.config)


def test_no_authorization_without_a_key(server: FakeServer) -> None:
    make_agent(server.base_url).generate([user("hi")])
    assert "Authorization" not in server.headers[0]


def test_base_url_defaults_to_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://localhost:8000/v1")
    assert OpenAIConfig(model="m").base_url == "http://localhost:8000/v1"
    monkeypatch.delenv("OPENAI_BASE_URL")
    assert OpenAIConfig(model="m").base_url == "https://api.openai.com/v1"
    with pytest.raises(AgentError):
        OpenAIConfig(model="m", concurrency=0)


def test_concurrency_limit_and_order(server: FakeServer) -> None:
    def slow_echo(body: dict[str, Any]) -> Reply:
        index = int(body["messages"][-1]["content"])
        return Reply(body=completion(f"answer {index}"), delay=0.05 + 0.03 * (5 - index))

    server.default = slow_echo
    conversations = [user(str(i)) for i in range(6)]
    answers = make_agent(server.base_url, concurrency=2).generate(conversations)
    assert answers == [f"answer {i}" for i in range(6)]
    assert server.max_in_flight == 2
    server.max_in_flight = 0
    make_agent(server.base_url, concurrency=6).generate(conversations)
    assert server.max_in_flight > 2  # the server does see parallel requests
