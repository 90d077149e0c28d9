"""Settings shared by the CLI, the TUI and the evaluator: device, seed, home folder, time limit.

Resolution order for each setting: command-line flag, then environment, then `config.toml` in the
platform config folder, then the default. Nothing here imports torch.
"""

from __future__ import annotations

import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import platformdirs

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

APP_NAME = "backprop-tutor"
DEVICES = ("auto", "cpu", "cuda", "mps")
DEFAULT_SEED = 2147483647  # the generator seed of the lecture
DEFAULT_TIMEOUT = 5.0


class ConfigError(ValueError):
    """A setting has a value that cannot be used; the message says which and why."""


@dataclass(frozen=True)
class Settings:
    device: str = "auto"
    seed: int = DEFAULT_SEED
    home: Path | None = None  # None: the platform data folder
    timeout: float = DEFAULT_TIMEOUT
    memory_limit_gb: float = 2.0  # address-space cap for the sandbox worker on CPU

    @property
    def data_home(self) -> Path:
        return self.home if self.home is not None else Path(platformdirs.user_data_dir(APP_NAME))

    def to_dict(self) -> dict:
        d = asdict(self)
        d["home"] = str(self.home) if self.home else None
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Settings:
        d = dict(d)
        if d.get("home"):
            d["home"] = Path(d["home"])
        return cls(**d)


def config_file() -> Path:
    return Path(platformdirs.user_config_dir(APP_NAME)) / "config.toml"


def _read_config(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc


def resolve(
    device: str | None = None,
    seed: int | None = None,
    home: str | Path | None = None,
    timeout: float | None = None,
    config_path: Path | None = None,
) -> Settings:
    """Combine flags, environment and config file into Settings (flags win)."""
    cfg = _read_config(config_path or config_file())
    env_home = os.environ.get("BACKPROP_TUTOR_HOME")
    home = home or env_home or cfg.get("home")
    settings = Settings(
        device=str(device or os.environ.get("BACKPROP_TUTOR_DEVICE") or cfg.get("device", "auto")),
        seed=int(seed if seed is not None else cfg.get("seed", DEFAULT_SEED)),
        home=Path(home).expanduser() if home else None,
        timeout=float(timeout if timeout is not None else cfg.get("timeout", DEFAULT_TIMEOUT)),
    )
    if settings.device not in DEVICES:
        raise ConfigError(
            f"unknown device '{settings.device}': choose one of {', '.join(DEVICES)}"
        )
    if settings.timeout <= 0:
        raise ConfigError("the time limit must be a positive number of seconds")
    return settings

