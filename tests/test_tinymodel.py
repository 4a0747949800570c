"""The tiny model is the same bytes on every run, and a checkpoint vLLM and safetensors accept."""

from __future__ import annotations

import json
import shutil
import subprocess
import tomllib
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from repro_serving.builder import tinymodel
from repro_serving.builder.errors import BadInput

MANIFEST = Path(__file__).resolve().parent.parent / "manifests" / "tiny-cpu.toml"


def pinned_sha256() -> dict[str, str]:
    """The release file set the embedded default's manifest pins for its target model."""
    manifest = tomllib.loads(MANIFEST.read_text())
    (target,) = [model for model in manifest["model"] if model["role"] == "target"]
    files: dict[str, str] = target["files"]
    return files


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("tiny") / "model"
    tinymodel.generate(dest)
    return dest


def test_two_runs_into_different_directories_write_identical_bytes(tmp_path: Path) -> None:
    first = tinymodel.generate(tmp_path / "a")
    second = tinymodel.generate(tmp_path / "b")
    assert first == second
    for name in tinymodel.FILE_NAMES:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_every_file_matches_the_sha256_pinned_in_the_manifest(model_dir: Path) -> None:
    assert tinymodel.file_digests(model_dir) == pinned_sha256()


def test_generate_returns_the_digests_of_what_it_wrote(tmp_path: Path) -> None:
    digests = tinymodel.generate(tmp_path / "model")
    assert digests == tinymodel.file_digests(tmp_path / "model")
    assert sorted(digests) == sorted(tinymodel.FILE_NAMES)


def test_leaves_nothing_beside_the_destination(tmp_path: Path) -> None:
    tinymodel.generate(tmp_path / "model")
    assert [path.name for path in tmp_path.iterdir()] == ["model"]


def test_an_existing_identical_destination_is_accepted(tmp_path: Path) -> None:
    first = tinymodel.generate(tmp_path / "model")
    assert tinymodel.generate(tmp_path / "model") == first


def test_an_existing_destination_with_other_bytes_is_refused(tmp_path: Path) -> None:
    tinymodel.generate(tmp_path / "model")
    (tmp_path / "model" / "config.json").write_text("{}\n")
    with pytest.raises(BadInput, match="already exists with other content") as caught:
        tinymodel.generate(tmp_path / "model")
    assert str(tmp_path / "model") in caught.value.diagnostics()
    assert [path.name for path in tmp_path.iterdir()] == ["model"]


def test_weights_load_with_the_shapes_the_config_declares(model_dir: Path) -> None:
    config = json.loads((model_dir / "config.json").read_text())
    tensors = load_file(str(model_dir / "model.safetensors"))
    hidden, vocab = config["hidden_size"], config["vocab_size"]
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["torch_dtype"] == "float32"
    assert config["head_dim"] >= 32
    assert config["head_dim"] * config["num_attention_heads"] == hidden
    assert tensors["model.embed_tokens.weight"].shape == (vocab, hidden)
    assert tensors["lm_head.weight"].shape == (vocab, hidden)
    assert len(tensors) == 3 + 9 * config["num_hidden_layers"]
    assert all(tensor.dtype == np.float32 for tensor in tensors.values())
    assert float(np.std(tensors["lm_head.weight"])) == pytest.approx(tinymodel.WEIGHT_STD, rel=0.05)


def test_tokenizer_maps_every_byte_and_special_to_its_own_id(model_dir: Path) -> None:
    tokenizer = json.loads((model_dir / "tokenizer.json").read_text())
    config = json.loads((model_dir / "config.json").read_text())
    vocab = tokenizer["model"]["vocab"]
    specials = {token["content"]: token["id"] for token in tokenizer["added_tokens"]}
    assert sorted(vocab.values()) == list(range(256))
    assert sorted(specials.values()) == list(range(256, 256 + len(tinymodel.SPECIAL_TOKENS)))
    assert len(vocab) + len(specials) <= config["vocab_size"]
    assert specials[tinymodel.EOS_TOKEN] == config["eos_token_id"]


def test_tokenizer_config_carries_a_chat_template_using_declared_tokens(model_dir: Path) -> None:
    tokenizer_config = json.loads((model_dir / "tokenizer_config.json").read_text())
    declared = {entry["content"] for entry in tokenizer_config["added_tokens_decoder"].values()}
    assert tokenizer_config["chat_template"] == tinymodel.CHAT_TEMPLATE
    for marker in ("<|assistant|>", "<|end|>", "bos_token"):
        assert marker in tokenizer_config["chat_template"]
    assert "'<|' + message['role'] + '|>" in tokenizer_config["chat_template"]
    assert {"<|system|>", "<|user|>", "<|assistant|>", "<|end|>"} <= declared


def test_revision_is_the_git_tree_id_git_itself_computes(model_dir: Path, tmp_path: Path) -> None:
    repo = tmp_path / "git"
    shutil.copytree(model_dir, repo)
    git = ["git", "-C", str(repo), "-c", "core.autocrlf=false"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    tree = subprocess.run([*git, "write-tree"], check=True, capture_output=True, text=True)
    assert tinymodel.revision() == tree.stdout.strip()
    manifest = tomllib.loads(MANIFEST.read_text())
    (target,) = [model for model in manifest["model"] if model["role"] == "target"]
    assert target["revision"] == tinymodel.revision()
    assert target["repo"] == tinymodel.REPO_ID
