"""What makes CPU runs faster without changing what is trained: bf16 autocast on generation
only (`bf16_generation`), and glibc keeping freed memory (`keep_freed_memory`)."""

from __future__ import annotations

import ctypes.util
import subprocess
import sys

import pytest

pytest.importorskip("trl", reason="training tests need the `train` extra (trl)")

import torch  # noqa: E402

from birdrl.training.models import (  # noqa: E402
    autocast_generation,
    load_policy,
    resolve_training_model,
)


def test_autocast_generation_casts_generate_but_not_the_training_forward() -> None:
    model = load_policy(resolve_training_model("tiny-random"), "float32")
    seen: list[torch.dtype] = []
    head = model.get_output_embeddings()
    hook = head.register_forward_hook(lambda _m, _i, out: seen.append(out.dtype))
    ids = torch.tensor([[1, 2, 3, 4]])
    try:
        model.generate(input_ids=ids, max_new_tokens=2, do_sample=False)
        assert set(seen) == {torch.float32}  # plain: float32 throughout
        autocast_generation(model)
        seen.clear()
        model.generate(input_ids=ids, max_new_tokens=2, do_sample=False)
        generated = set(seen)
        seen.clear()
        model(input_ids=ids, labels=ids).loss.backward()
    finally:
        hook.remove()
    assert generated == {torch.bfloat16}
    assert set(seen) == {torch.float32}
    assert {p.grad.dtype for p in model.parameters() if p.grad is not None} == {torch.float32}


_RSS_AFTER_FREE = """
import sys
from birdrl.training.allocator import keep_freed_memory

def rss_mb() -> float:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")

changed = keep_freed_memory() if sys.argv[1] == "keep" else False
before = rss_mb()
block = bytearray(256 * 2**20)  # one 256 MiB allocation, every page written
del block
print(changed, round(rss_mb() - before))
"""


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or ctypes.util.find_library("c") is None,
    reason="glibc's mallopt: Linux only",
)
def test_keep_freed_memory_keeps_a_freed_block_mapped() -> None:
    def run(mode: str) -> tuple[str, int]:
        out = subprocess.run(
            [sys.executable, "-c", _RSS_AFTER_FREE, mode],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        return out[0], int(out[1])

    changed, kept = run("keep")
    _, unmapped = run("default")
    assert changed == "True"
    assert kept >= 200  # the freed 256 MiB stayed in the process for the next allocation
    assert unmapped < 50  # glibc's default: unmapped on free
