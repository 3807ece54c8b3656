"""Two dumps with checksums (msprobe's ``summary_mode: md5``, a CRC32 of each tensor's bytes): whether each
output is the same bits as its partner's, and where one differs although every input was the same bits.

An op the catalogue judges bit for bit (the binary standard: a copy, a view, a relu) must give the same bits
from the same bits; any other may round differently on another device, so its first differing output only
marks where the dumps part."""

from __future__ import annotations

from ...ops import op_record
from ...precision import Check, STANDARDS, Status
from .summaries import CallSummaries
from .verdicts import Finding


def checksum_findings(ours: CallSummaries, theirs: CallSummaries, op) -> dict[str, list[Finding]]:
    """Per output with a checksum on both sides: whether its bits match the partner's."""
    inputs = [(s, theirs.input(s.name)) for s in ours.inputs]
    if not any(s.checksum for s, _ in inputs) and not any(s.checksum for s in ours.outputs):
        return {}
    same_inputs = all(t is not None and s.checksum is not None and s.checksum == t.checksum for s, t in inputs)
    table = STANDARDS.get(op_record(op.base_name).standard)
    exact = table is not None and table.exact
    found: dict[str, list[Finding]] = {}
    for out in ours.outputs:
        other = theirs.output(out.name)
        if out.checksum is None or other is None or other.checksum is None:
            continue
        if out.checksum == other.checksum:
            found[out.name] = [Finding(out.name, Check("same_bits", 1.0, 1.0, Status.PASS, upper=False),
                                       f"{out.name} is bitwise equal to its partner's (checksum {out.checksum})")]
            continue
        if not same_inputs:
            found[out.name] = [Finding(out.name, Check("same_bits", 0.0, 0.0, Status.PASS, upper=False),
                                       f"{out.name} differs from its partner's bits, as its inputs do")]
            continue
        status = Status.ERROR if exact else Status.PASS
        why = (f"{op.base_name} is exact, so the same inputs must give the same bits" if exact else
               f"{op.base_name} may round differently on another device, so this only marks where the dumps part")
        found[out.name] = [Finding(out.name, Check("parted_bits", 1.0, 0.0, status),
                                   f"{out.name} differs from its partner's bits (checksum {out.checksum} against "
                                   f"{other.checksum}) although every input is bitwise equal: {why}")]
    return found
