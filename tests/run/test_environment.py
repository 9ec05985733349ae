"""A record's ``environment`` names the CPU and its bf16 instructions (bf16 autocast rounds differently with them)."""

import builtins

import torch

from harness import about


def test_environment_names_the_cpu_and_its_bf16_instructions():
    about._STATIC_ENV.clear()
    env = about.environment()
    assert env["cpu"] is None or (isinstance(env["cpu"], str) and env["cpu"])  # None where nothing names it (no procfs)
    assert env["cpu_amx"] == bool(torch.cpu._is_amx_tile_supported())
    assert env["cpu_avx512_bf16"] == bool(torch.cpu._is_avx512_bf16_supported())
    assert env["cpu_capability"] == torch.backends.cpu.get_cpu_capability()


def test_cpu_model_falls_back_when_cpuinfo_is_unreadable(monkeypatch):
    real_open = builtins.open

    def no_cpuinfo(path, *a, **kw):
        if str(path) == "/proc/cpuinfo":
            raise OSError("no procfs")
        return real_open(path, *a, **kw)

    monkeypatch.setattr(builtins, "open", no_cpuinfo)
    monkeypatch.setattr(about.platform, "processor", lambda: "x86_64")
    assert about._cpu_facts()["cpu"] == "x86_64"
    monkeypatch.setattr(about.platform, "processor", lambda: "")
    assert about._cpu_facts()["cpu"] is None
