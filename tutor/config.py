"""Settings shared by the CLI, the TUI and the evaluator: device, seed, home folder, time limit.

Resolution order for each setting: command-line flag, then environment, then `config.toml` in the
platform config folder, then the default. Nothing here imports torch.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import platformdirs

from tutor.pack.model import DEFAULT_PACK
from tutor.source import SourceError, decode
from tutor.values.records import FrozenRecord

APP_NAME = "backprop-tutor"
DEVICES = ("auto", "cpu", "cuda", "mps")
# How learner code is kept apart from the evaluator (see docs/architecture.md): a child forked
# from it, a freshly started interpreter, or whichever of the two serves the device.
ISOLATIONS = ("auto", "fork", "spawn")
# Set to 1, the accelerator is simulated on the CPU with CUDA's rules about devices (see
# tutor/devices.py): how a CPU-only machine finds what would go wrong on a GPU.
SIMULATED_DEVICE = "BACKPROP_TUTOR_SIMULATED_DEVICE"
DEFAULT_SEED = 2147483647  # the generator seed of the lecture
DEFAULT_TIMEOUT = 5.0  # the learner's limit: CPU seconds of their code in one check
# The tutor's own work in a check, after the run that decides the verdict (the fresh batch or
# sizes, the rule probe, the picture through time, the search for the smallest change), has a
# wall-clock budget of its own: when it runs out, the verdict stands without that work.
DEFAULT_TUTOR_SECONDS = 5.0
# The learner's limit counts CPU time, which a busy machine stretches on the wall clock: a check's
# child is killed from outside only past this many times that limit, plus the tutor's budget (the
# first run may take three times its limit on the wall clock; the tutor's work after it, its own
# budget and what is left of the limit). Inside, the CPU alarm and the system's CPU limit stop
# the learner's code at the limit itself; this is for what neither stops.
BACKSTOP_FACTOR = 4
# The checks run in milliseconds: under 0.1 s even a right answer could be cut off, and more
# than ten minutes only delays telling a learner that a loop never ends.
TIMEOUT_RANGE = (0.1, 600.0)
SEED_MAX = 2**63 - 1  # torch seeds are 64-bit; the lesson also seeds with seed + 1 and seed + 10


class ConfigError(ValueError):
    """A setting has a value that cannot be used; the message says which and why."""


@dataclass(repr=False, eq=False)
class Settings(FrozenRecord):
    device: str = "auto"
    seed: int = DEFAULT_SEED
    home: Path | None = None  # None: the platform data folder
    timeout: float = DEFAULT_TIMEOUT
    memory_limit_gb: float = 2.0  # address-space cap for the sandbox worker on CPU
    pack: str = DEFAULT_PACK  # an installed pack's id, or the folder of a pack
    isolation: str = "auto"  # one of ISOLATIONS
    tutor_seconds: float = DEFAULT_TUTOR_SECONDS  # the tutor's own budget in a check (wall)

    @property
    def data_home(self) -> Path:
        return self.home if self.home is not None else Path(platformdirs.user_data_dir(APP_NAME))

    @property
    def backstop(self) -> float:
        """Wall-clock seconds a check's child may run before it is killed from outside, whatever
        it does (docs/architecture.md, the check's time budget)."""
        return BACKSTOP_FACTOR * self.timeout + self.tutor_seconds

    @property
    def child_cpu_seconds(self) -> float:
        """The CPU time a check's child may use in all: the learner's limit, the tutor's own
        work (one thread, so at most its wall-clock budget) and a second to spare."""
        return self.timeout + self.tutor_seconds + 1

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


def _choice(choices: tuple[str, ...]):
    """A reader for a setting that is one of `choices`, `auto` when it is not set."""

    def read(value: object, source: str) -> str:
        if value is None:
            return "auto"
        if value not in choices:
            raise ConfigError(f"{source} must be one of {', '.join(choices)}, not {value!r}")
        return str(value)

    return read


_device = _choice(DEVICES)
_isolation = _choice(ISOLATIONS)


def config_file() -> Path:
    return Path(platformdirs.user_config_dir(APP_NAME)) / "config.toml"


def _read_config(path: Path) -> dict:
    if not path.is_file():
        return {}
    if sys.version_info >= (3, 11):  # imported only when there is a file: most launches have none
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    try:
        return tomllib.loads(decode(path.read_bytes(), "the file"))
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except (SourceError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc


def _pick(
    flag: object, flag_name: str, env: str | None, key: str, cfg: dict, path: Path
) -> tuple[object, str]:
    """The first given value of a setting and where it came from, for error messages.

    An empty environment variable counts as unset, as shells export them; an empty flag or
    config value is a mistake and is reported.
    """
    if flag is not None:
        return flag, flag_name
    if env and os.environ.get(env):
        return os.environ[env], env
    if key in cfg:
        return cfg[key], f"{key} in {path}"
    return None, key


def _whole_number(value: object) -> int | None:
    # bool is an int in Python, but `seed = true` is surely a mistake; so is `seed = 1.5`.
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return None
    return None


def _seed(value: object, source: str) -> int:
    if value is None:
        return DEFAULT_SEED
    seed = _whole_number(value)
    if seed is None or not 0 <= seed <= SEED_MAX:
        raise ConfigError(f"{source} must be a whole number from 0 to {SEED_MAX}, not {value!r}")
    return seed


def _timeout(value: object, source: str) -> float:
    if value is None:
        return DEFAULT_TIMEOUT
    low, high = TIMEOUT_RANGE
    try:
        seconds = math.nan if isinstance(value, bool) else float(value)
    except (TypeError, ValueError, OverflowError):
        seconds = math.nan
    if not low <= seconds <= high:  # also refuses nan, inf and -inf
        raise ConfigError(f"{source} must be a finite number of seconds between {low:g} and "
                          f"{high:g}, not {value!r}")
    return seconds


def _home(value: object, source: str) -> Path | None:
    if value is None:
        return None
    if not isinstance(value, (str, Path)) or not str(value).strip() or "\0" in str(value):
        raise ConfigError(f"{source} must be the path of a folder, not {value!r}")
    try:
        path = Path(value).expanduser()
    except RuntimeError:  # `~name` for a user this system does not know, or `~` without HOME
        head = str(value).split("/", 1)[0]
        why = f"this system has no user {head[1:]!r}" if head != "~" else "HOME is not set"
        raise ConfigError(f"{source} {str(value)!r} starts with {head}, but {why}") from None
    if path.exists() and not path.is_dir():
        # Every command would fail on it later, each its own way: say so once, before any.
        raise ConfigError(f"{source} {str(value)!r} is a file, not a folder; give a folder "
                          "for your progress (it is made if it does not exist)")
    return path


def resolve(
    device: str | None = None,
    seed: int | str | None = None,
    home: str | Path | None = None,
    timeout: float | str | None = None,
    config_path: Path | None = None,
    pack: str | None = None,
) -> Settings:
    """Combine flags, environment and config file into Settings (flags win).

    Flags may be given as the strings typed: every value, wherever it came from, is checked
    here, so a wrong one gets one message naming where it was set.
    """
    path = config_path or config_file()
    cfg = _read_config(path)
    return Settings(
        device=_device(*_pick(device, "--device", "BACKPROP_TUTOR_DEVICE", "device", cfg, path)),
        seed=_seed(*_pick(seed, "--seed", None, "seed", cfg, path)),
        home=_home(*_pick(home, "--home", "BACKPROP_TUTOR_HOME", "home", cfg, path)),
        timeout=_timeout(*_pick(timeout, "--timeout", None, "timeout", cfg, path)),
        pack=_pack(*_pick(pack, "--pack", "BACKPROP_TUTOR_PACK", "pack", cfg, path)),
        isolation=_isolation(*_pick(None, "", "BACKPROP_TUTOR_ISOLATION", "isolation", cfg,
                                    path)),
    )




def _pack(value: object, source: str) -> str:
    from tutor.pack.model import PackError, find_pack

    if value is None:
        return DEFAULT_PACK
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{source} must name a pack, not {value!r}")
    try:
        root = find_pack(value)
    except PackError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    # An installed pack keeps its id; a folder is kept as an absolute path, so the evaluator
    # finds it whatever its working directory.
    return value if root.name == value and "/" not in value else str(root)


# Asked of a short-lived process, so that commands that never need torch (and the TUI, which
# keeps torch in its evaluator) do not load it. It prints 1 when the device is there, else 0.
_DEVICE_PROBE = """
import sys, torch
mps = getattr(torch.backends, "mps", None)
there = torch.cuda.is_available() if sys.argv[1] == "cuda" else bool(mps and mps.is_available())
print(int(there))
"""
_MISSING = {
    "cuda": "this PyTorch sees no CUDA device (no NVIDIA GPU, no driver, or a CPU-only build)",
    "mps": "this PyTorch sees no Apple GPU (MPS needs a Mac with Apple silicon or AMD graphics)",
}


def simulated(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the accelerator is the simulated one (`BACKPROP_TUTOR_SIMULATED_DEVICE=1`)."""
    return environ.get(SIMULATED_DEVICE, "").strip() not in ("", "0")


def unavailable_device(name: str) -> str | None:
    """Why the device `name` cannot be used here, or None. Only "cuda" and "mps" are asked
    about: "cpu" is always there and "auto" takes what there is."""
    if name not in _MISSING or (name == "cuda" and simulated()):
        return None
    try:
        probe = subprocess.run(
            [sys.executable, "-c", _DEVICE_PROBE, name], capture_output=True, text=True,
            timeout=300, env=dict(os.environ, PYTHONWARNINGS="ignore"),
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"could not find out whether it is there: {exc}"
    if probe.returncode == 0:  # the answer is the last line, whatever torch printed before it
        return None if probe.stdout.strip().endswith("1") else _MISSING[name]
    last = (probe.stderr.strip().splitlines() or ["no message"])[-1]
    return f"PyTorch could not be loaded to look for it: {last}"
