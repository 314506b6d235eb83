"""A tiny randomly initialised Qwen2-style chat model, built fully offline (CI, smoke runs).

The tokenizer is a byte-level BPE trained on a small built-in corpus (the system prompts,
the tool schemas, tool-call text, the bundled schemas and training tasks, SQL keywords),
so prompts of this project tokenize compactly; its chat template is TRL's Qwen2.5 template,
read from the installed ``trl`` package, which TRL recognises by identity to parse tool
calls. Any byte string round-trips through it; the model itself produces noise."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import uuid
from importlib import resources
from pathlib import Path
from typing import Any

from birdrl.errors import BirdrlError

__all__ = ["TinyModelError", "build_tiny_model", "qwen_chat_template"]

MARKER = "birdrl-tiny.json"
"""The file in a built directory recording what it was built from (for idempotency)."""

FORMAT_VERSION = 1
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
HEAD_DIM = 16

_SQL_WORDS = (
    "SELECT DISTINCT FROM WHERE AND OR NOT NULL IS IN EXISTS BETWEEN LIKE GLOB AS ON JOIN "
    "LEFT RIGHT FULL INNER OUTER CROSS NATURAL USING GROUP BY HAVING ORDER ASC DESC LIMIT "
    "OFFSET UNION ALL INTERSECT EXCEPT WITH RECURSIVE CASE WHEN THEN ELSE END CAST COALESCE "
    "IFNULL NULLIF COUNT SUM AVG MIN MAX ROUND LENGTH SUBSTR UPPER LOWER TRIM REPLACE INSTR "
    "DATE TIME DATETIME JULIANDAY STRFTIME OVER PARTITION ROW_NUMBER RANK DENSE_RANK LAG LEAD "
    "INSERT INTO VALUES UPDATE SET DELETE CREATE TABLE VIEW INDEX TRIGGER DROP ALTER ADD "
    "COLUMN PRIMARY KEY FOREIGN REFERENCES UNIQUE CHECK DEFAULT INTEGER TEXT REAL BLOB "
    "NUMERIC AUTOINCREMENT BEGIN COMMIT ROLLBACK TRANSACTION PRAGMA IF"
)


class TinyModelError(BirdrlError):
    """The tiny model could not be built (bad parameters, a directory that is not ours)."""


def qwen_chat_template() -> str:
    """TRL's Qwen2.5 chat template, exactly as the installed ``trl`` ships it.

    TRL recognises this template by identity (to render tool calls and parse them back),
    so it is read at runtime rather than copied; raises a `BirdrlError` without ``trl``."""
    try:
        entry = resources.files("trl").joinpath("chat_templates/qwen2_5.jinja")
        return entry.read_text(encoding="utf-8")
    except ModuleNotFoundError as exc:
        raise BirdrlError(
            "the Qwen2.5 chat template is read from the installed trl package, which is "
            'not installed; install the training extra (pip install -e ".[train]")'
        ) from exc
    except FileNotFoundError as exc:
        raise BirdrlError(
            f"the installed trl package has no chat_templates/qwen2_5.jinja ({exc}); "
            "install a trl version that ships it"
        ) from exc


def _corpus() -> list[str]:
    """The built-in tokenizer training corpus (deterministic; package data only)."""
    from birdrl.env.prompts import SYSTEM_AGENT, SYSTEM_SINGLE
    from birdrl.env.tools import TOOLS, render_tool_call

    texts = [SYSTEM_AGENT, SYSTEM_SINGLE, _SQL_WORDS, _SQL_WORDS.lower()]
    texts += [json.dumps(tool) for tool in TOOLS]
    texts += [
        render_tool_call("execute_sql", {"sql": "SELECT 1"}),
        render_tool_call("submit_solution", {"sql": "SELECT name FROM t WHERE id = 1;"}),
        "<tool_response>\n| id | name |\n|----|------|\n| 1 | a |\n(1 row)\n</tool_response>",
        "<answer>\n```sql\nSELECT 1;\n```\n</answer>",
        "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
    ]
    package = resources.files("birdrl.tasks.bundled")
    schemas = sorted(
        (e for e in package.joinpath("schema").iterdir() if e.name.endswith(".sql")),
        key=lambda e: e.name,
    )
    texts += [entry.read_text(encoding="utf-8") for entry in schemas]
    tasks = package.joinpath("tasks/train.jsonl")
    if tasks.is_file():
        for line in tasks.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                texts.append(str(row.get("query", "")))
                texts += [str(sql) for sql in row.get("issue_sql", []) + row.get("sol_sql", [])]
    return texts


def _spec(
    seed: int,
    hidden_size: int,
    layers: int,
    vocab_size: int,
    head_dim: int,
    corpus: list[str],
    template: str,
) -> dict[str, Any]:
    import transformers

    digest = hashlib.sha256("\x00".join(corpus).encode("utf-8")).hexdigest()
    return {
        "format": FORMAT_VERSION,
        "seed": seed,
        "hidden_size": hidden_size,
        "layers": layers,
        "vocab_size": vocab_size,
        "head_dim": head_dim,
        "corpus_sha256": digest,
        "chat_template_sha256": hashlib.sha256(template.encode("utf-8")).hexdigest(),
        "transformers": transformers.__version__,
    }


def _read_marker(dest: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((dest / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _check_params(hidden_size: int, layers: int, vocab_size: int, head_dim: int) -> None:
    if head_dim < 1 or hidden_size < head_dim or hidden_size % head_dim:
        raise TinyModelError(
            f"hidden_size must be a positive multiple of head_dim {head_dim}, not {hidden_size}"
        )
    if layers < 1:
        raise TinyModelError(f"layers must be at least 1, not {layers}")
    if vocab_size < 300:
        raise TinyModelError(
            f"vocab_size must be at least 300 (256 bytes, 3 special tokens, some merges), not {vocab_size}"
        )


def _write_tokenizer(out: Path, corpus: list[str], vocab_size: int, template: str) -> Any:
    """Train the BPE with the exact pipeline of ``Qwen2Tokenizer`` (NFC, Qwen's split regex,
    byte level), then save it as a ``Qwen2Tokenizer``: transformers 5 rebuilds that pipeline
    from vocab and merges when it loads the directory, so both must agree."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
    from tokenizers.trainers import BpeTrainer
    from transformers import Qwen2Tokenizer
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    bpe = Tokenizer(models.BPE())
    bpe.normalizer = normalizers.NFC()
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    bpe.decoder = decoders.ByteLevel()
    trainer = BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(corpus, trainer)
    trained = json.loads(bpe.to_str())["model"]
    settings: dict[str, Any] = {
        "vocab": trained["vocab"],
        "merges": [tuple(pair) for pair in trained["merges"]],
        "unk_token": None,  # byte level: every string is representable
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "extra_special_tokens": ["<|im_start|>"],
        "chat_template": template,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 4096,
    }
    tokenizer = Qwen2Tokenizer(**settings)
    tokenizer.save_pretrained(str(out))
    return tokenizer


def _write_model(
    out: Path,
    tokenizer: Any,
    seed: int,
    hidden_size: int,
    layers: int,
    vocab_size: int,
    head_dim: int,
) -> None:
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    pad_id = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    eos_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    heads = hidden_size // head_dim
    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=4 * hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads // 2 if heads % 2 == 0 else heads,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=pad_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
    )
    with torch.random.fork_rng(devices=[]):  # seeded init without touching the global RNG
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        bos_token_id=pad_id, eos_token_id=eos_id, pad_token_id=pad_id
    )
    model.save_pretrained(str(out), safe_serialization=True)


def build_tiny_model(
    dest: Path,
    *,
    seed: int = 0,
    hidden_size: int = 64,
    layers: int = 2,
    vocab_size: int = 1024,
    head_dim: int = HEAD_DIM,
    force: bool = False,
) -> Path:
    """Build a random tiny Qwen2-style chat model into `dest` and return `dest`
    (`head_dim` 32 or more for vLLM's CPU attention, which has no kernel for 16).

    The directory loads with ``AutoModelForCausalLM`` / ``AutoTokenizer``. When `dest`
    already holds a model built from the same parameters (and the same corpus, chat
    template and transformers version), nothing is rewritten unless `force`. A non-empty
    `dest` that was not built here is never overwritten: this raises `TinyModelError`."""
    from birdrl.agents.models import require_hf

    require_hf("torch", "transformers", "tokenizers", "trl")
    _check_params(hidden_size, layers, vocab_size, head_dim)
    dest = Path(dest).expanduser()
    template = qwen_chat_template()
    corpus = _corpus()
    spec = _spec(seed, hidden_size, layers, vocab_size, head_dim, corpus, template)
    if not force and _read_marker(dest) == spec and (dest / "config.json").is_file():
        return dest
    if dest.exists() and (
        not dest.is_dir() or (any(dest.iterdir()) and _read_marker(dest) is None)
    ):
        raise TinyModelError(
            f"{dest} exists and does not hold a tiny model built by birdrl; refusing to "
            "overwrite it (choose another directory or remove it)"
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{dest.name}.build-", dir=dest.parent))
    try:
        tokenizer = _write_tokenizer(work, corpus, vocab_size, template)
        _write_model(work, tokenizer, seed, hidden_size, layers, vocab_size, head_dim)
        (work / MARKER).write_text(json.dumps(spec, indent=1), encoding="utf-8")
        old = None
        if dest.exists():  # ours (checked above): move it aside, then swap the new one in
            old = dest.with_name(f".{dest.name}.old-{os.getpid()}-{uuid.uuid4().hex[:8]}")
            dest.rename(old)
        try:
            work.rename(dest)
        except OSError:
            # another process finished the same build first: keep theirs if it matches
            if _read_marker(dest) != spec:
                raise
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    return dest
