"""The plugin and naming machinery (hooks, plugin manager, registry) and the records every layer shares (errors,
cache, mix card, machine record, progress bars, figure files)."""

__version__ = "0.1.0"
