"""The speech pair's committed form (models/speech_pack.py): a target and a draft that keeps its encoder, packed
as int8 rows with fp16 scales, come back as checkpoints whose logits are the originals' within the rounding, the
draft's encoder the target's; the draft's initialisation (speech_train.draft_from) copies the target's first and last
decoder layers; a missing pack is a one-line error."""

from __future__ import annotations

import json

import pytest
import torch

from specdec.models import speech_pack, speech_train
from specdec.models import speech_vocab as sv
from specdec.models.speech_data import WINDOW_S
from specdec.runtime.core.errors import SpecdecError

SMALL = dict(d_model=64, encoder_layers=2, decoder_layers=3, encoder_attention_heads=2, decoder_attention_heads=2,
             encoder_ffn_dim=128, decoder_ffn_dim=128)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A random speech target (small widths) and its draft, saved as the training stages save them."""
    from transformers import WhisperForConditionalGeneration

    work = tmp_path_factory.mktemp("work")
    specials = sv.speech_specials(4096, WINDOW_S, ("<unk>", 2))
    torch.manual_seed(0)
    config = speech_train.target_config(specials)
    for k, v in SMALL.items():
        setattr(config, k, v)
    target = WhisperForConditionalGeneration(config).eval()
    draft = speech_train.draft_from(target).eval()
    with torch.no_grad():
        for p in draft.model.decoder.parameters():
            p.add_(0.01 * torch.randn_like(p))
    for role, model in (("target", target), ("draft", draft)):
        model.save_pretrained(str(work / f"speech-{role}"))
        (work / f"speech-{role}" / "train_info.json").write_text(json.dumps({"steps": 0}))
    return work, target, draft


@pytest.mark.parametrize("layers, sources", [(None, [0, 2]), (2, [0, 2]), (1, [2])])
def test_the_draft_starts_from_the_targets_first_and_last_decoder_layers(trained, layers, sources):
    _, target, _ = trained
    draft = speech_train.draft_from(target, layers)
    assert draft.config.decoder_layers == len(sources) and speech_train.DRAFT_LAYERS == 2
    t, d = target.state_dict(), draft.state_dict()
    for name, value in d.items():
        if name.startswith("model.decoder.layers."):
            layer = int(name.split(".")[3])
            source = name.replace(f"layers.{layer}.", f"layers.{sources[layer]}.", 1)
            assert torch.equal(value, t[source]), name
        elif name != speech_pack.TIED:
            assert torch.equal(value, t[name]), name
    with pytest.raises(SpecdecError, match="a draft of 3 decoder layers"):
        speech_train.draft_from(target, 3)


def test_phase_two_goes_on_from_the_last_decoders_and_keeps_the_new_encoder(trained, tmp_path):
    """--resume of speech-decoders: the decoder (embeddings and tied projection too) comes from the saved phase-2
    checkpoint, the encoder stays the one phase 1 just trained; no checkpoint, nothing loaded."""
    from transformers import WhisperForConditionalGeneration

    work, target, draft = trained
    torch.manual_seed(1)
    fresh = WhisperForConditionalGeneration(target.config).eval()
    encoder = {k: v.clone() for k, v in fresh.model.encoder.state_dict().items()}
    fresh = speech_train.decoder_from(fresh, str(work / "speech-target"))
    for name, value in target.model.decoder.state_dict().items():
        assert torch.equal(fresh.model.decoder.state_dict()[name], value), name
    kept = fresh.model.encoder.state_dict()
    assert all(torch.equal(value, encoder[name]) for name, value in kept.items())
    assert not all(torch.equal(value, target.model.encoder.state_dict()[name]) for name, value in kept.items())
    assert torch.equal(fresh.proj_out.weight, target.model.decoder.embed_tokens.weight)
    other = speech_train.decoder_from(speech_train.draft_from(fresh), str(work / "speech-draft"))
    assert torch.equal(other.model.decoder.layers[1].fc1.weight, draft.model.decoder.layers[1].fc1.weight)
    assert speech_train.decoder_from(fresh, str(tmp_path / "nothing")) is None
    deeper = speech_train.deepen(target, 5)
    deeper.save_pretrained(str(tmp_path / "deeper"))
    back = speech_train.decoder_from(fresh, str(tmp_path / "deeper"))
    assert back.config.decoder_layers == 5 and torch.equal(back.model.encoder.layers[0].fc1.weight,
                                                            fresh.model.encoder.layers[0].fc1.weight)


def test_a_deepened_target_computes_what_it_did_and_its_added_layers_can_learn(trained):
    """deepen: 3 decoder layers grown to 8 give the same logits (each added layer adds nothing to the residual stream),
    the trained layers keep their weights in order, and every added layer gets a gradient (its zeroed outputs); fewer
    layers than the trained ones is a one-line error."""
    _, target, _ = trained
    deeper = speech_train.deepen(target, 8).eval()
    assert deeper.config.decoder_layers == 8 and target.config.decoder_layers == 3
    torch.manual_seed(2)
    feats = torch.randn(2, target.config.num_mel_bins, 2 * target.config.max_source_positions)
    tokens = torch.randint(0, target.config.vocab_size, (2, 7))
    with torch.no_grad():
        want = target(input_features=feats, decoder_input_ids=tokens).logits
        got = deeper(input_features=feats, decoder_input_ids=tokens).logits
    assert torch.allclose(got, want, atol=1e-5), (got - want).abs().max()
    kept = [i for i, layer in enumerate(deeper.model.decoder.layers) if layer.fc2.weight.abs().sum() > 0]
    assert kept == [0, 2, 5]
    for new, old in zip(kept, target.model.decoder.layers):
        assert torch.equal(deeper.model.decoder.layers[new].fc1.weight, old.fc1.weight)
    assert torch.equal(deeper.proj_out.weight, deeper.model.decoder.embed_tokens.weight)
    deeper.train()
    deeper(input_features=feats, decoder_input_ids=tokens).logits.square().mean().backward()
    for i, layer in enumerate(deeper.model.decoder.layers):
        assert layer.fc2.weight.grad.abs().sum() > 0, i
    with pytest.raises(SpecdecError, match="fewer than the trained decoder's 3 layers"):
        speech_train.deepen(target, 2)


def test_phase_two_goes_on_from_phase_two_results_else_from_the_committed_pair(trained, tmp_path):
    """previous_decoders: the work directory's checkpoints when phase 2 wrote them (train_info has decoder_steps),
    else the committed models/speech unpacked (phase 1 writes work/speech-target over a phase-2 target)."""
    import shutil

    work, _, _ = trained
    mine = tmp_path / "work"
    shutil.copytree(work, mine)
    committed = speech_train.previous_decoders(str(mine), log=lambda m: None)
    assert committed == {role: str(mine / "committed" / role) for role in ("target", "draft")}
    for role in ("target", "draft"):
        assert json.loads((mine / "committed" / role / "config.json").read_text())["d_model"] == 256
        (mine / f"speech-{role}" / "train_info.json").write_text(json.dumps({"decoder_steps": 5}))
    assert speech_train.previous_decoders(str(mine)) == {role: str(mine / f"speech-{role}")
                                                          for role in ("target", "draft")}


def test_packed_checkpoints_compute_what_the_trained_ones_did(trained, tmp_path):
    work, target, draft = trained
    packed = speech_pack.pack(str(work), tmp_path / "speech")
    size = (packed / speech_pack.WEIGHTS).stat().st_size
    fp32 = 4 * (sum(p.numel() for p in target.parameters()) +
                sum(p.numel() for n, p in draft.named_parameters() if not n.startswith("model.encoder.")))
    assert size < fp32 / 3.5, "int8 rows: about a quarter of the fp32 bytes, the draft's encoder stored once"
    paths = speech_pack.checkpoints(tmp_path / "ckpt", packed)
    from transformers import WhisperForConditionalGeneration

    feats = torch.randn(1, 80, WINDOW_S * 100)
    ids = torch.tensor([[4097, 4098, 4099, 4101, 10, 20, 30]])
    for role, original in (("target", target), ("draft", draft)):
        back = WhisperForConditionalGeneration.from_pretrained(str(paths[role])).eval()
        with torch.no_grad():
            want = original(input_features=feats, decoder_input_ids=ids).logits
            got = back(input_features=feats, decoder_input_ids=ids).logits
        err = (got - want).abs().max().item()
        assert err < 0.05 * want.abs().max().item(), f"{role}: logits off by {err}"
        assert (got.argmax(-1) == want.argmax(-1)).float().mean() > 0.8
        assert back.model.decoder.embed_tokens.weight.data_ptr() == back.proj_out.weight.data_ptr()
        assert (paths[role] / "tokenizer.json").exists() and (paths[role] / "preprocessor_config.json").exists()
    t_back = WhisperForConditionalGeneration.from_pretrained(str(paths["target"]))
    d_back = WhisperForConditionalGeneration.from_pretrained(str(paths["draft"]))
    for name, value in t_back.model.encoder.state_dict().items():
        assert torch.equal(value, d_back.model.encoder.state_dict()[name]), name


def test_a_draft_with_another_encoder_is_refused(trained, tmp_path):
    from transformers import WhisperForConditionalGeneration

    work, _, _ = trained
    other = WhisperForConditionalGeneration.from_pretrained(str(work / "speech-draft"))
    with torch.no_grad():
        other.model.encoder.layer_norm.weight.add_(1.0)
    bad = tmp_path / "work"
    (bad / "speech-target").parent.mkdir(parents=True, exist_ok=True)
    import shutil

    shutil.copytree(work / "speech-target", bad / "speech-target")
    other.save_pretrained(str(bad / "speech-draft"))
    (bad / "speech-draft" / "train_info.json").write_text("{}")
    with pytest.raises(SpecdecError, match="differs from the target's"):
        speech_pack.pack(str(bad), tmp_path / "speech")


def test_a_missing_pack_is_a_one_line_error(tmp_path):
    with pytest.raises(SpecdecError, match="is missing") as err:
        speech_pack.checkpoints(tmp_path / "out", tmp_path / "nothing")
    assert "\n" not in str(err.value)
