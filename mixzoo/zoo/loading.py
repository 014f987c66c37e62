"""The helpers a model plugin needs for published weights, in one import (``from mixzoo.zoo import loading``): safe
checkpoints and checksums (:mod:`~mixzoo.zoo.checkpoints`), Hugging Face hub files, the local cache first
(:mod:`~mixzoo.zoo.hub`), timm hub models (:mod:`~mixzoo.zoo.timm_hub`), RobustBench checkpoints
(:mod:`~mixzoo.zoo.robustbench_loading`), input wrappers (:mod:`~mixzoo.zoo.input_layers`) and, without torch, specs
and file places (:mod:`~mixzoo.zoo.specs`, :mod:`~mixzoo.zoo.files`). Each documents itself in its module; each
raises a :class:`~mixzoo.core.errors.MixzooError` subclass with a one-line message naming the fix. timm,
huggingface_hub and robustbench are imported inside the functions; torch is imported with this module, so a plugin
imports it inside its loaders.
"""

from __future__ import annotations

from mixzoo.zoo.checkpoints import (
    ChecksumError,
    UnsafeCheckpointError,
    load_checkpoint,
    load_state_dict_strict,
    needs_unpickling,
    sha256_file,
    state_dict_from,
    verify_sha256,
)
from mixzoo.zoo.files import (
    ROBUSTBENCH_DEFAULT_DIR,
    ROBUSTBENCH_DIR_ENV,
    hub_cached_file,
    hub_repo_folder,
    offline,
    robustbench_checkpoints,
    robustbench_dir,
    robustbench_zoo,
)
from mixzoo.zoo.hub import (
    HUB_PROBE_TIMEOUT,
    HUB_PROBE_TTL,
    WEIGHT_FILES,
    HubEntryNotFoundError,
    hf_cache_location,
    hub_download,
    hub_reachable,
    hub_weights,
)
from mixzoo.zoo.input_layers import InputResize, NormalizationInside
from mixzoo.zoo.robustbench_loading import load_robustbench, robustbench_files
from mixzoo.zoo.specs import (
    DEFAULT_EPSILON,
    HF_PREFIX,
    HUB_DATASETS,
    ROBUSTBENCH_DATASETS,
    ROBUSTBENCH_THREATS,
    hub_dataset,
    parse_hf_hub,
    parse_robustbench_name,
    robustbench_entry,
    robustbench_reported,
    robustbench_spec,
)
from mixzoo.zoo.timm_hub import load_timm_hub, timm_hub_config, timm_hub_spec, timm_repo

__all__ = [
    "DEFAULT_EPSILON", "HF_PREFIX", "HUB_DATASETS", "HUB_PROBE_TIMEOUT", "HUB_PROBE_TTL", "ROBUSTBENCH_DATASETS",
    "ROBUSTBENCH_DEFAULT_DIR", "ROBUSTBENCH_DIR_ENV", "ROBUSTBENCH_THREATS", "WEIGHT_FILES", "ChecksumError",
    "HubEntryNotFoundError", "InputResize", "NormalizationInside", "UnsafeCheckpointError", "hf_cache_location",
    "hub_cached_file", "hub_dataset", "hub_download", "hub_reachable", "hub_repo_folder", "hub_weights",
    "load_checkpoint", "load_robustbench", "load_state_dict_strict", "load_timm_hub", "needs_unpickling", "offline",
    "parse_hf_hub", "parse_robustbench_name", "robustbench_checkpoints", "robustbench_dir", "robustbench_entry",
    "robustbench_files", "robustbench_reported", "robustbench_spec", "robustbench_zoo", "sha256_file",
    "state_dict_from", "timm_hub_config", "timm_hub_spec", "timm_repo", "verify_sha256",
]
