"""Operating-system limits for the process that runs learner code.

Applied in a freshly forked child, after torch is loaded and before any learner code runs:

- it dies with its parent (PR_SET_PDEATHSIG) and has a CPU-time limit (RLIMIT_CPU);
- Landlock (Linux 5.13+) takes away every file-system right except reading the Python
  installation (torch imports a module lazily now and then), and, where the kernel's Landlock
  knows them, TCP bind/connect, abstract unix sockets and signals to other processes;
- seccomp (through libseccomp, when installed) refuses new processes, sockets, tracing and every
  system call that creates, changes or removes a file, even on kernels without Landlock.

Each layer is applied where the system offers it and reported in `Confinement`, so the tutor can
say what holds on this machine. Nothing here is needed for correctness; it is the boundary for
code that got past the syntax check and the run-time guard.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import glob
import os
import signal
import sys
import sysconfig
from dataclasses import dataclass, field

try:
    import resource
except ImportError:  # Windows: no resource limits; the worker's clock still kills the child
    resource = None  # type: ignore[assignment]

_PR_SET_PDEATHSIG = 1
_PR_SET_NO_NEW_PRIVS = 38

_SYS_LANDLOCK = {"create_ruleset": 444, "add_rule": 445, "restrict_self": 446}
_LANDLOCK_CREATE_RULESET_VERSION = 1
_LANDLOCK_RULE_PATH_BENEATH = 1
_FS_EXECUTE, _FS_READ_FILE, _FS_READ_DIR = 1 << 0, 1 << 2, 1 << 3
# All file-system rights known to each Landlock ABI version (1: 13 rights, 2: +REFER,
# 3: +TRUNCATE, 5: +IOCTL_DEV).
_FS_ALL = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 5: (1 << 16) - 1}
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1 << 0, 1 << 1


@dataclass
class Confinement:
    """What was applied in this process; `missing` says what the system did not offer."""

    applied: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def die_with_parent(libc: ctypes.CDLL | None, parent: int) -> bool:
    """SIGKILL when the parent goes; if it already went, go now."""
    if libc is None or not sys.platform.startswith("linux"):
        return False
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        return False
    if os.getppid() != parent:
        os._exit(1)
    return True


# The CPU limit `limit_cpu` set in this process (its soft limit, in whole seconds): what
# `tighten_cpu` puts back once the learner's code has run. None where this process was not
# confined (the worker, a test), whose limits are never touched.
_CPU_LIMIT: int | None = None


def limit_cpu(seconds: float) -> None:
    """SIGXCPU (which kills) once this process has used `seconds` more of CPU time (a spawned
    child has already spent some loading torch)."""
    global _CPU_LIMIT
    soft = max(1, int(_cpu_used() + seconds + 0.999))
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, soft + 1 if hard == resource.RLIM_INFINITY
                                             else hard))
    _CPU_LIMIT = soft


def tighten_cpu(seconds: float | None) -> None:
    """While the learner's code runs in a confined child: SIGXCPU once it has used `seconds`
    more of CPU time (rounded up to a whole second, never past `limit_cpu`'s limit), so that one
    long tensor operation, which no alarm interrupts, ends at the learner's own limit however
    busy the machine is. None puts `limit_cpu`'s limit back. Nothing in an unconfined process."""
    if _CPU_LIMIT is None or resource is None:
        return
    soft = _CPU_LIMIT if seconds is None else min(_CPU_LIMIT,
                                                  int(_cpu_used() + seconds + 0.999))
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def _cpu_used() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@functools.cache
def limit_memory(extra_gb: float) -> None:
    """Cap the address space a little above what is mapped now, so a huge allocation fails
    cleanly with MemoryError instead of pushing the machine into swap."""
    try:
        with open("/proc/self/statm") as fh:
            current = int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return  # not Linux: the time limit still protects the learner
    if resource is None:
        return
    limit = current + int(extra_gb * 2**30)
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard == resource.RLIM_INFINITY or limit < hard:
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


@functools.cache
def readable_roots() -> tuple[str, ...]:
    """Where Python and its packages live: the only places the confined process may read."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        try:
            paths.add(sysconfig.get_path(key))
        except KeyError:
            continue
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths.add(here)  # the tutor package itself, for its own lazy imports
    # torch's CPU detection reads these on the first large operation.
    paths.update(("/proc/cpuinfo", "/sys/devices/system/cpu"))
    return tuple(sorted(p for p in paths if p and os.path.exists(p)))


# What a GPU's libraries may read after the device was initialised (before confinement, so the
# driver's device files are already open; seccomp refuses opening any file for writing): the
# system's libraries, which CUDA loads lazily (cuBLAS on the first matrix product), and what
# the driver reads about the machine.
_DEVICE_READS = {
    "cuda": ("/usr/lib", "/usr/lib64", "/usr/local/cuda", "/etc/ld.so.cache",
             "/proc/driver/nvidia", "/sys/bus/pci", "/sys/devices"),
}


def device_reads(device: str) -> tuple[str, ...]:
    return tuple(p for p in _DEVICE_READS.get(device, ()) if os.path.exists(p))


# The files a GPU's driver opens as a process starts using the device (its control file, one per
# GPU, unified memory, and the capabilities MIG uses). A process that starts others which use the
# GPU (the worker, whose children each open the device before confining themselves) must leave
# them open to those children: reading, writing and the driver's ioctl calls (Landlock ABI 5).
_DEVICE_FILES = {"cuda": ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
                          "/dev/nvidia-modeset", "/dev/nvidia-caps")}
_FS_IOCTL_DEV = 1 << 15


def device_files(device: str) -> tuple[str, ...]:
    """The driver's files for `device` on this machine (none where there is no such device)."""
    if device not in _DEVICE_FILES:
        return ()
    gpus = sorted(glob.glob("/dev/nvidia[0-9]*"))
    return tuple(p for p in (*_DEVICE_FILES[device], *gpus) if os.path.exists(p))


# torch.compile runs the system's C++ compiler, which reads its headers and libraries and runs
# its own programs from these; it writes only in the folder it is given (`workshop`).
_COMPILER_READS = ("/usr", "/lib", "/lib64", "/bin", "/etc", "/proc/self",
                   "/sys/devices/system/cpu")
_FS_WRITE_FILE = 1 << 1


def landlock(libc: ctypes.CDLL | None, device: str = "cpu", workshop: str | None = None,
             reads: tuple[str, ...] = (), devices: tuple[str, ...] = ()) -> str | None:
    """Restrict this process with Landlock; the ABI version applied, or None. With a
    `workshop` folder, also what a compiler needs: running the system's programs, and every
    right beneath that folder (and writing to /dev/null). `reads`: more places to read.
    `devices`: device files to open for reading and writing, with their ioctl calls."""
    if libc is None or not sys.platform.startswith("linux"):
        return None
    syscall = libc.syscall
    syscall.restype = ctypes.c_long
    abi = syscall(_SYS_LANDLOCK["create_ruleset"], None, ctypes.c_size_t(0),
                  ctypes.c_uint32(_LANDLOCK_CREATE_RULESET_VERSION))
    if abi < 1:
        return None
    fs_all = _FS_ALL[max(v for v in _FS_ALL if v <= abi)]
    attr = _RulesetAttr(fs_all, 0, 0)
    size = 8  # ABI 1-3 know only the file-system field
    if abi >= 4:
        attr.handled_access_net, size = _NET_BIND_TCP | _NET_CONNECT_TCP, 16
    if abi >= 6:
        attr.scoped, size = _SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL, 24
    fd = syscall(_SYS_LANDLOCK["create_ruleset"], ctypes.byref(attr), ctypes.c_size_t(size),
                 ctypes.c_uint32(0))
    if fd < 0:
        return None
    try:
        read = _FS_READ_FILE | _FS_READ_DIR | _FS_EXECUTE
        rules = [(root, read) for root in (*readable_roots(), *device_reads(device), *reads)]
        if workshop is not None:
            rules += [(p, read) for p in _COMPILER_READS if os.path.exists(p)]
            rules += [(workshop, fs_all), (os.devnull, _FS_READ_FILE | _FS_WRITE_FILE)]
        driver = _FS_READ_FILE | _FS_WRITE_FILE | (_FS_IOCTL_DEV if abi >= 5 else 0)
        rules += [(path, driver | _FS_READ_DIR) for path in devices]
        for root, granted in rules:
            try:
                parent = os.open(root, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                # A rule on a single file may only grant rights that apply to files.
                rights = granted if os.path.isdir(root) else granted & (
                    _FS_READ_FILE | _FS_WRITE_FILE | _FS_IOCTL_DEV)
                rule = _PathBeneath(rights, parent)
                syscall(_SYS_LANDLOCK["add_rule"], ctypes.c_int(fd),
                        ctypes.c_int(_LANDLOCK_RULE_PATH_BENEATH), ctypes.byref(rule),
                        ctypes.c_uint32(0))
            finally:
                os.close(parent)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return None
        if syscall(_SYS_LANDLOCK["restrict_self"], ctypes.c_int(fd), ctypes.c_uint32(0)) != 0:
            return None
    finally:
        os.close(fd)
    return f"Landlock ABI {abi}"


# System calls that make processes, sockets, tracers, or change the file system. Names unknown on
# this architecture (open, creat, ... do not exist on aarch64) are skipped.
_SECCOMP_DENY = (
    "execve execveat fork vfork ptrace process_vm_readv process_vm_writev socket socketpair "
    "connect bind listen accept accept4 creat truncate ftruncate unlink unlinkat rename renameat "
    "renameat2 mkdir mkdirat rmdir link linkat symlink symlinkat mknod mknodat chmod fchmod "
    "fchmodat chown fchown lchown fchownat utime utimes utimensat futimesat setxattr lsetxattr "
    "fsetxattr removexattr lremovexattr fremovexattr mount umount2 pivot_root chroot unshare "
    "setns keyctl add_key request_key bpf perf_event_open io_uring_setup io_uring_enter "
    "io_uring_register userfaultfd name_to_handle_at open_by_handle_at kexec_load "
    "init_module finit_module delete_module reboot swapon swapoff"
).split()
_SCMP_ACT_ALLOW = 0x7FFF0000
_SCMP_CMP_MASKED_EQ = 7
_CLONE_THREAD = 0x00010000
# O_WRONLY, O_RDWR, O_CREAT, O_TRUNC, O_APPEND (the same values on x86_64 and aarch64).
_WRITE_FLAGS = (0o1, 0o2, 0o100, 0o1000, 0o2000)


def _scmp_errno(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)


class _ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                ("datum_b", ctypes.c_uint64)]


@functools.cache
def _libseccomp() -> ctypes.CDLL | None:
    # find_library runs ldconfig and writes a temporary file: call this before confining.
    if not sys.platform.startswith("linux"):
        return None
    for name in ("libseccomp.so.2", ctypes.util.find_library("seccomp")):
        try:
            return ctypes.CDLL(name) if name else None
        except OSError:
            continue
    return None


def prepare() -> None:
    """Load what confine() needs while files can still be opened (in the parent)."""
    _libseccomp()
    readable_roots()


# What a compiler does that the usual filter refuses: Landlock confines its files instead. Not
# changing a file's mode or times by path (Landlock does not cover those), nor truncating by path
# (older Landlock does not).
_COMPILER_CALLS = frozenset(
    "execve execveat fork vfork creat ftruncate unlink unlinkat rename renameat renameat2 mkdir "
    "mkdirat rmdir link linkat symlink symlinkat fchmod".split())


def seccomp(compiler: bool = False, only: tuple[str, ...] | None = None) -> bool:
    """Load a seccomp filter through libseccomp; False when the library is not installed.
    `compiler` lets the process start programs and change files (to be paired with Landlock's
    workshop, which says where); sockets, tracing and the rest stay refused. With `only`, those
    calls alone are refused (`confine_lesson`'s filter)."""
    lib = _libseccomp()
    if lib is None:
        return False
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    add = lib.seccomp_rule_add_array
    add.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                    ctypes.POINTER(_ArgCmp)]
    ctx = lib.seccomp_init(ctypes.c_uint32(_SCMP_ACT_ALLOW))
    if not ctx:
        return False
    ctx = ctypes.c_void_p(ctx)
    try:
        def nr(syscall: str) -> int:
            return lib.seccomp_syscall_resolve_name(syscall.encode())

        eperm = _scmp_errno(errno.EPERM)
        for call in _SECCOMP_DENY if only is None else only:
            if compiler and call in _COMPILER_CALLS:
                continue
            if nr(call) >= 0 and add(ctx, eperm, nr(call), 0, None) != 0:
                return False
        if compiler or only is not None:
            return lib.seccomp_load(ctx) == 0
        # Threads are fine (clone with CLONE_THREAD); new processes are not.
        no_thread = (_ArgCmp * 1)(_ArgCmp(0, _SCMP_CMP_MASKED_EQ, _CLONE_THREAD, 0))
        if add(ctx, eperm, nr("clone"), 1, no_thread) != 0:
            return False
        # clone3 passes its flags in memory a filter cannot read: ENOSYS makes libc use clone.
        if nr("clone3") >= 0 and add(ctx, _scmp_errno(errno.ENOSYS), nr("clone3"), 0, None):
            return False
        # Opening a file for writing is refused by its flags, one rule per write flag.
        for call, flags_arg in (("open", 1), ("openat", 2)):
            if nr(call) < 0:
                continue
            for bit in _WRITE_FLAGS:
                cmp = (_ArgCmp * 1)(_ArgCmp(flags_arg, _SCMP_CMP_MASKED_EQ, bit, bit))
                if add(ctx, eperm, nr(call), 1, cmp) != 0:
                    return False
        return lib.seccomp_load(ctx) == 0
    finally:
        lib.seccomp_release(ctx)


# What the process that holds a lesson never needs: tracing, the kernel's own machinery, new
# namespaces. Files and networking are Landlock's there (it starts its children, so new
# processes stay possible).
_LESSON_DENY = tuple(
    "ptrace process_vm_readv process_vm_writev mount umount2 pivot_root chroot unshare setns "
    "keyctl add_key request_key bpf perf_event_open userfaultfd kexec_load init_module "
    "finit_module delete_module reboot swapon swapoff".split())


_RANDOM = ("/dev/urandom", "/dev/random")


def confine_lesson(device: str, reads: tuple[str, ...], workshop: str) -> Confinement:
    """The OS layers for a process that runs a lesson's own code (its setup, data, forward pass
    and training, `pack check`'s whole run, the worker that forks every check's child): it may
    read the Python installation, the lesson's folder and its data (`reads`) and what a
    compiler reads, write only beneath `workshop` (torch.compile's cache) and /dev/null, open
    no TCP connection, and trace nothing. On a GPU, the driver's files stay open to it (its
    children each open the device before they confine themselves further, `confine`)."""
    report = Confinement()
    libc = _libc()
    prepare()  # what a child's confinement loads, while files can still be opened
    # A workshop's rules are also what starting Python or a compiler needs (the system's
    # libraries): the process starts its children's interpreters.
    # Where the tutor is installed (a checkout's root, or site-packages), from which a started
    # interpreter imports it, and the random bytes torch reads as it starts.
    package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    # /proc: each child reads its own size there before it confines itself (`limit_memory`);
    # "/proc/self" would name this process only.
    ruleset = landlock(libc, device, workshop,
                       (*reads, package, "/proc", *(p for p in _RANDOM if os.path.exists(p))),
                       devices=device_files(device))
    (report.applied if ruleset else report.missing).append(ruleset or "Landlock")
    loaded = seccomp(only=_LESSON_DENY)
    (report.applied if loaded else report.missing).append("seccomp")
    return report


def confine(parent: int, cpu_seconds: float, os_layers: bool = True,
            device: str = "cpu", workshop: str | None = None) -> Confinement:
    """Apply every layer this system offers to the current process (Landlock and seccomp only
    with `os_layers`); `device` names the accelerator whose driver files stay reachable.

    With a `workshop` folder (torch.compile's cache), the process may also run the system's
    compiler and write beneath that folder, and nowhere else: that takes Landlock, so without
    it the usual seccomp filter applies (and compiling fails, the run goes on eagerly)."""
    report = Confinement()
    libc = _libc()
    (report.applied if die_with_parent(libc, parent) else report.missing).append(
        "dies with its parent")
    try:
        limit_cpu(cpu_seconds)
        report.applied.append(f"CPU limit {cpu_seconds:g} s")
    except (ValueError, OSError, AttributeError):  # AttributeError: no resource module
        report.missing.append("CPU limit")
    if not os_layers:
        report.missing += ["Landlock", "seccomp"]
        return report
    ruleset = landlock(libc, device, workshop)
    (report.applied if ruleset else report.missing).append(ruleset or "Landlock")
    compiler = workshop is not None and ruleset is not None
    (report.applied if seccomp(compiler) else report.missing).append(
        "seccomp" + (" (compiler allowed)" if compiler else ""))
    return report
