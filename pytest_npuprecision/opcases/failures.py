"""How an op case ends badly, apart from the op cases' machinery (and Hypothesis): a run that checks
only dumps still names these among the outcomes it expects."""


class OpCaseFailure(AssertionError):
    """An op case whose op is not precise enough (or raised) on some example."""


class OpCaseUsageError(Exception):
    """An op case that cannot run as written: its message names the file, the case and the field."""
