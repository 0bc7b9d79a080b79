"""Tests of the typed registries: lazy entries, loading, collisions, lookups, env ids."""

from __future__ import annotations

import collections
from collections.abc import Callable

import pytest

import ssilbench.registry as registry_module
from ssilbench.errors import PluginError, UnknownNameError, UsageError
from ssilbench.registry import BoundRegistry, BrokenPlugin, Origin, Registry, split_env_id

ACME = Origin("acme", "acme-ssil", "1.2.3")
OTHER = Origin("other", "other-dist", "0.9")


def raised(error: type[Exception], call: Callable[[], object]) -> str:
    """The message of the ``error`` that ``call()`` raises."""
    with pytest.raises(error) as info:
        call()
    return str(info.value)


def make_registry(*names: str, base: type = dict) -> Registry:
    """A registry of ``base`` with the given names, all pointing at a valid dict subclass."""
    reg = Registry("method", base)
    for name in names:
        reg.add(name, "collections:OrderedDict", f"{name} method", ACME)
    return reg


def test_adding_an_entry_does_not_import_it():
    reg = Registry("method", dict)
    reg.add("ghost", "acme_ssil_does_not_exist.methods:Ghost", "lazy", ACME)
    assert "ghost" in reg
    assert reg.names() == ["ghost"]
    entry = reg.entry("ghost")
    assert entry.target == "acme_ssil_does_not_exist.methods:Ghost"
    assert entry.origin == ACME


def test_load_of_a_missing_module_names_the_plugin_and_distribution():
    reg = Registry("method", dict)
    reg.add("ghost", "acme_ssil_does_not_exist.methods:Ghost", "lazy", ACME)
    message = raised(PluginError, lambda: reg.load("ghost"))
    assert "plugin 'acme'" in message
    assert "acme-ssil" in message and "1.2.3" in message
    assert "ghost" in message
    assert "ModuleNotFoundError" in message


def test_load_of_a_missing_attribute_is_a_plugin_error():
    reg = Registry("method", dict)
    reg.add("nothing", "collections:NoSuchThing", "", ACME)
    with pytest.raises(PluginError, match="AttributeError"):
        reg.load("nothing")


def test_load_returns_the_class_and_create_an_instance():
    reg = make_registry("od")
    assert reg.load("od") is collections.OrderedDict
    assert isinstance(reg.create("od"), collections.OrderedDict)


def test_load_follows_dotted_attributes():
    reg = Registry("method", Exception)
    reg.add("decode_error", "json:decoder.JSONDecodeError", "", ACME)
    import json

    assert reg.load("decode_error") is json.decoder.JSONDecodeError


def test_load_is_cached(monkeypatch):
    reg = make_registry("od")
    calls = []
    real_import = registry_module.importlib.import_module

    def counting_import(name, *args, **kwargs):
        calls.append(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(registry_module.importlib, "import_module", counting_import)
    first = reg.load("od")
    second = reg.load("od")
    assert first is second
    assert calls == ["collections"]


@pytest.mark.parametrize(
    "target",
    [
        "collections:deque",  # a class, but not a subclass of dict
        "os.path:join",  # a function, not a class
        "math:pi",  # a float
    ],
)
def test_load_checks_the_base_class(target):
    reg = Registry("method", dict)
    reg.add("wrong", target, "", ACME)
    message = raised(PluginError, lambda: reg.load("wrong"))
    assert "not a subclass of dict" in message
    assert "plugin 'acme'" in message
    assert "wrong" not in reg._loaded


def test_collision_between_two_plugins_names_both():
    reg = Registry("method", dict)
    reg.add("bc", "collections:OrderedDict", "first", ACME)
    message = raised(PluginError, lambda: reg.add("bc", "collections:defaultdict", "second", OTHER))
    assert "'bc'" in message
    assert "plugin 'acme'" in message and "plugin 'other'" in message
    assert "no:" in message  # tells the user how to block one
    # the first registration is kept
    assert reg.entry("bc").origin == ACME
    assert reg.entry("bc").target == "collections:OrderedDict"


@pytest.mark.parametrize("name", ["", "has space", "a.b", "a:b", "x/y", "tab\t", "semi;colon"])
def test_malformed_names_are_rejected(name):
    reg = Registry("method", dict)
    with pytest.raises(PluginError, match="names are letters, digits"):
        reg.add(name, "collections:OrderedDict", "", ACME)
    assert reg.names() == []


@pytest.mark.parametrize("name", ["bc", "vm_idm", "cnn-5", "A1", "x"])
def test_well_formed_names_are_accepted(name):
    reg = Registry("method", dict)
    reg.add(name, "collections:OrderedDict", "", ACME)
    assert reg.names() == [name]


@pytest.mark.parametrize("target", ["collections.OrderedDict", "collections", ""])
def test_targets_without_a_colon_are_rejected(target):
    reg = Registry("method", dict)
    with pytest.raises(PluginError, match="package.module:attribute"):
        reg.add("thing", target, "", ACME)
    assert "thing" not in reg


@pytest.mark.parametrize("target", [":OrderedDict", "collections:", ":"])
def test_targets_with_an_empty_part_are_rejected(target):
    reg = Registry("method", dict)
    with pytest.raises(PluginError):
        reg.add("thing", target, "", ACME)


def test_unknown_name_suggests_the_closest_and_lists_all():
    reg = make_registry("bc", "idm_labeling", "vm_idm")
    message = raised(UnknownNameError, lambda: reg.entry("vm_idn"))
    assert "Unknown method 'vm_idn'" in message
    assert "Did you mean 'vm_idm'?" in message
    assert "Available: bc, idm_labeling, vm_idm." in message


def test_load_of_an_unknown_name_is_an_unknown_name_error():
    reg = make_registry("bc", "vm_idm")
    with pytest.raises(UnknownNameError, match="Did you mean 'vm_idm'"):
        reg.load("vm_idn")


def test_unknown_name_without_close_match_has_no_suggestion():
    reg = make_registry("bc", "vm_idm")
    message = raised(UnknownNameError, lambda: reg.entry("zzzzzzzz"))
    assert "Did you mean" not in message
    assert "Available: bc, vm_idm." in message


def test_unknown_name_in_an_empty_registry():
    reg = Registry("environment", dict)
    with pytest.raises(UnknownNameError, match=r"\(none registered\)"):
        reg.entry("maze")


def test_unknown_name_mentions_broken_plugins():
    reg = make_registry("maze")
    reg.broken = [BrokenPlugin(Origin("procgen", "ssilbench-procgen", "0.3"), "ImportError: gym3")]
    message = raised(UnknownNameError, lambda: reg.entry("coinrun"))
    assert "failed to load" in message
    assert "plugin 'procgen'" in message and "ssilbench-procgen" in message
    assert "ImportError: gym3" in message


def test_unknown_name_without_broken_plugins_does_not_mention_them():
    reg = make_registry("maze")
    message = raised(UnknownNameError, lambda: reg.entry("coinrun"))
    assert "failed to load" not in message


def test_bound_registry_records_its_origin():
    reg = Registry("architecture", dict)
    BoundRegistry(reg, OTHER).add("od", "collections:OrderedDict", "ordered")
    entry = reg.entry("od")
    assert entry.origin == OTHER
    assert entry.description == "ordered"


def test_origin_describe():
    assert ACME.describe() == "plugin 'acme' (distribution acme-ssil 1.2.3)"
    assert Origin("local_mod").describe() == "plugin 'local_mod'"


@pytest.mark.parametrize(
    ("env_id", "expected"),
    [
        ("maze:10x10", ("maze", "10x10")),
        ("maze", ("maze", "all")),
        ("maze:all", ("maze", "all")),
        ("  maze:20x20 ", ("maze", "20x20")),
        ("procgen:coinrun", ("procgen", "coinrun")),
    ],
)
def test_split_env_id(env_id, expected):
    assert split_env_id(env_id) == expected


@pytest.mark.parametrize("env_id", ["maze:", ":x", ":", "", "   "])
def test_split_env_id_rejects_malformed_ids(env_id):
    with pytest.raises(UsageError, match="Malformed environment id"):
        split_env_id(env_id)
