"""TEST DOUBLE (tests/sglang_cpu): an import shim for sgl_kernel, SGLang's CUDA kernel package.

PyPI's sglang-kernel holds GPU builds only (it fails to load without libcuda.so.1), yet a few sglang
modules import names from it at module level. This shim lets those imports succeed on a CPU test
host: every name (and every sgl_kernel.* submodule) exists, and calling one raises, naming it, so a
test that reaches a GPU kernel fails loudly instead of computing something else. Installed only into
the CPU test venv by scripts/lib/common.sh; production venvs never get it.

Speculative decoding on CPU (STANDALONE with a tiny draft model, the test bed's stand-in for DFLASH,
which SGLang refuses on CPU) runs with --prefill/--decode-attention-backend intel_amx, whose paths
call a dozen sgl_kernel CPU ops. The shim implements those below, in plain torch (the two attention
ops, the draft metadata, the KV row copy) or by running SGLang's own Triton kernels for the same
step under Triton's interpreter (tree build, greedy verify, cache-location helpers), so their
semantics are SGLang's. The interpreter needs TRITON_INTERPRET=1 in the server's environment
(tests/sglang_cpu/profile_standalone.yml sets it). Only chains of drafts (--speculative-eagle-topk 1)
are supported: a tree mask raises.
"""
import ctypes
import importlib.abc
import importlib.machinery
import os
import sys
import types

__version__ = "0.0.0+ddtree.test.shim"


class _Missing:
    def __init__(self, name):
        self.__name__ = self.__qualname__ = name

    def __call__(self, *args, **kwargs):
        raise RuntimeError("%s was called, but sgl_kernel here is the ddtree.fleet test shim (tests/sglang_cpu): "
                           "no GPU kernels on this host" % self.__name__)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Missing("%s.%s" % (self.__name__, name))


def _module_getattr(modname):
    def __getattr__(name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Missing("%s.%s" % (modname, name))
    return __getattr__


class _Submodules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Any sgl_kernel.<sub> import gets a module of missing names."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith(__name__ + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        mod = types.ModuleType(spec.name)
        mod.__path__ = []
        mod.__getattr__ = _module_getattr(spec.name)
        return mod

    def exec_module(self, module):
        return None


if not any(isinstance(f, _Submodules) for f in sys.meta_path):
    sys.meta_path.insert(0, _Submodules())
__getattr__ = _module_getattr(__name__)


# --- CPU ops of the intel_amx attention backend and speculative decoding (TEST DOUBLE) -------------

def _interpreter(op):
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError("%s runs SGLang's Triton kernel under Triton's interpreter: start the test server with "
                           "TRITON_INTERPRET=1 (tests/sglang_cpu/profile_standalone.yml)" % op)


def _pow2(n):
    return 1 << max(0, int(n) - 1).bit_length()


def _attend(q, keys, values, sm_scale, logit_cap, visible=None):
    """q [E, H, D] over keys/values [L, Hkv, D]; visible [E, L] bool or None."""
    import torch
    heads, kv_heads = q.shape[1], keys.shape[1]
    if heads != kv_heads:
        keys = keys.repeat_interleave(heads // kv_heads, dim=1)
        values = values.repeat_interleave(heads // kv_heads, dim=1)
    scores = torch.einsum("ehd,lhd->hel", q.float(), keys.float()) * sm_scale
    if logit_cap and logit_cap > 0:
        scores = logit_cap * torch.tanh(scores / logit_cap)
    if visible is not None:
        scores = scores.masked_fill(~visible.unsqueeze(0), float("-inf"))
    return torch.einsum("hel,lhd->ehd", torch.softmax(scores, dim=-1), values.float())


def decode_attention_cpu(q, k_buffer, v_buffer, k_scale, v_scale, o, k, v, loc, attn_logits, req_to_token,
                         req_pool_indices, seq_lens, sm_scale, logit_cap, is_cross, window, encoder_lens, sinks):
    """One query token per sequence over its cached keys; writes the new token's K/V at loc first."""
    if sinks is not None or is_cross:
        raise NotImplementedError("decode_attention_cpu (test shim): no attention sinks or cross attention")
    if k is not None:
        k_buffer[loc.long()] = k.to(k_buffer.dtype)
        v_buffer[loc.long()] = v.to(v_buffer.dtype)
    for i in range(seq_lens.shape[0]):
        length = int(seq_lens[i])
        idx = req_to_token[int(req_pool_indices[i]), :length].long()
        if window and window > 0:
            idx = idx[-window:]
        out = _attend(q[i:i + 1], k_buffer[idx] * k_scale, v_buffer[idx] * v_scale, sm_scale, logit_cap)
        o[i] = out[0].to(o.dtype)


def extend_attention_cpu(q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer, k_scale, v_scale, req_to_token,
                         req_pool_indices, seq_lens, extend_seq_lens, extend_start_loc, max_len_extend, sm_scale,
                         logit_cap, is_cross, window, encoder_lens, sinks, tree_mask, is_causal):
    """Each sequence's new tokens over its cached prefix plus themselves (causal)."""
    import torch
    if tree_mask is not None:
        raise NotImplementedError("extend_attention_cpu (test shim): no tree mask; run with --speculative-eagle-topk 1")
    if sinks is not None or is_cross:
        raise NotImplementedError("extend_attention_cpu (test shim): no attention sinks or cross attention")
    for i in range(seq_lens.shape[0]):
        length, new, start = int(seq_lens[i]), int(extend_seq_lens[i]), int(extend_start_loc[i])
        prefix = length - new
        row = req_to_token[int(req_pool_indices[i])]
        cached, fresh = row[:prefix].long(), row[prefix:length].long()
        k_new = k_extend[start:start + new].float() if k_extend is not None else k_buffer[fresh].float() * k_scale
        v_new = v_extend[start:start + new].float() if v_extend is not None else v_buffer[fresh].float() * v_scale
        keys = torch.cat([k_buffer[cached].float() * k_scale, k_new])
        values = torch.cat([v_buffer[cached].float() * v_scale, v_new])
        visible = None
        if is_causal:
            rows = torch.arange(new).unsqueeze(1) + prefix
            visible = torch.arange(length).unsqueeze(0) <= rows
            if window and window > 0:
                visible &= torch.arange(length).unsqueeze(0) > rows - window
        o_extend[start:start + new] = _attend(q_extend[start:start + new], keys, values, sm_scale, logit_cap,
                                              visible).to(o_extend.dtype)


def build_draft_decode_metadata_cpu(req_to_token, req_pool_indices, seq_lens, topk, num_steps, pool_len):
    """The token table the draft decode steps read: with one draft per step, each request's own row
    (its draft slots follow its sequence in it, as assign_draft_cache_locs_contiguous reads them)."""
    if topk != 1:
        raise NotImplementedError("build_draft_decode_metadata_cpu (test shim): topk 1 only")
    return req_to_token[req_pool_indices.long()].contiguous()


def copy_all_layer_kv_cache_cpu(data_ptrs, strides, tgt_loc, src_loc):
    """Copy KV rows src -> tgt in every layer buffer (raw pointers and row strides in bytes)."""
    for ptr, stride in zip(data_ptrs.tolist(), strides.tolist()):
        rows = [ctypes.string_at(ptr + int(s) * stride, stride) for s in src_loc.tolist()]  # read all first
        for t, row in zip(tgt_loc.tolist(), rows):
            ctypes.memmove(ptr + int(t) * stride, row, stride)


def build_tree_kernel_efficient_cpu(parent_list, top_scores_index, seq_lens, tree_mask, positions, retrieve_index,
                                    retrieve_next_token, retrieve_next_sibling, topk, spec_steps, num_verify_tokens,
                                    tree_mask_mode):
    _interpreter("build_tree_kernel_efficient_cpu")
    from sglang.kernels.ops.speculative.spec_tree import sgl_build_tree_kernel_triton
    sgl_build_tree_kernel_triton(parent_list, top_scores_index, seq_lens, tree_mask, positions, retrieve_index,
                                 retrieve_next_token, retrieve_next_sibling, topk, spec_steps, num_verify_tokens,
                                 tree_mask_mode)


def verify_tree_greedy_cpu(predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
                           retrive_next_sibling, target_predict):
    _interpreter("verify_tree_greedy_cpu")
    from sglang.kernels.ops.speculative.spec_tree import verify_tree_greedy_triton
    verify_tree_greedy_triton(predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
                              retrive_next_sibling, target_predict)


def fill_bonus_tokens_cpu(accept_tokens, accept_lens, bonus_tokens, accept_stride):
    _interpreter("fill_bonus_tokens_cpu")
    from sglang.kernels.ops.speculative.eagle import fill_bonus_tokens
    fill_bonus_tokens[(accept_lens.shape[0],)](accept_tokens, accept_lens, bonus_tokens, accept_stride)


def fill_accept_out_cache_loc_cpu(accept_index, out_cache_loc, accept_out_cache_loc):
    _interpreter("fill_accept_out_cache_loc_cpu")
    from sglang.kernels.ops.speculative.eagle import fill_accept_out_cache_loc
    size = accept_index.numel()
    fill_accept_out_cache_loc[(size,)](accept_index, out_cache_loc, accept_out_cache_loc, _pow2(size))


def assign_draft_cache_locs_contiguous_cpu(req_pool_indices, req_to_token, seq_lens, out_cache_loc, pool_len, topk,
                                           num_cols):
    _interpreter("assign_draft_cache_locs_contiguous_cpu")
    from sglang.kernels.ops.speculative.cache_locs import assign_draft_cache_locs_contiguous
    bs = seq_lens.shape[0]
    assign_draft_cache_locs_contiguous[(bs,)](req_pool_indices, req_to_token, seq_lens, out_cache_loc, pool_len, topk,
                                              num_cols, positions=None, mrope=None, BS=bs, WRITE_POSITIONS=False,
                                              WRITE_MROPE=False)


def assign_extend_cache_locs_cpu(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, pool_len):
    _interpreter("assign_extend_cache_locs_cpu")
    from sglang.kernels.ops.speculative.cache_locs import assign_extend_cache_locs
    bs = req_pool_indices.shape[0]
    assign_extend_cache_locs[(bs,)](req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, pool_len,
                                    _pow2(bs))


def assign_req_to_token_pool_cpu(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, pool_len):
    _interpreter("assign_req_to_token_pool_cpu")
    from sglang.srt.mem_cache.allocation import assign_req_to_token_pool
    bs = req_pool_indices.shape[0]
    assign_req_to_token_pool[(bs,)](req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, pool_len,
                                    _pow2(bs))


def _register_torch_ops():
    """intel_amx_backend reads the attention ops as torch.ops.sgl_kernel.*: put ours there."""
    try:
        import torch
    except ImportError:
        return
    namespace = torch.ops.sgl_kernel
    for op in (decode_attention_cpu, extend_attention_cpu):
        setattr(namespace, op.__name__, op)


_register_torch_ops()
