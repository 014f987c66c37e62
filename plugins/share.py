"""Mix cards on the Hugging Face Hub (hook ``mixzoo_resolve_card``): ``hf-hub:ORG/NAME[@REVISION]`` wherever a card
is taken (``mixzoo.load_mixed``, ``mixzoo bench``, ``mixzoo certify``), read from the local Hugging Face cache
(:func:`mixzoo.share.hub.resolve_card`)."""

from __future__ import annotations

from mixzoo.core.plugins import hookimpl


@hookimpl
def mixzoo_resolve_card(name: str) -> str | None:
    from mixzoo.share.hub import HUB_PREFIX, resolve_card

    return str(resolve_card(name)) if name.startswith(HUB_PREFIX) else None
