"""One display name per device for every view (status, the TUI, events, diagnose):
``GPU0 RTX 4090`` for a GPU, ``host RAM`` for the host. The index is the GPU's place
among the box's GPUs sorted by device id (the order the TUI's panels and ``status`` list
them); the model is the driver's name (NVML, amdsmi, the DRM ``product_name``) without the
vendor's prefixes. The long id (``nvml:GPU-3f2c…``) stays in the JSON documents and
behind the TUI's ``i`` key. Stdlib only."""

from __future__ import annotations

from collections.abc import Iterable

from monitor.textsafe import terminal_safe

VENDOR_PREFIXES = ("NVIDIA GeForce ", "NVIDIA ", "AMD Radeon ", "AMD ", "Radeon ", "Intel(R) ")


def short_device_name(device_id: str, name: str | None, gpu_index: int | None) -> str:
    """``GPU0 RTX 4090`` for a GPU (the index in the order shown, the name without the
    vendor's prefixes), ``host RAM`` for the host; the long id only on demand."""
    if device_id == "host":
        return "host RAM"
    model = name or ""
    for prefix in VENDOR_PREFIXES:
        if model.startswith(prefix):
            model = model[len(prefix) :]
            break
    label = f"GPU{gpu_index}" if gpu_index is not None else "GPU"
    return f"{label} {terminal_safe(model)}".rstrip()


def display_order(device_ids: Iterable[str]) -> list[str]:
    """GPUs by id, host RAM last: the order every view lists devices in."""
    return sorted(set(device_ids), key=lambda d: (d == "host", d))


def device_labels(devices: Iterable[tuple[str, str | None]]) -> dict[str, str]:
    """``{device_id: "GPU0 RTX 4090", "host": "host RAM"}`` for ``(device_id, name)``
    pairs; the GPU index is the place in :func:`display_order`."""
    names = dict(devices)
    out, index = {}, 0
    for device_id in display_order(names):
        gpu = None if device_id == "host" else index
        index += device_id != "host"
        out[device_id] = short_device_name(device_id, names[device_id], gpu)
    return out


def device_tag(label: str) -> str:
    """The label's first word (``GPU0``, ``host``): where a column has room for no model."""
    return label.split(" ", 1)[0]


def relabel(text: str, labels: dict[str, str]) -> str:
    """``text`` with every long device id in it (``nvml:GPU-3f2c…``, ``drm:0000:03:00.0``)
    replaced by its label: an event recorded as ``... on nvml:GPU-3f2c...`` reads
    ``... on GPU0 RTX 4060``. ``host`` stays as written (it is also a word)."""
    for device_id in sorted(labels, key=len, reverse=True):
        if device_id != "host" and device_id in text:
            text = text.replace(device_id, labels[device_id])
    return text
