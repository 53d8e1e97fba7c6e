"""Where a cell ran: the machine facts behind its last bits. Another CPU kernel set, another make of CPU with the
same kernel set (an AMD EPYC and an Intel Xeon, both AVX-512) or a GPU rounds float32 differently, so the same cell
there differs by rounding (docs/results/headtohead.md, "The same cells on another CPU": 72 cells, mean 0.31 pp, at
most 2.8 pp; one SCAFFOLD cell of the protocol's board later 8.6 pp). Recorded in ``metrics.json`` and as MLflow
tags, never part of a run's identity (``fed.identity.NOT_NUMERIC``): recording another fact re-runs no training and
stales no cell."""

from __future__ import annotations

import platform
from typing import Any

NOT_RECORDED = "not recorded"  # cells that predate the record


def cpu_model() -> str:
    """The CPU's model name (Linux: /proc/cpuinfo; elsewhere what the platform says)."""
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or "unknown"


def machine(device: Any) -> dict[str, Any]:
    """This process's machine as a cell records it: CPU model, PyTorch's CPU kernel set (``AVX2``, ``AVX512``,
    ``DEFAULT``; ``ATEN_CPU_CAPABILITY`` forces a lower one), torch version, device and its GPU, threads."""
    import torch

    device = torch.device(device)
    return {
        "cpu": cpu_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch": str(torch.__version__),  # a plain str: checkpoints load with weights_only=True
        "device": str(device),
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "threads": torch.get_num_threads(),
    }


def kind(record: dict[str, Any]) -> str:
    """What decides a cell's rounding, from its ``metrics.json``: the GPU it ran on, else the CPU's kernel set and
    model (``cpu AVX512 (AMD EPYC)``: an Intel Xeon with the same kernel set rounds the same cell differently, two
    Xeons of one model name alike, docs/results/headtohead.md); ``not recorded`` for cells that predate the
    record. A run resumed on another kind of machine is both kinds (``cpu AVX2 (AMD EPYC) + cpu AVX512 (…)``)."""
    m = record.get("machine")
    if not m:
        return NOT_RECORDED
    kinds = [_kind(x) for x in [*m.get("earlier", []), m]]
    return " + ".join(dict.fromkeys(kinds))


def _kind(m: dict[str, Any]) -> str:
    if m.get("gpu"):
        return f"cuda {m['gpu']}"
    return f"cpu {m['cpu_capability']} ({m['cpu']})" if m.get("cpu") else f"cpu {m['cpu_capability']}"


def tags(record: dict[str, Any]) -> dict[str, str]:
    """The machine as MLflow tags (``machine.cpu``, ``machine.cpu_capability``, …, ``machine.kind``)."""
    m = record.get("machine")
    if not m:
        return {}
    return {f"machine.{k}": str(v) for k, v in m.items() if k != "earlier"} | {"machine.kind": kind(record)}


def mix_note(kinds: list[str]) -> str:
    """A caption's sentence on where a table's cells ran (``kinds``: one ``kind`` per cell); empty when every cell
    ran on one kind of machine. Cells of several kinds differ by float32 rounding as well as by seed."""
    counts: dict[str, int] = {}
    for k in kinds:
        counts[k] = counts.get(k, 0) + 1
    if len(counts) <= 1:
        only = next(iter(counts), None)
        return "Machine not recorded (the cells predate the record)." if only == NOT_RECORDED else ""
    parts = ", ".join(f"{n} on {k}" for k, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    return (
        f"Mixed machines: {parts} cells; another CPU kernel set, make of CPU or device rounds float32 differently "
        "(docs/results/headtohead.md, 'The same cells on another CPU')."
    )
