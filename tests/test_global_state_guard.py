"""tests/conftest.py's guard: a test that flips a JAX option or a JAX environment variable is found and
named (one that once enabled float64 process-wide changed a later test's result on its CI worker)."""

import os

import jax

from tests.conftest import _changed, _global_state


def test_a_flipped_jax_option_is_reported():
    before = _global_state()
    jax.config.update("jax_enable_x64", not before["jax_enable_x64"])
    try:
        changed = _changed(before, _global_state())
    finally:
        jax.config.update("jax_enable_x64", before["jax_enable_x64"])
    assert changed == {"jax_enable_x64": (before["jax_enable_x64"], not before["jax_enable_x64"])}
    assert _changed(before, _global_state()) == {}


def test_a_scoped_option_is_not_a_leak():
    before = _global_state()
    with jax.enable_x64(True):
        jax.numpy.zeros(1)
    assert _changed(before, _global_state()) == {}


def test_a_set_environment_variable_is_reported(monkeypatch):
    before = _global_state()
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
    assert _changed(before, _global_state()) == {
        "$XLA_FLAGS": (before["$XLA_FLAGS"], "--xla_force_host_platform_device_count=2")}
    monkeypatch.undo()
    assert os.environ.get("XLA_FLAGS") == before["$XLA_FLAGS"]
