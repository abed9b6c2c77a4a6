"""The plain tables client commands print (voda.cli.table): kubectl's layout."""

from __future__ import annotations

import pytest

from voda.cli.table import Table


def test_columns_line_up_and_nothing_is_cut() -> None:
    table = Table("NAME", "STATUS", title="Jobs", caption="2 jobs")
    table.add_row("a-very-long-job-name-that-is-never-truncated", "Running")
    table.add_row("b", "Queued")
    lines = table.render().splitlines()
    assert lines[0] == "Jobs" and lines[-1] == "2 jobs"
    header, first, second = lines[1:4]
    assert first.startswith("a-very-long-job-name-that-is-never-truncated   Running")
    column = header.index("STATUS")
    assert first.index("Running") == second.index("Queued") == column
    assert all(line == line.rstrip() for line in lines)


def test_a_key_value_list_has_no_header() -> None:
    table = Table("", "", show_header=False)
    table.add_row("Name", "a")
    table.add_row("GPU type", "default")
    assert table.render() == "Name       a\nGPU type   default\n"


def test_a_row_of_the_wrong_width_is_refused() -> None:
    with pytest.raises(ValueError, match="a row of 1 cells in a table of 2 columns"):
        Table("A", "B").add_row("x")


def test_an_empty_table_prints_its_header() -> None:
    assert Table("NAME", "STATUS").render() == "NAME   STATUS\n"
