"""engines.device_memory: Metal's recommended working set wires the model's memory and bounds the caches'
defaults; devices that report none (the CPU here, CUDA) leave both to the host's figures."""

from __future__ import annotations

import mlx.core as mx

import engines.device_memory as device_memory


def test_the_cpu_reports_no_working_set_and_nothing_is_wired():
    assert "max_recommended_working_set_size" not in mx.device_info()
    assert device_memory.wire_recommended() is None and device_memory.free_bytes() is None


def test_on_metal_the_working_set_is_wired_and_bounds_the_room_for_caches(monkeypatch):
    wired: list[int] = []
    monkeypatch.setattr(mx, "device_info", lambda: {"max_recommended_working_set_size": 100 * 2**30,
                                                    "memory_size": 128 * 2**30})
    monkeypatch.setattr(mx, "set_wired_limit", lambda limit: wired.append(limit) or 0)
    monkeypatch.setattr(mx, "get_active_memory", lambda: 30 * 2**30)   # the weights
    assert device_memory.wire_recommended() == 100 * 2**30 and wired == [100 * 2**30]
    assert device_memory.free_bytes() == 70 * 2**30
