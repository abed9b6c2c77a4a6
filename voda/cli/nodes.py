"""`voda node add | drain | uncordon | remove`: nodes of a running service, through the
REST API (administrators; emulated and local backends)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from voda.cli.client import Client, segment
from voda.cli.common import AsJson, Token, Url, print_json
from voda.cli.completion import complete_gpu_types, complete_node_names
from voda.cli.table import say

NodeName = Annotated[str, typer.Argument(help="Node name.",
                                         autocompletion=complete_node_names)]


def print_node(node: dict[str, Any], as_json: bool, what: str) -> None:
    if as_json:
        print_json(node)
    else:
        say(f"node {node['name']} {what}: {node['gpus']} {node['gpu_type']} GPUs, "
            f"leaf {node['leaf']}")


def register(app: typer.Typer) -> None:
    node_app = typer.Typer(help="Add, drain, uncordon or remove nodes of a running "
                                "service (administrators; emulated and local backends).",
                           no_args_is_help=True)

    @node_app.command("add")
    def node_add(
        name: NodeName,
        gpus: Annotated[int, typer.Option(help="GPUs (worker slots) of the node.")] = 1,
        gpu_type: Annotated[str, typer.Option(help="GPU type.",
                                              autocompletion=complete_gpu_types)] = "default",
        leaf: Annotated[str | None, typer.Option(help="Leaf switch (network domain).")] = None,
        spine: Annotated[str | None, typer.Option(help="Spine switch.")] = None,
        url: Url = None, token: Token = None, as_json: AsJson = False,
    ) -> None:
        """Add a node, or take a drained one back."""
        path = f"/v1/nodes/{segment(name, 'node name')}"
        client = Client(url, token)
        drained = [n for n in client.call("GET", "/v1/cluster")["nodes"]
                   if n["name"] == name and n["state"] == "cordoned"]
        if drained:
            node = client.call("PATCH", path, json_body={"schedulable": True})
        else:
            body = {"name": name, "gpus": gpus, "gpu_type": gpu_type, "leaf": leaf,
                    "spine": spine}
            node = client.call("POST", "/v1/nodes",
                               json_body={k: v for k, v in body.items() if v is not None})
        print_node(node, as_json, "in service")

    def set_schedulable(name: str, schedulable: bool, url: str | None, token: str | None,
                        as_json: bool) -> None:
        node = Client(url, token).call("PATCH", f"/v1/nodes/{segment(name, 'node name')}",
                                       json_body={"schedulable": schedulable})
        print_node(node, as_json, "in service" if schedulable else "drained")

    @node_app.command("drain")
    def node_drain(name: NodeName, url: Url = None, token: Token = None,
                   as_json: AsJson = False) -> None:
        """Take no more workers on a node; its jobs stop and wait for other nodes."""
        set_schedulable(name, False, url, token, as_json)

    @node_app.command("uncordon")
    def node_uncordon(name: NodeName, url: Url = None, token: Token = None,
                      as_json: AsJson = False) -> None:
        """Take a drained node back: it takes workers again."""
        set_schedulable(name, True, url, token, as_json)

    @node_app.command("remove")
    def node_remove(name: NodeName, url: Url = None, token: Token = None,
                    as_json: AsJson = False) -> None:
        """Remove a node; its jobs stop and wait for other nodes."""
        node = Client(url, token).call("DELETE", f"/v1/nodes/{segment(name, 'node name')}")
        print_node(node, as_json, "removed")

    app.add_typer(node_app, name="node")
