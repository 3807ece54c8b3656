"""dump.json read as spans: cases keep each entry's place in the file, not the entry, and read it back
when they run. The scan must agree with json.load on every file, good or broken."""

import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_npuprecision.checks.case_run import CaseInputError, CaseSkipped, Settings, run_case
from pytest_npuprecision.dump import dump_cases as dump_module
from pytest_npuprecision.dump import entries as dump_entries
from pytest_npuprecision.dump.dump_cases import SkipReason, load_dump
from pytest_npuprecision.dump import descriptors
from pytest_npuprecision.dump.entries import EntryUnreadable, SpanEntry, SpanReader


def tensor(**overrides):
    desc = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [4, 8], "Max": 1.0, "Min": -1.0,
            "Mean": 0.0, "Norm": 5.0, "requires_grad": True}
    return {**desc, **overrides}


GELU = {"input_args": [tensor()], "input_kwargs": {}, "output": [tensor()]}
GELU_BACKWARD = {"input": [tensor()], "output": [tensor()]}


def write(tmp_path, text: str | bytes):
    path = tmp_path / "step0" / "rank0" / "dump.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def document(data, **json_options) -> str:
    return json.dumps({"task": "statistics", "level": "L1", "framework": "pytorch", "data": data}, **json_options)


def summary(dump):
    """What a case holds, in a form where nan equals nan."""
    return (dump.error, dump.task, [(c.key, c.case_id, c.order, json.dumps(c.forward), json.dumps(c.backward),
                                     c.known_skip, c.overflow_recorded) for c in dump.cases])


def read_whole(monkeypatch, path):
    """load_dump as it was: the file decoded whole by json.loads."""
    def whole(path, summarize):
        with open(path, encoding="utf-8") as handle:
            return json.load(handle), None
    with monkeypatch.context() as patch:
        patch.setattr(dump_module, "read_dump", whole)
        return load_dump(path)


def test_cases_keep_places_not_entries(tmp_path):
    dump = load_dump(write(tmp_path, document({"Functional.gelu.0.forward": GELU,
                                               "Functional.gelu.0.backward": GELU_BACKWARD})))
    forward, backward = dump.cases
    assert isinstance(forward.forward_entry, SpanEntry) and backward.forward_entry is forward.forward_entry
    assert forward.forward == GELU and backward.backward == GELU_BACKWARD and forward.backward == GELU_BACKWARD
    assert forward.skip is None and backward.skip is None


LAYOUTS = {
    "compact": dict(separators=(",", ":")),
    "indented": dict(indent=1),
    "non-ascii": dict(indent="\t", ensure_ascii=False),
}
DATA = {
    "nan and infinity": {"Functional.gelu.0.forward": {**GELU, "output": [tensor(Max=float("inf"), Min=float("nan"))]},
                         "Functional.gelu.0.backward": {"input": [tensor(Norm=float("-inf"))], "output": [tensor()]}},
    "non-ascii text first": {"Functional.gelu.0.forward": {**GELU, "note": "dump \u540d\u5b57 \u00e9"},
                             "Functional.gelu.1.forward": GELU},
    "null, list and number entries": {"Functional.gelu.0.forward": None, "Functional.gelu.0.backward": GELU_BACKWARD,
                                      "Functional.relu.0.forward": [1, 2], "Functional.relu.0.backward": 3,
                                      "Functional.silu.0.forward": GELU, "Functional.silu.0.backward": "x"},
    "no entries": {},
    "keys msprobe never writes": {"": GELU, "a\"b\\c": GELU, "Functional.gelu.x.forward": GELU},
}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("data", DATA)
def test_the_scan_reads_what_json_reads(tmp_path, monkeypatch, layout, data):
    path = write(tmp_path, document(DATA[data], **LAYOUTS[layout]))
    scanned = load_dump(path)
    assert all(isinstance(case.forward_entry, (SpanEntry, type(None))) for case in scanned.cases)
    assert summary(scanned) == summary(read_whole(monkeypatch, path))


# Odd files json reads (a key given twice keeps its first place and its last value) and broken ones.
ODD_AND_BROKEN = [
    '{"data": {"Functional.gelu.0.forward": {"a": 1}, "Functional.relu.0.forward": {}, '
    '"Functional.gelu.0.forward": {"b": 2}}}',
    "", "   ", "{", "[]", "null", '{"data": []}', '{"data": {}} extra', '{"data": {},}', '{"data": {"a": 1,}}',
    '{"data" {}}', '{data: {}}', '{"data": {"a" 1}}', '{"data": {"a": 1 "b": 2}}', '{"data": {1: 2}}',
    '{"data": {"a": NaN, "b": -Infinity}}', '{"data": {"a": nan}}', '\ufeff{"data": {}}', '{"data": {}, "data": []}',
    '{"data": [], "data": {"Functional.gelu.0.forward": {}}}', '{"task": "x", "data": {"a": {"b": [1, {"c": ' * 3,
    '{"data": {"Functional.gelu.0.forward": ' + "[" * 100_000 + "]" * 100_000 + "}}",
]


@pytest.mark.parametrize("text", ODD_AND_BROKEN, ids=range(len(ODD_AND_BROKEN)))
def test_odd_and_broken_files_read_as_json_reads_them(tmp_path, monkeypatch, text):
    path = write(tmp_path, text)
    assert summary(load_dump(path)) == summary(read_whole(monkeypatch, path))


def test_every_truncation_fails_as_json_load_fails(tmp_path, monkeypatch):
    text = document({"Functional.gelu.0.forward": GELU, "Functional.gelu.0.backward": GELU_BACKWARD}, indent=1)
    for cut in range(0, len(text), 7):
        path = write(tmp_path, text[:cut])
        got = load_dump(path)
        assert got.error is not None and "is not readable JSON" in got.error
        assert summary(got) == summary(read_whole(monkeypatch, path))


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["type", "Max", "output", "x"]),
                                                                inner, max_size=3),
    max_leaves=8)
KEYS = st.sampled_from(["Functional.gelu.0.forward", "Functional.gelu.0.backward", "Torch.add.3.forward",
                        "Torch.add.3.backward", "Module.fc.Linear.forward.0", "Distributed.all_reduce.0.forward",
                        "x", "\u00e9.1.forward"])


@settings(max_examples=60, deadline=None)
@given(data=st.dictionaries(KEYS, JSON_VALUES | st.just(GELU) | st.just(GELU_BACKWARD), max_size=6),
       indent=st.sampled_from([None, 0, 2, "\r\n"]), ascii_only=st.booleans())
def test_the_scan_agrees_with_json_on_generated_dumps(tmp_path_factory, data, indent, ascii_only):
    path = write(tmp_path_factory.mktemp("dump"), document(data, indent=indent, ensure_ascii=ascii_only))
    with pytest.MonkeyPatch.context() as patch:
        assert summary(load_dump(path)) == summary(read_whole(patch, path))


def test_an_entry_past_the_size_limit_is_malformed_and_never_read_again(tmp_path, monkeypatch):
    monkeypatch.setattr(dump_module, "MAX_ENTRY_BYTES", 2000)
    huge = {**GELU, "input_args": [tensor(dtype=f"torch.float32{' ' * 2000}")]}
    path = write(tmp_path, document({"Functional.gelu.0.forward": huge, "Functional.gelu.0.backward": GELU_BACKWARD,
                                     "Functional.gelu.1.forward": GELU}))
    forward, backward, other = load_dump(path).cases
    for case in (forward, backward):
        assert case.skip is SkipReason.MALFORMED_ENTRY
        assert case.skip_message.startswith(f"{case.key}: 0 MiB of JSON in {path}, past the 0 MiB one API call")
    assert other.skip is None
    monkeypatch.setattr(dump_entries, "MAX_ENTRY_BYTES", 2000)  # the reader refuses it too: the run reads nothing
    for case in (forward, backward):
        with pytest.raises(CaseSkipped) as skipped:
            run_case(case, path.parent / "dump_tensor_data", Settings(device=torch.device("cpu")))
        assert skipped.value.reason == "malformed-entry" and str(skipped.value) == case.skip_message


def test_a_span_past_the_limit_is_refused_when_read(tmp_path, monkeypatch):
    path = write(tmp_path, document({"Functional.gelu.0.forward": GELU}))
    case = load_dump(path).cases[0]
    monkeypatch.setattr(dump_entries, "MAX_ENTRY_BYTES", 100)
    with pytest.raises(EntryUnreadable, match=r"the entry Functional.gelu.0.forward is 0 MiB of JSON, past the 0 MiB"):
        case.forward


def test_a_file_changed_after_collection_fails_its_cases_alone(tmp_path):
    path = write(tmp_path, document({"Functional.gelu.0.forward": GELU, "Functional.relu.0.forward": GELU}))
    gelu, relu = load_dump(path).cases
    path.write_text(document({"Functional.gelu.0.forward": GELU, "Functional.relu.0.forward": GELU}, indent=2))
    settings_ = Settings(device=torch.device("cpu"))
    with pytest.raises(CaseInputError) as info:
        run_case(gelu, path.parent / "dump_tensor_data", settings_)
    assert str(info.value) == (f"{path} changed after it was collected, so its entry Functional.gelu.0.forward is "
                               f"no longer where it was; run pytest again on the finished dump")


def test_an_entry_that_no_longer_decodes_names_the_file_and_the_entry(tmp_path):
    path = write(tmp_path, document({"Functional.gelu.0.forward": GELU}))
    case = load_dump(path).cases[0]
    entry = case.forward_entry
    broken = dump_entries.SpanEntry(entry.reader, entry.key, entry.start + 1, entry.end)
    with pytest.raises(EntryUnreadable, match=rf"{path}: the entry Functional.gelu.0.forward cannot be read back \("):
        broken.value


def test_a_key_given_twice_is_ambiguous_and_the_rest_runs(tmp_path):
    # Issue 40: json keeps the last copy silently; the scan counts the copies, and each duplicated key
    # (and a backward case whose forward key is duplicated) ends as an input-error; the rest runs.
    gelu, relu = json.dumps(GELU), json.dumps({**GELU, "output": [tensor()]})
    path = write(tmp_path, '{"task": "statistics", "data": {'
                           f'"Functional.gelu.0.forward": {gelu}, "Functional.relu.0.forward": {relu}, '
                           f'"Functional.gelu.0.forward": {gelu}, "Functional.gelu.0.backward": '
                           f'{json.dumps(GELU_BACKWARD)}, "Functional.gelu.0.forward": {gelu}}}}}')
    forward, other, backward = load_dump(path).cases
    assert forward.input_error == (f"{path}: the key 'Functional.gelu.0.forward' appears 3 times, so which entry "
                                   "it names is ambiguous; re-dump the model or keep one entry under each key")
    assert backward.input_error.startswith(f"{path}: the key 'Functional.gelu.0.forward', the forward entry of "
                                           "'Functional.gelu.0.backward', appears 3 times")
    assert other.input_error is None
    with pytest.raises(CaseInputError, match="appears 3 times"):
        run_case(forward, path.parent, Settings("cpu"))
    assert run_case(other, path.parent, Settings("cpu")).status.value == "pass"


def test_a_key_with_control_characters_is_shown_escaped(tmp_path):
    key = "Functional.relu\x1b[2J\x1b[31m.0.forward"
    path = write(tmp_path, document({key: GELU, "Functional.re\\lu.0.forward": GELU,
                                     "Functional.relu\u00e9.0.forward": GELU}))
    ansi, backslash, accented = load_dump(path).cases
    assert ansi.key == key and ansi.case_id == "step0/rank0::Functional.relu\\x1b[2J\\x1b[31m.0.forward"
    assert ansi.input_error == (f"{path}: the key 'Functional.relu\\x1b[2J\\x1b[31m.0.forward' holds control or "
                                "unprintable characters, which msprobe never writes; re-dump the model or correct "
                                "the key")
    # A backslash is escaped too, so no printable key shows as an escaped one; printable text stays.
    assert backslash.case_id == "step0/rank0::Functional.re\\\\lu.0.forward" and backslash.input_error is None
    assert accented.case_id == "step0/rank0::Functional.relu\u00e9.0.forward" and accented.input_error is None


def test_a_case_reads_and_decodes_its_entries_once(tmp_path, monkeypatch):
    # Its threads, its skip, its memory budget and its arguments all read the one decoding of its run.
    path = write(tmp_path, document({"Functional.gelu.0.forward": GELU, "Functional.gelu.0.backward": GELU_BACKWARD}))
    forward, backward = load_dump(path).cases
    calls = {"read": 0, "decode_call": 0, "decode_grads": 0}

    def counted(name, function):
        def count(*args, **kwargs):
            calls[name] += 1
            return function(*args, **kwargs)
        return count

    monkeypatch.setattr(SpanReader, "read", counted("read", SpanReader.read))
    for name in ("decode_call", "decode_grads"):
        monkeypatch.setattr(descriptors, name, counted(name, getattr(descriptors, name)))
    settings_ = Settings(device=torch.device("cpu"), max_case_bytes=2**30)
    assert run_case(forward, path.parent / "dump_tensor_data", settings_).status.value == "pass"
    assert calls == {"read": 1, "decode_call": 1, "decode_grads": 0}
    calls.update(read=0, decode_call=0)
    assert run_case(backward, path.parent / "dump_tensor_data", settings_).status.value == "pass"
    assert calls == {"read": 2, "decode_call": 1, "decode_grads": 1}


def test_collection_decodes_no_arguments_and_a_malformed_entry_fails_its_own_case(tmp_path, monkeypatch):
    broken = {**GELU, "input_args": [tensor(shape="4x8")]}
    path = write(tmp_path, document({"Functional.gelu.0.forward": GELU, "Functional.gelu.1.forward": broken}))
    decoded = []

    def recorded(function):
        return lambda *args, **kwargs: decoded.append(args) or function(*args, **kwargs)

    for name in ("decode_call", "decode_value"):
        monkeypatch.setattr(descriptors, name, recorded(getattr(descriptors, name)))
    good, bad = load_dump(path).cases
    assert decoded == [] and "_skip" not in vars(bad)  # its reason waits for its run
    settings_ = Settings(device=torch.device("cpu"))
    with pytest.raises(CaseSkipped) as skipped:
        run_case(bad, path.parent / "dump_tensor_data", settings_)
    assert skipped.value.reason == "malformed-entry"
    assert str(skipped.value) == ("Functional.gelu.1.forward: input_args[0] has shape '4x8', expected a list of "
                                  "non-negative ints; re-dump this API or delete the entry")
    assert run_case(good, path.parent / "dump_tensor_data", settings_).status.value == "pass"
