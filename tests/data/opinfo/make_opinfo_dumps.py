#!/usr/bin/env python3
"""Dump the sample inputs of PyTorch's OpInfo database with msprobe: one dump folder per dtype.

Each OpInfo of ``torch.testing._internal.common_methods_invocations.op_db`` that runs on the CPU in
the chosen dtype gives up to ``--samples`` of its sample inputs. Each sample is called once through
the public function msprobe hooks (``torch.linalg.svd``, not the object OpInfo captured at import),
so the dump names are the ones msprobe writes (``Torch.svd``), then differentiated with seeded
random cotangents, as torch's own gradient tests do (after the OpInfo's ``output_process_fn_grad``).

    /work/msvenv/bin/python make_opinfo_dumps.py --dtype float32 --out /tmp/opinfo            # every OpInfo
    /work/msvenv/bin/python make_opinfo_dumps.py --dtype float16 --ops matrix_exp logaddexp --out DIR
    /work/msvenv/bin/python make_opinfo_dumps.py --dtype float32 --slice 0:100 --out DIR     # op_db[0:100]

It needs msprobe (``mindstudio-probe``), torch's test internals and ``expecttest``: a tool to make
data, never a test dependency. msprobe's debugger is a per-process singleton, so each dtype is dumped
in child processes, into ``OUT/<dtype>/partNN/step0/rank0/dump.json`` (``OUT/<dtype>`` is replaced
whole). An op that raises while msprobe is hooked can leave msprobe recording nothing more (``sgn``
does), so the child stops there and a fresh child carries on from the next OpInfo, into the next
part. The run is seeded per OpInfo and sample, so a slice dumps the same tensors as the full run.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
import zlib
from collections import Counter
from pathlib import Path

SEED = 20261125
DTYPES = ("float32", "float16", "bfloat16")


def full_name(op) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def select(op_db, names: list[str], start: int, stop: int | None) -> list[tuple[int, object]]:
    """(index into op_db, OpInfo) of the chosen slice and names."""
    ops = list(enumerate(op_db))[start:stop]
    if names:
        wanted = set(names)
        ops = [(i, op) for i, op in ops if op.name in wanted or full_name(op) in wanted]
    return ops


BROKEN = 3  # the child's exit status when msprobe saw an op raise: resume in a fresh process


def _public_callables(torch):
    """Each public op object by identity -> (namespace, attribute): found again at call time, where
    msprobe has swapped in its hooked wrapper."""
    import torch.nn.functional as F
    table = {}
    for namespace in (torch.Tensor, torch.special, torch.fft, F, torch.linalg, torch):  # torch last: wins
        for attr in dir(namespace):
            if attr.startswith("_") and not (attr.startswith("__") and attr.endswith("__")):
                continue
            try:
                value = getattr(namespace, attr)
                table[id(value)] = (namespace, attr)
            except Exception:
                continue
    return table


def _tensors(value):
    """The tensors of an output, in order (tuples, lists and named tuples flattened)."""
    import torch
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in _tensors(item)]
    return []


def dump_dtype(dtype_name: str, out: Path, names: list[str], start: int, stop: int | None, samples: int,
               max_numel: int) -> int:
    import torch
    from msprobe.pytorch import PrecisionDebugger
    from torch.testing._internal.common_methods_invocations import op_db

    dtype = getattr(torch, dtype_name)
    config = {"task": "tensor", "dump_path": str(out), "rank": [], "step": [], "level": "L1",
              "async_dump": False, "tensor": {"scope": [], "list": [], "data_mode": ["all"]}}
    out.mkdir(parents=True, exist_ok=True)
    config_path = out / "config.json"
    config_path.write_text(json.dumps(config, indent=2) + "\n")

    public = _public_callables(torch)
    debugger = PrecisionDebugger(config_path=str(config_path))
    log, resume = [], None
    for position, op in select(op_db, names, start, stop):
        name = full_name(op)
        if dtype not in op.supported_dtypes("cpu"):
            continue
        entry = {"op": name, "samples": 0, "backward": 0, "errors": []}
        seed = SEED + zlib.crc32(f"{name}/{dtype_name}".encode())
        torch.manual_seed(seed)
        grad = op.supports_autograd and dtype.is_floating_point
        try:
            inputs = list(op.sample_inputs("cpu", dtype, requires_grad=grad))
        except Exception as exc:
            entry["errors"].append(f"sample_inputs: {type(exc).__name__}: {exc}"[:300])
            log.append(entry)
            continue
        # Prefer small samples: the dumps stay small and each case stays fast.
        inputs = [s for s in inputs if sum(t.numel() for t in _tensors([s.input, *s.args])) <= max_numel][:samples]
        found = public.get(id(op.op))
        for index, sample in enumerate(inputs):
            torch.manual_seed(seed + index)
            call = op.op if found is None else None
            try:
                debugger.start(rank_id=0)
                if call is None:
                    call = getattr(*found)  # msprobe's wrapper, installed by start()
                result = call(sample.input, *sample.args, **sample.kwargs)
                debugger.stop()
                entry["samples"] += 1
                if grad:
                    processed = sample.output_process_fn_grad(result)
                    outs = [t for t in _tensors(processed) if t.requires_grad and t.is_floating_point()]
                    if outs:
                        cotangents = [torch.randn(t.shape, dtype=torch.float32).to(t.dtype) for t in outs]
                        debugger.start(rank_id=0)
                        torch.autograd.backward(outs, cotangents, inputs=[
                            t for t in _tensors([sample.input, *sample.args, *sample.kwargs.values()])
                            if t.requires_grad] or None)
                        debugger.stop()
                        entry["backward"] += 1
            except Exception as exc:
                debugger.stop()
                entry["errors"].append(f"sample {index}: {type(exc).__name__}: {exc}"[:300])
                resume = position + 1
                break
        log.append(entry)
        if resume is not None:
            break
    debugger.step()
    (out / "opinfo_log.json").write_text(json.dumps(log, indent=1) + "\n")
    print(json.dumps({"dtype": dtype_name, "opinfos": len(log), "samples": sum(e["samples"] for e in log),
                      "backward": sum(e["backward"] for e in log),
                      "with_errors": sum(1 for e in log if e["errors"]), "resume": resume}))
    return BROKEN if resume is not None else 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=DTYPES, nargs="+", default=list(DTYPES))
    parser.add_argument("--out", type=Path, required=True, help="one folder per dtype is made (replaced) under it")
    parser.add_argument("--ops", nargs="*", default=[], help="OpInfo names (name or name.variant); default all")
    parser.add_argument("--slice", default=":", help="START:STOP into op_db, before --ops filters")
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--max-numel", type=int, default=4096, help="skip samples with more input elements")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    first, _, last = args.slice.partition(":")
    start, stop = int(first or 0), (int(last) if last else None)
    if args.child:
        return dump_dtype(args.dtype[0], args.out, args.ops, start, stop, args.samples, args.max_numel)
    status = 0
    for dtype in args.dtype:
        began, part, at, totals = time.monotonic(), 0, start, Counter()
        shutil.rmtree(args.out / dtype, ignore_errors=True)
        while True:
            out = args.out / dtype / f"part{part:02d}"
            command = [sys.executable, __file__, "--child", "--dtype", dtype, "--out", str(out),
                       "--slice", f"{at}:{'' if stop is None else stop}", "--samples", str(args.samples),
                       "--max-numel", str(args.max_numel)]
            if args.ops:
                command += ["--ops", *args.ops]
            done = subprocess.run(command, capture_output=True, text=True)
            out.mkdir(parents=True, exist_ok=True)
            # msprobe logs two INFO lines per call: keep its warnings and errors only
            kept = [line for line in (done.stdout + done.stderr).splitlines() if "[INFO]" not in line]
            (out / "msprobe.log").write_text("\n".join(kept) + "\n")
            lines = done.stdout.strip().splitlines()
            summary = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {}
            totals.update({k: v for k, v in summary.items() if k in ("opinfos", "samples", "backward", "with_errors")})
            if done.returncode != BROKEN:
                break
            part, at = part + 1, summary["resume"]
        print(f"{dtype}: {'ok' if done.returncode == 0 else f'failed ({done.returncode}): {done.stderr[-2000:]}'} "
              f"in {time.monotonic() - began:.0f} s, {part + 1} parts: {json.dumps(dict(totals))}")
        status = status or done.returncode
    return status

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
