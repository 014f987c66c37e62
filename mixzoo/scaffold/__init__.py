"""Plugin packages from a template: :func:`new_plugin` (``mixzoo new-plugin NAME``) writes a package whose tests
pass and which installs and runs at once; its files are what the "Writing a plugin" tutorial shows."""

from __future__ import annotations

from mixzoo.scaffold.package import KINDS, new_plugin, render

__all__ = ["KINDS", "new_plugin", "render"]
