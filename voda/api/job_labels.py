"""Jobs as people read them: by name, not uid (voda.api.job_names).

The decision path keys jobs by uid (`NAME-YYYYMMDDhhmmss-xxxxxx`) and its sentences (the
reasons of voda.core.allocation.reasons, the activity's decisions, a switch's preview)
name jobs by uid; they stay pure. What a person reads is labelled at the edge, when it is
rendered: each uid the service knows becomes its job's name, or "name (uid)" where two
jobs of one name are said in the same text. Links and keys keep the uid.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping

# A uid: the name, then the UTC second and six hex digits (job_names.new_uid).
UID_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*-\d{14}-[0-9a-f]{6}(?![0-9A-Za-z])")


def labels(uids: Iterable[str], name_of: Mapping[str, str]) -> dict[str, str]:
    """uid -> how it is said among `uids`: its name, or "name (uid)" when another of
    `uids` has the same name. A uid the service does not know is said as it is."""
    known = {u: name_of.get(u) for u in dict.fromkeys(uids)}
    shared = Counter(n for n in known.values() if n is not None)
    return {u: u if n is None else n if shared[n] == 1 else f"{n} ({u})"
            for u, n in known.items()}


def named(text: str, name_of: Mapping[str, str]) -> str:
    """`text` with every uid of a known job said by its name (see `labels`)."""
    found = [m.group(0) for m in UID_TOKEN.finditer(text)]
    if not found:
        return text
    said = labels(found, name_of)
    return UID_TOKEN.sub(lambda m: said[m.group(0)], text)


def named_or_none(text: str | None, name_of: Mapping[str, str]) -> str | None:
    return None if text is None else named(text, name_of)
