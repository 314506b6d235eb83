"""The verifiers environment (``birdrl-sqlact``) run by the real verifiers package: its eval
CLI and its episode runner, with verifiers' own chat harness in a subprocess; only the
model is scripted (a fake OpenAI-compatible endpoint that streams its replies)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verifiers.v1", reason="needs the verifiers extra (pip install '.[verifiers]')")
if shutil.which("uv") is None:
    pytest.skip(
        "verifiers' chat harness needs uv (in the verifiers extra)", allow_module_level=True
    )

import verifiers.v1 as vf  # noqa: E402
from fake_http import JSONHandler  # noqa: E402

from birdrl.serve.server import ServeConfig, ServedEnv  # noqa: E402
from birdrl.tasks.benchmark import open_benchmark  # noqa: E402
from birdrl.tasks.model import Task  # noqa: E402
from birdrl.training.verifiers import REWARD_NAME, load_environment  # noqa: E402

pytestmark = pytest.mark.timeout(600)

Policy = Callable[[list[dict[str, Any]]], str]


class FakeChat:
    """OpenAI chat completions over loopback (streamed when asked, as verifiers' harness
    asks); the reply is `policy(messages)`; every request's messages are kept."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.requests: list[list[dict[str, Any]]] = []
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(JSONHandler):
            def do_POST(self) -> None:
                body = self.read_json()
                server.requests.append(body["messages"])
                text = server.policy(body["messages"])
                head = {"id": "c", "created": int(time.time()), "model": body["model"]}
                usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
                if not body.get("stream"):
                    message = {"role": "assistant", "content": text}
                    choice = {"index": 0, "message": message, "finish_reason": "stop"}
                    payload = {**head, "object": "chat.completion", "choices": [choice]}
                    self._send("application/json", json.dumps({**payload, "usage": usage}))
                    return
                chunk = {**head, "object": "chat.completion.chunk"}
                delta = {"role": "assistant", "content": text}
                events = [
                    {**chunk, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
                    {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                    {**chunk, "choices": [], "usage": usage},
                ]
                lines = "".join(f"data: {json.dumps(e)}\n\n" for e in events)
                self._send("text/event-stream", lines + "data: [DONE]\n\n")

            def _send(self, content_type: str, text: str) -> None:
                data = text.encode()
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler


def call(name: str, sql: str | list[str]) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': {'sql': sql}})}</tool_call>"


def task_of(messages: list[dict[str, Any]], tasks: list[Task]) -> Task:
    """The task a conversation is about: its question is in the first user message."""
    first = next(m["content"] for m in messages if m["role"] == "user")
    return next(t for t in tasks if t.query in first)


def replies(messages: list[dict[str, Any]]) -> int:
    return sum(m["role"] == "assistant" for m in messages)


@pytest.fixture(scope="module")
def bench_tasks() -> list[Task]:
    return open_benchmark("bundled:test", None).debugging_tasks()


@pytest.fixture(autouse=True)
def _loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("FAKE_MODEL_KEY", "unused")


@pytest.fixture
def chat() -> Iterator[Callable[[Policy], FakeChat]]:
    servers: list[FakeChat] = []

    def make(policy: Policy) -> FakeChat:
        servers.append(FakeChat(policy))
        return servers[-1]

    yield make
    for server in servers:
        server.close()


def context(fake: FakeChat) -> vf.ModelContext:
    client = vf.EvalClientConfig(base_url=fake.base_url, api_key_var="FAKE_MODEL_KEY")
    return vf.ModelContext(model="scripted", client=client)


def run_episodes(env: Any, fake: FakeChat, instance_ids: list[str]) -> list[vf.Episode]:
    """Episodes one after another, as verifiers runs them (inside `serving()`)."""
    by_id = {task.data.instance_id: task for task in env.taskset}

    async def main() -> list[vf.Episode]:
        async with env.serving():
            return [await env.run_episode(by_id[i], context(fake)) for i in instance_ids]

    return asyncio.run(main())


def only_trace(episode: vf.Episode) -> Any:
    assert episode.ok, episode.errors
    (trace,) = episode.traces
    return trace


def test_vf_eval_cli_scores_submissions(
    bench_tasks: list[Task], chat: Callable[[Policy], FakeChat], tmp_path: Path
) -> None:
    """``vf-eval birdrl-sqlact``: verifiers finds the environment by its id, and a
    scripted agent that looks once and then submits the solution gets reward 1."""

    def policy(messages: list[dict[str, Any]]) -> str:
        if replies(messages) == 0:
            return call("execute_sql", "SELECT 1")
        return call("submit_solution", task_of(messages, bench_tasks).sol_sql)

    fake = chat(policy)
    vf_eval = Path(sys.executable).with_name("vf-eval")
    argv = [str(vf_eval), "birdrl-sqlact", "-n", "2", "-m", "scripted"]
    argv += ["--client.base-url", fake.base_url, "--client.api-key-var", "FAKE_MODEL_KEY"]
    argv += ["--no-push", "-o", str(tmp_path)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=os.environ)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (traces_file,) = tmp_path.glob("*/traces.jsonl")
    episodes = [json.loads(line) for line in traces_file.read_text().splitlines()]
    assert len(episodes) == 2
    for episode in episodes:
        (trace,) = episode["traces"]
        assert trace["rewards"][REWARD_NAME]["score"] == 1.0, trace
        assert trace["stop_condition"] == "submitted"
    assert len(fake.requests) == 4  # two replies per episode: look, submit


def test_in_process_state_is_per_trajectory(
    bench_tasks: list[Task], chat: Callable[[Policy], FakeChat]
) -> None:
    """An episode's writes stay in its replica: the next episode on the same database
    sees the template, and a submission is scored on a fresh copy (the agent emptied its
    own tables before submitting). A wrong submission scores 0."""
    task = bench_tasks[0]
    table = "Track" if task.db_id == "chinook" else None
    assert table is not None, f"the test expects the bundled chinook tasks, not {task.db_id}"
    count = f"SELECT COUNT(*) FROM {table}"
    script = {
        0: [call("execute_sql", f"DELETE FROM {table}"), call("execute_sql", count)],
        1: [call("execute_sql", count), call("submit_solution", task.issue_sql)],
    }
    episode_no = {"n": -1}

    def policy(messages: list[dict[str, Any]]) -> str:
        if replies(messages) == 0:
            episode_no["n"] += 1
        steps = script[episode_no["n"]] + [call("submit_solution", task.sol_sql)]
        return steps[min(replies(messages), len(steps) - 1)]

    fake = chat(policy)
    env = load_environment("bundled:test", replicas_per_db=1)
    first, second = (only_trace(e) for e in run_episodes(env, fake, [task.instance_id] * 2))
    assert first.rewards[REWARD_NAME].score == 1.0  # scored fresh, not on the emptied replica
    observations = [str(m["content"]) for m in fake.requests[2] if m["role"] == "user"]
    assert observations[-1].splitlines()[2].strip() == "0"  # its own replica was emptied
    seen = [str(m["content"]) for m in fake.requests[4] if m["role"] == "user"][-1]
    assert int(seen.splitlines()[2]) > 0  # the next trajectory got a clean replica
    assert second.rewards[REWARD_NAME].score == 0.0  # the issue SQL fails its tests
    assert first.info["traj_id"] != second.info["traj_id"]


def test_through_env_server(bench_tasks: list[Task], chat: Callable[[Policy], FakeChat]) -> None:
    """``server=``: episodes run on ``birdrl env serve``; the server leases, scores and
    releases."""

    def policy(messages: list[dict[str, Any]]) -> str:
        if replies(messages) == 0:
            return call("execute_sql", "SELECT 1")
        return call("submit_solution", task_of(messages, bench_tasks).sol_sql)

    fake = chat(policy)
    bench = open_benchmark("bundled:test", None)
    tasks = {t.instance_id: t for t in bench_tasks[:3]}
    with ServedEnv(tasks, bench.databases, ServeConfig(port=0, max_sessions=2)) as served:
        env = load_environment("bundled:test", server=served.url)
        episodes = run_episodes(env, fake, list(tasks)[:2])
        assert served.service is not None
        stats = served.service.stats()
    assert [only_trace(e).rewards[REWARD_NAME].score for e in episodes] == [1.0, 1.0]
    assert stats["episodes"] == 2 and stats["submitted"] == 2 and stats["leased"] == 0


def test_unreadable_replies_end_at_the_turn_limit(
    bench_tasks: list[Task], chat: Callable[[Policy], FakeChat]
) -> None:
    fake = chat(lambda messages: "I would rather not call a tool.")
    env = load_environment("bundled:test", max_turns=3)
    (episode,) = run_episodes(env, fake, [bench_tasks[0].instance_id])
    trace = only_trace(episode)
    assert trace.rewards[REWARD_NAME].score == 0.0
    assert trace.info["stop_reason"] == "max_turns"
    assert len(fake.requests) == 3
    hint = [m for m in fake.requests[1] if m["role"] == "user"][-1]["content"]
    assert "tool_call" in hint  # the parser's hint went back to the agent


def test_unknown_task_spec_is_a_clear_error() -> None:
    with pytest.raises(Exception, match="no-such-spec"):
        list(load_environment("no-such-spec").taskset)
