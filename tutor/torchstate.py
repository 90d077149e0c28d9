"""torch's process-wide settings, kept and put back around code that runs in this process.

Checks run in a forked child wherever they can, and a child's changes die with it. Where there
is no fork (Windows, or a CUDA/MPS device, which cannot be used in a child forked after it was
initialised), learner code runs in the worker itself, and this puts back every global setting it
could have reached, so the next check starts from the tutor's state.
"""

from __future__ import annotations

import contextlib
import copy
import gc
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch


def _autocast_devices() -> list[str]:
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@dataclass
class TorchState:
    values: dict[str, Any]

    @classmethod
    def capture(cls) -> TorchState:
        v: dict[str, Any] = {
            "default_dtype": torch.get_default_dtype(),
            "rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
            "deterministic": torch.are_deterministic_algorithms_enabled(),
            "deterministic_warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
            "matmul_precision": torch.get_float32_matmul_precision(),
            "anomaly": torch.is_anomaly_enabled(),
            "anomaly_nan": torch.is_anomaly_check_nan_enabled(),
            "print_options": copy.copy(vars(torch._tensor_str.PRINT_OPTS)),
            "threads": torch.get_num_threads(),
            "grad": torch.is_grad_enabled(),
            "default_device": torch.get_default_device(),
            "warn_always": torch.is_warn_always_enabled(),
            "autocast_cache": torch.is_autocast_cache_enabled(),
            "autocast": {d: (torch.is_autocast_enabled(d), torch.get_autocast_dtype(d))
                         for d in _autocast_devices()},
        }
        return cls(v)

    def restore(self) -> None:
        v = self.values
        torch.set_default_dtype(v["default_dtype"])
        if torch.get_default_device() != v["default_device"]:
            # Setting "cpu" explicitly would install a device mode that slows every operation.
            cpu = v["default_device"].type == "cpu"
            torch.set_default_device(None if cpu else v["default_device"])
        torch.set_rng_state(v["rng"])
        if v["cuda_rng"] is not None:
            torch.cuda.set_rng_state_all(v["cuda_rng"])
        torch.use_deterministic_algorithms(v["deterministic"],
                                           warn_only=v["deterministic_warn_only"])
        torch.set_float32_matmul_precision(v["matmul_precision"])
        torch.set_anomaly_enabled(v["anomaly"], v["anomaly_nan"])
        vars(torch._tensor_str.PRINT_OPTS).update(v["print_options"])
        torch.set_flush_denormal(False)  # no getter exists; the tutor never turns it on
        if torch.get_num_threads() != v["threads"]:
            torch.set_num_threads(v["threads"])
        torch.set_grad_enabled(v["grad"])
        torch.set_warn_always(v["warn_always"])
        torch.set_autocast_cache_enabled(v["autocast_cache"])
        for device, (enabled, dtype) in v["autocast"].items():
            torch.set_autocast_enabled(device, enabled)
            torch.set_autocast_dtype(device, dtype)

    @classmethod
    @contextlib.contextmanager
    def kept(cls) -> Iterator[None]:
        state = cls.capture()
        try:
            yield
        finally:
            # A generator the code left suspended inside `with torch.no_grad():` leaves that
            # mode on until it is closed: collecting the young garbage (the check's namespace)
            # closes it first, and then the settings are put back. A full collection would
            # cost more than the check.
            gc.collect(1)
            state.restore()
