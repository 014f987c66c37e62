"""Files of Hugging Face hub repositories: the local cache first, the hub only on a miss and only after one quick
reachability check (:func:`hub_reachable`); offline (:func:`~mixzoo.zoo.files.offline`: ``HF_HUB_OFFLINE=1`` or
``MIXZOO_OFFLINE=1``) or unreachable, a miss is a :class:`~mixzoo.core.errors.MissingFileError` naming where the file
belongs in the cache (:func:`hf_cache_location`). huggingface_hub is imported inside the functions.
"""

from __future__ import annotations

from pathlib import Path

from mixzoo.core.errors import InputError, MissingFileError
from mixzoo.zoo.files import hub_cached_file, hub_repo_folder, offline

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")  # what timm pushes to the hub, safest first
HUB_PROBE_TIMEOUT = 3.0  # seconds
HUB_PROBE_TTL = 60.0  # seconds a reachability answer is reused
_HUB_PROBES: dict[str, tuple[float, bool]] = {}


class HubEntryNotFoundError(MissingFileError):
    """The hub answered that the repository has no such file (not a network problem)."""


def hf_cache_location(repo_id: str, filename: str, revision: str | None = None) -> str:
    """Where huggingface_hub looks for a file: ``{HF_HUB_CACHE}/models--ORG--NAME/snapshots/REV/FILE``."""
    folder = hub_repo_folder(repo_id)
    ref = revision or "main"
    return f"{folder}/snapshots/<commit>/{filename} (with {folder}/refs/{ref} holding <commit>)"


def hub_reachable(timeout: float = HUB_PROBE_TIMEOUT) -> bool:
    """Whether the hub endpoint (``HF_ENDPOINT``) answers one quick HEAD request (any status), remembered for
    :data:`HUB_PROBE_TTL` seconds: huggingface_hub retries an unreachable hub five times with back-off (about 25 s
    of log noise), so a cache miss asks this first."""
    import time

    from huggingface_hub import constants
    from huggingface_hub.utils import get_session

    endpoint, now = constants.ENDPOINT, time.monotonic()
    known = _HUB_PROBES.get(endpoint)
    if known is not None and now - known[0] < HUB_PROBE_TTL:
        return known[1]
    try:
        get_session().head(endpoint, timeout=timeout)
        ok = True
    except Exception:  # noqa: BLE001 - DNS, proxy, TLS or timeout failures all mean: unreachable
        ok = False
    _HUB_PROBES[endpoint] = (now, ok)
    return ok


def hub_download(repo_id: str, filename: str, revision: str | None = None) -> Path:
    """``huggingface_hub.hf_hub_download`` with mixzoo's errors: the local cache first, a download only when
    downloads are on and the hub answers :func:`hub_reachable`; a file neither cached nor downloadable is a
    :class:`~mixzoo.core.errors.MissingFileError` saying where to place it, one the hub lacks
    :class:`HubEntryNotFoundError`."""
    from huggingface_hub import constants, hf_hub_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HFValidationError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    where = f"{filename!r} of Hugging Face repo {repo_id!r}" + (f" at revision {revision!r}" if revision else "")
    cached, present = hub_cached_file(repo_id, filename, revision)
    if present:
        return cached
    try:
        try:
            return Path(hf_hub_download(repo_id, filename, revision=revision, local_files_only=True))
        except LocalEntryNotFoundError:
            if offline() or not hub_reachable():
                raise
        return Path(hf_hub_download(repo_id, filename, revision=revision))
    except LocalEntryNotFoundError:
        if offline():
            why, hint = "downloads are off (HF_HUB_OFFLINE/MIXZOO_OFFLINE)", ""
        else:
            why = f"the hub ({constants.ENDPOINT}) is unreachable"
            hint = "; set MIXZOO_OFFLINE=1 to skip the network check"
        raise MissingFileError(
            f"{where} is not in the local cache and {why}; fetch it where there is network"
            f" (`huggingface-cli download {repo_id} {filename}`) and copy the Hugging Face cache (HF_HOME), or"
            f" place it at {hf_cache_location(repo_id, filename, revision)}{hint}"
        ) from None
    except GatedRepoError:
        raise MissingFileError(f"{where} is gated; accept its terms on huggingface.co and log in with"
                               " `huggingface-cli login`") from None
    except RepositoryNotFoundError:
        raise MissingFileError(f"Hugging Face repo {repo_id!r} does not exist (or is private); fix repo in"
                               " the registry entry") from None
    except RevisionNotFoundError:
        raise MissingFileError(f"{where}: revision not found; fix the revision in the registry entry") from None
    except EntryNotFoundError:
        raise HubEntryNotFoundError(f"{where} does not exist on the hub; fix filename in the registry entry") from None
    except HFValidationError as exc:
        raise InputError(f"{repo_id!r} is not a valid Hugging Face repo id ({exc})") from None


def hub_weights(repo_id: str, revision: str | None = None) -> Path:
    """The weight file of a timm hub repo: ``model.safetensors`` if the repo (or cache) has it, else
    ``pytorch_model.bin``."""
    try:
        return hub_download(repo_id, WEIGHT_FILES[0], revision)
    except HubEntryNotFoundError:
        return hub_download(repo_id, WEIGHT_FILES[1], revision)
    except MissingFileError:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(repo_id, WEIGHT_FILES[1], revision=revision)
        if isinstance(cached, str):
            return Path(cached)
        raise
