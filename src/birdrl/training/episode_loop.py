"""Stage 4's episode loop: how TRL's ``GRPOTrainer`` turns a tool-calling completion into
a multi-turn episode, replaced so the token ids it trains on are the conversation the
model will see at evaluation.

TRL 1.16's loop (``_tool_call_loop``) differs from an episode of the SQL-Act environment
in three ways, each fixed here:

* **After the submission.** It runs every tool call, appends the result and generates
  again until ``max_tool_calling_iterations``: a turn conditioned on "Submitted. k of n
  hidden test(s) passed" was generated and trained. Here an episode whose environment
  ended (`birdrl.training.environment.episode_over`: submitted, or its tool budget spent)
  stops at the assistant turn that ended it.
* **An overflowing tool result** was thrown away after the tool had run, and the episode
  ended without its next turn (scored 0: one large result punished looking). Here it is
  cut to fit, with a visible marker (`CUT_MARKER`), and a result never takes more than half
  of what is left of the episode's token budget, so the model keeps room to act on it.
* **The tool-result tokens** are the chat template's: they are the ids between the
  assistant turn's end-of-turn token and the next assistant header in the template's
  rendering of the conversation. TRL cuts there by ``tokenizer.eos_token_id``, which is a
  phantom turn when eos is not the template's end-of-turn token; training loads align eos
  with the template first (`birdrl.agents.chat.end_of_turn_token`), and this loop cuts by
  the end-of-turn token itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from birdrl.agents.chat import end_of_turn_token
from birdrl.errors import BirdrlError
from birdrl.training.environment import episode_over

__all__ = ["CUT_MARKER", "cut_to_fit", "episode_loop_trainer", "tool_suffix_ids"]

CUT_MARKER = "\n[... cut: {hidden} more characters did not fit the context]"
"""Appended to a tool result cut to fit the episode's budget."""

_PROBE = [{"role": "user", "content": "u"}]


def tool_suffix_ids(
    tokenizer: Any, tool_messages: Sequence[dict[str, Any]], **template: Any
) -> list[int]:
    """The ids the chat template puts between an assistant turn's end-of-turn token and
    the next assistant turn's first generated token, when `tool_messages` answer it: the
    tool results and the next assistant header. `template`: ``apply_chat_template``'s
    ``chat_template`` and extra keyword arguments."""
    call = {"type": "function", "function": {"name": tool_messages[0]["name"], "arguments": {}}}
    before = [*_PROBE, {"role": "assistant", "content": "", "tool_calls": [call]}]
    prefix = tokenizer.apply_chat_template(
        before, tokenize=True, add_generation_prompt=False, return_dict=False, **template
    )
    full = tokenizer.apply_chat_template(
        [*before, *tool_messages],
        tokenize=True,
        add_generation_prompt=True,
        return_dict=False,
        **template,
    )
    end = tokenizer.convert_tokens_to_ids(end_of_turn_token(tokenizer))
    ends = [i for i, token in enumerate(prefix) if token == end]
    if not ends:
        raise BirdrlError("the chat template rendered an assistant turn without its end-of-turn")
    prefix = prefix[: ends[-1] + 1]
    if full[: len(prefix)] != prefix:
        raise BirdrlError(
            "the chat template renders an assistant turn differently when tool results "
            "follow it; multi-turn token ids cannot be built by concatenation"
        )
    return list(full[len(prefix) :])


def cut_to_fit(content: str, fits: Any) -> str | None:
    """The longest head of `content`, with `CUT_MARKER`, for which ``fits(text)`` holds
    (binary search over characters); None when not even the marker alone fits."""
    marked = lambda keep: content[:keep] + CUT_MARKER.format(hidden=len(content) - keep)  # noqa: E731
    if not fits(marked(0)):
        return None
    low, high = 0, len(content)
    while low < high:
        mid = (low + high + 1) // 2
        if fits(marked(mid)):
            low = mid
        else:
            high = mid - 1
    return marked(low)


def episode_loop_trainer(base: type) -> type:
    """`base` (TRL's ``GRPOTrainer`` or a subclass) with the episode loop of the module
    docstring in place of TRL's ``_tool_call_loop``."""
    from trl.chat_template_utils import parse_response

    class EpisodeLoopGRPOTrainer(base):  # type: ignore[misc, valid-type]
        def _tool_call_loop(  # type: ignore[override]
            self,
            prompts: list[list[dict[str, Any]]],
            prompt_ids: list[list[int]],
            completion_ids: list[list[int]],
            completions: list[list[dict[str, Any]]],
            logprobs: list[list[float]] | None,
            images: Any,
            multimodal_fields: Any,
        ) -> tuple[Any, ...]:
            if self._is_vlm or images is not None:
                raise BirdrlError("birdrl's episode loop is text-only (no images or VLMs)")
            mask = [[1] * len(ids) for ids in completion_ids]
            counts = {"calls": 0, "failures": 0}
            pending = {
                i: c[0]["tool_calls"] for i, c in enumerate(completions) if c[0].get("tool_calls")
            }
            rounds = 0
            while pending and rounds < self.max_tool_calling_iterations:
                rounds += 1
                again: list[int] = []
                for i, calls in pending.items():
                    prompts[i].append(completions[i][-1])
                    results = [self._run_tool(i, call, counts) for call in calls]
                    if self.environments is not None and episode_over(self.environments[i]):
                        # the submission (or the spent budget) ends the episode here
                        prompts[i].extend(results)
                        completions[i].extend(results)
                        continue
                    suffix = self._fit_results(i, results, prompt_ids[i], completion_ids[i])
                    prompts[i].extend(results)
                    completions[i].extend(results)
                    if suffix is None:
                        continue  # no room left for a next turn: the episode ends unsubmitted
                    completion_ids[i] += suffix
                    mask[i] += [0] * len(suffix)
                    if logprobs is not None:
                        logprobs[i] += [0.0] * len(suffix)
                    again.append(i)
                if not again:
                    break
                contexts = [prompt_ids[i] + completion_ids[i] for i in again]
                new_ids, new_logprobs = self._generate_single_turn(
                    contexts, None, {}, num_generations=1, has_tool_images=False
                )
                pending = {}
                for k, i in enumerate(again):
                    keep = max(0, self.max_completion_length - len(completion_ids[i]))
                    ids = list(new_ids[k][:keep])
                    completion_ids[i] += ids
                    mask[i] += [1] * len(ids)
                    if logprobs is not None:
                        logprobs[i] += list(new_logprobs[k][:keep])
                    if not ids:
                        continue
                    turn = parse_response(
                        self._tokenizer, ids, prefix=contexts[k], tools=self._tools_of(i)
                    )
                    completions[i].append(turn)
                    if turn.get("tool_calls"):
                        pending[i] = turn["tool_calls"]
            tool_images: list[list[Any]] = [[] for _ in completion_ids]
            return (
                mask,
                completions,
                completion_ids,
                logprobs,
                counts["calls"],
                counts["failures"],
                tool_images,
            )

        def _tools_of(self, i: int) -> Any:
            if self.environment_factories is not None:
                return self._env_tools[self._batch_environments[i]]
            return self.tools

        def _run_tool(self, i: int, call: dict[str, Any], counts: dict[str, int]) -> dict[str, Any]:
            """Run one parsed tool call of sample `i`; a failure becomes the tool's answer
            (the model sees the error), as in TRL."""
            counts["calls"] += 1
            function = call.get("function", {})
            name = function.get("name", call.get("name", "unknown"))
            try:
                if call.get("type") != "function":
                    raise BirdrlError(f"unsupported tool call type {call.get('type')!r}")
                arguments = function.get("arguments") or {}
                if name in self._sync_tool_dicts[i]:
                    result: Any = self._sync_tool_dicts[i][name](**arguments)
                elif name in self._async_tool_dicts[i]:
                    coro = self._async_tool_dicts[i][name](**arguments)
                    result = asyncio.run_coroutine_threadsafe(coro, self.async_loop).result()
                else:
                    raise BirdrlError(f"Tool {name} not found.")
            except Exception as exc:  # noqa: BLE001 - the model's bad call is its observation
                counts["failures"] += 1
                result = {"error": str(exc)}
            return {"role": "tool", "name": name, "content": str(result)}

        def _context_ceiling(self) -> int:
            if self.use_vllm and self.vllm_mode == "colocate":
                return int(self.vllm_generation.llm.llm_engine.model_config.max_model_len)
            return int(self.model.config.max_position_embeddings)

        def _fit_results(
            self,
            i: int,
            results: list[dict[str, Any]],
            prompt: list[int],
            completion: list[int],
        ) -> list[int] | None:
            """The suffix ids of `results` (cut in place when they would overflow: the
            module docstring), or None when no next turn fits."""
            room = min(
                self.max_completion_length - len(completion),
                self._context_ceiling() - 1 - len(prompt) - len(completion),
            )
            template = {"chat_template": self.chat_template, **self.chat_template_kwargs}
            suffix = tool_suffix_ids(self.processing_class, results, **template)
            if len(suffix) <= room // 2:
                return suffix
            # cut the longest result first until the whole suffix takes half the room
            order = sorted(range(len(results)), key=lambda n: -len(results[n]["content"]))
            for n in order:
                original = results[n]["content"]

                def fits(text: str, n: int = n) -> bool:
                    trial = [*results[:n], dict(results[n], content=text), *results[n + 1 :]]
                    return (
                        len(tool_suffix_ids(self.processing_class, trial, **template)) <= room // 2
                    )

                cut = cut_to_fit(original, fits)
                if cut is not None:
                    results[n] = dict(results[n], content=cut)
                    return tool_suffix_ids(self.processing_class, results, **template)
                results[n] = dict(results[n], content=CUT_MARKER.format(hidden=len(original)))
            return None

    EpisodeLoopGRPOTrainer.__name__ = f"EpisodeLoop{base.__name__}"
    EpisodeLoopGRPOTrainer.__qualname__ = EpisodeLoopGRPOTrainer.__name__
    return EpisodeLoopGRPOTrainer
