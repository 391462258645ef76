"""Make the tiny models the real SGLang serves in tests (TEST BED): a random 2-layer Llama (hidden 64)
with a byte-level BPE tokenizer trained offline, plus draft models for STANDALONE speculation.

    make_tiny_model.py OUT_DIR

writes OUT_DIR/target, OUT_DIR/draft-good (the target's own weights: drafts the target accepts) and
OUT_DIR/draft-collapsed (another random model on the same tokenizer: drafts it rejects). Run with the
CPU test venv's Python (it has torch, transformers and tokenizers); the same seeds give the same files.
"""
import os
import sys

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

CORPUS = [
    "The fleet serves one model on many hosts.",
    "Speculative decoding drafts tokens that the target model verifies.",
    "A health gate admits a host only when it answers correctly.",
    "Rolling rollouts keep capacity while each host is replaced.",
    "The quick brown fox jumps over the lazy dog 0123456789.",
] * 20
CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}assistant: {% endif %}")


def tokenizer():
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=384, special_tokens=["<s>", "</s>", "<unk>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def model(tok, seed, out):
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, tie_word_embeddings=False,
                      torch_dtype="float32")
    m = LlamaForCausalLM(cfg)
    os.makedirs(out, exist_ok=True)
    m.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)


def main(out):
    tok = tokenizer()
    model(tok, 1234, os.path.join(out, "target"))
    model(tok, 1234, os.path.join(out, "draft-good"))
    model(tok, 99, os.path.join(out, "draft-collapsed"))
    print("tiny models in %s" % out)


if __name__ == "__main__":
    main(sys.argv[1])
