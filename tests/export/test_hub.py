"""A hub id resolves through the real Hugging Face resolution code, from a local hub cache, offline."""

from __future__ import annotations

from tinymodels import fill_hub_cache, read_manifest, run_export_cli

TARGET_COMMIT = "1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d"
DRAFT_COMMIT = "fedcba9876543210fedcba9876543210fedcba98"


def test_export_by_hub_id_from_an_offline_cache(tiny_pair, tmp_path, monkeypatch, offline_hub_factory):
    cache = offline_hub_factory(tmp_path / "hub")
    fill_hub_cache(cache, "tiny-org/tiny-t5", tiny_pair[0], TARGET_COMMIT)
    fill_hub_cache(cache, "tiny-org/tiny-t5-draft", tiny_pair[1], DRAFT_COMMIT)
    monkeypatch.chdir(tmp_path)                # no local folder called tiny-org/ can shadow the id
    assert not (tmp_path / "tiny-org").exists()

    code, stdout, stderr = run_export_cli(["--target", "tiny-org/tiny-t5", "--draft", "tiny-org/tiny-t5-draft",
                                           "--export", "out", "--gamma-max", "4", "--max-length", "32"])
    assert code == 0, stderr
    manifest = read_manifest(tmp_path / "out")
    target, draft = manifest["models"]["target"], manifest["models"]["draft"]
    assert (target["source"], target["revision"]) == ("tiny-org/tiny-t5", TARGET_COMMIT)
    assert (draft["source"], draft["revision"]) == ("tiny-org/tiny-t5-draft", DRAFT_COMMIT)
    assert target["architecture"]["d_model"] == 32 and draft["architecture"]["d_model"] == 16
    assert "exported tiny-org/tiny-t5 (target) + tiny-org/tiny-t5-draft (draft)" in stdout
    assert offline_hub_factory.connections == []


def test_hub_id_missing_from_the_offline_cache_names_the_cache(tiny_pair, tmp_path, monkeypatch,
                                                               offline_hub_factory):
    """The cache holds another repository only: the error is about the id, from the offline cache."""
    cache = offline_hub_factory(tmp_path / "hub")
    fill_hub_cache(cache, "tiny-org/tiny-t5", tiny_pair[0], TARGET_COMMIT)
    monkeypatch.chdir(tmp_path)
    code, stdout, stderr = run_export_cli(["--target", "tiny-org/tiny-t5", "--draft", "tiny-org/not-cached",
                                           "--export", "out"])
    assert code == 2 and stderr.count("\n") == 1 and "Traceback" not in stderr
    assert stderr.startswith("error: model 'tiny-org/not-cached' could not be found in the local Hugging Face "
                             "cache (HF_HUB_OFFLINE is set)")
    assert offline_hub_factory.connections == []
