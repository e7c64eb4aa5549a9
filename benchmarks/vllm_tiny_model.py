"""Write the tiny Llama that `make vllm` serves with vLLM: random weights, a tokenizer trained here.

Run with .venv-vllm/bin/python (it needs that venv's transformers and tokenizers; it imports nothing
from inferlab, whose venv pins another transformers). Offline: the tokenizer is a byte-level BPE
trained on this repository's own Python sources, the weights are torch.manual_seed(seed) draws.
The directory holds config.json, model.safetensors, tokenizer.json, tokenizer_config.json, and
inferlab.json (the seed and dimensions, read by inferlab.study.engines.vllm.model_config).

    .venv-vllm/bin/python benchmarks/vllm_tiny_model.py --out build/vllm-model --seed 0
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

# A 13.7 M-parameter Llama layout: big enough that a step's compute, not the server's per-request
# work, sets its time on a CPU (a 5 M model's decode steps of ~3 ms were lost in the HTTP and streaming
# costs of a 2-core host); the vocabulary is the tokenizer's, trained to exactly VOCAB entries.
DIMS = {"hidden_size": 384, "intermediate_size": 1024, "num_hidden_layers": 6, "num_attention_heads": 6,
        "num_key_value_heads": 6, "head_dim": 64}
VOCAB = 4096
MAX_POSITIONS = 2048


def corpus(root: Path) -> list[str]:
    """The repository's Python sources (sorted, so the trained tokenizer is the same every time)."""
    files = sorted(p for p in (root / "lib").rglob("*.py"))
    return [p.read_text(encoding="utf-8", errors="replace") for p in files]


def train_tokenizer(texts: list[str]):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    if tok.get_vocab_size() != VOCAB:
        raise SystemExit(f"the trained tokenizer has {tok.get_vocab_size()} entries, not {VOCAB}: "
                         "the corpus is too small")
    return tok


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="model directory to write")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer(corpus(Path(__file__).resolve().parent.parent))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   model_max_length=MAX_POSITIONS)
    fast.save_pretrained(out)
    cfg = LlamaConfig(vocab_size=VOCAB, max_position_embeddings=MAX_POSITIONS, tie_word_embeddings=False,
                      bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id, **DIMS)
    torch.manual_seed(args.seed)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    model.save_pretrained(out)
    (out / "inferlab.json").write_text(json.dumps({"seed": args.seed, "vocab_size": VOCAB, **DIMS}, indent=1))
    n = sum(p.numel() for p in model.parameters())
    print(f"wrote {out}: {n / 1e6:.1f} M parameters (seed {args.seed}), tokenizer of {VOCAB} entries")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
