"""An extension module is known by its file name under any interpreter's suffix."""

from __future__ import annotations

import importlib.machinery

import pytest

from repro_serving.builder.native.modules import is_module_file, module_file_description


@pytest.mark.parametrize(
    "name",
    [
        "_C.cpython-311-x86_64-linux-gnu.so",
        "_C.cpython-312-x86_64-linux-gnu.so",  # a process of another Python than repro's
        "_C.cpython-313t-aarch64-linux-gnu.so",
        "_C.cpython-312-arm-linux-gnueabihf.so",
        "_C.pypy310-pp73-x86_64-linux-gnu.so",
        "_C.abi3.so",
        "_C.so",
        *(f"_C{suffix}" for suffix in importlib.machinery.EXTENSION_SUFFIXES),
    ],
)
def test_every_extension_suffix_names_the_module(name: str) -> None:
    assert is_module_file(f"/venv/site-packages/vllm/{name}", "vllm._C")


@pytest.mark.parametrize(
    "path",
    [
        "/venv/site-packages/vllm/_C_AVX2.cpython-311-x86_64-linux-gnu.so",  # another variant
        "/venv/site-packages/vllm/_C.cpython-311-x86_64-linux-gnu.so.bak",
        "/venv/site-packages/othervllm/_C.so",
        "/venv/site-packages/vllm/_C.py",
        "/venv/site-packages/vllm/x_C.so",
        "/venv/site-packages/vllmX_C.so",  # the dot is a directory, not any character
    ],
)
def test_other_files_do_not(path: str) -> None:
    assert not is_module_file(path, "vllm._C")


def test_the_description_names_the_module_path() -> None:
    assert module_file_description("torch._C").startswith("/torch/_C")
