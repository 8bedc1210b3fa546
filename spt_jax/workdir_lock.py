"""One run per workdir at a time: a second process on a workdir in use stops before it writes.

Two processes training into one workdir (the same command launched twice, a sweep re-run while an
earlier one still runs) would interleave their checkpoints and metrics, and the resume logic could
no longer tell which is whose. A run therefore holds an exclusive `flock` on
`<workdir>/.lock.process<i>` (i: its JAX process index, so that the processes of one multi-host job
never collide with each other, while two jobs on one workdir do) for as long as it runs. The kernel
drops the lock when the process dies, however it dies, so a killed run never leaves a stale lock
behind: its re-run takes the lock and resumes. Nothing is written into the file (a refused run leaves
the workdir byte for byte as it was); the message a second process gets names the holder's pid and
command line, read from the kernel's lock table (/proc/locks) where there is one.

Locks are local-filesystem advisory locks: a URL workdir (gs://...) and a filesystem without
`flock` support run unlocked, with a warning.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os

from absl import logging

from spt_jax.metric_writers import is_url


class WorkdirInUse(OSError):
  """Another live process holds the workdir."""


def lock_path(workdir: str, process_index: int = 0) -> str:
  return os.path.join(os.fspath(workdir), f".lock.process{process_index}")


def _try_lock(fd: int) -> bool:
  """Takes the exclusive lock without waiting: True if taken, False if another holds it."""
  try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return True
  except OSError as e:
    if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
      return False
    raise


def _describe(path: str) -> str:
  """'pid N: its command line' of the process holding `path`'s flock, from /proc/locks (Linux; a
  holder on another NFS client does not appear there)."""
  try:
    st = os.stat(path)
    with open("/proc/locks") as f:
      table = f.read().splitlines()
  except OSError:
    return "a process whose pid this system does not report"
  for line in table:
    fields = line.split()
    # "1: FLOCK  ADVISORY  WRITE 12345 fd:01:1234567 0 EOF" (device numbers in hex)
    if len(fields) < 6 or fields[1] != "FLOCK" or fields[2] == "->":
      continue
    try:
      major, minor, inode = fields[5].split(":")
      same = (int(inode) == st.st_ino and int(major, 16) == os.major(st.st_dev)
              and int(minor, 16) == os.minor(st.st_dev))
    except ValueError:
      continue
    if same:
      pid = fields[4]
      try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
          command = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
      except OSError:
        command = ""
      return f"pid {pid}" + (f": {command[:200]}" if command else "")
  return "a process on another host, or whose pid this system does not report"


def holder(workdir: str, process_index: int = 0) -> str | None:
  """Who holds the workdir ('pid N: command line'), or None if no live process does. Reads only:
  a workdir without a lock file is free."""
  if is_url(workdir):
    return None
  path = lock_path(workdir, process_index)
  try:
    fd = os.open(path, os.O_RDONLY)
  except FileNotFoundError:
    return None
  try:
    if _try_lock(fd):
      fcntl.flock(fd, fcntl.LOCK_UN)
      return None
    return _describe(path)
  except OSError:  # no flock on this filesystem: nothing can be said, and nothing is held
    return None
  finally:
    os.close(fd)


@contextlib.contextmanager
def hold(workdir: str, process_index: int = 0):
  """Holds the workdir for the `with` block; WorkdirInUse (naming the holder) if another process
  holds it. The workdir must exist."""
  if is_url(workdir):
    logging.warning("--workdir=%s is a URL: it is not locked, so nothing stops a second run on it "
                    "(do not start one).", workdir)
    yield
    return
  path = lock_path(workdir, process_index)
  fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
  try:
    try:
      taken = _try_lock(fd)
    except OSError as e:
      logging.warning("--workdir=%s cannot be locked (%s): nothing stops a second run on it.",
                      workdir, e.strerror or e)
      taken = None
    if taken is False:
      raise WorkdirInUse(f"--workdir={workdir} is in use by another run ({_describe(path)}); "
                         f"wait for it to finish or stop it, then re-run to resume. Nothing was "
                         f"changed.")
    yield
  finally:
    os.close(fd)  # closing the descriptor releases the lock
