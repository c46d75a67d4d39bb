"""The datastore in a decoder: the export's own (specdec-export --datastore), another attached at load, none; greedy
output equal to target-only decoding with it; and every bad datastore a one-line error at load, the decoder usable.
The index itself is tested against a brute-force search in test_datastore.py, the sampling in test_distribution.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from hostile_exports import sha256
from tinymodels import (add_datastore, random_prompts, read_manifest, run_export_cli, tokenizer_size,
                        write_tiny_tokenizer)

from specdec.runtime import SpecdecError, SpeculativeDecoder
from specdec.runtime.tools.datastore_build import write


@pytest.fixture(scope="module")
def stored(tiny_export, tmp_path_factory):
    """(export with a datastore of the target's own greedy outputs for prompts A, plus noise, prompts A, B). The
    export has the real T5 layout (tiny_pair: 48 rows, a tokenizer of 40 ids): the prompts hold padded rows' ids
    too, and the datastore, being text, holds the outputs' ids the tokenizer makes."""
    export = tmp_path_factory.mktemp("stored") / "export"
    shutil.copytree(tiny_export, export)
    plain = SpeculativeDecoder.load(export, provider="cpu")
    vocab, text = plain.vocab_size, plain.vocabulary.tokenizer_size
    assert text < vocab
    prompts_a, prompts_b = random_prompts(vocab, 10, seed=11), random_prompts(vocab, 10, seed=12)
    outputs = [plain.generate(input_ids=p, draft="none", max_new_tokens=24).token_ids for p in prompts_a]
    noise = [list(p) for p in random_prompts(text, 40, seed=13)]
    add_datastore(export, [[t for t in out if t < text] for out in outputs] + noise)
    return export, prompts_a, prompts_b


def test_greedy_output_equals_target_only_with_a_datastore(stored):
    export, prompts_a, prompts_b = stored
    dec = SpeculativeDecoder.load(export, provider="cpu")
    assert dec.datastore is not None and dec.datastore.segments == 50
    copied = 0
    for prompt in prompts_a + prompts_b:
        ref = dec.generate(input_ids=prompt, draft="none", max_new_tokens=24).token_ids
        for draft, gamma in (("lookup", 3), ("lookup", "auto"), ("lookup,draft", 4), ("auto", "auto"),
                             ("lookup", 8)):
            result = dec.generate(input_ids=prompt, draft=draft, gamma=gamma, max_new_tokens=24)
            assert result.token_ids == ref, (prompt, draft, gamma)
            if draft == "lookup" and gamma == 8:
                copied += result.stats.accepted
    assert copied > 100, "the datastore holds these outputs: the lookup must copy much of them"


def test_load_options(stored, tmp_path):
    export, prompts_a, _ = stored
    raw = read_manifest(export)
    assert SpeculativeDecoder.load(export, provider="cpu", datastore=False).datastore is None
    other = write(tmp_path / "other.sdds", [[5, 6, 7]], tokenizer_size(export), raw["files"]["tokenizer.json"])
    dec = SpeculativeDecoder.load(export, provider="cpu", datastore=str(other))
    assert dec.datastore.path == other and dec.datastore.segments == 1
    # without the export's datastore the lookup copies less of those outputs
    with_store = SpeculativeDecoder.load(export, provider="cpu")
    kept = [sum(d.generate(input_ids=p, draft="lookup", gamma=8, max_new_tokens=24).stats.accepted
                for p in prompts_a) for d in (with_store, dec)]
    assert kept[0] > kept[1], kept


def _refused(*expected, **kwargs):
    with pytest.raises(SpecdecError) as err:
        SpeculativeDecoder.load(provider="cpu", **kwargs)
    message = str(err.value)
    assert "\n" not in message and all(e in message for e in expected), message


def _edited(stored, tmp_path, name, change):
    export = tmp_path / name
    shutil.copytree(stored[0], export)
    raw = read_manifest(export)
    change(export, raw)
    (export / "manifest.json").write_text(json.dumps(raw))
    return export


def test_bad_datastores_are_one_line_errors_and_the_decoder_stays_usable(stored, tmp_path):
    export, prompts_a, _ = stored
    dec = SpeculativeDecoder.load(export, provider="cpu")
    before = dec.generate(input_ids=prompts_a[0], max_new_tokens=24).token_ids
    raw = read_manifest(export)
    size, sha = tokenizer_size(export), raw["files"]["tokenizer.json"]
    foreign = write(tmp_path / "foreign.sdds", [[5, 6, 7]], size, "cd" * 32)
    bigger = write(tmp_path / "bigger.sdds", [[5, 6, 7]], size + 100, sha)
    rows = write(tmp_path / "rows.sdds", [[5, 6, 7]], raw["vocab_size"], sha)      # the model's rows: not text's
    cut = tmp_path / "cut.sdds"
    cut.write_bytes((export / "datastore.sdds").read_bytes()[:-3])
    _refused("another tokenizer", export_dir=export, datastore=foreign)
    _refused("tokenizer of 140 ids", "makes 40", export_dir=export, datastore=bigger)
    _refused("tokenizer of 48 ids", "makes 40", export_dir=export, datastore=rows)
    _refused("truncated or corrupt", export_dir=export, datastore=cut)
    _refused("does not exist", export_dir=export, datastore=tmp_path / "nothing.sdds")
    _refused("datastore must be a path", export_dir=export, datastore=123)

    def outside(e, r):
        r["datastore"] = "../outside.sdds"
    _refused("datastore", "'..'", export_dir=_edited(stored, tmp_path, "dotdot", outside))

    def unlisted(e, r):
        shutil.copy(e / "datastore.sdds", e / "second.sdds")
        r["datastore"] = "second.sdds"
    _refused("not among the checksummed", export_dir=_edited(stored, tmp_path, "unlisted", unlisted))

    def truncated(e, r):
        path = e / "datastore.sdds"
        path.write_bytes(path.read_bytes()[:-8])
        r["files"]["datastore.sdds"] = sha256(path)
    _refused("truncated or corrupt", "re-run specdec-export", export_dir=_edited(stored, tmp_path, "cut", truncated))

    def changed(e, r):
        path = e / "datastore.sdds"
        data = bytearray(path.read_bytes())
        data[-1] ^= 1
        path.write_bytes(bytes(data))
    _refused("does not match its sha256", export_dir=_edited(stored, tmp_path, "flipped", changed))
    assert dec.generate(input_ids=prompts_a[0], max_new_tokens=24).token_ids == before


def test_export_and_datastore_cli(tiny_pair, tmp_path):
    """specdec-export --datastore indexes text with the export's tokenizer; specdec-datastore build / add / info
    make and check one on their own; bad input is one line on stderr, exit status 2."""
    text = tmp_path / "text.txt"
    text.write_text("w5 w6 w7 w8\n\nw9 w10 w5 w6\n")
    records = tmp_path / "text.jsonl"
    records.write_text(json.dumps({"reference": "w11 w12 w13"}) + "\n")
    out = tmp_path / "export"
    code, stdout, stderr = run_export_cli(["--target", tiny_pair[0], "--draft", tiny_pair[1], "--export", out,
                                           "--gamma-max", "4", "--max-length", "32", "--datastore-text", text, records,
                                           "--datastore-text-field", "reference"])
    assert code == 0, stderr
    dec = SpeculativeDecoder.load(out, provider="cpu")
    # the real T5 layout (tiny_pair): the model's rows past its tokenizer's ids; the datastore holds the tokenizer's
    assert (dec.vocab_size, dec.vocabulary.tokenizer_size, dec.datastore.tokenizer_size) == (48, 40, 40)
    assert dec.datastore.segments == 3 and dec.datastore.tokens == 4 + 4 + 3 + 3      # each line ends in </s>
    tokens = dec.tokenizer.encode("w9 w10").ids[:-1]
    assert dec.datastore.continuations([dec.datastore.sep] + tokens, 3)[1] == [dec.tokenizer.encode("w5 w6").ids[:2]
                                                                              + [dec.eos_id]]

    code, _, stderr = run_export_cli(["--target", tiny_pair[0], "--draft", tiny_pair[1], "--export", tmp_path / "x",
                                      "--datastore-text", tmp_path / "missing.txt"])
    assert code == 2 and "does not exist" in stderr and len(stderr.strip().splitlines()) == 1

    def cli(*args):
        done = subprocess.run([sys.executable, "-m", "specdec.runtime.tools.datastore", *map(str, args)],
                              capture_output=True, text=True, timeout=120)
        return done.returncode, done.stdout, done.stderr

    store = tmp_path / "store.sdds"
    assert cli("build", text, "--export", out, "--out", store)[0] == 0
    code, stdout, _ = cli("info", store, "--export", out, "--json")
    assert code == 0 and json.loads(stdout)["segments"] == 2
    assert cli("add", store, records, "--export", out, "--field", "reference")[0] == 0
    assert json.loads(cli("info", store, "--json")[1])["segments"] == 3
    for args, expected in ((("build", text, "--export", out, "--out", store), "already exists"),
                           (("build", text, "--export", out, "--out", tmp_path / "no" / "s.sdds"), "does not exist"),
                           (("build", text, "--export", out, "--out", tmp_path, "--force"), "is a folder"),
                           (("build", text, "--export", out, "--out", "/proc/s.sdds"), "cannot write the datastore"),
                           (("build", records, "--export", out, "--out", tmp_path / "r.sdds"), "--field"),
                           (("info", text), "not a specdec datastore"),
                           (("build", text, "--export", tmp_path, "--out", tmp_path / "t.sdds"), "no tokenizer"),
                           (("info", store, "--export", write_tiny_tokenizer(tmp_path / "tok", vocab=44)),
                            "another tokenizer")):
        code, _, stderr = cli(*args)
        lines = stderr.strip().splitlines()         # a write that fails comes after the tokenizing's progress line
        assert code == 2 and expected in lines[-1] and lines[-1].startswith("error: "), (args, stderr)
        assert len(lines) == 1 or expected == "cannot write the datastore" and "Traceback" not in stderr, (args, stderr)
    assert SpeculativeDecoder.load(out, provider="cpu", datastore=store).datastore.segments == 3
