"""The helpers a model plugin needs for published weights, in one import (``from mixzoo.zoo import loading``): safe
checkpoints, checksums, Hugging Face hub files, timm hub models and RobustBench checkpoints.

A plugin whose model sources (hook ``mixzoo_model_sources``) or name resolver (``mixzoo_resolve_model_name``) read
published weights uses these rather than copying them. Each lives in the module of its concern, re-exported here:
:mod:`~mixzoo.zoo.checkpoints`, :mod:`~mixzoo.zoo.hub`, :mod:`~mixzoo.zoo.timm_hub`,
:mod:`~mixzoo.zoo.robustbench_loading`, :mod:`~mixzoo.zoo.input_layers` and (no torch) :mod:`~mixzoo.zoo.specs` and
:mod:`~mixzoo.zoo.files`. The names below are the contract; each raises a :class:`~mixzoo.core.errors.MixzooError`
subclass with a one-line message naming the fix, never a bare library exception:

* safe checkpoints: :func:`load_checkpoint` reads safetensors, or ``torch.load(weights_only=True)``; a checkpoint
  that needs arbitrary unpickling is refused (:class:`UnsafeCheckpointError`) unless the user passed
  ``allow_unsafe`` (``--allow-unsafe``); :func:`needs_unpickling` says which ones would be;
  :func:`state_dict_from` unwraps ``state_dict`` / ``model`` / ``net`` wrappers and ``module.`` prefixes;
  :func:`load_state_dict_strict` loads with a strict key match and names the missing and unexpected keys;
* checksums: :func:`sha256_file`, :func:`verify_sha256` (:class:`ChecksumError`) where a registry entry has
  ``sha256``;
* Hugging Face hub files: :func:`hub_download` reads the local cache first and asks the hub only on a miss and only
  after one quick reachability check (:func:`hub_reachable`); offline (:func:`offline`: ``HF_HUB_OFFLINE=1`` or
  ``MIXZOO_OFFLINE=1``) or unreachable, it raises :class:`~mixzoo.core.errors.MissingFileError` naming the cache path
  (:func:`hf_cache_location`); :func:`parse_hf_hub` splits ``hf-hub:ORG/NAME[@REV]`` (:data:`HF_PREFIX`) and
  :func:`hub_weights` finds a repository's weight file (:data:`WEIGHT_FILES`, safest first);
* timm hub models: :func:`timm_hub_spec` builds a :class:`~mixzoo.core.registry.ModelSpec` whose input size,
  mean/std and classes come from the hub ``config.json``; :func:`load_timm_hub` loads the weights through the safe
  loader and then timm's own pretrained-weight adaptation;
* RobustBench: :func:`robustbench_spec` and :func:`load_robustbench` (a :class:`~mixzoo.zoo.models.BaseClassifier`);
  checkpoints live in ``$MIXZOO_ROBUSTBENCH_DIR/{dataset}/{threat_model}/{name}.pt`` (default
  ``~/.cache/mixzoo/robustbench``, :func:`robustbench_dir`); the networks normalize internally, so their specs carry
  mean 0 / std 1 and the wrapper says so (:class:`NormalizationInside`);
* :class:`InputResize`: a first layer that resizes the input to the resolution a network was fine-tuned at.

timm, huggingface_hub and robustbench are imported inside the functions that use them (through
:mod:`mixzoo.core.compat`); torch is imported with this module, so a plugin imports it inside its loaders and
listing models never pays for it.
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
