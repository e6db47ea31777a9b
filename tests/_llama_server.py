"""`python -m llama_cpp.server`, with llama.cpp's extra weight buffers off.

usage: python _llama_server.py [llama_cpp.server's arguments]

llama.cpp repacks weights into "extra" buffer types where the CPU has the instructions
for them: AMX tiles on Sapphire Rapids and later Xeons. On virtual machines with such
CPUs the AMX path crashes the server with a general protection fault on its first
completion (seen here: exit -11 in `libggml-cpu`, llama-cpp-python 0.3.36; reported
upstream as ggml-org/llama.cpp#20824). The server has no flag for it, so this launcher
turns llama.cpp's `use_extra_bufts` model parameter off before the server loads the
model: the weights stay in plain CPU buffers, on every machine alike.
"""

from __future__ import annotations

from typing import Any

import llama_cpp.llama_cpp as native
from llama_cpp.server.__main__ import main

_defaults = native.llama_model_default_params


def _without_extra_buffers() -> Any:
    params = _defaults()
    params.use_extra_bufts = False
    return params


if __name__ == "__main__":
    native.llama_model_default_params = _without_extra_buffers
    main()
