"""tensorfile.distributed against its peers: ``StorageReader`` loads, resharded into 3 gloo
ranks, what torch's ``HuggingFaceStorageWriter`` wrote from 2 (its consolidated folder, and
its per-rank files with ``DCP_SHARDING_INFO``), tensorfile's own ``save_sharded`` and a
transformers checkpoint (``save_pretrained``); and transformers' ``from_pretrained`` loads
what ``StorageWriter`` saved from 2 ranks (issue 37's "done when").

transformers is imported in the test process only (importing it costs 20-40 s of this
machine's shared CPUs), once for the module: it builds a tiny Llama from a config, saves it
with ``save_pretrained``, and writes its state dict with the reference ``safetensors`` for the
ranks, which never import transformers. One group of 3 processes runs every distributed step.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

import pytest
import torch

from tests.distributed import _data
from tests.distributed._plugins import reader, writer
from tests.distributed._ranks import (
    DCP,
    Group,
    Rank,
    Scenario,
    dtensor,
    local_chunk,
    mismatches,
    raw,
    run_groups,
)


def _llama_placements(ref: dict[str, torch.Tensor], world: int) -> dict[str, Any]:
    """2-D weights Shard(0) (Shard(1) for the MLP's down projections), 1-D ones replicated."""
    from torch.distributed.tensor import Replicate, Shard

    return {
        n: (Shard(1) if "down_proj" in n else Shard(0)) if t.dim() == 2 else Replicate()
        for n, t in ref.items()
    }


def _peers(ctx: Rank) -> None:
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from safetensors.torch import load_file
    from torch.distributed.checkpoint import HuggingFaceStorageWriter
    from torch.distributed.device_mesh import DeviceMesh

    rank, out = ctx.rank, ctx.folder
    savers = dist.new_group([0, 1])
    mesh2 = DeviceMesh("cpu", [0, 1])
    mesh3 = DeviceMesh("cpu", [0, 1, 2])
    llama = load_file(str(out / "llama_ref.safetensors"))
    if rank < 2:
        # torch's writer: consolidated (it refuses BOOL and integers there, and writes a
        # replicated 0-d tensor as 0.0), and its per-rank files (every dtype)
        sd = _data.state_dict(mesh2, _data.SAVE, rank, 2, names=_data.FLOAT, with_objects=False)
        cons = HuggingFaceStorageWriter(
            str(out / "hf_cons"), save_distributed=True, enable_consolidation=True
        )
        ctx.attempt("torch_save_cons", dcp.save, sd, storage_writer=cons, process_group=savers)
        sd = _data.state_dict(mesh2, _data.SAVE, rank, 2, with_objects=False)
        per_rank = HuggingFaceStorageWriter(str(out / "hf_shard"), save_distributed=True)
        ctx.attempt("torch_save_shard", dcp.save, sd, storage_writer=per_rank, process_group=savers)
        # tensorfile's writer: the Llama's state dict, resharded from 2 ranks
        place = _llama_placements(llama, 2)
        sd = {n: dtensor(t, mesh2, place[n], rank, 2) for n, t in llama.items()}
        to = writer(out / "llama_dcp")
        ctx.attempt("save_llama", dcp.save, sd, storage_writer=to, process_group=savers)
    dist.barrier()
    cases = {
        "hf_cons": (out / "hf_cons", _data.FLOAT),
        "hf_cons_sharded": (out / "hf_cons" / "sharded", _data.FLOAT),
        "hf_shard": (out / "hf_shard", list(_data.full_tensors())),
        "save_sharded": (out / "save_sharded", list(_data.full_tensors())),
    }
    for key, (folder, names) in cases.items():
        sd = _data.state_dict(
            mesh3, _data.LOAD, rank, 3, names=names, empty=True, with_objects=False
        )
        if ctx.attempt(f"load_{key}", dcp.load, sd, storage_reader=reader(folder)):
            want = _data.expected_local(_data.LOAD, rank, 3, names)
            ctx.record(f"load_{key}_tensors", mismatches(_data.flat_tensors(sd), want))
    place = _llama_placements(llama, 3)
    sd = {n: dtensor(torch.zeros_like(t), mesh3, place[n], rank, 3) for n, t in llama.items()}
    if ctx.attempt("load_pretrained", dcp.load, sd, storage_reader=reader(out / "pretrained")):
        want = {n: local_chunk(t, place[n], rank, 3) for n, t in llama.items()}
        ctx.record("load_pretrained_tensors", mismatches(sd, want))
    _fsdp(ctx, llama, mesh3)


def _holder(tensors: dict[str, torch.Tensor]) -> torch.nn.Module:
    """A module whose parameters have the names and shapes of ``tensors`` (zeros): the
    Llama's parameters without importing transformers in the ranks."""
    root = torch.nn.Module()
    for name, t in tensors.items():
        *path, leaf = name.split(".")
        node = root
        for part in path:
            if not hasattr(node, part):
                node.add_module(part, torch.nn.Module())
            node = getattr(node, part)
        node.register_parameter(leaf, torch.nn.Parameter(torch.zeros_like(t)))
    return root


def _fsdp(ctx: Rank, llama: dict[str, torch.Tensor], mesh3: Any) -> None:
    """FSDP2 (``fully_shard``, its own Shard(0) views, rank 2 holding empty shards of the
    small tensors): the pretrained checkpoint loads straight into the sharded module, whose
    state dict 3 ranks then save for from_pretrained."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import Shard

    module = _holder(llama)
    fully_shard(module, mesh=mesh3)
    sd = get_model_state_dict(module)
    if ctx.attempt("fsdp_load", dcp.load, sd, storage_reader=reader(ctx.folder / "pretrained")):
        set_model_state_dict(module, sd)
        got = {n: p.to_local() for n, p in module.named_parameters()}
        want = {n: local_chunk(t, Shard(0), ctx.rank, 3) for n, t in llama.items()}
        ctx.record("fsdp_load_tensors", mismatches(got, want))
    sd = get_model_state_dict(module)
    ctx.attempt("fsdp_save", dcp.save, sd, storage_writer=writer(ctx.folder / "fsdp_dcp"))


def _tiny_llama() -> tuple[Any, Any]:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    return cfg, LlamaForCausalLM(cfg)


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> tuple[Group, dict[str, torch.Tensor]]:
    from safetensors.torch import save_file

    from tensorfile.safetensors.torch import save_sharded

    out = tmp_path_factory.mktemp("dcp_peers")
    _, model = _tiny_llama()
    model.save_pretrained(str(out / "pretrained"))
    state = {n: t.detach().clone().contiguous() for n, t in model.state_dict().items()}
    save_file(state, str(out / "llama_ref.safetensors"))
    save_sharded(_data.full_tensors(), out / "save_sharded", max_shard_size=400)
    scenario = Scenario(_peers, 3, timeout=150, grace=15, folder=out)
    g = run_groups({"group": scenario}, out / "driver", DCP)
    return g["group"], state


def test_torch_consolidated_folder_loads_resharded(group: tuple[Group, Any]) -> None:
    g, _ = group
    g.ok("torch_save_cons", [0, 1])  # (the peer itself)
    for key in ("hf_cons", "hf_cons_sharded"):
        g.ok(f"load_{key}")
        assert g.get(f"load_{key}_tensors") == [{}, {}, {}], key


def test_torch_per_rank_files_load_resharded(group: tuple[Group, Any]) -> None:
    """torch's per-rank layout: the same FQN in two files, each chunk at the offsets its
    header's DCP_SHARDING_INFO gives (an empty chunk among them); every dtype, a 0-d tensor."""
    g, _ = group
    g.ok("torch_save_shard", [0, 1])
    assert len([n for n in os.listdir(g.folder / "hf_shard") if n.endswith(".safetensors")]) == 2
    g.ok("load_hf_shard")
    assert g.get("load_hf_shard_tensors") == [{}, {}, {}]


def test_save_sharded_checkpoint_loads_resharded(group: tuple[Group, Any]) -> None:
    g, _ = group
    assert (g.folder / "save_sharded" / "model.safetensors.index.json").exists()
    g.ok("load_save_sharded")
    assert g.get("load_save_sharded_tensors") == [{}, {}, {}]


def test_transformers_checkpoint_loads_into_sharded_ranks(group: tuple[Group, Any]) -> None:
    g, _ = group
    g.ok("load_pretrained")
    assert g.get("load_pretrained_tensors") == [{}, {}, {}]


def test_pretrained_checkpoint_loads_into_an_fsdp_module(group: tuple[Group, Any]) -> None:
    g, _ = group
    g.ok("fsdp_load")
    assert g.get("fsdp_load_tensors") == [{}, {}, {}]


@pytest.mark.parametrize(("saved", "ranks"), [("llama_dcp", [0, 1]), ("fsdp_dcp", [0, 1, 2])])
def test_from_pretrained_loads_what_the_ranks_saved(
    group: tuple[Group, dict[str, torch.Tensor]], saved: str, ranks: list[int]
) -> None:
    """2 ranks' DTensors (Shard(0), Shard(1)), and 3 FSDP2 ranks' state dict."""
    from transformers import AutoModelForCausalLM

    g, state = group
    g.ok("save_llama" if saved == "llama_dcp" else "fsdp_save", ranks)
    folder = g.folder / saved
    shutil.copy(g.folder / "pretrained" / "config.json", folder / "config.json")
    model, info = AutoModelForCausalLM.from_pretrained(str(folder), output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    got = model.state_dict()
    assert sorted(got) == sorted(state)
    assert {n: raw(t) for n, t in got.items()} == {n: raw(t) for n, t in state.items()}
    assert all(got[n].dtype == state[n].dtype for n in state)
