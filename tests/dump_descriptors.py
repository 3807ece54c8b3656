"""msprobe descriptors written by hand, as a statistics dump records them: a tensor's, an entry of them (a
gelu call by default), and a dump.json in step0/rank0 holding such entries. Shared by tests/dump/test_dump.py
and tests/opcases/test_op_cases.py."""

import json

from pytest_npuprecision.dump.dump_cases import load_dump


def tensor(**overrides):
    desc = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [8, 32], "Max": 1.0, "Min": -1.0,
            "Mean": 0.0, "Norm": 5.0, "requires_grad": True}
    return {**desc, **overrides}


def gelu_entry(*extra_args, **kwargs):
    return {"input_args": [tensor(), *extra_args], "input_kwargs": kwargs, "output": [tensor()]}


def write_dump(tmp_path, data, task="statistics"):
    folder = tmp_path / "step0" / "rank0"
    folder.mkdir(parents=True, exist_ok=True)
    document = {"task": task, "level": "L1", "framework": "pytorch", "dump_data_dir": None, "data": data}
    (folder / "dump.json").write_text(json.dumps(document))
    return load_dump(folder / "dump.json")
