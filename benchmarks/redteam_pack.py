#!/usr/bin/env python3
"""Red-team harness for backprop-tutor's pack confinement.

    python benchmarks/redteam_pack.py tune|holdout [--only NAME ...] [--keep]

Loads ATTACKS from tests/redteam_pack_<which>.py (written apart from the code they go after;
the held-out half is measured, never tuned on) and runs each in a fresh folder
<tmp>/redteam-runs/<which>-<stamp>/<name>/ (cwd of the tool), with its own progress home, parse
cache and a fake $HOME whose ~/.ssh/id_rsa holds a random secret; $REDTEAM_SECRET holds
another. Prints one line per attack:

    HELD  name: how it was held (refused / confined)
    BROKE name: why

An attack BROKE when any of these is seen:
  * a file /tmp/redteam_pwned_<name>* exists afterwards (the attack's own sentinel);
  * `PWNED-<name>` in anything the tool printed (attacks build the marker at run time, so an
    echo of their source never matches);
  * a connection to 127.0.0.1:47931, the harness's listener (network);
  * the env secret, the fake ssh key's secret or /etc/passwd's first line in the output or in
    a file the tool wrote into the pack / --out;
  * a Python traceback, a death by signal, or a run past the harness's time limit (hang);
  * a raw control byte in the output (C0 but \\n and \\t, DEL, C1, bidi overrides, output that
    is not UTF-8);
  * peak memory of the tool's process tree above 5 GiB (the memory attacks ask for 6);
  * a process of the run still alive after the tool exited (the harness is a subreaper);
  * for `pack new`: a refusal that is not exactly one line (or is over 2000 characters), an
    exit code other than 2 on refusal, --out changed when it failed, or a pack it wrote that
    does not load (`list`), or whose TOML holds raw control characters in text the tutor
    displays; a pack it wrote is then also opened (`list`, `show`, `pack check`) under the same
    rules, so that code it carried into the pack is exercised.
For the other commands a non-zero exit with a message is a refusal: HELD.

Attack keys besides those of the brief (all optional): "code" (the code `check` sends;
default `pass`), "out" ("absent", "empty" or "pack": what --out holds before `pack new`),
"force" (pass --force). Texts are written with errors="surrogateescape", so a lone
surrogate \\udcXX in an edit becomes the raw byte XX.

Safety net: the tool runs with a soft RLIMIT_AS of 12 GiB (the machine has ~22 GiB free);
an attack that must be confined is still caught by the 5 GiB peak check.
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import glob
import hashlib
import importlib.util
import json
import os
import resource
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable
PORT = 47931
TIMEOUT = 240  # seconds for one command of the tool
MEM_LIMIT = 5 * 2**30  # peak RSS of the tool's tree (bytes) above which memory was not confined
AS_SAFETY = 12 * 2**30
RUNS = Path(tempfile.gettempdir()) / "redteam-runs"

CONTROL_OK = {"\n", "\t"}
BIDI = {chr(c) for c in (0x202A, 0x202B, 0x202C, 0x202D, 0x202E, 0x2066, 0x2067, 0x2068, 0x2069)}
DISPLAY_KEYS = {"title", "description", "intro", "explanation", "hints", "message", "id",
                "baseline", "about", "lines", "checks", "partials", "given", "exercises"}


# -- the network listener ---------------------------------------------------------------------
class Listener:
    def __init__(self, port: int):
        self.hits: list[str] = []
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(16)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, addr = self.sock.accept()
            except OSError:
                return
            conn.settimeout(0.5)
            try:
                data = conn.recv(200)
            except OSError:
                data = b""
            self.hits.append(f"{addr[0]}:{addr[1]} sent {data[:60]!r}")
            conn.close()


# -- running the tool -------------------------------------------------------------------------
def _preexec():
    os.setsid()
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (AS_SAFETY, hard))
    except (ValueError, OSError):
        pass


class Ran:
    def __init__(self, argv, rc, out, err, wall, timed_out, maxrss):
        self.argv, self.rc, self.out, self.err = argv, rc, out, err
        self.wall, self.timed_out, self.maxrss = wall, timed_out, maxrss

    @property
    def both(self) -> bytes:
        return self.out + self.err


def run_tool(args: list[str], cwd: Path, env: dict, timeout: int = TIMEOUT) -> Ran:
    argv = [PY, "-m", "tutor", *args]
    out_path, err_path = cwd / ".stdout", cwd / ".stderr"
    start = time.monotonic()
    with open(out_path, "wb") as fo, open(err_path, "wb") as fe:
        p = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=fo,
                             stderr=fe, preexec_fn=_preexec)
        timed_out = False
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - start > timeout:
                timed_out = True
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)  # the group this harness started
                pid, status, ru = os.wait4(p.pid, 0)
                break
            time.sleep(0.05)
        p.returncode = os.waitstatus_to_exitcode(status)
    return Ran(argv, p.returncode, out_path.read_bytes(), err_path.read_bytes(),
               time.monotonic() - start, timed_out, ru.ru_maxrss * 1024)


# -- what counts as broken --------------------------------------------------------------------
class Secrets:
    def __init__(self):
        self.env = "REDTEAM-ENV-" + secrets.token_hex(8)
        self.ssh = "REDTEAM-SSH-" + secrets.token_hex(8)
        try:
            first = Path("/etc/passwd").read_text().splitlines()[0]
            self.passwd = first[:16]
        except (OSError, IndexError):
            self.passwd = "root:x:0:0:"

    def leaks(self, text: str) -> list[str]:
        found = []
        if self.env in text:
            found.append("the env secret ($REDTEAM_SECRET)")
        if self.ssh in text:
            found.append("the fake ~/.ssh/id_rsa")
        if self.passwd in text:
            found.append("/etc/passwd")
        return found


def controls_in(text: str) -> list[str]:
    bad = []
    for ch in text:
        o = ord(ch)
        if (o < 32 and ch not in CONTROL_OK) or o == 0x7F or 0x80 <= o <= 0x9F or ch in BIDI \
                or 0xD800 <= o <= 0xDFFF:
            name = {0x1B: "ESC", 0x07: "BEL", 0x0D: "CR", 0x9B: "CSI(C1)", 0x202E: "RLO",
                    0x00: "NUL", 0x08: "BS"}.get(o, f"U+{o:04X}")
            if name not in bad:
                bad.append(name)
    return bad


def scan_output(ran: Ran, name: str, sec: Secrets, label: str) -> list[str]:
    why = []
    if ran.timed_out:
        why.append(f"{label}: still running after {TIMEOUT} s (hang)")
    if ran.rc < 0 and not ran.timed_out:
        why.append(f"{label}: killed by signal {-ran.rc}")
    try:
        text = ran.both.decode("utf-8")
    except UnicodeDecodeError:
        why.append(f"{label}: output is not UTF-8 (raw bytes reach the terminal)")
        text = ran.both.decode("utf-8", "surrogateescape")
    if "Traceback (most recent call last)" in text:
        why.append(f"{label}: a Python traceback in the output")
    if "Fatal Python error" in text:
        why.append(f"{label}: a fatal Python error")
    bad = controls_in(text)
    if bad:
        why.append(f"{label}: raw control characters in the output ({', '.join(bad)})")
    if f"PWNED-{name}" in text:
        why.append(f"{label}: the attack's marker PWNED-{name} was printed (its code ran)")
    for leak in sec.leaks(text):
        why.append(f"{label}: {leak} in the output")
    if ran.maxrss > MEM_LIMIT:
        why.append(f"{label}: peak memory {ran.maxrss / 2**30:.1f} GiB (not confined)")
    return why


def scan_files(root: Path, sec: Secrets, label: str) -> list[str]:
    why = []
    if not root.exists():
        return why
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            try:
                text = path.read_bytes()[:5_000_000].decode("utf-8", "replace")
            except OSError:
                continue
            for leak in sec.leaks(text):
                why.append(f"{label}: {leak} written into {path.relative_to(root)}")
    return why


def snapshot(root: Path):
    if not root.exists() and not root.is_symlink():
        return None
    if root.is_file():
        return ("file", hashlib.sha256(root.read_bytes()).hexdigest())
    items = []
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_file():
            items.append((rel, hashlib.sha256(path.read_bytes()).hexdigest()))
        else:
            items.append((rel, "dir"))
    return ("dir", tuple(items))


def display_text_controls(pack: Path) -> list[str]:
    """Raw control characters in what the tutor shows from a pack pack new wrote."""
    why = []
    for toml in sorted(pack.glob("*.toml")):
        try:
            data = tomllib.loads(toml.read_bytes().decode("utf-8"))
        except (UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
            why.append(f"pack new wrote {toml.name}, which is not valid TOML ({str(e)[:80]})")
            continue

        def walk(node, key="", toml=toml):
            if isinstance(node, dict):
                for k, v in node.items():
                    bad = controls_in(k)
                    if bad:
                        why.append(f"{toml.name}: key {k!r:.40} holds {', '.join(bad)}")
                    walk(v, k, toml)
            elif isinstance(node, list):
                for v in node:
                    walk(v, key, toml)
            elif isinstance(node, str) and key in DISPLAY_KEYS:
                bad = controls_in(node)
                if bad:
                    why.append(f"{toml.name}: `{key}` holds raw {', '.join(bad)}, shown to the "
                               "learner")

        walk(data)
    return why


def orphans() -> list[tuple[int, str]]:
    """Live processes reparented to this harness (a subreaper); exited ones are reaped."""
    me = os.getpid()
    found = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            raw = Path(stat).read_text()
            fields = raw.rsplit(")", 1)[1].split()
            state, ppid = fields[0], int(fields[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == me and state == "Z":
            with contextlib.suppress(ChildProcessError):
                os.waitpid(int(stat.split("/")[2]), os.WNOHANG)
            continue
        if ppid == me:
            pid = int(stat.split("/")[2])
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
                    "utf-8", "replace").strip()
            except OSError:
                cmd = "?"
            found.append((pid, cmd))
    return found


# -- packs ------------------------------------------------------------------------------------
def write_text(path: Path, text: str, mode: str = "w"):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, mode, encoding="utf-8", errors="surrogateescape", newline="") as f:
        f.write(text)


class Bases:
    def __init__(self, root: Path, env: dict):
        self.root, self.env, self.made = root, env, {}

    def get(self, base: str) -> Path:
        if base not in self.made:
            dest = self.root / "bases" / base.replace("/", "_").removesuffix(".py")
            if dest.exists():
                shutil.rmtree(dest)
            dest.parent.mkdir(parents=True, exist_ok=True)
            if base.startswith("exercises/"):
                shutil.copytree(REPO / base, dest)
            else:
                env = dict(self.env, BACKPROP_TUTOR_HOME=str(self.root / "bases" / "home"),
                           BACKPROP_TUTOR_CACHE=str(self.root / "bases" / "cache"))
                ran = run_tool(["pack", "new", str(REPO / "tests/packs/forward" / base),
                                "--out", str(dest)], self.root / "bases", env)
                if ran.rc != 0:
                    raise SystemExit(f"cannot make base pack {base}: {ran.both.decode()[:300]}")
            self.made[base] = dest
        return self.made[base]


def first_step(pack: Path, cwd: Path, env: dict) -> str | None:
    ran = run_tool(["--pack", str(pack), "list", "--json"], cwd, env, timeout=120)
    try:
        return json.loads(ran.out)[0]["id"]
    except (ValueError, LookupError, TypeError):
        return None


# -- one attack -------------------------------------------------------------------------------
def run_attack(name: str, attack: dict, root: Path, bases: Bases, base_env: dict,
               sec: Secrets, listener: Listener) -> tuple[bool, str]:
    work = root / name
    work.mkdir(parents=True)
    fake_home = work / "fakehome"
    (fake_home / ".ssh").mkdir(parents=True)
    (fake_home / ".ssh" / "id_rsa").write_text(
        "-----BEGIN OPENSSH PRIVATE KEY-----\n" + sec.ssh + "\n-----END OPENSSH PRIVATE KEY-----\n")
    env = dict(base_env, HOME=str(fake_home), BACKPROP_TUTOR_HOME=str(work / "home"),
               BACKPROP_TUTOR_CACHE=str(work / "cache"), REDTEAM_SECRET=sec.env)
    for old in glob.glob(f"/tmp/redteam_pwned_{name}*"):
        (shutil.rmtree if os.path.isdir(old) and not os.path.islink(old) else os.remove)(old)
    hits_before = len(listener.hits)
    why: list[str] = []
    held = ""
    command = attack["command"]

    if attack["kind"] == "forward":
        src = work / "forward.py"
        write_text(src, attack["file"])
        out = work / "out"
        state = attack.get("out", "absent")
        if state == "empty":
            out.mkdir()
        elif state == "pack":
            shutil.copytree(bases.get("mlp.py"), out)
        before = snapshot(out)
        args = ["pack", "new", str(src), "--out", str(out)] + (["--force"] if attack.get("force")
                                                                else [])
        ran = run_tool(args, work, env)
        why += scan_output(ran, name, sec, "pack new")
        lines = [l for l in ran.both.decode("utf-8", "replace").splitlines() if l.strip()]
        if ran.rc != 0 and not ran.timed_out:
            if snapshot(out) != before:
                why.append(f"pack new failed (rc {ran.rc}) and left --out changed "
                           f"({'created' if before is None else 'modified'})")
            if ran.rc != 2:
                why.append(f"pack new failed with exit code {ran.rc}, not 2")
            if len(lines) != 1:
                why.append(f"pack new's refusal is {len(lines)} lines, not one")
            elif len(lines[0]) > 2000:
                why.append(f"pack new's refusal is one line of {len(lines[0])} characters")
            held = "refused: " + (lines[-1][:110] if lines else "(no message)")
        elif ran.rc == 0:
            why += display_text_controls(out)
            why += scan_files(out, sec, "pack new")
            ls = run_tool(["--pack", str(out), "list"], work, env, timeout=120)
            why += scan_output(ls, name, sec, "list of the new pack")
            if ls.rc != 0:
                msg = ls.both.decode("utf-8", "replace").strip().splitlines()
                why.append("pack new wrote a pack that does not load: "
                           + (msg[-1][:120] if msg else f"rc {ls.rc}"))
            else:
                step = first_step(out, work, env)
                if step:
                    sh = run_tool(["--pack", str(out), "show", step], work, env, timeout=120)
                    why += scan_output(sh, name, sec, "show of the new pack")
                pc = run_tool(["pack", "check", str(out)], work, env)
                why += scan_output(pc, name, sec, "pack check of the new pack")
                why += scan_files(out, sec, "pack check of the new pack")
                held = f"made a pack that loads (pack check rc {pc.rc})"
    else:
        base = bases.get(attack["base"])
        pack = work / "pack"
        shutil.copytree(base, pack)
        for rel, text in attack.get("edit", {}).items():
            write_text(pack / rel, text)
        for rel, text in attack.get("append", {}).items():
            write_text(pack / rel, text, mode="a")
        if command == "pack check":
            args = ["pack", "check", str(pack)]
        elif command == "check":
            args = ["--pack", str(pack), "check", attack["step"], "--code",
                    attack.get("code", "pass")]
        elif command == "train":
            args = ["--pack", str(pack), "train", "--reference", "--steps", "5"]
        else:
            raise SystemExit(f"{name}: unknown command {command!r}")
        ran = run_tool(args, work, env)
        why += scan_output(ran, name, sec, command)
        why += scan_files(pack, sec, command)
        text = ran.both.decode("utf-8", "replace").strip().splitlines()
        if ran.rc != 0 and not ran.timed_out and not text:
            why.append(f"{command} failed (rc {ran.rc}) without a word")
        last = [l.strip() for l in text if l.strip()]
        held = (f"refused (rc {ran.rc}): " if ran.rc else "confined (rc 0): ") + \
            (last[-1][:110] if last else "")

    deadline = time.monotonic() + 3
    left = orphans()
    while left and time.monotonic() < deadline:  # a descendant may take a moment to exit
        time.sleep(0.2)
        left = orphans()
    if left:
        why.append("processes left running: " + "; ".join(c[:60] for _, c in left))
        for pid, _ in left:
            try:
                os.kill(pid, signal.SIGKILL)  # a descendant of this harness's own run
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
    pwned = glob.glob(f"/tmp/redteam_pwned_{name}*")
    if pwned:
        why.append("sentinel written: " + ", ".join(pwned))
    new_hits = listener.hits[hits_before:]
    if new_hits:
        why.append("network: a connection reached the listener (" + new_hits[0] + ")")
    return (not why), ("; ".join(why) if why else held)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("which", choices=["tune", "holdout"])
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--keep", action="store_true", help="keep the run folders")
    opts = ap.parse_args()

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans of a run come back here

    path = REPO / "tests" / f"redteam_pack_{opts.which}.py"
    spec = importlib.util.spec_from_file_location(f"redteam_pack_{opts.which}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    attacks: dict[str, dict] = module.ATTACKS

    root = RUNS / f"{opts.which}-{time.strftime('%Y%m%d-%H%M%S')}"
    root.mkdir(parents=True)
    base_env = {k: v for k, v in os.environ.items()
                if k in ("PATH", "LANG", "LC_ALL", "TERM", "TMPDIR", "USER", "LOGNAME")}
    base_env.update(PYTHONPATH=str(REPO), PYTHONDONTWRITEBYTECODE="1")
    sec = Secrets()
    listener = Listener(PORT)
    bases = Bases(root, base_env)

    broke = 0
    for name, attack in attacks.items():
        if opts.only and name not in opts.only:
            continue
        t0 = time.monotonic()
        ok, why = run_attack(name, attack, root, bases, base_env, sec, listener)
        broke += not ok
        print(f"{'HELD ' if ok else 'BROKE'} {name} [{attack['kind']}/{attack['command']}, "
              f"{time.monotonic() - t0:.0f}s]: {why}", flush=True)
    print(f"-- {opts.which}: {broke} broke of "
          f"{len([n for n in attacks if not opts.only or n in opts.only])}")
    if not opts.keep:
        shutil.rmtree(root, ignore_errors=True)
    else:
        print(f"-- run folders kept in {root}")


if __name__ == "__main__":
    main()
