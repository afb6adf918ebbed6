"""The embedded default model: a tiny random-initialised Qwen2 with a locally trained tokenizer.

Nothing is downloaded. The tokenizer is a byte-level BPE trained with the ``tokenizers`` library
on a small built-in corpus (the built-in envs' texts, the response tags and common action words),
so any text is encodable (byte fallback) while Sokoban grids stay one token per cell. The model is
``Qwen2ForCausalLM`` from a config, initialised from a fixed seed. Both are saved as a standard
Hugging Face model folder (``config.json``, ``model.safetensors``, ``tokenizer.json``,
``tokenizer_config.json`` with the chat template), so ``AutoTokenizer``/``AutoModelForCausalLM``
and vLLM load them and produce identical token ids.

The folder is cached under ``$AGENTRL_CACHE_DIR`` (default ``~/.cache/agentrl``; see ``envs.cache``), keyed by a hash of
the recipe (corpus, vocabulary size, architecture, seed: the fields of
:class:`agentrl.config.TinyModelConfig`, the one spec of this model): building it takes a few
seconds once.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from dataclasses import asdict
from pathlib import Path

from agentrl.envs.adapter import make_frozen_lake
from agentrl.envs.cache import cache_root
from agentrl.envs.sokoban.env import INSTRUCTION as SOKOBAN_INSTRUCTION

from ..config import TinyModelConfig

__all__ = [
    "CHAT_TEMPLATE",
    "SPECIAL_TOKENS",
    "TinyModelConfig",
    "build_tiny",
    "cache_dir",
    "tiny_corpus",
]

RECIPE_VERSION = 3  # 3: the chat template is tool-aware (same weights and tokenizer)

#: Chat-format tokens (special: never produced by the BPE) and response tags (added tokens: one
#: id each, decoded as text, so the action parser sees them).
SPECIAL_TOKENS = ["<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
TAG_TOKENS = ["<action>", "</action>", "<think>", "</think>"]

#: A compact chat template: one role token, the content, ``<|end|>`` (also the EOS). Tool-aware
#: (the tool-call action format, Hermes syntax): with ``tools`` the system turn lists them as JSON
#: and shows the call syntax, and a ``tool`` message is a user turn inside
#: ``<tool_response>…</tool_response>``. Without tools it renders exactly as before.
CHAT_TEMPLATE = (
    "{% set ns = namespace(skip=false) %}"
    "{% if tools %}"
    "{{ '<|system|>' }}"
    "{% if messages[0]['role'] == 'system' %}"
    "{{ messages[0]['content'] + '\\n' }}{% set ns.skip = true %}"
    "{% endif %}"
    "{{ 'Tools:' }}{% for tool in tools %}{{ '\\n' }}{{ tool | tojson }}{% endfor %}"
    '{{ \'\\nCall one as <tool_call>\\n{"name": NAME, "arguments": ARGS}\\n</tool_call>\' }}'
    "{{ '<|end|>' }}"
    "{% endif %}"
    "{% for message in messages %}"
    "{% if loop.first and ns.skip %}"
    "{% elif message['role'] == 'tool' %}"
    "{{ '<|user|><tool_response>' }}{{ message['content'] }}{{ '</tool_response><|end|>' }}"
    "{% else %}"
    "{{ '<|' + message['role'] + '|>' }}{{ message['content'] }}{{ '<|end|>' }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)

#: Pre-tokenisation of Qwen2 (transformers' ``Qwen2Tokenizer`` rebuilds the tokenizer with exactly
#: this regex and an NFC normaliser whatever ``tokenizer.json`` says, and vLLM loads it that way
#: too), so we train with it: the file, transformers and vLLM then agree on every id.
SPLIT_PATTERN = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""

_EXTRA_TEXT = """
Current observation: Admissible actions: Previous steps: Step Action Observation Instruction
You are an agent in a text environment. Think step by step, then answer with one action.
Respond with <action>your action</action>. Reason inside <think>...</think> first if you like.
go to take from put in on open close toggle clean heat cool use examine look inventory
the a an of and to in on with for at by is are was it this that your you there nothing happens
cabinet countertop drawer fridge microwave sinkbasin shelf desk bed sofa table lamp apple mug
search click buy now next prev back to search description features reviews size color price
walk move push pull box target wall floor player goal hole frozen lake start left right up down
"""


def tiny_corpus() -> list[str]:
    """The tokenizer's training texts (deterministic; part of the cache key).

    Only words: no Sokoban grids or FrozenLake maps, so BPE learns no merge of grid symbols and
    every grid cell (``#``, ``_``, ``P``, ``X``, ``O``, ``S``, ``√``) stays one token.
    """
    lake = make_frozen_lake()
    _obs, info = lake.reset(seed=0)
    actions = ["up", "down", "left", "right"]
    texts = [SOKOBAN_INSTRUCTION, info["instruction"], _EXTRA_TEXT]
    texts += [f"<action>{a}</action>" for a in actions] * 50
    texts += [f"Admissible actions: {', '.join(actions)}"] * 20
    texts += ["√"] * 10  # the box-on-target symbol: its three UTF-8 bytes become one token
    return texts


def cache_dir() -> Path:
    return cache_root()


def _recipe_hash(spec: TinyModelConfig, corpus: list[str]) -> str:
    payload = json.dumps(
        {
            "v": RECIPE_VERSION,
            "spec": asdict(spec),
            "corpus": corpus,
            "split": SPLIT_PATTERN,
            "special": SPECIAL_TOKENS,
            "tags": TAG_TOKENS,
            "template": CHAT_TEMPLATE,
        },
        sort_keys=True,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def _train_tokenizer(spec: TinyModelConfig, corpus: list[str]):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab_size - len(TAG_TOKENS),
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    tok.add_tokens(TAG_TOKENS)
    return tok


def build_tiny(spec: TinyModelConfig | None = None, root: Path | None = None) -> Path:
    """Build (once) and return the folder of the tiny model for ``spec``.

    The folder is written to a temporary sibling and renamed into place, so concurrent builders
    and interrupted builds never leave a half-written cache entry.
    """
    spec = spec or TinyModelConfig()
    corpus = tiny_corpus()
    out = (root or cache_dir()) / "models" / f"tiny-{_recipe_hash(spec, corpus)}"
    if (out / "model.safetensors").exists() and (out / "tokenizer.json").exists():
        return out

    import torch
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    tok = _train_tokenizer(spec, corpus)
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token="<|end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        additional_special_tokens=SPECIAL_TOKENS[1:4],
        model_max_length=spec.max_position_embeddings,
        clean_up_tokenization_spaces=False,
    )
    hf_tok.chat_template = CHAT_TEMPLATE
    config = Qwen2Config(
        vocab_size=len(hf_tok),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=hf_tok.eos_token_id,
        pad_token_id=hf_tok.pad_token_id,
        rope_theta=10000.0,
        torch_dtype="float32",
    )
    torch.manual_seed(spec.seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = hf_tok.eos_token_id
    model.generation_config.pad_token_id = hf_tok.pad_token_id
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        hf_tok.save_pretrained(tmp)
        (tmp / "agentrl_recipe.json").write_text(
            json.dumps({"spec": asdict(spec), "version": RECIPE_VERSION}, indent=2)
        )
        try:
            tmp.rename(out)
        except OSError:  # another process won the race; its folder is identical
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
