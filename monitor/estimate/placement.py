"""Which device holds each layer's weights (and so its KV): -ngl, -ts, -sm, -ot, -cmoe.

llama.cpp (estimation.md section 1g): the last N "layers" go to the GPUs, counting the output
layer as one (``i_gpu_start = n_layer + 1 - N``, src/llama-model.cpp 1365); token_embd always
stays on the CPU; repeating layers are split over GPUs by ``-ts`` fractions (default: in
proportion to each GPU's free memory, else equally); ``-sm none`` keeps everything on the
main GPU; ``-ot regex=CPU`` / ``-cmoe`` / ``-ncmoe N`` move matching tensors (MoE experts)
to the CPU while the layer's KV stays on its GPU.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from monitor.estimate.model import HOST, DeviceInfo
from monitor.estimate.shape import ModelShape

_EXPERTS = r"\.ffn_(up|down|gate|gate_up)_exps"


@dataclass(frozen=True, slots=True)
class Placement:
    layer_device: tuple[str, ...]  # per layer: device id or "host"
    output_device: str
    weights: dict[str, int]  # device -> weight bytes
    moved_to_host: int  # bytes moved off GPUs by -ot / -cmoe / -ncmoe
    n_gpu_layers: int  # effective, counting the output layer
    host_tensors: frozenset[str] = frozenset()  # names of the weights kept in host memory


def gpu_layer_count(ngl: int | str | None, n_layer: int) -> int:
    """-ngl N|auto|all; default and negative mean all layers + output."""
    if ngl is None or ngl in ("all", "auto") or (isinstance(ngl, int) and ngl < 0):
        return n_layer + 1
    try:
        return min(int(ngl), n_layer + 1)
    except (TypeError, ValueError):
        return n_layer + 1


def _split(
    count: int, devices: Sequence[DeviceInfo], fractions: Sequence[float] | None
) -> list[str]:
    """Assign ``count`` consecutive layers to devices by cumulative fractions."""
    if not devices or count <= 0:
        return []
    if fractions and len(fractions) >= len(devices) and sum(fractions[: len(devices)]) > 0:
        weights = list(fractions[: len(devices)])
    elif all(d.free_bytes for d in devices):
        weights = [float(d.free_bytes or 0) for d in devices]
    else:
        weights = [1.0] * len(devices)
    total = sum(weights)
    bounds, acc = [], 0.0
    for w in weights:
        acc += w / total
        bounds.append(acc)
    out = []
    for i in range(count):  # std::upper_bound(splits, float(il - i_gpu_start) / act_gpu_layers)
        position = i / count
        index = next((k for k, b in enumerate(bounds) if position < b), len(devices) - 1)
        out.append(devices[index].device_id)
    return out


def _override_patterns(
    override: Sequence[str], cpu_moe: bool, n_cpu_moe: int | None
) -> list[re.Pattern[str]]:
    patterns = []
    for item in override:
        regex, _, buft = item.rpartition("=")
        if regex and buft.strip().upper().startswith("CPU"):
            try:
                patterns.append(re.compile(regex))
            except re.error:
                continue
    if cpu_moe:
        patterns.append(re.compile(_EXPERTS))
    if n_cpu_moe:
        patterns.append(re.compile(rf"^blk\.({'|'.join(map(str, range(n_cpu_moe)))})" + _EXPERTS))
    return patterns


def place(
    shape: ModelShape,
    devices: Sequence[DeviceInfo],
    n_gpu_layers: int | str | None,
    tensor_split: Sequence[float] | None = None,
    split_mode: str | None = None,
    main_gpu: int | None = None,
    override: Sequence[str] = (),
    cpu_moe: bool = False,
    n_cpu_moe: int | None = None,
) -> Placement:
    n_layer = shape.n_layer
    gpus = list(devices)
    if split_mode == "none" and gpus:
        gpus = [gpus[min(main_gpu or 0, len(gpus) - 1)]]
    ngl = gpu_layer_count(n_gpu_layers, n_layer) if gpus else 0
    start = n_layer + 1 - ngl
    assigned = _split(n_layer + 1 - start, gpus, tensor_split)  # layers start..n_layer
    layer_device = [HOST] * n_layer
    for offset, dev in enumerate(assigned):
        il = start + offset
        if il < n_layer:
            layer_device[il] = dev
    output_device = assigned[-1] if assigned and ngl >= 1 else HOST
    weights: dict[str, int] = {HOST: shape.token_embd_bytes + shape.other_bytes}
    weights[output_device] = weights.get(output_device, 0) + shape.output_bytes
    if shape.tied_output and output_device != HOST:
        # the LM head is token_embd loaded again (TENSOR_DUPLICATED) onto the output's
        # device: a second copy there (H100 recordings: Qwen3-0.6B +157.65 MiB on CUDA0)
        weights[output_device] += shape.token_embd_bytes
    patterns = _override_patterns(override, cpu_moe, n_cpu_moe)
    moved = 0
    host = {
        t.name
        for t in shape.weight_tensors
        if not t.name.startswith("blk.")
        and (output_device == HOST or not t.name.startswith("output"))
    }
    for il in range(n_layer):
        dev = layer_device[il]
        if dev == HOST or not patterns:
            weights[dev] = weights.get(dev, 0) + shape.layer_bytes[il]
            if dev == HOST:
                host.update(name for name, _ in shape.layer_tensors.get(il, ()))
            continue
        for name, size in shape.layer_tensors.get(il, ()):
            target = HOST if any(p.search(name) for p in patterns) else dev
            moved += size if target == HOST else 0
            weights[target] = weights.get(target, 0) + size
            if target == HOST:
                host.add(name)
    return Placement(tuple(layer_device), output_device, weights, moved, ngl, frozenset(host))
