"""An agent for any OpenAI-compatible chat endpoint (OpenAI, vLLM, SGLang, llama.cpp, ...).

Standard library only: one ``POST {base_url}/chat/completions`` per conversation, at most
`OpenAIConfig.concurrency` in flight, retried with exponential backoff on connection errors,
timeouts, HTTP 429 and 5xx. With `OpenAIConfig.native_tools` the tool specs are sent as
``tools`` and the returned ``tool_calls`` are rendered into the ``<tool_call>`` text protocol
(`birdrl.agents.base.render_tool_call`), so the environment parses every agent the same way.

`OpenAIAgent.generate` raises an `AgentError` when any conversation of the batch fails:
callers record that as an infrastructure failure (``StopReason.INFRA_ERROR``), never as a
wrong answer.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import random
import re
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from birdrl.agents.base import GenerationConfig, render_tool_call
from birdrl.env.parse import parse_turn
from birdrl.env.types import Message
from birdrl.errors import BirdrlError

__all__ = [
    "AgentError",
    "EndpointError",
    "EndpointUnreachable",
    "OpenAIAgent",
    "OpenAIConfig",
    "to_openai_messages",
]

DEFAULT_BASE_URL = "https://api.openai.com/v1"
MAX_RETRY_AFTER_S = 60.0
"""A server's numeric ``Retry-After`` is honoured up to this many seconds."""

_KEPT_KEYS = ("role", "content", "name", "tool_calls", "tool_call_id")
_TOOL_BLOCK = re.compile(r"<tool_call>.*?(?:</tool_call>|$)", re.DOTALL)
_DEFAULT_TOOL_NAMES = ("execute_sql", "submit_solution")


class AgentError(BirdrlError):
    """An agent could not produce its output (an infrastructure failure, not a bad answer)."""


class EndpointUnreachable(AgentError):
    """The endpoint could not be reached (refused, DNS, reset, timed out) after all retries."""

    def __init__(self, url: str, reason: str, attempts: int) -> None:
        self.url, self.reason, self.attempts = url, reason, attempts
        base = url.rsplit("/chat/completions", 1)[0]
        super().__init__(
            f"cannot reach the OpenAI-compatible endpoint {url} after {attempts} attempt(s): "
            f"{reason}. Check that the server is running and that base_url is right "
            f"(e.g. `curl {base}/models`)."
        )


class EndpointError(AgentError):
    """The endpoint answered with an HTTP error that retrying does not fix (or stopped fixing),
    or with a body that is not a chat completion."""

    def __init__(self, url: str, status: int, message: str, attempts: int = 1) -> None:
        self.url, self.status, self.server_message, self.attempts = url, status, message, attempts
        tries = f" after {attempts} attempts" if attempts > 1 else ""
        super().__init__(f"{url} answered HTTP {status}{tries}: {message}")


def _default_base_url() -> str:
    return os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL


@dataclass(frozen=True)
class OpenAIConfig:
    """How to reach an OpenAI-compatible chat endpoint and how to sample from it."""

    model: str
    """The model name the server knows (``"gpt-4o-mini"``, ``"Qwen/Qwen2.5-7B-Instruct"``)."""
    base_url: str = field(default_factory=_default_base_url)
    """The API root, e.g. ``http://localhost:8000/v1``; default ``$OPENAI_BASE_URL``, else
    the OpenAI API."""
    api_key_env: str = "OPENAI_API_KEY"
    """Name of the environment variable holding the key, read at call time and never logged;
    when it is unset no ``Authorization`` header is sent (fine for local servers)."""
    native_tools: bool = True
    """Send ``tools`` and turn returned ``tool_calls`` into ``<tool_call>`` text; False: the
    text protocol (no ``tools`` sent, tool results sent as ``<tool_response>`` user turns)."""
    timeout_s: float = 60.0
    """Per-request timeout (connect and each read), in seconds."""
    max_retries: int = 4
    """Retries after the first attempt on connection errors, timeouts, HTTP 429 and 5xx."""
    backoff_base_s: float = 0.5
    """Backoff before retry k is drawn from [d/2, d] with d = min(cap, base * 2**k)."""
    backoff_cap_s: float = 8.0
    """Upper bound of one backoff delay (a numeric ``Retry-After`` replaces the backoff)."""
    concurrency: int = 8
    """Most requests in flight at once within one `OpenAIAgent.generate` call."""
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    """Sampling: max_new_tokens (sent as ``max_tokens``), temperature, top_p, seed."""

    def __post_init__(self) -> None:
        if not self.model:
            raise AgentError("OpenAIConfig.model is required")
        if not self.base_url.startswith(("http://", "https://")):
            raise AgentError(f"OpenAIConfig.base_url must be an http(s) URL, got {self.base_url!r}")
        if self.concurrency < 1 or self.max_retries < 0 or self.timeout_s <= 0:
            raise AgentError(
                "OpenAIConfig needs concurrency >= 1, max_retries >= 0 and timeout_s > 0 "
                f"(got {self.concurrency}, {self.max_retries}, {self.timeout_s})"
            )


def to_openai_messages(
    conversation: Sequence[Message],
    *,
    native_tools: bool,
    tool_names: Sequence[str] = _DEFAULT_TOOL_NAMES,
) -> list[dict[str, Any]]:
    """The environment's conversation as an OpenAI ``messages`` list.

    Native: each ``<tool_call>`` block of an assistant message that `parse_turn` reads
    becomes a ``tool_calls`` entry with id ``call_<turn>_<i>`` (turn = index of the assistant
    message, i = index of the call in it); the text outside the blocks stays as content (None
    when empty). The following tool messages take those ids in order; a tool message with no
    call left to answer is sent as a user message ``"Tool result:\\n" + content``, and calls
    left unanswered are dropped (the API rejects them). Text mode: tool messages become user
    messages wrapped in ``<tool_response>...</tool_response>``. Keys other than role, content,
    name, tool_calls and tool_call_id are dropped."""
    out: list[dict[str, Any]] = []
    pending: deque[str] = deque()
    open_call: dict[str, Any] | None = None  # the assistant message whose calls are pending
    turn = 0

    def close_calls() -> None:
        if open_call is not None and pending:
            unanswered = set(pending)
            kept = [c for c in open_call["tool_calls"] if c["id"] not in unanswered]
            if kept:
                open_call["tool_calls"] = kept
            else:
                del open_call["tool_calls"]
                open_call["content"] = open_call["content"] or ""
        pending.clear()

    for message in conversation:
        msg = {k: message[k] for k in _KEPT_KEYS if k in message}
        role = msg.get("role")
        content = msg.get("content")
        if role == "tool":
            text = "" if content is None else str(content)
            if not native_tools:
                out.append(
                    {"role": "user", "content": f"<tool_response>\n{text}\n</tool_response>"}
                )
            elif pending:
                reply = {"role": "tool", "tool_call_id": pending.popleft(), "content": text}
                if "name" in msg:
                    reply["name"] = msg["name"]
                out.append(reply)
            else:
                out.append({"role": "user", "content": "Tool result:\n" + text})
            continue
        close_calls()
        open_call = None
        if role == "assistant" and native_tools:
            if "tool_calls" not in msg and isinstance(content, str) and "<tool_call>" in content:
                _split_tool_calls(msg, content, turn, tool_names)
            if msg.get("tool_calls"):
                open_call = msg
                pending.extend(c["id"] for c in msg["tool_calls"] if "id" in c)
            turn += 1
        out.append(msg)
    close_calls()
    return out


def _split_tool_calls(
    msg: dict[str, Any], content: str, turn: int, tool_names: Sequence[str]
) -> None:
    """Move the readable ``<tool_call>`` blocks of `content` into ``msg["tool_calls"]``."""
    calls: list[dict[str, Any]] = []

    def take(block: re.Match[str]) -> str:
        parsed = parse_turn(block.group(0), tools=tool_names).calls
        if not parsed:
            return block.group(0)  # unreadable: the model's text stays as it was
        for call in parsed:
            calls.append(
                {
                    "id": f"call_{turn}_{len(calls)}",
                    "type": "function",
                    "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
                }
            )
        return ""

    rest = _TOOL_BLOCK.sub(take, content).strip()
    if calls:
        msg["tool_calls"] = calls
        msg["content"] = rest or None


def _render_tool_calls(tool_calls: Any) -> list[str]:
    """Returned ``tool_calls`` in the text protocol. Arguments that are not a JSON object are
    passed on as a string, so `parse_turn` tells the model (a bad turn is data, not a crash)."""
    rendered = []
    for call in tool_calls if isinstance(tool_calls, list) else []:
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            continue
        args = fn.get("arguments", {})
        if isinstance(args, str):
            with contextlib.suppress(ValueError):  # left a string: parse_turn reports it
                args = json.loads(args) if args.strip() else {}
        if isinstance(args, dict):
            rendered.append(render_tool_call(fn["name"], args))
        else:
            payload = json.dumps({"name": fn["name"], "arguments": args})
            rendered.append(f"<tool_call>\n{payload}\n</tool_call>")
    return rendered


def _server_message(raw: bytes) -> str:
    """The error message of an error body (OpenAI ``{"error": {"message"}}``, FastAPI
    ``{"detail"}``), else the body itself, shortened."""
    text = raw.decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        return text[:500] or "(empty body)"
    if isinstance(data, dict):
        err = data.get("error") or data.get("detail") or data.get("message")
        if isinstance(err, dict):
            err = err.get("message") or err
        if err:
            return str(err)[:500]
    return text[:500]


def _retry_after(headers: Any) -> float | None:
    """A numeric ``Retry-After`` header in seconds (capped), else None."""
    value = headers.get("Retry-After") if headers is not None else None
    try:
        return min(max(float(value), 0.0), MAX_RETRY_AFTER_S) if value is not None else None
    except ValueError:
        return None  # an HTTP date: fall back to the backoff


class OpenAIAgent:
    """Writes assistant turns with an OpenAI-compatible ``/chat/completions`` endpoint.

    `usage` keeps running totals: prompt_tokens and completion_tokens (when the server
    reports them), requests (HTTP requests sent, retries included) and retries."""

    def __init__(self, config: OpenAIConfig, name: str | None = None) -> None:
        self.config = config
        self.name = name or f"openai:{config.model}"
        self.usage: dict[str, int] = {
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "requests": 0,
            "retries": 0,
        }
        self._url = config.base_url.rstrip("/") + "/chat/completions"
        self._lock = threading.Lock()
        self._random = random.Random()
        self._opener = urllib.request.build_opener()

    def generate(
        self,
        conversations: Sequence[Sequence[Message]],
        tools: Sequence[dict[str, Any]] | None = None,
    ) -> list[str]:
        """One assistant text per conversation, in order. Raises `EndpointUnreachable` or
        `EndpointError` if any conversation fails (after its retries): the batch has no
        partial result, and callers record an infrastructure failure."""
        payloads = [self.request_body(c, tools) for c in conversations]
        if not payloads:
            return []
        workers = min(self.config.concurrency, len(payloads))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="birdrl-openai") as pool:
            futures = [pool.submit(self._complete, p) for p in payloads]
            for i, future in enumerate(futures):
                try:
                    future.result()
                except AgentError as err:
                    for rest in futures:
                        rest.cancel()
                    err.add_note(f"(conversation {i} of a batch of {len(futures)})")
                    raise
            return [f.result() for f in futures]

    def request_body(
        self, conversation: Sequence[Message], tools: Sequence[dict[str, Any]] | None = None
    ) -> dict[str, Any]:
        """The JSON body sent for one conversation."""
        cfg, gen = self.config, self.config.generation
        names = [n for n in (_tool_name(t) for t in tools or ()) if n] or _DEFAULT_TOOL_NAMES
        body: dict[str, Any] = {
            "model": cfg.model,
            "messages": to_openai_messages(
                conversation, native_tools=cfg.native_tools, tool_names=names
            ),
            "max_tokens": gen.max_new_tokens,
            "temperature": gen.temperature,
            "top_p": gen.top_p,
        }
        if gen.seed is not None:
            body["seed"] = gen.seed
        if cfg.native_tools and tools:
            body["tools"] = list(tools)
        return body

    def _complete(self, body: dict[str, Any]) -> str:
        data = self._post(json.dumps(body).encode())
        try:
            message = data["choices"][0]["message"]
            content = message.get("content")
        except (KeyError, IndexError, TypeError, AttributeError):
            raise EndpointError(
                self._url, 200, f"not a chat completion: {json.dumps(data)[:300]}"
            ) from None
        usage = data.get("usage")
        if isinstance(usage, dict):
            self._count(
                prompt_tokens=int(usage.get("prompt_tokens") or 0),
                completion_tokens=int(usage.get("completion_tokens") or 0),
            )
        text = content if isinstance(content, str) else ""
        if not self.config.native_tools:
            return text
        parts = ([text] if text.strip() else []) + _render_tool_calls(message.get("tool_calls"))
        return "\n".join(parts) if parts else text

    def _post(self, body: bytes) -> dict[str, Any]:
        """One completion, retried; the decoded JSON response."""
        cfg = self.config
        attempts = cfg.max_retries + 1
        for attempt in range(attempts):
            self._count(requests=1, retries=1 if attempt else 0)
            request = urllib.request.Request(
                self._url, data=body, headers=self._headers(), method="POST"
            )
            try:
                with self._opener.open(request, timeout=cfg.timeout_s) as response:
                    raw = response.read()
            except urllib.error.HTTPError as err:
                try:
                    message = _server_message(err.read())
                except (OSError, http.client.HTTPException):
                    message = err.reason or "(no body)"
                finally:
                    err.close()
                failure: AgentError = EndpointError(self._url, err.code, message, attempt + 1)
                if err.code != 429 and err.code < 500:
                    raise failure from None
                delay = _retry_after(err.headers)
            except (OSError, http.client.HTTPException) as err:
                reason: Any = err.reason if isinstance(err, urllib.error.URLError) else err
                if isinstance(reason, TimeoutError):
                    reason = f"no answer within timeout_s={cfg.timeout_s}"
                failure = EndpointUnreachable(self._url, str(reason) or repr(reason), attempt + 1)
                delay = None
            else:
                try:
                    data = json.loads(raw)
                except ValueError:
                    data = None
                if not isinstance(data, dict):
                    raise EndpointError(
                        self._url, 200, f"the response is not a JSON object: {raw[:200]!r}"
                    )
                return data
            if attempt + 1 < attempts:
                time.sleep(delay if delay is not None else self._backoff(attempt))
        raise failure

    def _backoff(self, retry: int) -> float:
        ceiling = min(self.config.backoff_cap_s, self.config.backoff_base_s * 2**retry)
        return ceiling / 2 + self._random.uniform(0, ceiling / 2)

    def _headers(self) -> dict[str, str]:
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": "birdrl",
        }
        key = os.environ.get(self.config.api_key_env)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def _count(self, **amounts: int) -> None:
        with self._lock:
            for key, amount in amounts.items():
                self.usage[key] += amount


def _tool_name(spec: Mapping[str, Any]) -> str | None:
    fn = spec.get("function")
    name = fn.get("name") if isinstance(fn, Mapping) else spec.get("name")
    return name if isinstance(name, str) else None
