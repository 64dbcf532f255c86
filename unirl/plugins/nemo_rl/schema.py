"""NeMo RL's key schema without NeMo RL: the dotted keys and defaults of ``examples/configs/grpo_math_1B.yaml``.

NeMo RL is not on the package index and needs Python 3.13 and GPUs, so ``validate`` cannot compose its config
here. This module holds the base config's 289 leaf keys with their defaults, flattened mechanically with
OmegaConf (interpolations kept as strings) from NVIDIA-NeMo/RL tag v0.7.0 (``81aa43dd``), the release the
published image ``nvcr.io/nvidia/nemo-rl:v0.7.0`` ships. Each section names its lines in that file.

Keys added after v0.7.0 (at 7ea279a: e.g. ``policy.generation.val_temperature``, ``grpo.val_start_at``,
``reward_penalties.*``) are deliberately absent: a newer checkout takes them through ``framework.overrides``
with ``++`` (add-or-set), which this schema does not check.

:func:`key_problems` applies NeMo RL's override rule (``nemo_rl/utils/config.py:168-188 @ v0.7.0``: Hydra's grammar on a
struct config): a plain ``key=`` must exist, a ``+key=`` must not; and a value must have its default's type.
:func:`cross_field_problems` repeats the checks NeMo RL makes only after Ray and the GPUs are up, each with its
file and line at v0.7.0.
"""

from __future__ import annotations

import re
from typing import Any

SNAPSHOT_VERSION = "0.7.0"
BASE_CONFIG = "examples/configs/grpo_math_1B.yaml"

# examples/configs/grpo_math_1B.yaml @ v0.7.0, flattened; "${...}" values are OmegaConf interpolations that
# run_grpo.py resolves after the overrides (examples/run_grpo.py:74-81 @ v0.7.0).
GRPO_MATH_1B_DEFAULTS: dict[str, Any] = {
    # --- grpo: lines 2-54 (adv_estimator 31-35, async_grpo 48-54)
    'grpo.num_prompts_per_step': 32,
    'grpo.num_generations_per_prompt': 16,
    'grpo.max_rollout_turns': 1,
    'grpo.max_num_epochs': 1,
    'grpo.max_num_steps': 1000000,
    'grpo.normalize_rewards': True,
    'grpo.use_leave_one_out_baseline': True,
    'grpo.val_period': 10,
    'grpo.val_at_start': False,
    'grpo.val_at_end': False,
    'grpo.overlong_filtering': False,
    'grpo.advantage_clip_low': None,
    'grpo.advantage_clip_high': None,
    'grpo.max_val_samples': 256,
    'grpo.val_batch_size': 256,
    'grpo.seed': 42,
    'grpo.use_dynamic_sampling': False,
    'grpo.dynamic_sampling_max_gen_batches': 10,
    'grpo.batch_multiplier': 1,
    'grpo.reward_shaping.enabled': False,
    'grpo.reward_shaping.overlong_buffer_length': 128,
    'grpo.reward_shaping.overlong_buffer_penalty': 1,
    'grpo.reward_shaping.max_response_length': '${policy.max_total_sequence_length}',
    'grpo.reward_shaping.stop_properly_penalty_coef': None,
    'grpo.adv_estimator.name': 'grpo',
    'grpo.adv_estimator.normalize_rewards': '${grpo.normalize_rewards}',
    'grpo.adv_estimator.use_leave_one_out_baseline': '${grpo.use_leave_one_out_baseline}',
    'grpo.adv_estimator.minus_baseline': True,
    'grpo.reward_scaling.enabled': False,
    'grpo.reward_scaling.source_min': 0.0,
    'grpo.reward_scaling.source_max': 1.0,
    'grpo.reward_scaling.target_min': 0.0,
    'grpo.reward_scaling.target_max': 1.0,
    'grpo.seq_logprob_error_threshold': None,
    'grpo.invalid_tool_call_advantage': None,
    'grpo.malformed_thinking_advantage': None,
    'grpo.async_grpo.enabled': False,
    'grpo.async_grpo.max_trajectory_age_steps': 1,
    'grpo.async_grpo.in_flight_weight_updates': False,
    'grpo.async_grpo.recompute_kv_cache_after_weight_updates': False,
    # --- loss_fn: lines 55-88
    'loss_fn.reference_policy_kl_penalty': 0.01,
    'loss_fn.reference_policy_kl_type': 'k3',
    'loss_fn.kl_input_clamp_value': 20.0,
    'loss_fn.kl_output_clamp_value': 10.0,
    'loss_fn.ratio_clip_min': 0.2,
    'loss_fn.ratio_clip_max': 0.2,
    'loss_fn.ratio_clip_c': None,
    'loss_fn.use_on_policy_kl_approximation': False,
    'loss_fn.use_importance_sampling_correction': False,
    'loss_fn.truncated_importance_sampling_type': None,
    'loss_fn.truncated_importance_sampling_ratio': None,
    'loss_fn.truncated_importance_sampling_ratio_min': None,
    'loss_fn.sequence_level_importance_ratios': False,
    'loss_fn.token_level_loss': True,
    'loss_fn.force_on_policy_ratio': False,
    'loss_fn.use_kl_in_reward': False,
    'loss_fn.use_cispo': False,
    'loss_fn.disable_ppo_ratio': False,
    'loss_fn.positive_example_nll_weight': 0.0,
    # --- checkpointing: lines 89-100
    'checkpointing.enabled': True,
    'checkpointing.checkpoint_dir': 'results/grpo',
    'checkpointing.metric_name': 'val:accuracy',
    'checkpointing.higher_is_better': True,
    'checkpointing.keep_top_k': 3,
    'checkpointing.save_period': 10,
    'checkpointing.checkpoint_must_save_by': None,
    'checkpointing.model_save_format': 'safetensors',
    'checkpointing.save_consolidated': False,
    'checkpointing.save_optimizer': True,
    # --- policy.megatron_cfg: lines 146-259 (disabled in this config; keys kept so overrides may switch to Megatron)
    'policy.megatron_cfg.enabled': False,
    'policy.megatron_cfg.force_reconvert_from_hf': False,
    'policy.megatron_cfg.empty_unused_memory_level': 1,
    'policy.megatron_cfg.activation_checkpointing': False,
    'policy.megatron_cfg.recompute_granularity': 'full',
    'policy.megatron_cfg.recompute_modules': None,
    'policy.megatron_cfg.tensor_model_parallel_size': 1,
    'policy.megatron_cfg.expert_tensor_parallel_size': 1,
    'policy.megatron_cfg.expert_model_parallel_size': 1,
    'policy.megatron_cfg.pipeline_model_parallel_size': 1,
    'policy.megatron_cfg.num_layers_in_first_pipeline_stage': None,
    'policy.megatron_cfg.num_layers_in_last_pipeline_stage': None,
    'policy.megatron_cfg.context_parallel_size': 1,
    'policy.megatron_cfg.pipeline_dtype': '${policy.precision}',
    'policy.megatron_cfg.sequence_parallel': False,
    'policy.megatron_cfg.freeze_moe_router': True,
    'policy.megatron_cfg.moe_router_dtype': 'fp64',
    'policy.megatron_cfg.moe_router_load_balancing_type': 'none',
    'policy.megatron_cfg.moe_router_bias_update_rate': 0.0,
    'policy.megatron_cfg.moe_permute_fusion': True,
    'policy.megatron_cfg.apply_rope_fusion': True,
    'policy.megatron_cfg.bias_activation_fusion': True,
    'policy.megatron_cfg.defer_fp32_logits': False,
    'policy.megatron_cfg.moe_per_layer_logging': False,
    'policy.megatron_cfg.moe_enable_deepep': False,
    'policy.megatron_cfg.moe_token_dispatcher_type': 'alltoall',
    'policy.megatron_cfg.moe_shared_expert_overlap': False,
    'policy.megatron_cfg.mtp_num_layers': 0,
    'policy.megatron_cfg.mtp_loss_scaling_factor': 0.0,
    'policy.megatron_cfg.mtp_use_repeated_layer': False,
    'policy.megatron_cfg.mtp_detach_heads': False,
    'policy.megatron_cfg.gradient_accumulation_fusion': False,
    'policy.megatron_cfg.use_fused_weighted_squared_relu': False,
    'policy.megatron_cfg.peft.enabled': False,
    'policy.megatron_cfg.peft.target_modules': [],
    'policy.megatron_cfg.peft.exclude_modules': [],
    'policy.megatron_cfg.peft.dim': 8,
    'policy.megatron_cfg.peft.alpha': 32,
    'policy.megatron_cfg.peft.dropout': 0.0,
    'policy.megatron_cfg.peft.dropout_position': 'post',
    'policy.megatron_cfg.peft.lora_A_init_method': 'xavier',
    'policy.megatron_cfg.peft.lora_B_init_method': 'zero',
    'policy.megatron_cfg.peft.a2a_experimental': False,
    'policy.megatron_cfg.peft.lora_dtype': 'None',
    'policy.megatron_cfg.optimizer.optimizer': 'adam',
    'policy.megatron_cfg.optimizer.lr': 5e-06,
    'policy.megatron_cfg.optimizer.min_lr': 5e-07,
    'policy.megatron_cfg.optimizer.weight_decay': 0.01,
    'policy.megatron_cfg.optimizer.bf16': True,
    'policy.megatron_cfg.optimizer.fp16': False,
    'policy.megatron_cfg.optimizer.params_dtype': 'float32',
    'policy.megatron_cfg.optimizer.adam_beta1': 0.9,
    'policy.megatron_cfg.optimizer.adam_beta2': 0.999,
    'policy.megatron_cfg.optimizer.adam_eps': 1e-08,
    'policy.megatron_cfg.optimizer.sgd_momentum': 0.9,
    'policy.megatron_cfg.optimizer.use_distributed_optimizer': True,
    'policy.megatron_cfg.optimizer.use_precision_aware_optimizer': True,
    'policy.megatron_cfg.optimizer.clip_grad': '${policy.max_grad_norm}',
    'policy.megatron_cfg.optimizer.optimizer_cpu_offload': False,
    'policy.megatron_cfg.optimizer.optimizer_offload_fraction': 0.0,
    'policy.megatron_cfg.scheduler.start_weight_decay': '${policy.megatron_cfg.optimizer.weight_decay}',
    'policy.megatron_cfg.scheduler.end_weight_decay': '${policy.megatron_cfg.optimizer.weight_decay}',
    'policy.megatron_cfg.scheduler.weight_decay_incr_style': 'constant',
    'policy.megatron_cfg.scheduler.lr_decay_style': 'constant',
    'policy.megatron_cfg.scheduler.lr_decay_iters': 1000,
    'policy.megatron_cfg.scheduler.lr_warmup_iters': 13,
    'policy.megatron_cfg.scheduler.lr_warmup_init': 5e-07,
    'policy.megatron_cfg.distributed_data_parallel_config.grad_reduce_in_fp32': False,
    'policy.megatron_cfg.distributed_data_parallel_config.overlap_grad_reduce': True,
    'policy.megatron_cfg.distributed_data_parallel_config.overlap_param_gather': True,
    'policy.megatron_cfg.distributed_data_parallel_config.use_custom_fsdp': False,
    'policy.megatron_cfg.distributed_data_parallel_config.data_parallel_sharding_strategy': 'optim_grads_params',
    'policy.megatron_cfg.fp8_cfg.enabled': False,
    'policy.megatron_cfg.fp8_cfg.fp8': 'e4m3',
    'policy.megatron_cfg.fp8_cfg.fp8_recipe': 'blockwise',
    'policy.megatron_cfg.fp8_cfg.fp8_param': False,
    'policy.megatron_cfg.env_vars': None,
    # --- policy.generation: lines 307-365 (mcore_generation_config 319-336, vllm_cfg 337-355, colocated 357-365)
    'policy.generation.port_range_low': 11001,
    'policy.generation.port_range_high': 15000,
    'policy.generation.backend': 'vllm',
    'policy.generation.max_new_tokens': '${policy.max_total_sequence_length}',
    'policy.generation.temperature': 1.0,
    'policy.generation.top_p': 1.0,
    'policy.generation.top_k': None,
    'policy.generation.stop_token_ids': None,
    'policy.generation.stop_strings': None,
    'policy.generation.mcore_generation_config.async_engine': False,
    'policy.generation.mcore_generation_config.max_model_len': '${policy.max_total_sequence_length}',
    'policy.generation.mcore_generation_config.cuda_graph_impl': 'local',
    'policy.generation.mcore_generation_config.inference_cuda_graph_scope': 'block',
    'policy.generation.mcore_generation_config.buffer_size_gb': 10,
    'policy.generation.mcore_generation_config.num_cuda_graphs': 4,
    'policy.generation.mcore_generation_config.block_size_tokens': 256,
    'policy.generation.mcore_generation_config.use_cuda_graphs_for_non_decode_steps': True,
    'policy.generation.mcore_generation_config.enable_chunked_prefill': True,
    'policy.generation.mcore_generation_config.enable_prefix_caching': False,
    'policy.generation.mcore_generation_config.max_tokens': 16384,
    'policy.generation.mcore_generation_config.kv_cache_management_mode': 'persist',
    'policy.generation.mcore_generation_config.materialize_only_last_token_logits': True,
    'policy.generation.mcore_generation_config.num_speculative_tokens': 0,
    'policy.generation.mcore_generation_config.refit_backend': 'nvshmem',
    'policy.generation.mcore_generation_config.parsers': [],
    'policy.generation.mcore_generation_config.expose_http_server': False,
    'policy.generation.vllm_cfg.async_engine': False,
    'policy.generation.vllm_cfg.precision': '${policy.precision}',
    'policy.generation.vllm_cfg.kv_cache_dtype': 'auto',
    'policy.generation.vllm_cfg.tensor_parallel_size': 1,
    'policy.generation.vllm_cfg.pipeline_parallel_size': 1,
    'policy.generation.vllm_cfg.expert_parallel_size': 1,
    'policy.generation.vllm_cfg.gpu_memory_utilization': 0.6,
    'policy.generation.vllm_cfg.max_model_len': '${policy.max_total_sequence_length}',
    'policy.generation.vllm_cfg.enforce_eager': False,
    'policy.generation.vllm_cfg.use_tqdm': True,
    'policy.generation.vllm_cfg.use_deep_gemm': False,
    'policy.generation.vllm_cfg.num_last_layers_in_bf16': 0,
    'policy.generation.vllm_cfg.num_first_layers_in_bf16': 0,
    'policy.generation.vllm_cfg.enable_vllm_metrics_logger': True,
    'policy.generation.vllm_cfg.vllm_metrics_logger_interval': 0.5,
    'policy.generation.vllm_kwargs': {},
    'policy.generation.colocated.enabled': True,
    'policy.generation.colocated.resources.gpus_per_node': None,
    'policy.generation.colocated.resources.num_nodes': None,
    # --- policy: lines 101-306 (tokenizer 103-105, dtensor_cfg 116-145, draft 260-268, dynamic_batching 269-274,
    #     sequence_packing 275-283, optimizer 287-294, scheduler 295-306)
    'policy.model_name': 'Qwen/Qwen2.5-1.5B',
    'policy.tokenizer.name': '${policy.model_name}',
    'policy.tokenizer.chat_template_kwargs': None,
    'policy.hf_config_overrides': {},
    'policy.train_global_batch_size': 512,
    'policy.train_micro_batch_size': 4,
    'policy.generation_batch_size': 32,
    'policy.logprob_batch_size': '${policy.train_micro_batch_size}',
    'policy.max_total_sequence_length': 512,
    'policy.precision': 'bfloat16',
    'policy.logprob_chunk_size': None,
    'policy.offload_optimizer_for_logprob': False,
    'policy.dtensor_cfg._v2': True,
    'policy.dtensor_cfg.enabled': True,
    'policy.dtensor_cfg.cpu_offload': False,
    'policy.dtensor_cfg.sequence_parallel': False,
    'policy.dtensor_cfg.activation_checkpointing': False,
    'policy.dtensor_cfg.tensor_parallel_size': 1,
    'policy.dtensor_cfg.context_parallel_size': 1,
    'policy.dtensor_cfg.custom_parallel_plan': None,
    'policy.dtensor_cfg.automodel_kwargs': {},
    'policy.dtensor_cfg.lora_cfg.enabled': False,
    'policy.dtensor_cfg.lora_cfg.target_modules': [],
    'policy.dtensor_cfg.lora_cfg.exclude_modules': [],
    'policy.dtensor_cfg.lora_cfg.match_all_linear': True,
    'policy.dtensor_cfg.lora_cfg.dim': 8,
    'policy.dtensor_cfg.lora_cfg.alpha': 32,
    'policy.dtensor_cfg.lora_cfg.dropout': 0.0,
    'policy.dtensor_cfg.lora_cfg.dropout_position': 'post',
    'policy.dtensor_cfg.lora_cfg.lora_A_init': 'xavier',
    'policy.dtensor_cfg.lora_cfg.use_triton': True,
    'policy.draft.enabled': False,
    'policy.draft.model_name': None,
    'policy.draft.loss_weight': 0.1,
    'policy.draft.num_layers': None,
    'policy.draft.aux_layer_indices': None,
    'policy.dynamic_batching.enabled': False,
    'policy.dynamic_batching.train_mb_tokens':
        '${mul:${policy.max_total_sequence_length}, ${policy.train_micro_batch_size}}',
    'policy.dynamic_batching.logprob_mb_tokens':
        '${mul:${policy.max_total_sequence_length}, ${policy.logprob_batch_size}}',
    'policy.dynamic_batching.sequence_length_round': 64,
    'policy.sequence_packing.enabled': True,
    'policy.sequence_packing.train_mb_tokens':
        '${mul:${policy.max_total_sequence_length}, ${policy.train_micro_batch_size}}',
    'policy.sequence_packing.logprob_mb_tokens':
        '${mul:${policy.max_total_sequence_length}, ${policy.logprob_batch_size}}',
    'policy.sequence_packing.algorithm': 'modified_first_fit_decreasing',
    'policy.sequence_packing.sequence_length_round': 64,
    'policy.make_sequence_length_divisible_by': '${policy.dtensor_cfg.tensor_parallel_size}',
    'policy.max_grad_norm': 1.0,
    'policy.optimizer.name': 'torch.optim.AdamW',
    'policy.optimizer.kwargs.lr': 5e-06,
    'policy.optimizer.kwargs.weight_decay': 0.01,
    'policy.optimizer.kwargs.betas': [0.9, 0.999],
    'policy.optimizer.kwargs.eps': 1e-08,
    'policy.scheduler':
        [{'name': 'torch.optim.lr_scheduler.LinearLR',
          'kwargs': {'start_factor': 0.1, 'end_factor': 1.0, 'total_iters': 50}},
         {'name': 'torch.optim.lr_scheduler.ConstantLR', 'kwargs': {'factor': 1.0, 'total_iters': 10000000000}},
         {'milestones': [50]}],
    # --- data: lines 366-409
    'data.max_input_seq_length': '${policy.max_total_sequence_length}',
    'data.shuffle': True,
    'data.num_workers': 1,
    'data.use_multiple_dataloader': False,
    'data.train.dataset_name': 'OpenMathInstruct-2',
    'data.train.split_validation_size': 0.05,
    'data.train.seed': '${grpo.seed}',
    'data.validation': None,
    'data.default.prompt_file': 'examples/prompts/cot.txt',
    'data.default.system_prompt_file': None,
    'data.default.processor': 'math_hf_data_processor',
    'data.default.env_name': 'math',
    # --- env: lines 410-414
    'env.math.num_workers': 8,
    'env.math.math_verify_impl': 'hf_math_verify',
    # --- logger: lines 415-437
    'logger.log_dir': 'logs',
    'logger.num_val_samples_to_print': 0,
    'logger.wandb_enabled': False,
    'logger.tensorboard_enabled': False,
    'logger.mlflow_enabled': False,
    'logger.swanlab_enabled': False,
    'logger.monitor_gpus': True,
    'logger.wandb.project': 'grpo-dev',
    'logger.wandb.name': 'grpo-dev-logger',
    'logger.swanlab.project': 'grpo-dev',
    'logger.swanlab.name': 'grpo-dev-logger',
    'logger.tensorboard': {},
    'logger.mlflow.experiment_name': 'grpo-dev',
    'logger.mlflow.run_name': 'grpo-dev-logger',
    'logger.mlflow.tracking_uri': 'http://localhost:5000',
    'logger.gpu_monitoring.collection_interval': 10,
    'logger.gpu_monitoring.flush_interval': 10,
    # --- cluster: lines 438-451
    'cluster.gpus_per_node': 1,
    'cluster.num_nodes': 1,
    'cluster.master_port_range_low': 25000,
    'cluster.master_port_range_high': 28000,
    'cluster.segment_size': None,
    # --- data_plane: lines 452-469
    'data_plane.enabled': False,
    'data_plane.impl': 'transfer_queue',
    'data_plane.backend': 'simple',
    'data_plane.storage_capacity': 1000000,
    'data_plane.num_storage_units': 2,
    'data_plane.claim_meta_poll_interval_s': 0.5,
    'data_plane.global_segment_size': 549755813888,
    'data_plane.local_buffer_size': 68719476736,
    # --- on_policy_distillation: line 470
    'on_policy_distillation': None,
}

# Keys whose default is not null but which NeMo RL's typed config lets be null.
NULLABLE: frozenset[str] = frozenset({
    "policy.max_grad_norm",  # NotRequired[float | int | None]: nemo_rl/models/policy/__init__.py:520; None: no clip
    "checkpointing.metric_name",  # str | None: nemo_rl/utils/checkpoint.py:92; None = keep the newest checkpoints
    "data.default.prompt_file",  # NotRequired[str | None]: nemo_rl/data/__init__.py:25
    "data.default.system_prompt_file",  # nemo_rl/data/__init__.py:26
    "policy.scheduler",  # NotRequired[list | dict | None]: nemo_rl/models/policy/__init__.py:523-527
})

# Keys whose default in the example YAML is an int but which NeMo RL's typed config declares float.
FLOAT_TYPED: frozenset[str] = frozenset({
    "grpo.reward_shaping.overlong_buffer_penalty",  # NotRequired[float]: nemo_rl/algorithms/reward_functions.py:43
})

_REFERENCE = re.compile(r"^\$\{([A-Za-z0-9_.]+)\}$")


def is_interpolation(value: Any) -> bool:
    return isinstance(value, str) and value.startswith("${")


def type_problem(key: str, value: Any, default: Any) -> str | None:
    """Whether ``value`` fits the key whose default is ``default`` (None when it does)."""
    if default is None or is_interpolation(default) or (value is None and key in NULLABLE):
        return None  # a null default takes any value; an interpolation's type is only known once resolved
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, int) and key not in FLOAT_TYPED:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, float | int):
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    else:
        ok = isinstance(value, type(default))
    if ok:
        return None
    return f"{key}={value!r}: NeMo RL's default is {default!r} ({type(default).__name__}); got {type(value).__name__}"


def key_problems(overrides: dict[str, Any], version: str = SNAPSHOT_VERSION) -> list[str]:
    """Unknown plain keys, '+' keys that already exist, and values of the wrong type."""
    problems: list[str] = []
    for raw, value in overrides.items():
        if raw.startswith("++"):
            continue  # add-or-set: legal whether or not the key exists
        key = raw.lstrip("+")
        if raw.startswith("+"):
            if key in GRPO_MATH_1B_DEFAULTS:
                problems.append(f"{raw}: NeMo RL {version}'s {BASE_CONFIG} already has {key}; drop the '+'")
            elif any(known.startswith(key + ".") for known in GRPO_MATH_1B_DEFAULTS):
                problems.append(f"{raw}: {key} is a section of {BASE_CONFIG}; set its keys, not the section")
            continue
        if key not in GRPO_MATH_1B_DEFAULTS:
            if any(known.startswith(key + ".") for known in GRPO_MATH_1B_DEFAULTS):
                continue  # a whole section assigned at once (e.g. data.validation's keys), checked below by its leaves
            leaf = key.rsplit(".", 1)[-1]
            near = sorted(k for k in GRPO_MATH_1B_DEFAULTS if k.rsplit(".", 1)[-1] == leaf)[:3]
            hint = f" (keys with that name: {', '.join(near)})" if near else " (use '+' to add a new key)"
            problems.append(f"{key}: not a key of NeMo RL {version}'s {BASE_CONFIG}{hint}")
            continue
        problem = type_problem(key, value, GRPO_MATH_1B_DEFAULTS[key])
        if problem:
            problems.append(problem)
    return problems


def merged_config(overrides: dict[str, Any]) -> dict[str, Any]:
    """The base config's flat keys with the overrides applied (their '+' dropped), interpolations followed."""
    flat = dict(GRPO_MATH_1B_DEFAULTS)
    for raw, value in overrides.items():
        key = raw.lstrip("+")
        if isinstance(value, dict) and value:
            # a section set whole (data.validation={...}) replaces the null leaf with its own leaves
            flat.pop(key, None)
            flat.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            flat[key] = value
    return {key: _resolve(flat, key) for key in flat}


def _resolve(flat: dict[str, Any], key: str, depth: int = 0) -> Any:
    value = flat.get(key)
    match = _REFERENCE.match(value) if isinstance(value, str) else None
    if match is None or depth > 10:
        return value
    target = match.group(1)
    if target.startswith("."):  # a relative reference (${.temperature}) is relative to the key's own node
        target = key.rsplit(".", 1)[0] + target
    return _resolve(flat, target, depth + 1)


def _section_set(config: dict[str, Any], prefix: str) -> bool:
    """Whether a nullable section (data.validation) holds anything."""
    return any(k.startswith(prefix + ".") for k in config) or config.get(prefix) is not None


def training_gpus(config: dict[str, Any]) -> int:
    """GPUs the policy trains on: all of them when generation is colocated, else what generation leaves
    (nemo_rl/algorithms/grpo.py:567-665 @ v0.7.0)."""
    nodes, per_node = int(config["cluster.num_nodes"]), int(config["cluster.gpus_per_node"])
    if config["policy.generation.colocated.enabled"]:
        return nodes * per_node
    inference_per_node = config.get("policy.generation.colocated.resources.gpus_per_node") or 0
    inference_nodes = config.get("policy.generation.colocated.resources.num_nodes") or 0
    if nodes == 1:
        return per_node - int(inference_per_node)
    return (nodes - int(inference_nodes)) * per_node


def model_parallel_size(config: dict[str, Any]) -> int:
    if config["policy.megatron_cfg.enabled"]:
        sizes: tuple[str, ...] = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size")
        section = "policy.megatron_cfg"
    else:
        sizes = ("tensor_parallel_size", "context_parallel_size")
        section = "policy.dtensor_cfg"
    product = 1
    for size in sizes:
        product *= int(config[f"{section}.{size}"])
    return product


def cross_field_problems(config: dict[str, Any]) -> list[str]:
    """The checks NeMo RL makes at setup or on the first step, on a merged flat config (all @ v0.7.0)."""
    c = config
    problems: list[str] = []

    def need(ok: bool, text: str) -> None:
        if not ok:
            problems.append(text)

    prompts, group = c["grpo.num_prompts_per_step"], c["grpo.num_generations_per_prompt"]
    global_batch = c["policy.train_global_batch_size"]
    rollouts = prompts * group
    # nemo_rl/distributed/batched_data_dict.py:395-400: shard_by_batch_size, called by Policy.train per step
    need(global_batch > 0 and rollouts % global_batch == 0,
         f"policy.train_global_batch_size={global_batch} must divide the {rollouts} rollouts of a step "
         f"(grpo.num_prompts_per_step x grpo.num_generations_per_prompt; batched_data_dict.py:395-397)")
    train_gpus = training_gpus(c)
    parallel = model_parallel_size(c)
    # nemo_rl/models/policy/lm_policy.py:197-213: DP = world / (PP x CP x TP) must be a positive integer
    need(train_gpus >= parallel and train_gpus % parallel == 0,
         f"the {train_gpus} training GPUs must be a positive multiple of the model-parallel size {parallel} "
         "(lm_policy.py:197-213)")
    if train_gpus >= parallel > 0 and train_gpus % parallel == 0:
        data_parallel = train_gpus // parallel
        need(global_batch % data_parallel == 0,
             f"policy.train_global_batch_size={global_batch} must split evenly over data-parallel size "
             f"{data_parallel} (batched_data_dict.py:398-400)")
    # nemo_rl/algorithms/grpo.py:605-665: non-colocated generation needs its own GPUs, and some left to train on
    if not c["policy.generation.colocated.enabled"]:
        per_node = c.get("policy.generation.colocated.resources.gpus_per_node")
        nodes = c.get("policy.generation.colocated.resources.num_nodes")
        if c["cluster.num_nodes"] == 1:
            need(per_node is not None and per_node > 0,
                 "policy.generation.colocated.resources.gpus_per_node must be > 0 for non-colocated generation on "
                 "one node (grpo.py:617-623)")
            need(nodes in (None, 1), "policy.generation.colocated.resources.num_nodes must be 1 or null on one node "
                 "(grpo.py:624-628)")
        else:
            need(nodes is not None and nodes > 0, "policy.generation.colocated.resources.num_nodes must be > 0 "
                 "for non-colocated generation on several nodes (grpo.py:647-651)")
            need(per_node == c["cluster.gpus_per_node"], "policy.generation.colocated.resources.gpus_per_node "
                 "must equal cluster.gpus_per_node on several nodes (grpo.py:652-660)")
        need(train_gpus > 0, f"non-colocated generation leaves {train_gpus} GPUs to train on (grpo.py:636-641, "
             "662-665)")
    # nemo_rl/algorithms/grpo.py:403-409: any validation needs a validation dataset
    validates = c["grpo.val_period"] > 0 or c["grpo.val_at_start"] or c["grpo.val_at_end"]
    has_validation = _section_set(c, "data.validation") or (c.get("data.train.split_validation_size") or 0) > 0
    need(not validates or has_validation,
         "grpo.val_period/val_at_start/val_at_end ask for validation but there is no validation data "
         "(data.validation, or data.train.split_validation_size > 0; grpo.py:403-409)")
    # nemo_rl/algorithms/grpo.py:3164-3170: validation runs max_val_samples // val_batch_size batches
    need(not validates or c["grpo.max_val_samples"] >= c["grpo.val_batch_size"],
         f"grpo.max_val_samples={c['grpo.max_val_samples']} < grpo.val_batch_size={c['grpo.val_batch_size']} "
         "runs zero validation batches (grpo.py:3164-3170)")
    # nemo_rl/algorithms/grpo.py:338-345
    need(c["grpo.use_dynamic_sampling"] or c["grpo.batch_multiplier"] == 1,
         "grpo.batch_multiplier > 1 needs grpo.use_dynamic_sampling=true (grpo.py:338-345)")
    # nemo_rl/algorithms/grpo.py:427-436 and :439-444
    need(not c["loss_fn.force_on_policy_ratio"] or global_batch == rollouts,
         "loss_fn.force_on_policy_ratio needs policy.train_global_batch_size == rollouts per step (grpo.py:427-436)")
    need(not c.get("grpo.skip_reference_policy_logprobs_calculation")
         or c["loss_fn.reference_policy_kl_penalty"] == 0,
         "grpo.skip_reference_policy_logprobs_calculation needs loss_fn.reference_policy_kl_penalty == 0 "
         "(grpo.py:439-444)")
    # nemo_rl/algorithms/utils.py:82-92
    need(c["loss_fn.reference_policy_kl_type"] in ("k1", "k2", "k3"),
         f"loss_fn.reference_policy_kl_type={c['loss_fn.reference_policy_kl_type']!r}: k1, k2 or k3 (utils.py:82-92)")
    # nemo_rl/algorithms/loss/loss_functions.py:249-252
    need(not c["loss_fn.sequence_level_importance_ratios"] or not c["loss_fn.token_level_loss"],
         "loss_fn.sequence_level_importance_ratios needs loss_fn.token_level_loss=false (loss_functions.py:249-252)")
    # nemo_rl/models/automodel/setup.py:77-81, 285-288
    need(c["policy.precision"] in ("float32", "bfloat16", "float16"),
         f"policy.precision={c['policy.precision']!r}: float32, bfloat16 or float16 (automodel/setup.py:285-288)")
    # nemo_rl/models/policy/lm_policy.py:93-97, 295-297, 319-321
    need(not (c["policy.megatron_cfg.enabled"] and c["policy.dtensor_cfg.enabled"]),
         "policy.megatron_cfg.enabled and policy.dtensor_cfg.enabled exclude each other (lm_policy.py:93-97)")
    # LoRA: nemo_rl/models/policy/lm_policy.py:147-150 and nemo_rl/models/automodel/setup.py:667-670 @ v0.7.0;
    # the module matcher: NVIDIA-NeMo/Automodel nemo_automodel/components/_peft/module_matcher.py (__post_init__)
    lora = "policy.dtensor_cfg.lora_cfg"
    if c["policy.dtensor_cfg.enabled"] and c[f"{lora}.enabled"]:
        need(c["policy.dtensor_cfg._v2"], f"{lora}.enabled needs policy.dtensor_cfg._v2=true (lm_policy.py:147-150)")
        need(c["policy.dtensor_cfg.tensor_parallel_size"] == 1 or not c[f"{lora}.use_triton"],
             f"{lora}.use_triton needs policy.dtensor_cfg.tensor_parallel_size == 1 (automodel/setup.py:667-670)")
        need(not (c[f"{lora}.target_modules"] and c[f"{lora}.exclude_modules"]),
             f"{lora}.target_modules and exclude_modules exclude each other (Automodel module_matcher.py)")
        need(not c[f"{lora}.match_all_linear"] or not (c[f"{lora}.target_modules"] or c[f"{lora}.exclude_modules"]),
             f"{lora}.match_all_linear needs target_modules and exclude_modules empty (Automodel module_matcher.py)")
    need(not (c["policy.dynamic_batching.enabled"] and c["policy.sequence_packing.enabled"]),
         "policy.dynamic_batching and policy.sequence_packing exclude each other (lm_policy.py:295-297, 319-321)")
    # nemo_rl/models/policy/lm_policy.py:180-195 (unless NRL_IGNORE_TP_ACCURACY_CHECK is set)
    tensor_parallel = c["policy.dtensor_cfg.tensor_parallel_size"] if c["policy.dtensor_cfg.enabled"] else c[
        "policy.megatron_cfg.tensor_model_parallel_size"]
    need(tensor_parallel < 4 or c["policy.train_micro_batch_size"] == c["policy.logprob_batch_size"],
         "training tensor parallelism >= 4 needs policy.train_micro_batch_size == policy.logprob_batch_size "
         "(lm_policy.py:180-195)")
    # nemo_rl/algorithms/grpo.py:2872-2875 (a modulo) and :2900-2908
    if c["checkpointing.enabled"]:
        need(c["checkpointing.save_period"] > 0, "checkpointing.save_period must be > 0 (grpo.py:2872-2875)")
        metric = c["checkpointing.metric_name"]
        need(metric is None or str(metric).startswith(("val:", "train:")),
             f"checkpointing.metric_name={metric!r}: null, or 'val:<name>' / 'train:<name>' (grpo.py:2900-2908)")
    # examples/run_grpo.py:159-186 and nemo_rl/algorithms/grpo.py:3364-3373, :3421-3423
    if c["grpo.async_grpo.enabled"]:
        need(c["loss_fn.use_importance_sampling_correction"],
             "grpo.async_grpo needs loss_fn.use_importance_sampling_correction=true (grpo.py:3371-3373)")
        need(not c["policy.generation.colocated.enabled"],
             "grpo.async_grpo needs non-colocated generation (grpo.py:3421-3423)")
        need(c["policy.generation.vllm_cfg.async_engine"],
             "grpo.async_grpo needs policy.generation.vllm_cfg.async_engine=true (grpo.py:3364-3370)")
        for feature in ("grpo.use_dynamic_sampling", "grpo.reward_scaling.enabled", "grpo.reward_shaping.enabled",
                        "data.use_multiple_dataloader"):
            need(not c[feature], f"grpo.async_grpo excludes {feature} (examples/run_grpo.py:159-186)")
    # nemo_rl/data/utils.py:151-160: every env_name a dataset uses needs an env.<name> section
    used_envs = {c.get(k) for k in ("data.default.env_name", "data.train.env_name", "data.validation.env_name")}
    for env in sorted(e for e in used_envs if e):
        need(any(k.startswith(f"env.{env}.") or k == f"env.{env}" for k in c),
             f"env_name {env!r} has no env.{env} section (data/utils.py:151-160 reads env_configs[env_name])")
    # nemo_rl/data/datasets/response_datasets/response_dataset.py:43-53: ResponseDataset(data_path, ...)
    for split in ("data.train", "data.validation"):
        if c.get(f"{split}.dataset_name") == "ResponseDataset":
            need(bool(c.get(f"{split}.data_path")), f"{split}.dataset_name=ResponseDataset needs {split}.data_path "
                 "(response_dataset.py:43-53)")
    return problems
