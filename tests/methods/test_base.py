"""The method base's load-time contract check: a method lacking a required member is one warning line at load."""

from __future__ import annotations

import warnings

import pytest

from mixzoo.core.errors import PluginWarning
from mixzoo.core.plugins import hookimpl, lookup, register_plugin, unregister_plugin
from mixzoo.methods import MixingMethod


class _HalfMethod(MixingMethod):
    name = "test-half-method"

    def validate(self, params, source):
        return params


class _Plugin:
    @hookimpl
    def mixzoo_mixing_methods(self):
        return {_HalfMethod.name: _HalfMethod()}


def test_a_method_without_build_and_fit_is_named_at_load_with_the_lines_to_add():
    name = register_plugin(_Plugin(), name="test-half-plugin")
    try:
        with pytest.warns(PluginWarning) as caught:
            lookup("method", _HalfMethod.name)
        text = str(caught[0].message)
        assert "\n" not in text and "'test-half-plugin'" in text and "_HalfMethod" in text
        assert "def build(self, abc, rbc, card, *, gradient='exact')" in text
        assert "def fit(self, request: FitRequest) -> FitResult" in text and "def validate" not in text
    finally:
        unregister_plugin(name)


class _WholeMethod(_HalfMethod):
    name = "test-whole-method"

    def build(self, abc, rbc, card, *, gradient="exact"):
        return rbc

    def fit(self, request):
        raise NotImplementedError


class _WholePlugin:
    @hookimpl
    def mixzoo_mixing_methods(self):
        return {_WholeMethod.name: _WholeMethod()}


def test_a_complete_method_loads_without_a_warning():
    name = register_plugin(_WholePlugin(), name="test-whole-plugin")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", PluginWarning)
            assert lookup("method", _WholeMethod.name).name == _WholeMethod.name
    finally:
        unregister_plugin(name)
