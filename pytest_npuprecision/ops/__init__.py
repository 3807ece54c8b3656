"""Which callable an API name means: msprobe names resolved to torch functions, the allow-list that keeps a dump
from reaching anything but tensor operators, torch's namesakes, custom ops registered by users, and pure-torch
references for torch_npu's fused ops (``fused``). Imports ``precision`` and ``common``."""
