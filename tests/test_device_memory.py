"""engines.device_memory: Metal's recommended working set wires the model's memory and bounds the caches'
defaults; a CUDA device's free memory bounds them there; the CPU leaves both to the host's figures."""

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


def test_on_cuda_the_devices_free_memory_bounds_the_room_for_caches(monkeypatch):
    """MLX's CUDA backend reports the device's free memory (not the host's RAM, which a GPU's caches never
    use); nothing is wired there."""
    wired: list[int] = []
    monkeypatch.setattr(mx, "device_info", lambda: {"device_name": "NVIDIA H200", "total_memory": 141 * 2**30,
                                                    "free_memory": 120 * 2**30})
    monkeypatch.setattr(mx, "set_wired_limit", lambda limit: wired.append(limit) or 0)
    assert device_memory.wire_recommended() is None and wired == []
    assert device_memory.free_bytes() == 120 * 2**30
