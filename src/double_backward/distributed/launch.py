"""Run a function on N local processes joined by a ``gloo`` process group, with a timeout.

>>> results = launch(task, world_size=2, timeout=60.0)  # task(rank, world_size) on each rank

Each rank is a new Python process (``python -m double_backward.distributed._rank``) that
imports ``task`` by name, so ``task`` must be importable: a top-level function of a module,
never one defined in ``__main__`` (a script, a notebook, a sphinx-gallery page). Unlike
``multiprocessing``'s ``spawn``, nothing re-imports the caller's script, so a launch
runs from a script without an ``if __name__ == "__main__":`` guard, from a notebook and
inside sphinx-gallery alike. The rendezvous is a
``FileStore`` in a fresh temporary directory, so no port is chosen
and two launches never collide; gloo connects the ranks over the loopback interface only.
Each rank's standard output and error go to files (torch's C++ warnings would otherwise
print in whatever runs the launch), each rank returns what ``task`` returned, and the
process group is destroyed whatever happens. A rank that is not done when ``timeout``
seconds have passed is killed, and :class:`LaunchTimeout` says which.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import pickle
import socket
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

# The ranks' own collectives fail after this long, so that a rank waiting on a dead peer
# ends with an error rather than at the launcher's kill.
_COLLECTIVE_TIMEOUT = datetime.timedelta(seconds=30)


# The module each rank runs: it calls run_rank (a module apart, so that ``-m`` does not
# run this one a second time under the name __main__).
_RANK_MODULE = "double_backward.distributed._rank"


class LaunchTimeout(RuntimeError):
    """Some ranks had not finished when the launch's timeout passed; they were killed."""


class RankFailed(RuntimeError):
    """A rank's process ended without a result (it crashed, or ``task`` could not be run)."""


def loopback_interface() -> str:
    """The name of the loopback interface (``lo`` on Linux, ``lo0`` on macOS)."""
    names = [name for _, name in socket.if_nameindex()]
    for name in names:
        if name.startswith("lo"):
            return name
    raise RuntimeError(f"no loopback interface among {names}")


def check_importable(fn: Any, name: str) -> None:
    """Refuse what a spawned process cannot import: a lambda, a local or an interactive function.

    Raises :class:`TypeError` saying why and what to pass instead.
    """
    if not callable(fn):
        raise TypeError(f"{name} must be a callable, got {type(fn).__name__}")
    qualname = getattr(fn, "__qualname__", None)
    module = getattr(fn, "__module__", None)
    what = f"{name}={qualname or repr(fn)}"
    if qualname is None or module is None:
        raise TypeError(
            f"{what} has no module-level name: the processes are spawned and import it by "
            "name; pass a function defined at the top level of a module"
        )
    if "<lambda>" in qualname or "<locals>" in qualname:
        kind = (
            "a lambda"
            if "<lambda>" in qualname
            else "a function defined inside another"
        )
        raise TypeError(
            f"{what} is {kind}: the processes are spawned and import it by name, which "
            "they cannot; pass a function defined at the top level of a module"
        )
    if module == "__main__":
        raise TypeError(
            f"{what} is defined in __main__ (a script, a notebook, a sphinx-gallery "
            "page): the processes import it by name and cannot; move it to a module "
            "(a .py file next to yours) and import it from there"
        )
    try:
        pickle.dumps(fn)
    except Exception as error:  # noqa: BLE001 - any pickling failure means the same thing
        raise TypeError(
            f"{what} cannot be pickled ({type(error).__name__}: {error}): the processes "
            "are spawned and import it by name; pass a top-level function of a module"
        ) from error


def launch(
    task: Callable[[int, int], Any],
    world_size: int = 2,
    *,
    timeout: float = 60.0,
) -> list[Any]:
    """Run ``task(rank, world_size)`` on ``world_size`` processes; return each rank's result.

    A rank whose ``task`` raised re-raises the error here (the lowest rank's), with the
    rank's standard error appended when the process died without a result.
    """
    if isinstance(task, types.FunctionType):
        check_importable(task, "task")
    else:
        try:
            pickle.dumps(task)
        except Exception as error:  # noqa: BLE001 - any pickling failure means the same thing
            raise TypeError(
                f"task cannot be pickled for the spawned processes: {error}"
            ) from error
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    if not torch.distributed.is_available():
        raise RuntimeError("this torch build has no torch.distributed")
    with tempfile.TemporaryDirectory(prefix="double_backward-") as folder:
        workdir = Path(folder)
        (workdir / "task.pkl").write_bytes(pickle.dumps(task))
        # The ranks import what this process can: its sys.path ("" is the current folder).
        env = dict(
            os.environ, PYTHONPATH=os.pathsep.join(p or os.getcwd() for p in sys.path)
        )
        processes = []
        try:
            for rank in range(world_size):
                with (
                    open(workdir / f"stdout-{rank}.txt", "wb") as stdout,
                    open(workdir / f"stderr-{rank}.txt", "wb") as stderr,
                ):
                    command = [
                        sys.executable,
                        "-m",
                        _RANK_MODULE,
                        folder,
                        str(rank),
                        str(world_size),
                    ]
                    processes.append(
                        subprocess.Popen(
                            command,
                            stdin=subprocess.DEVNULL,
                            stdout=stdout,
                            stderr=stderr,
                            env=env,
                        )
                    )
            _join_all(processes, timeout)
        finally:
            for process in processes:
                if process.poll() is None:
                    process.kill()
                    process.wait(10.0)
        return [
            _result(workdir, rank, process.returncode)
            for rank, process in enumerate(processes)
        ]


def _join_all(processes: list[subprocess.Popen], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for process in processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(max(0.0, deadline - time.monotonic()))
    late = [rank for rank, process in enumerate(processes) if process.poll() is None]
    if late:
        raise LaunchTimeout(
            f"rank{'s' if len(late) > 1 else ''} {', '.join(map(str, late))} had not "
            f"finished after {timeout:g} s and were killed"
        )


def _result(workdir: Path, rank: int, exitcode: int | None) -> Any:
    file = workdir / f"result-{rank}.pkl"
    if not file.exists():
        stderr = (workdir / f"stderr-{rank}.txt").read_text(errors="replace")
        tail = "\n".join(stderr.strip().splitlines()[-15:])
        raise RankFailed(
            f"rank {rank} ended (exit code {exitcode}) without a result; its standard "
            f"error:\n{tail}"
        )
    # Written by run_rank, in this launch's own temporary folder.
    ok, value = pickle.loads(file.read_bytes())
    if not ok:
        raise value
    return value


def run_rank(workdir: str, rank: int, world_size: int) -> None:
    """One rank's process: join the group, run the task, leave the group, write the result."""
    folder = Path(workdir)
    os.environ["GLOO_SOCKET_IFNAME"] = loopback_interface()  # never a public interface
    torch.set_num_threads(1)  # the ranks share the machine's cores
    import torch.distributed as dist

    try:
        task = pickle.loads((folder / "task.pkl").read_bytes())  # written by launch()
        store = dist.FileStore(str(folder / "store"), world_size)
        dist.init_process_group(
            "gloo",
            store=store,
            rank=rank,
            world_size=world_size,
            timeout=_COLLECTIVE_TIMEOUT,
        )
        try:
            # Every rank's connections are made before any runs the task: a rank whose task
            # failed at once used to exit while a peer was still connecting, whose
            # init_process_group then raised "Gloo connectFullMesh failed ... Connection closed
            # by peer" in place of the task's error (seen once in CI, 2026-12-07).
            dist.barrier()
            outcome: tuple[bool, Any] = (True, task(rank, world_size))
        finally:
            dist.destroy_process_group()
    except Exception as error:  # noqa: BLE001 - handed to the launcher, which re-raises it
        outcome = (False, error)
    try:
        data = pickle.dumps(outcome)
        pickle.loads(
            data
        )  # some errors pickle but cannot be rebuilt (required arguments)
    except Exception as error:  # noqa: BLE001 - an unpicklable result or error
        text = (
            f"{type(outcome[1]).__name__}: {outcome[1]}"
            if not outcome[0]
            else str(error)
        )
        data = pickle.dumps((False, RuntimeError(f"rank {rank}: {text}")))
    partial = folder / f"result-{rank}.tmp"
    partial.write_bytes(data)
    partial.rename(folder / f"result-{rank}.pkl")  # complete, or absent
