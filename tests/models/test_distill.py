"""Sequence-level distillation data: the cached target outputs are the target's greedy outputs (checked against
transformers' own generate()), and the cache resumes and invalidates correctly."""

import json
import os
import shutil

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TARGET = os.path.join(ROOT, "models", "target")
PROMPTS = os.path.join(ROOT, "models", "prompts", "test.jsonl")

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(TARGET, "model.safetensors")),
                                reason="default pair not built")

N = 40  # sources: 1 batch of summarize + 1 of translate at most, a few seconds on 2 cores


@pytest.fixture()
def work(tmp_path):
    """A recipe work dir: data/train.jsonl (test prompts stand in for training rows) and target/."""
    (tmp_path / "data").mkdir()
    rows = [json.loads(line) for line in open(PROMPTS, encoding="utf-8")]
    rows = rows[:30] + [r for r in rows if r["task"] == "translate"][:30]
    with open(tmp_path / "data" / "train.jsonl", "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    shutil.copytree(TARGET, tmp_path / "target")
    return tmp_path


def test_target_outputs_are_greedy_generate(work):
    from specdec.models.distill import target_outputs
    from specdec.models.data import MAX_TGT

    tok = transformers.AutoTokenizer.from_pretrained(str(work / "target"))
    pairs = target_outputs(str(work), tok, N, seed=3, threads=1)
    assert len(pairs) >= N // 2  # most sources end in </s> within the length limit
    model = transformers.T5ForConditionalGeneration.from_pretrained(str(work / "target"), dtype=torch.float32)
    model.eval()
    summarize_prefix = tok("summarize:", add_special_tokens=False).input_ids
    for src, out in pairs:
        assert out[-1] == 1 and 1 not in out[:-1]
        task = "summarize" if src[: len(summarize_prefix)] == summarize_prefix else "translate"
        assert len(out) <= MAX_TGT[task]
        ref = model.generate(torch.tensor([src]), do_sample=False, num_beams=1, max_new_tokens=MAX_TGT[task])
        assert ref[0, 1:].tolist() == out, "cached output differs from transformers' greedy generate()"


def test_cache_resumes_and_invalidates(work):
    from specdec.models.distill import target_outputs

    tok = transformers.AutoTokenizer.from_pretrained(str(work / "target"))
    first = target_outputs(str(work), tok, N, seed=3, threads=1)
    path = work / "distill" / "target_outputs.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if json.loads(line).get("batch_end")) + 1
    assert cut < len(lines), "need at least two batches to test resuming"
    path.write_text("".join(lines[:cut]), encoding="utf-8")       # as if stopped after the first batch
    assert target_outputs(str(work), tok, N, seed=3, threads=1) == first
    assert path.read_text(encoding="utf-8").splitlines(keepends=True) == lines

    # Another subset size or a retrained target: the cache is rebuilt, not reused.
    other = target_outputs(str(work), tok, N // 2, seed=3, threads=1)
    assert len(other) < len(first)
    os.utime(work / "target" / "model.safetensors", (1, 1))
    assert target_outputs(str(work), tok, N, seed=3, threads=1) == first
