"""Stage `tokenizer`: a T5-style Unigram tokenizer shared by the target and the draft.

Special ids follow T5: 0 ``<pad>`` (also the decoder start), 1 ``</s>``, 2 ``<unk>``.
The encoder input gets ``</s>`` appended by the post-processor, exactly as T5's tokenizer does.
"""

from __future__ import annotations

import json
import os
import random

from .data import load_jsonl

SPECIALS = ["<pad>", "</s>", "<unk>"]


def train_tokenizer(work_dir: str, vocab_size: int = 4096, seed: int = 0, max_texts: int = 120_000):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    rows = load_jsonl(os.path.join(work_dir, "data", "train.jsonl"))
    texts = []
    for r in rows:
        texts.append(r["source"])
        texts.append(r["reference"])
    random.Random(seed).shuffle(texts)
    texts = texts[:max_texts]

    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Sequence(
        [normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")]
    )
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    trainer = trainers.UnigramTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIALS,
        unk_token="<unk>",
        max_piece_length=12,
        shrinking_factor=0.75,
        n_sub_iterations=2,
        show_progress=True,
    )
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    assert [tok.token_to_id(s) for s in SPECIALS] == [0, 1, 2], "special ids must be T5's"
    tok.post_processor = processors.TemplateProcessing(
        single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", 1)]
    )
    out_dir = os.path.join(work_dir, "tokenizer")
    save_hf_tokenizer(tok, out_dir)
    return out_dir


def save_hf_tokenizer(tok, out_dir: str):
    """Save as tokenizer.json + tokenizer_config.json loadable by AutoTokenizer offline."""
    from transformers import PreTrainedTokenizerFast

    os.makedirs(out_dir, exist_ok=True)
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        eos_token="</s>",
        unk_token="<unk>",
        model_max_length=512,
        padding_side="right",
    )
    hf.save_pretrained(out_dir)
    # Keep the config explicit and minimal so both old and new transformers load it the same way.
    cfg_path = os.path.join(out_dir, "tokenizer_config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg.update({"tokenizer_class": "PreTrainedTokenizerFast", "pad_token": "<pad>", "eos_token": "</s>",
                "unk_token": "<unk>", "model_max_length": 512, "padding_side": "right"})
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=2, ensure_ascii=False)
    return out_dir


def load_tokenizer(path: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)
