"""The tiny random chat model: built offline, loadable, tool-capable template, idempotent."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="the tiny model needs torch (hf extra)")
transformers = pytest.importorskip("transformers", reason="the tiny model needs transformers")
pytest.importorskip("trl", reason="the chat template is read from trl (training extra)")

from birdrl.errors import BirdrlError  # noqa: E402
from birdrl.training.tiny import (  # noqa: E402
    MARKER,
    TinyModelError,
    build_tiny_model,
    qwen_chat_template,
)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def tokenizer(tiny_dir: Path) -> Any:
    return transformers.AutoTokenizer.from_pretrained(tiny_dir)


def _conversation() -> list[dict[str, Any]]:
    call = {
        "type": "function",
        "function": {"name": "execute_sql", "arguments": {"sql": "SELECT COUNT(*) FROM Track"}},
    }
    return [
        {"role": "system", "content": "You fix SQL."},
        {"role": "user", "content": "Why is my total wrong?"},
        {"role": "assistant", "content": "Let me look.", "tool_calls": [call]},
        {"role": "tool", "name": "execute_sql", "content": "| COUNT(*) |\n| 3503 |"},
        {"role": "assistant", "content": "Done."},
    ]


def test_directory_loads_as_a_chat_model(tiny_dir: Path, tokenizer: Any) -> None:
    assert (tiny_dir / "model.safetensors").is_file()
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_dir)
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert model.config.tie_word_embeddings
    assert model.config.max_position_embeddings == 4096
    assert tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.pad_token == "<|endoftext|>"
    ids = tokenizer.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    assert model.generation_config.eos_token_id == ids[2]
    assert model.generation_config.pad_token_id == ids[0]
    assert len(tokenizer) <= model.config.vocab_size == 1024


def test_chat_template_is_trls_qwen25_and_renders_tools(tokenizer: Any) -> None:
    from trl.chat_template_utils import supports_tool_calling

    assert tokenizer.chat_template == qwen_chat_template()
    assert supports_tool_calling(tokenizer)
    text = tokenizer.apply_chat_template(_conversation(), tokenize=False)
    assert "<tool_call>" in text and "</tool_call>" in text
    assert '"sql": "SELECT COUNT(*) FROM Track"' in text
    assert "<tool_response>\n| COUNT(*) |\n| 3503 |\n</tool_response>" in text
    assert text.startswith("<|im_start|>system\nYou fix SQL.<|im_end|>")
    ids = tokenizer.apply_chat_template(_conversation(), tokenize=True, return_dict=True)[
        "input_ids"
    ]
    assert ids.count(tokenizer.convert_tokens_to_ids("<|im_start|>")) == 5  # one token each


def test_forward_pass_gives_finite_logits(tiny_dir: Path, tokenizer: Any) -> None:
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_dir)
    text = tokenizer.apply_chat_template(
        _conversation()[:2], tokenize=False, add_generation_prompt=True
    )
    batch = tokenizer([text], return_tensors="pt")
    with torch.no_grad():
        logits = model(**batch).logits
    assert logits.shape == (1, batch["input_ids"].shape[1], 1024)
    assert torch.isfinite(logits).all()


@pytest.mark.parametrize(
    "text",
    [
        "SELECT g.Name, ROUND(SUM(il.UnitPrice * il.Quantity), 2) AS revenue\n"
        "FROM InvoiceLine AS il JOIN Genre AS g ON g.GenreId = t.GenreId  -- note\n"
        "\tGROUP BY g.Name ORDER BY revenue DESC;",
        "UPDATE t SET name = 'Zoë 你好' WHERE id IN (1, 2 , 3) ; ",
    ],
)
def test_sql_round_trips(tokenizer: Any, text: str) -> None:
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(ids) == text
    assert len(ids) < len(text)  # the BPE learned merges from the SQL corpus


def test_same_seed_same_weights_and_idempotent(tmp_path: Path, tiny_dir: Path) -> None:
    dest = build_tiny_model(tmp_path / "m")
    a = transformers.AutoModelForCausalLM.from_pretrained(dest).state_dict()
    b = transformers.AutoModelForCausalLM.from_pretrained(tiny_dir).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    marker = json.loads((dest / MARKER).read_text())
    assert marker["seed"] == 0 and marker["hidden_size"] == 64

    before = {p.name: p.stat().st_mtime_ns for p in dest.iterdir()}
    assert build_tiny_model(dest) == dest
    assert {p.name: p.stat().st_mtime_ns for p in dest.iterdir()} == before

    build_tiny_model(dest, force=True)
    after = {p.name: p.stat().st_mtime_ns for p in dest.iterdir()}
    assert after.keys() == before.keys()
    assert all(after[name] != before[name] for name in before)
    assert not [p for p in tmp_path.iterdir() if p.name != "m"]  # no build leftovers


def test_other_parameters_rebuild(tmp_path: Path) -> None:
    dest = build_tiny_model(tmp_path / "m", seed=1, hidden_size=32, layers=1)
    assert json.loads((dest / MARKER).read_text())["seed"] == 1
    build_tiny_model(dest, seed=2, hidden_size=32, layers=1)
    assert json.loads((dest / MARKER).read_text())["seed"] == 2
    config = transformers.AutoConfig.from_pretrained(dest)
    assert (config.hidden_size, config.num_hidden_layers) == (32, 1)


def test_refuses_foreign_directory_and_bad_parameters(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(TinyModelError, match="refusing to overwrite"):
        build_tiny_model(foreign, force=True)
    assert (foreign / "notes.txt").read_text() == "mine"
    with pytest.raises(TinyModelError, match="hidden_size"):
        build_tiny_model(tmp_path / "x", hidden_size=40)
    with pytest.raises(TinyModelError, match="vocab_size"):
        build_tiny_model(tmp_path / "x", vocab_size=100)


def test_chat_template_without_trl_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "trl", None)  # makes `import trl` fail
    with pytest.raises(BirdrlError, match="trl package, which is not installed"):
        qwen_chat_template()
