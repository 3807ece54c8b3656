"""The --npu-precision paths of a run: checked once at configure time, on every process (the xdist
controller included, so that a bad path is one usage error before any worker starts), and kept for
the collection of the processes that run cases. Paths only: no torch."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ..dump import DumpSource, find_dumps, holds_tensor_files, is_dump_part

_DUMPS = pytest.StashKey["list[tuple[str, list[DumpSource]]]"]()


def check_dumps(config: pytest.Config) -> bool:
    """Find the dumps under each path and keep them; False when the run names no dump."""
    dumps = config.getoption("npu_precision")
    if not dumps:
        return False
    dumps = list(dict.fromkeys(dumps))  # a path given twice is run once
    config.stash[_DUMPS] = _found_dumps(dumps)
    _refuse_dump_configuration(config, dumps)
    if config.getoption("npu_precision_device") != "dumped" and os.path.isdir(config.getoption("npu_precision_baseline")):
        _refuse_statistics_beside_a_dump(config.stash[_DUMPS])
    return True


def found_dumps(config: pytest.Config) -> list[tuple[str, list[DumpSource]]]:
    """Each --npu-precision path with the dumps under it, as check_dumps found them (none if it did not run)."""
    return config.stash.get(_DUMPS, [])


def _refuse_dump_configuration(config: pytest.Config, dumps: list[str]) -> None:
    """pytest looks for its ini file from every word it cannot place, ours included, so a pytest.ini or
    tox.ini inside a dump could configure the run. Refuse it; the one-word spelling avoids it."""
    inipath = config.inipath
    for dump in dumps:
        root = Path(dump).resolve()
        if inipath is not None and (inipath.resolve() == root or root in inipath.resolve().parents):
            raise pytest.UsageError(f"pytest took its configuration from {inipath}, inside the dump {dump!r}: a dump "
                                    f"must not configure the run. Write the option as one word, "
                                    f"--npu-precision={dump}, or give your own with -c")


def _refuse_statistics_beside_a_dump(found: list[tuple[str, list[DumpSource]]]) -> None:
    """A device that replays a statistics dump runs it on inputs drawn from its statistics, whose errors are no
    measure of the calls the baseline dump recorded; two dumps compared offline pair by their statistics."""
    empty = _without_tensors(found)
    if empty:
        raise pytest.UsageError(
            f"--npu-precision-baseline names a dump, to be compared with a dump of the same calls, but "
            f"{_named(empty)} recorded no tensor files (a statistics dump): replayed on a device, its calls run on "
            f"made-up inputs, not on what they ran on. Compare the two dumps offline with --npu-precision-device "
            f"dumped (statistics pair by statistics), or dump with task 'tensor' and data_mode 'all'")


def _without_tensors(found: list[tuple[str, list[DumpSource]]]) -> list[DumpSource]:
    return [source for _, sources in found for source in sources
            if not holds_tensor_files(source.path)]


def _named(sources: list[DumpSource]) -> str:
    named = ", ".join(str(source.path) for source in sources[:3])
    return named + (f" and {len(sources) - 3} more" if len(sources) > 3 else "")


def _found_dumps(dumps: list[str]) -> list[tuple[str, list[DumpSource]]]:
    """Each --npu-precision path with the dumps under it; a path without one, or ids that collide, is a usage error."""
    found, owner = [], {}
    for dump in dumps:
        try:
            sources = find_dumps(dump)
        except FileNotFoundError:
            raise pytest.UsageError(f"--npu-precision {dump!r} does not exist: give a dump.json or a dump folder") from None
        if not sources:
            raise pytest.UsageError(f"--npu-precision {dump!r} holds no dump.json: give a dump.json, or a rank, step "
                                    f"or dump root folder written by msprobe")
        for source in sources:
            other = owner.setdefault(source.label, dump)
            if other != dump:
                raise pytest.UsageError(f"--npu-precision {other!r} and {dump!r} both hold a dump labelled "
                                        f"{source.label!r}, so their case ids would collide: give their common "
                                        f"parent folder once instead")
        found.append((dump, sources))
    return found


def keep_cache_out_of_dumps(config: pytest.Config) -> None:
    """Where pytest's cache would land inside a dump (the dump became the rootdir, or the run started
    in it), put it beside the dump instead: a dump is the user's data, and holds nothing of ours.

    Runs before the cache provider makes its cache, which reads the cache_dir setting once.
    """
    dumps = [Path(d).resolve() for d in config.known_args_namespace.npu_precision]
    if not config.pluginmanager.has_plugin("cacheprovider"):
        return
    cache = Path(config.rootpath, config.getini("cache_dir")).resolve()
    place = cache.parent
    while place != place.parent and (is_dump_part(place) or any(d == place or d in place.parents for d in dumps)):
        place = place.parent
    if place != cache.parent:
        # getini's cache is the one place pytest reads cache_dir from; there is no public setter.
        config._inicache["cache_dir"] = str(place / cache.name)
