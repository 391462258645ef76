#!/usr/bin/env python3
"""TEST SETUP: write a small real model repository for the hub mirror (tests/doubles/hf_hub.py):
safetensors shards of real float32 tensors (the format: 8-byte header length, JSON header,
raw data), the shard index, config.json, generation_config.json and a tokenizer file.
Deterministic: the same arguments give the same bytes. Each shard's values repeat every MiB, so
multi-GiB shards for benchmarks take seconds to write.

  make_model.py DIR [--shards N] [--shard-mib M] [--seed S]
"""
import argparse
import json
import os
import random
import struct


def safetensors(tensors):
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, (shape, data) in tensors.items():
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    return struct.pack("<Q", len(head)) + head + b"".join(blobs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--shards", type=int, default=3)
    ap.add_argument("--shard-mib", type=float, default=4)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rnd = random.Random(a.seed)
    os.makedirs(a.dir, exist_ok=True)
    rows = max(int(a.shard_mib * (1 << 20) / 4 / 256), 1)
    weight_map = {}
    for i in range(a.shards):
        name = "model-%05d-of-%05d.safetensors" % (i + 1, a.shards)
        # 1 MiB of random values per shard, repeated to the shard's size: benchmarks need big shards fast
        block_rows = min(rows, 1024)
        block = struct.pack("<%df" % (block_rows * 256), *(rnd.uniform(-1, 1) for _i in range(block_rows * 256)))
        values = (block * -(-rows // block_rows))[:rows * 256 * 4]
        tensor = "model.layers.%d.mlp.weight" % i
        with open(os.path.join(a.dir, name), "wb") as f:
            f.write(safetensors({tensor: ([rows, 256], values)}))
        weight_map[tensor] = name
    docs = {
        "model.safetensors.index.json": {"metadata": {"total_size": rows * 256 * 4 * a.shards}, "weight_map": weight_map},
        "config.json": {"architectures": ["DdtreeTinyForCausalLM"], "hidden_size": 256, "num_hidden_layers": a.shards,
                        "model_type": "ddtree_tiny", "torch_dtype": "float32"},
        "generation_config.json": {"max_new_tokens": 16},
        "tokenizer.json": {"version": "1.0", "model": {"type": "WordLevel", "vocab": {"<unk>": 0, "tok": 1}}},
    }
    for name, doc in docs.items():
        with open(os.path.join(a.dir, name), "w") as f:
            json.dump(doc, f, indent=1, sort_keys=True)
            f.write("\n")


if __name__ == "__main__":
    main()
