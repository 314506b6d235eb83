"""How a conversation becomes the prompt a local model reads: the tokenizer's chat template,
with the tool specs and ``tool`` messages rendered by the template when it can, else by a
fallback.

Tools reach the model through the chat template when the template renders them (Qwen2.5,
Llama 3.1, ...). Templates that ignore tools or the ``tool`` role (SmolLM2, for one) get the
fallback: the tool specs go into the system message as JSON with an instruction to answer
with ``<tool_call>{"name": ..., "arguments": ...}</tool_call>``, and ``tool`` messages
become user messages wrapped in ``<tool_response>...</tool_response>``. Every local engine
(HF ``generate``, vLLM) renders through `ChatFormat`, so a model sees the same prompt
whichever engine runs it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from birdrl.env.types import Message

__all__ = [
    "TOOL_INSTRUCTIONS",
    "ChatFormat",
    "align_eos",
    "context_length_of",
    "end_of_turn_token",
    "fallback_tool_messages",
]

_PROBE_TOOL = "birdrl_probe_tool_7f3a"
_PROBE_RESPONSE = "birdrl_probe_response_7f3a"
_PROBE_TURN = "birdrl_probe_turn_7f3a"

TOOL_INSTRUCTIONS = """# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{tools}
</tools>

For each function call, return a json object with function name and arguments within \
<tool_call></tool_call> XML tags:
<tool_call>
{{"name": <function-name>, "arguments": <args-json-object>}}
</tool_call>"""
"""Appended to the system message when the chat template cannot render tools itself."""


def fallback_tool_messages(
    messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None
) -> list[Message]:
    """`messages` rewritten for a chat template that knows neither tools nor the ``tool``
    role: tool specs as JSON in the system message, tool results as user messages wrapped
    in ``<tool_response>`` tags (consecutive results merged into one message)."""
    out: list[Message] = []
    for message in messages:
        role = message.get("role")
        content = str(message.get("content") or "")
        if role == "tool":
            block = f"<tool_response>\n{content}\n</tool_response>"
            if out and out[-1].get("_tool_results"):
                out[-1]["content"] += "\n" + block
            else:
                out.append({"role": "user", "content": block, "_tool_results": True})
        else:
            out.append({"role": role, "content": content})
    if tools:
        spec = TOOL_INSTRUCTIONS.format(tools="\n".join(json.dumps(t) for t in tools))
        if out and out[0]["role"] == "system":
            out[0]["content"] = f"{out[0]['content']}\n\n{spec}"
        else:
            out.insert(0, {"role": "system", "content": spec})
    return [{"role": m["role"], "content": m["content"]} for m in out]


class ChatFormat:
    """Renders conversations with `tokenizer`'s chat template (and the tool fallback when
    the template cannot render tools) and encodes them to token ids."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.native_tools = self._template_renders_tools()
        """Whether the chat template renders tool specs and ``tool`` messages itself."""

    def render(
        self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None = None
    ) -> str:
        """The prompt text the model sees for `messages`, ending with the assistant header."""
        if self.native_tools:
            return str(
                self.tokenizer.apply_chat_template(
                    [dict(m) for m in messages],
                    tools=list(tools) if tools else None,
                    add_generation_prompt=True,
                    tokenize=False,
                )
            )
        return str(
            self.tokenizer.apply_chat_template(
                fallback_tool_messages(messages, tools), add_generation_prompt=True, tokenize=False
            )
        )

    def encode(self, text: str) -> list[int]:
        """Token ids of `text` (the chat template already wrote any BOS the model needs)."""
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def prompt_ids(
        self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None = None
    ) -> list[int]:
        return self.encode(self.render(messages, tools))

    def _template_renders_tools(self) -> bool:
        from jinja2 import TemplateError

        probe = {
            "type": "function",
            "function": {
                "name": _PROBE_TOOL,
                "description": "probe",
                "parameters": {"type": "object", "properties": {}},
            },
        }
        messages = [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "ok"},
            {"role": "tool", "name": _PROBE_TOOL, "content": _PROBE_RESPONSE},
        ]
        try:
            text = self.tokenizer.apply_chat_template(
                messages, tools=[probe], add_generation_prompt=True, tokenize=False
            )
        except (TemplateError, ValueError, TypeError, KeyError):
            return False
        return _PROBE_TOOL in text and _PROBE_RESPONSE in text


def context_length_of(config: Any) -> int | None:
    """A model's context window (``max_position_embeddings``) from its HF config, if it says."""
    value = getattr(config, "max_position_embeddings", None)
    if value is None and hasattr(config, "get_text_config"):
        value = getattr(config.get_text_config(), "max_position_embeddings", None)
    return int(value) if value is not None else None


def end_of_turn_token(tokenizer: Any) -> str:
    """The special token the chat template closes an assistant turn with (``<|im_end|>``
    for ChatML, ``<|eot_id|>`` for Llama 3, ``<end_of_turn>`` for Gemma): what generation
    must stop at and what multi-turn training cuts a turn at. Raises `ModelError` when the
    template closes an assistant turn with no special token."""
    from birdrl.agents.models import ModelError

    conversation = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": _PROBE_TURN},
    ]
    text = tokenizer.apply_chat_template(conversation, tokenize=False)
    after = text[text.rindex(_PROBE_TURN) + len(_PROBE_TURN) :] if _PROBE_TURN in text else ""
    ids = tokenizer.encode(after, add_special_tokens=False) if after else []
    special = set(tokenizer.all_special_ids) | {
        i for i, t in tokenizer.added_tokens_decoder.items() if getattr(t, "special", False)
    }
    if not ids or ids[0] not in special:
        raise ModelError(
            "the chat template closes an assistant turn with "
            f"{after[:20]!r}, not a special token: generation could not stop at the end of a "
            "turn; give the tokenizer a chat template that ends turns with one"
        )
    return str(tokenizer.convert_ids_to_tokens(ids[0]))


def align_eos(tokenizer: Any, where: str) -> str | None:
    """Make the tokenizer's eos token its chat template's end-of-turn token, in place, and
    say so (None when it already was). Tokenizers converted from GGUF files declare the
    wrong one (the embedded SmolLM2's says ``<|im_start|>``), and TRL's multi-turn loop and
    the trainers' stop criteria read ``eos_token``: a wrong one put a phantom turn before
    every tool result."""
    token = end_of_turn_token(tokenizer)
    if tokenizer.eos_token == token:
        return None
    old = tokenizer.eos_token
    tokenizer.eos_token = token
    return f"the eos token of {where} was {old!r}; set to its chat template's end of turn {token!r}"
