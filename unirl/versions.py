"""Backend versions and version gates, by PEP 440 (``packaging``), and what a version that is not a release means.

Backends rename keys between minor versions (OpenRLHF's flat flags became dotted in 0.10.2; verl 0.9 moved the custom
reward under ``reward.``), so a mapping row may carry a gate such as ``">=0.10.2"`` or ``">=0.9,<0.10"`` and applies
only to the backend versions it names. Gates are PEP 440 specifier sets: ``0.10.0rc1`` comes before ``0.10`` (it does
not satisfy ``>=0.10``), a pre-release or dev build inside a range satisfies it (``0.11.0rc1`` fits ``<0.12``), and a
local build (``0.9.1+cu124``) is its public version.

Some versions are not release numbers at all: a git commit (``7ea279a``, slime's tested ``624b824a898a``) or a branch.
They cannot be compared, so :func:`tables_version` answers with the tested version instead, and says so; the plan
carries that sentence as a note.
"""

from __future__ import annotations

import re

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

# An abbreviated or full git commit; all-digit ones ("1234567", about 4% of 7-character ones) would parse as releases.
_COMMIT = re.compile(r"[0-9a-f]{7,40}")


def release(version: str) -> Version | None:
    """``version`` as a PEP 440 version (a leading ``v`` allowed), or None for a git commit, a branch or other text."""
    text = version.strip()
    if _COMMIT.fullmatch(text):
        return None
    try:
        return Version(text)
    except InvalidVersion:
        return None


def gate(text: str) -> SpecifierSet:
    """A gate such as ``">=0.9,<0.10"`` as a specifier set; a malformed gate is a ValueError naming it."""
    try:
        return SpecifierSet(text, prereleases=True)
    except InvalidSpecifier as exc:
        raise ValueError(f"version gate {text!r} is not a PEP 440 specifier set such as '>=0.9,<0.10' ({exc})") \
            from None


def matches(version: str, gate_text: str) -> bool:
    """Whether ``version`` satisfies ``gate_text`` (empty gate: always). A version that is not a release number
    satisfies only the empty gate: translate for :func:`tables_version` first, which never returns one where a gate
    is asked."""
    if not gate_text.strip():
        return True
    parsed = release(version)
    if parsed is None:
        raise ValueError(f"version {version!r} is not a release number and cannot be compared with {gate_text!r}; "
                         "translate for unirl.versions.tables_version(...) instead")
    return gate(gate_text).contains(Version(parsed.public))


def tables_version(version: str, tested: str) -> tuple[str, str | None]:
    """(the version whose mapping rows and schema translate for ``version``, a note when that is not ``version``).

    A release is itself; a local build (``0.9.1+cu124``) is its public version (the same code, other wheels); a
    version that is not a release number (a git commit, a branch) is unknown, and the tested version's tables apply.
    """
    parsed = release(version)
    if parsed is not None:
        public = parsed.public
        return public, f"{version} is a local build of {public}: translated as {public}" if parsed.local else None
    if version == tested:
        return tested, None  # the tables are written for this very commit
    return tested, (f"{version} is not a release number (a git commit or a branch?), so unirl cannot tell which "
                    f"release it follows: translated with the tables for the tested version {tested}")
