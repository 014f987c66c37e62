"""Errors users see. Every message is one line that names the cause and, where there is one, the fix."""

from __future__ import annotations

import difflib
import os
import sys
from collections.abc import Callable, Iterable


class MixzooError(Exception):
    """Base class of every error mixzoo raises on purpose; the CLI prints it as one line and exits 2."""


class UnknownNameError(MixzooError, KeyError):
    """A model, dataset, clamp, attack or optimizer name that nothing provides."""

    def __init__(self, kind: str, name: str, known: Iterable[str], failed: Iterable[str] = ()):
        known = sorted(set(known))
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
        if not close:
            close = [k for k in known if name.lower() in k.lower() or k.lower() in name.lower()][:3]
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        listing = " (see `mixzoo list`)" if kind == "model" else f" (known: {', '.join(known[:12])})"
        failed = sorted(set(failed))
        if failed:  # the name may be one a broken plugin would have provided
            listing += f" (plugins that failed to load: {', '.join(failed)}; see `mixzoo plugins`)"
        super().__init__(f"unknown {kind} {name!r}{hint}{listing}")
        self.name, self.kind, self.suggestions = name, kind, close

    def __str__(self) -> str:  # KeyError would quote the message
        return self.args[0]


class InputError(MixzooError, ValueError):
    """Bad tensors or settings handed to a public function (shapes, ranges, NaN, empty sets)."""


class NaNLogitsError(InputError):
    """A model returned NaN logits during an evaluation (never counted as robust); names the model when known."""

    def __init__(self, count: int, where: str, model: str | None = None):
        who = f"model {model!r}" if model else "model"
        super().__init__(f"{who} returned NaN logits for {count} examples {where}; fix the model's numerics, NaN"
                         " outputs cannot be counted as robust")
        self.count, self.where, self.model = count, where, model


class RegistryError(MixzooError, ValueError):
    """A registry entry that is malformed; the message names the entry and the field."""


class PluginError(MixzooError):
    """A plugin that misbehaves (name collisions, hooks returning the wrong type)."""


class PluginWarning(UserWarning):
    """A plugin entry left out for a reason that does not stop the command (a name a built-in plugin provides)."""


class MissingFileError(MixzooError, FileNotFoundError):
    """A file that is needed offline and is not where it should be; the message says where to put it."""


class FileProblemError(InputError):
    """A file the user has (a card's weights, a report, a file in the Hugging Face or mixzoo cache) that is damaged,
    truncated, outside its folder or not what its name says: the user's file problem, never a plugin's fault. The
    message names the file and the command that fetches or writes it again (:func:`damaged_file`)."""


def damaged_file(path: str | os.PathLike[str], detail: str, fix: str | None = None) -> FileProblemError:
    """The one-line :class:`FileProblemError` for ``path``: ``detail`` says what is wrong; ``fix`` defaults to the
    command that fetches the file again: for a file in a Hugging Face cache snapshot (``models--ORG--NAME``),
    ``huggingface-cli download ORG/NAME --force-download``, else deleting it and running the command that wrote it."""
    detail = " ".join(str(detail).split())[:200] or "unreadable"
    if fix is None:
        repo = next((part[len("models--"):].replace("--", "/", 1) for part in reversed(os.fspath(path).split(os.sep))
                     if part.startswith("models--")), None)
        fix = (f"fetch it again with `huggingface-cli download {repo} --force-download`" if repo else
               "delete it and run the command that wrote or fetched it again")
    return FileProblemError(f"{os.fspath(path)}: {detail}; {fix}")


def run_script(main: Callable[[], object]) -> None:
    """Run a benchmark script's ``main``: mixzoo's own errors end it with their one line on stderr and exit
    status 2, as the CLI does; a reader that has gone (``script | head``) ends it quietly with status 1."""
    try:
        main()
    except MixzooError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except BrokenPipeError:  # Python docs' recipe: silence the flush at exit too
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(1) from None
