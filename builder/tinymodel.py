"""The tiny model of the embedded default: a Llama-architecture checkpoint generated from a seed.

This module owns every byte of that checkpoint: its configuration, its byte-level BPE tokenizer
(with the chat template vLLM's chat API needs) and its weights. The same code writes the same
bytes on every run and every host, so the files can be pinned by sha256 in the manifest:

- weights come from the raw 64-bit stream of numpy's PCG64 bit generator, which numpy keeps
  stable across releases (unlike `Generator`'s distribution methods), mapped to float32 by
  arithmetic written here;
- the safetensors container and every JSON file are serialised here, with a fixed key order,
  no timestamps and no library version, so neither `safetensors` nor `tokenizers` nor
  `transformers` can change a byte.

No torch is needed. Uniform weights in ±0.2·√3 (standard deviation 0.2) give varied greedy
outputs; the conventional 0.02 makes a random model repeat one token forever.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import struct
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from repro_serving.builder.errors import BadInput
from repro_serving.builder.hashing import sha256_file

SEED = 20240531
WEIGHT_STD = 0.2

BOS_TOKEN = "<|begin_of_text|>"
EOS_TOKEN = "<|end_of_text|>"
PAD_TOKEN = "<|pad|>"
# Appended after the 256 byte tokens, in this order: their ids are 256, 257, ...
SPECIAL_TOKENS = (
    BOS_TOKEN,
    EOS_TOKEN,
    PAD_TOKEN,
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|end|>",
    "<|reserved_0|>",
)

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + '<|end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)

FILE_NAMES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
)


@dataclass(frozen=True)
class Architecture:
    """The shape of the tiny Llama; head_dim 32 is the smallest vLLM's CPU attention accepts."""

    hidden_size: int = 128
    intermediate_size: int = 384
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 4
    max_position_embeddings: int = 2048

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def vocab_size(self) -> int:
        return 256 + len(SPECIAL_TOKENS)


ARCHITECTURE = Architecture()
REPO_ID = "repro/tiny-llama"


def revision() -> str:
    """The model's immutable revision: the git tree id of its files, as `git write-tree` over
    the generated directory gives it (mode 100644 blobs, names in byte order)."""
    entries = b"".join(
        b"100644 " + name.encode() + b"\0" + _git_object(b"blob", content)
        for name, content in sorted(_files(ARCHITECTURE).items())
    )
    return _git_object(b"tree", entries).hex()


def _git_object(kind: bytes, content: bytes) -> bytes:
    header = kind + b" " + str(len(content)).encode() + b"\0"
    return hashlib.sha1(header + content, usedforsecurity=False).digest()


def generate(dest: Path) -> dict[str, str]:
    """Write the tiny model into the new directory `dest`; return file name → sha256.

    The directory appears whole or not at all (written beside it, then renamed). An existing
    `dest` holding exactly these bytes is accepted as is; one holding anything else is refused.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        for name, content in _files(ARCHITECTURE).items():
            (staging / name).write_bytes(content)
        digests = file_digests(staging)
        if dest.exists():
            _accept_existing(dest, digests)
        else:
            staging.rename(dest)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return digests


def file_digests(directory: Path) -> dict[str, str]:
    """sha256 of each regular file directly in `directory`, by name."""
    return {path.name: sha256_file(path) for path in sorted(directory.iterdir()) if path.is_file()}


def _accept_existing(dest: Path, digests: dict[str, str]) -> None:
    found = file_digests(dest) if dest.is_dir() else {}
    if found != digests:
        raise BadInput(
            "the tiny model's destination already exists with other content",
            where=str(dest),
            expected=f"absent, or exactly the files {sorted(digests)} with their pinned bytes",
            found=f"{'files ' + str(sorted(found)) if found else 'not a directory of files'}",
            hint="remove it or choose another directory",
        )


def _files(arch: Architecture) -> dict[str, bytes]:
    return {
        "config.json": _json_bytes(_config(arch)),
        "generation_config.json": _json_bytes(_generation_config()),
        "model.safetensors": _safetensors_bytes(dict(_weights(arch))),
        "special_tokens_map.json": _json_bytes(_special_tokens_map()),
        "tokenizer.json": _json_bytes(_tokenizer()),
        "tokenizer_config.json": _json_bytes(_tokenizer_config()),
    }


def _json_bytes(document: dict[str, Any]) -> bytes:
    """Key order as built (it is part of the pinned bytes), two-space indent, LF, UTF-8."""
    return (json.dumps(document, indent=2, ensure_ascii=False) + "\n").encode()


def _token_id(token: str) -> int:
    return 256 + SPECIAL_TOKENS.index(token)


def _config(arch: Architecture) -> dict[str, Any]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": arch.vocab_size,
        "hidden_size": arch.hidden_size,
        "intermediate_size": arch.intermediate_size,
        "num_hidden_layers": arch.num_layers,
        "num_attention_heads": arch.num_heads,
        "num_key_value_heads": arch.num_kv_heads,
        "head_dim": arch.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": arch.max_position_embeddings,
        "initializer_range": WEIGHT_STD,
        "rms_norm_eps": 1e-05,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "use_cache": True,
        "bos_token_id": _token_id(BOS_TOKEN),
        "eos_token_id": _token_id(EOS_TOKEN),
        "pad_token_id": _token_id(PAD_TOKEN),
        "torch_dtype": "float32",
    }


def _generation_config() -> dict[str, Any]:
    return {
        "bos_token_id": _token_id(BOS_TOKEN),
        "eos_token_id": _token_id(EOS_TOKEN),
        "pad_token_id": _token_id(PAD_TOKEN),
    }


def _special_tokens_map() -> dict[str, Any]:
    return {"bos_token": BOS_TOKEN, "eos_token": EOS_TOKEN, "pad_token": PAD_TOKEN}


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte → printable character table that byte-level BPE vocabularies are keyed by."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    table = {byte: chr(byte) for byte in printable}
    shifted = 0
    for byte in range(256):
        if byte not in table:
            table[byte] = chr(256 + shifted)
            shifted += 1
    return dict(sorted(table.items()))


def _tokenizer() -> dict[str, Any]:
    byte_level = {"add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [_added_token(token) for token in SPECIAL_TOKENS],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", **byte_level},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", **byte_level},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": {char: byte for byte, char in bytes_to_unicode().items()},
            "merges": [],
        },
    }


def _added_token(token: str) -> dict[str, Any]:
    return {
        "id": _token_id(token),
        "content": token,
        "single_word": False,
        "lstrip": False,
        "rstrip": False,
        "normalized": False,
        "special": True,
    }


def _tokenizer_config() -> dict[str, Any]:
    decoder = {
        str(_token_id(token)): {
            key: value for key, value in _added_token(token).items() if key != "id"
        }
        for token in SPECIAL_TOKENS
    }
    return {
        "added_tokens_decoder": decoder,
        "bos_token": BOS_TOKEN,
        "eos_token": EOS_TOKEN,
        "pad_token": PAD_TOKEN,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": ARCHITECTURE.max_position_embeddings,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "chat_template": CHAT_TEMPLATE,
    }


def _tensor_shapes(arch: Architecture) -> Iterator[tuple[str, tuple[int, ...]]]:
    """Every tensor of a Llama checkpoint in the order the random stream fills them."""
    hidden, heads_dim = arch.hidden_size, arch.num_heads * arch.head_dim
    kv_dim = arch.num_kv_heads * arch.head_dim
    yield "model.embed_tokens.weight", (arch.vocab_size, hidden)
    for layer in range(arch.num_layers):
        prefix = f"model.layers.{layer}"
        yield f"{prefix}.input_layernorm.weight", (hidden,)
        yield f"{prefix}.self_attn.q_proj.weight", (heads_dim, hidden)
        yield f"{prefix}.self_attn.k_proj.weight", (kv_dim, hidden)
        yield f"{prefix}.self_attn.v_proj.weight", (kv_dim, hidden)
        yield f"{prefix}.self_attn.o_proj.weight", (hidden, heads_dim)
        yield f"{prefix}.post_attention_layernorm.weight", (hidden,)
        yield f"{prefix}.mlp.gate_proj.weight", (arch.intermediate_size, hidden)
        yield f"{prefix}.mlp.up_proj.weight", (arch.intermediate_size, hidden)
        yield f"{prefix}.mlp.down_proj.weight", (hidden, arch.intermediate_size)
    yield "model.norm.weight", (hidden,)
    yield "lm_head.weight", (arch.vocab_size, hidden)


def _weights(arch: Architecture) -> Iterator[tuple[str, npt.NDArray[np.float32]]]:
    """Norm weights are ones; every matrix is uniform with standard deviation WEIGHT_STD."""
    bits = np.random.PCG64(SEED)
    for name, shape in _tensor_shapes(arch):
        if name.endswith("norm.weight"):
            yield name, np.ones(shape, dtype=np.float32)
        else:
            yield name, _uniform(bits, shape, half_width=WEIGHT_STD * math.sqrt(3.0))


def _uniform(
    bits: np.random.PCG64, shape: tuple[int, ...], *, half_width: float
) -> npt.NDArray[np.float32]:
    """Uniform floats in [-half_width, half_width) from the top 53 bits of raw draws."""
    raw = np.asarray(bits.random_raw(math.prod(shape)), dtype=np.uint64)
    unit = (raw >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))
    return ((unit * 2.0 - 1.0) * half_width).astype(np.float32).reshape(shape)


def _safetensors_bytes(tensors: dict[str, npt.NDArray[np.float32]]) -> bytes:
    """The safetensors container: u64 header length, JSON header padded to 8 bytes, data.

    Tensors are laid out in name order, little-endian float32, with the metadata fixed to
    {"format": "pt"} (what vLLM's loader expects of a PyTorch-layout checkpoint).
    """
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    chunks: list[bytes] = []
    offset = 0
    for name in sorted(tensors):
        data = np.ascontiguousarray(tensors[name], dtype="<f4").tobytes()
        header[name] = {
            "dtype": "F32",
            "shape": list(tensors[name].shape),
            "data_offsets": [offset, offset + len(data)],
        }
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(chunks)
