"""Loaded with ``-p audit_plugin`` into a hostile run: logs every file the process opens and every
process it starts, through Python's audit hooks, to $NPU_PRECISION_AUDIT_LOG."""

import os
import sys

_LOG = os.environ["NPU_PRECISION_AUDIT_LOG"]
_EVENTS = {"open", "os.system", "subprocess.Popen", "os.exec", "os.posix_spawn", "os.spawn", "os.fork"}
_log = open(_LOG, "a", encoding="utf-8", buffering=1)


def _hook(event, args):
    if event not in _EVENTS:
        return
    if event == "open":
        path = args[0]
        if isinstance(path, int) or path is None:
            return
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        _log.write(f"open\t{os.path.abspath(str(path))}\n")
    else:  # subprocess.Popen gives (executable, args, ...); os.system (command,)
        _log.write(f"{event}\t{os.fsdecode(args[0]) if args and isinstance(args[0], (str, bytes)) else args}\n")


sys.addaudithook(_hook)
