"""A mix card on the Hugging Face Hub, by ``hf-hub:ORG/NAME[@REVISION]`` (the id timm and huggingface_hub use).

A repository written by :func:`mixzoo.share.push.push` holds the card (:data:`CARD_FILE`), its method's weight files
next to it, the base-model references (:data:`BASE_MODELS_FILE`) and a model card. :func:`resolve_card` finds the
card and its weight files in the local Hugging Face cache (``HF_HUB_CACHE``) and downloads only what is missing,
only when downloads are on: with ``HF_HUB_OFFLINE=1`` (or ``MIXZOO_OFFLINE=1``) a missing file is a one-line error
saying where it belongs. ``mixzoo.load_mixed``, ``mixzoo bench`` and ``mixzoo certify`` reach it through the
``mixzoo_resolve_card`` hook (built-in plugin ``share``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mixzoo.core.errors import InputError, MissingFileError, MixzooError, damaged_file
from mixzoo.core.paths import plain_name

HUB_PREFIX = "hf-hub:"
CARD_FILE = "card.toml"
BASE_MODELS_FILE = "base_models.json"


def parse_hub_id(ref: str) -> tuple[str, str | None]:
    """``hf-hub:ORG/NAME[@REVISION]`` -> (``ORG/NAME``, ``REVISION`` or None); a one-line error otherwise."""
    body = ref[len(HUB_PREFIX):] if ref.startswith(HUB_PREFIX) else ref
    repo, _, revision = body.partition("@")
    parts = repo.split("/")
    if len(parts) != 2 or not all(parts) or any(c.isspace() for c in repo):
        raise InputError(f"{ref!r} is not a Hugging Face repository id; write hf-hub:ORG/NAME[@REVISION]")
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:  # the Hub's own rule (no '..' or '--', no leading '-' or '.', at most 96 characters, ...)
        validate_repo_id(repo)
    except HFValidationError as exc:
        raise InputError(f"{ref!r} is not a Hugging Face repository id ({' '.join(str(exc).split())}); write"
                         " hf-hub:ORG/NAME[@REVISION]") from None
    return repo, revision or None


def hub_file(repo: str, filename: str, revision: str | None = None) -> Path:
    """One file of a Hub repository written by ``mixzoo push``, through :func:`mixzoo.zoo.hub.hub_download` (cache
    first; its one-line errors); a file the repository lacks, a file name huggingface_hub refuses or a failed
    download are one-line errors too."""
    from mixzoo.zoo.hub import HubEntryNotFoundError, hub_download

    where = f"{filename!r} of Hugging Face repository {repo!r}" + (f" at revision {revision!r}" if revision else "")
    try:
        return hub_download(repo, filename, revision)
    except HubEntryNotFoundError:
        raise MissingFileError(f"{where} does not exist; is {repo!r} a repository written by `mixzoo push`?") from None
    except MixzooError:
        raise
    except (ValueError, RuntimeError) as exc:  # huggingface_hub's refusal of a file name or a broken cache entry
        raise damaged_file(f"{where}", f"huggingface_hub refused it ({type(exc).__name__}: {exc})",
                           f"check the file names in the repository's {CARD_FILE}, or fetch it again with"
                           f" `huggingface-cli download {repo} --force-download`") from None
    except OSError as exc:  # network refused, DNS, timeouts (requests' errors are OSErrors)
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise MissingFileError(f"could not download {where} ({first[:200]}); set HF_HUB_OFFLINE=1 to use the cache"
                               " only") from None


def _read(ref: str, path: Path, name: str, fmt: str) -> Any:
    """File ``name`` of the repository ``ref``, parsed as ``fmt``, its size checked before reading."""
    from mixzoo.core.reading import CARD_BYTES, parse_text, read_text

    return parse_text(read_text(path, limit=CARD_BYTES, what=f"{ref}: {name}"), fmt, f"{ref}: {name}")


def resolve_card(ref: str) -> Path:
    """The local card file of ``hf-hub:ORG/NAME[@REVISION]``, with its weight files (the card's ``[weights]``), its
    arrays sidecar (``[arrays]``) and any bundled base-model weights (:data:`BASE_MODELS_FILE`) beside it in the
    same cache snapshot."""
    repo, revision = parse_hub_id(ref)
    card = hub_file(repo, CARD_FILE, revision)
    data = _read(ref, card, CARD_FILE, "toml")
    if not isinstance(data, dict):
        raise InputError(f"{ref}: {CARD_FILE} is not a mix card; push the card again")
    weights = data.get("weights") or {}
    for name in weights if isinstance(weights, dict) else ():
        hub_file(repo, plain_name(name, f"{ref}: {CARD_FILE} field 'weights' entry"), revision)
    arrays = data.get("arrays")
    if isinstance(arrays, dict) and isinstance(arrays.get("file"), str):  # the card's large arrays (sidecar)
        hub_file(repo, plain_name(arrays["file"], f"{ref}: {CARD_FILE} field 'arrays.file'"), revision)
    for role, ref_entry in base_models(ref).items():
        if ref_entry.get("file"):
            hub_file(repo, plain_name(ref_entry["file"], f"{ref}: {BASE_MODELS_FILE} field '{role}.file'"),
                     revision)
    return card


def base_models(ref: str) -> dict[str, dict[str, Any]]:
    """The base-model references of a pushed repository: ``{"abc": {...}, "rbc": {...}}`` with each model's name,
    the weight hash the card records, the registry's weight-file sha256 and, when bundled, the file and its sha256."""
    from mixzoo.core.schema import BaseModelsFile, validate

    repo, revision = parse_hub_id(ref)
    data = _read(ref, hub_file(repo, BASE_MODELS_FILE, revision), BASE_MODELS_FILE, "json")
    if not isinstance(data, dict) or not all(isinstance(data.get(r), dict) for r in ("abc", "rbc")):
        raise InputError(f"{ref}: {BASE_MODELS_FILE} must hold the tables abc and rbc; push the card again")
    validate(BaseModelsFile, data, f"{ref}: {BASE_MODELS_FILE}", "push the card again")
    return {r: data[r] for r in ("abc", "rbc")}

