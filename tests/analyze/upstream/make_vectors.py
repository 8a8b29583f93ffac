#!/usr/bin/env python3
"""Writes the test vectors of tests/analyze/test_plan_upstream.py by running the estimators'
and config readers' own public code, unmodified, from git checkouts given on the command line:

  make_vectors.py --megatron DIR --deepspeed DIR --hjson DIR

- megatron.json: Megatron-LM's megatron/training/theoretical_memory_usage.py
  (report_theoretical_memory) on 200 random configurations (seeded), with the argument
  defaults megatron/training/arguments.py applies before it runs (ffn_hidden_size for
  swiglu, kv_channels, num_query_groups, padded vocabulary, data-parallel sizes,
  expert_tensor_parallel_size, moe_ffn_hidden_size);
- deepspeed_estimators.json: DeepSpeed's estimate_zero2/zero3_model_states_mem_needs_all_cold
  (their printed tables) on 200 random configurations, additional_buffer_factor included;
- deepspeed_config.json: DeepSpeed's pydantic config models (zero_optimization with its
  offload sections, fp16, bf16/bfloat16, tensor_parallel) on configs that probe every
  spelling, default, "auto" and refusal, each with the outcome DeepSpeed gives;
- hjson.json: hjson-py (the reader DeepSpeed loads configs with) on texts in the syntax
  DeepSpeed configs use, with the value it reads or its refusal.

Only numbers, values and outcomes are kept; no upstream code is copied. The upstream
modules' imports of torch and of the rest of their packages are stubbed with the few
names they use. Each output file records the upstream commit it came from."""
import argparse
import ast
import contextlib
import io
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import types

HERE = os.path.dirname(os.path.abspath(__file__))


def git(repo, *args):
    return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True, check=True).stdout


def show(repo, path):
    return git(repo, "show", "HEAD:" + path)


def commit(repo):
    return git(repo, "rev-parse", "HEAD").strip()


def write(name, data):
    with open(os.path.join(HERE, name), "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.write("\n")


# ---- Megatron-LM ----

def megatron_module(repo):
    utils = types.ModuleType("mtm_utils")
    utils.is_hybrid_model = lambda args: False
    utils.print_rank_0 = lambda *a, **k: None
    pkg = types.ModuleType("mtm")
    pkg.__path__ = []
    sys.modules["mtm"], sys.modules["mtm.utils"] = pkg, utils
    mod = types.ModuleType("mtm.theoretical_memory_usage")
    mod.__package__ = "mtm"
    exec(compile(show(repo, "megatron/training/theoretical_memory_usage.py"), "theoretical_memory_usage.py", "exec"),
         mod.__dict__)
    return mod


def megatron_config(rng):
    """One random configuration: Megatron's arguments after arguments.py's defaults, the
    num_microbatches it reports with, and memtap plan's options for the same."""
    while True:
        tp = rng.choice([1, 1, 2, 4, 8])
        pp = rng.choice([1, 1, 2, 4])
        cp = rng.choice([1, 1, 1, 2])
        heads = rng.choice([8, 12, 16, 32, 40, 64])
        if heads % tp:
            continue
        head_dim = rng.choice([64, 80, 128])
        hidden = heads * head_dim if rng.random() < 0.8 else heads * rng.choice([64, 96, 128])
        kv_channels = None if rng.random() < 0.7 else rng.choice([64, 128, 192])
        layers = pp * rng.choice([1, 2, 3, 4, 6, 8])
        gqa = rng.random() < 0.4
        groups = rng.choice([g for g in (1, 2, 4, 8) if heads % g == 0 and g % tp == 0] or [heads]) if gqa else None
        swiglu = rng.random() < 0.5
        ffn = None if rng.random() < 0.5 else rng.choice([2, 3, 4]) * hidden
        experts = rng.choice([None, None, 4, 8, 16, 64])
        ep = rng.choice([e for e in (1, 2, 4, 8) if experts and experts % e == 0] or [1])
        etp = rng.choice([None, 1, tp])
        world = tp * pp * cp * rng.choice([1, 2, 4, 8, 16])
        if world % ((etp or tp) * ep * pp):
            continue
        mla = rng.random() < 0.15
        vpp = None
        if pp > 1 and rng.random() < 0.3 and (layers // pp) % 2 == 0:
            vpp = 2
        seq = rng.choice([1024, 2048, 4096, 8192])
        break
    args = types.SimpleNamespace(
        num_layers=layers, hidden_size=hidden, num_attention_heads=heads, kv_channels=kv_channels,
        group_query_attention=gqa, num_query_groups=groups if gqa else 1, swiglu=swiglu, ffn_hidden_size=ffn,
        normalization=rng.choice(["LayerNorm", "RMSNorm"]), untie_embeddings_and_output_weights=rng.random() < 0.5,
        add_bias_linear=rng.random() < 0.5, num_experts=experts,
        moe_ffn_hidden_size=None if rng.random() < 0.5 else rng.choice([512, 1024, 1408, 2048]),
        moe_router_topk=rng.choice([1, 2, 4]) if experts else 2,
        moe_shared_expert_intermediate_size=rng.choice([None, None, 1024, 2816]) if experts else None,
        moe_shared_expert_gate=rng.random() < 0.3, moe_latent_size=None, moe_layer_freq=1,
        mtp_num_layers=rng.choice([None, None, None, 1, 2]), multi_latent_attention=mla,
        q_lora_rank=rng.choice([None, 512, 1536]) if mla else None, kv_lora_rank=512 if mla else None,
        qk_head_dim=128, qk_pos_emb_head_dim=64, v_head_dim=128,
        tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp, context_parallel_size=cp,
        expert_model_parallel_size=ep, expert_tensor_parallel_size=etp, world_size=world,
        use_distributed_optimizer=rng.random() < 0.5, seq_length=seq, micro_batch_size=rng.choice([1, 2, 4]),
        sequence_parallel=tp > 1 and rng.random() < 0.5,
        recompute_granularity=rng.choice([None, "selective", "selective", "full"]),
        virtual_pipeline_model_parallel_size=vpp, padded_vocab_size=None)
    if mla:
        args.group_query_attention, args.num_query_groups = False, 1
    dense = 0
    if experts and rng.random() < 0.4:  # DeepSeek's pattern: the first layers dense
        dense = rng.choice([1, 2, 3])
        if dense >= layers:
            dense = 0
        args.moe_layer_freq = [0] * dense + [1] * (layers - dense)
    vocab = rng.choice([32000, 50257, 128256, 151936, 102400])
    nmb = rng.choice([None, 1, 2, 8, 64])
    # arguments.py, "Checks" and friends
    if args.ffn_hidden_size is None:
        args.ffn_hidden_size = int((4 * hidden * 2 / 3) / 64) * 64 if swiglu else 4 * hidden
    if args.kv_channels is None:
        args.kv_channels = hidden // heads
    if args.expert_tensor_parallel_size is None:
        args.expert_tensor_parallel_size = tp
    if experts is not None and args.moe_ffn_hidden_size is None:
        args.moe_ffn_hidden_size = args.ffn_hidden_size
    args.data_parallel_size = world // (tp * pp * cp)
    multiple = 128 * tp
    args.padded_vocab_size = int(math.ceil(vocab / multiple) * multiple)
    opts = ["--layers", layers, "--hidden", hidden, "--heads", heads, "--vocab", vocab, "--seq", seq,
            "--micro-batch", args.micro_batch_size, "--ffn", args.ffn_hidden_size, "--tp", tp, "--pp", pp,
            "--cp", cp, "--gpus-per-node", world]
    opts += ["--head-dim", args.kv_channels] if not mla else ["--head-dim", 128]
    opts += ["--query-groups", groups] if gqa and not mla else []
    opts += ["--swiglu"] if swiglu else []
    opts += ["--rmsnorm"] if args.normalization == "RMSNorm" else []
    opts += ["--untied"] if args.untie_embeddings_and_output_weights else []
    opts += ["--bias", "all" if args.add_bias_linear else "none"]
    if experts:
        opts += ["--experts", experts, "--topk", args.moe_router_topk, "--moe-ffn", args.moe_ffn_hidden_size,
                 "--ep", ep, "--etp", args.expert_tensor_parallel_size, "--dense-layers", dense]
        if args.moe_shared_expert_intermediate_size:
            opts += ["--shared-ffn", args.moe_shared_expert_intermediate_size]
            opts += ["--shared-gate"] if args.moe_shared_expert_gate else []
    if args.mtp_num_layers:
        opts += ["--mtp-layers", args.mtp_num_layers]
    if mla:
        opts += ["--kv-lora-rank", 512, "--rope-head-dim", 64, "--v-head-dim", 128]
        opts += ["--q-lora-rank", args.q_lora_rank] if args.q_lora_rank else []
    opts += ["--zero", 1] if args.use_distributed_optimizer else []
    opts += ["--sp"] if args.sequence_parallel else []
    if args.recompute_granularity:
        opts += ["--recompute", args.recompute_granularity]
    opts += ["--vpp", vpp] if vpp else []
    opts += ["--micro-batches", nmb] if nmb else []
    return args, nmb, [str(o) for o in opts]


def megatron(repo, n=200):
    mod = megatron_module(repo)
    rng = random.Random(23)
    cases = []
    while len(cases) < n:
        args, nmb, opts = megatron_config(rng)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            w, a, t = mod.report_theoretical_memory(args, num_microbatches=nmb)
        line = [l for l in out.getvalue().splitlines() if l.startswith("Theoretical")][0]
        cases.append({"options": opts, "line": line, "weight_and_optimizer_mb": w, "activation_mb": a})
    write("megatron.json", {"upstream": "NVIDIA/Megatron-LM", "commit": commit(repo),
                            "file": "megatron/training/theoretical_memory_usage.py", "cases": cases})


# ---- DeepSpeed ----

def deepspeed_estimators(repo, n=200):
    # the enum as Python 3.10 formats f'{OffloadDeviceEnum.cpu:4}': 'cpu ' (3.11+: 'OffloadDeviceEnum.cpu')
    ns = {"OffloadDeviceEnum": types.SimpleNamespace(cpu="cpu")}
    for path, names in (("deepspeed/runtime/zero/stage_1_and_2.py", ("estimate_zero2_model_states_mem_needs",
                                                                    "estimate_zero2_model_states_mem_needs_all_cold")),
                        ("deepspeed/runtime/zero/stage3.py", ("estimate_zero3_model_states_mem_needs",
                                                             "estimate_zero3_model_states_mem_needs_all_cold"))):
        tree = ast.parse(show(repo, path))
        funcs = [f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name in names]
        assert len(funcs) == 2, path
        exec(compile(ast.Module(body=funcs, type_ignores=[]), path, "exec"), ns)
    rng = random.Random(5)
    cases = []
    for i in range(n):
        params = rng.choice([rng.randrange(10**6, 10**12), rng.choice([2851e6, 6738415616, 175e9, 124439808])])
        largest = rng.randrange(10**5, max(10**5 + 1, int(params) // 4))
        gpus, nodes = rng.choice([1, 2, 4, 8, 16]), rng.choice([1, 1, 2, 4, 64])
        factor = rng.choice([1.5, 1.5, 1.0, 1.25, 2.0])
        stage = rng.choice([2, 3])
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            if stage == 2:
                ns["estimate_zero2_model_states_mem_needs_all_cold"](params, gpus, nodes, factor)
            else:
                ns["estimate_zero3_model_states_mem_needs_all_cold"](params, largest, gpus, nodes, factor)
        opts = ["--estimator", "deepspeed-zero%d" % stage, "--params", str(int(params)), "--gpus-per-node",
                str(gpus), "--nodes", str(nodes), "--buffer-factor", repr(factor)]
        opts += ["--largest-layer", str(largest)] if stage == 3 else []
        cases.append({"options": opts, "output": out.getvalue()})
    write("deepspeed_estimators.json", {"upstream": "deepspeedai/DeepSpeed", "commit": commit(repo),
                                        "files": ["deepspeed/runtime/zero/stage_1_and_2.py",
                                                  "deepspeed/runtime/zero/stage3.py"],
                                        "note": "offload devices as Python 3.10 formats them ('cpu ')",
                                        "cases": cases})


def deepspeed_package(repo, into):
    """DeepSpeed's config modules, unmodified, in a package whose other imports are stubs."""
    files = ["runtime/config_utils.py", "runtime/precision_config.py", "runtime/zero/config.py",
             "runtime/zero/offload_config.py", "runtime/zero/leaf_module_config.py",
             "runtime/zenflow/zenflow_config.py", "runtime/tensor_parallel/config.py"]
    for d in ("deepspeed/utils", "deepspeed/runtime/zero", "deepspeed/runtime/fp16", "deepspeed/runtime/zenflow",
              "deepspeed/runtime/tensor_parallel", "torch"):
        os.makedirs(os.path.join(into, d), exist_ok=True)
    for d in ("deepspeed", "deepspeed/runtime", "deepspeed/runtime/zero", "deepspeed/runtime/fp16",
              "deepspeed/runtime/zenflow", "deepspeed/runtime/tensor_parallel"):
        open(os.path.join(into, d, "__init__.py"), "w").close()
    open(os.path.join(into, "deepspeed/utils/__init__.py"), "w").write(
        "import logging\nlogger = logging.getLogger('deepspeed')\n")
    open(os.path.join(into, "torch/__init__.py"), "w").write(
        "class dtype:\n    def __init__(self, n): self.n = n\n"
        "float16 = dtype('float16'); bfloat16 = dtype('bfloat16'); float32 = dtype('float32')\n")
    open(os.path.join(into, "deepspeed/runtime/fp16/loss_scaler.py"), "w").write(
        "INITIAL_LOSS_SCALE = 'init_scale'\nSCALE_WINDOW = 'scale_window'\nDELAYED_SHIFT = 'delayed_shift'\n"
        "CONSECUTIVE_HYSTERESIS = 'consecutive_hysteresis'\nMIN_LOSS_SCALE = 'min_scale'\n")
    for f in files:
        open(os.path.join(into, "deepspeed", f), "w").write(show(repo, "deepspeed/" + f))
    sys.path.insert(0, into)


# Sections of configs to probe: each is merged into a base that DeepSpeed accepts.
PROBES = [
    {}, {"zero_optimization": {"stage": 0}}, {"zero_optimization": {"stage": 1}}, {"zero_optimization": {"stage": 2}},
    {"zero_optimization": {"stage": 3}}, {"zero_optimization": {"stage": "3"}}, {"zero_optimization": {"stage": 3.0}},
    {"zero_optimization": {"stage": True}}, {"zero_optimization": {"stage": False}},
    {"zero_optimization": {"stage": "auto"}}, {"zero_optimization": {"stage": 4}},
    {"zero_optimization": {"stage": -1}}, {"zero_optimization": {"stage": 2.5}}, {"zero_optimization": {"stage": None}},
    {"zero_optimization": {"stage": "three"}}, {"zero_optimization": {"stage": " 2 "}},
    {"zero_optimization": True}, {"zero_optimization": False}, {"zero_optimization": [3]},
    {"zero_optimization": None}, {"zero_optimization": {}},
    {"zero_optimization": {"stage": 2, "cpu_offload": True}},
    {"zero_optimization": {"stage": 2, "cpu_offload": False}},
    {"zero_optimization": {"stage": 3, "cpu_offload_param": True}},
    {"zero_optimization": {"stage": 3, "cpu_offload_params": True}},
    {"zero_optimization": {"stage": 3, "cpu_offload": True, "cpu_offload_param": True}},
    {"zero_optimization": {"stage": 2, "cpu_offload": True, "offload_optimizer": {"device": "cpu"}}},
    {"zero_optimization": {"stage": 3, "cpu_offload_use_pin_memory": True}},
    {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": True}}},
    {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": "/local_nvme"}}},
    {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "none"}}},
    {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "auto"}}},
    {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "CPU"}}},
    {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "gpu"}}},
    {"zero_optimization": {"stage": 2, "offload_optimizer": "cpu"}},
    {"zero_optimization": {"stage": 2, "offload_optimizer": None}},
    {"zero_optimization": {"stage": 2, "offload_optimizer": {}}},
    {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "ratio": 0.5}}},
    {"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 0.5}}},
    {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "ratio": 1.5}}},
    {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "buffer_count": -1}}},
    {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "fast_init": "yes"}}},
    {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "unknown": 1}}},
    {"zero_optimization": {"stage": 0, "offload_param": {"device": "cpu"}}},
    {"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}},
    {"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/nvme", "buffer_count": 5}}},
    {"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu", "max_in_cpu": 1e9}}},
    {"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu", "max_in_cpu": 1.5}}},
    {"zero_optimization": {"stage": 0, "offload_optimizer": {"device": "cpu"}}},
    {"zero_optimization": {"stage": 2, "reduce_bucket_size": 5e8, "allgather_bucket_size": 2e8,
                           "overlap_comm": True, "contiguous_gradients": True}},
    {"zero_optimization": {"stage": 2, "reduce_bucket_size": "auto"}},
    {"zero_optimization": {"stage": 2, "reduce_bucket_size": 2.5}},
    {"zero_optimization": {"stage": 2, "reduce_bucket_size": -5}},
    {"zero_optimization": {"stage": 2, "reduce_bucket_size": "5e8"}},
    {"zero_optimization": {"stage": 2, "reduce_bucket_size": True}},
    {"zero_optimization": {"stage": 2, "overlap_comm": "auto"}},
    {"zero_optimization": {"stage": 2, "overlap_comm": "yes"}},
    {"zero_optimization": {"stage": 2, "overlap_comm": None}},
    {"zero_optimization": {"stage": 2, "overlap_comm": 2}},
    {"zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": "auto",
                           "stage3_param_persistence_threshold": "auto", "stage3_max_live_parameters": 1e9,
                           "stage3_max_reuse_distance": 1e9, "stage3_gather_16bit_weights_on_model_save": True}},
    {"zero_optimization": {"stage": 3, "prefetch_bucket_size": 5e7, "max_live_parameters": 1e9}},
    {"zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 5e7, "prefetch_bucket_size": 5e7}},
    {"zero_optimization": {"stage": 3, "stage3_gather_fp16_weights_on_model_save": True}},
    {"zero_optimization": {"stage": 3, "stage3_gather_fp16_weights_on_model_save": True,
                           "stage3_gather_16bit_weights_on_model_save": True}},
    {"zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 15099494.4}},
    {"zero_optimization": {"stage": 2, "round_robin_gradients": True, "sub_group_size": 1e9,
                           "elastic_checkpoint": False, "load_from_fp32_weights": True, "reduce_scatter": True,
                           "allgather_partitions": True, "ignore_unused_parameters": True}},
    {"zero_optimization": {"stage": 3, "zero_hpz_partition_size": 8, "zero_quantized_weights": True,
                           "zero_quantized_gradients": True, "mics_shard_size": 8}},
    {"zero_optimization": {"stage": 2, "unknown_key": 1}},
    {"zero_optimization": {"stage": 2, "zenflow": {"topk_ratio": 0.1}}},
    {"zero_optimization": {"stage": 2, "leaf_module": {"classes": ["MixtralSparseMoeBlock"]}}},
    {"zero_optimization": {"stage": 2, "zeropp_loco_param": {"err_beta": 0.8, "reset_T": 1024}}},
    {"bf16": {"enabled": True}}, {"bf16": {"enabled": False}}, {"bf16": {"enabled": "auto"}},
    {"bf16": {"enabled": "yes"}}, {"bf16": {"enabled": "true"}}, {"bf16": {"enabled": "True"}},
    {"bf16": {"enabled": "off"}}, {"bf16": {"enabled": 1}}, {"bf16": {"enabled": 0}}, {"bf16": {"enabled": 2}},
    {"bf16": {"enabled": 1.0}}, {"bf16": {"enabled": None}}, {"bf16": {"enabled": "maybe"}},
    {"bf16": None}, {"bf16": {}}, {"bf16": {"enabled": True, "immediate_grad_update": True}},
    {"bf16": {"enabled": True, "loss_scale": 0}},
    {"bfloat16": {"enabled": True}}, {"bfloat16": {"enabled": False}},
    {"bf16": {"enabled": False}, "bfloat16": {"enabled": True}},
    {"bf16": {"enabled": True}, "bfloat16": {"enabled": False}},
    {"fp16": {"enabled": True}}, {"fp16": {"enabled": False}}, {"fp16": {"enabled": "auto"}},
    {"fp16": {"enabled": True, "loss_scale": 0, "loss_scale_window": 1000, "initial_scale_power": 16,
              "hysteresis": 2, "min_loss_scale": 1}},
    {"fp16": {"enabled": True, "loss_scale_window": 0}}, {"fp16": {"enabled": True, "min_loss_scale": 0}},
    {"fp16": {"enabled": False, "loss_scale_window": 0}}, {"fp16": {"enabled": True, "loss_scale": -1}},
    {"fp16": {"enabled": True, "loss_scale": True}}, {"fp16": {"enabled": True, "loss_scale": 128}},
    {"fp16": {"enabled": True, "loss_scale": "auto"}}, {"fp16": {"enabled": True, "auto_cast": True}},
    {"fp16": {"enabled": True, "loss_scale_window": True}}, {"fp16": {"enabled": True, "loss_scale_window": 2.5}},
    {"fp16": None}, {"fp16": {}},
    {"fp16": {"enabled": True}, "bf16": {"enabled": True}},
    {"fp16": {"enabled": False}, "bf16": {"enabled": "auto"}}, {"fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"}},
    {"fp16": {"enabled": True, "fp16_master_weights_and_grads": True}, "zero_optimization": {"stage": 2}},
    {"fp16": {"enabled": True, "fp16_master_weights_and_grads": True}, "zero_optimization": {"stage": 0}},
    {"bf16": {"enabled": True, "bf16_master_weights_and_grads": True}, "zero_optimization": {"stage": 0}},
    {"bf16": {"enabled": True, "bf16_optimizer_states": True, "bf16_master_weights_and_grads": True},
     "zero_optimization": {"stage": 1}},
    {"bf16": {"enabled": True, "bf16_optimizer_states": True}, "zero_optimization": {"stage": 1}},
    {"tensor_parallel": {"autotp_size": 2}}, {"tensor_parallel": {"autotp_size": "2"}},
    {"tensor_parallel": {"autotp_size": 0}}, {"tensor_parallel": {"autotp_size": 1}},
    {"tensor_parallel": {"autotp_size": "auto"}}, {"tensor_parallel": {"autotp_size": 2.5}},
    {"tensor_parallel": {"autotp_size": 4, "tp": {"tp_size": 4}}}, {"tensor_parallel": {"tp_size": 2}},
    {"tensor_parallel": {"autotp_size": 2, "partition_config": {"use_default_specs": True}}},
    {"tensor_parallel": None}, {"tensor_parallel": {}},
]


def deepspeed_config(repo):
    with tempfile.TemporaryDirectory() as tmp:
        deepspeed_package(repo, tmp)
        from deepspeed.runtime.zero.config import get_zero_config
        from deepspeed.runtime.precision_config import get_bfloat16_config, get_float16_config
        from deepspeed.runtime.tensor_parallel.config import get_tensor_parallel_config
        import logging
        logging.getLogger("deepspeed").setLevel(logging.CRITICAL)
        cases = []
        for probe in PROBES:
            config = dict({"train_micro_batch_size_per_gpu": 1}, **probe)
            case = {"config": config}
            try:
                zero, fp16, bf16, tp = (get_zero_config(config), get_float16_config(config),
                                        get_bfloat16_config(config), get_tensor_parallel_config(config))
                # the checks DeepSpeedConfig makes on these (runtime/config.py)
                assert not (fp16.enabled and bf16.enabled), "bfloat16 and fp16 modes cannot be simultaneously enabled"
                z = int(zero.stage)
                if fp16.fp16_master_weights_and_grads:
                    assert z in (1, 2, 3), "Fp16_master_weights_and_grads is only supported with ZeRO Stage 1, 2, or 3."
                if bf16.bf16_master_weights_and_grads:
                    assert z in (1, 2, 3), "Bf16_master_weights_and_grads is only supported with ZeRO Stage 1, 2, or 3."
                if bf16.bf16_optimizer_states:
                    assert z in (1, 2, 3), "bf16_optimizer_states is only supported with ZeRO Stage 1, 2, or 3."
                    assert bf16.bf16_master_weights_and_grads, \
                        "bf16_optimizer_states requires bf16_master_weights_and_grads to be enabled."
                case.update(accepted=True, stage=z,
                            offload_optimizer=zero.offload_optimizer.device if zero.offload_optimizer else "none",
                            offload_param=zero.offload_param.device if zero.offload_param else "none",
                            fp16=bool(fp16.enabled), bf16=bool(bf16.enabled), autotp_size=int(tp.autotp_size),
                            reduce_bucket_size=int(zero.reduce_bucket_size), overlap_comm=bool(zero.overlap_comm))
            except Exception as e:  # what DeepSpeed refuses, and the words it uses
                text = str(e).splitlines()
                case.update(accepted=False, error=type(e).__name__, says=text[1].strip() if len(text) > 2 and
                            "validation error" in text[0] else text[0] if text else "")
                if len(text) > 2 and "validation error" in text[0]:
                    case["field"] = text[1].strip()
                    case["says"] = text[2].strip().split(" [type=")[0]
            cases.append(case)
    write("deepspeed_config.json", {"upstream": "deepspeedai/DeepSpeed", "commit": commit(repo),
                                    "files": ["deepspeed/runtime/zero/config.py", "deepspeed/runtime/zero/offload_config.py",
                                              "deepspeed/runtime/precision_config.py",
                                              "deepspeed/runtime/tensor_parallel/config.py",
                                              "deepspeed/runtime/config.py (the checks, transcribed)"],
                                    "cases": cases})


# ---- hjson ----

HJSON = [
    '{"a": 1}', '{a: 1}', '{\n  a: 1\n  b: 2\n}', '{\n  "a": 1,\n  "b": 2,\n}', '{"a": 1,}', '{"a": [1, 2, 3,]}',
    '{\n  # a comment\n  "a": 1 // another\n  /* a block\n  comment */ "b": 2\n}',
    '{"stage": 3,\n "offload": {device: cpu}\n}', '{device: cpu}', '{device: cpu, pin: true}',
    '{a: true}', '{a: false}', '{a: null}', '{a: truex}', '{a: true # c\n}', '{a: 1 # c\n}', '{a: 1, b: 2}',
    '{a: 5e8}', '{a: 1e10}', '{a: 2.5}', '{a: -3}', '{a: 3.0}', '{a: 1.0e2}', '{a: 0.1}', '{a: 01}', '{a: 1.}',
    '{a: .5}', '{a: +1}', '{a: 1 2}', '{a: -}', '{a: 12345678901234567890}', '{a: 1e400}',
    "{a: 'single'}", '{a: "q\\"uote"}', "{a: 'it''s'}", '{a: "\\u00e9\\n"}', '{a: "\\x"}', '{a: "a\tb"}',
    "{a:\n  '''\n  multi\n  line\n  '''\n}", '{a: b c d}', '{a: "x" "y"}', '{"a" "b": 1}', '{a b: 1}',
    '{"a": 1 "b": 2}', '{"a": 1,, "b": 2}', '{,}', '{}', '[]', '', '# only a comment\n', '1', '"text"',
    'a: 1\nb: 2\n', '{a: 1} x', '{a: 1}}', '{a: [1\n2\n3]}', '{a: {b: {c: 1}}}', '{"a": 1, "a": 2}',
    '{"a": {"b": 1, "b": 2}}', '{a: 1', '{a: [1, 2}', '{"a": "unterminated}', '{a: /* open', '{"a":}',
    '{:1}', '{a:1,b:[true,false,null]}', '{a: tru}', '{a: nulls}', '{a: [a, b, c]}', '{a: [a b, c]}',
    '\ufeff{"a": 1}', '{\r\n  a: 1\r\n  b: cpu\r\n}', '{a: "x", b: y # z\n}',
    '{\n  "train_batch_size": 10,\n  "fp16": {\n    "enabled": true\n  },\n  "zero_optimization": {\n'
    '    "stage": 2,\n    "offload_optimizer": {\n      "device": "cpu"\n    }\n    "contiguous_gradients": true,\n'
    '    "overlap_comm": true\n  },\n}',
]


def hjson_vectors(repo):
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run("git -C %s archive HEAD hjson | tar -x -C %s" % (repo, tmp), shell=True, check=True)
        sys.path.insert(0, tmp)
        import hjson
        from collections import OrderedDict

        def no_duplicates(pairs):  # DeepSpeed's object_pairs_hook (runtime/config_utils.py)
            keys = [k for k, _ in pairs]
            dup = [k for k in keys if keys.count(k) > 1]
            if dup:
                raise ValueError("Duplicate keys in DeepSpeed config: {}".format(sorted(set(dup))))
            return OrderedDict(pairs)

        cases = []
        for text in HJSON:
            try:
                value = hjson.loads(text, object_pairs_hook=no_duplicates)
                cases.append({"text": text, "value": json.loads(json.dumps(value, allow_nan=True))})
            except Exception as e:
                cases.append({"text": text, "error": type(e).__name__, "says": str(e).splitlines()[0]})
        sys.path.remove(tmp)
    write("hjson.json", {"upstream": "hjson/hjson-py", "commit": commit(repo), "file": "hjson/decoder.py",
                         "note": "loads() with DeepSpeed's object_pairs_hook (dict_raise_error_on_duplicate_keys)",
                         "cases": cases})


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--megatron")
    ap.add_argument("--deepspeed")
    ap.add_argument("--hjson")
    a = ap.parse_args()
    if a.megatron:
        megatron(a.megatron)
    if a.deepspeed:
        deepspeed_estimators(a.deepspeed)
        deepspeed_config(a.deepspeed)
    if a.hjson:
        hjson_vectors(a.hjson)
