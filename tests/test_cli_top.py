"""`voda top`'s screen without a service: jobs told apart by symbol, with colour or without."""

from __future__ import annotations

import re

from rich.console import Console

from voda.cli.cluster import SYMBOLS, cluster_screen, job_symbols


def view(jobs: dict[str, int], nodes: int = 2) -> dict:
    placed = list(jobs.items())
    return {
        "gpu_types": [{"gpu_type": "default", "used": sum(jobs.values()), "total": 8 * nodes,
                       "algorithm": "ElasticFIFO"}],
        "nodes": [{"name": f"n{i}", "leaf": f"l{i}", "spine": "s", "gpu_type": "default",
                   "gpus": 8, "jobs": dict(placed[i::nodes]), "others": 1 if i == 0 else 0}
                  for i in range(nodes)],
        "jobs": {name: {"user": "alice", "workers": count} for name, count in jobs.items()}}


def screen(console: Console, shown: dict) -> str:
    with console.capture() as captured:
        console.print(cluster_screen(shown))
    return captured.get()


def test_no_color_in_a_terminal_keeps_the_symbols_and_drops_the_colours() -> None:
    shown = view({"zeta": 3, "alpha": 2})
    text = screen(Console(width=120, force_terminal=True, no_color=True), shown)
    assert not re.search(r"\x1b\[[0-9;]*(3[0-9]|4[0-9]|9[0-7]|10[0-7])[;m]", text)  # no colour
    plain = re.sub(r"\x1b\[[0-9;]*m", "", text)
    assert "legend: A zeta  B alpha  ▒ other users' jobs  · free" in plain
    rows = {line.split("│")[3].strip(): line.split("│")[5].strip()
            for line in plain.splitlines() if line.count("│") == 7 and "│ s " in line}
    assert rows == {"n0": "AAA▒····", "n1": "BB······"}


def test_colours_follow_the_symbols_in_a_colour_terminal() -> None:
    shown = view({"one": 1, "two": 1})
    text = screen(Console(width=120, force_terminal=True, color_system="truecolor"), shown)
    assert "48;2;230;159;0" in text and "48;2;86;180;233" in text  # Okabe-Ito's first two


def test_symbols_are_given_in_the_order_of_the_map_and_run_out_gracefully() -> None:
    many = {f"job-{i:03d}": 1 for i in range(70)}
    marks = job_symbols(view(many, nodes=1))
    assert [marks[f"job-{i:03d}"][0] for i in range(3)] == ["A", "B", "C"]
    assert len({marks[name][0] for name in many}) == len(SYMBOLS) + 1  # then "+"
    plain = screen(Console(width=400, no_color=True), view(many, nodes=1))
    assert f"+ {70 - len(SYMBOLS)} more jobs" in plain
