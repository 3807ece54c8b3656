"""The one registry of standards: which exist, the names users may write, and the order they choose
themselves in."""

from __future__ import annotations

import re

from .base import Standard, Subject

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class Standards:
    """The standards, in two orders: the order they choose themselves in (the first that applies to a
    subject wins), and the order they were registered in, which is how names are listed to users (the
    order docs/standards.md and data/thresholds.yaml present them)."""

    def __init__(self) -> None:
        self._choosing: list[Standard] = []
        self._listed: list[Standard] = []

    def register(self, standard: Standard, *, before: str | None = None) -> Standard:
        """Add ``standard``, chosen just before the standard named ``before``, or else just before the
        fallback (which must stay last: it applies to everything). Returns it, so a class may be
        registered where it is defined."""
        name = getattr(standard, "name", None)
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError(f"standard name {name!r} is not a lowercase identifier: use a name such as 'max_abs'")
        if name in self.names:
            raise ValueError(f"standard {name!r} is already registered: pick another name or "
                             f"unregister({name!r}) first")
        if before is not None:
            at = self._choosing.index(self.named(before))
        else:
            at = next((i for i, s in enumerate(self._choosing) if s.fallback), len(self._choosing))
        self._choosing.insert(at, standard)
        self._listed.append(standard)
        return standard

    def unregister(self, name: str) -> None:
        standard = self.named(name)
        self._choosing.remove(standard)
        self._listed.remove(standard)

    @property
    def names(self) -> tuple[str, ...]:
        """The names users may write, in the order they are listed."""
        return tuple(s.name for s in self._listed)

    @property
    def listed(self) -> tuple[Standard, ...]:
        """The standards in the order their names are listed."""
        return tuple(self._listed)

    @property
    def choosing(self) -> tuple[Standard, ...]:
        """The standards in the order they choose themselves: the first that applies wins."""
        return tuple(self._choosing)

    def named(self, name: str) -> Standard:
        found = self.get(name)
        if found is None:
            raise ValueError(f"standard {name!r} is unknown: use one of {', '.join(self.names)}")
        return found

    def get(self, name: str | None) -> Standard | None:
        """The standard of that name; None for None or an unknown name."""
        return next((s for s in self._listed if s.name == name), None)

    def select(self, subject: Subject, explicit: str | None = None) -> Standard:
        """The standard named ``explicit``, or else the first that applies to ``subject``."""
        if explicit is not None:
            return self.named(explicit)
        return next(s for s in self._choosing if s.applies(subject))
