"""The colour, dash and marker of each algorithm in the report's charts and the PNG plots.

The eleven built-in algorithms have fixed styles, in the registry's order: Paul Tol's
"muted" qualitative palette (nine colours told apart under the common colour
blindnesses) plus grey and black, which differ from them in lightness alone. The rigid
and elastic variants of one policy share a hue family (cyan/indigo, sand/olive,
rose/wine) and differ in dash; every built-in has its own marker (the PNGs draw them).
Other algorithms take the extra colours (Okabe-Ito's orange, blue and vermillion) and then
cycle, in the order they are given, with dashes and markers cycling too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from voda.core.allocation.registry import BUILTIN_NAMES

SOLID: tuple[int, ...] = ()
DASHED = (6, 3)
DOTTED = (2, 2)
DASH_DOT = (8, 3, 2, 3)


@dataclass(frozen=True)
class Style:
    color: str  # "#rrggbb"
    dash: tuple[int, ...]  # on/off lengths in pixels (points for matplotlib); () solid
    marker: str  # a matplotlib marker


BUILTIN_STYLES: dict[str, Style] = {
    "FIFO": Style("#88CCEE", SOLID, "o"),  # cyan
    "ElasticFIFO": Style("#332288", DASHED, "s"),  # indigo
    "SRJF": Style("#DDCC77", SOLID, "^"),  # sand
    "ElasticSRJF": Style("#999933", DASHED, "v"),  # olive
    "Tiresias": Style("#CC6677", SOLID, "D"),  # rose
    "ElasticTiresias": Style("#882255", DASHED, "d"),  # wine
    "FfDLOptimizer": Style("#44AA99", DOTTED, "P"),  # teal
    "AFS-L": Style("#117733", DASH_DOT, "X"),  # green
    "Optimus": Style("#AA4499", DOTTED, "*"),  # purple
    "Pollux": Style("#777777", DASH_DOT, "h"),  # grey
    "Voda": Style("#000000", SOLID, "p"),  # black
}
EXTRA_COLORS = ("#E69F00", "#0072B2", "#D55E00")
PALETTE: tuple[str, ...] = (*(BUILTIN_STYLES[n].color for n in BUILTIN_NAMES), *EXTRA_COLORS)
DASHES = (SOLID, DASHED, DOTTED, DASH_DOT)
MARKERS = ("o", "s", "^", "v", "D", "d", "P", "X", "*", "h", "p", "<", ">", "H", "8")


def styles(algorithms: Sequence[str]) -> dict[str, Style]:
    """The style of each algorithm: a built-in's own, the others' in turn."""
    out: dict[str, Style] = {}
    k = 0
    for name in algorithms:
        if name in out:
            continue
        if name in BUILTIN_STYLES:
            out[name] = BUILTIN_STYLES[name]
            continue
        i = len(BUILTIN_NAMES) + k
        out[name] = Style(PALETTE[i % len(PALETTE)], DASHES[k % len(DASHES)],
                          MARKERS[i % len(MARKERS)])
        k += 1
    return out
